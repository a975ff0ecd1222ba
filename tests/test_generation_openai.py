"""The OpenAI-compatible backend against a fake server with faults, and a real vLLM server."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from fake_openai_server import FakeOpenAIServer, sample_text

from prmkit.errors import PrmkitError
from prmkit.generation import Prompt, SampleRequest, SamplingParams, get_sampler, retry
from prmkit.generation.openai_backend import OpenAISampler, _completions, _share_tokens

FAKE_SERVER = Path(__file__).with_name("fake_openai_server.py")
PARAMS = SamplingParams(temperature=0.7, top_p=0.9, max_tokens=16)


@pytest.fixture
def delays(monkeypatch):
    """Retry waits asked for, as (attempt, server's wait); nothing is slept."""
    asked = []

    def record(attempt, server_wait):
        asked.append((attempt, server_wait))
        return 0.0

    monkeypatch.setattr(retry, "retry_delay", record)
    return asked


def requests(count: int = 6, n: int = 2) -> list[SampleRequest]:
    return [SampleRequest(f"k{i}", Prompt(text=f"q{i}"), n=n, seed=10 * i) for i in range(count)]


def expected_texts(request: SampleRequest) -> list[str]:
    return [sample_text(request.seed, i) for i in range(request.n)]


def assert_every_sample_once(reqs, outputs):
    assert [o.key for o in outputs] == [r.key for r in reqs]
    for request, output in zip(reqs, outputs):
        assert [c.text for c in output.completions] == expected_texts(request)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sampler_for(server, **options) -> OpenAISampler:
    return OpenAISampler(server.model, base_url=server.base_url, **options)


# -- retries -----------------------------------------------------------------------------

def test_server_answering_500_twice_is_retried_and_every_sample_arrives_once(delays):
    reqs = requests()
    with FakeOpenAIServer(fail_times=2) as server, sampler_for(server, max_retries=2) as sampler:
        outputs = sampler.generate(reqs, PARAMS)
    assert_every_sample_once(reqs, outputs)
    assert all(server.posts[r.prompt.text] == 3 for r in reqs)
    assert sorted(delays) == sorted([(0, None), (1, None)] * len(reqs))


def test_429_with_retry_after_waits_what_the_server_asks(delays):
    reqs = requests(2)
    with FakeOpenAIServer(fail_times=1, fail_status=429, fail_headers={"Retry-After": "3"}) as server, \
            sampler_for(server) as sampler:
        outputs = sampler.generate(reqs, PARAMS)
    assert_every_sample_once(reqs, outputs)
    assert delays == [(0, 3.0), (0, 3.0)]


def test_answer_stalled_past_the_timeout_is_retried(delays):
    reqs = requests(3)
    with FakeOpenAIServer(stall_times=1, stall_seconds=1.5) as server, \
            sampler_for(server, timeout=0.3) as sampler:
        outputs = sampler.generate(reqs, PARAMS)
    assert_every_sample_once(reqs, outputs)
    assert all(server.posts[r.prompt.text] == 2 for r in reqs)
    assert delays == [(0, None)] * len(reqs)


def test_connection_closed_without_an_answer_is_retried(delays):
    reqs = requests(4)
    with FakeOpenAIServer(close_times=2) as server, sampler_for(server, max_retries=2) as sampler:
        outputs = sampler.generate(reqs, PARAMS)
    assert_every_sample_once(reqs, outputs)
    assert all(server.posts[r.prompt.text] == 3 for r in reqs)


def test_exhausted_retries_name_the_url_and_the_last_error(delays):
    with FakeOpenAIServer(fail_times=100, fail_status=503) as server, \
            sampler_for(server, max_retries=3) as sampler:
        with pytest.raises(PrmkitError, match=r"/v1/completions failed after 4 attempts; "
                                              r"last error: HTTP 503: failure 4"):
            sampler.generate(requests(1), PARAMS)
    assert server.posts["q0"] == 4


def test_bad_request_is_an_error_with_the_server_message_and_is_not_retried(delays):
    reqs = [SampleRequest("bad", Prompt(text="a bad prompt"), n=1, seed=0)]
    with FakeOpenAIServer(reject_prompts_with="bad") as server, sampler_for(server) as sampler:
        with pytest.raises(PrmkitError, match=r"HTTP 400: prompt 'a bad prompt' is not allowed"):
            sampler.generate(reqs, PARAMS)
    assert server.posts["a bad prompt"] == 1 and delays == []


def test_backoff_doubles_from_half_a_second_to_eight_with_up_to_a_quarter_off():
    for attempt, full in [(0, 0.5), (1, 1.0), (3, 4.0), (4, 8.0), (9, 8.0)]:
        waits = [retry.retry_delay(attempt, None) for _ in range(200)]
        assert all(0.75 * full <= w <= full for w in waits)
        assert max(waits) - min(waits) > 0.1 * full  # jittered
    assert retry.retry_delay(5, 2.5) == 2.5


def test_retry_after_reads_seconds_milliseconds_and_dates_and_is_capped():
    assert retry.retry_after(httpx.Headers({"retry-after": "7"})) == 7.0
    assert retry.retry_after(httpx.Headers({"retry-after-ms": "250"})) == 0.25
    assert retry.retry_after(httpx.Headers({"retry-after": "600"}), cap=120) == 120
    date = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 30))
    assert 25 < retry.retry_after(httpx.Headers({"retry-after": date})) <= 30
    assert retry.retry_after(httpx.Headers({"retry-after": "soon"})) is None
    assert retry.retry_after(httpx.Headers({})) is None
    assert [s for s in (400, 401, 404, 408, 409, 422, 429, 500, 503) if retry.is_retryable_status(s)] \
        == [408, 409, 429, 500, 503]


