"""The paper in miniature: process vs outcome supervision in a controlled world.

For each seed: build train/test problems, train a tokenizer and a small Llama from
scratch on correct worked solutions (or start from the shared MathMix base), train a PRM
(labels up to the first error) and an ORM (final-answer labels) through prmkit's trainer on
the same sampled solutions with the same compute, score 256 fresh samples per test problem
with prmkit's Scorer, and evaluate best-of-N (exact estimator), majority vote and
first-error F1 (`prmkit.demo.core`). Results are averaged over seeds and written as
metrics.json, plots and an HTML report.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from prmkit.demo.core.config import DemoConfig, quick_config
from prmkit.demo.core.evaluate import PICK_KEYS, run_seed
from prmkit.demo.core.hard import hard_sentence, hard_table, plot_hard, summarise_hard
from prmkit.demo.core.ood import ood_sentence, ood_table, summarise_ood
from prmkit.demo.core.parallel import map_seeds
from prmkit.demo.world.error_kinds import (
    forms_table,
    kinds_table,
    summarise_forms,
    summarise_kinds,
    weakest_form_kind,
)
from prmkit.evaluation import plot_bon_curves, plot_calibration
from prmkit.evaluation.plots import Curve, Panel, plot_curves
from prmkit.evaluation.report import write_report

Config = DemoConfig
# each stage's share of a seed's time in `make demo` (for the estimate of what remains of the
# run: prmkit.demo.core.stages; BENCHMARKS.md, "The demo")
STAGE_SHARES = {"world": 0.02, "PRM training": 0.36, "ORM training": 0.35,
                "scoring test (PRM)": 0.015, "scoring test (ORM)": 0.014,
                "scoring ood (PRM)": 0.12, "scoring ood (ORM)": 0.10,
                "scoring hard (PRM)": 0.003, "scoring hard (ORM)": 0.003, "evaluation": 0.012}


def quick(seeds: tuple[int, ...] = (0, 1, 2)) -> Config:
    """Seconds-long settings (smoke tests), not a result."""
    return quick_config(seeds)


def summarise(per_seed: list[dict], ns: list[int], seconds: float) -> dict:
    out: dict = {"n": ns, "seeds": len(per_seed), "seconds": seconds}
    for key in ("prm", "orm", "majority", "pass", *PICK_KEYS):
        arr = np.array([r[key] for r in per_seed])
        out[key] = arr.mean(0).tolist()
        out[f"{key}_std"] = arr.std(0).tolist()
    for key in ("f1", "error_acc", "correct_acc"):
        vals = [r["first_error"][key] for r in per_seed]
        out[f"first_error_{key}"] = float(np.mean(vals))
        out[f"first_error_{key}_std"] = float(np.std(vals))
    for model in ("prm", "orm"):
        for key in ("right_answer", "right_process", "trap_answer"):
            out[f"{model}_top_pick_{key}"] = float(
                np.mean([r["top_picks"][model][key] for r in per_seed]))
    out["error_kinds"] = summarise_kinds(per_seed)
    out["error_kinds_by_form"] = summarise_forms(per_seed)
    aurocs = [r["step_auroc"] for r in per_seed]
    out["step_auroc"], out["step_auroc_std"] = float(np.mean(aurocs)), float(np.std(aurocs))
    out["largest_n"] = ns[-1]
    out["prm_minus_orm"] = [r["prm"][-1] - r["orm"][-1] for r in per_seed]
    out["orm_minus_majority"] = [r["orm"][-1] - r["majority"][-1] for r in per_seed]
    return out


def verdict(summary: dict) -> str:
    n = summary["largest_n"]
    prm, orm, maj = summary["prm"][-1], summary["orm"][-1], summary["majority"][-1]
    s_prm, s_orm, s_maj = summary["prm_std"][-1], summary["orm_std"][-1], summary["majority_std"][-1]
    agg = summary.get("aggregation", "prod")
    lines = [f"At N={n}: PRM ({agg} of step scores) {100 * prm:.1f}% (±{100 * s_prm:.1f}), ORM {100 * orm:.1f}% "
             f"(±{100 * s_orm:.1f}), majority vote {100 * maj:.1f}% (±{100 * s_maj:.1f}), "
             f"means ± std over {summary['seeds']} seeds."]
    for a, b, name_a, name_b, key in ((prm, orm, "PRM", "ORM", "prm_minus_orm"),
                                      (orm, maj, "ORM", "majority vote", "orm_minus_majority")):
        gaps = summary[key]
        if min(gaps) > 0:
            lines.append(f"{name_a} beats {name_b} in every seed (gap {100 * min(gaps):.1f} to "
                         f"{100 * max(gaps):.1f} points).")
        elif a > b:
            lines.append(f"{name_a} beats {name_b} on average but not in every seed "
                         f"(gaps {', '.join(f'{100 * g:+.1f}' for g in gaps)} points).")
        else:
            lines.append(f"{name_a} does NOT beat {name_b} here "
                         f"(gaps {', '.join(f'{100 * g:+.1f}' for g in gaps)} points).")
    ns = summary["n"]
    for name, key in (("PRM", "prm"), ("ORM", "orm")):
        curve = summary[key]
        k = int(np.argmax(curve))
        above = [k_n for k_n, a, m in zip(ns, curve, summary["majority"]) if a > m + 1e-9]
        lines.append(f"{name} peaks at N={ns[k]} ({100 * curve[k]:.1f}%)"
                     + (f" and beats majority vote at N in {above}." if above
                        else " and never beats majority vote."))
    ahead = [k_n for k_n, a, b in zip(ns, summary["prm"], summary["orm"]) if a > b + 1e-9]
    lines.append(f"PRM is ahead of ORM at N in {ahead}." if ahead else
                 "PRM is never ahead of ORM.")
    if summary["prm"][-1] < max(summary["prm"]) or summary["orm"][-1] < max(summary["orm"]):
        lines.append("Past its peak a reward model over-optimises: the more samples, the "
                     "likelier a wrong solution it cannot check gets the top score.")
    lines.extend(over_optimisation(summary))
    lines.extend(_weakest_kinds(summary.get("error_kinds") or {}, n))
    weakest = weakest_form_kind(summary.get("error_kinds_by_form") or {})
    if weakest is not None:
        form, kind, value = weakest
        lines.append(f"By problem form, the PRM's weakest check is {kind} in {form} "
                     f"problems (step AUROC {value:.3f}, mean over seeds).")
    lines.append(
        f"Over whole pools, {100 * summary['prm_top_pick_right_answer']:.0f}% of the PRM's "
        f"picks have a right answer ({100 * summary['prm_top_pick_right_process']:.0f}% a "
        f"right process, {100 * summary['prm_top_pick_trap_answer']:.0f}% the problem's "
        f"systematic trap answer); the ORM's: "
        f"{100 * summary['orm_top_pick_right_answer']:.0f}% right answer, "
        f"{100 * summary['orm_top_pick_trap_answer']:.0f}% trap answer. Majority vote needs no "
        "model and does not fall.")
    lines.append(f"The PRM finds the first wrong step of held-out samples with F1 "
                 f"{summary['first_error_f1']:.3f} (threshold 0.5) and ranks steps with AUROC "
                 f"{summary['step_auroc']:.3f}.")
    return " ".join(lines)


def pick_table(curves: dict) -> dict:
    """Per N, each reward model's best-of-N pick: its proxy score and % right."""
    pct = lambda k, i: f"{100 * curves[k][i]:.1f} ± {100 * curves[k + '_std'][i]:.1f}"  # noqa: E731
    return {"columns": ["N", "PRM score", "PRM % right", "ORM score", "ORM % right"],
            "rows": [[n, *(f"{curves[k][i]:.3f} ± {curves[k + '_std'][i]:.3f}" if "score" in k
                           else pct(k, i) for k in PICK_KEYS)]
                     for i, n in enumerate(curves["n"])]}


