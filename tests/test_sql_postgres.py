"""The `sql` verifier against a real PostgreSQL server started here (initdb + pg_ctl as the postgres user).

The server listens only on a unix socket in a private temporary folder, on a free port number; the verifier
connects as a read-only role. Skips only when the PostgreSQL binaries are missing.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from proctor.contract import Status
from proctor.registry import get_verifier
from proctor.settings import get_settings
from proctor.verifiers.sql.databases import Failure
from proctor.verifiers.sql.postgres import close_all, run_postgres
from proctor.verifiers.sql.workers import WorkerError
from tests.conftest import free_port

SETUP = """
CREATE TABLE item (id integer PRIMARY KEY, name text NOT NULL, price numeric(8, 2), stock integer, added date);
INSERT INTO item VALUES (1, 'pen', 1.25, 10, '2024-01-02'), (2, 'ink', 3.50, 0, NULL),
    (3, 'pad', 2.50, 10, '2024-03-04'), (4, 'pen', 1.25, 5, '2024-05-06'), (5, 'cap', 2.50, 7, NULL);
CREATE ROLE reader LOGIN;
ALTER ROLE reader SET default_transaction_read_only = on;
GRANT SELECT ON ALL TABLES IN SCHEMA public TO reader;
"""


def _binary(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"))
    return str(candidates[-1]) if candidates else None


def _as_postgres(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    prefix = [] if os.geteuid() != 0 else ["runuser", "-u", "postgres", "--"]
    return subprocess.run(prefix + argv, capture_output=True, text=True, timeout=120, **kwargs)


@pytest.fixture(scope="module")
def server() -> Iterator[dict[str, str]]:
    initdb, pg_ctl, psql = _binary("initdb"), _binary("pg_ctl"), shutil.which("psql")
    if not (initdb and pg_ctl and psql):
        pytest.skip("PostgreSQL binaries (initdb, pg_ctl, psql) not installed")
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root and there is no postgres user to run the server as")
    base = Path(tempfile.mkdtemp(prefix="proctor-pg-"))
    data, port = base / "data", free_port()
    try:
        if os.geteuid() == 0:
            shutil.chown(base, "postgres", "postgres")
        done = _as_postgres([initdb, "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync"])
        assert done.returncode == 0, done.stderr
        options = f"-p {port} -k {base} -c listen_addresses='' -c fsync=off"
        started = _as_postgres(
            [pg_ctl, "-D", str(data), "-o", options, "-l", str(base / "log"), "-w", "start"]
        )
        assert started.returncode == 0, started.stderr + (base / "log").read_text()
        psql_args = [psql, "-h", str(base), "-p", str(port), "-U", "postgres"]
        create = _as_postgres([*psql_args, "-c", "CREATE DATABASE shop"])
        assert create.returncode == 0, create.stderr
        setup = _as_postgres([*psql_args, "-d", "shop", "-v", "ON_ERROR_STOP=1"], input=SETUP)
        assert setup.returncode == 0, setup.stderr
        yield {
            "reader": f"host={base} port={port} dbname=shop user=reader",
            "owner": f"host={base} port={port} dbname=shop user=postgres",
            "down": f"host={base} port={free_port()} dbname=shop user=reader",
        }
    finally:
        close_all()
        if data.is_dir():
            _as_postgres([pg_ctl, "-D", str(data), "-m", "immediate", "stop"])
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def configured(server: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv("PROCTOR_SQL_POSTGRES", json.dumps(server))
    monkeypatch.setenv("PROCTOR_SQL_CACHE_DIR", str(tmp_path / "cache"))
    get_settings.cache_clear()
    yield server
    get_settings.cache_clear()


def score(response: str, gold, dsn_name: str = "reader", **options):
    spec = get_verifier("sql")
    reference = spec.parse_reference({"dsn_name": dsn_name, "gold": gold})
    return spec.score(response, reference, spec.parse_options(options))


def test_strict_comparison_on_postgres(configured):
    assert score("SELECT sum(price) / count(*) FROM item", "SELECT avg(price) FROM item").reward == 1.0
    assert score("SELECT round(avg(price)) FROM item", "SELECT avg(price) FROM item").reason == "rows"
    assert score("SELECT name FROM item ORDER BY id DESC", "SELECT name FROM item").reward == 1.0
    assert score("SELECT DISTINCT name FROM item", "SELECT name FROM item").reason == "rows"
    assert (
        score("SELECT name FROM item ORDER BY name DESC", "SELECT name FROM item ORDER BY name").reason
        == "order"
    )
    tied = "SELECT name FROM item ORDER BY price DESC LIMIT 2"  # ink, then pad or cap
    assert score("SELECT name FROM item ORDER BY price DESC, id DESC LIMIT 2", tied).reward == 1.0
    dates = score(
        "SELECT added FROM item WHERE added IS NOT NULL", "SELECT added FROM item WHERE id IN (1, 3, 4)"
    )
    assert dates.reward == 1.0
    assert (
        score("SELECT stock, name FROM item", "SELECT name, stock FROM item", comparator="bird").reward == 0.0
    )


def test_postgres_refuses_writes_and_stops_slow_queries(configured):
    assert score("DELETE FROM item", "SELECT 1").reason == "not_select"
    slow = score("SELECT pg_sleep(10)", "SELECT 1", timeout_s=0.5)
    assert (slow.status, slow.reason) == (Status.ok, "time_limit")
    dsn = configured["reader"]
    # Straight to the server, past the statement check: the read-only transaction and the cursor refuse.
    for sql in ["DELETE FROM item", "SELECT 1; DELETE FROM item", "CREATE TABLE x (a int)"]:
        outcome = run_postgres("reader", dsn, sql, 1.0, 100, 1 << 20)
        assert isinstance(outcome, Failure) and outcome.code == "runtime_error", sql
    # Even the owner's connection runs each query read-only.
    outcome = run_postgres("owner", configured["owner"], "SELECT * FROM item FOR UPDATE", 1.0, 100, 1 << 20)
    assert isinstance(outcome, Failure)
    too_many = run_postgres("reader", dsn, "SELECT generate_series(1, 1000000)", 5.0, 1000, 1 << 20)
    assert isinstance(too_many, Failure) and too_many.code == "too_large"
    count = run_postgres("reader", dsn, "SELECT count(*) FROM item", 1.0, 100, 1 << 20)
    assert count.rows == [(5,)]


def test_postgres_machinery_failures_are_not_zero_rewards(configured):
    gold_broken = score("SELECT 1", "SELECT nope FROM item")
    assert gold_broken.status is Status.verifier_error and "nope" in gold_broken.details["error"]
    down = score("SELECT 1", "SELECT 1", dsn_name="down")
    assert down.status is Status.verifier_error and down.reason == "sql_backend_error"
    with pytest.raises(WorkerError):
        run_postgres("down", configured["down"], "SELECT 1", 1.0, 10, 1 << 20)


def test_postgres_server_outlives_a_killed_statement(configured):
    started = time.monotonic()
    assert (
        score("SELECT count(*) FROM generate_series(1, 100000000)", "SELECT 1", timeout_s=0.3).reason
        == "time_limit"
    )
    assert time.monotonic() - started < 30
    assert score("SELECT 5", "SELECT count(*) FROM item").reward == 1.0


def test_postgres_gold_results_never_go_stale_on_disk(configured, tmp_path: Path):
    import psycopg

    from proctor.verifiers.sql.databases import gold_cache

    gold = "SELECT count(*) FROM item WHERE stock > 0"
    assert score("SELECT 4", gold).reward == 1.0
    assert not list((tmp_path / "cache" / "gold").glob("*.json"))  # a server's content has no hash to key by
    with psycopg.connect(configured["owner"], autocommit=True) as owner:
        owner.execute("INSERT INTO item VALUES (6, 'nib', 0.5, 3, NULL)")
        try:
            gold_cache.clear_memory()  # as a new process would start
            assert score("SELECT 5", gold).reward == 1.0
        finally:
            owner.execute("DELETE FROM item WHERE id = 6")
            gold_cache.clear_memory()


@pytest.mark.parametrize(
    "select",
    [
        "SELECT repeat('a', 600) FROM generate_series(1, 99999)",
        "SELECT repeat('a', 9000000) FROM generate_series(1, 3)",
        "SELECT decode(repeat('aa', 6000000), 'hex') FROM generate_series(1, 2)",
        "SELECT " + ", ".join(["g"] * 60) + " FROM generate_series(1, 99999) AS g",
    ],
    ids=["many-rows", "huge-values", "blobs-count-in-hex", "wide-rows-cell-cap"],
)
def test_postgres_huge_results_are_the_candidates_too_large(configured, select: str):
    started = time.monotonic()
    verdict = score(select, "SELECT count(*) FROM item")
    assert (verdict.status, verdict.reason, verdict.reward) == (Status.ok, "too_large", 0.0), verdict
    assert time.monotonic() - started < 8.0
