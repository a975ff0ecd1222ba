"""The admin's pages and posts: dashboard, projects (create, settings, members, import,
release, export), task views and accounts. Notes after a post are fixed codes whose
figures and names the page reads from the database, never text from the address."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path as FilePath
from typing import Annotated
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import JSONResponse, Response
from sqlalchemy import select

from prmkit.errors import DataError
from prmkit.labeling import projects, qc, service
from prmkit.labeling.models import Project, Task, User
from prmkit.labeling.web import AdminDep, AdminPostDep, DbDep, Id, render, see_other

router = APIRouter()
NOTES = ("imported", "released", "created", "saved", "members")
USER_NOTES = ("created", "disabled", "enabled")
Count = Annotated[int | None, Query(ge=0, le=10**9)]


def _project(db, project_id: int) -> Project:
    project = db.get(Project, project_id)
    if project is None:
        raise service.NotFound(f"no project {project_id}")
    return project


@router.get("/admin")
def dashboard(request: Request, db: DbDep, cur: AdminDep, note: str | None = None,
              project: Annotated[int | None, Query(ge=1, le=2**31 - 1)] = None,
              count: Count = None, hours: Annotated[float | None, Query(ge=0)] = None,
              tasks: Annotated[str | None, Query(max_length=600, pattern=r"^[0-9,]*$")] = None):
    stats = [(p, qc.project_stats(db, p)) for p in service.list_projects(db)]
    members = {p.id: {u.id for u in projects.members(db, p)} for p, _ in stats}
    labellers = [u for u in service.list_users(db) if u.role == "labeller"]
    shown = None
    if note in NOTES and project is not None and (p := db.get(Project, project)) is not None:
        ids = [int(t) for t in (tasks or "").split(",") if t][:50]
        released = list(db.scalars(select(Task).where(Task.id.in_(ids)).order_by(Task.id))) \
            if ids else []
        shown = {"code": note, "project": p.name, "count": count, "hours": hours,
                 "tasks": released}
    return render(request, "admin.html", {"stats": stats, "note": shown, "members": members,
                                          "labellers": labellers}, cur=cur)


@router.get("/admin/projects/{project_id}/stats.json")
def stats_json(db: DbDep, cur: AdminDep, project_id: Id):
    return JSONResponse(qc.project_stats(db, _project(db, project_id)))


@router.post("/admin/projects")
def create_project(db: DbDep, cur: AdminPostDep, name: Annotated[str, Form()],
                   phase: Annotated[int, Form()] = 1, overlap: Annotated[int, Form()] = 1,
                   gold_rate: Annotated[float, Form()] = 0.0,
                   screening_size: Annotated[int, Form()] = 30,
                   screening_pass: Annotated[float, Form()] = 0.75):
    """A new project; a name in use is a 409 (settings change through the project's form)."""
    project = service.create_project(db, name, phase=phase, overlap=overlap,
                                     gold_rate=gold_rate, screening_size=screening_size,
                                     screening_pass=screening_pass)
    db.commit()
    return see_other(f"/admin?note=created&project={project.id}#project-{project.id}")


@router.post("/admin/projects/{project_id}/settings")
def project_settings(db: DbDep, cur: AdminPostDep, project_id: Id,
                     phase: Annotated[int | None, Form()] = None,
                     overlap: Annotated[int | None, Form()] = None,
                     gold_rate: Annotated[float | None, Form()] = None,
                     screening_size: Annotated[int | None, Form()] = None,
                     screening_pass: Annotated[float | None, Form()] = None):
    """Change a project's settings; its phase only while it has no tasks (else 409)."""
    project = _project(db, project_id)
    service.update_project(db, project, phase=phase, overlap=overlap, gold_rate=gold_rate,
                           screening_size=screening_size, screening_pass=screening_pass)
    db.commit()
    return see_other(f"/admin?note=saved&project={project.id}#project-{project.id}")


@router.post("/admin/projects/{project_id}/members")
def project_members(db: DbDep, cur: AdminPostDep, project_id: Id,
                    member: Annotated[list[str] | None, Form()] = None):
    """Exactly the checked labellers become the project's members."""
    project = _project(db, project_id)
    service.set_members(db, project, member or [])
    return see_other(f"/admin?note=members&project={project.id}#project-{project.id}")


@router.post("/admin/projects/{project_id}/import")
async def import_file(request: Request, db: DbDep, cur: AdminPostDep, project_id: Id):
    """The queue file comes in the form (read once the admin and the CSRF token are
    checked); the guard has refused it already if it is larger than the upload cap."""
    project = _project(db, project_id)
    form = await request.form(max_files=1)
    file, kind = form.get("file"), form.get("kind") or "auto"
    if file is None or isinstance(file, str):
        raise service.LabelingError("choose a queue file to import")
    name = FilePath(file.filename or "queue.jsonl").name or "queue.jsonl"
    with tempfile.TemporaryDirectory() as tmp:
        path = FilePath(tmp) / "queue"
        path.mkdir()
        path = path / name
        path.write_bytes(await file.read())
        try:
            n = service.import_queue(db, project, path, None if kind == "auto" else str(kind))
        except DataError as e:
            # Name the uploaded file, not the temporary copy.
            raise service.LabelingError(str(e).replace(str(path), name)) from None
    return see_other(f"/admin?note=imported&project={project.id}&count={n}")


@router.post("/admin/projects/{project_id}/release")
def release(db: DbDep, cur: AdminPostDep, project_id: Id, idle_hours: Annotated[float, Form()]):
    project = _project(db, project_id)
    tasks = service.release_stale_tasks(db, project, service.idle_hours(idle_hours))
    return see_other("/admin?" + urlencode({
        "note": "released", "project": project.id, "count": len(tasks), "hours": idle_hours,
        "tasks": ",".join(str(t.id) for t in tasks[:50])}))


@router.get("/admin/projects/{project_id}/tasks")
def admin_project_tasks(request: Request, db: DbDep, cur: AdminDep, project_id: Id,
                        user: Annotated[str | None, Query(max_length=64)] = None):
    project = _project(db, project_id)
    return render(request, "admin_tasks.html", {
        "project": project, "labeller": user,
        "tasks": service.project_tasks(db, project, user)}, cur=cur)


@router.get("/admin/tasks/{task_id}")
def admin_task(request: Request, db: DbDep, cur: AdminDep, task_id: Id):
    view = service.admin_view_task(db, task_id)
    return render(request, "admin_task.html", {
        "view": view, "labels": {label.position: label for label in view.labels},
        "withdrawn": service.withdrawn_labels(db, view.task),
        "last_activity": service.last_activity(db, view.task)}, cur=cur)


def attachment(filename: str) -> str:
    """A Content-Disposition for any file name: an ASCII fallback and the UTF-8 name."""
    fallback = re.sub(r"[^A-Za-z0-9._-]+", "_", filename).strip("_") or "export.jsonl"
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{quote(filename, safe='')}"


@router.get("/admin/projects/{project_id}/export")
def export(db: DbDep, cur: AdminDep, project_id: Id):
    from prmkit.data.io import dumps_line

    project = _project(db, project_id)
    body = b"".join(dumps_line(r) for r in service.iter_export(db, project))
    return Response(body, media_type="application/x-ndjson", headers={
        "Content-Disposition": attachment(f"{project.name}.prm800k.jsonl")})


@router.get("/admin/users")
def users_page(request: Request, db: DbDep, cur: AdminDep, note: str | None = None,
               user: Annotated[int | None, Query(ge=1, le=2**31 - 1)] = None):
    named = db.get(User, user) if note in USER_NOTES and user is not None else None
    shown = {"code": note, "user": named.username} if named is not None else None
    return render(request, "users.html", {"users": service.list_users(db), "note": shown},
                  cur=cur)


@router.post("/admin/users")
def add_user(db: DbDep, cur: AdminPostDep, username: Annotated[str, Form(max_length=256)],
             password: Annotated[str, Form(max_length=1024)],
             role: Annotated[str, Form(max_length=16)] = "labeller"):
    user = service.create_user(db, username.strip(), password, role)
    return see_other(f"/admin/users?note=created&user={user.id}")


@router.post("/admin/users/{user_id}/disable")
def disable_user(db: DbDep, cur: AdminPostDep, user_id: Id):
    """Disable an account and end its sessions at once (an admin cannot disable themself)."""
    user = db.get(User, user_id)
    if user is None:
        raise service.NotFound(f"no user {user_id}")
    if user.id == cur.user.id:
        raise service.Conflict("you cannot disable your own account")
    service.set_disabled(db, user, True)
    return see_other(f"/admin/users?note=disabled&user={user.id}")


@router.post("/admin/users/{user_id}/enable")
def enable_user(db: DbDep, cur: AdminPostDep, user_id: Id):
    user = db.get(User, user_id)
    if user is None:
        raise service.NotFound(f"no user {user_id}")
    service.set_disabled(db, user, False)
    return see_other(f"/admin/users?note=enabled&user={user.id}")
