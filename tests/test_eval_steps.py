import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from prmkit.evaluation.plots import plot_bon_curves, plot_calibration
from prmkit.evaluation.report import write_report
from prmkit.evaluation.steps import (
    accuracy_at,
    auroc,
    calibration_bins,
    expected_calibration_error,
    first_error_accuracy,
    step_metrics,
)


def test_auroc_by_hand_with_ties():
    # positives 0.8, 0.5; negatives 0.5, 0.1: pairs (0.8>0.5, 0.8>0.1, 0.5=0.5, 0.5>0.1)
    assert auroc([0.8, 0.5, 0.5, 0.1], [1, 1, 0, 0]) == pytest.approx(3.5 / 4)
    assert np.isnan(auroc([0.1, 0.2], [1, 1]))


def test_auroc_matches_scikit_learn_on_tied_scores():
    rng = np.random.default_rng(0)
    s = rng.integers(0, 10, 500) / 10
    y = (rng.random(500) < s).astype(int)
    assert auroc(s, y) == pytest.approx(roc_auc_score(y, s))


def test_accuracy_and_ece_by_hand():
    p = [0.95, 0.95, 0.25, 0.25]
    y = [1, 0, 0, 0]
    assert accuracy_at(p, y, 0.5) == 0.75
    # bin 9: conf 0.95, acc 0.5; bin 2: conf 0.25, acc 0 -> 0.5*0.45 + 0.5*0.25
    assert expected_calibration_error(p, y, 10) == pytest.approx(0.35)
    bins = calibration_bins([1.0, 0.0], [1, 0], 10)
    assert bins["count"][9] == 1 and bins["count"][0] == 1  # 1.0 falls in the last bin


def test_first_error_accuracy():
    scores = [[0.9, 0.2], [0.9, 0.9], [0.1, 0.9]]
    labels = [[1, 0], [1, 0], [1, 1]]
    assert first_error_accuracy(scores, labels, 0.5) == pytest.approx(1 / 3)


def test_step_metrics_skips_unlabelled_steps():
    res = step_metrics([[0.9, 0.2, 0.7]], [[1, 0, None]], threshold=0.5)
    assert res["n_steps"] == 2 and res["accuracy"] == 1.0 and res["first_error_accuracy"] == 1.0


def test_plots_and_report(tmp_path):
    curve = plot_bon_curves(
        {"PRM": {"n": [1, 2, 4], "accuracy": [0.3, 0.4, 0.5], "std": [0.01, 0.02, 0.01]},
         "majority": {"n": [1, 2, 4], "accuracy": [0.3, 0.35, 0.4], "std": []}},
        tmp_path / "bon.png",
    )
    cal = plot_calibration(calibration_bins([0.1, 0.9, 0.8], [0, 1, 0]), tmp_path / "cal.png")
    assert curve.read_bytes()[:4] == b"\x89PNG" and cal.stat().st_size > 1000
    paths = write_report(tmp_path, {"prmscore": 0.61, "bon": {"n": [1, 2]}},
                         {"Best-of-N": curve, "Calibration": cal})
    md = paths["markdown"].read_text()
    assert "| prmscore | 0.6100 |" in md and "![Best-of-N](bon.png)" in md
    assert '<img src="cal.png"' in paths["html"].read_text()
    assert '"prmscore": 0.61' in paths["json"].read_text()
