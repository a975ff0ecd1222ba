"""Scoring throughput: prmkit's one-pass Scorer against the practical limit and a baseline.

Model: SmolLM2-135M (alias smollm2-135m) as a token-formulation PRM ("+"/"-" read from
the LM head), weights cast to bf16, CPU. Data: ProcessBench math.json problems + steps (a
seeded random sample). Three measurements:

(a) the Scorer: encoding + length-sorted token-budget batches + one forward per batch;
(b) the bare backbone forward (decoder only, no LM head) on exactly the same padded
    batches: the practical limit. (a) and (b) alternate batch by batch so that load
    changes on a shared machine hit both alike;
(c) what several public PRM scripts do: for each step i, run the causal LM (full LM head
    logits) on problem + steps[:i+1] and read the label tokens at the last position; on
    a subset, compared with Scorer.score on the same subset.

It also checks that (a) and (c) give the same per-step probabilities: within bf16
tolerance, and tightly in fp32 on two solutions. Writes
benchmarks/results/scoring_throughput.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from scoring_common import machine_facts, max_diff, write_result  # noqa: E402

from prmkit.models.config import RewardModelConfig  # noqa: E402
from prmkit.models.reward_model import StepRewardModel  # noqa: E402
from prmkit.scoring import Scorer  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "processbench" / "math.json"
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "scoring_throughput.json"
BF16_TOLERANCE = 0.05  # max |P(+) difference| between (a) and (c) in bf16
FP32_TOLERANCE = 1e-4


def prefix_probs(model: StepRewardModel, problem: str, steps: list[str],
                 tokens_run: list[int] | None = None) -> list[float | None]:
    """Baseline (c): one full causal-LM pass per step prefix, label tokens at the end."""
    label_ids = model.label_token_ids
    out = []
    for i in range(len(steps)):
        enc = model.encoder.encode(problem, steps[: i + 1])
        if len(enc.step_indices) <= i:  # cut by max_length, as in the Scorer: no score
            out.extend([None] * (len(steps) - i))
            break
        if tokens_run is not None:
            tokens_run.append(len(enc.input_ids))
        with torch.inference_mode():
            logits = model.backbone(input_ids=torch.tensor([enc.input_ids])).logits
        out.append(logits[0, -1, label_ids].float().softmax(-1)[0].item())
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--n", type=int, default=32, help="solutions for (a) and (b)")
    ap.add_argument("--prefix-n", type=int, default=4, help="solutions for (c)")
    ap.add_argument("--batch-tokens", type=int, default=16384)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    args = ap.parse_args(argv)
    started = time.perf_counter()
    load_at_start = os.getloadavg()[0]

    data = json.loads(Path(args.data).read_text())
    sample = random.Random(args.seed).sample(data, args.n + args.prefix_n)
    main_items = [(d["problem"], d["steps"]) for d in sample[: args.n]]
    prefix_items = [(d["problem"], d["steps"]) for d in sample[args.n:]]

    model = StepRewardModel.from_backbone("smollm2-135m", config=RewardModelConfig()).eval()

    # fp32 check first; then the benchmark's own model is cast to bf16 weights
    short = sorted(prefix_items, key=lambda it: len(model.encoder.encode(*it).input_ids))[:2]
    fp32_scores = Scorer(model, dtype=None).score(short)
    fp32_diff = max_diff(fp32_scores, [prefix_probs(model, p, s) for p, s in short])
    print(f"fp32 one pass vs per prefix: max |dP| = {fp32_diff:.2e}", flush=True)
    assert fp32_diff < FP32_TOLERANCE, f"fp32 one-pass scores differ by {fp32_diff}"

    model.backbone.to(torch.bfloat16)  # (a), (b) and (c) all run on bf16 weights
    scorer = Scorer(model, token_budget=args.batch_tokens, dtype="bf16")
    scorer.score([("Warm-up problem.", ["One step.", "Two steps."])])
    decoder = model.backbone.get_decoder()

    # (a) vs (b), same batches, alternating order batch by batch
    t0 = time.perf_counter()
    encoded = [scorer.encode(p, s) for p, s in main_items]
    batches = scorer.plan_batches(encoded)
    t_prep = time.perf_counter() - t0
    t_scorer = t_forward = 0.0
    for k, batch in enumerate(batches):
        def run_scorer(b=batch):
            scorer.run_batch(b)

        def run_forward(b=batch):
            with torch.inference_mode():
                decoder(input_ids=b.input_ids, attention_mask=b.attention_mask, use_cache=False)

        for name, fn in ([("a", run_scorer), ("b", run_forward)][:: 1 if k % 2 == 0 else -1]):
            t = time.perf_counter()
            fn()
            dt = time.perf_counter() - t
            if name == "a":
                t_scorer += dt
            else:
                t_forward += dt
        print(f"batch {k + 1}/{len(batches)}: {tuple(batch.input_ids.shape)}", flush=True)
    n_tokens = sum(len(e.input_ids) for e in encoded)
    padded = sum(b.input_ids.numel() for b in batches)
    tps_scorer = n_tokens / (t_prep + t_scorer)
    tps_forward = n_tokens / t_forward

    # (c) per-prefix baseline vs Scorer.score on the same subset
    t = time.perf_counter()
    subset_scores = scorer.score(prefix_items)
    t_subset = time.perf_counter() - t
    t = time.perf_counter()
    tokens_run: list[int] = []
    baseline_scores = [prefix_probs(model, p, s, tokens_run) for p, s in prefix_items]
    t_prefix = time.perf_counter() - t
    bf16_diff = max_diff(subset_scores, baseline_scores)
    subset_tokens = sum(len(scorer.encode(p, s).input_ids) for p, s in prefix_items)
    print(f"bf16 one pass vs per prefix: max |dP| = {bf16_diff:.4f}", flush=True)
    assert bf16_diff < BF16_TOLERANCE, f"bf16 one-pass scores differ by {bf16_diff}"

    command = "HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_scoring_throughput.py"
    if argv:
        command += " " + " ".join(argv)
    result = {
        "ratio_vs_forward": round(tps_scorer / tps_forward, 4),
        "ratio_vs_prefix": round(t_prefix / t_subset, 3),
        "tokens_per_s": round(tps_scorer, 1),
        "command": command,
        "tokens_per_s_forward": round(tps_forward, 1),
        "tokens_per_s_prefix": round(subset_tokens / t_prefix, 1),
        "tokens_per_s_scorer_subset": round(subset_tokens / t_subset, 1),
        "model": "smollm2-135m (token formulation, bf16 weights)",
        "data": f"{Path(args.data).name}: {args.n} solutions (seed {args.seed}); "
                f"{args.prefix_n} more for the per-prefix baseline",
        "n_solutions": args.n,
        "n_steps": sum(len(s) for _, s in main_items),
        "n_steps_cut_by_max_length": sum(len(s) - len(e.slots)
                                         for (_, s), e in zip(main_items, encoded)),
        "n_tokens": n_tokens,
        "n_batches": len(batches),
        "batch_tokens": args.batch_tokens,
        "padding_fraction": round(1 - n_tokens / padded, 4),
        "seconds": {"scorer_prep": round(t_prep, 3), "scorer_forward": round(t_scorer, 2),
                    "bare_forward": round(t_forward, 2), "scorer_subset": round(t_subset, 2),
                    "per_prefix_subset": round(t_prefix, 2)},
        "prefix_subset": {"n_solutions": args.prefix_n,
                          "n_steps": sum(len(s) for _, s in prefix_items),
                          "solution_tokens": subset_tokens,
                          "tokens_run_by_per_prefix": sum(tokens_run)},
        "max_abs_diff_bf16_vs_prefix": round(bf16_diff, 5),
        "max_abs_diff_fp32_vs_prefix": fp32_diff,
        **machine_facts(started, load_at_start),
    }
    return write_result(args.out, result)


if __name__ == "__main__":
    # run directly: take the command line; run from run_all.py: the defaults
    main(sys.argv[1:] if Path(sys.argv[0]).name == Path(__file__).name else [])
