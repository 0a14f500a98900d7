"""Hostile queries against the `sql` verifier: each scores 0 within its limit and no database file changes.

The battery runs twice: through the verifier (where the statement check answers first for most) and straight
into the jailed worker (bypassing that check), where the authorizer, read-only immutable open, limits and
caps must hold on their own. A stuck worker is killed at the host's wall-clock deadline and replaced.
"""

from __future__ import annotations

import hashlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from proctor.contract import Status
from proctor.registry import get_verifier
from proctor.settings import get_settings
from proctor.verifiers.sql.databases import Failure, content_hash, database_path, run_sqlite, staged
from proctor.verifiers.sql.workers import Mounts, SqliteWorkers, Worker
from tests.sql_helpers import library_databases

GOLD = "SELECT count(*) FROM book"
TIMEOUT_S = 1.0
# Each hostile query scores (and the worker answers) well within this bound: time limit plus start and grace.
BOUND_S = 15.0

HOSTILE = {
    "drop": "DROP TABLE book",
    "delete": "DELETE FROM loan",
    "update": "UPDATE book SET price = 0",
    "insert": "INSERT INTO branch VALUES (99, 'x', 'y', 2000)",
    "several": "SELECT count(*) FROM book; DROP TABLE book",
    "several_selects": "SELECT 1; SELECT 2",
    "attach": "ATTACH DATABASE '/tmp/proctor-sql-evil.db' AS evil",
    "vacuum_into": "VACUUM INTO '/tmp/proctor-sql-evil.db'",
    "vacuum": "VACUUM",
    "temp_table": "CREATE TEMP TABLE t AS SELECT * FROM book",
    "pragma_write": "PRAGMA writable_schema = ON",
    "pragma_journal": "PRAGMA journal_mode = DELETE",
    "pragma_read": "PRAGMA table_info(book)",
    "load_extension": "SELECT load_extension('/usr/lib/x86_64-linux-gnu/libsqlite3.so.0')",
    "recursive_cte": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c",
    "cross_join": "SELECT count(*) FROM loan a, loan b, loan c",
    "rows_16m": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 16000000) SELECT x FROM c",
    "zeroblob_1gb": "SELECT zeroblob(1000000000)",
    "randomblob_1gb": "SELECT randomblob(1000000000)",
    "printf_1gb": "SELECT length(printf('%.*c', 1000000000, 'x'))",
    "replace_blowup": "SELECT length(replace(printf('%.*c', 5000000, 'x'), 'x', 'yyyyyyyyyy'))",
    "empty": "",
    "comment_only": "-- nothing here",
    "block_comment_only": "/* DROP TABLE book */",
    "reindex": "REINDEX",
    "analyze": "ANALYZE",
    "begin": "BEGIN IMMEDIATE",
    "savepoint": "SAVEPOINT s",
    "create_view": "CREATE VIEW v AS SELECT 1",
    "replace_into": "REPLACE INTO branch VALUES (1, 'x', 'y', 2000)",
    "cte_delete": "WITH x AS (SELECT 1) DELETE FROM book",
    "deep_nesting": "SELECT " + "(" * 5000 + "1" + ")" * 5000,
    "huge_compound": " UNION ALL ".join(["SELECT 1"] * 600),
    "pragma_function": "SELECT * FROM pragma_table_info('book')",
    "introspection": "SELECT sqlite_compileoption_used('ENABLE_LOAD_EXTENSION')",
}


def folder_hashes(folder: Path) -> dict[str, str]:
    """sha256 of every file under folder (and the list of names), to prove nothing was written."""
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


