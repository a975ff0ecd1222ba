# ruff: noqa: F811  (pytest fixtures imported from test_reward_server)
"""The reward server against slow and large clients, on 127.0.0.1 with a tiny random PRM:
read deadlines and the connection cap, token budgets checked before tokenising, large
requests split into batches served in turn, /health while a huge body is parsed (the
process-level cases, the open-file limit and memory: test_reward_server_process). Every
attack is bounded in sockets and seconds and stops itself."""

from __future__ import annotations

import json
import random
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
from test_reward_server import (
    AUTH,
    KEY,
    PROBLEMS,
    Gate,
    LiveServer,
    as_json,
    assert_same_rewards,
    completion,
    model_dir,  # noqa: F401 (fixture)
    offline,
    scorer,  # noqa: F401 (fixture)
)

from prmkit.rewards.contract import CompletionRewards, StepReward
from prmkit.rewards.serving import ConnectionLimits, Item, ScorerBackend

STEP_TEXT = "First, compute 3 * 4 = 12.\n\nNext, 12 - 5 = 7.\n\n"


def port_of(server: LiveServer) -> int:
    return int(server.url.rsplit(":", 1)[1])


class Dribbler:
    """Sockets that each send `payload` one byte a second (all from one thread) until the
    server closes them or `seconds` pass; records when each was closed and what it got."""

    def __init__(self, socks: list[socket.socket], payload: bytes, seconds: float):
        self.socks, self.payload, self.seconds = socks, payload, seconds
        for s in socks:
            s.setblocking(False)
        self.closed_after: dict[int, float] = {}
        self.answers: dict[int, bytes] = {}
        self.start = time.monotonic()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    @classmethod
    def connect(cls, port: int, n: int, payload: bytes, seconds: float) -> Dribbler:
        return cls([socket.create_connection(("127.0.0.1", port), timeout=10)
                    for _ in range(n)], payload, seconds)

    def _closed(self, k: int) -> None:
        self.closed_after[k] = time.monotonic() - self.start

    def _run(self) -> None:
        sent = 0
        while time.monotonic() - self.start < self.seconds and \
                len(self.closed_after) < len(self.socks):
            for k, s in enumerate(self.socks):
                if k in self.closed_after:
                    continue
                try:
                    data = s.recv(4096)
                except BlockingIOError:
                    data = None
                except OSError:
                    self._closed(k)
                    continue
                if data is not None:
                    self.answers[k] = self.answers.get(k, b"") + data
                    if not data:
                        self._closed(k)
                        continue
                if sent < len(self.payload):
                    try:
                        s.send(self.payload[sent: sent + 1])
                    except OSError:
                        self._closed(k)
            sent += 1
            time.sleep(1.0)

    def close(self) -> None:
        self.thread.join(self.seconds + 5)
        for s in self.socks:
            s.close()


def health_within(server: LiveServer, seconds: float) -> float:
    """Ask /health on a new connection; its answer time (asserts 200 within `seconds`)."""
    start = time.monotonic()
    r = httpx.get(server.url + "/health", headers=AUTH, timeout=seconds)
    took = time.monotonic() - start
    assert r.status_code == 200 and r.json()["status"] == "ok"
    assert took < seconds
    return took


def test_slow_header_clients_do_not_stop_health(scorer):
    # 200 clients sending their headers a byte a second held the server for ever; past the
    # file-descriptor limit every other client was refused
    limits = ConnectionLimits(max_connections=64, header_timeout=3.0)
    request = f"GET /health HTTP/1.1\r\nHost: x\r\nX-API-Key: {KEY}\r\n\r\n".encode()
    with LiveServer(scorer, limits=limits) as server:
        slow = Dribbler.connect(port_of(server), 200, request, seconds=12)
        try:
            time.sleep(1.5)  # all 200 connected and dribbling
            for _ in range(4):  # /health and a scoring request on new connections
                health_within(server, 2.0)
                r = httpx.post(server.url + "/v1/step_rewards", headers=AUTH, timeout=10,
                               json={"prompts": PROBLEMS[:1], "completions": [completion(2)]})
                assert r.status_code == 200
                time.sleep(0.5)
        finally:
            slow.close()
        assert len(slow.closed_after) == 200  # every slow socket closed by the server ...
        assert max(slow.closed_after.values()) < 3.0 + 3  # ... by its header deadline
        timed_out = [k for k, a in slow.answers.items() if a.startswith(b"HTTP/1.1 408")]
        evicted = server.metric("prmkit_reward_connections_closed_total", reason="evicted")
        assert evicted >= 200 - 64  # over the cap: the oldest slow ones made room
        assert server.metric("prmkit_reward_connections_closed_total",
                             reason="header_timeout") == len(timed_out) > 0
        health_within(server, 2.0)


