"""Reading stages side by side: build each variant of the demo base's second stage from the
shipped first stage, then check it per kind of first error and per problem form on held-out
problems (`bench_demo_base_check.py --seeds ... --samples ...`'s `step` check).

    python benchmarks/sweep_reading_stages.py --out DIR [--device cuda] [--parallel 8] \\
        --variant shipped= --variant "level2=reading.extra_equations=6000;reading.extra_difficulty=2"

Each variant (NAME=SET;SET..., the `--set` items of `python -m prmkit.demo.lm.base`) runs in
a process of its own, `--parallel` at a time, and writes DIR/NAME/base (the model) and
DIR/NAME/check.json (settings, build seconds, `step_auroc`, `step_auroc_by_form` and
`by_level`, the lowest cell). DIR/sweep.json gathers them. fp32 unless `--bf16`. On a GPU a
build is another draw of its recipe than on a CPU (float rounding): a variant chosen here is
rebuilt by its command where it ships, and checked again there.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent


def lowest_cell(by_form: dict) -> float:
    return min(v for cells in by_form.values() for v in cells.values() if v is not None)


def run_one(name: str, sets: list[str], out: Path, device: str, bf16: bool, seeds: list[int],
            samples: int, threads: int) -> dict:
    from bench_demo_base_check import check_report, pooled_test_sets

    from prmkit.demo.lm.base import BaseConfig, build_base
    from prmkit.demo.settings import with_overrides
    from prmkit.models.backbones import load_backbone

    torch.set_num_threads(threads)
    cfg = with_overrides(BaseConfig(), sets)
    folder = out / name / "base"
    t0 = time.perf_counter()
    if not (folder / "base.json").is_file():
        build_base(cfg, folder, progress=False, device=device, bf16=bf16)
    built = time.perf_counter() - t0
    model, tokenizer = load_backbone(str(folder))
    model.to(device)
    report = check_report(model, tokenizer, *pooled_test_sets(seeds, samples), "step")
    row = {"name": name, "sets": sets, "device": device, "bf16": bf16, "seeds": seeds,
           "samples": samples, "build_seconds": built,
           "build_info": json.loads((folder / "base.json").read_text()),
           "step_auroc": report["step_auroc"], "step_auroc_by_form": report["step_auroc_by_form"],
           "wrong_steps_by_form": report["wrong_steps_by_form"], "by_level": report["by_level"],
           "lowest_cell": lowest_cell(report["step_auroc_by_form"]),
           "seconds": time.perf_counter() - t0}
    (out / name / "check.json").write_text(json.dumps(row, indent=1))
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=SET;SET")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--parallel", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1, help="per variant")
    ap.add_argument("--seeds", default="3,4,5,6,7,8")
    ap.add_argument("--samples", type=int, default=32)
    ap.add_argument("--one", help=argparse.SUPPRESS)  # a child process: this variant only
    args = ap.parse_args(argv)
    out = Path(args.out)
    seeds = [int(s) for s in args.seeds.split(",")]
    variants = {}
    for item in args.variant:
        name, sep, sets = item.partition("=")
        variants[name] = [s for s in sets.split(";") if s]
        if not sep or not re.fullmatch(r"[\w-]+", name) or any(
                "=" not in s for s in variants[name]):
            ap.error(f"--variant {item!r}: expected NAME=SET;SET (NAME= for the defaults)")
    if args.one:
        run_one(args.one, variants[args.one], out, args.device, args.bf16, seeds, args.samples,
                args.threads)
        return 0
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    common = [f"--out={out}", f"--device={args.device}", f"--threads={args.threads}",
              f"--seeds={args.seeds}", f"--samples={args.samples}",
              *(["--bf16"] if args.bf16 else []), *(f"--variant={v}" for v in args.variant)]
    running: list[tuple[str, subprocess.Popen, object]] = []
    failed, done = [], 0
    for name in [*variants, None]:
        while running and (len(running) >= args.parallel or name is None):
            for item in list(running):
                if item[1].poll() is not None:
                    running.remove(item)
                    item[2].close()
                    done += 1
                    if item[1].returncode:
                        failed.append(item[0])
                    print(f"[{done}/{len(variants)}] {item[0]}: "
                          f"{'failed' if item[1].returncode else 'checked'} after "
                          f"{time.perf_counter() - t0:.0f} s", flush=True)
            time.sleep(1)
        if name is not None:
            (out / name).mkdir(exist_ok=True)
            log = open(out / name / "log.txt", "w")
            running.append((name, subprocess.Popen(
                [sys.executable, __file__, *common, f"--one={name}"], stdout=log, stderr=log),
                log))
    rows = [json.loads((out / n / "check.json").read_text()) for n in variants
            if (out / n / "check.json").is_file()]
    (out / "sweep.json").write_text(json.dumps(
        {"command": " ".join(sys.argv), "seconds": time.perf_counter() - t0,
         "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
         "failed": failed, "variants": rows}, indent=1))
    for r in sorted(rows, key=lambda r: -r["lowest_cell"]):
        cells = "  ".join(f"{f}: " + "/".join("-" if v is None else f"{v:.3f}" for v in c.values())
                          for f, c in r["step_auroc_by_form"].items())
        print(f"{r['name']:14s} lowest {r['lowest_cell']:.3f}  build {r['build_seconds']:.0f}s  {cells}")
    for name in failed:
        print(f"{name}: failed, see {out / name / 'log.txt'}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
