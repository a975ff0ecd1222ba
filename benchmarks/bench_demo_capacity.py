"""The capacity figure: best-of-64 (PRM, ORM, majority vote) against the shared base's skill.

    python benchmarks/bench_demo_capacity.py                      # every point, 3 seeds
    python benchmarks/bench_demo_capacity.py --fractions 0,1 &    # two processes of one
    python benchmarks/bench_demo_capacity.py --fractions 0.25,0.5 # thread each share the work
    python benchmarks/bench_demo_capacity.py                      # then: reads both, writes

`prmkit demo --experiment capacity` with the demo's settings at one torch thread per
process. Each (base, seed) result is cached under WORK, so processes given different
fractions share the work and a last run over every fraction only reads and writes
benchmarks/results/demo_capacity.json and .png.
"""

from __future__ import annotations

import argparse
import shutil
from dataclasses import replace
from pathlib import Path

from prmkit.demo.core.config import DemoConfig
from prmkit.demo.recipes.capacity import CapacityConfig
from prmkit.demo.recipes.capacity import run as run_capacity

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--fractions", default=None,
                    help="comma-separated fractions of the default base budget "
                    f"(default: {','.join(map(str, CapacityConfig().fractions))})")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--work", default="/tmp/prmkit-capacity")
    args = ap.parse_args(argv)
    cfg = CapacityConfig(demo=DemoConfig(seeds=tuple(int(s) for s in args.seeds.split(",")),
                                         threads=args.threads, progress=False))
    if args.fractions:
        cfg = replace(cfg, fractions=tuple(float(f) for f in args.fractions.split(",")))
    out = Path(args.work) / "out"
    result = run_capacity(cfg, out, work=Path(args.work))
    if args.fractions is None:
        results = HERE / "results"
        shutil.copy(out / "capacity.json", results / "demo_capacity.json")
        shutil.copy(out / "capacity.png", results / "demo_capacity.png")
        print(f"-> {results / 'demo_capacity.json'} ({result['seconds']:.0f} s in this run)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
