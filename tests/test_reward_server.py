"""The reward server on 127.0.0.1 with real HTTP clients and a tiny random PRM: batching of
concurrent clients, OpenRLHF's protocol, overload, disconnects, auth, bad input, shutdown."""

from __future__ import annotations

import asyncio
import queue
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import uvicorn
from test_scoring import make_model

from prmkit.rewards import compute_step_rewards
from prmkit.rewards.serving import (
    ConnectionLimits,
    EngineSettings,
    Item,
    RewardEngine,
    ScorerBackend,
    create_app,
    uvicorn_config,
)
from prmkit.rewards.serving.protocol import TextRules
from prmkit.scoring import Scorer

KEY = "test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
PROBLEMS = ["What is 2x + 3 = 11?", "Compute 3 * 4 - 5.", "How many apples?"]
STEPS = ["Let x be a number.", "Then 2x + 3 = 11, so x = 4.", "First, compute 3 * 4 = 12.",
         "Next, 12 - 5 = 7.", "The answer is 4.", "# Answer\n\n7"]


def completion(k: int) -> str:
    """A completion of 1 to 4 steps, different for each k (k = 0: no step at all)."""
    if k == 0:
        return "  "
    return "\n\n".join(STEPS[(k + j) % len(STEPS)] for j in range(1 + k % 4))


def client_items(c: int, n: int = 3) -> tuple[list[str], list[str]]:
    return ([PROBLEMS[(c + j) % len(PROBLEMS)] for j in range(n)],
            [completion(3 * c + j + 1) for j in range(n)])


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("prm")
    make_model().save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def scorer(model_dir):
    return Scorer.from_pretrained(model_dir, dtype="fp32", device="cpu")


def offline(scorer, prompts, completions):
    return compute_step_rewards(scorer, prompts, completions)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Gate:
    """A score function that waits for `release()` before each batch (and reports each
    batch's size), so that a test decides when batches finish."""

    def __init__(self, score):
        self.score, self.entered, self.slots = score, queue.Queue(), threading.Semaphore(0)

    def __call__(self, items):
        self.entered.put(len(items))
        if not self.slots.acquire(timeout=30):
            raise RuntimeError("the test never released the batch")
        return self.score(items)

    def release(self, n: int = 1) -> None:
        for _ in range(n):
            self.slots.release()

    def wait_batch(self) -> int:
        return self.entered.get(timeout=30)


class LiveServer:
    """The app under uvicorn in a thread on 127.0.0.1."""

    def __init__(self, scorer, score=None, rules: TextRules | None = None, policy_tokenizer=None,
                 count=None, limits: ConnectionLimits | None = None, **settings):
        backend = ScorerBackend(scorer, policy_tokenizer=policy_tokenizer)
        settings = {"max_wait_ms": 20.0, **settings}
        self.engine = RewardEngine(score or backend.score, count or backend.token_bounds,
                                   EngineSettings(**settings))
        self.app = create_app(self.engine, api_key=KEY, rules=rules,
                              policy_tokenizer=policy_tokenizer)
        self.url = f"http://127.0.0.1:{free_port()}"
        config = uvicorn_config(self.app, "127.0.0.1", int(self.url.rsplit(":", 1)[1]), limits,
                                log_level="warning", timeout_graceful_shutdown=20)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "server did not start"
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)
        assert not self.thread.is_alive(), "server did not stop"

    def __exit__(self, *exc) -> None:
        self.stop()

    def metric(self, name: str, **labels) -> float:
        text = httpx.get(self.url + "/metrics", headers=AUTH, timeout=10).text
        want = ",".join(f'{k}="{v}"' for k, v in labels.items())
        for line in text.splitlines():
            if line.startswith(f"{name}{{{want}}} " if want else f"{name} "):
                return float(line.rsplit(" ", 1)[1])
        return 0.0


def as_json(results) -> list[dict]:
    return [{"steps": [{"probability": s.probability, "char_start": s.char_start,
                        "char_end": s.char_end, "policy_token_end": s.policy_token_end}
                       for s in r.steps], "score": r.score} for r in results]


def assert_same_rewards(got: list[dict], want: list[dict]) -> None:
    """Equal spans and nulls; probabilities equal up to float rounding of batch shapes."""
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert [(s["char_start"], s["char_end"]) for s in g["steps"]] == \
            [(s["char_start"], s["char_end"]) for s in w["steps"]]
        assert [s["probability"] for s in g["steps"]] == pytest.approx(
            [s["probability"] for s in w["steps"]], abs=1e-5)
        assert g["score"] == pytest.approx(w["score"], abs=1e-5)


