"""Streaming reader for JSON that is not strict JSONL.

Handles, in bounded memory: pretty-printed objects written one after another
(PRM800K's "concatenated" form), a top-level array (yields its elements) and a
single top-level value. Every value comes with the 1-based line where it starts.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import orjson

from prmkit.data.io import first_utf8_error, iter_jsonl
from prmkit.data.paths import check_input_file
from prmkit.errors import DataError

CHUNK_CHARS = 1 << 20
MAX_VALUE_CHARS = 512 << 20  # one JSON value larger than this is treated as malformed

_decoder = json.JSONDecoder()
_WS = " \t\r\n"


class _Buffer:
    """A text window over a file: `text[pos:]` is unread; `line` is the line of `pos`."""

    def __init__(self, f):
        self.f = f
        self.text = ""
        self.pos = 0
        self.line = 1
        self.eof = False

    def fill(self) -> bool:
        """Read more text, dropping consumed text. False at end of file.

        Reads at least as much as is pending, so a value spanning many chunks costs
        O(size) decode attempts in total, not O(size^2).
        """
        if self.eof:
            return False
        chunk = self.f.read(max(CHUNK_CHARS, len(self.text) - self.pos))
        if not chunk:
            self.eof = True
            return False
        self.text = self.text[self.pos :] + chunk
        self.pos = 0
        return True

    def advance(self, end: int) -> None:
        self.line += self.text.count("\n", self.pos, end)
        self.pos = end

    def skip_ws(self) -> str | None:
        """Skip whitespace; return the next character without consuming it, None at EOF."""
        while True:
            n = len(self.text)
            i = self.pos
            while i < n and self.text[i] in _WS:
                i += 1
            self.advance(i)
            if i < n:
                return self.text[i]
            if not self.fill():
                return None

    def decode(self) -> Any:
        """Decode one JSON value at pos, reading more text while the value is incomplete."""
        while True:
            try:
                value, end = _decoder.raw_decode(self.text, self.pos)
            except json.JSONDecodeError as e:
                if len(self.text) - self.pos > MAX_VALUE_CHARS or not self.fill():
                    raise _BadValue(e) from None
                continue
            # A number at the very end of the buffer may continue in the next chunk.
            if end == len(self.text) and not isinstance(value, dict | list | str) and self.fill():
                continue
            self.advance(end)
            return value

    def resync(self) -> bool:
        """After a malformed value, move to the next line that starts with '{'."""
        while True:
            i = self.text.find("\n{", self.pos + 1)
            if i >= 0:
                self.advance(i + 1)
                return True
            self.advance(len(self.text))
            if not self.fill():
                return False


class _BadValue(Exception):
    def __init__(self, err: json.JSONDecodeError):
        super().__init__(err.msg)
        self.err = err


def _error_line(buf: _Buffer, err: json.JSONDecodeError) -> int:
    return buf.line + buf.text.count("\n", buf.pos, min(err.pos, len(buf.text)))


def iter_json_values(
    path: str | os.PathLike, skip_bad: bool = False, bad: list | None = None
) -> Iterator[tuple[int, Any]]:
    """Yield (line, value) for every top-level value, or every element of a top-level array.

    Malformed JSON raises DataError with file and line; with skip_bad the reader records
    (line, message) in `bad` and resumes at the next line that starts with '{'.
    """
    try:
        yield from _iter_values(path, skip_bad, bad)
    except UnicodeDecodeError:
        found = first_utf8_error(path)
        line, message = found if found is not None else (None, "not UTF-8 text")
        raise DataError(str(path), line, None, message) from None


def _iter_values(path, skip_bad: bool, bad: list | None) -> Iterator[tuple[int, Any]]:
    with open(path, encoding="utf-8") as f:
        buf = _Buffer(f)
        first = buf.skip_ws()
        if first is None:
            return
        in_array = first == "["
        if in_array:
            buf.advance(buf.pos + 1)
        while True:
            c = buf.skip_ws()
            if c is None:
                if in_array:
                    _fail(path, buf.line, "unexpected end of file inside a JSON array", skip_bad, bad)
                return
            if in_array and c == "]":
                return
            start_line = buf.line
            try:
                value = buf.decode()
            except _BadValue as e:
                line = _error_line(buf, e.err)
                _fail(path, line, f"invalid JSON ({e.err.msg})", skip_bad, bad)
                if not buf.resync():
                    return
                continue
            yield start_line, value
            if in_array:
                c = buf.skip_ws()
                if c == ",":
                    buf.advance(buf.pos + 1)
                elif c != "]":
                    _fail(path, buf.line, "expected ',' or ']' in JSON array", skip_bad, bad)
                    return


def _fail(path, line: int, message: str, skip_bad: bool, bad: list | None) -> None:
    if not skip_bad:
        raise DataError(str(path), line, None, message)
    if bad is not None:
        bad.append((line, message))


def sniff(path: str | os.PathLike, peek_bytes: int = 1 << 16) -> str:
    """Layout of a JSON file: 'jsonl', 'array', 'stream' (values one after another) or 'empty'."""
    with open(path, "rb") as f:
        head = f.read(peek_bytes)
        stripped = head.lstrip()
        if not stripped:
            return "empty"
        if stripped[:1] == b"[":
            return "array"
        f.seek(len(head) - len(stripped))
        first_line = f.readline()
    try:
        value = orjson.loads(first_line)
    except orjson.JSONDecodeError:
        return "stream"
    return "jsonl" if isinstance(value, dict) else "stream"


def iter_any_json(
    path: str | os.PathLike, skip_bad: bool = False, bad: list | None = None
) -> Iterator[tuple[int, Any]]:
    """(line, value) pairs from JSONL (fast path, orjson), a JSON array or concatenated JSON."""
    check_input_file(path, "file")
    layout = sniff(path)
    if layout == "empty":
        return iter(())
    if layout == "jsonl":
        return iter_jsonl(path, skip_bad=skip_bad, bad=bad)
    return iter_json_values(path, skip_bad=skip_bad, bad=bad)
