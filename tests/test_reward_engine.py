"""The reward engine's batches without HTTP or a model: large requests split into
token-budget batches taken in turn, every result once and in its request's order; and the
body parser that lets the event loop run while a huge body is parsed."""

from __future__ import annotations

import asyncio
import json
import queue
import random
import threading
import time

import pytest

from prmkit.rewards.serving import EngineSettings, Item, RewardEngine, jsonbody
from prmkit.rewards.serving.engine import EngineError


def engine_run(jobs, budget: int, cost_s: float = 0.0, tokens=lambda item: 1,
               max_wait_ms: float = 0.0, **settings):
    """Submit `jobs` (lists of items, e.g. (request, k) or texts; a job whose first element
    is a float waits that long first) to an engine whose item costs `tokens(item)` tokens
    (default one); returns each job's results and the batches as lists of items."""
    batches: list[list] = []

    def score(items):
        batches.append([it.completion for it in items])
        time.sleep(cost_s * len(items))
        return [("scored", it.completion) for it in items]

    async def run():
        engine = RewardEngine(score, lambda items: [tokens(it.completion) for it in items],
                              EngineSettings(token_budget=budget, max_wait_ms=max_wait_ms,
                                             **settings))
        await engine.start()

        async def one(job):
            delay, items = job if isinstance(job[0], float) else (0.0, job)
            if delay:
                await asyncio.sleep(delay)
            return await engine.submit([Item("p", it) for it in items])

        out = await asyncio.gather(*(one(j) for j in jobs))
        await engine.close()
        return out

    return asyncio.run(run()), batches


def test_a_split_request_gets_each_result_once_and_in_order():
    rng = random.Random(0)
    jobs = [[(r, k) for k in range(rng.randint(1, 40))] for r in range(30)]
    timed = [(rng.uniform(0, 0.05), job) for job in jobs]
    results, batches = engine_run(timed, budget=7, cost_s=0.0005)
    for job, got in zip(jobs, results, strict=True):
        assert got == [("scored", it) for it in job]  # its own results, in its order
    scored = [it for b in batches for it in b]
    assert sorted(scored) == sorted(it for job in jobs for it in job)  # each exactly once
    assert all(len(b) <= 7 for b in batches)
    assert any(len({r for r, _ in b}) > 1 for b in batches)  # requests shared batches


def test_large_requests_take_turns_and_a_new_one_goes_first():
    started: queue.Queue = queue.Queue()
    release = threading.Semaphore(0)

    def score(items):  # each batch waits for the test's go
        started.put([it.completion for it in items])
        assert release.acquire(timeout=30)
        return [("scored", it.completion) for it in items]

    a = [("a", k) for k in range(12)]
    b = [("b", k) for k in range(12)]

    async def run():
        loop = asyncio.get_running_loop()
        engine = RewardEngine(score, lambda items: [1] * len(items),
                              EngineSettings(token_budget=4, max_wait_ms=0))
        await engine.start()
        submit = lambda job: asyncio.ensure_future(  # noqa: E731
            engine.submit([Item("p", it) for it in job]))

        async def next_batch():
            return await loop.run_in_executor(None, started.get, True, 30)

        async def queued(requests):
            while engine.queue_depth[0] < requests:
                await asyncio.sleep(0.001)

        batches = []
        pending = [submit(a)]
        batches.append(await next_batch())  # a alone
        pending.append(submit(b))
        await queued(2)
        release.release()
        batches.append(await next_batch())
        pending.append(submit([("s", 0)]))  # a small request while a and b are split
        await queued(3)
        release.release()
        batches.append(await next_batch())
        while sum(map(len, batches)) < 25:
            release.release()
            batches.append(await next_batch())
        release.release()
        out = await asyncio.gather(*pending)
        await engine.close()
        return out, batches

    results, batches = asyncio.run(run())
    assert results == [[("scored", it) for it in job] for job in (a, b, [("s", 0)])]
    assert batches[0] == a[:4]
    assert batches[1] == b[:2] + a[4:6]  # the new request first, then a fair share each
    assert batches[2] == [("s", 0), *a[6:8], b[2]]  # the small one whole, the rest shared
    assert batches[3] == a[8:]  # what is left of a fits: a request ends as soon as it can
    assert [it for batch in batches[4:] for it in batch] == b[3:]


def test_budgets_are_checked_before_an_item_is_counted_twice():
    with pytest.raises(EngineError, match="more than the queue holds"):
        EngineSettings(max_request_tokens=10, max_queue_tokens=5)
    with pytest.raises(EngineError, match="max_queue_tokens must be positive"):
        EngineSettings(max_queue_tokens=0)


