"""Out of distribution beside in distribution (the paper's section 6 and Table 1): a seed's
figures on `prmkit.demo.world.ood_problems`, summarised over seeds and set beside the test
set's at one N."""

from __future__ import annotations

import numpy as np

from prmkit.demo.core.evaluate import PICK_KEYS
from prmkit.demo.world import OOD_RULE
from prmkit.demo.world.error_kinds import summarise_kinds

CURVES = ("prm", "orm", "majority", "pass")


def summarise_ood(per_seed: list[dict], ns: list[int]) -> dict | None:
    """Means and stds over seeds of each seed's `ood` figures (None when no seed has them),
    with the Ns they are at and the rule the problems follow."""
    return summarise_set(per_seed, ns, "ood", OOD_RULE)


def summarise_set(per_seed: list[dict], ns: list[int], key: str, rule: str) -> dict | None:
    """The same for the second test set each seed's result holds under `key`."""
    rows = [r[key] for r in per_seed if key in r]
    if not rows:
        return None
    out: dict = {"rule": rule, "n": ns[: len(rows[0]["prm"])]}
    for curve in (*CURVES, *(k for k in PICK_KEYS if k in rows[0])):
        arr = np.array([r[curve] for r in rows])
        out[curve], out[f"{curve}_std"] = arr.mean(0).tolist(), arr.std(0).tolist()
    aurocs = [r["step_auroc"] for r in rows]
    out["step_auroc"], out["step_auroc_std"] = float(np.mean(aurocs)), float(np.std(aurocs))
    out["error_kinds"] = summarise_kinds(rows)
    return out


def _at(summary: dict, key: str, n: int) -> tuple[float, float] | None:
    if n not in summary["n"]:
        return None
    i = summary["n"].index(n)
    return summary[key][i], summary[f"{key}_std"][i]


def ood_table(summary: dict, ood: dict) -> dict:
    """Best-of-N at the largest N both sets reach: PRM, ORM and majority vote, in and out of
    distribution (mean ± std over seeds), and the PRM's step AUROC on each."""
    n = max(set(summary["n"]) & set(ood["n"]))
    fmt = lambda v: "-" if v is None else f"{100 * v[0]:.1f} ± {100 * v[1]:.1f}"  # noqa: E731
    rows = [[name, fmt(_at(summary, key, n)), fmt(_at(ood, key, n))]
            for name, key in (("PRM", "prm"), ("ORM", "orm"), ("majority vote", "majority"),
                              ("pass@N", "pass"))]
    rows.append(["PRM step AUROC", f"{summary['step_auroc']:.3f}", f"{ood['step_auroc']:.3f}"])
    return {"columns": [f"best-of-{n}", "in distribution", f"out of distribution ({OOD_RULE})"],
            "rows": rows}


def ood_sentence(summary: dict, ood: dict) -> str:
    n = max(set(summary["n"]) & set(ood["n"]))
    vals = {key: (_at(summary, key, n)[0], _at(ood, key, n)[0])
            for key in ("prm", "orm", "majority")}
    order = sorted(vals, key=lambda k: -vals[k][1])
    names = {"prm": "PRM", "orm": "ORM", "majority": "majority vote"}
    return (f"Out of distribution ({OOD_RULE}), best-of-{n}: PRM {100 * vals['prm'][1]:.1f}%, "
            f"ORM {100 * vals['orm'][1]:.1f}%, majority vote {100 * vals['majority'][1]:.1f}% "
            f"(in distribution {100 * vals['prm'][0]:.1f}%, {100 * vals['orm'][0]:.1f}%, "
            f"{100 * vals['majority'][0]:.1f}%); order out of distribution: "
            + " > ".join(names[k] for k in order) + ".")
