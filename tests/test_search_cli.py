"""`prmkit search` end to end (a tiny random Llama through the HF backend, a tiny random
PRM) and `prmkit eval search` over hand-written result files."""

from __future__ import annotations

import json

import pytest
import torch

from prmkit.cli import main

PROBLEMS = [
    {"problem": "Compute 3 * 4 - 5.", "answer": "7", "unique_id": "a"},
    {"problem": "How many apples are there?", "answer": "1/2", "unique_id": "b"},
]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    from prmkit.models.backbones import tiny_random
    from prmkit.models.config import RewardModelConfig
    from prmkit.models.formatting import StepFormat
    from prmkit.models.reward_model import StepRewardModel

    root = tmp_path_factory.mktemp("search-cli")
    gen, tok = tiny_random(seed=0)
    gen.save_pretrained(root / "gen")
    tok.save_pretrained(root / "gen")
    backbone, tok = tiny_random(seed=1)
    config = RewardModelConfig(step_format=StepFormat(step_separator="e"))
    StepRewardModel.from_backbone(backbone, tok, config).save_pretrained(
        root / "prm")
    problems = root / "problems.jsonl"
    problems.write_text("".join(json.dumps(p) + "\n" for p in PROBLEMS))
    return root


def search_argv(root, out, *extra):
    # the PRM's step separator "e" gives the random generator short steps that end at the
    # separator (an open candidate), so the beam runs several rounds
    return ["search", "--model", str(root / "gen"), "--prm", str(root / "prm"),
            "--problems", str(root / "problems.jsonl"), "--n", "4", "--beam-width", "2",
            "--max-steps", "3", "--step-max-tokens", "6", "--max-tokens", "12",
            "--prm-dtype", "fp32", "--no-progress", "-o", str(out), *extra]


