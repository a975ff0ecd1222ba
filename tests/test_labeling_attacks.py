# ruff: noqa: F811  (pytest fixtures imported from labeling_support)
"""Crafted HTTP requests against the app served on 127.0.0.1 (uvicorn in a thread of the
test process): sign-in floods, oversized rating indices, uploads before the session is
checked, and labellers outside a project. SQLite and PostgreSQL where the database matters."""

from __future__ import annotations

import socket
import threading
import time
import tracemalloc

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
    step_form,
    task_id_from,
    write_queue,
)

from prmkit.labeling import create_app, security, service
from prmkit.labeling.hashqueue import RankedQueue
from prmkit.labeling.models import StepLabel
from prmkit.labeling.throttle import LoginThrottle, ThrottleLimits


def _app(db: str, tmp_path, **kwargs):
    app = create_app(db, **kwargs)
    with app.state.sessionmaker() as s:
        service.create_user(s, "root", PASSWORD, "admin")
        service.create_user(s, "ann", PASSWORD)
        service.create_user(s, "bob", PASSWORD)
        p1 = service.create_project(s, "p1", phase=1)
        scratch = service.create_project(s, "scratch", phase=1)
        s.commit()
        service.set_members(s, p1, ["ann", "bob"])
        for project in (p1, scratch):
            service.import_queue(s, project, write_queue(
                tmp_path / f"{project.name}.jsonl", [phase1_record(3), phase1_record(4)]))
    return app


def _client(server) -> httpx.Client:
    return httpx.Client(base_url=server.url, timeout=30, follow_redirects=False)


def _wrong_sign_in(c: httpx.Client, name: str) -> httpx.Response:
    token = hidden(c.get("/login").text, "csrf_token")
    return c.post("/login", data={"username": name, "password": "wrong password",
                                  "csrf_token": token})


# --- 9: sign-in floods ------------------------------------------------------------------------


def test_a_sign_in_being_hashed_holds_up_no_labellers_page_nor_rating(db_url, tmp_path,
                                                                       monkeypatch):
    """Argon2 ran inside a transaction holding SQLite's write lock: every labeller waited
    for each wrong password. Now, while a sign-in is stuck in its hash, a labeller's task
    list loads and a rating is stored."""
    app = _app(db_url, tmp_path, login_limits=ThrottleLimits(0, 0))
    hashing, release = threading.Event(), threading.Event()
    real_verify = security.verify_password

    def stuck_verify(password, password_hash):
        if password == "wrong password":
            hashing.set()
            assert release.wait(60)
        return real_verify(password, password_hash)

    with ThreadServer(app) as server, _client(server) as ann, _client(server) as attacker:
        login(ann, "ann")
        csrf = hidden(ann.get("/tasks").text, "csrf_token")
        task = task_id_from(ann.post("/projects/1/next", data={"csrf_token": csrf}))
        form = step_form(ann, task)
        monkeypatch.setattr(security, "verify_password", stuck_verify)
        flood = threading.Thread(target=lambda: _wrong_sign_in(attacker, "ann"))
        flood.start()
        try:
            assert hashing.wait(30)
            quick = httpx.Timeout(10)
            assert ann.get("/tasks", timeout=quick).status_code == 200
            assert ann.post(form["action"], data=form["data"], timeout=quick).status_code == 303
            assert not release.is_set() and flood.is_alive()  # the hash is still under way
        finally:
            release.set()
            flood.join(30)
    with app.state.sessionmaker() as s:
        assert s.query(StepLabel).count() == 1
    app.state.engine.dispose()


def test_wrong_passwords_past_the_limit_get_429_with_retry_after_before_any_hash(tmp_path,
                                                                                  monkeypatch):
    """111 wrong passwords in 20 s were all checked; now the sixth for an account from one
    client and the twenty-first from a client are refused without hashing, the right
    password from that client too (other clients: test_labeling_sign_in.py)."""
    app = _app(str(tmp_path / "labels.sqlite"), tmp_path)
    hashed = []
    real_verify = security.verify_password
    monkeypatch.setattr(security, "verify_password",
                        lambda p, h: (hashed.append(p), real_verify(p, h))[1])
    with ThreadServer(app) as server, _client(server) as c:
        codes = [_wrong_sign_in(c, "ann").status_code for _ in range(6)]
        assert codes == [401] * 5 + [429]
        token = hidden(c.get("/login").text, "csrf_token")
        r = c.post("/login", data={"username": "ann", "password": PASSWORD, "csrf_token": token})
        assert r.status_code == 429 and 0 < int(r.headers["retry-after"]) <= 300
        assert "too many failed sign-ins" in r.text and "prmkit_session" not in r.cookies
        assert len(hashed) == 5
        # other accounts from the same client: refused once the client has 20 failures
        codes = [_wrong_sign_in(c, f"user{i}").status_code for i in range(16)]
        assert codes == [401] * 15 + [429]
        assert len(hashed) == 20
        token = hidden(c.get("/login").text, "csrf_token")
        r = c.post("/login", data={"username": "bob", "password": PASSWORD, "csrf_token": token})
        assert r.status_code == 429
    app.state.engine.dispose()


