"""Small reward models supervised by a large one: what the paper's synthetic-supervision
and active-learning experiments share, in the demo world.

Per seed: the demo's splits, and the demo's PRM as PRM_large (trained on 2,000 problems x
8 samples with the checker's step labels; reused from work/seed{s}/prm/model when present,
e.g. after `make demo`, else trained as the demo does). Fresh problems for the small models,
disjoint from every demo split, each with a pool of sampled solutions that PRM_large
scores once. Small reward models are trained on labelled subsets of the pools (the demo's
backbone, trainer and settings, a fixed number of optimizer steps whatever the data size)
and evaluated by best-of-N on the demo's test problems. Everything is cached under the
work folder, so a stopped run resumes and the two experiments share models.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from prmkit.active.labelers import GraderLabeler, LabelItem, LargePRMLabeler, process_example
from prmkit.active.selection import dedupe_key
from prmkit.data.records import StepExample
from prmkit.demo import world
from prmkit.demo.run import (
    DemoConfig,
    _same_number,
    _score,
    _solution_score,
    _train_reward_model,
    quick_config,
    seed_world,
    torch_settings,
    train_seed_models,
)
from prmkit.errors import PrmkitError
from prmkit.evaluation import bon_curves
from prmkit.evaluation.bon import ProblemPool
from prmkit.evaluation.report import write_report
from prmkit.scoring.aggregate import fill_null_steps
from prmkit.selection import AnswerClusterer
from prmkit.training.reward_trainer import seed_everything

# Supervision kinds of the small models, and the reward model each one trains. "checker":
# the world checker's exact process labels, a control for what the small models can learn.
OBJECTIVE = {"process": "prm", "outcome": "orm", "final_answer": "orm", "checker": "prm"}


@dataclass
class SmallScaleConfig:
    seeds: tuple[int, ...] = (0, 1, 2)
    problems: int = 150  # problems for the small models, disjoint from the demo's splits
    pool_size: int = 64  # sampled solutions per such problem (the selector's pool)
    sizes: tuple[int, ...] = (1, 2, 4, 8)  # samples per problem labelled for a small model
    small_steps: int = 30  # optimizer steps of every small model, whatever its data size
    test_samples: int = 16  # best-of-N up to this N, on the demo's test problems
    threshold: float = 0.2  # PRM_large labels a step wrong when P(wrong) > threshold
    convincing_wrong_share: float = 0.8
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
        """Names the cache of everything that depends on the small-scale settings."""
        d = {k: v for k, v in asdict(self).items() if k not in ("seeds", "progress", "demo")}
        return hashlib.sha1(json.dumps(d, sort_keys=True).encode()).hexdigest()[:10]


def quick_small_scale(seeds: tuple[int, ...] = (0,)) -> SmallScaleConfig:
    """A seconds-long run of the experiment code (smoke tests), not a result."""
    return SmallScaleConfig(seeds=seeds, problems=12, pool_size=6, sizes=(1, 2),
                            small_steps=3, test_samples=8, progress=False,
                            demo=replace(quick_config(seeds), progress=False))


@dataclass
class SeedSetup:
    seed: int
    cfg: SmallScaleConfig
    folder: Path  # this seed's cache of small-scale models and scores
    backbone_dir: Path
    prm_large_dir: Path
    test: list  # the demo's test problems and their pools (first test_samples of each)
    test_pools: list
    problems: list  # the small models' problems, their pools and checker verdicts
    pools: list
    checks: list
    large_probs: list  # PRM_large's step probabilities on `pools`


def prepare_seed(seed: int, cfg: SmallScaleConfig, work: Path) -> SeedSetup:
    demo = cfg.demo
    seed_dir = work / f"seed{seed}"
    sw = seed_world(seed, demo)
    if not (seed_dir / "prm" / "model").exists():
        print(f"[small-scale] seed {seed}: training the demo's backbone and PRM (PRM_large)",
              flush=True)
        train_seed_models(seed, demo, sw, seed_dir)
    # The problems after the demo's pretraining split in the same stream: disjoint from
    # its test, training and pretraining problems.
    stream = world.make_splits(seed, test=demo.test_problems, train=demo.train_problems,
                               pretrain=demo.pretrain_problems + cfg.problems,
                               difficulty=demo.difficulty)
    problems = stream.pretrain[demo.pretrain_problems:]
    pools = world.sample_pools(problems, cfg.pool_size, seed=seed + 2)
    folder = seed_dir / f"small-scale-{cfg.key()}"
    folder.mkdir(parents=True, exist_ok=True)
    prm_large = seed_dir / "prm" / "model"
    large_probs = cached_scores(folder / "large_probs.json", prm_large, pools, problems, cfg)
    return SeedSetup(
        seed=seed, cfg=cfg, folder=folder, backbone_dir=seed_dir / "backbone",
        prm_large_dir=prm_large, test=sw.splits.test,
        test_pools=[pool[: cfg.test_samples] for pool in sw.test_pools],
        problems=problems, pools=pools,
        checks=[[world.check_solution(p, s) for s in pool] for p, pool in zip(problems, pools)],
        large_probs=[[fill_null_steps(sp) for sp in pool] for pool in large_probs])


def cached_scores(path: Path, model_dir: Path, pools, problems, cfg: SmallScaleConfig) -> list:
    if path.exists():
        return json.loads(path.read_text())
    scores = _score(model_dir, pools, problems, cfg.progress)
    path.write_text(json.dumps(scores))
    return scores


# ---- which samples, labelled how ---------------------------------------------------------

Picks = list[list[int]]  # per problem, indices into its pool


def uniform_picks(setup: SeedSetup, size: int) -> Picks:
    """The first `size` samples of each pool (the pools are i.i.d.), duplicates dropped."""
    out = []
    for pool in setup.pools:
        seen, keep = set(), []
        for i, steps in enumerate(pool[:size]):
            if dedupe_key(steps) not in seen:
                seen.add(dedupe_key(steps))
                keep.append(i)
        out.append(keep)
    return out


def label_items(setup: SeedSetup, picks: Picks) -> list[LabelItem]:
    return [LabelItem(problem_id=p.id, problem=p.text, steps=tuple(setup.pools[k][i]),
                      gold_answer=p.answer, answer=setup.checks[k][i].answer, sample_index=i)
            for k, p in enumerate(setup.problems) for i in picks[k]]


def large_prm_labeler(setup: SeedSetup, supervision: str) -> LargePRMLabeler:
    """PRM_large as labeller, reading its cached step probabilities."""
    table = {(p.text, tuple(sol)): probs
             for p, pool, pp in zip(setup.problems, setup.pools, setup.large_probs)
             for sol, probs in zip(pool, pp)}
    return LargePRMLabeler(step_probs=lambda pairs: [table[(q, tuple(s))] for q, s in pairs],
                           supervision=supervision, threshold=setup.cfg.threshold)


def examples_for(setup: SeedSetup, kind: str, picks: Picks) -> list[StepExample]:
    """process / outcome: PRM_large's labels; final_answer: the grader's outcome labels;
    checker: the checker's step labels up to the first wrong step."""
    items = label_items(setup, picks)
    if kind == "final_answer":
        return GraderLabeler().label(items)
    if kind == "checker":
        checks = [setup.checks[k][i] for k, idx in enumerate(picks) for i in idx]
        return [process_example(it, [1.0 if v > 0 else 0.0 for v in
                                     (c.labels if c.first_error < 0 else c.labels[: c.first_error + 1])])
                for it, c in zip(items, checks)]
    if kind not in ("process", "outcome"):
        raise PrmkitError(f"unknown supervision kind {kind!r} (process, outcome, final_answer)")
    return large_prm_labeler(setup, kind).label(items)