def over_optimisation(summary: dict) -> list[str]:
    """Per model, Gao et al.'s view: the N at which its pick's proxy score (its own score of
    the pick) still rises while the checker finds fewer of its picks right."""
    ns, out = summary["n"], []
    for name, key in (("PRM", "prm"), ("ORM", "orm")):
        score, right = summary[f"{key}_pick_score"], summary[f"{key}_pick_right"]
        falls = [i for i in range(1, len(ns))
                 if score[i] > score[i - 1] + 1e-9 and right[i] < right[i - 1] - 1e-9]
        head = (f"The {name}'s own score of its best-of-N pick goes from {score[0]:.3f} at N=1 "
                f"to {score[-1]:.3f} at N={ns[-1]}, the share of its picks that are right from "
                f"{100 * right[0]:.1f}% to {100 * right[-1]:.1f}%")
        if not falls:
            out.append(head + "; that share never falls while the score rises.")
            continue
        first, last = falls[0], falls[-1]
        out.append(head + f"; the score still rises while that share falls at N in "
                   f"{[ns[i] for i in falls]} ({100 * right[first - 1]:.1f}% at N={ns[first - 1]}, "
                   f"{100 * right[last]:.1f}% at N={ns[last]}): over-optimisation of the proxy.")
    return out


def _weakest_kinds(kinds: dict, n: int) -> list[str]:
    """Per model, the kinds of error it checks worst (step AUROC) and their share of its
    best-of-n picks."""
    out = []
    for name, key in (("PRM", "prm"), ("ORM", "orm")):
        rated = [(v[f"{key}_step_auroc"], k, v[f"{key}_picks"]) for k, v in kinds.items()
                 if v.get(f"{key}_step_auroc") is not None]
        if not rated:
            continue
        worst = ", ".join(f"{k} {a:.2f} ({100 * p:.0f}% of its best-of-{n} picks)"
                          for a, k, p in sorted(rated)[:2])
        slip = kinds.get("slip", {}).get(f"{key}_step_auroc")
        out.append(f"The {name} checks arithmetic slips with step AUROC "
                   f"{'-' if slip is None else f'{slip:.2f}'}; worst: {worst}.")
    return out


