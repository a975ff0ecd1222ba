"""Small reward models supervised by a large one: what the paper's synthetic-supervision
and active-learning experiments share, in the demo world.

Per seed: the demo's splits, and the demo's PRM as PRM_large (the seed's models for the
demo settings `cfg.demo`, read from the work folder or trained there; `core.seed`). Fresh
problems for the small models, disjoint from every demo split, each with a pool of sampled
solutions that PRM_large scores once. Small reward models are trained on labelled subsets
of the pools (`core.labels`, `core.small_models`: the demo's backbone, trainer and
settings, a number of passes over their data) and evaluated by
best-of-N on the demo's test problems. Everything is cached in a folder of the seed's
models keyed by the small-scale settings, so a stopped run resumes and the two experiments
share models.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path

from prmkit.demo import world
from prmkit.demo.core.config import DemoConfig, quick_config
from prmkit.demo.core.parallel import map_seeds
from prmkit.demo.core.scores import cached_scores
from prmkit.demo.core.seed import SeedModels, models_folder, seed_models, seed_world
from prmkit.demo.core.thresholds import choose_threshold
from prmkit.demo.settings import settings_key
from prmkit.errors import PrmkitError
from prmkit.scoring.aggregate import fill_null_steps

# Supervision kinds of the small models, and the reward model each one trains. "checker":
# the world checker's exact process labels, a control for what the small models can learn.
OBJECTIVE = {"process": "prm", "outcome": "orm", "final_answer": "orm", "checker": "prm"}


@dataclass
class SmallScaleConfig:
    seeds: tuple[int, ...] = (0, 1, 2)
    problems: int = 150  # problems for the small models, disjoint from the demo's splits
    # Sampled solutions per such problem (the selector's pool). The world's samples repeat
    # themselves: 64 held 12.8 distinct solutions per problem (min 3), 1,024 hold 87 (min
    # 23; 99% of problems at least 32, 4x the largest size), so that a size of 8 takes
    # about a tenth of the distinct pool, as the paper's selections did.
    pool_size: int = 1024
    sizes: tuple[int, ...] = (1, 2, 4, 8)  # samples per problem labelled for a small model
    # Training length of every small model: `small_epochs` passes over its examples (the
    # data sets it: a fixed step count let more data add nothing), or, when set,
    # `small_steps` optimizer steps whatever the data size.
    small_epochs: float = 4.0
    small_steps: int | None = None
    # Best-of-N up to this N, estimated over this many samples of each of the demo's test
    # problems (its full pools: 256; the first 16 each, before)
    test_samples: int = 256
    # PRM_large labels a step wrong when P(wrong) > threshold; None: chosen per seed on the
    # dev problems (`core.thresholds.choose_threshold`; the paper's hand-set 0.2 suited a
    # PRM_large that leaned positive)
    threshold: float | None = None
    # Fresh problems (test_samples solutions each) on which the threshold and the N that
    # best-of-N is compared at are chosen: never the test problems.
    dev_problems: int = 120
    # The solver on the small models' problems (their pools, the dev and the test pools;
    # PRM_large stays the demo's): `world.with_solver`'s cancel rate (None: the world's
    # 0.06) and skip scale. Right answers through a wrong step are 2.5% of the world's
    # samples; (b) outcome against (c) final-answer labels needs them common (>= 10%).
    solver_cancel: float | None = None
    solver_skip: float = 1.0
    convincing_wrong_share: float = 0.8
    # Active learning's selector: a process model trained on one sample of each of this many
    # fresh problems (after the dev problems, in no other split), labelled by PRM_large; 0:
    # one sample of each of the small models' problems, as the paper trains PRM_selector on
    # its thousands of problems. From the 150 here it did not rank (dev best-of-4 52.8%
    # against 55.4% for a random pick); 1,200 is the largest arm's label count.
    selector_problems: int = 1200
    progress: bool = True
    demo: DemoConfig = field(default_factory=lambda: DemoConfig(progress=False))

    def __post_init__(self):
        if not self.sizes or min(self.sizes) < 1 or max(self.sizes) > self.pool_size:
            raise PrmkitError(f"sizes {self.sizes} must lie in 1..pool_size ({self.pool_size})")
        if self.test_samples > self.demo.samples_per_test_problem:
            raise PrmkitError(f"test_samples ({self.test_samples}) exceeds the demo's "
                              f"{self.demo.samples_per_test_problem} samples per test problem")

    @property
    def ns(self) -> list[int]:
        ns = [n for n in (1, 2, 4, 8, 16, 32, 64, 128, 256) if n < self.test_samples]
        return [*ns, self.test_samples]

    def key(self) -> str:
        """The small-scale settings' key (the demo's are its models folder's), with the
        version of the rules that choose what is labelled (`PICK_RULES`)."""
        return f"{PICK_RULES}-{settings_key(self, leave_out=('demo', 'selector_problems'))}"


# Raised when the samples a small model is trained on change for the same settings, so
# that a cache of models trained on the old picks is not read back: 2 = uniform picks of
# `size` distinct samples, and the 80/20 share over the whole budget; 3 = the small models'
# problems followed by dev problems (the threshold chosen on them).
PICK_RULES = "picks3"


def quick_small_scale(seeds: tuple[int, ...] = (0,)) -> SmallScaleConfig:
    """A seconds-long run of the experiment code (smoke tests), not a result."""
    return SmallScaleConfig(seeds=seeds, problems=12, pool_size=6, sizes=(1, 2),
                            small_steps=3, test_samples=8, dev_problems=6, selector_problems=20,
                            progress=False,
                            demo=replace(quick_config(seeds), progress=False))


@dataclass
class SeedSetup:
    seed: int
    cfg: SmallScaleConfig
    folder: Path  # this seed's cache of small-scale models and scores
    large: SeedModels  # the demo's models of the seed: PRM_large and its backbone
    test: list  # the demo's test problems and their pools (first test_samples of each)
    test_pools: list
    problems: list  # the small models' problems, their pools and checker verdicts
    pools: list
    checks: list
    large_probs: list  # PRM_large's step probabilities on `pools`
    threshold: float  # PRM_large's, as set or chosen on the dev problems
    dev: list = field(default_factory=list)  # dev problems and their pools
    dev_pools: list = field(default_factory=list)
    threshold_agreement: dict = field(default_factory=dict)  # on the dev pools, per threshold


def small_scale_folder(seed: int, cfg: SmallScaleConfig, work: Path) -> Path:
    """The seed's cache of small models and scores: in the folder of its demo models."""
    return models_folder(seed, cfg.demo, work) / f"small-scale-{cfg.key()}"