def test_32_concurrent_clients_get_their_rewards_in_order_equal_to_offline_scoring(scorer):
    barrier = threading.Barrier(32)

    def client(c: int) -> tuple[int, dict]:
        prompts, completions = client_items(c)
        with httpx.Client(base_url=server.url, headers=AUTH, timeout=60) as http:
            barrier.wait(30)
            if c % 2:
                r = http.post("/v1/step_rewards", json={
                    "prompts": prompts, "completions": completions, "request_id": f"c{c}"})
            else:  # OpenRLHF: the query is prompt + response
                r = http.post("/get_reward", json={
                    "query": [p + x for p, x in zip(prompts, completions)], "prompts": prompts,
                    "labels": ["4"] * len(prompts)})
        assert r.status_code == 200, r.text
        return c, r.json()

    with LiveServer(scorer) as server, ThreadPoolExecutor(32) as pool:
        answers = dict(pool.map(client, range(32)))
        batches = server.metric("prmkit_reward_batch_requests_count")
        coalesced = server.metric("prmkit_reward_batch_requests_sum")
    assert coalesced == 32 and batches < 32  # requests from several clients shared batches
    for c, body in answers.items():
        want = as_json(offline(scorer, *client_items(c)))
        if c % 2:
            assert body["request_id"] == f"c{c}"
            assert_same_rewards(body["results"], want)
        else:
            scores = [0.0 if w["score"] is None else w["score"] for w in want]
            assert body["rewards"] == pytest.approx(scores, abs=1e-5)
            assert body["scores"] == body["rewards"]
            assert body["extra_logs"]["prm_steps"] == [len(w["steps"]) for w in want]


def test_openrlhf_response_without_steps_gets_the_null_reward_and_is_logged_as_null(scorer):
    prompts = [PROBLEMS[0], PROBLEMS[1]]
    completions = ["", completion(2)]
    with LiveServer(scorer, rules=TextRules(strip=("<|my_end|>",))) as server:
        body = httpx.post(server.url + "/get_reward", headers=AUTH, timeout=60, json={
            "query": ["<s>" + p + c + "<|my_end|></s>" for p, c in zip(prompts, completions)],
            "prompts": prompts, "labels": [None, None], "datasources": ["math", "math"]}).json()
    want = offline(scorer, prompts, completions)
    assert body["rewards"][0] == 0.0 and body["extra_logs"]["prm_null_score"] == [1.0, 0.0]
    assert body["rewards"][1] == pytest.approx(want[1].score, abs=1e-5)
    assert body["scores"] == body["rewards"] and "verifier" not in body["extra_logs"]


def test_openrlhf_prompts_in_a_chat_template_give_the_prm_the_problem_alone(scorer):
    rules = TextRules(problem_regex=r"<user>(?P<problem>.*?)</user>")
    templated = [f"<user>{p}</user><assistant>" for p in PROBLEMS[:2]]
    completions = [completion(1), completion(2)]
    with LiveServer(scorer, rules=rules) as server:
        post = lambda prompts: httpx.post(server.url + "/get_reward", headers=AUTH,  # noqa: E731
                                          timeout=60, json={
            "query": [p + c for p, c in zip(prompts, completions)], "prompts": prompts})
        body = post(templated).json()
        refused = post([templated[0], "no template"])
    want = offline(scorer, PROBLEMS[:2], completions)
    assert body["scores"] == pytest.approx([w.score for w in want], abs=1e-5)
    assert refused.status_code == 422 and refused.json()["field"] == "prompts[1]"


def test_openrlhf_rewards_mix_the_graders_verdict_at_the_servers_weight(scorer):
    prompt = PROBLEMS[1]
    text = "First, compute 3 * 4 = 12.\n\nNext, 12 - 5 = 7.\n\n# Answer\n\n7"
    with LiveServer(scorer, rules=TextRules(verifier_weight=0.5)) as server:
        body = httpx.post(server.url + "/get_reward", headers=AUTH, timeout=60, json={
            "query": [prompt + text] * 3, "prompts": [prompt] * 3,
            "labels": ["7", "8", None]}).json()
    prm = offline(scorer, [prompt], [text])[0].score
    assert body["scores"] == pytest.approx([prm] * 3, abs=1e-5)
    assert body["rewards"] == pytest.approx([prm + 0.5, prm, prm], abs=1e-5)
    assert body["extra_logs"]["verifier"] == [1.0, 0.0, 0.0]
    assert body["extra_logs"]["verifier_graded"] == [1.0, 1.0, 0.0]


