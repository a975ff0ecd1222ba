"""Incremental scoring in a step-by-step search: IncrementalScorer against re-scoring
every partial solution from scratch with Scorer each round (what search-and-learn's beam
search and DVTS do).

Workload: beam search shaped like search-and-learn's (n candidates, beam width w): each
round every kept beam gets n / w one-step continuations, all n partial solutions are
scored, the w best (product of step scores) are kept. Steps are real solution steps
(ProcessBench math.json, drawn at random), so their lengths are realistic; the PRM is
SmolLM2-135M with the token formulation (an untrained "+"/"-" read-out is enough for
timing), bf16 weights, CPU. Each round both methods score the same candidate list, in
alternating order (load changes on a shared machine hit both alike), and their scores
are compared. The candidates are chosen with the incremental scores, so both methods see
the same workload. A small fp32 run first checks that both give the same scores tightly.
Writes benchmarks/results/incremental_scoring.json.
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
from prmkit.scoring import Scorer, aggregate  # noqa: E402
from prmkit.scoring.incremental import IncrementalScorer  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "processbench" / "math.json"
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "incremental_scoring.json"
BF16_TOLERANCE = 0.05  # max |P(+) difference| between the two methods in bf16 (as in
# bench_scoring_throughput.py: bf16 rounding differs with the shapes of the computation)
FP32_TOLERANCE = 1e-4


def beam_rounds(rng: random.Random, pool: list[str], n: int, width: int):
    """Generator of candidate lists; send() it the scores of the last list."""
    beams = [[]]
    while True:
        per_beam = n // len(beams)
        candidates = [b + [rng.choice(pool)] for b in beams for _ in range(per_beam)]
        scores = yield candidates
        ranked = sorted(range(len(candidates)), key=lambda i: -aggregate(scores[i], "prod"))
        beams = [candidates[i] for i in ranked[:width]]


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--n", type=int, default=16, help="candidates scored per round")
    ap.add_argument("--beam-width", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=10, help="steps per final solution")
    ap.add_argument("--problems", type=int, default=1, help="searches run side by side")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    args = ap.parse_args(argv)
    started = time.perf_counter()
    load_at_start = os.getloadavg()[0]

    data = json.loads(Path(args.data).read_text())
    rng = random.Random(args.seed)
    problems = [d["problem"] for d in rng.sample(data, args.problems)]
    pool = [s for d in data for s in d["steps"]]

    model = StepRewardModel.from_backbone("smollm2-135m", config=RewardModelConfig()).eval()

    # fp32: two rounds of a small search, both methods, tight agreement
    check = beam_rounds(random.Random(args.seed), pool, 4, 2)
    inc32, scratch32 = IncrementalScorer(model, dtype=None), Scorer(model, dtype=None)
    fp32_diff, candidates = 0.0, next(check)
    for _ in range(2):
        got = inc32.score(problems[0], candidates)
        fp32_diff = max(fp32_diff, max_diff(got, scratch32.score(
            [(problems[0], c) for c in candidates])))
        candidates = check.send(got)
    print(f"fp32 incremental vs from scratch: max |dP| = {fp32_diff:.2e}", flush=True)
    assert fp32_diff < FP32_TOLERANCE, f"fp32 scores differ by {fp32_diff}"

    model.backbone.to(torch.bfloat16)  # both methods run on the same bf16 weights
    scratch = Scorer(model, dtype="bf16")
    inc = IncrementalScorer(Scorer(model, dtype="bf16"))
    scratch.score([("Warm-up problem.", ["One step.", "Two steps."])])
    searches = [beam_rounds(random.Random(args.seed + 1 + k), pool, args.n, args.beam_width)
                for k in range(len(problems))]
    current = [next(s) for s in searches]
    t_inc = t_scratch = 0.0
    tokens_scratch, steps_scored, bf16_diff, per_round = 0, 0, 0.0, []
    for r in range(args.rounds):
        items = [(p, c) for p, cands in zip(problems, current) for c in cands]
        inc_before = inc.tokens_scored
        methods = [("inc", inc.score_many), ("scratch", scratch.score)]
        results, times = {}, {}
        for name, fn in methods[:: 1 if r % 2 == 0 else -1]:
            t = time.perf_counter()
            results[name] = fn(items)
            times[name] = time.perf_counter() - t
        t_inc += times["inc"]
        t_scratch += times["scratch"]
        diff = max_diff(results["inc"], results["scratch"])
        bf16_diff = max(bf16_diff, diff)
        run_scratch_tokens = sum(len(scratch.encode(p, c).input_ids) for p, c in items)
        tokens_scratch += run_scratch_tokens
        steps_scored += sum(len(c) for _, c in items)
        per_round.append({"steps_per_solution": r + 1,
                          "incremental_s": round(times["inc"], 3),
                          "scratch_s": round(times["scratch"], 3),
                          "incremental_tokens": inc.tokens_scored - inc_before,
                          "scratch_tokens": run_scratch_tokens,
                          "max_abs_diff": round(diff, 5)})
        print(f"round {r + 1}: incremental {times['inc']:.2f} s, from scratch "
              f"{times['scratch']:.2f} s, max |dP| {diff:.4f}", flush=True)
        by_problem = [results["inc"][k * args.n:(k + 1) * args.n] for k in range(len(problems))]
        current = [s.send(scores) for s, scores in zip(searches, by_problem)]
    assert bf16_diff < BF16_TOLERANCE, f"bf16 scores differ by {bf16_diff}"

    command = "HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_incremental_scoring.py"
    if argv:
        command += " " + " ".join(argv)
    result = {
        "ratio": round(t_scratch / t_inc, 2),
        "command": command,
        "seconds": {"incremental": round(t_inc, 2), "from_scratch": round(t_scratch, 2)},
        "tokens_run": {"incremental": inc.tokens_scored, "from_scratch": tokens_scratch},
        "token_ratio": round(tokens_scratch / inc.tokens_scored, 2),
        "workload": f"beam search, {args.n} candidates per round from {args.beam_width} "
                    f"beams, {args.rounds} rounds (one step per round), {len(problems)} "
                    "problem(s), real steps from ProcessBench math.json",
        "candidates_per_round": args.n * len(problems),
        "rounds": args.rounds,
        "steps_per_final_solution": args.rounds,
        "step_scores_returned": steps_scored,
        "prompt_tokens": [len(inc.encoder.prompt_ids(p)) for p in problems],
        "model": "smollm2-135m (token formulation, bf16 weights)",
        "max_abs_diff_bf16": round(bf16_diff, 5),
        "max_abs_diff_fp32": fp32_diff,
        "per_round": per_round,
        **machine_facts(started, load_at_start),
    }
    return write_result(args.out, result,
                        shown={k: v for k, v in result.items() if k != "per_round"})


if __name__ == "__main__":
    # run directly: take the command line; run from run_all.py: the defaults
    main(sys.argv[1:] if Path(sys.argv[0]).name == Path(__file__).name else [])
