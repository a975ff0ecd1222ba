"""Errors that the CLI turns into a clear message and exit code 2."""

from __future__ import annotations


class PrmkitError(Exception):
    """Base class for user-facing errors (bad input, bad config)."""


class DataError(PrmkitError):
    """A malformed record: names the file, the line (1-based) and the field."""

    def __init__(self, path: str | None, line: int | None, field: str | None, message: str):
        self.path, self.line, self.field, self.message = path, line, field, message
        where = str(path) if path is not None else "<input>"
        if line is not None:
            where += f":{line}"
        if field:
            where += f": field '{field}'"
        super().__init__(f"{where}: {message}")
