"""Pages and form posts. Thin: the work is in `service` and `qc`."""

from __future__ import annotations

import json
import re
import uuid
from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Form, HTTPException, Query, Request

from prmkit.data.prm800k import FINISH_REASONS
from prmkit.labeling import security, service, signin
from prmkit.labeling.guard import FORM_BYTES
from prmkit.labeling.web import (
    LOGIN_COOKIE,
    SESSION_COOKIE,
    CurrentDep,
    DbDep,
    Id,
    Position,
    PostDep,
    local_path,
    render,
    render_sign_in,
    see_other,
    set_session_cookie,
)

router = APIRouter()


@router.get("/healthz")
def healthz() -> dict:
    return {"ok": True}


# --- signing in ---------------------------------------------------------------------------


@router.get("/login")
def login_page(request: Request, error: str | None = None, next: str | None = None):
    """The sign-in form; `error` is one of app.SIGN_IN_NOTES' codes (anything else shows
    nothing), `next` where to go after (a path of this app)."""
    return render_sign_in(request, 200, error, next_url=next)


def _carry(raw: str) -> list[tuple[str, str]] | None:
    try:
        fields = json.loads(raw) if raw else None
    except ValueError:
        return None
    if not isinstance(fields, list) or not all(
            isinstance(f, list) and len(f) == 2 and all(isinstance(x, str) for x in f)
            for f in fields):
        return None
    return [(k, v) for k, v in fields if k != "csrf_token"]


@router.post("/login")
def login(request: Request, db: DbDep, username: Annotated[str, Form(max_length=256)],
          password: Annotated[str, Form(max_length=1024)], csrf_token: Annotated[str, Form()] = "",
          next: Annotated[str, Form()] = "", carry: Annotated[str, Form()] = ""):
    if not security.same_token(csrf_token, request.cookies.get(LOGIN_COOKIE)):
        raise HTTPException(403, "the sign-in form expired; reload the page")
    attempt = signin.attempt(request, username)
    wait = signin.retry_after(request, attempt)
    if wait:
        return render_sign_in(request, 429, "throttled", next_url=next, carry=_carry(carry),
                              headers={"Retry-After": str(wait)})
    try:
        user = signin.authenticate(request, db, attempt, password)
    except security.Busy:
        return render_sign_in(request, 429, "busy", next_url=next, carry=_carry(carry),
                              headers={"Retry-After": "1"})
    if user is None:
        return render_sign_in(request, 401, "wrong", next_url=next, carry=_carry(carry))
    token, csrf = service.open_session(db, user)
    target, fields = local_path(next), _carry(carry)
    if target and fields is not None:
        # The form the ended session refused, to send again with the new session's token.
        response = render(request, "resubmit.html", {"action": target, "fields": fields,
                                                     "csrf": csrf, "user": user})
    else:
        response = see_other(target or "/")
    set_session_cookie(request, response, token)
    signin.remember_device(request, response, attempt)
    return response


@router.post("/logout")
def logout(request: Request, db: DbDep, cur: PostDep):
    service.close_session(db, request.cookies.get(SESSION_COOKIE))
    response = see_other("/login?error=signed-out")
    response.delete_cookie(SESSION_COOKIE)
    return response


@router.get("/")
def home(cur: CurrentDep):
    return see_other("/admin" if cur.user.role == "admin" else "/tasks")


# --- the labeller's pages -----------------------------------------------------------------


@router.get("/tasks")
def my_tasks(request: Request, db: DbDep, cur: CurrentDep, note: str | None = None):
    mine = service.list_projects(db, cur.user)
    screening = {p.id: service.screening_status(db, cur.user, p) for p in mine}
    return render(request, "tasks.html", {"tasks": service.list_tasks(db, cur.user),
                                          "projects": mine, "screening": screening,
                                          "note": note}, cur=cur)


@router.post("/projects/{project_id}/next")
def take_next(db: DbDep, cur: PostDep, project_id: Id):
    project = service.project_for(db, cur.user, project_id)
    task = service.next_task(db, cur.user, project)
    if task is None:
        status = service.screening_status(db, cur.user, project)
        note = "screening-failed" if status["failed"] else "none-left"
        return see_other(f"/tasks?note={note}")
    return see_other(f"/tasks/{task.id}")


@router.get("/tasks/{task_id}")
def task_page(request: Request, db: DbDep, cur: CurrentDep, task_id: Id,
              undo: str | None = None, step: Annotated[int | None, Query(ge=1, le=100_000)] = None):
    view = service.view_task(db, cur.user, task_id)
    return render(request, "label.html", {
        "view": view, "submission_id": uuid.uuid4().hex, "finish_reasons": FINISH_REASONS,
        "note_reasons": service.NOTE_REASONS, "undo": undo, "undo_step": step}, cur=cur)


_FIELD = re.compile(r"^(rating|flag)_(\d{1,6})$")


@router.post("/tasks/{task_id}/steps/{position}")
async def rate_step(request: Request, db: DbDep, cur: PostDep, task_id: Id, position: Position):
    """Ratings and flags come as rating_I / flag_I fields; the service checks the indices
    against the step's candidates before building anything of their size."""
    form = await request.form(max_part_size=FORM_BYTES)
    ratings: dict[int, int] = {}
    flags: dict[int, bool] = {}
    for key, value in form.multi_items():
        m = _FIELD.match(key)
        if m is None:
            if key.startswith(("rating_", "flag_")):
                raise service.LabelingError(f"unknown field {key[:40]!r}")
            continue
        index = int(m.group(2))
        if m.group(1) == "flag":
            flags[index] = value in ("1", "on", "true")
            continue
        if value not in ("1", "+1", "0", "-1"):
            raise service.LabelingError(f"{key}: expected +1, 0 or -1")
        ratings[index] = int(value)
    human = form.get("human_text")
    service.submit_step(db, cur.user, task_id, position, ratings, flags,
                        str(form.get("submission_id") or ""),
                        human if isinstance(human, str) else None)
    return see_other(f"/tasks/{task_id}")


@router.post("/tasks/{task_id}/steps/{position}/undo")
def undo_step(db: DbDep, cur: PostDep, task_id: Id, position: Position,
              undo_submission_id: Annotated[str, Form()] = ""):
    """Withdraw the rating whose submission id the form carries (the last one)."""
    withdrawn = service.undo_step(db, cur.user, task_id, position, undo_submission_id)
    undo = "done" if withdrawn is not None else "already"
    return see_other(f"/tasks/{task_id}?" + urlencode({"undo": undo, "step": position + 1}))


@router.post("/tasks/{task_id}/finish")
def finish(db: DbDep, cur: PostDep, task_id: Id, reason: Annotated[str, Form()],
           note: Annotated[str, Form()] = ""):
    service.finish_task(db, cur.user, task_id, reason, note)
    return see_other(f"/tasks/{task_id}")


