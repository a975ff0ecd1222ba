"""RL with process rewards in the demo world: the full experiment, its figures and its time.

    python benchmarks/bench_rl_world.py [--seeds 0,1,2] [--work rl-world-output/work] \
        [--set steps=30 ...] [--quick]

Runs `prmkit.demo.recipes.rl.run` (the same as `prmkit demo --experiment rl`) and
copies rl_world.json and rl_world.png into benchmarks/results/, with the wall time, the
machine's load before and after, the torch threads and the CPU count added to the JSON.
Each (seed, reward) is cached under --work: a stopped run started again resumes there.
--set overrides a field of RLConfig (`steps=60`, `lr=1e-4`, `eval_every=5`, ...).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path

from scoring_common import load_average

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    from prmkit.demo.recipes.rl import RLConfig, quick, run
    from prmkit.demo.settings import with_overrides

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--out", default="rl-world-output", help="report folder")
    ap.add_argument("--work", default=None, help="cache folder (default: OUT/work)")
    ap.add_argument("--results", default=str(HERE / "results"),
                    help="where rl_world.json and rl_world.png are copied")
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE")
    ap.add_argument("--quick", action="store_true", help="the smoke-test settings")
    args = ap.parse_args(argv)
    seeds = tuple(int(s) for s in args.seeds.split(",") if s.strip())
    cfg = quick(seeds) if args.quick else RLConfig()
    cfg = with_overrides(replace(cfg, demo=replace(cfg.demo, seeds=seeds, progress=False)),
                         args.set)
    out = Path(args.out)
    load_before, t0 = load_average(), time.perf_counter()
    result = run(cfg, out, args.work or out / "work")
    result.update(wall_seconds=time.perf_counter() - t0, load_before=load_before,
                  load_after=load_average(), cpus=os.cpu_count(), threads=cfg.demo.threads,
                  command=" ".join(["python benchmarks/bench_rl_world.py",
                                    *(sys.argv[1:] if argv is None else argv)]))
    results = Path(args.results)
    results.mkdir(parents=True, exist_ok=True)
    (results / "rl_world.json").write_text(json.dumps(result, indent=1) + "\n")
    shutil.copyfile(out / "rl_world.png", results / "rl_world.png")
    print(f"{results / 'rl_world.json'}: {result['wall_seconds']:.0f} s wall, load "
          f"{load_before} -> {result['load_after']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
