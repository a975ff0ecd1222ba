"""Scoring the demo's pools with and without shared prompts, side by side.

    python benchmarks/bench_demo_shared_scoring.py [--work demo-output/work] [--items 1500]

A seed's PRM (`seed_models` for the default demo settings: read from `--work` when `make
demo` trained it there, else trained there first, about 8 minutes) scores the first
`--items` distinct solutions of seed 0's test pools and of its out-of-distribution pools,
once with `Scorer(share_prefixes=False)` (each solution runs its problem's prompt) and once
with `share_prefixes=True` (a problem's prompt runs once, its solutions read its cached keys
and values), fp32, 1 thread. Reports both times, the ratio and the largest difference in
any step score. Writes benchmarks/results/demo_shared_scoring.json.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path

import torch
from scoring_common import cpu_model, max_diff, write_result

from prmkit.demo.core.config import DemoConfig
from prmkit.demo.core.scores import distinct_solutions
from prmkit.demo.core.seed import seed_models, seed_world
from prmkit.scoring import Scorer

HERE = Path(__file__).resolve().parent


def timed_scores(model_dir: Path, items: list, share: bool) -> tuple[float, list]:
    scorer = Scorer.from_pretrained(model_dir, dtype=None, token_budget=16384,
                                    share_prefixes=share)
    t0 = time.perf_counter()
    scores = scorer.score(items, progress=False)
    return time.perf_counter() - t0, scores


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", default="demo-output/work")
    ap.add_argument("--items", type=int, default=1500)
    args = ap.parse_args()
    torch.set_num_threads(1)
    cfg = replace(DemoConfig(), seeds=(0,), progress=False)
    sw = seed_world(0, cfg)
    prm = seed_models(0, cfg, Path(args.work), sw).prm_dir
    rows = {}
    for name, problems, pools in (("test", sw.splits.test, sw.test_pools),
                                  ("ood", sw.ood, sw.ood_pools)):
        items = distinct_solutions(problems, pools)[0][: args.items]
        plain_s, plain = timed_scores(prm, items, share=False)
        shared_s, shared = timed_scores(prm, items, share=True)
        diff = max_diff(plain, shared)
        rows[name] = {"solutions": len(items), "plain_s": plain_s, "shared_s": shared_s,
                      "speedup": plain_s / shared_s, "max_score_difference": diff}
        print(f"{name}: {len(items)} solutions, plain {plain_s:.1f} s, shared {shared_s:.1f} s "
              f"({plain_s / shared_s:.2f}x), largest score difference {diff:.1g}", flush=True)
    write_result(HERE / "results" / "demo_shared_scoring.json",
                 {"model": str(prm), "threads": 1, "dtype": "fp32", "cpu": cpu_model(),
                  "sets": rows})


if __name__ == "__main__":
    main()
