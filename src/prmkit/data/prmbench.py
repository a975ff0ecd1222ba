"""PRMBench: PRM800K trajectories with injected errors, one JSON object per line."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from prmkit.data.jsonstream import iter_any_json
from prmkit.errors import DataError

log = logging.getLogger("prmkit.data")
FORMAT = "prmbench"
KNOWN_KEYS = (
    "original_question",
    "modified_question",
    "original_process",
    "modified_process",
    "modified_steps",
    "error_steps",
    "reason",
    "idx",
    "question",
    "classification",
)


@dataclass
class PRMBenchItem:
    """error_steps and modified_steps are 1-based step numbers into modified_process.

    About 100 of the 6,216 released items name an error step past the last step (e.g.
    step 34 of 33). They are kept as released: PRMBench's evaluation, and prmkit's, only
    visit existing steps, so such a number is ignored; `read_prmbench` logs how many."""

    idx: str
    question: str
    original_question: str
    modified_question: str
    original_process: list[str]
    modified_process: list[str]
    modified_steps: list[int]
    error_steps: list[int]
    reason: str | None = None
    classification: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. ground_truth, original_response

    @property
    def first_error(self) -> int:
        """0-based index of the earliest wrong step, -1 when none is marked."""
        return min(self.error_steps) - 1 if self.error_steps else -1


def _str_list(obj: dict, name: str, err) -> list[str]:
    v = obj.get(name)
    if not isinstance(v, list) or not all(isinstance(s, str) for s in v):
        raise err(name, "expected a list of strings")
    return v


def _int_list(obj: dict, name: str, err) -> list[int]:
    v = obj.get(name, [])
    if not isinstance(v, list) or not all(isinstance(s, int) and not isinstance(s, bool) for s in v):
        raise err(name, "expected a list of integers")
    return v


def parse_item(obj: Any, path: str | None = None, line: int | None = None) -> PRMBenchItem:
    def err(name: str, msg: str) -> DataError:
        return DataError(path, line, name, msg)

    if not isinstance(obj, dict):
        raise err("<record>", f"expected an object, got {type(obj).__name__}")
    modified = _str_list(obj, "modified_process", err)
    error_steps = _int_list(obj, "error_steps", err)
    if any(s < 1 for s in error_steps):
        raise err("error_steps", f"step numbers {error_steps} must start at 1")
    for name in ("original_question", "modified_question"):
        if not isinstance(obj.get(name), str):
            raise err(name, "expected a string")
    return PRMBenchItem(
        idx=str(obj.get("idx", line)),
        question=obj.get("question") or obj["original_question"],
        original_question=obj["original_question"],
        modified_question=obj["modified_question"],
        original_process=_str_list(obj, "original_process", err),
        modified_process=modified,
        modified_steps=_int_list(obj, "modified_steps", err),
        error_steps=error_steps,
        reason=obj.get("reason"),
        classification=obj.get("classification"),
        extra={k: v for k, v in obj.items() if k not in KNOWN_KEYS},
    )


def read_prmbench(
    path: str | os.PathLike, skip_bad: bool = False, bad: list | None = None
) -> Iterator[PRMBenchItem]:
    beyond: list[int] = []
    for line, obj in iter_any_json(path, skip_bad=skip_bad, bad=bad):
        try:
            item = parse_item(obj, str(path), line)
        except DataError as e:
            if not skip_bad:
                raise
            if bad is not None:
                bad.append((line, str(e)))
            continue
        if any(s > len(item.modified_process) for s in item.error_steps):
            beyond.append(line)
        yield item
    if beyond:
        log.warning("%s: %d item(s) name an error step past their last step (first at line "
                    "%d); kept, and such step numbers are ignored in evaluation",
                    path, len(beyond), beyond[0])
