"""Synthetic supervision in the demo world (the paper's Figure 4).

PRM_large (the demo's PRM, trained on plenty of checker labels) labels sampled solutions of
fresh problems; small reward models are trained on 1 .. many samples per problem with
(a) process supervision from PRM_large (labels up to the first step whose P(wrong) is
above the threshold), (b) outcome supervision from PRM_large (right only if every step
is), (c) final-answer supervision (the grader). Each is evaluated by best-of-N on the
demo's test problems: against the data size at N* (the N where the checker-labelled
control peaks on fresh dev problems: before the curves fall), and against N at the largest
size; paired differences between kinds with bootstrap intervals over seeds and problems.
The paper finds (a) above (b) above (c).

    prmkit demo --experiment synthetic [--out demo-output]
"""

from __future__ import annotations

import time
from pathlib import Path

from prmkit.active.efficiency import bootstrap_difference, bootstrap_slope
from prmkit.demo.core.labels import label_agreement, uniform_picks
from prmkit.demo.core.report import mean_std, pct, plot_series, publish
from prmkit.demo.core.small_models import (
    EVAL_N_RULE,
    control_dev_curve,
    eval_index,
    per_problem_at,
    references,
    small_model,
)
from prmkit.demo.core.small_scale import SeedSetup, SmallScaleConfig, quick_small_scale, run_seeds
from prmkit.demo.core.thresholds import THRESHOLDS

Config = SmallScaleConfig


def quick(seeds: tuple[int, ...] = (0, 1, 2)) -> Config:
    """Seconds-long settings (smoke tests), not a result."""
    return quick_small_scale(seeds)


KINDS = {
    "process": "process supervision from PRM_large",
    "outcome": "outcome supervision from PRM_large",
    "final_answer": "final-answer supervision (grader)",
}
# Not a kind of the paper: the checker's own process labels, an upper reference for what
# small models learn from this much data.
CONTROL = {"checker": "process supervision from the checker (control)"}


def run_seed(setup: SeedSetup) -> dict:
    out = {"seed": setup.seed, "references": references(setup),
           "threshold": setup.threshold, "threshold_agreement_dev": setup.threshold_agreement,
           "label_agreement": label_agreement(setup), "models": {},
           "label_agreement_by_threshold": {str(t): label_agreement(setup, t)
                                            for t in THRESHOLDS}}
    for kind in {**KINDS, **CONTROL}:
        for size in setup.cfg.sizes:
            t0 = time.perf_counter()
            r = small_model(setup, f"uniform-{kind}-s{size}", kind, uniform_picks(setup, size))
            out["models"].setdefault(kind, {})[size] = r
            print(f"[synthetic] seed {setup.seed} {kind:<12} {size:>3} samples/problem: "
                  f"best-of-{setup.cfg.ns[-1]} {r['curve'][-1]:.3f} "
                  f"({r['examples']} examples, {time.perf_counter() - t0:.0f} s)", flush=True)
    out["dev_control"] = control_dev_curve(setup)
    return out


def summarise(per_seed: list[dict], cfg: SmallScaleConfig) -> dict:
    sizes, ns = list(cfg.sizes), cfg.ns
    i = eval_index(per_seed, ns)
    out: dict = {"seeds": len(per_seed), "seed_list": [r["seed"] for r in per_seed],
                 "sizes": sizes, "n": ns, "best_of_n": ns[i], "eval_n_rule": EVAL_N_RULE,
                 "dev_control_curve": mean_std([r["dev_control"] for r in per_seed])[0],
                 "kinds": {}}
    arrays = {}
    for kind, label in {**KINDS, **CONTROL}.items():
        runs = [r["models"][kind] for r in per_seed]
        at_n = [[m[s]["curve"][i] for s in sizes] for m in runs]
        acc, acc_std = mean_std(at_n)
        largest, largest_std = mean_std([[m[s]["curve"][-1] for s in sizes] for m in runs])
        vs_n, vs_n_std = mean_std([m[sizes[-1]]["curve"] for m in runs])
        arrays[kind] = per_problem_at(runs, sizes, i)
        out["kinds"][kind] = {
            "label": label, "sizes": sizes, "accuracy": acc, "accuracy_std": acc_std,
            "per_seed": [[round(v, 4) for v in row] for row in at_n],
            "accuracy_at_largest_n": largest, "accuracy_at_largest_n_std": largest_std,
            "examples": mean_std([[m[s]["examples"] for s in sizes] for m in runs])[0],
            "positive_share": mean_std([[m[s]["positive_share"] for s in sizes] for m in runs])[0],
            "vs_n": {"n": ns, "accuracy": vs_n, "accuracy_std": vs_n_std},
            "slope_per_doubling": bootstrap_slope(sizes, arrays[kind]),
        }
    out["differences"] = {name: bootstrap_difference(sizes, arrays[hi], arrays[lo])
                          for name, hi, lo in PAIRS}
    for ref in ("majority", "pass"):
        m, s = mean_std([r["references"][ref] for r in per_seed])
        out[ref] = {"n": ns, "accuracy": m, "accuracy_std": s}
    agree = per_seed[0]["label_agreement"].keys()
    out["label_agreement"] = {k: mean_std([[r["label_agreement"][k]] for r in per_seed])[0][0]
                              for k in agree}
    out["label_agreement_by_threshold"] = {
        t: {k: mean_std([[r["label_agreement_by_threshold"][t][k]] for r in per_seed])[0][0]
            for k in agree} for t in per_seed[0]["label_agreement_by_threshold"]}
    out["threshold"] = {"per_seed": [r["threshold"] for r in per_seed],
                        "chosen_on": "dev problems" if cfg.threshold is None else "set",
                        "dev_agreement": [r["threshold_agreement_dev"] for r in per_seed]}
    out["regime"] = regime(out)
    return out


