"""benchmarks/sweep_reading_stages.py: each variant built in a process of its own from its
first stage, checked per kind and form, and gathered with its lowest cell; and
benchmarks/bench_demo_base.py on a two-stage base (the shipped kind)."""

import json
import subprocess
import sys
from pathlib import Path

from test_demo_base import TWO_STAGES

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "sweep_reading_stages.py"


def test_sweep_builds_and_checks_each_variant(tmp_path):
    out = tmp_path / "sweep"
    env_sets = ";".join(TWO_STAGES)
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out), "--parallel", "2", "--seeds", "3",
         "--samples", "2", f"--variant=plain={env_sets}",
         f"--variant=level3={env_sets};reading.extra_equations=8;reading.extra_difficulty=3"],
        capture_output=True, text=True, timeout=600,
        env={**__import__("os").environ, "PRMKIT_CACHE": str(tmp_path / "cache")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    sweep = json.loads((out / "sweep.json").read_text())
    assert sweep["failed"] == [] and [r["name"] for r in sweep["variants"]] == ["plain", "level3"]
    plain, level3 = sweep["variants"]
    assert level3["build_info"]["config"]["reading"]["extra_difficulty"] == "3"
    assert level3["build_info"]["documents"] > plain["build_info"]["documents"]
    assert plain["build_info"]["first_stage"] == level3["build_info"]["first_stage"]
    for row in sweep["variants"]:
        cells = [v for form in row["step_auroc_by_form"].values() for v in form.values()
                 if v is not None]
        assert cells and row["lowest_cell"] == min(cells) and row["bf16"] is False
        assert (out / row["name"] / "base" / "model.safetensors").is_file()
        assert set(row["by_level"]) <= {"1", "2"} and row["by_level"]
    assert "lowest" in proc.stdout and "[2/2]" in proc.stdout


def test_sweep_refuses_a_variant_without_a_name(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path), "--variant",
                           "reading.steps=3"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "expected NAME=SET;SET" in proc.stderr


def test_bench_demo_base_measures_a_two_stage_base(tmp_path):
    """Regression: a reading stage's base.json names no fact count (its first stage's)."""
    out = tmp_path / "skill.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_demo_base.py"), "--config",
         " ".join(TWO_STAGES), "--out", str(out)], capture_output=True, text=True, timeout=600,
        env={**__import__("os").environ, "PRMKIT_CACHE": str(tmp_path / "cache")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    (row,) = json.loads(out.read_text())["rows"]
    assert row["config"]["reading"]["steps"] == 2 and row["distinct_facts"] > 0
    assert 0 <= row["skill"]["all"]["exact"] <= 1
