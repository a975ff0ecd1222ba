"""Password hashing (Argon2) and random tokens.

Argon2 uses argon2-cffi's defaults unless $PRMKIT_ARGON2 gives
"time_cost,memory_cost_kib,parallelism" (lighter settings for tests or small machines).
"""

from __future__ import annotations

import hashlib
import os
import secrets

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError


def _make_hasher() -> PasswordHasher:
    spec = os.environ.get("PRMKIT_ARGON2")
    if not spec:
        return PasswordHasher()
    time_cost, memory_cost, parallelism = (int(x) for x in spec.split(","))
    return PasswordHasher(time_cost=time_cost, memory_cost=memory_cost, parallelism=parallelism)


_hasher = _make_hasher()
# Verified for unknown users, so that a wrong name costs as long as a wrong password.
_DUMMY_HASH = _hasher.hash(secrets.token_urlsafe(16))


def hash_password(password: str) -> str:
    return _hasher.hash(password)


def verify_password(password: str, password_hash: str | None) -> tuple[bool, str | None]:
    """(matches, new hash if the stored one uses outdated parameters)."""
    try:
        _hasher.verify(password_hash or _DUMMY_HASH, password)
    except (VerificationError, InvalidHashError):
        return False, None
    if password_hash is None:
        return False, None
    return True, hash_password(password) if _hasher.check_needs_rehash(password_hash) else None


def new_token() -> str:
    return secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def same_token(a: str | None, b: str | None) -> bool:
    return bool(a) and bool(b) and secrets.compare_digest(a.encode(), b.encode())