def test_step_rewards_map_step_ends_onto_the_policys_own_tokens(scorer):
    from prmkit.models.backbones import train_tokenizer

    policy = train_tokenizer(STEPS * 3, vocab_size=300, split_digits=True)  # not the PRM's
    prompts, completions = client_items(4)
    ids = [policy(c, add_special_tokens=False)["input_ids"] for c in completions]
    with LiveServer(scorer, policy_tokenizer=policy) as server:
        r = httpx.post(server.url + "/v1/step_rewards", headers=AUTH, timeout=60, json={
            "prompts": prompts, "completions": completions,
            "policy_token_ids": [ids[0], None, ids[2]]})
    assert r.status_code == 200, r.text
    got = r.json()["results"]
    by_ids = compute_step_rewards(scorer, prompts, completions, policy_tokenizer=policy,
                                  policy_token_ids=ids)
    by_text = compute_step_rewards(scorer, prompts, completions, policy_tokenizer=policy)
    want = as_json([by_ids[0], by_text[1], by_ids[2]])
    assert [[s["policy_token_end"] for s in g["steps"]] for g in got] == \
        [[s["policy_token_end"] for s in w["steps"]] for w in want]
    assert all(s["policy_token_end"] is not None for g in got for s in g["steps"])
    assert_same_rewards(got, want)


def test_overload_answers_503_with_retry_after_not_a_hang(scorer):
    gate = Gate(ScorerBackend(scorer).score)
    body = {"prompts": PROBLEMS[:2], "completions": [completion(1), completion(2)]}
    with LiveServer(scorer, score=gate, max_queue_items=4) as server, \
            ThreadPoolExecutor(3) as pool:
        post = lambda: httpx.post(server.url + "/v1/step_rewards", json=body,  # noqa: E731
                                  headers=AUTH, timeout=60)
        first = pool.submit(post)
        assert gate.wait_batch() == 2  # running, held by the gate
        queued = [pool.submit(post), pool.submit(post)]  # 4 completions: the queue is full
        deadline = time.monotonic() + 30
        while server.engine.queue_depth != (2, 4):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        start = time.monotonic()
        refused = post()
        assert time.monotonic() - start < 5
        assert refused.status_code == 503 and int(refused.headers["Retry-After"]) >= 1
        gate.release(3)
        assert [f.result(60).status_code for f in [first, *queued]] == [200, 200, 200]
        assert post_after(server, body, gate).status_code == 200


def post_after(server, body, gate) -> httpx.Response:
    gate.release()
    return httpx.post(server.url + "/v1/step_rewards", json=body, headers=AUTH, timeout=60)


def raw_request(url: str, path: str, body: bytes) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {KEY}\r\n"
                 f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                 .encode() + body)
    return sock


def test_a_client_disconnecting_mid_request_does_not_poison_its_batch(scorer):
    import json

    gate = Gate(ScorerBackend(scorer).score)
    mine = client_items(5)
    gone = json.dumps({"prompts": PROBLEMS[:1], "completions": [completion(7)]}).encode()
    with LiveServer(scorer, score=gate, max_wait_ms=200) as server, \
            ThreadPoolExecutor(2) as pool:
        post = lambda prompts, completions: httpx.post(  # noqa: E731
            server.url + "/v1/step_rewards", headers=AUTH, timeout=60,
            json={"prompts": prompts, "completions": completions})
        first = pool.submit(post, *client_items(1))
        assert gate.wait_batch() == 3
        sock = raw_request(server.url, "/v1/step_rewards", gone)  # queued behind the first
        deadline = time.monotonic() + 30
        while server.engine.queue_depth[0] < 1:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        other = pool.submit(post, *mine)
        while server.engine.queue_depth[0] < 2:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        gate.release()
        assert gate.wait_batch() == 1 + 3  # the leaving client and the other share a batch
        sock.close()  # while that batch runs
        while server.metric("prmkit_reward_requests_total", route="/v1/step_rewards",
                            status="499") < 1:
            assert time.monotonic() < deadline, "the server never saw the client leave"
            time.sleep(0.05)
        gate.release(2)
        assert first.result(60).status_code == 200
        answer = other.result(60)
        assert answer.status_code == 200
        assert_same_rewards(answer.json()["results"], as_json(offline(scorer, *mine)))
        assert server.metric("prmkit_reward_cancelled_total") == 1
        assert post(*client_items(2)).status_code == 200  # and the server goes on


