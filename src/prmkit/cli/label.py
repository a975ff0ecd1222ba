"""`prmkit label`: the step-labelling web app (serve), its queues (import, export, release
of idle tasks), project members (members) and accounts (users)."""

from __future__ import annotations

import argparse
import contextlib
import getpass
import json
import logging
import math
import sys
from datetime import timedelta
from pathlib import Path

DEFAULT_DB = "labels.sqlite"


@contextlib.contextmanager
def _session(args: argparse.Namespace, read_only: bool = False, create: bool = False):
    """A session over --db, migrated first; a `read_only` one never takes SQLite's write
    lock, so an export or stats run holds up no labeller. A SQLite file that is not there
    is made only by a command that adds to it (`create`), and removed again if it fails."""
    from prmkit.labeling import db
    from prmkit.labeling.service import LabelingError

    path = db.sqlite_file(args.db)
    new = path is not None and not path.exists()
    if new and not create:
        raise LabelingError(f"{args.db}: no such labelling database (`prmkit label import` "
                            "or `prmkit label users add` creates one)")
    engine = db.make_engine(args.db)
    try:
        db.migrate(engine)
        with db.make_sessionmaker(engine, read_only=read_only)() as s:
            yield s
    except BaseException:
        engine.dispose()
        if new:
            for f in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
                f.unlink(missing_ok=True)
        raise
    engine.dispose()


def _release_idle(hours: float | None):
    from prmkit.labeling import service

    if hours is None:
        return None
    if not (math.isfinite(hours) and hours > 0):  # 0 would release every task once taken
        raise service.LabelingError(f"--release-idle-hours must be a positive number of hours, "
                                    f"got {hours:g}")
    return timedelta(hours=hours)


def _login_limits(spec: str):
    """"PAIR,CLIENT,WINDOW_S[,ACCOUNT]": failed sign-ins allowed per (account, client
    address), per client address and per account within the window (0 switches a limit
    off; see prmkit.labeling.throttle)."""
    from prmkit.labeling.service import LabelingError
    from prmkit.labeling.throttle import ThrottleLimits

    try:
        fields = spec.split(",")
        if len(fields) not in (3, 4):
            raise ValueError(f"expected 3 or 4 numbers, got {len(fields)}")
        pair, client, window = int(fields[0]), int(fields[1]), float(fields[2])
        if len(fields) == 3:
            return ThrottleLimits(pair, client, window)
        return ThrottleLimits(pair, client, window, per_account=int(fields[3]))
    except ValueError as e:
        raise LabelingError(f"--login-throttle takes PAIR,CLIENT,WINDOW_S[,ACCOUNT] (e.g. "
                            f"5,20,300,20), got {spec!r}: {e}") from None


def server_options(args: argparse.Namespace) -> dict:
    """uvicorn's options for `serve`: X-Forwarded-For and -Proto are read only from the
    addresses given to --forwarded-allow-ips (uvicorn trusts 127.0.0.1 by default, which
    let any client on the same host pick its address for the sign-in throttle)."""
    trusted = (args.forwarded_allow_ips or "").strip()
    options = {"host": args.host, "port": args.port, "log_level": args.log_level,
               "proxy_headers": bool(trusted)}
    if trusted:
        options["forwarded_allow_ips"] = trusted
    return options


def _log_to_stderr(level: str) -> None:
    """Show the app's own log lines (idle tasks released) beside uvicorn's."""
    log = logging.getLogger("prmkit.labeling")
    if not log.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s:     %(name)s: %(message)s"))
        log.addHandler(handler)
    log.setLevel(getattr(logging, level.upper(), logging.DEBUG))  # uvicorn's "trace": debug


