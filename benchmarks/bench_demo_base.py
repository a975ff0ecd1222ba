"""The regime indicator of MathMix base models: share of held-out step results computed exactly.

    python benchmarks/bench_demo_base.py --config "steps=2000" --config "steps=8000 layers=8" \
        [--device cpu|cuda] [--out benchmarks/results/demo_base_skill.json]

Each --config is a space-separated list of BaseConfig overrides (`steps=4000`,
`hidden_size=256`, `mathmix.fact_alpha=0`, `mathmix.fact_format=lsd`, ...). Every base is
built once into the demo-base cache (prmkit.demo.lm.base) and measured on the held-out text of
`prmkit.demo.lm.skill.heldout_text` (the first 8 samples of each of seed 0's 120 test
problems). One row per configuration is appended to --out as soon as it is measured (a row
with the same key is replaced), so a stopped sweep keeps what it measured. Wall time and
the machine's load are recorded: build times on a shared CPU are upper bounds.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch
from scoring_common import load_average

from prmkit.demo.lm.base import BaseConfig, base_folder, base_info
from prmkit.demo.lm.mathmix import build_mathmix
from prmkit.demo.lm.skill import format_skill, heldout_text, step_result_skill, table_coverage
from prmkit.demo.settings import with_overrides
from prmkit.models.backbones import load_backbone

HERE = Path(__file__).resolve().parent


def measure(cfg: BaseConfig, device: str, heldout) -> dict:
    t0 = time.perf_counter()
    folder = base_folder(cfg, progress=False, device=device)
    info = base_info(folder)
    model, tokenizer = load_backbone(str(folder))
    model.to(device)
    skill = step_result_skill(model, tokenizer, *heldout, device=device)
    table = build_mathmix(cfg.mathmix).table  # both stages': the reading stage adds no facts
    return {"key": cfg.key(), "config": info["config"], "build_seconds": info["seconds"],
            "built_on": info["device"], "threads": info["threads"], "lm_loss": info["lm_loss"],
            "distinct_facts": len(table), "skill": skill,
            "table_coverage": table_coverage(table, *heldout),
            "wall_seconds": time.perf_counter() - t0, "load": load_average()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", action="append", default=[],
                    help="space-separated BaseConfig overrides (repeat for a sweep)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=str(HERE / "results" / "demo_base_skill.json"))
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    configs = args.config or [""]
    heldout = heldout_text()
    out = Path(args.out)
    for text in configs:
        cfg = with_overrides(BaseConfig(), text.split())
        row = measure(cfg, args.device, heldout)
        row.update(overrides=text, machine=platform.processor() or platform.machine(),
                   device_name=(torch.cuda.get_device_name() if args.device.startswith("cuda")
                                else f"cpu, {args.threads} thread(s)"))
        rows = json.loads(out.read_text())["rows"] if out.exists() else []
        rows = [r for r in rows if r["key"] != row["key"]] + [row]
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"rows": rows}, indent=1))
        print(f"[{text or 'defaults'}] {format_skill(row['skill'])}; built in "
              f"{row['build_seconds']:.0f} s on {row['device_name']}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
