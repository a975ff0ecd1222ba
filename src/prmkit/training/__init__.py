"""prmkit.training: prefix-tree packing and the PRM/ORM trainer.

    from prmkit.training import RewardTrainingConfig, train
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "RewardTrainingConfig": "reward_config",
    "DataConfig": "reward_config",
    "LoraSection": "reward_config",
    "RewardTrainer": "reward_trainer",
    "TrainResult": "reward_trainer",
    "train": "reward_trainer",
    "pack_examples": "packing",
    "unpacked_rows": "packing",
    "token_counts": "packing",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"prmkit.training.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'prmkit.training' has no attribute {name!r}")
