"""The RL experiment's outputs: rl_world.json, rl_world.png (one panel per metric against
GRPO steps, one line per reward, ± std over seeds) and a report (markdown and HTML)."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path

import numpy as np

from prmkit.demo.recipes.rl.config import REWARDS
from prmkit.demo.recipes.rl.eval import COUNTS, SHARES
from prmkit.demo.recipes.rl.regime import regime, regime_line
from prmkit.evaluation.report import new_figure, save_figure, write_report

TITLES = {"greedy_accuracy": "answer accuracy, greedy", "sampled_accuracy":
          "answer accuracy, sampled", "right_process": "right process (every step accepted)",
          "right_answer_wrong_step": "right answer through a wrong step",
          "no_answer": "no answer", "prm_score": "PRM mean score", "orm_score": "ORM mean score",
          "prm_score_when_wrong": "PRM mean score, wrong solutions",
          "steps_per_solution": "steps per solution", "tokens_per_step": "policy tokens per step"}
ACCOUNTING = ("prompts_seen", "prompts_sha", "completions_sampled", "optimizer_steps",
              "eval_steps")


def _stat(values: list) -> tuple[float | None, float | None]:
    values = [v for v in values if v is not None]
    return (float(np.mean(values)), float(np.std(values))) if values else (None, None)


def curves(per_seed: list[dict], rewards) -> dict:
    """Per reward: the evaluation steps and each metric's mean and std over seeds; the
    step-0 point (the fine-tuned policy) is every reward's first."""
    out = {}
    for name in rewards:
        runs = [[s["start"]["point"], *s["runs"][name]["curve"]] for s in per_seed]
        steps = [p["step"] for p in runs[0]]
        entry: dict = {"steps": steps}
        for metric in (*SHARES, *COUNTS):
            stats = [_stat([run[i].get(metric) for run in runs]) for i in range(len(steps))]
            entry[metric] = {"mean": [m for m, _ in stats], "std": [s for _, s in stats]}
        out[name] = entry
    return out


def best_of_n_rows(per_seed: list[dict], rewards) -> dict:
    rows = {"fine-tuned policy (step 0)": [s["start"]["best_of_n"] for s in per_seed]}
    rows.update({name: [s["runs"][name]["best_of_n"] for s in per_seed] for name in rewards
                 if all(s["runs"][name]["best_of_n"] is not None for s in per_seed)})
    return {name: {k: _stat([r[k] for r in results]) for k in
                   ("accuracy", "right_process", "sample_accuracy", "pass")}
            for name, results in rows.items()}


def matched(per_seed: list[dict], rewards) -> bool:
    """Every reward of a seed saw the same prompts, completions, steps and evaluations."""
    for s in per_seed:
        seen = {tuple(str(s["runs"][n]["accounting"][k]) for k in ACCOUNTING) for n in rewards}
        if len(seen) != 1:
            return False
    return True


def high_scoring_wrong(per_seed: list[dict], rewards) -> dict | None:
    """The wrong solution with the highest PRM score at any run's last evaluation."""
    found = [{"reward": n, "seed": s["seed"], **s["runs"][n]["curve"][-1]["example"]}
             for s in per_seed for n in rewards
             if s["runs"][n]["curve"] and "example" in s["runs"][n]["curve"][-1]]
    return max(found, key=lambda e: e["prm_score"]) if found else None


def _pct(m, s) -> str:
    return "-" if m is None else f"{100 * m:.1f} ± {100 * s:.1f}"


def statement(result: dict) -> str:
    """What the runs show, from the figures only (last evaluation against step 0)."""
    seeds = len(result["seeds"])
    lines = [f"{seeds} seed{'s' if seeds > 1 else ''}, {result['config']['steps']} GRPO steps "
             f"per run, {result['config']['prompts_per_step']} prompts x "
             f"{result['config']['generations']} completions per step.", regime_line(result)]
    for name, c in result["curves"].items():
        d = {m: (c[m]["mean"][-1] or 0) - (c[m]["mean"][0] or 0) for m in
             ("sampled_accuracy", "right_process", "right_answer_wrong_step", "prm_score",
              "orm_score")}
        line = (f"{result['rewards'][name]}: sampled accuracy {100 * d['sampled_accuracy']:+.1f}"
                f" points, right process {100 * d['right_process']:+.1f}, right answer through"
                f" a wrong step {100 * d['right_answer_wrong_step']:+.1f}, PRM score "
                f"{100 * d['prm_score']:+.1f}")
        model = "prm_score" if name.startswith("prm") else "orm_score" if name == "orm" else None
        if model and d[model] > 0.02 and d["right_process"] <= 0 and d["sampled_accuracy"] <= 0:
            line += (f" (the {model[:3].upper()}'s score rose while neither accuracy nor "
                     "process did: hacking)")
        lines.append(line + ".")
    if not result["matched_compute"]:
        lines.append("WARNING: the rewards did not see the same prompts and compute.")
    return " ".join(line for line in lines if line)


