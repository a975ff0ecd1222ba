"""What the solver knows of a problem: its error rates and, per tree, precomputed data."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from prmkit.demo.world.trees import Tree


@dataclass(frozen=True)
class Propensity:
    """Per-problem error rates of the solver (per step unless stated)."""

    slip: float = 0.03  # arithmetic slip, before the operation/magnitude weight
    copy: float = 0.018  # miscopied literal operand
    skip: float = 0.014  # step done "in the head" and not written
    cancel: float = 0.06  # a later step slips back onto the intended value
    trap: float = 0.0  # per sample: follows the trap tree instead of the true one


class Plan:
    """Precomputed solver data for one tree of one problem (its quantities and rates)."""

    def __init__(self, tree: Tree, quantities: Sequence[int], p: Propensity):
        self.tree = tree
        self.orders = tree.orders()
        self.clean = [tree.step(j) for j in range(len(tree.nodes))]
        self.quantities = quantities
        self.thresholds = []  # per node: (copy, copy+skip, copy+skip+slip)
        for j, n in enumerate(tree.nodes):
            a, b = tree.operands(j)
            digits = len(str(a)) + len(str(b)) + len(str(tree.values[j]))
            weight = {"+": 1.0, "-": 1.1, "*": 1.6, "/": 1.3}[n.op] * (1 + 0.3 * (digits - 3))
            copy = p.copy if not (n.a_node and n.b_node) else 0.0
            self.thresholds.append((copy, copy + p.skip, copy + p.skip + p.slip * weight))
