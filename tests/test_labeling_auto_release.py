"""`prmkit label serve --release-idle-hours`: the app releases idle tasks by itself while it
runs (a background task in the app's lifespan, driven here through Starlette's TestClient)."""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from labeling_support import PASSWORD, login, phase1_record, step_form, task_id_from, write_queue

from prmkit.cli import main
from prmkit.labeling import create_app, service
from prmkit.labeling.models import Task, utcnow

DEADLINE_S = 10.0


def labelling_app(tmp_path, items: int, **release):
    """Users ann and bob, project p1 (phase 1, overlap 1) with `items` solutions."""
    app = create_app(str(tmp_path / "labels.sqlite"), **release)
    with app.state.sessionmaker() as db:
        service.create_user(db, "ann", PASSWORD)
        service.create_user(db, "bob", PASSWORD)
        project = service.configure_project(db, "p1", phase=1, overlap=1)
        db.commit()
        service.set_members(db, project, ["ann", "bob"])
        service.import_queue(db, project, write_queue(
            tmp_path / "q.jsonl", [phase1_record(i) for i in range(items)]))
    return app


def take(c: TestClient, csrf: str):
    return c.post("/projects/1/next", data={"csrf_token": csrf})


def task_status(app, task_id: int) -> str:
    with app.state.sessionmaker() as db:
        return db.get(Task, task_id).status


def wait_until_released(app, task_id: int) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while task_status(app, task_id) != "released":
        assert time.monotonic() < deadline, f"task {task_id} still open after {DEADLINE_S} s"
        time.sleep(0.02)


def backdate(app, task_id: int, hours: float) -> None:
    with app.state.sessionmaker() as db:
        db.get(Task, task_id).started_at = utcnow() - timedelta(hours=hours)
        db.commit()


def test_a_task_left_alone_is_released_by_the_server_and_its_solution_goes_to_another_labeller(
        tmp_path):
    app = labelling_app(tmp_path, 1, release_idle=timedelta(seconds=0.3), release_every=0.05)
    bob = TestClient(app, follow_redirects=False)  # one client runs the lifespan
    with TestClient(app, follow_redirects=False) as ann:
        ann_task = task_id_from(take(ann, login(ann, "ann")))
        bob_csrf = login(bob, "bob")
        assert take(bob, bob_csrf).headers["location"] == "/tasks?note=none-left"
        wait_until_released(app, ann_task)
        bob_task = task_id_from(take(bob, bob_csrf))
    app.state.engine.dispose()
    with app.state.sessionmaker() as db:
        assert db.get(Task, bob_task).item_id == db.get(Task, ann_task).item_id


def test_a_task_being_rated_is_kept_while_an_idle_one_is_released(tmp_path):
    # Both tasks were taken two hours ago; ann has just rated a step, bob never did.
    app = labelling_app(tmp_path, 2, release_idle=timedelta(hours=1), release_every=0.05)
    bob = TestClient(app, follow_redirects=False)  # one client runs the lifespan
    with TestClient(app, follow_redirects=False) as ann:
        ann_task = task_id_from(take(ann, login(ann, "ann")))
        bob_task = task_id_from(take(bob, login(bob, "bob")))
        form = step_form(ann, ann_task)
        assert ann.post(form["action"], data=form["data"]).status_code == 303
        backdate(app, ann_task, 2)
        backdate(app, bob_task, 2)
        wait_until_released(app, bob_task)
        assert task_status(app, ann_task) == "open"
        form = step_form(ann, ann_task)
        assert ann.post(form["action"], data=form["data"]).status_code == 303
    app.state.engine.dispose()


def test_a_release_round_that_raises_does_not_stop_later_rounds(tmp_path, monkeypatch, caplog):
    real = service.release_stale_tasks
    calls = []

    def fails_once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("database went away")
        return real(*args, **kwargs)

    monkeypatch.setattr(service, "release_stale_tasks", fails_once)
    app = labelling_app(tmp_path, 1, release_idle=timedelta(seconds=0.3), release_every=0.05)
    caplog.set_level(logging.INFO, logger="prmkit.labeling")
    with TestClient(app, follow_redirects=False) as ann:
        task = task_id_from(take(ann, login(ann, "ann")))
        wait_until_released(app, task)
    app.state.engine.dispose()
    failed = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(failed) == 1 and "database went away" in str(failed[0].exc_info[1])
    assert any("released 1 open tasks of project 'p1'" in r.getMessage()
               for r in caplog.records)