def label_agreement(setup: SeedSetup, threshold: float | None = None) -> dict[str, float]:
    """How PRM_large's labels at the threshold compare with the checker's, over the pools:
    the first wrong step found exactly (process), a solution called right exactly when every
    step is (outcome), and how often the final answer alone calls a solution right whose
    process is wrong (what the grader's labels get wrong)."""
    thr = setup.cfg.threshold if threshold is None else threshold
    first = outcome = answer_only = n = 0
    for pool_checks, pool_probs in zip(setup.checks, setup.large_probs):
        for chk, probs in zip(pool_checks, pool_probs):
            p_first = next((j for j, p in enumerate(probs) if 1 - p > thr), -1)
            first += p_first == chk.first_error
            outcome += (p_first < 0) == chk.process_correct
            answer_only += chk.final_correct != chk.process_correct
            n += 1
    return {"process_first_error_exact": first / n, "outcome_agrees_with_process": outcome / n,
            "final_answer_agrees_with_process": 1 - answer_only / n}


# ---- small models and their evaluation ---------------------------------------------------

def train_small(setup: SeedSetup, name: str, kind: str, examples: Sequence[StepExample]) -> Path:
    out = setup.folder / name
    if (out / "model").exists():
        return out / "model"
    cfg = replace(setup.cfg.demo, reward_steps=setup.cfg.small_steps, progress=setup.cfg.progress)
    # The new head is drawn before the trainer seeds: seed here, so that a model does not
    # depend on what this process trained before it (runs resume from any point).
    seed_everything(setup.seed)
    return _train_reward_model(OBJECTIVE[kind], setup.backbone_dir, list(examples), out, cfg,
                               setup.seed)


