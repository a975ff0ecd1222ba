"""ProcessBench and PRMBench metrics on hand-computed fixtures and the real files."""

import json
from pathlib import Path

import pytest

from prmkit.errors import DataError, PrmkitError
from prmkit.evaluation import prmbench
from prmkit.evaluation import processbench as pb

FIXTURES = Path(__file__).parent / "fixtures" / "eval"


def fixture_scores() -> dict[str, list[float]]:
    lines = (FIXTURES / "processbench_scores.jsonl").read_text().splitlines()
    return {r["id"]: r["step_scores"] for r in map(json.loads, lines)}


def test_first_error_index():
    assert pb.first_error_index([0.9, 0.4, 0.1], 0.5) == 1
    assert pb.first_error_index([0.9, 0.5], 0.5) == -1  # strictly below the threshold
    assert pb.first_error_index([], 0.5) == -1


def test_processbench_null_step_score_is_flagged_as_the_first_error():
    # a step cut by max_length (null from `prmkit score`) counts as NULL_STEP_SCORE = 0.0
    assert pb.first_error_index([0.9, None, 0.1], 0.5) == 1
    assert pb.first_error_index([0.9, 0.8, None], 0.5) == 2
    assert pb.threshold_predictions({"a": [None], "b": [0.9]}, 0.5) == {"a": 0, "b": -1}


def test_threshold_grid_search_flags_null_steps():
    items = {"s": [pb.ProcessBenchItem(id="a", problem="p", steps=["x", "y"], label=1),
                   pb.ProcessBenchItem(id="b", problem="p", steps=["x", "y"], label=-1)]}
    # a's wrong step was cut (null = 0.0): at 0.8 it is flagged and b is left alone
    threshold, f1 = pb.choose_threshold(items, {"a": [0.9, None], "b": [0.9, 0.8]})
    assert (threshold, f1) == (0.8, 1.0)


def test_processbench_by_hand_and_unweighted_average():
    items = pb.load_processbench(FIXTURES / "processbench")
    res = pb.evaluate(items, pb.threshold_predictions(fixture_scores(), 0.5))
    assert res["gsm8k"] == {"error_acc": 0.5, "correct_acc": 0.5, "f1": 0.5,
                            "n_error": 2, "n_correct": 2}
    assert res["math"]["f1"] == 1.0
    # plain mean of subset F1s, not the sample-weighted (4 * 0.5 + 2 * 1) / 6
    assert res["average_f1"] == pytest.approx(0.75)


def test_threshold_grid_search_picks_the_best_f1():
    items = pb.load_processbench(FIXTURES / "processbench")
    threshold, f1 = pb.choose_threshold(items, fixture_scores())
    assert (threshold, f1) == (0.55, pytest.approx(0.75))


def test_missing_prediction_is_an_error():
    items = pb.load_processbench(FIXTURES / "processbench")
    with pytest.raises(PrmkitError, match="no prediction"):
        pb.evaluate(items, {"gsm8k-0": 1})


def test_bad_processbench_file_names_the_item(tmp_path):
    (tmp_path / "gsm8k.json").write_text('[{"id": "x", "problem": "p", "steps": ["a"]}]')
    with pytest.raises(DataError, match=r"gsm8k.json:1: field 'label'"):
        pb.load_processbench(tmp_path)


@pytest.mark.slow
def test_always_no_error_baseline_scores_zero_on_real_processbench(shared_data):
    items = pb.load_processbench(shared_data / "processbench")
    assert set(items) == set(pb.SUBSETS)
    assert [len(items[s]) for s in pb.SUBSETS] == [400, 1000, 1000, 1000]
    res = pb.evaluate(items, {it.id: -1 for sub in items.values() for it in sub})
    for s in pb.SUBSETS:
        assert res[s]["error_acc"] == 0.0 and res[s]["correct_acc"] == 1.0
        assert res[s]["f1"] == 0.0
    assert res["average_f1"] == 0.0


# PRMBench fixture: predicted validity (score > 0.5) per item, checked by hand:
# redundency [T F T T] vs errors {2,3}: TP2 FP1 TN1 FN0; counterfactual [F F T] vs {2}:
# TP1 TN1 FN1; multi_solutions [T F]: TP1 FN1; correct [T T F]: TP2 FN1 (not in overall).
PRMBENCH_SCORES = {
    "redundency_prm_test_p1_0": [0.9, 0.2, 0.7, 0.6],
    "counterfactual_prm_test_p1_1": [0.4, 0.3, 0.9],
    "multi_solutions_prm_test_p1_0": [0.8, 0.3],
    "correct_prm_test_p1_0": [0.9, 0.9, 0.1],
}


def test_prmbench_items_follow_the_official_loader():
    items = prmbench.load_prmbench([FIXTURES / "prmbench.jsonl"])
    assert sorted(it.id for it in items) == sorted(PRMBENCH_SCORES)  # duplicate dropped
    correct = next(it for it in items if it.classification == "correct")
    assert correct.steps == ["a", "b", "c"] and correct.error_steps == []


def test_prmscore_by_hand():
    items = prmbench.load_prmbench([FIXTURES / "prmbench.jsonl"])
    res = prmbench.evaluate(items, prmbench.valid_from_scores(PRMBENCH_SCORES))
    overall = res["overall"]
    assert overall["counts"] == {"TP": 4, "FP": 1, "TN": 2, "FN": 2}
    assert overall["f1"] == pytest.approx(8 / 11)
    assert overall["negative_f1"] == pytest.approx(4 / 7)
    assert res["prmscore"] == pytest.approx(0.5 * 8 / 11 + 0.5 * 4 / 7)
    assert res["classes"]["redundency"]["prmscore"] == pytest.approx(0.5 * 0.8 + 0.5 * 2 / 3)
    assert res["classes"]["multi_solutions"]["negative_f1"] is None
    assert res["classes"]["multi_solutions"]["prmscore"] == pytest.approx(2 / 3)
    assert res["classes"]["correct"]["counts"] == {"TP": 2, "FP": 0, "TN": 0, "FN": 1}
    assert overall["first_error_acc"] == 1.0
    assert res["categories"]["simplicity"] == pytest.approx(0.5 * 0.8 + 0.5 * 2 / 3)


def test_prmbench_null_step_score_is_invalid():
    # a step cut by max_length (null from `prmkit score`) counts as NULL_STEP_SCORE = 0.0
    assert prmbench.valid_from_scores({"a": [0.9, None, 0.1]}) == {"a": [True, False, False]}


def test_prmbench_step_count_mismatch_is_an_error():
    items = prmbench.load_prmbench([FIXTURES / "prmbench.jsonl"])
    bad = dict(PRMBENCH_SCORES) | {"counterfactual_prm_test_p1_1": [0.9]}
    with pytest.raises(PrmkitError, match="1 step predictions for 3 steps"):
        prmbench.evaluate(items, prmbench.valid_from_scores(bad))


@pytest.mark.slow
def test_prmbench_real_files_load_and_all_valid_baseline(shared_data):
    items = prmbench.load_prmbench([shared_data / "prmbench"])
    classes = {it.classification for it in items}
    assert {"correct", "multi_solutions", "circular"} <= classes
    res = prmbench.evaluate(items, {it.id: [True] * len(it.steps) for it in items})
    # Predicting every step valid finds no error step: negative F1 is 0 in every class.
    assert res["overall"]["negative_f1"] == 0.0
    assert res["prmscore"] == pytest.approx(0.5 * res["overall"]["f1"])
