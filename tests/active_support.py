"""Helpers of the active-loop tests: two arithmetic problems and the cheapest loop config
(the tiny random Llama as generator, grader labels, two training steps)."""

from __future__ import annotations

import json
from pathlib import Path

from prmkit.active.loop_config import LoopConfig

PROBLEMS = [{"problem": "What is 2+3?", "answer": "5", "unique_id": "a"},
            {"problem": "What is 1+1?", "answer": "2", "unique_id": "b"}]


def write_problems(path: Path) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in PROBLEMS))
    return path


def loop_config(tmp_path, tiny_lm, problems, **changes) -> LoopConfig:
    d = {"problems": str(problems), "generations": 2, "output_dir": str(tmp_path / "run"),
         "generator": {"backend": "hf", "model": str(tiny_lm), "samples_per_problem": 4,
                       "max_tokens": 8, "options": {"batch_size": 8}},
         "select": {"per_problem": 2},
         "label": {"source": "grader"},
         "train_recipe": "recipes/tiny_ci.yaml",
         "train_overrides": ["max_steps=2", "data.eval_fraction=0", "save_every=0",
                             "eval_every=0", "model.step_format.max_length=128"]}
    for key, value in changes.items():
        d[key] = {**d.get(key, {}), **value} if isinstance(value, dict) else value
    return LoopConfig.from_dict(d)