def _limits(values: list[float], span: float, top: float | None) -> tuple[float, float]:
    """Axis limits around `values` spanning at least `span` (flat curves stay readable),
    within [0, top]."""
    values = [v for v in values if np.isfinite(v)] or [0.0]
    lo, hi = max(min(values), 0.0), max(values)
    hi = hi if top is None else min(hi, top)
    if hi - lo < span:
        mid = min(max((lo + hi) / 2, span / 2), (top if top is not None else np.inf) - span / 2)
        lo, hi = max(mid - span / 2, 0.0), mid + span / 2
    pad = 0.04 * (hi - lo)
    return lo - pad, hi + pad


def _delta(result: dict, name: str, metric: str) -> float | None:
    """Last evaluation minus step 0, mean over seeds; None when the reward was not run."""
    c = result["curves"].get(name)
    if c is None or c[metric]["mean"][-1] is None or c[metric]["mean"][0] is None:
        return None
    return c[metric]["mean"][-1] - c[metric]["mean"][0]


def _last(result: dict, name: str, metric: str) -> float | None:
    c = result["curves"].get(name)
    return None if c is None else c[metric]["mean"][-1]


def predictions(result: dict) -> list[list[str]]:
    """What the paper and its follow-ups predict, and whether the runs agree (computed)."""
    def pts(v):
        return "-" if v is None else f"{100 * v:+.1f}"

    def verdict(ok):
        return "not run" if ok is None else "yes" if ok else "no"

    def both(*vs):
        return None if any(v is None for v in vs) else True

    out = []
    ow = [_delta(result, n, "right_answer_wrong_step") for n in ("verifier", "orm")]
    pw = [_delta(result, n, "right_answer_wrong_step") for n in
          ("prm_process", "prm_min", "prm_min_verifier")]
    ok = both(*ow, *pw) and max(ow) > max(pw)
    out.append(["Let's Verify / Uesato et al.", "outcome rewards raise right answers through "
                "wrong steps more than process rewards", f"{verdict(ok)}: outcome "
                f"{', '.join(map(pts, ow))} against process {', '.join(map(pts, pw))} points"])
    a, b = _last(result, "prm_process", "sampled_accuracy"), _last(result, "orm",
                                                                    "sampled_accuracy")
    ok = both(a, b) and a > b
    out.append(["DeepSeekMath", "PRM process credit above the ORM (sampled accuracy)",
                f"{verdict(ok)}: {pts(a)[1:] if a is not None else '-'} against "
                f"{pts(b)[1:] if b is not None else '-'}%"])
    prm_rewards = ("prm_process", "prm_min", "prm_min_verifier")
    hacked = [n for n in prm_rewards
              if (_delta(result, n, "prm_score") or 0) > 0.02
              and (_delta(result, n, "sampled_accuracy") or 0) <= 0]
    ran = any(_delta(result, n, "prm_score") is not None for n in prm_rewards)
    out.append(["DeepSeek-R1", "a learned PRM gets hacked: its score rises, accuracy does not",
                f"{'yes: ' + ', '.join(hacked) if hacked else 'no' if ran else 'not run'} "
                "(PRM score change "
                f"{', '.join(pts(_delta(result, n, 'prm_score')) for n in ('prm_process', 'prm_min', 'prm_min_verifier'))} points)"])
    sp, sm = (_delta(result, n, "steps_per_solution") for n in ("prm_process", "prm_min"))
    ap, am = (_delta(result, n, "sampled_accuracy") for n in ("prm_process", "prm_min"))
    ok = both(sp, sm, ap, am) and ap < am and sp > sm
    out.append(["PURE", "summed credit collapses (more steps, accuracy down), min-form does not",
                f"{verdict(ok)}: steps per solution {'-' if sp is None else f'{sp:+.2f}'} "
                f"against {'-' if sm is None else f'{sm:+.2f}'}, accuracy {pts(ap)} against "
                f"{pts(am)} points"])
    return out


