# ruff: noqa: F811  (pytest fixtures imported from labeling_support)
"""Odd input to the labelling app, as crafted requests against it on 127.0.0.1 and through
`prmkit`: project create and edit, names and numbers out of range, non-UTF-8 queues,
ended sessions and stale forms, text in the address, idle and disabled accounts."""

from __future__ import annotations

import html
import re
from datetime import timedelta
from urllib.parse import unquote

import httpx
import pytest
from labeling_support import (  # noqa: F401
    PASSWORD,
    ThreadServer,
    db_url,
    hidden,
    login,
    phase1_record,
    postgres_cluster,
    sessions,
    step_form,
    task_id_from,
    write_queue,
)
from sqlalchemy import select, update

from prmkit.cli import main
from prmkit.labeling import create_app, service
from prmkit.labeling.models import LoginSession, Project, StepLabel, utcnow


@pytest.fixture
def app(tmp_path):
    app = create_app(str(tmp_path / "labels.sqlite"))
    with app.state.sessionmaker() as s:
        service.create_user(s, "root", PASSWORD, "admin")
        service.create_user(s, "ann", PASSWORD)
        p = service.create_project(s, "p1", phase=2, overlap=2)
        s.commit()
        service.set_members(s, p, ["ann"])
        service.import_queue(s, p, write_queue(tmp_path / "q.jsonl",
                                               [phase1_record(3), phase1_record(4)]))
    yield app
    app.state.engine.dispose()


@pytest.fixture
def server(app):
    with ThreadServer(app) as s:
        yield s


def _client(server) -> httpx.Client:
    return httpx.Client(base_url=server.url, timeout=30, follow_redirects=False)


def _project(app, name="p1") -> Project:
    with app.state.sessionmaker() as s:
        return service.get_project(s, name)


# --- 12: create and edit ----------------------------------------------------------------------


def test_new_project_form_with_an_existing_name_is_refused_and_the_project_kept(app, server):
    """The dashboard's one form overwrote p1 (phase 2 -> 1, overlap 2 -> 1) with open tasks."""
    with _client(server) as ann, _client(server) as admin:
        ann_csrf = login(ann, "ann")
        task_id_from(ann.post("/projects/1/next", data={"csrf_token": ann_csrf}))
        csrf = login(admin, "root")
        r = admin.post("/admin/projects", data={"csrf_token": csrf, "name": " p1 ",
                                                "phase": "1", "overlap": "1"})
        assert r.status_code == 409 and "already exists" in r.text
        p = _project(app)
        assert (p.phase, p.overlap) == (2, 2)
        r = admin.post("/admin/projects/1/settings", data={"csrf_token": csrf, "phase": "1"})
        assert r.status_code == 409 and "phase cannot change" in r.text
        r = admin.post("/admin/projects/1/settings", data={"csrf_token": csrf, "overlap": "3",
                                                           "gold_rate": "0.1"})
        assert r.status_code == 303
        p = _project(app)
        assert (p.phase, p.overlap, p.gold_rate) == (2, 3, 0.1)
        r = admin.post("/admin/projects", data={"csrf_token": csrf, "name": "p2", "phase": "2"})
        assert r.status_code == 303
        dashboard = admin.get(r.headers["location"]).text
        assert "Created project p2" in dashboard and 'id="settings-2"' in dashboard
        r = admin.post("/admin/projects/2/settings", data={"csrf_token": csrf, "phase": "1"})
        assert r.status_code == 303 and _project(app, "p2").phase == 1  # no tasks yet


def test_phase_is_fixed_once_the_project_has_tasks(sessions, tmp_path):
    with sessions() as db:
        ann = service.create_user(db, "ann", "password-a")
        p = service.create_project(db, "p", phase=1)
        db.commit()
        service.set_members(db, p, ["ann"])
        service.import_queue(db, p, write_queue(tmp_path / "q.jsonl", [phase1_record(1)]))
        with pytest.raises(service.Conflict):
            service.create_project(db, "p", phase=2)
        service.update_project(db, p, phase=2)
        service.update_project(db, p, phase=1)
        db.commit()
        service.next_task(db, ann, p)
        with pytest.raises(service.Conflict, match="phase cannot change"):
            service.update_project(db, p, phase=2)
        with pytest.raises(service.LabelingError, match="overlap"):
            service.update_project(db, p, overlap=10**30)
        db.rollback()
        assert (service.get_project(db, "p").phase, service.get_project(db, "p").overlap) == (1, 1)