def test_every_route_checks_the_api_key_before_reading_a_body(scorer):
    with LiveServer(scorer) as server:
        for method, path in [("GET", "/health"), ("GET", "/metrics"),
                             ("POST", "/get_reward"), ("POST", "/v1/step_rewards")]:
            for headers in [{}, {"Authorization": "Bearer wrong"}, {"X-API-Key": "wrong"}]:
                r = httpx.request(method, server.url + path, headers=headers, timeout=10)
                assert r.status_code == 401, (path, headers)
        # A body announced as huge is never read without the key (401, not 413).
        sock = socket.create_connection(("127.0.0.1", int(server.url.rsplit(":", 1)[1])), 10)
        sock.sendall(b"POST /get_reward HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999\r\n\r\n")
        assert sock.recv(100).startswith(b"HTTP/1.1 401")
        sock.close()
        assert httpx.get(server.url + "/health", headers={"X-API-Key": KEY}).json()["status"] == "ok"
        prompts, completions = client_items(0)
        assert httpx.post(server.url + "/v1/step_rewards", headers=AUTH, timeout=60, json={
            "prompts": prompts, "completions": completions}).status_code == 200
        text = httpx.get(server.url + "/metrics", headers=AUTH).text
        for name in ["prmkit_reward_queue_requests", "prmkit_reward_batch_completions_bucket",
                     "prmkit_reward_request_seconds_bucket"]:
            assert name in text


@pytest.mark.parametrize("path,body,status,field", [
    ("/v1/step_rewards", {"prompts": ["a", "b"], "completions": ["x"]}, 422, "completions"),
    ("/v1/step_rewards", {"prompts": ["a", 3], "completions": ["x", "y"]}, 422, "prompts[1]"),
    ("/v1/step_rewards", {"prompts": ["a"], "completions": ["x"], "policy_token_ids": [[1]]},
     422, "policy_token_ids"),
    ("/v1/step_rewards", {"prompts": ["a"], "completion": ["x"]}, 422, "completions"),
    ("/get_reward", {"query": ["ab"]}, 422, "prompts"),
    ("/get_reward", {"query": ["ab"], "prompts": ["a"], "labels": [1, 2]}, 422, "labels"),
    ("/get_reward", b"{not json", 422, "body"),
    ("/get_reward", {"query": ["ab"] * 9, "prompts": ["a"] * 9}, 413, None),
])
def test_bad_input_gets_a_4xx_naming_the_field(scorer, path, body, status, field):
    with LiveServer(scorer, max_queue_items=8) as server:
        kw = {"content": body} if isinstance(body, bytes) else {"json": body}
        r = httpx.post(server.url + path, headers=AUTH, timeout=10, **kw)
    assert r.status_code == status, r.text
    if field is not None:
        assert r.json()["field"] == field


def test_graceful_shutdown_finishes_the_batch_in_flight(scorer):
    gate = Gate(ScorerBackend(scorer).score)
    mine = client_items(3)
    server = LiveServer(scorer, score=gate).__enter__()
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(httpx.post, server.url + "/v1/step_rewards", headers=AUTH,
                              timeout=60, json={"prompts": mine[0], "completions": mine[1]})
        assert gate.wait_batch() == 3
        server.server.should_exit = True  # what SIGTERM / Ctrl-C does
        time.sleep(0.3)
        with pytest.raises(httpx.TransportError):  # no new connections once stopping
            httpx.get(server.url + "/health", headers=AUTH, timeout=5)
        gate.release()
        answer = pending.result(60)
    server.stop()
    assert answer.status_code == 200
    assert_same_rewards(answer.json()["results"], as_json(offline(scorer, *mine)))


