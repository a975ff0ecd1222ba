"""Token-budget batches of rows (packed trees or plain sequences) and their collation."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from prmkit.models.attention import TreeMask
from prmkit.training.packing import PackedRow


@dataclass
class Batch:
    input_ids: torch.Tensor  # [B, L]
    attention_mask: torch.Tensor | TreeMask  # [B, L] padding mask, or a tree mask
    position_ids: torch.Tensor  # [B, L]
    label_positions: torch.Tensor  # [K, 2] (row, token)
    targets: torch.Tensor  # [K, C] target distributions
    weights: torch.Tensor  # [K]
    num_tokens: int  # real (unpadded) tokens
    num_sources: int  # example labels covered (a merged node counts each of its labels)

    def map(self, fn) -> Batch:
        """`fn` applied to every tensor (both tensors of a tree mask)."""
        mask = self.attention_mask
        mask = TreeMask(fn(mask.segments), fn(mask.ancestry)) if isinstance(mask, TreeMask) \
            else fn(mask)
        return Batch(fn(self.input_ids), mask, fn(self.position_ids), fn(self.label_positions),
                     fn(self.targets), fn(self.weights), self.num_tokens, self.num_sources)

    def to(self, device) -> Batch:
        """The tensors on `device` (asynchronously from pinned memory on CUDA); a tree mask
        travels in its compact form and is expanded there."""
        return self.map(lambda t: t.to(device, non_blocking=True))


def is_plain(row: PackedRow) -> bool:
    """A single causal sequence (no tree): a padding mask is enough."""
    return len(row.segment_parent) == 1


def token_batches(lengths: Sequence[int], batch_tokens: int,
                  max_rows: int | None = None) -> list[list[int]]:
    """Group row indices by length so that rows * longest row <= batch_tokens (padding
    stays small), with at most max_rows rows. A row longer than the budget gets a batch
    of its own."""
    order = np.argsort(np.asarray(lengths), kind="stable")
    batches: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for i in order.tolist():
        n = lengths[i]
        full = max_rows is not None and len(current) >= max_rows
        if current and (full or max(longest, n) * (len(current) + 1) > batch_tokens):
            batches.append(current)
            current, longest = [], 0
        current.append(i)
        longest = max(longest, n)
    if current:
        batches.append(current)
    return batches


def tree_mask(rows: Sequence[PackedRow], length: int) -> TreeMask:
    """The compact tree mask of rows padded to `length`: padding is one more segment of
    its own (it sees only padding; nothing sees it)."""
    s = max(len(r.segment_parent) for r in rows) + 1
    segments = torch.full((len(rows), length), s - 1, dtype=torch.long)
    ancestry = torch.zeros((len(rows), s, s), dtype=torch.bool)
    for i, r in enumerate(rows):
        segments[i, : len(r)] = torch.tensor(r.token_segment, dtype=torch.long)
        k = len(r.segment_parent)
        ancestry[i, :k, :k] = r.ancestry()
        ancestry[i, s - 1, s - 1] = True
    return TreeMask(segments, ancestry)


def collate(rows: Sequence[PackedRow], pad_id: int, pin_memory: bool = False) -> Batch:
    """Pad rows to the longest; plain rows get a [B, L] padding mask, trees a `TreeMask`
    (expanded to [B, L, L], or a flex block mask, on the model's device). pin_memory:
    page-locked host tensors, for asynchronous copies to a GPU."""
    length = max(len(r) for r in rows)
    b = len(rows)
    input_ids = torch.full((b, length), pad_id, dtype=torch.long)
    position_ids = torch.zeros((b, length), dtype=torch.long)
    plain = all(is_plain(r) for r in rows)
    mask = torch.zeros((b, length), dtype=torch.long) if plain else tree_mask(rows, length)
    positions, targets, weights = [], [], []
    sources = 0
    for i, r in enumerate(rows):
        n = len(r)
        input_ids[i, :n] = torch.tensor(r.input_ids)
        position_ids[i, :n] = torch.tensor(r.position_ids)
        if n < length:  # padding continues the positions (never attended to)
            position_ids[i, n:] = torch.arange(n, length)
        if plain:
            mask[i, :n] = 1
        positions.extend((i, p) for p in r.label_positions)
        targets.extend(r.targets)
        weights.extend(r.weights)
        sources += sum(len(s) for s in r.sources)
    batch = Batch(
        input_ids=input_ids,
        attention_mask=mask,
        position_ids=position_ids,
        label_positions=torch.tensor(positions, dtype=torch.long).reshape(-1, 2),
        targets=torch.tensor(targets, dtype=torch.float32),
        weights=torch.tensor(weights, dtype=torch.float32),
        num_tokens=sum(len(r) for r in rows),
        num_sources=sources,
    )
    return batch.map(torch.Tensor.pin_memory) if pin_memory else batch


def label_losses(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of each label against its target distribution ([K, C] -> [K])."""
    return -(targets * torch.log_softmax(logits.float(), -1)).sum(-1)


@dataclass
class RowPredictions:
    """One entry per labelled node of the rows: P(correct), the target's P(correct), the
    node's weight and its cross-entropy."""

    probs: np.ndarray
    truth: np.ndarray
    weights: np.ndarray
    losses: np.ndarray


@torch.no_grad()
def predict_rows(model, rows: Sequence[PackedRow], pad_id: int, batch_tokens: int,
                 max_rows: int | None = None, bf16: bool | str = "auto",
                 device: torch.device | str = "cpu", progress: bool = False,
                 desc: str = "predicting") -> RowPredictions:
    """Forward every row (token-budget batches) and read the labelled positions; with
    `progress`, a bar on a terminal, lines in a log (prmkit.progress)."""
    from prmkit.models.precision import use_bf16
    from prmkit.progress import progress_bar

    device = torch.device(device)
    bf16 = use_bf16(bf16, device)
    model.eval()
    probs, truth, weights, losses = [], [], [], []
    batches = token_batches([len(r) for r in rows], batch_tokens, max_rows)
    for b in progress_bar(batches, desc=desc, unit="batch", enabled=progress):
        batch = collate([rows[r] for r in b], pad_id).to(device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            logits = model(batch.input_ids, batch.label_positions, batch.attention_mask,
                           batch.position_ids)
        t = batch.targets[:, 0]
        if model.config.num_classes == 3 and model.config.neutral_is_correct:
            t = t + batch.targets[:, 1]
        probs.append(model.correct_probability(logits).cpu().numpy())
        truth.append(t.cpu().numpy())
        weights.append(batch.weights.cpu().numpy())
        losses.append(label_losses(logits, batch.targets).cpu().numpy())

    def cat(parts):
        return np.concatenate(parts) if parts else np.zeros(0)

    return RowPredictions(cat(probs), cat(truth), cat(weights), cat(losses))
