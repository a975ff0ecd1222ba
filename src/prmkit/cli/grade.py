"""`prmkit grade FILE.jsonl`: grade `given` against `gold` on each line."""

from __future__ import annotations

import argparse
import sys

import orjson

from prmkit.cli.outputs import add_existing_output_arguments, check_file_outputs
from prmkit.data.io import atomic_write, dumps_line, iter_jsonl
from prmkit.errors import DataError
from prmkit.grading import DEFAULT_TIMEOUT_S, grade_many


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "grade",
        help="grade final answers against reference answers",
        description="Each input line is a JSON object with `given` (an answer, a solution or a "
        "list of steps) and `gold`. Each output line repeats it with `correct` "
        "(true/false/null) and `reason`.",
    )
    parser.add_argument("file", help="input JSONL")
    parser.add_argument("-o", "--output", help="output JSONL (default: standard output)")
    add_existing_output_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print a JSON summary")
    parser.add_argument(
        "--explain", action="store_true", help="add extracted and normalised answers"
    )
    parser.add_argument(
        "--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds per comparison"
    )
    parser.add_argument("--workers", type=int, default=None, help="grading processes")
    parser.add_argument(
        "--skip-bad", action="store_true", help="skip malformed lines (reported on stderr)"
    )
    parser.set_defaults(func=run)


def _read_pairs(path: str, skip_bad: bool) -> tuple[list[dict], list[tuple[int, str]]]:
    bad: list[tuple[int, str]] = []
    records = []
    for lineno, obj in iter_jsonl(path, skip_bad=skip_bad, bad=bad):
        problem = None
        if not isinstance(obj, dict):
            problem = (None, "expected a JSON object")
        else:
            for field in ("given", "gold"):
                value = obj.get(field)
                valid = isinstance(value, str) or (
                    field == "given"
                    and isinstance(value, list)
                    and all(isinstance(v, str) for v in value)
                )
                if field not in obj:
                    problem = (field, "missing")
                elif value is None and field == "given":
                    continue
                elif not valid:
                    problem = (field, f"expected a string, got {type(value).__name__}")
                if problem:
                    break
        if problem:
            if not skip_bad:
                raise DataError(path, lineno, problem[0], problem[1])
            field = f"field '{problem[0]}': " if problem[0] else ""
            bad.append((lineno, field + problem[1]))
            continue
        records.append(obj)
    return records, bad


def run(args: argparse.Namespace) -> int:
    if args.timeout <= 0:
        raise DataError(None, None, "--timeout", "must be positive")
    check_file_outputs(args, args.output)
    records, bad = _read_pairs(args.file, args.skip_bad)
    for lineno, message in sorted(bad):
        print(f"prmkit: skipped {args.file}:{lineno}: {message}", file=sys.stderr)
    grades = grade_many(
        [(r.get("given"), r["gold"]) for r in records],
        workers=args.workers,
        timeout=args.timeout,
        progress=sys.stderr.isatty(),
    )
    lines = []
    for record, grade in zip(records, grades):
        out = dict(record, correct=grade.correct, reason=grade.reason)
        if args.explain:
            trail = grade.explain()
            for field in ("given_extracted", "gold_extracted", "given_normalised", "gold_normalised"):
                out[field] = trail[field]
        lines.append(dumps_line(out))
    if args.output:
        with atomic_write(args.output) as f:
            f.writelines(lines)
    elif not args.json:
        sys.stdout.buffer.writelines(lines)
        sys.stdout.flush()
    if args.json:
        summary = {
            "n": len(grades),
            "correct": sum(g.correct is True for g in grades),
            "incorrect": sum(g.correct is False for g in grades),
            "undecided": sum(g.correct is None for g in grades),
        }
        if bad:
            summary["skipped"] = len(bad)
        sys.stdout.buffer.write(orjson.dumps(summary) + b"\n")
        sys.stdout.flush()
    return 0
