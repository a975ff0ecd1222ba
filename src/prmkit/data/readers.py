"""One entry point for every format: `read_records(path, format=None, skip_bad=False)`.

The format is detected from the file extension and the first record's keys, unless
given. Readers stream: memory stays constant whatever the file size.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from prmkit.data import math_problems, prm800k, prmbench, processbench, scored, stepwise
from prmkit.data import stepwise_critic as critic
from prmkit.data.jsonstream import iter_any_json
from prmkit.data.paths import check_input_file
from prmkit.errors import DataError


@dataclass(frozen=True)
class FormatInfo:
    name: str
    reader: Callable[..., Iterator[Any]]
    record_type: str
    description: str


FORMATS: dict[str, FormatInfo] = {
    f.name: f
    for f in (
        FormatInfo(prm800k.FORMAT, prm800k.read_prm800k, "LabelledSolution",
                   "raw PRM800K, JSONL or concatenated JSON"),
        FormatInfo(critic.FORMAT, critic.read_stepwise_critic, "LabelledSolution",
                   "denormalised PRM800K parquet (one row per candidate step)"),
        FormatInfo(processbench.FORMAT, processbench.read_processbench, "ProcessBenchItem",
                   "ProcessBench JSON list"),
        FormatInfo(prmbench.FORMAT, prmbench.read_prmbench, "PRMBenchItem", "PRMBench JSONL"),
        FormatInfo(stepwise.SHEPHERD_FORMAT, stepwise.read_math_shepherd, "StepExample",
                   "Math-Shepherd JSONL ('ки' step tags, +/- labels)"),
        FormatInfo(stepwise.TRL_FORMAT, stepwise.read_trl, "StepExample",
                   "TRL stepwise supervision JSONL (prompt, completions, labels)"),
        FormatInfo(math_problems.FORMAT, math_problems.read_math, "Problem",
                   "MATH problems (MATH500, math_splits)"),
        FormatInfo(math_problems.ANSWERS_FORMAT, math_problems.read_math, "Problem",
                   "MATH train answers list (problem, final_answer)"),
        FormatInfo(scored.FORMAT, scored.read_scored, "ScoredSample",
                   "scored best-of-N samples (list, object or JSONL)"),
    )
}
SUPPORTED = tuple(FORMATS)


def _unknown(path, what: str) -> DataError:
    return DataError(
        str(path), None, None, f"{what}; supported formats: {', '.join(SUPPORTED)} (use format=)"
    )


def format_from_keys(obj: Any) -> str | None:
    """The format whose records have these keys, or None."""
    if not isinstance(obj, dict):
        return None
    keys = set(obj)
    if "question" in keys and "label" in keys and isinstance(obj.get("label"), dict):
        return prm800k.FORMAT
    if {"prompt", "completions", "labels"} <= keys:
        return stepwise.TRL_FORMAT
    if {"input", "label"} <= keys and isinstance(obj.get("label"), str):
        return stepwise.SHEPHERD_FORMAT
    if {"original_process", "modified_process"} <= keys:
        return prmbench.FORMAT
    if {"problem", "steps", "label"} <= keys and isinstance(obj.get("label"), int):
        return processbench.FORMAT
    if "problem" in keys and "steps" in keys and (
        "rating_probs" in keys or any(k.endswith("_score") for k in keys)
    ):
        return scored.FORMAT
    if {"problem", "final_answer"} <= keys:
        return math_problems.ANSWERS_FORMAT
    if "problem" in keys and ("answer" in keys or "solution" in keys):
        return math_problems.FORMAT
    return None


def detect_format(path: str | os.PathLike) -> str:
    """Detect the format of `path` from its extension and its first record's keys."""
    p = check_input_file(path, "file")
    if p.suffix.lower() in (".parquet", ".pq"):
        return critic.FORMAT
    if p.suffix.lower() not in (".json", ".jsonl", ".jl", ".ndjson"):
        raise _unknown(path, f"cannot tell the format from the extension '{p.suffix}'")
    try:
        first = next(iter(iter_any_json(p)), None)
    except DataError as e:
        raise DataError(e.path, e.line, e.field, f"{e.message} (while detecting the format)") from None
    if first is None:
        raise _unknown(path, "empty file")
    name = format_from_keys(first[1])
    if name is None:
        keys = sorted(first[1]) if isinstance(first[1], dict) else type(first[1]).__name__
        raise _unknown(path, f"unrecognised record keys {keys}")
    return name


class RecordStream:
    """An iterable of records; `.bad` lists (line, message) of skipped bad records."""

    def __init__(self, path: str | os.PathLike, format: str, skip_bad: bool):
        self.path, self.format, self.skip_bad = path, format, skip_bad
        self.info = FORMATS[format]
        self.bad: list[tuple[int | None, str]] = []
        self.source: dict | None = None  # a Hub dataset's revision and files

    @property
    def skipped(self) -> int:
        return len(self.bad)

    def __iter__(self) -> Iterator[Any]:
        self.bad.clear()  # each pass reports its own bad records
        return self.info.reader(self.path, skip_bad=self.skip_bad, bad=self.bad)


def read_records(
    path: str | os.PathLike, format: str | None = None, skip_bad: bool = False
) -> RecordStream:
    """Stream typed records from `path` (or a Hub dataset name, NAME[@REV]:SPLIT, see
    prmkit.data.hub; `.source` then records its revision and files).

    format: one of SUPPORTED, or None to detect it. Bad records raise DataError naming
    file, line and field; with skip_bad=True they are skipped and listed in `.bad`.
    """
    from prmkit.data.hub import dataset_path

    path, source = dataset_path(path, single=True)  # a Hub name: its split's file
    if format is None:
        format = detect_format(path)
    elif format not in FORMATS:
        raise _unknown(path, f"unknown format '{format}'")
    check_input_file(path, "file")
    stream = RecordStream(path, format, skip_bad)
    stream.source = source
    return stream
