"""Prefix-tree packing of step examples.

PRM800K rates several alternative next steps after one prefix, so most examples of a
problem repeat the same prompt and the same first steps. Packing merges the examples
of a problem into a trie whose nodes are token segments from `SegmentEncoder`: the
prompt, then one node per step (step tokens + separator; identical step text after the
same parent -> the same node). A trie is flattened depth-first into one row with a
tree attention mask (a token sees the earlier tokens of its own node and every token of
its ancestor nodes) and per-branch position ids (a node starts where its parent ends),
so every path is computed exactly as if it ran alone.

Labels sit on the last token of a labelled node. Every label has a weight from
`label_weights`, shared with the unpacked rows: 1 (`label_weighting="count"`, the
default here), or 1/k for a step labelled by k examples (`"unique"`: each distinct
labelled step weighs 1 in total). A node's target is the weighted mean of its labels'
targets and its weight their sum: cross-entropy is linear in the target, so packed and
unpacked rows give exactly the same loss, including when the labels disagree.

Rows hold at most `row_tokens` tokens. A tree that is too big is split into several
units, each carrying copies of the ancestors it needs; units (whole small trees and
split pieces) are packed several per row, block-diagonally (no attention across units).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch

from prmkit.data.records import StepExample
from prmkit.errors import PrmkitError
from prmkit.models.formatting import SegmentEncoder

LabelWeighting = Literal["count", "unique"]
Objective = Literal["prm", "orm"]


# ---- targets ---------------------------------------------------------------------------
def step_target(label: float | None, rating: int | None, num_classes: int) -> list[float] | None:
    """Target distribution over classes (class 0 = correct) for one step, or None.

    Two classes: [p, 1 - p] from the label. Three classes: one-hot from the rating
    (+1, 0, -1), or [p, 0, 1 - p] from the label when there is no rating.
    """
    if num_classes == 2:
        return None if label is None else [float(label), 1.0 - float(label)]
    if rating is not None:
        return [float(rating == 1), float(rating == 0), float(rating == -1)]
    return None if label is None else [float(label), 0.0, 1.0 - float(label)]


def example_targets(ex: StepExample, num_classes: int, objective: Objective) -> list[list[float] | None]:
    """Per-step targets of an example: every labelled step (PRM) or the last step (ORM)."""
    n = len(ex.steps)
    if objective == "orm":
        out: list[list[float] | None] = [None] * n
        if n and ex.outcome is not None:
            p = float(ex.outcome)
            out[-1] = [p, 1.0 - p] if num_classes == 2 else [p, 0.0, 1.0 - p]
        return out
    labels = list(ex.labels) + [None] * (n - len(ex.labels))
    ratings = list(ex.ratings) + [None] * (n - len(ex.ratings))
    return [step_target(labels[i], ratings[i], num_classes) for i in range(n)]


# ---- trie ------------------------------------------------------------------------------
@dataclass
class Node:
    ids: tuple[int, ...]
    parent: Node | None
    start: int  # position id of the first token (depth in tokens)
    children: dict[str, Node] = field(default_factory=dict)
    target_sum: list[float] | None = None  # weighted sum of the labels' targets
    weight: float = 0.0  # sum of the labels' weights
    count: int = 0
    sources: list[tuple[int, int]] = field(default_factory=list)  # (example index, step index)
    size: int = 0  # tokens in this node's subtree (filled by `_sizes`)

    @property
    def end(self) -> int:
        return self.start + len(self.ids)

    def add_label(self, target: list[float], source: tuple[int, int], weight: float = 1.0) -> None:
        if self.target_sum is None:
            self.target_sum = [0.0] * len(target)
        self.target_sum = [a + weight * b for a, b in zip(self.target_sum, target)]
        self.weight += weight
        self.count += 1
        self.sources.append(source)


def label_weights(examples: Sequence[StepExample], targets: Sequence[Sequence[list[float] | None]],
                  weighting: LabelWeighting = "count") -> list[list[float]]:
    """Weight of the label of step j of example i (`targets[i][j]` not None), for packed
    and unpacked rows alike. count: 1 each. unique: 1/k, where k examples label the same
    step after the same prefix of the same problem, so each distinct labelled step
    weighs 1 in total (PRM800K with alternatives as prefixes repeats a kept prefix step
    once per rated alternative after it)."""
    if weighting not in ("count", "unique"):
        raise PrmkitError(f"label_weighting must be 'count' or 'unique', not {weighting!r}")
    if weighting == "count":
        return [[1.0] * len(t) for t in targets]
    node_of: dict[tuple[int, str], int] = {}  # (parent node, step text) -> node
    nodes: list[list[int]] = []
    labels: dict[int, int] = {}
    for ex, tg in zip(examples, targets):
        node = node_of.setdefault((-1, ex.problem), len(node_of))
        ids = []
        for step, t in zip(ex.steps, tg):
            node = node_of.setdefault((node, step), len(node_of))
            ids.append(node)
            if t is not None:
                labels[node] = labels.get(node, 0) + 1
        nodes.append(ids)
    return [[1.0 / labels[n] if t is not None else 0.0 for n, t in zip(ids, tg)]
            for ids, tg in zip(nodes, targets)]


def build_tries(
    examples: Sequence[StepExample],
    encoder: SegmentEncoder,
    num_classes: int = 2,
    objective: Objective = "prm",
    label_weighting: LabelWeighting = "count",
) -> list[Node]:
    """One trie per distinct problem text; steps that do not fit in max_length are dropped
    whole (as `SegmentEncoder.encode` does). Returns the roots in first-seen order."""
    roots: dict[str, Node] = {}
    max_length = encoder.fmt.max_length
    all_targets = [example_targets(ex, num_classes, objective) for ex in examples]
    weights = label_weights(examples, all_targets, label_weighting)
    for ei, ex in enumerate(examples):
        targets = all_targets[ei]
        root = roots.get(ex.problem)
        if root is None:
            ids = encoder.prompt_ids(ex.problem)
            if len(ids) > max_length:
                raise PrmkitError(
                    f"the prompt alone has {len(ids)} tokens, more than max_length={max_length}"
                )
            root = roots[ex.problem] = Node(ids, None, 0)
        last = max((i for i, t in enumerate(targets) if t is not None), default=-1)
        node = root
        for si in range(last + 1):
            step = ex.steps[si]
            child = node.children.get(step)
            if child is None:
                ids = encoder.step_ids(step)
                if node.end + len(ids) > max_length:
                    break
                child = node.children[step] = Node(ids, node, node.end)
            node = child
            if targets[si] is not None:
                node.add_label(targets[si], (ei, si), weights[ei][si])
    return [r for r in roots.values() if _has_label(r)]


def _has_label(node: Node) -> bool:
    return node.count > 0 or any(_has_label(c) for c in node.children.values())


def _sizes(node: Node) -> int:
    node.size = len(node.ids) + sum(_sizes(c) for c in node.children.values())
    return node.size


def _prune(node: Node) -> None:
    """Drop subtrees without any label (nothing to learn there)."""
    node.children = {k: c for k, c in node.children.items() if _has_label(c)}
    for c in node.children.values():
        _prune(c)


# ---- units: self-contained pieces of a trie that fit in a row -------------------------
@dataclass
class Segment:
    ids: tuple[int, ...]
    parent: int  # index of the parent segment within the unit, -1 for a root
    start: int  # position id of the first token
    target: list[float] | None  # averaged target on the last token, or None
    weight: float
    sources: list[tuple[int, int]]


@dataclass
class Unit:
    segments: list[Segment]

    @property
    def num_tokens(self) -> int:
        return sum(len(s.ids) for s in self.segments)


def _segment(node: Node, parent: int, labelled: bool) -> Segment:
    if not labelled or node.count == 0:
        return Segment(node.ids, parent, node.start, None, 0.0, [])
    target = [v / node.weight for v in node.target_sum]
    return Segment(node.ids, parent, node.start, target, node.weight, list(node.sources))


def _emit_subtree(node: Node, parent: int, segs: list[Segment]) -> None:
    segs.append(_segment(node, parent, True))
    me = len(segs) - 1
    for c in node.children.values():
        _emit_subtree(c, me, segs)


def split_tree(root: Node, row_tokens: int) -> list[Unit]:
    """Cut a trie into units of at most `row_tokens` tokens. Each unit is a chain of copied
    ancestors followed by whole subtrees; a node's label is emitted exactly once."""
    _prune(root)
    _sizes(root)
    units: list[Unit] = []
    labelled: set[int] = set()  # id() of nodes whose label was emitted

    def visit(node: Node, chain: list[Node], chain_tokens: int) -> None:
        # node does not fit with its chain: the node joins the chain, children are grouped
        chain = [*chain, node]
        chain_tokens += len(node.ids)
        if chain_tokens > row_tokens:
            raise PrmkitError(f"a path of {chain_tokens} tokens exceeds row_tokens={row_tokens}")
        group: list[Node] = []
        group_tokens = 0

        def flush() -> None:
            nonlocal group, group_tokens
            if not group and id(node) in labelled:
                return
            segs: list[Segment] = []
            for depth, a in enumerate(chain):
                first = id(a) not in labelled
                segs.append(_segment(a, depth - 1, first))
                labelled.add(id(a))
            for c in group:
                _emit_subtree(c, len(chain) - 1, segs)
            units.append(Unit(segs))
            group, group_tokens = [], 0

        big = []
        for c in node.children.values():
            if chain_tokens + c.size > row_tokens:
                big.append(c)
                continue
            if chain_tokens + group_tokens + c.size > row_tokens:
                flush()
            group.append(c)
            group_tokens += c.size
        if group or (node.count > 0 and id(node) not in labelled and not big):
            flush()  # big children carry the chain (and this node's label) otherwise
        for c in big:
            visit(c, chain, chain_tokens)

    if root.size <= row_tokens:
        segs: list[Segment] = []
        _emit_subtree(root, -1, segs)
        return [Unit(segs)]
    visit(root, [], 0)
    return units


