"""Sign-in throttling: failed sign-ins counted per account and per client address, in the
server's memory; past the limit, sign-ins are refused (HTTP 429 with Retry-After) before
any password is hashed, until the oldest failure in the window ages out.

A success clears the account's count (not the client's). Limits are per server process.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from dataclasses import dataclass, field

PRUNE_AT = 10_000  # keys kept before the expired ones are dropped


@dataclass(frozen=True)
class ThrottleLimits:
    """At most `per_account` failures per account and `per_client` per client address
    within `window_s` seconds; 0 switches that limit off."""

    per_account: int = 5
    per_client: int = 20
    window_s: float = 300.0

    def __post_init__(self):
        if self.per_account < 0 or self.per_client < 0:
            raise ValueError("sign-in limits must be >= 0")
        if not (math.isfinite(self.window_s) and self.window_s > 0):
            raise ValueError(f"the throttling window must be a positive number of seconds, "
                             f"got {self.window_s}")


@dataclass
class LoginThrottle:
    limits: ThrottleLimits = field(default_factory=ThrottleLimits)
    clock: object = time.monotonic
    _failures: dict[str, deque] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _keys(self, username: str, client: str) -> list[tuple[str, int]]:
        return [(f"user:{username.lower()}", self.limits.per_account),
                (f"client:{client}", self.limits.per_client)]

    def _recent(self, key: str, now: float) -> deque:
        q = self._failures.get(key)
        if q is None:
            return deque()
        while q and q[0] <= now - self.limits.window_s:
            q.popleft()
        if not q:
            del self._failures[key]
        return q

    def retry_after(self, username: str, client: str) -> int:
        """Seconds until a sign-in of `username` from `client` is allowed; 0: now."""
        now = self.clock()
        wait = 0.0
        with self._lock:
            for key, limit in self._keys(username, client):
                q = self._recent(key, now)
                if limit and len(q) >= limit:
                    wait = max(wait, q[len(q) - limit] + self.limits.window_s - now)
        return math.ceil(wait) if wait > 0 else 0

    def failed(self, username: str, client: str) -> None:
        now = self.clock()
        with self._lock:
            if len(self._failures) >= PRUNE_AT:  # names tried once and never again
                for key in list(self._failures):
                    self._recent(key, now)
            for key, limit in self._keys(username, client):
                if limit:
                    self._recent(key, now)
                    self._failures.setdefault(key, deque()).append(now)
                    q = self._failures[key]
                    while len(q) > limit:  # only the last `limit` failures matter
                        q.popleft()

    def succeeded(self, username: str) -> None:
        with self._lock:
            self._failures.pop(f"user:{username.lower()}", None)
