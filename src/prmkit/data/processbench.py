"""ProcessBench (Qwen): JSON lists of items with the 0-based index of the first wrong step."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson

from prmkit.data.io import atomic_write
from prmkit.data.jsonstream import iter_any_json
from prmkit.data.records import ProcessBenchItem
from prmkit.errors import DataError

FORMAT = "processbench"
SUBSETS = ("gsm8k", "math", "olympiadbench", "omnimath")


def parse_item(obj: Any, path: str | None, line: int | None, subset: str | None) -> ProcessBenchItem:
    def err(field: str, msg: str) -> DataError:
        return DataError(path, line, field, msg)

    if not isinstance(obj, dict):
        raise err("<record>", f"expected an object, got {type(obj).__name__}")
    for name in ("problem", "steps", "label"):
        if name not in obj:
            raise err(name, "missing")
    if not isinstance(obj["problem"], str):
        raise err("problem", "expected a string")
    steps = obj["steps"]
    if not isinstance(steps, list) or not all(isinstance(s, str) for s in steps):
        raise err("steps", "expected a list of strings")
    label = obj["label"]
    if isinstance(label, bool) or not isinstance(label, int) or not -1 <= label < len(steps):
        raise err("label", f"expected -1 or a step index below {len(steps)}, got {label!r}")
    fac = obj.get("final_answer_correct")
    if fac is not None and not isinstance(fac, bool):
        raise err("final_answer_correct", "expected true, false or null")
    return ProcessBenchItem(
        id=str(obj.get("id", f"{subset or 'item'}-{line}")),
        problem=obj["problem"],
        steps=steps,
        label=label,
        final_answer_correct=fac,
        generator=obj.get("generator"),
        subset=subset,
    )


def read_processbench(
    path: str | os.PathLike, skip_bad: bool = False, bad: list | None = None
) -> Iterator[ProcessBenchItem]:
    """Stream ProcessBenchItem records; the subset is the file stem (gsm8k, math, ...)."""
    subset = Path(path).stem
    for line, obj in iter_any_json(path, skip_bad=skip_bad, bad=bad):
        try:
            yield parse_item(obj, str(path), line, subset)
        except DataError as e:
            if not skip_bad:
                raise
            if bad is not None:
                bad.append((line, str(e)))


def to_dict(item: ProcessBenchItem) -> dict:
    return {
        "id": item.id,
        "generator": item.generator,
        "problem": item.problem,
        "steps": list(item.steps),
        "final_answer_correct": item.final_answer_correct,
        "label": item.label,
    }


def write_processbench(items: Iterable[ProcessBenchItem], path: str | os.PathLike) -> int:
    """Write a ProcessBench JSON list atomically, one item at a time."""
    n = 0
    with atomic_write(path) as f:
        f.write(b"[")
        for item in items:
            if not isinstance(item, ProcessBenchItem):
                raise DataError(str(path), None, None, f"cannot write {type(item).__name__}")
            f.write(b",\n" if n else b"\n")
            f.write(orjson.dumps(to_dict(item)))
            n += 1
        f.write(b"\n]\n")
    return n
