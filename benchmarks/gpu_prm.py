"""A real PRM where compute is not the limit: SmolLM2-135M on all of PRM800K phase-1 train
on one GPU, ProcessBench, training and scoring MFU, and the reward server on the GPU.

One script, run end to end inside a time budget (a lent GPU gives minutes, not hours);
each stage writes its figures to OUT/gpu_prm.json as soon as it ends, a stage that would
not fit in what is left is recorded as skipped (a full run is shortened to the epochs
that fit, and says so), and a stage that fails records its error and the next one runs:

1. learning-rate probes: short full fine-tuning runs on 90% of phase-1 train's problems,
   the rate chosen by step AUROC on the other 10% (never on a test set);
2. full fine-tuning for `--epochs` on all of phase-1 train at the chosen rate, from
   `recipes/prm800k_phase1_smollm2_prm_gpu.yaml` (bf16 autocast, tree-packed rows), step
   AUROC on phase-1 test at the end;
3. ProcessBench (all 3,400 items) with that model: F1 at threshold 0.5, and at a
   threshold chosen on a seeded 20% of every subset (F1 on the rest), as
   `eval_trained_prm.py` reports it;
4. training tokens/s and MFU for a 1B-shaped Llama (random weights, a few optimizer steps
   on the same rows), sdpa attention with tree masks;
5. the same probes and run for LoRA on every layer; ProcessBench again if its phase-1
   test AUROC is higher;
6. `bench_reward_server.py` on the GPU with the fully fine-tuned PRM.

    python benchmarks/gpu_prm.py --out OUT [--data DIR] [--gguf FILE] [--budget-s 555]
    python benchmarks/gpu_prm.py --out /tmp/q --quick      # the same path, tiny, on a CPU

MFU counts model FLOPs per token as 6 N + 6 L d T for training and 2 N + 2 L d T for
scoring (N: parameters outside the embedding, which the token formulation never
multiplies in full; L layers, width d, T the packed row length, causal attention), over
a dense bf16 peak of 989 TFLOP/s for an H100 or H200 (SXM).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from eval_trained_prm import interleaved, processbench_results  # noqa: E402

from prmkit.data.io import cache_dir, iter_jsonl  # noqa: E402
from prmkit.evaluation import processbench as pb  # noqa: E402
from prmkit.scoring import Scorer  # noqa: E402
from prmkit.training import RewardTrainingConfig, train  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RECIPE = ROOT / "recipes" / "prm800k_phase1_smollm2_prm_gpu.yaml"
PEAK_BF16_FLOPS = 989e12  # H100 / H200 SXM, dense bf16
SHAPE_1B = {"hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
            "num_attention_heads": 32, "num_key_value_heads": 8}  # Llama-3.2-1B's shape


class Budget:
    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()


def guarded(report: Report, name: str, fn, *a):
    """Run a stage; an error is recorded as the stage's result and the next stage runs."""
    try:
        return fn(*a)
    except Exception as e:  # noqa: BLE001 - a GPU lease is short: keep the other stages
        import traceback

        traceback.print_exc()
        report.stage(name + "_error", {"error": f"{type(e).__name__}: {e}"[:2000]})
        return None


class Report:
    """The results file, rewritten after every stage (a stopped run keeps what it did)."""

    def __init__(self, path: Path, header: dict):
        self.path, self.data = path, header | {"stages": {}}
        self.save()

    def stage(self, name: str, result: dict) -> dict:
        self.data["stages"][name] = result
        self.save()
        print(f"[{name}] {json.dumps(result)[:600]}", flush=True)
        return result

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(self.data, indent=2) + "\n")


def model_shape(folder: Path) -> dict:
    cfg = json.loads((folder / "config.json").read_text())
    cfg = cfg.get("backbone_config", cfg)
    return {k: cfg[k] for k in ("hidden_size", "num_hidden_layers")}


def flops_per_token(non_embedding: int, layers: int, width: int, row: int, train: bool) -> float:
    """Model FLOPs per token: matrices 2 N forward, attention 2 x 2 d per earlier position
    (T / 2 on average under a causal mask) per layer; training is three passes."""
    return (6 if train else 2) * (non_embedding + layers * width * row)


def non_embedding_params(model) -> int:
    emb = model.backbone.get_input_embeddings().weight.numel()
    return sum(p.numel() for p in model.backbone.parameters()) - emb


