"""Per-batch signals that show reward hacking as it starts, and the verifiable reward.

A policy that games a PRM usually changes its step structure before its accuracy: more and
shorter steps (summed rewards pay per step), steps the PRM cannot grade (no separator, cut
by max_length), or PRM scores that rise while the verifier's accuracy does not. The
figures of `batch_diagnostics` track exactly these (docs/rl.md, "Hacking signals").
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from prmkit.grading import grade_many
from prmkit.rewards.contract import CompletionRewards


def verifier_rewards(completions: Sequence[str | None], gold: Sequence[str | None]
                     ) -> list[float | None]:
    """1.0 / 0.0 from prmkit's grader against the gold answer; None when the grader cannot
    decide or there is no gold answer (left out of group baselines)."""
    pairs = list(zip(completions, gold, strict=True))
    todo = [i for i, (text, answer) in enumerate(pairs)
            if answer is not None and isinstance(text, str)]
    out: list[float | None] = [None] * len(pairs)
    grades = grade_many([(pairs[i][0], str(pairs[i][1])) for i in todo], progress=False)
    for i, g in zip(todo, grades, strict=True):
        out[i] = None if g.correct is None else float(g.correct)
    return out


def _mean(values) -> float:
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else float("nan")


def batch_diagnostics(rewards: Sequence[CompletionRewards],
                      token_lengths: Sequence[int] | None = None,
                      verifier: Sequence[float | None] | None = None,
                      threshold: float = 0.5) -> dict[str, float]:
    """Figures for one batch (NaN where a figure has no data):

    steps_per_completion (mean), max_steps, no_step_fraction (completions without steps),
    null_step_fraction (steps cut by the PRM's max_length), tokens_per_step (policy tokens,
    when `token_lengths` is given), prm_score (mean), and against the verifier:
    prm_verifier_agreement (the PRM score >= threshold iff the verifier says correct),
    prm_score_when_wrong / prm_score_when_right (mean PRM score on each side).
    """
    counts = [len(r.steps) for r in rewards]
    probs = [p for r in rewards for p in r.probabilities]
    out = {
        "steps_per_completion": _mean(counts),
        "max_steps": float(max(counts, default=0)),
        "no_step_fraction": _mean([c == 0 for c in counts]),
        "null_step_fraction": _mean([p is None for p in probs]),
        "prm_score": _mean([r.score for r in rewards]),
    }
    if token_lengths is not None:
        per_step = [n / c for n, c in zip(token_lengths, counts, strict=True) if c]
        out["tokens_per_step"] = _mean(per_step)
    if verifier is not None:
        pairs = [(r.score, v) for r, v in zip(rewards, verifier, strict=True)
                 if r.score is not None and v is not None]
        out["prm_verifier_agreement"] = _mean([(s >= threshold) == (v >= 0.5) for s, v in pairs])
        out["prm_score_when_wrong"] = _mean([s for s, v in pairs if v < 0.5])
        out["prm_score_when_right"] = _mean([s for s, v in pairs if v >= 0.5])
    return out
