"""`prmkit cache list|prune`: what the prmkit cache folder holds, and pruning it."""

from __future__ import annotations

import dataclasses
import json
import time

from prmkit.training.cache_folder import (
    cache_summary,
    human_size,
    parse_size,
    prune_cache,
)


def _when(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t)) if t is not None else "-"


def cmd_list(args) -> int:
    s = cache_summary(args.cache_dir)
    if args.json:
        print(json.dumps(dataclasses.asdict(s), indent=2))
        return 0
    r = s.rows
    print(f"cache folder {s.root}")
    print(f"rows cache (rows/): {r.entries} entries, {human_size(r.bytes)}, last used "
          f"{_when(r.oldest_use)} (oldest) to {_when(r.newest_use)} (newest)")
    if r.partial_files:
        print(f"  temporary files of writes: {r.partial_files}, {human_size(r.partial_bytes)}")
    print(f"converted backbones: {len(s.backbones)}")
    for name, size in s.backbones.items():
        print(f"  {name}/  {human_size(size)}")
    print(f"sha256 cache (sha256.json): {s.digest_entries} entries, "
          f"{human_size(s.digest_bytes)}")
    return 0


def cmd_prune(args) -> int:
    max_bytes = parse_size(args.max_size) if args.max_size is not None else None
    report = prune_cache(args.cache_dir, older_than=args.older_than, max_bytes=max_bytes,
                         dry_run=args.dry_run, backbones=args.backbones)
    if args.json:
        print(json.dumps({**dataclasses.asdict(report), "freed_bytes": report.freed_bytes},
                         indent=2))
        return 0
    verb = "would remove" if report.dry_run else "removed"
    for f in report.removed:
        print(f"{verb} {f.path}  {human_size(f.bytes)}  last used {_when(f.last_use)}")
    for path in report.dropped_digests:
        print(f"{verb} the sha256 cache entry of missing {path}")
    n, d = len(report.removed), len(report.dropped_digests)
    print(f"{verb} {n} file{'s' * (n != 1)} or folder{'s' * (n != 1)} and {d} sha256 "
          f"entr{'ies' if d != 1 else 'y'}: {human_size(report.freed_bytes)} "
          f"{'would be ' if report.dry_run else ''}freed")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("cache", help="list or prune the prmkit cache folder")
    sub = p.add_subparsers(dest="cache_command", metavar="list|prune", required=True)
    folder = {"help": "the cache folder (default: $PRMKIT_CACHE or ~/.cache/prmkit)"}

    ls = sub.add_parser("list", help="rows-cache entries, converted backbones, sha256 cache")
    ls.add_argument("--cache-dir", **folder)
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=cmd_list)

    pr = sub.add_parser(
        "prune", help="remove old or least recently used rows-cache entries",
        description="Remove rows-cache entries unused for --older-than days, then the least "
        "recently used until the rows cache fits --max-size; temporary files older than a "
        "day; sha256 entries of files that no longer exist. Converted backbones are kept "
        "unless --backbones is given.")
    pr.add_argument("--older-than", type=float, metavar="DAYS",
                    help="remove entries not used for DAYS days")
    pr.add_argument("--max-size", metavar="SIZE",
                    help="keep the rows cache within SIZE (5GB, 500MB, 2GiB)")
    pr.add_argument("--backbones", action="store_true",
                    help="also remove every converted backbone (converted again on use)")
    pr.add_argument("--dry-run", action="store_true", help="print what would go; remove nothing")
    pr.add_argument("--cache-dir", **folder)
    pr.add_argument("--json", action="store_true")
    pr.set_defaults(func=cmd_prune)
