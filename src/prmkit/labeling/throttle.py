"""Sign-in throttling that locks the attacker, not the account. Failed sign-ins are
counted in the server's memory within a sliding window, per (account, client address),
per client address and per account:

- past `per_pair` failures of an account from one client, that client's sign-ins to it
  are refused (429 with Retry-After, before any password is hashed);
- past `per_client` failures from a client (any accounts), its sign-ins are refused;
- past `per_account` failures of an account (all clients), the account is under attack:
  a client that has itself failed on it within the window waits until that failure ages
  out (one guess per client per window), while a client with no failure of its own on it
  is still let through. Strangers' failures alone never refuse the right password.

A browser that signed in to an account before carries a device cookie for it (see
`signin`); its sign-ins to that account are counted on that device alone (at most
`per_pair` failures), not against its address or the account. A success clears the
pair's (or the device's) failures, not the client's nor the account's.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from dataclasses import dataclass, field

PRUNE_AT = 10_000  # keys kept before the expired ones are dropped
RANK_CAP = 64  # a client's failures counted for its place in the hash queue


@dataclass(frozen=True)
class ThrottleLimits:
    """Failures allowed within `window_s` seconds: `per_pair` of an account from one client,
    `per_client` from a client, `per_account` of an account before it is under attack (see
    the module); 0 switches that limit off."""

    per_pair: int = 5
    per_client: int = 20
    window_s: float = 300.0
    per_account: int = 20

    def __post_init__(self):
        if min(self.per_pair, self.per_client, self.per_account) < 0:
            raise ValueError("sign-in limits must be >= 0")
        if not (math.isfinite(self.window_s) and self.window_s > 0):
            raise ValueError(f"the throttling window must be a positive number of seconds, "
                             f"got {self.window_s}")


def _pair(username: str, client: str) -> str:
    return f"pair:{username.lower()}\0{client}"


@dataclass
class LoginThrottle:
    limits: ThrottleLimits = field(default_factory=ThrottleLimits)
    clock: object = time.monotonic
    _failures: dict[str, deque] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _keys(self, username: str, client: str, device: str | None) -> list[tuple[str, int]]:
        """(key, failures kept) of a sign-in attempt; a kept count of 0: not counted."""
        lim = self.limits
        if device is not None:
            return [(f"device:{device}", lim.per_pair)]
        return [(_pair(username, client), lim.per_pair),
                (f"client:{client}", max(lim.per_client, RANK_CAP)),
                (f"user:{username.lower()}", lim.per_account)]

    def _recent(self, key: str, now: float) -> deque:
        q = self._failures.get(key)
        if q is None:
            return deque()
        while q and q[0] <= now - self.limits.window_s:
            q.popleft()
        if not q:
            del self._failures[key]
        return q

    def _wait(self, key: str, limit: int, now: float) -> float:
        """Seconds until `key` has fewer than `limit` failures in the window (0 if off)."""
        q = self._recent(key, now)
        if not limit or len(q) < limit:
            return 0.0
        return q[len(q) - limit] + self.limits.window_s - now

    def retry_after(self, username: str, client: str, device: str | None = None) -> int:
        """Seconds until a sign-in of `username` from `client` (or from a known `device`)
        is allowed; 0: now."""
        now, lim = self.clock(), self.limits
        with self._lock:
            if device is not None:
                wait = self._wait(f"device:{device}", lim.per_pair, now)
            else:
                pair = _pair(username, client)
                wait = max(self._wait(pair, lim.per_pair, now),
                           self._wait(f"client:{client}", lim.per_client, now))
                if self._wait(f"user:{username.lower()}", lim.per_account, now) > 0:
                    wait = max(wait, self._wait(pair, 1, now))  # under attack: one per window
        return math.ceil(wait) if wait > 0 else 0

    def client_failures(self, client: str) -> int:
        """Recent failures from `client` (at most RANK_CAP), whatever the accounts."""
        with self._lock:
            return len(self._recent(f"client:{client}", self.clock()))

    def failed(self, username: str, client: str, device: str | None = None) -> None:
        now = self.clock()
        with self._lock:
            if len(self._failures) >= PRUNE_AT:  # names tried once and never again
                for key in list(self._failures):
                    self._recent(key, now)
            for key, kept in self._keys(username, client, device):
                if kept:
                    self._recent(key, now)
                    q = self._failures.setdefault(key, deque())
                    q.append(now)
                    while len(q) > kept:  # only the last `kept` failures matter
                        q.popleft()

    def succeeded(self, username: str, client: str, device: str | None = None) -> None:
        with self._lock:
            self._failures.pop(_pair(username, client), None)
            if device is not None:
                self._failures.pop(f"device:{device}", None)
