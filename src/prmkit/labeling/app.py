"""The FastAPI app: server-rendered pages over `prmkit.labeling.service`.

Every state-changing request is a POST that carries the session's CSRF token (form field
`csrf_token` or header `X-CSRF-Token`); the login form uses a double-submit cookie. A
labeller reaches only their own tasks (others' answer 404) and no admin page (403).
With `release_idle`, a background task releases every project's idle tasks while it runs.

GET requests read through sessions that never take SQLite's write lock; sign-in hashes
the password outside any transaction and is throttled per (account, client), per client
and per account, locking the attacker rather than the account (`throttle`, `signin`). `guard.BodyGuard` checks who is asking before a body is read and caps bodies.
An ended session or a refused CSRF token shows a page to sign in again that keeps the
labeller's input and sends it back once they have.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from sqlalchemy.orm import sessionmaker
from starlette.exceptions import HTTPException as StarletteHTTPException

from prmkit.errors import DataError
from prmkit.labeling import accounts, admin_routes, routes, security, service, signin
from prmkit.labeling import db as dbmod
from prmkit.labeling.guard import BodyGuard
from prmkit.labeling.throttle import LoginThrottle, ThrottleLimits
from prmkit.labeling.web import (
    SESSION_COOKIE,
    LoginRequired,
    render,
    render_sign_in,
    urlencode_next,
)

HERE = Path(__file__).parent
log = logging.getLogger("prmkit.labeling")
CSP = ("default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
       "font-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")


MAX_UPLOAD_BYTES = 64 << 20


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
               release_every: float | None = None,
               max_upload_bytes: int = MAX_UPLOAD_BYTES,
               login_limits: ThrottleLimits | None = None,
               session_idle: timedelta = accounts.SESSION_IDLE) -> FastAPI:
    """The app over a database (a SQLite path or URL, or postgresql://...), migrated first.

    With `release_idle`, open tasks idle for longer are released while the app runs, a
    round every `release_every` seconds (default `default_release_every(release_idle)`).
    `max_upload_bytes` caps an uploaded queue (a larger one: 413); `login_limits` sets the
    sign-in throttling; a session ends after `session_idle` without a request."""
    if max_upload_bytes < 1:
        raise service.LabelingError(f"the upload cap must be positive, got {max_upload_bytes}")
    if session_idle <= timedelta(0):
        raise service.LabelingError(f"the idle time of sessions must be positive, "
                                    f"got {session_idle}")
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
    app.state.read_sessions = dbmod.make_sessionmaker(engine, read_only=True)
    app.state.login_throttle = LoginThrottle(login_limits or ThrottleLimits())
    app.state.device_key = signin.new_device_key()  # signs device cookies (see `signin`)
    app.state.session_idle = session_idle
    app.state.max_upload_bytes = max_upload_bytes
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

    app.add_middleware(BodyGuard, max_upload_bytes=max_upload_bytes,
                       session_cookie=SESSION_COOKIE)

    @app.exception_handler(LoginRequired)
    async def _login(request: Request, exc: LoginRequired):
        path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        if request.method in ("GET", "HEAD"):
            return RedirectResponse("/login?" + urlencode_next(path), 303)
        return render_sign_in(request, exc.status, "session-ended" if exc.status == 401
                              else "form-expired", next_url=path, carry=exc.carry)

    @app.exception_handler(security.Busy)
    async def _busy(request: Request, exc: security.Busy):
        response = _error(request, 429, "too many password checks at once; try again")
        response.headers["Retry-After"] = "1"
        return response

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        errors = exc.errors()
        if any(e.get("loc", ("",))[0] == "path" for e in errors):
            return _error(request, 404, "no such page")
        fields = ", ".join(sorted({str(e["loc"][-1]) for e in errors if e.get("loc")}))
        return _error(request, 400, f"missing or invalid fields: {fields}")

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        return _error(request, exc.status_code, str(exc.detail))

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

    app.include_router(routes.router)
    app.include_router(admin_routes.router)
    return app
