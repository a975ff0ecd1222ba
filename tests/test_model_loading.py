"""Loading for memory: training dtype, attention implementations, gradient checkpointing,
copy-free LoRA merge, QLoRA refusal, devices."""

from __future__ import annotations

import copy

import pytest
import torch

from prmkit.errors import PrmkitError
from prmkit.models.backbones import load_backbone, resolve_device, tiny_random
from prmkit.models.config import RewardModelConfig
from prmkit.models.reward_model import StepRewardModel
from prmkit.training.model_setup import load_reward_model, training_dtype
from prmkit.training.reward_config import RewardTrainingConfig

PROBLEM = "How many apples? 2x + 3 = 11."
STEPS = ["Let x be a number.", "Then 2x + 3 = 11, so x = 4.", "The answer is 4."]


def _config(**kw) -> RewardTrainingConfig:
    return RewardTrainingConfig.from_dict({"data": {"train": ["unused.jsonl"]}, **kw})


def _spread(module, seed=1, std=0.2):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if "norm" not in name:
                p.copy_(torch.randn(p.shape, generator=g) * std)


def _inputs(model):
    enc = model.encoder.encode(PROBLEM, STEPS)
    return torch.tensor([enc.input_ids]), torch.tensor([[0, p] for p in enc.label_positions])


# ---- dtype --------------------------------------------------------------------------------
@pytest.mark.parametrize("kw,expected", [
    ({"bf16": True}, torch.bfloat16),  # LoRA under bf16 autocast: frozen weights in bf16
    ({"lora": {"enabled": False}}, torch.float32),  # full fine-tuning: fp32 for the optimizer
    ({"bf16": False}, torch.float32),
    ({"torch_dtype": "fp16"}, torch.float16),
    ({"lora": {"enabled": False}, "torch_dtype": "bf16"}, torch.bfloat16),
])
@pytest.mark.filterwarnings("ignore:bf16 was asked for")
def test_torch_dtype_auto_loads_frozen_lora_backbones_in_bf16(kw, expected):
    cfg = _config(**kw)
    assert training_dtype(cfg) == expected
    model = load_reward_model(cfg)
    assert model.backbone.dtype == expected


def test_saved_model_loads_straight_in_bf16_with_an_fp32_head(tmp_path, monkeypatch):
    from transformers import AutoModelForCausalLM

    backbone, tok = tiny_random()
    StepRewardModel.from_backbone(backbone, tok, RewardModelConfig(formulation="head")) \
        .save_pretrained(tmp_path)
    asked = []
    original = AutoModelForCausalLM.from_pretrained

    def spy(*args, **kw):
        asked.append(kw.get("dtype"))
        return original(*args, **kw)

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", spy)
    model = StepRewardModel.from_pretrained(tmp_path, dtype="bf16")
    assert asked == [torch.bfloat16]  # never materialised in fp32 first
    assert model.backbone.dtype == torch.bfloat16
    assert model.head.weight.dtype == torch.float32


# ---- gradient checkpointing ----------------------------------------------------------------
def _grads_and_mlp_calls(checkpointing: bool):
    backbone, tok = tiny_random(seed=3)
    _spread(backbone)
    model = StepRewardModel.from_backbone(backbone, tok, RewardModelConfig())
    model.apply_lora(r=4, alpha=8)
    if checkpointing:
        model.enable_gradient_checkpointing()
    model.train()
    calls = []
    hook = model.backbone.get_decoder().layers[0].mlp.register_forward_pre_hook(
        lambda *a: calls.append(1))
    ids, pos = _inputs(model)
    model.loss(model(ids, pos), torch.tensor([[1.0, 0.0]] * len(STEPS))).backward()
    hook.remove()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
    return grads, len(calls)


def test_gradient_checkpointing_with_lora_recomputes_layers_and_keeps_gradients():
    plain, plain_calls = _grads_and_mlp_calls(False)
    ckpt, ckpt_calls = _grads_and_mlp_calls(True)
    assert plain_calls == 1 and ckpt_calls == 2  # the layer ran again in backward
    assert plain.keys() == ckpt.keys() and any("lora_A" in n for n in plain)
    for name in plain:
        assert torch.allclose(plain[name], ckpt[name], atol=1e-6), name
        if "lora_A" not in name:  # lora_B starts at zero: A gets no gradient at step 0
            assert plain[name].abs().sum() > 0, name


# ---- LoRA merge -----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_lora_merged_save_does_not_deep_copy_the_model(tmp_path, monkeypatch, dtype):
    backbone, tok = tiny_random(seed=2)
    model = StepRewardModel.from_backbone(backbone.to(dtype), tok, RewardModelConfig())
    model.apply_lora(r=4, alpha=8)
    _spread(model._peft_model, seed=5, std=0.05)  # non-zero adapters (B starts at zero)
    reference = copy.deepcopy(model._peft_model).merge_and_unload().state_dict()

    def refuse(*_):
        raise AssertionError("the model was deep-copied")

    monkeypatch.setattr(type(model.backbone), "__deepcopy__", refuse, raising=False)
    model.save_pretrained(tmp_path)
    monkeypatch.undo()
    loaded = StepRewardModel.from_pretrained(tmp_path, dtype=dtype)
    got = loaded.backbone.state_dict()
    assert got.keys() == reference.keys()
    for key, value in reference.items():
        assert got[key].dtype == dtype
        assert torch.allclose(got[key].float(), value.float(), atol=1e-2 if dtype != torch.float32
                              else 1e-6), key
    # and the adapters stay in place on the trained model, unmerged
    assert any("lora_A" in k for k in model.backbone.state_dict())


# ---- QLoRA ------------------------------------------------------------------------------------
def test_load_in_4bit_on_cpu_is_refused_at_start(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(PrmkitError, match="needs a CUDA device"):
        load_reward_model(_config(load_in_4bit=True))


def test_load_in_4bit_without_bitsandbytes_is_refused_at_start(monkeypatch):
    import importlib.util

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    find = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "bitsandbytes" else find(name, *a))
    with pytest.raises(PrmkitError, match="pip install bitsandbytes"):
        load_reward_model(_config(load_in_4bit=True))


def test_load_in_4bit_needs_lora():
    with pytest.raises(PrmkitError, match="set lora.enabled=true"):
        _config(load_in_4bit=True, lora={"enabled": False})


# ---- attention implementation ------------------------------------------------------------------
@pytest.mark.parametrize("impl", ["eager", "sdpa", "flex_attention"])
def test_attn_implementation_option_reaches_the_backbone(impl):
    model = load_reward_model(_config(attn_implementation=impl))
    assert model.backbone.config._attn_implementation == impl


def test_flash_attention_2_with_tree_packing_is_refused_at_start():
    with pytest.raises(PrmkitError, match="cannot take the tree mask"):
        load_reward_model(_config(attn_implementation="flash_attention_2"))


def test_flash_attention_2_on_cpu_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(PrmkitError, match="needs a CUDA device"):
        load_backbone("tiny-random", attn_implementation="flash_attention_2")


# ---- devices ------------------------------------------------------------------------------------
def test_device_auto_is_cuda_when_there_is_one(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto").type == "cuda"
    assert resolve_device(None).type == "cuda"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto").type == "cpu"
    with pytest.raises(PrmkitError, match="no CUDA device"):
        resolve_device("cuda")
