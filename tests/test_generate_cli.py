"""`prmkit generate`: step-by-step prompts, sample files (seeds, resume, provenance), CLI."""

from __future__ import annotations

import hashlib
import json

import pytest

from prmkit.data.scored import read_scored
from prmkit.errors import DataError, PrmkitError
from prmkit.generation import (
    Completion,
    RequestOutput,
    Sampler,
    SamplingParams,
    sample_seed,
)
from prmkit.generation.files import generate_file
from prmkit.generation.prompts import DEFAULT_EXAMPLES, PromptFormat, trim_after_answer
from prmkit.models.backbones import train_tokenizer
from prmkit.models.formatting import SegmentEncoder, StepFormat, split_steps


# ---- prompts ------------------------------------------------------------------------------
@pytest.mark.parametrize("separator", ["\n\n", "\n"])
def test_fewshot_examples_are_written_as_the_prm_reads_steps(separator):
    fmt = PromptFormat(step_separator=separator)
    text = fmt.render("What is $1 + 1$?").text
    assert text.endswith("Problem: What is $1 + 1$?\n\nSolution:\n")
    for ex in DEFAULT_EXAMPLES:
        solution = separator.join([*ex.steps, f"# Answer\n\n{ex.answer}"])
        assert f"Solution:\n{solution}\n\n\nProblem:" in text
        assert split_steps(solution, separator) == [*ex.steps, f"# Answer\n\n{ex.answer}"]


def test_chat_format_has_system_examples_and_problem_turns():
    messages = PromptFormat(style="chat").render("What is $1 + 1$?").messages
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user",
                                             "assistant", "user"]
    assert messages[-1]["content"] == "What is $1 + 1$?"
    assert messages[2]["content"].endswith("\n\n# Answer\n\n5")
    assert PromptFormat(style="chat").stop_strings == ()


def test_render_partial_ends_with_the_separator_and_stops_at_the_next():
    fmt = PromptFormat()
    partial = fmt.render_partial("P?", ["First.", "Second."])
    assert partial.text == fmt.render("P?").text + "First.\n\nSecond.\n\n"
    assert fmt.render_partial("P?", []).text == fmt.render("P?").text
    assert fmt.step_stop_strings[0] == "\n\n"
    chat = PromptFormat(style="chat", examples=(), instruction="")
    partial = chat.render_partial("P?", ["First.", "Second."])
    assert partial.messages == chat.render("P?").messages
    assert partial.continuation == "First.\n\nSecond.\n\n"
    assert chat.render_partial("P?", []) == chat.render("P?")


def test_generated_completion_scores_like_the_same_steps_given_directly():
    tok = train_tokenizer(["Let x be 4. So 2x = 8.\n\n# Answer\n\n8 Problem: Solution:"],
                          vocab_size=320)
    fmt = PromptFormat()
    completion = "Let x be 4.  \n\n\n\nSo 2x = 8.\n\n# Answer\n\n8\n\nSo that was easy.\nProblem: 9"
    steps = fmt.completion_steps(completion)
    assert steps == ["Let x be 4.", "So 2x = 8.", "# Answer\n\n8"]
    enc = SegmentEncoder(tok, StepFormat())
    generated = enc.encode("What is 2x?", steps)
    direct = enc.encode("What is 2x?", ["Let x be 4.", "So 2x = 8.", "# Answer\n\n8"])
    assert generated.input_ids == direct.input_ids
    assert generated.label_positions == direct.label_positions and len(direct.label_positions) == 3


def test_trim_after_answer_keeps_the_answer_line_only():
    assert trim_after_answer("a\n\n# Answer\n\n\\frac{1}{2}\n\nProblem: x") == \
        "a\n\n# Answer\n\n\\frac{1}{2}"
    assert trim_after_answer("no heading\n\nmore") == "no heading\n\nmore"
    assert trim_after_answer("a\n\n# Answer\n\n") == "a\n\n# Answer\n\n"


