"""Fixtures and helpers of the labelling tests: a synthetic PRM800K queue, a PostgreSQL
cluster started for the test session (unix socket only), SQLite/PostgreSQL databases,
a live `prmkit label serve` process and Chromium.

Test modules import the fixtures they use from here.
"""

from __future__ import annotations

import contextlib
import html
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import pytest

# Light Argon2 for the tests' accounts, here and in the servers they start.
os.environ["PRMKIT_ARGON2"] = "1,1024,1"

from prmkit.data.prm800k import write_prm800k
from prmkit.data.records import LabelledSolution, LabelledStep, Problem, Provenance, Step

PG_BIN = Path("/usr/lib/postgresql/15/bin")
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
PASSWORD = "correct horse"


# --- a synthetic queue ------------------------------------------------------------------------


def phase1_record(i: int, rated: bool = False, qc: bool = False) -> LabelledSolution:
    """A phase-1 solution: 3 positions, the second with 3 alternatives, maths in TeX."""
    r = (lambda v: v) if rated else (lambda v: None)
    steps = [
        LabelledStep([Step(f"Let $x = {i}$, so $x^2 = {i * i}$.", r(1), False if rated else None)], 0),
        LabelledStep([Step(f"Then $2x = {2 * i}$.", r(1)), Step(f"Then $2x = {2 * i + 1}$.", r(-1)),
                      Step(f"Then $\\frac{{4x}}{{2}} = {2 * i}$.", r(0))], 0),
        LabelledStep([Step(f"# Answer\n\n{2 * i}", r(1))], 0),
    ]
    return LabelledSolution(
        Problem(f"If $x = {i}$, what is $2x$?", str(2 * i)), steps, None, None,
        provenance=Provenance(generation=None, is_quality_control_question=qc))


def phase2_record(i: int) -> LabelledSolution:
    """A phase-2 queue record as a generator writes it: pre-generated steps, no label."""
    pre = [f"We have $y = {i} + 1 = {i + 1}$.", f"So $3y = {3 * (i + 1)}$.", f"# Answer\n\n{3 * (i + 1)}"]
    return LabelledSolution(
        Problem(f"Let $y = {i} + 1$. Find $3y$.", str(3 * (i + 1))), [], None, None,
        pre_generated_steps=pre, pre_generated_answer=str(3 * (i + 1)),
        pre_generated_verifier_score=0.5, provenance=Provenance(generation=7))


def write_queue(path: Path, records: list[LabelledSolution]) -> Path:
    write_prm800k(records, path)
    return path


# --- databases ------------------------------------------------------------------------------


def _as_postgres() -> list[str]:
    return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []


@pytest.fixture(scope="session")
def postgres_cluster():
    """A PostgreSQL 15 cluster for the test session (see `postgres_server`)."""
    with postgres_server() as socket_dir:
        yield socket_dir


@contextlib.contextmanager
def postgres_server():
    """A PostgreSQL 15 cluster in a temporary directory, listening only on a unix socket
    there; yields the socket directory and stops the server at the end."""
    base = Path(tempfile.mkdtemp(prefix="prmkit-pg-"))
    if os.geteuid() == 0:
        shutil.chown(base, "postgres", "postgres")
    base.chmod(0o700)
    data = base / "data"
    run = _as_postgres()
    subprocess.run([*run, str(PG_BIN / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust",
                    "-N", "-E", "UTF8"], check=True, capture_output=True)
    options = f"-c listen_addresses='' -c unix_socket_directories={base} -c fsync=off " \
              "-c full_page_writes=off -c max_connections=100"
    subprocess.run([*run, str(PG_BIN / "pg_ctl"), "-D", str(data), "-o", options, "-l",
                    str(base / "log"), "-w", "start"], check=True, capture_output=True)
    try:
        yield base
    finally:
        subprocess.run([*run, str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                       capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def new_postgres_db(socket_dir: Path) -> str:
    import psycopg

    name = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(f"host={socket_dir} user=postgres dbname=postgres", autocommit=True) as c:
        c.execute(f"CREATE DATABASE {name}")
    return f"postgresql+psycopg://postgres@/{name}?host={socket_dir}"


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path):
    """A fresh empty database of each kind."""
    if request.param == "sqlite":
        return str(tmp_path / "labels.sqlite")
    return new_postgres_db(request.getfixturevalue("postgres_cluster"))


@pytest.fixture
def sessions(db_url):
    from prmkit.labeling import db

    engine = db.make_engine(db_url)
    db.migrate(engine)
    yield db.make_sessionmaker(engine)
    engine.dispose()


# --- a live server --------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_label_server(db: str, *options: str, port: int | None = None, env: dict | None = None,
                       stderr=subprocess.PIPE) -> tuple[subprocess.Popen, str]:
    """`prmkit label serve --db DB *options` in a subprocess on 127.0.0.1 (a free port unless
    given), with its URL, once /healthz answers; killed if it does not within 60 s."""
    port = port or free_port()
    url = f"http://127.0.0.1:{port}"
    code = "import sys; from prmkit.cli import main; sys.exit(main())"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "label", "serve", "--db", db, "--port", str(port),
         "--log-level", "warning", *options], env=env, stdout=subprocess.DEVNULL, stderr=stderr)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            said = proc.stderr.read().decode()[-2000:] if proc.stderr else ""
            raise RuntimeError(f"server exited with code {proc.returncode}: {said}")
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    proc.wait()
    raise RuntimeError("server did not start in 60 s")


