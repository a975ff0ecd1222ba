"""Quality control: gold accuracy, screening, and agreement between labellers
(Cohen's kappa for each pair, Fleiss' kappa over everyone)."""

from __future__ import annotations

from collections import Counter, defaultdict
from itertools import combinations
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from prmkit.labeling.models import Item, Project, StepLabel, Task, User
from prmkit.labeling.service import gold_agreement, screening_status

CATEGORIES = (-1, 0, 1)


def cohen_kappa(a: list[int], b: list[int]) -> float | None:
    """Cohen's kappa of two raters over the same units; None without units, 1.0 when both
    give one identical category throughout (no disagreement possible to correct for)."""
    n = len(a)
    if n == 0 or n != len(b):
        return None
    observed = sum(x == y for x, y in zip(a, b)) / n
    ca, cb = Counter(a), Counter(b)
    expected = sum(ca[c] * cb[c] for c in ca) / (n * n)
    if expected == 1.0:
        return 1.0 if observed == 1.0 else None
    return (observed - expected) / (1.0 - expected)


def fleiss_kappa(units: list[list[int]]) -> float | None:
    """Fleiss' kappa over units rated by two or more raters (the number may vary)."""
    units = [u for u in units if len(u) >= 2]
    if not units:
        return None
    totals: Counter = Counter()
    agreement = 0.0
    for u in units:
        counts = Counter(u)
        m = len(u)
        agreement += (sum(c * c for c in counts.values()) - m) / (m * (m - 1))
        totals.update(counts)
    p_bar = agreement / len(units)
    n_ratings = sum(totals.values())
    p_e = sum((c / n_ratings) ** 2 for c in totals.values())
    if p_e == 1.0:
        return 1.0 if p_bar == 1.0 else None
    return (p_bar - p_e) / (1.0 - p_e)


def _done_labels(db: Session, project: Project, kind: str) -> list[tuple[Task, list[StepLabel]]]:
    tasks = db.scalars(select(Task).join(Item).where(
        Item.project_id == project.id, Item.kind == kind, Task.status == "done")
        .order_by(Task.id))
    out = []
    for task in tasks:
        labels = list(db.scalars(select(StepLabel).where(StepLabel.task_id == task.id)
                                 .order_by(StepLabel.position)))
        out.append((task, labels))
    return out


def project_stats(db: Session, project: Project) -> dict[str, Any]:
    """The dashboard's figures for one project."""
    counts = dict(db.execute(select(Item.kind, func.count()).where(
        Item.project_id == project.id).group_by(Item.kind)).all())
    task_counts = dict(db.execute(select(Task.status, func.count()).join(Item).where(
        Item.project_id == project.id).group_by(Task.status)).all())
    released = dict(db.execute(select(User.username, func.count())
                               .select_from(Task).join(Item).join(User).where(
        Item.project_id == project.id, Task.status == "released").group_by(User.username)).all())

    # Ratings of regular items by unit (item, position, candidate) and labeller.
    units: dict[tuple[int, int, int], dict[str, int]] = defaultdict(dict)
    per_user: dict[str, dict[str, Any]] = defaultdict(
        lambda: {"tasks_done": 0, "ratings": 0, "gold_same": 0, "gold_n": 0, "flags": 0})
    for task, labels in _done_labels(db, project, "task"):
        row = per_user[task.user.username]
        row["tasks_done"] += 1
        for label in labels:
            row["ratings"] += len(label.ratings)
            row["flags"] += sum(label.flags)
            for c, r in enumerate(label.ratings):
                units[(task.item_id, label.position, c)][task.user.username] = r
    for task, labels in _done_labels(db, project, "gold"):
        row = per_user[task.user.username]
        same, n = gold_agreement(task.item.reference or [], labels)
        row["gold_same"] += same
        row["gold_n"] += n

    names = sorted(per_user)
    pairs = {}
    for a, b in combinations(names, 2):
        shared = [u for u in units.values() if a in u and b in u]
        kappa = cohen_kappa([u[a] for u in shared], [u[b] for u in shared])
        if kappa is not None:
            pairs[(a, b)] = (kappa, len(shared))
    labellers = []
    users = {u.username: u for u in db.scalars(select(User).where(User.role == "labeller"))}
    for name in sorted(set(names) | set(users)):
        row = per_user.get(name, {"tasks_done": 0, "ratings": 0, "gold_same": 0, "gold_n": 0,
                                  "flags": 0})
        mine = [(k, n) for (a, b), (k, n) in pairs.items() if name in (a, b)]
        weight = sum(n for _, n in mine)
        screening = screening_status(db, users[name], project) if name in users else None
        labellers.append({
            "labeller": name,
            "tasks_done": row["tasks_done"],
            "tasks_released": released.get(name, 0),
            "ratings": row["ratings"],
            "flags": row["flags"],
            "gold_questions": row["gold_n"],
            "gold_accuracy": row["gold_same"] / row["gold_n"] if row["gold_n"] else None,
            "kappa_with_others": sum(k * n for k, n in mine) / weight if weight else None,
            "screening": screening,
        })
    return {
        "project": project.name,
        "phase": project.phase,
        "overlap": project.overlap,
        "gold_rate": project.gold_rate,
        "items": {kind: counts.get(kind, 0) for kind in ("task", "gold", "screening")},
        "tasks": {status: task_counts.get(status, 0) for status in ("open", "done", "released")},
        "fleiss_kappa": fleiss_kappa([[r for r in u.values()] for u in units.values()]),
        "units_rated_by_several": sum(len(u) >= 2 for u in units.values()),
        "pairs": [{"a": a, "b": b, "kappa": k, "units": n} for (a, b), (k, n) in pairs.items()],
        "labellers": labellers,
    }
