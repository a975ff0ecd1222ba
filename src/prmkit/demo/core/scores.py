"""Reward-model scores of the world's solutions, and pools checked by the world's checker."""

from __future__ import annotations

import json
from pathlib import Path

from prmkit.data.io import atomic_write
from prmkit.demo import world
from prmkit.demo.core.stages import stage
from prmkit.evaluation.bon import ProblemPool
from prmkit.evaluation.samples import Sample, build_pools
from prmkit.selection import AnswerClusterer


def score_pools(model_dir: Path, pools: list, problems: list, progress: bool,
                stage_name: str = "scoring") -> list[list[list[float | None]]]:
    """Per problem, solution and step: the reward model's probability that the step is right
    (fp32, as every demo figure is scored). Each distinct (problem, solution) is scored
    once and its scores copied to its repeats: a pool of the world's samples repeats itself
    (about 12 distinct solutions in 64). A problem's solutions run its prompt once
    (share_prefixes): 2.5 to 2.7x faster on out-of-distribution pools, whose word problems
    are long, 1.3 to 1.4x on test pools, same scores to 2e-6 (BENCHMARKS.md, "The demo")."""
    from prmkit.scoring import Scorer

    scorer = Scorer.from_pretrained(model_dir, dtype=None, token_budget=16384,
                                    share_prefixes=True)
    items, slots = distinct_solutions(problems, pools)
    scores = []
    with stage(stage_name, total=len(items), unit="solutions") as st:
        for s in scorer.iter_scores(items, progress=progress):
            scores.append(s.step_probs)
            st.update()
    return [[list(scores[k]) for k in row] for row in slots]


def distinct_solutions(problems: list, pools: list) -> tuple[list[tuple], list[list[int]]]:
    """Each distinct (problem text, steps) once, in first-seen order, and per problem and
    sample the index of its item."""
    distinct: dict[tuple, int] = {}
    slots = [[distinct.setdefault((p.text, tuple(sol)), len(distinct)) for sol in pool]
             for p, pool in zip(problems, pools, strict=True)]
    return list(distinct), slots


def cached_scores(path: Path, model_dir: Path, pools: list, problems: list,
                  progress: bool = False, stage_name: str = "scoring") -> list:
    """`score_pools`, read from `path` when there (the caller keys `path`). Written whole or
    not at all (a run stopped mid-write leaves no file, so the next one scores again)."""
    if path.exists():
        return json.loads(path.read_text())
    scores = score_pools(model_dir, pools, problems, progress, stage_name)
    with atomic_write(path, "w") as f:
        f.write(json.dumps(scores))
    return scores


def same_number(a: str, b: str) -> bool:
    """Answer equivalence in the world: its answers are integers written plainly."""
    try:
        return int(a) == int(b)
    except ValueError:
        return a.strip() == b.strip()


def world_clusterer() -> AnswerClusterer:
    return AnswerClusterer(equivalent=same_number)


def checked_pools(problems: list, pools: list, scores: list, aggregation: str = "min",
                  clusterer: AnswerClusterer | None = None, checks: list | None = None
                  ) -> list[ProblemPool]:
    """One ProblemPool per problem (`prmkit.evaluation.samples.build_pools`): each solution's
    score (its step probabilities under `aggregation`, a null step counting as wrong, or a
    number), whether the checker finds its final answer right, and with a clusterer its
    answer's class; a solution without an answer keeps its slot and is never picked.
    checks: the checker's verdicts per problem and solution, when the caller has them."""
    samples = []
    for k, (prob, pool, sc) in enumerate(zip(problems, pools, scores, strict=True)):
        verdicts = checks[k] if checks is not None else [
            world.check_solution(prob, steps) for steps in pool]
        samples += [Sample({"problem_id": prob.id, "answer": c.answer,
                            "is_correct": c.final_correct, "score": s}, "demo", None)
                    for c, s in zip(verdicts, sc, strict=True)]
    return build_pools(samples, "score", aggregation=aggregation, clusterer=clusterer)
