"""prmkit.metrics.auroc: the one AUROC behind the trainer's eval_auroc and evaluation's auroc."""

from __future__ import annotations

import math

import numpy as np
import pytest

from prmkit.errors import PrmkitError
from prmkit.evaluation import auroc as evaluation_auroc
from prmkit.metrics import auroc
from prmkit.training.reward_trainer import step_summary


def trainer_formula(scores, positive, weights):
    """The trainer's weighted AUROC as it was written before it moved to prmkit.metrics."""
    wp, wn = weights * positive, weights * (1 - positive)
    if wp.sum() == 0 or wn.sum() == 0:
        return float("nan")
    order = np.argsort(scores, kind="stable")
    s, wp, wn = scores[order], wp[order], wn[order]
    _, start = np.unique(s, return_index=True)
    pos_g = np.add.reduceat(wp, start)
    neg_g = np.add.reduceat(wn, start)
    neg_below = np.cumsum(neg_g) - neg_g
    return float((pos_g * (neg_below + 0.5 * neg_g)).sum() / (wp.sum() * wn.sum()))


def rank_formula(scores, labels):
    """Evaluation's Mann-Whitney AUROC (average ranks for ties) as it was written before."""
    s, y = np.asarray(scores, dtype=np.float64), np.asarray(labels, dtype=bool)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    order = np.argsort(s, kind="mergesort")
    sorted_vals = s[order]
    starts = np.flatnonzero(np.r_[True, sorted_vals[1:] != sorted_vals[:-1]])
    ends = np.r_[starts[1:], len(s)]
    ranks = np.empty(len(s))
    ranks[order] = np.repeat((starts + ends + 1) / 2.0, ends - starts)
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def cases(n_cases=60):
    """Random scores with many ties (few distinct values, or rounded floats), labels and
    weights (whole and fractional), sizes from 2 to 3000."""
    rng = np.random.default_rng(0)
    for k in range(n_cases):
        n = int(rng.integers(2, 3000))
        if k % 3 == 0:
            s = rng.integers(0, 6, n).astype(np.float64)
        elif k % 3 == 1:
            s = np.round(rng.random(n), 2)
        else:
            s = rng.random(n)
        y = (rng.random(n) < rng.uniform(0.05, 0.95)).astype(np.float64)
        w = rng.integers(1, 5, n).astype(np.float64) if k % 2 else rng.uniform(0.1, 3.0, n)
        yield s, y, w


def test_weighted_auroc_is_bit_identical_to_the_trainer_formula():
    for s, y, w in cases():
        assert auroc(s, y, w) == trainer_formula(s, y, w)


def test_unweighted_auroc_is_bit_identical_to_the_rank_formula():
    for s, y, _ in cases():
        want = rank_formula(s, y)
        assert auroc(s, y) == want
        assert auroc(s, y.astype(bool)) == want
        assert evaluation_auroc(s.tolist(), y.astype(int).tolist()) == want


def test_trainer_eval_auroc_is_unchanged():
    for s, y, w in cases(12):
        probs = s.astype(np.float32)  # the trainer's probabilities are fp32
        truth = np.where(y == 1, 0.9, 0.1)
        summary = step_summary(probs, truth, w.astype(np.float32), np.ones_like(s))
        want = trainer_formula(probs.astype(np.float64), (truth >= 0.5).astype(np.float64),
                               w.astype(np.float32).astype(np.float64))
        assert summary["eval_auroc"] == round(want, 6)


def test_weighted_auroc_matches_pair_counting():
    rng = np.random.default_rng(0)
    s = rng.integers(0, 5, 40).astype(float)
    y = rng.integers(0, 2, 40).astype(float)
    w = rng.integers(1, 4, 40).astype(float)
    num = den = 0.0
    for i in range(40):
        for j in range(40):
            if y[i] == 1 and y[j] == 0:
                den += w[i] * w[j]
                num += w[i] * w[j] * ((s[i] > s[j]) + 0.5 * (s[i] == s[j]))
    assert abs(auroc(s, y, w) - num / den) < 1e-12


def test_auroc_agrees_with_scikit_learn():
    roc_auc_score = pytest.importorskip("sklearn.metrics").roc_auc_score
    for s, y, w in cases(30):
        assert abs(auroc(s, y, w) - roc_auc_score(y, s, sample_weight=w)) < 1e-12
        assert abs(auroc(s, y) - roc_auc_score(y, s)) < 1e-12


def test_auroc_is_nan_when_a_class_has_no_weight():
    assert math.isnan(auroc([0.1, 0.9], [1, 1]))
    assert math.isnan(auroc([0.1, 0.9], [0, 0]))
    assert math.isnan(auroc([], []))
    assert math.isnan(auroc([0.1, 0.9], [1, 0], [1.0, 0.0]))
    assert auroc([0.1, 0.9], [0, 1]) == 1.0
    assert auroc([0.5, 0.5], [0, 1]) == 0.5


def test_auroc_of_mismatched_lengths_is_reported():
    with pytest.raises(PrmkitError, match="3 scores, 2 labels and 3 weights"):
        auroc([0.1, 0.2, 0.3], [0, 1], [1, 1, 1])
    with pytest.raises(PrmkitError, match="2 scores, 2 labels and 1 weights"):
        auroc([0.1, 0.2], [0, 1], [1])
