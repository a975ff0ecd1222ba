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
tolerance, and tightly in fp32 on two solutions.

(d) shared prompts, fp32, one thread: `Scorer(share_prefixes=True)` (each prompt run
once, its completions on its cached keys/values) against the bare forward on the padded
rows of the same solutions, side by side on three workloads: `bon`, best-of-N pools
shaped like MATH500's (a MATH500 problem of 77 to 132 prompt tokens, 16 solutions of 250
to 400 tokens: ProcessBench math steps); `grpo`, GRPO-shaped groups (8 completions of 100
to 300 tokens after a prompt of 200 to 400: an instruction, MATH500 worked examples, the
problem); `short`, where sharing cannot pay much (8 completions of 40 to 120 tokens after a
one-line prompt). Rounds alternate the two sides; wall time and the process's CPU time
are both recorded (the CPU time is the steadier on a busy machine). The bound is
tokens / (tokens - prompt tokens saved). The sharing rule's threshold is measured too: the
fixed part of a forward in tokens, and the Scorer forced to share small groups after very
short prompts against the same Scorer without sharing. `--only shared` runs (d) alone and updates its entry of the results file.

Writes benchmarks/results/scoring_throughput.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
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
from prmkit.scoring.prefix_batches import MIN_SAVED_TOKENS  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "processbench" / "math.json"
MATH500 = ROOT.parent / "shared" / "data" / "math" / "math500.jsonl"
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


def shared_workloads(model: StepRewardModel, solutions: list[list[str]], seed: int,
                     bon_problems: int, grpo_prompts: int
                     ) -> dict[str, list[list[tuple[str, list[str]]]]]:
    """Groups of (prompt, steps) per workload (see the module docstring)."""
    rng = random.Random(seed)
    enc = model.encoder
    base = len(enc.prompt_ids("x"))
    by_len: dict[int, list[list[str]]] = {}
    for steps in solutions:  # a completion's tokens do not depend on its prompt
        by_len.setdefault(len(enc.encode("x", steps).input_ids) - base, []).append(steps)

    def completions(lo: int, hi: int, n: int) -> list[list[str]]:
        pool = [s for n_tok, group in by_len.items() if lo <= n_tok <= hi for s in group]
        return [rng.choice(pool) for _ in range(n)]

    def prompts(make, lo: int, hi: int, n: int) -> list[str]:
        out: list[str] = []
        while len(out) < n:
            text = make()
            if lo <= len(enc.prompt_ids(text)) <= hi and text not in out:
                out.append(text)
        return out

    math500 = [json.loads(line) for line in MATH500.read_text().splitlines()]

    def few_shot() -> str:
        shots = "".join(f"Problem: {d['problem']}\nSolution: {d['solution']}\n\n"
                        for d in rng.sample(math500, rng.randint(1, 2)))
        return ("Solve the problem step by step; put each step on its own paragraph.\n\n"
                f"{shots}Problem: {rng.choice(math500)['problem']}")

    words = "Compute the value of the expression below and simplify it fully".split()
    return {
        "bon": [[(p, s) for s in completions(250, 400, 16)] for p in prompts(
            lambda: rng.choice(math500)["problem"], 77, 132, bon_problems)],
        "grpo": [[(p, s) for s in completions(100, 300, 8)] for p in prompts(
            few_shot, 200, 400, grpo_prompts)],
        "short": [[(p, s) for s in completions(40, 120, 8)] for p in prompts(
            lambda: " ".join(rng.sample(words, 6)) + ".", 6, 14, grpo_prompts)],
    }


