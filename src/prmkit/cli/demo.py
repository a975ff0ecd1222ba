"""`prmkit demo`: process vs outcome supervision in a controlled world, end to end."""

from __future__ import annotations

import argparse


def register(sub) -> None:
    p = sub.add_parser("demo", help="train a PRM and an ORM in a synthetic world and compare them",
                       description=__doc__)
    p.add_argument("--out", default="demo-output", help="report folder (default: demo-output)")
    p.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (default: 0,1,2)")
    p.add_argument("--quick", action="store_true", help="a much smaller run (a smoke test)")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from prmkit.demo.run import DemoConfig, run_demo
    from prmkit.errors import PrmkitError

    try:
        seeds = tuple(int(s) for s in args.seeds.split(",") if s.strip())
    except ValueError:
        raise PrmkitError(f"--seeds must be comma-separated integers, got {args.seeds!r}") from None
    if not seeds:
        raise PrmkitError("--seeds is empty")
    cfg = DemoConfig(seeds=seeds, progress=not args.no_progress)
    if args.quick:
        cfg = DemoConfig(seeds=seeds, train_problems=40, samples_per_train_problem=4,
                         test_problems=12, samples_per_test_problem=8, pretrain_problems=100,
                         pretrain_steps=5, hidden_size=32, layers=1, reward_epochs=1.0,
                         ns=(1, 2, 4, 8), progress=not args.no_progress)
    run_demo(args.out, cfg)
    return 0
