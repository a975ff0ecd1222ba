"""Where a GRPO step of the demo's RL experiment spends its time, on this CPU.

    python benchmarks/profile_rl_step.py --work WORK [--reward prm_process] [--steps 5]
        [--trim-rows 0,32] [--share-prefixes 0,1] [--share-prompts 0,1]
        [--drop-ended-rows 0,1] [--rounds 2]

WORK is the RL experiment's work folder (`prmkit demo --experiment rl --out OUT` leaves it
in OUT/work): seed 0's policy and reward models are read from it, or trained there first
(about 15 minutes). Runs `--steps` GRPO steps at the experiment's settings, without its
held-out evaluations, under cProfile (one torch thread), and writes seconds per step by
part to `--results` (default benchmarks/results/rl_step_profile.json).

`--trim-rows 0,32 --rounds 2` runs the steps with each setting of the loss's trimmed
log-probability chunks (`prmkit.rewards.trl_trim`; 0: TRL's padded pass), alternating,
`--rounds` times each, from the same policy: seconds per step by part for each, and the
ratio of the medians. `--share-prefixes 0,1` does the same for the reward models' scoring
of a group's completions on its prompt's cached keys and values (1: the experiment's),
`--share-prompts 0,1` for the loss's pass with each group's prompt run once
(`TrimmedLogps.share_prompts`; 1: the experiment's), `--drop-ended-rows 0,1` for the
sampling with each completion out of the batch as it ends (`DropEndedRows`; 1: the
experiment's; 0: transformers' `generate`, the same tokens). Given several, every combination is
run; the defaults are the experiment's settings.
"""

from __future__ import annotations

import argparse
import cProfile
import itertools
import json
import os
import platform
import pstats
import statistics
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


SETTINGS = ("trim_rows", "share_prefixes", "share_prompts", "drop_ended_rows")


def profile_steps(args, cfg, s, setting: dict) -> tuple[float, dict]:
    """Seconds per step and per part of `args.steps` GRPO steps under cProfile."""
    s.prm.scorer.share_prefixes = s.orm.scorer.share_prefixes = setting["share_prefixes"]
    trainer = grpo_trainer(args.reward, cfg, s.seed, s.policy_dir,
                           prompt_rows(s.problems, cfg, s.seed), s.problems, s.prm, s.orm,
                           Path(args.work) / "profile-rl-step", Ledger())
    trainer.trim_rows, trainer.share_prompts = setting["trim_rows"], setting["share_prompts"]
    trainer.drop_ended_rows = setting["drop_ended_rows"]
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
    return round(total / args.steps, 3), parts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", required=True)
    ap.add_argument("--reward", default="prm_process")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--trim-rows", default="32", help="comma-separated settings to compare")
    ap.add_argument("--share-prefixes", default="1", help="comma-separated 0/1 to compare")
    ap.add_argument("--share-prompts", default="1", help="comma-separated 0/1 to compare")
    ap.add_argument("--drop-ended-rows", default="1", help="comma-separated 0/1 to compare")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--results", default=str(RESULTS / "rl_step_profile.json"))
    args = ap.parse_args()
    given = {"trim_rows": [int(x) for x in args.trim_rows.split(",")],
             "share_prefixes": [bool(int(x)) for x in args.share_prefixes.split(",")],
             "share_prompts": [bool(int(x)) for x in args.share_prompts.split(",")],
             "drop_ended_rows": [bool(int(x)) for x in args.drop_ended_rows.split(",")]}
    settings = [dict(zip(SETTINGS, values, strict=True))
                for values in itertools.product(*(given[k] for k in SETTINGS))]
    name = lambda st: " ".join(f"{k}={st[k]}" for k in SETTINGS)  # noqa: E731
    cfg = replace(RLConfig(), steps=args.steps, eval_every=args.steps + 1)
    cfg.demo = replace(cfg.demo, progress=False)
    runs = []
    with torch_settings(1):
        s = seed_setup(0, cfg, Path(args.work))
        for _ in range(args.rounds):
            for setting in settings:
                seconds, parts = profile_steps(args, cfg, s, setting)
                runs.append({**setting, "seconds_per_step": seconds,
                             "parts_seconds_per_step": parts})
                print(json.dumps(runs[-1]), flush=True)
    median = {name(st): statistics.median(r["seconds_per_step"] for r in runs
                                          if all(r[k] == st[k] for k in SETTINGS))
              for st in settings}
    out = {"command": f"python benchmarks/profile_rl_step.py --work WORK --reward {args.reward} "
                      f"--steps {args.steps} --trim-rows {args.trim_rows} --share-prefixes "
                      f"{args.share_prefixes} --share-prompts {args.share_prompts} --drop-ended-rows "
                      f"{args.drop_ended_rows} --rounds {args.rounds}",
           "machine": f"{_cpu()}, {os.cpu_count()} cores, one torch thread",
           "reward": args.reward, "prompts_per_step": cfg.prompts_per_step,
           "generations": cfg.generations, "median_seconds_per_step": median, "runs": runs}
    if len(settings) > 1:
        first, last = list(median.values())[0], list(median.values())[-1]
        out["ratio_first_over_last"] = round(first / last, 3)
    Path(args.results).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))
    return 0


def _cpu() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.machine()


if __name__ == "__main__":
    raise SystemExit(main())
