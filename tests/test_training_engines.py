"""DeepSpeed ZeRO-2/3 and FSDP2 (accelerate launch, 2 CPU processes on gloo) end where
one process with the same global batch ends, resume exactly, and save full weights that
score like the single-process model; what the engines cannot honour is refused."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file

from prmkit.errors import PrmkitError
from prmkit.training import distributed as dist
from prmkit.training.reward_config import RewardTrainingConfig

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "tiny_ci.yaml"
COMMON = ["max_steps=3", "eval_every=0", "data.eval_fraction=0.2", "progress=false",
          "lr=0.005", "num_threads=1", "batch_tokens=256"]
TOLERANCE = 1e-5  # max absolute weight difference to the single-process run (fp32)
ITEMS = [("Problem 0: add 14 and 15.", ["First we look at 14 and 15, a good start.",
                                        "So the sum is 30, this is bad."])]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
       "OMP_NUM_THREADS": "1", "DS_ACCELERATOR": "cpu"}


def _run(cmd: list[str]) -> None:
    proc = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]


def _train_single(out: Path, *overrides: str) -> None:
    _run([sys.executable, "-m", "prmkit.cli.train", "--config", str(RECIPE), *COMMON,
          f"output_dir={out}", *overrides])


def _launch(engine: str, out: Path, port: int, *overrides: str) -> None:
    launcher = Path(sys.executable).with_name("accelerate")
    _run([str(launcher), "launch", "--config_file", str(ROOT / "recipes" / "accelerate" /
          f"{engine}.yaml"), "--num_processes", "2", "--main_process_port", str(port),
          "-m", "prmkit.cli.train", "--config", str(RECIPE), *COMMON, f"output_dir={out}",
          *overrides])


def _max_diff(a: Path, b: Path) -> float:
    wa, wb = load_file(str(a / "model" / "model.safetensors")), load_file(
        str(b / "model" / "model.safetensors"))
    assert set(wa) == set(wb) and all(wa[k].shape == wb[k].shape for k in wa)  # full weights
    return max((wa[k] - wb[k]).abs().max().item() for k in wa)


def _records(out: Path, kind: str) -> list[dict]:
    lines = (out / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["type"] == kind]


def _scores(out: Path) -> list[float]:
    from prmkit.scoring.scorer import Scorer

    return Scorer.from_pretrained(out / "model", dtype="fp32", device="cpu").score(ITEMS)[0]


@pytest.fixture(scope="module")
def single(tmp_path_factory) -> Path:
    """One process, 4 accumulated micro-batches per optimizer step."""
    out = tmp_path_factory.mktemp("single") / "run"
    _train_single(out, "grad_accum=4")
    return out


@pytest.mark.slow
@pytest.mark.parametrize("engine,port", [("zero2", 29631), ("zero3", 29632), ("fsdp", 29633)])
def test_engine_two_processes_accumulating_match_one_process_resume_and_score(
        engine, port, single, tmp_path):
    # 2 processes x 2 accumulated micro-batches == 1 process x 4: the engine steps once
    # per optimizer step, however many micro-batches it accumulates
    two = tmp_path / "two"
    _launch(engine, two, port, "grad_accum=2", "save_every=2")
    assert _max_diff(single, two) < TOLERANCE
    losses = [[r["loss"] for r in _records(out, "train")] for out in (single, two)]
    assert losses[0] == pytest.approx(losses[1], abs=1e-4)
    # evaluation ran through the wrapped (sharded) model on every process
    evals = [_records(out, "eval")[-1] for out in (single, two)]
    assert evals[1]["eval_loss"] == pytest.approx(evals[0]["eval_loss"], abs=1e-4)
    assert evals[1]["eval_labels"] == evals[0]["eval_labels"]
    # the checkpoint holds the engine's own sharded state; resuming replays step 3
    (step2,) = (two / "checkpoints").glob("step-*")
    assert (step2 / dist.ENGINE_DIR).is_dir()
    resumed = tmp_path / "resumed"
    shutil.copytree(two, resumed, ignore=shutil.ignore_patterns("model"))
    _launch(engine, resumed, port, "grad_accum=2", "save_every=2", "resume=true")
    assert _max_diff(two, resumed) < 1e-6
    # the saved full weights score like the single-process model
    assert _scores(two) == pytest.approx(_scores(single), abs=1e-4)


def _untied_backbone(folder: Path) -> Path:
    from prmkit.models.backbones import tiny_random

    model, tokenizer = tiny_random()
    model.config.tie_word_embeddings = False
    model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone())
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_head_formulation_on_untied_backbone_freezes_the_unused_lm_head(tmp_path):
    from prmkit.models.config import RewardModelConfig
    from prmkit.models.reward_model import StepRewardModel

    head = RewardModelConfig(formulation="head")
    untied = StepRewardModel.from_backbone(str(_untied_backbone(tmp_path / "b")), config=head)
    assert dist.freeze_unused_parameters(untied) == ["backbone.lm_head.weight"]
    assert not untied.backbone.lm_head.weight.requires_grad
    assert untied.backbone.get_input_embeddings().weight.requires_grad
    tied = StepRewardModel.from_backbone("tiny-random", config=head)  # lm_head is the embedding
    assert dist.freeze_unused_parameters(tied) == []
    token = StepRewardModel.from_backbone(str(tmp_path / "b"))  # token formulation reads it
    assert dist.freeze_unused_parameters(token) == []


@pytest.mark.slow
def test_ddp_full_fine_tuning_of_head_formulation_on_untied_backbone(tmp_path):
    backbone = _untied_backbone(tmp_path / "untied")
    opts = [f"backbone={backbone}", "lora.enabled=false", "model.formulation=head",
            "data.eval_fraction=0", "max_steps=2"]
    _train_single(tmp_path / "one", "grad_accum=2", *opts)
    launcher = Path(sys.executable).with_name("torchrun")
    _run([str(launcher), "--nproc_per_node", "2", "--master_port", "29634", "-m",
          "prmkit.cli.train", "--config", str(RECIPE), *COMMON, *opts, "grad_accum=1",
          f"output_dir={tmp_path / 'two'}"])
    assert _max_diff(tmp_path / "one", tmp_path / "two") < TOLERANCE


# ---- refused at start ------------------------------------------------------------------
def _deepspeed_acc(stage: int = 2, **ds) -> SimpleNamespace:
    plugin = SimpleNamespace(zero_stage=stage, deepspeed_config=ds)
    return SimpleNamespace(distributed_type=SimpleNamespace(value="DEEPSPEED"), num_processes=2,
                           state=SimpleNamespace(deepspeed_plugin=plugin))


def _cfg(*overrides: str) -> RewardTrainingConfig:
    return RewardTrainingConfig.from_yaml(RECIPE, list(overrides))


def test_deepspeed_config_with_bf16_is_refused():
    with pytest.raises(PrmkitError, match="enables bf16"):
        dist.check_engine(_deepspeed_acc(bf16={"enabled": True}), _cfg())


def test_deepspeed_gradient_accumulation_other_than_grad_accum_is_refused():
    with pytest.raises(PrmkitError, match="gradient_accumulation_steps=4 but the recipe"):
        dist.check_engine(_deepspeed_acc(gradient_accumulation_steps=4), _cfg("grad_accum=2"))
    assert dist.check_engine(_deepspeed_acc(gradient_accumulation_steps="auto"), _cfg()) == "zero2"


def test_zero_stage_1_is_refused():
    with pytest.raises(PrmkitError, match="ZeRO stage 1 is not supported"):
        dist.check_engine(_deepspeed_acc(stage=1), _cfg())


def test_fsdp_version_1_is_refused():
    acc = SimpleNamespace(distributed_type=SimpleNamespace(value="FSDP"), num_processes=2,
                          state=SimpleNamespace(fsdp_plugin=SimpleNamespace(fsdp_version=1)))
    with pytest.raises(PrmkitError, match="FSDP version 1 is not supported"):
        dist.check_engine(acc, _cfg())


def test_deepspeed_and_fsdp_launched_together_are_refused(monkeypatch):
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    with pytest.raises(PrmkitError, match="both DeepSpeed and FSDP"):
        dist.make_accelerator(_cfg())


def test_deepspeed_gets_micro_batch_accumulation_and_clipping_without_a_dataloader():
    acc = _deepspeed_acc(stage=3, train_micro_batch_size_per_gpu="auto")
    dist.configure_deepspeed(acc, _cfg("grad_accum=3", "max_grad_norm=0.5"))
    ds = acc.state.deepspeed_plugin.deepspeed_config
    assert (ds["train_micro_batch_size_per_gpu"], ds["gradient_accumulation_steps"],
            ds["train_batch_size"], ds["gradient_clipping"]) == (1, 3, 6, 0.5)
    assert ds["zero_allow_untested_optimizer"]
    assert ds["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"]


def test_failed_engine_checkpoint_leaves_neither_a_step_folder_nor_a_temporary_one(tmp_path):
    class Failing:
        is_main_process = True

        def wait_for_everyone(self):
            pass

        def save_state(self, folder):
            (Path(folder) / "half.bin").write_bytes(b"x")
            raise OSError("disk full")

    scheduler = SimpleNamespace(state_dict=lambda: {})
    with pytest.raises(OSError, match="disk full"):
        dist.save_engine_checkpoint(Failing(), tmp_path, 4, scheduler, {}, 2, [{}])
    assert list((tmp_path / "checkpoints").iterdir()) == []
