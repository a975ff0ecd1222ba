"""MATH problems: MATH500 / PRM800K math_splits JSONL, and the 7,500 train answers list;
a problems file as `prmkit generate`, `prmkit search` and the active loop read it, each
problem named by one key."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator
from typing import Any

from prmkit.data.jsonstream import iter_any_json
from prmkit.data.paths import check_input_file
from prmkit.data.records import Problem
from prmkit.errors import DataError, PrmkitError

FORMAT = "math"
ANSWERS_FORMAT = "math-answers"
_LEVEL = re.compile(r"^\s*(?:Level\s*)?(\d+)\s*$", re.IGNORECASE)


def parse_level(value: Any, path: str | None = None, line: int | None = None) -> int | None:
    """"Level 3" or 3 -> 3; "Level ?" or null -> None."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        m = _LEVEL.match(value)
        if m:
            return int(m.group(1))
        if value.strip().rstrip("?").strip().lower() in ("level", ""):
            return None
    raise DataError(path, line, "level", f"expected 'Level N' or an integer, got {value!r}")


def parse_problem(obj: Any, path: str | None = None, line: int | None = None) -> Problem:
    if not isinstance(obj, dict):
        raise DataError(path, line, "<record>", f"expected an object, got {type(obj).__name__}")
    if not isinstance(obj.get("problem"), str):
        raise DataError(path, line, "problem", "missing or not a string")
    answer = obj.get("answer", obj.get("final_answer"))
    if answer is not None and not isinstance(answer, str):
        answer = str(answer)
    return Problem(
        text=obj["problem"],
        answer=answer,
        id=obj.get("unique_id"),
        solution=obj.get("solution"),
        subject=obj.get("subject") or obj.get("type"),
        level=parse_level(obj.get("level"), path, line),
    )


def read_math(
    path: str | os.PathLike, skip_bad: bool = False, bad: list | None = None
) -> Iterator[Problem]:
    """Problems from MATH JSONL/JSON (problem, solution, answer, subject, level, unique_id),
    or from the train answers list (problem, final_answer); `path` may be a Hub dataset
    name (NAME[@REV]:SPLIT, see prmkit.data.hub)."""
    from prmkit.data.hub import dataset_path

    path = dataset_path(path, single=True)[0]
    for line, obj in iter_any_json(path, skip_bad=skip_bad, bad=bad):
        try:
            yield parse_problem(obj, str(path), line)
        except DataError as e:
            if not skip_bad:
                raise
            if bad is not None:
                bad.append((line, str(e)))


def problem_key(problem: Problem) -> str:
    """The problem's unique_id, else (none, or an empty one) the digest of its text,
    "sha256:<16 hex>": stable across runs and resumes."""
    key = "" if problem.id is None else str(problem.id)
    return key or "sha256:" + hashlib.sha256(problem.text.encode()).hexdigest()[:16]


def read_problems(path: str | os.PathLike, limit: int | None = None) -> list[Problem]:
    """The first `limit` (None: all) problems of a MATH-style file or Hub split; two
    problems with one key are an error (outputs are keyed by it), and so is a file
    without problems."""
    from prmkit.data.hub import dataset_path

    if limit is not None and limit < 1:
        raise PrmkitError(f"limit must be at least 1, got {limit}")
    path = str(dataset_path(path, single=True)[0])  # a Hub name: its split's file
    check_input_file(path, "problems file")
    problems, seen = [], {}
    for line, obj in iter_any_json(path):
        if limit is not None and len(problems) >= limit:
            break
        problem = parse_problem(obj, path, line)
        key = problem_key(problem)
        if key in seen:
            raise DataError(path, line, "unique_id",
                            f"{key!r} repeats the problem of line {seen[key]}")
        seen[key] = line
        problems.append(problem)
    if not problems:
        raise PrmkitError(f"{path}: no problems")
    return problems