def run(cfg: Config | None = None, out: str | Path = "demo-output",
        work: str | Path | None = None) -> dict:
    """Every seed of `cfg`, then metrics.json, the plots and the report in `out`."""
    cfg = cfg or Config()
    out = Path(out)
    work = Path(work) if work is not None else out / "work"
    t0 = time.perf_counter()
    per_seed = map_seeds(_seed, cfg, work, line=lambda s, r: _seed_line(s, r, cfg.ns[-1]),
                         shares=STAGE_SHARES)
    return _report(out, cfg, per_seed, time.perf_counter() - t0)


def _seed(seed: int, cfg: Config, work: Path) -> dict:
    print(f"[demo] seed {seed}: world, backbone, PRM, ORM, evaluation", flush=True)
    return run_seed(seed, cfg, work)


def _seed_line(seed: int, r: dict, n: int) -> str:
    return (f"[demo] seed {seed}: best-of-{n} PRM {r['prm'][-1]:.3f} "
            f"ORM {r['orm'][-1]:.3f} majority {r['majority'][-1]:.3f} ({r['seconds']:.0f} s)")


def plot_picks(summary: dict, path: Path) -> Path:
    """Per model, its pick's proxy score and the share of its picks that are right, vs N."""
    panels = []
    for name, key, proxy in (("PRM", "prm", f"{summary['aggregation']} of step probabilities"),
                             ("ORM", "orm", "outcome probability")):
        curves = [Curve(label, summary["n"], summary[k], summary[k + "_std"])
                  for label, k in ((f"proxy score ({proxy})", f"{key}_pick_score"),
                                   ("right (checker)", f"{key}_pick_right"))]
        panels.append(Panel(curves, f"N ({name}'s best-of-N)", ylabel="proxy score x 100, % right"))
    return plot_curves(panels, path, "Proxy score against the checker's verdict of the pick")


