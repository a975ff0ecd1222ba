"""docs/rl.md's small GRPO run on a CPU, run as written in a fresh process (which also shows
what a run without a DeepSpeed config imports: training, GRPO and the demo's SFT step)."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "rl.md"

# Runs the page's block, then the demo policy's SFT step, and reports what was imported.
MARK = "-- a DeepSpeed run from here --"
RUNNER = f"MARK = {MARK!r}\n" + """
import json, sys
scope = {"__name__": "__main__"}
exec(compile(open(sys.argv[1]).read(), "docs/rl.md", "exec"), scope)
trainer = scope["trainer"]
report = {"steps": trainer.state.global_step, "logs": trainer.state.log_history,
          "deepspeed_after_grpo": "deepspeed" in sys.modules}
from prmkit.demo.lm.base import SHIPPED_BASE
from prmkit.demo.lm.policy import PolicySettings, train_policy
rows = [{"prompt": "Solve 2x = 8.\\n", "completion": "8 / 2 = 4\\nAnswer: 4"}] * 4
train_policy(SHIPPED_BASE, rows, "sft", PolicySettings(steps=1, batch_size=2), seed=0)
report["deepspeed_after_sft"] = "deepspeed" in sys.modules
print(MARK, flush=True)
import deepspeed  # as a run with a DeepSpeed config does: accelerate asks about it again
from accelerate.utils import other
report["engines_recognised_once_imported"] = other.is_deepspeed_available()
json.dump(report, open("report.json", "w"), default=str)
"""


def cpu_example() -> str:
    section = PAGE.read_text().split("### A small run on a CPU", 1)[1]
    return re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)


@pytest.fixture(scope="module")
def example_run(tmp_path_factory):
    work = tmp_path_factory.mktemp("grpo-cpu")
    (work / "example.py").write_text(cpu_example())
    (work / "runner.py").write_text(RUNNER)
    proc = subprocess.run([sys.executable, "runner.py", "example.py"], cwd=work, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=1200,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"})
    assert proc.returncode == 0, proc.stdout[-4000:]
    return json.loads((work / "report.json").read_text()), proc.stdout


def test_the_cpu_grpo_example_in_the_docs_runs_as_written(example_run):
    report, output = example_run
    assert report["steps"] == 4
    steps = [e for e in report["logs"] if "rewards/prm/mean" in e]
    assert len(steps) == 4
    assert all(0.0 < float(e["rewards/prm/mean"]) < 1.0 for e in steps)
    assert all(math.isfinite(float(e["prm/steps_per_completion"])) for e in steps)
    assert "doesn't support bf16" not in output


def test_a_run_without_a_deepspeed_config_never_imports_deepspeed(example_run):
    report, output = example_run
    assert report["deepspeed_after_grpo"] is False  # prmkit train, then GRPO
    assert report["deepspeed_after_sft"] is False  # the demo policy's fine-tuning
    before, after = output.split(MARK)
    assert "Setting accelerator to CPU" not in before
    assert report["engines_recognised_once_imported"] is True
