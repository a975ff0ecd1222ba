"""A synthetic reasoning world: short word problems and linear equations with exact step labels.

Every problem is a small computation tree. A seeded stochastic solver writes solutions as
newline-free steps ("3 * 4 = 12", ..., "Answer: 19") and makes realistic mistakes: arithmetic
slips, miscopied quantities, skipped steps, slips that cancel, and one systematic "trap" per
problem (a misread quantity, a sign error, a distractor) that many samples share.

Step labels never come from the solver's bookkeeping: `check_solution` parses every step and
accepts it only when its arithmetic is exact and it performs an operation of the problem's
tree on true values (problem quantities, or results written by earlier steps).
"""

from __future__ import annotations

import argparse
import random
import re
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from prmkit.data.records import Problem, ScoredSample, StepExample
from prmkit.errors import PrmkitError

OPS = ("+", "-", "*", "/")
MAX_VALUE = 300  # every true intermediate value stays within 0..MAX_VALUE
DIFFICULTIES = {"easy": (1, 2), "medium": (2, 3, 4), "hard": (4, 5), "mixed": (1, 2, 3, 4, 5)}

_STEP_RE = re.compile(r"^\s*(-?\d+)\s*([-+*/])\s*(-?\d+)\s*=\s*(-?\d+)\s*$")
_ANSWER_RE = re.compile(r"^\s*Answer:\s*(.*?)\s*$")
_INT_RE = re.compile(r"\d+")


def _apply(op: str, a: int, b: int) -> int | None:
    """Exact integer result of `a op b`; None for division by zero or an inexact division."""
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if b == 0 or a % b:
        return None
    return a // b


# ---------------------------------------------------------------------------------------------
# Computation trees


@dataclass(frozen=True)
class Node:
    """One operation. An operand is a literal (a number of the problem) or an earlier node."""

    op: str
    a: int  # literal value, or the index of an earlier node when a_node
    b: int
    a_node: bool = False
    b_node: bool = False


@dataclass(frozen=True)
class Tree:
    """Operations in a valid evaluation order; the last node's value is the answer."""

    nodes: tuple[Node, ...]
    values: tuple[int, ...]

    @property
    def answer(self) -> int:
        return self.values[-1]

    def operands(self, j: int) -> tuple[int, int]:
        n = self.nodes[j]
        return (self.values[n.a] if n.a_node else n.a, self.values[n.b] if n.b_node else n.b)

    def step(self, j: int) -> str:
        a, b = self.operands(j)
        return f"{a} {self.nodes[j].op} {b} = {self.values[j]}"

    def orders(self, limit: int = 8) -> list[tuple[int, ...]]:
        """Up to `limit` topological orders, the written order first."""
        deps = [
            {x for x, is_node in ((n.a, n.a_node), (n.b, n.b_node)) if is_node} for n in self.nodes
        ]
        out: list[tuple[int, ...]] = []

        def walk(done: list[int]) -> None:
            if len(out) >= limit:
                return
            if len(done) == len(self.nodes):
                out.append(tuple(done))
                return
            for j in range(len(self.nodes)):
                if j not in done and deps[j] <= set(done):
                    walk(done + [j])

        walk([])
        return out


class NodeRef(int):
    """A node index, distinguished from a literal while building a tree."""


class _Invalid(Exception):
    pass


class _Builder:
    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self.values: list[int] = []

    def op(self, op: str, a: int, b: int) -> NodeRef:
        va = self.values[a] if isinstance(a, NodeRef) else a
        vb = self.values[b] if isinstance(b, NodeRef) else b
        v = _apply(op, va, vb)
        if v is None or v < 0 or v > MAX_VALUE:
            raise _Invalid
        self.nodes.append(Node(op, int(a), int(b), isinstance(a, NodeRef), isinstance(b, NodeRef)))
        self.values.append(v)
        return NodeRef(len(self.nodes) - 1)

    def tree(self) -> Tree:
        return Tree(tuple(self.nodes), tuple(self.values))


