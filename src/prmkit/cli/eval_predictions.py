"""Prediction files of `prmkit eval processbench|prmbench --predictions`: read, checked,
and when they belong to something else, named for what they hold."""

from __future__ import annotations

import math
from collections.abc import Collection

from prmkit.data.io import iter_jsonl
from prmkit.errors import DataError


def read_predictions(path: str, required: tuple[str, ...]) -> dict[str, dict]:
    """{id: line} of a predictions JSONL file; each line has an `id` and one of
    `required` (DataError naming the file and line otherwise)."""
    out = {}
    for line, rec in iter_jsonl(path):
        if not isinstance(rec, dict) or "id" not in rec:
            raise DataError(path, line, "id", "expected an object with an 'id'")
        if not any(k in rec for k in required):
            raise DataError(path, line, None, f"expected one of: {', '.join(required)}")
        out[str(rec["id"])] = rec | {"_line": line}
    return out


def step_scores(rec: dict, path: str) -> list[float | None]:
    """A list of numbers or nulls (`prmkit score` writes null for a step cut by max_length;
    the metrics count it as prmkit.scoring.NULL_STEP_SCORE)."""
    value = rec["step_scores"]
    if not isinstance(value, list) or not all(
        v is None or (isinstance(v, int | float) and not isinstance(v, bool)) for v in value
    ):
        raise DataError(path, rec["_line"], "step_scores", "expected a list of numbers")
    if any(v is not None and math.isnan(v) for v in value):
        raise DataError(path, rec["_line"], "step_scores", "a step score is NaN")
    return [None if v is None else float(v) for v in value]


def file_kind(rec: dict) -> str:
    """What a line says its file is, from the records prmkit's writers leave in it."""
    if "search" in rec:
        return "`prmkit search` results"
    if "scored_by" in rec and "generated_by" in rec:
        return "scored samples (`prmkit generate`, then `prmkit score`)"
    if "scored_by" in rec:
        return "`prmkit score` output"
    if "generated_by" in rec:
        return "samples from `prmkit generate`"
    return "lines of another kind"


def check_predictions_match(path: str, predictions: dict[str, dict],
                            item_ids: Collection[str], benchmark: str) -> None:
    """A predictions file none of whose ids is an item of the benchmark is another kind
    of file: the error names its kind and shows both kinds of id."""
    if not predictions:
        raise DataError(path, None, None, "no predictions: the file has no lines")
    if any(k in item_ids for k in predictions):
        return
    ids = list(predictions)
    first = predictions[ids[0]]
    theirs = ", ".join(repr(k) for k in ids[:2])
    ours = ", ".join(repr(k) for k in sorted(item_ids)[:2])
    raise DataError(path, None, None,
                    f"it holds {file_kind(first)}, not predictions for {benchmark}: none "
                    f"of its {len(ids)} ids ({theirs}, ...) is a {benchmark} item's "
                    f"({ours}, ...); --model DIR scores the {benchmark} items with a model")
