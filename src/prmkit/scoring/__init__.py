"""prmkit.scoring: per-step scores from a trained reward model, and their aggregation.

    from prmkit.scoring import Scorer, score_steps
    scorer = Scorer.from_pretrained("runs/prm/model")     # bf16, token-budget batches
    step_probs = scorer.score([(problem, steps), ...])    # P(correct) per step, input order
    scorer.score_file("samples.jsonl", "scored.jsonl", resume=True)

The aggregation names (`aggregate`, `aggregate_many`, `Aggregation`, `AGGREGATIONS`) and
the null-step rule (`NULL_STEP_SCORE`, `fill_null_steps`: a step cut by max_length scores
0.0) are re-exported from `prmkit.scoring.aggregate`; the scorer names are imported lazily, so
that `import prmkit.scoring` does not load torch.
"""

from __future__ import annotations

import importlib

# Eager: the function `aggregate` shares its name with its module, which a lazy lookup
# would return once the module has been imported.
from prmkit.scoring.aggregate import (  # noqa: F401 (re-exported)
    AGGREGATIONS,
    NULL_STEP_SCORE,
    Aggregation,
    aggregate,
    aggregate_many,
    fill_null_steps,
)

_EXPORTS = {
    "Scorer": "scorer",
    "SolutionScores": "scorer",
    "score_steps": "scorer",
    "IncrementalScorer": "incremental",
    "score_file": "files",
    "ScoreFileReport": "files",
}

__all__ = sorted([*_EXPORTS, "AGGREGATIONS", "NULL_STEP_SCORE", "Aggregation", "aggregate",
                  "aggregate_many", "fill_null_steps"])


def __getattr__(name: str):
    if name in _EXPORTS:
        module = importlib.import_module(f"prmkit.scoring.{_EXPORTS[name]}")
        return getattr(module, name)
    raise AttributeError(f"module 'prmkit.scoring' has no attribute {name!r}")