def plot(result: dict, path: Path) -> Path:
    from matplotlib.ticker import MaxNLocator, PercentFormatter

    metrics = (*SHARES, *COUNTS)
    cols = 5
    rows = math.ceil(len(metrics) / cols)
    fig, axes = new_figure(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False)
    for ax, metric in zip(axes.flat, metrics):
        score = metric.endswith("score") or metric.endswith("when_wrong")
        share = metric in SHARES and not score
        k = 100.0 if share else 1.0
        drawn: list[float] = []
        for i, (name, c) in enumerate(result["curves"].items()):
            x = np.array(c["steps"], dtype=float)
            y = k * np.array([np.nan if v is None else v for v in c[metric]["mean"]], dtype=float)
            s = k * np.array([0.0 if v is None else v for v in c[metric]["std"]], dtype=float)
            line, = ax.plot(x, y, marker="osD^vP*X"[i % 8], ms=4, label=result["rewards"][name])
            ax.fill_between(x, y - s, y + s, alpha=0.12, color=line.get_color())
            drawn += [*(y - s), *(y + s)]
        ax.set_ylim(*(_limits(drawn, 10.0, 100.0) if share else _limits(drawn, 0.1, 1.0)
                      if score else _limits(drawn, 1.0, None)))
        if share:
            ax.yaxis.set_major_formatter(PercentFormatter(xmax=100, decimals=0))
        if not share:
            ax.ticklabel_format(axis="y", useOffset=False)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(TITLES[metric], fontsize=9)
        ax.set_xlabel("GRPO steps")
        ax.set_ylabel("% of solutions" if share else "mean score" if score else "mean")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(metrics):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7, loc="best")
    fig.suptitle("RL in the demo world: held-out figures against GRPO steps "
                 "(mean ± std over seeds)")
    fig.tight_layout()
    return save_figure(fig, path)


def write_outputs(out: Path, cfg, per_seed: list[dict], seconds: float) -> dict:
    rewards = list(cfg.rewards)
    result = {"config": asdict(cfg), "seeds": [s["seed"] for s in per_seed],
              "rewards": {n: REWARDS[n][0] for n in rewards},
              "curves": curves(per_seed, rewards), "best_of_n": best_of_n_rows(per_seed, rewards),
              "accounting": {n: [s["runs"][n]["accounting"] for s in per_seed] for n in rewards},
              "matched_compute": matched(per_seed, rewards),
              "high_scoring_wrong": high_scoring_wrong(per_seed, rewards),
              "run_seconds": {n: [s["runs"][n]["seconds"] for s in per_seed] for n in rewards},
              "seconds": seconds,
              "regime": regime(per_seed, cfg),
              # what GRPO maximised, per logged step, per seed
              "train_reward": {n: [s["runs"][n]["train_reward"] for s in per_seed]
                               for n in rewards},
              "per_seed": [{"seed": s["seed"], "start": s["start"],
                            "curves": {n: s["runs"][n]["curve"] for n in rewards},
                            "train_signals": {n: s["runs"][n]["train_signals"]
                                              for n in rewards}}
                           for s in per_seed]}
    result["statement"] = statement(result)
    out.mkdir(parents=True, exist_ok=True)
    (out / "rl_world.json").write_text(json.dumps(result, indent=1) + "\n")
    png = plot(result, out / "rl_world.png")
    last = {n: {m: (c[m]["mean"][-1], c[m]["std"][-1]) for m in SHARES}
            for n, c in result["curves"].items()}
    tables = {
        "Last evaluation: % of held-out solutions (mean ± std over seeds)": {
            "columns": ["reward", *[TITLES[m] for m in SHARES]],
            "rows": [[result["rewards"][n], *[_pct(*last[n][m]) for m in SHARES]]
                     for n in rewards]},
        f"Best-of-{cfg.bon_n} with the PRM (%)": {
            "columns": ["policy", "PRM's pick right", "pick's process right",
                        "a sample right (mean)", f"pass@{cfg.bon_n}"],
            "rows": [[result["rewards"].get(n, n), *[_pct(*v[k]) for k in
                      ("accuracy", "right_process", "sample_accuracy", "pass")]]
                     for n, v in result["best_of_n"].items()]},
        "What the literature predicts, and these runs (last evaluation against step 0)": {
            "columns": ["source", "prediction", "here"], "rows": predictions(result)},
        "Compute per run (first seed)": {
            "columns": ["reward", "prompts", "completions", "optimizer steps",
                        "reward-model passes (training)", "seconds"],
            "rows": [[result["rewards"][n], a[0]["prompts_seen"], a[0]["completions_sampled"],
                      a[0]["optimizer_steps"], a[0]["reward_model_passes_training"],
                      f"{result['run_seconds'][n][0]:.0f}"]
                     for n, a in result["accounting"].items()]},
    }
    example = result["high_scoring_wrong"]
    summary = result["statement"]
    if example:
        summary += (f" The wrong solution the PRM scores highest ({example['prm_score']:.2f}, "
                    f"reward {example['reward']}, seed {example['seed']}; true answer "
                    f"{example['answer']}; checker labels {example['labels']}): "
                    f"{example['problem']!r} -> {example['solution']!r}.")
    write_report(out, {k: v for k, v in result.items() if k != "per_seed"},
                 {"Held-out figures against GRPO steps": png},
                 title="prmkit demo: RL with process rewards", summary=summary, tables=tables)
    print(f"[rl] {summary}")
    print(f"[rl] {out / 'rl_world.json'}, {png} ({seconds:.0f} s in all)")
    return result
