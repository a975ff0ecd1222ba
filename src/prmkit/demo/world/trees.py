"""Computation trees: the operations of a problem in a valid evaluation order."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from prmkit.errors import PrmkitError

OPS = ("+", "-", "*", "/")
MAX_VALUE = 300  # every true intermediate value stays within 0..MAX_VALUE


def apply_op(op: str, a: int, b: int) -> int | None:
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

    def canonical(self) -> str:
        """The answer's expression in prefix form, operands of + and * sorted: equal for two
        trees that compute the same thing in another order or operand order."""
        memo: list[str] = []
        for n in self.nodes:
            a = memo[n.a] if n.a_node else str(n.a)
            b = memo[n.b] if n.b_node else str(n.b)
            if n.op in "+*" and b < a:
                a, b = b, a
            memo.append(f"({n.op} {a} {b})")
        return memo[-1]

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


class InvalidTree(Exception):
    pass


class TreeBuilder:
    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self.values: list[int] = []

    def op(self, op: str, a: int, b: int) -> NodeRef:
        va = self.values[a] if isinstance(a, NodeRef) else a
        vb = self.values[b] if isinstance(b, NodeRef) else b
        v = apply_op(op, va, vb)
        if v is None or v < 0 or v > MAX_VALUE:
            raise InvalidTree
        self.nodes.append(Node(op, int(a), int(b), isinstance(a, NodeRef), isinstance(b, NodeRef)))
        self.values.append(v)
        return NodeRef(len(self.nodes) - 1)

    def tree(self) -> Tree:
        return Tree(tuple(self.nodes), tuple(self.values))


def build_tree(ops: Sequence[tuple[str, int, int]]) -> Tree:
    """A tree from operations whose operands are literals or NodeRef(index of an earlier one).

    build_tree([("*", 3, 4), ("+", 7, NodeRef(0)), ("-", NodeRef(1), 5)]) is 7 + 3 * 4 - 5.
    """
    bld = TreeBuilder()
    for k, (op, a, b) in enumerate(ops):
        if op not in OPS:
            raise PrmkitError(f"operation {k}: unknown operator {op!r}, use one of {OPS}")
        for x in (a, b):
            if isinstance(x, NodeRef) and not 0 <= x < k:
                raise PrmkitError(f"operation {k}: NodeRef({int(x)}) is not an earlier operation")
        try:
            bld.op(op, a, b)
        except InvalidTree:
            raise PrmkitError(
                f"operation {k}: {op!r} gives an inexact, negative or too large value"
            ) from None
    if not bld.nodes:
        raise PrmkitError("a tree needs at least one operation")
    return bld.tree()
