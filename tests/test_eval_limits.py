"""`--limit N` on eval processbench / prmbench / steps (a seeded, stratified choice),
undefined metrics reported as null with a warning, and first-error accuracy from a model."""

import json
import logging
import re
from collections import Counter
from pathlib import Path

import pytest

from prmkit.cli import main
from prmkit.evaluation import prmbench
from prmkit.evaluation import processbench as pb
from prmkit.evaluation.subsets import stratified_subset

FIXTURES = Path(__file__).parent / "fixtures" / "eval"


def _processbench(tmp_path, n_error=30, n_correct=10) -> Path:
    """ProcessBench-like subsets that list their erroneous items first, as the real ones."""
    folder = tmp_path / "pb"
    folder.mkdir()
    for subset in ("gsm8k", "math"):
        items = [{"id": f"{subset}-{i}", "problem": "p", "steps": ["a", "b", "c"],
                  "label": (i % 3) if i < n_error else -1, "final_answer_correct": i >= n_error}
                 for i in range(n_error + n_correct)]
        (folder / f"{subset}.json").write_text(json.dumps(items))
    return folder


def _flag_nothing(tmp_path, folder) -> Path:
    preds = tmp_path / "preds.jsonl"
    ids = [it["id"] for f in sorted(folder.glob("*.json")) for it in json.loads(f.read_text())]
    preds.write_text("".join(json.dumps({"id": i, "prediction": -1}) + "\n" for i in ids))
    return preds


def test_processbench_first_items_without_a_correct_one_give_a_null_f1_and_a_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="prmkit.evaluation"):
        got = pb.subset_metrics([1, 0, 2], [1, 1, -1], "gsm8k")
    assert got["correct_acc"] is None and got["f1"] is None and got["error_acc"] == 1 / 3
    assert "ProcessBench gsm8k F1 is undefined (reported as null)" in caplog.text
    assert "hold no correct solution" in caplog.text
    # a real zero stays zero: both kinds present, every prediction wrong
    assert pb.subset_metrics([1, -1], [0, 0])["f1"] == 0.0


def test_eval_processbench_first_n_style_data_prints_null_not_zero(tmp_path, capsys, caplog):
    folder = _processbench(tmp_path, n_error=4, n_correct=0)
    out_json = tmp_path / "m.json"
    with caplog.at_level(logging.WARNING, logger="prmkit.evaluation"):
        assert main(["eval", "processbench", "--predictions",
                     str(_flag_nothing(tmp_path, folder)), "--data", str(folder),
                     "-o", str(out_json)]) == 0
    captured = capsys.readouterr()
    result = json.loads(out_json.read_text())
    assert result["gsm8k"]["f1"] is None and result["gsm8k"]["correct_acc"] is None
    assert result["average_f1"] is None
    assert "ProcessBench math F1 is undefined" in caplog.text
    assert captured.out.splitlines()[:2] == [
        "ProcessBench average F1 n/a:",
        "  gsm8k          F1    n/a  (erroneous found 0.0% of 4, correct kept n/a of 0)"]


def test_eval_processbench_limit_keeps_both_kinds_in_every_subset(tmp_path, capsys):
    folder = _processbench(tmp_path)
    preds = _flag_nothing(tmp_path, folder)
    argv = ["eval", "processbench", "--predictions", str(preds), "--data", str(folder),
            "--limit", "8", "--json"]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    for subset in ("gsm8k", "math"):  # 30 erroneous then 10 correct: 3 + 1 of each
        assert (result[subset]["n_error"], result[subset]["n_correct"]) == (3, 1)
        # flagging nothing keeps every correct item and finds no error: a defined F1 of 0
        assert result[subset]["correct_acc"] == 1.0 and result[subset]["f1"] == 0.0
    assert result["limit"] == {"items": 8, "of": 80, "seed": 0}
    assert main(argv) == 0 and json.loads(capsys.readouterr().out) == result  # seeded
    assert main(argv + ["--seed", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["limit"]["items"] == 8


def test_stratified_subset_is_proportional_seeded_and_keeps_order():
    items = [("a", i) for i in range(60)] + [("b", i) for i in range(30)] + [("c", 0)]
    got = stratified_subset(items, 10, lambda x: x[0], seed=3)
    assert Counter(k for k, _ in got) == {"a": 6, "b": 3, "c": 1}  # the rare one kept
    assert got == sorted(got, key=items.index)
    assert got == stratified_subset(items, 10, lambda x: x[0], seed=3)
    assert got != stratified_subset(items, 10, lambda x: x[0], seed=4)
    assert len(stratified_subset(items, 2, lambda x: x[0])) == 2  # fewer than strata
    assert stratified_subset(items, None, lambda x: x[0]) == items


def test_prmbench_limit_is_stratified_by_class_and_an_empty_class_f1_is_null(caplog):
    items = prmbench.load_prmbench([FIXTURES / "prmbench.jsonl"])
    classes = Counter(it.classification for it in items)
    kept = prmbench.limit_items(items, len(classes), seed=0)
    assert Counter(it.classification for it in kept) == {c: 1 for c in classes}
    # every step of the only item is an error step: the valid-step F1 has nothing to count
    item = prmbench.PrmBenchItem("x", "q", ["a", "b"], [1, 2], "circular")
    with caplog.at_level(logging.WARNING, logger="prmkit.evaluation"):
        got = prmbench.evaluate([item], {"x": [False, False]}, "prmkit")
    assert got["classes"]["circular"]["f1"] is None
    assert got["classes"]["circular"]["negative_f1"] == 1.0
    assert got["prmscore"] is None and got["categories"]["simplicity"] is None
    assert "PRMBench circular F1 is undefined" in caplog.text


def test_eval_steps_limit_keeps_solutions_with_and_without_errors(tmp_path, capsys):
    rows = [{"step_scores": [0.9, 0.1], "labels": [1, 0]}] * 20 + \
        [{"step_scores": [0.9, 0.8], "labels": [1, 1]}] * 5
    steps = tmp_path / "s.jsonl"
    steps.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["eval", "steps", "--predictions", str(steps), "--limit", "5"]) == 0
    out = capsys.readouterr().out
    # 3 with an error, 2 without (1 each, the other 3 by largest remainder): 10 steps
    assert out.strip() == ("10 labelled steps in 5 solutions: AUROC 1.000, accuracy 100.0% "
                           "at threshold 0.5, ECE 0.120, first-error accuracy 100.0%")


def test_eval_steps_help_promises_first_error_accuracy(capsys):
    # the output has it, from predictions (above) and from a model (test_eval_labelled)
    with pytest.raises(SystemExit):
        main(["eval", "steps", "--help"])
    assert "first-error accuracy" in " ".join(re.sub(r"-\n\s*", "-",
                                                     capsys.readouterr().out).split())
