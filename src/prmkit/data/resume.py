"""Continuing a JSONL output that a run appends to (`prmkit generate`, `score`, `search`):
what its lines already hold, and the refusal to append to lines another writer made."""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prmkit.data.io import read_resumable_output
from prmkit.errors import PrmkitError


@dataclass
class Written:
    """The complete lines of an output: the keys of those that have one, their number,
    and the first record of who wrote them (a dict), if any line has one."""

    keys: set = field(default_factory=set)
    lines: int = 0
    record: dict | None = None


def read_written(path: str | Path, key: Callable[[str, int, Any], Hashable | None],
                 record: str) -> Written:
    """What `path` already holds: `key(path, line, obj)` names each line (None: no key;
    it raises DataError for a line this output cannot have), `record` is the field that
    says who wrote a line. An incomplete last line (a run killed mid-write) is cut off,
    so that appending continues from a clean line."""
    out = Written()
    for lineno, obj in read_resumable_output(path):
        name = key(str(path), lineno, obj)
        if name is not None:
            out.keys.add(name)
        if out.record is None and isinstance(obj, dict) and isinstance(obj.get(record), dict):
            out.record = obj[record]
        out.lines += 1
    return out


def refuse_other_writer(path: str | Path, saved: dict, current: dict, keys: Iterable[str],
                        written_by: str) -> None:
    """Refuse to append to `path` when the `keys` of the record on its lines (`saved`)
    differ from this run's (`current`); the error says it was `written_by` and each
    difference."""
    diffs = [f"{k} {_shown(saved.get(k))} -> {_shown(current.get(k))}"
             for k in keys if saved.get(k) != current.get(k)]
    if diffs:
        raise PrmkitError(
            f"{path} was {written_by}: {'; '.join(diffs)}. Pass overwrite (--overwrite) to "
            "start it again, or force (--force) to append anyway (the file then mixes both)")


def _shown(value) -> str:
    return json.dumps(value, default=str)
