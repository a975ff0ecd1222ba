"""Best-of-N evaluation time: exact estimator vs the paper's 400-trial protocol.

Synthetic pool shaped like the released one: 500 problems, up to 1,860 scored samples each
(some discarded, so pools are padded back to 1,860), N = 1, 2, 4, ..., 1024, 1860.
The baseline follows OpenAI's released script with numpy: per trial, per N, per problem,
shuffle the padded pool, keep the first N real samples, pick the top score.

Writes benchmarks/results/bon_speed.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from prmkit.data.io import atomic_write
from prmkit.evaluation.bon import ProblemPool, bon_exact, default_ns, simulate

HERE = Path(__file__).resolve().parent


def synthetic_pools(problems: int, pool_size: int, seed: int) -> list[ProblemPool]:
    rng = np.random.default_rng(seed)
    pools = []
    for i in range(problems):
        m = int(rng.integers(int(0.8 * pool_size), pool_size + 1))
        difficulty = rng.random()
        correct = rng.random(m) < difficulty
        # Correct samples score higher on average; 3 decimals give realistic ties.
        scores = np.round(np.clip(rng.normal(0.35 + 0.3 * correct, 0.2), 0, 1), 3)
        pools.append(ProblemPool(scores, correct, problem_id=str(i)))
    return pools


def paper_protocol(pools, ns, pool_size: int, trials: int, seed: int) -> np.ndarray:
    """Mean accuracy per N over `trials` random trials, as in the released eval script."""
    rng = np.random.default_rng(seed)
    acc = np.zeros((trials, len(ns)))
    for t in tqdm(range(trials), desc="paper protocol", unit="trial"):
        for j, n in enumerate(ns):
            solved = 0
            for pool in pools:
                drawn = rng.permutation(pool_size)[:n]
                real = drawn[drawn < len(pool.scores)]  # slots past the samples are padding
                if real.size:
                    # argmax takes the first maximum in shuffled order: random among ties
                    solved += pool.correct[real[np.argmax(pool.scores[real])]]
            acc[t, j] = solved / len(pools)
    return acc.mean(axis=0)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--problems", type=int, default=500)
    p.add_argument("--pool-size", type=int, default=1860)
    p.add_argument("--trials", type=int, default=400)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--with-vectorised", action="store_true",
                   help="also time prmkit's vectorised trials estimator")
    p.add_argument("--out", default=str(HERE / "results" / "bon_speed.json"))
    args = p.parse_args(argv)

    pools = synthetic_pools(args.problems, args.pool_size, args.seed)
    ns = default_ns(args.pool_size)

    t0 = time.perf_counter()
    exact = bon_exact(pools, ns, args.pool_size)
    exact_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    trials_mean = paper_protocol(pools, ns, args.pool_size, args.trials, args.seed)
    trials_s = time.perf_counter() - t0

    result = {
        "ratio": trials_s / exact_s,
        "exact_s": exact_s,
        "trials_s": trials_s,
        "max_abs_diff": float(np.max(np.abs(exact - trials_mean))),
        "problems": args.problems,
        "pool_size": args.pool_size,
        "trials": args.trials,
        "n": ns,
        "exact": exact.tolist(),
        "trials_mean": trials_mean.tolist(),
        "command": "python " + " ".join(["benchmarks/bench_bon_speed.py", *sys.argv[1:]]),
    }
    if args.with_vectorised:
        t0 = time.perf_counter()
        vec = simulate(pools, ns, args.pool_size, args.trials, args.seed)["best"].mean(axis=0)
        result["trials_vectorised_s"] = time.perf_counter() - t0
        result["vectorised_max_abs_diff"] = float(np.max(np.abs(exact - vec)))
    with atomic_write(args.out) as f:
        f.write((json.dumps(result, indent=2) + "\n").encode())
    print(json.dumps({k: result[k] for k in ("ratio", "exact_s", "trials_s", "max_abs_diff")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