def test_throttled_client_signs_in_again_once_its_failures_age_out():
    now = [0.0]
    throttle = LoginThrottle(ThrottleLimits(per_pair=2, per_client=0, window_s=60),
                             clock=lambda: now[0])
    throttle.failed("ann", "10.0.0.1")
    now[0] = 10.0
    throttle.failed("Ann", "10.0.0.1")  # names count alike whatever their case
    assert throttle.retry_after("ann", "10.0.0.1") == 50
    assert throttle.retry_after("ann", "10.0.0.3") == 0  # another client: not locked
    now[0] = 59.5
    assert throttle.retry_after("ann", "10.0.0.1") == 1
    now[0] = 60.5  # the first failure aged out: one left, under the limit
    assert throttle.retry_after("ann", "10.0.0.1") == 0
    throttle.failed("ann", "10.0.0.1")
    assert throttle.retry_after("ann", "10.0.0.1") == 10
    throttle.succeeded("ann", "10.0.0.1")
    assert throttle.retry_after("ann", "10.0.0.1") == 0


# --- 10: rating indices ---------------------------------------------------------------------


def test_rating_field_with_a_huge_index_is_refused_before_anything_is_allocated(tmp_path):
    """`rating_30000000=1` made the server build a list of 30 million indices (over 1 GB),
    `rating_1000000000000000000=1` a 500 MemoryError."""
    app = _app(str(tmp_path / "labels.sqlite"), tmp_path)
    with ThreadServer(app) as server, _client(server) as c:
        login(c, "ann")
        csrf = hidden(c.get("/tasks").text, "csrf_token")
        task = task_id_from(c.post("/projects/1/next", data={"csrf_token": csrf}))
        form = step_form(c, task)
        sid = form["data"]["submission_id"]
        tracemalloc.start()
        try:
            for field in ("rating_30000000", "rating_1000000000000000000", "rating_1",
                          "rating_-1", "flag_999999"):
                data = {"csrf_token": csrf, "submission_id": sid, field: "1"}
                if field == "flag_999999":
                    data["rating_0"] = "1"
                r = c.post(form["action"], data=data)
                assert r.status_code == 400, (field, r.status_code)
                assert "candidate" in r.text or "unknown field" in r.text, field
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < 50 << 20  # the old code's list alone took over 1 GB
        assert c.post(form["action"], data=form["data"]).status_code == 303
    app.state.engine.dispose()


# --- 11: bodies before the session ------------------------------------------------------------