def cmd_serve(args: argparse.Namespace) -> int:
    release_idle = _release_idle(args.release_idle_hours)  # refused before anything starts
    import uvicorn

    from prmkit.labeling import create_app, service

    if not (math.isfinite(args.max_upload_mb) and args.max_upload_mb > 0):
        raise service.LabelingError(f"--max-upload-mb must be a positive number, "
                                    f"got {args.max_upload_mb:g}")
    app = create_app(args.db, secure_cookies=args.secure_cookies, release_idle=release_idle,
                     max_upload_bytes=int(args.max_upload_mb * (1 << 20)),
                     login_limits=_login_limits(args.login_throttle))
    with app.state.sessionmaker() as s:
        if not any(u.role == "admin" for u in service.list_users(s)):
            print(f"prmkit: note: no admin yet; create one with "
                  f"`prmkit label users add NAME --role admin --db {args.db}`", file=sys.stderr)
    _log_to_stderr(args.log_level)
    uvicorn.run(app, **server_options(args))
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from prmkit.labeling import service

    with _session(args, create=True) as s:
        # One transaction: a queue that fails to import leaves no new project behind.
        try:
            project = service.configure_project(
                s, args.project, phase=args.phase, overlap=args.overlap,
                gold_rate=args.gold_rate, screening_size=args.screening_size,
                screening_pass=args.screening_pass)
        except BaseException:
            s.rollback()
            raise
        n = service.import_queue(s, project, args.path, None if args.kind == "auto" else args.kind,
                                 format=args.format)
        print(f"imported {n} solutions into project {project.name!r} (phase {project.phase})")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from prmkit.labeling import service

    with _session(args, read_only=True) as s:
        n = service.export_project(s, service.get_project(s, args.project), args.output)
    print(f"wrote {n} labelled solutions to {args.output}")
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    from prmkit.labeling import qc, service

    with _session(args, read_only=True) as s:
        print(json.dumps(qc.project_stats(s, service.get_project(s, args.project))))
    return 0


def cmd_release(args: argparse.Namespace) -> int:
    from prmkit.labeling import service

    with _session(args) as s:
        project = service.get_project(s, args.project)
        tasks = service.release_stale_tasks(s, project, service.idle_hours(args.idle_hours),
                                            user=args.user)
        print(f"released {len(tasks)} open tasks of project {project.name!r} idle for more "
              f"than {args.idle_hours:g} h")
        for t in tasks:
            print(f"task {t.id}\t{t.user.username}\titem {t.item_id}\t"
                  f"last activity {service.last_activity(s, t):%Y-%m-%d %H:%M:%S} UTC")
    return 0


def cmd_members(args: argparse.Namespace) -> int:
    from prmkit.labeling import service

    with _session(args) as s:
        project = service.get_project(s, args.project)
        if args.action == "add":
            service.add_members(s, project, args.names)
        elif args.action == "remove":
            service.remove_members(s, project, args.names)
        elif args.action == "set":
            service.set_members(s, project, args.names)
        for u in service.members(s, project):
            print(u.username)
    return 0


def _password(args: argparse.Namespace) -> str:
    if args.password_stdin:
        return sys.stdin.readline().rstrip("\n")
    first = getpass.getpass("password: ")
    if getpass.getpass("again: ") != first:
        from prmkit.labeling.service import LabelingError

        raise LabelingError("the passwords differ")
    return first


