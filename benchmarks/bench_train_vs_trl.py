"""prmkit's RewardTrainer against TRL's PRMTrainer on PRM800K phase 1: the same work step
for step, and, separately, prmkit's packed throughput.

Backbone SmolLM2-135M-Instruct (cached folder), LoRA r=16 alpha=32 on every linear layer
of the decoder, batch size 4 sequences, max length 1024, the same thread count; data: the
rated candidates of the first N problems of phase1_train under the paper's policy.

1. Parity (identical work; benchmarks/trl_parity.py). TRL 1.13's PRMTrainer trains a
   seeded sample of the candidates, one sequence each; prmkit's RewardTrainer trains the
   same sequences in TRL's format and batch order, from TRL's initial LoRA adapters and
   head, with TRL's loss (every label weight 1: `label_weighting: count`; head
   formulation). Both loops are timed on that work in the dtype the CPU computes
   natively (bf16 with avx512_bf16 or amx_bf16, else fp32); the per-step losses are
   printed side by side and, in fp32, must agree within trl_parity.TOLERANCE, or the
   script fails. Where the timed dtype is bf16 (whose rounding differs between the two
   sides), the parity is checked on an fp32 run of the same work.
2. Packed throughput (not the same work). prmkit's own recipe, tree packing with the
   token formulation and `unique` label weighting, on all candidates of the N problems:
   rated candidates per second against TRL's rate in (1). It trains another objective,
   so only the rates compare.

Writes benchmarks/results/train_vs_trl.json. Run from the repository root:
    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/bench_train_vs_trl.py
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from scoring_common import cpu_model, load_average
from trl_parity import TOLERANCE, TRL_VERSION, Settings, install, parity, trl_format

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "prm800k" / "phase1_train.stepwise-critic.parquet"
RESULT = ROOT / "benchmarks" / "results" / "train_vs_trl.json"


def trl_rows(examples, tokenizer, max_length: int) -> list[dict]:
    """TRL rows of the examples whose whole TRL sequence fits in max_length."""
    from prmkit.data.stepwise import trl_row
    from prmkit.models.formatting import SegmentEncoder

    enc = SegmentEncoder(tokenizer, trl_format(tokenizer, max_length))
    rows = [trl_row(ex) for ex in examples]
    return [r for r in rows if r is not None
            and len(enc.encode(r["prompt"], r["completions"]).step_indices) == len(r["labels"])]


def packed_run(examples, s: Settings, out: str) -> dict:
    """prmkit's own recipe (token formulation, unique weighting, tree packing)."""
    from prmkit.training import RewardTrainingConfig, train

    cfg = RewardTrainingConfig.from_dict({
        "backbone": s.backbone,
        "data": {"examples": examples, "eval_fraction": 0.0},
        "model": {"step_format": {"max_length": s.max_length}},
        "lora": {"r": s.r, "alpha": s.alpha, "target_modules": s.targets},
        "lr": s.lr, "schedule": "constant", "warmup_ratio": 0.0, "epochs": 1,
        "packing": "tree", "row_tokens": s.max_length,
        # the same batch size: batch_size packed rows of up to max_length tokens
        "batch_tokens": s.batch_size * s.max_length, "max_rows": s.batch_size,
        "bf16": s.bf16, "log_every": 1, "output_dir": out, "save_merged": False,
        "progress": False, "num_threads": s.threads, "seed": 0,
    })
    res = train(cfg)
    d = res.data
    return {"seconds": res.metrics["train"]["elapsed_s"], "examples": d["train_examples"],
            "tokens": d["train_tokens"], "labels": d["train_label_sources"],
            "rows": d["train_rows"], "steps": res.steps, "label_weighting": d["label_weighting"]}


def rates(r: dict) -> dict:
    s = r["seconds"]
    return {**r, "candidates_per_s": round(r["examples"] / s, 3),
            "tokens_per_s": round(r["tokens"] / s, 1), "labels_per_s": round(r["labels"] / s, 2)}


