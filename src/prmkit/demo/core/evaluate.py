"""One seed, end to end: its models (cached), their scores of the seed's test pools (cached
beside the models), and best-of-N, majority vote, pass@N and step metrics of those scores."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from prmkit.demo import world
from prmkit.demo.core.config import DemoConfig
from prmkit.demo.core.scores import cached_scores, checked_pools, world_clusterer
from prmkit.demo.core.seed import SeedModels, SeedWorld, seed_models, seed_world
from prmkit.demo.core.stages import stage
from prmkit.demo.world.error_kinds import kind_report, pick_indices
from prmkit.evaluation import auroc as step_auroc
from prmkit.evaluation import bon_curves, calibration_bins
from prmkit.evaluation.bon import ProblemPool, bon_pick_mean
from prmkit.evaluation.processbench import first_error_index, subset_metrics
from prmkit.scoring.aggregate import fill_null_steps


def seed_test_scores(models: SeedModels, sw: SeedWorld, progress: bool,
                     split: str = "test") -> dict[str, list]:
    """The PRM's and the ORM's step probabilities on the seed's test pools (split="ood": its
    out-of-distribution pools), cached in the models' folder (whose key covers the pools'
    settings)."""
    problems, pools = sw.problems_and_pools(split)
    return {kind: cached_scores(models.folder / f"{kind}_{split}_scores.json",
                                getattr(models, f"{kind}_dir"), pools, problems, progress,
                                stage_name=f"scoring {split} ({kind.upper()})")
            for kind in ("prm", "orm")}


def hard_set_scores(models: SeedModels, sw: SeedWorld, cfg: DemoConfig,
                    test_scores: dict[str, list]) -> dict[str, list]:
    """The reward models' scores of the hard set: its unchanged problems' pools are the
    test pools, so only the hard problems' are scored (cached per hard share)."""
    changed = [i for i, (h, t) in enumerate(zip(sw.hard, sw.splits.test)) if h is not t]
    out = {}
    for kind in ("prm", "orm"):
        scored = cached_scores(models.folder / f"{kind}_hard{cfg.hard_share}_scores.json",
                               getattr(models, f"{kind}_dir"), [sw.hard_pools[i] for i in changed],
                               [sw.hard[i] for i in changed], cfg.progress,
                               stage_name=f"scoring hard ({kind.upper()})")
        out[kind] = list(test_scores[kind])
        for i, problem_scores in zip(changed, scored, strict=True):
            out[kind][i] = problem_scores
    return out


# per N, each reward model's best-of-N pick: its own score of it and whether it is right
PICK_KEYS = ("prm_pick_score", "prm_pick_right", "orm_pick_score", "orm_pick_right")
# what a seed's result keeps of its evaluation on a second test set
SET_KEEP = ("prm", "orm", "majority", "pass", "step_auroc", "error_kinds", "top_picks",
            *PICK_KEYS)


def ood_ns(cfg: DemoConfig) -> tuple[int, ...]:
    """The Ns of out-of-distribution best-of-N: the demo's, up to its samples per problem."""
    return tuple(n for n in cfg.ns if n <= cfg.samples_per_ood_problem)


def run_seed(seed: int, cfg: DemoConfig, work: Path) -> dict:
    """One seed's figures (`evaluate_seed`) on the test set, and on the out-of-distribution
    and hard sets where the settings ask for them, with the backbone's loss and the
    examples."""
    t0 = time.perf_counter()
    with stage("world"):
        sw = seed_world(seed, cfg)
    models = seed_models(seed, cfg, work, sw)
    scores = seed_test_scores(models, sw, cfg.progress)
    sets = [(split, ns) for split, ns in (("ood", ood_ns(cfg)), ("hard", cfg.ns))
            if sw.problems_and_pools(split)[0]]
    scored_sets = {split: hard_set_scores(models, sw, cfg, scores) if split == "hard"
                   else seed_test_scores(models, sw, cfg.progress, split) for split, _ in sets}
    with stage("evaluation", total=1 + len(sets), unit="sets") as st:
        result = evaluate_seed(seed, cfg, sw.splits.test, sw.test_pools, scores["prm"],
                               scores["orm"])
        st.update()
        for split, ns in sets:
            problems, pools = sw.problems_and_pools(split)
            scored = scored_sets[split]
            full = evaluate_seed(seed, replace(cfg, ns=ns), problems, pools, scored["prm"],
                                 scored["orm"])
            result[split] = {k: full[k] for k in SET_KEEP}
            st.update()
    if sw.hard:
        result["hard"]["hard_problems"] = sum(map(world.is_hard, sw.hard))
    result.update(lm_loss=models.lm_losses, train_examples=models.train_examples,
                  seconds=time.perf_counter() - t0)
    return result


