"""Labelling sources for selected samples, one interface, StepExamples out.

Every source turns `LabelItem`s (a problem, a sampled solution's steps, its gold answer)
into `prmkit.data.StepExample`s, the unit prmkit's trainer reads; `write_examples` stores
them as TRL stepwise JSONL (soft labels kept), which `prmkit train` reads as it is.

- `LargePRMLabeler`: a large PRM's step probabilities; process labels up to the first step
  with P(wrong) above a threshold, or outcome labels (correct only if every step is).
- `GraderLabeler`: the final answer graded against the gold answer (outcome labels).
- `MonteCarloLabeler`: K rollouts from each step prefix (Math-Shepherd hard or soft
  estimation), or a binary search for the first error (OmegaPRM); rollouts counted.
- Humans: `prmkit.active.queue` writes a raw PRM800K queue and reads it back once labelled.

Outcome labels are stored as `outcome` and as the label of every step, so an ORM reads the
outcome and a PRM trained on them gets outcome supervision at each step.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from prmkit.data.records import StepExample
from prmkit.errors import PrmkitError
from prmkit.scoring.aggregate import fill_null_steps


@dataclass(frozen=True)
class LabelItem:
    """One sampled solution to label."""

    problem_id: str
    problem: str
    steps: tuple[str, ...]
    gold_answer: str | None = None
    answer: str | None = None  # the solution's extracted final answer
    sample_index: int = 0
    score: float | None = None  # the selector's score, shown to human labellers


class Labeler(Protocol):
    """A labelling source. `report()`: what it cost (rollouts, tokens, items)."""

    name: str

    def label(self, items: Sequence[LabelItem]) -> list[StepExample]: ...

    def report(self) -> dict: ...


# ---- pure label rules ------------------------------------------------------------------

def _check_probs(step_probs: Sequence[float]) -> None:
    for i, p in enumerate(step_probs):
        if not 0.0 <= p <= 1.0:
            raise PrmkitError(f"step {i}: probability must lie in [0, 1], got {p!r}")


def process_labels_from_step_probs(step_probs: Sequence[float | None],
                                   threshold: float = 0.2) -> list[int]:
    """PRM_large as labeller: +1 per step up to the first step with P(wrong) = 1 - p >
    threshold, which gets -1; steps after it are not labelled (list ends there). A step
    the PRM could not see (None: cut by its max_length) follows prmkit's null-step rule:
    it scores `NULL_STEP_SCORE` (0.0), so it is the first error at the latest."""
    step_probs = fill_null_steps(step_probs)
    _check_probs(step_probs)
    out = []
    for p in step_probs:
        if 1.0 - p > threshold:
            out.append(-1)
            break
        out.append(1)
    return out


def outcome_label_from_step_probs(step_probs: Sequence[float | None],
                                  threshold: float = 0.2) -> bool:
    """Correct only if every step is (P(wrong) <= threshold at every step; a null step is
    wrong)."""
    return all(v == 1 for v in process_labels_from_step_probs(step_probs, threshold))


def mc_step_labels(rollout_correct: Sequence[Sequence[bool]],
                   mode: Literal["hard", "soft"]) -> list[float]:
    """Math-Shepherd estimation: per step, from the K rollouts continuing its prefix,
    "hard" = 1.0 if any rollout reached the right answer else 0.0, "soft" = the share that did."""
    if mode not in ("hard", "soft"):
        raise PrmkitError(f"Monte Carlo label mode must be hard or soft, got {mode!r}")
    out = []
    for i, rollouts in enumerate(rollout_correct):
        if len(rollouts) == 0:
            raise PrmkitError(f"step {i}: no rollouts to estimate its label from")
        hits = sum(bool(r) for r in rollouts)
        out.append(float(hits > 0) if mode == "hard" else hits / len(rollouts))
    return out


def process_example(item: LabelItem, labels: Sequence[float]) -> StepExample:
    """A StepExample with `labels` on the first steps (the rest unsupervised)."""
    full = [float(v) for v in labels] + [None] * (len(item.steps) - len(labels))
    return StepExample(problem=item.problem, steps=item.steps, labels=tuple(full),
                       ratings=tuple(None if v is None else (1 if v >= 0.5 else -1) for v in full),
                       group=item.problem_id)


def outcome_example(item: LabelItem, correct: bool) -> StepExample:
    v = float(correct)
    return StepExample(problem=item.problem, steps=item.steps, labels=(v,) * len(item.steps),
                       ratings=(1 if correct else -1,) * len(item.steps), outcome=v,
                       group=item.problem_id)


def write_examples(examples: Sequence[StepExample], path: str | os.PathLike) -> tuple[int, int]:
    """TRL stepwise JSONL with soft labels (a prefix up to the last labelled step);
    returns (written, skipped: examples without a labelled step)."""
    from prmkit.data.stepwise import write_trl

    return write_trl(examples, path, soft=True)


# ---- sources ---------------------------------------------------------------------------

StepProbs = Callable[[Sequence[tuple[str, Sequence[str]]]], list[list[float | None]]]


@dataclass
class LargePRMLabeler:
    """A large PRM as labeller. `step_probs`: (problem, steps) pairs -> P(correct) per step
    (None for a step cut by the PRM's max_length: wrong, by the null-step rule), e.g.
    `prmkit.scoring.Scorer.score`."""

    step_probs: StepProbs
    supervision: Literal["process", "outcome"] = "process"
    threshold: float = 0.2
    name: str = "large_prm"
    _items: int = 0

    def __post_init__(self):
        if self.supervision not in ("process", "outcome"):
            raise PrmkitError(f"supervision must be process or outcome, got {self.supervision!r}")
        if not 0.0 <= self.threshold <= 1.0:
            raise PrmkitError(f"threshold must lie in [0, 1], got {self.threshold}")

    def label(self, items: Sequence[LabelItem]) -> list[StepExample]:
        probs = self.step_probs([(it.problem, list(it.steps)) for it in items])
        self._items += len(items)
        out = []
        for it, p in zip(items, probs, strict=True):
            if self.supervision == "process":
                out.append(process_example(
                    it, [1.0 if v > 0 else 0.0
                         for v in process_labels_from_step_probs(p, self.threshold)]))
            else:
                out.append(outcome_example(it, outcome_label_from_step_probs(p, self.threshold)))
        return out

    def report(self) -> dict:
        return {"source": self.name, "items": self._items, "supervision": self.supervision,
                "threshold": self.threshold}


@dataclass
class GraderLabeler:
    """Final-answer checking: outcome labels from grading the answer against the gold one.
    Items without a gold answer, or whose grade is undecided, are dropped (counted)."""

    timeout: float | None = None
    name: str = "grader"
    _counts: dict = field(default_factory=lambda: {"items": 0, "dropped": 0})

    def label(self, items: Sequence[LabelItem]) -> list[StepExample]:
        from prmkit.grading import extract_answer, grade_many

        kw = {} if self.timeout is None else {"timeout": self.timeout}
        todo = [it for it in items if it.gold_answer is not None]
        grades = grade_many([(it.answer if it.answer is not None else extract_answer(list(it.steps)),
                              it.gold_answer) for it in todo], progress=False, **kw)
        out = [outcome_example(it, g.correct) for it, g in zip(todo, grades, strict=True)
               if g.correct is not None]
        self._counts["items"] += len(items)
        self._counts["dropped"] += len(items) - len(out)
        return out

    def report(self) -> dict:
        return {"source": self.name, **self._counts}
