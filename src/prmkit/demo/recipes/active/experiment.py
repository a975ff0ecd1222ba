"""Active learning in the demo world (the paper's Figure 5).

A selector PRM, trained on one sample of each of `selector_problems` fresh problems with
PRM_large's process labels (0: of the small models' problems, as the paper's PRM_selector),
scores every sample of each problem's pool; at each data size N per problem, `select_convincing`
takes 80% the most convincing wrong-answer samples and 20% the most convincing of the
rest. Small PRMs trained on these selections, labelled by PRM_large, are compared with
small PRMs trained on uniformly sampled solutions of the same size (the synthetic
experiment's process-supervised models), by best-of-N* on the demo's test problems (N*
chosen on dev problems, as the synthetic experiment's). Data efficiency is the ratio of
the slopes of lines fitted to accuracy against log data size, as the paper measures it
(2.6x there). Both arms again with the checker's exact labels tell the selection's effect
from PRM_large's labels' on what it selects; the selector's own best-of-N* on the dev
problems, against a random pick, says whether it ranks at all.

    prmkit demo --experiment active [--out demo-output]
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from prmkit.active.efficiency import bootstrap_efficiency, efficiency, fit_log_line
from prmkit.active.selection import pool_diversity
from prmkit.demo.core.labels import uniform_picks
from prmkit.demo.core.report import mean_std, pct, plot_series, publish
from prmkit.demo.core.small_models import (
    EVAL_N_RULE,
    control_dev_curve,
    dev_curve,
    eval_index,
    per_problem_at,
    references,
    small_model,
)
from prmkit.demo.core.small_scale import SeedSetup, SmallScaleConfig, quick_small_scale, run_seeds
from prmkit.demo.recipes.active.picks import (
    active_picks,
    candidates,
    composition,
    iterative_picks,
    picks_name,
    selector_model,
    selector_name,
)

Config = SmallScaleConfig


def quick(seeds: tuple[int, ...] = (0, 1, 2)) -> Config:
    """Seconds-long settings (smoke tests), not a result."""
    return quick_small_scale(seeds)


# method: (label, which picks, which labels); the models' names are f"{picks}-{labels}-s{size}",
# the selected picks named by their selector (`picks_name`; uniform-process and
# uniform-checker are the synthetic experiment's, shared through the cache)
METHODS = {
    "uniform": ("uniform sampling", "uniform", "process"),
    "active": ("active learning (convincing wrong answers)", "active", "process"),
    "iterative": ("active learning, selector retrained each round", "iterative", "process"),
    "uniform_checker": ("uniform sampling, the checker's labels", "uniform", "checker"),
    "active_checker": ("active learning, the checker's labels", "active", "checker"),
}


def run_seed(setup: SeedSetup) -> dict:
    selector = selector_model(setup)
    pool = candidates(setup, selector)
    out = {"seed": setup.seed, "references": references(setup), "models": {}, "selection": {},
           "dev_control": control_dev_curve(setup), "selector_model": selector_name(setup),
           "dev_selector": dev_curve(setup, selector_name(setup), "process", selector)}
    rounds = iterative_picks(setup, pool)
    for size in setup.cfg.sizes:
        picks = {"uniform": uniform_picks(setup, size), "active": active_picks(setup, pool, size),
                 "iterative": rounds[size]}
        for method, (_, which, labels) in METHODS.items():
            t0 = time.perf_counter()
            p = picks[which]
            r = small_model(setup, f"{picks_name(setup, which)}-{labels}-s{size}", labels, p)
            r["composition"] = composition(setup, p)
            out["models"].setdefault(method, {})[size] = r
            print(f"[active] seed {setup.seed} {method:<15} {size:>3} samples/problem: "
                  f"best-of-{setup.cfg.ns[-1]} {r['curve'][-1]:.3f} ({r['examples']} examples, "
                  f"{100 * r['composition']['wrong_answer']:.0f}% wrong answers, "
                  f"{time.perf_counter() - t0:.0f} s)", flush=True)
        index = {(c.problem_id, c.sample_index): c for c in pool}
        chosen = [index[(setup.problems[k].id, i)] for k, idx in enumerate(picks["active"])
                  for i in idx]
        out["selection"][size] = pool_diversity(pool, chosen)
    return out


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def ratio_text(ratio: float | None) -> str:
    return "undefined" if ratio is None else f"{ratio:.2f}"


def ratio_with_interval(per_seed: list[dict], sizes: list[int], i: int, arms: tuple) -> dict:
    """Efficiency of arms[1] over arms[0] at the N of index i: the ratio of the mean curves'
    slopes, per seed, and its bootstrap interval over seeds and problems."""
    u, a = ([[r["models"][m][s]["curve"][i] for s in sizes] for r in per_seed] for m in arms)
    arrays = [per_problem_at([r["models"][m] for r in per_seed], sizes, i) for m in arms]
    eff = efficiency(sizes, np.mean(u, axis=0), np.mean(a, axis=0))
    boot = bootstrap_efficiency(sizes, *arrays, seed=0)
    per = [efficiency(sizes, uu, aa) for uu, aa in zip(u, a)]
    return {
        "efficiency_ratio": _round(eff["ratio"]), "efficiency_ratio_note": eff["ratio_note"],
        "data_multiple_at_largest": round(eff["data_multiple_at_largest"], 4),
        "efficiency_ratio_per_seed": [_round(e["ratio"]) for e in per],
        "efficiency_ratio_interval": boot["interval"],
        "efficiency_ratio_interval_note": (
            f"{100 * boot['level']:.0f}% percentile interval over {boot['replicates']} "
            f"bootstrap replicates ({boot['resampled']}); the ratio was defined in "
            f"{100 * boot['defined_share']:.0f}% of them"),
        "slopes_per_seed": [{"uniform": round(e["slope_uniform"], 4),
                             "active": round(e["slope_active"], 4)} for e in per]}


def summarise(per_seed: list[dict], cfg: SmallScaleConfig) -> dict:
    sizes, ns = list(cfg.sizes), cfg.ns
    i = eval_index(per_seed, ns)
    out: dict = {"seeds": len(per_seed), "seed_list": [r["seed"] for r in per_seed],
                 "sizes": sizes, "n": ns, "best_of_n": ns[i], "eval_n_rule": EVAL_N_RULE,
                 "methods": {}}
    for method, (label, _, _) in METHODS.items():
        runs = [r["models"][method] for r in per_seed]
        at_n = [[m[s]["curve"][i] for s in sizes] for m in runs]
        acc, acc_std = mean_std(at_n)

        def share(key, runs=runs):
            return mean_std([[m[s]["composition"][key] for s in sizes] for m in runs])[0]
        out["methods"][method] = {
            "label": label, "sizes": sizes, "accuracy": acc, "accuracy_std": acc_std,
            "per_seed": [[round(v, 4) for v in row] for row in at_n],
            "accuracy_at_largest_n": mean_std([[m[s]["curve"][-1] for s in sizes]
                                               for m in runs])[0],
            "examples": mean_std([[m[s]["examples"] for s in sizes] for m in runs])[0],
            "wrong_answer_share": share("wrong_answer"),
            "wrong_process_share": share("wrong_process"),
            "large_labels_exact": share("large_labels_exact"),
            "kinds": {kind: mean_std([[m[s]["composition"]["kinds"][kind] for s in sizes]
                                      for m in runs])[0]
                      for kind in runs[0][sizes[0]]["composition"]["kinds"]},
            "fit": dict(zip(("slope", "intercept"), fit_log_line(sizes, acc))),
        }
    out |= ratio_with_interval(per_seed, sizes, i, ("uniform", "active"))
    out["checker_labels"] = ratio_with_interval(per_seed, sizes, i,
                                                ("uniform_checker", "active_checker"))
    out["iterative"] = ratio_with_interval(per_seed, sizes, i, ("uniform", "iterative"))
    selector, random_pick = (mean_std([r["dev_selector"] for r in per_seed])[0][j]
                             for j in (i, 0))
    out["selector"] = {"model": per_seed[0]["selector_model"],
                       "problems": cfg.selector_problems or cfg.problems, "dev_best_of_n": selector,
                       "dev_random_pick": random_pick, "beats_random": selector > random_pick}
    for ref in ("majority", "pass"):
        m, s = mean_std([r["references"][ref] for r in per_seed])
        out[ref] = {"n": ns, "accuracy": m[i], "accuracy_std": s[i]}
    out["pool_diversity"] = {str(s): {k: round(float(np.mean([r["selection"][s][k] for r in per_seed])), 4)
                                 for k in per_seed[0]["selection"][s]} for s in sizes}
    return out


def verdict(summary: dict) -> str:
    u, a, n = summary["methods"]["uniform"], summary["methods"]["active"], summary["best_of_n"]
    sizes = summary["sizes"]
    gaps = np.array(a["per_seed"]) - np.array(u["per_seed"])
    lines = [
        f"Best-of-{n} (N* on the dev problems: {summary['eval_n_rule']}), % of test problems "
        f"solved, mean ± std over {summary['seeds']} seeds, at {sizes} samples per problem: "
        "uniform "
        + ", ".join(pct(m, s) for m, s in zip(u["accuracy"], u["accuracy_std"]))
        + "; active " + ", ".join(pct(m, s) for m, s in zip(a["accuracy"], a["accuracy_std"])) + ".",
        f"Fitted slopes per doubling of the data: uniform {100 * u['fit']['slope']:+.2f} points, "
        f"active {100 * a['fit']['slope']:+.2f} points; ratio "
        f"{ratio_text(summary['efficiency_ratio'])} (per seed "
        f"{', '.join(ratio_text(r) for r in summary['efficiency_ratio_per_seed'])}; "
        "the paper: 2.6).",
        f"Active learning is above uniform sampling on average at sizes "
        f"{[s for s, g in zip(sizes, gaps.mean(0)) if g > 0]}, in every seed at "
        f"{[s for s, col in zip(sizes, gaps.T) if (col > 0).all()]}.",
    ]
    if summary["efficiency_ratio"] is None:
        lines.append(f"No efficiency ratio: {summary['efficiency_ratio_note']}, so the ratio "
                     "of slopes does not measure data efficiency.")
    wa = a["wrong_answer_share"]
    lines.append(f"Selected sets hold {', '.join(f'{100 * w:.0f}%' for w in wa)} wrong-answer "
                 f"samples (uniform: {', '.join(f'{100 * w:.0f}%' for w in u['wrong_answer_share'])}); "
                 "PRM_large finds their first wrong step exactly in "
                 f"{', '.join(f'{100 * w:.0f}%' for w in a['large_labels_exact'])} (uniform: "
                 f"{', '.join(f'{100 * w:.0f}%' for w in u['large_labels_exact'])}).")
    sel = summary["selector"]
    lines.append(f"The selector's best-of-{n} on the dev problems {100 * sel['dev_best_of_n']:.1f}% "
                 f"against {100 * sel['dev_random_pick']:.1f}% for a random pick: it "
                 + ("ranks." if sel["beats_random"] else "does not rank better than chance."))
    uc, ac = summary["methods"]["uniform_checker"], summary["methods"]["active_checker"]
    lines.append("With the checker's exact labels instead of PRM_large's: uniform "
                 + ", ".join(pct(m, s) for m, s in zip(uc["accuracy"], uc["accuracy_std"]))
                 + "; active " + ", ".join(pct(m, s) for m, s in zip(ac["accuracy"], ac["accuracy_std"]))
                 + f"; ratio {ratio_text(summary['checker_labels']['efficiency_ratio'])}.")
    it = summary["methods"]["iterative"]
    lines.append("Iterative (the selector retrained on each round's labels): "
                 + ", ".join(pct(m, s) for m, s in zip(it["accuracy"], it["accuracy_std"]))
                 + f"; ratio {ratio_text(summary['iterative']['efficiency_ratio'])}.")
    return " ".join(lines)


def figure_title(summary: dict) -> str:
    """The figure's title: the efficiency ratio where it is defined, else why not."""
    ratio = summary["efficiency_ratio"]
    what = (f", efficiency ratio {ratio:.2f}" if ratio is not None
            else f"\nno efficiency ratio: {summary['efficiency_ratio_note']}")
    return f"Active learning: best-of-{summary['best_of_n']}{what}"


