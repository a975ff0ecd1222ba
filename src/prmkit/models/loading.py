"""Any PRM folder as a model: one prmkit saved, a published PRM or an export.

`StepRewardModel.from_pretrained` loads prmkit's own folders only; `load_reward_model`
(which the Scorer and every command use) tells the kinds apart and calls the loader of
each, so neither module imports the other.

    model = load_reward_model("runs/prm/model")
    qwen = load_reward_model("Qwen/Qwen2.5-Math-PRM-7B", trust_remote_code=True)
"""

from __future__ import annotations

from pathlib import Path

import torch

from prmkit.models.config import is_prmkit_model
from prmkit.models.published import load_published
from prmkit.models.reward_model import StepRewardModel


def load_reward_model(folder: str | Path, dtype: torch.dtype | str | None = None,
                      device: str | torch.device | None = None,
                      attn_implementation: str | None = None, format: str | None = None,
                      trust_remote_code: bool = False) -> StepRewardModel:
    """A PRM folder or Hub id, its backbone loaded straight in `dtype` (default fp32; a
    prmkit head stays fp32), on `device` (default: as loaded). A folder with
    prmkit_config.json and no `format` is prmkit's (`StepRewardModel.from_pretrained`);
    any other is a published PRM or a token-classification export
    (`prmkit.models.published.load_published`): `format` names a built-in family or a
    spec file (None: detected from config.json), and trust_remote_code allows a family
    whose model class ships as remote code."""
    from prmkit.data.hub import resolve_model_folder
    from prmkit.models.backbones import resolve_dtype

    folder = resolve_model_folder(folder)
    if format is None and is_prmkit_model(folder):
        return StepRewardModel.from_pretrained(folder, dtype=dtype, device=device,
                                               attn_implementation=attn_implementation)
    return load_published(folder, format, trust_remote_code=trust_remote_code,
                          dtype=resolve_dtype(dtype), attn_implementation=attn_implementation,
                          device=device)
