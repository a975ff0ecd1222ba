"""World problems, their canonical identity, and disjoint test / train / pretrain splits."""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property

from prmkit.data.records import Problem
from prmkit.demo.world.generators import INT_RE, gen_equation, gen_word
from prmkit.demo.world.plan import Plan, Propensity
from prmkit.demo.world.trees import Tree
from prmkit.errors import PrmkitError

TRAP_RATE = (0.05, 0.7)  # per problem with a trap: how often the solver follows it, uniform
DIFFICULTIES = {"easy": (1, 2), "medium": (2, 3, 4), "hard": (4, 5), "mixed": (1, 2, 3, 4, 5)}
FORMS = ("word", "equation", "two-sided")
TWO_SIDED_RE = re.compile(r"^Solve \d+x [-+] \d+ = \d+x [-+] \d+\.$")  # generators' two-sided text


@dataclass(frozen=True)
class WorldProblem:
    id: str
    text: str
    answer: str
    kind: str  # "word" or "equation"
    level: int  # 1 (easy) .. 5 (hard); 6 only in the out-of-distribution set (ood.py)
    tree: Tree
    propensity: Propensity = Propensity()
    trap: Tree | None = None
    trap_kind: str | None = None

    @property
    def quantities(self) -> tuple[int, ...]:
        return tuple(int(m) for m in INT_RE.findall(self.text))

    @property
    def form(self) -> str:
        """The problem's form (FORMS): a word problem, an equation with x on one side (nested
        operations undone from the outside in), or one with x on both sides."""
        if self.kind == "word":
            return "word"
        return "two-sided" if TWO_SIDED_RE.match(self.text) else "equation"

    @property
    def trap_answer(self) -> str | None:
        return None if self.trap is None else str(self.trap.answer)

    def reference_solution(self) -> list[str]:
        return [self.tree.step(j) for j in range(len(self.tree.nodes))] + [f"Answer: {self.answer}"]

    def to_problem(self) -> Problem:
        return Problem(
            text=self.text,
            answer=self.answer,
            id=self.id,
            solution="\n".join(self.reference_solution()),
            subject=self.kind,
            level=self.level,
        )

    @cached_property
    def check_table(self) -> dict[tuple[str, int, int], list[tuple[int, ...]]]:
        """(op, a, b) -> for each matching node, the operand values that must be written first."""
        table: dict[tuple[str, int, int], list[tuple[int, ...]]] = {}
        t = self.tree
        for j, n in enumerate(t.nodes):
            a, b = t.operands(j)
            need = tuple(v for v, is_node in ((a, n.a_node), (b, n.b_node)) if is_node)
            keys = {(n.op, a, b)} | ({(n.op, b, a)} if n.op in "+*" else set())
            for k in keys:
                table.setdefault(k, []).append(need)
        return table

    @cached_property
    def key(self) -> str:
        """Canonical identity: the computation the problem asks for, whatever its wording
        (names, items, verbs, distractors, word problem or equation)."""
        return self.tree.canonical()

    @cached_property
    def plans(self) -> tuple[Plan, Plan | None]:
        """The solver's plans of the true tree and of the trap's (None without a trap)."""
        return (Plan(self.tree, self.quantities, self.propensity),
                Plan(self.trap, self.quantities, self.propensity) if self.trap else None)


def _levels(difficulty: str | int | Sequence[int]) -> tuple[int, ...]:
    if isinstance(difficulty, str) and re.fullmatch(r"\d(,\d)*", difficulty):
        difficulty = tuple(int(v) for v in difficulty.split(","))  # "2" or "2,3": levels
    if isinstance(difficulty, str):
        if difficulty not in DIFFICULTIES:
            raise PrmkitError(
                f"unknown difficulty {difficulty!r}: use one of {sorted(DIFFICULTIES)}, "
                "a level 1..5 or a list of levels (\"2,3\")"
            )
        return DIFFICULTIES[difficulty]
    levels = (difficulty,) if isinstance(difficulty, int) else tuple(difficulty)
    if not levels or any(not isinstance(v, int) or not 1 <= v <= 5 for v in levels):
        raise PrmkitError(f"difficulty levels must be integers in 1..5, got {difficulty!r}")
    return levels


def _pick_trap(traps: list[tuple[str, Tree]], rng: random.Random) -> tuple[str | None, Tree | None]:
    """A kind of misreading (a distractor three times as likely), then one instance of it."""
    if not traps:
        return None, None
    kinds = sorted({k for k, _ in traps})
    kind = rng.choices(kinds, weights=[3 if k == "distractor" else 1 for k in kinds])[0]
    return rng.choice([(k, t) for k, t in traps if k == kind])


