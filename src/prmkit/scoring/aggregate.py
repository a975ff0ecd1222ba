"""Aggregate per-step probabilities into one solution score.

One setting, `Aggregation`, is honoured the same way by selection, voting and reports:

- ``prod``: probability that every step is correct (the paper's PRM score), computed as a
  sum of logs so that long solutions do not underflow; a step probability of 0 gives
  log-score ``-inf``, which still ranks (below every positive score).
- ``min``: the weakest step. ``last``: the final step. ``mean``: arithmetic mean.
- ``geomean``: geometric mean, exp(mean(log p)).

An empty step list means that no step was judged wrong: every method returns 1.0 (log 0.0)
unless another `empty` value is given. NaN or values outside [0, 1] raise InvalidScoreError.

Null step scores: a step cut by max_length is never seen by the model and is scored None
(null in files). Every reader of step scores replaces it by `NULL_STEP_SCORE` (0.0) through
`fill_null_steps`, and `aggregate` / `aggregate_many` do so themselves. A cut step is thus
treated as wrong: under prod, min and last (when the last step is cut) a truncated solution
scores 0 and never out-ranks a complete one, and ProcessBench / PRMBench flag the step as
an error.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

import numpy as np

from prmkit.errors import PrmkitError

NULL_STEP_SCORE = 0.0


def fill_null_steps(step_probs: Sequence[float | None] | np.ndarray) -> list[float] | np.ndarray:
    """`step_probs` with every None (a step cut by max_length) replaced by NULL_STEP_SCORE."""
    if isinstance(step_probs, np.ndarray) and step_probs.dtype != object:
        return step_probs
    return [NULL_STEP_SCORE if p is None else p for p in step_probs]


class Aggregation(StrEnum):
    PROD = "prod"
    MIN = "min"
    LAST = "last"
    MEAN = "mean"
    GEOMEAN = "geomean"


AGGREGATIONS = tuple(a.value for a in Aggregation)


class InvalidScoreError(PrmkitError, ValueError):
    """A step probability is NaN or outside [0, 1]."""


def _method(method: str | Aggregation) -> Aggregation:
    try:
        return Aggregation(method)
    except ValueError:
        raise InvalidScoreError(
            f"unknown aggregation {method!r}; choose one of {', '.join(AGGREGATIONS)}"
        ) from None


def _check(values: np.ndarray) -> None:
    if values.size == 0:
        return
    if np.isnan(values).any():
        raise InvalidScoreError("step probability is NaN")
    if values.min() < 0.0 or values.max() > 1.0:
        bad = values[(values < 0.0) | (values > 1.0)][0]
        raise InvalidScoreError(f"step probability {bad!r} is outside [0, 1]")


def _log(values: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.log(values)


def aggregate(
    step_probs: Sequence[float | None] | np.ndarray,
    method: str | Aggregation = Aggregation.PROD,
    *,
    log: bool = False,
    empty: float = 1.0,
) -> float:
    """Score one solution from its per-step probabilities of being correct.

    With ``log=True`` the natural log of the score is returned (for ``prod``: the sum of
    step log-probabilities); use it to rank solutions whose products underflow. A None
    step (cut by max_length) counts as NULL_STEP_SCORE.
    """
    m = _method(method)
    p = np.asarray(fill_null_steps(step_probs), dtype=np.float64).reshape(-1)
    _check(p)
    if p.size == 0:
        return float(_log(np.float64(empty))) if log else float(empty)
    if m is Aggregation.PROD:
        value = float(_log(p).sum())
        return value if log else float(np.exp(value))
    if m is Aggregation.GEOMEAN:
        value = float(_log(p).mean())
        return value if log else float(np.exp(value))
    if m is Aggregation.MIN:
        value = float(p.min())
    elif m is Aggregation.LAST:
        value = float(p[-1])
    else:
        value = float(p.mean())
    return float(_log(np.float64(value))) if log else value


def aggregate_many(
    step_probs: Sequence[Sequence[float | None]],
    method: str | Aggregation = Aggregation.PROD,
    *,
    log: bool = False,
    empty: float = 1.0,
) -> np.ndarray:
    """Vectorised `aggregate` over many solutions; returns a float64 array."""
    m = _method(method)
    lengths = np.fromiter((len(s) for s in step_probs), dtype=np.int64, count=len(step_probs))
    out = np.full(len(lengths), empty, dtype=np.float64)
    if log:
        out = _log(out)
    if lengths.sum() == 0:
        return out
    flat = np.concatenate([np.asarray(fill_null_steps(s), dtype=np.float64).reshape(-1)
                           for s in step_probs])
    _check(flat)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    nonempty = lengths > 0
    idx = starts[nonempty]
    if m in (Aggregation.PROD, Aggregation.GEOMEAN):
        sums = np.add.reduceat(_log(flat), idx)
        vals = sums if m is Aggregation.PROD else sums / lengths[nonempty]
        out[nonempty] = vals if log else np.exp(vals)
        return out
    if m is Aggregation.MIN:
        vals = np.minimum.reduceat(flat, idx)
    elif m is Aggregation.LAST:
        vals = flat[ends[nonempty] - 1]
    else:
        vals = np.add.reduceat(flat, idx) / lengths[nonempty]
    out[nonempty] = _log(vals) if log else vals
    return out
