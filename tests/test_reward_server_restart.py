# ruff: noqa: F811  (pytest fixtures imported from test_reward_server)
"""`prmkit serve` in a subprocess on 127.0.0.1, SIGKILLed and restarted under load: clients
that retry (connection errors, 503 with Retry-After) get every reward exactly once."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx
from test_reward_server import (
    AUTH,
    as_json,
    assert_same_rewards,
    client_items,
    model_dir,  # noqa: F401 (fixture)
    offline,
    scorer,  # noqa: F401 (fixture)
)
from test_reward_server_process import Serve

CLIENTS, REQUESTS = 8, 6


def post_with_retries(http: httpx.Client, body: dict, deadline: float, tries: Counter) -> dict:
    """The usual client rule: retry connection errors, timeouts and 503 / 5xx, waiting
    Retry-After when given, else a short backoff; give up at `deadline`."""
    wait = 0.1
    while True:
        try:
            r = http.post("/v1/step_rewards", json=body)
            if r.status_code == 200:
                return r.json()
            assert r.status_code in (503, 500, 502, 504), r.text
            tries["status"] += 1
            delay = float(r.headers.get("Retry-After", wait))
        except httpx.TransportError:
            tries["transport"] += 1
            delay = wait
        assert time.monotonic() < deadline, "no answer before the deadline"
        time.sleep(min(delay, 2.0) * random.uniform(0.5, 1.0))
        wait = min(wait * 2, 1.0)


def test_server_killed_and_restarted_under_load_gives_every_reward_exactly_once(model_dir,
                                                                                 scorer):
    server = Serve(model_dir, "--max-wait-ms", "10").start()
    answered: list[str] = []
    results: dict[str, list[dict]] = {}
    tries: Counter = Counter()
    lock = threading.Lock()
    deadline = time.monotonic() + 180

    def client(c: int) -> None:
        with httpx.Client(base_url=server.url, headers=AUTH, timeout=30) as http:
            for k in range(REQUESTS):
                prompts, completions = client_items(c * REQUESTS + k, n=2)
                body = post_with_retries(http, {"prompts": prompts, "completions": completions,
                                                "request_id": f"{c}-{k}"}, deadline, tries)
                with lock:
                    answered.append(body["request_id"])
                    results[body["request_id"]] = body["results"]

    try:
        with ThreadPoolExecutor(CLIENTS) as pool:
            futures = [pool.submit(client, c) for c in range(CLIENTS)]
            while len(answered) < CLIENTS * REQUESTS // 3:
                assert time.monotonic() < deadline and not any(f.done() for f in futures)
                time.sleep(0.01)
            server.kill()  # mid-load: requests in the queue and in the batch are lost
            killed_at = len(answered)
            server.start()
            for f in futures:
                f.result(200)
    finally:
        server.stop()
    expected = {f"{c}-{k}" for c in range(CLIENTS) for k in range(REQUESTS)}
    counts = Counter(answered)
    assert set(counts) == expected and set(counts.values()) == {1}
    assert killed_at < len(expected) and tries["transport"] > 0  # the kill hit live requests
    for rid, got in results.items():
        c, k = map(int, rid.split("-"))
        assert_same_rewards(got, as_json(offline(scorer, *client_items(c * REQUESTS + k, n=2))))
