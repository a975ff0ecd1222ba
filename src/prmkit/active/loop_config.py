"""Configuration of the active-learning loop (`prmkit active run --config LOOP.yaml`).

Built like training recipes: nested dicts checked field by field against the annotations
(jsonargparse via `prmkit.training.reward_config`), unknown keys rejected by dotted name,
errors naming the YAML file and line or the `key=value` override.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from prmkit.errors import PrmkitError
from prmkit.generation.base import DEFAULT_MAX_TOKENS, DEFAULT_TEMPERATURE, DEFAULT_TOP_P
from prmkit.training.reward_config import (
    check_types,
    config_from_dict,
    load_yaml_config,
)


@dataclass
class GeneratorSection:
    backend: Literal["hf", "vllm", "openai"] = "hf"
    model: str = "smollm2-135m"  # folder, alias or served model name
    options: dict[str, Any] = field(default_factory=dict)  # backend options (dtype, ...)
    prompt_format: Literal["fewshot", "chat"] = "fewshot"
    step_separator: str = "\n\n"
    samples_per_problem: int = 16  # the pool each generation scores
    temperature: float = DEFAULT_TEMPERATURE  # prmkit.generation's defaults
    top_p: float = DEFAULT_TOP_P
    max_tokens: int = DEFAULT_MAX_TOKENS
    seed: int = 0  # generation g samples with seed + g


@dataclass
class SelectorSection:
    model: str | None = None  # PRM folder; None: uniform selection until a PRM is trained
    update: bool = True  # the PRM retrained in generation g selects in generation g + 1
    aggregation: Literal["prod", "min", "last", "mean", "geomean"] = "prod"
    dtype: str = "auto"  # auto: bf16 where the hardware computes it natively, else fp32
    token_budget: int = 16384


@dataclass
class SelectSection:
    method: Literal["convincing", "uniform"] = "convincing"  # uniform: the baseline
    per_problem: int = 4
    convincing_wrong_share: float = 0.8
    scope: Literal["per_problem", "global"] = "per_problem"
    global_top_k: int | None = None
    seed: int = 0  # uniform selection


@dataclass
class LabelSection:
    source: Literal["grader", "large_prm", "monte_carlo", "queue"] = "grader"
    # large_prm
    large_prm: str | None = None  # PRM folder, or a published PRM's folder or Hub id
    large_prm_format: str | None = None  # its published family or spec file (docs/models.md)
    large_prm_trust_remote_code: bool = False  # allow the model code shipped with it
    supervision: Literal["process", "outcome"] = "process"
    threshold: float = 0.2  # P(wrong) above which a step is labelled wrong
    # monte_carlo (rollouts from the generator)
    rollouts: int = 4  # K per step prefix
    mode: Literal["hard", "soft"] = "hard"
    search: Literal["all", "binary"] = "binary"
    rollout_max_tokens: int = 512
    rollout_temperature: float = DEFAULT_TEMPERATURE
    # queue: humans label <gen>/queue.jsonl and save it as <gen>/queue_labelled.jsonl
    allow_pending: bool = False  # train on a partly labelled queue


@dataclass
class LoopConfig:
    problems: str = "../shared/data/math/math500.jsonl"  # MATH-style JSONL
    problem_limit: int | None = None  # the first N problems
    problems_per_generation: int | None = None  # None: all problems every generation
    generations: int = 2  # g = 0 .. generations - 1
    output_dir: str = "runs/active"
    generator: GeneratorSection = field(default_factory=GeneratorSection)
    selector: SelectorSection = field(default_factory=SelectorSection)
    select: SelectSection = field(default_factory=SelectSection)
    label: LabelSection = field(default_factory=LabelSection)
    train_recipe: str = "recipes/tiny_ci.yaml"  # the reward-model recipe retrained each generation
    train_overrides: list[str] = field(default_factory=list)  # key=value, as `prmkit train`
    initial_data: list[str] = field(default_factory=list)  # labelled files trained on every time
    force: bool = False  # resume although the config changed

    def __post_init__(self):
        check_types(self)
        need = _need
        need(self.generations >= 1, "generations must be at least 1")
        need(self.generator.samples_per_problem >= 1, "generator.samples_per_problem must be >= 1")
        need(self.problem_limit is None or self.problem_limit >= 1, "problem_limit must be >= 1")
        need(self.problems_per_generation is None or self.problems_per_generation >= 1,
             "problems_per_generation must be >= 1")
        need(self.label.rollouts >= 1, "label.rollouts must be >= 1")
        need(self.label.source != "large_prm" or self.label.large_prm is not None,
             "label.source large_prm needs label.large_prm (a PRM folder)")
        need(0.0 <= self.select.convincing_wrong_share <= 1.0,
             "select.convincing_wrong_share must lie in [0, 1]")
        need(self.select.scope != "global" or self.select.global_top_k is not None,
             "select.scope global needs select.global_top_k")

    @classmethod
    def from_dict(cls, d: dict) -> LoopConfig:
        return config_from_dict(cls, d)

    def to_dict(self) -> dict:
        return asdict(self)

    def digest(self) -> str:
        """sha256 of the settings that decide the results (not `force`)."""
        d = self.to_dict()
        d.pop("force")
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()

    @classmethod
    def from_yaml(cls, path: str | Path, overrides: list[str] | None = None) -> LoopConfig:
        return load_yaml_config(cls.from_dict, path, overrides, "loop config")


def _need(ok: bool, msg: str) -> None:
    if not ok:
        raise PrmkitError(f"invalid loop config: {msg}")
