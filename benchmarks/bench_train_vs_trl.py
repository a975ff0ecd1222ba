"""prmkit's RewardTrainer against TRL's PRMTrainer, side by side, on PRM800K phase 1.

Same backbone (SmolLM2-135M-Instruct, cached folder), same data (the first N problems of
phase1_train; every rated candidate after its kept prefix, the paper's supervision),
same LoRA (r=16, alpha=32, every linear layer of the decoder), same batch size (sequences) and max
length, bf16 autocast on CPU, same thread count. Three runs:

- TRL PRMTrainer (trl 1.13.0, in its own venv) on a seeded sample of the candidates,
  one sequence per candidate;
- prmkit on the same sample without packing (identical sequences: tokens/s measures
  the trainer's own overhead);
- prmkit with prefix-tree packing on all candidates of the N problems (rated
  candidates per second is the figure of merit).

Writes benchmarks/results/train_vs_trl.json. Run from the repository root:
    .venv/bin/python benchmarks/bench_train_vs_trl.py
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "prm800k" / "phase1_train.stepwise-critic.parquet"
VENV = ROOT / ".bench-venv-trl"
RESULT = ROOT / "benchmarks" / "results" / "train_vs_trl.json"
# every linear layer of the decoder (what "all-linear" selects on a causal LM); named
# explicitly because "all-linear" on a token-classification model also hits its head
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]

TRL_CHILD = r'''
import json, sys, time
import torch
cfg = json.loads(sys.argv[1])
torch.set_num_threads(cfg["threads"])
from datasets import Dataset
from peft import LoraConfig
from transformers import AutoModelForTokenClassification, AutoTokenizer, TrainerCallback
from trl.experimental.prm import PRMConfig, PRMTrainer

rows = [json.loads(line) for line in open(cfg["data"])]
tok = AutoTokenizer.from_pretrained(cfg["backbone"])
if tok.pad_token is None:
    tok.pad_token = tok.eos_token
torch.manual_seed(0)
model = AutoModelForTokenClassification.from_pretrained(cfg["backbone"], num_labels=2,
                                                        dtype=torch.float32)
model.config.pad_token_id = tok.pad_token_id
args = PRMConfig(output_dir=cfg["out"], use_cpu=True, bf16=True,
                 per_device_train_batch_size=cfg["batch_size"], num_train_epochs=1,
                 learning_rate=cfg["lr"], lr_scheduler_type="constant",
                 max_length=cfg["max_length"],
                 step_separator="\n\n", gradient_checkpointing=False,
                 report_to="none", save_strategy="no", logging_steps=10,
                 dataloader_num_workers=0, seed=0, disable_tqdm=True)
lora = LoraConfig(task_type="TOKEN_CLS", r=cfg["r"], lora_alpha=cfg["alpha"],
                  lora_dropout=0.0, target_modules=cfg["targets"])
class StepTimes(TrainerCallback):
    times = []
    def on_step_end(self, args, state, control, **kw):
        self.times.append(time.perf_counter())
trainer = PRMTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows),
                     processing_class=tok, peft_config=lora, callbacks=[StepTimes()])
tokens = sum(len(x) for x in trainer.train_dataset["input_ids"])
labels = sum(sum(1 for v in x if v != -100) for x in trainer.train_dataset["labels"])
t0 = time.perf_counter()
out = trainer.train()
wall = time.perf_counter() - t0
print("RESULT " + json.dumps({"seconds": wall, "train_runtime": out.metrics["train_runtime"],
      "examples": len(rows), "tokens": tokens, "labels": labels,
      "steps": out.global_step, "loss": out.training_loss,
      "first_step_s": StepTimes.times[0] - t0 if StepTimes.times else None}))
'''


def ensure_venv() -> Path:
    py = VENV / "bin" / "python"
    ok = py.is_file() and subprocess.run(
        [str(py), "-c", "import trl.experimental.prm"], capture_output=True).returncode == 0
    if ok:
        return py
    print(f"creating {VENV} (torch 2.13.0, transformers 5.23.0, peft 0.21.2, trl 1.13.0)")
    pip = [str(VENV / "bin" / "pip"), "install", "-q", "--disable-pip-version-check"]
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    subprocess.run([*pip, "torch==2.13.0"], check=True)
    subprocess.run([*pip, "-c", str(ROOT / "constraints.txt"), "transformers==5.23.0",
                    "peft==0.21.2", "accelerate==1.15.0", "datasets==5.2.0"], check=True)
    subprocess.run([*pip, "--no-deps", "trl==1.13.0"], check=True)
    return py


def run_trl(py: Path, rows: list[dict], args, backbone: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "train.jsonl"
        data.write_text("".join(json.dumps(r) + "\n" for r in rows))
        cfg = {"data": str(data), "backbone": backbone, "out": str(Path(tmp) / "out"),
               "batch_size": args.batch_size, "max_length": args.max_length, "lr": args.lr,
               "r": 16, "alpha": 32, "targets": LORA_TARGETS, "threads": args.threads}
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        proc = subprocess.run([str(py), "-c", TRL_CHILD, json.dumps(cfg)], capture_output=True,
                              text=True, env=env)
        if proc.returncode != 0:
            raise SystemExit(f"TRL run failed:\n{proc.stderr[-4000:]}")
        line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
        return json.loads(line[len("RESULT "):])


def run_prmkit(examples, args, packing: str, out: str) -> dict:
    import torch

    from prmkit.training import RewardTrainingConfig, train

    torch.set_num_threads(args.threads)
    cfg = RewardTrainingConfig.from_dict({
        "backbone": "smollm2-135m",
        "data": {"examples": examples, "eval_fraction": 0.0},
        "model": {"step_format": {"max_length": args.max_length}},
        "lora": {"r": 16, "alpha": 32, "target_modules": LORA_TARGETS},
        "lr": args.lr, "schedule": "constant", "warmup_ratio": 0.0, "epochs": 1,
        "packing": packing, "row_tokens": args.max_length,
        # same batch size: batch_size sequences (or packed rows) of up to max_length tokens
        "batch_tokens": args.batch_size * args.max_length, "max_rows": args.batch_size,
        "bf16": True, "log_every": 1, "output_dir": out, "progress": False,
        "num_threads": args.threads, "seed": 0,
    })
    t0 = time.perf_counter()
    res = train(cfg)
    total = time.perf_counter() - t0
    loop = res.metrics["train"]["elapsed_s"]
    logs = [json.loads(x) for x in (Path(out) / "metrics.jsonl").read_text().splitlines()]
    first = next(m["elapsed_s"] for m in logs if m.get("type") == "train")
    d = res.data
    return {"seconds": loop, "seconds_with_setup_and_save": round(total, 2),
            "examples": d["train_examples"], "tokens": d["train_tokens"],
            "labels": d["train_label_sources"], "rows": d["train_rows"], "steps": res.steps,
            "packing": d["packing"], "loss": res.metrics["train"]["loss"],
            "first_step_s": first}


def rates(r: dict) -> dict:
    s = r["seconds"]
    return {**r, "candidates_per_s": round(r["examples"] / s, 3),
            "tokens_per_s": round(r["tokens"] / s, 1), "labels_per_s": round(r["labels"] / s, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", type=int, default=10)
    ap.add_argument("--sample", type=int, default=32, help="candidates for the unpacked runs")
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--max-length", type=int, default=1024)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1))
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    import numpy as np

    from prmkit.data import apply_policy, read_records
    from prmkit.data.stepwise import trl_row
    from prmkit.models.backbones import smollm2_folder
    from prmkit.models.formatting import SegmentEncoder, StepFormat
    from prmkit.training.dataset import first_problems

    py = ensure_venv()
    backbone = str(smollm2_folder())
    examples = first_problems(list(apply_policy(read_records(DATA))), args.problems)
    from transformers import AutoTokenizer

    enc = SegmentEncoder(AutoTokenizer.from_pretrained(backbone),
                         StepFormat(max_length=args.max_length))
    # keep candidates whose whole path fits, so both trainers see identical sequences
    fits = [ex for ex in examples
            if len(enc.encode(ex.problem, ex.steps).step_indices) == len(ex.steps)]
    rng = np.random.default_rng(0)
    sample = [fits[i] for i in sorted(rng.choice(len(fits), args.sample, replace=False))]
    trl_rows = [trl_row(ex) for ex in sample]
    assert all(r is not None for r in trl_rows)

    print(f"{len(fits)} candidates of {args.problems} problems; unpacked sample {len(sample)}")
    with tempfile.TemporaryDirectory() as tmp:
        trl = rates(run_trl(py, trl_rows, args, backbone))
        print("trl", json.dumps(trl))
        plain = rates(run_prmkit(sample, args, "none", f"{tmp}/plain"))
        print("prmkit unpacked", json.dumps(plain))
        packed = rates(run_prmkit(fits, args, "tree", f"{tmp}/packed"))
        print("prmkit packed", json.dumps(packed))
    result = {
        "ratio": round(packed["candidates_per_s"] / trl["candidates_per_s"], 3),
        "tokens_ratio": round(plain["tokens_per_s"] / trl["tokens_per_s"], 3),
        "prmkit": {"packed": packed, "unpacked": plain},
        "trl": trl,
        "setup": {"backbone": "SmolLM2-135M-Instruct", "problems": args.problems,
                  "candidates": len(fits), "sample": len(sample), "batch_size": args.batch_size,
                  "max_length": args.max_length, "lora": "r=16 alpha=32 on q,k,v,o,gate,up,down",
                  "bf16": True, "device": "cpu", "threads": args.threads,
                  "trl": "trl 1.13.0 PRMTrainer, gradient_checkpointing=False"},
        "command": "python benchmarks/bench_train_vs_trl.py " + " ".join(sys.argv[1:]),
    }
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    RESULT.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("ratio", "tokens_ratio")}))


if __name__ == "__main__":
    main()
