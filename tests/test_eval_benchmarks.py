"""ProcessBench and PRMBench metrics on hand-computed fixtures and the real files."""

import json
from pathlib import Path

import numpy as np
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
    assert pb.first_error_index([], 0.5) == -1
    assert pb.first_error_index([0.9, 0.5], 0.5, rules="prmkit") == -1  # strictly below


def test_processbench_score_at_the_threshold_is_flagged_as_by_the_official_script():
    """run_eval_prm_trl.py takes the argmax of the two classes' logits, a tie going to
    class 0 (the error): a step is kept only when P(correct) is above 0.5."""
    assert pb.first_error_index([0.9, 0.5, 0.1], 0.5) == 1
    assert pb.first_error_index([0.9, 0.50001], 0.5) == -1
    assert pb.threshold_predictions({"a": [0.7, 0.7]}, 0.7) == {"a": 0}


def test_processbench_step_without_a_score_is_not_judged_by_the_benchmark_rules():
    """The official script scores every step (it cuts none); a step prmkit's scorer cut at
    the model's maximum length (null) is not judged: the first flagged scored step, or -1."""
    assert pb.first_error_index([0.9, None, 0.1], 0.5) == 2
    assert pb.first_error_index([0.9, 0.8, None], 0.5) == -1
    assert pb.threshold_predictions({"a": [None], "b": [0.3]}, 0.5) == {"a": -1, "b": 0}
    assert pb.unscored_steps({"a": [None, None], "b": [0.3]}) == 2


def test_processbench_null_step_score_is_flagged_as_the_first_error():
    # prmkit's rules: a step cut by max_length (null) counts as NULL_STEP_SCORE = 0.0
    assert pb.first_error_index([0.9, None, 0.1], 0.5, rules="prmkit") == 1
    assert pb.first_error_index([0.9, 0.8, None], 0.5, rules="prmkit") == 2
    assert pb.threshold_predictions({"a": [None], "b": [0.9]}, 0.5,
                                    rules="prmkit") == {"a": 0, "b": -1}


def test_threshold_grid_search_flags_null_steps():
    items = {"s": [pb.ProcessBenchItem(id="a", problem="p", steps=["x", "y"], label=1),
                   pb.ProcessBenchItem(id="b", problem="p", steps=["x", "y"], label=-1)]}
    scores = {"a": [0.9, None], "b": [0.9, 0.8]}
    # prmkit's rules: a's wrong step was cut (null = 0.0): at 0.8 it is flagged, b is not
    assert pb.choose_threshold(items, scores, rules="prmkit") == (0.8, 1.0)
    # the benchmark's: a's cut step is never judged, so a is found at no threshold; b is
    # kept up to the highest threshold below its scores, the smallest best one
    assert pb.choose_threshold(items, scores) == (float(np.nextafter(0.8, -np.inf)), 0.0)


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
    threshold, f1 = pb.choose_threshold(items, fixture_scores(), rules="prmkit")
    assert (threshold, f1) == (0.55, pytest.approx(0.75))
    # "score <= t" flags: the same cut lies at the observed value below 0.55
    threshold, f1 = pb.choose_threshold(items, fixture_scores())
    assert (threshold, f1) == (0.45, pytest.approx(0.75))


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
    res = prmbench.evaluate(items, prmbench.valid_from_scores(PRMBENCH_SCORES), "prmkit")
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
    # prmkit's rules: a step cut by max_length (null) counts as NULL_STEP_SCORE = 0.0
    assert prmbench.valid_from_scores({"a": [0.9, None, 0.1]}, rules="prmkit") == {
        "a": [True, False, False]}


def test_prmbench_step_count_mismatch_is_an_error():
    items = prmbench.load_prmbench([FIXTURES / "prmbench.jsonl"])
    bad = dict(PRMBENCH_SCORES) | {"counterfactual_prm_test_p1_1": [0.9]}
    with pytest.raises(PrmkitError, match="1 step predictions for 3 steps .*--rules benchmark"):
        prmbench.evaluate(items, prmbench.valid_from_scores(bad, rules="prmkit"), "prmkit")


# PRMBench by its toolkit's own definition (mr_eval/tasks/prmtest_classified/task.py and
# the table notebook): p = TP/(TP+FP), r = TP/(TP+FN), each -1 with a zero denominator;
# F1 = 2pr/(p+r), -1 where p + r = 0; the negative F1 the same over TN, FN, FP;
# PRMScore = max(0, F1/2 + negative F1/2).
def prmbench_f1(tp, fp, fn):
    p = tp / (tp + fp) if tp + fp else -1
    r = tp / (tp + fn) if tp + fn else -1
    return 2 * p * r / (p + r) if p + r != 0 else -1


def prmbench_score(tp, fp, tn, fn):
    return max(0, 0.5 * prmbench_f1(tp, fp, fn) + 0.5 * prmbench_f1(tn, fn, fp))


def test_prmbench_class_whose_negative_f1_is_undefined_scores_zero_as_in_the_toolkit():
    """[ok, ok, err] scored [0.9, 0.1, 0.9]: TP 1, FN 1, FP 1, TN 0. The error class has
    p = 0/1 and r = 0/1, so its F1 is -1 and PRMScore = max(0, 0.25 - 0.5) = 0 (prmkit's
    rules: negative F1 0, PRMScore 0.25)."""
    item = prmbench.PrmBenchItem("circular_0", "q", ["a", "b", "c"], [3], "circular")
    valid = prmbench.valid_from_scores({"circular_0": [0.9, 0.1, 0.9]})
    got = prmbench.evaluate([item], valid)
    assert got["classes"]["circular"]["negative_f1"] == -1
    assert got["classes"]["circular"]["prmscore"] == prmbench_score(1, 1, 0, 1) == 0
    assert got["categories"]["simplicity"] == 0 and got["rules"] == "benchmark"
    strict = prmbench.evaluate([item], valid, "prmkit")
    assert strict["classes"]["circular"]["prmscore"] == pytest.approx(0.25)


