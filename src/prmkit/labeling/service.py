"""What the labelling app does, over a SQLAlchemy session: accounts, queue import, the
next task for a labeller, step ratings, finishing, export. The web app and the CLI are
thin layers over these functions; each takes the session first and commits its own work.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import exists, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from prmkit.data.io import atomic_write, dumps_line
from prmkit.data.prm800k import FINISH_REASONS, TOP_KEYS, to_dict
from prmkit.data.readers import read_records
from prmkit.data.records import LabelledSolution
from prmkit.errors import DataError
from prmkit.labeling.accounts import (  # noqa: F401  (the service's API)
    SESSION_IDLE,
    SESSION_LIFETIME,
    authenticate,
    close_session,
    create_user,
    get_user,
    list_users,
    open_session,
    session_user,
    set_disabled,
    set_password,
)
from prmkit.labeling.errors import Conflict, LabelingError, NotFound
from prmkit.labeling.models import (
    ITEM_KINDS,
    Item,
    Project,
    ProjectMember,
    StepLabel,
    Task,
    User,
    WithdrawnLabel,
    utcnow,
)
from prmkit.labeling.projects import (  # noqa: F401  (the service's API)
    add_members,
    configure_project,
    create_project,
    get_project,
    is_member,
    list_projects,
    members,
    project_for,
    remove_members,
    set_members,
    update_project,
)

NOTE_REASONS = ("bad_problem", "give_up")  # finish reasons that need a written reason
MAX_IDLE_HOURS = 24 * 365 * 100


def _positions(sol: LabelledSolution, where: str) -> tuple[list[dict], list[list[int | None]]]:
    """Step positions to rate and the imported ratings, from a queue record."""
    steps = list(sol.steps)
    while steps and not steps[-1].completions:
        steps.pop()  # a trailing give-up position: nothing to rate
    if not steps:
        pre = sol.pre_generated_steps or []
        return [{"candidates": [t], "path": 0, "human": None} for t in pre], [[None] for _ in pre]
    positions, reference = [], []
    for i, s in enumerate(steps):
        if not s.completions:
            raise DataError(where, None, f"label.steps[{i}].completions",
                            "a step position inside the solution has no completions to rate")
        path = s.chosen
        if path is None and s.human_completion is None and len(s.completions) == 1:
            path = 0
        human = None
        if s.human_completion is not None:
            h = s.human_completion
            human = {"text": h.text, "rating": h.rating, "flagged": h.flagged, **h.extra}
        positions.append({"candidates": [c.text for c in s.completions], "path": path,
                          "human": human})
        reference.append([c.rating for c in s.completions])
    return positions, reference


def import_queue(db: Session, project: Project, path: str | os.PathLike, kind: str | None = None,
                 format: str | None = None) -> int:
    """Add every solution of a PRM800K-format file (or any format prmkit reads into labelled
    solutions) to the project's queue, all or nothing: a malformed record raises DataError
    naming the file and line, and nothing is imported.

    kind: "task", "gold" or "screening"; None takes it from each record's
    is_quality_control_question / is_initial_screening_question flags.
    """
    if kind is not None and kind not in ITEM_KINDS:
        raise LabelingError(f"kind must be one of {', '.join(ITEM_KINDS)}, got {kind!r}")
    n = 0
    try:
        for sol in read_records(path, format=format):
            if not isinstance(sol, LabelledSolution):
                raise DataError(str(path), None, None, f"{type(sol).__name__} records are not "
                                "labelled solutions; a queue needs PRM800K-style records")
            prov = sol.provenance
            where = str(path) if prov.source_line is None else f"{path}:{prov.source_line}"
            positions, reference = _positions(sol, where)
            if not positions:
                raise DataError(str(path), prov.source_line, "label.steps",
                                "no steps to label (neither label.steps nor pre_generated_steps)")
            k = kind or ("screening" if prov.is_initial_screening_question
                         else "gold" if prov.is_quality_control_question else "task")
            if k != "task" and not any(r is not None for rs in reference for r in rs):
                raise DataError(str(path), prov.source_line, "label.steps",
                                f"a {k} question needs the reference ratings")
            source = {key: value for key, value in to_dict(sol).items() if key != "label"}
            db.add(Item(project_id=project.id, kind=k, source=source, positions=positions,
                        reference=reference if k != "task" else None,
                        source_path=str(path), source_line=prov.source_line))
            n += 1
        db.commit()
    except BaseException:
        db.rollback()
        raise
    return n


# --- the labeller's side --------------------------------------------------------------------


@dataclass
class TaskView:
    """Everything the labelling page shows for a task."""

    task: Task
    item: Item
    phase: int
    position: int | None  # the position to rate next; None when all are rated or done
    path_before: list[dict]  # the steps the solution continues with, before `position`
    labels: list[StepLabel]

    @property
    def candidates(self) -> list[str]:
        return [] if self.position is None else self.item.positions[self.position]["candidates"]


def _task_for(db: Session, user: User, task_id: int, lock: bool = False) -> Task:
    """The user's task, in a project they are a member of; else NotFound."""
    q = select(Task).where(Task.id == task_id, Task.user_id == user.id)
    if user.role != "admin":
        q = q.where(exists().where(ProjectMember.user_id == user.id, Item.id == Task.item_id,
                                   ProjectMember.project_id == Item.project_id))
    if lock:
        q = q.with_for_update(of=Task)
    task = db.scalar(q)
    if task is None:
        raise NotFound(f"no task {task_id}")
    return task


