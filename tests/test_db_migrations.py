"""The service database (proctor.db): URLs and engines, Alembic migrations under their lock (several processes
at once, on real SQLite and a real PostgreSQL started here), the models matching the migrations, and the audit
log writer surviving a database outage.

PostgreSQL runs as the postgres user (initdb + pg_ctl, as tests/test_sql_postgres.py does), on a unix socket in
a private temporary folder; tests that need it skip only when the binaries are missing.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import func, inspect, select, text

from proctor.contract import Score, Status
from proctor.db.audit import AuditLog, split_verifier
from proctor.db.connect import create_db_engine, data_dir, database_url, head_revision, migrate
from proctor.db.models import VERSION_TABLE, AuditScore, Base
from proctor.settings import Settings
from tests.conftest import REPO_ROOT, free_port

TABLES = {"proctor_jobs", "proctor_job_rows", "proctor_job_results", "proctor_audit_scores", VERSION_TABLE}


def _binary(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"))
    return str(candidates[-1]) if candidates else None


class PostgresServer:
    """A private PostgreSQL server (trust auth, unix socket only) that a test can stop, start and restart."""

    def __init__(self) -> None:
        self.initdb, self.pg_ctl = _binary("initdb"), _binary("pg_ctl")
        if not (self.initdb and self.pg_ctl):
            pytest.skip("PostgreSQL binaries (initdb, pg_ctl) not installed")
        if os.geteuid() == 0:
            try:
                pwd.getpwnam("postgres")
            except KeyError:
                pytest.skip("running as root and there is no postgres user to run the server as")
        self.base = Path(tempfile.mkdtemp(prefix="proctor-db-pg-"))
        self.data = self.base / "data"
        self.port = free_port()
        if os.geteuid() == 0:
            shutil.chown(self.base, "postgres", "postgres")
        done = self._run([self.initdb, "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync"])
        assert done.returncode == 0, done.stderr
        self.start()
        self.databases = 0

    def _run(self, argv: list[str]) -> subprocess.CompletedProcess:
        prefix = [] if os.geteuid() != 0 else ["runuser", "-u", "postgres", "--"]
        return subprocess.run(prefix + argv, capture_output=True, text=True, timeout=120)

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        options = f"-p {self.port} -k {self.base} -c listen_addresses='' -c fsync=off -c max_connections=200"
        log = self.base / "log"
        started = self._run(
            [
                str(self.pg_ctl),
                "-D",
                str(self.data),
                "-o",
                options,
                "-l",
                str(log),
                "-w",
                "-t",
                "120",
                "start",
            ]
        )
        assert started.returncode == 0, started.stderr + (log.read_text() if log.exists() else "")

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (`fast` disconnects clients; `immediate` is a crash)."""
        self._run([str(self.pg_ctl), "-D", str(self.data), "-m", mode, "-w", "stop"])

    def restart(self) -> None:
        """Stop with every client disconnected, then start again."""
        self.stop("fast")
        self.start()

    def new_database(self) -> str:
        """A fresh empty database; its SQLAlchemy URL."""
        self.databases += 1
        name = f"proctor_{self.databases}"
        engine = create_db_engine(self.url("postgres"), isolation_level="AUTOCOMMIT")
        with engine.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
        engine.dispose()
        return self.url(name)

    def url(self, database: str) -> str:
        """The URL of `database` on this server (a bare postgresql:// URL, as an operator would write it)."""
        return f"postgresql://postgres@/{database}?host={self.base}&port={self.port}"

    def close(self) -> None:
        """Stop the server and delete its files."""
        if self.data.is_dir():
            self.stop("immediate")
        shutil.rmtree(self.base, ignore_errors=True)


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    server = PostgresServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty database of each kind."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'db' / 'proctor.db'}"
    return request.getfixturevalue("postgres").new_database()


# -- URLs -----------------------------------------------------------------------------------------------


def test_default_database_is_a_sqlite_file_in_the_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    settings = Settings(data_dir=str(tmp_path / "data"))
    url = database_url(settings)
    assert url.get_backend_name() == "sqlite"
    assert url.database == str(tmp_path / "data" / "proctor.db")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert data_dir(Settings(data_dir="")) == tmp_path / "xdg" / "proctor"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert data_dir(Settings(data_dir="")) == tmp_path / "home" / ".local" / "share" / "proctor"


def test_a_bare_postgresql_url_gets_the_installed_driver():
    url = database_url(Settings(database_url="postgresql://u:p@db.example/proctor"))
    assert url.drivername == "postgresql+psycopg"
    assert url.host == "db.example" and url.database == "proctor"
    kept = database_url(Settings(database_url="postgresql+psycopg://u@h/d"))
    assert kept.drivername == "postgresql+psycopg"


# -- migrations -----------------------------------------------------------------------------------------


def test_migrate_creates_the_tables_and_a_second_run_changes_nothing(db_url: str):
    engine = create_db_engine(db_url)
    try:
        assert migrate(engine) == head_revision()
        assert set(inspect(engine).get_table_names()) >= TABLES
        assert migrate(engine) == head_revision()
        with engine.connect() as connection:
            versions = connection.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars().all()
        assert versions == [head_revision()]
    finally:
        engine.dispose()