def test_serve_refuses_a_network_address_without_an_api_key(tmp_path, capsys, monkeypatch):
    from prmkit.cli import main

    monkeypatch.delenv("PRMKIT_API_KEY", raising=False)
    assert main(["serve", str(tmp_path), "--host", "0.0.0.0"]) == 2
    assert "--host 0.0.0.0 is not a loopback address" in capsys.readouterr().err
    (tmp_path / "key").write_text("\n")
    assert main(["serve", str(tmp_path), "--api-key-file", str(tmp_path / "key")]) == 2
    assert f"--api-key-file {tmp_path / 'key'} is empty" in capsys.readouterr().err
    for regex, says in [("(unclosed", "is not a regular expression"),
                        ("user: (.*)", "has no (?P<problem>...) group")]:
        assert main(["serve", str(tmp_path), "--problem-regex", regex]) == 2
        assert f"--problem-regex: {regex!r} {says}" in capsys.readouterr().err


def test_a_request_that_breaks_the_score_function_fails_alone_and_its_batch_mates_get_theirs():
    calls: list[int] = []

    def score(items):
        calls.append(len(items))
        if any(it.completion == "bad" for it in items):
            raise ValueError("cannot score 'bad'")
        return [len(it.completion) for it in items]

    async def run():
        engine = RewardEngine(score, lambda items: [1] * len(items),
                              EngineSettings(max_wait_ms=50))
        await engine.start()
        out = await asyncio.gather(engine.submit([Item("p", "ok")]),
                                   engine.submit([Item("p", "bad"), Item("p", "x")]),
                                   engine.submit([Item("p", "fine")]), return_exceptions=True)
        await engine.close()
        return out

    ok, bad, fine = asyncio.run(run())
    assert ok == [2] and fine == [4]
    assert isinstance(bad, ValueError)
    assert calls == [4, 1, 2, 1]  # the batch, then each request on its own


def test_a_trailing_separator_on_the_prompt_changes_no_reward_on_any_route(scorer):
    problem, text = "What is 2+3?", "2 + 3 = 5.\n\n# Answer\n\n5"
    prompts = [problem, problem + "\n\n", problem + " \n\n\n"]
    raw = scorer.score([(p, ["2 + 3 = 5.", "# Answer\n\n5"]) for p in prompts])
    assert raw[0] != pytest.approx(raw[1], abs=1e-4)  # the bare model reads them differently
    want = compute_step_rewards(scorer, [problem], [text])[0]
    with LiveServer(scorer) as server:
        openrlhf = httpx.post(server.url + "/get_reward", headers=AUTH, timeout=60, json={
            "query": [p + text for p in prompts], "prompts": prompts}).json()
        steps = httpx.post(server.url + "/v1/step_rewards", headers=AUTH, timeout=60, json={
            "prompts": prompts, "completions": [text] * 3}).json()
    offline_rewards = compute_step_rewards(scorer, prompts, [text] * 3)
    assert openrlhf["scores"] == pytest.approx([want.score] * 3, abs=1e-5)
    assert_same_rewards(steps["results"], as_json([want] * 3))
    assert_same_rewards(as_json(offline_rewards), as_json([want] * 3))


def test_counting_a_large_request_stalls_neither_health_nor_other_requests(scorer):
    # counting ran on the event loop: one 48 MiB /get_reward held /health for 36 s
    backend = ScorerBackend(scorer)
    entered, release = threading.Event(), threading.Event()

    def count(items):
        if len(items) > 1:  # the large request: held until the others are answered
            entered.set()
            assert release.wait(60)
        return backend.token_bounds(items)

    big = [completion(k + 1) + "\n\n" + "We add 17 and 25 to get 42. " * 40 for k in range(8)]
    with LiveServer(scorer, count=count) as server, ThreadPoolExecutor(1) as pool:
        try:
            pending = pool.submit(httpx.post, server.url + "/get_reward", headers=AUTH,
                                  timeout=60, json={"query": [PROBLEMS[0] + c for c in big],
                                                    "prompts": [PROBLEMS[0]] * 8})
            assert entered.wait(30)
            start = time.monotonic()
            health = httpx.get(server.url + "/health", headers=AUTH, timeout=10)
            small = httpx.post(server.url + "/v1/step_rewards", headers=AUTH, timeout=30,
                               json={"prompts": PROBLEMS[1:2], "completions": [completion(2)]})
            waited = time.monotonic() - start
        finally:
            release.set()
        answer = pending.result(60)
    assert health.status_code == 200 and health.json()["status"] == "ok"
    assert small.status_code == 200 and waited < 10
    assert answer.status_code == 200
    want = offline(scorer, [PROBLEMS[0]] * 8, big)
    assert answer.json()["scores"] == pytest.approx([w.score or 0.0 for w in want], abs=1e-5)