def build_tree(ops: Sequence[tuple[str, int, int]]) -> Tree:
    """A tree from operations whose operands are literals or NodeRef(index of an earlier one).

    build_tree([("*", 3, 4), ("+", 7, NodeRef(0)), ("-", NodeRef(1), 5)]) is 7 + 3 * 4 - 5.
    """
    bld = _Builder()
    for k, (op, a, b) in enumerate(ops):
        if op not in OPS:
            raise PrmkitError(f"operation {k}: unknown operator {op!r}, use one of {OPS}")
        for x in (a, b):
            if isinstance(x, NodeRef) and not 0 <= x < k:
                raise PrmkitError(f"operation {k}: NodeRef({int(x)}) is not an earlier operation")
        try:
            bld.op(op, a, b)
        except _Invalid:
            raise PrmkitError(
                f"operation {k}: {op!r} gives an inexact, negative or too large value"
            ) from None
    if not bld.nodes:
        raise PrmkitError("a tree needs at least one operation")
    return bld.tree()


# ---------------------------------------------------------------------------------------------
# Problems


@dataclass(frozen=True)
class Propensity:
    """Per-problem error rates of the solver (per step unless stated)."""

    slip: float = 0.03  # arithmetic slip, before the operation/magnitude weight
    copy: float = 0.018  # miscopied literal operand
    skip: float = 0.014  # step done "in the head" and not written
    cancel: float = 0.06  # a later step slips back onto the intended value
    trap: float = 0.0  # per sample: follows the trap tree instead of the true one


@dataclass(frozen=True)
class WorldProblem:
    id: str
    text: str
    answer: str
    kind: str  # "word" or "equation"
    level: int  # 1 (easy) .. 5 (hard)
    tree: Tree
    propensity: Propensity = Propensity()
    trap: Tree | None = None
    trap_kind: str | None = None

    @property
    def quantities(self) -> tuple[int, ...]:
        return tuple(int(m) for m in _INT_RE.findall(self.text))

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
    def _check_table(self) -> dict[tuple[str, int, int], list[tuple[int, ...]]]:
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
    def _plans(self) -> tuple[_Plan, _Plan | None]:
        return _Plan(self.tree, self), (_Plan(self.trap, self) if self.trap else None)


_PEOPLE = (
    ("Ann", "She"), ("Ben", "He"), ("Cal", "He"), ("Dee", "She"), ("Eva", "She"),
    ("Gus", "He"), ("Ivy", "She"), ("Jon", "He"), ("Kim", "She"), ("Max", "He"),
    ("Ned", "He"), ("Pam", "She"), ("Sam", "He"), ("Tia", "She"),
)  # fmt: skip
_ITEMS = ("apples", "pens", "cards", "eggs", "coins", "books", "shells", "stamps", "cups", "toys")
_BOXES = (("bags", "bag"), ("boxes", "box"), ("packs", "pack"))

# Per level 1..5: ranges of numbers and the number of operations.
_WORD_START = ((3, 12), (5, 20), (8, 25), (10, 30), (12, 40))
_WORD_SMALL = ((2, 6), (2, 9), (2, 10), (3, 12), (3, 15))
_FACTOR = ((2, 4), (2, 5), (2, 6), (2, 7), (2, 9))
_WORD_NODES = ((2, 3), (3, 4), (4, 5), (5, 6), (5, 6, 7))
_EQ_X = ((1, 9), (2, 9), (2, 10), (2, 12), (2, 15))
_EQ_CONST = ((1, 9), (1, 12), (1, 15), (1, 20), (1, 25))
_EQ_LAYERS = ((2,), (2, 3), (3,), (3, 4), (4, 5))


def _word_tree(start: int, events: Sequence[tuple]) -> Tree:
    bld = _Builder()
    acc: int = start
    for ev in events:
        kind = ev[0]
        if kind in ("add", "sub"):
            acc = bld.op("+" if kind == "add" else "-", acc, ev[1])
        elif kind in ("mul", "div"):
            acc = bld.op("*" if kind == "mul" else "/", acc, ev[1])
        else:  # addmul, submul (b groups of c); addsum/subsum are the "b + c" misreading
            inner = bld.op("+" if kind.endswith("sum") else "*", ev[1], ev[2])
            acc = bld.op("+" if kind.startswith("add") else "-", acc, inner)
    return bld.tree()


def _try_tree(make) -> Tree | None:
    try:
        return make()
    except _Invalid:
        return None


def _swap_digits(v: int) -> int | None:
    s = str(v)
    if len(s) == 2 and s[0] != s[1] and s[1] != "0":
        return int(s[::-1])
    return None