def _raw_post(port: int, path: str, length: int, cookie: str = "", sent: int = 64 << 10,
              content_type: str = "multipart/form-data; boundary=x") -> str:
    """POST with a Content-Length of `length` but only `sent` bytes of body; returns the
    status line the server answers with (it must not wait for the rest)."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {content_type}\r\n"
                f"Content-Length: {length}\r\n" + (f"Cookie: {cookie}\r\n" if cookie else "")
                + "\r\n")
        s.sendall(head.encode() + b"x" * sent)
        return s.makefile("rb").readline().decode().strip()


def test_anonymous_200_mb_upload_is_refused_before_its_body_is_read(tmp_path):
    """A 200 MB anonymous POST to the import form was spooled to /tmp before its 401."""
    app = _app(str(tmp_path / "labels.sqlite"), tmp_path)
    with ThreadServer(app) as server:
        line = _raw_post(server.port, "/admin/projects/1/import", 200 << 20)
        assert line.startswith("HTTP/1.1 401"), line
        line = _raw_post(server.port, "/admin/projects/1/import", 200 << 20,
                         cookie="prmkit_session=forged")
        assert line.startswith("HTTP/1.1 401"), line
        with _client(server) as admin:
            login(admin, "root")
            cookie = f"prmkit_session={admin.cookies['prmkit_session']}"
        line = _raw_post(server.port, "/admin/projects/1/import", 200 << 20, cookie=cookie)
        assert line.startswith("HTTP/1.1 413"), line  # the admin's too: over the 64 MiB cap
        line = _raw_post(server.port, "/tasks/1/finish", 1 << 20, cookie=cookie,
                         content_type="application/x-www-form-urlencoded")
        assert line.startswith("HTTP/1.1 413"), line  # forms are small
    app.state.engine.dispose()


def test_upload_cap_is_configurable_and_a_queue_under_it_is_imported(tmp_path):
    app = _app(str(tmp_path / "labels.sqlite"), tmp_path, max_upload_bytes=256 << 10)
    queue = (tmp_path / "p1.jsonl").read_bytes()
    with ThreadServer(app) as server, _client(server) as admin:
        csrf = login(admin, "root")
        big = queue + b"\n" * (300 << 10)
        r = admin.post("/admin/projects/1/import", data={"csrf_token": csrf},
                       files={"file": ("q.jsonl", big)})
        assert r.status_code == 413 and "256 KiB" not in r.text and "0.25 MiB" in r.text
        r = admin.post("/admin/projects/1/import", data={"csrf_token": csrf},
                       files={"file": ("q.jsonl", queue)})
        assert r.status_code == 303
        assert "Imported 2 solutions into p1" in admin.get(r.headers["location"]).text
        with _client(server) as ann:
            ann_csrf = login(ann, "ann")
            r = ann.post("/admin/projects/1/import", data={"csrf_token": ann_csrf},
                         files={"file": ("q.jsonl", queue)})
            assert r.status_code == 403
    with app.state.sessionmaker() as s:
        assert len(service.project_tasks(s, service.get_project(s, "p1"))) == 0
        assert s.scalar(__import__("sqlalchemy").text("SELECT count(*) FROM items")) == 6
    app.state.engine.dispose()


# --- 13: project membership -------------------------------------------------------------------


def test_a_labeller_outside_a_project_neither_sees_nor_takes_nor_keeps_its_tasks(db_url,
                                                                                  tmp_path):
    """Every labeller saw and took tasks of every project, admins' scratch projects too."""
    app = _app(db_url, tmp_path)
    with ThreadServer(app) as server, _client(server) as ann, _client(server) as admin:
        csrf = login(ann, "ann")
        page = ann.get("/tasks").text
        assert "p1" in page and "scratch" not in page and 'id="next-2"' not in page
        r = ann.post("/projects/2/next", data={"csrf_token": csrf})
        assert r.status_code == 404 and "$x = " not in r.text
        task = task_id_from(ann.post("/projects/1/next", data={"csrf_token": csrf}))
        form = step_form(ann, task)
        admin_csrf = login(admin, "root")
        r = admin.post("/admin/projects/1/members", data={"csrf_token": admin_csrf,
                                                          "member": ["bob"]})
        assert r.status_code == 303
        assert ann.get(f"/tasks/{task}").status_code == 404
        assert ann.post(form["action"], data=form["data"]).status_code == 404
        assert ann.post(f"/tasks/{task}/finish", data={"csrf_token": csrf, "reason": "give_up",
                                                       "note": "x"}).status_code == 404
        assert f"/tasks/{task}" not in ann.get("/tasks").text
        assert ann.post("/projects/1/next", data={"csrf_token": csrf}).status_code == 404
        # the admin's dashboard sets members; a labeller cannot
        r = ann.post("/admin/projects/2/members", data={"csrf_token": csrf, "member": ["ann"]})
        assert r.status_code == 403
        r = admin.post("/admin/projects/2/members", data={"csrf_token": admin_csrf,
                                                          "member": ["ann"]})
        assert r.status_code == 303
        assert 'id="next-2"' in ann.get("/tasks").text
        assert ann.post("/projects/2/next", data={"csrf_token": csrf}).status_code == 303
        r = admin.post("/admin/projects/2/members", data={"csrf_token": admin_csrf,
                                                          "member": ["nobody"]})
        assert r.status_code == 404
    with app.state.sessionmaker() as s:
        assert s.query(StepLabel).count() == 0
        assert [u.username for u in service.members(s, service.get_project(s, "scratch"))] \
            == ["ann"]
    app.state.engine.dispose()


