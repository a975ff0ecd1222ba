"""MATH500 with SmolLM2-135M-Instruct sampled through vLLM: pass@k and majority vote.

Step 1 runs the CLI (`prmkit generate --backend vllm`, resumable: run it again after a stop
and it continues the file); answers are graded there with prmkit.grading. Step 2 reads the
file and computes the curves with `prmkit.evaluation.bon.bon_curves` (pass@k exact;
majority vote over answer classes clustered by prmkit.grading, Monte Carlo) for
k = 1, 2, 4, 8, 16. There is no reward model here, so no best-of-N column.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/math500_sampling.py
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
MATH500 = HERE.parent.parent / "shared" / "data" / "math" / "math500.jsonl"


def generate(args) -> float:
    cmd = [str(Path(sys.executable).with_name("prmkit")), "generate", "--backend", "vllm",
           "--model", "smollm2-135m", "--problems", str(MATH500), "--limit", str(args.problems),
           "--n", str(args.n), "--temperature", str(args.temperature),
           "--max-tokens", str(args.max_tokens), "--prompt-format", "chat",
           "--dtype", "auto", "--max-model-len", "2048", "--seed", "0",
           "--chunk-size", str(args.chunk_size), "--no-progress", "--resume",
           "-o", str(args.samples)]
    print(" ".join(cmd), flush=True)
    start = time.perf_counter()
    subprocess.run(cmd, check=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    return time.perf_counter() - start


def curves(args) -> dict:
    import numpy as np

    from prmkit.evaluation.bon import ProblemPool, bon_curves
    from prmkit.evaluation.samples import group_samples, read_samples
    from prmkit.selection.vote import AnswerClusterer

    samples = read_samples(args.samples)
    groups = group_samples(samples)
    clusterer = AnswerClusterer()  # prmkit.grading equivalence
    pools = []
    for gid, group in groups.items():
        answered = [s for s in group if s.answer is not None]
        pools.append(ProblemPool(
            scores=np.zeros(len(answered)),  # no reward model: every sample ties
            correct=np.array([s.record.get("is_correct") is True for s in answered], dtype=bool),
            clusters=np.array(clusterer.cluster([s.answer for s in answered]), dtype=np.int64),
            n_slots=len(group), problem_id=gid))
    ks = [k for k in (1, 2, 4, 8, 16) if k <= args.n]
    c = bon_curves(pools, ks, votes=("majority",), trials=args.trials, seed=0)
    records = [s.record for s in samples]
    tokens = [r["num_tokens"] for r in records]
    return {
        "k": ks,
        "pass_at_k": [round(x, 4) for x in c.accuracy["pass"]],
        "majority_at_k": [round(x, 4) for x in c.accuracy["majority"]],
        "majority_std_over_trials": [round(x, 4) for x in c.std["majority"]],
        "mean_sample_accuracy": round(float(np.mean([r.get("is_correct") is True
                                                     for r in records])), 4),
        "problems": len(groups),
        "samples": len(records),
        "samples_per_problem": sorted(Counter(len(g) for g in groups.values()).items()),
        "samples_without_answer": sum(r.get("answer") is None for r in records),
        "samples_grader_undecided": sum(r.get("is_correct") is None and r.get("answer")
                                        is not None for r in records),
        "problems_solved_by_any_sample": sum(bool(p.correct.any()) for p in pools),
        "generated_tokens": sum(tokens),
        "mean_tokens_per_sample": round(sum(tokens) / len(tokens), 1),
        "cut_at_max_tokens": sum(r["finish_reason"] == "length" for r in records),
        "estimators": c.estimator,
        "majority_trials": args.trials,
        "generated_by": records[0]["generated_by"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", type=int, default=100, help="the first K MATH500 problems")
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=384)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--chunk-size", type=int, default=128)
    ap.add_argument("--trials", type=int, default=400, help="majority-vote Monte Carlo trials")
    ap.add_argument("--samples", type=Path, default=Path("/tmp/prmkit-math500/smollm2_vllm.jsonl"),
                    help="the samples file (outside the repository; resumed when present)")
    ap.add_argument("--skip-generate", action="store_true", help="only compute the curves")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "math500_sampling.json")
    args = ap.parse_args()
    args.samples.parent.mkdir(parents=True, exist_ok=True)
    wall = None if args.skip_generate else generate(args)
    result = curves(args)
    result["generate_wall_s_this_run"] = None if wall is None else round(wall, 1)
    result["command"] = "python benchmarks/math500_sampling.py " + " ".join(sys.argv[1:])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("k", "pass_at_k", "majority_at_k",
                                             "mean_sample_accuracy")}))


if __name__ == "__main__":
    main()
