"""Pages and form posts. Thin: the work is in `service` and `qc`."""

from __future__ import annotations

import re
import tempfile
import uuid
from pathlib import Path
from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Form, HTTPException, Request, UploadFile
from fastapi.responses import JSONResponse, RedirectResponse, Response

from prmkit.data.prm800k import FINISH_REASONS
from prmkit.errors import DataError
from prmkit.labeling import qc, security, service
from prmkit.labeling.app import (
    LOGIN_COOKIE,
    SESSION_COOKIE,
    AdminDep,
    AdminPostDep,
    CurrentDep,
    DbDep,
    PostDep,
    login_form_token,
    render,
    set_session_cookie,
)
from prmkit.labeling.models import Project

router = APIRouter()


def _see_other(url: str) -> RedirectResponse:
    return RedirectResponse(url, 303)


@router.get("/healthz")
def healthz() -> dict:
    return {"ok": True}


# --- signing in ---------------------------------------------------------------------------


@router.get("/login")
def login_page(request: Request, error: str | None = None):
    token = login_form_token(request)
    response = render(request, "login.html", {"login_csrf": token, "error": error})
    response.set_cookie(LOGIN_COOKIE, token, httponly=True, samesite="strict",
                        secure=request.app.state.secure_cookies)
    return response


@router.post("/login")
def login(request: Request, db: DbDep, username: Annotated[str, Form()],
          password: Annotated[str, Form()], csrf_token: Annotated[str, Form()] = ""):
    if not security.same_token(csrf_token, request.cookies.get(LOGIN_COOKIE)):
        raise HTTPException(403, "CSRF token missing or wrong")
    user = service.authenticate(db, username, password)
    if user is None:
        return render(request, "login.html", {"login_csrf": csrf_token,
                                              "error": "wrong user name or password"}, 401)
    token, _ = service.open_session(db, user)
    response = _see_other("/")
    set_session_cookie(request, response, token)
    return response


@router.post("/logout")
def logout(request: Request, db: DbDep, cur: PostDep):
    service.close_session(db, request.cookies.get(SESSION_COOKIE))
    response = _see_other("/login")
    response.delete_cookie(SESSION_COOKIE)
    return response


@router.get("/")
def home(cur: CurrentDep):
    return _see_other("/admin" if cur.user.role == "admin" else "/tasks")


# --- the labeller's pages -----------------------------------------------------------------


@router.get("/tasks")
def my_tasks(request: Request, db: DbDep, cur: CurrentDep, note: str | None = None):
    projects = service.list_projects(db)
    screening = {p.id: service.screening_status(db, cur.user, p) for p in projects}
    return render(request, "tasks.html", {"tasks": service.list_tasks(db, cur.user),
                                          "projects": projects, "screening": screening,
                                          "note": note}, cur=cur)


@router.post("/projects/{project_id}/next")
def take_next(db: DbDep, cur: PostDep, project_id: int):
    project = db.get(Project, project_id)
    if project is None:
        raise service.NotFound(f"no project {project_id}")
    task = service.next_task(db, cur.user, project)
    if task is None:
        status = service.screening_status(db, cur.user, project)
        note = "screening-failed" if status["failed"] else "none-left"
        return _see_other(f"/tasks?note={note}")
    return _see_other(f"/tasks/{task.id}")


@router.get("/tasks/{task_id}")
def task_page(request: Request, db: DbDep, cur: CurrentDep, task_id: int,
              undo: str | None = None, step: int | None = None):
    view = service.view_task(db, cur.user, task_id)
    return render(request, "label.html", {
        "view": view, "submission_id": uuid.uuid4().hex, "finish_reasons": FINISH_REASONS,
        "note_reasons": service.NOTE_REASONS, "undo": undo, "undo_step": step}, cur=cur)


_RATING = re.compile(r"^rating_(\d+)$")


@router.post("/tasks/{task_id}/steps/{position}")
async def rate_step(request: Request, db: DbDep, cur: PostDep, task_id: int, position: int):
    form = await request.form()
    ratings: dict[int, int] = {}
    for key, value in form.items():
        m = _RATING.match(key)
        if m:
            try:
                ratings[int(m.group(1))] = int(value)
            except ValueError:
                raise service.LabelingError(f"{key}: expected +1, 0 or -1") from None
    n = max(ratings, default=-1) + 1
    if sorted(ratings) != list(range(n)):
        raise service.LabelingError("rate every candidate step")
    flags = [form.get(f"flag_{i}") in ("1", "on", "true") for i in range(n)]
    human = form.get("human_text")
    service.submit_step(db, cur.user, task_id, position, [ratings[i] for i in range(n)], flags,
                        str(form.get("submission_id") or ""),
                        human if isinstance(human, str) else None)
    return _see_other(f"/tasks/{task_id}")


