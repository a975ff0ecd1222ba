"""How far a rebuilt demo base lands from the shipped one: draws of the base's recipe.

    python -m prmkit.demo.lm.base --out F1 --threads 2 --set reading.steps=0   # a first stage
    python -m prmkit.demo.lm.base --out F2 --threads 2                         # both stages
    python benchmarks/bench_base_rebuilds.py --base NAME=F1 --base NAME=F2 [--threads 2]

Measures each folder as `make check-base` does (`prmkit.demo.lm.skill.base_indicators`:
held-out step results computed exactly, per operation, and each error kind's step AUROC of
the base's own check) beside the shipped stage of the same settings, and records how it was
built (base.json: threads, bf16, build seconds) and on which CPU. A row is added per NAME
(one with the same name is replaced), so draws measured on other machines accumulate in
benchmarks/results/demo_base_rebuilds.json.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from scoring_common import cpu_model

from prmkit.demo.lm.base import SHIPPED_BASE, SHIPPED_FIRST_STAGE, base_info
from prmkit.demo.lm.skill import base_indicators

HERE = Path(__file__).resolve().parent
BUILD_FACTS = ("key", "config", "seconds", "threads", "bf16", "first_stage")


def shipped_for(info: dict) -> Path:
    """The shipped stage a built base is compared with: the one-stage (first) or the
    two-stage base, by whether its settings name a reading stage."""
    return SHIPPED_BASE if "reading" in info["config"] else SHIPPED_FIRST_STAGE


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", action="append", required=True, metavar="NAME=FOLDER")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(HERE / "results" / "demo_base_rebuilds.json"))
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    rows = json.loads(out.read_text()) if out.is_file() else {"shipped": {}, "draws": {}}
    for item in args.base:
        name, sep, folder = item.partition("=")
        if not sep or not Path(folder, "base.json").is_file():
            ap.error(f"--base {item!r}: expected NAME=FOLDER of a built base (with base.json)")
        t0 = time.perf_counter()
        info = base_info(folder)
        shipped = shipped_for(info)
        if shipped.name not in rows["shipped"]:
            rows["shipped"][shipped.name] = base_indicators(shipped)
        row = {"indicators": base_indicators(folder), "compared_with": shipped.name,
               "built": {k: info.get(k) for k in BUILD_FACTS},
               "measured_on": {"cpu": cpu_model(), "torch": torch.__version__,
                               "capability": torch.backends.cpu.get_cpu_capability()},
               "seconds": time.perf_counter() - t0}
        rows["draws"][name] = row
        out.write_text(json.dumps(rows, indent=1))
        ref = rows["shipped"][shipped.name]
        print(f"{name}: exact {row['indicators']['exact']:.4f} (shipped {ref['exact']:.4f}); "
              + "  ".join(f"{k} {v:.3f} ({ref['step_auroc'][k]:.3f})"
                          for k, v in row["indicators"]["step_auroc"].items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
