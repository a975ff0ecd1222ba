"""Tables of the labelling app (SQLAlchemy 2 ORM; the schema is created by the migrations)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    String,
    Text,
    UniqueConstraint,
    false,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

ROLES = ("admin", "labeller")
ITEM_KINDS = ("task", "gold", "screening")


def utcnow() -> datetime:
    """Naive UTC, stored alike by SQLite and PostgreSQL."""
    return datetime.now(UTC).replace(tzinfo=None)


class Base(DeclarativeBase):
    pass


class User(Base):
    __tablename__ = "users"

    id: Mapped[int] = mapped_column(primary_key=True)
    username: Mapped[str] = mapped_column(String(64), unique=True)
    password_hash: Mapped[str] = mapped_column(String(255))
    role: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    # A disabled account cannot sign in, and its sessions are ended.
    disabled: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())


class LoginSession(Base):
    """A signed-in browser: the cookie holds the token, the table only its sha256."""

    __tablename__ = "login_sessions"

    token_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    csrf_token: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(DateTime)
    # The last request seen; a session idle for longer than the idle limit is over.
    last_seen_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)

    user: Mapped[User] = relationship(lazy="joined")


class Project(Base):
    __tablename__ = "projects"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    phase: Mapped[int] = mapped_column(Integer)  # 1: alternatives rated, 2: stop at first -1
    overlap: Mapped[int] = mapped_column(Integer, default=1)  # labellers per task
    gold_rate: Mapped[float] = mapped_column(Float, default=0.0)  # share of gold questions served
    screening_size: Mapped[int] = mapped_column(Integer, default=30)
    screening_pass: Mapped[float] = mapped_column(Float, default=0.75)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class ProjectMember(Base):
    """A labeller allowed to see and take the project's tasks (admins see every project)."""

    __tablename__ = "project_members"

    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"),
                                            primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"),
                                         primary_key=True, index=True)
    added_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class Item(Base):
    """One solution to label, as imported from the queue.

    `source` is the raw PRM800K object without its label; `positions` lists the step
    positions: {"candidates": [text, ...], "path": index the solution continues with or
    null, "human": the queue's human step dict or null}; `reference` holds the imported
    ratings (per position, per candidate), the answer key of gold and screening items.
    """

    __tablename__ = "items"

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(16), default="task")
    source: Mapped[dict[str, Any]] = mapped_column(JSON)
    positions: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    reference: Mapped[list[list[int | None]] | None] = mapped_column(JSON, nullable=True)
    source_path: Mapped[str | None] = mapped_column(Text, nullable=True)
    source_line: Mapped[int | None] = mapped_column(Integer, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)

    project: Mapped[Project] = relationship(lazy="joined")


class Task(Base):
    """An item given to one labeller; at most one per (item, labeller)."""

    __tablename__ = "tasks"
    __table_args__ = (UniqueConstraint("item_id", "user_id", name="uq_tasks_item_user"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    item_id: Mapped[int] = mapped_column(ForeignKey("items.id", ondelete="CASCADE"), index=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    status: Mapped[str] = mapped_column(String(16), default="open")  # open | done | released
    started_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    finish_reason: Mapped[str | None] = mapped_column(String(16), nullable=True)
    finish_note: Mapped[str | None] = mapped_column(Text, nullable=True)
    total_time: Mapped[int | None] = mapped_column(Integer, nullable=True)  # milliseconds

    item: Mapped[Item] = relationship(lazy="joined")
    user: Mapped[User] = relationship(lazy="joined")


class _Rating:
    """The columns of one position's ratings by one labeller (stored or withdrawn)."""

    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"), index=True)
    position: Mapped[int] = mapped_column(Integer)
    ratings: Mapped[list[int]] = mapped_column(JSON)
    flags: Mapped[list[bool]] = mapped_column(JSON)
    human_text: Mapped[str | None] = mapped_column(Text, nullable=True)
    submission_id: Mapped[str] = mapped_column(String(64), unique=True)


class StepLabel(_Rating, Base):
    """The ratings of one step position by one labeller: written once (the labeller's last
    one may be withdrawn into `withdrawn_labels` while the task is open).

    The unique (task, position) pair and the client's submission id make a repeated or
    double-submitted form land once.
    """

    __tablename__ = "step_labels"
    __table_args__ = (UniqueConstraint("task_id", "position", name="uq_step_labels_task_position"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class WithdrawnLabel(_Rating, Base):
    """A step label its labeller undid while the task was open, moved out of step_labels.

    Kept so that a late replay of the withdrawn form (its submission id) is refused rather
    than stored again, and so that a repeated undo is a no-op.
    """

    __tablename__ = "withdrawn_labels"

    id: Mapped[int] = mapped_column(primary_key=True)
    created_at: Mapped[datetime] = mapped_column(DateTime)
    withdrawn_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
