"""Reward-model training on packed rows: attention one unit at a time against the dense
tree mask, side by side in one run.

    python benchmarks/bench_unit_attention.py [--steps 60] [--repeats 2] [--kind prm]

Trains the demo's PRM (or ORM) from the shipped MathMix base on seed 0's training samples,
as `make demo` does (its settings, one torch thread, 512-token packed rows of 4,096-token
batches), for `--steps` optimizer steps, alternating the two attention paths `--repeats`
times: `blocks` (`prmkit.models.unit_attention`, the default) and `dense` (the [B, 1, L, L]
tree mask every score of a row is computed under). Reports training tokens per second
(prmkit's own log, without the final evaluation) per run, the ratio of the medians, and
both runs' held-out loss and AUROC after training (the same model either way). Writes
benchmarks/results/unit_attention_{prm,orm}.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from prmkit.demo import world
from prmkit.demo.core.config import DemoConfig, torch_settings
from prmkit.demo.core.seed import seed_world, train_reward_model
from prmkit.demo.lm.base import resolve_base
from prmkit.models import unit_attention

RESULTS = Path(__file__).resolve().parent / "results"


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _run(mode: str, kind: str, cfg: DemoConfig, examples, base: Path, out: Path) -> dict:
    applies = unit_attention.applies
    if mode == "dense":
        unit_attention.applies = lambda *a: False
    try:
        t0 = time.perf_counter()
        with torch_settings(1):
            train_reward_model(kind, base, examples, out, cfg, 0)
        seconds = time.perf_counter() - t0
    finally:
        unit_attention.applies = applies
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    train = [x for x in lines if x.get("type") == "train"][-1]
    final = [x for x in lines if x.get("type") == "eval"][-1]
    return {"mode": mode, "tokens_per_s": train["tokens_per_s"], "train_s": train["elapsed_s"],
            "seconds_with_eval": round(seconds, 1), "eval_loss": final["eval_loss"],
            "eval_auroc": final.get("eval_auroc")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--kind", choices=("prm", "orm"), default="prm")
    args = ap.parse_args()
    cfg = replace(DemoConfig(), reward_steps=args.steps, progress=False)
    sw = seed_world(0, cfg)
    examples = world.to_step_examples(sw.splits.train, sw.train_pools, kind=args.kind,
                                      dedupe=True)
    base = resolve_base(cfg.base, progress=False)
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            for mode in ("dense", "blocks"):
                out = Path(tmp) / f"{mode}{r}"
                runs.append(_run(mode, args.kind, cfg, examples, base, out))
                shutil.rmtree(out, ignore_errors=True)
                print(json.dumps(runs[-1]), flush=True)
    speed = {m: statistics.median(x["tokens_per_s"] for x in runs if x["mode"] == m)
             for m in ("dense", "blocks")}
    result = {
        "command": f"python benchmarks/bench_unit_attention.py --steps {args.steps} "
                   f"--repeats {args.repeats} --kind {args.kind}",
        "machine": f"{_cpu()}, {os.cpu_count()} cores, one torch thread, fp32",
        "kind": args.kind, "examples": len(examples), "steps": args.steps, "runs": runs,
        "median_tokens_per_s": speed,
        "speedup_blocks_over_dense": round(speed["blocks"] / speed["dense"], 3),
        "max_eval_loss_difference": max(x["eval_loss"] for x in runs)
        - min(x["eval_loss"] for x in runs),
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"unit_attention_{args.kind}.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
