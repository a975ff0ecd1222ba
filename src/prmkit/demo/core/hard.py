"""Figure 3 where larger pools still find right answers: each seed's figures on its hard
set (`prmkit.demo.world.hard_problems`), summarised over seeds, tabled at every N and set
beside the test set's in one sentence."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from prmkit.demo.core.ood import summarise_set
from prmkit.demo.world import HARD_RULE
from prmkit.evaluation import plot_bon_curves

NAMES = (("PRM", "prm"), ("ORM", "orm"), ("majority vote", "majority"), ("pass@N", "pass"))


def summarise_hard(per_seed: list[dict], ns: list[int]) -> dict | None:
    """Means and stds over seeds of each seed's `hard` figures (None when no seed has
    them), with how many of each seed's problems are hard."""
    out = summarise_set(per_seed, ns, "hard", HARD_RULE)
    if out is not None:
        out["hard_problems"] = [r["hard"]["hard_problems"] for r in per_seed]
    return out


def fall_past_peak(curves: dict, key: str = "prm") -> dict:
    """How far a curve's last point lies below its peak (mean over seeds), beside its std
    over seeds at the last point: the curve "keeps rising" in the sense Figure 3 is read
    here when the fall is at most that std."""
    curve, std = curves[key], curves[f"{key}_std"]
    k = int(np.argmax(curve))
    fall = curve[k] - curve[-1]
    return {"peak_n": curves["n"][k], "peak": curve[k], "last_n": curves["n"][-1],
            "last": curve[-1], "fall": fall, "last_std": std[-1], "within_std": fall <= std[-1]}


def hard_table(hard: dict) -> dict:
    """Best-of-N on the hard set at every N: PRM, ORM, majority vote, pass@N."""
    pct = lambda key, i: f"{100 * hard[key][i]:.1f} ± {100 * hard[f'{key}_std'][i]:.1f}"  # noqa: E731
    return {"columns": ["N", *(name for name, _ in NAMES)],
            "rows": [[n, *(pct(key, i) for _, key in NAMES)] for i, n in enumerate(hard["n"])]}


def plot_hard(hard: dict, path: Path) -> Path:
    """The hard set's best-of-N curves, with pass@N (mean ± std over seeds)."""
    series = {name: {"n": hard["n"], "accuracy": hard[key], "std": hard[f"{key}_std"]}
              for name, key in NAMES}
    return plot_bon_curves(series, path, title="Best-of-N on hard problems")


def hard_sentence(summary: dict, hard: dict) -> str:
    """Whether the PRM's curve falls past its peak, on the test set and on the hard set."""
    def said(curves: dict) -> str:
        f = fall_past_peak(curves)
        where = (f"rises to N={f['last_n']} ({100 * f['last']:.1f}%)" if f["fall"] <= 0 else
                 f"peaks at N={f['peak_n']} ({100 * f['peak']:.1f}%) and is "
                 f"{100 * f['fall']:.1f} points lower at N={f['last_n']}, "
                 f"{'within' if f['within_std'] else 'more than'} its std there "
                 f"({100 * f['last_std']:.1f})")
        return (f"{where}; pass@N {100 * curves['pass'][0]:.1f}% at N=1, "
                f"{100 * curves['pass'][-1]:.1f}% at N={curves['n'][-1]}")
    return (f"The PRM's best-of-N curve on the test set {said(summary)}. On the hard set "
            f"({HARD_RULE}; {', '.join(map(str, hard['hard_problems']))} hard problems per "
            f"seed), it {said(hard)}; there the ORM reaches {100 * hard['orm'][-1]:.1f}% and "
            f"majority vote {100 * hard['majority'][-1]:.1f}% at N={hard['n'][-1]}.")