def test_prmbench_scorer_that_never_flags_an_error_by_the_toolkits_rules():
    """Every step valid on the fixture (6 steps without and 3 with an error outside the
    correct class): no error step is predicted, so the negative precision is -1 (0/0), its
    recall 0/3 = 0 and the negative F1 2 * -1 * 0 / (-1 + 0) = 0, not -1: the toolkit's
    PRMScore is F1 / 2 = 0.4 (p = 6/9, r = 1, F1 = 0.8), as prmkit's."""
    items = prmbench.load_prmbench([FIXTURES / "prmbench.jsonl"])
    got = prmbench.evaluate(items, {it.id: [True] * len(it.steps) for it in items})
    assert got["overall"]["counts"] == {"TP": 6, "FP": 3, "TN": 0, "FN": 0}
    assert got["overall"]["negative_f1"] == 0
    assert got["prmscore"] == pytest.approx(prmbench_score(6, 3, 0, 0)) == pytest.approx(0.4)
    # multi_solutions has no error step: negative p and r both -1 (0/0), F1 2 * 1 / -2 =
    # -1; its PRMScore is its F1 alone, 1.0
    multi = got["classes"]["multi_solutions"]
    assert (multi["negative_f1"], multi["prmscore"]) == (-1, 1.0)


def test_prmbench_steps_cut_at_the_maximum_length_are_left_out_of_the_counts():
    """[ok, err, ok, ok] scored [0.9, 0.1, null, null]: PRMBench counts the two steps the
    model scored (TP 1, TN 1), PRMScore 1.0; prmkit's rules count the nulls as invalid
    (FN 2), PRMScore 0.5 * 0.5 + 0.5 * 0.5 = 0.5."""
    item = prmbench.PrmBenchItem("counterfactual_0", "q", list("abcd"), [2], "counterfactual")
    scores = {"counterfactual_0": [0.9, 0.1, None, None]}
    got = prmbench.evaluate([item], prmbench.valid_from_scores(scores))
    assert got["overall"]["counts"] == {"TP": 1, "FP": 0, "TN": 1, "FN": 0}
    assert got["prmscore"] == prmbench_score(1, 0, 1, 0) == 1.0
    strict = prmbench.evaluate([item], prmbench.valid_from_scores(scores, rules="prmkit"),
                               "prmkit")
    assert strict["prmscore"] == pytest.approx(0.5)


def test_prmbench_counts_the_predictions_there_are_when_their_number_differs():
    """The toolkit visits the predicted labels: fewer than the steps count only those, more
    count the extra ones as steps without an error."""
    items = [prmbench.PrmBenchItem("confidence_0", "q", list("abc"), [2], "confidence"),
             prmbench.PrmBenchItem("confidence_1", "q", list("ab"), [1], "confidence")]
    got = prmbench.evaluate(items, {"confidence_0": [True, False],
                                    "confidence_1": [False, True, True, False]})
    # item 0: TP 1, TN 1; item 1: TN 1, then three non-error steps: TP 2, FN 1
    assert got["overall"]["counts"] == {"TP": 3, "FP": 0, "TN": 2, "FN": 1}
    assert got["prmscore"] == pytest.approx(prmbench_score(3, 0, 2, 1))
    assert got["overall"]["first_error_acc"] == 1.0


def test_prmbench_tolerates_fewer_than_five_missing_items_and_skips_invalid_ones():
    items = [prmbench.PrmBenchItem(f"deception_{i}", "q", ["a", "b"], [2], "deception")
             for i in range(8)]
    preds = {f"deception_{i}": [True, False] for i in range(4)} | {"deception_4": None}
    got = prmbench.evaluate(items, preds)  # 3 missing, 1 marked invalid
    assert got["items"] == {"evaluated": 4, "missing": 3, "invalid": 1}
    assert got["overall"]["counts"] == {"TP": 4, "FP": 0, "TN": 4, "FN": 0}
    with pytest.raises(PrmkitError, match="no prediction for 5 PRMBench items.*fewer than 5"):
        prmbench.evaluate(items, {f"deception_{i}": [True, False] for i in range(3)})
    with pytest.raises(PrmkitError, match="no prediction for PRMBench item 'deception_5'"):
        prmbench.evaluate(items, preds | {"deception_4": [True, False]}, "prmkit")
    with pytest.raises(PrmkitError, match="'deception_4' is marked invalid"):
        prmbench.evaluate(items, {f"deception_{i}": [True, False] for i in range(8)}
                          | {"deception_4": None}, "prmkit")


@pytest.mark.slow
def test_prmbench_real_files_load_and_all_valid_baseline(shared_data):
    items = prmbench.load_prmbench([shared_data / "prmbench"])
    classes = {it.classification for it in items}
    assert {"correct", "multi_solutions", "circular"} <= classes
    res = prmbench.evaluate(items, {it.id: [True] * len(it.steps) for it in items})
    # Predicting every step valid finds no error step: negative F1 is 0 in every class.
    assert res["overall"]["negative_f1"] == 0.0
    assert res["prmscore"] == pytest.approx(0.5 * res["overall"]["f1"])
