"""Which samples of the small-scale pools a small model learns from, labelled how: by
PRM_large's step probabilities (process or outcome), the grader (final answer) or the
checker (a control)."""

from __future__ import annotations

from prmkit.active.labelers import GraderLabeler, LabelItem, LargePRMLabeler, process_example
from prmkit.active.selection import dedupe_key
from prmkit.data.records import StepExample
from prmkit.demo.core import thresholds
from prmkit.demo.core.small_scale import SeedSetup
from prmkit.errors import PrmkitError

Picks = list[list[int]]  # per problem, indices into its pool


def uniform_picks(setup: SeedSetup, size: int) -> Picks:
    """The first `size` distinct samples of each pool (the pools are i.i.d.): as many
    labelled samples per problem as active selection's `size` distinct picks, where the
    pool holds them."""
    out = []
    for pool in setup.pools:
        seen, keep = set(), []
        for i, steps in enumerate(pool):
            if len(keep) == size:
                break
            key = dedupe_key(steps)
            if key not in seen:
                seen.add(key)
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
                           supervision=supervision, threshold=setup.threshold)


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
    """`thresholds.label_agreement` over the small models' pools, at the seed's threshold
    unless given."""
    return thresholds.label_agreement(setup.checks, setup.large_probs,
                                      setup.threshold if threshold is None else threshold)
