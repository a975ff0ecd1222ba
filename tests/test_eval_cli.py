import json
from pathlib import Path

import pytest

from prmkit.cli import main

FIXTURES = Path(__file__).parent / "fixtures" / "eval"
SAMPLES = str(FIXTURES / "scored_samples.jsonl")


def run_json(capsys, argv) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def assert_within_3_standard_errors(got, std, expected, trials):
    for g, s, e in zip(got, std, expected, strict=True):
        assert abs(g - e) <= 3 * s / trials ** 0.5 + 1e-12, (got, expected)


def test_eval_bon_exact_json(capsys, tmp_path):
    out = run_json(capsys, ["eval", "bon", "--samples", SAMPLES, "--score-key", "prm_score",
                            "--n", "1,2,3", "--pool-size", "none", "--grader", "exact",
                            "--json", "--plot", str(tmp_path / "bon.png")])
    assert out["n"] == [1, 2, 3] and out["std"] == []
    assert out["accuracy"] == pytest.approx([7 / 12, 0.5, 0.375])
    # Majority by hand over every draw (exact grader: "1/2" and "0.5" are two answers;
    # tied classes split evenly; a draw of the answer-less slot alone is wrong):
    # p1 (4 slots): N=1 2/4, N=2 (1 + 1/2 + 1 + 1/2 + 1 + 0)/6, N=3 (2/3 + 1 + 1/2 + 1/2)/4
    # p2 (7, 8, 8): N=1 2/3, N=2 (1/2 + 1/2 + 1)/3, N=3 1
    expected = [(1 / 2 + 2 / 3) / 2, (2 / 3 + 2 / 3) / 2, (2 / 3 + 1) / 2]
    assert out["estimator"] == "exact" and out["trials"] == 400
    assert_within_3_standard_errors(out["majority"], out["majority_std"], expected, 400)
    assert out["pass_at_n"] == pytest.approx([7 / 12, (5 / 6 + 1) / 2, 1.0])
    assert out["problems"] == 2 and out["padding"] is None
    assert (tmp_path / "bon.png").read_bytes()[:4] == b"\x89PNG"


def test_eval_bon_trials_has_std_and_extra_key(capsys):
    out = run_json(capsys, ["eval", "bon", "--samples", SAMPLES, "--score-key", "prm_score",
                            "--extra-key", "orm_score", "--n", "1,3", "--pool-size", "4",
                            "--estimator", "trials", "--trials", "200", "--grader", "exact",
                            "--json"])
    # By hand, pools padded to 4 slots (p1: A .9 ok, B .3 ok, C .5 wrong, one answer-less;
    # p2: E .8 wrong, F .6 ok, G .2 ok, one empty slot): N=1: 1/2 in both problems; N=3:
    # p1 3/4 (only BCD picks C), p2 1/4 (only FG_ avoids E). orm_score (A .2, B .8, C .9;
    # E .1, F .7, G .3): N=3: p1 1/4, p2 1.
    assert_within_3_standard_errors(out["accuracy"], out["std"], [0.5, 0.5], 200)
    orm = out["curves"]["orm_score"]
    assert_within_3_standard_errors(orm["accuracy"], orm["std"], [0.5, 0.625], 200)
    assert all(s > 0 for s in out["std"] + orm["std"])  # trial accuracies vary
    assert out["pass_at_n"] == pytest.approx([0.5, 1.0])  # exact: 2 correct of 4 slots
    assert out["padding"] == {"pool_size": 4, "problems_padded": 1, "empty_slots": 1}


def test_eval_bon_reads_prmkit_score_output_with_null_steps(capsys, tmp_path):
    from test_scoring import make_model

    from prmkit.models.formatting import StepFormat

    model = make_model()
    model.config.step_format = StepFormat(max_length=24)  # cuts the long solution's end
    model._encoder = None
    model.save_pretrained(tmp_path / "model")
    long_steps = ["Let x be a number.", "Then 2x + 3 = 11, so x = 4.", "The answer is 4."]
    samples = [{"unique_id": "p1", "problem": "2+2?", "steps": ["Five."], "answer": "5",
                "is_correct": False},
               {"unique_id": "p1", "problem": "2+2?", "steps": long_steps, "answer": "4",
                "is_correct": True}]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    scored = tmp_path / "scored.jsonl"
    assert main(["score", "--model", str(tmp_path / "model"), "--input",
                 str(tmp_path / "in.jsonl"), "-o", str(scored), "--dtype", "fp32",
                 "--no-progress"]) == 0
    capsys.readouterr()
    rows = [json.loads(line) for line in scored.read_text().splitlines()]
    assert rows[1]["step_scores"][0] is not None and rows[1]["step_scores"][1:] == [None, None]
    for key in ("step_scores", "score"):
        out = run_json(capsys, ["eval", "bon", "--samples", str(scored), "--score-key", key,
                                "--n", "1,2", "--pool-size", "none", "--no-majority",
                                "--json"])
        # best-of-2 never picks the cut (correct) solution: it scores 0.0 under prod
        assert out["accuracy"] == [0.5, 0.0] and out["pass_at_n"] == [0.5, 1.0]


