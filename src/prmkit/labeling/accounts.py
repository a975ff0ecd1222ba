"""Accounts and sign-in sessions of the labelling app.

A session ends 7 days after sign-in, after `SESSION_IDLE` without a request, at sign-out,
when the password changes or when an admin disables the account. Sign-in looks the
account up in a short transaction and verifies the password (Argon2) after it has ended,
so hashing never holds a database lock.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from sqlalchemy import or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from prmkit.labeling import security
from prmkit.labeling.errors import Conflict, LabelingError, NotFound
from prmkit.labeling.models import ROLES, LoginSession, User, utcnow

SESSION_LIFETIME = timedelta(days=7)
SESSION_IDLE = timedelta(hours=12)
TOUCH_EVERY = timedelta(minutes=5)  # how stale last_seen_at may get before it is written
_USERNAME = re.compile(r"^[A-Za-z0-9_.@-]{1,64}$")


def create_user(db: Session, username: str, password: str, role: str = "labeller") -> User:
    if role not in ROLES:
        raise LabelingError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
    if not _USERNAME.match(username):
        raise LabelingError("user names use letters, digits and _.@- (at most 64)")
    if len(password) < 8:
        raise LabelingError("passwords need at least 8 characters")
    user = User(username=username, password_hash=security.hash_password(password), role=role,
                disabled=False)
    db.add(user)
    try:
        db.commit()
    except IntegrityError:
        db.rollback()
        raise Conflict(f"user {username!r} already exists") from None
    return user


def get_user(db: Session, username: str) -> User:
    user = db.scalar(select(User).where(User.username == username))
    if user is None:
        raise NotFound(f"no user {username!r}")
    return user


def set_password(db: Session, username: str, password: str) -> None:
    if len(password) < 8:
        raise LabelingError("passwords need at least 8 characters")
    password_hash = security.hash_password(password)
    user = get_user(db, username)
    user.password_hash = password_hash
    _end_sessions(db, user)
    db.commit()


def set_disabled(db: Session, user: User, disabled: bool) -> User:
    """Disable an account (it cannot sign in; its sessions end at once) or enable it."""
    user.disabled = disabled
    if disabled:
        _end_sessions(db, user)
    db.commit()
    return user


def _end_sessions(db: Session, user: User) -> None:
    db.execute(LoginSession.__table__.delete().where(LoginSession.user_id == user.id))


def list_users(db: Session) -> list[User]:
    return list(db.scalars(select(User).order_by(User.id)))


def authenticate(db: Session, username: str, password: str) -> User | None:
    """The account if the password is right and the account enabled, else None. The
    password is verified outside any transaction."""
    user = db.scalar(select(User).where(User.username == username))
    if user is not None:
        db.expunge(user)  # kept as loaded: the rollback below does not expire it
    db.rollback()  # end the lookup's transaction (and any lock) before hashing
    ok, new_hash = security.verify_password(password, user.password_hash if user else None)
    if not ok or user is None or user.disabled:
        return None
    if new_hash:
        user = db.merge(user)
        user.password_hash = new_hash
        db.commit()
    return user


def open_session(db: Session, user: User) -> tuple[str, str]:
    """A new login session: (cookie token, CSRF token). Sessions already over are deleted."""
    token, csrf = security.new_token(), security.new_token()
    now = utcnow()
    db.execute(LoginSession.__table__.delete().where(or_(
        LoginSession.expires_at < now, LoginSession.last_seen_at < now - SESSION_IDLE)))
    db.add(LoginSession(token_hash=security.token_hash(token), user_id=user.id, csrf_token=csrf,
                        created_at=now, last_seen_at=now, expires_at=now + SESSION_LIFETIME))
    db.commit()
    return token, csrf


def live_session(db: Session, token: str | None,
                 idle: timedelta = SESSION_IDLE) -> LoginSession | None:
    """The session of a cookie token if it is still live (not expired, idle or disabled)."""
    if not token:
        return None
    s = db.get(LoginSession, security.token_hash(token))
    if s is None or s.user.disabled:
        return None
    now = utcnow()
    if s.expires_at < now or (s.last_seen_at or s.created_at) < now - idle:
        return None
    return s


def session_user(db: Session, token: str | None,
                 idle: timedelta = SESSION_IDLE) -> tuple[User, str] | None:
    """(user, CSRF token) of a live session, or None."""
    s = live_session(db, token, idle)
    return None if s is None else (s.user, s.csrf_token)


def needs_touch(s: LoginSession, now: datetime | None = None) -> bool:
    return (s.last_seen_at or s.created_at) < (now or utcnow()) - TOUCH_EVERY


def touch_session(db: Session, token: str) -> None:
    """Record a request of the session now (its idle time starts again)."""
    db.execute(LoginSession.__table__.update()
               .where(LoginSession.token_hash == security.token_hash(token))
               .values(last_seen_at=utcnow()))
    db.commit()


def close_session(db: Session, token: str | None) -> None:
    if token:
        db.execute(LoginSession.__table__.delete().where(
            LoginSession.token_hash == security.token_hash(token)))
        db.commit()