def run_config(args, out: Path, overrides: list[str]) -> RewardTrainingConfig:
    data = args.data
    base = [f"backbone={args.backbone}", f"output_dir={out}",
            f"data.train=[{data}/prm800k/phase1_train.stepwise-critic.parquet]",
            f"data.eval=[{data}/prm800k/phase1_test.stepwise-critic.parquet]",
            f"data.policy.holdout_path={data}/math/math500.jsonl",
            f"batch_tokens={args.batch_tokens}", f"row_tokens={args.row_tokens}",
            "progress=false"]
    if args.quick:
        base += ["data.max_problems=12", "eval_max_examples=40"]
    if not torch.cuda.is_available():
        base += ["bf16=false"]  # bf16 is emulated on many CPUs: the quick path in fp32
    return RewardTrainingConfig.from_yaml(args.recipe, base + overrides)


def train_run(args, name: str, overrides: list[str]) -> dict:
    out = args.work / name
    shutil.rmtree(out, ignore_errors=True)
    cfg = run_config(args, out, overrides)
    t0 = time.perf_counter()
    result = train(cfg)
    wall = time.perf_counter() - t0
    records = [r for _, r in iter_jsonl(out / "metrics.jsonl")]
    tps = [r["tokens_per_s"] for r in records if r.get("type") == "train" and "tokens_per_s" in r]
    ev = [r for r in records if r.get("type") == "eval"]
    steady = float(np.median(tps[1:] if len(tps) > 2 else tps)) if tps else None
    return {"overrides": overrides, "steps": result.steps, "wall_s": round(wall, 1),
            "tokens_per_s": steady, "tokens_per_s_windows": tps,
            "eval": ev[-1] if ev else None, "train_last": result.metrics,
            "packed_tokens": result.data.get("train_tokens"),
            "steps_per_epoch": result.data.get("steps_per_epoch"), "model_dir": str(result.model_dir),
            "seconds_per_step": round(wall / max(1, result.steps), 3)}


def add_mfu(run: dict, model_dir: Path, row: int) -> dict:
    from prmkit.models.reward_model import StepRewardModel

    shape = model_shape(model_dir)
    model = StepRewardModel.from_pretrained(model_dir)
    n = non_embedding_params(model)
    del model
    fpt = flops_per_token(n, shape["num_hidden_layers"], shape["hidden_size"], row, train=True)
    run["non_embedding_params"] = n
    if run.get("tokens_per_s"):
        run["train_mfu"] = run["tokens_per_s"] * fpt / PEAK_BF16_FLOPS
    return run


def probes(args, report: Report, budget: Budget, kind: str, lrs: list[float],
           extra: list[str]) -> float | None:
    """Short runs on 90% of phase-1 train's problems, chosen by AUROC on the other 10%."""
    found = {}
    for lr in lrs:
        if budget.left() < args.reserve_s:
            found[str(lr)] = {"skipped": "time"}
            continue
        run = train_run(args, f"probe-{kind}-{lr:g}",
                        extra + [f"lr={lr}", f"max_steps={args.probe_steps}", "data.eval=[]",
                                 "data.eval_fraction=0.1", "save_every=0"])
        found[str(lr)] = run
        report.stage(f"probe_{kind}", {"lrs": found})
    scored = {lr: r["eval"]["eval_auroc"] for lr, r in found.items()
              if r.get("eval") and r["eval"].get("eval_auroc") is not None}
    chosen = float(max(scored, key=scored.get)) if scored else None
    report.stage(f"probe_{kind}", {"lrs": found, "chosen_lr": chosen,
                                   "rule": "highest step AUROC on the held-out 10% of "
                                           "phase-1 train's problems"})
    return chosen


def full_run(args, report: Report, budget: Budget, kind: str, lr: float, extra: list[str],
             probe_name: str) -> dict | None:
    probe = report.data["stages"].get(probe_name, {}).get("lrs", {}).get(str(lr), {})
    planned = args.epochs
    if probe.get("tokens_per_s") and probe.get("packed_tokens"):
        # fit the epochs into what is left: the probe's speed over all the problems (it
        # trained on 90%), plus its own time outside the training steps
        per_epoch = probe["packed_tokens"] / 0.9 / probe["tokens_per_s"]
        fixed = probe["wall_s"] - args.probe_steps * args.batch_tokens / probe["tokens_per_s"]
        left = budget.left() - args.reserve_s - max(0.0, fixed)
        planned = min(args.epochs, max(0.0, left / per_epoch))
    if planned < args.min_epochs:
        return report.stage(kind, {"skipped": "time", "epochs_affordable": planned})
    run = train_run(args, kind, extra + [f"lr={lr}", f"epochs={planned:.3g}"])
    run["epochs"] = round(planned, 3)
    add_mfu(run, Path(run["model_dir"]), args.row_tokens)
    return report.stage(kind, run)