def test_template_hash_changes_with_what_determines_the_prompt():
    base = PromptFormat()
    assert base.template_hash() == PromptFormat().template_hash()
    assert len(base.template_hash()) == 64
    others = [PromptFormat(step_separator="\n"), PromptFormat(style="chat"),
              PromptFormat(examples=DEFAULT_EXAMPLES[:1]), PromptFormat(instruction="Solve."),
              PromptFormat(template="Q: {problem}\nA:"), PromptFormat(stop=("###",))]
    hashes = {fmt.template_hash() for fmt in others}
    assert len(hashes) == len(others) and base.template_hash() not in hashes


def test_text_template_without_problem_placeholder_is_an_error():
    with pytest.raises(PrmkitError, match="no {problem} placeholder"):
        PromptFormat(template="Solve it.")
    assert PromptFormat(template="\\boxed{} {problem}").render("Q").text == "\\boxed{} Q"


# ---- sample files -------------------------------------------------------------------------
PROBLEMS = [
    {"problem": "What is 1 - 1?", "answer": "0", "unique_id": "test/a/1.json",
     "subject": "Algebra", "level": "Level 1"},
    {"problem": "What is 2 - 1?", "answer": "1", "unique_id": "test/a/2.json"},
    {"problem": "Name a prime.", "unique_id": "test/b/3.json"},  # no gold answer
    {"problem": "What is 4 - 2?", "answer": "2"},  # no unique_id
]


class Killed(Exception):
    pass


class FakeSampler(Sampler):
    """Completions that are a function of the request seed; raises after `fail_after` calls."""

    backend, model = "fake", "fake-model"

    def __init__(self, fail_after: int | None = None):
        self.fail_after, self.calls, self.seeds = fail_after, 0, {}

    def generate(self, requests, params, progress=False):
        if self.fail_after is not None and self.calls >= self.fail_after:
            raise Killed
        self.calls += 1
        outs = []
        for r in requests:
            assert r.n == 1 and r.prompt.text.endswith("Solution:\n")
            self.seeds[r.key] = r.seed
            text = f"Think {r.seed % 97}.\n\nSo.\n\n# Answer\n\n{r.seed % 3}\n\nProblem: x"
            outs.append(RequestOutput(r.key, [Completion(text, 7, "stop")]))
        return outs


@pytest.fixture
def problems(tmp_path):
    path = tmp_path / "problems.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in PROBLEMS))
    return path


PARAMS = SamplingParams(temperature=0.8, max_tokens=64)


def run(sampler, problems, out, **kw):
    kw = {"n": 3, "params": PARAMS, "seed": 5, "progress": False, "chunk_size": 4, **kw}
    return generate_file(sampler, problems, out, **kw)


def rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_killed_run_resumed_has_every_sample_once_as_an_uninterrupted_run(problems, tmp_path):
    whole = tmp_path / "whole.jsonl"
    report = run(FakeSampler(), problems, whole)
    assert report.samples == 12 and report.tokens == 84
    broken = tmp_path / "broken.jsonl"
    with pytest.raises(Killed):
        run(FakeSampler(fail_after=2), problems, broken)
    assert len(rows(broken)) == 8  # two chunks of 4 flushed
    with open(broken, "ab") as f:
        f.write(whole.read_bytes().splitlines(keepends=True)[8][:25])  # a crash mid-line
    sampler = FakeSampler()
    report = run(sampler, problems, broken)
    assert report.skipped == 8 and report.samples == 4
    assert broken.read_bytes() == whole.read_bytes()
    keys = [(r["unique_id"], r["sample_index"]) for r in rows(broken)]
    assert len(set(keys)) == len(keys) == 12
    assert run(FakeSampler(), problems, broken).samples == 0  # nothing left to do


