"""The FastAPI app: server-rendered pages over `prmkit.labeling.service`.

Every state-changing request is a POST that carries the session's CSRF token (form field
`csrf_token` or header `X-CSRF-Token`); the login form uses a double-submit cookie. A
labeller reaches only their own tasks (others' answer 404) and no admin page (403).
With `release_idle`, a background task releases every project's idle tasks while it runs.
"""

from __future__ import annotations

import asyncio
import logging
import math
import secrets
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Annotated, NamedTuple

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from sqlalchemy.orm import Session, sessionmaker

from prmkit.errors import DataError
from prmkit.labeling import db as dbmod
from prmkit.labeling import security, service
from prmkit.labeling.models import User

HERE = Path(__file__).parent
log = logging.getLogger("prmkit.labeling")
SESSION_COOKIE = "prmkit_session"
LOGIN_COOKIE = "prmkit_login_csrf"
CSP = ("default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
       "font-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")


class LoginRequired(Exception):
    pass


class Current(NamedTuple):
    user: User
    csrf: str


def get_db(request: Request) -> Iterator[Session]:
    with request.app.state.sessionmaker() as db:
        yield db


DbDep = Annotated[Session, Depends(get_db)]


def current_user(request: Request, db: DbDep) -> Current:
    found = service.session_user(db, request.cookies.get(SESSION_COOKIE))
    if found is None:
        raise LoginRequired()
    return Current(*found)


CurrentDep = Annotated[Current, Depends(current_user)]


async def csrf_checked(request: Request, cur: CurrentDep) -> Current:
    form = await request.form()
    token = form.get("csrf_token") or request.headers.get("x-csrf-token")
    if not security.same_token(token if isinstance(token, str) else None, cur.csrf):
        raise HTTPException(403, "CSRF token missing or wrong")
    return cur


PostDep = Annotated[Current, Depends(csrf_checked)]


def admin_user(cur: CurrentDep) -> Current:
    if cur.user.role != "admin":
        raise HTTPException(403, "admins only")
    return cur


def admin_post(cur: PostDep) -> Current:
    return admin_user(cur)


AdminDep = Annotated[Current, Depends(admin_user)]
AdminPostDep = Annotated[Current, Depends(admin_post)]


def release_idle_tasks(sessions: sessionmaker, idle: timedelta) -> dict[str, int]:
    """One round: release every project's tasks idle for more than `idle` (blocking)."""
    with sessions() as db:
        return {p.name: len(service.release_stale_tasks(db, p, idle))
                for p in service.list_projects(db)}


async def release_idle_forever(sessions: sessionmaker, idle: timedelta, every: float) -> None:
    """A round at once, then one every `every` seconds, each in a worker thread. A failing round
    is logged and the next one runs; cancelled, it lets the round under way finish first."""
    while True:
        work = asyncio.ensure_future(asyncio.to_thread(release_idle_tasks, sessions, idle))
        try:
            released = await asyncio.shield(work)
        except asyncio.CancelledError:
            await asyncio.gather(work, return_exceptions=True)
            raise
        except Exception:
            log.exception("releasing idle tasks failed; next try in %g s", every)
        else:
            for project, n in released.items():
                log.log(logging.INFO if n else logging.DEBUG,
                        "released %d open tasks of project %r idle for more than %g h",
                        n, project, idle.total_seconds() / 3600)
        await asyncio.sleep(every)


def default_release_every(idle: timedelta) -> float:
    """Seconds between release rounds: a quarter of the idle time, within 1 s to 10 min."""
    return max(1.0, min(idle.total_seconds() / 4, 600.0))


def create_app(db_url: str, *, migrate: bool = True, secure_cookies: bool = False,
               release_idle: timedelta | None = None,
               release_every: float | None = None) -> FastAPI:
    """The app over a database (a SQLite path or URL, or postgresql://...), migrated first.

    With `release_idle`, open tasks idle for longer are released while the app runs, a
    round every `release_every` seconds (default `default_release_every(release_idle)`)."""
    if release_idle is not None and release_idle <= timedelta(0):
        raise service.LabelingError(f"the idle time for releasing tasks must be positive, "
                                    f"got {release_idle}")
    if release_every is not None and not (math.isfinite(release_every) and release_every > 0):
        raise service.LabelingError(f"the time between release rounds must be a positive "
                                    f"number of seconds, got {release_every}")
    if release_idle is not None and release_every is None:
        release_every = default_release_every(release_idle)
    engine = dbmod.make_engine(db_url)
    if migrate:
        dbmod.migrate(engine)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        task = None
        if release_idle is not None:
            task = asyncio.create_task(
                release_idle_forever(app.state.sessionmaker, release_idle, release_every),
                name="prmkit-release-idle-tasks")
        app.state.release_task = task
        try:
            yield
        finally:
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    app = FastAPI(title="prmkit labelling", docs_url=None, redoc_url=None, openapi_url=None,
                  lifespan=lifespan)
    app.state.engine = engine
    app.state.release_idle = release_idle
    app.state.release_every = release_every
    app.state.sessionmaker = dbmod.make_sessionmaker(engine)
    app.state.secure_cookies = secure_cookies
    app.state.templates = Jinja2Templates(directory=HERE / "templates")
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")

    @app.middleware("http")
    async def _headers(request: Request, call_next):
        response = await call_next(request)
        response.headers["Content-Security-Policy"] = CSP
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "same-origin"
        if not request.url.path.startswith("/static"):
            response.headers["Cache-Control"] = "no-store"
        return response

    @app.exception_handler(LoginRequired)
    async def _login(request: Request, exc: LoginRequired):
        if request.method == "GET":
            return RedirectResponse("/login", 303)
        return PlainTextResponse("sign in first", 401)

    def _error(request: Request, status: int, message: str):
        return render(request, "error.html", {"message": message}, status=status)

    @app.exception_handler(service.NotFound)
    async def _not_found(request: Request, exc: service.NotFound):
        return _error(request, 404, str(exc))

    @app.exception_handler(service.Conflict)
    async def _conflict(request: Request, exc: service.Conflict):
        return _error(request, 409, str(exc))

    @app.exception_handler(service.LabelingError)
    async def _bad(request: Request, exc: service.LabelingError):
        return _error(request, 400, str(exc))

    @app.exception_handler(DataError)
    async def _bad_data(request: Request, exc: DataError):
        return _error(request, 400, str(exc))

    from prmkit.labeling import routes

    app.include_router(routes.router)
    return app


def render(request: Request, name: str, context: dict, status: int = 200,
           cur: Current | None = None) -> HTMLResponse:
    context = {"user": cur.user if cur else None, "csrf": cur.csrf if cur else None, **context}
    return request.app.state.templates.TemplateResponse(request, name, context,
                                                        status_code=status)


def set_session_cookie(request: Request, response: Response, token: str) -> None:
    response.set_cookie(SESSION_COOKIE, token, httponly=True, samesite="lax",
                        secure=request.app.state.secure_cookies,
                        max_age=int(service.SESSION_LIFETIME.total_seconds()))


def login_form_token(request: Request) -> str:
    return request.cookies.get(LOGIN_COOKIE) or secrets.token_urlsafe(32)
