"""The held-out evaluation of a training run: which examples, what it costs, what the user
is told while it runs.

On a large eval set (PRM800K phase-1 test: 5,339 examples) the final evaluation can take
longer than a short training run, so the run says before it starts that the model is
already saved, how large the evaluation is and roughly how long it may take;
`eval_max_examples` limits it to a seeded random subset and `final_eval=false` skips it.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import numpy as np


def limit_examples(examples: Sequence, limit: int | None, seed: int) -> list:
    """A seeded random `limit` of the examples, in their original order (all if None)."""
    if limit is None or limit >= len(examples):
        return list(examples)
    keep = np.sort(np.random.default_rng([seed, limit]).choice(len(examples), limit,
                                                               replace=False))
    return [examples[i] for i in keep]


def eval_size(rows: Sequence, examples: int, available: int) -> dict:
    """The evaluation's size for data_stats.json: examples used (of those available),
    packed rows, tokens and distinct labelled steps."""
    return {"eval_examples_used": examples, "eval_examples_available": available,
            "eval_rows": len(rows), "eval_tokens": sum(len(r) for r in rows),
            "eval_labels": sum(r.num_labels for r in rows)}


def estimate_seconds(eval_tokens: int, train_tokens_per_s: float | None) -> float | None:
    """A rough estimate of the evaluation's time: its tokens at the training speed (a
    forward pass alone is faster than a training step, but with LoRA on a few top layers
    hardly so, and packed eval rows are longer)."""
    if not train_tokens_per_s or train_tokens_per_s <= 0:
        return None
    return eval_tokens / train_tokens_per_s


def _duration(seconds: float) -> str:
    if seconds < 1:
        return "a second"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def final_eval_notice(model_dir, size: dict, train_tokens_per_s: float | None) -> str:
    """What the run prints before its final evaluation."""
    used, available = size["eval_examples_used"], size["eval_examples_available"]
    subset = used < available
    count = f"{used:,} of {available:,}" if subset else f"{used:,}"
    estimate = estimate_seconds(size["eval_tokens"], train_tokens_per_s)
    cost = ("a seeded random subset; " if subset else "") + \
        f"{size['eval_rows']:,} rows, {size['eval_tokens']:,} tokens"
    if estimate is not None:
        cost += (f"; about {_duration(estimate)} at the training speed of "
                 f"{train_tokens_per_s:,.0f} tokens/s")
    return (f"model saved to {model_dir}; final evaluation on {count} held-out examples ({cost}). Stopping "
            "it loses nothing; eval_max_examples=N limits it, final_eval=false skips it.")


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def train_postfix(step: int, loss: float, tokens_per_s: float) -> str:
    """The training bar's figures, with the step they were measured at (they are measured
    every log_every steps, and shown unchanged until the next)."""
    return f"loss={loss:.4f}, tok/s={tokens_per_s:.0f} (at step {step})"
