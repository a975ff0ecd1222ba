"""A synthetic reasoning world: short word problems and linear equations with exact step labels.

Every problem is a small computation tree (`trees`, `generators`, `problems`). A seeded
stochastic solver (`solver`) writes solutions as newline-free steps ("3 * 4 = 12", ...,
"Answer: 19") and makes realistic mistakes: arithmetic slips, miscopied quantities, skipped
steps, slips that cancel, and one systematic "trap" per problem (a misread quantity, a sign
error, a distractor) that many samples share.

Step labels never come from the solver's bookkeeping: `check_solution` (`checker`) parses
every step and accepts it only when its arithmetic is exact and it performs an operation of
the problem's tree on true values (problem quantities, or results written by earlier steps).

This module gathers the world's public names; `python -m prmkit.demo.world` prints its
statistics.
"""

from __future__ import annotations

from prmkit.demo.world.checker import StepCheck, check_pool, check_solution, extract_final_answer
from prmkit.demo.world.examples import (
    corpus_documents,
    corpus_text,
    to_scored_samples,
    to_step_examples,
)
from prmkit.demo.world.hard import HARD_RULE, hard_problems, is_hard
from prmkit.demo.world.ood import OOD_RULE, SHIFTS, ood_problems, shifted_problems
from prmkit.demo.world.plan import Propensity
from prmkit.demo.world.problems import (
    DIFFICULTIES,
    WorldProblem,
    WorldSplits,
    make_problems,
    make_splits,
    with_solver,
)
from prmkit.demo.world.solver import sample_pools, sample_solutions
from prmkit.demo.world.stats import WorldStats, main, majority_answer, world_stats
from prmkit.demo.world.trees import MAX_VALUE, OPS, Node, NodeRef, Tree, build_tree

__all__ = [
    "DIFFICULTIES", "HARD_RULE", "MAX_VALUE", "OOD_RULE", "OPS", "Node", "NodeRef", "Propensity",
    "SHIFTS", "StepCheck", "Tree", "WorldProblem", "WorldSplits", "WorldStats", "build_tree",
    "check_pool", "check_solution", "corpus_documents", "corpus_text", "extract_final_answer",
    "hard_problems", "is_hard", "main", "majority_answer", "make_problems", "make_splits",
    "ood_problems", "sample_pools", "sample_solutions", "shifted_problems", "to_scored_samples",
    "to_step_examples", "with_solver", "world_stats",
]
