"""Batch-job hardening (issue-20 red teams): row and byte quotas (a Parquet decompression bomb is refused before
it is expanded, and nothing of a refused job is kept), the quotas per caller (unfinished jobs, stored bytes),
the JSONL pre-scan and reader counting the same rows, rows stored in committed batches under `ingesting`, the
claim's compare-and-set honouring a lease renewed since it was read, the retention sweep, a results stream
cut short by a deletion breaking off instead of ending cleanly, and the proxy's body limit for uploads
agreeing with the service's. Real SQLite and PostgreSQL, and the real service.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sqlalchemy import Engine, func, insert, select, update

from proctor import io, jobs
from proctor.db.connect import create_db_engine, migrate
from proctor.db.models import Job, JobResult, JobRow
from proctor.environments.tools.sessions import owner_of
from proctor.jobs import JobError, JobLimits, JobRunner, JobSpec, create_job, job_view, sweep
from proctor.rescore import EngineScorer
from proctor.settings import Settings
from tests.conftest import REPO_ROOT, ServerProcess, free_port, server_env
from tests.test_db_migrations import PostgresServer

TOKEN = "jobs-limits-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
MAX_ROWS = 100
MAX_BYTES = 200_000
MAX_ACTIVE = 2
MAX_STORED = 1_000_000


# -- files -------------------------------------------------------------------------------------------------


def bomb(path: Path, rows: int, size: int) -> Path:
    """A Parquet file of a few KB whose `rows` rows all repeat one `size`-byte value (dictionary-encoded and
    compressed: the file does not grow with either)."""
    values = pa.DictionaryArray.from_arrays(pa.array([0] * rows, type=pa.int32()), pa.array(["x" * size]))
    pq.write_table(
        pa.table({"response": values, "reference": pa.array(["1"] * rows)}), path, compression="zstd"
    )
    return path


def nested_bomb(path: Path, rows: int, per_row: int, size: int) -> Path:
    """Like `bomb`, with the value repeated `per_row` times inside each row's list (list<string>)."""
    values = pa.DictionaryArray.from_arrays(
        pa.array([0] * (rows * per_row), type=pa.int32()), pa.array(["x" * size])
    )
    offsets = pa.array(range(0, rows * per_row + 1, per_row), type=pa.int32())
    pq.write_table(pa.table({"tags": pa.ListArray.from_arrays(offsets, values)}), path, compression="zstd")
    return path


def text_rows(count: int, pad: int = 0) -> list[dict[str, Any]]:
    return [
        {"id": i, "verifier": "text.match", "response": f"a{i}" + " " * pad, "reference": f"a{i % 2}"}
        for i in range(count)
    ]


def table_counts(db: Engine) -> tuple[int, int, int]:
    """(jobs, input rows, results) in the whole database."""
    with db.connect() as connection:
        return tuple(
            connection.execute(select(func.count()).select_from(table)).scalar_one()
            for table in (Job, JobRow, JobResult)
        )  # type: ignore[return-value]


# -- the bounded Parquet reader ----------------------------------------------------------------------------