def _gen_word(rng: random.Random, level: int) -> tuple[str, Tree, list[tuple[str, Tree]]]:
    i = level - 1
    target = rng.choice(_WORD_NODES[i])
    while True:
        start = rng.randint(*_WORD_START[i])
        acc, nodes, events = start, 0, []
        for _ in range(40):
            if nodes >= target:
                break
            kinds = ["add", "sub", "sub", "mul", "div"]
            if target - nodes >= 2:
                kinds += ["addmul", "addmul", "submul"]
            kind = rng.choice(kinds)
            if kind == "add":
                b = rng.randint(*_WORD_SMALL[i])
                ev, new = ("add", b), acc + b
            elif kind == "sub":
                b = rng.randint(*_WORD_SMALL[i])
                ev, new = ("sub", b), acc - b
            elif kind == "mul":
                k = rng.randint(*_FACTOR[i])
                ev, new = ("mul", k), acc * k
            elif kind == "div":
                ks = [k for k in range(2, _FACTOR[i][1] + 1) if acc % k == 0 and acc > k]
                if not ks:
                    continue
                k = rng.choice(ks)
                ev, new = ("div", k), acc // k
            else:
                b, c = rng.randint(*_FACTOR[i]), rng.randint(*_WORD_SMALL[i])
                ev = (kind, b, c)
                new = acc + b * c if kind == "addmul" else acc - b * c
            repeated = bool(events) and kind in ("mul", "div") and events[-1][0] == kind
            if not 1 <= new <= MAX_VALUE or repeated:
                continue
            events.append(ev)
            acc = new
            nodes += 2 if kind in ("addmul", "submul") else 1
        if nodes == target:
            break
    tree = _word_tree(start, events)
    name, pron = rng.choice(_PEOPLE)
    item = rng.choice(_ITEMS)
    boxes, box = rng.choice(_BOXES)
    sentences = [f"{name} has {start} {item}."]
    for ev in events:
        kind = ev[0]
        if kind == "add":
            verb = rng.choice(("buys", "finds", "gets"))
            sentences.append(f"{pron} {verb} {ev[1]} more.")
        elif kind == "sub":
            verb = rng.choice(("gives away", "loses", "sells"))
            sentences.append(f"{pron} {verb} {ev[1]}.")
        elif kind == "mul":
            sentences.append(f"{pron} then has {ev[1]} times as many.")
        elif kind == "div":
            sentences.append(f"{pron} splits them into {ev[1]} equal piles and keeps one pile.")
        elif kind == "addmul":
            sentences.append(f"{pron} buys {ev[1]} {boxes} of {ev[2]}.")
        else:
            sentences.append(f"{pron} gives {ev[2]} to each of {ev[1]} friends.")

    # Trap candidates: misreadings that many samples of this problem share.
    traps: list[tuple[str, Tree | None]] = []
    for k, ev in enumerate(events):
        if ev[0] == "sub":
            flipped = list(events)
            flipped[k] = ("add", ev[1])
            traps.append(("sign", _try_tree(lambda f=flipped: _word_tree(start, f))))
        if ev[0] in ("addmul", "submul") and ev[1] * ev[2] != ev[1] + ev[2]:
            summed = list(events)
            summed[k] = (ev[0].replace("mul", "sum"), ev[1], ev[2])
            traps.append(("add-for-times", _try_tree(lambda s=summed: _word_tree(start, s))))
    if len(events) >= 2:
        traps.append(("forgot-step", _try_tree(lambda: _word_tree(start, events[:-1]))))
    swapped = _swap_digits(start)
    if swapped:
        traps.append(("misread", _try_tree(lambda: _word_tree(swapped, events))))
    if rng.random() < 0.25 + 0.1 * level:
        used = set(_INT_RE.findall(" ".join(sentences)))
        d = rng.randint(*_WORD_START[i])
        while str(d) in used:
            d += 1
        products = [k for k, ev in enumerate(events) if ev[0] in ("addmul", "submul")]
        style = rng.choice(("friend", "cost") if products and events[products[0]][0] == "addmul"
                           else ("friend", "age"))  # fmt: skip
        if style == "friend":
            other = rng.choice([p for p, _ in _PEOPLE if p != name])
            extra = f"{other} has {d} {item}."
            trap = _try_tree(lambda: _word_tree(d, events))
        elif style == "age":
            extra = f"{pron} is {d} years old."
            trap = _try_tree(lambda: _word_tree(d, events))
        else:
            d = next((v for v in rng.sample(range(2, 10), 8) if str(v) not in used), 11)
            k = products[0]
            changed = list(events)
            changed[k] = (events[k][0], events[k][1], d)
            extra = f"Each {box} costs {d} dollars."
            trap = _try_tree(lambda: _word_tree(start, changed))
        sentences.insert(rng.randint(1, len(sentences)), extra)
        traps.append(("distractor", trap))
    noun = item if rng.random() < 0.5 else "of them"
    sentences.append(f"How many {noun} does {name} have now?")
    valid = [(k, t) for k, t in traps if t is not None and t.answer != tree.answer]
    return " ".join(sentences), tree, valid


