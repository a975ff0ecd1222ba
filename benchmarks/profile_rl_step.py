"""Where a GRPO step of the demo's RL experiment spends its time, on this CPU.

    python benchmarks/profile_rl_step.py --work WORK [--reward prm_process] [--steps 5]

WORK is the RL experiment's work folder (`prmkit demo --experiment rl --out OUT` leaves it
in OUT/work): seed 0's policy and reward models are read from it, or trained there first
(about 15 minutes). Runs `--steps` GRPO steps at the experiment's settings, without its
held-out evaluations, under cProfile (one torch thread), and writes seconds per step by
part to benchmarks/results/rl_step_profile.json.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import platform
import pstats
import time
from dataclasses import replace
from pathlib import Path

from prmkit.demo.core.config import torch_settings
from prmkit.demo.recipes.rl.config import RLConfig
from prmkit.demo.recipes.rl.experiment import seed_setup
from prmkit.demo.recipes.rl.trainer import Ledger, grpo_trainer, prompt_rows

RESULTS = Path(__file__).resolve().parent / "results"
# part: (file suffix, function name) whose cumulative time it is
PARTS = {
    "generation (TRL's generate)": ("trl/trainer/grpo_trainer.py", "_generate"),
    "reward (the reward model's scoring)": ("trl/trainer/grpo_trainer.py", "_calculate_rewards"),
    "loss forward": ("trl/trainer/grpo_trainer.py", "compute_loss"),
    "backward": ("torch/autograd/__init__.py", "backward"),
    "of which gradient checkpointing's recompute": ("torch/utils/checkpoint.py", "recompute_fn"),
    "TRL's chunked log-prob buffers (torch.empty)": ("~", "<built-in method torch.empty>"),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", required=True)
    ap.add_argument("--reward", default="prm_process")
    ap.add_argument("--steps", type=int, default=5)
    args = ap.parse_args()
    cfg = replace(RLConfig(), steps=args.steps, eval_every=args.steps + 1)
    cfg.demo = replace(cfg.demo, progress=False)
    with torch_settings(1):
        s = seed_setup(0, cfg, Path(args.work))
        trainer = grpo_trainer(args.reward, cfg, s.seed, s.policy_dir,
                               prompt_rows(s.problems, cfg, s.seed), s.problems, s.prm, s.orm,
                               Path(args.work) / "profile-rl-step", Ledger())
        profile = cProfile.Profile()
        t0 = time.perf_counter()
        profile.enable()
        trainer.train()
        profile.disable()
        total = time.perf_counter() - t0
    stats = pstats.Stats(profile).stats  # (file, line, name) -> (cc, nc, tt, ct, callers)
    parts = {}
    for part, (suffix, name) in PARTS.items():
        hits = [v for (f, _, n), v in stats.items() if f.endswith(suffix) and n == name]
        parts[part] = round(sum(v[3] for v in hits) / args.steps, 3)
    out = {"command": f"python benchmarks/profile_rl_step.py --work WORK --reward {args.reward} "
                      f"--steps {args.steps}",
           "machine": f"{platform.machine()}, {__import__('os').cpu_count()} cores, one torch thread",
           "reward": args.reward, "prompts_per_step": cfg.prompts_per_step,
           "generations": cfg.generations, "seconds_per_step": round(total / args.steps, 3),
           "parts_seconds_per_step": parts}
    RESULTS.joinpath("rl_step_profile.json").write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
