"""The stochastic solver: sampled step-by-step solutions with realistic mistakes."""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from typing import Any

from prmkit.demo.world.generators import swap_digits
from prmkit.demo.world.plan import Plan, Propensity
from prmkit.demo.world.problems import WorldProblem
from prmkit.demo.world.trees import apply_op
from prmkit.errors import PrmkitError


def _miscopy(v: int, quantities: Sequence[int], rng: random.Random) -> int:
    r = rng.random()
    if r < 0.35:
        others = [q for q in quantities if q != v]
        if others:
            return rng.choice(others)  # the wrong quantity of the problem
    if r < 0.6:
        s = swap_digits(v)
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


def pick_order(plan: Plan, rng: random.Random) -> tuple[int, ...]:
    return plan.orders[0] if len(plan.orders) == 1 or rng.random() < 0.6 else (
        rng.choice(plan.orders))  # fmt: skip


def _solve(plan: Plan, rng: random.Random, p: Propensity) -> list[str]:
    order = pick_order(plan, rng)
    return continue_steps(plan, rng, p, order[:0], order, list(plan.tree.values))


def continue_steps(plan: Plan, rng: random.Random, p: Propensity, done: Sequence[int],
              order: Sequence[int], vals: list[int]) -> list[str]:
    """The steps after `done` (nodes already handled, written or in the head), following
    `order`; `vals` holds what the solver believes each node is (updated in place)."""
    tree, nodes, clean = plan.tree, plan.tree.nodes, plan.clean
    intended = tree.values
    steps: list[str] = []
    rand = rng.random
    dirty = any(vals[j] != intended[j] for j in done)  # a believed value is off
    handled = set(done)
    for j in order:
        if j in handled:
            continue
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
        res = apply_op(n.op, a, b)
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
    true_plan, trap_plan = problem.plans
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