# -- order, n, requests ------------------------------------------------------------------

def test_outputs_keep_input_order_when_the_server_answers_in_reverse():
    reqs = requests(8)
    delay = {r.prompt.text: 0.03 * (len(reqs) - i) for i, r in enumerate(reqs)}
    with FakeOpenAIServer(delay=delay.get) as server, sampler_for(server, concurrency=8) as sampler:
        finished = [index for index, _ in sampler.iter_generate(reqs, PARAMS)]
        outputs = sampler.generate(reqs, PARAMS)
    assert finished != sorted(finished)  # the server did answer out of order
    assert sorted(finished) == list(range(len(reqs)))
    assert_every_sample_once(reqs, outputs)


def test_outputs_keep_input_order_under_random_delays_and_few_workers():
    import random

    rng = random.Random(0)
    reqs = requests(30, n=3)
    delay = {r.prompt.text: rng.uniform(0, 0.02) for r in reqs}
    with FakeOpenAIServer(delay=delay.get) as server, sampler_for(server, concurrency=3) as sampler:
        outputs = sampler.generate(reqs, PARAMS)
    assert_every_sample_once(reqs, outputs)
    assert all(server.posts[r.prompt.text] == 1 for r in reqs)


def test_server_refusing_n_gets_one_request_per_sample_with_seeds_seed_plus_i(caplog):
    reqs = requests(4, n=3)
    with FakeOpenAIServer(reject_n=True) as server, sampler_for(server, concurrency=1) as sampler:
        outputs = sampler.generate(reqs, PARAMS)
        assert sampler.describe()["n_per_request"] is False
    assert_every_sample_once(reqs, outputs)  # the same samples a server honouring n gives
    singles = [b for b in server.bodies if b["n"] == 1]
    assert sorted((b["prompt"], b["seed"]) for b in singles) == sorted(
        (r.prompt.text, r.seed + i) for r in reqs for i in range(r.n))
    assert len(server.bodies) == len(singles) + 1  # only the first request tried n
    assert "refused n (n must be 1)" in caplog.text


def test_server_returning_fewer_choices_than_n_gets_one_request_per_sample():
    reqs = requests(3, n=4)
    with FakeOpenAIServer(max_choices=1) as server, sampler_for(server, concurrency=1) as sampler:
        outputs = sampler.generate(reqs, PARAMS)
    assert_every_sample_once(reqs, outputs)


def test_sampling_params_seed_and_n_reach_the_server_as_sent(monkeypatch):
    monkeypatch.setenv("PRMKIT_TEST_KEY", "secret")
    params = SamplingParams(temperature=0.5, top_p=0.8, max_tokens=3, stop=("w2",))
    reqs = [SampleRequest("a", Prompt(text="q"), n=5, seed=7),
            SampleRequest("b", Prompt(text="r"), n=1, seed=None)]
    with FakeOpenAIServer() as server, \
            sampler_for(server, api_key_env="PRMKIT_TEST_KEY", extra_body={"top_k": 4}) as sampler:
        outputs = sampler.generate(reqs, params)
    bodies = sorted(server.bodies, key=lambda b: b["prompt"])
    assert bodies[0] == {"model": "fake-model", "prompt": "q", "n": 5, "seed": 7, "max_tokens": 3,
                         "temperature": 0.5, "top_p": 0.8, "stop": ["w2"], "top_k": 4}
    assert "seed" not in bodies[1]
    assert {h["Authorization"] for h in server.headers} == {"Bearer secret"}
    # seeds 7..11: words "seedS w1 .. wk" with k = S % 5, cut at 3 words or before "w2"
    assert [c.text for c in outputs[0].completions] == [
        " seed7 w1 ", " seed8 w1 ", " seed9 w1 ", " seed10", " seed11 w1"]
    assert {c.finish_reason for c in outputs[0].completions} == {"stop"}
    assert sum(c.num_tokens for c in outputs[0].completions) == 9  # usage shared out
    assert all(c.extra["num_tokens_estimated"] for c in outputs[0].completions)


