"""Sampling from a causal LM with each row dropped from the batch as it ends.

transformers' `generate` keeps every row of a batch in the forward until the last one
ends (the demo's RL batches: 128 rows whose completions end at 31 tokens on average, the
batch at its longest, up to 64). `decode` runs the same loop
(one prefill, then one token per row and step on the model's KV cache, positions from the
attention mask as `generate` computes them) but takes ended rows out of the batch and the
cache once they are an eighth of it (each removal copies the cache), so a step costs about
what its running rows cost. transformers has no such option, hence this loop; its
forward, cache and sampling warpers are transformers' own.

Which token a row takes is `pick`'s. `GeneratePick` is `generate(do_sample=True)`'s draw
from the global generator, token for token: `torch.multinomial(p, 1)` draws q ~ Exp(1) for
every row and token and takes argmax(p / q), so the pick draws q for the whole batch at
every step, ended rows too, as `generate` does, and uses the running rows' (a test checks
the tokens against `generate`'s). prmkit's `hf` backend passes its per-row draw.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence

import torch
from transformers import (
    DynamicCache,
    GenerationConfig,
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

# pick(scores: float32 [running, vocab], running: indices into the batch) -> tokens [running]
Pick = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
# ended(ids so far [B, P + steps], running): which running rows end now (stop strings)
Ended = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

COMPACT = 0.125  # ended rows leave the batch when they are this share of it

# GenerationConfig fields `GeneratePick` reproduces; any other set field keeps `generate`
HANDLED = {"max_new_tokens", "do_sample", "temperature", "top_k", "top_p", "pad_token_id",
           "bos_token_id", "eos_token_id", "use_cache", "disable_compile",
           "transformers_version", "_from_model_config"}


def left_padded(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask) of token rows, left-padded to the longest: `decode`'s
    input."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r):] = torch.tensor(list(r), dtype=torch.long)
        mask[i, width - len(r):] = 1
    return ids, mask


@torch.no_grad()
def decode(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, max_new_tokens: int,
           eos_ids: Sequence[int], pad_id: int, pick: Pick, ended: Ended | None = None,
           compact: float = COMPACT) -> torch.Tensor:
    """`input_ids` (left-padded, [B, P]) followed by up to `max_new_tokens` tokens per row,
    `pad_id` after a row's end (its end-of-sequence token or `ended`), as `generate`
    returns them: [B, P + steps], steps the longest row's. Ended rows leave the batch
    once they are at least `compact` of it (until then they run on, their tokens unused)."""
    batch, width = input_ids.shape
    out = torch.full((batch, width + max_new_tokens), pad_id, dtype=torch.long,
                     device=input_ids.device)
    out[:, :width] = input_ids
    position = attention_mask.long().cumsum(-1) - 1
    position = position.masked_fill(attention_mask == 0, 0)
    eos = torch.tensor(list(eos_ids), dtype=torch.long, device=input_ids.device)
    cache = DynamicCache(config=model.config)
    takes = _forward_takes(model)

    def forward(ids, mask, position, **kwargs):  # as generate: these two where taken
        if "position_ids" in takes:
            kwargs["position_ids"] = position
        if "logits_to_keep" in takes:
            kwargs["logits_to_keep"] = 1
        return model(input_ids=ids, attention_mask=mask, past_key_values=cache, use_cache=True,
                     **kwargs).logits

    logits = forward(input_ids, attention_mask, position)
    rows = torch.arange(batch, device=input_ids.device)  # the batch row of each cache row
    alive = torch.ones(batch, dtype=torch.bool, device=input_ids.device)
    mask, position = attention_mask, position[:, -1:]
    steps = 0
    for step in range(max_new_tokens):
        live = alive.nonzero().squeeze(1)
        running = rows[live]
        tokens = pick(logits[live, -1].to(torch.float32), running)
        out[running, width + step] = tokens
        steps = step + 1
        done = torch.isin(tokens, eos)
        if ended is not None:
            done |= ended(out[:, :width + step + 1], running)
        alive[live[done]] = False
        if not alive.any() or step + 1 == max_new_tokens:
            break
        feed = torch.full_like(rows, pad_id)
        feed[live] = tokens
        if (~alive).sum() >= max(1, compact * len(rows)):  # drop the ended rows
            keep = alive.nonzero().squeeze(1)
            cache.batch_select_indices(keep)
            rows, alive, feed, mask, position = (rows[keep], alive[keep], feed[keep],
                                                 mask[keep], position[keep])
        mask = torch.cat([mask, mask.new_ones(mask.size(0), 1)], dim=1)
        position = position + 1
        logits = forward(feed[:, None], mask, position)
    return out[:, :width + steps]


def _forward_takes(model) -> set[str]:
    """The arguments of the model's own forward (a PEFT wrapper's base model's)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return set(inspect.signature(base.forward).parameters)