def lines(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_search_cli_beam_search_end_to_end_with_hf_generator_and_random_prm(folders, tmp_path):
    out = tmp_path / "beam.jsonl"
    assert main(search_argv(folders, out, "--approach", "beam_search")) == 0
    recs = lines(out)
    assert [r["id"] for r in recs] == ["a", "b"] and [r["answer"] for r in recs] == ["7", "1/2"]
    for r in recs:
        assert r["approach"] == "beam_search" and r["generated_tokens"] > 0
        assert r["prm_tokens"] > 0
        assert 1 <= len(r["candidates"]) <= 4 and 0 <= r["chosen"] < len(r["candidates"])
        assert r["details"]["rounds"][0]["sampled"] == 4
        assert all(c["completed"] for c in r["candidates"])
        assert all(len(c["step_scores"]) == len(c["steps"]) for c in r["candidates"])
        assert r["search"]["config"]["n"] == 4
    assert max(len(r["details"]["rounds"]) for r in recs) > 1
    # the same command again gives the same lines (per-request seeds)
    again = tmp_path / "again.jsonl"
    assert main(search_argv(folders, again, "--approach", "beam_search")) == 0
    assert lines(again) == recs


def test_search_cli_resume_skips_done_problems_and_refuses_another_config(folders, tmp_path,
                                                                          capsys):
    out = tmp_path / "bon.jsonl"
    argv = search_argv(folders, out, "--approach", "best_of_n", "--limit", "1")
    assert main(argv) == 0
    assert main(argv) == 2  # exists: needs --resume or --overwrite
    assert "pass --resume" in capsys.readouterr().err
    full = search_argv(folders, out, "--approach", "best_of_n", "--resume")
    assert main(full) == 0
    assert [r["id"] for r in lines(out)] == ["a", "b"]
    before = out.read_text()
    assert main(full) == 0 and out.read_text() == before  # nothing left to do
    other = search_argv(folders, out, "--approach", "best_of_n", "--resume")
    other[other.index("--n") + 1] = "2"
    assert main(other) == 2
    err = capsys.readouterr().err
    assert "written by another search" in err and '"n": 4' in err
    assert out.read_text() == before


def test_search_cli_refuses_n_not_divisible_by_beam_width(folders, tmp_path, capsys):
    argv = search_argv(folders, tmp_path / "o.jsonl", "--approach", "dvts")
    argv[argv.index("--n") + 1] = "3"
    assert main(argv) == 2
    assert "n divisible by beam_width: n=3, beam_width=2" in capsys.readouterr().err


def _result(pid, approach, n, answers, scores, chosen, tokens, weighted=None, gold="1"):
    cands = [{"steps": ["s"], "step_scores": [s], "score": s, "completed": True, "end": "eos",
              "answer": a, "generated_tokens": tokens // len(answers), "path": [i],
              "subtree": 0} for i, (a, s) in enumerate(zip(answers, scores))]
    return {"id": pid, "problem": pid, "approach": approach, "chosen": chosen,
            "chosen_answer": answers[chosen], "generated_tokens": tokens, "prm_tokens": 10,
            "details": {"best": chosen, "weighted": chosen if weighted is None else weighted},
            "candidates": cands, "answer": gold,
            "search": {"config": {"approach": approach, "n": n, "aggregation": "prod"}}}


def _write(path, recs):
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return str(path)


def test_eval_search_accuracy_tokens_and_best_of_n_references(tmp_path):
    # best-of-4 pools: p1 answers 1,1,2,3 (correct "1"), picks the wrong "2";
    # p2 answers 0.5, 2, 2, 2 (gold 1/2), picks the right 0.5
    bon = _write(tmp_path / "bon4.jsonl", [
        _result("p1", "best_of_n", 4, ["1", "1", "2", "3"], [.2, .3, .9, .1], 2, 40),
        _result("p2", "best_of_n", 4, ["0.5", "2", "2", "2"], [.9, .1, .1, .1], 0, 80,
                gold="1/2")])
    beam = _write(tmp_path / "beam4.jsonl", [
        _result("p1", "beam_search", 4, ["1", "2"], [.8, .2], 0, 100, weighted=1),
        _result("p2", "beam_search", 4, ["3", "1/2"], [.6, .5], 0, 60, weighted=1,
                gold="1/2")])
    out = tmp_path / "report"
    assert main(["eval", "search", "--results", bon, "--results", beam, "--out-dir",
                 str(out), "--json", "--trials", "50"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    points = {p["method"]: p for p in metrics["points"]}
    assert points["best_of_n"]["accuracy"] == 0.5
    assert points["best_of_n"]["generated_tokens"] == 60.0
    assert points["beam_search"]["accuracy"] == 0.5  # p1 right, p2 wrong
    assert points["beam_search (weighted vote)"]["accuracy"] == 0.5  # p1 wrong, p2 right
    assert points["beam_search"]["generated_tokens"] == 80.0
    ref = metrics["references"]
    assert ref["n"] == [1, 2, 4]
    # pass@4: both problems have a correct sample; pass@1: (2/4 + 1/4) / 2
    assert ref["pass_at_n"][-1] == 1.0 and ref["pass_at_n"][0] == pytest.approx(0.375)
    # majority of all 4: p1 "1" (2 votes) right, p2 "2" (3 votes) wrong
    assert ref["majority"][-1] == 0.5
    assert ref["generated_tokens"] == [15.0, 30.0, 60.0]
    assert (out / "search_curves.png").stat().st_size > 0
    assert "beam_search (weighted vote)" in (out / "report.md").read_text()


def test_eval_search_evaluates_only_problems_in_every_file(tmp_path):
    a = _write(tmp_path / "a.jsonl", [_result("p1", "best_of_n", 2, ["1", "2"], [.9, .1], 0, 8),
                                      _result("p2", "best_of_n", 2, ["2", "2"], [.9, .1], 0, 8)])
    b = _write(tmp_path / "b.jsonl", [_result("p1", "dvts", 2, ["2", "1"], [.9, .1], 0, 8)])
    assert main(["eval", "search", "--results", a, "--results", b, "--out-dir",
                 str(tmp_path / "r"), "--trials", "10"]) == 0
    metrics = json.loads((tmp_path / "r" / "metrics.json").read_text())
    assert metrics["problems"] == 1
    assert {p["method"]: p["accuracy"] for p in metrics["points"]}["best_of_n"] == 1.0


def test_eval_search_names_the_line_of_a_result_without_gold(tmp_path, capsys):
    rec = _result("p1", "best_of_n", 2, ["1", "2"], [.9, .1], 0, 8)
    del rec["answer"]
    path = _write(tmp_path / "a.jsonl", [rec])
    assert main(["eval", "search", "--results", path, "--out-dir", str(tmp_path / "r")]) == 2
    assert "a.jsonl:1: field 'answer': no gold answer" in capsys.readouterr().err


torch.set_num_threads(1)


def test_search_cli_takes_the_same_typed_backend_options_as_generate(folders, tmp_path,
                                                                     monkeypatch):
    import prmkit.generation
    from prmkit.errors import PrmkitError

    calls = []

    def fake_get_sampler(backend, model, **options):
        calls.append((backend, options))
        raise PrmkitError("no sampling in this test")

    monkeypatch.setattr(prmkit.generation, "get_sampler", fake_get_sampler)
    argv = search_argv(folders, tmp_path / "r.jsonl", "--backend", "openai",
                       "--base-url", "http://h:1/v1", "--concurrency", "4",
                       "--backend-option", "timeout=5", "--prompt-format", "chat")
    assert main(argv) == 2
    assert calls == [("openai", {"base_url": "http://h:1/v1", "concurrency": 4, "timeout": 5})]


def test_failed_search_leaves_no_partial_output_file(folders, tmp_path, monkeypatch, capsys):
    """Bad problems (line 3) or a search that fails before its first result: no output
    file, and an earlier one given --overwrite stays as it was."""
    import prmkit.search
    from prmkit.errors import PrmkitError

    bad = tmp_path / "problems.jsonl"
    bad.write_text("".join(json.dumps(p) + "\n" for p in PROBLEMS) + '{"problem": \n')
    out = tmp_path / "out.jsonl"
    argv = search_argv(folders, out, "--approach", "best_of_n")
    argv[argv.index("--problems") + 1] = str(bad)
    assert main(argv) == 2
    assert f"{bad}:3" in capsys.readouterr().err and not out.exists()

    def fail(*args, **kwargs):
        raise PrmkitError("the generator went away")

    monkeypatch.setattr(prmkit.search, "run_search", fail)
    argv = search_argv(folders, out, "--approach", "best_of_n")
    assert main(argv) == 2 and not out.exists()
    out.write_text("earlier\n")
    assert main([*argv, "--overwrite"]) == 2
    assert "the generator went away" in capsys.readouterr().err
    assert out.read_text() == "earlier\n"


def test_one_problem_key_for_generate_search_and_active_files(folders, tmp_path):
    """A problem with an empty unique_id or none is named by its text's sha256 alike in
    generate's samples, search's results and the active loop's problems and samples."""
    import hashlib

    from active_support import loop_config

    from prmkit.active.loop import run_loop

    rows = [{"problem": "What is 2+3?", "answer": "5", "unique_id": ""},
            {"problem": "What is 1+1?", "answer": "2"},
            {"problem": "What is 3+3?", "answer": "6", "unique_id": "c"}]
    problems = tmp_path / "keys.jsonl"
    problems.write_text("".join(json.dumps(r) + "\n" for r in rows))
    keys = ["sha256:" + hashlib.sha256(r["problem"].encode()).hexdigest()[:16]
            for r in rows[:2]] + ["c"]

    samples = tmp_path / "samples.jsonl"
    assert main(["generate", "--model", str(folders / "gen"), "--problems", str(problems),
                 "--n", "1", "--max-tokens", "4", "--no-progress", "-o", str(samples)]) == 0
    assert [r["unique_id"] for r in lines(samples)] == keys

    results = tmp_path / "results.jsonl"
    argv = search_argv(folders, results, "--approach", "best_of_n", "--n", "1")
    argv[argv.index("--problems") + 1] = str(problems)
    assert main(argv) == 0
    assert [r["id"] for r in lines(results)] == keys

    class Sampled(Exception):
        pass

    def stop(generation, step):
        if step == "sample":
            raise Sampled

    config = loop_config(tmp_path, folders / "gen", problems,
                         generator={"samples_per_problem": 1, "max_tokens": 4})
    with pytest.raises(Sampled):
        run_loop(config, after_step=stop)
    for name in ("problems.jsonl", "samples.jsonl"):
        assert [r["unique_id"] for r in lines(tmp_path / "run" / "gen_0" / name)] == keys
