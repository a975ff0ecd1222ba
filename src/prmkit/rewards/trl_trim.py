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

With `share_prompts` (on by default), a group's completions also share their prompt's
forward: the batch's distinct prompts (all but their last token) run once, and every chunk
runs its rows' last prompt token and completions on those keys and values, gathered per
row (gradients flow back into the one prompt pass). Positions are TRL's own (each row's
padded width), so the numbers are TRL's to float rounding. A model whose cache is not a
plain `DynamicCache` (sliding windows, say), gradient checkpointing (no cache in training),
and batches with no repeated prompt take the trimmed pass above.
"""

from __future__ import annotations

from dataclasses import dataclass

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


@dataclass
class SharedPrompts:
    """The keys and values of a batch's distinct prompts (all but their last token), per
    layer, and for each row the index of its prompt among them."""

    layers: list[tuple[torch.Tensor, torch.Tensor]]
    row_prompt: torch.Tensor  # [B]
    ids: torch.Tensor  # [B, P]: the rows' prompts, as given
    mask: torch.Tensor


def shared_prompts(model, input_ids, attention_mask, logits_to_keep,
                   autocast) -> SharedPrompts | None:
    """One forward over the distinct prompts of the batch, or None where sharing does not
    apply (no prompt repeats, a prompt of under 2 columns, a prompt not left-padded, a
    cache other than a plain DynamicCache)."""
    from transformers.cache_utils import DynamicLayer

    width = input_ids.size(1) - logits_to_keep
    if width < 2 or not bool(attention_mask[:, width - 1].all()):
        return None
    ids, mask = input_ids[:, :width], attention_mask[:, :width]
    key = torch.cat([ids.masked_fill(mask == 0, 0), mask], 1)  # padding ids may differ
    distinct, row_prompt = torch.unique(key, dim=0, return_inverse=True)
    if distinct.size(0) == ids.size(0):
        return None
    rows = torch.arange(ids.size(0), device=ids.device)
    first = rows.new_full((distinct.size(0),), ids.size(0)).scatter_reduce(
        0, row_prompt, rows, "amin")
    with autocast():
        out = model(input_ids=ids[first, :-1], attention_mask=mask[first, :-1],
                    use_cache=True, logits_to_keep=1)
    layers = getattr(getattr(out, "past_key_values", None), "layers", None)
    if not layers or any(type(layer) is not DynamicLayer or layer.keys is None
                         for layer in layers):
        return None
    return SharedPrompts([(layer.keys, layer.values) for layer in layers], row_prompt, ids,
                         mask)


def shared_prompt_chunk(model, shared: SharedPrompts, input_ids, attention_mask,
                        idx: torch.Tensor, keep: int, compute_entropy: bool, autocast):
    """Log-probabilities (and entropies) of rows `idx`'s first `keep` completion tokens: each
    row's last prompt token and completion run on its prompt's shared keys and values,
    through TRL's fused head (`shift_labels`: each position scores the next token)."""
    from transformers import DynamicCache

    cache = DynamicCache()
    prompt = shared.row_prompt[idx]
    for layer, (keys, values) in enumerate(shared.layers):
        cache.update(keys[prompt], values[prompt], layer)
    width = shared.ids.size(1)
    completion = input_ids[idx, width: width + keep]
    completion_mask = attention_mask[idx, width: width + keep]
    labels = torch.cat([completion.masked_fill(completion_mask == 0, -100),
                        completion.new_full((len(idx), 1), -100)], 1)
    with autocast():
        out = model(input_ids=torch.cat([shared.ids[idx, -1:], completion], 1),
                    attention_mask=torch.cat([shared.mask[idx], completion_mask], 1),
                    past_key_values=cache, shift_labels=labels, fused_lm_head=True)
    return out.log_probs[:, :keep], out.entropy[:, :keep] if compute_entropy else None


class TrimmedLogps:
    """Mixin over TRL's GRPOTrainer: the log-probability pass on length-sorted, trimmed
    chunks of `trim_rows` rows, each group's prompt run once (`share_prompts`); 0 and False:
    TRL's pass unchanged."""

    trim_rows: int = 32
    share_prompts: bool = True

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask,
                                           logits_to_keep, batch_size=None,
                                           compute_entropy=False, compute_aux_loss=False,
                                           **media):
        parent = super()._get_per_token_logps_and_entropies
        if ((not self.trim_rows and not self.share_prompts) or compute_aux_loss
                or any(media.get(k) is not None for k in MEDIA)):
            return parent(model, input_ids, attention_mask, logits_to_keep, batch_size,
                          compute_entropy, compute_aux_loss, **media)
        rows = self.trim_rows or input_ids.size(0)
        autocast = self.accelerator.autocast
        shared = (shared_prompts(model, input_ids, attention_mask, logits_to_keep, autocast)
                  if self.share_prompts else None)
        chunks = trimmed_chunks(attention_mask, logits_to_keep, rows,
                                shift_left=shared is None and rotary(model))
        logps, entropies, order = [], [], []
        for idx, first, keep in chunks:
            if shared is not None:
                lp, ent = shared_prompt_chunk(model, shared, input_ids, attention_mask, idx,
                                              keep, compute_entropy, autocast)
            else:
                end = input_ids.size(1) - logits_to_keep + keep
                lp, ent, _ = parent(model, input_ids[idx, first:end],
                                    attention_mask[idx, first:end], keep, None,
                                    compute_entropy, False)
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