def shared_prefix_run(model: StepRewardModel, rounds: list[list[tuple[str, list[str]]]],
                      batch_tokens: int) -> dict:
    """(d) on one workload: per round (one or more groups), the sharing Scorer against the
    bare decoder forward on the plain Scorer's padded batches of the same solutions."""
    plain = Scorer(model, token_budget=batch_tokens, dtype=None)
    shared = Scorer(model, token_budget=batch_tokens, dtype=None, share_prefixes=True)
    decoder = model.backbone.get_decoder()
    wall = {"shared": 0.0, "bare": 0.0}
    cpu = {"shared": 0.0, "bare": 0.0}
    ratios, got = [], []
    for k, items in enumerate(rounds):
        batches = plain.plan_batches([plain.encode(p, s) for p, s in items])

        def run_shared(items=items):
            got.extend(shared.score(items))

        def run_bare(batches=batches):
            with torch.inference_mode():
                for b in batches:
                    decoder(input_ids=b.input_ids, attention_mask=b.attention_mask,
                            use_cache=False)

        took = {}
        for name, fn in [("shared", run_shared), ("bare", run_bare)][:: 1 - 2 * (k % 2)]:
            w, c = time.perf_counter(), time.process_time()
            fn()
            wall[name] += time.perf_counter() - w
            cpu[name] += time.process_time() - c
            took[name] = time.process_time() - c
        ratios.append(took["bare"] / took["shared"])
    items = [it for r in rounds for it in r]
    encoded = [plain.encode(p, s) for p, s in items]
    tokens = sum(len(e.input_ids) for e in encoded)
    groups: dict[str, list[int]] = {}
    for (p, _), e in zip(items, encoded, strict=True):
        groups.setdefault(p, []).append(e.prompt_len)
    saved = sum((len(g) - 1) * g[0] for g in groups.values())
    prompt_tokens = sum(sum(g) for g in groups.values())
    checked = len(rounds[0])  # the first round against the plain Scorer's padded rows
    diff = max_diff(got[:checked], plain.score(items[:checked]))
    return {
        "ratio_vs_bare_forward_cpu": round(cpu["bare"] / cpu["shared"], 3),
        "ratio_vs_bare_forward_wall": round(wall["bare"] / wall["shared"], 3),
        "bound": round(tokens / (tokens - saved), 3),
        "median_round_ratio_cpu": round(statistics.median(ratios), 3),
        "round_ratios_cpu": [round(r, 3) for r in ratios],
        "groups": len(groups), "solutions": len(items), "tokens": tokens,
        "prompt_share": round(prompt_tokens / tokens, 3),
        "prompt_tokens": [min(len(model.encoder.prompt_ids(p)) for p in groups),
                          max(len(model.encoder.prompt_ids(p)) for p in groups)],
        "completion_tokens": [min(len(e.input_ids) - e.prompt_len for e in encoded),
                              max(len(e.input_ids) - e.prompt_len for e in encoded)],
        "seconds_cpu": {k: round(v, 2) for k, v in cpu.items()},
        "seconds_wall": {k: round(v, 2) for k, v in wall.items()},
        "max_abs_diff_vs_padded_rows": diff, "solutions_compared": checked,
    }


def sharing_rule_check(model: StepRewardModel, solutions: list[list[str]], seed: int,
                       repeats: int = 5) -> dict:
    """The rule's threshold: the fixed part of a forward in tokens (forwards of 4, 64 and
    256 tokens), and small groups after very short prompts, shared regardless of the rule,
    against the same Scorer without sharing (median CPU-time ratios)."""
    decoder = model.backbone.get_decoder()

    def forward_cpu(n: int) -> float:
        with torch.inference_mode():
            c = time.process_time()
            decoder(input_ids=torch.full((1, n), 100), use_cache=True)
            return time.process_time() - c

    runs: dict[int, list[float]] = {4: [], 64: [], 256: []}
    for _ in range(repeats):
        for n, took in runs.items():
            took.append(forward_cpu(n))
    t = {n: statistics.median(took) for n, took in runs.items()}
    per_token = (t[256] - t[64]) / 192
    enc = model.encoder
    base = len(enc.prompt_ids("x"))
    lengths = [len(enc.encode("x", steps).input_ids) - base for steps in solutions]
    forced = Scorer(model, dtype=None, share_prefixes=True)
    forced.min_shared_tokens = 0
    plain = Scorer(model, dtype=None)
    rng = random.Random(seed)
    cases = []
    for n, lo, hi, words in [(2, 250, 400, 1), (2, 250, 400, 12), (2, 250, 400, 40),
                             (8, 40, 120, 1), (8, 40, 120, 6), (16, 250, 400, 1)]:
        pool = [s for s, n_tok in zip(solutions, lengths, strict=True) if lo <= n_tok <= hi]
        prompt = " ".join(["Compute"] * words)
        items = [(prompt, rng.choice(pool)) for _ in range(n)]
        ratios = []
        for k in range(repeats):
            took = {}
            for name, scorer in [("shared", forced), ("plain", plain)][:: 1 - 2 * (k % 2)]:
                c = time.process_time()
                scorer.score(items)
                took[name] = time.process_time() - c
            ratios.append(took["plain"] / took["shared"])
        p = len(enc.prompt_ids(prompt))
        cases.append({"completions": n, "completion_tokens": [lo, hi], "prompt_tokens": p,
                      "saved_tokens": (n - 1) * p, "shared_by_rule": (n - 1) * p
                      >= MIN_SAVED_TOKENS, "ratio_cpu": round(statistics.median(ratios), 3)})
        print(f"rule check: {cases[-1]}", flush=True)
    return {"forward_seconds_cpu": {n: round(v, 4) for n, v in t.items()},
            "seconds_per_token_cpu": round(per_token, 5),
            "fixed_part_of_a_forward_in_tokens": round(t[4] / per_token - 4, 1),
            "forced_sharing_vs_none": cases}


