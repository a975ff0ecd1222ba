"""A MathMix base as its own checker: does it know when a written step is wrong?

    python benchmarks/bench_demo_base_check.py [--base mathmix] [--seed 0] [--seeds 3,4,5]

Scores every step of held-out samples by the base's own probability of what the step writes
(`prmkit.demo.lm.skill.written_probs`, no reward training), then reports per kind of first
error the step AUROC (right steps against first wrong steps of that kind) and the share of
best-of-64 picks (weakest step, `min`), as the demo reports them for its PRM and ORM. Two
checks: `step` (the whole line: operands, operation and result: the regime indicator, at
least 0.95 for every kind) and `result` (the result alone: arithmetic only), pooled and per
problem form (word, equation, two-sided: `step_auroc_by_form`), and per form within each
difficulty level (`by_level`). Two sets: the
demo's test problems of one seed (in distribution, 120 problems x 64 samples) and its
out-of-distribution problems (`prmkit.demo.world.ood_problems`, 120 x 64), as the demo
samples them. `--seeds` pools the test problems of several seeds instead (every seed's
first 6,000 problems are held out from MathMix; seeds past 2 are in no demo figure), for
forms a single seed holds few of (two-sided equations: about 8 of 120); then no
out-of-distribution set.
Writes benchmarks/results/demo_base_check.json.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from prmkit.demo.core.config import DemoConfig
from prmkit.demo.core.seed import seed_world
from prmkit.demo.lm.base import resolve_base
from prmkit.demo.lm.skill import CHECKS, written_probs
from prmkit.demo.world import OOD_RULE, check_solution
from prmkit.demo.world.error_kinds import kind_report
from prmkit.models.backbones import load_backbone
from prmkit.scoring.aggregate import aggregate

HERE = Path(__file__).resolve().parent


def check_report(model, tokenizer, problems, pools, check: str) -> dict:
    """Per kind step AUROC and best-of-N picks of the base's `check` on these pools."""
    scores = written_probs(model, tokenizer, problems, pools, check=check)
    picks, solved = [], 0
    for prob, pool, sc in zip(problems, pools, scores):
        answered = [i for i, s in enumerate(pool) if check_solution(prob, s).answer is not None]
        k = answered[int(np.argmax([aggregate(sc[i], "min") for i in answered]))]
        picks.append(k)
        solved += check_solution(prob, pool[k]).final_correct
    return {"best_of_n_first_max": solved / len(problems),
            **kind_report(problems, pools, scores, picks),
            "by_level": by_level(problems, pools, scores, picks)}


def by_level(problems, pools, scores, picks) -> dict:
    """Per difficulty level of the problems: each form's step AUROC per kind and its count of
    first wrong steps (a base reads few problems of the lowest level: the seeds hold them)."""
    out = {}
    for level in sorted({p.level for p in problems}):
        idx = [i for i, p in enumerate(problems) if p.level == level]
        report = kind_report(*([seq[i] for i in idx] for seq in (problems, pools, scores, picks)))
        out[str(level)] = {key: report[key] for key in ("step_auroc_by_form",
                                                         "wrong_steps_by_form")}
    return out


def pooled_test_sets(seeds: list[int], samples: int) -> tuple[list, list]:
    """The test problems of `seeds` and `samples` sampled solutions of each, as the demo
    samples them (no out-of-distribution set)."""
    cfg = replace(DemoConfig(), samples_per_test_problem=samples, ood_problems=0)
    worlds = [seed_world(s, cfg) for s in seeds]
    return ([p for w in worlds for p in w.splits.test],
            [pool for w in worlds for pool in w.test_pools])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", default="mathmix")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seeds", default=None, help="comma-separated: pool these seeds' test sets")
    ap.add_argument("--samples", type=int, default=64, help="per problem (default: 64)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=str(HERE / "results" / "demo_base_check.json"))
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    folder = resolve_base(args.base, progress=False)
    model, tokenizer = load_backbone(str(folder))
    cfg = replace(DemoConfig(), samples_per_test_problem=args.samples,
                  samples_per_ood_problem=args.samples)
    if args.seeds:
        seeds = [int(x) for x in args.seeds.split(",")]
        sets = {"in_distribution": pooled_test_sets(seeds, args.samples)}
    else:
        seeds = [args.seed]
        sw = seed_world(args.seed, cfg)
        sets = {"in_distribution": (sw.splits.test, sw.test_pools),
                "out_of_distribution": (sw.ood, sw.ood_pools)}
    row: dict = {"base": args.base, "folder": str(folder), "seed": seeds[0], "seeds": seeds,
                 "samples": args.samples, "ood_rule": OOD_RULE if "out_of_distribution" in sets
                 else None}
    for name, (problems, pools) in sets.items():
        row[name] = {check: check_report(model, tokenizer, problems, pools, check)
                     for check in CHECKS}
    row["seconds"] = time.perf_counter() - t0
    Path(args.out).write_text(json.dumps(row, indent=1))
    for name in sets:
        for check in CHECKS:
            aurocs = row[name][check]["step_auroc"]
            print(f"{name:20s} {check:6s} " + "  ".join(
                f"{k} {'-' if v is None else f'{v:.3f}'}" for k, v in aurocs.items()))
            for form, by_form in row[name][check]["step_auroc_by_form"].items():
                print(f"{'':20s} {'':6s} {form}: " + "  ".join(
                    f"{k} {'-' if v is None else f'{v:.3f}'}" for k, v in by_form.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
