"""Step-labelled examples: Math-Shepherd ("ки" tags) and TRL stepwise supervision JSONL."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from typing import Any

from prmkit.data.io import atomic_write, dumps_line
from prmkit.data.jsonstream import iter_any_json
from prmkit.data.records import StepExample
from prmkit.errors import DataError

SHEPHERD_FORMAT = "math-shepherd"
TRL_FORMAT = "trl"
SHEPHERD_TAG = "ки"
SHEPHERD_LABELS = {"+": 1.0, "-": 0.0}
_STEP_PREFIX = re.compile(r"^\s*Step \d+\s*:\s*")
_FIRST_STEP = re.compile(r"Step 1\s*:")


def parse_shepherd(obj: Any, path: str | None = None, line: int | None = None) -> StepExample:
    """One Math-Shepherd record -> StepExample.

    `input` is the problem followed by "Step 1: ... ки\\nStep 2: ... ки"; `label` is the
    same text with "+" or "-" in place of each tag. The problem is the text before
    "Step 1:"; the "Step N:" prefixes are removed from the steps.
    """

    def err(name: str, msg: str) -> DataError:
        return DataError(path, line, name, msg)

    if not isinstance(obj, dict):
        raise err("<record>", f"expected an object, got {type(obj).__name__}")
    text, label = obj.get("input"), obj.get("label")
    if not isinstance(text, str):
        raise err("input", "expected a string")
    if not isinstance(label, str):
        raise err("label", "expected a string")
    pieces = text.split(SHEPHERD_TAG)
    if len(pieces) < 2:
        raise err("input", f"no '{SHEPHERD_TAG}' step tag")
    labels: list[float] = []
    pos = 0
    for piece in pieces[:-1]:
        if label[pos : pos + len(piece)] != piece:
            raise err("label", f"does not match input near character {pos}")
        pos += len(piece)
        tag = label[pos : pos + 1]
        if tag not in SHEPHERD_LABELS:
            raise err("label", f"expected '+' or '-' at character {pos}, got {tag!r}")
        labels.append(SHEPHERD_LABELS[tag])
        pos += 1
    if label[pos:] != pieces[-1]:
        raise err("label", "has text after the last tag that differs from input")
    m = _FIRST_STEP.search(pieces[0])
    problem = pieces[0][: m.start()].strip() if m else ""
    first = pieces[0][m.start() :] if m else pieces[0]
    steps = [_STEP_PREFIX.sub("", s).strip() for s in [first, *pieces[1:-1]]]
    return StepExample(
        problem=problem,
        steps=tuple(steps),
        labels=tuple(labels),
        ratings=tuple(1 if v else -1 for v in labels),
    )


def parse_trl(obj: Any, path: str | None = None, line: int | None = None) -> StepExample:
    """{"prompt", "completions", "labels"} -> StepExample; labels may be bools or soft floats."""

    def err(name: str, msg: str) -> DataError:
        return DataError(path, line, name, msg)

    if not isinstance(obj, dict):
        raise err("<record>", f"expected an object, got {type(obj).__name__}")
    prompt, steps, labels = obj.get("prompt"), obj.get("completions"), obj.get("labels")
    if not isinstance(prompt, str):
        raise err("prompt", "expected a string")
    if not isinstance(steps, list) or not all(isinstance(s, str) for s in steps):
        raise err("completions", "expected a list of strings")
    if not isinstance(labels, list) or len(labels) != len(steps):
        raise err("labels", f"expected a list of {len(steps)} labels (one per completion)")
    values: list[float] = []
    for i, v in enumerate(labels):
        if isinstance(v, bool):
            values.append(1.0 if v else 0.0)
        elif isinstance(v, int | float) and 0.0 <= v <= 1.0:
            values.append(float(v))
        else:
            raise err(f"labels[{i}]", f"expected a bool or a probability in [0, 1], got {v!r}")
    return StepExample(
        problem=prompt,
        steps=tuple(steps),
        labels=tuple(values),
        ratings=tuple(1 if v == 1.0 else -1 if v == 0.0 else None for v in values),
    )


def _read(parse, path, skip_bad, bad) -> Iterator[StepExample]:
    for line, obj in iter_any_json(path, skip_bad=skip_bad, bad=bad):
        try:
            yield parse(obj, str(path), line)
        except DataError as e:
            if not skip_bad:
                raise
            if bad is not None:
                bad.append((line, str(e)))


def read_math_shepherd(
    path: str | os.PathLike, skip_bad: bool = False, bad: list | None = None
) -> Iterator[StepExample]:
    return _read(parse_shepherd, path, skip_bad, bad)


def read_trl(
    path: str | os.PathLike, skip_bad: bool = False, bad: list | None = None
) -> Iterator[StepExample]:
    return _read(parse_trl, path, skip_bad, bad)


def trl_row(ex: StepExample, soft: bool = False) -> dict | None:
    """StepExample -> TRL row; None when a step lacks a label (TRL needs one per step).

    Steps after the last supervised one are dropped. Labels are bools (p >= 0.5) unless
    `soft` is set, then probabilities.
    """
    labels = list(ex.labels)
    while labels and labels[-1] is None:
        labels.pop()
    if not labels or any(v is None for v in labels):
        return None
    values = [float(v) for v in labels] if soft else [bool(v >= 0.5) for v in labels]
    return {"prompt": ex.problem, "completions": list(ex.steps[: len(labels)]), "labels": values}


def write_trl(
    examples: Iterable[StepExample], path: str | os.PathLike, soft: bool = False
) -> tuple[int, int]:
    """Write TRL stepwise-supervision JSONL atomically. Returns (written, skipped)."""
    written = skipped = 0
    with atomic_write(path) as f:
        for ex in examples:
            if not isinstance(ex, StepExample):
                raise DataError(str(path), None, None, f"cannot write {type(ex).__name__} as TRL")
            row = trl_row(ex, soft=soft)
            if row is None:
                skipped += 1
                continue
            f.write(dumps_line(row))
            written += 1
    return written, skipped