def test_slow_body_clients_are_cut_at_the_body_deadline_with_408(scorer):
    limits = ConnectionLimits(body_timeout=2.0, min_body_rate=1 << 20)
    head = (f"POST /v1/step_rewards HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
            "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n").encode()
    with LiveServer(scorer, limits=limits) as server:
        socks = [socket.create_connection(("127.0.0.1", port_of(server)), timeout=10)
                 for _ in range(20)]
        for s in socks:
            s.sendall(head + b'{"prompts"')
        slow = Dribbler(socks, b': ["What is 2 + 3?"]' * 50, seconds=10)  # a byte a second
        try:
            time.sleep(0.5)
            health_within(server, 2.0)
        finally:
            slow.close()
        assert len(slow.closed_after) == 20 and max(slow.closed_after.values()) < 2.0 + 3
        assert all(slow.answers[k].startswith(b"HTTP/1.1 408") for k in range(20))
        assert server.metric("prmkit_reward_connections_closed_total",
                             reason="body_timeout") == 20
        assert server.metric("prmkit_reward_requests_total", route="/v1/step_rewards",
                             status="408") == 20
        # a client keeping up the rate is never cut: 2 MB sent at full speed
        big = {"prompts": PROBLEMS[:1] * 8, "completions": [STEP_TEXT * 9000] * 8}
        r = httpx.post(server.url + "/v1/step_rewards", headers=AUTH, json=big, timeout=120)
        assert r.status_code == 200


def test_a_connection_past_the_cap_gets_503_when_none_is_slow(scorer):
    gate = Gate(ScorerBackend(scorer).score)
    limits = ConnectionLimits(max_connections=4)
    with LiveServer(scorer, score=gate, limits=limits) as server, \
            ThreadPoolExecutor(4) as pool:
        post = lambda k: httpx.post(server.url + "/v1/step_rewards", headers=AUTH,  # noqa: E731
                                    timeout=60, json={"prompts": PROBLEMS[:1],
                                                      "completions": [completion(k)]})
        waiting = [pool.submit(post, k + 1) for k in range(4)]  # 4 requests in flight
        running = gate.wait_batch()
        deadline = time.monotonic() + 30
        while server.engine.queue_depth[0] < 4 - running:  # the others queued behind
            assert time.monotonic() < deadline
            time.sleep(0.01)
        with socket.create_connection(("127.0.0.1", port_of(server)), timeout=10) as extra:
            answer = extra.recv(4096)
        assert answer.startswith(b"HTTP/1.1 503") and b"too many connections" in answer
        gate.release(10)
        assert [f.result(60).status_code for f in waiting] == [200] * 4
        health_within(server, 2.0)
        assert server.metric("prmkit_reward_connections_closed_total", reason="refused") == 1


def test_a_client_that_stops_reading_its_answer_is_cut(scorer):
    # the connection (and its answer's memory) was held for as long as the client wished
    many_steps = CompletionRewards([StepReward(0.5, k, k + 1) for k in range(40)], 0.5)
    score = lambda items: [many_steps] * len(items)  # noqa: E731 (a 13 MB answer, no model)
    limits = ConnectionLimits(body_timeout=1.0)
    body = json.dumps({"prompts": ["p"] * 4000, "completions": ["x"] * 4000}).encode()
    with LiveServer(scorer, score=score, limits=limits) as server:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", port_of(server)))
        sock.sendall(f"POST /v1/step_rewards HTTP/1.1\r\nHost: x\r\nX-API-Key: {KEY}\r\n"
                     f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        deadline = time.monotonic() + 30  # the answer is written, then the client is cut
        while server.metric("prmkit_reward_connections_closed_total",
                            reason="write_timeout") < 1:
            assert time.monotonic() < deadline, "a client not reading was never cut"
            time.sleep(0.2)
        health_within(server, 2.0)
        sock.settimeout(10)
        got = b""
        try:
            while chunk := sock.recv(1 << 20):
                got += chunk
        except OSError:  # reset: the server aborted the connection
            pass
        sock.close()
    assert got.startswith(b"HTTP/1.1 200") and len(got) < 13_000_000  # cut before its end


class TokenizerSpy:
    """Counts every call of the PRM's tokenizer and every solution the scorer encodes."""

    def __init__(self, monkeypatch, scorer):
        from prmkit.scoring.scorer import Scorer

        self.calls, self.encoded = 0, []
        tok_type = type(scorer.model.tokenizer)
        call, encode = tok_type.__call__, Scorer.encode

        def counting_call(tok, *a, **kw):
            self.calls += 1
            return call(tok, *a, **kw)

        def counting_encode(sc, problem, steps):
            self.encoded.append((problem, tuple(steps)))
            return encode(sc, problem, steps)

        monkeypatch.setattr(tok_type, "__call__", counting_call)
        monkeypatch.setattr(Scorer, "encode", counting_encode)


def test_request_over_token_budget_refused_before_tokenising(scorer, monkeypatch):
    # a 48 MB request was tokenised into Python lists before it was queued (RSS +4.4 GB)
    gate = Gate(ScorerBackend(scorer).score)
    texts = [f"{k}. " + STEP_TEXT * 16 for k in range(10)]  # about 780 tokens' bound each
    bounds = ScorerBackend(scorer).token_bounds([Item(PROBLEMS[0], t) for t in texts])
    assert sum(bounds) > 5000 > sum(bounds[:5]) and sum(bounds[:4]) + sum(bounds[4:9]) > 6000
    with LiveServer(scorer, score=gate, max_request_tokens=5000,
                    max_queue_tokens=6000) as server, ThreadPoolExecutor(2) as pool:
        spy = TokenizerSpy(monkeypatch, scorer)
        post = lambda c: httpx.post(server.url + "/v1/step_rewards", headers=AUTH,  # noqa: E731
                                    timeout=60, json={"prompts": PROBLEMS[:1] * len(c),
                                                      "completions": c})
        over = post(texts)
        assert over.status_code == 413 and "tokens in one request" in over.json()["error"]
        assert spy.calls == 0 and spy.encoded == []  # refused before any tokenising
        running = pool.submit(post, texts[:4])  # held by the gate
        assert gate.wait_batch() == 4
        queued = pool.submit(post, texts[4:9])
        deadline = time.monotonic() + 30
        while server.engine.queue_depth[0] < 1:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        calls = spy.calls
        full = post(texts[4:9])  # would take the queue past its budget
        assert full.status_code == 503 and int(full.headers["Retry-After"]) >= 1
        assert "tokens waiting" in full.json()["error"] and spy.calls == calls
        gate.release(100)
        assert running.result(60).status_code == queued.result(60).status_code == 200
    # each item accepted was tokenised once, when it was scored
    assert sorted(spy.encoded) == sorted({(PROBLEMS[0], tuple(split(t))) for t in texts[:9]})


def split(text: str) -> list[str]:
    from prmkit.models.formatting import split_steps

    return split_steps(text, "\n\n")


def test_token_bounds_hold_for_a_byte_level_tokenizer(scorer):
    from prmkit.models.formatting import strip_prompt

    rng = random.Random(0)
    alphabet = "abcxyz 0123456789+-*/=.,\n\t\u00e9\u4e2d\U0001F600\\{}$"
    backend = ScorerBackend(scorer)
    for _ in range(300):
        prompt = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60)))
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 400)))
        item = Item(prompt, text)
        read = scorer.encode(strip_prompt(prompt, "\n\n"), split(text)).input_ids
        assert len(read) <= backend.token_bounds([item])[0], (prompt, text)