def show(check: dict) -> None:
    print(f"per-step losses, {check['dtype']}:")
    print("step  TRL        prmkit     difference")
    for x in check["losses"]:
        print(f"{x['step']:>4}  {x['trl']:.6f}   {x['prmkit']:.6f}   {x['prmkit'] - x['trl']:+.1e}")
    verdict = {None: "not compared under bf16", True: f"equal within {TOLERANCE:g}",
               False: f"NOT EQUAL within {TOLERANCE:g}"}[check["equal"]]
    print(f"largest difference {check['max_loss_difference']:.1e}: {verdict}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", type=int, default=10)
    ap.add_argument("--sample", type=int, default=32, help="candidates for the parity runs")
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--max-length", type=int, default=1024)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1))
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    import numpy as np
    from transformers import AutoTokenizer

    from prmkit.data import apply_policy, read_records
    from prmkit.models.backbones import smollm2_folder
    from prmkit.models.precision import native_bf16
    from prmkit.training.dataset import first_problems

    install()
    load_start, t0 = load_average(), time.perf_counter()
    bf16, why = native_bf16("cpu")
    s = Settings(backbone=str(smollm2_folder()), batch_size=args.batch_size,
                 max_length=args.max_length, lr=args.lr, threads=args.threads, bf16=bf16)
    examples = first_problems(list(apply_policy(read_records(DATA))), args.problems)
    rows = trl_rows(examples, AutoTokenizer.from_pretrained(s.backbone), s.max_length)
    rng = np.random.default_rng(0)
    sample = [rows[i] for i in sorted(rng.choice(len(rows), args.sample, replace=False))]
    print(f"{len(examples)} candidates of {args.problems} problems ({len(rows)} fit whole); "
          f"parity sample {len(sample)}; compute dtype {s.dtype}: {why}")

    with tempfile.TemporaryDirectory() as tmp:
        timed = parity(sample, s, Path(tmp) / "timed")
        show(timed)
        check = timed
        if s.bf16:  # the parity in full precision
            check = parity(sample, replace(s, bf16=False), Path(tmp) / "fp32")
            show(check)
        trl, mine = rates(timed["trl"]), rates(timed["prmkit"])
        packed = rates(packed_run(examples, s, f"{tmp}/packed"))
    print(f"same work, {s.dtype}: TRL {trl['seconds']} s, prmkit {mine['seconds']} s; "
          f"prmkit packed: {packed['candidates_per_s']} candidates/s")
    result = {
        "parity": {k: v for k, v in check.items() if k not in ("trl", "prmkit")},
        "timed_losses": None if check is timed else timed["losses"],
        "same_work": {"dtype": s.dtype, "trl": trl, "prmkit": mine,
                      "speed_ratio": round(trl["seconds"] / mine["seconds"], 3)},
        "packed_throughput": {
            "note": "not the same work: prmkit's own recipe (tree packing, token "
                    "formulation, unique label weighting) on all candidates of the problems",
            "prmkit": packed,
            "candidates_per_s_ratio": round(packed["candidates_per_s"]
                                            / trl["candidates_per_s"], 3)},
        "setup": {"backbone": "SmolLM2-135M-Instruct", "problems": args.problems,
                  "candidates": len(examples), "fit_whole": len(rows), "sample": len(sample),
                  "batch_size": s.batch_size, "max_length": s.max_length, "lr": s.lr,
                  "lora": "r=16 alpha=32 on q,k,v,o,gate,up,down", "device": "cpu",
                  "dtype": s.dtype, "dtype_reason": why, "threads": s.threads,
                  "trl": f"trl {TRL_VERSION} PRMTrainer, gradient_checkpointing=False",
                  "tolerance": TOLERANCE},
        "machine": {"cpu": cpu_model(), "cpu_count": os.cpu_count(),
                    "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
                    "load_average_at_start": load_start, "load_average_at_end": load_average(),
                    "total_seconds": round(time.perf_counter() - t0, 1)},
        "command": "python benchmarks/bench_train_vs_trl.py " + " ".join(sys.argv[1:]),
    }
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    RESULT.write_text(json.dumps(result, indent=2) + "\n")
    if not check["equal"]:
        print(f"parity FAILED: see {RESULT}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
