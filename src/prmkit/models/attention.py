"""Attention masks for packed rows and prefix trees, for every attention implementation.

A tree row is described compactly by `TreeMask`: the segment (trie node) of each token
and which segments are ancestors of which. The [B, L, L] mask is built from it on the
model's device (or, for flex attention, a block mask straight from it), never on the
host per micro-batch.

Sliding-window models are handled exactly: a token may attend to an earlier token of its
path only if their positions differ by less than the window, which is what the model
does on that path alone (positions on a tree path are the path's token indices). Models
that mix full and windowed layers (Gemma-2/3, Qwen2 with max_window_layers) get one mask
per layer type. flash_attention_2 takes no custom mask and is refused for trees.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from prmkit.errors import PrmkitError

ATTN_IMPLEMENTATIONS = ("eager", "sdpa", "flex_attention", "flash_attention_2")
TREE_MASK_IMPLEMENTATIONS = ("eager", "sdpa", "flex_attention")


@dataclass
class TreeMask:
    """segments [B, L] long: segment of each token (padding has a segment of its own);
    ancestry [B, S, S] bool: ancestry[b, i, j] = segment j is segment i or an ancestor."""

    segments: torch.Tensor
    ancestry: torch.Tensor

    def to(self, device, non_blocking: bool = True) -> TreeMask:
        return TreeMask(self.segments.to(device, non_blocking=non_blocking),
                        self.ancestry.to(device, non_blocking=non_blocking))

    @property
    def shape(self) -> tuple[int, int, int]:
        b, n = self.segments.shape
        return b, n, n

    def dense(self) -> torch.Tensor:
        """[B, L, L] bool, True = may attend (causal, within ancestors)."""
        seg = self.segments
        b, n = seg.shape
        rows = torch.arange(b, device=seg.device)[:, None, None]
        allowed = self.ancestry[rows, seg[:, :, None], seg[:, None, :]]
        causal = torch.ones(n, n, dtype=torch.bool, device=seg.device).tril()
        return allowed & causal


def attn_implementation_of(backbone) -> str:
    cfg = backbone.config
    return getattr(cfg, "_attn_implementation", None) or "eager"


def layer_windows(backbone) -> dict[str, int | None]:
    """Window (None = full attention) of each layer type the decoder uses."""
    cfg = backbone.config.get_text_config()
    window = getattr(cfg, "sliding_window", None)
    types = getattr(cfg, "layer_types", None)
    if not types:
        if getattr(cfg, "use_sliding_window", True) is False:
            window = None
        return {"full_attention" if window is None else "sliding_attention": window}
    out: dict[str, int | None] = {}
    for t in sorted(set(types)):
        if t == "full_attention":
            out[t] = None
        elif t == "sliding_attention" and window is not None:
            out[t] = int(window)
        else:
            raise PrmkitError(f"{type(backbone).__name__} has '{t}' layers: packed rows and "
                              "prefix trees support full and sliding-window attention only; "
                              "set packing=none")
    return out


def full_attention_within(backbone, max_length: int) -> bool:
    """Whether every layer attends to every earlier token of a sequence of max_length
    tokens (what a reused key/value cache, whose columns are not positions, assumes)."""
    cfg = backbone.config.get_text_config()
    window = getattr(cfg, "sliding_window", None)
    types = getattr(cfg, "layer_types", None) or []
    sliding = any(t != "full_attention" for t in types) if types else \
        getattr(cfg, "use_sliding_window", True)
    return window is None or not sliding or window >= max_length


def check_tree_mask_support(backbone) -> None:
    impl = attn_implementation_of(backbone)
    if impl not in TREE_MASK_IMPLEMENTATIONS:
        raise PrmkitError(
            f"attn_implementation={impl} cannot take the tree (packed-row) attention mask; "
            f"use one of {', '.join(TREE_MASK_IMPLEMENTATIONS)}, or packing=none")


def decoder_attention_mask(backbone, mask: TreeMask | torch.Tensor, position_ids: torch.Tensor,
                           dtype: torch.dtype):
    """The mask to give the decoder for a tree mask ([B, L, L] bool or `TreeMask`): one
    mask, or a dict of masks by layer type when full and windowed layers are mixed."""
    check_tree_mask_support(backbone)
    windows = layer_windows(backbone)
    flex = attn_implementation_of(backbone) == "flex_attention"
    build = _block_mask if flex else _additive_mask
    masks = {t: build(mask, position_ids, w, dtype) for t, w in windows.items()}
    if len(masks) == 1:
        return next(iter(masks.values()))
    return masks


def _windowed(allowed: torch.Tensor, position_ids: torch.Tensor, window: int | None):
    if window is None:
        return allowed
    pos = position_ids.to(allowed.device)
    return allowed & (pos[:, :, None] - pos[:, None, :] < window)


def _additive_mask(mask, position_ids, window, dtype) -> torch.Tensor:
    allowed = mask.dense() if isinstance(mask, TreeMask) else mask
    return additive_attention_mask(_windowed(allowed, position_ids, window), dtype)


def additive_attention_mask(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """[B, L, L] bool (True = may attend) -> [B, 1, L, L] additive mask in `dtype`."""
    zero = torch.zeros((), dtype=dtype, device=allowed.device)
    neg = torch.full((), torch.finfo(dtype).min, dtype=dtype, device=allowed.device)
    return torch.where(allowed, zero, neg).unsqueeze(1)


def _block_mask(mask, position_ids, window, dtype):
    """A flex-attention BlockMask; from a `TreeMask` without materialising [B, L, L]."""
    from torch.nn.attention.flex_attention import create_block_mask

    b, n, _ = mask.shape
    pos = position_ids
    if isinstance(mask, TreeMask):
        seg, anc = mask.segments, mask.ancestry
        pos = pos.to(seg.device)

        def mask_mod(bi, h, q, k):
            ok = anc[bi, seg[bi, q], seg[bi, k]] & (k <= q)
            if window is not None:
                ok = ok & (pos[bi, q] - pos[bi, k] < window)
            return ok
        device = seg.device
    else:
        allowed = _windowed(mask, pos, window)

        def mask_mod(bi, h, q, k):
            return allowed[bi, q, k]
        device = mask.device
    return create_block_mask(mask_mod, b, None, n, n, device=device)
