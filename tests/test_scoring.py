"""prmkit.scoring: one-pass step scores, token-budget batching, JSONL files, CLI."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
import torch

from prmkit.cli import main
from prmkit.data.records import StepExample
from prmkit.errors import DataError, PrmkitError
from prmkit.models.backbones import tiny_random
from prmkit.models.config import RewardModelConfig
from prmkit.models.formatting import StepFormat
from prmkit.models.reward_model import StepRewardModel
from prmkit.scoring import Scorer, score_file, score_steps
from prmkit.scoring.aggregate import aggregate

FIXTURES = Path(__file__).parent / "fixtures" / "scoring"
SOLUTIONS = FIXTURES / "solutions.jsonl"


def make_model(chat_template: str | None = None, **config) -> StepRewardModel:
    """A tiny reward model with widely spread random weights (probabilities far from 0.5);
    used by the other scoring tests too."""
    backbone, tok = tiny_random(seed=0)
    if chat_template is not None:
        tok.chat_template = chat_template
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # a wide spread of weights: probabilities far from 0.5
        for name, p in backbone.named_parameters():
            if "norm" not in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    model = StepRewardModel.from_backbone(backbone, tok, RewardModelConfig(**config))
    if model.head is not None:
        with torch.no_grad():
            for p in model.head.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    return model.eval()


def items() -> list[dict]:
    return [json.loads(line) for line in SOLUTIONS.read_text().splitlines()]


def prefix_probs(model, problem, steps) -> list[float]:
    """The slow reference: one forward pass per step prefix, read at its last token."""
    out = []
    for i in range(len(steps)):
        enc = model.encoder.encode(problem, steps[: i + 1])
        with torch.no_grad():
            logits = model(torch.tensor([enc.input_ids]),
                           torch.tensor([[0, len(enc.input_ids) - 1]]))
        out.append(model.correct_probability(logits).item())
    return out


@pytest.fixture(scope="module")
def model():
    return make_model()


def test_score_steps_one_pass_equals_per_prefix_passes(model):
    for it in items():
        got = score_steps(model, it["problem"], it["steps"])
        assert len(got) == len(it["steps"])
        assert got == pytest.approx(prefix_probs(model, it["problem"], it["steps"]), abs=1e-5)
    spread = [p for it in items() for p in score_steps(model, it["problem"], it["steps"])]
    assert max(spread) - min(spread) > 0.2  # a model that tells steps apart
    assert next(model.backbone.parameters()).dtype == torch.float32  # left as it was


def test_score_steps_keeps_training_mode():
    m = make_model()
    m.train()
    score_steps(m, "What is 2?", ["Two."])
    assert m.training


def test_scorer_batches_in_input_order_under_budget(model):
    data = items() * 3
    reference = [score_steps(model, it["problem"], it["steps"]) for it in data]
    scorer = Scorer(model, token_budget=64, dtype=None)
    encoded = [scorer.encode(it["problem"], it["steps"]) for it in data]
    batches = scorer.plan_batches(encoded)
    assert len(batches) > 3
    for b in batches:
        assert b.input_ids.numel() <= 64 or b.input_ids.shape[0] == 1
        lengths = [len(encoded[i].input_ids) for i in b.rows]
        assert lengths == sorted(lengths, reverse=True)  # length-sorted
        if b.attention_mask is not None:  # right padding
            assert (b.attention_mask[:, 0] == 1).all()
            assert torch.equal(b.attention_mask.sum(1), torch.tensor(lengths))
    # rows with no steps never reach the model
    assert sum(len(b.rows) for b in batches) == sum(1 for it in data if it["steps"])
    got = scorer.score(data, chunk_size=7)  # chunks smaller than the input as well
    assert len(got) == len(data)
    for g, r in zip(got, reference):
        assert g == pytest.approx(r, abs=1e-5)


def test_scorer_accepts_pairs_dicts_and_records(model):
    it = items()[0]
    scorer = Scorer(model, dtype=None)
    as_pair = scorer.score([(it["problem"], it["steps"])])[0]
    as_record = scorer.score([StepExample(problem=it["problem"], steps=tuple(it["steps"]))])[0]
    assert as_pair == scorer.score([it])[0] == as_record == scorer.score_many([it])[0]
    with pytest.raises(PrmkitError, match="cannot score int"):
        scorer.score([3])


def step_logits(model, data, autocast: bool) -> list[torch.Tensor]:
    """Reference: the model's own forward, one solution at a time, logit of P(correct)."""
    out = []
    for it in data:
        enc = model.encoder.encode(it["problem"], it["steps"])
        positions = torch.tensor([[0, p] for p in enc.label_positions])
        with torch.inference_mode(), torch.autocast("cpu", torch.bfloat16, enabled=autocast):
            logits = model(torch.tensor([enc.input_ids]), positions).double()
        out.append(logits[:, 0] - logits[:, 1])
    return out


