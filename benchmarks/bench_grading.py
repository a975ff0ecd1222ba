"""Grading benchmark: MATH500 agreement, throughput vs math-verify, adversarial time limits.

    .venv/bin/python benchmarks/bench_grading.py [--pairs 10000] [--workers 2] [--timeout 2]
    .venv/bin/python benchmarks/bench_grading.py --agreement-only   # MATH500 pairs only

Writes benchmarks/results/grading_math500.json and benchmarks/results/grading_speed.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
import time
from pathlib import Path

import orjson

from prmkit.data.io import atomic_write
from prmkit.grading import answer_key, clear_cache, grade_answer, grade_many
from prmkit.grading.rewrites import equivalent_rewrites

ROOT = Path(__file__).resolve().parents[1]
MATH500 = ROOT.parent / "shared" / "data" / "math" / "math500.jsonl"
RESULTS = ROOT / "benchmarks" / "results"


def load_math500_answers(path: Path = MATH500) -> list[str]:
    with open(path, "rb") as f:
        return [orjson.loads(line)["answer"] for line in f if line.strip()]


def math500_pairs(answers: list[str], shifts: tuple[int, ...] = (1,)) -> tuple[list, list]:
    """(equal pairs, unequal pairs) as (given, gold, label) triples.

    Equal: every answer against itself and its rewrites. Unequal: answer i+k given for
    problem i, kept only where the normalised answers differ.
    """
    equal, unequal = [], []
    for gold in answers:
        equal.append((gold, gold, True))
        equal.extend((rewrite, gold, True) for rewrite in equivalent_rewrites(gold))
    n = len(answers)
    for shift in shifts:
        for i, gold in enumerate(answers):
            other = answers[(i + shift) % n]
            if answer_key(other) != answer_key(gold):
                unequal.append((other, gold, False))
    return equal, unequal


def agreement(workers: int, timeout: float) -> dict:
    answers = load_math500_answers()
    equal, unequal = math500_pairs(answers)
    started = time.perf_counter()
    grades = grade_many([(g, t) for g, t, _ in equal + unequal], workers=workers, timeout=timeout)
    elapsed = time.perf_counter() - started
    eq_grades, ne_grades = grades[: len(equal)], grades[len(equal) :]
    misses = [
        {"given": g, "gold": t, "expected": label, "correct": gr.correct, "reason": gr.reason}
        for (g, t, label), gr in zip(equal + unequal, grades)
        if gr.correct is not label
    ]
    return {
        "n_answers": len(answers),
        "n_equal_pairs": len(equal),
        "n_unequal_pairs": len(unequal),
        "self_agreement": sum(g.correct is True for g in eq_grades) / len(equal),
        "cross_agreement": sum(g.correct is False for g in ne_grades) / len(unequal),
        "overall_agreement": (len(grades) - len(misses)) / len(grades),
        "seconds": round(elapsed, 2),
        "disagreements": misses,
    }


def mixed_pairs(n: int, seed: int = 0) -> list[tuple[str, str]]:
    answers = load_math500_answers()
    equal, unequal = math500_pairs(answers, shifts=(1, 2, 3, 5, 8))
    pool = [(g, t) for g, t, _ in equal + unequal]
    rng = random.Random(seed)
    rng.shuffle(pool)
    return [pool[i % len(pool)] for i in range(n)]


def math_verify_direct(pairs: list[tuple[str, str]]) -> float:
    """Seconds for math-verify parse+verify on each pair, as a user would call it."""
    from math_verify import parse, verify

    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    started = time.perf_counter()
    for given, gold in pairs:
        verify(parse("$" + gold + "$"), parse(given))
    return time.perf_counter() - started


ADVERSARIAL = {
    "tower_power": ("10^{10^{10^{10}}}", "10^{10^{10^{11}}}"),
    "factorial_1e6": ("1000000!", "1000001!"),
    "nested_fractions": (
        "\\frac{1}{" * 60 + "2" + "}" * 60,
        "\\frac{1}{" * 61 + "2" + "}" * 61,
    ),
    "polynomial_power": ("(x+1)^{400}", "(x+2)^{400}"),
    "string_100kB_expression": ("1+" * 50_000 + "1", "50001"),
    "string_100kB_solution": ("Let us think. " * 7_200 + "So $\\boxed{42}$.", "42"),
}


def adversarial(timeout: float) -> dict:
    out = {}
    for name, (given, gold) in ADVERSARIAL.items():
        started = time.perf_counter()
        grade = grade_answer(given, gold, timeout=timeout)
        out[name] = {
            "seconds": round(time.perf_counter() - started, 3),
            "correct": grade.correct,
            "reason": grade.reason,
        }
        print(f"  {name}: {out[name]}", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pairs", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=2.0)
    parser.add_argument(
        "--agreement-only", action="store_true",
        help="only the MATH500 agreement (writes grading_math500.json, skips the timings)",
    )
    args = parser.parse_args(argv)
    if not MATH500.exists():
        print(f"missing {MATH500}", file=sys.stderr)
        return 1
    RESULTS.mkdir(parents=True, exist_ok=True)

    print("== MATH500 agreement", flush=True)
    agree = agreement(args.workers, args.timeout)
    print(
        f"  self {agree['self_agreement']:.4f}  cross {agree['cross_agreement']:.4f}  "
        f"disagreements {len(agree['disagreements'])}",
        flush=True,
    )
    with atomic_write(RESULTS / "grading_math500.json", "w") as f:
        json.dump(agree, f, indent=2)
    if args.agreement_only:
        return 0

    print(f"== throughput on {args.pairs} mixed pairs, {args.workers} workers", flush=True)
    pairs = mixed_pairs(args.pairs)
    clear_cache()
    grade_answer("x+x", "2x")  # worker start-up is not part of any timing
    started = time.perf_counter()
    grade_many(pairs, workers=args.workers, timeout=args.timeout, progress=False)
    prmkit_s = time.perf_counter() - started
    mv_s = math_verify_direct(pairs)
    print(f"  prmkit {prmkit_s:.2f} s, math-verify {mv_s:.2f} s", flush=True)

    print(f"== adversarial inputs, limit {args.timeout} s", flush=True)
    adv = adversarial(args.timeout)
    speed = {
        "pairs": len(pairs),
        "unique_pairs": len(set(pairs)),
        "workers": args.workers,
        "cpu_count": os.cpu_count(),
        "prmkit_seconds": round(prmkit_s, 3),
        "math_verify_seconds": round(mv_s, 3),
        "grades_per_s": len(pairs) / prmkit_s,
        "math_verify_grades_per_s": len(pairs) / mv_s,
        "ratio_vs_math_verify": mv_s / prmkit_s,
        "timeout_s": args.timeout,
        "max_adversarial_s": max(v["seconds"] for v in adv.values()),
        "adversarial": adv,
    }
    with atomic_write(RESULTS / "grading_speed.json", "w") as f:
        json.dump(speed, f, indent=2)
    print(json.dumps({k: v for k, v in speed.items() if k != "adversarial"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
