"""Choosing samples to label: the paper's "convincing wrong-answer" selection.

A selector PRM scores a large pool of samples per problem; per problem (or over the
whole pool) a share of the labelling budget goes to the highest-scored samples whose final
answer is graded wrong, the rest to the highest-scored of the remaining samples: right,
wrong, or ungraded (no gold answer, or the grader could not decide: never counted as
wrong).
Duplicates (equal `dedupe_key` within a problem) are labelled once.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from prmkit.errors import PrmkitError


@dataclass(frozen=True)
class Candidate:
    problem_id: str
    sample_index: int
    dedupe_key: str  # normalised text of the steps; equal keys are duplicates
    score: float  # the selector PRM's aggregated score (higher = more convincing)
    correct: bool | None  # the grader's verdict on the final answer; None: ungraded


@dataclass(frozen=True)
class SelectionConfig:
    per_problem: int = 8  # N chosen per problem ("per_problem" scope)
    convincing_wrong_share: float = 0.8  # share taken from the highest-scored wrong answers
    scope: Literal["per_problem", "global"] = "per_problem"
    global_top_k: int | None = None  # total when scope == "global"

    def __post_init__(self):
        if self.scope not in ("per_problem", "global"):
            raise PrmkitError(f"selection scope must be per_problem or global, got {self.scope!r}")
        if not 0.0 <= self.convincing_wrong_share <= 1.0:
            raise PrmkitError("convincing_wrong_share must lie in [0, 1], got "
                              f"{self.convincing_wrong_share}")
        if self.scope == "per_problem" and self.per_problem < 0:
            raise PrmkitError(f"per_problem must be >= 0, got {self.per_problem}")
        if self.scope == "global" and (self.global_top_k is None or self.global_top_k < 0):
            raise PrmkitError("scope 'global' needs global_top_k >= 0")


def dedupe_key(steps: Sequence[str]) -> str:
    """Steps with whitespace runs collapsed and case folded: the duplicate test."""
    return "\n".join(" ".join(s.split()).casefold() for s in steps)


def _rank(c: Candidate) -> tuple:
    return (-c.score, c.problem_id, c.sample_index)


def _distinct(pool: Sequence[Candidate]) -> list[Candidate]:
    """One candidate per (problem, key): the highest-ranked of each group."""
    seen: set[tuple[str, str]] = set()
    out = []
    for c in sorted(pool, key=_rank):
        if math.isnan(c.score):
            raise PrmkitError(f"candidate {c.problem_id}#{c.sample_index} has a NaN score")
        k = (c.problem_id, c.dedupe_key)
        if k not in seen:
            seen.add(k)
            out.append(c)
    return out


def _take(distinct: list[Candidate], n: int, share: float) -> list[Candidate]:
    """`round(n * share)` best wrong answers (graded wrong: an ungraded one is not), then
    the best of the rest up to `n`."""
    return _take_quota(distinct, n, math.floor(n * share + 0.5))


def _wrong_quotas(by_problem: dict[str, list[Candidate]], per_problem: int,
                  share: float) -> dict[str, int]:
    """Wrong answers to take from each problem. Each problem's share is share x per_problem
    (or all its wrong answers, if fewer: the rest of its budget is filled from its other
    samples); the fractions add up over the problems. Every problem takes the whole part
    of its share, and the slots the fractions add up to go one at a time to the problems
    whose next wrong answer is the most convincing (highest score): at 1 per problem and
    share 0.8, 80% of the budget is wrong answers (rounding per problem made it 100%)."""
    wrong = {pid: [c for c in cands if c.correct is False] for pid, cands in by_problem.items()}
    exact = {pid: min(per_problem * share, len(w)) for pid, w in wrong.items()}
    quota = {pid: math.floor(v) for pid, v in exact.items()}
    target = math.floor(sum(exact.values()) + 0.5)
    spare = sorted(((w[quota[pid]], pid) for pid, w in wrong.items()
                    if quota[pid] < min(per_problem, len(w))), key=lambda t: _rank(t[0]))
    for _, pid in spare[:max(0, target - sum(quota.values()))]:
        quota[pid] += 1
    return quota


def _take_quota(distinct: list[Candidate], n: int, n_wrong: int) -> list[Candidate]:
    wrong = [c for c in distinct if c.correct is False][:n_wrong]
    chosen = {(c.problem_id, c.sample_index) for c in wrong}
    rest = [c for c in distinct if (c.problem_id, c.sample_index) not in chosen]
    return wrong + rest[: n - len(wrong)]


def select_convincing(pool: Sequence[Candidate], config: SelectionConfig) -> list[Candidate]:
    """The candidates to label, deterministic for a given pool (ties by problem, index).

    `convincing_wrong_share` of the whole budget from the highest-scored answers graded
    wrong, the rest from the highest-scored of the others (ungraded ones included); per
    problem (scope "per_problem": `per_problem` each, the wrong share spread as
    `_wrong_quotas` says) or over the pool (scope "global"). With too few wrong answers
    the rest fills the budget. Output: problems in sorted order, each problem's wrong
    picks then its other picks, each by decreasing score.
    """
    distinct = _distinct(pool)
    if config.scope == "global":
        return _take(distinct, config.global_top_k or 0, config.convincing_wrong_share)
    by_problem: dict[str, list[Candidate]] = defaultdict(list)
    for c in distinct:
        by_problem[c.problem_id].append(c)
    quota = _wrong_quotas(by_problem, config.per_problem, config.convincing_wrong_share)
    out: list[Candidate] = []
    for pid in sorted(by_problem):
        out += _take_quota(by_problem[pid], config.per_problem, quota[pid])
    return out


def pool_diversity(pool: Sequence[Candidate],
                   selected: Sequence[Candidate] | None = None) -> dict[str, float]:
    """How varied the pool is, and how much of it a selection takes.

    distinct_share: distinct (problem, key) over pool size; unique_per_problem_*: distinct
    samples per problem; wrong_share: answers graded wrong among distinct samples; with
    `selected`, selected_share_of_pool and selected_share_of_distinct (the paper's largest
    selection took 200 of 1,000 samples per problem, a share large enough to bend its trend).
    """
    distinct = _distinct(pool)
    per_problem: dict[str, int] = defaultdict(int)
    for c in distinct:
        per_problem[c.problem_id] += 1
    counts = list(per_problem.values()) or [0]
    out = {
        "pool_size": float(len(pool)),
        "distinct": float(len(distinct)),
        "distinct_share": len(distinct) / len(pool) if pool else 0.0,
        "problems": float(len(per_problem)),
        "unique_per_problem_mean": float(statistics.fmean(counts)),
        "unique_per_problem_min": float(min(counts)),
        "unique_per_problem_max": float(max(counts)),
        "wrong_share": (sum(c.correct is False for c in distinct) / len(distinct)
                        if distinct else 0.0),
    }
    if selected is not None:
        out["selected"] = float(len(selected))
        out["selected_share_of_pool"] = len(selected) / len(pool) if pool else 0.0
        out["selected_share_of_distinct"] = len(selected) / len(distinct) if distinct else 0.0
    return out
