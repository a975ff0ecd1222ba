"""Who is asking, before any request body is read: an ASGI middleware in front of the app.

A POST from no live session is answered 401 before its body is read (only a small form
from a browser whose session has ended is read, to give the labeller's input back on the
sign-in page), a body larger than its cap is answered 413 from its Content-Length, and a
body without a Content-Length is refused (411).
"""

from __future__ import annotations

import re

from anyio import to_thread
from starlette.requests import Request
from starlette.responses import HTMLResponse

from prmkit.labeling import accounts

FORM_BYTES = 64 << 10  # every form but an upload
UPLOAD = re.compile(r"^/admin/projects/[^/]+/import$")
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")


def _page(status: int, message: str, **headers: str) -> HTMLResponse:
    body = (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>prmkit '
            f'labelling</title><link rel="stylesheet" href="/static/style.css"></head><body>'
            f'<main><p class="error" id="error">{message}</p><p><a href="/login">Sign in</a>'
            f'</p></main></body></html>')
    return HTMLResponse(body, status, headers={"Connection": "close", **headers})


class BodyGuard:
    def __init__(self, app, *, max_upload_bytes: int, session_cookie: str):
        self.app, self.max_upload, self.cookie = app, max_upload_bytes, session_cookie

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] in SAFE_METHODS:
            return await self.app(scope, receive, send)
        request = Request(scope)
        response = await self._refusal(request)
        if response is not None:
            return await response(scope, receive, send)
        return await self.app(scope, receive, send)

    async def _refusal(self, request: Request) -> HTMLResponse | None:
        upload = bool(UPLOAD.match(request.url.path))
        cap = self.max_upload if upload else FORM_BYTES
        raw = request.headers.get("content-length")
        if raw is None:
            if "transfer-encoding" in request.headers:
                return _page(411, "a request body needs a Content-Length")
            length = 0
        elif raw.isdigit() and len(raw) < 20:
            length = int(raw)
        else:
            return _page(400, "bad Content-Length")
        if request.url.path == "/login":
            return _page(413, "request too large") if length > cap else None
        token = request.cookies.get(self.cookie)
        app = request.app
        live = token is not None and await to_thread.run_sync(self._live, app, token)
        if not live:
            small_form = (request.headers.get("content-type", "").startswith(
                "application/x-www-form-urlencoded") and length <= FORM_BYTES)
            if not (token and small_form):
                return _page(401, "sign in first")
        if length > cap:
            limit = f"{cap / (1 << 20):g} MiB" if upload else f"{cap >> 10} KiB"
            return _page(413, f"request too large (at most {limit})")
        return None

    @staticmethod
    def _live(app, token: str) -> bool:
        with app.state.read_sessions() as db:
            return accounts.live_session(db, token, app.state.session_idle) is not None