@router.post("/tasks/{task_id}/steps/{position}/undo")
def undo_step(db: DbDep, cur: PostDep, task_id: int, position: int,
              undo_submission_id: Annotated[str, Form()] = ""):
    """Withdraw the rating whose submission id the form carries (the last one)."""
    withdrawn = service.undo_step(db, cur.user, task_id, position, undo_submission_id)
    undo = "done" if withdrawn is not None else "already"
    return _see_other(f"/tasks/{task_id}?" + urlencode({"undo": undo, "step": position + 1}))


@router.post("/tasks/{task_id}/finish")
def finish(db: DbDep, cur: PostDep, task_id: int, reason: Annotated[str, Form()],
           note: Annotated[str, Form()] = ""):
    service.finish_task(db, cur.user, task_id, reason, note)
    return _see_other(f"/tasks/{task_id}")


# --- admin ----------------------------------------------------------------------------------


def _project(db, project_id: int) -> Project:
    project = db.get(Project, project_id)
    if project is None:
        raise service.NotFound(f"no project {project_id}")
    return project


@router.get("/admin")
def dashboard(request: Request, db: DbDep, cur: AdminDep, note: str | None = None):
    stats = [(p, qc.project_stats(db, p)) for p in service.list_projects(db)]
    return render(request, "admin.html", {"stats": stats, "note": note}, cur=cur)


@router.get("/admin/projects/{project_id}/stats.json")
def stats_json(db: DbDep, cur: AdminDep, project_id: int):
    return JSONResponse(qc.project_stats(db, _project(db, project_id)))


@router.post("/admin/projects")
def save_project(db: DbDep, cur: AdminPostDep, name: Annotated[str, Form()],
                 phase: Annotated[int, Form()] = 1, overlap: Annotated[int, Form()] = 1,
                 gold_rate: Annotated[float, Form()] = 0.0,
                 screening_size: Annotated[int, Form()] = 30,
                 screening_pass: Annotated[float, Form()] = 0.75):
    service.configure_project(db, name.strip(), phase=phase, overlap=overlap, gold_rate=gold_rate,
                              screening_size=screening_size, screening_pass=screening_pass)
    db.commit()
    return _see_other("/admin")


@router.post("/admin/projects/{project_id}/import")
async def import_file(db: DbDep, cur: AdminPostDep, project_id: int, file: UploadFile,
                      kind: Annotated[str, Form()] = "auto"):
    project = _project(db, project_id)
    name = Path(file.filename or "queue.jsonl").name or "queue.jsonl"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_bytes(await file.read())
        try:
            n = service.import_queue(db, project, path, None if kind == "auto" else kind)
        except DataError as e:
            # Name the uploaded file, not the temporary copy.
            raise service.LabelingError(str(e).replace(str(path), name)) from None
    return _see_other(f"/admin?note=imported+{n}+solutions+into+{project.name}")


@router.post("/admin/projects/{project_id}/release")
def release(db: DbDep, cur: AdminPostDep, project_id: int, idle_hours: Annotated[float, Form()]):
    project = _project(db, project_id)
    tasks = service.release_stale_tasks(db, project, service.idle_hours(idle_hours))
    note = (f"released {len(tasks)} open tasks of {project.name} idle for more than "
            f"{idle_hours:g} h" + (": " + ", ".join(f"#{t.id} ({t.user.username})" for t in tasks)
                                   if tasks else ""))
    return _see_other("/admin?" + urlencode({"note": note}))


@router.get("/admin/projects/{project_id}/tasks")
def admin_project_tasks(request: Request, db: DbDep, cur: AdminDep, project_id: int,
                  user: str | None = None):
    project = _project(db, project_id)
    return render(request, "admin_tasks.html", {
        "project": project, "labeller": user,
        "tasks": service.project_tasks(db, project, user)}, cur=cur)


@router.get("/admin/tasks/{task_id}")
def admin_task(request: Request, db: DbDep, cur: AdminDep, task_id: int):
    view = service.admin_view_task(db, task_id)
    return render(request, "admin_task.html", {
        "view": view, "labels": {label.position: label for label in view.labels},
        "withdrawn": service.withdrawn_labels(db, view.task),
        "last_activity": service.last_activity(db, view.task)}, cur=cur)


@router.get("/admin/projects/{project_id}/export")
def export(db: DbDep, cur: AdminDep, project_id: int):
    from prmkit.data.io import dumps_line

    project = _project(db, project_id)
    body = b"".join(dumps_line(r) for r in service.iter_export(db, project))
    return Response(body, media_type="application/x-ndjson", headers={
        "Content-Disposition": f'attachment; filename="{project.name}.prm800k.jsonl"'})


@router.get("/admin/users")
def users_page(request: Request, db: DbDep, cur: AdminDep, note: str | None = None):
    return render(request, "users.html", {"users": service.list_users(db), "note": note}, cur=cur)


@router.post("/admin/users")
def add_user(db: DbDep, cur: AdminPostDep, username: Annotated[str, Form()],
             password: Annotated[str, Form()], role: Annotated[str, Form()] = "labeller"):
    service.create_user(db, username.strip(), password, role)
    return _see_other(f"/admin/users?note=created+{username.strip()}")