# --- 14: names, numbers and ids -----------------------------------------------------------


def test_export_of_a_project_with_a_greek_name_and_a_quote_has_a_valid_content_disposition(
        app, server):
    with app.state.sessionmaker() as s:
        s.get(Project, 1).name = 'λόγος "β"; x=1'
        s.commit()
    with _client(server) as admin:
        login(admin, "root")
        r = admin.get("/admin/projects/1/export")
        assert r.status_code == 200
        header = r.headers["content-disposition"]
        header.encode("ascii")  # an HTTP header is ASCII
        fallback = re.match(r'attachment; filename="([A-Za-z0-9._-]+)"; filename\*=', header)
        assert fallback and fallback.group(1).endswith(".prm800k.jsonl"), header
        star = re.search(r"filename\*=UTF-8''(\S+)$", header).group(1)
        assert unquote(star) == 'λόγος "β"; x=1.prm800k.jsonl'


@pytest.mark.parametrize("name, message", [("   ", "needs a name"),
                                           ("x" * 5000, "at most 128"),
                                           ("tab\there", "control characters")])
def test_blank_control_and_5000_character_project_names_are_refused(server, name, message):
    with _client(server) as admin:
        csrf = login(admin, "root")
        r = admin.post("/admin/projects", data={"csrf_token": csrf, "name": name})
        assert r.status_code == 400 and message in r.text
        assert "Projects" not in r.text or name not in r.text


def test_out_of_range_ids_and_numbers_answer_404_or_400_not_500(db_url, tmp_path):
    """/tasks/9223372036854775808, idle_hours=1e308 and overlap=10**30 gave 500
    OverflowError (on PostgreSQL, a 32-bit column's range error)."""
    app = create_app(db_url)
    with app.state.sessionmaker() as s:
        service.create_user(s, "root", PASSWORD, "admin")
        service.create_project(s, "p1")
        s.commit()
    with ThreadServer(app) as server, _client(server) as admin:
        csrf = login(admin, "root")
        for path in ("/tasks/9223372036854775808", "/tasks/2147483648", "/tasks/-1",
                     "/admin/tasks/99999999999999999999", "/admin/projects/2147483648/tasks",
                     "/tasks/1?step=99999999999999999999"):
            r = admin.get(path)
            assert r.status_code in (400, 404) and "<html" in r.text, (path, r.status_code)
        for path, data in (("/admin/projects/1/release", {"idle_hours": "1e308"}),
                           ("/admin/projects/1/release", {"idle_hours": "inf"}),
                           ("/admin/projects/1/settings", {"overlap": str(10**30)}),
                           ("/admin/projects/1/settings", {"screening_size": str(2**40)}),
                           ("/admin/projects/1/settings", {"gold_rate": "1e308"}),
                           ("/admin/projects", {"name": "p9", "overlap": str(10**30)}),
                           ("/tasks/9223372036854775808/finish", {"reason": "give_up"}),
                           ("/projects/9223372036854775808/next", {})):
            r = admin.post(path, data={"csrf_token": csrf, **data})
            assert r.status_code in (400, 404), (path, data, r.status_code)
    with app.state.sessionmaker() as s:
        assert [p.name for p in service.list_projects(s)] == ["p1"]
        assert service.get_project(s, "p1").overlap == 1
    app.state.engine.dispose()


# --- 14: non-UTF-8 queues -----------------------------------------------------------------------


def _not_utf8(tmp_path):
    good = write_queue(tmp_path / "good.jsonl", [phase1_record(1), phase1_record(2)])
    lines = good.read_bytes().splitlines()
    bad = tmp_path / "latin1.jsonl"
    bad.write_bytes(lines[0] + b"\n" + lines[1].replace(b"Then", b"Th\xe9n", 1) + b"\n")
    return bad