def _labels(db: Session, task: Task) -> list[StepLabel]:
    return list(db.scalars(select(StepLabel).where(StepLabel.task_id == task.id)
                           .order_by(StepLabel.position)))


def withdrawn_labels(db: Session, task: Task) -> dict[int, list[WithdrawnLabel]]:
    """The ratings a labeller undid in a task, per position, oldest first (for audit)."""
    out: dict[int, list[WithdrawnLabel]] = {}
    for w in db.scalars(select(WithdrawnLabel).where(WithdrawnLabel.task_id == task.id)
                        .order_by(WithdrawnLabel.withdrawn_at, WithdrawnLabel.id)):
        out.setdefault(w.position, []).append(w)
    return out


def _kept(position: dict, label: StepLabel | None) -> dict:
    if label is not None and label.human_text:
        return {"text": label.human_text, "by": "you"}
    if position["path"] is not None:
        return {"text": position["candidates"][position["path"]], "by": "model"}
    if position["human"] is not None:
        return {"text": position["human"]["text"], "by": "person"}
    return {"text": "", "by": "none"}


def view_task(db: Session, user: User, task_id: int) -> TaskView:
    return _view(db, _task_for(db, user, task_id))


def admin_view_task(db: Session, task_id: int) -> TaskView:
    """Any labeller's task, for an admin's read-only page."""
    task = db.get(Task, task_id)
    if task is None:
        raise NotFound(f"no task {task_id}")
    return _view(db, task)


def _view(db: Session, task: Task) -> TaskView:
    labels = _labels(db, task)
    positions = task.item.positions
    done = len(labels)
    position = done if task.status == "open" and done < len(positions) else None
    path = [_kept(positions[i], labels[i] if i < len(labels) else None)
            for i in range(done if position is None else position)]
    return TaskView(task, task.item, task.item.project.phase, position, path, labels)


def list_tasks(db: Session, user: User) -> list[Task]:
    """The user's tasks, newest first, in the projects they are a member of."""
    q = select(Task).where(Task.user_id == user.id)
    if user.role != "admin":
        q = q.join(Item, Task.item_id == Item.id).join(
            ProjectMember, (ProjectMember.project_id == Item.project_id)
            & (ProjectMember.user_id == user.id))
    return list(db.scalars(q.order_by(Task.id.desc())))


def project_tasks(db: Session, project: Project, username: str | None = None) -> list[Task]:
    """A project's tasks, newest first, of every labeller or of one."""
    q = select(Task).join(Item, Task.item_id == Item.id).where(Item.project_id == project.id)
    if username is not None:
        q = q.join(User, Task.user_id == User.id).where(User.username == username)
    return list(db.scalars(q.order_by(Task.id.desc())))


