"""Supervision policies: labelled records -> StepExample training units.

Defaults follow "Let's Verify Step by Step": neutral steps count as positive,
supervision stops after the first wrong step, every labelled prefix is a training
unit ("prefixes"), quality-control/screening rows and bad_problem/give_up
trajectories are dropped, and MATH500 problems are removed from training data.

In "prefixes" mode every example of a trajectory reuses the very same problem
string and the same kept-prefix step strings and labels, so a trainer can merge
examples that share a prefix into one prefix tree.
"""

from __future__ import annotations

import hashlib
import os
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from prmkit.data.paths import check_input_file
from prmkit.data.prmbench import PRMBenchItem
from prmkit.data.records import LabelledSolution, ProcessBenchItem, Step, StepExample
from prmkit.errors import PrmkitError

Neutral = Literal["positive", "negative"]
Alternatives = Literal["chosen", "prefixes", "all"]
HumanSteps = Literal["positive", "skip"]

_WS = re.compile(r"\s+")


def normalize_problem(text: str) -> str:
    """Key for matching problem statements across sources: NFKC, no whitespace, casefolded."""
    return _WS.sub("", unicodedata.normalize("NFKC", text)).casefold()


def problem_group(text: str) -> str:
    """A stable id for a problem statement (keeps a problem on one side of a split)."""
    return hashlib.sha1(normalize_problem(text).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class PolicyOptions:
    """How labelled data becomes supervision. Defaults are the paper's choices."""

    neutral: Neutral = "positive"  # a 0 rating becomes label 1.0 ("positive") or 0.0
    until_first_error: bool = True  # supervise up to and including the first negative step
    alternatives: Alternatives = "prefixes"  # chosen | prefixes | all (see `solution_examples`)
    human_steps: HumanSteps = "positive"  # human-written steps: implied +1, or no supervision
    drop_quality_control: bool = True  # drop quality-control and initial-screening rows
    drop_finish_reasons: tuple[str, ...] = ("bad_problem", "give_up")
    holdout_path: str | None = None  # MATH500-style JSONL whose problems are removed
    hard_threshold: float | None = None  # soft-label inputs: None keeps soft labels

    def __post_init__(self):
        if self.neutral not in ("positive", "negative"):
            raise PrmkitError(f"neutral must be 'positive' or 'negative', not {self.neutral!r}")
        if self.alternatives not in ("chosen", "prefixes", "all"):
            raise PrmkitError(
                f"alternatives must be chosen, prefixes or all, not {self.alternatives!r}"
            )
        if self.human_steps not in ("positive", "skip"):
            raise PrmkitError(f"human_steps must be 'positive' or 'skip', not {self.human_steps!r}")
        if self.hard_threshold is not None and not 0.0 <= self.hard_threshold <= 1.0:
            raise PrmkitError("hard_threshold must lie in [0, 1]")


@dataclass
class PolicyReport:
    """What a policy kept and dropped, by reason."""

    records_in: int = 0
    records_kept: int = 0
    examples_out: int = 0
    dropped: Counter = field(default_factory=Counter)  # records, by reason
    skipped_candidates: Counter = field(default_factory=Counter)  # step candidates, by reason
    holdout_problems: int = 0  # problems in the holdout set
    holdout_overlap: int = 0  # distinct input problems found in the holdout set
    _overlap_keys: set = field(default_factory=set, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "records_in": self.records_in,
            "records_kept": self.records_kept,
            "examples_out": self.examples_out,
            "dropped": dict(sorted(self.dropped.items())),
            "skipped_candidates": dict(sorted(self.skipped_candidates.items())),
            "holdout_problems": self.holdout_problems,
            "holdout_overlap": self.holdout_overlap,
        }


def load_holdout(path: str | os.PathLike) -> set[str]:
    """Normalised problem texts of a MATH-style file (e.g. math500.jsonl)."""
    from prmkit.data.math_problems import read_math

    check_input_file(path, "holdout file")
    return {normalize_problem(p.text) for p in read_math(path)}


def rating_label(rating: int | None, options: PolicyOptions) -> float | None:
    if rating is None:
        return None
    if rating == 0:
        return 1.0 if options.neutral == "positive" else 0.0
    return 1.0 if rating > 0 else 0.0


def _human_rating(step: Step, options: PolicyOptions) -> int | None:
    if step.rating is not None:
        return step.rating
    return 1 if options.human_steps == "positive" else None


def _candidates(pos, options: PolicyOptions, report: PolicyReport | None) -> list[tuple[str, int]]:
    """(text, rating) of the rated candidates at one step position, completions first."""
    out = []
    for c in pos.completions:
        if c.rating is None:
            if report is not None:
                report.skipped_candidates["unrated"] += 1
            continue
        out.append((c.text, c.rating))
    if pos.human_completion is not None:
        r = _human_rating(pos.human_completion, options)
        if r is None:
            if report is not None:
                report.skipped_candidates["unrated"] += 1
        else:
            out.append((pos.human_completion.text, r))
    return out


def _kept_rating(pos, options: PolicyOptions) -> int | None:
    kept = pos.kept
    if kept is None:
        return None
    if pos.chosen is None:  # the human completion
        return _human_rating(kept, options)
    return kept.rating


def solution_examples(
    sol: LabelledSolution, options: PolicyOptions | None = None, report: PolicyReport | None = None
) -> list[StepExample]:
    """StepExamples of one trajectory (no record-level filtering).

    - "chosen": one example, the kept path plus, where the trajectory stops (e.g. phase 2's
      wrong step), the first rated candidate there.
    - "prefixes": for each step position, the kept prefix + each distinct rated candidate as
      the last step (identical candidate texts at one position are merged).
    - "all": like "prefixes" but one example per rated candidate, duplicates included.
    With until_first_error, nothing after the first kept step labelled 0 is supervised.
    """
    options = options or PolicyOptions()
    problem = sol.problem.text
    group = sol.problem.id or problem_group(problem)
    prefix_steps: list[str] = []
    prefix_labels: list[float | None] = []
    prefix_ratings: list[int | None] = []
    examples: list[StepExample] = []

    def emit(text: str, rating: int | None) -> None:
        examples.append(
            StepExample(
                problem=problem,
                steps=(*prefix_steps, text),
                labels=(*prefix_labels, rating_label(rating, options)),
                ratings=(*prefix_ratings, rating),
                group=group,
            )
        )

    for i, pos in enumerate(sol.steps):
        cands = _candidates(pos, options, report)
        kept = pos.kept
        if options.alternatives == "chosen":
            if kept is None:
                if cands:
                    prefix_steps.append(cands[0][0])
                    prefix_labels.append(rating_label(cands[0][1], options))
                    prefix_ratings.append(cands[0][1])
                break
        else:
            seen: set[str] = set()
            for text, rating in cands:
                if options.alternatives == "prefixes":
                    if text in seen:
                        if report is not None:
                            report.skipped_candidates["duplicate"] += 1
                        continue
                    seen.add(text)
                emit(text, rating)
            if kept is None:
                break
        rating = _kept_rating(pos, options)
        label = rating_label(rating, options)
        prefix_steps.append(kept.text)
        prefix_labels.append(label)
        prefix_ratings.append(rating)
        if options.until_first_error and label == 0.0:
            if report is not None and i + 1 < len(sol.steps):
                report.skipped_candidates["after_first_error"] += sum(
                    len(p.completions) + (p.human_completion is not None)
                    for p in sol.steps[i + 1 :]
                )
            break

    if options.alternatives == "chosen":
        if options.until_first_error and 0.0 in prefix_labels:
            cut = prefix_labels.index(0.0) + 1
            del prefix_steps[cut:], prefix_labels[cut:], prefix_ratings[cut:]
        if any(v is not None for v in prefix_labels):
            examples.append(
                StepExample(
                    problem=problem,
                    steps=tuple(prefix_steps),
                    labels=tuple(prefix_labels),
                    ratings=tuple(prefix_ratings),
                    group=group,
                )
            )
    return examples


def soft_example(ex: StepExample, options: PolicyOptions | None = None) -> StepExample | None:
    """The soft-label path (Math-Shepherd, TRL, benchmarks turned into examples).

    Labels are probabilities that a step is correct. hard_threshold (if set) turns them into
    0/1; until_first_error truncates after the first label below 0.5 (or the threshold).
    """
    options = options or PolicyOptions()
    labels = list(ex.labels)
    cut_at = 0.5 if options.hard_threshold is None else options.hard_threshold
    if options.hard_threshold is not None:
        labels = [None if v is None else float(v >= options.hard_threshold) for v in labels]
    n = len(labels)
    if options.until_first_error:
        for i, v in enumerate(labels):
            if v is not None and v < cut_at:
                n = i + 1
                break
    labels = labels[:n]
    if not any(v is not None for v in labels):
        return None
    ratings = tuple(ex.ratings[:n]) if ex.ratings else ()
    return StepExample(
        problem=ex.problem,
        steps=tuple(ex.steps[:n]),
        labels=tuple(labels),
        ratings=ratings,
        outcome=ex.outcome,
        group=ex.group or problem_group(ex.problem),
    )


def as_step_example(record: Any) -> StepExample:
    """Benchmark items as examples: steps before the first error are correct, the error is
    wrong; ProcessBench steps after it are unknown, PRMBench marks every wrong step."""
    if isinstance(record, StepExample):
        return record
    if isinstance(record, ProcessBenchItem):
        n = len(record.steps)
        labels = [1.0 if record.label < 0 or i < record.label else None for i in range(n)]
        if record.label >= 0:
            labels[record.label] = 0.0
        return StepExample(
            problem=record.problem,
            steps=tuple(record.steps),
            labels=tuple(labels),
            ratings=tuple(None if v is None else (1 if v else -1) for v in labels),
            outcome=None if record.final_answer_correct is None else float(record.final_answer_correct),
            group=problem_group(record.problem),
        )
    if isinstance(record, PRMBenchItem):
        wrong = set(record.error_steps)
        labels = [0.0 if i + 1 in wrong else 1.0 for i in range(len(record.modified_process))]
        return StepExample(
            problem=record.modified_question,
            steps=tuple(record.modified_process),
            labels=tuple(labels),
            ratings=tuple(1 if v else -1 for v in labels),
            group=problem_group(record.question),
        )
    raise PrmkitError(f"no supervision can be made from {type(record).__name__} records")


def _problem_text(record: Any) -> str:
    if isinstance(record, LabelledSolution):
        return record.problem.text
    if isinstance(record, PRMBenchItem):
        return record.question
    if isinstance(record, StepExample | ProcessBenchItem):
        return record.problem
    raise PrmkitError(f"no supervision can be made from {type(record).__name__} records")


def _drop_reason(sol: LabelledSolution, options: PolicyOptions) -> str | None:
    prov = sol.provenance
    if options.drop_quality_control:
        if prov.is_quality_control_question:
            return "quality_control"
        if prov.is_initial_screening_question or prov.generation == -1:
            return "screening"
    if sol.finish_reason in options.drop_finish_reasons:
        return sol.finish_reason
    return None


def apply_policy(
    records: Iterable[Any],
    options: PolicyOptions | None = None,
    report: PolicyReport | None = None,
    holdout: set[str] | None = None,
) -> Iterator[StepExample]:
    """Stream StepExamples from any labelled records, filling `report` as it goes.

    holdout: normalised problem texts to remove; by default loaded from options.holdout_path.
    """
    options = options or PolicyOptions()
    report = report if report is not None else PolicyReport()
    if holdout is None and options.holdout_path:
        holdout = load_holdout(options.holdout_path)
    holdout = holdout or set()
    report.holdout_problems = len(holdout)
    for record in records:
        report.records_in += 1
        key = normalize_problem(_problem_text(record))
        if key in holdout:
            report.dropped["holdout"] += 1
            if key not in report._overlap_keys:
                report._overlap_keys.add(key)
                report.holdout_overlap += 1
            continue
        if isinstance(record, LabelledSolution):
            reason = _drop_reason(record, options)
            if reason:
                report.dropped[reason] += 1
                continue
            examples = solution_examples(record, options, report)
        else:
            ex = soft_example(as_step_example(record), options)
            examples = [] if ex is None else [ex]
        if not examples:
            report.dropped["no_supervised_steps"] += 1
            continue
        report.records_kept += 1
        report.examples_out += len(examples)
        yield from examples