def processbench_stage(args, report: Report, name: str, model_dir: Path) -> dict:
    items = pb.load_processbench(Path(args.data) / "processbench")
    if args.quick:
        items = pb.limit_items(items, 200)
    flat = interleaved(items)
    scorer = Scorer.from_pretrained(model_dir, token_budget=args.score_tokens)
    tokens = sum(len(scorer.encode(it.problem, it.steps).input_ids) for it in flat)
    scorer.score(flat[:32])  # warm-up
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    got = scorer.score(flat)
    seconds = time.perf_counter() - t0
    scores = {it.id: s for it, s in zip(flat, got, strict=True)}
    result = processbench_results(items, scores, 0.5, 0.2)
    shape = model_shape(model_dir)
    model = scorer.model
    n = non_embedding_params(model)
    fpt = flops_per_token(n, shape["num_hidden_layers"], shape["hidden_size"],
                          args.row_tokens, train=False)
    result |= {"model_dir": str(model_dir), "seconds": round(seconds, 1),
               "tokens": tokens, "tokens_per_s": round(tokens / seconds, 1),
               "solutions_per_s": round(len(flat) / seconds, 1),
               "score_mfu": tokens / seconds * fpt / PEAK_BF16_FLOPS,
               "truncated_steps": sum(v is None for s in got for v in s),
               "token_budget": args.score_tokens}
    return report.stage(name, result)


def random_1b(args, folder: Path) -> Path:
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from prmkit.models.backbones import smollm2_folder, tiny_random

    if args.quick:
        _, tok = tiny_random()
        shape = {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
                 "num_attention_heads": 4, "num_key_value_heads": 2}
    else:
        tok = AutoTokenizer.from_pretrained(smollm2_folder())
        shape = SHAPE_1B
    config = LlamaConfig(vocab_size=len(tok), max_position_embeddings=8192,
                         tie_word_embeddings=True, bos_token_id=tok.bos_token_id,
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, **shape)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def mfu_1b_stage(args, report: Report) -> dict:
    folder = random_1b(args, args.work / "llama-1b-random")
    run = train_run(args, "train-1b", [f"backbone={folder}", "lora.enabled=false",
                                       f"max_steps={args.mfu_steps}", "final_eval=false",
                                       "log_every=2", "lr=1e-5", "save_merged=true"])
    add_mfu(run, Path(run["model_dir"]), args.row_tokens)
    run["shape"] = SHAPE_1B if not args.quick else "tiny (quick)"
    return report.stage("mfu_1b_train", run)


def server_stage(args, report: Report, budget: Budget, model_dir: Path) -> dict:
    out = args.out / "reward_server_gpu.json"
    cmd = [sys.executable, str(HERE / "bench_reward_server.py"), "--model", str(model_dir),
           "--device", "cuda" if torch.cuda.is_available() else "cpu", "--out", str(out)]
    if args.quick:
        cmd += ["--clients", "1", "2", "--rounds", "1"]
    else:
        cmd += ["--rounds", "2", "--threads", "4"]
    try:
        proc = subprocess.run(cmd, timeout=max(10, budget.left() - 15), text=True,
                              capture_output=True)
        tail = (proc.stdout + proc.stderr)[-3000:]
        result = {"rc": proc.returncode, "log_tail": tail}
    except subprocess.TimeoutExpired as e:
        result = {"rc": "timeout", "log_tail": str(e.stdout or "")[-3000:]}
    if out.is_file():
        result["result"] = json.loads(out.read_text())
    return report.stage("reward_server", result)


def convert(gguf: Path) -> None:
    from prmkit.models.backbones import convert_gguf

    folder = cache_dir() / "smollm2-135m"
    if not (folder / "model.safetensors").is_file():
        convert_gguf(gguf.parent, gguf.name, folder)