def cmd_users(args: argparse.Namespace) -> int:
    from prmkit.labeling import service

    if args.action != "list" and not args.name:
        from prmkit.labeling.service import LabelingError

        raise LabelingError(f"users {args.action} needs a user name")
    with _session(args, create=args.action == "add") as s:
        if args.action == "list":
            for u in service.list_users(s):
                print(f"{u.username}\t{u.role}" + ("\tdisabled" if u.disabled else ""))
        elif args.action == "add":
            service.create_user(s, args.name, _password(args), args.role)
            print(f"created {args.role} {args.name}")
        elif args.action in ("disable", "enable"):
            service.set_disabled(s, service.get_user(s, args.name), args.action == "disable")
            print(f"{args.name} {args.action}d" + ("; their sessions are closed"
                                                   if args.action == "disable" else ""))
        else:
            service.set_password(s, args.name, _password(args))
            print(f"password of {args.name} changed; their sessions are closed")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("label", help="the step-labelling web app",
                              description=__doc__)
    sub = p.add_subparsers(dest="label_command", metavar="ACTION", required=True)

    def with_db(parser):
        parser.add_argument("--db", default=DEFAULT_DB,
                            help=f"SQLite path or URL, or postgresql://... (default {DEFAULT_DB})")
        return parser

    s = with_db(sub.add_parser("serve", help="run the web app"))
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--secure-cookies", action="store_true",
                   help="mark cookies Secure (behind an HTTPS proxy)")
    s.add_argument("--log-level", default="info")
    s.add_argument("--login-throttle", default="5,20,300,20",
                   metavar="PAIR,CLIENT,WINDOW_S[,ACCOUNT]",
                   help="failed sign-ins allowed within WINDOW_S seconds: PAIR of an account "
                        "from one client address and CLIENT from an address before its "
                        "sign-ins get 429; past ACCOUNT for an account, a client that failed "
                        "on it waits for its failure to age out, while others and browsers "
                        "that signed in to it before still get in (default 5,20,300,20; 0 "
                        "switches a limit off)")
    s.add_argument("--forwarded-allow-ips", metavar="ADDRS",
                   help="comma-separated proxy addresses (or *) whose X-Forwarded-For gives "
                        "the client's address; default: none, the peer's address is the "
                        "client's")
    s.add_argument("--max-upload-mb", type=float, default=64,
                   help="largest queue file the dashboard takes, in MiB (default 64; a larger "
                        "upload is refused with 413 before it is read)")
    s.add_argument("--release-idle-hours", type=float, metavar="H",
                   help="while serving, release open tasks idle for more than H hours, as "
                        "`prmkit label release` does, for every project (default: never)")
    s.set_defaults(func=cmd_serve)

    i = with_db(sub.add_parser("import", help="add a PRM800K-format queue to a project"))
    i.add_argument("path", help="raw PRM800K JSONL or concatenated JSON (or any labelled format)")
    i.add_argument("--project", required=True, help="created if new")
    i.add_argument("--kind", choices=["auto", "task", "gold", "screening"], default="auto",
                   help="auto: gold/screening from the records' quality-control flags")
    i.add_argument("--format", help="input format (detected by default)")
    i.add_argument("--phase", type=int, choices=[1, 2],
                   help="1: alternatives rated, own step allowed; 2: stop at the first -1")
    i.add_argument("--overlap", type=int, help="labellers per task")
    i.add_argument("--gold-rate", type=float, help="share of tasks that are gold questions")
    i.add_argument("--screening-size", type=int, help="screening questions a labeller answers")
    i.add_argument("--screening-pass", type=float, help="agreement needed to pass screening")
    i.set_defaults(func=cmd_import)

    e = with_db(sub.add_parser("export", help="write finished tasks as raw PRM800K JSONL"))
    e.add_argument("--project", required=True)
    e.add_argument("-o", "--output", required=True)
    e.set_defaults(func=cmd_export)

    st = with_db(sub.add_parser("stats", help="quality-control figures of a project (JSON)"))
    st.add_argument("--project", required=True)
    st.set_defaults(func=cmd_stats)

    r = with_db(sub.add_parser(
        "release", help="free open tasks left idle, so other labellers get their solutions",
        description="Release the project's open tasks taken or last rated more than "
                    "--idle-hours ago: their solutions go to other labellers; the ratings "
                    "already given stay in the database but are not exported."))
    r.add_argument("--project", required=True)
    r.add_argument("--idle-hours", type=float, required=True,
                   help="release tasks with no rating for longer than this")
    r.add_argument("--user", help="only this labeller's tasks")
    r.set_defaults(func=cmd_release)

    m = with_db(sub.add_parser(
        "members", help="list or set who labels a project",
        description="A labeller sees and takes tasks only of the projects they are a member "
                    "of; prints the members after the change."))
    m.add_argument("action", choices=["list", "add", "remove", "set"])
    m.add_argument("names", nargs="*", metavar="USER")
    m.add_argument("--project", required=True)
    m.set_defaults(func=cmd_members)

    u = with_db(sub.add_parser(
        "users", help="list, add, disable or enable accounts or change a password"))
    u.add_argument("action", choices=["list", "add", "passwd", "disable", "enable"])
    u.add_argument("name", nargs="?")
    u.add_argument("--role", choices=["admin", "labeller"], default="labeller")
    u.add_argument("--password-stdin", action="store_true", help="read the password from stdin")
    u.set_defaults(func=cmd_users)
