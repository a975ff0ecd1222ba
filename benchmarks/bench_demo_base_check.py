"""A MathMix base as its own checker: does it know when a written step result is wrong?

    python benchmarks/bench_demo_base_check.py --base "mathmix steps=2000" [--seed 0]

Scores every step of the demo's test pools of one seed (120 problems x 64 samples) by the
base's probability of the result as written (`prmkit.demo.lm.skill.written_result_probs`, no
reward training), then reports per kind of first error the step AUROC and the share of
best-of-64 picks (weakest step, `min`), as the demo reports them for its PRM and ORM.
Writes benchmarks/results/demo_base_check.json.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from prmkit.demo.core.config import DemoConfig
from prmkit.demo.core.seed import seed_world
from prmkit.demo.lm.base import resolve_base
from prmkit.demo.lm.skill import written_result_probs
from prmkit.demo.world import check_solution
from prmkit.demo.world.error_kinds import kind_report
from prmkit.models.backbones import load_backbone
from prmkit.scoring.aggregate import aggregate

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", default="mathmix steps=2000")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=str(HERE / "results" / "demo_base_check.json"))
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    folder = resolve_base(args.base, progress=False)
    model, tokenizer = load_backbone(str(folder))
    sw = seed_world(args.seed, DemoConfig())
    problems, pools = sw.splits.test, sw.test_pools
    scores = written_result_probs(model, tokenizer, problems, pools)
    picks, solved = [], 0
    for prob, pool, sc in zip(problems, pools, scores):
        answered = [i for i, s in enumerate(pool) if check_solution(prob, s).answer is not None]
        k = answered[int(np.argmax([aggregate(sc[i], "min") for i in answered]))]
        picks.append(k)
        solved += check_solution(prob, pool[k]).final_correct
    report = kind_report(problems, pools, scores, picks)
    row = {"base": args.base, "folder": str(folder), "seed": args.seed,
           "best_of_64_first_max": solved / len(problems), **report,
           "seconds": time.perf_counter() - t0}
    Path(args.out).write_text(json.dumps(row, indent=1))
    print(json.dumps({k: v for k, v in row.items() if k != "pool"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
