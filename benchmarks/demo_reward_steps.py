"""How many optimizer steps the demo's reward models need: the PRM and the ORM of one seed
trained for each step count (each its own cosine schedule, `prmkit demo`'s other settings),
each evaluated on the 5% of its training problems held out by the trainer (never the test
set): held-out loss and AUROC (the PRM's over steps up to the first error, the ORM's over
solutions), and the training time.

    .venv/bin/python benchmarks/demo_reward_steps.py --kind prm [--seed 0] [--steps 100,150,200,250] [--lr 0.001]

Writes benchmarks/results/demo_reward_steps_<kind>.json (another --lr than the demo's:
demo_reward_steps_<kind>_lr<lr>.json).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from scoring_common import cpu_model, load_average

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> int:
    import torch

    from prmkit.demo import world
    from prmkit.demo.core.config import DemoConfig, torch_settings
    from prmkit.demo.core.seed import seed_world, train_reward_model
    from prmkit.demo.lm.base import resolve_base
    from prmkit.models.precision import use_bf16

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kind", choices=("prm", "orm"), required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", default="100,150,200,250")
    ap.add_argument("--lr", type=float, default=None, help="default: the demo's")
    args = ap.parse_args()
    cfg = DemoConfig(progress=False)
    demo_lr = cfg.lr
    if args.lr is not None:
        cfg = replace(cfg, lr=args.lr)
    base = resolve_base(cfg.base, progress=False)
    rows, load = [], load_average()
    with torch_settings(cfg.threads), tempfile.TemporaryDirectory() as work:
        sw = seed_world(args.seed, cfg)
        examples = world.to_step_examples(sw.splits.train, sw.train_pools, kind=args.kind,
                                          dedupe=True)
        for steps in map(int, args.steps.split(",")):
            out = Path(work) / f"{args.kind}{steps}"
            t0 = time.perf_counter()
            train_reward_model(args.kind, base, examples, out, replace(cfg, reward_steps=steps),
                               args.seed, final_eval=True)
            seconds = time.perf_counter() - t0
            lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
            held_out = [x for x in lines if x["type"] == "eval"][-1]
            rows.append({"steps": steps, "seconds": round(seconds, 1), "held_out": held_out})
            print(json.dumps(rows[-1]), flush=True)
    result = {"kind": args.kind, "seed": args.seed, "examples": len(examples),
              "batch_tokens": cfg.batch_tokens, "lr": cfg.lr, "threads": cfg.threads,
              "bf16": use_bf16("auto", "cpu"), "torch": torch.__version__,
              "cpu": cpu_model(), "load_at_start": load, "runs": rows}
    RESULTS.mkdir(exist_ok=True)
    suffix = "" if cfg.lr == demo_lr else f"_lr{cfg.lr:g}"
    path = RESULTS / f"demo_reward_steps_{args.kind}{suffix}.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
