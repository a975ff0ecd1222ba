"""Request bodies parsed a piece at a time, so that a large one does not stall the server.

A parser that turns a whole body into objects in one call (orjson, pydantic's
`model_validate_json`) holds the interpreter for all of it: 0.13 to 0.75 s for a 50 MB
body here, during which the event loop, /health included, cannot run although the parse
is on a worker thread; so does decoding the body into one string (0.07 to 0.1 s). No
library in the server's dependencies parses JSON incrementally, so `loads` walks the
top-level object by hand over a window of the body, decoded a megabyte at a time, and
lets the standard library's C scanner parse one value at a time: each key's value, and
each element of a top-level array (the requests' lists of prompts, completions, token
ids). Between two values other threads run, so the longest hold is one element's parse
or one piece's decoding (milliseconds). An array with more elements than a request may
hold is refused at that element, before the rest is parsed.
"""

from __future__ import annotations

import codecs
import json
import json.scanner
import re
from collections.abc import Iterable
from typing import Any

PIECE = 1 << 20  # bytes decoded at a time
_scan = json.scanner.make_scanner(json.JSONDecoder())
_space = re.compile(r"[ \t\n\r]*")


class BadJSON(ValueError):
    def __init__(self, message: str, position: int):
        super().__init__(f"{message} (character {position})")
        self.position = position


class TooManyEntries(ValueError):
    def __init__(self, key: str, limit: int):
        super().__init__(f"has more than {limit} entries; this server takes at most {limit} "
                         f"per request")
        self.key = key


class _Window:
    """The body's text from `i` on, decoded as far as needed."""

    def __init__(self, chunks: Iterable[bytes]):
        self._chunks = iter(chunks)
        self._decoder = codecs.getincrementaldecoder("utf-8")()
        self._ended = False
        self.text, self.i, self.offset = "", 0, 0  # offset: characters dropped before text

    def more(self) -> bool:
        """Decode more of the body (at least what the window holds: a value longer than the
        window is parsed again at most about twice); False at its end."""
        if self._ended:
            return False
        want, got = max(PIECE, len(self.text) - self.i), []
        while want > 0:
            chunk = next(self._chunks, None)
            if chunk is None:
                self._ended = True
                break
            got.append(self._decoder.decode(chunk))
            want -= len(chunk)
        got.append(self._decoder.decode(b"", final=True) if self._ended else "")
        self.offset += self.i
        self.text, self.i = self.text[self.i:] + "".join(got), 0
        return True

    def peek(self) -> str:
        """The next character that is not white space ("" at the end)."""
        while True:
            self.i = _space.match(self.text, self.i).end()
            if self.i < len(self.text) or not self.more():
                return self.text[self.i: self.i + 1]

    def expect(self, chars: str, what: str) -> str:
        c = self.peek()
        if not c or c not in chars:
            raise BadJSON(f"expecting {what}", self.offset + self.i)
        self.i += 1
        return c

    def value(self) -> Any:
        self.peek()
        while True:
            try:
                value, end = _scan(self.text, self.i)
            except (StopIteration, json.JSONDecodeError) as e:
                at = e.value if isinstance(e, StopIteration) else e.pos
                msg = "expecting a value" if isinstance(e, StopIteration) else \
                    e.msg.replace(" starting at", "")
                cut = msg.startswith("Unterminated string") or at >= len(self.text) - 12
                if cut and self.more():  # the value may go on past the window
                    continue
                raise BadJSON(msg, self.offset + at) from None
            if end > len(self.text) - 32 and self.more():  # a number may be cut ("1.5|e3")
                continue
            self.i = end
            return value


def _array(w: _Window, key: str, max_entries: int | None) -> list:
    out: list = []
    if w.peek() == "]":
        w.i += 1
        return out
    while True:
        if max_entries is not None and len(out) >= max_entries:
            raise TooManyEntries(key, max_entries)
        out.append(w.value())
        if w.expect(",]", "',' or ']'") == "]":
            return out


def _object(w: _Window, max_entries: int | None) -> dict:
    out: dict = {}
    if w.peek() == "}":
        w.i += 1
        return out
    while True:
        if w.peek() != '"':
            raise BadJSON("expecting a property name in double quotes", w.offset + w.i)
        key = w.value()
        w.expect(":", "':'")
        if w.peek() == "[":
            w.i += 1
            out[key] = _array(w, key, max_entries)
        else:
            out[key] = w.value()
        if w.expect(",}", "',' or '}'") == "}":
            return out


def loads(body: bytes | Iterable[bytes], max_entries: int | None = None) -> Any:
    """The JSON value of `body` (bytes, or its chunks in order), as `json.loads` gives it;
    the arrays directly under a top-level object are parsed element by element and hold
    at most `max_entries` (else TooManyEntries naming the key). Raises BadJSON (with the
    character position) or UnicodeDecodeError for a body that is not UTF-8 JSON."""
    chunks = [body[k: k + PIECE] for k in range(0, len(body), PIECE)] \
        if isinstance(body, bytes | bytearray) else body
    w = _Window(chunks)
    if w.peek() == "{":
        w.i += 1
        value = _object(w, max_entries)
    else:
        value = w.value()
    if w.peek():
        raise BadJSON("extra data after the value", w.offset + w.i)
    return value