def test_non_utf8_queue_names_file_and_line_in_label_import_data_stats_and_upload(
        app, server, tmp_path, capsys):
    bad = _not_utf8(tmp_path)
    concatenated = tmp_path / "latin1.json"
    concatenated.write_bytes(b"[\n" + bad.read_bytes().replace(b"}\n{", b"},\n{") + b"]\n")
    db = str(tmp_path / "cli.sqlite")
    for argv in (["label", "import", str(bad), "--project", "q", "--db", db],
                 ["data", "stats", str(bad)], ["data", "stats", str(concatenated)]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert re.search(r"latin1\.jsonl?:\d: not UTF-8 text: byte 0xe9 at column \d+", err), err
        assert "Traceback" not in err
    with _client(server) as admin:
        csrf = login(admin, "root")
        r = admin.post("/admin/projects/1/import", data={"csrf_token": csrf},
                       files={"file": ("latin1.jsonl", bad.read_bytes())})
        assert r.status_code == 400 and "latin1.jsonl:2: not UTF-8 text" in r.text


def test_failed_cli_import_leaves_no_new_project(tmp_path, capsys):
    """Into an existing database a failed import adds no project; into a new one it leaves
    no database file behind."""
    db = str(tmp_path / "cli.sqlite")
    good = write_queue(tmp_path / "q.jsonl", [phase1_record(1)])
    assert main(["label", "import", str(good), "--project", "old", "--db", db]) == 0
    assert main(["label", "import", str(_not_utf8(tmp_path)), "--project", "fresh",
                 "--phase", "2", "--db", db]) == 2
    assert main(["label", "stats", "--project", "fresh", "--db", db]) == 2
    assert "no project 'fresh'" in capsys.readouterr().err
    new = tmp_path / "new.sqlite"
    assert main(["label", "import", str(_not_utf8(tmp_path)), "--project", "fresh",
                 "--db", str(new)]) == 2
    assert "not UTF-8" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir() if "new" in p.name) == []


@pytest.mark.parametrize("argv", [["stats", "--project", "p"],
                                  ["export", "--project", "p", "-o", "out.jsonl"],
                                  ["members", "list", "--project", "p"],
                                  ["release", "--project", "p", "--idle-hours", "1"],
                                  ["users", "list"]])
def test_label_command_on_a_missing_database_creates_no_file(tmp_path, capsys, argv):
    """A mistyped --db made an empty database (and for export an empty output) there."""
    db = tmp_path / "typo.sqlite"
    argv = [a.replace("out.jsonl", str(tmp_path / "out.jsonl")) for a in argv]
    assert main(["label", *argv, "--db", str(db)]) == 2
    assert f"{db}: no such labelling database" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


# --- 14: ended sessions, stale forms, text in the address -------------------------------------


def _end_sessions(app) -> None:
    with app.state.sessionmaker() as s:
        s.execute(update(LoginSession).values(last_seen_at=utcnow() - timedelta(days=2)))
        s.commit()


def test_expired_session_keeps_the_labellers_ratings_and_sends_them_after_sign_in(app, server):
    """An ended session answered a rating with raw JSON, and the ratings were lost."""
    with _client(server) as ann:
        csrf = login(ann, "ann")
        task = task_id_from(ann.post("/projects/1/next", data={"csrf_token": csrf}))
        form = step_form(ann, task)
        form["data"]["rating_0"] = "-1"
        _end_sessions(app)
        r = ann.post(form["action"], data=form["data"])
        assert r.status_code == 401 and "text/html" in r.headers["content-type"]
        assert "Your session has ended" in r.text
        assert hidden(r.text, "next") == form["action"]
        carry = html.unescape(hidden(r.text, "carry"))
        assert "rating_0" in carry and form["data"]["csrf_token"] not in carry
        r = ann.post("/login", data={"username": "ann", "password": PASSWORD,
                                     "csrf_token": hidden(r.text, "csrf_token"),
                                     "next": hidden(r.text, "next"), "carry": carry})
        assert r.status_code == 200 and 'id="resubmit-form"' in r.text
        assert f'action="{form["action"]}"' in r.text
        again = {name: html.unescape(value) for name, value in re.findall(
            r'<input type="hidden" name="([^"]+)" value="([^"]*)"', r.text)}
        assert again["rating_0"] == "-1" and again["csrf_token"] != form["data"]["csrf_token"]
        assert ann.post(form["action"], data=again).status_code == 303
        assert ann.get("/tasks").status_code == 200
    with app.state.sessionmaker() as s:
        assert [lab.ratings for lab in s.scalars(select(StepLabel))] == [[-1]]