# ---- rows ------------------------------------------------------------------------------
@dataclass
class PackedRow:
    """One packed sequence: tokens, their segment (node) index, the segments' parents, and
    the labelled positions with targets, weights and sources."""

    input_ids: list[int]
    position_ids: list[int]
    token_segment: list[int]
    segment_parent: list[int]  # -1 for a unit's root
    label_positions: list[int]
    targets: list[list[float]]
    weights: list[float]
    sources: list[list[tuple[int, int]]]

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def num_labels(self) -> int:
        return len(self.label_positions)

    def ancestry(self) -> torch.Tensor:
        """[S, S] bool: segment i may see segment j (j is i or one of its ancestors)."""
        s = len(self.segment_parent)
        anc = torch.zeros(s, s, dtype=torch.bool)
        for i, p in enumerate(self.segment_parent):  # parents precede children
            if p >= 0:
                anc[i] = anc[p]
            anc[i, i] = True
        return anc

    def attention_mask(self, length: int | None = None) -> torch.Tensor:
        """[length, length] bool, True = may attend; padding attends only to itself."""
        n = len(self.input_ids)
        length = length or n
        anc = self.ancestry()
        seg = torch.tensor(self.token_segment, dtype=torch.long)
        allowed = anc[seg[:, None], seg[None, :]] & torch.ones(n, n, dtype=torch.bool).tril()
        if length == n:
            return allowed
        out = torch.eye(length, dtype=torch.bool)
        out[:n, :n] = allowed
        return out


