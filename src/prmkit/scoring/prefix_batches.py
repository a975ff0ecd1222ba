"""Scoring batches in which the completions of one prompt share the prompt's tokens.

RL rollouts reach a reward model in groups: several completions of the same prompt
(GRPO's G samples). A row of such a batch holds the prompt once, then each completion
as a child segment of a prefix tree: a completion attends to the prompt and to itself
only, and its position ids continue from the prompt's end, so each is computed exactly
as in a row of its own (`prmkit.models.attention.TreeMask`). Rows are padded to the
batch's longest; padding is a segment of its own that sees only itself.

Sharing is not always cheaper: dense attention kernels compute every pair of a row, the
masked ones included, so a row of many completions after a short prompt costs more than
their own rows. A completion joins its prompt's row only while that costs less than a
row of its own, under the cost model L + pair_cost x L^2 for a row of L tokens (the
per-token layers, and attention; pair_cost about 1 / hidden size).

Works for prefix-stable encodings (`SegmentEncoder`: the encoding of a solution starts
with the encoding of its prompt), which is why the key of a group is the prompt's token
ids, not its text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from prmkit.models.attention import TreeMask


@dataclass
class TreeRow:
    """One row: the shared prompt (its first `prompt_len` tokens of any member) and the
    items whose completions follow it, in order."""

    prompt_len: int
    items: list[int] = field(default_factory=list)
    tokens: int = 0  # real tokens: the prompt once plus every completion

    @property
    def shared(self) -> bool:
        return len(self.items) > 1


def row_cost(tokens: int, pair_cost: float) -> float:
    return tokens + pair_cost * tokens * tokens


def group_rows(encoded: Sequence, row_tokens: int, pair_cost: float = 0.0) -> list[TreeRow]:
    """Rows of items whose prompt token ids are identical, at most `row_tokens` real
    tokens each (a row always takes at least one completion), a completion joining a row
    only while cheaper than a row of its own (see the module docstring); items without
    label positions are left out. `encoded[i]` has input_ids, label_positions, prompt_len."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, e in enumerate(encoded):
        if e.label_positions:
            groups.setdefault(tuple(e.input_ids[: e.prompt_len]), []).append(i)
    rows: list[TreeRow] = []
    for prompt, members in groups.items():
        p = len(prompt)
        row = TreeRow(p, tokens=p)
        for i in members:
            suffix = len(encoded[i].input_ids) - p
            added = row_cost(row.tokens + suffix, pair_cost) - row_cost(row.tokens, pair_cost)
            if row.items and (row.tokens + suffix > row_tokens
                              or added > row_cost(p + suffix, pair_cost)):
                rows.append(row)
                row = TreeRow(p, tokens=p)
            row.items.append(i)
            row.tokens += suffix
        rows.append(row)
    return rows


@dataclass
class TreeBatch:
    input_ids: torch.Tensor  # [B, L]
    attention_mask: TreeMask
    position_ids: torch.Tensor  # [B, L]
    label_positions: torch.Tensor  # [K, 2] (row, token index)
    owners: list[tuple[int, int]]  # (item, slot) per label
    tokens: int  # real tokens


def collate_tree(rows: list[TreeRow], encoded: Sequence, pad_id: int) -> TreeBatch:
    """Tensors of a batch of tree rows. Row segments: 0 the prompt, 1..n the row's
    completions, the last segment of the batch its padding."""
    width = max(r.tokens for r in rows)
    segs = 2 + max(len(r.items) for r in rows)
    pad_seg = segs - 1
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    pos = torch.zeros((len(rows), width), dtype=torch.long)
    seg = torch.full((len(rows), width), pad_seg, dtype=torch.long)
    anc = torch.zeros((len(rows), segs, segs), dtype=torch.bool)
    anc[:, pad_seg, pad_seg] = True
    positions, owners = [], []
    for b, row in enumerate(rows):
        p = row.prompt_len
        first = encoded[row.items[0]].input_ids
        ids[b, :p] = torch.tensor(first[:p], dtype=torch.long)
        pos[b, :p] = torch.arange(p)
        seg[b, :p] = 0
        anc[b, 0, 0] = True
        at = p
        for k, i in enumerate(row.items, start=1):
            e = encoded[i]
            n = len(e.input_ids) - p
            ids[b, at: at + n] = torch.tensor(e.input_ids[p:], dtype=torch.long)
            pos[b, at: at + n] = torch.arange(p, p + n)
            seg[b, at: at + n] = k
            anc[b, k, k] = anc[b, k, 0] = True
            positions.extend((b, at + t - p) for t in e.label_positions)
            owners.extend((i, s) for s in e.slots)
            at += n
    return TreeBatch(ids, TreeMask(seg, anc), pos, torch.tensor(positions, dtype=torch.long),
                     owners, sum(r.tokens for r in rows))
