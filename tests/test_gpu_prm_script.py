"""benchmarks/gpu_prm.py: its quick path runs every stage on a CPU (a GPU lease has no
time for a first try), and the shipped GPU recipe is the configuration its recorded run
chose."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from prmkit.training import RewardTrainingConfig

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"


@pytest.mark.slow
def test_quick_path_runs_every_stage(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_prm.py"), "--out", str(out),
         "--work", str(tmp_path / "work"), "--data", str(DATA), "--quick",
         "--budget-s", "600", "--reserve-s", "0"],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    stages = json.loads((out / "gpu_prm.json").read_text())["stages"]
    assert not [name for name in stages if name.endswith("_error")], stages
    for name in ("probe_full", "full", "processbench_full", "mfu_1b_train", "probe_lora",
                 "lora", "reward_server"):
        assert name in stages, name
    assert stages["probe_full"]["chosen_lr"] in (1e-4, 1e-3)
    assert stages["full"]["steps"] > 0 and 0 <= stages["full"]["eval"]["eval_auroc"] <= 1
    assert stages["full"]["train_mfu"] > 0
    pb = stages["processbench_full"]
    assert pb["tokens"] > 0 and set(pb["model"]) >= {"gsm8k", "math", "average_f1"}
    server = stages["reward_server"]
    assert server["rc"] == 0 and server["result"]["model"]["kind"] == "trained PRM"


def test_gpu_recipe_is_the_recorded_choice():
    """The recipe holds the configuration of higher phase-1 test AUROC in the recorded run,
    at the learning rate its probes chose."""
    run = json.loads((ROOT / "benchmarks" / "results" / "gpu_prm.json").read_text())["stages"]
    recipe = RewardTrainingConfig.from_yaml(ROOT / "recipes" / "prm800k_phase1_smollm2_prm_gpu.yaml")
    lora_better = run["lora"]["eval"]["eval_auroc"] > run["full"]["eval"]["eval_auroc"]
    assert recipe.lora.enabled == lora_better
    kind = "lora" if lora_better else "full"
    assert recipe.lr == run[f"probe_{kind}"]["chosen_lr"]
    assert recipe.lora.top_k_layers is None
    assert recipe.epochs == run[kind]["epochs"]