def test_token_counts_give_length_choices_max_tokens_and_share_the_rest():
    assert _share_tokens(12, ["length", "stop"], 10) == [10, 2]
    assert _share_tokens(7, ["stop", "stop", "stop"], 10) == [3, 2, 2]
    assert _share_tokens(5, ["length", "stop"], 10) == [3, 2]  # inconsistent totals: even split
    assert _share_tokens(None, ["stop"], 10) == [0]


def test_token_counts_are_exact_with_one_stopped_choice():
    params = SamplingParams(max_tokens=3)
    reqs = [SampleRequest("a", Prompt(text="q"), n=3, seed=8)]  # seeds 8, 9, 10: 4, 5, 1 words
    with FakeOpenAIServer() as server, sampler_for(server) as sampler:
        (output,) = sampler.generate(reqs, params)
    assert [(c.num_tokens, c.finish_reason, c.extra) for c in output.completions] == [
        (3, "length", {}), (3, "length", {}), (1, "stop", {})]
    assert output.prompt_tokens == 1


def test_chat_messages_go_to_chat_completions_and_text_too_when_chat_is_set():
    messages = ({"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"})
    reqs = [SampleRequest("m", Prompt(messages=messages), n=2, seed=1)]
    with FakeOpenAIServer() as server:
        with sampler_for(server) as sampler:
            (output,) = sampler.generate(reqs, PARAMS)
        with sampler_for(server, chat=True) as sampler:
            sampler.generate([SampleRequest("t", Prompt(text="hello"), seed=0)], PARAMS)
        with sampler_for(server, chat=False) as sampler:
            with pytest.raises(PrmkitError, match="chat=False but a prompt is chat messages"):
                sampler.generate(reqs, PARAMS)
    assert [c.text for c in output.completions] == expected_texts(reqs[0])
    assert server.bodies[0]["messages"] == list(messages)
    assert server.bodies[1]["messages"] == [{"role": "user", "content": "hello"}]


def test_generate_works_when_called_inside_a_running_event_loop():
    reqs = requests(3)
    with FakeOpenAIServer() as server, sampler_for(server) as sampler:

        async def inside():
            return sampler.generate(reqs, PARAMS)

        outputs = asyncio.run(inside())
    assert_every_sample_once(reqs, outputs)


def test_outputs_finished_before_a_failing_request_are_yielded_first(delays):
    reqs = requests(3) + [SampleRequest("bad", Prompt(text="bad"), n=1)] + requests(2)
    with FakeOpenAIServer(reject_prompts_with="bad") as server, \
            sampler_for(server, concurrency=1) as sampler:
        got = []
        with pytest.raises(PrmkitError, match="HTTP 400"):
            for index, output in sampler.iter_generate(reqs, PARAMS, progress=True):
                got.append((index, output.key))
        assert got == [(0, "k0"), (1, "k1"), (2, "k2")]
        assert_every_sample_once(reqs[:2], sampler.generate(reqs[:2], PARAMS))  # still usable


def test_get_sampler_builds_the_openai_backend_and_ignores_other_backends_options():
    with FakeOpenAIServer(model="m") as server:
        sampler = get_sampler("openai", "m", base_url=server.base_url + "/", dtype="bfloat16")
        assert isinstance(sampler, OpenAISampler)
        assert sampler.describe() == {"backend": "openai", "model": "m",
                                      "base_url": server.base_url, "chat": None,
                                      "n_per_request": True}
        sampler.close()


# -- unreachable, wrong model, server killed mid-run -------------------------------------

def test_unreachable_server_fails_fast_with_a_clear_error(delays):
    url = f"http://127.0.0.1:{free_port()}/v1"
    with OpenAISampler("m", base_url=url) as sampler:
        with pytest.raises(PrmkitError, match=rf"no server answers at {url} .*api_server"):
            sampler.generate(requests(2), PARAMS)
    assert delays == []


def test_model_the_server_does_not_serve_is_refused_naming_the_served_models():
    with FakeOpenAIServer() as server, OpenAISampler("other", base_url=server.base_url) as sampler:
        with pytest.raises(PrmkitError, match="does not serve model 'other'; it serves 'fake-model'"):
            sampler.generate(requests(1), PARAMS)
    assert server.bodies == []


