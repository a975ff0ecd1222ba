"""Streaming JSONL scoring: read solutions, append scored lines, resume after a stop.

Input lines: {"id"?, "problem", "steps": [...]} or OpenAI's scored-samples schema (same
two fields; every other field is kept). Output: each input line plus
- `step_scores`: P(correct) per step (null for a step cut by max_length; one value for
  an outcome model),
- `score`: the solution score, `step_scores` aggregated (prod/min/last/mean/geomean) by
  `prmkit.scoring.aggregate`, a null step counting as NULL_STEP_SCORE (0.0), so that a
  truncated solution never out-ranks a complete one under prod/min/last (an outcome
  model: its one value, 0.0 when the last step was cut),
- `step_rating_probs` (three-class models): {"1", "0", "-1"} probabilities per step,
- `truncated_steps`: only when some steps were cut,
- `scored_by`: the model (folder, fingerprint) and settings (aggregation, max_length,
  dtype) that scored the line (`prmkit.scoring.provenance`).
The input is checked whole before the output is touched (a malformed line is a DataError
naming the file and line, and leaves no output, or an existing one as it was). Lines are
written in input order and flushed chunk by chunk, so an interrupted run can be resumed: lines whose `id` (or, without ids, whose position) is already in the output are
skipped and new lines are appended. Resuming with another model or other settings than
the output's `scored_by` is refused unless forced.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from prmkit.data.io import LazyOutput, dumps_line, iter_jsonl
from prmkit.data.paths import check_input_file, check_output
from prmkit.data.resume import read_written
from prmkit.errors import DataError, PrmkitError
from prmkit.scoring.aggregate import AGGREGATIONS, Aggregation, aggregate
from prmkit.scoring.provenance import check_same_scorer

log = logging.getLogger("prmkit.scoring")

RATING_KEYS = ("1", "0", "-1")


@dataclass
class ScoreFileReport:
    out_path: str
    scored: int = 0  # solutions scored in this run
    skipped: int = 0  # already in the output (resume)
    truncated_steps: int = 0  # steps cut by max_length (score null)
    truncated_solutions: int = 0
    aggregation: str = "prod"

    def summary(self) -> str:
        text = (f"scored {self.scored} solutions -> {self.out_path} "
                f"(aggregation {self.aggregation}")
        text += f", {self.skipped} already there)" if self.skipped else ")"
        if self.truncated_steps:
            text += (f"; warning: {self.truncated_steps} steps in {self.truncated_solutions} "
                     "solutions were cut by max_length and have score null")
        return text


def _parse(path: str, line: int, obj) -> dict:
    if not isinstance(obj, dict):
        raise DataError(path, line, None, f"expected a JSON object, got {type(obj).__name__}")
    if not isinstance(obj.get("problem"), str):
        raise DataError(path, line, "problem", "missing or not a string")
    steps = obj.get("steps")
    if steps is None:
        raise DataError(path, line, "steps", "missing (expected a list of strings)")
    if not isinstance(steps, list) or not all(isinstance(s, str) for s in steps):
        raise DataError(path, line, "steps", "expected a list of strings")
    return obj


def _record_id(obj: dict):
    rid = obj.get("id")
    return None if rid is None else str(rid)


def _checked_count(path: str) -> int:
    """The number of solutions in the input, every line checked first: bad input stops
    the run before its output is touched (DataError naming the file and line)."""
    n = 0
    for line, obj in iter_jsonl(path):
        _parse(path, line, obj)
        n += 1
    return n


def _line_id(path: str, lineno: int, obj) -> str | None:
    return _record_id(obj) if isinstance(obj, dict) else None


def _output_record(obj: dict, scores, aggregation: str, orm: bool, scored_by: dict) -> dict:
    """The output line of input line `obj` scored `scores` (a scorer's SolutionScores)."""
    out = dict(obj)
    out["step_scores"] = scores.step_probs
    out["score"] = aggregate(scores.step_probs, Aggregation.LAST if orm else aggregation)
    if scores.class_probs is not None:
        out["step_rating_probs"] = [
            None if c is None else dict(zip(RATING_KEYS, c)) for c in scores.class_probs
        ]
    if scores.truncated:
        out["truncated_steps"] = scores.truncated
    out["scored_by"] = scored_by
    return out


def check_score_paths(in_path: str | os.PathLike, out_path: str | os.PathLike,
                      resume: bool = False, overwrite: bool = False) -> int:
    """What `score_file` checks before it scores anything, without a model (`prmkit
    score` runs it before loading one): the input is a file of valid solution lines, the
    output is not the input, can be written, and an existing one is continued (resume)
    or replaced (overwrite). Returns the number of solutions."""
    in_path, out_path = str(in_path), Path(out_path)
    check_input_file(in_path)
    if out_path.resolve() == Path(in_path).resolve():
        raise PrmkitError(f"{out_path}: the output must not be the input file")
    check_output(out_path, overwrite=overwrite, resume=resume,
                 resume_flag="--resume (resume=True)", overwrite_flag="--overwrite (overwrite=True)")
    return _checked_count(in_path)


def score_file(scorer, in_path: str | os.PathLike, out_path: str | os.PathLike,
               aggregation: str | None = None, resume: bool = False, overwrite: bool = False,
               chunk_size: int = 256, progress: bool = True,
               force: bool = False) -> ScoreFileReport:
    """Score every solution of a JSONL file into `out_path` with `scorer` (a
    `prmkit.scoring.Scorer`; see the module docstring).

    An existing output needs resume=True (continue it) or overwrite=True (start over).
    Resuming an output scored by another model or with other settings raises PrmkitError
    unless force=True.
    """
    in_path, out_path = str(in_path), Path(out_path)
    aggregation = aggregation or scorer.config.aggregation
    if aggregation not in AGGREGATIONS:
        raise PrmkitError(f"unknown aggregation {aggregation!r}; choose one of "
                          f"{', '.join(AGGREGATIONS)}")
    total = check_score_paths(in_path, out_path, resume=resume, overwrite=overwrite)
    done_ids: set[str] = set()
    done_count = 0
    scored_by = scorer.record(aggregation)
    if out_path.exists() and resume:
        written = read_written(out_path, _line_id, "scored_by")
        done_ids, done_count, saved = written.keys, written.lines, written.record
        if saved is not None and not force:
            check_same_scorer(out_path, saved, scored_by)
        elif saved is None and done_count:
            log.warning("%s: its lines record no model (scored_by); cannot check that they "
                        "were scored by %s", out_path, scored_by["model"])
    main = scorer.parallel.is_main  # data-parallel scoring: the first process writes
    scorer.parallel.barrier()  # every process has checked the output before it changes

    report = ScoreFileReport(str(out_path), aggregation=aggregation)
    orm = scorer.config.objective == "orm"
    bar = tqdm(total=total, unit="sol", desc="scoring",
               disable=not (progress and main), dynamic_ncols=True)

    def pending() -> Iterator[dict]:
        seen = 0
        for line, obj in iter_jsonl(in_path):
            rec = _parse(in_path, line, obj)
            rid = _record_id(rec)
            done = rid in done_ids if rid is not None else seen < done_count
            seen += 1
            if done:
                report.skipped += 1
                bar.update(1)
                continue
            yield rec

    # The output is opened at the first scored chunk: a run that fails before it leaves
    # no file, and an existing one (overwrite) as it was.
    with LazyOutput(out_path if main else os.devnull, append=resume) as f:
        try:
            chunk: list[dict] = []
            for rec in pending():
                chunk.append(rec)
                if len(chunk) >= chunk_size:
                    _write_chunk(scorer, chunk, f, scored_by, orm, report, bar)
                    chunk = []
            if chunk:
                _write_chunk(scorer, chunk, f, scored_by, orm, report, bar)
        finally:
            bar.close()
        f.open()  # a complete run leaves its output, if empty
    if report.truncated_steps:
        log.warning("%d steps in %d solutions were cut by max_length=%d and have score null",
                    report.truncated_steps, report.truncated_solutions,
                    scorer.encoder.fmt.max_length)
    return report


def _write_chunk(scorer, chunk: list[dict], f, scored_by: dict, orm: bool,
                 report: ScoreFileReport, bar) -> None:
    bar.refresh()  # show the solutions skipped on resume before a long first chunk
    results = scorer.score_chunk(chunk, bar.update)
    aggregation = scored_by["aggregation"]
    f.write(b"".join(dumps_line(_output_record(rec, res, aggregation, orm, scored_by))
                     for rec, res in zip(chunk, results, strict=True)))
    f.flush()
    for res in results:
        report.scored += 1
        if res.truncated:
            report.truncated_steps += res.truncated
            report.truncated_solutions += 1
