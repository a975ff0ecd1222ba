"""Scored best-of-N samples (OpenAI's released schema): JSON list, single object or JSONL.

`scores` holds every `*_score` field (prm_score, orm_score, ...). `step_scores` is
P(step is not wrong) = 1 - P(-1) from `rating_probs`; their product is the released
`prm_score` (the paper counts neutral steps as fine). The full `rating_probs` stay in
extra["rating_probs"].
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from prmkit.data.jsonstream import iter_any_json
from prmkit.data.math_problems import parse_level
from prmkit.data.records import ScoredSample
from prmkit.errors import DataError

FORMAT = "scored"
KNOWN_KEYS = {
    "problem",
    "answer",
    "is_correct",
    "subject",
    "level",
    "unique_id",
    "steps",
    "ground_truth_answer",
}


def parse_sample(obj: Any, path: str | None = None, line: int | None = None) -> ScoredSample:
    def err(name: str, msg: str) -> DataError:
        return DataError(path, line, name, msg)

    if not isinstance(obj, dict):
        raise err("<record>", f"expected an object, got {type(obj).__name__}")
    if not isinstance(obj.get("problem"), str):
        raise err("problem", "missing or not a string")
    steps = obj.get("steps") or []
    if not isinstance(steps, list) or not all(isinstance(s, str) for s in steps):
        raise err("steps", "expected a list of strings")
    scores: dict[str, float] = {}
    for k, v in obj.items():
        if k.endswith("_score"):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)):
                raise err(k, f"expected a number, got {v!r}")
            if v is not None:
                scores[k] = float(v)
    step_scores = None
    probs = obj.get("rating_probs")
    if probs is not None:
        if not isinstance(probs, list) or len(probs) != len(steps):
            raise err("rating_probs", f"expected one entry per step ({len(steps)})")
        step_scores = []
        for i, p in enumerate(probs):
            if not isinstance(p, dict) or "-1" not in p:
                raise err(f"rating_probs[{i}]", "expected an object with keys '-1', '0', '1'")
            step_scores.append(1.0 - float(p["-1"]))
    is_correct = obj.get("is_correct")
    if is_correct is not None and not isinstance(is_correct, bool):
        raise err("is_correct", "expected true, false or null")
    answer = obj.get("answer")
    return ScoredSample(
        problem=obj["problem"],
        answer=None if answer is None else str(answer),
        is_correct=is_correct,
        steps=steps,
        scores=scores,
        step_scores=step_scores,
        ground_truth_answer=obj.get("ground_truth_answer"),
        subject=obj.get("subject"),
        level=parse_level(obj.get("level"), path, line),
        unique_id=obj.get("unique_id"),
        extra={k: v for k, v in obj.items() if k not in KNOWN_KEYS and k not in scores},
    )


def read_scored(
    path: str | os.PathLike, skip_bad: bool = False, bad: list | None = None
) -> Iterator[ScoredSample]:
    for line, obj in iter_any_json(path, skip_bad=skip_bad, bad=bad):
        try:
            yield parse_sample(obj, str(path), line)
        except DataError as e:
            if not skip_bad:
                raise
            if bad is not None:
                bad.append((line, str(e)))
