"""Active learning in the demo world (the paper's Figure 5).

A selector PRM, trained on one sample per problem with PRM_large's process labels, scores
every sample of each problem's pool; at each data size N per problem, `select_convincing`
takes 80% the most convincing wrong-answer samples and 20% the most convincing of the
rest. Small PRMs trained on these selections, labelled by PRM_large, are compared with
small PRMs trained on uniformly sampled solutions of the same size (the synthetic
experiment's process-supervised models), by best-of-N on the demo's test problems. Data
efficiency is the ratio of the slopes of lines fitted to accuracy against log data size,
as the paper measures it (2.6x there).

    prmkit demo --experiment active [--out demo-output]
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from prmkit.active.efficiency import bootstrap_efficiency, efficiency, fit_log_line
from prmkit.active.selection import (
    Candidate,
    SelectionConfig,
    dedupe_key,
    pool_diversity,
    select_convincing,
)
from prmkit.demo.core.labels import Picks, examples_for, uniform_picks
from prmkit.demo.core.report import mean_std, pct, plot_series, publish
from prmkit.demo.core.scores import cached_scores
from prmkit.demo.core.small_models import references, small_model, train_small
from prmkit.demo.core.small_scale import SeedSetup, SmallScaleConfig, quick_small_scale, run_seeds
from prmkit.scoring.aggregate import aggregate

Config = SmallScaleConfig


def quick(seeds: tuple[int, ...] = (0, 1, 2)) -> Config:
    """Seconds-long settings (smoke tests), not a result."""
    return quick_small_scale(seeds)


METHODS = {"uniform": "uniform sampling", "active": "active learning (convincing wrong answers)"}


def selector_candidates(setup: SeedSetup) -> list[Candidate]:
    """Every sample of the pools, scored by the selector PRM (the demo's aggregation), with
    the grader's verdict on its final answer."""
    selector = train_small(setup, "uniform-process-s1", "process",
                           examples_for(setup, "process", uniform_picks(setup, 1)))
    scores = cached_scores(setup.folder / "selector_pool_scores.json", selector, setup.pools,
                           setup.problems, setup.cfg.progress)
    agg = setup.cfg.demo.aggregation
    return [Candidate(problem_id=p.id, sample_index=i, dedupe_key=dedupe_key(steps),
                      score=aggregate(scores[k][i], agg),
                      correct=setup.checks[k][i].final_correct)
            for k, p in enumerate(setup.problems) for i, steps in enumerate(setup.pools[k])]


def active_picks(setup: SeedSetup, pool: list[Candidate], size: int) -> Picks:
    chosen = select_convincing(pool, SelectionConfig(
        per_problem=size, convincing_wrong_share=setup.cfg.convincing_wrong_share))
    index = {p.id: k for k, p in enumerate(setup.problems)}
    picks: Picks = [[] for _ in setup.problems]
    for c in chosen:
        picks[index[c.problem_id]].append(c.sample_index)
    return picks


def composition(setup: SeedSetup, picks: Picks) -> dict[str, float]:
    """Shares of the labelled samples with a wrong final answer and with a wrong process."""
    chosen = [setup.checks[k][i] for k, idx in enumerate(picks) for i in idx]
    return {"samples": len(chosen),
            "wrong_answer": float(np.mean([not c.final_correct for c in chosen])),
            "wrong_process": float(np.mean([not c.process_correct for c in chosen]))}


def run_seed(setup: SeedSetup) -> dict:
    pool = selector_candidates(setup)
    out = {"seed": setup.seed, "references": references(setup), "models": {}, "selection": {}}
    for size in setup.cfg.sizes:
        picks = {"uniform": uniform_picks(setup, size), "active": active_picks(setup, pool, size)}
        for method, p in picks.items():
            t0 = time.perf_counter()
            r = small_model(setup, f"{method}-process-s{size}", "process", p)
            r["composition"] = composition(setup, p)
            out["models"].setdefault(method, {})[size] = r
            print(f"[active] seed {setup.seed} {method:<8} {size:>3} samples/problem: "
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


def summarise(per_seed: list[dict], cfg: SmallScaleConfig) -> dict:
    sizes, ns = list(cfg.sizes), cfg.ns
    out: dict = {"seeds": len(per_seed), "seed_list": [r["seed"] for r in per_seed],
                 "sizes": sizes, "n": ns, "best_of_n": ns[-1], "methods": {}}
    for method, label in METHODS.items():
        runs = [r["models"][method] for r in per_seed]
        at_n = [[m[s]["curve"][-1] for s in sizes] for m in runs]
        acc, acc_std = mean_std(at_n)
        out["methods"][method] = {
            "label": label, "sizes": sizes, "accuracy": acc, "accuracy_std": acc_std,
            "per_seed": [[round(v, 4) for v in row] for row in at_n],
            "examples": mean_std([[m[s]["examples"] for s in sizes] for m in runs])[0],
            "wrong_answer_share": mean_std(
                [[m[s]["composition"]["wrong_answer"] for s in sizes] for m in runs])[0],
            "wrong_process_share": mean_std(
                [[m[s]["composition"]["wrong_process"] for s in sizes] for m in runs])[0],
            "fit": dict(zip(("slope", "intercept"), fit_log_line(sizes, acc))),
        }
    u, a = out["methods"]["uniform"], out["methods"]["active"]
    eff = efficiency(sizes, u["accuracy"], a["accuracy"])
    out["efficiency_ratio"] = _round(eff["ratio"])
    out["efficiency_ratio_note"] = eff["ratio_note"]
    out["data_multiple_at_largest"] = round(eff["data_multiple_at_largest"], 4)
    per = [efficiency(sizes, uu, aa) for uu, aa in zip(u["per_seed"], a["per_seed"])]
    out["efficiency_ratio_per_seed"] = [_round(e["ratio"]) for e in per]
    boot = bootstrap_efficiency(sizes, *(
        np.array([[r["models"][m][s]["per_problem"] for s in sizes] for r in per_seed])
        for m in ("uniform", "active")), seed=0)
    out["efficiency_ratio_interval"] = boot["interval"]
    out["efficiency_ratio_interval_note"] = (
        f"{100 * boot['level']:.0f}% percentile interval over {boot['replicates']} bootstrap "
        f"replicates ({boot['resampled']}); the ratio was defined in "
        f"{100 * boot['defined_share']:.0f}% of them")
    out["slopes_per_seed"] = [{"uniform": round(e["slope_uniform"], 4),
                               "active": round(e["slope_active"], 4)} for e in per]
    for ref in ("majority", "pass"):
        m, s = mean_std([r["references"][ref] for r in per_seed])
        out[ref] = {"n": ns, "accuracy": m[-1], "accuracy_std": s[-1]}
    out["pool_diversity"] = {str(s): {k: round(float(np.mean([r["selection"][s][k] for r in per_seed])), 4)
                                 for k in per_seed[0]["selection"][s]} for s in sizes}
    return out


def verdict(summary: dict) -> str:
    u, a, n = summary["methods"]["uniform"], summary["methods"]["active"], summary["best_of_n"]
    sizes = summary["sizes"]
    gaps = np.array(a["per_seed"]) - np.array(u["per_seed"])
    lines = [
        f"Best-of-{n}, % of test problems solved, mean ± std over {summary['seeds']} seeds, at "
        f"{sizes} samples per problem: uniform "
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
                 f"samples (uniform: {', '.join(f'{100 * w:.0f}%' for w in u['wrong_answer_share'])}).")
    return " ".join(lines)


def figure_title(summary: dict) -> str:
    """The figure's title: the efficiency ratio where it is defined, else why not."""
    ratio = summary["efficiency_ratio"]
    what = (f", efficiency ratio {ratio:.2f}" if ratio is not None
            else f"\nno efficiency ratio: {summary['efficiency_ratio_note']}")
    return f"Active learning: best-of-{summary['best_of_n']}{what}"


def plot_active(summary: dict, path: Path) -> Path:
    """Accuracy against samples per problem, with the fitted lines, for both methods."""
    sizes = summary["sizes"]
    series = {}
    for color, m in zip(("C0", "C1"), summary["methods"].values()):
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
    u, a = summary["methods"]["uniform"], summary["methods"]["active"]
    tables = {f"Best-of-{n}: % solved against samples per problem (mean ± std)": {
        "columns": ["samples / problem", "uniform", "active", "active: wrong answers",
                    "active: selected share of distinct pool"],
        "rows": [[s, pct(u["accuracy"][i], u["accuracy_std"][i]),
                  pct(a["accuracy"][i], a["accuracy_std"][i]),
                  f"{100 * a['wrong_answer_share'][i]:.0f}%",
                  f"{100 * summary['pool_diversity'][str(s)]['selected_share_of_distinct']:.0f}%"]
                 for i, s in enumerate(sizes)]}}
    publish(out, summary, plots, tables, "active", "prmkit demo: active learning")
    return summary
