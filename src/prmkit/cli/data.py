"""`prmkit data`: stats, convert and fetch."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from tqdm import tqdm

from prmkit.cli.outputs import add_existing_output_arguments, check_file_outputs
from prmkit.data.convert import TARGETS, convert
from prmkit.data.fetch import ENV_VAR, fetch
from prmkit.data.paths import check_output_location
from prmkit.data.policies import PolicyOptions
from prmkit.data.readers import SUPPORTED
from prmkit.data.stats import file_stats

MATH500_RELATIVE = Path("math") / "math500.jsonl"


def _progress(desc: str):
    return lambda it: tqdm(it, desc=desc, unit=" rec", disable=None, file=sys.stderr)


def default_holdout() -> Path | None:
    """MATH500 from $PRMKIT_DATA/math/ or ../shared/data/math/ (relative to the working dir)."""
    roots = [os.environ.get(ENV_VAR), "../shared/data", "shared/data"]
    for root in roots:
        if root and (Path(root) / MATH500_RELATIVE).is_file():
            return Path(root) / MATH500_RELATIVE
    return None


def cmd_stats(args: argparse.Namespace) -> int:
    stats = file_stats(args.path, format=args.format, skip_bad=args.skip_bad,
                       progress=_progress("stats"))
    if args.json:
        print(json.dumps(stats, ensure_ascii=False))
    else:
        for key, value in stats.items():
            shown = json.dumps(value, ensure_ascii=False) if isinstance(value, dict) else value
            print(f"{key:>16}: {shown}")
    return 0


def _options(args: argparse.Namespace) -> PolicyOptions:
    holdout = None
    if not args.no_holdout:
        holdout = args.holdout or default_holdout()
        if holdout is None and args.to == "trl":
            print("prmkit: note: no MATH500 file found; pass --holdout PATH to remove test "
                  "problems from training data", file=sys.stderr)
    return PolicyOptions(
        neutral=args.neutral,
        until_first_error=not args.all_steps,
        alternatives=args.alternatives,
        human_steps=args.human_steps,
        drop_quality_control=not args.keep_quality_control,
        drop_finish_reasons=() if args.keep_bad_problems else ("bad_problem", "give_up"),
        holdout_path=None if holdout is None else str(holdout),
        hard_threshold=args.hard_threshold,
    )


def cmd_convert(args: argparse.Namespace) -> int:
    check_file_outputs(args, args.output)
    summary = convert(args.input, args.output, to=args.to, format=args.format,
                      options=_options(args), skip_bad=args.skip_bad,
                      progress=_progress("convert"), soft_labels=args.soft_labels)
    print(f"wrote {summary['written']} {args.to} record(s) to {args.output}", file=sys.stderr)
    if args.skip_bad:
        print(f"skipped {summary['skipped_bad']} bad record(s)", file=sys.stderr)
        for bad in summary["bad"][:5]:
            print(f"  line {bad['line']}: {bad['error']}", file=sys.stderr)
    policy = summary.get("policy")
    if policy:
        print(f"kept {policy['records_kept']}/{policy['records_in']} record(s); dropped: "
              f"{policy['dropped'] or 'none'}; MATH500 overlap removed: "
              f"{policy['holdout_overlap']} problem(s)", file=sys.stderr)
    if args.report:
        print(json.dumps(summary, ensure_ascii=False))
    return 0


def cmd_fetch(args: argparse.Namespace) -> int:
    def bar(total, desc):
        return tqdm(total=total, desc=desc, unit="B", unit_scale=True, disable=None,
                    file=sys.stderr)

    # a file already there that passes its checksum is the same file: kept
    check_output_location(args.dest, folder=True)
    paths = fetch(args.dest, source=args.source, timeout=args.timeout,
                  log=lambda m: print(m, file=sys.stderr), progress=bar)
    print(f"{len(paths)} file(s) verified in {args.dest}", file=sys.stderr)
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("data", help="read, inspect, convert and fetch datasets")
    sub = p.add_subparsers(dest="data_command", metavar="SUBCOMMAND", required=True)
    fmt_help = f"input format (default: detected); one of {', '.join(SUPPORTED)}"

    s = sub.add_parser("stats", help="counts of problems, solutions, steps and ratings")
    s.add_argument("path")
    s.add_argument("--format", choices=SUPPORTED, help=fmt_help)
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.add_argument("--skip-bad", action="store_true", help="skip malformed records")
    s.set_defaults(func=cmd_stats)

    c = sub.add_parser("convert", help="convert between formats (trl output applies the policy)")
    c.add_argument("input")
    c.add_argument("output")
    c.add_argument("--to", required=True, choices=TARGETS)
    c.add_argument("--format", choices=SUPPORTED, help=fmt_help)
    c.add_argument("--skip-bad", action="store_true", help="skip malformed records, report them")
    c.add_argument("--neutral", choices=("positive", "negative"), default="positive",
                   help="label of neutral (0) steps (default: positive, as in the paper)")
    c.add_argument("--all-steps", action="store_true",
                   help="supervise every step (default: up to and including the first error)")
    c.add_argument("--alternatives", choices=("chosen", "prefixes", "all"), default="prefixes",
                   help="chosen: kept path only; prefixes (default): kept prefix + each distinct "
                        "rated alternative; all: one example per rated alternative")
    c.add_argument("--human-steps", choices=("positive", "skip"), default="positive",
                   help="human-written steps: implied correct (default) or unsupervised")
    c.add_argument("--keep-quality-control", action="store_true",
                   help="keep quality-control and screening rows (dropped by default)")
    c.add_argument("--keep-bad-problems", action="store_true",
                   help="keep bad_problem and give_up trajectories (dropped by default)")
    c.add_argument("--holdout", type=Path,
                   help="MATH-style JSONL whose problems are removed (default: MATH500 from "
                        f"${ENV_VAR}/math/math500.jsonl or ../shared/data/math/math500.jsonl)")
    c.add_argument("--no-holdout", action="store_true", help="do not remove any problems")
    c.add_argument("--hard-threshold", type=float,
                   help="soft-label inputs: turn labels into 0/1 at this threshold")
    c.add_argument("--soft-labels", action="store_true",
                   help="trl output: write probabilities instead of booleans")
    c.add_argument("--report", action="store_true", help="print the summary as JSON")
    add_existing_output_arguments(c)
    c.set_defaults(func=cmd_convert)

    f = sub.add_parser("fetch", help="download or copy the official PRM800K files, verified")
    f.add_argument("--from", dest="source", type=Path,
                   help=f"folder holding the files (default: ${ENV_VAR}, else download)")
    f.add_argument("--dest", type=Path, default=Path("data/prm800k"),
                   help="destination folder (default: data/prm800k)")
    f.add_argument("--timeout", type=float, default=30.0, help="network timeout in seconds")
    f.set_defaults(func=cmd_fetch)