def screening_status(db: Session, user: User, project: Project) -> dict[str, Any]:
    """{"required", "done", "agreement", "passed", "failed"} of a labeller's screening."""
    total = db.scalar(select(func.count()).select_from(Item).where(
        Item.project_id == project.id, Item.kind == "screening")) or 0
    required = min(total, project.screening_size)
    agree, n, done = 0, 0, 0
    for task in db.scalars(select(Task).join(Item).where(
            Task.user_id == user.id, Item.project_id == project.id, Item.kind == "screening",
            Task.status == "done")):
        done += 1
        a, m = gold_agreement(task.item.reference or [], _labels(db, task))
        agree, n = agree + a, n + m
    agreement = agree / n if n else None
    complete = done >= required
    passed = required == 0 or (complete and agreement is not None
                               and agreement >= project.screening_pass)
    return {"required": required, "done": done, "agreement": agreement, "passed": passed,
            "failed": complete and not passed}


def gold_agreement(reference: list[list[int | None]], labels: list[StepLabel]) -> tuple[int, int]:
    """(matching ratings, compared ratings) against a gold answer key."""
    same = n = 0
    for label in labels:
        if label.position >= len(reference):
            continue
        for ref, got in zip(reference[label.position], label.ratings):
            if ref is not None:
                n += 1
                same += ref == got
    return same, n


def next_task(db: Session, user: User, project: Project) -> Task | None:
    """The labeller's open task in the project, else a new one: screening questions first
    (until passed), gold questions at the project's rate, otherwise the oldest item that
    fewer than `overlap` labellers have. None when nothing is left (or screening failed).
    A labeller who is not a member of the project gets NotFound."""
    if not is_member(db, user, project.id):
        raise NotFound(f"no project {project.id}")
    for _attempt in range(3):
        try:
            return _next_task(db, user, project)
        except IntegrityError:
            db.rollback()  # a concurrent request of the same labeller took the same item
    raise Conflict("could not assign a task; try again")


def _next_task(db: Session, user: User, project: Project) -> Task | None:
    mine = select(Task.item_id).where(Task.user_id == user.id)
    open_task = db.scalar(select(Task).join(Item).where(
        Task.user_id == user.id, Task.status == "open", Item.project_id == project.id)
        .order_by(Task.id))
    if open_task is not None:
        return open_task
    base = select(Item).where(Item.project_id == project.id, Item.id.not_in(mine))
    item = None
    screening = screening_status(db, user, project)
    if screening["failed"]:
        return None
    if not screening["passed"]:
        item = db.scalar(base.where(Item.kind == "screening").order_by(Item.id).limit(1))
    elif project.gold_rate > 0:
        done = db.scalar(select(func.count()).select_from(Task).join(Item).where(
            Task.user_id == user.id, Item.project_id == project.id,
            Item.kind != "screening")) or 0
        # Gold questions spread evenly: one whenever the running share falls behind the rate.
        if int((done + 1) * project.gold_rate) > int(done * project.gold_rate):
            item = db.scalar(base.where(Item.kind == "gold").order_by(Item.id).limit(1))
    if item is None:
        taken = (select(func.count()).select_from(Task)
                 .where(Task.item_id == Item.id, Task.status != "released")
                 .correlate(Item).scalar_subquery())
        q = base.where(Item.kind == "task", taken < project.overlap).order_by(Item.id).limit(1)
        if db.bind.dialect.name != "postgresql":
            item = db.scalar(q)  # SQLite: BEGIN IMMEDIATE already serialises the writers
        else:
            item = _lock_item_with_room(db, q.with_for_update(skip_locked=True, of=Item),
                                        project.overlap)
    if item is None:
        return None
    task = Task(item_id=item.id, user_id=user.id, status="open", started_at=utcnow())
    db.add(task)
    db.commit()
    return task