def _chain_tree(start: int, steps: Sequence[tuple[str, int]]) -> Tree:
    bld = _Builder()
    acc: int = start
    for op, k in steps:
        acc = bld.op(op, acc, k)
    return bld.tree()


_INVERSE = {"+": "-", "-": "+", "*": "/", "/": "*"}


def _gen_equation(rng: random.Random, level: int) -> tuple[str, Tree, list[tuple[str, Tree]]]:
    i = level - 1
    if level in (2, 3, 4) and rng.random() < 0.3:
        return _gen_two_sided(rng, level)
    n_layers = rng.choice(_EQ_LAYERS[i])
    while True:
        x = rng.randint(*_EQ_X[i])
        value, layers = x, []
        multiplicative = rng.random() < 0.8
        ok = True
        for _ in range(n_layers):
            if multiplicative:
                divs = [k for k in range(2, 10) if value % k == 0 and value > k]
                if layers and divs and rng.random() < 0.3:
                    k = rng.choice(divs)
                    layers.append(("/", k))
                    value //= k
                else:
                    k = rng.randint(2, 9 if level > 2 else 5)
                    layers.append(("*", k))
                    value *= k
            else:
                k = rng.randint(*_EQ_CONST[i])
                if value > k + 1 and rng.random() < 0.45:
                    layers.append(("-", k))
                    value -= k
                else:
                    layers.append(("+", k))
                    value += k
            multiplicative = not multiplicative
            if value > MAX_VALUE:
                ok = False
                break
        if ok:
            break
    expr = "x"
    for op, k in layers:
        if op == "*":
            expr = f"{k}x" if expr == "x" else f"{k}({expr})"
        elif op == "/":
            expr = f"x / {k}" if expr == "x" else f"({expr}) / {k}"
        else:
            expr = f"{expr} {op} {k}"
    text = f"Solve {expr} = {value}."
    solve = [(_INVERSE[op], k) for op, k in reversed(layers)]
    tree = _chain_tree(value, solve)
    traps: list[tuple[str, Tree | None]] = []
    for k, (op, c) in enumerate(solve):
        if op in "+-":  # moved a constant without changing its sign
            bad = list(solve)
            bad[k] = (_INVERSE[op], c)
            traps.append(("sign", _try_tree(lambda b=bad: _chain_tree(value, b))))
        if op == "/":  # took the coefficient away instead of dividing by it
            bad = list(solve)
            bad[k] = ("-", c)
            traps.append(("minus-coefficient", _try_tree(lambda b=bad: _chain_tree(value, b))))
        if k + 1 < len(solve):  # undid the inner operation first
            bad = list(solve)
            bad[k], bad[k + 1] = bad[k + 1], bad[k]
            traps.append(("order", _try_tree(lambda b=bad: _chain_tree(value, b))))
    swapped = _swap_digits(value)
    if swapped:
        traps.append(("misread", _try_tree(lambda: _chain_tree(swapped, solve))))
    valid = [(k, t) for k, t in traps if t is not None and t.answer != tree.answer]
    return text, tree, valid


def _two_sided_tree(a: int, b: int, c: int, d: int, sign_x: str, sign_c: str) -> Tree:
    bld = _Builder()
    coef = bld.op(sign_x, a, c)
    const = bld.op(sign_c, d, b)
    bld.op("/", const, coef)
    return bld.tree()


def _gen_two_sided(rng: random.Random, level: int) -> tuple[str, Tree, list[tuple[str, Tree]]]:
    i = level - 1
    while True:
        x = rng.randint(*_EQ_X[i])
        c = rng.randint(2, 6)
        a = c + rng.randint(1, 5)
        b = rng.randint(*_EQ_CONST[i])
        d = (a - c) * x + b
        if d <= MAX_VALUE:
            break
    text = f"Solve {a}x + {b} = {c}x + {d}."
    tree = _two_sided_tree(a, b, c, d, "-", "-")
    traps = [
        ("sign", _try_tree(lambda: _two_sided_tree(a, b, c, d, "+", "-"))),
        ("sign", _try_tree(lambda: _two_sided_tree(a, b, c, d, "-", "+"))),
    ]
    valid = [(k, t) for k, t in traps if t is not None and t.answer != tree.answer]
    return text, tree, valid


