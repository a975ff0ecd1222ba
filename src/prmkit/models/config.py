"""The small prmkit config saved beside a model's Hugging Face weights."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from prmkit.errors import PrmkitError
from prmkit.models.formatting import StepFormat

CONFIG_NAME = "prmkit_config.json"
Formulation = Literal["token", "head"]
Objective = Literal["prm", "orm"]


def is_token_classification_export(folder: str | Path) -> bool:
    """Whether `folder` is a token-classification export (`prmkit export`), which also
    carries prmkit_config.json."""
    hf = Path(folder) / "config.json"
    archs = json.loads(hf.read_text()).get("architectures") or [] if hf.is_file() else []
    return any(a.endswith("ForTokenClassification") for a in archs)


def is_prmkit_model(folder: str | Path) -> bool:
    """Whether `folder` is a model `StepRewardModel.save_pretrained` wrote (its
    prmkit_config.json, and no token-classification export)."""
    return Path(folder, CONFIG_NAME).is_file() and not is_token_classification_export(folder)


@dataclass
class RewardModelConfig:
    objective: Objective = "prm"  # prm: a label after every step; orm: one at the end
    formulation: Formulation = "token"  # token: LM head restricted to label tokens; head: new head
    num_classes: int = 2  # 2: correct/wrong; 3: +1/0/-1 (token and head alike)
    label_tokens: tuple[str, ...] = ("+", "-")  # token formulation: class order is correct first
    head: Literal["linear", "mlp"] = "linear"
    neutral_is_correct: bool = True  # three classes: p(correct) = p(+) + p(0)
    aggregation: str = "prod"
    step_format: StepFormat = field(default_factory=StepFormat)
    backbone: str | None = None  # what the model was built from (alias, path or hub id)
    adapter: bool = False  # the folder holds a LoRA adapter over `backbone`, not full weights
    family: str | None = None  # a published family's format (prmkit.models.family), if any
    # head formulation: the head also reads the backbone's own probability of each of the
    # label's last W tokens (prmkit.models.surprise); 0: the hidden state only
    surprise_window: int = 0
    # with surprise_window: also the backbone's probability of the label's whole step (its
    # tokens within the window back to the previous separator), in one number
    surprise_step: bool = False

    def __post_init__(self):
        if isinstance(self.step_format, dict):
            self.step_format = StepFormat.from_dict(self.step_format)
        self.label_tokens = tuple(self.label_tokens)
        if self.objective not in ("prm", "orm"):
            raise PrmkitError(f"objective must be 'prm' or 'orm', got {self.objective!r}")
        if self.formulation not in ("token", "head"):
            raise PrmkitError(f"formulation must be 'token' or 'head', got {self.formulation!r}")
        if self.surprise_window < 0 or (self.surprise_window and self.formulation != "head"):
            raise PrmkitError("surprise_window needs formulation='head' and a value >= 0, got "
                              f"{self.surprise_window} with formulation={self.formulation!r}")
        if self.surprise_step and not self.surprise_window:
            raise PrmkitError("surprise_step reads the surprise window: set surprise_window > 0")
        if self.num_classes not in (2, 3):
            raise PrmkitError(f"num_classes must be 2 or 3, got {self.num_classes}")
        if self.formulation == "token" and len(self.label_tokens) != self.num_classes:
            if self.num_classes == 3 and self.label_tokens == ("+", "-"):
                self.label_tokens = ("+", "0", "-")
            else:
                raise PrmkitError(
                    f"{self.num_classes} classes need {self.num_classes} label tokens, "
                    f"got {self.label_tokens}"
                )

    def save(self, folder: str | Path) -> None:
        d = asdict(self)
        d["step_format"] = self.step_format.to_dict()
        Path(folder, CONFIG_NAME).write_text(json.dumps(d, indent=2) + "\n")

    @classmethod
    def load(cls, folder: str | Path) -> RewardModelConfig:
        path = Path(folder, CONFIG_NAME)
        if not path.is_file():
            raise PrmkitError(f"{folder} is not a prmkit model folder: {CONFIG_NAME} is missing")
        d = json.loads(path.read_text())
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})
