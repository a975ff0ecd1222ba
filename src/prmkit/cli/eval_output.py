"""Where `prmkit eval ...` results go: JSON to --output, metrics or a summary to stdout,
progress bars only where someone watches."""

from __future__ import annotations

import math
import sys

import orjson

from prmkit.data.io import atomic_write


def _clean(obj):
    """NaN -> None so that the JSON output stays valid."""
    if isinstance(obj, float) and math.isnan(obj):
        return None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    return obj


def emit(result: dict, args, summary) -> None:
    """JSON to --output; on stdout the metrics as JSON with --json, else `summary(result)`
    (a few lines for people)."""
    if getattr(args, "data_sources", None):
        result = result | {"data": args.data_sources}
    result = _clean(result)
    data = orjson.dumps(result, option=orjson.OPT_SERIALIZE_NUMPY)
    if getattr(args, "output", None):
        with atomic_write(args.output) as f:
            f.write(data + b"\n")
    if args.json:
        sys.stdout.write(data.decode() + "\n")
    else:
        sys.stdout.write(summary(result) + "\n")


def show_progress(args) -> bool:
    """Progress bars only on a terminal (a log or a pipe keeps every redraw), never with
    --json."""
    return not getattr(args, "json", False) and sys.stderr.isatty()