def plot_active(summary: dict, path: Path) -> Path:
    """Accuracy against samples per problem, with the fitted lines, for the arms labelled
    by PRM_large (the arms with the checker's labels are in the table)."""
    sizes = summary["sizes"]
    series = {}
    for (method, m), color in zip(summary["methods"].items(), ("C0", "C1", "C2")):
        if METHODS[method][2] == "checker":
            continue
        series[m["label"]] = {"x": sizes, "mean": m["accuracy"], "std": m["accuracy_std"],
                              "color": color}
        fit = m["fit"]
        series[f"fit: {m['label']}"] = {
            "x": sizes, "std": [0.0] * len(sizes), "ls": ":", "color": color,
            "mean": [fit["slope"] * np.log2(s) + fit["intercept"] for s in sizes]}
    return plot_series(series, path, "samples per problem labelled (log scale)",
                       figure_title(summary))


def run(cfg: Config, out: str | Path, work: str | Path) -> dict:
    out = Path(out)
    summary = run_seeds(cfg, Path(work), run_seed, summarise, verdict)
    sizes, n = summary["sizes"], summary["best_of_n"]
    plots = {f"Best-of-{n} against samples per problem, with fitted lines (mean ± std over seeds)":
             plot_active(summary, out / "active_learning.png")}
    methods = summary["methods"]
    a = methods["active"]
    tables = {f"Best-of-{n}: % solved against samples per problem (mean ± std)": {
        "columns": ["samples / problem", *(m["label"] for m in methods.values()),
                    "active: wrong answers", "active: PRM_large's labels exact",
                    "active: selected share of distinct pool"],
        "rows": [[s, *(pct(m["accuracy"][i], m["accuracy_std"][i]) for m in methods.values()),
                  f"{100 * a['wrong_answer_share'][i]:.0f}%",
                  f"{100 * a['large_labels_exact'][i]:.0f}%",
                  f"{100 * summary['pool_diversity'][str(s)]['selected_share_of_distinct']:.0f}%"]
                 for i, s in enumerate(sizes)]}}
    publish(out, summary, plots, tables, "active", "prmkit demo: active learning")
    return summary
