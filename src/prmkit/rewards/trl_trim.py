"""GRPO's policy log-probabilities over the tokens a row has, not the batch's padding.

TRL's GRPOTrainer runs the loss's forward on one [B, P + C] batch: every prompt left-padded
to the longest prompt and every completion right-padded to the longest completion, so a
batch of short completions with one long one computes the long one's width for all. The
demo's RL batches (128 rows: prompts of 29 tokens on average, up to 69; completions of 33,
up to 64) are then mostly padding.

`TrimmedLogps` (a mixin before GRPOTrainer) sorts the rows by completion length, runs TRL's
own log-probability pass on chunks of `trim_rows` rows, each cut to its own longest
completion (exact for any causal model: later tokens never change earlier ones) and, for
models with rotary positions, to its own longest prompt (every position of a row shifts
by the same amount, which rotary attention does not see, to float rounding), and puts the
rows back in order, zero where the chunk was cut (positions the completion mask drops).
Batches with images or MoE auxiliary losses run TRL's pass unchanged.
"""

from __future__ import annotations

import torch

MEDIA = ("pixel_values", "image_grid_thw", "num_images", "pixel_attention_mask",
         "spatial_shapes", "num_tiles", "image_sizes", "token_type_ids", "mm_token_type_ids",
         "image_position_ids")


def rotary(model) -> bool:
    """Whether the model's positions are rotary (relative), so that a common shift of every
    position of a row leaves its attention unchanged."""
    config = getattr(getattr(model, "module", model), "config", None)
    return config is not None and (getattr(config, "rope_parameters", None) is not None
                                   or getattr(config, "rope_theta", None) is not None)


def trimmed_chunks(attention_mask: torch.Tensor, logits_to_keep: int, rows: int,
                   shift_left: bool) -> list[tuple[torch.Tensor, int, int]]:
    """(row indices, first column, completion columns kept) per chunk of up to `rows` rows
    of similar completion length."""
    width = attention_mask.size(1)
    prompt_width = width - logits_to_keep
    real = attention_mask != 0
    # extents, not counts: a row is cut after its last real token and before its first one
    completion = _extent(real[:, prompt_width:].flip(1))
    prompt = _extent(real[:, :prompt_width])
    order = torch.argsort(completion, stable=True)
    out = []
    for start in range(0, order.numel(), rows):
        idx = order[start: start + rows]
        keep = max(int(completion[idx].max()), 1)
        first = prompt_width - int(prompt[idx].max()) if shift_left else 0
        out.append((idx, first, keep))
    return out


def _extent(real: torch.Tensor) -> torch.Tensor:
    """Per row of a [B, W] bool mask: W minus the index of its first True (0 for none)."""
    any_real = real.any(1)
    first = real.to(torch.uint8).argmax(1)
    return torch.where(any_real, real.size(1) - first, torch.zeros_like(first))


class TrimmedLogps:
    """Mixin over TRL's GRPOTrainer: the log-probability pass on length-sorted, trimmed
    chunks of `trim_rows` rows (0: TRL's pass unchanged)."""

    trim_rows: int = 32

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask,
                                           logits_to_keep, batch_size=None,
                                           compute_entropy=False, compute_aux_loss=False,
                                           **media):
        parent = super()._get_per_token_logps_and_entropies
        if (not self.trim_rows or compute_aux_loss
                or any(media.get(k) is not None for k in MEDIA)):
            return parent(model, input_ids, attention_mask, logits_to_keep, batch_size,
                          compute_entropy, compute_aux_loss, **media)
        chunks = trimmed_chunks(attention_mask, logits_to_keep, self.trim_rows, rotary(model))
        logps, entropies, order = [], [], []
        for idx, first, keep in chunks:
            end = input_ids.size(1) - logits_to_keep + keep
            lp, ent, _ = parent(model, input_ids[idx, first:end], attention_mask[idx, first:end],
                                keep, None, compute_entropy, False)
            pad = (0, logits_to_keep - keep)
            logps.append(torch.nn.functional.pad(lp, pad))
            if compute_entropy:
                entropies.append(torch.nn.functional.pad(ent, pad))
            order.append(idx)
        back = torch.argsort(torch.cat(order))
        logps = torch.cat(logps)[back]
        entropy = torch.cat(entropies)[back] if compute_entropy else None
        return logps, entropy, None


def with_trimmed_logps(trainer_cls: type) -> type:
    """`trainer_cls` (a GRPOTrainer) with `TrimmedLogps`, unless it has it already."""
    if issubclass(trainer_cls, TrimmedLogps):
        return trainer_cls
    return type(f"Trimmed{trainer_cls.__name__}", (TrimmedLogps, trainer_cls), {})