def evaluate_seed(seed: int, cfg: DemoConfig, test_set: list, test_pools: list,
                  prm_scores: list, orm_scores: list) -> dict:
    """Best-of-N, majority vote, pass@N and step metrics of one seed's scored test pools."""
    checks = [world.check_pool(p, pool) for p, pool in zip(test_set, test_pools)]
    prm_pools = checked_pools(test_set, test_pools, prm_scores, cfg.aggregation,
                              world_clusterer(), checks)
    orm_pools = checked_pools(test_set, test_pools, orm_scores, "last", checks=checks)
    answered_idx = [[i for i, c in enumerate(cs) if c.answer is not None] for cs in checks]
    step_probs, step_labels, fe_labels, fe_preds = [], [], [], []
    for cs, ps in zip(checks, prm_scores):
        for c, probs in zip(cs, ps):
            # Step metrics follow the training policy: steps up to the first error.
            last = c.first_error if c.first_error >= 0 else len(c.labels) - 1
            for j, p in enumerate(fill_null_steps(probs[: last + 1])):
                step_probs.append(p)
                step_labels.append(int(c.labels[j] == 1))
            fe_labels.append(c.first_error)
            fe_preds.append(first_error_index(probs, 0.5, rules="prmkit"))  # null: 0.0, as in step metrics

    ns = list(cfg.ns)
    prm_curves = bon_curves(prm_pools, ns, estimator="exact", pool_size=None,
                            votes=("majority",), trials=400, seed=seed)
    orm_curves = bon_curves(orm_pools, ns, estimator="exact", pool_size=None, votes=(), seed=seed)
    return {
        "seed": seed,
        "prm": prm_curves.accuracy["best"],
        "orm": orm_curves.accuracy["best"],
        "majority": prm_curves.accuracy["majority"],
        "pass": prm_curves.accuracy["pass"],
        "first_error": subset_metrics(fe_labels, fe_preds),
        "top_picks": {"prm": top_picks(test_set, checks, prm_pools),
                      "orm": top_picks(test_set, checks, orm_pools)},
        "error_kinds": {
            name: kind_report(test_set, test_pools, scores,
                              pick_indices([p.scores for p in pools], answered_idx))
            for name, scores, pools in (("prm", prm_scores, prm_pools),
                                        ("orm", orm_scores, orm_pools))},
        "step_auroc": step_auroc(step_probs, step_labels),
        "calibration": calibration_bins(step_probs, step_labels),
        **pick_curves("prm", prm_pools, ns), **pick_curves("orm", orm_pools, ns),
    }


def pick_curves(name: str, pools: list[ProblemPool], ns: list[int]) -> dict[str, list]:
    """Per N, the best-of-N pick's expected proxy score (the reward model's own score of
    it) and the share of picks the checker finds right (exact, `bon_pick_mean`)."""
    return {f"{name}_pick_score": bon_pick_mean(pools, ns).tolist(),
            f"{name}_pick_right": bon_pick_mean(pools, ns, [p.correct for p in pools]).tolist()}


def top_picks(problems, checks, scored: list[ProblemPool]) -> dict:
    """What the reward model picks from each whole pool (best-of-64): shares of picks with a
    right answer, with a right process, and with the problem's systematic trap answer."""
    right_answer = right_process = trap = 0
    for prob, cs, sp in zip(problems, checks, scored):
        answered = [c for c in cs if c.answer is not None]
        pick = answered[int(np.argmax(sp.scores))]
        right_answer += pick.final_correct
        right_process += pick.first_error < 0
        trap += prob.trap_answer is not None and pick.answer == prob.trap_answer
    n = max(len(problems), 1)
    return {"right_answer": right_answer / n, "right_process": right_process / n,
            "trap_answer": trap / n}
