"""Ranking metrics shared by training (held-out AUROC) and evaluation (step metrics).

Below every package that uses them: it imports nothing of prmkit but its errors.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from prmkit.errors import PrmkitError


def auroc(scores: Sequence[float] | np.ndarray, positive: Sequence[float] | np.ndarray,
          weights: Sequence[float] | np.ndarray | None = None) -> float:
    """Area under the ROC curve: the (weighted) share of positive-negative pairs in which
    the positive scores higher, a tie counting one half. NaN when either class has no weight.

    positive: 1 / True for a positive, 0 / False for a negative. weights: one per score
    (default 1 each), a pair weighing the product of its two. Scores are summed per tied
    group in score order, so with unit weights every partial sum is a whole or half number
    and the result equals the Mann-Whitney U statistic over n_pos * n_neg exactly.
    """
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    pos = np.asarray(positive, dtype=np.float64).reshape(-1)
    w = np.ones_like(s) if weights is None else np.asarray(weights, dtype=np.float64).reshape(-1)
    if not s.shape == pos.shape == w.shape:
        raise PrmkitError(f"AUROC of {s.size} scores, {pos.size} labels and {w.size} weights")
    wp, wn = w * pos, w * (1 - pos)
    if wp.sum() == 0 or wn.sum() == 0:
        return float("nan")
    order = np.argsort(s, kind="stable")
    s, wp, wn = s[order], wp[order], wn[order]
    _, start = np.unique(s, return_index=True)
    pos_g = np.add.reduceat(wp, start)
    neg_g = np.add.reduceat(wn, start)
    neg_below = np.cumsum(neg_g) - neg_g
    area = (pos_g * (neg_below + 0.5 * neg_g)).sum()
    return float(area / (wp.sum() * wn.sum()))
