"""The reward server under large requests: /health while a huge body is parsed, a small
request's wait behind a large one, and the server's memory around a large request.

One `prmkit serve` process on 127.0.0.1 holds the tests' tiny random PRM (hidden 64, 2
layers, fp32, one torch thread). Three measurements, each on a fresh server:

- parse: a /v1/step_rewards body of `--parse-mb` MB (4,000 completions) whose last
  completion is a number (refused once the whole body is parsed, nothing scored: 422, or
  413 where the request is over the token budget); /health is asked every 20 ms
  meanwhile: its slowest answer.
- wait: a request of `--large` completions (~2.4 KB each), then 0.5 s later one of a
  single completion: the small one's latency and the large one's.
- memory: the server's resident size (from /proc) before, at its peak during, and 2 s
  after a /v1/step_rewards request of `--memory-mb` MB: 100 completions of five short
  steps and one long one, which the PRM does not read (past its max_length) but the
  server parses, counts and tokenises, as it does any large request.

    .venv/bin/python benchmarks/bench_reward_server_limits.py [--src DIR]

`--src` runs the server from another checkout's `src` (e.g. an older commit's, for a
before/after comparison). Prints JSON; writes it with `--out`.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import httpx  # noqa: E402
from scoring_common import ServeProcess  # noqa: E402

KEY = "bench-key"
HEADERS = {"Authorization": f"Bearer {KEY}"}
STEPS = ["First, compute 3 * 4 = 12.", "Next, 12 - 5 = 7.", "Let x be the number of apples."]


def build_model(folder: Path) -> None:
    from prmkit.models.backbones import tiny_random
    from prmkit.models.config import RewardModelConfig
    from prmkit.models.reward_model import StepRewardModel

    backbone, tok = tiny_random(seed=0)
    StepRewardModel.from_backbone(backbone, tok, RewardModelConfig()).save_pretrained(folder)


class Server(ServeProcess):
    def __init__(self, model: Path, src: str | None, extra: list[str]):
        env = {"OMP_NUM_THREADS": "1", **({"PYTHONPATH": src} if src else {})}
        super().__init__(model, "--dtype", "fp32", "--device", "cpu", *extra, key=KEY, env=env,
                         start_timeout=120)

    def rss_mb(self) -> float:
        pages = int(Path(f"/proc/{self.proc.pid}/statm").read_text().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20

    def post(self, body: bytes, timeout: float = 600) -> tuple[int, float]:
        start = time.monotonic()
        r = httpx.post(self.url + "/v1/step_rewards", content=body, timeout=timeout,
                       headers={**HEADERS, "Content-Type": "application/json"})
        return r.status_code, time.monotonic() - start


def body(n: int, chars: int, bad_last: bool = False) -> bytes:
    text = "\n\n".join(STEPS * (chars // 80 + 1))[:chars]
    completions: list = [text] * n
    if bad_last:
        completions[-1] = 3
    return json.dumps({"prompts": ["What is 2+3?"] * n, "completions": completions}).encode()


def long_tail(k: int, chars: int) -> str:
    head = f"Case {k}.\n\n" + "\n\n".join(STEPS * 2) + "\n\n"
    return head + ("so 12 - 5 = 7 and 3 * 4 = 12; " * (chars // 30 + 1))[:chars]


def health_while(server: Server, work) -> tuple[float, object]:
    """The slowest /health answer while `work()` runs, and what it returned."""
    worst, stop = [0.0], threading.Event()

    def poll():
        with httpx.Client(headers=HEADERS, timeout=30) as http:
            while not stop.is_set():
                start = time.monotonic()
                http.get(server.url + "/health")
                worst[0] = max(worst[0], time.monotonic() - start)
                time.sleep(0.02)

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        out = work()
    finally:
        stop.set()
        poller.join()
    return worst[0], out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", default=None)
    ap.add_argument("--parse-mb", type=float, default=48)
    ap.add_argument("--large", type=int, default=200)
    ap.add_argument("--memory-mb", type=float, default=8)
    ap.add_argument("--extra", default="", help="more `prmkit serve` options")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    extra = args.extra.split()
    out: dict = {"src": args.src or "this checkout", "cpu_count": os.cpu_count(),
                 "load_average_at_start": round(os.getloadavg()[0], 2)}
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "prm"
        build_model(model)

        server = Server(model, args.src, extra)
        try:
            big = body(4000, int(args.parse_mb * 1e6 / 4000), bad_last=True)
            worst, (status, seconds) = health_while(server, lambda: server.post(big))
            out["parse"] = {"body_mb": round(len(big) / 1e6, 1), "status": status,
                            "request_s": round(seconds, 2), "worst_health_s": round(worst, 3)}
        finally:
            server.stop()

        server = Server(model, args.src, extra)
        try:
            large, small = body(args.large, 2400), body(1, 300)
            server.post(small)  # warm up
            done: dict = {}
            worker = threading.Thread(target=lambda: done.update(large=server.post(large)))
            worker.start()
            time.sleep(0.5)
            status, small_s = server.post(small)
            worker.join()
            out["wait"] = {"large_completions": args.large, "small_status": status,
                           "small_s": round(small_s, 2), "large_s": round(done["large"][1], 2),
                           "large_status": done["large"][0]}
        finally:
            server.stop()

        server = Server(model, args.src, extra)
        try:
            server.post(json.dumps({"prompts": ["What is 2+3?"] * 4, "completions": [
                long_tail(k, 2000) for k in range(4)]}).encode())  # warm up
            time.sleep(1)
            request = json.dumps({"prompts": ["What is 2+3?"] * 100, "completions": [
                long_tail(k, int(args.memory_mb * 1e6 / 100)) for k in range(100)]}).encode()
            before, peak, stop = server.rss_mb(), [0.0], threading.Event()

            def sample():
                while not stop.is_set():
                    peak[0] = max(peak[0], server.rss_mb())
                    time.sleep(0.01)

            sampler = threading.Thread(target=sample)
            sampler.start()
            status, seconds = server.post(request)
            stop.set()
            sampler.join()
            time.sleep(2)
            out["memory"] = {"body_mb": round(len(request) / 1e6, 1), "status": status,
                             "request_s": round(seconds, 1), "rss_before_mb": round(before),
                             "rss_peak_mb": round(peak[0]), "rss_after_mb": round(server.rss_mb())}
        finally:
            server.stop()
    text = json.dumps(out, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