class DyingMidChunk(FakeSampler):
    """Streams outputs one by one, then fails after `fail_after` outputs (a server that
    dies in the middle of a chunk)."""

    def iter_generate(self, requests, params, progress=False):
        for index, out in enumerate(FakeSampler.generate(self, requests, params)):
            if self.fail_after is not None and self.yielded >= self.fail_after:
                raise Killed
            self.yielded += 1
            yield index, out

    yielded = 0


def test_backend_dying_mid_chunk_keeps_every_finished_sample(problems, tmp_path):
    whole = tmp_path / "whole.jsonl"
    run(FakeSampler(), problems, whole)
    broken = tmp_path / "broken.jsonl"
    with pytest.raises(Killed):
        run(DyingMidChunk(fail_after=6), problems, broken, chunk_size=12)
    assert len(rows(broken)) == 6  # the 6 finished samples of the only chunk were written
    run(DyingMidChunk(), problems, broken, chunk_size=12)
    assert sorted(broken.read_bytes().splitlines()) == sorted(whole.read_bytes().splitlines())


def test_each_sample_has_its_own_seed_and_more_samples_extend_the_file(problems, tmp_path):
    out = tmp_path / "s.jsonl"
    sampler = FakeSampler()
    run(sampler, problems, out, n=2)
    key = "sha256:" + hashlib.sha256(b"What is 4 - 2?").hexdigest()[:16]
    assert sampler.seeds["test/a/1.json#1"] == sample_seed(5, "test/a/1.json", 1)
    assert sampler.seeds[f"{key}#0"] == sample_seed(5, key, 0)
    first = out.read_bytes().splitlines()
    more = FakeSampler()
    assert run(more, problems, out, n=3).samples == 4
    assert sorted(more.seeds) == sorted(f"{k}#2" for k in
                                        ["test/a/1.json", "test/a/2.json", "test/b/3.json", key])
    lines = out.read_bytes().splitlines()
    assert [line for line in lines if line in first] == first  # kept, in their order
    # the added samples take their places: problem order, then sample index
    assert [(r["unique_id"], r["sample_index"]) for r in rows(out)] == [
        (k, i) for k in ["test/a/1.json", "test/a/2.json", "test/b/3.json", key]
        for i in range(3)]


def test_sample_lines_follow_the_scored_samples_schema(problems, tmp_path):
    out = tmp_path / "s.jsonl"
    run(FakeSampler(), problems, out, n=1)
    got = rows(out)
    first = got[0]
    seed = sample_seed(5, "test/a/1.json", 0)
    assert first["steps"] == [f"Think {seed % 97}.", "So.", f"# Answer\n\n{seed % 3}"]
    assert first["answer"] == str(seed % 3) and first["ground_truth_answer"] == "0"
    assert first["is_correct"] is (seed % 3 == 0)
    assert (first["subject"], first["level"]) == ("Algebra", 1)
    assert first["id"] == "test/a/1.json#0" and first["sample_index"] == 0
    assert first["num_tokens"] == 7 and first["finish_reason"] == "stop"
    assert "subject" not in got[1] and got[2]["is_correct"] is None
    assert got[3]["unique_id"].startswith("sha256:")
    by = first["generated_by"]
    assert by["backend"] == "fake" and by["model"] == "fake-model" and by["seed"] == 5
    assert by["sampling"] == {"temperature": 0.8, "top_p": 1.0, "max_tokens": 64,
                              "stop": ["\nProblem:"]}
    assert by["prompt_format"] == "fewshot" and len(by["prompt_template_hash"]) == 64
    assert "prmkit_version" in by
    samples = list(read_scored(out))
    assert [s.is_correct for s in samples] == [r["is_correct"] for r in got]
    assert samples[0].level == 1 and samples[0].unique_id == "test/a/1.json"


