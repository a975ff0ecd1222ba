"""An out-of-distribution test set: problems of a fixed rule that no training or pretraining
problem follows (section 6 of "Let's Verify Step by Step").

The rule: word problems of level 6, a level `make_problems` never draws, written in a wording
of their own (a shop's stock over a day, `wordings.SHOP`) instead of the person wording
(`wordings.PERSON`) of every other word problem. Level 6 has more operations than any level
and a larger start; its other numbers are level 5's. The problems are solved, sampled and
checked like any other: same tree operations, steps `a op b = c` and `Answer: N`, the same
solver mistakes and traps.
"""

from __future__ import annotations

import random

from prmkit.demo.world.generators import WORD_NODES, WORD_START, gen_word
from prmkit.demo.world.problems import WorldProblem, distinct_problems
from prmkit.demo.world.wordings import SHOP
from prmkit.errors import PrmkitError

OOD_LEVEL = 6
_IN = slice(0, OOD_LEVEL - 1)  # the levels make_problems draws from
OOD_RULE = (
    f"word problems in a new wording (a shop's stock), "
    f"{min(WORD_NODES[OOD_LEVEL - 1])}-{max(WORD_NODES[OOD_LEVEL - 1])} operations "
    f"(training: at most {max(max(n) for n in WORD_NODES[_IN])}), "
    f"start {WORD_START[OOD_LEVEL - 1][0]}-{WORD_START[OOD_LEVEL - 1][1]} "
    f"(training: at most {max(hi for _, hi in WORD_START[_IN])})"
)


def ood_problems(n: int, seed: int = 0) -> list[WorldProblem]:
    """`n` distinct out-of-distribution problems (ids `ood-<seed>-00000`...), deterministic in
    `seed` and from a stream of their own; the first k are the same for every n >= k."""
    if n < 0:
        raise PrmkitError(f"number of problems must be >= 0, got {n}")

    def draw(rng: random.Random) -> tuple:
        return "word", OOD_LEVEL, *gen_word(rng, OOD_LEVEL, SHOP)

    return distinct_problems(n, random.Random(f"prmkit-world-ood:{seed}"), f"ood-{seed}", draw)
