"""The paper's small-scale experiments in the demo world: synthetic supervision (Figure 4)
and active learning (Figure 5), 3 seeds.

    python benchmarks/bench_active_world.py [--work demo-output/work] [--seeds 0 1 2]

PRM_large is the demo's PRM of each seed, loaded from --work/seed{s}/prm/model (as
`make demo` leaves it) or trained there as the demo does. Small models, scores and
selections are cached under --work, so a stopped run resumes; after each seed the results
so far are written (their "seeds" says how many), so a partial run still reports.

Writes benchmarks/results/synthetic_supervision.json, active_learning.json and their plots
(synthetic_by_size.png, synthetic_by_n.png, active_learning.png); the HTML reports go to
--reports (default demo-output/synthetic and demo-output/active).
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path

from scoring_common import load_average

from prmkit.demo.core.small_scale import SmallScaleConfig
from prmkit.demo.recipes import active, synthetic

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"


def main(argv: list[str] | None = None) -> int:
    d = SmallScaleConfig()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", default="demo-output/work")
    ap.add_argument("--reports", default="demo-output")
    ap.add_argument("--seeds", type=int, nargs="+", default=list(d.seeds))
    ap.add_argument("--problems", type=int, default=d.problems)
    ap.add_argument("--pool-size", type=int, default=d.pool_size)
    ap.add_argument("--sizes", type=int, nargs="+", default=list(d.sizes))
    ap.add_argument("--small-steps", type=int, default=d.small_steps)
    ap.add_argument("--test-samples", type=int, default=d.test_samples)
    ap.add_argument("--threshold", type=float, default=d.threshold,
                    help="PRM_large's threshold (default: chosen on the dev problems)")
    ap.add_argument("--selector-problems", type=int, default=d.selector_problems,
                    help="fresh problems the active-learning selector learns from (0: the "
                         "small models' own, one sample each)")
    ap.add_argument("--suffix", default="",
                    help="appended to the names of the results files and plots (variants)")
    argv = sys.argv[1:] if argv is None else argv
    args = ap.parse_args(argv)
    cfg = SmallScaleConfig(problems=args.problems, pool_size=args.pool_size,
                           sizes=tuple(args.sizes), small_steps=args.small_steps,
                           test_samples=args.test_samples, threshold=args.threshold,
                           selector_problems=args.selector_problems, progress=False)
    command = "python benchmarks/bench_active_world.py " + " ".join(argv)
    t0 = time.perf_counter()
    reports, work = Path(args.reports), Path(args.work)
    for k in range(1, len(args.seeds) + 1):
        run = replace(cfg, seeds=tuple(args.seeds[:k]))
        meta = {"command": command.strip(), "machine": f"{platform.machine()}, "
                f"{__import__('os').cpu_count()} cores, torch threads {cfg.demo.threads}"}
        for name, runner, plots in (
                ("synthetic_supervision", synthetic.run, ("synthetic_by_size", "synthetic_by_n")),
                ("active_learning", active.run, ("active_learning",))):
            folder = reports / (name.split("_")[0] + args.suffix)
            summary = runner(run, folder, work)
            summary["meta"] = {**meta, "wall_seconds_so_far": round(time.perf_counter() - t0, 1),
                               "load_average_at_write": load_average()}
            (RESULTS / f"{name}{args.suffix}.json").write_text(json.dumps(summary, indent=1) + "\n")
            for p in plots:
                shutil.copyfile(folder / f"{p}.png", RESULTS / f"{p}{args.suffix}.png")
    for name in ("synthetic_supervision", "active_learning"):  # both experiments, every seed
        path = RESULTS / f"{name}{args.suffix}.json"
        summary = json.loads(path.read_text())
        summary["meta"]["wall_seconds_full_run"] = round(time.perf_counter() - t0, 1)
        path.write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
