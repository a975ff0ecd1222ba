"""Distributed engines against one process: DDP, DeepSpeed ZeRO-2, ZeRO-3 and FSDP2, each
on 2 CPU processes (gloo, DeepSpeed's CPU accelerator) with 2 accumulated micro-batches,
against one process accumulating 4, on recipes/tiny_ci.yaml's tiny model.

    .venv/bin/python benchmarks/bench_distributed_equivalence.py [--steps 5]

Writes benchmarks/results/distributed_equivalence.json: each engine's max absolute
weight difference to the single-process run, the tolerance the tests hold them to, the
optimizer steps, and per engine the largest difference of the logged losses and seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from safetensors.torch import load_file

from prmkit.data.io import atomic_write

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "distributed_equivalence.json"
RECIPE = ROOT / "recipes" / "tiny_ci.yaml"
ENGINES = ("ddp", "zero2", "zero3", "fsdp")
TOLERANCE = 1e-5  # tests/test_training_engines.py
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
       "OMP_NUM_THREADS": "1", "DS_ACCELERATOR": "cpu"}


def run(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{proc.stderr[-4000:]}")
    return round(time.perf_counter() - t0, 1)


def weights(out: Path) -> dict:
    return load_file(str(out / "model" / "model.safetensors"))


def losses(out: Path) -> list[float]:
    lines = (out / "metrics.jsonl").read_text().splitlines()
    return [r["loss"] for r in map(json.loads, lines) if r["type"] == "train"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    common = ["--config", str(RECIPE), f"max_steps={args.steps}", "eval_every=0",
              "data.eval_fraction=0", "progress=false", "lr=0.005", "num_threads=1",
              "batch_tokens=256", "log_every=1"]
    accelerate = str(Path(sys.executable).with_name("accelerate"))
    result: dict = {}
    detail: dict = {"loss_max_abs_diff": {}, "seconds": {}}
    with tempfile.TemporaryDirectory() as tmp:
        single = Path(tmp) / "single"
        detail["seconds"]["single"] = run([sys.executable, "-m", "prmkit.cli.train", *common,
                                           "grad_accum=4", f"output_dir={single}"])
        ref_w, ref_l = weights(single), losses(single)
        for i, engine in enumerate(ENGINES):
            out = Path(tmp) / engine
            detail["seconds"][engine] = run([
                accelerate, "launch", "--config_file",
                str(ROOT / "recipes" / "accelerate" / f"{engine}.yaml"), "--num_processes", "2",
                "--main_process_port", str(29651 + i), "-m", "prmkit.cli.train", *common,
                "grad_accum=2", f"output_dir={out}"])
            w = weights(out)
            assert set(w) == set(ref_w), f"{engine}: saved weights differ in keys"
            result[engine] = max((w[k] - ref_w[k]).abs().max().item() for k in w)
            detail["loss_max_abs_diff"][engine] = max(
                abs(a - b) for a, b in zip(losses(out), ref_l, strict=True))
    result.update({"tolerance": TOLERANCE, "steps": args.steps, "processes": 2,
                   "grad_accum": {"engines": 2, "single": 4}, **detail,
                   "command": "python benchmarks/bench_distributed_equivalence.py "
                              f"--steps {args.steps}"})
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(args.out, "w") as f:
        f.write(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
