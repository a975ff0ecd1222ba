"""Projects of the labelling app: creating one, changing its settings, and its members.

A labeller sees and takes the tasks of the projects they are a member of, and only those;
admins set the members and see every project. A project's phase is fixed once it has
tasks (its ratings would otherwise mean different things).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable

from sqlalchemy import delete, exists, func, select
from sqlalchemy.orm import Session

from prmkit.labeling.errors import Conflict, LabelingError, NotFound
from prmkit.labeling.models import Item, Project, ProjectMember, Task, User

MAX_NAME = 128
MAX_OVERLAP = 100
MAX_SCREENING = 100_000
SETTINGS = ("phase", "overlap", "gold_rate", "screening_size", "screening_pass")


def project_name(name: str) -> str:
    """A project name, stripped and checked: 1 to 128 characters, no control characters."""
    name = (name or "").strip()
    if not name:
        raise LabelingError("a project needs a name")
    if len(name) > MAX_NAME:
        raise LabelingError(f"project names have at most {MAX_NAME} characters, "
                            f"got {len(name)}")
    if any(unicodedata.category(c).startswith("C") for c in name):
        raise LabelingError("project names cannot hold control characters")
    return name


def get_project(db: Session, name: str) -> Project:
    project = db.scalar(select(Project).where(Project.name == name))
    if project is None:
        raise NotFound(f"no project {name!r}")
    return project


def _is_labeller(user: User | None) -> bool:
    return user is not None and user.role != "admin"


def list_projects(db: Session, user: User | None = None) -> list[Project]:
    """Every project, or those a labeller is a member of."""
    q = select(Project).order_by(Project.id)
    if _is_labeller(user):
        q = q.join(ProjectMember, ProjectMember.project_id == Project.id).where(
            ProjectMember.user_id == user.id)
    return list(db.scalars(q))


def is_member(db: Session, user: User, project_id: int) -> bool:
    """Whether the user may see and take the project's tasks (admins always may)."""
    if not _is_labeller(user):
        return True
    return db.scalar(select(exists().where(ProjectMember.project_id == project_id,
                                           ProjectMember.user_id == user.id))) or False


def project_for(db: Session, user: User, project_id: int) -> Project:
    """The project, if the user may see it; else NotFound (as if it did not exist)."""
    project = db.get(Project, project_id)
    if project is None or not is_member(db, user, project_id):
        raise NotFound(f"no project {project_id}")
    return project


def members(db: Session, project: Project) -> list[User]:
    return list(db.scalars(select(User).join(ProjectMember, ProjectMember.user_id == User.id)
                           .where(ProjectMember.project_id == project.id)
                           .order_by(User.username)))


def _users(db: Session, usernames: Iterable[str]) -> list[User]:
    names = sorted(set(usernames))
    found = {u.username: u for u in db.scalars(select(User).where(User.username.in_(names)))}
    missing = [n for n in names if n not in found]
    if missing:
        raise NotFound(f"no user {', '.join(map(repr, missing))}")
    return [found[n] for n in names]


def set_members(db: Session, project: Project, usernames: Iterable[str]) -> list[User]:
    """Make exactly these users the project's members (their open tasks elsewhere stay)."""
    users = _users(db, usernames)
    db.execute(delete(ProjectMember).where(ProjectMember.project_id == project.id))
    db.add_all(ProjectMember(project_id=project.id, user_id=u.id) for u in users)
    db.commit()
    return users


def add_members(db: Session, project: Project, usernames: Iterable[str]) -> list[User]:
    current = {u.username for u in members(db, project)}
    return set_members(db, project, current | set(usernames))


def remove_members(db: Session, project: Project, usernames: Iterable[str]) -> list[User]:
    gone = {u.username for u in _users(db, usernames)}
    return set_members(db, project, {u.username for u in members(db, project)} - gone)


def has_tasks(db: Session, project: Project) -> bool:
    return (db.scalar(select(func.count()).select_from(Task).join(Item)
                      .where(Item.project_id == project.id)) or 0) > 0


def create_project(db: Session, name: str, *, phase: int = 1, overlap: int = 1,
                   gold_rate: float = 0.0, screening_size: int = 30,
                   screening_pass: float = 0.75) -> Project:
    """A new project (flushed, not committed); a name already in use is a Conflict."""
    name = project_name(name)
    if db.scalar(select(Project.id).where(Project.name == name)) is not None:
        raise Conflict(f"a project named {name!r} already exists; change its settings "
                       "from its own form")
    project = Project(name=name, phase=phase, overlap=overlap, gold_rate=gold_rate,
                      screening_size=screening_size, screening_pass=screening_pass)
    check_settings(project)
    db.add(project)
    db.flush()
    return project


def update_project(db: Session, project: Project, **settings) -> Project:
    """Change settings (None keeps one; flushed, not committed). The phase cannot change
    once the project has tasks."""
    unknown = set(settings) - set(SETTINGS)
    if unknown:
        raise LabelingError(f"unknown project settings {sorted(unknown)}")
    phase = settings.get("phase")
    if phase is not None and phase != project.phase and has_tasks(db, project):
        raise Conflict(f"project {project.name!r} has tasks in phase {project.phase}; its "
                       "phase cannot change now (make a new project)")
    before = {key: getattr(project, key) for key in SETTINGS}
    for key, value in settings.items():
        if value is not None:
            setattr(project, key, value)
    try:
        check_settings(project)
    except LabelingError:
        for key, value in before.items():
            setattr(project, key, value)
        raise
    db.flush()
    return project


def configure_project(db: Session, name: str, **settings) -> Project:
    """Create the project, or change the settings given (None keeps one) of the existing
    one of that name (for the command line: `prmkit label import --project`)."""
    project = db.scalar(select(Project).where(Project.name == project_name(name)))
    if project is None:
        return create_project(db, name, **{k: v for k, v in settings.items() if v is not None})
    return update_project(db, project, **settings)


def _whole(value, low: int, high: int, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise LabelingError(f"{what} must be a whole number from {low} to {high}, got {value}")


def check_settings(p: Project) -> None:
    if p.phase not in (1, 2):
        raise LabelingError(f"phase must be 1 or 2, got {p.phase}")
    _whole(p.overlap, 1, MAX_OVERLAP, "overlap")
    _whole(p.screening_size, 1, MAX_SCREENING, "screening size")
    if not 0.0 <= p.gold_rate < 1.0:
        raise LabelingError(f"gold rate must be in [0, 1), got {p.gold_rate}")
    if not 0.0 <= p.screening_pass <= 1.0:
        raise LabelingError(f"the screening pass mark must be in [0, 1], "
                            f"got {p.screening_pass}")