class LiveServer:
    """`prmkit label serve` in a subprocess on 127.0.0.1."""

    def __init__(self, db: str, port: int | None = None):
        self.db, self.port = db, port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> LiveServer:
        self.proc, _ = start_label_server(self.db, port=self.port)
        return self

    def kill(self) -> None:
        """SIGKILL: no shutdown, open transactions lost."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# --- HTTP helpers -----------------------------------------------------------------------------


def hidden(html: str, name: str) -> str:
    m = re.search(rf'name="{name}" value="([^"]*)"', html)
    assert m, f"no hidden field {name!r} in the page"
    return m.group(1)


def step_form(c, task_id: int) -> dict:
    """The rating form of the task's next step, every candidate rated +1."""
    page = c.get(f"/tasks/{task_id}").text
    n = len(re.findall(r'class="candidate"', page))
    form = {"csrf_token": hidden(page, "csrf_token"),
            "submission_id": hidden(page, "submission_id")}
    form.update({f"rating_{i}": "1" for i in range(n)})
    action = re.search(r'action="(/tasks/\d+/steps/\d+)"', page).group(1)
    return {"action": action, "data": form}


def login(client: httpx.Client, username: str, password: str = PASSWORD) -> str:
    """Sign in; returns the session's CSRF token (read from the next page)."""
    page = client.get("/login")
    r = client.post("/login", data={"username": username, "password": password,
                                    "csrf_token": hidden(page.text, "csrf_token")})
    assert r.status_code == 303, r.text
    return hidden(client.get("/tasks").text, "csrf_token")


def task_id_from(response: httpx.Response) -> int:
    assert response.status_code == 303, response.text
    m = re.fullmatch(r"/tasks/(\d+)", response.headers["location"])
    assert m, response.headers["location"]
    return int(m.group(1))


# --- the load scenario (test and benchmark) ------------------------------------------------