@pytest.mark.parametrize("nested", [False, True], ids=["column", "inside-lists"])
def test_a_parquet_bomb_is_refused_before_it_is_expanded(tmp_path: Path, nested: bool):
    if nested:  # 200 rows of lists of 10 references to one 4 MiB value
        path = nested_bomb(tmp_path / "bomb.parquet", rows=200, per_row=10, size=4 << 20)
    else:  # 2,000 rows of one 4 MiB value
        path = bomb(tmp_path / "bomb.parquet", rows=2000, size=4 << 20)
    assert path.stat().st_size < 64 << 10  # 8 GB of rows in a file of a few KB
    rows, size, leaves = io.parquet_shape(path)
    # The footer alone cannot tell: a value repeated counts once.
    assert (rows, leaves) == ((200, 2000) if nested else (2000, 4000)) and size < 5 << 20
    # In a fresh process, so that the peak of its memory is this read's alone.
    code = (
        "import resource, sys, pyarrow as pa\n"
        "from proctor import io\n"
        "def peak(): return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024\n"
        "before = peak()\n"
        "try:\n"
        "    for row in io.iter_parquet(sys.argv[1], batch_size=64, max_bytes=32 << 20): pass\n"
        "except io.DataTooLarge as exc: print('refused', exc)\n"
        "print('grew', peak() - before, 'arrow', pa.default_memory_pool().max_memory())\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(path)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "refused" in result.stdout and "more than 33554432 bytes" in result.stdout
    grew, arrow = map(int, re.search(r"grew (\d+) arrow (\d+)", result.stdout).groups())  # type: ignore[union-attr]
    # One batch of 64 rows expanded would be 256 MiB (2.5 GiB nested); the value itself is 4 MiB.
    assert grew < 48 << 20 and arrow < 24 << 20, result.stdout


def test_the_bounded_reader_gives_the_rows_the_plain_reader_gives(tmp_path: Path, monkeypatch):
    rows = [
        {"id": 0, "response": "héllo", "reference": {"answer": [1, 2]}, "tags": ["a", "b"], "blob": None},
        {"id": 1, "response": None, "reference": "x", "tags": [], "blob": "y" * 5000},
        *(
            {"id": i, "response": f"r{i}", "reference": str(i), "tags": ["c"], "blob": "z"}
            for i in range(2, 300)
        ),
    ]
    path = tmp_path / "rows.parquet"
    io.write_parquet(path, rows)
    plain = list(io.iter_parquet(path))
    assert plain == rows
    assert list(io.iter_parquet(path, batch_size=64, max_bytes=1 << 30)) == rows
    monkeypatch.setattr(io, "_DECODE_BYTES", 10)  # every row decoded on its own
    assert list(io.iter_parquet(path, batch_size=7, max_bytes=1 << 30)) == rows
    with pytest.raises(io.DataTooLarge):
        list(io.iter_parquet(path, batch_size=64, max_bytes=5000))
    nested = [
        {"id": i, "tags": [f"t{i}", None, "x" * i], "chat": [{"role": "u", "content": "c" * i}] if i % 3 else None,
         "m": {"a": [1, 2], "b": "s" * i}}
        for i in range(200)
    ]  # fmt: skip
    text = sum(len(f"t{i}") + 2 * i + (1 + i if i % 3 else 0) for i in range(200))  # every string's bytes
    path = tmp_path / "nested.parquet"
    io.write_parquet(path, nested)
    assert list(io.iter_parquet(path, batch_size=7, max_bytes=text)) == nested  # measured exactly...
    with pytest.raises(io.DataTooLarge):
        list(io.iter_parquet(path, batch_size=7, max_bytes=text - 1))  # ...nested strings included
    small = bomb(tmp_path / "dictionary.parquet", rows=300, size=10)  # a schema of dictionary<string>
    assert list(io.iter_parquet(small, batch_size=7, max_bytes=3000 + 300)) == list(io.iter_parquet(small))
    with pytest.raises(io.DataTooLarge):
        list(io.iter_parquet(small, batch_size=7, max_bytes=2999))


def test_jsonl_rows_and_giant_lines_are_refused_before_they_are_read(tmp_path: Path):
    path = tmp_path / "giant.jsonl"
    path.write_text('{"id": 0}\n\n   \n{"response": "' + "x" * (3 << 20) + '"}\n')
    with pytest.raises(JobError) as caught:
        jobs.read_input(path, "jsonl", JobLimits(max_bytes=1 << 20), field="input_path")
    assert caught.value.status == 413 and "PROCTOR_JOBS_MAX_BYTES" in caught.value.message
    assert (
        len(list(jobs.read_input(path, "jsonl", JobLimits(max_rows=2), field="file"))) == 2
    )  # blanks skipped
    with pytest.raises(JobError, match="PROCTOR_JOBS_MAX_ROWS"):
        jobs.read_input(path, "jsonl", JobLimits(max_rows=1), field="file")


def _scanned_rows(path: Path) -> int:
    """The row count the pre-scan finds: the least max_rows it lets through."""
    for count in range(1, 100):
        try:
            jobs._scan_jsonl(path, JobLimits(max_rows=count), "file")
        except JobError:
            continue
        return count
    raise AssertionError("more than 100 rows")


@pytest.mark.parametrize(
    "text",
    [
        '{"a": 1}\n{"a": 2}\n{"a": 3}\n',
        '{"a": 1}\r\n{"a": 2}\r\n\r\n{"a": 3}',  # CRLF, a blank CRLF line, no final line end
        '{"a": 1}\n \t\r\n{"a": 2}\r\n\n\n{"a": "\\r"}\r\n',  # blank space lines; an escaped \\r in a value
    ],
    ids=["lf", "crlf", "blanks"],
)
def test_the_jsonl_pre_scan_counts_the_rows_the_reader_reads(tmp_path: Path, text: str):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(text.encode())
    read = list(io.iter_jsonl(path))
    assert len(read) == 3 and _scanned_rows(path) == 3
    assert len(list(jobs.read_input(path, "jsonl", JobLimits(max_rows=3), field="file"))) == 3
    with pytest.raises(JobError, match="PROCTOR_JOBS_MAX_ROWS"):
        jobs.read_input(path, "jsonl", JobLimits(max_rows=2), field="file")


def test_a_bare_carriage_return_does_not_end_a_row_in_the_scan_or_the_reader(tmp_path: Path):
    path = tmp_path / "cr.jsonl"
    path.write_bytes(b'{"a": 1}\r{"a": 2}\r{"a": 3}\n')  # the red team's file: three rows to a \r reader
    assert _scanned_rows(path) == 1
    rows = jobs.read_input(path, "jsonl", JobLimits(max_rows=1), field="file")
    with pytest.raises(io.DataError, match="bare carriage return"):
        list(rows)  # one line, so not three rows past a quota of one: a 422 through the service


# -- quotas through the real service -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    base = tmp_path_factory.mktemp("jobs-limits")
    inputs = base / "inputs"
    inputs.mkdir()
    port = free_port()
    env = server_env(
        port,
        PROCTOR_POOL_WORKERS=1,
        PROCTOR_TOKEN=TOKEN,
        PROCTOR_DATA_DIR=str(base / "data"),
        PROCTOR_JOBS_INPUT_DIR=str(inputs),
        PROCTOR_JOBS_MAX_ROWS=MAX_ROWS,
        PROCTOR_JOBS_MAX_BYTES=MAX_BYTES,
        PROCTOR_JOBS_MAX_ACTIVE=MAX_ACTIVE,
        PROCTOR_JOBS_MAX_STORED_BYTES=MAX_STORED,
    )
    server = ServerProcess(env, base / "server.log")
    try:
        server.wait_ready(timeout_s=90)
        db = create_db_engine(f"sqlite:///{base / 'data' / 'proctor.db'}")
        with httpx.Client(base_url=server.base_url, headers=AUTH, timeout=60) as client:
            yield {"client": client, "inputs": inputs, "db": db}
        db.dispose()
    finally:
        server.stop()


def upload(client: httpx.Client, path: Path) -> httpx.Response:
    with path.open("rb") as handle:
        return client.post("/v1/jobs", files={"file": (path.name, handle)}, data={"verifier": "text.match"})


def from_path(client: httpx.Client, name: str) -> httpx.Response:
    return client.post("/v1/jobs", json={"input_path": name, "verifier": "text.match"})


def refused(answer: httpx.Response, setting: str, field: str) -> None:
    assert answer.status_code == 413, answer.text
    error = answer.json()["error"]
    assert setting in error["message"] and error["field"] == field, error


def test_uploads_and_input_paths_over_the_quotas_are_413_and_leave_nothing(service, tmp_path: Path):
    client: httpx.Client = service["client"]
    inputs: Path = service["inputs"]
    db: Engine = service["db"]
    cases = {
        # 50 rows of 100 kB from a file of a few hundred bytes: over the bytes only once expanded.
        "bomb.parquet": (lambda p: bomb(p, rows=50, size=100_000), "PROCTOR_JOBS_MAX_BYTES"),
        # One value over the quota, stored without a dictionary: the footer's data size says so, unread.
        "plain.parquet": (
            lambda p: pq.write_table(pa.table({"response": ["y" * 300_000]}), p, use_dictionary=False),
            "PROCTOR_JOBS_MAX_BYTES",
        ),
        "rows.parquet": (lambda p: io.write_parquet(p, text_rows(MAX_ROWS + 1)), "PROCTOR_JOBS_MAX_ROWS"),
        "rows.jsonl": (lambda p: io.write_jsonl(p, text_rows(MAX_ROWS + 1)), "PROCTOR_JOBS_MAX_ROWS"),
        "bytes.jsonl": (lambda p: io.write_jsonl(p, text_rows(60, pad=5000)), "PROCTOR_JOBS_MAX_BYTES"),
    }
    for name, (write, setting) in cases.items():
        write(tmp_path / name)
        write(inputs / name)
        refused(upload(client, tmp_path / name), setting, "file")
        refused(from_path(client, name), setting, "input_path")
        assert table_counts(db) == (0, 0, 0), name  # no job, no row: nothing half-made is kept
    assert bomb(tmp_path / "bomb.parquet", 50, 100_000).stat().st_size < 4096
    # At the limits exactly: accepted, stored and scored.
    io.write_jsonl(tmp_path / "full.jsonl", text_rows(MAX_ROWS))
    created = upload(client, tmp_path / "full.jsonl")
    assert created.status_code == 201, created.text
    assert created.json()["total"] == MAX_ROWS


def _plant(db: Engine, job_id: str, status: str, owner: str | None, rows: list[str], results: bool) -> None:
    """A job written straight into the service's database; a running one is leased far ahead by another
    host, so the service's runner leaves it alone."""
    values: dict[str, Any] = {"owner": owner, "total": len(rows), "done": len(rows) if results else 0}
    if status == "running":
        values.update(lease_owner="elsewhere|b|n|1|2|x", lease_expires=time.time() + 3600)
    else:
        values.update(finished_at=time.time())
    with db.begin() as connection:
        connection.execute(insert(Job).values(**_job(job_id, status, **values)))
        for start in range(0, len(rows), 5000):
            part = range(start, min(start + 5000, len(rows)))
            connection.execute(
                insert(JobRow), [{"job_id": job_id, "row_index": i, "data": rows[i]} for i in part]
            )
            if results:
                connection.execute(
                    insert(JobResult),
                    [
                        {
                            "job_id": job_id,
                            "row_index": i,
                            "status": "ok",
                            "reward": 1.0,
                            "score": '{"reward": 1.0}',
                        }
                        for i in part
                    ],
                )


def test_a_callers_unfinished_jobs_and_stored_bytes_are_capped(service, tmp_path: Path):
    client: httpx.Client = service["client"]
    db: Engine = service["db"]
    owner = owner_of(TOKEN)
    small = tmp_path / "small.jsonl"
    io.write_jsonl(small, text_rows(3))
    deadline = time.monotonic() + 60
    while True:  # the jobs earlier tests made have finished: only the ones planted here are unfinished
        with db.connect() as connection:
            if not connection.execute(select(Job.id).where(Job.status.in_(jobs.UNFINISHED))).first():
                break
        assert time.monotonic() < deadline, "an earlier job never finished"
        time.sleep(0.2)
    planted = [f"active{i}" for i in range(MAX_ACTIVE)]
    try:
        for job_id in planted:  # running on another replica, as far as this one knows
            _plant(db, job_id, "running", owner, ["{}"], results=False)
        before = table_counts(db)
        answer = upload(client, small)
        assert answer.status_code == 429, answer.text
        assert "PROCTOR_JOBS_MAX_ACTIVE" in answer.json()["error"]["message"]
        assert int(answer.headers["retry-after"]) >= 1
        assert table_counts(db) == before  # the refused job left nothing
        _plant(db, "someone-else", "running", "another-owner", ["{}"], results=False)
        jobs.delete_job(db, planted.pop())  # one finished (and went): room for one more
        created = upload(client, small)
        assert created.status_code == 201, created.text  # another owner's jobs do not count
        planted.append(created.json()["job_id"])
        # Stored bytes: a finished job kept for its retention still counts, up to the caller's total.
        for job_id in planted:
            jobs.delete_job(db, job_id)
        planted = ["kept"]
        _plant(db, "kept", "done", owner, ['"' + "k" * 9998 + '"'] * 90, results=True)  # 900,000 bytes
        io.write_jsonl(tmp_path / "over.jsonl", text_rows(10, pad=12_000))  # about 120 kB
        others = jobs.owner_stored_bytes(db, owner, reserve=MAX_BYTES)  # with earlier tests' finished jobs
        assert 900_000 <= others < MAX_STORED - 1000
        answer = upload(client, tmp_path / "over.jsonl")
        refused(answer, "PROCTOR_JOBS_MAX_STORED_BYTES", "file")
        assert f"keep {others} bytes" in answer.json()["error"]["message"]
        created = upload(client, small)  # what is left still takes a small file
        assert created.status_code == 201, created.text
        planted.append(created.json()["job_id"])
    finally:
        for job_id in [*planted, "someone-else"]:
            jobs.delete_job(db, job_id)


def test_a_results_stream_cut_short_by_a_deletion_breaks_off(service):
    client: httpx.Client = service["client"]
    db: Engine = service["db"]
    rows = [
        io.dumps_row({"id": i, "pad": "p" * 2000}) for i in range(20_000)
    ]  # 40 MB: more than sockets hold
    _plant(db, "cut", "done", None, rows, results=True)
    try:
        whole = client.get("/v1/jobs/cut/results")
        assert whole.status_code == 200 and whole.headers["x-proctor-job-results"] == "20000"
        assert len(whole.text.splitlines()) == 20_000
        with client.stream("GET", "/v1/jobs/cut/results") as answer:
            assert answer.status_code == 200
            lines = answer.iter_lines()
            assert json.loads(next(lines))["id"] == 0
            jobs.delete_job(db, "cut")  # the retention sweep, while the stream is read
            got = 1
            with pytest.raises(httpx.RemoteProtocolError):
                for _ in lines:
                    got += 1
        assert got < 20_000
    finally:
        jobs.delete_job(db, "cut")


# -- ingesting in committed batches ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    server = PostgresServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'jobs.db'}"
    else:
        url = request.getfixturevalue("postgres").new_database()
    engine = create_db_engine(url)
    migrate(engine)
    yield engine
    engine.dispose()


@pytest.fixture
def scorer() -> Iterator[EngineScorer]:
    made = EngineScorer(workers=1)
    yield made
    made.close()


def test_rows_are_stored_in_committed_batches_while_the_job_is_invisible(
    db: Engine, scorer: EngineScorer, monkeypatch
):
    monkeypatch.setattr(jobs, "INGEST_BATCH", 10)
    runner = JobRunner(db, scorer)
    other = create_job(db, text_rows(1), JobSpec(), field="file")["job_id"]
    seen: dict[str, Any] = {}

    def rows() -> Iterator[dict[str, Any]]:
        for i, row in enumerate(text_rows(35)):
            if i == 25:
                with db.connect() as connection:
                    job_id = connection.execute(
                        select(Job.id).where(Job.status == jobs.INGESTING)
                    ).scalar_one()
                    seen["stored"] = connection.execute(
                        select(func.count()).select_from(JobRow).where(JobRow.job_id == job_id)
                    ).scalar_one()
                seen["view"] = job_view(db, job_id, None)
                seen["claimed"] = [claim.id for claim in iter(runner.claim, None)]
                seen["other"] = _write_elsewhere(db, other)
            yield row

    job = create_job(db, rows(), JobSpec(), field="file")
    assert seen["stored"] == 20  # two batches committed and readable by another connection
    assert seen["view"] is None  # not a job yet for the API
    assert seen["claimed"] == [other]  # nor for a runner
    assert seen["other"] == 1  # and another writer was not locked out (SQLite: one writer at a time)
    assert job["status"] == "queued" and job["total"] == 35


def _write_elsewhere(db: Engine, job_id: str) -> int:
    """A write by another engine that gives up after 1 s: 'database is locked' if an ingest held the lock."""
    engine = create_db_engine(db.url)
    try:
        with engine.begin() as connection:
            if db.dialect.name == "sqlite":
                connection.exec_driver_sql("PRAGMA busy_timeout=1000")
            return connection.execute(update(Job).where(Job.id == job_id).values(error="touched")).rowcount
    finally:
        engine.dispose()


def test_a_job_over_its_quota_midway_is_deleted_with_its_committed_rows(db: Engine, monkeypatch):
    monkeypatch.setattr(jobs, "INGEST_BATCH", 10)
    rows = text_rows(50, pad=100)
    sizes = [len(io.dumps_row(row).encode()) for row in rows]
    limits = JobLimits(max_rows=1000, max_bytes=sum(sizes[:45]))
    with pytest.raises(JobError) as caught:
        create_job(db, rows, JobSpec(), field="file", limits=limits)
    assert caught.value.status == 413 and "PROCTOR_JOBS_MAX_BYTES" in caught.value.message
    assert caught.value.field == "file"
    with pytest.raises(JobError) as caught:
        create_job(db, rows, JobSpec(), field="input_path", limits=JobLimits(max_rows=30))
    assert caught.value.status == 413 and "PROCTOR_JOBS_MAX_ROWS" in caught.value.message
    assert caught.value.field == "input_path"

    def broken() -> Iterator[dict[str, Any]]:
        yield from rows[:25]
        raise io.DataError("line 26 is not valid JSON")

    with pytest.raises(JobError) as caught:
        create_job(db, broken(), JobSpec(), field="file")
    assert caught.value.status == 422
    assert table_counts(db) == (0, 0, 0)
    done = create_job(db, rows, JobSpec(), field="file", limits=JobLimits(max_rows=50, max_bytes=sum(sizes)))
    assert done["total"] == 50


def test_an_abandoned_ingest_is_swept_and_a_live_one_is_not(db: Engine):
    now = time.time()
    live = jobs.new_owner_id()
    # This host's process with this pid, but started at another time: that process is gone (its pid reused).
    dead_owner = "|".join([*live.split("|")[:4], "0", "x"])
    cases = {
        "expired": ("elsewhere|b|n|1|2|x", now - 1),  # another host's ingest whose lease ran out
        "dead": (dead_owner, now + 3600),  # this host's process, gone
        "live": (live, now + 3600),
        "other-host": ("elsewhere|b|n|1|2|x", now + 3600),  # cannot be judged: waits for its lease
    }
    with db.begin() as connection:
        for job_id, (owner, expires) in cases.items():
            connection.execute(
                insert(Job).values(**_job(job_id, jobs.INGESTING, lease_owner=owner, lease_expires=expires))
            )
            connection.execute(
                insert(JobRow), [{"job_id": job_id, "row_index": i, "data": "{}"} for i in range(3)]
            )
    with db.begin() as connection:  # a sweep that died half-way through deleting one
        connection.execute(insert(Job).values(**_job("half-deleted", jobs.DELETING)))
        connection.execute(insert(JobRow), [{"job_id": "half-deleted", "row_index": 5, "data": "{}"}])
    assert sorted(sweep(db, None)) == ["dead", "expired", "half-deleted"]
    with db.connect() as connection:
        left = connection.execute(select(JobRow.job_id).distinct()).scalars().all()
    assert sorted(left) == ["live", "other-host"]


def _job(job_id: str, status: str, **values: Any) -> dict[str, Any]:
    return {
        "id": job_id,
        "status": status,
        "response_field": "response",
        "reference_field": "reference",
        "source": "test",
        "total": 3,
        "done": 0,
        "claims": 0,
        "created_at": time.time(),
        **values,
    }


# -- retention ---------------------------------------------------------------------------------------------


def test_the_sweep_deletes_finished_jobs_past_retention_with_their_rows(db: Engine):
    now = time.time()
    day = 24 * 3600.0
    cases = {
        "old-done": ("done", now - 8 * day),
        "old-failed": ("failed", now - 8 * day),
        "old-cancelled": ("cancelled", now - 8 * day),
        "new-done": ("done", now - 6 * day),
        "old-queued": ("queued", None),  # unfinished jobs are never swept, however old
        "old-running": ("running", None),
    }
    with db.begin() as connection:
        for job_id, (status, finished) in cases.items():
            connection.execute(
                insert(Job).values(**_job(job_id, status, finished_at=finished, created_at=now - 30 * day))
            )
            connection.execute(
                insert(JobRow), [{"job_id": job_id, "row_index": i, "data": "{}"} for i in range(3)]
            )
            connection.execute(
                insert(JobResult),
                [
                    {"job_id": job_id, "row_index": i, "status": "ok", "reward": 1.0, "score": "{}"}
                    for i in range(2)
                ],
            )
    assert sweep(db, None) == []  # retention off: everything stays
    assert sorted(sweep(db, 7 * day)) == ["old-cancelled", "old-done", "old-failed"]
    with db.connect() as connection:
        for table in (Job,):
            assert sorted(connection.execute(select(table.id)).scalars()) == [
                "new-done",
                "old-queued",
                "old-running",
            ]
        for table in (JobRow, JobResult):
            kept = set(connection.execute(select(table.job_id)).scalars())
            assert kept == {"new-done", "old-queued", "old-running"}


def test_a_runner_sweeps_its_finished_jobs_in_the_background(db: Engine, scorer: EngineScorer, monkeypatch):
    monkeypatch.setattr(jobs, "SWEEP_ROWS", 4)  # several delete transactions per job
    runner = JobRunner(db, scorer, poll_s=0.1, retention_s=0.5, sweep_s=0.2)
    job_id = create_job(db, text_rows(10), JobSpec(), field="file")["job_id"]
    keep = create_job(db, text_rows(2), JobSpec(), field="file")["job_id"]
    with db.begin() as connection:  # cancelled before it runs, just now: not past retention for a while
        connection.execute(
            update(Job).where(Job.id == keep).values(status="cancelled", finished_at=time.time() + 3600)
        )
    runner.start()
    try:
        deadline = time.monotonic() + 60
        while job_view(db, job_id, None) is not None:
            assert time.monotonic() < deadline, "the finished job was never swept"
            time.sleep(0.1)
    finally:
        runner.stop()
    with db.connect() as connection:
        for table in (JobRow, JobResult):
            assert (
                connection.execute(
                    select(func.count()).select_from(table).where(table.job_id == job_id)
                ).scalar_one()
                == 0
            )
    assert job_view(db, keep, None) is not None


# -- quotas per owner, in the database ---------------------------------------------------------------------


def test_unfinished_jobs_are_capped_per_owner_and_globally_with_auth_off(db: Engine):
    limits = JobLimits(max_active=2)
    for owner in ("a", None):
        made = [
            create_job(db, text_rows(2), JobSpec(owner=owner), field="file", limits=limits) for _ in range(2)
        ]
        counts = table_counts(db)
        with pytest.raises(JobError) as caught:
            create_job(db, text_rows(2), JobSpec(owner=owner), field="file", limits=limits)
        assert caught.value.status == 429 and "PROCTOR_JOBS_MAX_ACTIVE" in caught.value.message
        assert table_counts(db) == counts  # nothing of the refused job is kept
        jobs.cancel_job(db, made[0]["job_id"], owner)  # a finished job no longer counts
        create_job(db, text_rows(2), JobSpec(owner=owner), field="file", limits=limits)
    # Each owner has its own count (None, auth off, is one count for all jobs): "b" still has room.
    create_job(db, text_rows(2), JobSpec(owner="b"), field="file", limits=limits)


def test_stored_bytes_are_capped_per_owner_counting_finished_jobs_in_utf8(db: Engine):
    rows = [{"id": i, "response": "é日本" * 50, "reference": "x"} for i in range(20)]  # multi-byte text
    size = sum(len(io.dumps_row(row).encode()) for row in rows)
    limits = JobLimits(max_stored_bytes=2 * size + 10)
    first = create_job(db, rows, JobSpec(owner="a"), field="file", limits=limits)
    assert jobs.owner_stored_bytes(db, "a", reserve=0) == size  # bytes, not characters
    jobs.cancel_job(db, first["job_id"], "a")  # finished, but its rows are still kept
    create_job(db, rows, JobSpec(owner="a"), field="file", limits=limits)
    counts = table_counts(db)
    with pytest.raises(JobError) as caught:
        create_job(db, rows[:1], JobSpec(owner="a"), field="input_path", limits=limits)
    assert caught.value.status == 413 and "PROCTOR_JOBS_MAX_STORED_BYTES" in caught.value.message
    assert caught.value.field == "input_path" and str(2 * size) in caught.value.message
    assert table_counts(db) == counts
    create_job(db, rows, JobSpec(owner="b"), field="file", limits=limits)  # another owner has its own
    jobs.delete_job(db, first["job_id"])  # retention deleted the first: room again
    create_job(db, rows, JobSpec(owner="a"), field="file", limits=limits)


def test_a_job_still_being_stored_counts_as_its_most_so_two_creations_never_pass_the_total(db: Engine):
    rows = text_rows(10, pad=100)
    size = sum(len(io.dumps_row(row).encode()) for row in rows)
    limits = JobLimits(max_bytes=2 * size, max_stored_bytes=3 * size)  # room for 1.5 of the biggest jobs
    seen: dict[str, Any] = {}

    def slow() -> Iterator[dict[str, Any]]:
        yield from rows[:5]
        # Another creation while this one is half stored: this one may still take 2 * size in all.
        try:
            create_job(db, rows + rows, JobSpec(owner="a"), field="file", limits=limits)
        except JobError as exc:
            seen["refused"] = exc
        seen["small"] = create_job(db, rows, JobSpec(owner="a"), field="file", limits=limits)
        yield from rows[5:]

    create_job(db, slow(), JobSpec(owner="a"), field="file", limits=limits)
    assert seen["refused"].status == 413 and "PROCTOR_JOBS_MAX_STORED_BYTES" in seen["refused"].message
    assert seen["small"]["total"] == 10
    assert jobs.owner_stored_bytes(db, "a", reserve=0) == 2 * size <= limits.max_stored_bytes


# -- a results stream cut short ----------------------------------------------------------------------------


def test_results_read_while_the_job_is_deleted_raise_instead_of_ending(db: Engine):
    _plant(db, "whole", "done", None, [io.dumps_row({"id": i}) for i in range(1200)], results=True)
    assert len(list(jobs.iter_results(db, "whole", page=500))) == 1200  # read whole: a clean end
    lines = jobs.iter_results(db, "whole", page=500)
    assert json.loads(next(lines))["id"] == 0
    jobs.delete_job(db, "whole", batch_rows=300)
    with pytest.raises(jobs.ResultsTruncated, match="500 of its 1200"):
        list(lines)  # the rest of the first page, then nothing: never a clean, short end
    # A cancelled job's results are its first rows only, and all of them: a clean end.
    _plant(db, "part", "cancelled", None, ["{}"] * 10, results=False)
    with db.begin() as connection:
        connection.execute(
            insert(JobResult),
            [
                {"job_id": "part", "row_index": i, "status": "ok", "reward": 1.0, "score": "{}"}
                for i in range(4)
            ],
        )
    assert len(list(jobs.iter_results(db, "part"))) == 4


# -- the claim's compare-and-set ---------------------------------------------------------------------------


def test_a_lease_renewed_after_a_claimant_read_it_expired_is_not_taken(db: Engine, scorer: EngineScorer):
    job_id = create_job(db, text_rows(5), JobSpec(), field="file")["job_id"]
    first = JobRunner(db, scorer, lease_s=60)
    second = JobRunner(db, scorer, lease_s=60)
    held = first.claim()
    assert held is not None and held.id == job_id
    with db.begin() as connection:  # the holder stalled past its lease (a long GC pause, a slow database)
        connection.execute(update(Job).where(Job.id == job_id).values(lease_expires=time.time() - 1))
    stale = second._candidates()
    assert [job.id for job in stale] == [job_id]  # the second runner sees an expired lease...
    assert first._renew(held)  # ...then the holder's heartbeat renews it...
    assert second._take(stale[0]) is None  # ...so the second runner's claim, made on what it read, fails
    with db.connect() as connection:
        owner, claims = connection.execute(select(Job.lease_owner, Job.claims).where(Job.id == job_id)).one()
    assert owner == first.owner_id and claims == 1
    # Once the lease has really lapsed, a fresh read takes the job, and the old holder is fenced off.
    with db.begin() as connection:
        connection.execute(update(Job).where(Job.id == job_id).values(lease_expires=time.time() - 1))
    taken = second.claim()
    assert taken is not None and taken.claims == 2
    assert not first._renew(held)


def test_two_claimants_of_one_queued_job_get_it_once(db: Engine, scorer: EngineScorer):
    job_id = create_job(db, text_rows(3), JobSpec(), field="file")["job_id"]
    runners = [JobRunner(db, scorer) for _ in range(2)]
    reads = [runner._candidates() for runner in runners]  # both read the job queued
    assert all([job.id for job in read] == [job_id] for read in reads)
    taken = [runner._take(read[0]) for runner, read in zip(runners, reads, strict=True)]
    assert [claim is not None for claim in taken] == [True, False]


# -- the proxy ---------------------------------------------------------------------------------------------


def test_the_proxy_takes_job_uploads_no_bigger_than_the_service_does():
    text = (REPO_ROOT / "docker" / "nginx.conf").read_text()
    block = re.search(r"location /v1/jobs \{(.*?)\}", text, re.S)
    assert block is not None
    size = re.search(r"client_max_body_size (\d+)m;", block.group(1))
    assert size is not None
    assert int(size.group(1)) << 20 == Settings.model_fields["max_body_bytes"].default
