"""Errors of the labelling app, shown to the user (the web app maps them to HTTP codes)."""

from __future__ import annotations

from prmkit.errors import PrmkitError


class LabelingError(PrmkitError):
    """A request the app refuses (shown to the user; HTTP 400)."""


class NotFound(LabelingError):
    """No such object for this user (HTTP 404: other labellers' tasks look absent)."""


class Conflict(LabelingError):
    """The request clashes with what is stored (HTTP 409)."""
