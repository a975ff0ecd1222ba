import json
from pathlib import Path

from prmkit.cli import main

SAMPLES = str(Path(__file__).parent / "fixtures" / "eval" / "scored_samples.jsonl")


def select(tmp_path, *extra) -> list[dict]:
    out = tmp_path / "chosen.jsonl"
    assert main(["select", "--input", SAMPLES, "--grader", "exact", "-o", str(out), "--overwrite",
                 *extra]) == 0
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_select_best_skips_answerless_samples(tmp_path):
    chosen = select(tmp_path, "--score-key", "prm_score")
    # p1: the 0.99 sample has no answer, so 0.9 wins; p2: 0.8
    assert [c["prm_score"] for c in chosen] == [0.9, 0.8]
    assert chosen[0]["selection"]["candidates"] == 4


def test_select_majority_and_weighted(tmp_path):
    chosen = select(tmp_path, "--score-key", "prm_score", "--method", "majority")
    assert chosen[1]["answer"] == "8"  # two votes for 8 against one for 7
    chosen = select(tmp_path, "--score-key", "orm_score", "--method", "weighted")
    assert chosen[1]["answer"] == "8" and chosen[1]["orm_score"] == 0.7  # 1.0 vs 0.1


def test_select_keeps_existing_output_on_error(tmp_path, capsys):
    out = tmp_path / "chosen.jsonl"
    out.write_text("previous\n")
    argv = ["select", "--input", SAMPLES, "--score-key", "missing", "-o", str(out)]
    assert main(argv) == 2
    assert "exists: pass --overwrite to replace it" in capsys.readouterr().err
    assert main([*argv, "--overwrite"]) == 2
    assert "field 'missing': no such score field" in capsys.readouterr().err
    assert out.read_text() == "previous\n"


def test_select_best_never_picks_a_solution_with_null_steps(tmp_path):
    samples = tmp_path / "scored.jsonl"
    samples.write_text(
        '{"problem": "p", "answer": "1", "is_correct": false, "step_scores": [0.1, 0.2]}\n'
        '{"problem": "p", "answer": "2", "is_correct": true, "step_scores": [0.99, null]}\n')
    out = tmp_path / "chosen.jsonl"
    assert main(["select", "--input", str(samples), "--score-key", "step_scores",
                 "--aggregation", "min", "--grader", "exact", "-o", str(out)]) == 0
    chosen = json.loads(out.read_text())
    assert chosen["answer"] == "1" and chosen["selection"]["score"] == 0.1