def make_problems(
    n: int,
    seed: int = 0,
    difficulty: str | int | Sequence[int] = "mixed",
    word_fraction: float = 0.6,
) -> list[WorldProblem]:
    """`n` distinct problems (by `key`), deterministic in `seed`.

    difficulty: easy|medium|hard|mixed, or levels 1..5. The first k problems are the same
    for every n >= k.
    """
    if n < 0:
        raise PrmkitError(f"number of problems must be >= 0, got {n}")
    if not 0.0 <= word_fraction <= 1.0:
        raise PrmkitError(f"word_fraction must be in [0, 1], got {word_fraction}")
    levels = _levels(difficulty)

    def draw(rng: random.Random) -> tuple:
        level = rng.choice(levels)
        kind = "word" if rng.random() < word_fraction else "equation"
        return kind, level, *(gen_word if kind == "word" else gen_equation)(rng, level)

    return distinct_problems(n, random.Random(f"prmkit-world:{seed}"), f"world-{seed}", draw)


def distinct_problems(n: int, rng: random.Random, prefix: str, draw,
                      exclude: frozenset[str] = frozenset()) -> list[WorldProblem]:
    """`n` problems of distinct keys, none in `exclude`, ids `prefix-00000`...; `draw(rng)`
    generates one as (kind, level, text, tree, traps)."""
    problems: list[WorldProblem] = []
    seen: set[str] = set(exclude)
    while len(problems) < n:
        kind, level, text, tree, traps = draw(rng)
        key = tree.canonical()
        if key in seen:
            continue
        seen.add(key)
        pid = f"{prefix}-{len(problems):05d}"
        problems.append(_world_problem(rng, pid, kind, level, text, tree, traps))
    return problems


def _world_problem(rng: random.Random, pid: str, kind: str, level: int, text: str, tree: Tree,
                  traps: list[tuple[str, Tree]]) -> WorldProblem:
    """A generated problem with one of its traps and its solver's error rates."""
    trap_kind, trap = _pick_trap(traps, rng)
    # Error rates grow with the level; each problem also gets its own skill noise.
    f = 2.0 ** (0.45 * (level - 3) + rng.gauss(0.0, 0.4))
    prop = Propensity(
        slip=min(0.3, 0.03 * f),
        copy=min(0.2, 0.018 * f),
        skip=min(0.2, 0.014 * f),
        cancel=0.06,
        trap=rng.uniform(*TRAP_RATE) if trap else 0.0,
    )
    return WorldProblem(id=pid, text=text, answer=str(tree.answer), kind=kind, level=level,
                        tree=tree, propensity=prop, trap=trap, trap_kind=trap_kind)


@dataclass(frozen=True)
class WorldSplits:
    """Test, reward-model-training and pretraining problems: no problem (by `key`) is in two."""

    test: list[WorldProblem]
    train: list[WorldProblem]
    pretrain: list[WorldProblem]


def make_splits(
    seed: int,
    test: int,
    train: int,
    pretrain: int,
    difficulty: str | int | Sequence[int] = "mixed",
) -> WorldSplits:
    """Disjoint splits cut from one stream of distinct problems: test first, so the test set
    of a seed does not change with the sizes of the other two."""
    for name, n in (("test", test), ("train", train), ("pretrain", pretrain)):
        if n < 0:
            raise PrmkitError(f"{name} split size must be >= 0, got {n}")
    stream = make_problems(test + train + pretrain, seed=seed, difficulty=difficulty)
    return WorldSplits(stream[:test], stream[test:test + train], stream[test + train:])


def with_solver(problems: Sequence[WorldProblem], cancel: float | None = None,
                skip_scale: float = 1.0) -> list[WorldProblem]:
    """The problems with their solver's rates changed: `cancel`, the chance that a step
    computed from a wrong value slips back onto the value it expects (None keeps each
    problem's), and steps done in the head (not written) `skip_scale` times as often (at
    most 0.6 per step). Both make right answers reached through a wrong step commoner."""
    if cancel is not None and not 0.0 <= cancel <= 1.0:
        raise PrmkitError(f"cancel must lie in [0, 1], got {cancel}")
    if skip_scale < 0:
        raise PrmkitError(f"skip_scale must be >= 0, got {skip_scale}")
    if cancel is None and skip_scale == 1.0:
        return list(problems)
    return [replace(p, propensity=replace(
        p.propensity, cancel=p.propensity.cancel if cancel is None else cancel,
        skip=min(0.6, p.propensity.skip * skip_scale))) for p in problems]
