"""GRPO's sampling with each completion taken out of the batch as it ends.

TRL's GRPOTrainer samples with transformers' `generate` (without vLLM), which computes
every row of the batch until the longest completion ends (the demo's RL batches: 128 rows
whose completions end at 31 tokens on average, the batch at its longest, up to 64).
`DropEndedRows` (a mixin before GRPOTrainer) lets TRL call `generate` as it does, on a
model whose `generate` runs `prmkit.models.decoding.decode` for the call: the same tokens
from the same global generator (a test compares them with `generate`'s), ended rows out of
the batch. Whatever `decode` does not reproduce (beams, repetition penalty, min-p, images
and other inputs, several sequences per prompt) goes to transformers' `generate`.
"""

from __future__ import annotations

import contextlib

from prmkit.models.decoding import generate_dropping_ended, resolved_for_decode

PLAIN = {"input_ids", "attention_mask", "generation_config"}


class DropEndedRows:
    """Mixin over TRL's GRPOTrainer: its transformers sampling (no vLLM) with ended rows
    out of the batch (`drop_ended_rows`; False: `generate` unchanged)."""

    drop_ended_rows: bool = True

    def _generate_single_turn(self, *args, **kwargs):
        parent = super()._generate_single_turn
        if not self.drop_ended_rows or self.use_vllm:
            return parent(*args, **kwargs)
        with decoding_in_generate(self.accelerator.unwrap_model(self.model)):
            return parent(*args, **kwargs)


@contextlib.contextmanager
def decoding_in_generate(model):
    """While open, `model.generate(input_ids=, attention_mask=, generation_config=)` runs
    `decode` where it reproduces `generate` (`resolved_for_decode`), else `generate`."""
    original, own = model.generate, model.__dict__.get("generate")

    def generate(*args, **kwargs):
        config = kwargs.get("generation_config")
        resolved = None if args or set(kwargs) != PLAIN else resolved_for_decode(model, config)
        if resolved is None:
            return original(*args, **kwargs)
        return generate_dropping_ended(model, kwargs["input_ids"], kwargs["attention_mask"],
                                       resolved)

    model.generate = generate
    try:
        yield model
    finally:
        if own is None:
            del model.generate  # the class's method again
        else:
            model.generate = own


def with_dropped_ended_rows(trainer_cls: type) -> type:
    """`trainer_cls` (a GRPOTrainer) with `DropEndedRows`, unless it has it already."""
    if issubclass(trainer_cls, DropEndedRows):
        return trainer_cls
    return type(f"Decoding{trainer_cls.__name__}", (DropEndedRows, trainer_cls), {})