def _lock_item_with_room(db: Session, q, overlap: int) -> Item | None:
    """PostgreSQL: the first item of `q`, locked, that still has fewer than `overlap` tasks.
    `q` counts tasks in the snapshot its statement started with, so it can lock an item
    just after another labeller's transaction took it and committed, without seeing that
    task; a second statement, run while holding the lock, sees it."""
    full: list[int] = []
    while True:
        item = db.scalar(q.where(Item.id.not_in(full)) if full else q)
        if item is None:
            return None
        n = db.scalar(select(func.count()).select_from(Task).where(
            Task.item_id == item.id, Task.status != "released")) or 0
        if n < overlap:
            return item
        full.append(item.id)


def _by_index(given: Sequence | Mapping[int, Any], n: int, what: str) -> list:
    """A form's values by candidate index as a list of n, checked against n before
    anything of the given size is built."""
    if not isinstance(given, Mapping):
        if len(given) != n:
            raise LabelingError(f"expected {n} {what}, got {len(given)}")
        return list(given)
    if len(given) != n or any(not (isinstance(i, int) and 0 <= i < n) for i in given):
        raise LabelingError(f"rate each of the {n} candidate steps (candidates 0 to {n - 1})")
    return [given[i] for i in range(n)]


def submit_step(db: Session, user: User, task_id: int, position: int,
                ratings: Sequence[int] | Mapping[int, int],
                flags: Sequence[bool] | Mapping[int, bool] | None, submission_id: str,
                human_text: str | None = None) -> StepLabel:
    """Store one position's ratings. Idempotent: the same submission id returns the stored
    label (or, once that label was undone, is a Conflict); another submission for a rated
    position is a Conflict. In phase 2 a -1 ends the
    task (found_error) and the last position rated without one ends it as a solution."""
    if not submission_id or len(submission_id) > 64:
        raise LabelingError("a submission id (at most 64 characters) is required")
    task = _task_for(db, user, task_id, lock=db.bind.dialect.name == "postgresql")
    earlier = db.scalar(select(StepLabel).where(StepLabel.submission_id == submission_id))
    if earlier is not None:
        if earlier.task_id != task.id or earlier.position != position:
            raise Conflict("this submission id was used for another step")
        db.commit()
        return earlier
    if _withdrawn(db, submission_id) is not None:
        raise Conflict(f"this rating of step {position + 1} was undone; rate the step again "
                       "from the task page")
    _check_open(task)
    positions = task.item.positions
    done = db.scalar(select(func.count()).select_from(StepLabel)
                     .where(StepLabel.task_id == task.id)) or 0
    if position != done:
        raise Conflict(f"step {position + 1} is not the next step to rate (step {done + 1} is)")
    if position >= len(positions):
        raise Conflict("every step of this task is rated")
    n = len(positions[position]["candidates"])
    ratings = _by_index(ratings, n, "ratings")
    if any(r not in (-1, 0, 1) for r in ratings):
        raise LabelingError(f"rate each of the {n} candidate steps +1, 0 or -1")
    if isinstance(flags, Mapping):
        if any(not (isinstance(i, int) and 0 <= i < n) for i in flags):
            raise LabelingError(f"flags name candidates 0 to {n - 1}")
        flags = [bool(flags.get(i)) for i in range(n)]
    flags = _by_index([False] * n if flags is None else flags, n, "flags")
    phase = task.item.project.phase
    human_text = (human_text or "").strip() or None
    if human_text is not None and (phase != 1 or any(r != -1 for r in ratings)):
        raise LabelingError("you may write your own step only in phase 1, when every "
                            "candidate is rated -1")
    label = StepLabel(task_id=task.id, position=position, ratings=list(ratings),
                      flags=[bool(f) for f in flags], human_text=human_text,
                      submission_id=submission_id, created_at=utcnow())
    db.add(label)
    try:
        db.flush()
    except IntegrityError:
        db.rollback()  # the same form, submitted twice at once: the other request stored it
        earlier = db.scalar(select(StepLabel).where(StepLabel.submission_id == submission_id))
        if earlier is not None and earlier.task_id == task_id and earlier.position == position:
            return earlier
        raise Conflict(f"step {position + 1} is already rated") from None
    if phase == 2 and ratings[0] == -1:
        _finish(task, "found_error", None)
    elif phase == 2 and position == len(positions) - 1:
        _finish(task, "solution", None)
    db.commit()
    return label