def test_resume_with_other_settings_is_refused_unless_forced(problems, tmp_path):
    out = tmp_path / "s.jsonl"
    run(FakeSampler(), problems, out, n=1)
    hotter = SamplingParams(temperature=1.0, max_tokens=64)
    with pytest.raises(PrmkitError) as err:
        run(FakeSampler(), problems, out, n=2, params=hotter)
    assert str(out) in str(err.value) and "sampling" in str(err.value)
    with pytest.raises(PrmkitError, match="seed 5 -> 6"):
        run(FakeSampler(), problems, out, n=2, seed=6)
    with pytest.raises(PrmkitError, match="prompt_template_hash"):
        run(FakeSampler(), problems, out, n=2, prompt_format=PromptFormat(instruction="Go."))
    assert len(rows(out)) == 4  # nothing appended
    assert run(FakeSampler(), problems, out, n=2, params=hotter, force=True).samples == 4
    with pytest.raises(PrmkitError, match="exists"):
        run(FakeSampler(), problems, out, resume=False)
    assert run(FakeSampler(), problems, out, n=1, overwrite=True).samples == 4


def test_malformed_problems_file_names_file_and_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(PROBLEMS[0]) + "\n{not json\n")
    with pytest.raises(DataError, match="bad.jsonl:2"):
        run(FakeSampler(), bad, tmp_path / "o.jsonl")
    bad.write_text(json.dumps(PROBLEMS[0]) + "\n" + json.dumps({"question": "x"}) + "\n")
    with pytest.raises(DataError, match="bad.jsonl:2: field 'problem'"):
        run(FakeSampler(), bad, tmp_path / "o.jsonl")
    bad.write_text(json.dumps(PROBLEMS[0]) + "\n" + json.dumps(PROBLEMS[0]) + "\n")
    with pytest.raises(DataError, match="bad.jsonl:2: field 'unique_id'.*line 1"):
        run(FakeSampler(), bad, tmp_path / "o.jsonl")
    with pytest.raises(PrmkitError, match="no such problems file"):
        run(FakeSampler(), tmp_path / "missing.jsonl", tmp_path / "o.jsonl")


# ---- CLI ----------------------------------------------------------------------------------
def graded_problems(tmp_path):
    path = tmp_path / "problems.jsonl"
    path.write_text("".join(json.dumps({**p, "answer": p.get("answer", "7")}) + "\n"
                            for p in PROBLEMS[:3]))
    return path