def test_shutdown_cancels_the_release_task_and_leaves_nothing_pending(tmp_path, caplog):
    app = labelling_app(tmp_path, 1, release_idle=timedelta(seconds=0.3), release_every=0.05)
    caplog.set_level(logging.DEBUG, logger="prmkit.labeling")

    async def serve_one_round():
        async with app.router.lifespan_context(app):
            task = app.state.release_task
            deadline = time.monotonic() + DEADLINE_S
            while not any("released 0 open tasks" in r.getMessage() for r in caplog.records):
                assert time.monotonic() < deadline, "no release round ran"
                await asyncio.sleep(0.02)
            assert not task.done()
        return task, task.done()  # before the event loop's own clean-up

    task, done_at_shutdown = asyncio.run(serve_one_round())
    assert done_at_shutdown and task.cancelled()
    app.state.engine.dispose()
    gc.collect()
    assert not [r for r in caplog.records
                if r.name == "asyncio" and r.levelno >= logging.WARNING], caplog.text


def test_shutdown_during_a_release_round_lets_the_round_finish(tmp_path, monkeypatch):
    real = service.release_stale_tasks
    events = []

    def slow(*args, **kwargs):
        events.append("started")
        time.sleep(0.2)
        result = real(*args, **kwargs)
        events.append("finished")
        return result

    monkeypatch.setattr(service, "release_stale_tasks", slow)
    app = labelling_app(tmp_path, 1, release_idle=timedelta(seconds=0.3), release_every=0.05)

    async def stop_mid_round():
        async with app.router.lifespan_context(app):
            deadline = time.monotonic() + DEADLINE_S
            while "started" not in events:
                assert time.monotonic() < deadline, "no release round started"
                await asyncio.sleep(0.01)
        return list(events)

    assert asyncio.run(stop_mid_round()) == ["started", "finished"]
    app.state.engine.dispose()


def test_app_without_release_idle_runs_no_release_task(tmp_path):
    app = labelling_app(tmp_path, 1)
    with TestClient(app, follow_redirects=False) as c:
        assert c.get("/login").status_code == 200
        assert app.state.release_task is None
    app.state.engine.dispose()


@pytest.mark.parametrize("hours", ["-1", "nan", "inf", "0"])
def test_serve_refuses_a_bad_release_idle_hours_before_starting(hours, tmp_path, monkeypatch,
                                                                 capsys):
    import uvicorn

    def never(*args, **kwargs):
        raise AssertionError("the server started")

    monkeypatch.setattr(uvicorn, "run", never)
    db = tmp_path / "labels.sqlite"
    assert main(["label", "serve", "--db", str(db), "--release-idle-hours", hours]) == 2
    assert "--release-idle-hours" in capsys.readouterr().err
    assert not db.exists()


def test_serve_release_idle_hours_reaches_the_app_with_a_round_every_ten_minutes(tmp_path,
                                                                                  monkeypatch):
    import uvicorn

    served = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: served.append(app))
    assert main(["label", "serve", "--db", str(tmp_path / "l.sqlite"),
                 "--release-idle-hours", "48"]) == 0
    assert served[0].state.release_idle == timedelta(hours=48)
    assert served[0].state.release_every == 600.0
    served[0].state.engine.dispose()


def test_release_rounds_default_to_a_quarter_of_the_idle_time_within_1_s_to_10_min(tmp_path):
    every = [create_app(str(tmp_path / "l.sqlite"), release_idle=idle).state.release_every
             for idle in (timedelta(seconds=2), timedelta(minutes=8), timedelta(hours=5))]
    assert every == [1.0, 120.0, 600.0]