def as_logits(probs) -> torch.Tensor:
    p = torch.tensor(probs, dtype=torch.float64)
    return (p / (1 - p)).log()


def test_scorer_bf16_cast_and_autocast_match_bf16_reference_within_one_rounding():
    data = [it for it in items() if it["steps"]]
    model = make_model()
    bf16_copy = copy.deepcopy(model)
    bf16_copy.backbone.to(torch.bfloat16)
    fp32 = step_logits(model, data, autocast=False)
    cases = {  # scorer -> the same bf16 computation done by hand
        "cast": (Scorer(model, dtype="bf16", cast_weights=True, token_budget=128),
                 step_logits(bf16_copy, data, autocast=False)),
        "autocast": (Scorer(model, dtype="bf16", token_budget=128),
                     step_logits(model, data, autocast=True)),
    }
    for name, (scorer, reference) in cases.items():
        got = [as_logits(p) for p in scorer.score(data)]
        # Same bf16 operations in another batch layout: only the fp32 accumulation order
        # differs, far below one bf16 rounding of the logit (unit roundoff 2^-8, relative).
        tol = [2.0 ** -8 * r.abs().clamp(min=1.0) for r in reference]
        for g, r, t in zip(got, reference, tol):
            assert ((g - r).abs() <= t).all(), name
        # and the test can fail: fp32 scores miss the bf16 reference by several roundings
        worst = max(((f - r).abs() / t).max().item() for f, r, t in zip(fp32, reference, tol))
        assert worst > 4, name
    with pytest.raises(PrmkitError, match="unknown dtype"):
        Scorer(make_model(), dtype="int3")


def test_scorer_leaves_the_callers_model_unchanged():
    model = make_model().train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    data = items()
    for kw in ({"dtype": "bf16"}, {"dtype": "bf16", "cast_weights": True}, {"dtype": None}):
        Scorer(model, **kw).score(data)
        assert model.training, kw
        after = model.state_dict()
        assert after.keys() == before.keys()
        for k, v in before.items():
            assert after[k].dtype == v.dtype and torch.equal(after[k], v), (kw, k)
    bf16_model = make_model()
    bf16_model.backbone.to(torch.bfloat16)
    scorer = Scorer(bf16_model, dtype="fp32")  # autocast cannot raise precision: a copy
    assert scorer.cast_weights and scorer.model is not bf16_model
    assert next(bf16_model.backbone.parameters()).dtype == torch.bfloat16


def test_three_class_model_gives_class_probabilities():
    m = make_model(num_classes=3, formulation="head")
    res = Scorer(m, dtype=None).score_detailed(items())
    for r, it in zip(res, items()):
        assert len(r.step_probs) == len(r.class_probs) == len(it["steps"])
        for p, c in zip(r.step_probs, r.class_probs):
            assert sum(c) == pytest.approx(1.0, abs=1e-6)
            assert p == pytest.approx(c[0] + c[1], abs=1e-6)  # neutral counts as correct


def test_progress_advances_per_batch_and_counts_each_solution_once(model):
    data = items() * 3
    scorer = Scorer(model, token_budget=64, dtype=None)
    n_batches = len(scorer.plan_batches([scorer.encode(it["problem"], it["steps"])
                                         for it in data]))
    calls: list[int] = []
    scorer.score_chunk(data, calls.append)
    assert len(calls) == n_batches + 1  # solutions with no steps first, then once per batch
    assert calls[0] == sum(1 for it in data if not it["steps"]) > 0
    assert sum(calls) == len(data)
    assert sum(1 for c in calls[1:] if c > 0) > 3  # the bar moves during the chunk


def test_zero_steps_truncation_and_long_prompt():
    m = make_model()
    m.config.step_format = StepFormat(max_length=24)
    m._encoder = None
    scorer = Scorer(m, dtype=None)
    long_steps = ["Let x be a number.", "Then 2x + 3 = 11, so x = 4.", "The answer is 4."]
    res = scorer.score_detailed([("2+2?", []), ("2+2?", long_steps), ("2+2? " * 20, ["Four."])])
    assert res[0].step_probs == [] and res[0].truncated == 0
    assert res[1].step_probs[0] is not None and res[1].step_probs[1:] == [None, None]
    assert res[1].truncated == 2
    assert res[2].step_probs == [None] and res[2].truncated == 1  # the prompt alone is too long