def machine() -> dict:
    facts = {"torch": torch.__version__, "cuda": torch.version.cuda}
    if torch.cuda.is_available():
        facts["gpu"] = torch.cuda.get_device_name(0)
        facts["gpu_memory_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30)
    facts["cpu_count"] = os.cpu_count()
    return facts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--work", type=Path, help="runs' folders (default OUT/../gpu_prm_work)")
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"),
                    help="a folder laid out as ../shared/data: prm800k/phase1_{train,test}."
                         "stepwise-critic.parquet, math/math500.jsonl, processbench/")
    ap.add_argument("--gguf", type=Path, help="SmolLM2-135M-Instruct GGUF to convert first")
    ap.add_argument("--recipe", default=str(RECIPE))
    ap.add_argument("--backbone", help="default smollm2-135m (--quick: tiny-random)")
    ap.add_argument("--budget-s", type=float, default=520)
    ap.add_argument("--reserve-s", type=float, default=60,
                    help="what a stage must leave for the ones after it")
    ap.add_argument("--full-lrs", type=float, nargs="+", default=[1e-5, 3e-5, 1e-4])
    ap.add_argument("--lora-lrs", type=float, nargs="+", default=[1e-4, 3e-4, 1e-3])
    ap.add_argument("--probe-steps", type=int, default=40)
    ap.add_argument("--epochs", type=float, default=2.0)
    ap.add_argument("--min-epochs", type=float, default=0.5)
    ap.add_argument("--batch-tokens", type=int, default=16384)
    ap.add_argument("--row-tokens", type=int, default=2048)
    ap.add_argument("--score-tokens", type=int, default=65536)
    ap.add_argument("--mfu-steps", type=int, default=12)
    ap.add_argument("--stages", nargs="+", default=["full", "processbench", "mfu_1b", "lora",
                                                     "server"])
    ap.add_argument("--quick", action="store_true", help="tiny model and data: the path only")
    args = ap.parse_args()
    if args.quick:
        args.probe_steps, args.epochs, args.min_epochs = 2, 1, 0.1
        args.full_lrs, args.lora_lrs, args.mfu_steps = [1e-4, 1e-3], [1e-3], 3
        args.batch_tokens = args.row_tokens = 2048
    args.backbone = args.backbone or ("tiny-random" if args.quick else "smollm2-135m")
    args.work = args.work or args.out.parent / "gpu_prm_work"
    budget = Budget(args.budget_s)
    if args.gguf:
        convert(args.gguf)
    report = Report(args.out / "gpu_prm.json", {
        "command": " ".join(["python benchmarks/gpu_prm.py", *sys.argv[1:]]),
        "machine": machine(), "quick": args.quick, "peak_bf16_flops": PEAK_BF16_FLOPS,
        "budget_s": args.budget_s})
    full_extra = ["lora.enabled=false"]
    lora_extra = ["lora.enabled=true", "lora.top_k_layers=null"]
    best = None
    if "full" in args.stages:
        lr = guarded(report, "probe_full", probes, args, report, budget, "full", args.full_lrs,
                     full_extra)
        if lr is not None:
            best = guarded(report, "full", full_run, args, report, budget, "full", lr,
                           full_extra, "probe_full")
    if "processbench" in args.stages and best and best.get("model_dir") \
            and budget.left() > args.reserve_s:
        guarded(report, "processbench_full", processbench_stage, args, report,
                "processbench_full", Path(best["model_dir"]))
    if "mfu_1b" in args.stages and budget.left() > args.reserve_s:
        guarded(report, "mfu_1b_train", mfu_1b_stage, args, report)
    if "lora" in args.stages and budget.left() > 2 * args.reserve_s:
        lr = guarded(report, "probe_lora", probes, args, report, budget, "lora", args.lora_lrs,
                     lora_extra)
        lora = guarded(report, "lora", full_run, args, report, budget, "lora", lr, lora_extra,
                       "probe_lora") if lr is not None else None
        better = (lora and lora.get("eval") and best and best.get("eval")
                  and lora["eval"]["eval_auroc"] > best["eval"]["eval_auroc"])
        if better and budget.left() > args.reserve_s:
            guarded(report, "processbench_lora", processbench_stage, args, report,
                    "processbench_lora", Path(lora["model_dir"]))
    if "server" in args.stages and best and best.get("model_dir") and budget.left() > 30:
        guarded(report, "reward_server", server_stage, args, report, budget,
                Path(best["model_dir"]))
    report.data["seconds_left"] = round(budget.left(), 1)
    report.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
