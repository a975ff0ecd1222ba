"""Best-of-N, voting and pass@N curves from pools of scored samples.

The paper's protocol (OpenAI's released eval script): each problem's pool is padded to a
fixed size (1,860) with empty slots (`pool_size=PAPER_POOL_SIZE`; by default nothing is
padded and N is drawn among the samples present); a trial draws N slots uniformly without replacement;
empty slots and samples without an answer are dropped; the highest-scored remaining sample
is picked (ties: uniformly at random, as `max` over a shuffled list does); the problem counts
as solved if that sample is correct. A draw with no real sample counts as wrong. So an empty
slot is never picked over a real sample; it only lowers the number of real samples drawn.

Estimators:
- ``trials``: T random trials as above; mean and standard deviation over trials of the
  accuracy averaged over problems.
- ``exact``: the expectation of the same quantity, in closed form. Sort one pool's real
  samples by score and group equal scores; if L slots rank strictly below a tie group of
  size t (lower scores plus empty slots) and P is the pool size, the group supplies the pick
  with probability [C(L+t, N) - C(L, N)] / C(P, N), each member equally likely.
- The pick's expected value (`bon_pick_mean`, e.g. its own score): each group's mean value
  times that chance, over the chance that the draw holds a real sample.
- pass@N: 1 - C(P - c, N) / C(P, N) with c correct samples (at least one correct drawn).
- Majority and score-weighted votes: Monte-Carlo over the same random draws (an exact
  multivariate-hypergeometric sum is too costly for 1,860-sample pools); ties between
  answer classes are broken uniformly at random; a class counts as correct with the share
  of its members that are correct.
Exact results are exact: a pool without a correct sample adds exactly 0 and a pool of
only correct samples exactly 1 (less the chance of drawing only empty slots), and the
ratios of binomials are clamped to [0, 1], so no 1e-16 residue from log-factorials.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from tqdm import tqdm

from prmkit.errors import PrmkitError

PAPER_POOL_SIZE = 1860
PAPER_TRIALS = 400


@dataclass
class ProblemPool:
    """One problem's selectable samples.

    scores/correct/clusters hold only samples that have an answer; n_slots is the number of
    slots they occupy together with answer-less samples (before padding).
    """

    scores: np.ndarray
    correct: np.ndarray
    clusters: np.ndarray | None = None  # answer-class id per sample (0..K-1)
    n_slots: int | None = None
    problem_id: str | None = None
    weights: np.ndarray | None = None  # vote weights (default: scores)

    def __post_init__(self):
        self.scores = np.asarray(self.scores, dtype=np.float64)
        self.correct = np.asarray(self.correct, dtype=bool)
        if self.scores.shape != self.correct.shape or self.scores.ndim != 1:
            raise PrmkitError(f"pool {self.problem_id}: scores and correct flags differ in shape")
        if np.isnan(self.scores).any():
            raise PrmkitError(f"pool {self.problem_id}: a score is NaN")
        if self.clusters is not None:
            self.clusters = np.asarray(self.clusters, dtype=np.int64)
        if self.n_slots is None:
            self.n_slots = len(self.scores)
        if self.n_slots < len(self.scores):
            raise PrmkitError(f"pool {self.problem_id}: n_slots is below the sample count")


@dataclass
class Curves:
    """Accuracy per N for each method; std is per-trial spread (empty for exact)."""

    n: list[int]
    accuracy: dict[str, list[float]] = field(default_factory=dict)
    std: dict[str, list[float]] = field(default_factory=dict)
    estimator: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"n": self.n, "accuracy": self.accuracy, "std": self.std,
                "estimator": self.estimator}


def default_ns(pool_size: int) -> list[int]:
    """Powers of two up to the pool size, plus the pool size itself."""
    ns = [1 << k for k in range(pool_size.bit_length()) if (1 << k) <= pool_size]
    return ns if ns[-1] == pool_size else ns + [pool_size]


def _slots(pool: ProblemPool, pool_size: int | None) -> int:
    if pool_size is None:
        return int(pool.n_slots)
    if pool.n_slots > pool_size:
        raise PrmkitError(
            f"pool {pool.problem_id} has {pool.n_slots} samples, more than the pool size "
            f"{pool_size}"
        )
    return int(pool_size)


def _check_ns(ns: Sequence[int], pools: Sequence[ProblemPool], pool_size: int | None) -> None:
    if not pools:
        raise PrmkitError("no problems to evaluate")
    smallest = min(_slots(p, pool_size) for p in pools)
    for n in ns:
        if n < 1 or n > smallest:
            raise PrmkitError(f"N={n} is outside 1..{smallest} (the smallest pool size)")


def _log_factorials(n: int) -> np.ndarray:
    out = np.zeros(n + 1)
    out[1:] = np.cumsum(np.log(np.arange(1, n + 1)))
    return out


def _choose_ratio(a: np.ndarray, n: np.ndarray, total: int, lf: np.ndarray) -> np.ndarray:
    """C(a, n) / C(total, n), elementwise (a and n broadcast): exactly 0 where a < n and
    exactly 1 where a == total, in (0, 1] otherwise."""
    a, n = np.broadcast_arrays(a, n)
    ok = a >= n
    out = np.zeros(a.shape)
    aa, nn = a[ok], n[ok]
    out[ok] = np.minimum(np.exp((lf[aa] - lf[total]) - (lf[aa - nn] - lf[total - nn])), 1.0)
    out[a == total] = 1.0
    return out


def bon_exact(
    pools: Sequence[ProblemPool], ns: Sequence[int], pool_size: int | None = None
) -> np.ndarray:
    """Exact expected best-of-N accuracy (see module docstring) for each N."""
    return bon_exact_per_problem(pools, ns, pool_size).sum(axis=0) / len(pools)


def bon_exact_per_problem(
    pools: Sequence[ProblemPool], ns: Sequence[int], pool_size: int | None = None
) -> np.ndarray:
    """Each problem's exact chance that its best-of-N pick is correct, [problems, len(ns)]
    (per-problem outcomes for a bootstrap over problems)."""
    _check_ns(ns, pools, pool_size)
    nn = np.asarray(ns, dtype=np.int64)
    lf = _log_factorials(max(_slots(p, pool_size) for p in pools))
    out = np.zeros((len(pools), len(nn)))
    for row, pool in zip(out, pools):
        size = _slots(pool, pool_size)
        if len(pool.scores) == 0 or not pool.correct.any():
            continue
        if pool.correct.all():  # exact: solved unless the draw holds only empty slots
            empty = size - len(pool.scores)
            row[:] = 1.0 - _choose_ratio(np.full(len(nn), empty), nn, size, lf)
            continue
        inverse, counts, chance = _pick_chances(pool, nn, size, lf)
        frac_correct = np.bincount(inverse, weights=pool.correct) / counts
        row[:] = np.clip(frac_correct @ chance, 0.0, 1.0)
    return out


def _pick_chances(pool: ProblemPool, nn: np.ndarray, size: int, lf: np.ndarray):
    """(each sample's tie group, the groups' sizes, chance [groups, len(nn)] that a group
    supplies the best-of-N pick), groups in increasing score."""
    _, inverse, counts = np.unique(pool.scores, return_inverse=True, return_counts=True)
    below = size - len(pool.scores) + np.concatenate([[0], np.cumsum(counts)[:-1]])
    upper = _choose_ratio((below + counts)[:, None], nn[None, :], size, lf)
    lower = _choose_ratio(below[:, None], nn[None, :], size, lf)
    return inverse, counts, upper - lower


def bon_pick_mean(
    pools: Sequence[ProblemPool], ns: Sequence[int], values: Sequence | None = None,
    pool_size: int | None = None,
) -> np.ndarray:
    """Exact expected value of the best-of-N pick for each N, given that the draw holds a
    sample to pick, averaged over the pools that have one: per pool `values` holds one
    number per sample of its `scores` (default: the scores, so the pick's own score);
    `correct` gives the checker's share right of the picks. Same draws and tie rule as
    `bon_exact`; a pool whose values are all equal adds exactly that value."""
    _check_ns(ns, pools, pool_size)
    nn = np.asarray(ns, dtype=np.int64)
    lf = _log_factorials(max(_slots(p, pool_size) for p in pools))
    means = []
    for k, pool in enumerate(pools):
        x = pool.scores if values is None else np.asarray(values[k], dtype=np.float64)
        if x.shape != pool.scores.shape:
            raise PrmkitError(f"pool {pool.problem_id}: {len(x)} values for "
                              f"{len(pool.scores)} samples")
        if len(x) == 0:
            continue
        inverse, counts, chance = _pick_chances(pool, nn, _slots(pool, pool_size), lf)
        group_mean = np.bincount(inverse, weights=x) / counts
        means.append(np.clip(group_mean @ chance / chance.sum(axis=0), x.min(), x.max()))
    if not means:
        raise PrmkitError("no pool has a sample to pick")
    return np.mean(means, axis=0)


def pass_at_n(
    pools: Sequence[ProblemPool], ns: Sequence[int], pool_size: int | None = None
) -> np.ndarray:
    """Exact probability that a random N-draw holds at least one correct sample."""
    _check_ns(ns, pools, pool_size)
    nn = np.asarray(ns, dtype=np.int64)
    lf = _log_factorials(max(_slots(p, pool_size) for p in pools))
    total = np.zeros(len(nn))
    for pool in pools:
        size = _slots(pool, pool_size)
        wrong = size - int(pool.correct.sum())
        total += 1.0 - _choose_ratio(np.full(len(nn), wrong), nn, size, lf)
    return total / len(pools)


def _draw_inclusion(
    rng: np.random.Generator, trials: int, size: int, m: int, ns: np.ndarray
) -> np.ndarray:
    """included[t, j, i]: whether real sample i is among the first ns[j] of trial t's shuffle."""
    keys = rng.random((trials, size))
    thresholds = np.sort(keys, axis=1)[:, ns - 1]  # [T, len(ns)]
    return keys[:, None, :m] <= thresholds[:, :, None]


def _uniform_argmax(values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Argmax over the last axis, ties broken uniformly at random."""
    is_max = values == values.max(axis=-1, keepdims=True)
    return np.argmax(is_max * (rng.random(values.shape) + 1.0), axis=-1)


SIMULATED = {"best": "best-of-N", "majority": "majority vote", "weighted": "weighted vote"}


def simulate(
    pools: Sequence[ProblemPool],
    ns: Sequence[int],
    pool_size: int | None = None,
    trials: int = PAPER_TRIALS,
    seed: int = 0,
    methods: Sequence[str] = ("best",),
    progress: bool = False,
) -> dict[str, np.ndarray]:
    """Per-trial accuracies [trials, len(ns)] for each method: best, majority, weighted.

    Every method sees the same random draws. Majority/weighted need `clusters` on pools.
    """
    _check_ns(ns, pools, pool_size)
    nn = np.asarray(ns, dtype=np.int64)
    rng = np.random.default_rng(seed)
    hits = {m: np.zeros((trials, len(nn))) for m in methods}
    what = " and ".join(SIMULATED[m] for m in methods)
    for pool in tqdm(pools, desc=f"{what} ({trials} trials)", disable=not progress,
                     unit="problem"):
        m = len(pool.scores)
        size = _slots(pool, pool_size)
        if m == 0:
            continue
        included = _draw_inclusion(rng, trials, size, m, nn)  # [T, J, M]
        drawn_any = included.any(axis=2)
        if "best" in methods:
            values = np.where(included, pool.scores, -np.inf)
            pick = _uniform_argmax(values, rng)
            hits["best"] += drawn_any & pool.correct[pick]
        for method in ("majority", "weighted"):
            if method not in methods:
                continue
            if pool.clusters is None:
                raise PrmkitError(f"pool {pool.problem_id}: {method} vote needs answer clusters")
            k = int(pool.clusters.max()) + 1
            share = np.bincount(pool.clusters, weights=pool.correct, minlength=k) / np.maximum(
                np.bincount(pool.clusters, minlength=k), 1
            )
            one_hot = np.eye(k)[pool.clusters]  # [M, K]
            if method == "weighted":
                w = pool.scores if pool.weights is None else pool.weights
                if (w < 0).any() or not np.isfinite(w).all():
                    raise PrmkitError(
                        f"pool {pool.problem_id}: weighted vote needs non-negative finite scores"
                    )
                one_hot = one_hot * w[:, None]
            totals = included.astype(np.float64) @ one_hot  # [T, J, K]
            present = (included.astype(np.float64) @ (np.eye(k)[pool.clusters])) > 0
            totals = np.where(present, totals, -np.inf)
            pick = _uniform_argmax(totals, rng)
            hits[method] += np.where(drawn_any, share[pick], 0.0)
    return {m: h / len(pools) for m, h in hits.items()}


def padding(pools: Sequence[ProblemPool], pool_size: int | None) -> dict | None:
    """What padding every pool to `pool_size` adds: None when nothing is padded, else
    {"pool_size", "problems_padded", "empty_slots"} (answer-less samples are not counted)."""
    if pool_size is None:
        return None
    empty = [_slots(p, pool_size) - int(p.n_slots) for p in pools]
    if not any(empty):
        return None
    return {"pool_size": int(pool_size), "problems_padded": sum(e > 0 for e in empty),
            "empty_slots": int(sum(empty))}


def bon_curves(
    pools: Sequence[ProblemPool],
    ns: Sequence[int] | None = None,
    *,
    estimator: str = "exact",
    pool_size: int | None = None,
    trials: int = PAPER_TRIALS,
    seed: int = 0,
    votes: Sequence[str] = ("majority",),
    progress: bool = False,
) -> Curves:
    """Best-of-N (exact or trials), pass@N (exact) and vote curves (Monte-Carlo)."""
    if estimator not in ("exact", "trials"):
        raise PrmkitError(f"unknown estimator {estimator!r}; use exact or trials")
    if not pools:
        raise PrmkitError("no problems to evaluate (no samples)")
    if ns is None:
        ns = default_ns(pool_size or min(int(p.n_slots) for p in pools))
    ns = [int(n) for n in ns]
    curves = Curves(n=ns)
    methods = list(votes) + (["best"] if estimator == "trials" else [])
    sims = simulate(pools, ns, pool_size, trials, seed, methods, progress) if methods else {}
    if estimator == "exact":
        curves.accuracy["best"] = bon_exact(pools, ns, pool_size).tolist()
        curves.std["best"] = []
        curves.estimator["best"] = "exact"
    for name, per_trial in sims.items():
        curves.accuracy[name] = per_trial.mean(axis=0).tolist()
        curves.std[name] = per_trial.std(axis=0).tolist()
        curves.estimator[name] = f"trials({trials})"
    curves.accuracy["pass"] = pass_at_n(pools, ns, pool_size).tolist()
    curves.std["pass"] = []
    curves.estimator["pass"] = "exact"
    return curves
