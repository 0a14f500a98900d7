"""The database engine from PROCTOR_DATABASE_URL, and migrations to the newest schema under a lock.

Several replicas starting at once all call `migrate`; each takes a lock first (PostgreSQL: a session
advisory lock; SQLite: an exclusive `flock` on a file beside the database), so exactly one runs each
migration and the others find the schema already current.
"""

from __future__ import annotations

import fcntl
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import URL, make_url

from proctor.db.models import VERSION_TABLE
from proctor.settings import Settings, get_settings

log = logging.getLogger(__name__)

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
ADVISORY_LOCK_KEY = 0x50524F43544F52  # "PROCTOR": the one advisory lock key Proctor takes, for migrations
SQLITE_BUSY_TIMEOUT_MS = 30_000


class DatabaseError(Exception):
    """The database is misconfigured or cannot be reached (the message says which and why)."""


def data_dir(settings: Settings | None = None) -> Path:
    """PROCTOR_DATA_DIR, else $XDG_DATA_HOME/proctor, else ~/.local/share/proctor (not created here)."""
    settings = settings or get_settings()
    if settings.data_dir:
        return Path(settings.data_dir).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "proctor"


def database_url(settings: Settings | None = None) -> URL:
    """PROCTOR_DATABASE_URL, else a SQLite file `proctor.db` in the data directory.

    A bare `postgresql://` URL gets the psycopg 3 driver Proctor installs (SQLAlchemy would pick psycopg2).
    """
    settings = settings or get_settings()
    if not settings.database_url:
        return URL.create("sqlite", database=str(data_dir(settings) / "proctor.db"))
    try:
        url = make_url(settings.database_url)
    except Exception as exc:  # SQLAlchemy raises ArgumentError; any failure means the URL is unusable
        raise DatabaseError(f"PROCTOR_DATABASE_URL is not a database URL: {exc}") from None
    if url.drivername in ("postgresql", "postgres"):
        url = url.set(drivername="postgresql+psycopg")
    return url


def _sqlite_path(url: URL) -> Path | None:
    """The file of a SQLite URL; None for an in-memory database."""
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        return None
    return Path(url.database)


def create_db_engine(url: URL | str | None = None, **kwargs: Any) -> Engine:
    """An engine for `url` (default: `database_url()`): SQLite in WAL mode with a busy timeout, so several
    processes can share one file; PostgreSQL with connections checked before use, so a restarted server
    costs a retry, not an error on every pooled connection."""
    url = make_url(url) if url is not None else database_url()
    path = _sqlite_path(url)
    if url.get_backend_name() == "sqlite":
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(
            url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000, "check_same_thread": False}, **kwargs
        )

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_connection: Any, _record: Any) -> None:
            cursor = dbapi_connection.cursor()
            if path is not None:
                cursor.execute("PRAGMA journal_mode=WAL")
                cursor.execute(
                    "PRAGMA synchronous=NORMAL"
                )  # WAL stays consistent; a power cut may lose the last commit
            cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()

        return engine
    return create_engine(url, pool_pre_ping=True, **kwargs)


def _alembic_config(connection: Any) -> Any:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An exclusive lock on `path` held across processes (released by the kernel if this process dies)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def migrate(engine: Engine, revision: str = "head") -> str | None:
    """Upgrade the schema to `revision` under the migration lock; returns the revision the database is at."""
    from alembic import command
    from alembic.runtime.migration import MigrationContext

    backend = engine.url.get_backend_name()
    path = _sqlite_path(engine.url)
    lock = _file_lock(path.with_name(path.name + ".migrate.lock")) if path is not None else _no_lock()
    with lock, engine.connect() as connection:
        if backend == "postgresql":
            # A session-level lock: it outlives the transactions Alembic commits, and dies with the connection.
            connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": ADVISORY_LOCK_KEY})
            connection.commit()
        elif path is None and backend != "sqlite":
            log.warning("no migration lock for %s: start one replica first when upgrading", backend)
        try:
            command.upgrade(_alembic_config(connection), revision)
            connection.commit()
            current = MigrationContext.configure(
                connection, opts={"version_table": VERSION_TABLE}
            ).get_current_revision()
            connection.commit()
        finally:
            if backend == "postgresql":
                connection.rollback()
                connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": ADVISORY_LOCK_KEY})
                connection.commit()
    return current


@contextmanager
def _no_lock() -> Iterator[None]:
    yield


def head_revision() -> str:
    """The newest revision the shipped migrations know."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory(str(MIGRATIONS)).get_current_head()
    assert head is not None, "the shipped migrations have no head"
    return head
