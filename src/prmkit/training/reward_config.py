"""Configuration of a reward-model training run (PRM or ORM).

`RewardTrainingConfig.from_dict` builds it from nested dicts (YAML recipes, CLI
overrides) and rejects unknown keys by their dotted name.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from prmkit.errors import PrmkitError
from prmkit.models.config import RewardModelConfig
from prmkit.models.formatting import StepFormat


@dataclass
class DataConfig:
    train: list[str] = field(default_factory=list)  # files (any format read_records knows)
    format: str | None = None  # None: detect from each file
    eval: list[str] = field(default_factory=list)  # explicit eval files (else eval_fraction)
    eval_fraction: float = 0.05  # share of problems (groups) held out for evaluation
    max_problems: int | None = None  # keep only the first N problems (quick runs, benchmarks)
    policy: dict[str, Any] = field(default_factory=dict)  # prmkit.data.PolicyOptions fields
    gold_answers: list[str] = field(default_factory=list)  # MATH files with answers (ORM)
    outcome_fallback: Literal["rating", "none"] = "rating"  # ORM label without a gold answer
    skip_bad: bool = False  # skip malformed records instead of failing
    examples: list | None = None  # Python API: StepExamples instead of files
    eval_examples: list | None = None


@dataclass
class LoraSection:
    enabled: bool = True
    r: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: str | list[str] = "all-linear"
    top_k_layers: int | None = None  # adapters only on the top K decoder layers


@dataclass
class RewardTrainingConfig:
    data: DataConfig = field(default_factory=DataConfig)
    backbone: str = "tiny-random"  # alias (smollm2-135m, tiny-random), folder or hub id
    model: RewardModelConfig = field(default_factory=RewardModelConfig)
    lora: LoraSection = field(default_factory=LoraSection)
    lr: float = 2e-4
    weight_decay: float = 0.0
    schedule: Literal["cosine", "linear", "constant"] = "cosine"
    warmup_ratio: float = 0.03
    epochs: float = 1.0
    max_steps: int | None = None  # optimizer steps; overrides epochs
    batch_tokens: int = 8192  # tokens per micro-batch (rows x padded length)
    max_rows: int | None = None  # at most this many rows (sequences) per micro-batch
    grad_accum: int = 1
    max_grad_norm: float | None = 1.0
    packing: Literal["auto", "tree", "none"] = "auto"  # auto: trees when prefixes are shared
    row_tokens: int | None = None  # packed row length; default model.step_format.max_length
    label_weighting: Literal["count", "unique"] = "count"
    bf16: bool = True  # bf16 autocast (CPU and GPU); weights stay fp32
    device: Literal["auto", "cpu", "cuda"] = "auto"
    num_threads: int | None = None  # torch CPU threads
    eval_every: int = 0  # optimizer steps; 0 = only at the end
    save_every: int = 0  # optimizer steps; 0 = no intermediate checkpoints
    keep_checkpoints: int = 2
    log_every: int = 10
    output_dir: str = "runs/prm"
    save_merged: bool = True  # LoRA: write merged full weights (else only the adapter)
    seed: int = 0
    resume: bool = False
    progress: bool = True

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        def need(ok: bool, msg: str) -> None:
            if not ok:
                raise PrmkitError(f"invalid training config: {msg}")

        need(self.lr > 0, f"lr must be positive, got {self.lr}")
        need(self.epochs > 0, f"epochs must be positive, got {self.epochs}")
        need(self.max_steps is None or self.max_steps > 0, "max_steps must be positive")
        need(self.batch_tokens > 0, "batch_tokens must be positive")
        need(self.max_rows is None or self.max_rows >= 1, "max_rows must be at least 1")
        need(self.grad_accum >= 1, "grad_accum must be at least 1")
        need(0.0 <= self.data.eval_fraction < 1.0, "data.eval_fraction must lie in [0, 1)")
        need(0.0 <= self.warmup_ratio < 1.0, "warmup_ratio must lie in [0, 1)")
        need(self.schedule in ("cosine", "linear", "constant"),
             f"schedule must be cosine, linear or constant, got {self.schedule!r}")
        need(self.packing in ("auto", "tree", "none"),
             f"packing must be auto, tree or none, got {self.packing!r}")
        need(self.label_weighting in ("count", "unique"),
             f"label_weighting must be count or unique, got {self.label_weighting!r}")
        need(self.device in ("auto", "cpu", "cuda"), "device must be auto, cpu or cuda")
        need(self.data.outcome_fallback in ("rating", "none"),
             "data.outcome_fallback must be rating or none")
        need(self.lora.top_k_layers is None or self.lora.top_k_layers > 0,
             "lora.top_k_layers must be positive")
        need(self.row_tokens is None or self.row_tokens >= self.model.step_format.max_length,
             f"row_tokens ({self.row_tokens}) must be at least model.step_format.max_length "
             f"({self.model.step_format.max_length})")
        need(bool(self.data.train) or self.data.examples is not None,
             "data.train (files) or data.examples is required")

    @property
    def effective_row_tokens(self) -> int:
        return self.row_tokens or self.model.step_format.max_length

    # ---- dict / YAML ---------------------------------------------------------------------
    @classmethod
    def from_dict(cls, d: dict) -> RewardTrainingConfig:
        return _build(cls, d, "")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["data"].pop("examples", None)
        d["data"].pop("eval_examples", None)
        d["model"]["label_tokens"] = list(self.model.label_tokens)
        return d

    @classmethod
    def from_yaml(cls, path: str | Path, overrides: list[str] | None = None) -> RewardTrainingConfig:
        import yaml

        p = Path(path)
        if not p.is_file():
            raise PrmkitError(f"{path}: recipe not found")
        try:
            d = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError as e:
            raise PrmkitError(f"{path}: not valid YAML ({e})") from None
        if not isinstance(d, dict):
            raise PrmkitError(f"{path}: a recipe must be a mapping of config keys")
        for item in overrides or []:
            apply_override(d, item)
        try:
            return cls.from_dict(d)
        except PrmkitError as e:
            raise PrmkitError(f"{path}: {e}") from None


def apply_override(d: dict, item: str) -> None:
    """`a.b.c=value` (value parsed as YAML) into a nested dict."""
    import yaml

    if "=" not in item:
        raise PrmkitError(f"override {item!r} must look like key=value (dotted keys allowed)")
    key, raw = item.split("=", 1)
    try:
        value = yaml.safe_load(raw) if raw != "" else None
    except yaml.YAMLError:
        value = raw
    parts = key.strip().split(".")
    node = d
    for part in parts[:-1]:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise PrmkitError(f"override {item!r}: {part!r} is not a section")
        node = child
    node[parts[-1]] = value


def _unknown_key(key: str, known, where: str) -> PrmkitError:
    close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.4)
    hint = f" (did you mean '{where}{close[0]}'?)" if close else ""
    return PrmkitError(f"unknown config key '{where}{key}'{hint}")


def _build(cls, d: Any, where: str):
    if isinstance(d, cls):
        return d
    if not isinstance(d, dict):
        raise PrmkitError(f"'{where.rstrip('.') or 'config'}' must be a mapping, got {d!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in d.items():
        if key not in fields:
            raise _unknown_key(key, fields, where)
        kwargs[key] = _coerce(hints[key], value, f"{where}{key}")
    try:
        return cls(**kwargs)
    except TypeError as e:
        raise PrmkitError(f"'{where.rstrip('.') or 'config'}': {e}") from None


def _coerce(tp, value, name: str):
    """Check and convert a YAML value to the field's type, naming the field on error."""
    if value is None:
        return None
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, name + ".")
    if tp is StepFormat:
        return _build(StepFormat, value, name + ".")
    if origin in (typing.Union, types.UnionType):
        errors = []
        for arg in typing.get_args(tp):
            if arg is type(None):
                continue
            try:
                return _coerce(arg, value, name)
            except PrmkitError as e:
                errors.append(str(e))
        raise PrmkitError(errors[0] if errors else f"'{name}': bad value {value!r}")
    if origin is Literal:
        if value not in typing.get_args(tp):
            allowed = ", ".join(repr(a) for a in typing.get_args(tp))
            raise PrmkitError(f"'{name}' must be one of {allowed}, got {value!r}")
        return value
    if origin in (list, tuple):
        if isinstance(value, str) and origin is list:
            value = [value]
        if not isinstance(value, list | tuple):
            raise PrmkitError(f"'{name}' must be a list, got {value!r}")
        args = typing.get_args(tp)
        inner = args[0] if args else Any
        items = [_coerce(inner, v, f"{name}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise PrmkitError(f"'{name}' must be a mapping, got {value!r}")
        return dict(value)
    if tp is Any:
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise PrmkitError(f"'{name}' must be true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise PrmkitError(f"'{name}' must be an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise PrmkitError(f"'{name}' must be a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise PrmkitError(f"'{name}' must be a string, got {value!r}")
        return value
    return value
