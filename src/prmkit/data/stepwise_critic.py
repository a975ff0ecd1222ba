"""The denormalised "stepwise-critic" PRM800K parquet layout.

One row per (problem, previous steps, candidate next step), with columns
instruction, responses, next_response, answer, is_human_response, is_solution,
is_preferred_response, rating (1/0/-1/NaN) and optionally error_reason.

Rows of one trajectory are contiguous. Consecutive rows with the same
(instruction, responses) form one step position (a LabelledStep); a trajectory
continues while the next position's `responses` equal the previous ones plus the
preferred response; anything else starts a new trajectory. Grouping only
contiguous rows keeps repeated labellings of the same problem apart and keeps
memory constant. The layout moves "# Answer" out of the step text into `answer`;
the reader puts it back, so steps read exactly as in the raw PRM800K files.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from typing import Any

import pyarrow.parquet as pq

from prmkit.data.records import LabelledSolution, LabelledStep, Problem, Provenance, Step
from prmkit.errors import DataError

FORMAT = "stepwise-critic"
REQUIRED_COLUMNS = (
    "instruction",
    "responses",
    "next_response",
    "answer",
    "is_human_response",
    "is_solution",
    "is_preferred_response",
    "rating",
)
ANSWER_MARK = "\n\n# Answer\n\n"


def _rating(value: Any, path: str, row: int) -> int | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, bool) or value not in (-1, 0, 1):
        raise DataError(path, row, "rating", f"expected 1, 0, -1 or NaN, got {value!r}")
    return int(value)


def _check_row(r: dict, path: str, row: int) -> None:
    if not isinstance(r.get("instruction"), str):
        raise DataError(path, row, "instruction", "missing or not a string")
    if not isinstance(r.get("responses"), list):
        raise DataError(path, row, "responses", "missing or not a list of strings")
    if not isinstance(r.get("next_response"), str):
        raise DataError(path, row, "next_response", "missing or not a string")
    for name in ("is_human_response", "is_preferred_response"):
        if r.get(name) is None:
            raise DataError(path, row, name, "missing")


class _Position:
    """Rows of one step position, turned into a LabelledStep."""

    def __init__(self, key: tuple, first_row: int):
        self.key = key
        self.first_row = first_row
        self.completions: list[Step] = []
        self.human: Step | None = None
        self.chosen: int | None = None
        self.human_preferred = False
        self.solved = False

    def add(self, r: dict, path: str, row: int) -> None:
        text = r["next_response"]
        if r.get("answer") is not None:
            text = f"{text}{ANSWER_MARK}{r['answer']}"
        extra = {}
        if r.get("error_reason") is not None:
            extra["error_reason"] = r["error_reason"]
        step = Step(text=text, rating=_rating(r.get("rating"), path, row), extra=extra)
        if r["is_human_response"]:
            step.extra["source"] = "human"  # as the raw files mark human completions
            self.human = step
            self.human_preferred |= bool(r["is_preferred_response"])
        else:
            # The first preferred row is the kept one (duplicated texts can both be marked).
            if r["is_preferred_response"] and self.chosen is None and not self.human_preferred:
                self.chosen = len(self.completions)
            self.completions.append(step)
        self.solved |= bool(r.get("is_solution"))

    def labelled_step(self) -> LabelledStep:
        return LabelledStep(
            completions=self.completions, chosen=self.chosen, human_completion=self.human
        )

    def kept_text(self) -> str | None:
        """The text the next position's `responses` should end with."""
        if self.chosen is not None:
            return self.completions[self.chosen].text.split(ANSWER_MARK)[0]
        if self.human_preferred and self.human is not None:
            return self.human.text.split(ANSWER_MARK)[0]
        return None


def _solution(positions: list[_Position], path: str) -> LabelledSolution:
    last = positions[-1]
    return LabelledSolution(
        problem=Problem(text=last.key[0]),
        steps=[p.labelled_step() for p in positions],
        # The layout does not record why a trajectory ended unless it reached an answer.
        finish_reason="solution" if last.solved else None,
        provenance=Provenance(
            source_format=FORMAT, source_path=path, source_line=positions[0].first_row
        ),
    )


def _continues(positions: list[_Position], key: tuple) -> bool:
    prev = positions[-1]
    if prev.key[0] != key[0] or len(key[1]) != len(prev.key[1]) + 1:
        return False
    kept = prev.kept_text()
    return kept is not None and key[1][:-1] == prev.key[1] and key[1][-1] == kept


def read_stepwise_critic(
    path: str | os.PathLike,
    skip_bad: bool = False,
    bad: list | None = None,
    batch_rows: int = 4096,
) -> Iterator[LabelledSolution]:
    """Rebuild trajectories (LabelledSolution) from the parquet rows, streaming by batches.

    Errors name the file, the 1-based row (as `line`) and the column.
    """
    path = str(path)
    try:
        pf = pq.ParquetFile(path)
    except Exception as e:  # pyarrow raises several types for a non-parquet file
        raise DataError(path, None, None, f"not a readable parquet file ({e})") from None
    missing = [c for c in REQUIRED_COLUMNS if c not in pf.schema_arrow.names]
    if missing:
        raise DataError(path, None, missing[0], f"missing column(s) {', '.join(missing)}")
    positions: list[_Position] = []
    current: _Position | None = None
    row = 0
    for batch in pf.iter_batches(batch_size=batch_rows):
        for r in batch.to_pylist():
            row += 1
            try:
                _check_row(r, path, row)
                key = (r["instruction"], tuple(r["responses"]))
                if current is None or current.key != key:
                    if current is not None:
                        if positions and not _continues(positions, current.key):
                            yield _solution(positions, path)
                            positions = []
                        positions.append(current)
                    current = _Position(key, row)
                current.add(r, path, row)
            except DataError as e:
                if not skip_bad:
                    raise
                if bad is not None:
                    bad.append((row, str(e)))
    if current is not None:
        if positions and not _continues(positions, current.key):
            yield _solution(positions, path)
            positions = []
        positions.append(current)
    if positions:
        yield _solution(positions, path)