def _withdrawn(db: Session, submission_id: str) -> WithdrawnLabel | None:
    return db.scalar(select(WithdrawnLabel).where(WithdrawnLabel.submission_id == submission_id))


def undo_step(db: Session, user: User, task_id: int, position: int,
              submission_id: str) -> WithdrawnLabel | None:
    """Withdraw the labeller's last rating of an open task, named by its position and its
    submission id, so the step is shown and rated again (with a new submission id).

    Idempotent: an undo of a rating already withdrawn returns None and changes nothing, so a
    double-submitted or replayed undo never withdraws the rating given after it. An undo of
    any other rating is a Conflict; finished and released tasks refuse it (phase 2 finishes
    a task at its first -1 or last rating, so those cannot be undone)."""
    task = _task_for(db, user, task_id, lock=db.bind.dialect.name == "postgresql")
    _check_open(task)
    gone = _withdrawn(db, submission_id)
    if gone is not None and gone.task_id == task.id and gone.position == position:
        db.commit()
        return None
    last = db.scalar(select(StepLabel).where(StepLabel.task_id == task.id)
                     .order_by(StepLabel.position.desc()).limit(1))
    if last is None:
        raise Conflict("no step of this task is rated; there is nothing to undo")
    if last.position != position or last.submission_id != submission_id:
        raise Conflict(f"only your last rating (step {last.position + 1}) can be undone, "
                       f"not this rating of step {position + 1}")
    withdrawn = WithdrawnLabel(task_id=task.id, position=last.position, ratings=last.ratings,
                               flags=last.flags, human_text=last.human_text,
                               submission_id=last.submission_id, created_at=last.created_at,
                               withdrawn_at=utcnow())
    db.delete(last)
    db.flush()  # the label leaves step_labels before its submission id moves
    db.add(withdrawn)
    db.commit()
    return withdrawn


def _check_open(task: Task) -> None:
    if task.status == "released":
        raise Conflict(f"task {task.id} was released after it sat idle, and its solution went "
                       "to another labeller; it takes no more ratings (take the next solution)")
    if task.status != "open":
        raise Conflict("this task is finished")


def _finish(task: Task, reason: str, note: str | None) -> None:
    task.status, task.finish_reason, task.finish_note = "done", reason, note
    task.finished_at = utcnow()
    task.total_time = int((task.finished_at - task.started_at).total_seconds() * 1000)


def finish_task(db: Session, user: User, task_id: int, reason: str,
                note: str | None = None) -> Task:
    """End a task with a PRM800K finish reason; finishing again with the same reason is a
    no-op (a retried request), with another one a Conflict."""
    if reason not in FINISH_REASONS:
        raise LabelingError(f"finish reason must be one of {', '.join(FINISH_REASONS)}")
    note = (note or "").strip() or None
    if reason in NOTE_REASONS and note is None:
        raise LabelingError(f"say why ({reason} needs a reason)")
    task = _task_for(db, user, task_id, lock=db.bind.dialect.name == "postgresql")
    if task.status == "done":
        if task.finish_reason != reason:
            raise Conflict(f"this task is already finished ({task.finish_reason})")
        db.commit()
        return task
    _check_open(task)
    done = db.scalar(select(func.count()).select_from(StepLabel)
                     .where(StepLabel.task_id == task.id)) or 0
    if reason in ("found_error", "solution") and done == 0:
        raise LabelingError("rate at least one step first")
    if reason == "solution" and done < len(task.item.positions):
        raise LabelingError("a solution is finished only once every step is rated")
    _finish(task, reason, note)
    db.commit()
    return task


def last_activity(db: Session, task: Task) -> datetime:
    """When the task was taken, last rated or last had a rating undone, whichever is later."""
    times = [task.started_at,
             db.scalar(select(func.max(StepLabel.created_at)).where(StepLabel.task_id == task.id)),
             db.scalar(select(func.max(WithdrawnLabel.withdrawn_at))
                       .where(WithdrawnLabel.task_id == task.id))]
    return max(t for t in times if t is not None)


