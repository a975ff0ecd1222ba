"""Read scored best-of-N samples and build per-problem pools.

Accepted inputs: OpenAI's released scored-samples JSONL (one sample per line, fields
``problem, answer, is_correct, ..., prm_score, orm_score``), a single JSON object or a
JSON array of such samples, or prmkit's scored output (same fields; scores may also sit
in a ``scores`` object). The score is read by name: a number, a list of per-step
probabilities (aggregated with `Aggregation`), or OpenAI's ``rating_probs`` (per step
P(+1) + P(0): the neutral rating counts as not wrong, which reproduces the released
``prm_score``). A null step (``prmkit score`` cut it at max_length) counts as
`NULL_STEP_SCORE` (0.0), as everywhere in prmkit.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from prmkit.data.jsonstream import iter_any_json
from prmkit.errors import DataError
from prmkit.evaluation.bon import ProblemPool
from prmkit.scoring.aggregate import Aggregation, InvalidScoreError, aggregate
from prmkit.selection.vote import AnswerClusterer


@dataclass
class Sample:
    """One scored sample with where it came from (for error messages)."""

    record: dict[str, Any]
    path: str
    line: int | None

    @property
    def answer(self) -> str | None:
        a = self.record.get("answer", self.record.get("given_answer"))
        return None if a is None else str(a)

    @property
    def group(self) -> str:
        r = self.record
        key = r.get("unique_id") or r.get("problem_id") or r.get("problem")
        if key is None:
            raise DataError(self.path, self.line, "problem", "sample names no problem")
        return str(key)


def iter_json_records(path: str | os.PathLike) -> Iterator[tuple[int | None, dict]]:
    """(line, object) from JSONL, a JSON array, or JSON objects written one after another."""
    for line, obj in iter_any_json(path):
        if not isinstance(obj, dict):
            raise DataError(str(path), line, None, f"expected a JSON object, got {type(obj).__name__}")
        yield line, obj


def read_samples(path: str | os.PathLike) -> list[Sample]:
    """All samples of a scored-samples file (see module docstring)."""
    return [Sample(rec, str(path), line) for line, rec in iter_json_records(path)]


def _rating_probs_to_steps(value: list, sample: Sample, key: str) -> list[float | None]:
    out = []
    for i, step in enumerate(value):
        if step is None:  # a step cut by max_length
            out.append(None)
            continue
        if not isinstance(step, dict):
            raise DataError(sample.path, sample.line, f"{key}[{i}]", "expected {rating: prob}")
        out.append(float(step.get("1", 0.0)) + float(step.get("0", 0.0)))
    return out


def _holds_scores(value) -> bool:
    """A float, or a list of step scores (floats, nulls, rating dicts): what a score key
    names (an integer such as `level` or `num_tokens` is no score)."""
    if isinstance(value, float):
        return True
    return isinstance(value, list) and any(isinstance(v, float | dict) for v in value) and all(
        v is None or isinstance(v, float | int | dict) and not isinstance(v, bool) for v in value)


def _missing_score(rec: dict, key: str) -> str:
    """Why `key` gives no score, with the fields of the sample that hold scores."""
    if key in rec or key in (rec.get("scores") or {}):
        return "score is null"
    nested = rec.get("scores") if isinstance(rec.get("scores"), dict) else {}
    found = [k for k, v in rec.items() if k != "scores" and _holds_scores(v)]
    found += [k for k, v in nested.items() if _holds_scores(v) and k not in found]
    if found:
        return f"no such score field; this sample's score fields: {', '.join(found)}"
    return f"no such score field; this sample has no score fields (its fields: {', '.join(rec)})"


def sample_score(sample: Sample, key: str, aggregation: str | Aggregation = "prod") -> float:
    """The named score of one sample (see module docstring)."""
    rec = sample.record
    value = rec.get(key)
    if value is None and isinstance(rec.get("scores"), dict):
        value = rec["scores"].get(key)
    if value is None:
        raise DataError(sample.path, sample.line, key, _missing_score(rec, key))
    try:
        if isinstance(value, bool):
            raise TypeError
        if isinstance(value, int | float):
            score = float(value)
        elif isinstance(value, list):
            if any(isinstance(v, dict) for v in value):
                value = _rating_probs_to_steps(value, sample, key)
            if any(isinstance(v, bool) or not (v is None or isinstance(v, int | float))
                   for v in value):
                raise TypeError
            score = aggregate(value, aggregation)
        else:
            raise TypeError
    except (TypeError, ValueError, InvalidScoreError) as e:
        detail = str(e) or f"expected a number or a list of step probabilities, got {value!r}"
        raise DataError(sample.path, sample.line, key, detail) from None
    if np.isnan(score):
        raise DataError(sample.path, sample.line, key, "score is NaN")
    return score


def sample_correct(sample: Sample, grade: Callable[[str, str], bool] | None = None) -> bool:
    """The sample's is_correct flag, or grade(answer, ground_truth_answer) when absent."""
    flag = sample.record.get("is_correct")
    if isinstance(flag, bool):
        return flag
    gold = sample.record.get("ground_truth_answer")
    if flag is None and grade is not None and gold is not None and sample.answer is not None:
        return bool(grade(sample.answer, str(gold)))
    raise DataError(sample.path, sample.line, "is_correct", f"expected true/false, got {flag!r}")


def group_samples(samples: Sequence[Sample]) -> dict[str, list[Sample]]:
    groups: dict[str, list[Sample]] = {}
    for s in samples:
        groups.setdefault(s.group, []).append(s)
    return groups


def build_pools(
    samples: Sequence[Sample],
    score_key: str,
    *,
    aggregation: str | Aggregation = "prod",
    clusterer: AnswerClusterer | None = None,
    grade: Callable[[str, str], bool] | None = None,
) -> list[ProblemPool]:
    """One ProblemPool per problem; answer clusters are computed when a clusterer is given.

    Samples without an answer keep their slot but are never selected (as in the paper).
    """
    pools = []
    for gid, group in group_samples(samples).items():
        answered = [s for s in group if s.answer is not None]
        scores = [sample_score(s, score_key, aggregation) for s in answered]
        correct = [sample_correct(s, grade) for s in answered]
        clusters = clusterer.cluster([s.answer for s in answered]) if clusterer else None
        pools.append(
            ProblemPool(
                scores=np.asarray(scores, dtype=np.float64),
                correct=np.asarray(correct, dtype=bool),
                clusters=None if clusters is None else np.asarray(clusters, dtype=np.int64),
                n_slots=len(group),
                problem_id=gid,
            )
        )
    return pools
