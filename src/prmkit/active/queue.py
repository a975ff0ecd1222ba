"""Human labelling through a queue file in the raw PRM800K schema.

`write_label_queue` writes one raw PRM800K record per selected sample, as OpenAI's phase-2
files do: `question.pre_generated_steps` (the steps to rate), `pre_generated_answer`,
`pre_generated_verifier_score` (the selector's score), the `generation` index, and an empty
`label` (`finish_reason` null = not yet labelled). A top-level `sample` object keeps
`problem_id` and `sample_index` (prmkit's reader keeps unknown keys, so it round-trips).

Labellers (a person in the labelling app, or `label_record` in code) fill `label.steps`
and `finish_reason`; `read_label_queue` reads the file back with prmkit's PRM800K reader,
and applies a supervision policy to the labelled records (default: the paper's).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from prmkit.active.labelers import LabelItem
from prmkit.data.policies import PolicyOptions, PolicyReport, apply_policy
from prmkit.data.prm800k import read_prm800k, write_prm800k
from prmkit.data.records import (
    LabelledSolution,
    LabelledStep,
    Problem,
    Provenance,
    Step,
    StepExample,
)
from prmkit.errors import PrmkitError

SAMPLE_KEY = "sample"


def queue_record(item: LabelItem, generation: int) -> LabelledSolution:
    """An unlabelled raw PRM800K record for one sample."""
    return LabelledSolution(
        problem=Problem(text=item.problem, answer=item.gold_answer),
        steps=[],
        pre_generated_steps=list(item.steps),
        pre_generated_answer=item.answer,
        pre_generated_verifier_score=item.score,
        provenance=Provenance(generation=generation),
        extra={SAMPLE_KEY: {"problem_id": item.problem_id, "sample_index": item.sample_index}},
    )


def write_label_queue(items: Sequence[LabelItem], path: str | os.PathLike, generation: int) -> int:
    """Write the queue atomically; returns the number of records."""
    return write_prm800k((queue_record(it, generation) for it in items), path)


def label_record(record: LabelledSolution, ratings: Sequence[int], labeler: str | None = None,
                 ) -> LabelledSolution:
    """The record as a phase-2 labeller leaves it: one rated step per pre-generated step,
    stopping at the first -1 (`finish_reason` "found_error"), else "solution"."""
    steps = record.pre_generated_steps or []
    if len(ratings) > len(steps):
        raise PrmkitError(f"{len(ratings)} ratings for {len(steps)} steps")
    labelled = []
    for text, rating in zip(steps, ratings, strict=False):
        if rating not in (-1, 0, 1):
            raise PrmkitError(f"a rating is -1, 0 or 1, got {rating!r}")
        labelled.append(LabelledStep(completions=[Step(text=text, rating=rating, flagged=False)],
                                     chosen=0 if rating != -1 else None))
        if rating == -1:
            break
    found_error = bool(labelled) and labelled[-1].completions[0].rating == -1
    if not found_error and len(labelled) < len(steps):
        raise PrmkitError(f"ratings stop at step {len(labelled)} of {len(steps)} without a -1")
    return LabelledSolution(
        problem=record.problem, steps=labelled,
        finish_reason="found_error" if found_error else "solution",
        pre_generated_steps=record.pre_generated_steps,
        pre_generated_answer=record.pre_generated_answer,
        pre_generated_verifier_score=record.pre_generated_verifier_score,
        provenance=Provenance(labeler=labeler, generation=record.provenance.generation),
        extra=dict(record.extra),
    )


@dataclass
class QueueReadback:
    examples: list[StepExample]
    labelled: int
    pending: int  # records not labelled yet (finish_reason null)
    policy: PolicyReport = field(default_factory=PolicyReport)


def read_label_queue(path: str | os.PathLike, options: PolicyOptions | None = None) -> QueueReadback:
    """The labelled records of a queue file as StepExamples. Default policy: the paper's,
    with one example per solution (`alternatives="chosen"`: a queue rates one candidate
    per step, so "prefixes" would only repeat each solution's prefixes)."""
    labelled: list[LabelledSolution] = []
    pending = 0
    for rec in read_prm800k(path):
        if rec.finish_reason is None:
            pending += 1
        else:
            labelled.append(rec)
    report = PolicyReport()
    examples = []
    for ex in apply_policy(labelled, options or PolicyOptions(alternatives="chosen"), report):
        examples.append(ex)
    return QueueReadback(examples, len(labelled), pending, report)
