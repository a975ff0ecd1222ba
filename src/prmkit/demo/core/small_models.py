"""Small reward models of the small-scale experiments: trained (or read back) on labelled
picks of the pools, and measured by best-of-N on the demo's test problems (and on the dev
problems, where a rule chooses the N that the test figures are compared at)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from prmkit.data.records import StepExample
from prmkit.demo.core.labels import Picks, examples_for, uniform_picks
from prmkit.demo.core.scores import cached_scores, checked_pools, world_clusterer
from prmkit.demo.core.seed import train_reward_model
from prmkit.demo.core.small_scale import OBJECTIVE, SeedSetup
from prmkit.evaluation import bon_curves
from prmkit.evaluation.bon import bon_exact_per_problem


def train_small(setup: SeedSetup, name: str, kind: str, examples: Sequence[StepExample]) -> Path:
    out = setup.folder / name
    if (out / "model").exists():
        return out / "model"
    steps = setup.cfg.small_steps  # None: small_epochs passes over the examples
    cfg = replace(setup.cfg.demo, reward_steps=steps or setup.cfg.demo.reward_steps,
                  progress=setup.cfg.progress)
    return train_reward_model(OBJECTIVE[kind], setup.large.backbone_dir, list(examples), out,
                              cfg, setup.seed, epochs=None if steps else setup.cfg.small_epochs)


def _checked(problems: list, pools: list, scores: list | None, aggregation: str):
    scores = scores or [[0.0] * len(pool) for pool in pools]
    return checked_pools(problems, pools, scores, aggregation, world_clusterer())


def _per_problem(setup: SeedSetup, name: str, kind: str, model_dir: Path,
                 split: str) -> np.ndarray:
    """[problems, N of cfg.ns]: each problem's best-of-N accuracy (exact estimator) on the
    test or dev pools; a PRM ranks by the demo's aggregation of step scores, an ORM by its
    last step's score."""
    problems, pools = (setup.test, setup.test_pools) if split == "test" else \
        (setup.dev, setup.dev_pools)
    scores = cached_scores(setup.folder / name / f"{split}_scores.json", model_dir, pools,
                           problems, setup.cfg.progress)
    agg = setup.cfg.demo.aggregation if OBJECTIVE[kind] == "prm" else "last"
    return bon_exact_per_problem(_checked(problems, pools, scores, agg), setup.cfg.ns)


def best_of_n(setup: SeedSetup, name: str, kind: str,
              model_dir: Path) -> tuple[list[float], list[list[float]]]:
    """Best-of-N accuracy on the test problems at each N of cfg.ns, and each problem's at
    every N ([problems, N])."""
    per_problem = _per_problem(setup, name, kind, model_dir, "test")
    return per_problem.mean(axis=0).tolist(), per_problem.tolist()


def dev_curve(setup: SeedSetup, name: str, kind: str, model_dir: Path) -> list[float]:
    """Best-of-N accuracy on the dev problems at each N of cfg.ns."""
    return _per_problem(setup, name, kind, model_dir, "dev").mean(axis=0).tolist()


def control_dev_curve(setup: SeedSetup) -> list[float]:
    """The checker-labelled control at the largest size, on the dev problems: what the N
    that best-of-N is compared at is chosen by (`peak_n`)."""
    size = max(setup.cfg.sizes)
    name = f"uniform-checker-s{size}"
    model_dir = train_small(setup, name, "checker",
                            examples_for(setup, "checker", uniform_picks(setup, size)))
    return dev_curve(setup, name, "checker", model_dir)


def peak_n(ns: Sequence[int], curves: Sequence[Sequence[float]]) -> int:
    """The N where the mean of the curves peaks (the smaller N on ties)."""
    mean = np.mean(np.asarray(curves, dtype=float), axis=0)
    return int(ns[int(np.argmax(mean >= mean.max() - 1e-12))])


def references(setup: SeedSetup) -> dict[str, list[float]]:
    """Majority vote and pass@N of the test pools: no reward model involved."""
    curves = bon_curves(_checked(setup.test, setup.test_pools, None, "min"), setup.cfg.ns,
                        estimator="exact", votes=("majority",), trials=400, seed=setup.seed)
    return {"majority": curves.accuracy["majority"], "pass": curves.accuracy["pass"]}


def small_model(setup: SeedSetup, name: str, kind: str, picks: Picks) -> dict:
    """Train (or load) one small model on `picks` labelled by `kind`; its best-of-N curve."""
    examples = examples_for(setup, kind, picks)
    model_dir = train_small(setup, name, kind, examples)
    positive = [ex.outcome if ex.outcome is not None else float(min(
        v for v in ex.labels if v is not None) == 1.0) for ex in examples]
    curve, per_problem = best_of_n(setup, name, kind, model_dir)
    return {"curve": curve, "per_problem": per_problem, "examples": len(examples),
            "positive_share": float(np.mean(positive)) if positive else 0.0}


EVAL_N_RULE = ("N* is where the checker-labelled control at the largest size peaks in "
               "best-of-N on the dev problems (fresh problems, mean over seeds; the smaller N "
               "on ties)")


def eval_index(per_seed: list[dict], ns: list[int]) -> int:
    """The index in ns of N* (`EVAL_N_RULE`)."""
    return ns.index(peak_n(ns, [r["dev_control"] for r in per_seed]))


def per_problem_at(runs: list[dict], sizes: list[int], i: int) -> np.ndarray:
    """[seeds, sizes, problems]: each test problem's best-of-N at the N of index i."""
    return np.array([[[row[i] for row in m[s]["per_problem"]] for s in sizes] for m in runs])
