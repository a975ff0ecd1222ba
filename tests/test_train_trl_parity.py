"""prmkit's trainer, given TRL PRMTrainer's work (format, initial weights, label weights,
batch order), reproduces TRL's per-step losses: the claim of
benchmarks/bench_train_vs_trl.py, kept on a tiny random model."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import trl_parity  # noqa: E402

ROWS = [
    {"prompt": "What is 2 + 3?", "completions": ["2 + 3 = 5.", "The answer is 5."],
     "labels": [True, True]},
    {"prompt": "What is 2 + 3?", "completions": ["2 + 3 = 6.", "The answer is 6."],
     "labels": [False, False]},
    {"prompt": "Compute 4 * 5.", "completions": ["4 * 5 = 20."], "labels": [True]},
    {"prompt": "Compute 4 * 5.", "completions": ["4 * 5 = 9.", "So 9.", "The answer is 9."],
     "labels": [False, False, False]},
    {"prompt": "Solve x + 1 = 3.", "completions": ["x = 3 - 1 = 2.", "The answer is 2."],
     "labels": [True, True]},
    {"prompt": "Solve x + 1 = 3.", "completions": ["x = 3 + 1 = 4.", "The answer is 4."],
     "labels": [False, True]},
]


def test_prmkit_reproduces_trl_prm_trainer_losses_step_for_step(tiny_lm, tmp_path):
    if not (trl_parity.TRL_PATH / "trl" / "experimental" / "prm").is_dir():
        pytest.fail(f"TRL {trl_parity.TRL_VERSION} is missing from {trl_parity.TRL_PATH}: "
                    "`make test` installs it (python benchmarks/trl_parity.py install)")
    # a large learning rate, so that each step's loss depends on the steps before it
    s = trl_parity.Settings(backbone=str(tiny_lm), batch_size=2, max_length=128, lr=0.05,
                            r=4, alpha=8, targets=["q_proj", "v_proj", "up_proj"], threads=1)
    result = trl_parity.parity(ROWS, s, tmp_path)
    losses = result["losses"]
    assert len(losses) == 3 and result["trl"]["steps"] == result["prmkit"]["steps"] == 3
    assert result["trl"]["tokens"] == result["prmkit"]["tokens"]
    assert result["trl"]["labels"] == result["prmkit"]["labels"] == 12
    assert result["equal"] and result["max_loss_difference"] <= trl_parity.TOLERANCE, losses
    assert len({round(x["trl"], 3) for x in losses}) == 3  # the steps differ: real training