def _levels(difficulty: str | int | Sequence[int]) -> tuple[int, ...]:
    if isinstance(difficulty, str):
        if difficulty not in DIFFICULTIES:
            raise PrmkitError(
                f"unknown difficulty {difficulty!r}: use one of {sorted(DIFFICULTIES)}, "
                "a level 1..5 or a list of levels"
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
    """`n` problems, deterministic in `seed`. difficulty: easy|medium|hard|mixed, or levels 1..5."""
    if n < 0:
        raise PrmkitError(f"number of problems must be >= 0, got {n}")
    if not 0.0 <= word_fraction <= 1.0:
        raise PrmkitError(f"word_fraction must be in [0, 1], got {word_fraction}")
    levels = _levels(difficulty)
    rng = random.Random(f"prmkit-world:{seed}")
    problems = []
    seen: set[str] = set()
    while len(problems) < n:
        level = rng.choice(levels)
        kind = "word" if rng.random() < word_fraction else "equation"
        text, tree, traps = (_gen_word if kind == "word" else _gen_equation)(rng, level)
        if text in seen:
            continue
        seen.add(text)
        trap_kind, trap = _pick_trap(traps, rng)
        # Error rates grow with the level; each problem also gets its own skill noise.
        f = 2.0 ** (0.45 * (level - 3) + rng.gauss(0.0, 0.4))
        prop = Propensity(
            slip=min(0.3, 0.03 * f),
            copy=min(0.2, 0.018 * f),
            skip=min(0.2, 0.014 * f),
            cancel=0.06,
            trap=rng.uniform(0.05, 0.7) if trap else 0.0,
        )
        problems.append(
            WorldProblem(
                id=f"world-{seed}-{len(problems):05d}",
                text=text,
                answer=str(tree.answer),
                kind=kind,
                level=level,
                tree=tree,
                propensity=prop,
                trap=trap,
                trap_kind=trap_kind,
            )
        )
    return problems


# ---------------------------------------------------------------------------------------------
# Solver


class _Plan:
    """Precomputed solver data for one tree of one problem."""

    def __init__(self, tree: Tree, problem: WorldProblem):
        self.tree = tree
        self.orders = tree.orders()
        self.clean = [tree.step(j) for j in range(len(tree.nodes))]
        self.quantities = problem.quantities
        p = problem.propensity
        self.thresholds = []  # per node: (copy, copy+skip, copy+skip+slip)
        for j, n in enumerate(tree.nodes):
            a, b = tree.operands(j)
            digits = len(str(a)) + len(str(b)) + len(str(tree.values[j]))
            weight = {"+": 1.0, "-": 1.1, "*": 1.6, "/": 1.3}[n.op] * (1 + 0.3 * (digits - 3))
            copy = p.copy if not (n.a_node and n.b_node) else 0.0
            self.thresholds.append((copy, copy + p.skip, copy + p.skip + p.slip * weight))


def _miscopy(v: int, quantities: Sequence[int], rng: random.Random) -> int:
    r = rng.random()
    if r < 0.35:
        others = [q for q in quantities if q != v]
        if others:
            return rng.choice(others)  # the wrong quantity of the problem
    if r < 0.6:
        s = _swap_digits(v)
        if s is not None:
            return s
    w = v + rng.choice((-2, -1, 1, 1, 2))
    return w if w > 0 and w != v else v + 1


def _slip(res: int, op: str, a: int, rng: random.Random) -> int:
    r = rng.random()
    if op == "*" and r < 0.4 and a > 1:
        d = a * rng.choice((-1, 1))  # one row off in the times table
    elif r < 0.85:
        d = rng.choice((-2, -1, -1, 1, 1, 2))
    else:
        d = rng.choice((-10, 10))
    return res + d if res + d >= 0 else res - d


def _solve(plan: _Plan, rng: random.Random, p: Propensity) -> list[str]:
    tree, nodes, clean = plan.tree, plan.tree.nodes, plan.clean
    intended = tree.values
    order = plan.orders[0] if len(plan.orders) == 1 or rng.random() < 0.6 else (
        rng.choice(plan.orders))  # fmt: skip
    vals = list(intended)  # what the solver believes each node is
    steps: list[str] = []
    rand = rng.random
    dirty = False  # some believed value differs from the intended one
    for j in order:
        t_copy, t_skip, t_err = plan.thresholds[j]
        u = rand()
        if u >= t_err and not dirty:
            steps.append(clean[j])
            continue
        n = nodes[j]
        a = vals[n.a] if n.a_node else n.a
        b = vals[n.b] if n.b_node else n.b
        if u < t_copy:
            if n.a_node or (not n.b_node and rand() < 0.5):
                b = _miscopy(b, plan.quantities, rng)
            else:
                a = _miscopy(a, plan.quantities, rng)
        res = _apply(n.op, a, b)
        if res is None:  # an inexact division after an earlier mistake: round it
            res = a // b if b else a
        if t_copy <= u < t_skip:  # done in the head, not written
            if rand() < 0.25:
                res = _slip(res, n.op, a, rng)
            vals[j] = res
            dirty = dirty or res != intended[j]
            continue
        if t_skip <= u < t_err:
            res = _slip(res, n.op, a, rng)
        elif (
            res != intended[j]
            and (a, b) != tree.operands(j)
            and abs(res - intended[j]) <= 10
            and rand() < p.cancel
        ):
            res = intended[j]  # slips back onto the value it expects: the errors cancel
        vals[j] = res
        steps.append(f"{a} {n.op} {b} = {res}")
        dirty = any(v != w for v, w in zip(vals, intended))
    steps.append(f"Answer: {vals[-1]}")
    return steps


def _as_rng(rng: random.Random | int | Any) -> random.Random:
    if isinstance(rng, random.Random):
        return rng
    if isinstance(rng, int):
        return random.Random(rng)
    if hasattr(rng, "integers"):  # numpy Generator
        return random.Random(int(rng.integers(0, 2**63 - 1)))
    raise PrmkitError(f"rng must be an int seed, random.Random or numpy Generator, got {rng!r}")


def sample_solutions(
    problem: WorldProblem, n: int, rng: random.Random | int | Any
) -> list[list[str]]:
    """`n` sampled solutions (lists of steps ending with "Answer: ...")."""
    rng = _as_rng(rng)
    true_plan, trap_plan = problem._plans
    p = problem.propensity
    out = []
    for _ in range(n):
        plan = trap_plan if trap_plan is not None and rng.random() < p.trap else true_plan
        out.append(_solve(plan, rng, p))
    return out


def sample_pools(
    problems: Sequence[WorldProblem], n: int, seed: int = 0, progress: bool = False
) -> list[list[list[str]]]:
    """`n` solutions per problem; each problem's pool depends only on (seed, problem id)."""
    it: Iterable[WorldProblem] = problems
    if progress:
        from tqdm import tqdm

        it = tqdm(problems, desc="sampling solutions", unit="problem")
    return [sample_solutions(p, n, random.Random(f"{seed}:{p.id}")) for p in it]


# ---------------------------------------------------------------------------------------------
# Checker


@dataclass(frozen=True)
class StepCheck:
    labels: list[int]  # +1 correct, -1 wrong, per step
    first_error: int  # index of the first -1 label, -1 when none
    final_correct: bool
    answer: str | None

    @property
    def process_correct(self) -> bool:
        return self.first_error == -1 and self.final_correct


def _parse_int(s: str | None) -> int | None:
    if s is None:
        return None
    s = s.strip().rstrip(".")
    try:
        return int(s)
    except ValueError:
        return None


def extract_final_answer(steps: Sequence[str]) -> str | None:
    """The answer of the last "Answer: ..." step, None when there is none."""
    for s in reversed(steps):
        m = _ANSWER_RE.match(s)
        if m:
            return m[1]
    return None


def check_solution(problem: WorldProblem, steps: Sequence[str]) -> StepCheck:
    """Label every step by checking it against the problem.

    A computation "a op b = c" is correct when c is exactly a op b and the operation is one of
    the problem's tree whose operands are true values: a problem quantity where the tree uses
    one, else the true result of the sub-computation, already written by an earlier step.
    "Answer: v" is correct when v is the true answer and an earlier step wrote it.
    Any other text is wrong.
    """
    table = problem._check_table
    truth = int(problem.answer)
    written: set[int] = set()
    labels: list[int] = []
    answer = None
    for s in steps:
        m = _STEP_RE.match(s)
        if m:
            a, op, b, c = int(m[1]), m[2], int(m[3]), int(m[4])
            ok = _apply(op, a, b) == c
            if ok:
                needs = table.get((op, a, b))
                ok = needs is not None and any(all(v in written for v in nd) for nd in needs)
            labels.append(1 if ok else -1)
            written.add(c)
            continue
        m = _ANSWER_RE.match(s)
        if m:
            answer = m[1]
            v = _parse_int(answer)
            labels.append(1 if v == truth and v in written else -1)
            continue
        labels.append(-1)
    first_error = labels.index(-1) if -1 in labels else -1
    return StepCheck(labels, first_error, _parse_int(answer) == truth, answer)


# ---------------------------------------------------------------------------------------------
# Training data


def to_step_examples(
    problems: Sequence[WorldProblem],
    pools: Sequence[Sequence[Sequence[str]]],
    kind: str = "prm",
    dedupe: bool = False,
) -> list[StepExample]:
    """StepExamples for a process ("prm") or outcome ("orm") reward model.

    prm: labels 1.0 up to the first error, 0.0 at it, None after (PRM800K's policy); ratings
    +1/-1 likewise. orm: no step labels. Both carry outcome = final-answer correctness and the
    problem id as group. dedupe drops repeated solutions of the same problem.
    """
    if kind not in ("prm", "orm"):
        raise PrmkitError(f"kind must be 'prm' or 'orm', got {kind!r}")
    if len(problems) != len(pools):
        raise PrmkitError(f"{len(problems)} problems but {len(pools)} solution pools")
    out = []
    for prob, pool in zip(problems, pools):
        seen: set[tuple[str, ...]] = set()
        for steps in pool:
            key = tuple(steps)
            if dedupe:
                if key in seen:
                    continue
                seen.add(key)
            chk = check_solution(prob, steps)
            outcome = 1.0 if chk.final_correct else 0.0
            if kind == "orm":
                out.append(StepExample(prob.text, key, outcome=outcome, group=prob.id))
                continue
            first = chk.first_error if chk.first_error >= 0 else len(key)
            labels = tuple(
                1.0 if i < first else 0.0 if i == first else None for i in range(len(key))
            )
            ratings = tuple(None if v is None else (1 if v == 1.0 else -1) for v in labels)
            out.append(StepExample(prob.text, key, labels, ratings, outcome, prob.id))
    return out


def to_scored_samples(
    problem: WorldProblem, solutions: Sequence[Sequence[str]]
) -> list[ScoredSample]:
    """Best-of-N pool records (no scores yet), with the checker's verdict in `extra`."""
    out = []
    for k, steps in enumerate(solutions):
        chk = check_solution(problem, steps)
        out.append(
            ScoredSample(
                problem=problem.text,
                answer=chk.answer,
                is_correct=chk.final_correct,
                steps=list(steps),
                ground_truth_answer=problem.answer,
                subject=problem.kind,
                level=problem.level,
                unique_id=f"{problem.id}/{k}",
                extra={"first_error": chk.first_error, "step_labels": chk.labels},
            )
        )
    return out


def corpus_documents(
    problems: Sequence[WorldProblem], pools: Sequence[Sequence[Sequence[str]]] | None = None
) -> list[str]:
    """One document per solution: the problem line, then one line per step.

    Without pools each problem contributes its reference solution.
    """
    docs = []
    for k, prob in enumerate(problems):
        sols = [prob.reference_solution()] if pools is None else pools[k]
        docs.extend(prob.text + "\n" + "\n".join(s) for s in sols)
    return docs


def corpus_text(
    problems: Sequence[WorldProblem], pools: Sequence[Sequence[Sequence[str]]] | None = None
) -> str:
    """All corpus documents in one string, separated by blank lines (tokenizer training)."""
    return "\n\n".join(corpus_documents(problems, pools)) + "\n"


# ---------------------------------------------------------------------------------------------
# Statistics


def majority_answer(answers: Iterable[str | None]) -> str | None:
    """The most common non-empty answer; ties go to the one seen first."""
    counts = Counter(a for a in answers if a is not None)
    return counts.most_common(1)[0][0] if counts else None


@dataclass
class WorldStats:
    n_problems: int
    samples_per_problem: int
    final_accuracy: float  # per sample
    process_accuracy: float  # per sample: every step correct and the answer right
    wrong_process_right_answer: float  # among right-answer samples
    majority_at_n: float
    pass_at_n: float
    best_process_at_n: float  # a perfect process verifier picks a fully correct sample
    majority_wrong_on_trap: float  # among problems majority gets wrong
    first_error_positions: dict[int, int]  # step index -> samples
    final_accuracy_by_level: dict[int, float]
    mean_steps: float
    mean_step_chars: float
    max_step_chars: int
    extra: dict[str, Any] = field(default_factory=dict)

    def format(self) -> str:
        n = self.samples_per_problem
        lines = [
            f"problems                        {self.n_problems} x {n} samples",
            f"final-answer accuracy           {self.final_accuracy:.3f}",
            f"process accuracy                {self.process_accuracy:.3f}",
            f"wrong process, right answer     {self.wrong_process_right_answer:.3f}"
            " (of right-answer samples)",
            f"majority@{n:<23d}{self.majority_at_n:.3f}",
            f"pass@{n:<27d}{self.pass_at_n:.3f}",
            f"best-process oracle@{n:<12d}{self.best_process_at_n:.3f}",
            f"majority wrong = trap answer    {self.majority_wrong_on_trap:.3f}",
            "accuracy by level               "
            + " ".join(f"L{k}:{v:.2f}" for k, v in sorted(self.final_accuracy_by_level.items())),
            "first error at step             "
            + " ".join(f"{k}:{v}" for k, v in sorted(self.first_error_positions.items())),
            f"steps/solution {self.mean_steps:.2f}, chars/step {self.mean_step_chars:.1f}"
            f" (max {self.max_step_chars})",
        ]
        return "\n".join(lines)


def world_stats(
    problems: Sequence[WorldProblem], pools: Sequence[Sequence[Sequence[str]]]
) -> WorldStats:
    """Accuracy, process quality and majority/pass/oracle@N over the given pools."""
    if len(problems) != len(pools) or not problems:
        raise PrmkitError(f"need as many non-empty pools as problems ({len(problems)})")
    n = min(len(pool) for pool in pools)
    total = right = proc = right_wrong_proc = 0
    maj = pas = best = maj_wrong = maj_trap = 0
    positions: Counter[int] = Counter()
    by_level: dict[int, list[int]] = {}
    n_steps = step_chars = n_step_texts = max_chars = 0
    for prob, pool in zip(problems, pools):
        cache: dict[tuple[str, ...], StepCheck] = {}
        checks = []
        for steps in pool[:n]:
            key = tuple(steps)
            if key not in cache:
                cache[key] = check_solution(prob, steps)
                for s in steps:
                    max_chars = max(max_chars, len(s))
            checks.append(cache[key])
            n_steps += len(steps)
            step_chars += sum(len(s) for s in steps)
            n_step_texts += len(steps)
        total += n
        r = sum(c.final_correct for c in checks)
        right += r
        proc += sum(c.process_correct for c in checks)
        right_wrong_proc += sum(c.final_correct and c.first_error >= 0 for c in checks)
        positions.update(c.first_error for c in checks if c.first_error >= 0)
        lv = by_level.setdefault(prob.level, [0, 0])
        lv[0] += r
        lv[1] += n
        m = majority_answer(c.answer for c in checks)
        if _parse_int(m) == int(prob.answer):
            maj += 1
        else:
            maj_wrong += 1
            maj_trap += prob.trap_answer is not None and _parse_int(m) == int(prob.trap_answer)
        pas += r > 0
        best += any(c.process_correct for c in checks)
    return WorldStats(
        n_problems=len(problems),
        samples_per_problem=n,
        final_accuracy=right / total,
        process_accuracy=proc / total,
        wrong_process_right_answer=right_wrong_proc / max(right, 1),
        majority_at_n=maj / len(problems),
        pass_at_n=pas / len(problems),
        best_process_at_n=best / len(problems),
        majority_wrong_on_trap=maj_trap / max(maj_wrong, 1),
        first_error_positions=dict(positions),
        final_accuracy_by_level={k: v[0] / v[1] for k, v in by_level.items()},
        mean_steps=n_steps / total,
        mean_step_chars=step_chars / max(n_step_texts, 1),
        max_step_chars=max_chars,
    )


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Statistics of the synthetic reasoning world.")
    ap.add_argument("--problems", type=int, default=2000)
    ap.add_argument("--samples", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--difficulty", default="mixed")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    problems = make_problems(args.problems, args.seed, args.difficulty)
    t1 = time.perf_counter()
    pools = sample_pools(problems, args.samples, args.seed)
    t2 = time.perf_counter()
    stats = world_stats(problems, pools)
    t3 = time.perf_counter()
    print(stats.format())
    print(f"time: problems {t1 - t0:.2f}s, sampling {t2 - t1:.2f}s, checking {t3 - t2:.2f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