def test_the_models_match_the_migrations(db_url: str):
    """What Alembic's autogenerate would add after the shipped migrations: nothing (models and migrations agree)."""
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    engine = create_db_engine(db_url)
    try:
        migrate(engine)
        with engine.connect() as connection:
            context = MigrationContext.configure(
                connection, opts={"compare_type": True, "version_table": VERSION_TABLE}
            )
            assert compare_metadata(context, Base.metadata) == []
    finally:
        engine.dispose()


MIGRATE_SCRIPT = """
import sys, time
from pathlib import Path
go = Path(sys.argv[2])
while not go.exists():
    time.sleep(0.01)
from proctor.db.connect import create_db_engine, migrate
engine = create_db_engine(sys.argv[1])
print(migrate(engine))
"""


def _migrate_concurrently(url: str, tmp_path: Path, processes: int = 6) -> list[str]:
    """Start `processes` interpreters that all migrate `url` the moment a file appears; their outputs."""
    go = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    children = [
        subprocess.Popen(
            [sys.executable, "-c", MIGRATE_SCRIPT, url, str(go)],
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(processes)
    ]
    time.sleep(1.0)  # let every interpreter finish importing, so they reach migrate() together
    go.touch()
    outputs = []
    for child in children:
        out, err = child.communicate(timeout=180)
        assert child.returncode == 0, err
        outputs.append(out.strip())
    return outputs


def test_replicas_starting_at_once_migrate_once(db_url: str, tmp_path: Path):
    """Six processes migrate one empty database at the same moment: all succeed, and the schema is whole."""
    assert _migrate_concurrently(db_url, tmp_path) == [head_revision()] * 6
    engine = create_db_engine(db_url)
    try:
        assert set(inspect(engine).get_table_names()) >= TABLES
        with engine.connect() as connection:
            versions = connection.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars().all()
        assert versions == [head_revision()]
    finally:
        engine.dispose()


def test_the_postgresql_migration_lock_is_released(postgres: PostgresServer):
    url = postgres.new_database()
    engine = create_db_engine(url)
    try:
        migrate(engine)
        with engine.connect() as connection:
            held = connection.execute(
                text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'")
            ).scalar()
        assert held == 0
    finally:
        engine.dispose()


# -- the audit log writer -------------------------------------------------------------------------------


def _score(reward: float = 1.0, status: Status = Status.ok, verifier: str = "text.match@1.0.0") -> Score:
    return Score(id="r1", verifier=verifier, status=status, reward=reward)


def _wait_for(predicate, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


def test_split_verifier():
    assert split_verifier("text.match@1.0.0") == ("text.match", "1.0.0")
    assert split_verifier("plugin@scope@2") == ("plugin@scope", "2")
    assert split_verifier("bare") == ("bare", "")


def test_audit_records_every_score_with_its_verifier_version(db_url: str):
    engine = create_db_engine(db_url)
    migrate(engine)
    outcomes: dict[str, int] = {}
    audit = AuditLog(engine, observer=lambda o, n: outcomes.__setitem__(o, outcomes.get(o, 0) + n))
    try:
        audit.record(_score(1.0), "k" * 64)
        audit.record(_score(0.0, Status.timeout, "code@2.1"), None)
        _wait_for(lambda: outcomes.get("written", 0) == 2)
        with engine.connect() as connection:
            rows = connection.execute(select(AuditScore).order_by(AuditScore.id)).all()
        assert [(r.verifier, r.version, r.status, r.reward, r.key_hash) for r in rows] == [
            ("text.match", "1.0.0", "ok", 1.0, "k" * 64),
            ("code", "2.1", "timeout", 0.0, None),
        ]
        assert rows[0].at is not None and rows[0].request_id == "r1"
    finally:
        audit.close()
        engine.dispose()


def test_audit_survives_a_postgresql_restart_without_blocking_or_losing_records(postgres: PostgresServer):
    """While the database is down, record() returns at once and failures are counted; records queued
    meanwhile are written when it is back."""
    url = postgres.new_database()
    engine = create_db_engine(url)
    migrate(engine)
    outcomes: dict[str, int] = {}
    audit = AuditLog(engine, observer=lambda o, n: outcomes.__setitem__(o, outcomes.get(o, 0) + n))
    try:
        audit.record(_score())
        _wait_for(lambda: outcomes.get("written", 0) == 1)
        postgres.stop("fast")
        try:
            for _ in range(50):
                audit.record(_score(0.5))  # never raises, never waits for the database
            _wait_for(lambda: outcomes.get("write_error", 0) >= 1)
        finally:
            postgres.start()
        _wait_for(lambda: outcomes.get("written", 0) == 51, timeout_s=90)
        with engine.connect() as connection:
            assert connection.execute(select(func.count()).select_from(AuditScore)).scalar() == 51
        assert outcomes.get("dropped", 0) == 0
    finally:
        audit.close()
        engine.dispose()


def test_audit_drops_and_counts_when_its_queue_is_full(tmp_path: Path):
    engine = create_db_engine(f"sqlite:///{tmp_path / 'never-migrated.db'}")  # no tables: every write fails
    outcomes: dict[str, int] = {}
    audit = AuditLog(
        engine, capacity=5, observer=lambda o, n: outcomes.__setitem__(o, outcomes.get(o, 0) + n)
    )
    try:
        for _ in range(40):
            audit.record(_score())
        _wait_for(lambda: outcomes.get("write_error", 0) >= 1)
        # held back: at most one batch (the first record and what was queued with it) and a full queue
        assert outcomes.get("dropped", 0) >= 40 - (1 + 5) - 5
    finally:
        audit.close(timeout_s=1.0)
        engine.dispose()