def test_eval_bon_64_sample_pool_is_not_padded_unless_asked(capsys, tmp_path):
    # one problem, 64 samples, only the top-scored one correct
    samples = tmp_path / "s.jsonl"
    samples.write_text("".join(
        json.dumps({"problem": "p", "answer": str(i), "is_correct": i == 63,
                    "prm_score": (i + 1) / 64}) + "\n" for i in range(64)))
    argv = ["eval", "bon", "--samples", str(samples), "--score-key", "prm_score",
            "--n", "1,64", "--no-majority", "--json"]
    out = run_json(capsys, argv)
    assert out["accuracy"] == pytest.approx([1 / 64, 1.0])
    assert out["pool_size"] is None and out["padding"] is None
    assert main(argv + ["--pool-size", "1860"]) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    # padded to 1,860 slots, a draw of 64 holds the correct sample with probability 64/1860
    assert out["accuracy"] == pytest.approx([1 / 1860, 64 / 1860])
    assert out["padding"] == {"pool_size": 1860, "problems_padded": 1, "empty_slots": 1796}
    assert "padded to 1860 slots" in captured.err


def test_eval_bon_missing_score_names_file_and_line(capsys):
    assert main(["eval", "bon", "--samples", SAMPLES, "--score-key", "my_prm", "--json"]) == 2
    assert "scored_samples.jsonl:1: field 'my_prm'" in capsys.readouterr().err


def test_eval_processbench_predictions(capsys, tmp_path):
    preds = tmp_path / "p.jsonl"
    rows = [("gsm8k-0", 1), ("gsm8k-1", 1), ("gsm8k-2", -1), ("gsm8k-3", 0), ("math-0", 2),
            ("math-1", -1)]
    preds.write_text("".join(json.dumps({"id": i, "prediction": p}) + "\n" for i, p in rows))
    out = run_json(capsys, ["eval", "processbench", "--predictions", str(preds), "--data",
                            str(FIXTURES / "processbench"), "--json",
                            "-o", str(tmp_path / "m.json")])
    assert out["gsm8k"]["f1"] == 0.5 and out["average_f1"] == pytest.approx(0.75)
    assert json.loads((tmp_path / "m.json").read_text()) == out


def test_eval_processbench_step_scores_and_threshold(capsys):
    out = run_json(capsys, ["eval", "processbench", "--predictions",
                            str(FIXTURES / "processbench_scores.jsonl"), "--data",
                            str(FIXTURES / "processbench"), "--threshold", "0.4", "--json"])
    assert out["threshold"] == 0.4 and out["math"]["f1"] == 0.0


def test_eval_processbench_null_step_score_from_prmkit_score_is_flagged(capsys, tmp_path):
    # `prmkit score` writes null for a step cut by max_length: under prmkit's rules it
    # counts as 0.0, flagged; the benchmark's rules leave it unjudged
    lines = (FIXTURES / "processbench_scores.jsonl").read_text().splitlines()
    lines[0] = json.dumps({"id": "gsm8k-0", "step_scores": [0.9, None, 0.1]})  # label 1
    lines[2] = json.dumps({"id": "gsm8k-2", "step_scores": [0.9, None]})  # label -1
    preds = tmp_path / "scores.jsonl"
    preds.write_text("\n".join(lines) + "\n")
    argv = ["eval", "processbench", "--predictions", str(preds), "--data",
            str(FIXTURES / "processbench"), "--threshold", "0.4", "--json"]
    out = run_json(capsys, [*argv, "--rules", "prmkit"])
    # flagged at step 1: gsm8k-0 is found (1 of 2 erroneous), gsm8k-2 is wrongly flagged
    # (1 of 2 correct); read as "no error", these would be 0.0 and 1.0
    assert out["gsm8k"] == {"error_acc": 0.5, "correct_acc": 0.5, "f1": 0.5,
                            "n_error": 2, "n_correct": 2}
    assert (out["rules"], out["unscored_steps"]) == ("prmkit", 2)
    out = run_json(capsys, argv)
    # not judged: gsm8k-0 is flagged at its scored step 2 (wrong), gsm8k-2 kept (right);
    # gsm8k-1 ([0.8, 0.3], label 0) and gsm8k-3 ([0.4], label -1) are missed / flagged
    assert out["gsm8k"] == {"error_acc": 0.0, "correct_acc": 0.5, "f1": 0.0,
                            "n_error": 2, "n_correct": 2}
    assert out["rules"] == "benchmark"