@pytest.fixture
def databases(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    yield from library_databases(tmp_path, monkeypatch)


def test_hostile_battery_through_the_verifier_scores_zero_and_changes_nothing(databases: Path):
    before = folder_hashes(databases)
    spec = get_verifier("sql")
    reference = spec.parse_reference({"db_id": "library", "gold": GOLD})
    options = spec.parse_options({"timeout_s": TIMEOUT_S, "perturbations": 1})
    reasons = {}
    for name, sql in HOSTILE.items():
        started = time.monotonic()
        result = spec.score(f"```sql\n{sql}\n```", reference, options)
        assert time.monotonic() - started < BOUND_S, name
        assert (result.status, result.reward, result.correct) == (Status.ok, 0.0, False), (name, result)
        reasons[name] = result.reason
    assert (
        reasons["drop"] == reasons["several"] == reasons["empty"] == reasons["comment_only"] == "not_select"
    )
    assert reasons["recursive_cte"] == reasons["cross_join"] == "time_limit"
    assert reasons["rows_16m"] == "too_large"
    assert reasons["zeroblob_1gb"] == reasons["load_extension"] == "runtime_error"
    assert folder_hashes(databases) == before
    assert not Path("/tmp/proctor-sql-evil.db").exists()


def test_hostile_battery_straight_into_the_jailed_worker(databases: Path):
    """Without the statement check in front, the worker itself refuses every write and stops every runaway."""
    before = folder_hashes(databases)
    path = database_path("library")
    target = staged(path, f"{content_hash(path)}-0.sqlite")
    staged_before = hashlib.sha256(target.read_bytes()).hexdigest()
    outcomes = {}
    for name, sql in HOSTILE.items():
        started = time.monotonic()
        outcome = run_sqlite(target, sql, TIMEOUT_S, 100_000, 64 << 20)
        assert time.monotonic() - started < BOUND_S, name
        outcomes[name] = outcome
    refused = {name: o for name, o in outcomes.items() if isinstance(o, Failure)}
    assert set(refused) == set(HOSTILE), {name: o for name, o in outcomes.items() if name not in refused}
    assert refused["recursive_cte"].code == refused["cross_join"].code == "time_limit"
    assert refused["rows_16m"].code == "too_large"
    assert {refused[n].code for n in ("drop", "delete", "update", "insert", "attach", "temp_table")} == {
        "not_allowed"
    }
    assert folder_hashes(databases) == before
    assert hashlib.sha256(target.read_bytes()).hexdigest() == staged_before
    assert not Path("/tmp/proctor-sql-evil.db").exists()


def test_a_stuck_worker_is_killed_at_the_wall_deadline_and_replaced(databases: Path):
    """SIGSTOP makes the local worker ignore its own progress-handler deadline; the host must still answer.
    A stopped worker uses no CPU: that is the machine's fault (`wall_limit`), never the query's time_limit."""
    pool = SqliteWorkers()
    path = database_path("library")
    mounts = Mounts((str(path.parent),))
    request = {"sql": "SELECT count(*) FROM book", "timeout_s": 0.5, "max_rows": 10, "max_bytes": 1 << 20}
    try:
        assert pool.run(mounts, "local", path, request)["rows"] == [[120]]
        worker = pool.idle[0]
        os.kill(worker.proc.pid, signal.SIGSTOP)
        started = time.monotonic()
        reply = pool.run(mounts, "local", path, request)
        assert reply["error"] == "wall_limit" and time.monotonic() - started < BOUND_S
        assert worker.proc.poll() is not None  # killed and reaped
        assert pool.run(mounts, "local", path, request)["rows"] == [[120]]
        assert pool.started == 2
    finally:
        pool.close()


def test_a_stuck_worker_without_a_cpu_measure_is_a_wall_limit(
    databases: Path, monkeypatch: pytest.MonkeyPatch
):
    """Where the worker's CPU time cannot be read (nsjail without cgroups), silence is not the query's fault:
    the host waits for the wall backstop (the worker stops a query at its CPU time itself) and answers
    wall_limit, never time_limit after only the CPU limit's worth of wall time."""
    monkeypatch.setattr(Worker, "cpu_s", lambda self: None)
    pool = SqliteWorkers()
    path = database_path("library")
    mounts = Mounts((str(path.parent),))
    request = {"sql": "SELECT count(*) FROM book", "timeout_s": 0.5, "max_rows": 10, "max_bytes": 1 << 20}
    try:
        assert pool.run(mounts, "local", path, request)["rows"] == [[120]]
        worker = pool.idle[0]
        os.kill(worker.proc.pid, signal.SIGSTOP)
        started = time.monotonic()
        reply = pool.run(mounts, "local", path, request)
        assert reply["error"] == "wall_limit" and time.monotonic() - started < BOUND_S
        assert worker.proc.poll() is not None
    finally:
        pool.close()


def test_cache_inside_the_database_folder_is_refused(databases: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PROCTOR_SQL_CACHE_DIR", str(databases / "cache"))
    get_settings.cache_clear()
    spec = get_verifier("sql")
    result = spec.score(
        "SELECT 1", spec.parse_reference({"db_id": "library", "gold": GOLD}), spec.parse_options({})
    )
    assert result.status is Status.verifier_error and "inside the database folder" in result.details["error"]
    assert not (databases / "cache").exists()
