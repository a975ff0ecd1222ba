"""The compute dtype chosen from the hardware: bf16 only where it runs natively."""

import logging

import pytest
import torch

from prmkit.generation import vllm_cpu
from prmkit.models import precision
from prmkit.training.model_setup import training_bf16, training_dtype
from prmkit.training.reward_config import DataConfig, RewardTrainingConfig

AVX2_ONLY = frozenset({"avx", "avx2", "fma3"})  # AMD EPYC family 25 model 1
SAPPHIRE_RAPIDS = frozenset({"avx2", "avx512_f", "avx512_bf16", "amx_tile", "amx_bf16"})


@pytest.fixture
def cpu(monkeypatch):
    def use(flags):
        monkeypatch.setattr(precision, "cpu_flags", lambda: flags)
    return use


def test_auto_is_fp32_on_a_cpu_that_reports_no_native_bf16(cpu, caplog):
    cpu(AVX2_ONLY)
    precision._log_choice.cache_clear()
    with caplog.at_level(logging.INFO, logger="prmkit.models"):
        assert precision.use_bf16("auto", "cpu") is False
    assert "compute dtype fp32: CPU without avx512_bf16 or amx_bf16" in caplog.text
    assert precision.compute_dtype("auto", "cpu") == "fp32"
    assert vllm_cpu.vllm_dtype("auto") == "float32"


@pytest.mark.parametrize("flags", [frozenset({"avx512_bf16"}), SAPPHIRE_RAPIDS])
def test_auto_is_bf16_on_a_cpu_with_avx512_bf16_or_amx(cpu, flags):
    cpu(flags)
    assert precision.use_bf16("auto", "cpu") is True
    assert precision.compute_dtype("auto", "cpu") == "bf16"
    assert vllm_cpu.vllm_dtype("auto") == "auto"  # vLLM's own choice: bf16 there


def test_explicit_bf16_is_honoured_and_warns_where_emulated(cpu):
    cpu(AVX2_ONLY)
    precision._warn_emulated.cache_clear()
    with pytest.warns(UserWarning, match="bf16 was asked for on a CPU without"):
        assert precision.use_bf16(True, "cpu") is True
    assert precision.use_bf16(False, "cpu") is False
    assert precision.compute_dtype("fp32", "cpu") == "fp32"


def test_explicit_bf16_on_a_native_cpu_does_not_warn(cpu, recwarn):
    cpu(SAPPHIRE_RAPIDS)
    precision._warn_emulated.cache_clear()
    assert precision.use_bf16(True, "cpu") is True
    assert not [w for w in recwarn if "bf16" in str(w.message)]


def test_training_config_defaults_to_auto_and_follows_the_cpu(cpu):
    cfg = RewardTrainingConfig(data=DataConfig(train=["x"]))
    assert cfg.bf16 == "auto"
    cpu(AVX2_ONLY)
    assert training_bf16(cfg, "cpu") is False
    assert training_dtype(cfg) == torch.float32  # LoRA keeps fp32 weights without bf16
    cpu(SAPPHIRE_RAPIDS)
    assert training_bf16(cfg, "cpu") is True
    assert training_dtype(cfg) == torch.bfloat16
    assert RewardTrainingConfig.from_dict({"data": {"train": ["x"]}, "bf16": "auto"}).bf16 \
        == "auto"


def test_scorer_scores_in_fp32_on_a_cpu_without_native_bf16(cpu):
    from test_scoring import make_model

    from prmkit.scoring import Scorer

    model = make_model()
    cpu(AVX2_ONLY)
    scorer = Scorer(model)
    assert scorer.dtype == torch.float32 and not scorer.autocast and not scorer.cast_weights
    cpu(SAPPHIRE_RAPIDS)
    scorer = Scorer(model)
    assert scorer.dtype == torch.bfloat16 and scorer.autocast


def test_vllm_worker_extension_asks_for_amx_state_only_where_the_cpu_has_amx(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True)
    monkeypatch.setattr(torch.cpu, "_init_amx", lambda: calls.append(1) or True)
    assert vllm_cpu.request_amx_permission() is True and calls == [1]
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    assert vllm_cpu.request_amx_permission() is False and calls == [1]
    cmd = vllm_cpu.server_command("MODEL", 8000)
    assert cmd[cmd.index("--worker-extension-cls") + 1] == vllm_cpu.WORKER_EXTENSION
