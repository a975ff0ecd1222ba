"""The reward model of a training run, loaded for memory: in the training dtype, with the
chosen attention implementation, optionally in 4 bits (QLoRA) and with gradient
checkpointing."""

from __future__ import annotations

import torch

from prmkit.errors import PrmkitError
from prmkit.training.reward_config import RewardTrainingConfig


def training_bf16(cfg: RewardTrainingConfig, device: torch.device | str | None = None) -> bool:
    """bf16 autocast on or off: cfg.bf16 as given, or for "auto" whether the training
    device computes bf16 natively (prmkit.models.precision)."""
    from prmkit.models.backbones import resolve_device
    from prmkit.models.precision import use_bf16

    if device is None:
        device = resolve_device(None if cfg.device == "auto" else cfg.device)
    return use_bf16(cfg.bf16, device)


def training_dtype(cfg: RewardTrainingConfig) -> torch.dtype:
    """torch_dtype resolved. auto: bf16 when the backbone is frozen under bf16 autocast
    (LoRA: only the adapters and the head train, and they stay fp32), else fp32, the
    optimizer's precision for trainable weights."""
    from prmkit.models.backbones import resolve_dtype

    if cfg.torch_dtype != "auto":
        return resolve_dtype(cfg.torch_dtype)
    return torch.bfloat16 if cfg.lora.enabled and training_bf16(cfg) else torch.float32


def check_model_options(cfg: RewardTrainingConfig) -> None:
    """Refuse, before any data is read, what the loaded model could not honour."""
    from prmkit.models.backbones import check_4bit_available

    if cfg.attn_implementation == "flash_attention_2" and cfg.packing != "none":
        raise PrmkitError("attn_implementation=flash_attention_2 cannot take the tree mask of "
                          "packed rows: set packing=none, or use sdpa or flex_attention")
    if cfg.load_in_4bit:
        check_4bit_available()


def load_reward_model(cfg: RewardTrainingConfig, model=None):
    """The run's StepRewardModel (before LoRA): `model` as given (its attention
    implementation set when configured), else cfg.backbone loaded as configured."""
    from prmkit.models.reward_model import StepRewardModel

    check_model_options(cfg)
    if model is not None:
        if cfg.attn_implementation != "auto":
            model.backbone.set_attn_implementation(cfg.attn_implementation)
        return model
    attn = None if cfg.attn_implementation == "auto" else cfg.attn_implementation
    return StepRewardModel.from_backbone(cfg.backbone, config=cfg.model,
                                         dtype=training_dtype(cfg), attn_implementation=attn,
                                         load_in_4bit=cfg.load_in_4bit)


def finish_model_setup(cfg: RewardTrainingConfig, model) -> None:
    """After LoRA: gradient checkpointing, when configured."""
    if cfg.gradient_checkpointing:
        model.enable_gradient_checkpointing()
