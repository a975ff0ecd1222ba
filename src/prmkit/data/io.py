"""Streaming JSON readers and atomic writers shared by every format."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import orjson

from prmkit.data.paths import check_input_file
from prmkit.errors import DataError


def cache_dir() -> Path:
    """prmkit's cache folder: $PRMKIT_CACHE, else $XDG_CACHE_HOME/prmkit (~/.cache/prmkit)."""
    root = os.environ.get("PRMKIT_CACHE") or Path(
        os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "prmkit"
    return Path(root)


def iter_jsonl(path: str | os.PathLike, skip_bad: bool = False, bad: list | None = None) -> Iterator[tuple[int, Any]]:
    """Yield (line_number, object) for each non-blank line, in constant memory.

    A line that is not valid JSON raises DataError naming file and line, unless
    skip_bad is set; then (line, message) is appended to `bad` and the line skipped. A
    missing file or a directory is a DataError too.
    """
    check_input_file(path, "file")
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                yield lineno, orjson.loads(raw)
            except orjson.JSONDecodeError:
                if not skip_bad:
                    raise DataError(str(path), lineno, None, json_line_error(raw)) from None
                if bad is not None:
                    bad.append((lineno, json_line_error(raw)))


def utf8_error(raw: bytes) -> str | None:
    """Why `raw` is not UTF-8 text (the byte and its column), or None if it is."""
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as e:
        column = len(raw[:e.start].decode("utf-8", "replace")) + 1
        return f"not UTF-8 text: byte 0x{raw[e.start]:02x} at column {column}"
    return None


def first_utf8_error(path: str | os.PathLike) -> tuple[int, str] | None:
    """(line, message) of the first line of a file that is not UTF-8 text, or None."""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            message = utf8_error(raw)
            if message is not None:
                return lineno, message
    return None


def json_line_error(raw: bytes) -> str:
    """Why one JSONL line is not JSON, with the column in that line (orjson counts the
    line's own newline as a second line)."""
    not_utf8 = utf8_error(raw)
    if not_utf8 is not None:
        return not_utf8
    try:
        orjson.loads(raw.rstrip(b"\r\n"))
    except orjson.JSONDecodeError as e:
        return f"invalid JSON at column {e.colno}: {e.msg}"
    return "invalid JSON"


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "wb") -> Iterator[IO]:
    """Write to a temporary file beside `path` and rename it into place on success.

    On any exception the temporary file is removed and `path` is left untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, mode) as f:
            yield f
        # mkstemp creates 0600 files; give the result the usual permissions.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


class LazyOutput:
    """A binary output opened at its first write ("ab" when appending, else "wb"): a run
    that fails before writing anything leaves no file, and an existing one as it was."""

    def __init__(self, path: str | os.PathLike, append: bool = False):
        self.path, self.append, self.file = Path(path), append, None

    def open(self) -> IO:
        if self.file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.file = open(self.path, "ab" if self.append else "wb")
        return self.file

    def write(self, data: bytes) -> None:
        self.open().write(data)

    def flush(self) -> None:
        if self.file is not None:
            self.file.flush()

    def close(self) -> None:
        if self.file is not None:
            self.file.close()

    def __enter__(self) -> LazyOutput:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def cached_json(path: str | os.PathLike, compute: Callable[[], Any]) -> Any:
    """The JSON value stored at `path`, else `compute()`, written there whole first (an
    interrupted run leaves no half-written file, so a rerun recomputes only what is missing)."""
    path = Path(path)
    if path.is_file():
        return json.loads(path.read_text())
    value = compute()
    with atomic_write(path, "w") as f:
        json.dump(value, f)
    return value


@contextlib.contextmanager
def atomic_folder(path: str | os.PathLike,
                  temporary: str | os.PathLike | None = None) -> Iterator[Path]:
    """Yield a temporary folder beside `path`; on success it replaces `path` whole.

    On any exception the temporary folder is removed and `path` is left untouched.
    `temporary` names the folder (emptied first), for a folder that other processes
    write into as well; by default a new one of its own.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if temporary is None:
        tmp = Path(tempfile.mkdtemp(prefix=path.name + ".", dir=path.parent))
    else:
        tmp = Path(temporary)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
    try:
        yield tmp
        os.chmod(tmp, 0o755)  # mkdtemp makes it private; caches are shared like any folder
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def dumps_line(obj: Any) -> bytes:
    """One JSONL line (bytes, newline-terminated)."""
    return orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n"


_ENDS = 1 << 20  # bytes hashed at each end of a file


def file_fingerprint(path: str | Path) -> dict:
    """Path, size and a hash of the first and last MiB: cheap on multi-GB weights, and it
    changes when a file is rewritten."""
    p = Path(path)
    if not p.is_file():
        return {"path": os.path.abspath(p), "missing": True}
    size = p.stat().st_size
    digest = hashlib.sha256()
    with open(p, "rb") as f:
        digest.update(f.read(_ENDS))
        if size > _ENDS:
            f.seek(max(_ENDS, size - _ENDS))
            digest.update(f.read(_ENDS))
    return {"path": os.path.abspath(p), "size": size, "ends_sha256": digest.hexdigest()}


def read_resumable_output(path: str | Path) -> Iterator[tuple[int, Any]]:
    """(line number, object) of each complete line of a JSONL output that a run appends to.
    An incomplete last line (a run killed mid-write) is cut off once the lines are read, so
    that appending continues from a clean line; a malformed complete line is a DataError."""
    path = Path(path)
    good_end = 0
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            if not raw.endswith(b"\n"):
                break  # only the last line can lack its newline: a partial write, dropped
            good_end += len(raw)
            if not raw.strip():
                continue
            try:
                obj = orjson.loads(raw)
            except orjson.JSONDecodeError:
                raise DataError(str(path), lineno, None,
                                "malformed line in the output file; cannot resume it") from None
            yield lineno, obj
    if good_end < path.stat().st_size:
        logging.getLogger("prmkit.data").warning(
            "%s: dropping an incomplete last line before resuming", path)
        with open(path, "r+b") as f:
            f.truncate(good_end)
