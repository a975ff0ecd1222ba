"""Exact step labels: every step of a solution is checked against the problem."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

from prmkit.demo.world.problems import WorldProblem
from prmkit.demo.world.trees import apply_op

STEP_RE = re.compile(r"^\s*(-?\d+)\s*([-+*/])\s*(-?\d+)\s*=\s*(-?\d+)\s*$")
_ANSWER_RE = re.compile(r"^\s*Answer:\s*(.*?)\s*$")
T = TypeVar("T")


@dataclass(frozen=True)
class StepCheck:
    labels: list[int]  # +1 correct, -1 wrong, per step
    first_error: int  # index of the first -1 label, -1 when none
    final_correct: bool
    answer: str | None

    @property
    def process_correct(self) -> bool:
        return self.first_error == -1 and self.final_correct


def parse_int(s: str | None) -> int | None:
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
    table = problem.check_table
    truth = int(problem.answer)
    written: set[int] = set()
    labels: list[int] = []
    answer = None
    for s in steps:
        m = STEP_RE.match(s)
        if m:
            a, op, b, c = int(m[1]), m[2], int(m[3]), int(m[4])
            ok = apply_op(op, a, b) == c
            if ok:
                needs = table.get((op, a, b))
                ok = needs is not None and any(all(v in written for v in nd) for nd in needs)
            labels.append(1 if ok else -1)
            written.add(c)
            continue
        m = _ANSWER_RE.match(s)
        if m:
            answer = m[1]
            v = parse_int(answer)
            labels.append(1 if v == truth and v in written else -1)
            continue
        labels.append(-1)
    first_error = labels.index(-1) if -1 in labels else -1
    return StepCheck(labels, first_error, parse_int(answer) == truth, answer)


def per_distinct(fn: Callable[[Sequence[str]], T], pool: Sequence[Sequence[str]]) -> list[T]:
    """`fn(steps)` for every solution of a pool, run once per distinct solution (a pool of
    sampled solutions repeats itself); repeats share the result."""
    seen: dict[tuple, T] = {}
    out = []
    for steps in pool:
        key = tuple(steps)
        if key not in seen:
            seen[key] = fn(steps)
        out.append(seen[key])
    return out


def check_pool(problem: WorldProblem, pool: Sequence[Sequence[str]]) -> list[StepCheck]:
    """`check_solution` of every solution of a pool, each distinct one checked once."""
    return per_distinct(partial(check_solution, problem), pool)
