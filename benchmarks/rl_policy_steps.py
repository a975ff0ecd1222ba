"""The RL experiment's regime check on the policy alone: its sampled accuracy on training
prompts against the length of its fine-tuning, for one seed, before any reward model.

    python benchmarks/rl_policy_steps.py --work OUT/work --seed 0 --steps 30,40,50,60

Each policy is fine-tuned as `prmkit demo --experiment rl --set policy.steps=N` fine-tunes
it (the seed's base and correct worked solutions, `prmkit.demo.lm.policy.train_policy`),
cached under WORK/rl/seed<s>/ by the same key, and measured as the experiment's start
point measures it (`train_prompt_accuracy`: `RLConfig.check_problems` training prompts,
4 samples each, the RL temperature). The band the experiment needs is 30-60%; this says
where each length falls, on training prompts only.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

from prmkit.demo.core.seed import seed_backbone, seed_world
from prmkit.demo.lm.policy import policy_rows, policy_sampler, train_policy
from prmkit.demo.recipes.rl import RLConfig
from prmkit.demo.recipes.rl.eval import prompt_accuracy


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", required=True, help="the RL experiment's work folder")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", default="30,40,50,60", help="fine-tuning lengths to measure")
    args = ap.parse_args(argv)
    import torch

    base = RLConfig()
    torch.set_num_threads(base.demo.threads)  # as the experiment's seed processes run
    sw = seed_world(args.seed, base.demo)
    backbone = seed_backbone(args.seed, base.demo, Path(args.work), sw)
    rows = policy_rows(sw.splits.train, sw.train_pools)
    out = {"seed": args.seed, "band": [0.3, 0.6], "steps": {}}
    for steps in (int(s) for s in args.steps.split(",")):
        cfg = replace(base, policy=replace(base.policy, steps=steps))
        t0 = time.perf_counter()
        folder = train_policy(backbone, rows, Path(args.work) / "rl" / f"seed{args.seed}" /
                              f"policy-{cfg.policy_key()}", cfg.policy, args.seed)
        acc = prompt_accuracy(policy_sampler(folder), sw.splits.train[: cfg.check_problems],
                              cfg, args.seed)
        out["steps"][steps] = acc
        print(f"policy.steps={steps}: {100 * acc:.1f}% of {cfg.check_problems} training "
              f"prompts ({time.perf_counter() - t0:.0f} s)", flush=True)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