def test_cli_generate_then_score_then_eval_bon(tiny_lm, tmp_path, capsys):
    from test_scoring import make_model

    from prmkit.cli import main

    problems = graded_problems(tmp_path)
    samples = tmp_path / "samples.jsonl"
    argv = ["generate", "--model", str(tiny_lm), "--problems", str(problems), "--n", "2",
            "--max-tokens", "12", "--backend", "hf", "--batch-size", "4", "--no-progress",
            "-o", str(samples)]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "generated 6 samples" in err and "tokens/s" in err and "graded" in err
    got = rows(samples)
    assert [(r["unique_id"], r["sample_index"]) for r in got] == \
        [(p["unique_id"], i) for p in PROBLEMS[:3] for i in range(2)]
    assert all(0 < r["num_tokens"] <= 12 for r in got)
    assert got[0]["generated_by"]["backend"] == "hf"
    assert got[0]["generated_by"]["model"] == str(tiny_lm.resolve())
    assert main(argv + ["--resume"]) == 0 and "6 already there" in capsys.readouterr().err
    assert rows(samples) == got
    assert main(argv[:-2] + ["-o", str(tmp_path / "again.jsonl")]) == 0
    assert rows(tmp_path / "again.jsonl") == got  # same seed, same samples
    assert main(argv + ["--resume", "--temperature", "0.5"]) == 2
    assert "sampling" in capsys.readouterr().err

    make_model().save_pretrained(tmp_path / "prm")
    scored = tmp_path / "scored.jsonl"
    assert main(["score", "--model", str(tmp_path / "prm"), "--input", str(samples),
                 "-o", str(scored), "--dtype", "fp32", "--no-progress"]) == 0
    capsys.readouterr()
    assert [r["id"] for r in rows(scored)] == [r["id"] for r in got]
    assert main(["eval", "bon", "--samples", str(scored), "--score-key", "score",
                 "--n", "1,2", "--pool-size", "none", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["problems"] == 3 and out["n"] == [1, 2]


def test_cli_generate_bad_input_is_a_clear_error(tiny_lm, tmp_path, capsys):
    from prmkit.cli import main

    problems = graded_problems(tmp_path)
    out = str(tmp_path / "o.jsonl")
    assert main(["generate", "--model", str(tmp_path / "nowhere"), "--problems",
                 str(problems), "-o", out]) == 2
    assert "nowhere" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(PROBLEMS[0]) + "\n[1]\n")
    assert main(["generate", "--model", str(tiny_lm), "--problems", str(bad), "-o", out,
                 "--no-progress"]) == 2
    assert "bad.jsonl:2" in capsys.readouterr().err


def test_cli_passes_backend_options_only_when_given(monkeypatch, problems, tmp_path, capsys):
    import prmkit.generation
    from prmkit.cli import main

    calls = []

    def fake_get_sampler(backend, model, **options):
        calls.append((backend, model, options))
        return FakeSampler()

    monkeypatch.setattr(prmkit.generation, "get_sampler", fake_get_sampler)
    argv = ["generate", "--model", "m", "--problems", str(problems), "--n", "1",
            "--no-progress", "--step-separator", "\\n"]
    assert main(argv + ["--backend", "vllm", "-o", str(tmp_path / "a.jsonl")]) == 0
    assert calls[-1] == ("vllm", "m", {})
    assert rows(tmp_path / "a.jsonl")[0]["generated_by"]["step_separator"] == "\n"
    assert main(argv + ["--backend", "openai", "--base-url", "http://h:1/v1", "--concurrency",
                        "4", "--gpu-memory-utilization", "0.5", "-o",
                        str(tmp_path / "b.jsonl")]) == 0
    assert calls[-1] == ("openai", "m", {"base_url": "http://h:1/v1", "concurrency": 4,
                                         "gpu_memory_utilization": 0.5})


def test_hf_run_killed_and_resumed_matches_an_uninterrupted_run(tiny_lm, problems, tmp_path):
    from prmkit.generation.hf_backend import HFSampler

    class Dying(HFSampler):
        calls = 0

        def iter_generate(self, requests, params, progress=False):
            if self.calls == 1:
                raise Killed
            self.calls += 1
            yield from super().iter_generate(requests, params, progress)

    params = SamplingParams(temperature=1.0, max_tokens=8)
    whole, broken = tmp_path / "whole.jsonl", tmp_path / "broken.jsonl"
    with HFSampler(str(tiny_lm), batch_size=8) as s:
        run(s, problems, whole, params=params, chunk_size=5)
    with Dying(str(tiny_lm), batch_size=3) as s, pytest.raises(Killed):
        run(s, problems, broken, params=params, chunk_size=5)
    assert len(rows(broken)) == 5
    with HFSampler(str(tiny_lm), batch_size=2) as s:  # other batches than the first run
        assert run(s, problems, broken, params=params, chunk_size=5).samples == 7
    assert rows(broken) == rows(whole)


class Reversed(FakeSampler):
    """Finishes every chunk's samples last first, as vLLM or a server may."""

    def iter_generate(self, requests, params, progress=False):
        outputs = FakeSampler.generate(self, requests, params)
        yield from reversed(list(enumerate(outputs)))


def test_samples_finished_out_of_order_are_written_in_problem_then_sample_order(problems,
                                                                               tmp_path):
    whole, reordered = tmp_path / "whole.jsonl", tmp_path / "reordered.jsonl"
    run(FakeSampler(), problems, whole)
    run(Reversed(), problems, reordered, chunk_size=5)
    assert reordered.read_bytes() == whole.read_bytes()
    keys = [(r["unique_id"], r["sample_index"]) for r in rows(whole)]
    assert [i for _, i in keys] == [0, 1, 2] * 4


def test_resumed_file_with_samples_out_of_order_is_put_back_in_order(problems, tmp_path):
    whole, broken = tmp_path / "whole.jsonl", tmp_path / "broken.jsonl"
    run(FakeSampler(), problems, whole)
    lines = whole.read_bytes().splitlines(keepends=True)
    broken.write_bytes(b"".join([lines[7], lines[2], lines[0]]))  # a failed run's leftovers
    assert run(FakeSampler(), problems, broken).samples == 9
    assert broken.read_bytes() == whole.read_bytes()


def test_generate_bar_moves_with_each_finished_sample(problems, tmp_path, monkeypatch):
    import io

    from tqdm import tqdm

    import prmkit.generation.files as files

    bars = []

    class Recording(tqdm):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **{**kwargs, "disable": False, "file": io.StringIO()})
            self.steps = []
            bars.append(self)

        def update(self, n=1):
            self.steps.append(n)
            return super().update(n)

    monkeypatch.setattr(files, "tqdm", Recording)
    run(FakeSampler(), problems, tmp_path / "s.jsonl", chunk_size=12)  # no bar of its own
    assert bars[-1].steps == [1] * 12


