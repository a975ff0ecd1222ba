"""`prmkit demo`: process vs outcome supervision in a controlled world, end to end.

`--experiment synthetic|active|all` runs the paper's small-scale experiments instead:
small reward models supervised by the demo's PRM (synthetic supervision) and labelled
samples chosen by a selector PRM (active learning); reports under OUT/synthetic and
OUT/active, trained models cached under OUT/work (the demo's PRM is reused from there).
"""

from __future__ import annotations

import argparse


def register(sub) -> None:
    p = sub.add_parser("demo", help="train a PRM and an ORM in a synthetic world and compare them",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="demo-output", help="report folder (default: demo-output)")
    p.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (default: 0,1,2)")
    p.add_argument("--experiment", choices=["synthetic", "active", "all"], default=None,
                   help="the paper's small-scale experiments instead of the main demo")
    p.add_argument("--quick", action="store_true", help="a much smaller run (a smoke test)")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from prmkit.errors import PrmkitError

    try:
        seeds = tuple(int(s) for s in args.seeds.split(",") if s.strip())
    except ValueError:
        raise PrmkitError(f"--seeds must be comma-separated integers, got {args.seeds!r}") from None
    if not seeds:
        raise PrmkitError("--seeds is empty")
    if args.experiment:
        from dataclasses import replace

        from prmkit.demo.active_experiment import run_active
        from prmkit.demo.small_scale import SmallScaleConfig, quick_small_scale
        from prmkit.demo.synthetic_experiment import run_synthetic

        cfg = quick_small_scale(seeds) if args.quick else SmallScaleConfig(seeds=seeds)
        cfg = replace(cfg, progress=not args.no_progress)
        out = Path(args.out)
        if args.experiment in ("synthetic", "all"):
            run_synthetic(out / "synthetic", cfg, out / "work")
        if args.experiment in ("active", "all"):
            run_active(out / "active", cfg, out / "work")
        return 0
    from prmkit.demo.run import DemoConfig, quick_config, run_demo

    cfg = quick_config(seeds) if args.quick else DemoConfig(seeds=seeds)
    cfg.progress = not args.no_progress
    run_demo(args.out, cfg)
    return 0