def _report(out: Path, cfg: Config, per_seed: list[dict], seconds: float) -> dict:
    ns = list(cfg.ns)
    summary = summarise(per_seed, ns, seconds)
    summary["aggregation"] = cfg.aggregation
    summary["ood"] = summarise_ood(per_seed, ns)
    summary["hard"] = summarise_hard(per_seed, ns)
    summary["statement"] = verdict(summary)
    if summary["ood"]:
        summary["statement"] += " " + ood_sentence(summary, summary["ood"])
    if summary["hard"]:
        summary["statement"] += " ".join(["", hard_sentence(summary, summary["hard"]),
                                          "On the hard set:",
                                          *over_optimisation(summary["hard"])])
    summary["config"] = asdict(cfg)
    summary["per_seed"] = [{k: v for k, v in r.items() if k != "calibration"} for r in per_seed]

    series = {name: {"n": ns, "accuracy": summary[key], "std": summary[f"{key}_std"]}
              for name, key in (("PRM (process supervision)", "prm"),
                                ("ORM (outcome supervision)", "orm"),
                                ("majority vote", "majority"))}
    plots = {
        "Best-of-N: share of test problems solved (mean ± std over seeds)":
            plot_bon_curves(series, out / "bon_curves.png", title="Best-of-N in the demo world"),
        "The best-of-N pick: the reward model's own score of it (proxy) and the checker's "
        "verdict (mean over seeds)": plot_picks(summary, out / "pick_scores.png"),
        **({"Best-of-N on the hard set, where larger pools still find right answers "
            "(mean ± std over seeds)": plot_hard(summary["hard"], out / "bon_curves_hard.png")}
           if summary["hard"] else {}),
        "PRM step calibration (first seed)":
            plot_calibration(per_seed[0]["calibration"], out / "calibration.png"),
    }
    pct = lambda key, i: f"{100 * summary[key][i]:.1f} ± {100 * summary[key + '_std'][i]:.1f}"  # noqa: E731
    tables = {
        "Best-of-N: % of test problems solved (mean ± std over seeds)": {
            "columns": ["N", "PRM", "ORM", "majority vote", "pass@N"],
            "rows": [[n, pct("prm", i), pct("orm", i), pct("majority", i), pct("pass", i)]
                     for i, n in enumerate(ns)],
        },
        "Step-level (PRM, held-out samples)": {
            "columns": ["metric", "value"],
            "rows": [["step AUROC", f"{summary['step_auroc']:.3f} ± {summary['step_auroc_std']:.3f}"],
                     ["first-error F1 (threshold 0.5)",
                      f"{summary['first_error_f1']:.3f} ± {summary['first_error_f1_std']:.3f}"],
                     ["wall time of the whole run", f"{summary['seconds']:.0f} s"]],
        },
    }
    tables["The best-of-N pick: its proxy score and % right (mean ± std over seeds)"] = \
        pick_table(summary)
    tables[f"Per error kind: right steps against first wrong steps (AUROC), and what "
           f"best-of-{ns[-1]} picks (means over seeds)"] = kinds_table(summary["error_kinds"])
    tables["PRM step AUROC per problem form and error kind (mean over seeds, lowest seed)"] = \
        forms_table(summary["error_kinds_by_form"])
    if summary["ood"]:
        tables["In and out of distribution (% of problems solved, mean ± std over seeds)"] = \
            ood_table(summary, summary["ood"])
        tables["Out of distribution, per error kind (means over seeds)"] = \
            kinds_table(summary["ood"]["error_kinds"])
    if summary["hard"]:
        tables["The hard set: % of problems solved (mean ± std over seeds)"] = \
            hard_table(summary["hard"])
        tables["The hard set: the best-of-N pick's proxy score and % right (mean ± std over "
               "seeds)"] = pick_table(summary["hard"])
    write_report(out, summary, plots, title="prmkit demo: process vs outcome supervision",
                 summary=summary["statement"], tables=tables)
    print(f"[demo] {summary['statement']}")
    print(f"[demo] report: {out / 'report.html'} ({summary['seconds']:.0f} s in all)")
    return summary
