"""Whether larger pools still find right answers, by the world's sampler alone: what chose
the demo's `hard_share` (`world.hard_problems`), before any model read a hard pool.

    python benchmarks/world_hard_settings.py   # about 15 seconds, no model

Problems of seeds 3, 4 and 5's streams (easy, 120 each: no demo figure uses them), 256
samples each, pools seeded as the demo seeds its test pools. Prints pass@N (exact over the
256: the chance that N of them hold a right answer) at N = 1, 4, 16, 64, 256, first per
level (levels 1 to 5, seed 3), then for each hard share. The rule, written before the
shares were sampled on these problems: the smallest share of 0.1 to 0.5 whose pass@N rises
by at least 10 points from N = 16 to N = 256 in every seed.
"""

from __future__ import annotations

from math import comb

import numpy as np

from prmkit.demo import world

NS = (1, 4, 16, 64, 256)
SAMPLES = 256
SHARES = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5)
RISE = 0.10  # pass@256 - pass@16, in every seed


def pass_at(problems, seed: int) -> list[float]:
    """Exact pass@N over each problem's pool of `SAMPLES`, averaged over problems."""
    pools = world.sample_pools(problems, SAMPLES, seed=seed + 1)
    right = [sum(world.check_solution(p, s).final_correct for s in pool)
             for p, pool in zip(problems, pools)]
    return [float(np.mean([1 - comb(SAMPLES - c, n) / comb(SAMPLES, n) for c in right]))
            for n in NS]


def line(label: str, values: list[float]) -> str:
    return f"{label}: " + "  ".join(f"{n}: {100 * v:.1f}" for n, v in zip(NS, values))


def main() -> int:
    for level in (1, 2, 3, 4, 5):
        print(line(f"level {level}, seed 3", pass_at(world.make_problems(120, 3, level), 3)),
              flush=True)
    chosen = None
    for share in SHARES:
        rises = []
        for seed in (3, 4, 5):
            problems = world.hard_problems(world.make_problems(120, seed, "easy"), share, seed)
            values = pass_at(problems, seed)
            rises.append(values[NS.index(256)] - values[NS.index(16)])
            print(line(f"share {share}, seed {seed} ({sum(map(world.is_hard, problems))} hard)",
                       values), flush=True)
        if chosen is None and share > 0 and min(rises) >= RISE:
            chosen = share
    print(f"chosen by the rule: hard_share = {chosen}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
