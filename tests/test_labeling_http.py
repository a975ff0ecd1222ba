# ruff: noqa: F811  (pytest fixtures imported from labeling_support)
"""The web app over HTTP (httpx through Starlette's TestClient): accounts, roles, CSRF,
other labellers' tasks, double submissions, uploads; and the `prmkit label` commands."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient
from labeling_support import (
    PASSWORD,
    hidden,
    login,
    phase1_record,
    step_form,
    task_id_from,
    write_queue,
)

from prmkit.cli import main
from prmkit.data import read_records
from prmkit.labeling import create_app, service
from prmkit.labeling.models import Item, StepLabel


@pytest.fixture
def app(tmp_path):
    app = create_app(str(tmp_path / "labels.sqlite"))
    with app.state.sessionmaker() as db:
        service.create_user(db, "root", PASSWORD, "admin")
        service.create_user(db, "ann", PASSWORD)
        service.create_user(db, "bob", PASSWORD)
        project = service.configure_project(db, "p1", phase=1)
        db.commit()
        service.set_members(db, project, ["ann", "bob"])
        service.import_queue(db, project, write_queue(tmp_path / "q.jsonl",
                                                      [phase1_record(3), phase1_record(4)]))
    yield app
    app.state.engine.dispose()


def client(app) -> TestClient:
    return TestClient(app, follow_redirects=False)


def take_task(c: TestClient, csrf: str) -> int:
    return task_id_from(c.post("/projects/1/next", data={"csrf_token": csrf}))


def test_pages_and_posts_need_an_account(app):
    c = client(app)
    for path in ("/", "/tasks", "/tasks/1", "/admin", "/admin/users",
                 "/admin/projects/1/export", "/admin/projects/1/stats.json",
                 "/admin/projects/1/tasks", "/admin/tasks/1"):
        r = c.get(path)
        assert r.status_code == 303 and r.headers["location"] == "/login?next=" + path, path
    for path in ("/projects/1/next", "/tasks/1/steps/0", "/tasks/1/steps/0/undo",
                 "/tasks/1/finish", "/admin/users",
                 "/admin/projects/1/release", "/logout"):
        assert c.post(path, data={"csrf_token": "x"}).status_code == 401, path


def test_wrong_password_and_unknown_user_are_refused_alike(app):
    c = client(app)
    token = hidden(c.get("/login").text, "csrf_token")
    for name, password in (("ann", "wrong password"), ("nobody", PASSWORD)):
        r = c.post("/login", data={"username": name, "password": password, "csrf_token": token})
        assert r.status_code == 401 and "wrong user name or password" in r.text
        assert "prmkit_session" not in r.cookies


def test_login_post_without_the_login_form_token_is_refused(app):
    c = client(app)
    r = c.post("/login", data={"username": "ann", "password": PASSWORD, "csrf_token": "forged"})
    assert r.status_code == 403


def test_session_cookie_is_httponly_and_logout_ends_the_session(app):
    c = client(app)
    page = c.get("/login")
    r = c.post("/login", data={"username": "ann", "password": PASSWORD,
                               "csrf_token": hidden(page.text, "csrf_token")})
    cookie = r.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=lax" in cookie
    csrf = hidden(c.get("/tasks").text, "csrf_token")
    token = c.cookies["prmkit_session"]
    assert c.post("/logout", data={"csrf_token": csrf}).status_code == 303
    stale = client(app)
    stale.cookies.set("prmkit_session", token)
    assert stale.get("/tasks").status_code == 303  # to /login: the token is dead


def test_posts_without_the_sessions_csrf_token_are_refused(app):
    c = client(app)
    csrf = login(c, "ann")
    assert c.post("/projects/1/next").status_code == 403
    assert c.post("/projects/1/next", data={"csrf_token": "0" * 43}).status_code == 403
    other = client(app)
    bob_csrf = login(other, "bob")
    assert c.post("/projects/1/next", data={"csrf_token": bob_csrf}).status_code == 403
    assert c.post("/projects/1/next", headers={"X-CSRF-Token": csrf}).status_code == 303
    with app.state.sessionmaker() as db:
        assert db.query(StepLabel).count() == 0


def test_a_labeller_cannot_read_or_write_another_labellers_task(app):
    ann, bob = client(app), client(app)
    ann_csrf, bob_csrf = login(ann, "ann"), login(bob, "bob")
    task = take_task(ann, ann_csrf)
    page = bob.get(f"/tasks/{task}")
    assert page.status_code == 404 and "$x = 3$" not in page.text
    r = bob.post(f"/tasks/{task}/steps/0", data={"csrf_token": bob_csrf, "rating_0": "-1",
                                                 "submission_id": "x" * 32})
    assert r.status_code == 404
    r = bob.post(f"/tasks/{task}/finish", data={"csrf_token": bob_csrf, "reason": "give_up",
                                                "note": "not mine"})
    assert r.status_code == 404
    with app.state.sessionmaker() as db:
        assert db.query(StepLabel).count() == 0
        assert service.view_task(db, service.authenticate(db, "ann", PASSWORD), task).task.status == "open"


def test_a_labeller_gets_403_on_every_admin_page_and_post(app):
    c = client(app)
    csrf = login(c, "ann")
    for path in ("/admin", "/admin/users", "/admin/projects/1/export",
                 "/admin/projects/1/stats.json"):
        assert c.get(path).status_code == 403, path
    r = c.post("/admin/users", data={"csrf_token": csrf, "username": "mallory",
                                     "password": "password-m", "role": "admin"})
    assert r.status_code == 403
    r = c.post("/admin/projects/1/import", data={"csrf_token": csrf},
               files={"file": ("q.jsonl", b"{}\n")})
    assert r.status_code == 403
    r = c.post("/admin/projects", data={"csrf_token": csrf, "name": "p1", "overlap": "5"})
    assert r.status_code == 403
    own = take_task(c, csrf)
    r = c.post("/admin/projects/1/release", data={"csrf_token": csrf, "idle_hours": "0"})
    assert r.status_code == 403
    with app.state.sessionmaker() as db:
        assert service.view_task(db, service.authenticate(db, "ann", PASSWORD), own).task.status == "open"
    with app.state.sessionmaker() as db:
        assert [u.username for u in service.list_users(db)] == ["root", "ann", "bob"]
        assert service.get_project(db, "p1").overlap == 1


def test_double_submitted_step_form_stores_one_label(app):
    c = client(app)
    task = take_task(c, login(c, "ann"))
    form = step_form(c, task)
    first = c.post(form["action"], data=form["data"])
    second = c.post(form["action"], data=form["data"])
    assert first.status_code == second.status_code == 303
    with app.state.sessionmaker() as db:
        assert db.query(StepLabel).count() == 1


def test_uploaded_malformed_queue_names_file_and_line_and_imports_nothing(app, tmp_path):
    c = client(app)
    csrf = login(c, "root")
    good = (tmp_path / "q.jsonl").read_bytes().splitlines()[0]
    body = good + b"\n" + good + b"\n" + good[:-3] + b"\n"
    r = c.post("/admin/projects/1/import", data={"csrf_token": csrf, "kind": "auto"},
               files={"file": ("bad queue.jsonl", body)})
    assert r.status_code == 400
    assert "bad queue.jsonl:3" in r.text and "/tmp" not in r.text
    with app.state.sessionmaker() as db:
        assert db.query(Item).count() == 2
    r = c.post("/admin/projects/1/import", data={"csrf_token": csrf, "kind": "auto"},
               files={"file": ("good.jsonl", good + b"\n")})
    assert r.status_code == 303
    with app.state.sessionmaker() as db:
        assert db.query(Item).count() == 3


def test_admin_creates_an_account_that_then_labels_a_solution_exported_for_prmkit(app, tmp_path):
    admin = client(app)
    csrf = login(admin, "root")
    r = admin.post("/admin/users", data={"csrf_token": csrf, "username": "cleo",
                                         "password": "password-c", "role": "labeller"})
    assert r.status_code == 303
    r = admin.post("/admin/projects/1/members", data={"csrf_token": csrf,
                                                      "member": ["ann", "bob", "cleo"]})
    assert r.status_code == 303
    c = client(app)
    task = take_task(c, login(c, "cleo", "password-c"))
    for _ in range(3):
        form = step_form(c, task)
        assert c.post(form["action"], data=form["data"]).status_code == 303
    page = c.get(f"/tasks/{task}").text
    r = c.post(f"/tasks/{task}/finish", data={"csrf_token": hidden(page, "csrf_token"),
                                              "reason": "solution"})
    assert r.status_code == 303
    assert "Finished: solution" in c.get(f"/tasks/{task}").text
    dashboard = admin.get("/admin").text
    assert "cleo" in dashboard and "Fleiss" in dashboard
    export = admin.get("/admin/projects/1/export")
    assert export.status_code == 200
    out = tmp_path / "export.jsonl"
    out.write_bytes(export.content)
    (sol,) = read_records(out)
    assert sol.provenance.labeler == "cleo" and sol.finish_reason == "solution"
    assert [[c.rating for c in s.completions] for s in sol.steps] == [[1], [1, 1, 1], [1]]


def test_pages_forbid_framing_and_foreign_scripts(app):
    r = client(app).get("/login")
    assert "frame-ancestors 'none'" in r.headers["content-security-policy"]
    assert "script-src" not in r.headers["content-security-policy"]  # default-src 'self' only
    assert "cdn" not in r.text.lower()


def test_cli_users_import_export_and_malformed_queue(tmp_path, monkeypatch, capsys):
    db = str(tmp_path / "cli.sqlite")
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO("password-z\n"))
    assert main(["label", "users", "add", "zoe", "--role", "admin", "--password-stdin",
                 "--db", db]) == 0
    queue = write_queue(tmp_path / "q.jsonl", [phase1_record(1), phase1_record(2)])
    assert main(["label", "import", str(queue), "--project", "x", "--overlap", "2",
                 "--db", db]) == 0
    bad = tmp_path / "bad.jsonl"
    bad.write_text(queue.read_text().splitlines()[0] + "\n{\"labeler\": \n")
    assert main(["label", "import", str(bad), "--project", "x", "--db", db]) == 2
    assert "bad.jsonl:2" in capsys.readouterr().err
    assert main(["label", "export", "--project", "x", "-o", str(tmp_path / "o.jsonl"),
                 "--db", db]) == 0
    assert (tmp_path / "o.jsonl").read_text() == ""
    assert main(["label", "users", "list", "--db", db]) == 0
    assert "zoe\tadmin" in capsys.readouterr().out
    assert main(["label", "users", "add", "--db", db]) == 2


def test_a_labeller_cannot_open_the_admin_view_of_any_task(app):
    ann, bob = client(app), client(app)
    ann_csrf, bob_csrf = login(ann, "ann"), login(bob, "bob")
    own, others = take_task(ann, ann_csrf), take_task(bob, bob_csrf)
    for task in (own, others, 999):
        r = ann.get(f"/admin/tasks/{task}")
        assert r.status_code == 403 and "$x = " not in r.text, task
    for path in ("/admin/projects/1/tasks", "/admin/projects/1/tasks?user=bob"):
        r = ann.get(path)
        assert r.status_code == 403 and f"/admin/tasks/{others}" not in r.text, path


def test_admin_reads_a_labellers_task_with_ratings_flags_own_step_and_finish(app):
    ann = client(app)
    task = take_task(ann, login(ann, "ann"))
    form = step_form(ann, task)
    assert ann.post(form["action"], data=form["data"]).status_code == 303
    form = step_form(ann, task)
    form["data"].update({"rating_0": "-1", "rating_1": "-1", "rating_2": "-1", "flag_1": "1",
                         "human_text": "Then $2x = 6$, by hand."})
    assert ann.post(form["action"], data=form["data"]).status_code == 303
    admin = client(app)
    login(admin, "root")
    page = admin.get(f"/admin/tasks/{task}")
    assert page.status_code == 200
    assert "Not finished yet" in page.text and ">open<" in page.text
    r = ann.post(f"/tasks/{task}/finish", data={"csrf_token": form["data"]["csrf_token"],
                                                "reason": "give_up", "note": "too tired"})
    assert r.status_code == 303
    # The dashboard links each labeller's tasks, which link the read-only page.
    assert "/admin/projects/1/tasks?user=ann" in admin.get("/admin").text
    listing = admin.get("/admin/projects/1/tasks?user=ann")
    assert listing.status_code == 200 and f'href="/admin/tasks/{task}"' in listing.text
    assert "/admin/tasks/" not in admin.get("/admin/projects/1/tasks?user=bob").text
    page = admin.get(f"/admin/tasks/{task}").text
    assert "If $x = 3$, what is $2x$?" in page and "<strong>ann</strong>" in page
    step2 = page.split('id="position-1"')[1].split("</li>")[0]
    assert step2.count("−1") == 3 and step2.count("flagged") == 1
    assert "Then $2x = 6$, by hand." in step2
    assert "not rated" in page.split('id="position-2"')[1]
    assert 'id="finish-reason">give_up<' in page and "(too tired)" in page
    assert re.search(r"after \d+(\.\d)? s\.", page)
    assert "<form" not in page.split("<main>")[1]  # read only: nothing to post
    assert admin.get("/admin/tasks/999").status_code == 404


def test_admin_release_button_frees_idle_tasks_and_the_labellers_page_refuses_writes(app):
    ann = client(app)
    ann_csrf = login(ann, "ann")
    task = take_task(ann, ann_csrf)
    form = step_form(ann, task)
    admin = client(app)
    admin_csrf = login(admin, "root")
    assert admin.post("/admin/projects/1/release", data={"idle_hours": "0"}).status_code == 403
    r = admin.post("/admin/projects/1/release", data={"csrf_token": admin_csrf,
                                                      "idle_hours": "nan"})
    assert r.status_code == 400 and "idle hours" in r.text
    r = admin.post("/admin/projects/1/release", data={"csrf_token": admin_csrf,
                                                      "idle_hours": "0"})
    assert r.status_code == 303
    dashboard = admin.get(r.headers["location"]).text
    assert f"released 1 open tasks of p1 idle for more than 0 h: #{task} (ann)" in dashboard
    assert 'id="released-1">1<' in dashboard
    r = ann.post(form["action"], data=form["data"])
    assert r.status_code == 409 and "released" in r.text
    r = ann.post(f"/tasks/{task}/finish", data={"csrf_token": ann_csrf, "reason": "give_up",
                                                "note": "back"})
    assert r.status_code == 409
    page = ann.get(f"/tasks/{task}").text
    assert 'id="released"' in page and 'id="step-form"' not in page
    assert f'<a href="/tasks/{task}">#{task}</a></td><td>p1</td>\n<td>released</td>' in \
        ann.get("/tasks").text
    assert take_task(ann, ann_csrf) != task
    with app.state.sessionmaker() as db:
        assert db.query(StepLabel).count() == 0


def undo_form(c: TestClient, task_id: int) -> dict:
    page = c.get(f"/tasks/{task_id}").text
    action = re.search(r'action="(/tasks/\d+/steps/\d+/undo)"', page).group(1)
    return {"action": action, "data": {"csrf_token": hidden(page, "csrf_token"),
                                       "undo_submission_id": hidden(page, "undo_submission_id")}}


def test_undo_form_posted_twice_withdraws_one_rating_and_the_step_is_rated_again(app):
    c = client(app)
    task = take_task(c, login(c, "ann"))
    first = step_form(c, task)
    assert c.post(first["action"], data=first["data"]).status_code == 303
    second = step_form(c, task)
    assert c.post(second["action"], data=second["data"]).status_code == 303
    undo = undo_form(c, task)
    assert undo["action"] == f"/tasks/{task}/steps/1/undo"
    r1, r2 = c.post(undo["action"], data=undo["data"]), c.post(undo["action"], data=undo["data"])
    assert r1.status_code == r2.status_code == 303
    assert "undo=already" in r2.headers["location"]
    page = c.get(r1.headers["location"]).text
    assert "Your rating of step 2 is undone" in page
    assert f'action="/tasks/{task}/steps/1"' in page  # step 2 to rate again
    assert f'action="/tasks/{task}/steps/0/undo"' in page  # step 1 is now the last rating
    r = c.post(second["action"], data=second["data"])  # the withdrawn form, replayed
    assert r.status_code == 409 and "undone" in r.text
    again = step_form(c, task)
    again["data"].update({"rating_0": "0", "rating_1": "-1", "rating_2": "0"})
    assert c.post(again["action"], data=again["data"]).status_code == 303
    assert c.post(undo["action"], data=undo["data"]).status_code == 303  # stale undo: no-op
    with app.state.sessionmaker() as db:
        assert [lab.ratings for lab in db.query(StepLabel).order_by(StepLabel.position)] == \
            [[1], [0, -1, 0]]
    admin = client(app)
    login(admin, "root")
    step2 = admin.get(f"/admin/tasks/{task}").text.split('id="position-1"')[1].split("</li>")[0]
    undone = re.findall(r'<p class="meta withdrawn">Undone by ann at [^:]+:\d\d:\d\d UTC: ([^(]+)', step2)
    assert undone == ["+1, +1, +1 "]  # the withdrawn rating, for audit, beside the new one


def test_a_labeller_cannot_undo_another_labellers_rating_nor_without_the_csrf_token(app):
    ann, bob = client(app), client(app)
    ann_csrf, bob_csrf = login(ann, "ann"), login(bob, "bob")
    task = take_task(ann, ann_csrf)
    form = step_form(ann, task)
    assert ann.post(form["action"], data=form["data"]).status_code == 303
    undo = undo_form(ann, task)
    r = bob.post(undo["action"], data={**undo["data"], "csrf_token": bob_csrf})
    assert r.status_code == 404
    assert ann.post(undo["action"], data={"undo_submission_id": form["data"]["submission_id"]}
                    ).status_code == 403
    assert ann.post(undo["action"], data={**undo["data"], "csrf_token": bob_csrf}).status_code == 403
    r = ann.post(undo["action"], data={**undo["data"], "undo_submission_id": "forged"})
    assert r.status_code == 409 and "only your last rating" in r.text
    with app.state.sessionmaker() as db:
        assert db.query(StepLabel).count() == 1
    assert ann.post(f"/tasks/{task}/finish", data={"csrf_token": ann_csrf, "reason": "give_up",
                                                   "note": "enough"}).status_code == 303
    assert 'id="undo-form"' not in ann.get(f"/tasks/{task}").text
    r = ann.post(undo["action"], data=undo["data"])
    assert r.status_code == 409 and "finished" in r.text
