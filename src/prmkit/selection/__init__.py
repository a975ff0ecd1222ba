"""Pick one answer out of N candidates: best-of-N by score, majority and weighted votes."""

from prmkit.selection.vote import (
    AnswerClusterer,
    best_of_n,
    cluster_answers,
    default_equivalence,
    majority_vote,
    normalize_answer,
    weighted_vote,
)

__all__ = [
    "AnswerClusterer",
    "best_of_n",
    "cluster_answers",
    "default_equivalence",
    "majority_vote",
    "normalize_answer",
    "weighted_vote",
]