def test_failed_openai_run_leaves_no_output_file(problems, tmp_path, capsys):
    from fake_openai_server import FakeOpenAIServer

    from prmkit.cli import main

    out = tmp_path / "s.jsonl"
    with FakeOpenAIServer(model="served") as server:
        argv = ["generate", "--backend", "openai", "--base-url", server.base_url,
                "--problems", str(problems), "-o", str(out), "--n", "2", "--no-progress"]
        assert main([*argv, "--model", "other"]) == 2
        assert "does not serve model 'other'; it serves 'served'" in capsys.readouterr().err
        assert not out.exists()
        out.write_text("kept\n")
        assert main([*argv, "--model", "other", "--overwrite"]) == 2
        assert out.read_text() == "kept\n"  # nothing written: the old file stays
        assert main([*argv, "--overwrite"]) == 0  # no --model: the server's only model
    assert {r["generated_by"]["model"] for r in rows(out)} == {"served"}
    assert len(rows(out)) == 8


def test_hf_backend_still_needs_a_model(problems, tmp_path, capsys):
    from prmkit.cli import main

    assert main(["generate", "--problems", str(problems), "-o", str(tmp_path / "s.jsonl")]) == 2
    assert "--model is required with --backend hf" in capsys.readouterr().err


def test_vllm_float_weight_casts_are_not_logged_other_mismatches_are():
    import logging

    from prmkit.generation.vllm_backend import CAST_LOGGER, WeightCastFilter

    def record(*args):
        return logging.LogRecord(CAST_LOGGER, logging.WARNING, "utils.py", 334,
                                 "Attempted to load weight %s with dtype %s into parameter "
                                 "with dtype %s", args, None)

    quiet = WeightCastFilter()
    assert not quiet.filter(record("model.embed_tokens.weight", "torch.float32",
                                   "torch.bfloat16"))
    assert quiet.filter(record("w", "torch.int8", "torch.bfloat16"))
    assert quiet.filter(logging.LogRecord(CAST_LOGGER, logging.WARNING, "utils.py", 1,
                                          "Loaded weight %s", ("w",), None))


@pytest.mark.parametrize("limit", [0, -1])
def test_limit_below_one_is_refused_rather_than_read_as_no_problem_or_one(problems, limit):
    from prmkit.data.math_problems import read_problems

    with pytest.raises(PrmkitError, match=f"limit must be at least 1, got {limit}"):
        read_problems(problems, limit)
    assert [p.id for p in read_problems(problems, 1)] == ["test/a/1.json"]