def shared_prefix_benchmark(args) -> dict:
    """(d): the three workloads on SmolLM2-135M in fp32 on one thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = StepRewardModel.from_backbone("smollm2-135m", config=RewardModelConfig()).eval()
        solutions = [d["steps"] for d in json.loads(Path(args.data).read_text())]
        loads = [os.getloadavg()[0]]
        work = shared_workloads(model, solutions, args.seed, args.bon_problems, args.grpo_prompts)
        Scorer(model, dtype=None, share_prefixes=True).score(work["short"][0][:2])  # warm-up
        out = {}
        for name, groups in work.items():
            per_round = 1 if name == "bon" else 2
            rounds = [sum(groups[i: i + per_round], []) for i in range(0, len(groups), per_round)]
            out[name] = shared_prefix_run(model, rounds, args.batch_tokens)
            loads.append(os.getloadavg()[0])
            print(f"shared prompts, {name}: {out[name]['ratio_vs_bare_forward_cpu']}x the bare "
                  f"forward (CPU time; bound {out[name]['bound']}x)", flush=True)
        out["rule_check"] = sharing_rule_check(model, solutions, args.seed)
        loads.append(os.getloadavg()[0])
    finally:
        torch.set_num_threads(threads)
    return {"model": "smollm2-135m (token formulation, fp32)", "torch_threads": 1,
            "min_shared_tokens": MIN_SAVED_TOKENS,
            "load_average_1min": [round(x, 2) for x in loads], **out}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--n", type=int, default=32, help="solutions for (a) and (b)")
    ap.add_argument("--prefix-n", type=int, default=4, help="solutions for (c)")
    ap.add_argument("--batch-tokens", type=int, default=16384)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bon-problems", type=int, default=6, help="(d): pools of 16")
    ap.add_argument("--grpo-prompts", type=int, default=12, help="(d): groups of 8")
    ap.add_argument("--only", choices=["all", "shared"], default="all")
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    args = ap.parse_args(argv)
    started = time.perf_counter()
    load_at_start = os.getloadavg()[0]
    command = "HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_scoring_throughput.py"
    if argv:
        command += " " + " ".join(argv)
    if args.only == "shared":
        result = json.loads(Path(args.out).read_text()) if Path(args.out).is_file() else {}
        result["shared_prefixes"] = {**shared_prefix_benchmark(args), "command": command,
                                     **machine_facts(started, load_at_start)}
        return write_result(args.out, result, result["shared_prefixes"])

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

    shared = {**shared_prefix_benchmark(args), "command": command}
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
        "shared_prefixes": shared,
    }
    return write_result(args.out, result)


if __name__ == "__main__":
    # run directly: take the command line; run from run_all.py: the defaults
    main(sys.argv[1:] if Path(sys.argv[0]).name == Path(__file__).name else [])