def _retrying(call, deadline: float):
    """Repeat a request through connection errors (a server being restarted)."""
    while True:
        try:
            return call()
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def run_load(workdir: Path, labellers: int = 20, items: int = 20, overlap: int = 2,
             kill_after: int | None = 30, db: str | None = None) -> dict:
    """`labellers` clients label a phase-1 queue at once over HTTP (each task seen by
    `overlap` of them); once `kill_after` steps are stored the server is SIGKILLed and
    started again, and clients retry with the same submission ids; each client submits its
    first step form twice. `db`: an empty database's URL (default: a SQLite file in
    `workdir`). Returns the figures and what was submitted and exported."""
    import threading

    from prmkit.labeling import create_app, service

    db = db or str(workdir / "load.sqlite")
    app = create_app(db)
    with app.state.sessionmaker() as s:
        service.create_user(s, "admin", PASSWORD, "admin")
        for i in range(labellers):
            service.create_user(s, f"l{i:02d}", PASSWORD)
        project = service.configure_project(s, "load", phase=1, overlap=overlap)
        s.commit()
        service.set_members(s, project, [f"l{i:02d}" for i in range(labellers)])
        service.import_queue(s, project, write_queue(workdir / "queue.jsonl",
                                                     [phase1_record(i) for i in range(items)]))
    app.state.engine.dispose()

    server = LiveServer(db).start()
    submitted: list[tuple[str, str, int, tuple[int, ...]]] = []
    lock = threading.Lock()
    counts = {"requests": 0, "double_submits": 0}
    killed = threading.Event()
    errors: list[BaseException] = []

    def labeller(name: str) -> None:
        deadline = time.monotonic() + 300
        with httpx.Client(base_url=server.url, timeout=30) as c:
            def call(method, url, **kw):
                with lock:
                    counts["requests"] += 1
                return _retrying(lambda: c.request(method, url, **kw), deadline)

            page = call("GET", "/login")
            call("POST", "/login", data={"username": name, "password": PASSWORD,
                                         "csrf_token": hidden(page.text, "csrf_token")})
            csrf = hidden(call("GET", "/tasks").text, "csrf_token")
            first = True
            while True:
                r = call("POST", "/projects/1/next", data={"csrf_token": csrf})
                if not r.headers.get("location", "").startswith("/tasks/"):
                    return  # nothing left
                task = task_id_from(r)
                while True:
                    page = call("GET", f"/tasks/{task}").text
                    m = re.search(r'action="/tasks/\d+/steps/(\d+)"', page)
                    if not m:
                        break
                    position = int(m.group(1))
                    problem = html.unescape(
                        re.search(r'id="problem">(.*?)</div>', page, re.S).group(1))
                    n = len(re.findall(r'class="candidate"', page))
                    ratings = tuple((hash((name, task, position, i)) % 3) - 1 for i in range(n))
                    form = {"csrf_token": csrf, "submission_id": hidden(page, "submission_id"),
                            **{f"rating_{i}": str(r) for i, r in enumerate(ratings)}}
                    for _ in range(2 if first else 1):
                        r = call("POST", f"/tasks/{task}/steps/{position}", data=form)
                        assert r.status_code == 303, (r.status_code, r.text[:300])
                    with lock:
                        counts["double_submits"] += first
                        submitted.append((name, problem, position, ratings))
                        if kill_after and len(submitted) == kill_after:
                            killed.set()
                    first = False
                r = call("POST", f"/tasks/{task}/finish",
                         data={"csrf_token": csrf, "reason": "found_error"})
                assert r.status_code == 303, r.text[:300]

    def guarded(name):
        try:
            labeller(name)
        except BaseException as e:  # reported by the caller
            errors.append(e)

    threads = [threading.Thread(target=guarded, args=(f"l{i:02d}",)) for i in range(labellers)]
    start = time.monotonic()
    for t in threads:
        t.start()
    restart_s = 0.0
    if kill_after:
        while not killed.wait(0.05) and any(t.is_alive() for t in threads):
            pass
        if killed.is_set():
            t0 = time.monotonic()
            server.kill()
            server.start()
            restart_s = time.monotonic() - t0
    for t in threads:
        t.join()
    wall = time.monotonic() - start
    try:
        if errors:
            raise errors[0]
        with httpx.Client(base_url=server.url, timeout=60) as admin:
            login(admin, "admin")
            export = admin.get("/admin/projects/1/export")
            assert export.status_code == 200
    finally:
        server.stop()
    out = workdir / "export.jsonl"
    out.write_bytes(export.content)
    exported = []
    import json as _json

    for line in export.content.splitlines():
        rec = _json.loads(line)
        for position, step in enumerate(rec["label"]["steps"]):
            exported.append((rec["labeler"], rec["question"]["problem"], position,
                             tuple(c["rating"] for c in step["completions"])))
    return {
        "labellers": labellers,
        "labels_submitted": len(submitted),
        "labels_exported": len(exported),
        "requests_per_s": counts["requests"] / wall,
        "requests": counts["requests"],
        "wall_s": wall,
        "server_killed_after_labels": kill_after,
        "restart_s": restart_s,
        "double_submitted_forms": counts["double_submits"],
        "tasks_exported": len(export.content.splitlines()),
        "submitted": submitted,
        "exported": exported,
        "export_path": str(out),
    }


# --- an in-process server -------------------------------------------------------------------


class ThreadServer:
    """A FastAPI app served by uvicorn in a thread of the test process, on 127.0.0.1 (for
    tests that patch the app's code or look at its memory); stops on leaving the block."""

    def __init__(self, app, **options):
        """`options`: uvicorn.Config's, over 127.0.0.1, a free port and log level warning."""
        import uvicorn

        config = {"host": "127.0.0.1", "port": free_port(), "log_level": "warning",
                  "lifespan": "on", **options}
        self.port = config["port"]
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, **config))
        self.thread = None

    def __enter__(self) -> ThreadServer:
        import threading

        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the server did not start in 30 s")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(15)
