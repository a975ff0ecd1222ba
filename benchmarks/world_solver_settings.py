"""How often the world's samples reach a right answer through a wrong step, per solver
setting (`world.with_solver`): what chose `solver_cancel` and `solver_skip` for the
small-scale experiments' (b)-against-(c) comparison, by the world's sampler alone.

    python benchmarks/world_solver_settings.py   # about 35 seconds, no model

The small models' problems of each seed (`core.small_scale.small_problems`),
their pools sampled as there; prints the share per (cancel, skip multiple): seed 0 with
pools of 64 over the grid, then cancel 1.0 on the 1,024-sample pools of seeds 0, 1, 2.
"""

from __future__ import annotations

from prmkit.demo import world
from prmkit.demo.core.small_scale import SmallScaleConfig, small_problems

GRID = ((0.06, 1), (0.25, 1), (0.5, 1), (1.0, 1), (0.06, 2), (0.5, 2), (1.0, 2), (0.06, 3),
        (0.5, 3))


def share(seed: int, cancel: float, skip: float, samples: int) -> float:
    problems = world.with_solver(small_problems(seed, SmallScaleConfig())[0], cancel, skip)
    pools = world.sample_pools(problems, samples, seed=seed + 2)
    checks = [world.check_solution(p, s) for p, pool in zip(problems, pools) for s in pool]
    return sum(c.final_correct and not c.process_correct for c in checks) / len(checks)


def main() -> int:
    for cancel, skip in GRID:
        print(f"seed 0, pools of 64, cancel {cancel}, skip x{skip}: "
              f"{100 * share(0, cancel, skip, 64):.1f}%", flush=True)
    for skip in (2, 3):
        shares = [f"{100 * share(seed, 1.0, skip, 1024):.1f}%" for seed in (0, 1, 2)]
        print(f"seeds 0 / 1 / 2, pools of 1,024, cancel 1.0, skip x{skip}: {' / '.join(shares)}",
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
