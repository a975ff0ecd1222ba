"""Progress of long work on stderr, for a person at a terminal and for a log alike.

On a terminal: a tqdm bar, redrawn in place. In a log or a pipe, where every redraw would
stay (and a reader waiting for a newline sees nothing until the bar closes), the same tqdm
counter writes plain lines instead: one when the work starts, one as soon as its first
unit is done (that unit's time says what the rest will take: rate and time left), then at
most one every `LOG_INTERVAL_S` seconds, and the last one when it ends. tqdm does the
counting, rates and time estimates; what is written here is only where the lines go.
"""

from __future__ import annotations

import re
import sys

from tqdm import tqdm

LOG_INTERVAL_S = 30.0
LOG_FORMAT = ("{desc}: {n_fmt} of {total_fmt} ({percentage:.0f}%), {elapsed} elapsed, "
              "about {remaining} left, {rate_fmt}{postfix}")


class _Lines:
    """A stream for tqdm that writes each status as its own line (tqdm starts a redraw
    with a carriage return): nothing written twice in a row, nothing drawn in place."""

    def __init__(self, stream):
        self.stream = stream
        self.last: str | None = None

    def write(self, text: str) -> int:
        for part in re.split(r"[\r\n]", text):
            part = part.rstrip()
            if part and part != self.last:
                self.stream.write(part + "\n")
                self.last = part
        return len(text)

    def flush(self) -> None:
        self.stream.flush()


class LogLines(tqdm):
    """A tqdm counter that reports in lines (module docstring)."""

    def __init__(self, *args, file=None, **kwargs):
        kwargs.update(mininterval=LOG_INTERVAL_S, maxinterval=LOG_INTERVAL_S, miniters=1,
                      smoothing=0, bar_format=LOG_FORMAT, dynamic_ncols=False)
        super().__init__(*args, file=_Lines(file if file is not None else sys.stderr),
                         **kwargs)

    def __iter__(self):  # tqdm's own loop updates only when an interval has passed
        if self.disable:
            yield from self.iterable
            return
        try:
            for item in self.iterable:
                yield item
                self.update(1)
        finally:
            self.close()

    def update(self, n=1):
        if n and not self.disable and self.n == self.initial:
            self.last_print_t = self._time() - self.mininterval  # the first unit: shown
        return super().update(n)


def on_terminal(stream=None) -> bool:
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def progress_bar(iterable=None, *, total=None, desc: str, unit: str, enabled: bool = True,
                 file=None, **kwargs) -> tqdm:
    """A tqdm bar on stderr (or `file`) when it is a terminal, else `LogLines`; disabled
    (nothing written) when not `enabled`. Other keyword arguments go to tqdm."""
    stream = sys.stderr if file is None else file
    cls = tqdm if on_terminal(stream) else LogLines
    return cls(iterable, total=total, desc=desc, unit=unit, disable=not enabled, file=stream,
               **kwargs)