def idle_hours(hours: float) -> timedelta:
    """An idle time given in hours, checked."""
    if not (math.isfinite(hours) and 0 <= hours <= MAX_IDLE_HOURS):
        raise LabelingError(f"idle hours must be a number >= 0 and at most {MAX_IDLE_HOURS}, "
                            f"got {hours}")
    return timedelta(hours=hours)


def release_stale_tasks(db: Session, project: Project, idle: timedelta,
                        user: str | None = None) -> list[Task]:
    """Release the project's open tasks (of one labeller, or of all) taken or last rated
    more than `idle` ago: each becomes "released", stops counting toward the overlap, so
    its solution goes to another labeller, and takes no more writes. The labeller never
    gets that solution again; their ratings stay in the database but are not exported.
    Gold and screening tasks are left alone (every labeller gets those anyway)."""
    if idle < timedelta(0):
        raise LabelingError(f"the idle time must not be negative, got {idle}")
    cutoff = utcnow() - idle
    rated_since = select(StepLabel.id).where(StepLabel.task_id == Task.id,
                                             StepLabel.created_at >= cutoff).exists()
    undone_since = select(WithdrawnLabel.id).where(WithdrawnLabel.task_id == Task.id,
                                                   WithdrawnLabel.withdrawn_at >= cutoff).exists()
    q = (select(Task).join(Item, Task.item_id == Item.id)
         .where(Item.project_id == project.id, Item.kind == "task", Task.status == "open",
                Task.started_at < cutoff, ~rated_since, ~undone_since).order_by(Task.id)
         .execution_options(populate_existing=True))
    if user is not None:
        owner = db.scalar(select(User).where(User.username == user))
        if owner is None:
            raise NotFound(f"no user {user!r}")
        q = q.where(Task.user_id == owner.id)
    if db.bind.dialect.name == "postgresql":
        q = q.with_for_update(of=Task)  # a step being stored now finishes first
    released = []
    try:
        for task in db.scalars(q).all():
            # Read again after the lock: a rating stored meanwhile counts as activity.
            if last_activity(db, task) < cutoff:
                task.status = "released"
                released.append(task)
        db.commit()
    except BaseException:
        db.rollback()
        raise
    return released


# --- export ---------------------------------------------------------------------------------


def export_record(task: Task, labels: list[StepLabel]) -> dict[str, Any]:
    """A finished task as a raw PRM800K object (every field, the official key order)."""
    item = task.item
    steps = []
    for label in labels:
        pos = item.positions[label.position]
        completions = [{"text": t, "rating": r, "flagged": f}
                       for t, r, f in zip(pos["candidates"], label.ratings, label.flags)]
        path = pos["path"]
        chosen = path if path is not None and label.ratings[path] >= 0 else None
        if label.human_text:
            human = {"text": label.human_text, "rating": None, "flagged": False, "source": "human"}
        else:
            human = pos["human"] if path is None else None
        steps.append({"completions": completions, "human_completion": human,
                      "chosen_completion": chosen})
    out: dict[str, Any] = {key: item.source.get(key) for key in TOP_KEYS if key != "label"}
    out["labeler"] = task.user.username
    out["timestamp"] = task.finished_at.isoformat() if task.finished_at else None
    out["is_quality_control_question"] = item.kind == "gold"
    out["is_initial_screening_question"] = item.kind == "screening"
    out["label"] = {"steps": steps, "total_time": task.total_time,
                    "finish_reason": task.finish_reason}
    if task.finish_note:
        out["label"]["finish_note"] = task.finish_note
    out.update({k: v for k, v in item.source.items() if k not in TOP_KEYS})
    return out


def iter_export(db: Session, project: Project) -> Iterator[dict[str, Any]]:
    tasks = db.scalars(select(Task).join(Item).where(
        Item.project_id == project.id, Task.status == "done")
        .order_by(Task.finished_at, Task.id))
    for task in tasks:
        yield export_record(task, _labels(db, task))


def export_project(db: Session, project: Project, path: str | os.PathLike) -> int:
    """Write the project's finished tasks as raw PRM800K JSONL (atomically)."""
    n = 0
    with atomic_write(path) as f:
        for record in iter_export(db, project):
            f.write(dumps_line(record))
            n += 1
    return n
