# ruff: noqa: F811  (pytest fixtures imported from labeling_support)
"""The labelling service on SQLite and PostgreSQL: migrations, queue import, labelling in
phases 1 and 2, idempotent submissions, export read back by prmkit's PRM800K reader."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

import orjson
import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from labeling_support import (  # noqa: F401
    db_url,
    phase1_record,
    phase2_record,
    postgres_cluster,
    sessions,
    write_queue,
)
from sqlalchemy import select, text

from prmkit.cli import main
from prmkit.data import read_records
from prmkit.data.prm800k import to_dict
from prmkit.data.stats import file_stats
from prmkit.errors import DataError
from prmkit.labeling import qc, security, service
from prmkit.labeling.models import Base, Item, Project, StepLabel, Task, User, utcnow


def _sid() -> str:
    return uuid.uuid4().hex


def _label_all(db, user, task, rating=1, finish="solution"):
    while True:
        view = service.view_task(db, user, task.id)
        if view.position is None:
            break
        n = len(view.candidates)
        service.submit_step(db, user, task.id, view.position, [rating] * n, [False] * n, _sid())
    if finish and service.view_task(db, user, task.id).task.status == "open":
        service.finish_task(db, user, task.id, finish)


@pytest.fixture
def setup(sessions, tmp_path):
    """A phase-1 project with two queued solutions and two labellers."""
    db = sessions()
    ann = service.create_user(db, "ann", "password-a")
    bob = service.create_user(db, "bob", "password-b")
    project = service.configure_project(db, "p1", phase=1)
    db.commit()
    service.set_members(db, project, ["ann", "bob"])
    queue = write_queue(tmp_path / "queue.jsonl", [phase1_record(3), phase1_record(5)])
    assert service.import_queue(db, project, queue) == 2
    yield db, project, ann, bob, tmp_path
    db.close()


@pytest.fixture
def phase2(sessions, tmp_path):
    """A phase-2 project with one queued solution, taken by a labeller."""
    db = sessions()
    ann = service.create_user(db, "ann", "password-a")
    project = service.configure_project(db, "p2", phase=2)
    db.commit()
    service.set_members(db, project, ["ann"])
    service.import_queue(db, project, write_queue(tmp_path / "q.jsonl", [phase2_record(1)]))
    yield db, project, ann, service.next_task(db, ann, project)
    db.close()


def test_migrations_give_exactly_the_schema_of_the_models(sessions):
    with sessions() as db:
        diff = compare_metadata(MigrationContext.configure(db.connection()), Base.metadata)
    assert diff == []


def test_database_of_the_first_schema_upgrades_to_head_and_keeps_its_labels(db_url, tmp_path):
    # a lab's database made before withdrawn_labels existed: `label serve` upgrades it
    from alembic import command
    from alembic.config import Config

    from prmkit.labeling import db as dbmod

    engine = dbmod.make_engine(db_url)
    cfg = Config()
    cfg.set_main_option("script_location", str(dbmod.MIGRATIONS))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0001")
    make = dbmod.make_sessionmaker(engine)
    with make() as db:
        # the first schema's users table (no `disabled` column): written as its app did
        db.execute(text("INSERT INTO users (username, password_hash, role, created_at) "
                        "VALUES ('ann', :h, 'labeller', :t)"),
                   {"h": security.hash_password("password-a"), "t": utcnow()})
        ann_id = db.scalar(text("SELECT id FROM users WHERE username = 'ann'"))
        project = service.configure_project(db, "p1", phase=2)
        db.commit()
        service.import_queue(db, project, write_queue(tmp_path / "q.jsonl", [phase2_record(3)]))
        item = db.scalar(select(Item))
        task = Task(item_id=item.id, user_id=ann_id, status="open", started_at=utcnow())
        db.add(task)
        db.flush()
        # a rating stored by the first schema's app (today's submit_step reads the new table)
        db.add(StepLabel(task_id=task.id, position=0, ratings=[1], flags=[False],
                         submission_id=_sid()))
        db.commit()
        task_id = task.id
    dbmod.migrate(engine)
    with make() as db:
        diff = compare_metadata(MigrationContext.configure(db.connection()), Base.metadata)
        assert diff == []
        ann = db.scalar(select(User).where(User.username == "ann"))
        # the labellers of the first schema keep their access: members of every project
        assert [u.username for u in service.members(db, db.get(Project, project.id))] == ["ann"]
        assert not ann.disabled
        assert [lb.position for lb in service.view_task(db, ann, task_id).labels] == [0]
        sid = _sid()
        service.submit_step(db, ann, task_id, 1, [1], [False], sid)
        assert service.undo_step(db, ann, task_id, 1, sid) is not None  # the new table works
        assert service.view_task(db, ann, task_id).position == 1
    engine.dispose()


def test_phase1_labels_export_to_raw_prm800k_that_prmkit_reads_back(setup):
    db, project, ann, _, tmp_path = setup
    task = service.next_task(db, ann, project)
    view = service.view_task(db, ann, task.id)
    assert view.position == 0 and view.candidates == ["Let $x = 3$, so $x^2 = 9$."]
    service.submit_step(db, ann, task.id, 0, [1], [False], _sid())
    service.submit_step(db, ann, task.id, 1, [1, -1, 0], [False, True, False], _sid())
    service.submit_step(db, ann, task.id, 2, [1], [False], _sid())
    service.finish_task(db, ann, task.id, "solution")

    out = tmp_path / "export.jsonl"
    assert service.export_project(db, project, out) == 1
    (sol,) = read_records(out)
    assert sol.provenance.labeler == "ann" and sol.provenance.timestamp
    assert sol.provenance.generation is None
    assert not sol.provenance.is_quality_control_question
    assert sol.problem.text == "If $x = 3$, what is $2x$?" and sol.problem.answer == "6"
    assert sol.finish_reason == "solution" and sol.total_time >= 0
    assert [[c.rating for c in s.completions] for s in sol.steps] == [[1], [1, -1, 0], [1]]
    assert [c.flagged for c in sol.steps[1].completions] == [False, True, False]
    assert [s.chosen for s in sol.steps] == [0, 0, 0]
    # Written again by prmkit's writer, the objects are the exported ones.
    assert to_dict(sol) == json.loads(out.read_text())
    assert file_stats(out)["ratings"] == {"-1": 1, "0": 1, "1": 3, "null": 0}


def test_phase2_task_ends_at_the_first_wrong_step_with_found_error(phase2):
    db, project, ann, task = phase2
    service.submit_step(db, ann, task.id, 0, [1], [False], _sid())
    service.submit_step(db, ann, task.id, 1, [-1], [True], _sid())
    view = service.view_task(db, ann, task.id)
    assert view.task.status == "done" and view.position is None
    with pytest.raises(service.Conflict):
        service.submit_step(db, ann, task.id, 2, [1], [False], _sid())
    (record,) = service.iter_export(db, project)
    assert record["generation"] == 7
    assert record["question"]["pre_generated_steps"][1] == "So $3y = 6$."
    assert record["label"]["finish_reason"] == "found_error"
    assert [s["chosen_completion"] for s in record["label"]["steps"]] == [0, None]
    assert record["label"]["steps"][1]["completions"][0] == {
        "text": "So $3y = 6$.", "rating": -1, "flagged": True}


def test_same_submission_id_twice_stores_one_label(setup):
    db, project, ann, _, _ = setup
    task = service.next_task(db, ann, project)
    sid = _sid()
    first = service.submit_step(db, ann, task.id, 0, [1], [False], sid)
    again = service.submit_step(db, ann, task.id, 0, [1], [False], sid)
    assert first.id == again.id
    assert db.query(StepLabel).count() == 1


def test_another_submission_for_a_rated_step_is_a_conflict(setup):
    db, project, ann, _, _ = setup
    task = service.next_task(db, ann, project)
    service.submit_step(db, ann, task.id, 0, [1], [False], _sid())
    with pytest.raises(service.Conflict):
        service.submit_step(db, ann, task.id, 0, [-1], [False], _sid())
    with pytest.raises(service.Conflict):  # skipping a step
        service.submit_step(db, ann, task.id, 2, [1], [False], _sid())


def test_own_step_only_when_every_alternative_is_rated_wrong(setup):
    db, project, ann, _, _ = setup
    task = service.next_task(db, ann, project)
    service.submit_step(db, ann, task.id, 0, [1], [False], _sid())
    with pytest.raises(service.LabelingError):
        service.submit_step(db, ann, task.id, 1, [1, -1, -1], [False] * 3, _sid(), "Then $2x=6$.")
    service.submit_step(db, ann, task.id, 1, [-1, -1, -1], [False] * 3, _sid(), "Then $2x=6$.")
    service.finish_task(db, ann, task.id, "found_error")
    (record,) = service.iter_export(db, project)
    step = record["label"]["steps"][1]
    assert step["chosen_completion"] is None
    assert step["human_completion"] == {"text": "Then $2x=6$.", "rating": None, "flagged": False,
                                        "source": "human"}
    (sol,) = _parse(record)
    assert [s.text for s in sol.trajectory()] == ["Let $x = 3$, so $x^2 = 9$.", "Then $2x=6$."]


def _parse(record):
    from prmkit.data.prm800k import parse_record

    return [parse_record(record, "export", 1)]


def test_bad_problem_and_give_up_need_a_reason(setup):
    db, project, ann, _, _ = setup
    task = service.next_task(db, ann, project)
    with pytest.raises(service.LabelingError, match="needs a reason"):
        service.finish_task(db, ann, task.id, "give_up", "  ")
    with pytest.raises(service.LabelingError, match="every step"):
        service.submit_step(db, ann, task.id, 0, [1], [False], _sid())
        service.finish_task(db, ann, task.id, "solution")
    service.finish_task(db, ann, task.id, "bad_problem", "the answer is wrong")
    service.finish_task(db, ann, task.id, "bad_problem", "retried")  # same reason: no-op
    (record,) = service.iter_export(db, project)
    assert record["label"]["finish_reason"] == "bad_problem"
    assert record["label"]["finish_note"] == "the answer is wrong"
    (sol,) = _parse(record)
    assert sol.extra["label_extra"] == {"finish_note": "the answer is wrong"}


def test_a_labeller_cannot_reach_another_labellers_task(setup):
    db, project, ann, bob, _ = setup
    task = service.next_task(db, ann, project)
    with pytest.raises(service.NotFound):
        service.view_task(db, bob, task.id)
    with pytest.raises(service.NotFound):
        service.submit_step(db, bob, task.id, 0, [1], [False], _sid())
    with pytest.raises(service.NotFound):
        service.finish_task(db, bob, task.id, "give_up", "x")


def test_overlap_two_gives_each_solution_to_two_labellers_and_exports_both(setup):
    db, project, ann, bob, _ = setup
    service.configure_project(db, "p1", overlap=2)
    db.commit()
    carl = service.create_user(db, "carl", "password-c")
    service.add_members(db, project, ["carl"])
    for user in (ann, bob, carl, ann, bob, carl):
        task = service.next_task(db, user, project)
        if task is not None:
            _label_all(db, user, task)
    records = list(service.iter_export(db, project))
    by_problem = {}
    for r in records:
        by_problem.setdefault(r["question"]["problem"], []).append(r["labeler"])
    assert sorted(len(v) for v in by_problem.values()) == [2, 2]
    assert all(len(set(v)) == 2 for v in by_problem.values())
    assert service.next_task(db, carl, project) is None  # both solutions have two labellers


def test_malformed_json_names_file_and_line_and_imports_nothing(sessions, tmp_path):
    db = sessions()
    project = service.configure_project(db, "p", phase=1)
    db.commit()
    good = orjson.dumps(to_dict(phase1_record(1))).decode()
    path = tmp_path / "queue.jsonl"
    path.write_text(f"{good}\n{good}\n{good[:-5]}\n")
    with pytest.raises(DataError, match=r"queue\.jsonl:3"):
        service.import_queue(db, project, path)
    assert db.query(Item).count() == 0
    db.close()


def test_gold_questions_are_served_at_the_rate_and_scored_against_the_key(sessions, tmp_path):
    db = sessions()
    ann = service.create_user(db, "ann", "password-a")
    project = service.configure_project(db, "g", phase=1, gold_rate=0.25)
    db.commit()
    service.set_members(db, project, ["ann"])
    service.import_queue(db, project, write_queue(tmp_path / "q.jsonl",
                                                  [phase1_record(i) for i in range(6)]))
    service.import_queue(db, project, write_queue(
        tmp_path / "gold.jsonl", [phase1_record(100 + i, rated=True, qc=True) for i in range(2)]))
    kinds = []
    for _ in range(8):
        task = service.next_task(db, ann, project)
        kinds.append(task.item.kind)
        _label_all(db, ann, task)  # all +1: the key has one -1 and one 0 of five ratings
    assert kinds.count("gold") == 2 and kinds[3] == "gold" and kinds[7] == "gold"
    stats = qc.project_stats(db, project)
    (row,) = stats["labellers"]
    assert row["gold_questions"] == 10 and row["gold_accuracy"] == pytest.approx(0.6)
    exported = [r for r in service.iter_export(db, project) if r["is_quality_control_question"]]
    assert len(exported) == 2
    db.close()


def test_a_labeller_below_the_screening_mark_gets_no_task(sessions, tmp_path):
    db = sessions()
    ann = service.create_user(db, "ann", "password-a")
    bob = service.create_user(db, "bob", "password-b")
    project = service.configure_project(db, "s", phase=1, screening_size=2, screening_pass=0.75)
    db.commit()
    service.set_members(db, project, ["ann", "bob"])
    service.import_queue(db, project, write_queue(tmp_path / "q.jsonl", [phase1_record(1)]))
    service.import_queue(db, project, write_queue(
        tmp_path / "s.jsonl", [phase1_record(10, rated=True), phase1_record(11, rated=True)]),
        kind="screening")
    # ann rates like the key (+1, then +1/-1/0, then +1); bob rates everything -1.
    for _ in range(2):
        task = service.next_task(db, ann, project)
        assert task.item.kind == "screening"
        for pos, ratings in enumerate(([1], [1, -1, 0], [1])):
            service.submit_step(db, ann, task.id, pos, ratings, [False] * len(ratings), _sid())
        service.finish_task(db, ann, task.id, "solution")
        _label_all(db, bob, service.next_task(db, bob, project), rating=-1, finish="found_error")
    assert service.screening_status(db, ann, project)["passed"]
    assert service.next_task(db, ann, project).item.kind == "task"
    status = service.screening_status(db, bob, project)
    assert status["failed"] and status["agreement"] == pytest.approx(0.2)
    assert service.next_task(db, bob, project) is None
    db.close()


def test_kappas_give_the_textbook_values():
    # Cohen: 50 items, yes/yes 20, yes/no 5, no/yes 10, no/no 15 -> 0.4.
    a = [1] * 25 + [-1] * 25
    b = [1] * 20 + [-1] * 5 + [1] * 10 + [-1] * 15
    assert qc.cohen_kappa(a, b) == pytest.approx(0.4)
    # Fleiss (1971) as on Wikipedia: 10 subjects, 14 raters, 5 categories -> 0.210.
    table = [[0, 0, 0, 0, 14], [0, 2, 6, 4, 2], [0, 0, 3, 5, 6], [0, 3, 9, 2, 0], [2, 2, 8, 1, 1],
             [7, 7, 0, 0, 0], [3, 2, 6, 3, 0], [2, 5, 3, 2, 2], [6, 5, 2, 1, 0], [0, 2, 2, 3, 7]]
    units = [[c for c, n in enumerate(row) for _ in range(n)] for row in table]
    assert qc.fleiss_kappa(units) == pytest.approx(0.2099, abs=1e-4)
    assert qc.fleiss_kappa([[1, 1, 1], [0, 0, 0], [-1, -1, -1]]) == 1.0
    assert qc.cohen_kappa([], []) is None


def test_pairwise_kappa_on_the_dashboard_for_two_labellers_on_the_same_solutions(setup):
    db, project, ann, bob, _ = setup
    service.configure_project(db, "p1", overlap=2)
    db.commit()
    for user, ratings in ((ann, ([1], [1, -1, 0], [1])), (bob, ([1], [1, -1, -1], [0]))):
        for _ in range(2):
            task = service.next_task(db, user, project)
            for pos, r in enumerate(ratings):
                service.submit_step(db, user, task.id, pos, list(r), [False] * len(r), _sid())
            service.finish_task(db, user, task.id, "found_error")
    stats = qc.project_stats(db, project)
    a = [1, 1, -1, 0, 1] * 2
    b = [1, 1, -1, -1, 0] * 2
    assert stats["pairs"] == [{"a": "ann", "b": "bob", "kappa": pytest.approx(qc.cohen_kappa(a, b)),
                               "units": 10}]
    assert stats["fleiss_kappa"] == pytest.approx(qc.fleiss_kappa([list(x) for x in zip(a, b)]))


def test_real_phase1_test_example_labelled_and_read_back(sessions, shared_data, tmp_path):
    db = sessions()
    ann = service.create_user(db, "ann", "password-a")
    project = service.configure_project(db, "real", phase=1)
    db.commit()
    service.set_members(db, project, ["ann"])
    src = shared_data / "prm800k" / "raw-examples" / "phase1_test.concatenated.json"
    assert service.import_queue(db, project, src) == 1
    (original,) = read_records(src)
    task = service.next_task(db, ann, project)
    # Rate as the original labeller did; where they wrote their own step, the queue's
    # human step is the continuation.
    for pos, step in enumerate(original.steps):
        ratings = [c.rating if c.rating is not None else 0 for c in step.completions]
        service.submit_step(db, ann, task.id, pos, ratings, [False] * len(ratings), _sid())
    service.finish_task(db, ann, task.id, "solution")
    out = tmp_path / "export.jsonl"
    service.export_project(db, project, out)
    (sol,) = read_records(out)
    assert sol.problem == original.problem
    assert [[c.text for c in s.completions] for s in sol.steps] == \
        [[c.text for c in s.completions] for s in original.steps]
    assert [s.chosen for s in sol.steps] == [s.chosen for s in original.steps]
    assert [s.human_completion for s in sol.steps] == [s.human_completion for s in original.steps]
    assert [s.text for s in sol.trajectory()] == [s.text for s in original.trajectory()]
    db.close()


# --- releasing idle tasks -----------------------------------------------------------------


def _idle_since(db, task, hours, labels_too=True):
    """Pretend the task was taken (and, with labels_too, rated) `hours` ago."""
    then = utcnow() - timedelta(hours=hours)
    task.started_at = then
    if labels_too:
        for label in db.scalars(select(StepLabel).where(StepLabel.task_id == task.id)):
            label.created_at = then
    db.commit()


def test_idle_task_is_released_and_its_solution_ends_with_k_labels_exported_once(setup):
    db, project, ann, bob, _ = setup
    service.configure_project(db, "p1", overlap=2)
    db.commit()
    carl = service.create_user(db, "carl", "password-c")
    dave = service.create_user(db, "dave", "password-d")
    service.add_members(db, project, ["carl", "dave"])
    abandoned = service.next_task(db, ann, project)
    service.submit_step(db, ann, abandoned.id, 0, [-1], [True], _sid())
    _idle_since(db, abandoned, 3)
    kept = service.next_task(db, bob, project)  # the same solution, taken long ago ...
    assert kept.item_id == abandoned.item_id
    _idle_since(db, kept, 3, labels_too=False)
    service.submit_step(db, bob, kept.id, 0, [1], [False], _sid())  # ... but rated just now
    assert service.next_task(db, carl, project).item_id != abandoned.item_id  # two have it

    released = service.release_stale_tasks(db, project, timedelta(hours=1))

    assert [t.id for t in released] == [abandoned.id]
    assert service.view_task(db, bob, kept.id).task.status == "open"
    assert service.next_task(db, dave, project).item_id == abandoned.item_id
    for user in (ann, bob, carl, dave, ann):
        task = service.next_task(db, user, project)
        assert task is None or task.id != abandoned.id
        if task is not None:
            assert task.item_id != abandoned.item_id or user is not ann
            _label_all(db, user, task)
    assert service.next_task(db, ann, project) is None  # never the released solution again
    records = list(service.iter_export(db, project))
    by_problem: dict[str, list[str]] = {}
    for r in records:
        by_problem.setdefault(r["question"]["problem"], []).append(r["labeler"])
    problem = abandoned.item.source["question"]["problem"]
    assert sorted(by_problem[problem]) == ["bob", "dave"]
    assert sorted(len(v) for v in by_problem.values()) == [2, 2]
    assert len({(r["labeler"], r["question"]["problem"]) for r in records}) == len(records) == 4
    # The released ratings are kept in the database, counted on the dashboard, not exported.
    assert db.query(StepLabel).filter(StepLabel.task_id == abandoned.id).count() == 1
    stats = qc.project_stats(db, project)
    assert stats["tasks"] == {"open": 0, "done": 4, "released": 1}
    assert {r["labeller"]: r["tasks_released"] for r in stats["labellers"]}["ann"] == 1


def test_released_task_refuses_ratings_and_finishing(setup):
    db, project, ann, _, _ = setup
    task = service.next_task(db, ann, project)
    service.submit_step(db, ann, task.id, 0, [1], [False], _sid())
    _idle_since(db, task, 2)
    assert len(service.release_stale_tasks(db, project, timedelta(hours=1))) == 1
    with pytest.raises(service.Conflict, match="released"):
        service.submit_step(db, ann, task.id, 1, [1, 1, 1], [False] * 3, _sid())
    with pytest.raises(service.Conflict, match="released"):
        service.finish_task(db, ann, task.id, "found_error")
    view = service.view_task(db, ann, task.id)
    assert view.task.status == "released" and view.position is None
    assert db.query(StepLabel).count() == 1
    assert list(service.iter_export(db, project)) == []
    assert service.next_task(db, ann, project).item_id != task.item_id


def test_release_keeps_fresh_tasks_other_labellers_tasks_and_gold_tasks(setup):
    db, project, ann, bob, tmp_path = setup
    service.import_queue(db, project, write_queue(tmp_path / "gold.jsonl",
                                                  [phase1_record(7, rated=True, qc=True)]))
    service.configure_project(db, "p1", gold_rate=0.5)
    db.commit()
    _label_all(db, ann, service.next_task(db, ann, project))
    gold = service.next_task(db, ann, project)
    assert gold.item.kind == "gold"
    _idle_since(db, gold, 5)
    bobs = service.next_task(db, bob, project)
    _idle_since(db, bobs, 5)
    assert service.release_stale_tasks(db, project, timedelta(hours=1), user="ann") == []
    assert service.release_stale_tasks(db, project, timedelta(hours=6)) == []
    with pytest.raises(service.NotFound, match="nobody"):
        service.release_stale_tasks(db, project, timedelta(hours=1), user="nobody")
    assert [t.id for t in service.release_stale_tasks(db, project, timedelta(hours=1))] == [bobs.id]
    assert service.view_task(db, ann, gold.id).task.status == "open"


def test_cli_release_prints_the_released_tasks_and_a_bad_project_exits_2(setup, db_url, capsys):
    db, project, ann, bob, _ = setup
    idle = service.next_task(db, ann, project)
    _idle_since(db, idle, 3)
    service.next_task(db, bob, project)
    assert main(["label", "release", "--project", "p1", "--idle-hours", "1", "--user", "bob",
                 "--db", db_url]) == 0
    assert "released 0 open tasks of project 'p1'" in capsys.readouterr().out
    assert main(["label", "release", "--project", "p1", "--idle-hours", "1.5",
                 "--db", db_url]) == 0
    out = capsys.readouterr().out
    assert "released 1 open tasks of project 'p1' idle for more than 1.5 h" in out
    assert f"task {idle.id}\tann\titem {idle.item_id}" in out
    db.expire_all()
    assert service.view_task(db, ann, idle.id).task.status == "released"
    db.rollback()  # end the read: SQLite takes the write lock at BEGIN
    assert main(["label", "release", "--project", "nope", "--idle-hours", "1",
                 "--db", db_url]) == 2
    assert "no project 'nope'" in capsys.readouterr().err
    assert main(["label", "release", "--project", "p1", "--idle-hours", "-1",
                 "--db", db_url]) == 2
    assert "idle hours must be a number >= 0" in capsys.readouterr().err


# --- undoing the last rating ------------------------------------------------------------------


def test_undone_last_rating_is_rated_again_and_exported_once_with_the_new_rating(setup):
    db, project, ann, _, _ = setup
    task = service.next_task(db, ann, project)
    service.submit_step(db, ann, task.id, 0, [1], [False], _sid())
    first = _sid()
    service.submit_step(db, ann, task.id, 1, [-1, -1, -1], [True, False, False], first, "Mine.")
    withdrawn = service.undo_step(db, ann, task.id, 1, first)
    assert withdrawn.ratings == [-1, -1, -1] and withdrawn.human_text == "Mine."
    view = service.view_task(db, ann, task.id)
    assert view.position == 1 and [lab.position for lab in view.labels] == [0]
    service.submit_step(db, ann, task.id, 1, [1, -1, 0], [False] * 3, _sid())
    service.submit_step(db, ann, task.id, 2, [1], [False], _sid())
    service.finish_task(db, ann, task.id, "solution")
    (record,) = service.iter_export(db, project)
    steps = record["label"]["steps"]
    assert [[c["rating"] for c in s["completions"]] for s in steps] == [[1], [1, -1, 0], [1]]
    assert steps[1]["human_completion"] is None and steps[1]["chosen_completion"] == 0
    assert db.query(StepLabel).count() == 3


def test_double_submitted_undo_withdraws_one_rating(setup):
    db, project, ann, _, _ = setup
    task = service.next_task(db, ann, project)
    service.submit_step(db, ann, task.id, 0, [1], [False], _sid())
    sid = _sid()
    service.submit_step(db, ann, task.id, 1, [1, 1, 1], [False] * 3, sid)
    assert service.undo_step(db, ann, task.id, 1, sid) is not None
    assert service.undo_step(db, ann, task.id, 1, sid) is None  # the same undo: no-op
    assert [lab.position for lab in service.view_task(db, ann, task.id).labels] == [0]
    # Replayed after the step was rated again, it leaves the new rating alone.
    service.submit_step(db, ann, task.id, 1, [0, 0, 0], [False] * 3, _sid())
    assert service.undo_step(db, ann, task.id, 1, sid) is None
    assert [lab.ratings for lab in service.view_task(db, ann, task.id).labels] == [[1], [0, 0, 0]]


def test_replayed_submission_of_an_undone_rating_is_refused_not_stored_again(setup):
    db, project, ann, _, _ = setup
    task = service.next_task(db, ann, project)
    sid = _sid()
    service.submit_step(db, ann, task.id, 0, [-1], [False], sid)
    service.undo_step(db, ann, task.id, 0, sid)
    with pytest.raises(service.Conflict, match="undone"):
        service.submit_step(db, ann, task.id, 0, [-1], [False], sid)
    assert db.query(StepLabel).count() == 0
    assert service.view_task(db, ann, task.id).position == 0


def test_only_the_last_rating_can_be_undone(setup):
    db, project, ann, _, _ = setup
    task = service.next_task(db, ann, project)
    with pytest.raises(service.Conflict, match="nothing to undo"):
        service.undo_step(db, ann, task.id, 0, _sid())
    earlier, last = _sid(), _sid()
    service.submit_step(db, ann, task.id, 0, [1], [False], earlier)
    service.submit_step(db, ann, task.id, 1, [1, 1, 1], [False] * 3, last)
    with pytest.raises(service.Conflict, match="only your last rating"):
        service.undo_step(db, ann, task.id, 0, earlier)
    with pytest.raises(service.Conflict, match="only your last rating"):
        service.undo_step(db, ann, task.id, 1, earlier)  # a position and an id that disagree
    assert db.query(StepLabel).count() == 2


def test_finished_released_and_other_labellers_tasks_refuse_undo(setup):
    db, project, ann, bob, _ = setup
    task = service.next_task(db, ann, project)
    sid = _sid()
    service.submit_step(db, ann, task.id, 0, [1], [False], sid)
    with pytest.raises(service.NotFound):
        service.undo_step(db, bob, task.id, 0, sid)
    service.finish_task(db, ann, task.id, "found_error")
    with pytest.raises(service.Conflict, match="finished"):
        service.undo_step(db, ann, task.id, 0, sid)
    other = service.next_task(db, ann, project)
    sid = _sid()
    service.submit_step(db, ann, other.id, 0, [1], [False], sid)
    _idle_since(db, other, 2)
    assert len(service.release_stale_tasks(db, project, timedelta(hours=1))) == 1
    with pytest.raises(service.Conflict, match="released"):
        service.undo_step(db, ann, other.id, 0, sid)
    assert db.query(StepLabel).count() == 2
    assert len(list(service.iter_export(db, project))) == 1


def test_phase2_minus_one_that_ended_the_task_cannot_be_undone(phase2):
    db, project, ann, task = phase2
    sid = _sid()
    service.submit_step(db, ann, task.id, 0, [1], [False], sid)
    service.undo_step(db, ann, task.id, 0, sid)  # open: a +1 may be undone
    wrong = _sid()
    service.submit_step(db, ann, task.id, 0, [-1], [False], wrong)
    with pytest.raises(service.Conflict, match="finished"):
        service.undo_step(db, ann, task.id, 0, wrong)
    (record,) = service.iter_export(db, project)
    assert record["label"]["finish_reason"] == "found_error"
    assert [s["completions"][0]["rating"] for s in record["label"]["steps"]] == [-1]


def test_an_undo_counts_as_activity_for_idle_release(setup):
    db, project, ann, _, _ = setup
    task = service.next_task(db, ann, project)
    sid = _sid()
    service.submit_step(db, ann, task.id, 0, [1], [False], sid)
    _idle_since(db, task, 3)
    service.undo_step(db, ann, task.id, 0, sid)
    assert service.release_stale_tasks(db, project, timedelta(hours=1)) == []


def test_sixteen_labellers_taking_tasks_at_once_never_exceed_the_overlap(sessions, tmp_path):
    """On PostgreSQL a task query could lock an item just after another labeller took it,
    counting that labeller's task in an older snapshot: a third labeller at overlap 2."""
    import threading
    from collections import Counter

    from prmkit.labeling.models import Task

    with sessions() as db:
        users = [service.create_user(db, f"u{i}", "password-x") for i in range(16)]
        projects = [service.configure_project(db, f"p{k}", overlap=2) for k in range(3)]
        db.commit()
        for project in projects:
            service.set_members(db, project, [u.username for u in users])
        for k, project in enumerate(projects):
            service.import_queue(db, project, write_queue(
                tmp_path / f"q{k}.jsonl", [phase1_record(i) for i in range(30)]))
    errors = []

    def take_all(user, project):
        try:
            with sessions() as db:
                while (task := service.next_task(db, user, project)) is not None:
                    service.finish_task(db, user, task.id, "give_up", "load")
        except BaseException as e:  # reported below
            errors.append(e)

    for project in projects:  # three rounds: the race is a matter of timing
        threads = [threading.Thread(target=take_all, args=(u, project)) for u in users]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors[0]
    with sessions() as db:
        per_item = Counter(db.scalars(select(Task.item_id)))
    assert len(per_item) == 90 and set(per_item.values()) == {2}
