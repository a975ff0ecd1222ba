"""Hard problems: the test problems with a generator that rarely solves some of them.

Best-of-N can only rise while larger pools still hold right solutions that smaller ones
lack. On MATH, "Let's Verify Step by Step"'s generator leaves many problems unsolved at
small N and solves them at large N, so its Figure 3 keeps rising to N = 1,860. This
world's solver solves almost every problem within 16 samples (pass@16 98.4% or more at
every level: `benchmarks/world_hard_settings.py`), so past N = 16 a larger pool adds only
distractors. The hard set keeps the
test problems and their wording and changes the solver alone: of the problems that have a
trap (a misreading the solver may follow), a share `share`, drawn per problem from
(seed, problem id), follow it with probability 1 - r, where r, the chance of reading the
problem right, is log-uniform between 1/300 and 1/10: a right reading is expected within
10 to 300 samples, the range of N that Figure 3 spans here. Every other rate (slips,
miscopies, skipped steps) is the problem's own, and every other problem is unchanged, so
its pool is the test pool (`sample_pools` depends on (seed, problem id) alone).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import replace

from prmkit.demo.world.problems import TRAP_RATE, WorldProblem
from prmkit.errors import PrmkitError

READ_RIGHT = (1 / 300, 1 / 10)  # a hard problem's chance of reading it right: log-uniform
HARD_RULE = ("the test problems, with a share of those with a trap read right only 1 in 10 "
             "to 1 in 300 samples (log-uniform)")


def hard_problems(problems: Sequence[WorldProblem], share: float,
                  seed: int = 0) -> list[WorldProblem]:
    """`problems` with `share` of those that have a trap made hard (module docstring);
    which ones and how hard depends on (seed, problem id) only."""
    if not 0.0 <= share <= 1.0:
        raise PrmkitError(f"hard_share must lie in [0, 1], got {share}")
    lo, hi = (math.log10(v) for v in READ_RIGHT)
    out = []
    for p in problems:
        rng = random.Random(f"hard:{seed}:{p.id}")
        chosen, right = rng.random() < share, 10 ** rng.uniform(lo, hi)
        if p.trap is not None and chosen:
            p = replace(p, propensity=replace(p.propensity, trap=1.0 - right))
        out.append(p)
    return out


def is_hard(problem: WorldProblem) -> bool:
    """Whether the solver follows the problem's trap more often than the world ever draws
    (`problems.TRAP_RATE`)."""
    return problem.trap is not None and problem.propensity.trap > TRAP_RATE[1]
