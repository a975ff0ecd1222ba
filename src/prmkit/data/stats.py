"""Counts over a data file: problems, solutions, rated step candidates, ratings, ..."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable
from typing import Any

from prmkit.data.prmbench import PRMBenchItem
from prmkit.data.readers import read_records
from prmkit.data.records import (
    LabelledSolution,
    Problem,
    ProcessBenchItem,
    ScoredSample,
    StepExample,
)

RATING_KEYS = ("-1", "0", "1", "null")


def _rating_key(r: int | None) -> str:
    return "null" if r is None else str(r)


def compute_stats(records: Iterable[Any], format: str) -> dict[str, Any]:
    """One pass over `records`. `steps` counts step candidates: every rated alternative and
    human completion of a labelled solution (one parquet row each), every step otherwise."""
    problems: set[str] = set()
    solutions = steps = 0
    ratings: Counter = Counter({k: 0 for k in RATING_KEYS})
    finish: Counter = Counter()
    extra: dict[str, Counter] = {}
    erroneous = 0

    def bump(name: str, key: Any) -> None:
        extra.setdefault(name, Counter())[str(key)] += 1

    for rec in records:
        if isinstance(rec, LabelledSolution):
            problems.add(rec.problem.text)
            solutions += 1
            finish[_rating_key(rec.finish_reason) if rec.finish_reason is None else rec.finish_reason] += 1
            for pos in rec.steps:
                cands = list(pos.completions)
                if pos.human_completion is not None:
                    cands.append(pos.human_completion)
                steps += len(cands)
                for c in cands:
                    ratings[_rating_key(c.rating)] += 1
            prov = rec.provenance
            bump("phases", "1" if prov.generation is None else "2")
            if prov.is_quality_control_question:
                bump("flags", "quality_control")
            if prov.is_initial_screening_question:
                bump("flags", "initial_screening")
        elif isinstance(rec, ProcessBenchItem):
            problems.add(rec.problem)
            solutions += 1
            steps += len(rec.steps)
            erroneous += rec.label != -1
            # Steps before the earliest error are correct, it is wrong, later ones unrated.
            first = rec.label if rec.label != -1 else len(rec.steps)
            ratings["1"] += min(first, len(rec.steps))
            if rec.label != -1:
                ratings["-1"] += 1
                ratings["null"] += len(rec.steps) - first - 1
            bump("subsets", rec.subset)
        elif isinstance(rec, PRMBenchItem):
            problems.add(rec.question)
            solutions += 1
            steps += len(rec.modified_process)
            erroneous += bool(rec.error_steps)
            bump("classifications", rec.classification)
        elif isinstance(rec, StepExample):
            problems.add(rec.problem)
            solutions += 1
            steps += len(rec.steps)
            for r in rec.ratings or (None,) * len(rec.steps):
                ratings[_rating_key(r)] += 1
            erroneous += any(v is not None and v < 0.5 for v in rec.labels)
        elif isinstance(rec, ScoredSample):
            problems.add(rec.problem)
            solutions += 1
            steps += len(rec.steps)
            bump("is_correct", rec.is_correct)
        elif isinstance(rec, Problem):
            problems.add(rec.text)
            bump("levels", rec.level)
            if rec.subject:
                bump("subjects", rec.subject)
    out: dict[str, Any] = {
        "format": format,
        "problems": len(problems),
        "solutions": solutions,
        "steps": steps,
        "ratings": {k: ratings[k] for k in RATING_KEYS},
    }
    if finish:
        out["finish_reasons"] = dict(sorted(finish.items()))
    if format in ("processbench", "prmbench", "trl", "math-shepherd"):
        out["erroneous"] = erroneous
    for name, counter in extra.items():
        out[name] = dict(sorted(counter.items()))
    return out


def file_stats(
    path: str | os.PathLike, format: str | None = None, skip_bad: bool = False, progress=None
) -> dict[str, Any]:
    """Stats of one file; `progress` optionally wraps the record iterator (e.g. tqdm)."""
    stream = read_records(path, format=format, skip_bad=skip_bad)
    records = progress(stream) if progress else stream
    out = compute_stats(records, stream.format)
    out["path"] = str(path)
    if stream.source is not None:
        out["data"] = stream.source
    if skip_bad:
        out["skipped_bad"] = stream.skipped
    return out