def test_stale_csrf_token_and_ended_session_show_pages_not_json(app, server):
    with _client(server) as ann:
        login(ann, "ann")
        r = ann.post("/projects/1/next", data={"csrf_token": "stale"})
        assert r.status_code == 403 and "older session" in r.text and "{" not in r.text[:5]
        _end_sessions(app)
        r = ann.get("/tasks/1?undo=done")
        assert r.status_code == 303 and r.headers["location"] == "/login?next=/tasks/1%3Fundo%3Ddone"
        page = ann.get(r.headers["location"]).text
        assert hidden(page, "next") == "/tasks/1?undo=done"
        r = ann.post("/login", data={"username": "ann", "password": PASSWORD,
                                     "csrf_token": hidden(page, "csrf_token"),
                                     "next": "/tasks/1?undo=done"})
        assert r.status_code == 303 and r.headers["location"] == "/tasks/1?undo=done"
        assert 'name="next"' not in ann.get("/login?next=//evil.example/x").text
        assert 'name="next"' not in ann.get("/login?next=https://evil.example/").text


def test_login_error_and_admin_note_in_the_address_show_no_foreign_text(app, server):
    """`/login?error=` and `/admin?note=` showed any text as the app's own message."""
    lure = "Your account is locked, call +1 555 0100"
    with _client(server) as admin:
        assert lure not in admin.get("/login", params={"error": lure}).text
        assert "session has ended" in admin.get("/login?error=signed-out").text
        login(admin, "root")
        for params in ({"note": lure}, {"note": "imported", "project": "1", "count": lure},
                       {"note": "released", "project": "1", "tasks": lure}):
            r = admin.get("/admin", params=params)
            assert lure not in r.text, params
        r = admin.get("/admin", params={"note": "imported", "project": "1", "count": "7"})
        assert "Imported 7 solutions into p1." in r.text
        assert lure not in admin.get("/admin/users", params={"note": lure}).text


# --- 14: idle and disabled accounts -------------------------------------------------------------


def test_idle_session_ends_and_sessions_over_are_deleted_at_the_next_sign_in(app, server):
    with _client(server) as ann, _client(server) as admin:
        login(ann, "ann")
        _end_sessions(app)
        assert ann.get("/tasks").status_code == 303
        login(admin, "root")
        with app.state.sessionmaker() as s:
            assert s.query(LoginSession).count() == 1  # ann's ended session is gone


def test_a_session_seen_minutes_ago_is_kept_alive_by_a_page_and_by_a_post(app, server):
    with _client(server) as ann:
        csrf = login(ann, "ann")
        for method in ("GET", "POST"):
            with app.state.sessionmaker() as s:
                s.execute(update(LoginSession).values(
                    last_seen_at=utcnow() - timedelta(minutes=30)))
                s.commit()
            if method == "GET":
                assert ann.get("/tasks", timeout=10).status_code == 200
            else:
                r = ann.post("/projects/1/next", data={"csrf_token": csrf}, timeout=10)
                assert r.status_code == 303
            with app.state.sessionmaker() as s:
                seen = s.scalar(select(LoginSession.last_seen_at))
            assert utcnow() - seen < timedelta(minutes=1), method


def test_admin_disables_a_labeller_from_the_web_and_their_session_ends_at_once(app, server):
    with _client(server) as ann, _client(server) as admin:
        ann_csrf = login(ann, "ann")
        csrf = login(admin, "root")
        with app.state.sessionmaker() as s:
            ann_id = service.get_user(s, "ann").id
            root_id = service.get_user(s, "root").id
        assert ann.post(f"/admin/users/{ann_id}/disable",
                        data={"csrf_token": ann_csrf}).status_code == 403
        r = admin.post(f"/admin/users/{ann_id}/disable", data={"csrf_token": csrf})
        assert r.status_code == 303
        assert "Disabled ann; their sessions are ended." in admin.get(r.headers["location"]).text
        assert ann.get("/tasks").status_code == 303
        token = hidden(ann.get("/login").text, "csrf_token")
        r = ann.post("/login", data={"username": "ann", "password": PASSWORD,
                                     "csrf_token": token})
        assert r.status_code == 401
        assert admin.post(f"/admin/users/{root_id}/disable",
                          data={"csrf_token": csrf}).status_code == 409
        assert admin.post(f"/admin/users/{ann_id}/enable",
                          data={"csrf_token": csrf}).status_code == 303
        login(ann, "ann")
