"""Configuration of a reward-model training run (PRM or ORM).

`RewardTrainingConfig.from_dict` builds it from nested dicts (YAML recipes, CLI
overrides): unknown keys are rejected by their dotted name, and every value is checked
against its field's annotation by jsonargparse (which also reads `1e-4` as a float);
`null` is accepted only where the annotation allows None.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import functools
import os
import re
import types
import typing
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from prmkit.errors import PrmkitError
from prmkit.models.config import RewardModelConfig


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
    cache: bool = True  # tokenised/packed rows cached on disk (files only, not examples)
    cache_dir: str | None = None  # None: $PRMKIT_CACHE/rows (default ~/.cache/prmkit/rows)


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
    # auto: unique with data.policy.alternatives=prefixes (the policy default), else count
    label_weighting: Literal["auto", "count", "unique"] = "auto"
    # bf16 autocast; weights stay fp32. auto: where the device computes bf16 natively
    # (CUDA with bf16, CPUs with AVX512_BF16 or AMX), else fp32 (prmkit.models.precision).
    bf16: bool | Literal["auto"] = "auto"
    device: Literal["auto", "cpu", "cuda"] = "auto"
    # Weights as loaded. auto: bf16 where they are frozen under bf16 autocast (LoRA),
    # else fp32 (trainable weights stay fp32 for the optimizer).
    torch_dtype: Literal["auto", "bf16", "fp16", "fp32"] = "auto"
    # auto: sdpa. The tree mask needs eager, sdpa or flex_attention.
    attn_implementation: Literal["auto", "eager", "sdpa", "flex_attention",
                                 "flash_attention_2"] = "auto"
    gradient_checkpointing: bool = False
    load_in_4bit: bool = False  # QLoRA: NF4 base weights (bitsandbytes, CUDA only)
    num_threads: int | None = None  # torch CPU threads
    eval_every: int = 0  # optimizer steps; 0 = only at the end
    # Held-out evaluation on a seeded random N of the eval examples (None: all of them);
    # final_eval=false skips the evaluation after training (the model is saved first).
    eval_max_examples: int | None = None
    final_eval: bool = True
    save_every: int = 0  # optimizer steps; 0 = no intermediate checkpoints
    keep_checkpoints: int = 2
    log_every: int = 10
    output_dir: str = "runs/prm"
    save_merged: bool = True  # LoRA: write merged full weights (else only the adapter)
    seed: int = 0
    resume: bool = False
    force: bool = False  # resume even though config, data or model differ from the checkpoint
    # start again in an output_dir that holds a run: its checkpoints, model and logs are
    # removed when this run writes its config (`prmkit train` refuses such a folder
    # without resume=true or overwrite=true)
    overwrite: bool = False
    progress: bool = True
    # Experiment tracking (prmkit.training.tracking): the train and eval records of
    # metrics.jsonl also go to these trackers, named as in transformers' report_to
    # (tensorboard, wandb, trackio); none or [] (the default): metrics.jsonl only.
    report_to: list[str] = field(default_factory=list)
    logging_dir: str | None = None  # tracker files; None: <output_dir>/trackers
    run_name: str | None = None  # the run's name in the trackers; None: output_dir's folder

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        def need(ok: bool, msg: str) -> None:
            if not ok:
                raise PrmkitError(f"invalid training config: {msg}")

        check_types(self)
        from prmkit.training.tracking import tracker_names

        try:
            self.report_to = tracker_names(self.report_to)
        except PrmkitError as e:
            raise ConfigError("report_to", f"invalid training config: {e}") from None

        need(self.lr > 0, f"lr must be positive, got {self.lr}")
        need(self.epochs > 0, f"epochs must be positive, got {self.epochs}")
        need(self.max_steps is None or self.max_steps > 0, "max_steps must be positive")
        need(self.batch_tokens > 0, "batch_tokens must be positive")
        need(self.max_rows is None or self.max_rows >= 1, "max_rows must be at least 1")
        need(self.grad_accum >= 1, "grad_accum must be at least 1")
        need(self.eval_max_examples is None or self.eval_max_examples >= 1,
             "eval_max_examples must be at least 1 (null: every eval example)")
        need(0.0 <= self.data.eval_fraction < 1.0, "data.eval_fraction must lie in [0, 1)")
        need(0.0 <= self.warmup_ratio < 1.0, "warmup_ratio must lie in [0, 1)")
        need(self.schedule in ("cosine", "linear", "constant"),
             f"schedule must be cosine, linear or constant, got {self.schedule!r}")
        need(self.packing in ("auto", "tree", "none"),
             f"packing must be auto, tree or none, got {self.packing!r}")
        need(self.label_weighting in ("auto", "count", "unique"),
             f"label_weighting must be auto, count or unique, got {self.label_weighting!r}")
        need(self.device in ("auto", "cpu", "cuda"), "device must be auto, cpu or cuda")
        need(self.data.outcome_fallback in ("rating", "none"),
             "data.outcome_fallback must be rating or none")
        need(self.lora.top_k_layers is None or self.lora.top_k_layers > 0,
             "lora.top_k_layers must be positive")
        need(self.row_tokens is None or self.row_tokens >= self.model.step_format.max_length,
             f"row_tokens ({self.row_tokens}) must be at least model.step_format.max_length "
             f"({self.model.step_format.max_length})")
        need(not self.load_in_4bit or self.lora.enabled,
             "load_in_4bit (QLoRA) trains LoRA adapters: set lora.enabled=true")
        need(not (self.resume and self.overwrite),
             "resume=true continues the run in output_dir, overwrite=true replaces it: "
             "choose one")
        need(bool(self.data.train) or self.data.examples is not None,
             "data.train (files) or data.examples is required")

    @property
    def effective_row_tokens(self) -> int:
        return self.row_tokens or self.model.step_format.max_length

    @property
    def alternatives(self) -> str:
        """The policy's `alternatives` option (its default when not set)."""
        from prmkit.data.policies import PolicyOptions

        return self.data.policy.get("alternatives", PolicyOptions.alternatives)

    @property
    def effective_label_weighting(self) -> str:
        """`auto` resolved: alternatives as prefixes repeat every kept prefix step once per
        rated alternative after it, so each distinct labelled step counts once there."""
        if self.label_weighting != "auto":
            return self.label_weighting
        return "unique" if self.alternatives == "prefixes" else "count"

    # ---- dict / YAML ---------------------------------------------------------------------
    @classmethod
    def from_dict(cls, d: dict) -> RewardTrainingConfig:
        return config_from_dict(cls, d)

    def to_dict(self) -> dict:
        # in-memory examples are left out before asdict, which would deep-copy each of them
        shallow = copy.copy(self)
        shallow.data = copy.copy(self.data)
        shallow.data.examples = shallow.data.eval_examples = None
        d = asdict(shallow)
        d["data"].pop("examples", None)
        d["data"].pop("eval_examples", None)
        d["model"]["label_tokens"] = list(self.model.label_tokens)
        return d

    @classmethod
    def from_yaml(cls, path: str | Path, overrides: list[str] | None = None) -> RewardTrainingConfig:
        """A YAML recipe plus `key=value` overrides; errors name the recipe's file and line,
        or the override, that set the offending key. Relative paths in the recipe are read
        relative to its folder, those of overrides relative to the working directory
        (prmkit.training.recipe_paths)."""
        return load_recipe(path, overrides)[0]


