"""Quick evaluations on part of a benchmark (`--limit N`), and metrics that a part may
leave undefined.

A first-N subset can be meaningless: ProcessBench lists its erroneous items first, so its
first items hold no correct solution and the F1 is undefined. `stratified_subset` keeps
every stratum (subset x correct/erroneous, PRMBench class, ...) in proportion, at least
one item each where N allows, chosen at random with a seed. A metric that the chosen
items leave undefined is reported as null (None) with a warning, never as 0.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar

import numpy as np

from prmkit.errors import PrmkitError

T = TypeVar("T")
log = logging.getLogger("prmkit.evaluation")


def _allocate(sizes: list[int], limit: int) -> list[int]:
    """Items per stratum: one each, the rest in proportion to what is left (largest
    remainders first), never more than a stratum holds."""
    take = [1] * len(sizes)
    left = limit - len(sizes)
    spare = np.asarray([s - 1 for s in sizes], dtype=np.float64)
    if left > 0 and spare.sum() > 0:
        share = spare * left / spare.sum()
        extra = np.floor(share).astype(int)
        order = np.argsort(-(share - extra), kind="stable")
        for i in order[: left - int(extra.sum())]:
            extra[i] += 1
        take = [t + int(e) for t, e in zip(take, extra)]
    return [min(t, s) for t, s in zip(take, sizes)]


def stratified_subset(items: Sequence[T], limit: int | None, key: Callable[[T], Hashable],
                      seed: int = 0) -> list[T]:
    """At most `limit` items, every stratum (`key`) in proportion and present at least once
    where `limit` allows, chosen at random with `seed`; the original order is kept. With
    fewer items than strata, `limit` strata are drawn at random, one item each."""
    if limit is None or limit >= len(items):
        return list(items)
    if limit < 1:
        raise PrmkitError(f"--limit must be at least 1, got {limit}")
    rng = np.random.default_rng(seed)
    strata: dict[Hashable, list[int]] = {}
    for i, item in enumerate(items):
        strata.setdefault(key(item), []).append(i)
    groups = list(strata.values())
    if limit < len(groups):
        chosen = rng.choice(len(groups), limit, replace=False)
        counts = [int(i in chosen) for i in range(len(groups))]
    else:
        counts = _allocate([len(g) for g in groups], limit)
    keep = [int(i) for g, c in zip(groups, counts) for i in rng.choice(g, c, replace=False)]
    return [items[i] for i in sorted(keep)]


def warn_undefined(metric: str, why: str) -> None:
    log.warning("%s is undefined (reported as null): %s", metric, why)