def _test_pools(setup: SeedSetup, scores: list | None, aggregation: str) -> list[ProblemPool]:
    clusterer = AnswerClusterer(equivalent=_same_number)
    out = []
    for k, (prob, pool) in enumerate(zip(setup.test, setup.test_pools)):
        checks = [world.check_solution(prob, sol) for sol in pool]
        answered = [i for i, c in enumerate(checks) if c.answer is not None]
        sc = (np.zeros(len(answered)) if scores is None else
              np.array([_solution_score(scores[k][i], aggregation) for i in answered]))
        out.append(ProblemPool(
            scores=sc, correct=np.array([checks[i].final_correct for i in answered], dtype=bool),
            clusters=np.array(clusterer.cluster([checks[i].answer for i in answered]),
                              dtype=np.int64),
            n_slots=len(pool), problem_id=prob.id))
    return out


def best_of_n(setup: SeedSetup, name: str, kind: str, model_dir: Path) -> list[float]:
    """Best-of-N accuracy on the test problems at each N of cfg.ns (exact estimator); the
    PRM ranks by the demo's aggregation of step scores, an ORM by its last step's score."""
    scores = cached_scores(setup.folder / name / "test_scores.json", model_dir, setup.test_pools,
                           setup.test, setup.cfg)
    agg = setup.cfg.demo.aggregation if OBJECTIVE[kind] == "prm" else "last"
    curves = bon_curves(_test_pools(setup, scores, agg), setup.cfg.ns, estimator="exact",
                        votes=(), seed=setup.seed)
    return curves.accuracy["best"]


def references(setup: SeedSetup) -> dict[str, list[float]]:
    """Majority vote and pass@N of the test pools: no reward model involved."""
    curves = bon_curves(_test_pools(setup, None, "min"), setup.cfg.ns, estimator="exact",
                        votes=("majority",), trials=400, seed=setup.seed)
    return {"majority": curves.accuracy["majority"], "pass": curves.accuracy["pass"]}


def small_model(setup: SeedSetup, name: str, kind: str, picks: Picks) -> dict:
    """Train (or load) one small model on `picks` labelled by `kind`; its best-of-N curve."""
    examples = examples_for(setup, kind, picks)
    model_dir = train_small(setup, name, kind, examples)
    positive = [ex.outcome if ex.outcome is not None else float(min(
        v for v in ex.labels if v is not None) == 1.0) for ex in examples]
    return {"curve": best_of_n(setup, name, kind, model_dir), "examples": len(examples),
            "positive_share": float(np.mean(positive)) if positive else 0.0}


# ---- summaries and plots -----------------------------------------------------------------

def mean_std(values: Sequence[Sequence[float]]) -> tuple[list[float], list[float]]:
    arr = np.array(values, dtype=float)
    return arr.mean(0).round(4).tolist(), arr.std(0).round(4).tolist()


def plot_series(series: dict[str, dict], path: Path, xlabel: str, title: str) -> Path:
    """{label: {"x", "mean", "std", optional "ls" and "color"}} (accuracies in 0..1): mean
    with a +-1 std band against a log2 x axis; a dashed or dotted series is a reference."""
    from prmkit.evaluation.plots import Curve, Panel, plot_curves

    curves = [Curve(label, s["x"], s["mean"], s["std"] if np.any(s["std"]) else (),
                    "line" if s.get("ls", "-") == "-" else "reference", color=s.get("color"))
              for label, s in series.items()]
    return plot_curves([Panel(curves, xlabel, ylabel="% of test problems solved")], path, title)


def pct(mean: float, std: float) -> str:
    return f"{100 * mean:.1f} ± {100 * std:.1f}"


def publish(out: Path, summary: dict, plots: dict, tables: dict, tag: str, title: str) -> None:
    """Write an experiment's report and print its statement."""
    write_report(out, summary, plots, title=title, summary=summary["statement"], tables=tables)
    print(f"[{tag}] {summary['statement']}")
    print(f"[{tag}] report: {out / 'report.html'} ({summary['seconds']:.0f} s)")


def run_seeds(cfg: SmallScaleConfig, work: Path, run_seed, summarise, verdict) -> dict:
    """Every seed of an experiment (`run_seed` of its setup), summarised, with the wall
    time, the statement and the settings."""
    t0 = time.perf_counter()
    with torch_settings(cfg.demo.threads):
        per_seed = [run_seed(prepare_seed(s, cfg, Path(work))) for s in cfg.seeds]
    summary = summarise(per_seed, cfg)
    summary["seconds"] = round(time.perf_counter() - t0, 1)
    summary["statement"] = verdict(summary)
    summary["config"] = {k: v for k, v in asdict(cfg).items() if k != "demo"}
    return summary
