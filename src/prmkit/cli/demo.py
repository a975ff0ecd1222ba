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
    from prmkit.demo.run import DemoConfig, quick_config, run_demo
    from prmkit.errors import PrmkitError

    try:
        seeds = tuple(int(s) for s in args.seeds.split(",") if s.strip())
    except ValueError:
        raise PrmkitError(f"--seeds must be comma-separated integers, got {args.seeds!r}") from None
    if not seeds:
        raise PrmkitError("--seeds is empty")
    cfg = quick_config(seeds) if args.quick else DemoConfig(seeds=seeds)
    cfg.progress = not args.no_progress
    run_demo(args.out, cfg)
    return 0