def load_recipe(path: str | os.PathLike, overrides: list[str] | None = None):
    """(RewardTrainingConfig, RecipePaths) of a YAML recipe with `key=value` overrides: the
    recipe's relative paths read relative to its folder (prmkit.training.recipe_paths)."""
    from prmkit.training.recipe_paths import RecipePaths

    paths = RecipePaths(Path(path))
    cfg = load_yaml_config(RewardTrainingConfig.from_dict, path, overrides, "recipe",
                           prepare=paths.resolve)
    return cfg, paths


def load_yaml_config(from_dict, path: str | Path, overrides: list[str] | None, what: str,
                     prepare=None):
    """`from_dict` of a YAML file's mapping with `key=value` overrides applied; a bad value
    is an error naming the file and line, or the override, that set it. `prepare(d)` may
    rewrite the file's mapping before the overrides are applied."""
    import yaml

    p = Path(path)
    if not p.is_file():
        from prmkit.data.paths import input_file_problem

        raise PrmkitError(f"{path}: {input_file_problem(path, what) or what + ' not found'}")
    text = p.read_text()
    try:
        d = yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        raise PrmkitError(f"{path}: not valid YAML ({e})") from None
    if not isinstance(d, dict):
        raise PrmkitError(f"{path}: a {what} must be a mapping of config keys")
    if prepare is not None:
        prepare(d)
    set_by = {apply_override(d, item): item for item in overrides or []}
    try:
        return from_dict(d)
    except ConfigError as e:
        item = _setter(e.key, set_by)
        if item is not None:
            raise PrmkitError(f"override {item!r}: {e}") from None
        line = _yaml_line(text, e.key)
        raise PrmkitError(f"{path}{f':{line}' if line else ''}: {e}") from None
    except PrmkitError as e:
        raise PrmkitError(f"{path}: {e}") from None


