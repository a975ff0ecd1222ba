"""One sign-in attempt: who is trying (account, client address, known browser), whether
the throttle lets it through, and its place in the hash queue.

A browser that signed in to an account keeps a device cookie for it (`prmkit_device`,
path /login, 30 days): a random id signed (itsdangerous, HMAC-SHA1 with a key made when
the app starts, salted with the account's name) so that it proves an earlier success on
that account without naming it. Its later sign-ins to that account are throttled on the
device alone and hash first, whatever strangers do from its address or to the account.
"""

from __future__ import annotations

import secrets
from typing import NamedTuple

from fastapi import Request
from fastapi.responses import Response
from itsdangerous import BadSignature, TimestampSigner
from sqlalchemy.orm import Session

from prmkit.labeling import accounts, security
from prmkit.labeling.models import User

DEVICE_COOKIE = "prmkit_device"
DEVICE_LIFETIME_S = 30 * 24 * 3600
MAX_COOKIE = 200  # longer device cookies are ignored unread


def new_device_key() -> bytes:
    return secrets.token_bytes(32)


def _signer(key: bytes, username: str) -> TimestampSigner:
    return TimestampSigner(key, salt=f"prmkit-device:{username.lower()}")


def device_cookie(key: bytes, username: str) -> str:
    return _signer(key, username).sign(secrets.token_urlsafe(16)).decode()


def known_device(key: bytes, cookie: str | None, username: str) -> str | None:
    """The device id of `cookie` if it was given at a sign-in to `username`, else None."""
    if not cookie or len(cookie) > MAX_COOKIE:
        return None
    try:
        return _signer(key, username).unsign(cookie, max_age=DEVICE_LIFETIME_S).decode()
    except (BadSignature, UnicodeDecodeError):
        return None


class Attempt(NamedTuple):
    username: str
    client: str  # the peer's address (the proxy's, unless `serve --forwarded-allow-ips`)
    device: str | None  # a browser that signed in to this account before


def attempt(request: Request, username: str) -> Attempt:
    device = known_device(request.app.state.device_key, request.cookies.get(DEVICE_COOKIE),
                          username)
    return Attempt(username, request.client.host if request.client else "?", device)


def retry_after(request: Request, a: Attempt) -> int:
    """Seconds until the throttle lets `a` through; 0: now (see `throttle`)."""
    return request.app.state.login_throttle.retry_after(a.username, a.client, a.device)


def authenticate(request: Request, db: Session, a: Attempt, password: str) -> User | None:
    """The account if the password is right, counting the outcome. The hash waits in the
    queue as its client's (a known device's own), ranked: a known device first, then
    clients with fewer recent failures; a client with recent failures may have
    security.PER_FAILING_CLIENT hashes at once. Raises security.Busy if the queue refuses
    it."""
    throttle = request.app.state.login_throttle
    failures = 0 if a.device else throttle.client_failures(a.client)
    rank = 0 if a.device else 1 + failures
    most = security.PER_FAILING_CLIENT if failures else None  # many clean ones: a lab's NAT
    with security.hash_turn(f"device:{a.device}" if a.device else a.client, rank, most):
        user = accounts.authenticate(db, a.username, password)
    if user is None:
        throttle.failed(a.username, a.client, a.device)
    else:
        throttle.succeeded(a.username, a.client, a.device)
    return user


def remember_device(request: Request, response: Response, a: Attempt) -> None:
    """Give the browser a device cookie for the account it signed in to."""
    response.set_cookie(DEVICE_COOKIE, device_cookie(request.app.state.device_key, a.username),
                        max_age=DEVICE_LIFETIME_S, path="/login", httponly=True,
                        samesite="strict", secure=request.app.state.secure_cookies)