def test_eval_processbench_bad_prediction_names_line(capsys, tmp_path):
    preds = tmp_path / "p.jsonl"
    preds.write_text('{"id": "gsm8k-0", "prediction": 1}\n{"id": "gsm8k-1", "prediction": "x"}\n')
    argv = ["eval", "processbench", "--predictions", str(preds), "--data",
            str(FIXTURES / "processbench"), "--json"]
    assert main(argv) == 2
    assert "p.jsonl:2: field 'prediction'" in capsys.readouterr().err


def test_eval_prmbench_prediction_marked_invalid_is_skipped_and_the_rules_reported(
        capsys, tmp_path):
    from test_eval_benchmarks import PRMBENCH_SCORES

    preds = tmp_path / "p.jsonl"
    lines = [{"id": k, "step_scores": v} for k, v in PRMBENCH_SCORES.items()]
    lines[1] = {"id": lines[1]["id"], "validity": False}  # counterfactual: skipped
    preds.write_text("".join(json.dumps(line) + "\n" for line in lines))
    argv = ["eval", "prmbench", "--predictions", str(preds), "--data",
            str(FIXTURES / "prmbench.jsonl")]
    out = run_json(capsys, [*argv, "--json"])
    assert out["items"] == {"evaluated": 3, "missing": 0, "invalid": 1}
    # redundency TP 2, FP 1, TN 1 and multi_solutions TP 1, FN 1 remain
    assert out["overall"]["counts"] == {"TP": 3, "FP": 1, "TN": 1, "FN": 1}
    assert out["rules"] == "benchmark"
    assert main([*argv, "--rules", "prmkit"]) == 2
    assert "is marked invalid (--rules prmkit" in capsys.readouterr().err
    assert main(argv) == 0
    assert "(threshold 0.5, benchmark rules)" in capsys.readouterr().out


def test_eval_prmbench_and_steps(capsys, tmp_path):
    from test_eval_benchmarks import PRMBENCH_SCORES

    preds = tmp_path / "p.jsonl"
    preds.write_text("".join(json.dumps({"id": k, "step_scores": v}) + "\n"
                             for k, v in PRMBENCH_SCORES.items()))
    out = run_json(capsys, ["eval", "prmbench", "--predictions", str(preds), "--data",
                            str(FIXTURES / "prmbench.jsonl"), "--json"])
    assert out["prmscore"] == pytest.approx(0.5 * 8 / 11 + 0.5 * 4 / 7)

    steps = tmp_path / "s.jsonl"
    steps.write_text('{"step_scores": [0.9, 0.2], "labels": [1, 0]}\n'
                     '{"step_scores": [0.6, 0.8], "labels": [1, null]}\n')
    out = run_json(capsys, ["eval", "steps", "--predictions", str(steps), "--json",
                            "--plot", str(tmp_path / "cal.png")])
    assert out["auroc"] == 1.0 and out["n_steps"] == 3
    assert (tmp_path / "cal.png").exists()


def test_eval_steps_null_step_score_counts_as_zero(capsys, tmp_path):
    steps = tmp_path / "s.jsonl"
    steps.write_text('{"step_scores": [0.9, null], "labels": [1, 0]}\n'
                     '{"step_scores": [0.3, 0.8], "labels": [1, 1]}\n')
    out = run_json(capsys, ["eval", "steps", "--predictions", str(steps), "--json"])
    # null -> 0.0 < 0.5: predicted wrong, as labelled; 0.3 is the one miss
    assert out["n_steps"] == 4 and out["accuracy"] == 0.75 and out["auroc"] == 1.0
    assert out["first_error_accuracy"] == 0.5  # the first solution's error is at step 1


def test_eval_processbench_model_folder_without_config_is_a_clear_error(capsys, tmp_path):
    argv = ["eval", "processbench", "--model", str(tmp_path), "--data",
            str(FIXTURES / "processbench"), "--json"]
    assert main(argv) == 2
    assert "prmkit_config.json" in capsys.readouterr().err