@pytest.mark.parametrize("action", ["add", "set", "remove"])
def test_cli_members_sets_who_labels_a_project(tmp_path, capsys, action):
    from prmkit.cli import main

    db = str(tmp_path / "cli.sqlite")
    app = _app(db, tmp_path)
    app.state.engine.dispose()
    capsys.readouterr()
    assert main(["label", "members", action, "root", "ann", "--project", "scratch",
                 "--db", db]) == 0
    expected = {"add": "ann\nroot\n", "set": "ann\nroot\n", "remove": ""}[action]
    assert capsys.readouterr().out == expected
    assert main(["label", "members", "add", "nobody", "--project", "scratch", "--db", db]) == 2
    assert "no user 'nobody'" in capsys.readouterr().err


def test_sign_ins_past_the_hash_queue_get_429_at_once(tmp_path, monkeypatch):
    """However many sign-ins arrive, at most security.MAX_WAITING wait for the one hashing
    thread; a sign-in that ranks no better than every waiting one is answered 429 without
    waiting."""
    app = _app(str(tmp_path / "labels.sqlite"), tmp_path)
    queue = RankedQueue(max_waiting=1)
    monkeypatch.setattr(security, "_queue", queue)
    hashing, release = threading.Event(), threading.Event()
    jobs = [threading.Thread(target=queue.run, args=(lambda: (hashing.set(), release.wait(30)),),
                             kwargs={"client": "x", "rank": 0}, daemon=True),
            threading.Thread(target=queue.run, args=(lambda: None,),
                             kwargs={"client": "y", "rank": 0}, daemon=True)]
    jobs[0].start()
    assert hashing.wait(10)
    jobs[1].start()
    deadline = time.monotonic() + 10
    while queue.waiting() < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    with ThreadServer(app) as server, _client(server) as c:  # the queue is full
        r = _wrong_sign_in(c, "ann")
        assert r.status_code == 429 and r.headers["retry-after"] == "1"
        assert "too many sign-ins at once" in r.text
        release.set()
        for job in jobs:
            job.join(10)
        assert _wrong_sign_in(c, "ann").status_code == 401


@pytest.mark.parametrize("option", [["--max-upload-mb", "0"], ["--max-upload-mb", "nan"],
                                    ["--login-throttle", "5,20"],
                                    ["--login-throttle=-1,20,300"],
                                    ["--login-throttle", "5,20,inf"],
                                    ["--login-throttle", "5,20,300,-1"],
                                    ["--login-throttle", "5,20,300,20,1"]])
def test_serve_refuses_a_bad_upload_cap_or_login_throttle_before_starting(option, tmp_path,
                                                                          monkeypatch, capsys):
    import uvicorn

    from prmkit.cli import main

    def never(*args, **kwargs):
        raise AssertionError("the server started")

    monkeypatch.setattr(uvicorn, "run", never)
    db = tmp_path / "labels.sqlite"
    assert main(["label", "serve", "--db", str(db), *option]) == 2
    assert option[0].split("=")[0] in capsys.readouterr().err
    assert not db.exists()


def test_names_tried_once_do_not_pile_up_in_the_throttle():
    from prmkit.labeling import throttle as throttle_mod

    now = [0.0]
    t = LoginThrottle(ThrottleLimits(per_pair=5, per_client=0, window_s=60, per_account=5),
                      clock=lambda: now[0])
    for i in range(throttle_mod.PRUNE_AT):
        t.failed(f"guess{i}", "c")
    now[0] = 61.0
    t.failed("ann", "c")
    # what is left: ann's failure (pair, client, account), no name tried before
    assert sorted(k.split(":")[0] for k in t._failures) == ["client", "pair", "user"]


def test_a_read_transaction_left_open_holds_up_no_writer(tmp_path):
    """Every transaction began with BEGIN IMMEDIATE, reads too: a page being read (or
    `prmkit label export` running) held the write lock. Read sessions take none."""
    from prmkit.labeling import db as dbmod

    app = _app(str(tmp_path / "labels.sqlite"), tmp_path)
    engine = app.state.engine
    with dbmod.make_sessionmaker(engine, read_only=True)() as reader:
        assert len(service.list_projects(reader)) == 2  # its transaction stays open
        done = threading.Event()

        def write():
            with app.state.sessionmaker() as writer:
                service.create_user(writer, "cleo", PASSWORD)
            done.set()

        threading.Thread(target=write, daemon=True).start()
        assert done.wait(20)  # a write lock held by the reader would keep it 60 s
        assert reader.in_transaction()
    engine.dispose()
