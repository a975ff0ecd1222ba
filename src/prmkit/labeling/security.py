"""Password hashing (Argon2) and random tokens.

Argon2 uses argon2-cffi's defaults unless $PRMKIT_ARGON2 gives
"time_cost,memory_cost_kib,parallelism" (lighter settings for tests or small machines).

Every hash runs in one worker thread of the lowest CPU priority (Linux niceness is per
thread, and Argon2's lanes inherit it): sign-ins hash one at a time, and however many
arrive, pages and ratings keep the CPU first. The hashes wait in a `hashqueue.RankedQueue`
of at most `MAX_WAITING`; a sign-in gives its client, rank and the hashes its client may
hold with `hash_turn` (a known browser first, then clients by their recent failures), so
a flood of wrong passwords does not starve a labeller's sign-in. Past the bounds, `Busy`
is raised at once.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import os
import secrets
import threading

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from prmkit.labeling.hashqueue import Busy as Busy  # raised to the callers
from prmkit.labeling.hashqueue import RankedQueue


def _make_hasher() -> PasswordHasher:
    spec = os.environ.get("PRMKIT_ARGON2")
    if not spec:
        return PasswordHasher()
    time_cost, memory_cost, parallelism = (int(x) for x in spec.split(","))
    return PasswordHasher(time_cost=time_cost, memory_cost=memory_cost, parallelism=parallelism)


_hasher = _make_hasher()
# Verified for unknown users, so that a wrong name costs as long as a wrong password.
_DUMMY_HASH = _hasher.hash(secrets.token_urlsafe(16))


MAX_WAITING = 32  # hashes waiting (each holds a request thread); one more is hashing
PER_FAILING_CLIENT = 2  # hashes a client with recent failures may have waiting or running


def _lowest_priority() -> None:
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (AttributeError, OSError):  # not Linux: the hashes still run one at a time
        pass


_queue = RankedQueue(MAX_WAITING, initializer=_lowest_priority)
_turn: contextvars.ContextVar[tuple[str | None, int, int | None]] = contextvars.ContextVar(
    "prmkit_hash_turn", default=(None, 0, None))


@contextlib.contextmanager
def hash_turn(client: str | None, rank: int, most: int | None = None):
    """Hashes in this block wait as `client`'s, ranked `rank` (lower goes first); `most`:
    the hashes that client may have waiting or running (None: the queue's bound only)."""
    reset = _turn.set((client, rank, most))
    try:
        yield
    finally:
        _turn.reset(reset)


def _in_hash_thread(fn, *args):
    client, rank, most = _turn.get()
    return _queue.run(fn, *args, client=client, rank=rank, most=most)


def hash_password(password: str) -> str:
    return _in_hash_thread(_hasher.hash, password)


def _verify(password: str, password_hash: str | None) -> tuple[bool, str | None]:
    try:
        _hasher.verify(password_hash or _DUMMY_HASH, password)
    except (VerificationError, InvalidHashError):
        return False, None
    if password_hash is None:
        return False, None
    return True, _hasher.hash(password) if _hasher.check_needs_rehash(password_hash) else None


def verify_password(password: str, password_hash: str | None) -> tuple[bool, str | None]:
    """(matches, new hash if the stored one uses outdated parameters)."""
    return _in_hash_thread(_verify, password, password_hash)


def new_token() -> str:
    return secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def same_token(a: str | None, b: str | None) -> bool:
    return bool(a) and bool(b) and secrets.compare_digest(a.encode(), b.encode())