class GeneratePick:
    """`generate(do_sample=True)`'s token for each running row, from the global generator:
    the config's temperature, top-k and top-p warpers (transformers' own, in `generate`'s
    order), softmax, and the multinomial draw for all `batch` rows. Greedy when the config
    does not sample."""

    def __init__(self, config: GenerationConfig, batch: int):
        self.batch, self.sample = batch, bool(config.do_sample)
        warpers = []
        if config.temperature is not None and config.temperature != 1.0:
            warpers.append(TemperatureLogitsWarper(config.temperature))
        if config.top_k is not None and config.top_k != 0:
            warpers.append(TopKLogitsWarper(top_k=config.top_k, min_tokens_to_keep=1))
        if config.top_p is not None and config.top_p < 1.0:
            warpers.append(TopPLogitsWarper(top_p=config.top_p, min_tokens_to_keep=1))
        self.warpers = LogitsProcessorList(warpers)

    def __call__(self, scores: torch.Tensor, running: torch.Tensor) -> torch.Tensor:
        if not self.sample:
            return scores.argmax(dim=-1)
        probs = torch.softmax(self.warpers(None, scores), dim=-1)
        q = torch.empty((self.batch, probs.size(-1)), dtype=probs.dtype,
                        device=probs.device).exponential_(1)
        return (probs / q[running]).argmax(dim=-1)


def resolved_for_decode(model, config: GenerationConfig) -> GenerationConfig | None:
    """`config` completed from the model's and transformers' defaults as `generate` completes
    it, when `decode` with `GeneratePick` takes `generate`'s tokens under it (one sequence
    per prompt, no beams, nothing set beyond the warpers above); None otherwise."""
    try:  # transformers' own resolution (a private method: None if it moves)
        resolved, extra = model._prepare_generation_config(config)
        reference, _ = model._prepare_generation_config(GenerationConfig())
    except (AttributeError, TypeError, ValueError):
        return None
    ref = reference.to_dict()
    changed = {k for k, v in resolved.to_dict().items() if ref.get(k, v) != v or k not in ref}
    ok = (not extra and changed <= HANDLED and resolved.max_new_tokens is not None
          and resolved.num_beams == 1 and resolved.num_return_sequences == 1
          and not resolved.return_dict_in_generate)
    return resolved if ok else None


def generate_dropping_ended(model, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                            config: GenerationConfig) -> torch.Tensor:
    """`model.generate(input_ids=..., attention_mask=..., generation_config=...)`'s result
    through `decode`, for a config from `resolved_for_decode`."""
    eos = config.eos_token_id
    eos_ids = [] if eos is None else list(eos) if isinstance(eos, list | tuple) else [eos]
    pad = config.pad_token_id if config.pad_token_id is not None else (eos_ids or [0])[0]
    return decode(model, input_ids, attention_mask, config.max_new_tokens, eos_ids, pad,
                  GeneratePick(config, input_ids.size(0)))
