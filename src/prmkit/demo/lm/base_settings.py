"""A shared base's settings (`BaseConfig`: MathMix, the network, its two stages) and what they
have it read: the key a base is cached under, the problems its reading stage reads
(`reading_problems`), and the settings a saved base recorded (`base_config`)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from prmkit.demo.lm.mathmix import (
    MathMixConfig,
    excluded_keys,
    extra_equations,
    mathmix_problems,
)
from prmkit.demo.settings import config_key, with_overrides

BASE_FORMAT = 1  # bump when a change of code changes what the same settings build
# the seed of a reading stage's extra problems of a shifted set: its stream is none of the
# seeds' test sets' (`shifted_problems` streams are per set and seed)
SHIFT_STREAM = 7922


@dataclass(frozen=True)
class ReadingConfig:
    """The second stage: `steps` more steps of pretraining (0: none) on the worked solutions
    (`prmkit.demo.lm.mathmix.worked_documents`) of the first `problems` MathMix problems, each
    in up to `orders` orders, at peak learning rate `lr`."""

    problems: int = 20000
    orders: int = 4
    steps: int = 4800
    lr: float = 1e-3
    seed: int = 1
    # each problem form's documents repeated until the forms hold the shares of problems the
    # world draws (`mathmix.world_mix_repeats`); False: every problem once, MathMix's own
    # mix, almost all word problems
    world_mix: bool = True
    # distinct equations (both forms) of `extra_difficulty` read beside them
    # (`mathmix.extra_equations`; the low difficulty holds few the seeds leave over)
    extra_equations: int = 0
    extra_difficulty: str = "medium"
    # problems of a set of `prmkit.demo.world.SHIFTS` read beside them (a stream of their
    # own, no key a seed may use): a base that read a change the reward models never see
    extra_shift: str = ""
    extra_shift_problems: int = 0


# reading settings added after the first reading stage, left out of a base's key at the
# values that stage had (so that bases built before them keep their keys)
LATER_READING = {"world_mix": False, "extra_equations": 0, "extra_difficulty": "medium",
                 "extra_shift": "", "extra_shift_problems": 0}


@dataclass(frozen=True)
class BaseConfig:
    mathmix: MathMixConfig = field(default_factory=MathMixConfig)
    hidden_size: int = 128
    layers: int = 4
    heads: int = 4
    vocab_size: int = 512
    steps: int = 2000
    batch_size: int = 16
    block: int = 256
    lr: float = 3e-3
    seed: int = 0
    reading: ReadingConfig = field(default_factory=ReadingConfig)

    def settings(self) -> dict:
        """The settings as base.json records them: a one-stage base's without `reading`, as
        such a base had them before the second stage existed."""
        fields = asdict(self)
        if not self.reading.steps:
            del fields["reading"]
        else:  # the key of every base built before these settings existed
            for name, before in LATER_READING.items():
                if fields["reading"][name] == before:
                    del fields["reading"][name]
        return fields

    def key(self) -> str:
        return config_key({"format": BASE_FORMAT, **self.settings()}, length=16)

    def first_stage(self) -> BaseConfig:
        return replace(self, reading=replace(self.reading, steps=0))


def reading_problems(cfg: BaseConfig) -> list:
    """Every problem the reading stage of `cfg` reads: its MathMix problems, then its extra
    equations and its extra problems of a shifted set."""
    from prmkit.demo.world import shifted_problems

    r = cfg.reading
    problems = mathmix_problems(replace(cfg.mathmix, problems=r.problems))
    if r.extra_equations:
        problems += extra_equations(cfg.mathmix, r.extra_equations, r.extra_difficulty)
    if r.extra_shift_problems:
        problems += shifted_problems(r.extra_shift, r.extra_shift_problems, seed=SHIFT_STREAM,
                                     exclude=excluded_keys(cfg.mathmix))
    return problems


def base_config(spec: str) -> BaseConfig | None:
    """The settings of the base `spec` names, without building it: a MathMix spec's, or
    those a saved base recorded (its base.json); None for `seed` and for a folder without
    that record."""
    if spec.strip() in ("", "seed"):
        return None
    name, *items = spec.split()
    if name == "mathmix":
        return with_overrides(BaseConfig(), items)
    if not (Path(spec) / "base.json").is_file():
        return None
    s = json.loads((Path(spec) / "base.json").read_text())["config"]
    reading = {**LATER_READING, **s["reading"]} if "reading" in s else {"steps": 0}
    mathmix = {k: tuple(v) if isinstance(v, list) else v for k, v in s["mathmix"].items()}
    rest = {k: v for k, v in s.items() if k not in ("mathmix", "reading")}
    return BaseConfig(mathmix=MathMixConfig(**mathmix), reading=ReadingConfig(**reading), **rest)