def start_fake_process(port: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, str(FAKE_SERVER), "--port", str(port),
                             "--delay", "0.05"])
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=1)
            return proc
        except httpx.TransportError:
            assert proc.poll() is None, "the fake server process exited"
            time.sleep(0.05)
    proc.kill()
    raise AssertionError("the fake server process did not answer within 20 s")


def test_server_killed_mid_run_and_restarted_loses_no_sample(monkeypatch):
    asked = []
    monkeypatch.setattr(retry, "retry_delay", lambda attempt, wait: asked.append(attempt) or 0.05)
    port = free_port()
    reqs = requests(24, n=2)
    server = start_fake_process(port)
    try:
        with OpenAISampler("fake-model", base_url=f"http://127.0.0.1:{port}/v1",
                           concurrency=4, max_retries=200) as sampler:
            results = []
            for index, output in sampler.iter_generate(reqs, PARAMS):
                results.append((index, output))
                if len(results) == 6:
                    server.kill()
                    server.wait()
                    server = start_fake_process(port)
    finally:
        server.kill()
        server.wait()
    assert asked  # requests in flight or sent while it was down were retried
    assert sorted(index for index, _ in results) == list(range(len(reqs)))
    outputs = [output for _, output in sorted(results, key=lambda r: r[0])]
    assert_every_sample_once(reqs, outputs)


def test_backends_without_their_own_iter_generate_yield_index_and_output_of_generate():
    from prmkit.generation import Completion, RequestOutput, Sampler

    class Echo(Sampler):
        def generate(self, requests, params, progress=False):
            return [RequestOutput(r.key, [Completion(r.prompt.text, 1, "stop")]) for r in requests]

    reqs = requests(3)
    assert [(i, o.key) for i, o in Echo().iter_generate(reqs, PARAMS)] == [
        (0, "k0"), (1, "k1"), (2, "k2")]


def test_vllm_null_stop_reason_is_read_as_the_end_of_sequence():
    from prmkit.search.config import SearchConfig
    from prmkit.search.core import Expand, extend

    choices = [{"index": 0, "text": "It is 5.", "finish_reason": "stop", "stop_reason": None},
               {"index": 1, "text": "First", "finish_reason": "stop", "stop_reason": "\n\n"},
               {"index": 2, "text": "No report", "finish_reason": "stop"}]
    eos, step, unknown = _completions(choices, 9, False, PARAMS)
    assert eos.extra["stop_reason"] is None and step.extra["stop_reason"] == "\n\n"
    assert "stop_reason" not in unknown.extra
    config = SearchConfig(approach="beam_search", n=4, beam_width=2)
    ends = [extend(None, c, 0, Expand(None, 1), config).end for c in (eos, step, unknown)]
    assert ends == ["eos", "", ""]  # a finished candidate leaves the beam at once


def test_a_server_serving_one_model_takes_an_alias_or_no_name():
    reqs = [SampleRequest("a", Prompt(text="q"), n=2, seed=1)]
    with FakeOpenAIServer(model="/models/cache/smollm2-135m") as server:
        for name in ("smollm2-135m", None, "/elsewhere/smollm2-135m/"):
            with OpenAISampler(name, base_url=server.base_url) as sampler:
                assert sampler.describe()["model"] == "/models/cache/smollm2-135m"
                sampler.generate(reqs, PARAMS)
        assert {b["model"] for b in server.bodies} == {"/models/cache/smollm2-135m"}
        with OpenAISampler("llama", base_url=server.base_url) as sampler, \
                pytest.raises(PrmkitError, match="does not serve model 'llama'"):
            sampler.generate(reqs, PARAMS)


def test_progress_moves_by_each_requests_samples():
    class Steps:
        steps: list = []

        def update(self, n=1):
            self.steps.append(n)

        def set_postfix_str(self, s="", refresh=True):
            pass

    bar = Steps()
    with FakeOpenAIServer() as server, sampler_for(server) as sampler:
        list(sampler.iter_generate(requests(count=3, n=2), PARAMS, progress=bar))
    assert bar.steps == [2, 2, 2]


def test_chat_continuation_is_sent_as_the_assistants_turn_to_continue():
    from prmkit.generation.prompts import PromptFormat

    fmt = PromptFormat(style="chat")
    reqs = [SampleRequest("r0", fmt.render("P?"), seed=1),
            SampleRequest("r1", fmt.render_partial("P?", ["First."]), seed=1)]
    with FakeOpenAIServer() as server, sampler_for(server) as sampler:
        sampler.generate(reqs, PARAMS)
    first, second = sorted(server.bodies, key=lambda b: len(b["messages"]))
    assert second["messages"][:-1] == first["messages"]
    assert second["messages"][-1] == {"role": "assistant", "content": "First.\n\n"}
    assert second["continue_final_message"] is True
    assert second["add_generation_prompt"] is False
    assert "continue_final_message" not in first
