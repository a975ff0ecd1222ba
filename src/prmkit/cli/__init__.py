"""`prmkit` command line: a thin layer over the Python API.

Each command group lives in its own module with a `register(subparsers)` function that
adds its parser and sets `func` (called with the parsed namespace, returns an exit code).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from prmkit import __version__
from prmkit.errors import PrmkitError

COMMAND_MODULES = ["data", "grade", "train", "score", "export", "select", "eval", "generate", "search", "active", "cache",
                   "label", "demo", "serve"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="prmkit", description="Process supervision for step-by-step math reasoning."
    )
    parser.add_argument("--version", action="version", version=f"prmkit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(f"prmkit.cli.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"prmkit.cli.{name}":
                continue
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
        return code
    except BrokenPipeError:
        # The reader went away (`prmkit ... | head`): stop quietly, as Unix tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE
    except PrmkitError as e:
        print(f"prmkit: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("prmkit: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