class ConfigError(PrmkitError):
    """A bad config value or key; `key` is its dotted name."""

    def __init__(self, key: str, message: str):
        super().__init__(message)
        self.key = key


def _setter(key: str, set_by: dict[str, str]) -> str | None:
    """The override that set `key` (or a section holding it), if any."""
    for k, item in set_by.items():
        if key == k or key.startswith(k + ".") or key.startswith(k + "["):
            return item
    return None


def _yaml_line(text: str, key: str) -> int | None:
    """Line (1-based) of a dotted key in a YAML document, if it is there."""
    import yaml

    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return None
    line = None
    for part in re.split(r"\.|\[\d+\]", key):
        if not part or not isinstance(node, yaml.MappingNode):
            break
        match = next(((k, v) for k, v in node.value if k.value == part), None)
        if match is None:
            break
        line, node = match[0].start_mark.line + 1, match[1]
    return line


def apply_override(d: dict, item: str) -> str:
    """`a.b.c=value` (value parsed as YAML) into a nested dict; returns the dotted key."""
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
    return ".".join(parts)


# What other trainers (transformers, TRL, PEFT) call a setting, as dotted names from the
# top of a recipe: an unknown key is answered by meaning before spelling
# (`learning_rate` is `lr`, however close `warmup_ratio` is spelled).
ALIASES: dict[str, tuple[str, ...]] = {
    "learning_rate": ("lr",),
    "num_epochs": ("epochs",), "num_train_epochs": ("epochs",), "n_epochs": ("epochs",),
    "batch_size": ("batch_tokens", "max_rows"),
    "per_device_train_batch_size": ("batch_tokens", "max_rows"),
    "train_batch_size": ("batch_tokens", "max_rows"),
    "micro_batch_size": ("batch_tokens", "max_rows"),
    "gradient_accumulation_steps": ("grad_accum",),
    "lr_scheduler_type": ("schedule",), "lr_scheduler": ("schedule",), "scheduler": ("schedule",),
    "warmup_steps": ("warmup_ratio",), "warmup": ("warmup_ratio",),
    "num_steps": ("max_steps",), "max_train_steps": ("max_steps",), "steps": ("max_steps",),
    "gradient_clipping": ("max_grad_norm",), "clip_grad_norm": ("max_grad_norm",),
    "model_name_or_path": ("backbone",), "model_name": ("backbone",), "base_model": ("backbone",),
    "max_length": ("model.step_format.max_length",),
    "max_seq_length": ("model.step_format.max_length",),
    "output": ("output_dir",), "save_dir": ("output_dir",),
    "logging_steps": ("log_every",), "eval_steps": ("eval_every",), "save_steps": ("save_every",),
    "save_total_limit": ("keep_checkpoints",),
    "resume_from_checkpoint": ("resume",),
    "fp16": ("bf16",), "mixed_precision": ("bf16",), "dtype": ("torch_dtype",),
    "lora_r": ("lora.r",), "rank": ("lora.r",), "lora_alpha": ("lora.alpha",),
    "lora_dropout": ("lora.dropout",), "use_lora": ("lora.enabled",), "use_peft": ("lora.enabled",),
    "target_modules": ("lora.target_modules",), "lora_target_modules": ("lora.target_modules",),
    "train_file": ("data.train",), "train_files": ("data.train",), "dataset": ("data.train",),
    "eval_file": ("data.eval",), "validation_file": ("data.eval",),
    "num_labels": ("model.num_classes",),
}
# What a suggested key means, where its name does not say it.
MEANINGS = {"batch_tokens": "tokens per micro-batch", "max_rows": "sequences per micro-batch",
            "warmup_ratio": "a share of the steps", "bf16": "bf16 autocast"}