def test_small_request_wait_behind_large_one_is_bounded(scorer):
    # a request was one batch whatever its size: a small request sent during a
    # 200-completion one waited for all of it (15.2 s)
    gate = Gate(ScorerBackend(scorer).score)
    large = [STEP_TEXT * 2 + f"So the answer is {k}." for k in range(60)]
    with LiveServer(scorer, score=gate, token_budget=1000) as server, \
            ThreadPoolExecutor(2) as pool:
        post = lambda c: httpx.post(server.url + "/v1/step_rewards", headers=AUTH,  # noqa: E731
                                    timeout=60, json={"prompts": PROBLEMS[:1] * len(c),
                                                      "completions": c})
        big = pool.submit(post, large)
        first = gate.wait_batch()  # the large request's first batch runs
        small = pool.submit(post, [completion(3)])
        deadline = time.monotonic() + 30
        while server.engine.queue_depth[0] < 2:  # the small one waits beside the large
            assert time.monotonic() < deadline
            time.sleep(0.01)
        gate.release()
        second = gate.wait_batch()  # the next batch holds the small request
        gate.release()
        answer = small.result(30)
        batches = [first, second]
        while sum(batches) < 60 + 1:  # the rest of the large request
            batches.append(gate.wait_batch())
            gate.release()
        assert answer.status_code == 200 and big.result(30).status_code == 200
    assert sum(batches) == 60 + 1 and len(batches) > 4  # the large request was split
    assert server.engine.batches_run == len(batches)
    assert_same_rewards(answer.json()["results"],
                        as_json(offline(scorer, PROBLEMS[:1], [completion(3)])))
    assert_same_rewards(big.result().json()["results"],
                        as_json(offline(scorer, PROBLEMS[:1] * 60, large)))


def test_health_answers_while_a_huge_body_is_parsed(scorer):
    # parsing a 48 MB body in one call held the interpreter: /health stalled 1.2-1.5 s
    text = STEP_TEXT * 150  # 12 KB
    body = json.dumps({"prompts": PROBLEMS[:1] * 4000,
                       "completions": [text] * 3999 + [3]}).encode()  # 48 MB, bad at the end
    with LiveServer(scorer) as server, ThreadPoolExecutor(1) as pool:
        pending = pool.submit(httpx.post, server.url + "/v1/step_rewards", headers=AUTH,
                              content=body, timeout=120)
        worst = 0.0
        while not pending.done():
            worst = max(worst, health_within(server, 2.0))
            time.sleep(0.02)
        refused = pending.result()
    assert refused.status_code in (413, 422)  # over the token budget, or the bad entry
    assert worst < 1.0
