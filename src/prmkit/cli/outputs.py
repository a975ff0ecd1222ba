"""The options of a command that writes, for one rule (prmkit.data.paths.check_output):
an existing output is refused unless `--overwrite` replaces it or, where the command can
continue it, `--resume` does."""

from __future__ import annotations

import os
from pathlib import Path

from prmkit.data.paths import check_output, check_output_location
from prmkit.errors import PrmkitError


def add_existing_output_arguments(parser, resume_help: str | None = None) -> None:
    """--overwrite, and --resume when the command can continue an output (resume_help
    says how); the two exclude each other."""
    group = parser.add_mutually_exclusive_group()
    if resume_help is not None:
        group.add_argument("--resume", action="store_true",
                           help=f"continue an existing output: {resume_help}")
    group.add_argument("--overwrite", action="store_true",
                       help="replace an existing output (an output that exists is "
                            "refused without it)")


def check_file_outputs(args, *paths: str | os.PathLike | None) -> None:
    """Each given output file of a command that cannot continue one: writable, and
    refused when it exists unless --overwrite; run before any work."""
    for path in paths:
        if path is not None:
            check_output(path, overwrite=args.overwrite)


def check_report_folder(args, folder: str | os.PathLike, names: list[str]) -> Path:
    """A folder a command writes the files `names` into: writable, and refused when one
    of them exists unless --overwrite (other files in it are left alone)."""
    folder = check_output_location(folder, folder=True)
    found = [name for name in names if (folder / name).exists()]
    if found and not args.overwrite:
        raise PrmkitError(f"{folder} holds an earlier report ({', '.join(found)}): pass "
                          "--overwrite to replace it")
    return folder
