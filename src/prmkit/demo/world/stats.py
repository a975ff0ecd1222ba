"""Statistics of the world: accuracy, process quality, majority / pass / oracle at N."""

from __future__ import annotations

import argparse
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from prmkit.demo.world.checker import StepCheck, check_solution, parse_int
from prmkit.demo.world.problems import WorldProblem, make_problems
from prmkit.demo.world.solver import sample_pools
from prmkit.errors import PrmkitError


def majority_answer(answers: Iterable[str | None]) -> str | None:
    """The most common non-empty answer; ties go to the one seen first."""
    counts = Counter(a for a in answers if a is not None)
    return counts.most_common(1)[0][0] if counts else None


@dataclass
class WorldStats:
    n_problems: int
    samples_per_problem: int
    final_accuracy: float  # per sample
    process_accuracy: float  # per sample: every step correct and the answer right
    wrong_process_right_answer: float  # among right-answer samples
    majority_at_n: float
    pass_at_n: float
    best_process_at_n: float  # a perfect process verifier picks a fully correct sample
    majority_wrong_on_trap: float  # among problems majority gets wrong
    first_error_positions: dict[int, int]  # step index -> samples
    final_accuracy_by_level: dict[int, float]
    mean_steps: float
    mean_step_chars: float
    max_step_chars: int
    extra: dict[str, Any] = field(default_factory=dict)

    def format(self) -> str:
        n = self.samples_per_problem
        lines = [
            f"problems                        {self.n_problems} x {n} samples",
            f"final-answer accuracy           {self.final_accuracy:.3f}",
            f"process accuracy                {self.process_accuracy:.3f}",
            f"wrong process, right answer     {self.wrong_process_right_answer:.3f}"
            " (of right-answer samples)",
            f"majority@{n:<23d}{self.majority_at_n:.3f}",
            f"pass@{n:<27d}{self.pass_at_n:.3f}",
            f"best-process oracle@{n:<12d}{self.best_process_at_n:.3f}",
            f"majority wrong = trap answer    {self.majority_wrong_on_trap:.3f}",
            "accuracy by level               "
            + " ".join(f"L{k}:{v:.2f}" for k, v in sorted(self.final_accuracy_by_level.items())),
            "first error at step             "
            + " ".join(f"{k}:{v}" for k, v in sorted(self.first_error_positions.items())),
            f"steps/solution {self.mean_steps:.2f}, chars/step {self.mean_step_chars:.1f}"
            f" (max {self.max_step_chars})",
        ]
        return "\n".join(lines)


def world_stats(
    problems: Sequence[WorldProblem], pools: Sequence[Sequence[Sequence[str]]]
) -> WorldStats:
    """Accuracy, process quality and majority/pass/oracle@N over the given pools."""
    if len(problems) != len(pools) or not problems:
        raise PrmkitError(f"need as many non-empty pools as problems ({len(problems)})")
    n = min(len(pool) for pool in pools)
    total = right = proc = right_wrong_proc = 0
    maj = pas = best = maj_wrong = maj_trap = 0
    positions: Counter[int] = Counter()
    by_level: dict[int, list[int]] = {}
    n_steps = step_chars = n_step_texts = max_chars = 0
    for prob, pool in zip(problems, pools):
        cache: dict[tuple[str, ...], StepCheck] = {}
        checks = []
        for steps in pool[:n]:
            key = tuple(steps)
            if key not in cache:
                cache[key] = check_solution(prob, steps)
                for s in steps:
                    max_chars = max(max_chars, len(s))
            checks.append(cache[key])
            n_steps += len(steps)
            step_chars += sum(len(s) for s in steps)
            n_step_texts += len(steps)
        total += n
        r = sum(c.final_correct for c in checks)
        right += r
        proc += sum(c.process_correct for c in checks)
        right_wrong_proc += sum(c.final_correct and c.first_error >= 0 for c in checks)
        positions.update(c.first_error for c in checks if c.first_error >= 0)
        lv = by_level.setdefault(prob.level, [0, 0])
        lv[0] += r
        lv[1] += n
        m = majority_answer(c.answer for c in checks)
        if parse_int(m) == int(prob.answer):
            maj += 1
        else:
            maj_wrong += 1
            maj_trap += prob.trap_answer is not None and parse_int(m) == int(prob.trap_answer)
        pas += r > 0
        best += any(c.process_correct for c in checks)
    return WorldStats(
        n_problems=len(problems),
        samples_per_problem=n,
        final_accuracy=right / total,
        process_accuracy=proc / total,
        wrong_process_right_answer=right_wrong_proc / max(right, 1),
        majority_at_n=maj / len(problems),
        pass_at_n=pas / len(problems),
        best_process_at_n=best / len(problems),
        majority_wrong_on_trap=maj_trap / max(maj_wrong, 1),
        first_error_positions=dict(positions),
        final_accuracy_by_level={k: v[0] / v[1] for k, v in by_level.items()},
        mean_steps=n_steps / total,
        mean_step_chars=step_chars / max(n_step_texts, 1),
        max_step_chars=max_chars,
    )


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Statistics of the synthetic reasoning world.")
    ap.add_argument("--problems", type=int, default=2000)
    ap.add_argument("--samples", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--difficulty", default="mixed")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    problems = make_problems(args.problems, args.seed, args.difficulty)
    t1 = time.perf_counter()
    pools = sample_pools(problems, args.samples, args.seed)
    t2 = time.perf_counter()
    stats = world_stats(problems, pools)
    t3 = time.perf_counter()
    print(stats.format())
    print(f"time: problems {t1 - t0:.2f}s, sampling {t2 - t1:.2f}s, checking {t3 - t2:.2f}s")
    return 0