def _append_unit(row: PackedRow, unit: Unit) -> None:
    offset = len(row.segment_parent)
    for seg in unit.segments:
        idx = len(row.segment_parent)
        row.segment_parent.append(-1 if seg.parent < 0 else seg.parent + offset)
        row.input_ids.extend(seg.ids)
        row.position_ids.extend(range(seg.start, seg.start + len(seg.ids)))
        row.token_segment.extend([idx] * len(seg.ids))
        if seg.target is not None:
            row.label_positions.append(len(row.input_ids) - 1)
            row.targets.append(seg.target)
            row.weights.append(seg.weight)
            row.sources.append(seg.sources)


def pack_units(units: Iterable[Unit], row_tokens: int) -> list[PackedRow]:
    """First-fit-decreasing bin packing of units into rows of at most row_tokens tokens."""
    rows: list[PackedRow] = []
    free: list[int] = []
    for unit in sorted(units, key=lambda u: -u.num_tokens):
        n = unit.num_tokens
        i = next((j for j, room in enumerate(free) if n <= room), None)
        if i is None:
            rows.append(PackedRow([], [], [], [], [], [], [], []))
            free.append(row_tokens)
            i = len(rows) - 1
        _append_unit(rows[i], unit)
        free[i] -= n
    return rows


def pack_examples(
    examples: Sequence[StepExample],
    encoder: SegmentEncoder,
    row_tokens: int,
    num_classes: int = 2,
    objective: Objective = "prm",
    label_weighting: LabelWeighting = "count",
) -> list[PackedRow]:
    """Examples -> packed rows (tries per problem, split and bin-packed to row_tokens)."""
    if row_tokens < encoder.fmt.max_length:
        raise PrmkitError(
            f"row_tokens={row_tokens} must be at least the step format's "
            f"max_length={encoder.fmt.max_length}"
        )
    units: list[Unit] = []
    for root in build_tries(examples, encoder, num_classes, objective, label_weighting):
        units.extend(split_tree(root, row_tokens))
    return pack_units(units, row_tokens)


