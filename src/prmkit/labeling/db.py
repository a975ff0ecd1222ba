"""Engine, sessions and migrations. SQLite (a file, the default) or PostgreSQL by URL."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from prmkit.errors import PrmkitError

MIGRATIONS = Path(__file__).parent / "migrations"
READ_ONLY = "prmkit_read_only"  # execution option of sessions that only read


def normalize_url(url: str) -> str:
    """A path becomes a SQLite URL; postgres:// and postgresql:// use psycopg 3."""
    if "://" not in url:
        return f"sqlite:///{Path(url).expanduser().resolve()}"
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    if not (url.startswith("sqlite") or url.startswith("postgresql+")):
        raise PrmkitError(f"unsupported database URL {url!r}: use a SQLite path or postgresql://")
    return url


def sqlite_file(url: str) -> Path | None:
    """The file of a SQLite database (None for PostgreSQL or an in-memory database)."""
    parsed = make_url(normalize_url(url))
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)


def make_engine(url: str) -> Engine:
    url = normalize_url(url)
    if make_url(url).get_backend_name() != "sqlite":
        return create_engine(url, pool_size=10, max_overflow=20, pool_pre_ping=True)
    engine = create_engine(url, connect_args={"timeout": 60, "check_same_thread": False})

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection, _record):
        # SQLAlchemy emits BEGIN itself (below): IMMEDIATE takes the write lock at once, so
        # two writers queue on the busy timeout instead of failing on a lock upgrade.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        if make_url(url).database not in (None, "", ":memory:"):
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=FULL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(conn):
        # Writers take the write lock at once; readers (READ_ONLY sessions) never take it,
        # so in WAL mode they neither wait for a writer nor hold one up.
        read = conn.get_execution_options().get(READ_ONLY, False)
        conn.exec_driver_sql("BEGIN" if read else "BEGIN IMMEDIATE")

    return engine


def migrate(engine: Engine) -> None:
    """Bring the schema to the latest migration (creates it on an empty database)."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")


def make_sessionmaker(engine: Engine, read_only: bool = False) -> sessionmaker[Session]:
    """Sessions over the engine. `read_only` ones begin deferred transactions on SQLite
    (a plain BEGIN instead of BEGIN IMMEDIATE): for requests that only read."""
    if read_only:
        engine = engine.execution_options(**{READ_ONLY: True})
    return sessionmaker(engine, expire_on_commit=False)