def test_an_item_over_the_budget_runs_alone_and_a_request_keeps_its_order():
    # one item larger than a whole batch: alone, between the other items of its request
    texts = ["a", "bbbbbbbbbbbb", "c", "d"]
    results, batches = engine_run([texts], budget=5, tokens=len)
    assert results == [[("scored", t) for t in texts]]
    assert batches == [["a"], ["bbbbbbbbbbbb"], ["c", "d"]]


def test_engine_batches_follow_arrival_order_and_the_token_budget():
    jobs = [["aaaa"], ["bbb", "cc"], ["ddddd"], ["e"], ["ffffffffffff"]]
    results, batches = engine_run(jobs, budget=10, tokens=len, max_wait_ms=50)
    assert results == [[("scored", t) for t in job] for job in jobs]
    # 4 + 5 tokens fit in 10; 5 + 1 too; a request over the budget runs alone.
    assert batches == [["aaaa", "bbb", "cc"], ["ddddd", "e"], ["ffffffffffff"]]


def big_body(n: int, chars: int) -> bytes:
    text = ("First, compute 3 * 4 = 12.\n\nNext, 12 - 5 = 7.\n\n" * (chars // 46 + 1))[:chars]
    return json.dumps({"prompts": ["What is 2+3?"] * n, "completions": [text] * n,
                       "request_id": "r"}).encode()


def test_parsing_a_huge_body_never_holds_the_interpreter_for_long():
    # pydantic's model_validate_json (and orjson) parse a body in one call: a 48 MB body
    # held the interpreter, and so /health, for its whole parse
    body = big_body(4000, 12_000)  # 48 MB
    gaps, done = [], threading.Event()
    parsed: dict = {}

    def parse():
        parsed["value"] = jsonbody.loads([body[k: k + 65536]
                                          for k in range(0, len(body), 65536)], 4096)
        done.set()

    worker = threading.Thread(target=parse)
    start = last = time.perf_counter()
    worker.start()
    while not done.is_set():
        time.sleep(0.001)
        now = time.perf_counter()
        gaps.append(now - last)
        last = now
    took = time.perf_counter() - start
    worker.join()
    assert len(parsed["value"]["completions"]) == 4000 and parsed["value"]["request_id"] == "r"
    assert max(gaps) < took / 5, (max(gaps), took)  # never one long hold


@pytest.mark.parametrize("piece", [1, 3, 64, 1 << 20])
def test_the_body_parser_reads_what_json_reads_at_any_chunk_boundary(piece, monkeypatch):
    monkeypatch.setattr(jsonbody, "PIECE", piece)
    rng = random.Random(piece)

    def value(depth=0):
        r = rng.random()
        if depth > 3 or r < 0.3:
            return rng.choice([1, -2.5, 1.5e300, 12345678901234567890, None, True, False, "",
                               "s\n\t\"\\\u00e9\U0001F600" * rng.randint(0, 3)])
        if r < 0.65:
            return [value(depth + 1) for _ in range(rng.randint(0, 4))]
        return {f"k{j}": value(depth + 1) for j in range(rng.randint(0, 4))}

    for _ in range(150):
        v = {f"k{j}": value() for j in range(rng.randint(0, 5))}
        raw = json.dumps(v, indent=rng.choice([None, 1]), ensure_ascii=rng.random() < 0.5)
        body = raw.encode()
        cut = rng.randint(0, len(body))
        assert jsonbody.loads(body) == v
        assert jsonbody.loads([body[:cut], body[cut:]]) == v
        with pytest.raises(jsonbody.BadJSON):  # cut short, the body is not JSON
            jsonbody.loads(body[: len(body) - rng.randint(1, min(3, len(body)))])


@pytest.mark.parametrize("body,says", [
    (b'{"prompts": ["a", "b"', "expecting ',' or ']' (character 21)"),
    (b'{"prompts": ["a"], }', "expecting a property name in double quotes (character 19)"),
    (b'{"prompts": ["a\n"]}', "Invalid control character at (character 15)"),
    (b'{"prompts": ["a"]} []', "extra data after the value (character 19)"),
])
def test_the_body_parser_names_where_a_body_stops_being_json(body, says):
    with pytest.raises(jsonbody.BadJSON) as e:
        jsonbody.loads(body)
    assert str(e.value) == says


def test_a_list_longer_than_a_request_may_hold_is_refused_as_it_is_parsed():
    body = big_body(50, 10)
    with pytest.raises(jsonbody.TooManyEntries) as e:
        jsonbody.loads(body, max_entries=20)
    assert e.value.key == "prompts" and "at most 20" in str(e.value)