PAIRS = (("(a) - (b)", "process", "outcome"), ("(a) - (c)", "process", "final_answer"),
         ("(b) - (c)", "outcome", "final_answer"))


def regime(summary: dict) -> dict:
    """What a comparison of labels needs, each measured apart from it: exact labels help as
    data grows; PRM_large's outcome labels agree with the checker more often than final
    answers do; right answers through wrong steps common enough (10%) for outcome and
    final-answer labels to differ."""
    control = summary["kinds"]["checker"]["slope_per_doubling"]
    ag = summary["label_agreement"]
    gap = 1 - ag["final_answer_agrees_with_process"]
    return {
        "checker_control_rises": control["interval"][0] > 0,
        "outcome_labels_beat_final_answers":
            ag["outcome_agrees_with_process"] > ag["final_answer_agrees_with_process"],
        "right_answer_wrong_process_share": round(gap, 4),
        "right_answers_through_wrong_steps_common": gap >= 0.10,
        "rule": "the checker-labelled control's slope of best-of-N accuracy per doubling of "
                "the labelled data has a 95% bootstrap interval (seeds and problems) above "
                "zero; (b) vs (c) needs outcome labels that agree with the checker more "
                "often than final answers and at least 10% of solutions right in answer, "
                "wrong in a step",
    }


def verdict(summary: dict) -> str:
    kinds, sizes, n = summary["kinds"], summary["sizes"], summary["best_of_n"]
    i = summary["n"].index(n)
    lines = [f"Best-of-{n} (N* on the dev problems: {summary['eval_n_rule']}), % of test "
             f"problems solved, mean ± std over {summary['seeds']} seeds, at {sizes[-1]} "
             "samples per problem: "
             + "; ".join(f"({x}) {kinds[k]['label']} {pct(kinds[k]['accuracy'][-1], kinds[k]['accuracy_std'][-1])}"
                         for x, k in zip("abc", KINDS)) + "."]
    for name, diff in summary["differences"].items():
        d = diff["difference"]
        lines.append(f"{name}, paired, points (95% interval): " + ", ".join(
            f"{100 * v:+.1f} ({100 * lo:+.1f}, {100 * hi:+.1f}) at {s}"
            for s, v, (lo, hi) in zip(sizes, d, diff["interval"])) + ".")
    ctrl = kinds["checker"]
    lines.append(f"References at best-of-{n}: the checker's own process labels (control) "
                 f"{pct(ctrl['accuracy'][-1], ctrl['accuracy_std'][-1])} at {sizes[-1]} samples "
                 f"per problem, majority vote {pct(summary['majority']['accuracy'][i], summary['majority']['accuracy_std'][i])}, "
                 f"a random sample (N = 1) {pct(kinds['process']['vs_n']['accuracy'][0], kinds['process']['vs_n']['accuracy_std'][0])}.")
    slope = ctrl["slope_per_doubling"]
    low, high = (100 * v for v in slope["interval"])
    reg = summary["regime"]
    lines.append(f"Regime check: the control's accuracy rises {100 * slope['slope']:+.2f} points "
                 f"per doubling of the labelled data (95% interval {low:+.2f} to {high:+.2f}): "
                 + ("more labels help, so the kinds of labels can be compared." if
                    reg["checker_control_rises"] else
                    "not clearly above zero, so more labels do not help here and the kinds "
                    "of labels cannot be told apart by it."))
    thr = summary["threshold"]
    ag = summary["label_agreement"]
    lines.append(f"PRM_large's threshold per seed {thr['per_seed']} ({thr['chosen_on']}). Labels "
                 f"against the checker on the small models' pools: PRM_large finds the first "
                 f"wrong step exactly in {100 * ag['process_first_error_exact']:.1f}% of "
                 f"solutions, its outcome labels agree with the process in "
                 f"{100 * ag['outcome_agrees_with_process']:.1f}%, the final answer in "
                 f"{100 * ag['final_answer_agrees_with_process']:.1f}%.")
    if not (reg["outcome_labels_beat_final_answers"]
            and reg["right_answers_through_wrong_steps_common"]):
        lines.append(f"(b) against (c) is outside its regime: right answers through a wrong "
                     f"step are {100 * reg['right_answer_wrong_process_share']:.1f}% of "
                     "solutions (at least 10% needed), and outcome labels "
                     + ("do" if reg["outcome_labels_beat_final_answers"] else "do not")
                     + " agree with the checker more often than final answers.")
    return " ".join(lines)