def _after_pretraining(seed: int, cfg: SmallScaleConfig, skip: int, count: int) -> list:
    """`count` problems of the seed's stream, `skip` after the demo's pretraining split:
    disjoint from its test, training and pretraining problems (the world's own solver)."""
    demo = cfg.demo
    first = demo.pretrain_problems + skip
    stream = world.make_splits(seed, test=demo.test_problems, train=demo.train_problems,
                               pretrain=first + count, difficulty=demo.difficulty)
    return stream.pretrain[first:]


def small_problems(seed: int, cfg: SmallScaleConfig) -> tuple[list, list]:
    """The small models' problems, then the dev problems, right after the demo's pretraining
    split (with the world's own solver)."""
    group = _after_pretraining(seed, cfg, 0, cfg.problems + cfg.dev_problems)
    return group[: cfg.problems], group[cfg.problems:]


def selector_problems(seed: int, cfg: SmallScaleConfig) -> list:
    """The active-learning selector's own problems (`cfg.selector_problems`): those after the
    dev problems in the same stream, with the small models' solver."""
    group = _after_pretraining(seed, cfg, cfg.problems + cfg.dev_problems, cfg.selector_problems)
    return world.with_solver(group, cfg.solver_cancel, cfg.solver_skip)


def prepare_seed(seed: int, cfg: SmallScaleConfig, work: Path) -> SeedSetup:
    demo = cfg.demo
    sw = seed_world(seed, demo)
    large = seed_models(seed, demo, work, sw)

    def solver(group: list) -> list:
        return world.with_solver(group, cfg.solver_cancel, cfg.solver_skip)

    problems, dev = (solver(group) for group in small_problems(seed, cfg))
    pools = world.sample_pools(problems, cfg.pool_size, seed=seed + 2)
    dev_pools = world.sample_pools(dev, cfg.test_samples, seed=seed + 3)
    test = solver(sw.splits.test)  # its pools as the demo samples them, with this solver
    if cfg.solver_cancel is None and cfg.solver_skip == 1.0:
        test_pools = [pool[: cfg.test_samples] for pool in sw.test_pools]
    else:
        test_pools = world.sample_pools(test, cfg.test_samples, seed=seed + 1)
    folder = small_scale_folder(seed, cfg, work)
    folder.mkdir(parents=True, exist_ok=True)
    large_probs, dev_probs = (
        [[fill_null_steps(sp) for sp in pool] for pool in cached_scores(
            folder / name, large.prm_dir, pl, pr, cfg.progress)]
        for name, pl, pr in (("large_probs.json", pools, problems),
                             ("dev_large_probs.json", dev_pools, dev)))
    chosen, agreement = choose_threshold(world_checks(dev, dev_pools), dev_probs)
    return SeedSetup(
        seed=seed, cfg=cfg, folder=folder, large=large, test=test, test_pools=test_pools,
        problems=problems, pools=pools, checks=world_checks(problems, pools),
        large_probs=large_probs, dev=dev, dev_pools=dev_pools, threshold_agreement=agreement,
        threshold=chosen if cfg.threshold is None else cfg.threshold)


def _seed_in_process(cfg: SmallScaleConfig, run_seed, seed: int, runs: DemoConfig,
                     work: Path) -> dict:
    """One seed under `map_seeds`, whose settings `runs` say whether it shows progress."""
    return run_seed(prepare_seed(seed, replace(cfg, progress=runs.progress), work))


def world_checks(problems: list, pools: list) -> list:
    """The checker's verdict on every solution of every pool."""
    return [world.check_pool(p, pool) for p, pool in zip(problems, pools)]


def run_seeds(cfg: SmallScaleConfig, work: Path, run_seed, summarise, verdict) -> dict:
    """Every seed of an experiment (`run_seed` of its setup, a module-level function),
    summarised, with the wall time, the statement and the settings. The seeds run as the
    demo's do (`core.parallel.map_seeds`: each in a process of its own where the cores
    hold them, by `cfg.demo.workers`), with the same figures either way."""
    t0 = time.perf_counter()
    runs = replace(cfg.demo, seeds=tuple(cfg.seeds), progress=cfg.progress)
    per_seed = map_seeds(partial(_seed_in_process, cfg, run_seed), runs, Path(work),
                         line=lambda s, _: f"[small-scale] seed {s}: done")
    summary = summarise(per_seed, cfg)
    summary["seconds"] = round(time.perf_counter() - t0, 1)
    summary["statement"] = verdict(summary)
    summary["config"] = {k: v for k, v in asdict(cfg).items() if k != "demo"}
    return summary
