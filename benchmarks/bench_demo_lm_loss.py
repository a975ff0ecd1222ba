"""Reward models that keep some language-modelling loss, on the shared MathMix base.

    OMP_NUM_THREADS=1 python benchmarks/bench_demo_lm_loss.py --weight 1.0 [--weight 0 ...]

Per weight: seed 0 of the demo (`DemoConfig(seeds=(0,), base=..., threads=1,
lm_loss_weight=w)`, through `prmkit.demo.recipes.prm_vs_orm.run`), then the regime indicator of the
trained PRM's and ORM's own backbones (`prmkit.demo.lm.skill.step_result_skill` on the
held-out text): how much of the base's skill each reward model kept. One row per weight in
benchmarks/results/demo_lm_loss.json (a row of the same weight and base is replaced).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

import torch

from prmkit.demo.core.config import DemoConfig
from prmkit.demo.core.seed import seed_models
from prmkit.demo.lm.skill import heldout_text, step_result_skill
from prmkit.demo.recipes.prm_vs_orm import run as run_demo
from prmkit.models.backbones import load_backbone

HERE = Path(__file__).resolve().parent


def kept_skill(model_dir: Path, text) -> float:
    model, tokenizer = load_backbone(str(model_dir))
    return step_result_skill(model, tokenizer, *text)["all"]["exact"]


def one_weight(weight: float, base: str, out: Path) -> dict:
    cfg = replace(DemoConfig(seeds=(0,), base=base, threads=1, progress=False),
                  lm_loss_weight=weight)
    t0 = time.perf_counter()
    s = run_demo(cfg, out)
    seconds = time.perf_counter() - t0
    text = heldout_text()
    models = seed_models(0, cfg, out / "work")  # read back: the run just trained them
    kinds = s["error_kinds"]
    row = {"base": base, "seed": 0, "lm_loss_weight": weight, "n": s["n"],
           "prm": s["prm"], "orm": s["orm"], "majority": s["majority"],
           "step_auroc": s["step_auroc"], "first_error_f1": s["first_error_f1"],
           "error_kinds": kinds, "seconds": round(seconds, 1),
           "kept_skill": {"prm": kept_skill(models.prm_dir, text),
                          "orm": kept_skill(models.orm_dir, text)}}
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--weight", type=float, action="append", required=True)
    ap.add_argument("--base", default="mathmix steps=2000")
    ap.add_argument("--work", default="demo-lm-loss-output")
    ap.add_argument("--out", default=str(HERE / "results" / "demo_lm_loss.json"))
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    out = Path(args.out)
    for w in args.weight:
        row = one_weight(w, args.base, Path(args.work) / f"w{w:g}")
        rows = json.loads(out.read_text()) if out.exists() else []
        rows = [r for r in rows if (r["lm_loss_weight"], r["base"]) != (w, args.base)] + [row]
        out.write_text(json.dumps(rows, indent=1) + "\n")
        print(f"[lm-loss] weight {w:g}: best-of-64 PRM {row['prm'][-1]:.3f} ORM "
              f"{row['orm'][-1]:.3f} majority {row['majority'][-1]:.3f}, step AUROC "
              f"{row['step_auroc']:.3f}, kept skill {row['kept_skill']} "
              f"({row['seconds']:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
