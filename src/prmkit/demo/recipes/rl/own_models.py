"""Reward models that know the policy's own mistakes: a PRM and an ORM trained, as the demo
trains its own (`core.seed.train_reward_model`, the same base and settings), on solutions
the fine-tuned policy samples for training problems, labelled by the checker.

The demo's reward models learn the scripted solver's mistakes; a policy's are its own, and
a reward that cannot rank the policy's samples has nothing to teach it (Lightman et al.
train their PRM on the generator's own samples for the same reason). The folder counts as
built once its `models.json` is written, last.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

from prmkit.demo import world
from prmkit.demo.core.seed import train_reward_model
from prmkit.demo.lm.policy import policy_sampler, sample, solution_steps

DONE = "models.json"


def own_reward_models(seed: int, cfg, problems, backbone_dir: Path, policy_dir: Path,
                      folder: Path) -> tuple[Path, Path]:
    """(PRM, ORM) folders trained on `cfg.own_samples` policy samples for each of the first
    `cfg.own_problems` of `problems`; read back when `folder` holds them."""
    folder = Path(folder)
    if not (folder / DONE).is_file():
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        print(f"[rl] seed {seed}: PRM and ORM on {min(len(problems), cfg.own_problems)} x "
              f"{cfg.own_samples} of the policy's own samples", flush=True)
        chosen, pools, drawn = own_pools(seed, cfg, problems, policy_dir)
        info: dict = {"problems": len(chosen), "samples": drawn,
                      "final_correct": float(np.mean([
                          world.check_solution(p, s).final_correct
                          for p, pool in zip(chosen, pools) for s in pool] or [0.0]))}
        for kind in ("prm", "orm"):
            examples = world.to_step_examples(chosen, pools, kind=kind, dedupe=True)
            train_reward_model(kind, backbone_dir, examples, folder / kind, cfg.demo, seed)
            info[f"{kind}_examples"] = len(examples)
        (folder / DONE).write_text(json.dumps(info))
    return folder / "prm" / "model", folder / "orm" / "model"


def own_pools(seed: int, cfg, problems, policy_dir: Path) -> tuple[list, list, int]:
    """The first `cfg.own_problems` of `problems`, the steps of `cfg.own_samples` policy
    samples of each (those with steps), and how many samples were drawn."""
    chosen = list(problems[: cfg.own_problems])
    drawn = sample(policy_sampler(policy_dir), chosen, cfg.own_samples, cfg.temperature,
                   cfg.max_completion, seed + 3)
    pools = [[s for s in (solution_steps(text) for text, _ in pool) if s] for pool in drawn]
    return chosen, pools, sum(len(p) for p in drawn)


def models_info(folder: Path) -> dict:
    return json.loads((Path(folder) / DONE).read_text())