def test_orm_scores_once_at_the_end():
    prm, orm = make_model(), make_model(objective="orm")
    data = items()
    prm_scores = Scorer(prm, dtype=None).score(data)
    orm_scores = Scorer(orm, dtype=None).score(data)
    for p, o, it in zip(prm_scores, orm_scores, data):
        if it["steps"]:
            assert o == pytest.approx(p[-1:], abs=1e-6)
        else:
            assert o == []


# ---- files --------------------------------------------------------------------------------
def read_jsonl(path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def test_score_file_writes_input_plus_scores(tmp_path, model):
    out = tmp_path / "scored.jsonl"
    scorer = Scorer(model, dtype=None)
    report = score_file(scorer, SOLUTIONS, out, progress=False)
    rows = read_jsonl(out)
    assert report.scored == len(rows) == 5 and report.skipped == 0
    assert [r["id"] for r in rows] == ["a", "b", "empty", "d", "e"]
    assert rows[1]["source"] == "hand-written"  # other input fields are kept
    for r in rows:
        assert r["step_scores"] == pytest.approx(score_steps(model, r["problem"], r["steps"]),
                                                 abs=1e-6)
        assert r["score"] == pytest.approx(aggregate(r["step_scores"], "prod"))
        assert "truncated_steps" not in r
    assert rows[2]["step_scores"] == [] and rows[2]["score"] == 1.0
    score_file(scorer, SOLUTIONS, out, aggregation="min", overwrite=True, progress=False)
    assert [r["score"] for r in read_jsonl(out)][:2] == [min(rows[0]["step_scores"]),
                                                         min(rows[1]["step_scores"])]


def test_score_file_openai_schema_three_classes(tmp_path):
    m = make_model(num_classes=3)
    out = tmp_path / "scored.jsonl"
    score_file(Scorer(m, dtype=None), FIXTURES / "openai_samples.jsonl", out, progress=False)
    rows = read_jsonl(out)
    assert len(rows) == 2
    assert rows[0]["prm_score"] == 0.8 and rows[0]["rating_probs"][0]["1"] == 0.9  # kept
    for r in rows:
        assert len(r["step_scores"]) == len(r["step_rating_probs"]) == 2
        for p, c in zip(r["step_scores"], r["step_rating_probs"]):
            assert set(c) == {"1", "0", "-1"}
            assert p == pytest.approx(c["1"] + c["0"], abs=1e-6)


def test_score_file_truncated_solution_scores_zero_with_null_steps(tmp_path, caplog):
    m = make_model()
    m.config.step_format = StepFormat(max_length=24)
    m._encoder = None
    out = tmp_path / "scored.jsonl"
    report = score_file(Scorer(m, dtype=None), SOLUTIONS, out, progress=False)
    rows = {r["id"]: r for r in read_jsonl(out)}
    cut = rows["e"]
    assert None in cut["step_scores"] and cut["truncated_steps"] == cut["step_scores"].count(None)
    assert cut["score"] == 0.0  # a null step counts as 0.0: below every complete solution
    assert all(r["score"] > 0.0 for r in rows.values() if "truncated_steps" not in r)
    assert report.truncated_steps == sum(r.get("truncated_steps", 0) for r in rows.values()) > 0
    assert "cut by max_length" in report.summary()
    assert "cut by max_length=24" in caplog.text


def test_score_file_errors_name_file_and_line(tmp_path, model):
    with pytest.raises(DataError, match=r"bad_steps.jsonl:3: field 'steps'"):
        score_file(Scorer(model, dtype=None), FIXTURES / "bad_steps.jsonl", tmp_path / "o.jsonl",
                   progress=False, chunk_size=1)
    assert not (tmp_path / "o.jsonl").exists()  # checked before anything is written
    bad_json = tmp_path / "bad.jsonl"
    bad_json.write_text('{"problem": "p", "steps": []}\n{"problem": \n')
    with pytest.raises(DataError, match=r"bad.jsonl:2: invalid JSON"):
        score_file(Scorer(model, dtype=None), bad_json, tmp_path / "o2.jsonl", progress=False)


def test_score_file_refuses_to_replace_output(tmp_path, model):
    out = tmp_path / "scored.jsonl"
    out.write_text("precious\n")
    with pytest.raises(PrmkitError, match="exists: pass --resume"):
        score_file(Scorer(model, dtype=None), SOLUTIONS, out, progress=False)
    assert out.read_text() == "precious\n"
    with pytest.raises(PrmkitError, match="aggregation"):
        score_file(Scorer(model, dtype=None), SOLUTIONS, tmp_path / "x.jsonl", aggregation="max")


def test_score_file_resume_after_interruption(tmp_path, model):
    scorer = Scorer(model, dtype=None)
    full = tmp_path / "full.jsonl"
    score_file(scorer, SOLUTIONS, full, progress=False)
    lines = full.read_bytes().splitlines(keepends=True)
    # a run killed after two lines and half of the third
    part = tmp_path / "part.jsonl"
    part.write_bytes(lines[0] + lines[1] + lines[2][:20])
    report = score_file(scorer, SOLUTIONS, part, resume=True, progress=False)
    assert report.skipped == 2 and report.scored == 3
    assert [r["id"] for r in read_jsonl(part)] == ["a", "b", "empty", "d", "e"]
    for a, b in zip(read_jsonl(part), read_jsonl(full)):
        assert a["step_scores"] == pytest.approx(b["step_scores"], abs=1e-6)
    again = score_file(scorer, SOLUTIONS, part, resume=True, progress=False)
    assert again.scored == 0 and again.skipped == 5
    assert len(read_jsonl(part)) == 5


def test_score_file_resume_without_ids_uses_positions(tmp_path, model):
    scorer = Scorer(model, dtype=None)
    src = FIXTURES / "openai_samples.jsonl"
    out = tmp_path / "out.jsonl"
    score_file(scorer, src, out, progress=False)
    first = out.read_bytes().splitlines(keepends=True)[0]
    out.write_bytes(first)
    report = score_file(scorer, src, out, resume=True, progress=False)
    assert report.skipped == 1 and report.scored == 1
    assert [r["answer"] for r in read_jsonl(out)] == ["4", "5"]


# ---- CLI ----------------------------------------------------------------------------------
def test_cli_score(tmp_path, capsys):
    make_model(num_classes=3, aggregation="min").save_pretrained(tmp_path / "model")
    out = tmp_path / "out.jsonl"
    rc = main(["score", "--model", str(tmp_path / "model"), "--input", str(SOLUTIONS),
               "-o", str(out), "--batch-tokens", "256", "--dtype", "fp32", "--no-progress"])
    assert rc == 0
    rows = read_jsonl(out)
    assert len(rows) == 5 and "scored 5 solutions" in capsys.readouterr().err
    assert rows[0]["score"] == pytest.approx(min(rows[0]["step_scores"]))  # the model's setting
    assert all(math.isfinite(p) for r in rows for p in r["step_scores"])
    rc = main(["score", "--model", str(tmp_path / "model"), "--input", str(SOLUTIONS),
               "-o", str(out), "--dtype", "fp32", "--resume", "--no-progress"])
    assert rc == 0 and "5 already there" in capsys.readouterr().err
    rc = main(["score", "--model", str(tmp_path / "model"), "--input", str(SOLUTIONS),
               "-o", str(out), "--aggregation", "last", "--overwrite", "--no-progress"])
    assert rc == 0
    assert read_jsonl(out)[0]["score"] == pytest.approx(read_jsonl(out)[0]["step_scores"][-1])


def test_score_file_records_the_model_and_refuses_to_resume_with_another(tmp_path):
    make_model().save_pretrained(tmp_path / "m1")
    other = make_model()
    with torch.no_grad():
        next(other.backbone.parameters()).add_(0.01)  # a fine-tuned copy: same shapes
    other.save_pretrained(tmp_path / "m2")
    out = tmp_path / "scored.jsonl"
    first = Scorer.from_pretrained(tmp_path / "m1", dtype="fp32")
    score_file(first, SOLUTIONS, out, progress=False)
    lines = out.read_bytes().splitlines(keepends=True)
    out.write_bytes(lines[0] + lines[1])  # a stopped run
    record = read_jsonl(out)[0]["scored_by"]
    assert record == {"model": str((tmp_path / "m1").resolve()),
                      "fingerprint": first.fingerprint, "aggregation": "prod",
                      "max_length": 2048, "dtype": "float32"}
    assert len(record["fingerprint"]) == 16
    second = Scorer.from_pretrained(tmp_path / "m2", dtype="fp32")
    assert second.fingerprint != first.fingerprint
    with pytest.raises(PrmkitError) as err:
        score_file(second, SOLUTIONS, out, resume=True, progress=False)
    message = str(err.value)
    assert str(out) in message and "m1" in message and "m2" in message
    assert first.fingerprint in message and second.fingerprint in message
    assert len(read_jsonl(out)) == 2  # nothing appended
    with pytest.raises(PrmkitError, match='aggregation "prod" -> "min"'):
        score_file(first, SOLUTIONS, out, resume=True, aggregation="min", progress=False)
    # the same weights in another folder are the same model
    (tmp_path / "m1").rename(tmp_path / "moved")
    moved = Scorer.from_pretrained(tmp_path / "moved", dtype="fp32")
    assert score_file(moved, SOLUTIONS, out, resume=True, progress=False).scored == 3
    report = score_file(second, SOLUTIONS, out, resume=True, force=True, progress=False)
    assert report.skipped == 5
    # an in-memory model gets a fingerprint of its weights, untouched by the bf16 cast copy
    model = make_model()
    assert Scorer(model, dtype="bf16", cast_weights=True).fingerprint == \
        Scorer(model, dtype=None).fingerprint


def test_cli_score_resume_with_another_model_names_both(tmp_path, capsys):
    make_model().save_pretrained(tmp_path / "m1")
    make_model(aggregation="min").save_pretrained(tmp_path / "m2")
    out = tmp_path / "out.jsonl"
    argv = ["score", "--input", str(SOLUTIONS), "-o", str(out), "--dtype", "fp32",
            "--no-progress"]
    assert main(argv + ["--model", str(tmp_path / "m1")]) == 0
    capsys.readouterr()
    assert main(argv + ["--model", str(tmp_path / "m2"), "--resume"]) == 2
    err = capsys.readouterr().err
    assert "out.jsonl was scored by" in err and "m1" in err and "m2" in err
    assert main(argv + ["--model", str(tmp_path / "m2"), "--resume", "--force"]) == 0


def test_cli_score_errors(tmp_path, capsys):
    make_model().save_pretrained(tmp_path / "model")
    rc = main(["score", "--model", str(tmp_path / "model"), "--input",
               str(FIXTURES / "bad_steps.jsonl"), "-o", str(tmp_path / "o.jsonl"), "--no-progress"])
    assert rc == 2 and "bad_steps.jsonl:3: field 'steps'" in capsys.readouterr().err
    rc = main(["score", "--model", str(tmp_path), "--input", str(SOLUTIONS),
               "-o", str(tmp_path / "o2.jsonl")])
    assert rc == 2 and "prmkit_config.json is missing" in capsys.readouterr().err


def test_failed_score_leaves_no_partial_output_file(tmp_path, capsys):
    """Bad JSON on line 3: the run stops before its output is touched, naming the file
    and line; the same command then runs once the input is fixed, and an earlier run's
    output (replaced with --overwrite, continued with --resume) is left as it was."""
    make_model().save_pretrained(tmp_path / "model")
    good = SOLUTIONS.read_text().splitlines(keepends=True)
    bad = tmp_path / "in.jsonl"
    bad.write_text(good[0] + good[1] + '{"id": "c", "problem": \n' + good[3])
    out = tmp_path / "out.jsonl"
    argv = ["score", "--model", str(tmp_path / "model"), "--input", str(bad), "-o", str(out),
            "--dtype", "fp32", "--no-progress"]
    assert main(argv) == 2
    assert f"{bad}:3: invalid JSON" in capsys.readouterr().err
    assert not out.exists()
    bad.write_text("".join(good[:2]))
    assert main(argv) == 0 and len(read_jsonl(out)) == 2  # no --overwrite needed
    earlier = out.read_bytes()
    bad.write_text(good[0] + good[1] + '{"id": "c", "problem": \n')
    for flag in ("--overwrite", "--resume"):
        assert main([*argv, flag]) == 2
        assert f"{bad}:3: invalid JSON" in capsys.readouterr().err
        assert out.read_bytes() == earlier, flag


def test_score_refusing_an_existing_output_names_the_flags(tmp_path, capsys):
    make_model().save_pretrained(tmp_path / "model")
    out = tmp_path / "out.jsonl"
    out.write_text("")
    assert main(["score", "--model", str(tmp_path / "model"), "--input", str(SOLUTIONS),
                 "-o", str(out), "--dtype", "fp32", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "pass --resume" in err and "--overwrite" in err


def test_score_file_of_an_empty_input_writes_an_empty_output(tmp_path, model):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    out = tmp_path / "out.jsonl"
    assert score_file(Scorer(model, dtype=None), empty, out, progress=False).scored == 0
    assert out.read_bytes() == b""


# ---- devices and data-parallel scoring -----------------------------------------------------
@pytest.mark.parametrize("argv", [
    ["score", "--model", "M", "--input", "in.jsonl", "-o", "out.jsonl"],
    ["eval", "processbench", "--model", "M"],
    ["eval", "prmbench", "--model", "M"],
    ["eval", "steps", "--model", "M", "--data", "d.jsonl"],
    ["search", "--prm", "M", "--model", "policy", "--problems", "p.jsonl", "-o", "o.jsonl"],
])
def test_every_command_loading_a_reward_model_takes_device_default_auto(argv):
    from prmkit.cli import build_parser

    flag, dest = ("--prm-device", "prm_device") if argv[0] == "search" else ("--device", "device")
    parser = build_parser()
    assert getattr(parser.parse_args(argv), dest) == "auto"
    assert getattr(parser.parse_args([*argv, flag, "cuda:1"]), dest) == "cuda:1"


def test_scorer_from_pretrained_runs_on_the_gpu_by_default(tmp_path, monkeypatch, model):
    """device auto: the loader is asked for CUDA when it is there (nothing runs on it)."""
    model.save_pretrained(tmp_path)
    asked = []

    def fake_load(folder, dtype=None, device=None, attn_implementation=None):
        asked.append((device, dtype))
        raise RuntimeError("stop")

    monkeypatch.setattr(StepRewardModel, "from_pretrained", fake_load)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    with pytest.raises(RuntimeError, match="stop"):
        Scorer.from_pretrained(tmp_path)
    assert asked == [(torch.device("cuda"), "bf16")]  # auto: bf16 on a GPU that has it


def test_data_parallel_shares_merge_back_in_input_order(monkeypatch):
    """Each process takes items rank, rank + world, ...; the gathered shares come back
    in input order (gather_object faked with the other process's share)."""
    import accelerate.utils

    from prmkit.scoring.parallel import DataParallel

    items = list("abcdefg")
    other = DataParallel(rank=1, world=2)
    theirs = [list(zip(range(1, 7, 2), [c.upper() for c in items[1::2]]))]
    monkeypatch.setattr(accelerate.utils, "gather_object", lambda mine: mine + theirs)
    seen = []

    def fn(share):
        seen.append(list(share))
        return [c.upper() for c in share]

    assert DataParallel(rank=0, world=2).map(items, fn) == list("ABCDEFG")
    assert seen == [["a", "c", "e", "g"]] and not other.is_main


@pytest.mark.slow
def test_two_process_scoring_writes_what_one_process_writes(tmp_path, model):
    """torchrun, 2 CPU processes on gloo: each scores half of every chunk; the first
    writes every line in input order with the scores of a one-process run."""
    import os
    import subprocess
    import sys

    folder = model.save_pretrained(tmp_path / "model")
    lines = [json.dumps({"id": f"s{i}", "problem": r["problem"], "steps": r["steps"]})
             for i, r in enumerate(items() * 3)]
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(lines) + "\n")
    common = ["--model", str(folder), "--input", str(src), "--dtype", "fp32", "--device", "cpu",
              "--no-progress"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    root = Path(__file__).resolve().parents[1]
    one = subprocess.run([sys.executable, "-m", "prmkit.cli.score", *common,
                          "-o", str(tmp_path / "one.jsonl")], env=env, cwd=root,
                         capture_output=True, text=True, timeout=300)
    assert one.returncode == 0, one.stderr[-2000:]
    launcher = Path(sys.executable).with_name("torchrun")
    two = subprocess.run([str(launcher), "--nproc_per_node", "2", "-m", "prmkit.cli.score",
                          *common, "-o", str(tmp_path / "two.jsonl")], env=env, cwd=root,
                         capture_output=True, text=True, timeout=300)
    assert two.returncode == 0, two.stderr[-2000:]
    a, b = read_jsonl(tmp_path / "one.jsonl"), read_jsonl(tmp_path / "two.jsonl")
    assert [r["id"] for r in b] == [r["id"] for r in a] == [f"s{i}" for i in range(15)]
    for ra, rb in zip(a, b):
        assert rb["step_scores"] == pytest.approx(ra["step_scores"], abs=1e-6)
