"""Selection over a list of candidates (plain lists of answers and scores).

Answers are grouped by grader equivalence, not string equality: "1/2" and "\\frac{1}{2}"
are one vote. Equal normalised strings are merged without calling the grader; every
grader verdict is cached, so each distinct pair is graded once.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import numpy as np

Equivalence = Callable[[str, str], bool]

_SPACE = re.compile(r"\s+")
_WRAPPERS = ("\\boxed{", "\\text{", "\\mathrm{")


def normalize_answer(answer: str) -> str:
    """Cheap canonical form for the fast path: whitespace, $...$, \\boxed{}, \\left/\\right."""
    s = _SPACE.sub("", answer.strip())
    s = s.strip("$").replace("\\left", "").replace("\\right", "").replace("\\!", "")
    s = s.replace("dfrac", "frac").replace("tfrac", "frac")
    changed = True
    while changed:
        changed = False
        for w in _WRAPPERS:
            if s.startswith(w) and s.endswith("}"):
                s, changed = s[len(w) : -1], True
    return s.rstrip(".")


def default_equivalence() -> Equivalence:
    """prmkit.grading when installed (answer graded against the cluster's first answer),
    else normalised-string equality."""
    try:
        from prmkit.grading import grade_answer
    except ImportError:
        return lambda a, b: normalize_answer(a) == normalize_answer(b)

    def equivalent(a: str, b: str) -> bool:
        return bool(grade_answer(a, b).correct)

    return equivalent


class AnswerClusterer:
    """Groups answers into equivalence classes; keeps its cache across calls."""

    def __init__(self, equivalent: Equivalence | None = None):
        self.equivalent = equivalent or default_equivalence()
        self._cache: dict[tuple[str, str], bool] = {}
        self.grader_calls = 0

    def same(self, a: str, b: str) -> bool:
        na, nb = normalize_answer(a), normalize_answer(b)
        if na == nb:
            return True
        key = (na, nb)
        hit = self._cache.get(key)
        if hit is None:  # equivalence is symmetric: reuse the verdict for (b, a)
            hit = self._cache.get((nb, na))
        if hit is None:
            self.grader_calls += 1
            hit = bool(self.equivalent(a, b))
            self._cache[key] = hit
        return hit

    def cluster(self, answers: Sequence[str | None]) -> list[int]:
        """Cluster id per answer (0, 1, ... in order of first appearance); None -> -1."""
        reps: list[str] = []
        by_norm: dict[str, int] = {}
        ids: list[int] = []
        for a in answers:
            if a is None:
                ids.append(-1)
                continue
            norm = normalize_answer(a)
            cid = by_norm.get(norm)
            if cid is None:
                cid = next((i for i, r in enumerate(reps) if self.same(a, r)), None)
                if cid is None:
                    cid = len(reps)
                    reps.append(a)
                by_norm[norm] = cid
            ids.append(cid)
        return ids


def cluster_answers(
    answers: Sequence[str | None], equivalent: Equivalence | None = None
) -> list[int]:
    """Cluster id per answer (None answers get -1). See AnswerClusterer."""
    return AnswerClusterer(equivalent).cluster(answers)


def _pick(candidates: np.ndarray, rng: np.random.Generator | None) -> int:
    """First candidate index, or a uniformly random one when rng is given."""
    if rng is None:
        return int(candidates[0])
    return int(rng.choice(candidates))


def best_of_n(scores: Sequence[float], rng: np.random.Generator | None = None) -> int:
    """Index of the highest score; ties go to the first (or a random one with rng).

    NaN scores are never chosen over a number; an empty list raises ValueError.
    """
    s = np.asarray(scores, dtype=np.float64)
    if s.size == 0:
        raise ValueError("best_of_n needs at least one candidate")
    s = np.where(np.isnan(s), -np.inf, s)
    return _pick(np.flatnonzero(s == s.max()), rng)


def _vote(
    answers: Sequence[str | None],
    weights: np.ndarray,
    clusterer: AnswerClusterer | None,
    rng: np.random.Generator | None,
) -> int:
    clusterer = clusterer or AnswerClusterer()
    ids = np.asarray(clusterer.cluster(answers), dtype=np.int64)
    voting = ids >= 0
    if not voting.any():
        raise ValueError("no candidate has an answer to vote for")
    totals = np.bincount(ids[voting], weights=weights[voting])
    winners = np.flatnonzero(totals == totals.max())
    winner = _pick(winners, rng) if len(winners) > 1 else int(winners[0])
    members = np.flatnonzero(ids == winner)
    # The representative is the winning cluster's best-weighted member.
    return int(members[np.argmax(weights[members])])


def majority_vote(
    answers: Sequence[str | None],
    *,
    clusterer: AnswerClusterer | None = None,
    rng: np.random.Generator | None = None,
) -> int:
    """Index of a candidate from the most frequent answer class (first member).

    Candidates without an answer do not vote. Tied classes: the first to appear wins,
    or a uniformly random one when rng is given.
    """
    return _vote(answers, np.ones(len(answers)), clusterer, rng)


def weighted_vote(
    answers: Sequence[str | None],
    scores: Sequence[float],
    *,
    clusterer: AnswerClusterer | None = None,
    rng: np.random.Generator | None = None,
) -> int:
    """Index of the best-scored candidate of the answer class with the largest score sum.

    Scores are weights and must be finite and non-negative (probabilities, not logs).
    """
    w = np.asarray(scores, dtype=np.float64)
    if len(w) != len(answers):
        raise ValueError(f"{len(answers)} answers but {len(w)} scores")
    if not np.isfinite(w).all() or (w < 0).any():
        raise ValueError("weighted_vote needs finite, non-negative scores")
    return _vote(answers, w, clusterer, rng)
