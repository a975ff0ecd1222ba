"""Step-level metrics on labelled data: AUROC, accuracy, calibration, first-error accuracy.

Labels are 1 (step correct) or 0 (step wrong); a step is predicted correct when its score
is at or above the threshold. In `step_metrics` a null score (a step cut at max_length)
counts as NULL_STEP_SCORE (0.0).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from prmkit.errors import PrmkitError
from prmkit.evaluation.subsets import warn_undefined
from prmkit.metrics import auroc as _auroc
from prmkit.scoring.aggregate import fill_null_steps


def _arrays(scores, labels) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    y = np.asarray(labels, dtype=np.float64).reshape(-1)
    if s.shape != y.shape:
        raise PrmkitError(f"{s.size} scores but {y.size} labels")
    if np.isnan(s).any():
        raise PrmkitError("a score is NaN")
    if not np.isin(y, (0.0, 1.0)).all():
        raise PrmkitError("labels must be 0 or 1")
    return s, y.astype(bool)


def auroc(scores: Sequence[float], labels: Sequence[int]) -> float:
    """Area under the ROC curve (`prmkit.metrics.auroc`: the Mann-Whitney U statistic, ties
    counting one half).

    NaN when only one class is present.
    """
    s, y = _arrays(scores, labels)
    return _auroc(s, y)


def accuracy_at(scores: Sequence[float], labels: Sequence[int], threshold: float = 0.5) -> float:
    s, y = _arrays(scores, labels)
    return float(((s >= threshold) == y).mean()) if s.size else float("nan")


def calibration_bins(
    probs: Sequence[float], labels: Sequence[int], n_bins: int = 10
) -> dict[str, list]:
    """Equal-width bins over [0, 1] (the last bin includes 1.0): count, confidence, accuracy."""
    p, y = _arrays(probs, labels)
    if p.size and (p.min() < 0 or p.max() > 1):
        raise PrmkitError("calibration needs probabilities in [0, 1]")
    idx = np.minimum((p * n_bins).astype(np.int64), n_bins - 1)
    count = np.bincount(idx, minlength=n_bins)
    conf = np.bincount(idx, weights=p, minlength=n_bins)
    acc = np.bincount(idx, weights=y, minlength=n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        conf, acc = conf / count, acc / count
    edges = np.linspace(0, 1, n_bins + 1)
    return {
        "lower": edges[:-1].tolist(),
        "upper": edges[1:].tolist(),
        "count": count.tolist(),
        "confidence": [None if c == 0 else float(v) for c, v in zip(count, conf)],
        "accuracy": [None if c == 0 else float(v) for c, v in zip(count, acc)],
    }


def expected_calibration_error(
    probs: Sequence[float], labels: Sequence[int], n_bins: int = 10
) -> float:
    """sum_b |B_b|/n * |accuracy_b - confidence_b| over equal-width bins."""
    bins = calibration_bins(probs, labels, n_bins)
    n = sum(bins["count"])
    if n == 0:
        return float("nan")
    return float(
        sum(c / n * abs(a - f) for c, a, f in zip(bins["count"], bins["accuracy"],
                                                   bins["confidence"]) if c)
    )


def true_first_error(labels: Sequence[int]) -> int:
    wrong = [i for i, v in enumerate(labels) if v == 0]
    return wrong[0] if wrong else -1


def first_error_accuracy(
    step_scores: Sequence[Sequence[float]], step_labels: Sequence[Sequence[int]],
    threshold: float = 0.5,
) -> float:
    """Share of solutions whose first step scored below threshold (or -1) is the first wrong
    step (or -1); a null score counts as 0.0 (ProcessBench's function under prmkit's
    rules)."""
    from prmkit.evaluation.processbench import first_error_index

    if len(step_scores) != len(step_labels):
        raise PrmkitError(f"{len(step_scores)} solutions scored but {len(step_labels)} labelled")
    if not step_scores:
        return float("nan")
    hits = [
        first_error_index(s, threshold, rules="prmkit") == true_first_error(y)
        for s, y in zip(step_scores, step_labels)
    ]
    return float(np.mean(hits))


def has_wrong_step(example) -> bool:
    """The stratum of a labelled solution in `--limit` subsets: a step labelled wrong or not
    (a StepExample, or a list of 0/1/None labels)."""
    labels = getattr(example, "labels", example)
    return any(v is not None and v < 0.5 for v in labels)


def warn_if_one_class(value: float, labels) -> None:
    if np.isnan(value):
        n_wrong = int(np.sum(np.asarray(labels) == 0))
        warn_undefined("step AUROC", f"every labelled step is {'wrong' if n_wrong else 'correct'}")


def step_metrics(
    step_scores: Sequence[Sequence[float | None]], step_labels: Sequence[Sequence[int | None]],
    threshold: float = 0.5, n_bins: int = 10,
) -> dict:
    """All step metrics; steps labelled None are left out of step-level metrics, and a
    solution's first error is taken over its labelled prefix. A None score counts as
    NULL_STEP_SCORE."""
    flat_s, flat_y, sols_s, sols_y = [], [], [], []
    for s, y in zip(step_scores, step_labels, strict=True):
        s = fill_null_steps(s)
        if len(s) != len(y):
            raise PrmkitError(f"{len(s)} step scores but {len(y)} step labels")
        keep = [i for i, v in enumerate(y) if v is not None]
        flat_s += [s[i] for i in keep]
        flat_y += [y[i] for i in keep]
        cut = next((i for i, v in enumerate(y) if v is None), len(y))
        sols_s.append(list(s[:cut]))
        sols_y.append(list(y[:cut]))
    result = {
        "n_steps": len(flat_s),
        "n_solutions": len(sols_s),
        "threshold": threshold,
        "auroc": auroc(flat_s, flat_y),
        "accuracy": accuracy_at(flat_s, flat_y, threshold),
        "ece": expected_calibration_error(flat_s, flat_y, n_bins),
        "first_error_accuracy": first_error_accuracy(sols_s, sols_y, threshold),
        "calibration": calibration_bins(flat_s, flat_y, n_bins),
    }
    warn_if_one_class(result["auroc"], flat_y)
    return result
