"""prmkit.scoring: per-step scores from a trained reward model, and their aggregation.

    from prmkit.scoring import Scorer, score_steps
    scorer = Scorer.from_pretrained("runs/prm")           # bf16, token-budget batches
    step_probs = scorer.score([(problem, steps), ...])    # P(correct) per step, input order
    scorer.score_file("samples.jsonl", "scored.jsonl", resume=True)

The aggregation function lives in `prmkit.scoring.aggregate` (the module of the same
name); names here are imported lazily so that importing that module stays cheap.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "Scorer": "scorer",
    "SolutionScores": "scorer",
    "score_steps": "scorer",
    "score_file": "files",
    "ScoreFileReport": "files",
    "aggregate_many": "aggregate",
    "Aggregation": "aggregate",
    "AGGREGATIONS": "aggregate",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        module = importlib.import_module(f"prmkit.scoring.{_EXPORTS[name]}")
        return getattr(module, name)
    raise AttributeError(f"module 'prmkit.scoring' has no attribute {name!r}")