def test_a_query_missing_its_prompt_gets_one_reward_from_the_server_and_the_reward_file(scorer):
    # OpenRLHF cuts the start of a prompt over its budget: the reward file gave 0.0, the
    # server 422 (which OpenRLHF's client retries 5 times, then raises)
    from prmkit.rewards.openrlhf import openrlhf_rewards

    prompt = "Solve the problem below step by step, one step a paragraph. " * 3 + PROBLEMS[0]
    text = completion(2)
    queries = [prompt[70:] + text + "</s>",  # the prompt's end only
               "\ufffd" + prompt[71:] + text,  # its first token a broken character
               "Another problem entirely. " + text]  # none of the prompt: nothing to grade
    prompts = [prompt] * 3
    from_file = openrlhf_rewards(scorer, queries, prompts)
    with LiveServer(scorer) as server:
        r = httpx.post(server.url + "/get_reward", headers=AUTH, timeout=60,
                       json={"query": queries, "prompts": prompts})
    assert r.status_code == 200, r.text
    body, want = r.json(), offline(scorer, [prompt], [text])[0].score
    assert body["scores"] == pytest.approx([want, want, 0.0], abs=1e-5)
    assert from_file["scores"] == pytest.approx(body["scores"], abs=1e-5)
    assert body["extra_logs"].keys() == from_file["extra_logs"].keys()
    for name, values in body["extra_logs"].items():
        assert values == pytest.approx(from_file["extra_logs"][name], abs=1e-5), name
    assert body["extra_logs"]["prm_steps"] == [3.0, 3.0, 0.0]  # the response was found
    assert body["extra_logs"]["prm_prompt_missing"] == [0.0, 0.0, 1.0]


def test_bad_policy_token_ids_get_a_422_naming_the_item_before_any_scoring(scorer):
    from prmkit.models.backbones import train_tokenizer

    policy = train_tokenizer(STEPS * 3, vocab_size=300, split_digits=True)
    prompts, completions = client_items(4)
    ids = [policy(c, add_special_tokens=False)["input_ids"] for c in completions]
    backend, scored = ScorerBackend(scorer, policy_tokenizer=policy), []

    def score(items):
        scored.append(len(items))
        return backend.score(items)

    with LiveServer(scorer, score=score, policy_tokenizer=policy) as server:
        post = lambda rows: httpx.post(server.url + "/v1/step_rewards", headers=AUTH,  # noqa: E731
                                       timeout=60, json={"prompts": prompts,
                                                         "completions": completions,
                                                         "policy_token_ids": rows})
        for bad, says in [([-3, *ids[1]], "id -3 at position 0 is not a token id"),
                          ([*ids[1], 10**9], "id 1000000000 at position"),
                          (ids[0], "they decode to")]:  # another completion's ids
            r = post([ids[0], bad, ids[2]])
            assert r.status_code == 422, r.text
            assert r.json()["field"] == "policy_token_ids[1]" and says in r.json()["error"]
        assert scored == []  # refused before the forward pass
        assert post(ids).status_code == 200 and scored == [3]


def test_a_client_leaving_mid_upload_is_counted_as_499_not_an_asgi_error(scorer):
    with LiveServer(scorer) as server:
        host, port = server.url.removeprefix("http://").split(":")
        sock = socket.create_connection((host, int(port)), timeout=30)
        sock.sendall(f"POST /get_reward HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {KEY}"
                     "\r\nContent-Type: application/json\r\nContent-Length: 64\r\n\r\n"
                     '{"query": ["What is 2'.encode())  # 21 of the 64 bytes announced
        time.sleep(0.2)
        sock.close()
        deadline = time.monotonic() + 30
        while server.metric("prmkit_reward_requests_total", route="/get_reward",
                            status="499") < 1:
            assert time.monotonic() < deadline, "a client that left mid-upload was not counted"
            time.sleep(0.05)
        assert server.metric("prmkit_reward_requests_total", route="/get_reward",
                             status="500") == 0
        assert httpx.get(server.url + "/health", headers=AUTH, timeout=10).status_code == 200
