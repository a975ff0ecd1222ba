"""Convert any supported input to TRL stepwise JSONL, raw PRM800K JSONL or ProcessBench JSON."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from prmkit.data.policies import (
    PolicyOptions,
    PolicyReport,
    apply_policy,
    as_step_example,
    solution_examples,
)
from prmkit.data.prm800k import write_prm800k
from prmkit.data.processbench import write_processbench
from prmkit.data.readers import read_records
from prmkit.data.records import LabelledSolution, ProcessBenchItem
from prmkit.data.stepwise import write_trl
from prmkit.errors import PrmkitError

TARGETS = ("trl", "prm800k", "processbench")


def processbench_item(record: Any, index: int, options: PolicyOptions) -> ProcessBenchItem | None:
    """A ProcessBench item from a labelled record: label = first wrong step, -1 if all correct.

    None when a step before the first wrong one has no label (its correctness is unknown).
    """
    if isinstance(record, ProcessBenchItem):
        return record
    if isinstance(record, LabelledSolution):
        whole = replace(options, alternatives="chosen", until_first_error=False)
        examples = solution_examples(record, whole)
        if not examples:
            return None
        ex = examples[0]
    else:
        ex = as_step_example(record)
    label = -1
    for i, v in enumerate(ex.labels):
        if v is None:
            return None
        if v < 0.5:
            label = i
            break
    return ProcessBenchItem(
        id=f"{ex.group or 'item'}-{index}",
        problem=ex.problem,
        steps=list(ex.steps),
        label=label,
        final_answer_correct=None if ex.outcome is None else ex.outcome >= 0.5,
    )


def convert(
    src: str | os.PathLike,
    dst: str | os.PathLike,
    to: str,
    format: str | None = None,
    options: PolicyOptions | None = None,
    skip_bad: bool = False,
    progress=None,
    soft_labels: bool = False,
) -> dict[str, Any]:
    """Read `src`, write `dst` in format `to` (atomically), return a summary dict.

    trl: records pass through the supervision policy (options) first.
    prm800k and processbench are format conversions: every record is written (no policy
    filters); processbench items get label = the first wrong step of the kept path.
    """
    options = options or PolicyOptions()
    if to not in TARGETS:
        raise PrmkitError(f"unknown target '{to}'; choose one of {', '.join(TARGETS)}")
    if Path(src).resolve() == Path(dst).resolve():
        raise PrmkitError("input and output are the same file")
    stream = read_records(src, format=format, skip_bad=skip_bad)
    records: Iterable[Any] = progress(stream) if progress else stream
    report = PolicyReport()
    summary: dict[str, Any] = {"input": str(src), "input_format": stream.format, "output": str(dst), "to": to}
    if to == "trl":
        written, unlabelled = write_trl(apply_policy(records, options, report), dst, soft=soft_labels)
        summary.update(written=written, skipped_unlabelled_examples=unlabelled)
        summary["policy"] = report.to_dict()
    elif to == "prm800k":
        if stream.info.record_type != "LabelledSolution":
            raise PrmkitError(
                f"cannot convert {stream.format} to prm800k: it needs labelled solutions "
                "(prm800k or stepwise-critic input)"
            )
        summary["written"] = write_prm800k(records, dst)
    else:
        items = _processbench_items(records, options, summary)
        summary["written"] = write_processbench(items, dst)
    if stream.source is not None:
        summary["data"] = stream.source
    summary["skipped_bad"] = stream.skipped
    summary["bad"] = [{"line": line, "error": msg} for line, msg in stream.bad[:20]]
    return summary


def _processbench_items(
    records: Iterable[Any], options: PolicyOptions, summary: dict
) -> Iterator[ProcessBenchItem]:
    unknown = 0
    for i, rec in enumerate(records):
        item = processbench_item(rec, i, options)
        if item is None:
            unknown += 1
            summary["skipped_unknown_label"] = unknown
            continue
        yield item
    summary.setdefault("skipped_unknown_label", unknown)
