"""Typed records shared by every reader, writer and later layer.

Ratings follow PRM800K: +1 correct, 0 neutral, -1 wrong, None unrated.
Unknown source fields are kept in `extra` so that writers can round-trip them.

Problem, Step, LabelledStep, Provenance and LabelledSolution are msgspec Structs: the
raw PRM800K reader decodes completions straight into `Step` and builds the rest without
a dict per record; they are used like dataclasses (same fields, defaults, keyword or
positional construction, mutability, equality; `msgspec.structs.asdict` for a dict).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

import msgspec


class Problem(msgspec.Struct):
    text: str
    answer: str | None = None  # ground-truth final answer
    id: str | None = None
    solution: str | None = None  # reference solution
    subject: str | None = None
    level: int | None = None


Rating = Annotated[int, msgspec.Meta(ge=-1, le=1)]
# `extra` holds a source's unknown keys; a source key named "extra" must go there too, so
# decoding never fills this field from JSON (no object meets both bounds).
_Extra = Annotated[dict[str, Any], msgspec.Meta(min_length=1, max_length=0)]


class Step(msgspec.Struct, forbid_unknown_fields=True):
    """One step candidate as written (by a model or a person) and rated.

    A completion with other keys fails to decode into it and takes the validating path,
    which keeps those keys in `extra`.
    """

    text: str
    rating: Rating | None = None
    flagged: bool | None = None
    extra: _Extra = msgspec.field(default_factory=dict)


class LabelledStep(msgspec.Struct):
    """A step position: the rated alternatives, the human completion and which one was kept."""

    completions: list[Step]
    chosen: int | None = None  # index into completions, None if none was kept
    human_completion: Step | None = None
    extra: dict[str, Any] = msgspec.field(default_factory=dict)

    @property
    def kept(self) -> Step | None:
        """The step the trajectory continues with: the chosen completion, else the human one."""
        if self.chosen is not None and 0 <= self.chosen < len(self.completions):
            return self.completions[self.chosen]
        return self.human_completion


class Provenance(msgspec.Struct):
    source_format: str | None = None
    source_path: str | None = None
    source_line: int | None = None
    labeler: str | None = None
    timestamp: str | None = None
    generation: int | None = None  # None in phase 1, -1 for screening
    is_quality_control_question: bool = False
    is_initial_screening_question: bool = False


class LabelledSolution(msgspec.Struct):
    problem: Problem
    steps: list[LabelledStep]
    finish_reason: str | None = None  # found_error | solution | bad_problem | give_up
    total_time: int | None = None
    pre_generated_steps: list[str] | None = None
    pre_generated_answer: str | None = None
    pre_generated_verifier_score: float | None = None
    provenance: Provenance = msgspec.field(default_factory=Provenance)
    extra: dict[str, Any] = msgspec.field(default_factory=dict)

    def trajectory(self) -> list[Step]:
        """The kept path: one step per position, stopping where no step was kept."""
        out = []
        for s in self.steps:
            k = s.kept
            if k is None:
                break
            out.append(k)
        return out


@dataclass
class ScoredSample:
    """One sample of a best-of-N pool (OpenAI's released schema, or prmkit's scored output)."""

    problem: str
    answer: str | None  # the sample's final answer
    is_correct: bool | None
    steps: list[str] = field(default_factory=list)
    scores: dict[str, float] = field(default_factory=dict)  # e.g. prm_score, orm_score
    step_scores: list[float] | None = None
    ground_truth_answer: str | None = None
    subject: str | None = None
    level: int | None = None
    unique_id: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class ProcessBenchItem:
    id: str
    problem: str
    steps: list[str]
    label: int  # 0-based index of the earliest wrong step, -1 if all correct
    final_answer_correct: bool | None = None
    generator: str | None = None
    subset: str | None = None


@dataclass(frozen=True)
class StepExample:
    """A training/scoring unit: a problem, a sequence of steps and per-step targets.

    labels[i] is the probability that step i is correct (1.0/0.0 hard, in between soft),
    or None where step i gets no supervision. ratings keeps the -1/0/+1 rating for
    three-class models. outcome is the final-answer label for outcome reward models.
    """

    problem: str
    steps: tuple[str, ...]
    labels: tuple[float | None, ...] = ()
    ratings: tuple[int | None, ...] = ()
    outcome: float | None = None
    group: str | None = None  # problem id, for splits that keep a problem on one side
