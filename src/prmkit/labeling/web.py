"""What every page and post of the labelling app shares: the request's database session,
who is asking (session cookie, CSRF check, admin role), page rendering and the sign-in
page, path parameters and redirects (`app` and its routes import it)."""

from __future__ import annotations

import asyncio
import json
import re
import secrets
from collections.abc import Iterator
from typing import Annotated, NamedTuple
from urllib.parse import quote

from fastapi import Depends, HTTPException, Path, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy.orm import Session

from prmkit.labeling import accounts, security
from prmkit.labeling.guard import FORM_BYTES
from prmkit.labeling.models import User

SESSION_COOKIE = "prmkit_session"
LOGIN_COOKIE = "prmkit_login_csrf"
LOCAL_PATH = re.compile(r"^/(?![/\\])[A-Za-z0-9/_.~%=&?+-]*$")
MAX_ID = 2**31 - 1  # ids are 32-bit integers in both databases
Id = Annotated[int, Path(ge=1, le=MAX_ID)]
Position = Annotated[int, Path(ge=0, le=100_000)]


def see_other(url: str) -> RedirectResponse:
    return RedirectResponse(url, 303)


class LoginRequired(Exception):
    """No live session; `carry` holds a POSTed form's fields, given back after sign-in."""

    def __init__(self, carry: list[tuple[str, str]] | None = None, status: int = 401):
        super().__init__("sign in first")
        self.carry, self.status = carry, status


def local_path(url: str | None) -> str | None:
    """`url` if it is a path of this app (a safe place to return to after sign-in)."""
    return url if url and len(url) <= 2000 and LOCAL_PATH.match(url) else None


async def _carried(request: Request) -> list[tuple[str, str]] | None:
    """A small urlencoded form's text fields (not the CSRF token), to give back."""
    if request.method in ("GET", "HEAD") or not request.headers.get(
            "content-type", "").startswith("application/x-www-form-urlencoded"):
        return None
    form = await request.form(max_part_size=FORM_BYTES)
    return [(k, v) for k, v in form.multi_items() if isinstance(v, str) and k != "csrf_token"]


class Current(NamedTuple):
    user: User
    csrf: str


def get_db(request: Request) -> Iterator[Session]:
    """A session per request: reads only for GET and HEAD (no write lock on SQLite)."""
    state = request.app.state
    read = request.method in ("GET", "HEAD")
    with (state.read_sessions if read else state.sessionmaker)() as db:
        yield db


DbDep = Annotated[Session, Depends(get_db)]


def _who(request: Request, db: Session) -> Current | None:
    token = request.cookies.get(SESSION_COOKIE)
    s = accounts.live_session(db, token, request.app.state.session_idle)
    if s is None:
        return None
    found = Current(s.user, s.csrf_token)
    if accounts.needs_touch(s):
        if request.method in ("GET", "HEAD"):  # a read session: write through another one
            with request.app.state.sessionmaker() as w:
                accounts.touch_session(w, token)
        else:  # the request's own session holds the write lock already
            accounts.touch_session(db, token)
    return found


async def current_user(request: Request, db: DbDep) -> Current:
    found = await asyncio.to_thread(_who, request, db)
    if found is None:
        raise LoginRequired(await _carried(request))
    return found


CurrentDep = Annotated[Current, Depends(current_user)]


async def _check_csrf(request: Request, cur: Current) -> Current:
    form = await request.form(max_part_size=FORM_BYTES)
    token = form.get("csrf_token") or request.headers.get("x-csrf-token")
    if not security.same_token(token if isinstance(token, str) else None, cur.csrf):
        raise LoginRequired(await _carried(request), status=403)
    return cur


async def csrf_checked(request: Request, cur: CurrentDep) -> Current:
    return await _check_csrf(request, cur)


PostDep = Annotated[Current, Depends(csrf_checked)]


def admin_user(cur: CurrentDep) -> Current:
    if cur.user.role != "admin":
        raise HTTPException(403, "admins only")
    return cur


async def admin_post(request: Request, cur: Annotated[Current, Depends(admin_user)]) -> Current:
    """An admin's post: the role is checked before the body is read."""
    return await _check_csrf(request, cur)


AdminDep = Annotated[Current, Depends(admin_user)]
AdminPostDep = Annotated[Current, Depends(admin_post)]


def render(request: Request, name: str, context: dict, status: int = 200,
           cur: Current | None = None) -> HTMLResponse:
    context = {"user": cur.user if cur else None, "csrf": cur.csrf if cur else None, **context}
    return request.app.state.templates.TemplateResponse(request, name, context,
                                                        status_code=status)


SIGN_IN_NOTES = {
    "session-ended": "Your session has ended. Sign in again: what you entered is kept and "
                     "sent once you have.",
    "form-expired": "This form came from an older session. Sign in again: what you entered "
                    "is kept and sent once you have.",
    "signed-out": "Your session has ended; sign in again.",
    "wrong": "wrong user name or password",
    "throttled": "too many failed sign-ins; wait before trying again",
    "busy": "too many sign-ins at once; try again in a moment",
}


def urlencode_next(path: str) -> str:
    return "next=" + quote(path, safe="/")


def render_sign_in(request: Request, status: int, code: str | None, *,
                   next_url: str | None = None, carry: list[tuple[str, str]] | None = None,
                   headers: dict | None = None) -> HTMLResponse:
    """The sign-in page, with a fixed message by code, where to go after, and a form's
    fields to send again."""
    token = login_form_token(request)
    response = render(request, "login.html", {
        "login_csrf": token, "error": SIGN_IN_NOTES.get(code or ""),
        "next_url": local_path(next_url) or "",
        "carry": json.dumps(carry) if carry else ""}, status)
    response.set_cookie(LOGIN_COOKIE, token, httponly=True, samesite="strict",
                        secure=request.app.state.secure_cookies)
    for key, value in (headers or {}).items():
        response.headers[key] = value
    return response


def set_session_cookie(request: Request, response: Response, token: str) -> None:
    response.set_cookie(SESSION_COOKIE, token, httponly=True, samesite="lax",
                        secure=request.app.state.secure_cookies,
                        max_age=int(accounts.SESSION_LIFETIME.total_seconds()))


def login_form_token(request: Request) -> str:
    return request.cookies.get(LOGIN_COOKIE) or secrets.token_urlsafe(32)
