"""The regime indicator of a shared base: the share of held-out step results it computes
exactly, per operation (`prmkit.demo.lm.skill`), written to base_skill.json.

    prmkit demo --experiment base-skill --base "mathmix steps=2000" --out /tmp/base
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from prmkit.demo.lm.base import base_info, resolve_base
from prmkit.demo.lm.skill import base_skill, format_skill
from prmkit.errors import PrmkitError


@dataclass
class BaseSkillConfig:
    base: str = "mathmix"  # mathmix [FIELD=VALUE ...] or a saved base folder
    seeds: tuple[int, ...] = (0,)  # whose held-out test problems the indicator reads
    test_problems: int = 120
    samples: int = 8  # the first sampled solutions of each test problem
    difficulty: str = "easy"
    progress: bool = True


Config = BaseSkillConfig


def quick(seeds: tuple[int, ...] = (0,)) -> Config:
    """Seconds-long settings (smoke tests), not a result: a few held-out solutions."""
    return BaseSkillConfig(seeds=seeds, test_problems=12, samples=1)


def run(cfg: Config, out: str | Path, work: str | Path | None = None) -> dict:
    """Build (or read from the cache) the base `cfg.base` names, then its indicator."""
    folder = resolve_base(cfg.base, progress=cfg.progress)
    if folder is None:
        raise PrmkitError("--experiment base-skill needs a shared base: --base mathmix "
                          "['FIELD=VALUE ...'] or a saved base folder")
    skill = base_skill(folder, cfg.seeds, cfg.test_problems, cfg.samples, cfg.difficulty)
    info = base_info(folder) if (folder / "base.json").is_file() else {}
    result = {"base": str(folder), "settings": info.get("config"),
              "build_seconds": info.get("seconds"), "skill": skill}
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "base_skill.json").write_text(json.dumps(result, indent=1))
    print(f"[demo] base {folder}: {format_skill(skill)}")
    return result
