"""prmkit's Hugging Face sampler with its batched per-row draw against a row-by-row
`torch.multinomial`, side by side: the same completions, the time of each.

    python benchmarks/bench_hf_sampling.py [--problems 120] [--n 8] [--rounds 3]

The model is the demo's shipped MathMix base (a 1.2M-parameter Llama, fp32, one torch
thread), the prompts the first test problems of the demo world's seed 0, `--n` samples
each at temperature 1 and up to 64 new tokens, 128 rows per `generate` call: the RL
experiment's sampling. Rounds alternate the two draws; every round checks that both give
the same completions. Writes benchmarks/results/hf_sampling.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from scoring_common import cpu_model

from prmkit.demo.core.config import DemoConfig
from prmkit.demo.core.seed import seed_world
from prmkit.demo.lm.base import SHIPPED_BASE
from prmkit.demo.lm.policy import policy_sampler, sample
from prmkit.generation import hf_backend

RESULTS = Path(__file__).resolve().parent / "results"


def row_by_row(self, probs, rows):
    """The draw before: one `torch.multinomial` per row and step."""
    return torch.stack([torch.multinomial(p, 1, generator=self.generators[r])[0]
                        for p, r in zip(probs, rows, strict=True)])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--problems", type=int, default=120)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    problems = list(seed_world(0, DemoConfig(seeds=(0,))).splits.test[: args.problems])
    sampler = policy_sampler(SHIPPED_BASE)
    batched = hf_backend.RowSampler.pick
    seconds: dict[str, list[float]] = {"row_by_row": [], "batched": []}
    outputs = {}
    try:
        for _ in range(args.rounds):
            for name, pick in (("row_by_row", row_by_row), ("batched", batched)):
                hf_backend.RowSampler.pick = pick
                t0 = time.perf_counter()
                outputs[name] = sample(sampler, problems, args.n, 1.0, 64, seed=1)
                seconds[name].append(round(time.perf_counter() - t0, 3))
            if outputs["row_by_row"] != outputs["batched"]:
                raise SystemExit("the two draws gave different completions")
    finally:
        hf_backend.RowSampler.pick = batched
    median = {k: statistics.median(v) for k, v in seconds.items()}
    tokens = sum(n for pool in outputs["batched"] for _, n in pool)
    result = {
        "command": "python benchmarks/bench_hf_sampling.py",
        "machine": f"{cpu_model()}, {torch.get_num_threads()} torch thread",
        "settings": {"problems": args.problems, "n": args.n, "temperature": 1.0,
                     "max_tokens": 64, "rows_per_generate": sampler.batch_size,
                     "model": "demo shipped base (fp32)"},
        "samples": args.problems * args.n, "generated_tokens": tokens,
        "same_completions": True, "seconds": seconds, "median_seconds": median,
        "ratio": round(median["row_by_row"] / median["batched"], 3),
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "hf_sampling.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