def run(cfg: Config, out: str | Path, work: str | Path) -> dict:
    out = Path(out)
    summary = run_seeds(cfg, Path(work), run_seed, summarise, verdict)
    sizes, n = summary["sizes"], summary["best_of_n"]
    by_size = {s["label"]: {"x": sizes, "mean": s["accuracy"], "std": s["accuracy_std"]}
               for s in summary["kinds"].values()}
    by_n = {s["label"]: {"x": s["vs_n"]["n"], "mean": s["vs_n"]["accuracy"],
                         "std": s["vs_n"]["accuracy_std"]} for s in summary["kinds"].values()}
    by_n["majority vote"] = {"x": summary["n"], "mean": summary["majority"]["accuracy"],
                             "std": summary["majority"]["accuracy_std"], "ls": "--"}
    plots = {
        f"Best-of-{n} against samples per problem (mean ± std over seeds)": plot_series(
            by_size, out / "synthetic_by_size.png", "samples per problem labelled (log scale)",
            f"Synthetic supervision: best-of-{n} against data size"),
        f"Best-of-N at {sizes[-1]} samples per problem (mean ± std over seeds)": plot_series(
            by_n, out / "synthetic_by_n.png", "N = solutions per problem (log scale)",
            f"Synthetic supervision: best-of-N at {sizes[-1]} samples per problem"),
    }
    kinds = list(summary["kinds"].values())
    tables = {
        f"Best-of-{n}: % solved against samples per problem (mean ± std)": {
            "columns": ["samples / problem", *(k["label"] for k in kinds)],
            "rows": [[s, *(pct(k["accuracy"][i], k["accuracy_std"][i]) for k in kinds)]
                     for i, s in enumerate(sizes)]},
        f"Paired differences at best-of-{n}, points (95% interval, seeds and problems)": {
            "columns": ["samples / problem", *summary["differences"]],
            "rows": [[s, *(f"{100 * d['difference'][i]:+.1f} ({100 * d['interval'][i][0]:+.1f}, "
                           f"{100 * d['interval'][i][1]:+.1f})"
                           for d in summary["differences"].values())]
                     for i, s in enumerate(sizes)]},
        f"Best-of-{summary['n'][-1]} (past the peak): % solved against samples per problem": {
            "columns": ["samples / problem", *(k["label"] for k in kinds)],
            "rows": [[s, *(pct(k["accuracy_at_largest_n"][i], k["accuracy_at_largest_n_std"][i])
                           for k in kinds)] for i, s in enumerate(sizes)]},
        f"Best-of-N at {sizes[-1]} samples per problem: % solved (mean ± std)": {
            "columns": ["N", *(k["label"] for k in kinds), "majority vote"],
            "rows": [[m, *(pct(k["vs_n"]["accuracy"][i], k["vs_n"]["accuracy_std"][i])
                           for k in kinds),
                      pct(summary["majority"]["accuracy"][i], summary["majority"]["accuracy_std"][i])]
                     for i, m in enumerate(summary["n"])]},
    }
    publish(out, summary, plots, tables, "synthetic", "prmkit demo: synthetic supervision")
    return summary
