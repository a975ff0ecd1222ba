"""An out-of-distribution test set: problems of a fixed rule that no training or pretraining
problem follows (section 6 of "Let's Verify Step by Step").

The rule: word problems of level 6, a level `make_problems` never draws, written in a wording
of their own (a shop's stock over a day, `wordings.SHOP`) instead of the person wording
(`wordings.PERSON`) of every other word problem. Level 6 has more operations than any level
and a larger start; its other numbers are level 5's. The problems are solved, sampled and
checked like any other: same tree operations, steps `a op b = c` and `Answer: N`, the same
solver mistakes and traps.

`SHIFTS` takes that rule apart: each of its three changes (the wording, the number of
operations, the start) alone on easy word problems (the levels the demo's reward models and
its base read), level-5 word problems (harder: more operations, larger numbers), each change
alone on those, and all three (the set above). `shifted_problems` draws any of them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from prmkit.demo.world.generators import (
    WORD_NODES,
    WORD_START,
    WordRanges,
    gen_word,
    word_ranges,
)
from prmkit.demo.world.problems import DIFFICULTIES, WorldProblem, distinct_problems
from prmkit.demo.world.wordings import PERSON, SHOP, Wording
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




@dataclass(frozen=True)
class Shift:
    """A set of word problems away from the training distribution: the levels it draws
    from (each problem's level sets the solver's error rates and how often a distractor is
    added), its wording, and what replaces a level's operation counts or start range."""

    name: str
    rule: str
    levels: tuple[int, ...]
    wording: Wording = PERSON
    nodes: tuple[int, ...] | None = None
    start: tuple[int, int] | None = None

    def ranges(self, level: int) -> WordRanges:
        r = word_ranges(level)
        return replace(r, nodes=self.nodes or r.nodes, start=self.start or r.start)


_EASY, _L5 = DIFFICULTIES["easy"], (OOD_LEVEL - 1,)
_NODES, _START = WORD_NODES[OOD_LEVEL - 1], WORD_START[OOD_LEVEL - 1]
_SHOP, _LONG, _LARGE = ("in a new wording (a shop's stock)",
                        f"with {min(_NODES)}-{max(_NODES)} operations",
                        f"starting from {_START[0]}-{_START[1]}")
_EASY_NOTE = "(levels 1-2, as the demo's reward models and the base read)"
_SHIFT_LIST = (
    Shift("wording", f"easy word problems {_EASY_NOTE} {_SHOP}", _EASY, SHOP),
    Shift("length", f"easy word problems {_EASY_NOTE} {_LONG}", _EASY, nodes=_NODES),
    Shift("start", f"easy word problems {_EASY_NOTE} {_LARGE}", _EASY, start=_START),
    Shift("level5", "level-5 word problems (5-7 operations, larger numbers; the reward models "
          "and the base read levels 1-2)", _L5),
    Shift("level5-wording", f"level 5 {_SHOP}", _L5, SHOP),
    Shift("level5-length", f"level 5 {_LONG}", _L5, nodes=_NODES),
    Shift("level5-start", f"level 5 {_LARGE}", _L5, start=_START),
    Shift("all", OOD_RULE, (OOD_LEVEL,), SHOP),
)
SHIFTS = {s.name: s for s in _SHIFT_LIST}


def shifted_problems(shift: str, n: int, seed: int = 0,
                     exclude: frozenset[str] = frozenset()) -> list[WorldProblem]:
    """`n` distinct problems of `SHIFTS[shift]` (ids `ood-<shift>-<seed>-00000`...; "all":
    `ood_problems`'), deterministic in `seed`, each set from a stream of its own; the first
    k are the same for every n >= k. exclude: keys to leave out, those of the problems a
    model read (a key ignores the wording: an easy problem in the shop's wording can compute
    what a training problem computes)."""
    if shift not in SHIFTS:
        raise PrmkitError(f"unknown shift {shift!r}; choose one of {', '.join(SHIFTS)}")
    if n < 0:
        raise PrmkitError(f"number of problems must be >= 0, got {n}")
    s = SHIFTS[shift]

    def draw(rng: random.Random) -> tuple:
        level = rng.choice(s.levels) if len(s.levels) > 1 else s.levels[0]
        return "word", level, *gen_word(rng, level, s.wording, s.ranges(level))

    stream, prefix = ((f"prmkit-world-ood:{seed}", f"ood-{seed}") if shift == "all" else
                      (f"prmkit-world-ood-{shift}:{seed}", f"ood-{shift}-{seed}"))
    return distinct_problems(n, random.Random(stream), prefix, draw, exclude)


def ood_problems(n: int, seed: int = 0) -> list[WorldProblem]:
    """`n` distinct out-of-distribution problems (ids `ood-<seed>-00000`...), deterministic in
    `seed` and from a stream of their own; the first k are the same for every n >= k."""
    return shifted_problems("all", n, seed)
