"""A tiny OpenAI-compatible server for tests, with fault modes.

In a thread:  `with FakeOpenAIServer(fail_times=2) as server: server.base_url`.
As a process: `python tests/fake_openai_server.py --port P [--delay S]`.

Sample i of a request with seed s reads " seed{s+i} w1 .. wk" (k = (s+i) % 5), one
"token" per word, like vLLM gives sample i the seed s + i; max_tokens cuts words (finish
"length"), a stop string cuts the text before it. Faults count POSTs per prompt: the
first `fail_times` answer `fail_status`, the first `stall_times` stall `stall_seconds`,
the first `close_times` close the connection without an answer.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def sample_text(seed: int | None, index: int) -> str:
    s = index if seed is None else seed + index
    return " " + " ".join([f"seed{s}"] + [f"w{j}" for j in range(1, s % 5 + 1)])


def complete(body: dict, n: int) -> tuple[list[dict], int]:
    """Choices (text, finish_reason) for `body` and the generated token count."""
    choices, tokens = [], 0
    for i in range(n):
        words = sample_text(body.get("seed"), i).split(" ")[1:]
        finish = "length" if len(words) > body.get("max_tokens", 16) else "stop"
        words = words[: body.get("max_tokens", 16)]
        text = " " + " ".join(words)
        for stop in body.get("stop") or ():
            if stop in text:
                text, finish = text[: text.index(stop)], "stop"
                words = text.split()
        tokens += len(words)
        choices.append({"index": i, "text": text, "finish_reason": finish})
    return choices, tokens


class FakeOpenAIServer:
    def __init__(self, model: str = "fake-model", port: int = 0, *, fail_times: int = 0,
                 fail_status: int = 500, fail_headers: dict | None = None, stall_times: int = 0,
                 stall_seconds: float = 2.0, close_times: int = 0, delay=None,
                 reject_n: bool = False, max_choices: int | None = None,
                 reject_prompts_with: str | None = None):
        self.model = model
        self.fail_times, self.fail_status, self.fail_headers = fail_times, fail_status, fail_headers or {}
        self.stall_times, self.stall_seconds = stall_times, stall_seconds
        self.close_times, self.delay = close_times, delay  # delay: prompt -> seconds
        self.reject_n, self.max_choices = reject_n, max_choices
        self.reject_prompts_with = reject_prompts_with
        self.posts: Counter[str] = Counter()  # POSTs per prompt
        self.bodies: list[dict] = []
        self.headers: list[dict] = []
        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), _handler(self))
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self):
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()

    def answer(self, path: str, body: dict) -> tuple[int, dict, dict] | str:
        """(status, headers, JSON body), "close" or "stall"."""
        chat = path.endswith("/chat/completions")
        prompt = body["messages"][-1]["content"] if chat else body.get("prompt", "")
        with self.lock:
            self.posts[prompt] += 1
            attempt = self.posts[prompt]
            self.bodies.append(body)
        if attempt <= self.close_times:
            return "close"
        if attempt <= self.stall_times:
            return "stall"
        if attempt <= self.fail_times:
            return self.fail_status, self.fail_headers, _error(f"failure {attempt}")
        if self.delay is not None:
            time.sleep(self.delay(prompt))
        if self.reject_prompts_with and self.reject_prompts_with in prompt:
            return 400, {}, _error(f"prompt {prompt!r} is not allowed")
        n = body.get("n", 1)
        if self.reject_n and n > 1:
            return 400, {}, _error("n must be 1")
        choices, tokens = complete(body, min(n, self.max_choices or n))
        if chat:
            for c in choices:
                c["message"] = {"role": "assistant", "content": c.pop("text")}
        usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": tokens}
        # choices reversed: clients must order them by "index"
        return 200, {}, {"object": "chat.completion" if chat else "text_completion",
                         "model": self.model, "choices": choices[::-1], "usage": usage}


def _error(message: str) -> dict:
    return {"error": {"message": message, "type": "BadRequestError"}}


def _handler(server: FakeOpenAIServer):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body go in two writes

        def log_message(self, *args):
            pass

        def send_json(self, status: int, headers: dict, body: dict):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path.rstrip("/").endswith("/models"):
                self.send_json(200, {}, {"object": "list", "data": [{"id": server.model}]})
            else:
                self.send_json(404, {}, _error("not found"))

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with server.lock:
                server.headers.append(dict(self.headers))
            result = server.answer(self.path, body)
            if result == "close":
                self.close_connection = True
                return
            if result == "stall":
                time.sleep(server.stall_seconds)
                self.close_connection = True
                return
            try:
                self.send_json(*result)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

    return Handler


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--delay", type=float, default=0.0)
    args = parser.parse_args()
    fake = FakeOpenAIServer(port=args.port, delay=lambda prompt: args.delay)
    fake.httpd.serve_forever()
