"""The rules the small-scale experiments choose by, on hand-built inputs: PRM_large's
threshold (first wrong step found exactly most often), the N that best-of-N is compared
at (the control's dev peak), and paired differences with a bootstrap interval."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from prmkit.active.efficiency import bootstrap_difference
from prmkit.demo.core.small_models import peak_n
from prmkit.demo.core.thresholds import choose_threshold, label_agreement


def _check(first_error: int, final_correct: bool):
    return SimpleNamespace(first_error=first_error, process_correct=first_error < 0,
                           final_correct=final_correct)


# Solution A: wrong at step 1 (P(wrong) 0.4 there, 0.1 before); B: right, its least sure
# step at P(wrong) 0.15; C: right answer through a wrong step 0 (P(wrong) 0.7).
CHECKS = [[_check(1, False), _check(-1, True)], [_check(0, True)]]
PROBS = [[[0.9, 0.6, 0.9], [0.85, 0.95]], [[0.3, 0.9]]]


def test_label_agreement_counts_first_errors_outcomes_and_final_answers():
    at = label_agreement(CHECKS, PROBS, 0.2)
    assert at["process_first_error_exact"] == 1.0  # A at step 1, B none, C at step 0
    assert at["outcome_agrees_with_process"] == 1.0
    assert at["final_answer_agrees_with_process"] == pytest.approx(2 / 3)  # C's answer is right
    low = label_agreement(CHECKS, PROBS, 0.05)  # A flagged at step 0, B flagged
    assert low["process_first_error_exact"] == pytest.approx(1 / 3)
    assert low["outcome_agrees_with_process"] == pytest.approx(2 / 3)


def test_threshold_is_the_one_finding_first_errors_most_often_the_smaller_on_ties():
    chosen, table = choose_threshold(CHECKS, PROBS)
    exact = {t: v["process_first_error_exact"] for t, v in table.items()}
    assert exact == pytest.approx({"0.05": 1 / 3, "0.1": 2 / 3, "0.2": 1.0, "0.3": 1.0,
                                   "0.4": 2 / 3, "0.5": 2 / 3})
    assert chosen == 0.2  # 0.2 and 0.3 tie
    assert choose_threshold(CHECKS, PROBS, (0.3, 0.4, 0.5))[0] == 0.3


def test_evaluation_n_is_where_the_mean_dev_curve_peaks():
    ns = [1, 2, 4, 8, 16]
    curves = [[0.5, 0.60, 0.70, 0.65, 0.60], [0.5, 0.62, 0.66, 0.70, 0.60]]
    assert peak_n(ns, curves) == 4  # mean 0.680 at 4, 0.675 at 8
    assert peak_n(ns, [[0.5, 0.7, 0.7, 0.6, 0.5]]) == 2  # a tie: the smaller N
    assert peak_n(ns, [[0.5, 0.6, 0.7, 0.8, 0.9]]) == 16


def test_paired_difference_recovers_a_known_shift_with_its_interval():
    rng = np.random.default_rng(0)
    first = rng.uniform(0.3, 0.9, (3, 2, 200))
    exact = bootstrap_difference([1, 2], first, first - 0.1)
    assert exact["difference"] == pytest.approx([0.1, 0.1])
    assert np.allclose(exact["interval"], 0.1)  # paired: the same draw for both arms
    noisy = bootstrap_difference([1, 2], first, first - 0.1 + rng.normal(0, 0.2, first.shape))
    for d, (lo, hi) in zip(noisy["difference"], noisy["interval"]):
        assert lo < d < hi and lo < 0.1 < hi and hi - lo < 0.1
    null = bootstrap_difference([1, 2], first, rng.permutation(first, axis=2))
    assert all(lo < 0 < hi for lo, hi in null["interval"])
