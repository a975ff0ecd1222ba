"""Two CPU processes (torchrun, gloo) end where one process with the same optimizer
batches ends: the loss is normalised over all processes' labels."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "tiny_ci.yaml"
COMMON = ["max_steps=3", "eval_every=0", "data.eval_fraction=0",
          "progress=false", "lr=0.005", "num_threads=1"]


def _run(cmd: list[str]) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.slow
def test_two_cpu_processes_match_one_process_with_accumulation(tmp_path):
    launcher = Path(sys.executable).with_name("torchrun")
    one, two = tmp_path / "one", tmp_path / "two"
    # 1 process x 2 accumulated micro-batches == 2 processes x 1 micro-batch
    _run([sys.executable, "-m", "prmkit.cli.train", "--config", str(RECIPE), *COMMON,
          "grad_accum=2", "batch_tokens=256", f"output_dir={one}", "save_every=0"])
    _run([str(launcher), "--nproc_per_node", "2", "-m", "prmkit.cli.train",
          "--config", str(RECIPE), *COMMON,
          "grad_accum=1", "batch_tokens=256", f"output_dir={two}", "save_every=2"])
    a = load_file(str(one / "model" / "model.safetensors"))
    b = load_file(str(two / "model" / "model.safetensors"))
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-5
    logs = [(one / "metrics.jsonl").read_text(), (two / "metrics.jsonl").read_text()]
    losses = [[json.loads(x)["loss"] for x in t.splitlines()] for t in logs]
    assert losses[0] == pytest.approx(losses[1], abs=1e-4)  # logged once, whole-batch loss
    # each process saved its own RNG state in the checkpoint
    (step2,) = (two / "checkpoints").glob("step-*")
    states = [torch.load(step2 / f"rng_state_rank{r}.pt", weights_only=False) for r in (0, 1)]
    assert set(states[0]) >= {"python", "numpy", "torch"} and set(states[1]) == set(states[0])
