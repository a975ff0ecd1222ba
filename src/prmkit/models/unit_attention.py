"""Attention over a packed row one unit at a time.

A packed row (`prmkit.training.packing`) holds several units (a problem's prefix tree, or
a piece of one) end to end, and no token attends across units; the padding after them
sees only itself. The dense tree mask makes sdpa and eager attention compute every
[L, L] score of the row and throw away the ones across units (at the demo's 512-token
rows, 1.2x training tokens/s without them: benchmarks/bench_unit_attention.py).

`unit_blocks` runs the decoder with each row's units as blocks on the diagonal: the
attention of a unit's queries over its own keys only, under its own slice of the tree
mask, through transformers' sdpa. Every score that is kept is computed from the same
numbers as before, so hidden states equal the dense path's (to float rounding of the
softmax's sums). It is used where it is exact: a `TreeMask`, sdpa, full-attention layers
only (a sliding window keeps the dense mask), no gradient checkpointing (its recompute
would run outside this context).
Transformers' `AttentionInterface` is the extension point: the blocks are a registered
attention function that the decoder's config names for the duration of one forward.
"""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass

import torch

from prmkit.models.attention import (
    TreeMask,
    additive_attention_mask,
    attn_implementation_of,
    layer_windows,
)

NAME = "prmkit_unit_blocks"


@dataclass
class Blocks:
    """Per row, its blocks (start, end) covering [0, L) and each block's additive mask
    [1, 1, n, n]."""

    spans: list[list[tuple[int, int]]]
    masks: list[list[torch.Tensor]]


_current: contextvars.ContextVar[Blocks | None] = contextvars.ContextVar(NAME, default=None)


def unit_spans(mask: TreeMask) -> list[list[tuple[int, int]]] | None:
    """Each row's units and its padding as contiguous (start, end) spans covering the row,
    or None when a unit's tokens are not contiguous (the dense mask is then needed). A
    segment's unit is its first ancestor (parents precede children in a row)."""
    seg, anc = mask.segments.cpu(), mask.ancestry.cpu()
    root = anc.to(torch.uint8).argmax(dim=2)  # [B, S] first segment each one sees
    unit = torch.gather(root, 1, seg)  # [B, L]
    out = []
    for row in unit.tolist():
        starts = [0] + [t for t in range(1, len(row)) if row[t] != row[t - 1]]
        if len({row[s] for s in starts}) != len(starts):
            return None
        out.append(list(zip(starts, starts[1:] + [len(row)], strict=True)))
    return out


def block_masks(mask: TreeMask, spans: list[list[tuple[int, int]]],
                dtype: torch.dtype) -> list[list[torch.Tensor]]:
    """Each block's slice of the tree mask (causal, within ancestors), additive."""
    out = []
    for b, row in enumerate(spans):
        seg, anc = mask.segments[b], mask.ancestry[b]
        masks = []
        for start, end in row:
            s = seg[start:end]
            allowed = anc[s[:, None], s[None, :]].tril()
            masks.append(additive_attention_mask(allowed[None], dtype))
        out.append(masks)
    return out


def _attention(module, query, key, value, attention_mask, **kwargs):
    """The registered function: transformers' sdpa per block, outputs put back in place."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    blocks = _current.get()
    if blocks is None:
        raise RuntimeError(f"{NAME} attention runs only inside prmkit's unit_blocks")
    # one split per row and tensor: its backward is one concatenation, where a slice per
    # block would add each block's gradient into a zero tensor of the whole
    per_row = [t.unbind(0) for t in (query, key, value)]
    rows = []
    for b, (spans, masks) in enumerate(zip(blocks.spans, blocks.masks, strict=True)):
        sizes = [end - start for start, end in spans]
        q, k, v = (torch.split(t[b].unsqueeze(0), sizes, dim=2) for t in per_row)
        parts = [sdpa_attention_forward(module, *qkv, m, **kwargs)[0]
                 for *qkv, m in zip(q, k, v, masks, strict=True)]
        rows.append(torch.cat(parts, dim=1))
    return torch.cat(rows, dim=0), None


_registered = False


def _register() -> None:
    global _registered
    if not _registered:
        from transformers import AttentionInterface

        AttentionInterface.register(NAME, _attention)
        _registered = True


def applies(backbone, mask) -> bool:
    """Whether `unit_blocks` is exact for this backbone and mask."""
    return (isinstance(mask, TreeMask) and attn_implementation_of(backbone) == "sdpa"
            and set(layer_windows(backbone).values()) == {None}
            and not getattr(backbone, "is_gradient_checkpointing", False))


@contextlib.contextmanager
def unit_blocks(backbone, mask: TreeMask, dtype: torch.dtype):
    """While open, the backbone's attention runs block by block over `mask`'s units
    (yields True), or, where a unit is not contiguous, yields False and changes nothing."""
    spans = unit_spans(mask)
    if spans is None:
        yield False
        return
    _register()
    config = backbone.config
    saved = config._attn_implementation
    blocks = Blocks(spans, block_masks(mask, spans, dtype))
    token = _current.set(blocks)
    config._attn_implementation = NAME
    try:
        yield True
    finally:
        config._attn_implementation = saved
        _current.reset(token)
