"""`prmkit` command line: a thin layer over the Python API.

Each command group lives in its own module with a `register(subparsers)` function that
adds its parser and sets `func` (called with the parsed namespace, returns an exit code).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

from prmkit import __version__
from prmkit.errors import PrmkitError

COMMAND_MODULES = ["data", "grade", "train", "score", "export", "select", "eval", "generate", "search", "active", "cache",
                   "label", "demo", "serve"]


class CommandParser(argparse.ArgumentParser):
    """The parser of prmkit and of each of its commands (subparsers are made of the
    parent's class): options are never abbreviated (`--api-key` must not read as
    `--api-key-file`), and arguments a command does not take are reported by that command,
    with its own usage."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def parse_known_args(self, args=None, namespace=None):
        args = sys.argv[1:] if args is None else list(args)
        parsed, extras = super().parse_known_args(args, namespace)
        options = [e for e in extras if e.startswith("--")]
        if options and any(a.dest == "overrides" for a in self._actions):
            names = ", ".join(o.partition("=")[0] for o in options)
            self.error(f"{self.prog} takes no option{'s' if len(options) > 1 else ''} {names}; "
                       "config settings are given as key=value overrides: "
                       + " ".join(as_overrides(options, args)))
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras


def as_overrides(options: list[str], args: list[str]) -> list[str]:
    """Options (`--max_steps 5`, `--lora.r=8`, `--final-eval`) as key=value overrides; a
    value is the word after its option in `args` (argparse may have taken it as a
    positional)."""
    out = []
    for token in options:
        key, eq, value = token[2:].partition("=")
        if not eq:
            at = args.index(token) + 1
            given = at < len(args) and not args[at].startswith("-") and "=" not in args[at]
            value = args[at] if given else "true"
        out.append(f"{key.replace('-', '_')}={value}")
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
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


# Libraries whose loggers write to stdout (DeepSpeed: "Setting accelerator to CPU" when
# transformers or accelerate import it), which would land before a command's JSON.
STDOUT_LOGGERS = ("DeepSpeed",)


def keep_stdout_for_results() -> None:
    """Send the log handlers that those libraries attach to stdout to stderr instead."""
    for name in STDOUT_LOGGERS:
        log = logging.getLogger(name)
        for h in log.handlers:
            _to_stderr(h)
        if getattr(log, "_prmkit_stderr", False):
            continue
        add = log.addHandler

        def add_to_stderr(handler: logging.Handler, add=add) -> None:
            add(_to_stderr(handler))

        log.addHandler = add_to_stderr
        log._prmkit_stderr = True


def _to_stderr(handler: logging.Handler) -> logging.Handler:
    if isinstance(handler, logging.StreamHandler) and handler.stream is sys.stdout:
        handler.setStream(sys.stderr)
    return handler


def exit_launched(code: int) -> None:
    """Exit a process of a multi-process launch (torchrun, accelerate launch) once its work
    is written: without the interpreter's teardown, where threads that gloo or DeepSpeed
    leave behind can abort a finished process ("terminate called without an active
    exception", SIGABRT) and fail the launch. A single process exits as usual."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        sys.stdout.flush()
        sys.stderr.flush()
        logging.shutdown()
        os._exit(code)
    sys.exit(code)


def main(argv: list[str] | None = None) -> int:
    keep_stdout_for_results()
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