def unpacked_rows(
    examples: Sequence[StepExample],
    encoder: SegmentEncoder,
    num_classes: int = 2,
    objective: Objective = "prm",
    label_weighting: LabelWeighting = "count",
) -> list[PackedRow]:
    """One row per example (no sharing), in the same representation as packed rows."""
    all_targets = [example_targets(ex, num_classes, objective) for ex in examples]
    weights = label_weights(examples, all_targets, label_weighting)
    rows = []
    for ei, ex in enumerate(examples):
        targets = all_targets[ei]
        enc = encoder.encode(ex.problem, ex.steps)
        positions, tgts, wts, srcs = [], [], [], []
        for pos, si in zip(enc.label_positions, enc.step_indices):
            if targets[si] is not None:
                positions.append(pos)
                tgts.append(targets[si])
                wts.append(weights[ei][si])
                srcs.append([(ei, si)])
        if not positions:
            continue
        n = positions[-1] + 1  # tokens after the last label are not needed
        rows.append(PackedRow(enc.input_ids[:n], list(range(n)), [0] * n, [-1], positions, tgts,
                              wts, srcs))
    return rows


def drop_long_prompts(examples: Sequence[StepExample],
                      encoder: SegmentEncoder) -> tuple[list[StepExample], int]:
    """(examples whose prompt fits in max_length, number of the others): one over-long
    problem is skipped, as scoring gives it no score, instead of stopping a run."""
    limit = encoder.fmt.max_length
    kept = [ex for ex in examples if len(encoder.prompt_ids(ex.problem)) <= limit]
    return kept, len(examples) - len(kept)


def token_counts(examples: Sequence[StepExample], encoder: SegmentEncoder, row_tokens: int,
                 num_classes: int = 2, objective: Objective = "prm") -> dict:
    """Tokens to process with and without packing (no padding counted)."""
    packed = pack_examples(examples, encoder, row_tokens, num_classes, objective)
    plain = unpacked_rows(examples, encoder, num_classes, objective)
    p, u = sum(len(r) for r in packed), sum(len(r) for r in plain)
    return {
        "examples": len(examples),
        "unpacked_sequences": len(plain),
        "unpacked_tokens": u,
        "packed_rows": len(packed),
        "packed_tokens": p,
        "packed_labels": sum(r.num_labels for r in packed),
        "unpacked_labels": sum(r.num_labels for r in plain),
        "reduction": u / max(p, 1),
    }