def _unknown_key(key: str, cls, where: str) -> ConfigError:
    names = _by_meaning(key, cls, where) or difflib.get_close_matches(
        key, [f.name for f in dataclasses.fields(cls)], n=1, cutoff=0.4)
    shown = [f"'{where}{n}'" + (f" ({MEANINGS[n]})" if n in MEANINGS else "") for n in names]
    hint = f" (did you mean {' or '.join(shown)}?)" if shown else ""
    return ConfigError(f"{where}{key}", f"unknown config key '{where}{key}'{hint}")


def _by_meaning(key: str, cls, where: str) -> list[str]:
    """The ALIASES targets of `key` that exist in section `where` (class `cls`), relative
    to it: `lora_r` is `lora.r` at the top and `r` in the lora section."""
    alias = difflib.get_close_matches(key.lower().replace("-", "_"), ALIASES, n=1, cutoff=0.85)
    found = []
    for target in ALIASES[alias[0]] if alias else ():
        name = target.removeprefix(where)
        if (not where or target.startswith(where)) and _has_key(cls, name):
            found.append(name)
    return found


def _has_key(cls, dotted: str) -> bool:
    for part in dotted.split("."):
        if not dataclasses.is_dataclass(cls):
            return False
        fields = {f.name: f for f in dataclasses.fields(cls)}
        if part not in fields:
            return False
        cls = typing.get_type_hints(cls)[part]
    return True


def config_from_dict(cls, d: Any):
    """A config dataclass `cls` (nested ones too) from a dict, each field checked against
    its annotation and unknown keys rejected by dotted name."""
    return _build(cls, d, "")


def _build(cls, d: Any, where: str):
    if isinstance(d, cls):
        return d
    name = where.rstrip(".") or "config"
    if not isinstance(d, dict):
        raise ConfigError(name, f"'{name}' must be a mapping, got {d!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in d.items():
        if key not in fields:
            raise _unknown_key(key, cls, where)
        kwargs[key] = _coerce(hints[key], value, f"{where}{key}")
    try:
        return cls(**kwargs)
    except TypeError as e:
        raise ConfigError(name, f"'{name}': {e}") from None


def check_types(obj, where: str = "") -> None:
    """Check every field of a dataclass instance (and of nested ones) against its
    annotation, converting in place where jsonargparse does ('1e-4' -> 1e-4), so that
    configs built in Python are checked like recipes."""
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        value, name = getattr(obj, f.name), f"{where}{f.name}"
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            if not isinstance(value, tp):
                raise ConfigError(name, f"'{name}' must be a {tp.__name__}, got {value!r}")
            check_types(value, name + ".")
            continue
        checked = _coerce(tp, value, name)
        if checked is not value:
            object.__setattr__(obj, f.name, checked)  # also on frozen StepFormat


def _coerce(tp, value, name: str):
    """Check a value against a field's annotation (and convert it: '1e-4' -> 1e-4)."""
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, name + ".")
    args = typing.get_args(tp)
    if value is None:
        if tp is Any or type(None) in args:
            return None
        raise ConfigError(name, f"'{name}' must be {_expected(tp)}, got null")
    bare = typing.get_origin(tp) is None and tp in (list, dict)
    if bare or tp is Any:  # Python objects (data.examples): only the container is checked
        if bare and not isinstance(value, tp):
            raise ConfigError(name, f"'{name}' must be {_expected(tp)}, got {value!r}")
        return value
    if type(value) is tp and tp in (int, float, str, bool):
        return value  # already right: no parser needed
    if typing.get_origin(tp) is Literal and value in args and isinstance(value, str):
        return value
    if typing.get_origin(tp) is list and isinstance(value, str):
        value = [value]  # `train: file.jsonl` for `train: [file.jsonl]`
    from jsonargparse import ArgumentError

    try:
        return _parser(tp).parse_object({"value": value}).value
    except (ArgumentError, TypeError, ValueError):
        raise ConfigError(name, f"'{name}' must be {_expected(tp)}, got {value!r}") from None


@functools.cache
def _parser(tp):
    """A jsonargparse parser whose one argument has the annotation `tp`."""
    from jsonargparse import ArgumentParser

    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--value", type=tp)
    return parser


_PLAIN = {float: "a number (float)", int: "an integer", bool: "true or false",
          str: "a string", list: "a list", dict: "a mapping"}


def _expected(tp) -> str:
    """How an annotation reads in an error message."""
    if tp in _PLAIN:
        return _PLAIN[tp]
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " or ".join("null" if a is type(None) else _expected(a) for a in args)
    return "of type " + re.sub(r"<class '(\w+)'>", r"\1", str(tp)).replace("typing.", "")
