"""Batch jobs: a file's rows scored through the service's engine, surviving restarts and dead replicas.

A job's input rows are copied into the database when it is created, so any replica sharing the database
can run it. One runner thread per service process claims a job with a lease (compare-and-set on the job's
claim counter), scores its rows in order with the same request building and chunk scoring as
`proctor rescore` (`rescore.build_request` through `rescore.score_chunk`), and writes each chunk's results
in one transaction that first checks it still holds the lease. Results are keyed (job_id, row_index), and
a chunk is written only by the lease holder, so a chunk scored twice (its replica died before the write, or
lost the lease while scoring) is written once; rows are never lost, since the runner always scores the rows
that have no result yet.

A heartbeat renews the lease while a chunk is scored. A replica that dies stops renewing it; another claims
the job when the lease expires, or at once when the dead owner was a process on the same host (its pid is
gone). A graceful shutdown hands the job back as queued.

A job is stored in committed batches while it is `ingesting` (invisible until all its rows are in, so a big
file never holds SQLite's write lock for long), within `JobLimits` of rows and stored bytes; a refused or
failed creation deletes what it stored. A sweep on each runner deletes finished jobs past their retention,
and ingests whose process died.
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, LargeBinary, cast, delete, func, insert, select, update
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError, SQLAlchemyError

from proctor import io
from proctor.contract import ItemError, RequestError, Score
from proctor.db.models import Job, JobResult, JobRow
from proctor.rescore import RescoreConfig, Scorer, score_chunk

log = logging.getLogger(__name__)

LEASE_S = 30.0
"""How long a claim lasts without a heartbeat; replicas' clocks must agree to well within this."""
CHUNK_ROWS = 256
"""Rows fetched, scored and written together at most."""
FLUSH_S = 1.0
"""Results are written at least this often while a chunk of slow rows is scored."""
POLL_S = 1.0
"""How often an idle runner looks for work (a job created in this process wakes it at once)."""
INGEST_BATCH = 1000
"""Rows written (and committed) together while a job is created, at most."""
INGEST_BATCH_BYTES = 8 << 20
"""Bytes of rows written together while a job is created, at most: a long ingest never holds SQLite's write
lock for more than one such batch, and keeps at most this much of the file in memory."""
PARQUET_BATCH_ROWS = 256
"""Rows a job's Parquet input is decoded in at a time, at most (and about 8 MiB of text: `io.iter_parquet`)."""
DEFAULT_MAX_ROWS = 1_000_000
DEFAULT_MAX_BYTES = 1 << 30
RETENTION_S = 7 * 24 * 3600.0
"""How long a finished job and its rows are kept by default."""
SWEEP_S = 300.0
"""How often a runner deletes jobs past their retention, and jobs whose creation was abandoned."""
SWEEP_ROWS = 10_000
"""Rows deleted per transaction by the sweep, so it never holds SQLite's write lock for long."""
INGESTING = "ingesting"
"""A job whose rows are still being stored: invisible to the API and to runners until it becomes queued."""
DELETING = "deleting"
"""A job the sweep has taken to delete (an abandoned ingest): invisible, and deleted by any later sweep."""
HIDDEN = (INGESTING, DELETING)
UNFINISHED = ("queued", "running")
FINISHED = ("done", "failed", "cancelled")
_RETRY_MIN_S = 0.5
_RETRY_MAX_S = 10.0


class JobError(RequestError):
    """A job request that cannot be honoured (the status and the field it names go to the client)."""


# -- creating and reading jobs ----------------------------------------------------------------------------


@dataclass
class JobSpec:
    """What a job scores: the default verifier and the fields that hold response and reference."""

    verifier: str | None = None
    response_field: str = "response"
    reference_field: str = "reference"
    owner: str | None = None
    source: str = ""


def new_job_id() -> str:
    """A fresh unguessable job id (32 hex digits)."""
    return uuid.uuid4().hex


def check_spec(spec: JobSpec) -> None:
    """Raise JobError naming the field when the verifier is unknown or a field name is empty."""
    from proctor.registry import get_verifier

    if spec.verifier is not None:
        if not spec.verifier.strip():
            raise JobError(422, "verifier must be a verifier name or left out", "verifier")
        get_verifier(spec.verifier)  # RequestError(404) naming `verifier` and the known ones
    for name, value in (("response_field", spec.response_field), ("reference_field", spec.reference_field)):
        if not value or len(value) > 200:
            raise JobError(422, f"{name} must be a field name of 1 to 200 characters", name)


@dataclass(frozen=True)
class JobLimits:
    """How much one job may store (rows, and bytes of rows as stored: the JSON text of each input row), and
    how much one owner's jobs may hold together: jobs not yet finished (`max_active`), and bytes of rows
    of all the jobs still kept, finished ones included (`max_stored_bytes`). None: that total is not checked
    (the service always sets both). Jobs made with auth off have no owner, so for them the totals are global.
    """

    max_rows: int = DEFAULT_MAX_ROWS
    max_bytes: int = DEFAULT_MAX_BYTES
    max_active: int | None = None
    max_stored_bytes: int | None = None

    def too_many_rows(self, field: str) -> JobError:
        """The 413 for a file with more rows than allowed."""
        return JobError(
            413, f"the file holds more than {self.max_rows} rows (PROCTOR_JOBS_MAX_ROWS); split it", field
        )

    def too_many_bytes(self, field: str) -> JobError:
        """The 413 for a file whose rows take more bytes than allowed."""
        return JobError(
            413,
            f"the file's rows take more than {self.max_bytes} bytes once stored (PROCTOR_JOBS_MAX_BYTES); "
            "split it",
            field,
        )

    def too_many_active(self, active: int) -> JobError:
        """The 429 for an owner with `max_active` jobs not finished yet (a retry succeeds once one finishes)."""
        return JobError(
            429,
            f"this caller already has {active} jobs not finished (queued, running or being stored); at most "
            f"{self.max_active} at a time (PROCTOR_JOBS_MAX_ACTIVE): wait for one to finish, or cancel one",
        )

    def too_many_stored(self, field: str, others: int) -> JobError:
        """The 413 for a job that would take its owner's jobs past `max_stored_bytes` in all."""
        return JobError(
            413,
            f"this caller's other jobs keep {others} bytes of rows, and with this file they would keep more "
            f"than {self.max_stored_bytes} (PROCTOR_JOBS_MAX_STORED_BYTES); finished jobs count until "
            "PROCTOR_JOBS_RETENTION_S deletes them: wait, or split the file",
            field,
        )


def read_input(
    path: str | os.PathLike[str], kind: str, limits: JobLimits, *, field: str
) -> Iterator[dict[str, Any]]:
    """The rows of a job's input file, read within `limits`: a Parquet file's footer is checked before
    anything is decompressed (its row count, the size of its data once decompressed, and its count of leaf
    values, which bounds what lists of numbers expand to), and it is read a
    few rows at a time with its text measured before it is expanded (`io.iter_parquet`). `kind` is the
    format (`jsonl` or `parquet`); a footer that cannot be read is an io.DataError."""
    if kind == "jsonl":
        _scan_jsonl(path, limits, field)
        return io.iter_jsonl(path)
    rows, size, leaves = io.parquet_shape(path)
    if rows > limits.max_rows:
        raise limits.too_many_rows(field)
    if size > limits.max_bytes or leaves > limits.max_bytes:  # each leaf value is at least a byte of JSON
        raise limits.too_many_bytes(field)
    return io.iter_parquet(path, batch_size=PARQUET_BATCH_ROWS, max_bytes=limits.max_bytes)


_JSON_SPACE = io.JSON_SPACE.encode()


def _scan_jsonl(path: str | os.PathLike[str], limits: JobLimits, field: str) -> None:
    """Refuse a JSONL file with more non-blank lines than `max_rows`, or a line longer than `max_bytes`,
    reading it a MiB at a time: before anything is stored, and without holding a giant line in memory.
    Lines end at `\\n` only, as `io.iter_jsonl` reads them (a `\\r` before it is blank space, a bare `\\r` is
    part of the line), so the two count the same rows."""
    rows = 0
    line = 0  # bytes of the current line so far
    blank = True
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed below
    except OSError:
        return  # the reader says why
    with handle:
        while chunk := handle.read(1 << 20):
            pieces = chunk.split(b"\n")
            for index, piece in enumerate(pieces):
                line += len(piece)
                blank = blank and not piece.strip(_JSON_SPACE)
                if line > limits.max_bytes:
                    raise limits.too_many_bytes(field)
                if index < len(pieces) - 1:  # the line ends here
                    rows += 0 if blank else 1
                    if rows > limits.max_rows:
                        raise limits.too_many_rows(field)
                    line, blank = 0, True
    rows += 0 if blank else 1
    if rows > limits.max_rows:
        raise limits.too_many_rows(field)


def create_job(
    db: Engine,
    rows: Iterable[dict[str, Any]],
    spec: JobSpec,
    *,
    field: str,
    job_id: str | None = None,
    limits: JobLimits | None = None,
) -> dict[str, Any]:
    """Store a job with all its rows, then queue it; returns the job's view.

    The rows are written in committed batches while the job is `ingesting` (invisible to callers and runners),
    so a big file never holds the database's write lock for long. A file over `limits` is a 413, one that
    cannot be read (io.DataError) or holds no rows a 422, each naming `field`; then, as after any other
    failure, the half-made job is deleted (and if this process dies first, the sweep deletes it once its
    ingest lease expires)."""
    check_spec(spec)
    limits = limits or JobLimits()
    job_id = job_id or new_job_id()
    holder = new_owner_id()
    now = time.time()
    with db.begin() as connection:
        connection.execute(
            insert(Job).values(
                id=job_id,
                status=INGESTING,
                owner=spec.owner,
                verifier=spec.verifier,
                response_field=spec.response_field,
                reference_field=spec.reference_field,
                source=spec.source[:1000],
                total=0,
                done=0,
                claims=0,
                created_at=now,
                lease_owner=holder,
                lease_expires=now + LEASE_S,
            )
        )
    try:
        # Checked after the job's own insert is committed, so of two creations at once the later check sees
        # the other (at worst both are refused; never both let through past the totals).
        allowance, others = _owner_allowance(db, job_id, spec.owner, limits)
        total = stored = 0
        batch: list[dict[str, Any]] = []
        batch_bytes = 0
        for row in rows:
            data = io.dumps_row(row)
            size = len(data.encode("utf-8"))
            total += 1
            stored += size
            if total > limits.max_rows:
                raise limits.too_many_rows(field)
            if stored > limits.max_bytes:
                raise limits.too_many_bytes(field)
            if allowance is not None and stored > allowance:
                raise limits.too_many_stored(field, others)
            batch.append({"job_id": job_id, "row_index": total - 1, "data": data})
            batch_bytes += size
            if len(batch) >= INGEST_BATCH or batch_bytes >= INGEST_BATCH_BYTES:
                _ingest(db, job_id, holder, batch)
                batch, batch_bytes = [], 0
        if batch:
            _ingest(db, job_id, holder, batch)
        if total == 0:
            raise JobError(422, "the file holds no rows", field)
        with db.begin() as connection:
            queued = connection.execute(
                update(Job)
                .where(Job.id == job_id, Job.status == INGESTING, Job.lease_owner == holder)
                .values(status="queued", total=total, lease_owner=None, lease_expires=None)
            ).rowcount
        if queued != 1:
            raise JobError(503, "the job was removed while its rows were stored (too slow); retry")
    except BaseException as exc:
        try:
            delete_job(db, job_id)
        except SQLAlchemyError:
            # The database is what failed: the sweep deletes the job once its ingest lease expires.
            log.warning("jobs: could not delete the half-made job %s; the sweep will", job_id)
        if isinstance(exc, io.DataTooLarge):
            raise limits.too_many_bytes(field) from None
        if isinstance(exc, io.DataError):
            raise JobError(422, str(exc), field) from None
        raise
    view = job_view(db, job_id, spec.owner)
    if view is None:  # deleted since (a retention of seconds, say): the job is not there to run
        raise JobError(503, "the job was removed as soon as it was stored; retry")
    return view


def _of_owner(owner: str | None) -> Any:
    return Job.owner.is_(None) if owner is None else Job.owner == owner


def _owner_allowance(db: Engine, job_id: str, owner: str | None, limits: JobLimits) -> tuple[int | None, int]:
    """(bytes job `job_id` may store under its owner's total, None when unchecked; bytes its owner's other
    jobs hold), after refusing with a 429 an owner with more than `max_active` unfinished jobs, this one
    included. Counted in the database, so the totals hold across replicas."""
    if limits.max_active is not None:
        with db.connect() as connection:
            active = connection.execute(
                select(func.count())
                .select_from(Job)
                .where(_of_owner(owner), Job.status.in_((INGESTING, *UNFINISHED)))
            ).scalar_one()
        if active > limits.max_active:
            raise limits.too_many_active(active - 1)
    if limits.max_stored_bytes is None:
        return None, 0
    others = owner_stored_bytes(db, owner, exclude=job_id, reserve=limits.max_bytes)
    return limits.max_stored_bytes - others, others


_JOB_BYTES: dict[tuple[str, str], int] = {}
"""Bytes of rows of jobs whose rows no longer change (every status but ingesting and deleting), by (database,
job id): each replica sums a job's rows once, not at every creation by its owner."""
_JOB_BYTES_LOCK = threading.Lock()


def owner_stored_bytes(db: Engine, owner: str | None, *, exclude: str | None = None, reserve: int) -> int:
    """Bytes of input rows the jobs of `owner` (None: the jobs made with auth off) keep in the database, but
    `exclude`'s. A job still being stored counts as `reserve` bytes (the most it may store): a creation that
    checks after another started cannot take what the other may still store."""
    with db.connect() as connection:
        kept = connection.execute(
            select(Job.id, Job.status).where(_of_owner(owner), Job.id != (exclude or ""))
        ).all()
    database = db.url.render_as_string(hide_password=True)
    total = 0
    unknown: list[str] = []
    for job_id, status in kept:
        if status == INGESTING:
            total += reserve
            continue
        with _JOB_BYTES_LOCK:
            known = _JOB_BYTES.get((database, job_id))
        if known is None:
            unknown.append(job_id)
        else:
            total += known
    immutable = {job_id for job_id, status in kept if status not in HIDDEN}
    for start in range(0, len(unknown), 500):  # one query per 500 jobs, after a restart say
        for job_id, size in _jobs_bytes(db, unknown[start : start + 500]).items():
            total += size
            if job_id in immutable:
                with _JOB_BYTES_LOCK:
                    if len(_JOB_BYTES) >= 100_000:  # deleted jobs' entries are never read again
                        _JOB_BYTES.clear()
                    _JOB_BYTES[(database, job_id)] = size
    return total


def _jobs_bytes(db: Engine, job_ids: list[str]) -> dict[str, int]:
    """Bytes of each job's rows as stored (UTF-8), summed in the database; a job without rows is left out."""
    if db.dialect.name == "postgresql":
        size: Any = func.octet_length(JobRow.data)  # read from the value's header, not the value
    else:
        size = func.length(cast(JobRow.data, LargeBinary))  # SQLite's length() of text counts characters
    with db.connect() as connection:
        sums = connection.execute(
            select(JobRow.job_id, func.sum(size)).where(JobRow.job_id.in_(job_ids)).group_by(JobRow.job_id)
        ).all()
    return {job_id: int(total or 0) for job_id, total in sums}


def _ingest(db: Engine, job_id: str, holder: str, batch: list[dict[str, Any]]) -> None:
    """Write a batch of input rows in one transaction, renewing the ingest's lease."""
    with db.begin() as connection:
        held = connection.execute(
            update(Job)
            .where(Job.id == job_id, Job.status == INGESTING, Job.lease_owner == holder)
            .values(lease_expires=time.time() + LEASE_S)
        ).rowcount
        if held != 1:
            raise JobError(503, "the job was removed while its rows were stored (too slow); retry")
        connection.execute(insert(JobRow), batch)


def delete_job(db: Engine, job_id: str, batch_rows: int = SWEEP_ROWS) -> None:
    """Delete a job with its rows and results, a batch of rows per transaction."""
    for table in (JobResult, JobRow):
        while True:
            with db.begin() as connection:
                first = connection.execute(
                    select(func.min(table.row_index)).where(table.job_id == job_id)
                ).scalar_one()
                if first is None:
                    break
                connection.execute(
                    delete(table).where(table.job_id == job_id, table.row_index < first + batch_rows)
                )
    with db.begin() as connection:
        connection.execute(delete(Job).where(Job.id == job_id))


def sweep(db: Engine, retention_s: float | None, now: float | None = None) -> list[str]:
    """Delete finished jobs older than `retention_s` (None: keep them) and jobs whose creation was abandoned
    (an ingest whose lease expired, or whose process on this host is gone); returns their ids."""
    now = time.time() if now is None else now
    with db.connect() as connection:
        ingesting = connection.execute(
            select(Job.id, Job.lease_owner, Job.lease_expires).where(Job.status == INGESTING)
        ).all()
        doomed = list(connection.execute(select(Job.id).where(Job.status == DELETING)).scalars())
        if retention_s is not None:
            doomed += connection.execute(
                select(Job.id)
                .where(Job.status.in_(FINISHED), Job.finished_at < now - retention_s)
                .order_by(Job.finished_at)
                .limit(100)
            ).scalars()
    for job in ingesting:
        if job.lease_expires is not None and job.lease_expires >= now and not owner_is_dead(job.lease_owner):
            continue
        # Taken by compare-and-set on the lease as read: an ingest that renewed it since is alive after all,
        # and one that finishes later finds its job gone and fails, instead of queueing a job losing rows.
        with db.begin() as connection:
            taken = connection.execute(
                update(Job)
                .where(
                    Job.id == job.id,
                    Job.status == INGESTING,
                    Job.lease_owner == job.lease_owner,
                    Job.lease_expires == job.lease_expires,
                )
                .values(status=DELETING)
            ).rowcount
        if taken == 1:
            doomed.append(job.id)
    for job_id in doomed:
        delete_job(db, job_id)
    return doomed


def _visible(job: Any, owner: str | None) -> bool:
    # A job made with auth on is its token's; one made with auth off is anyone's (its id is unguessable).
    return job.owner is None or job.owner == owner


def job_view(db: Engine, job_id: str, owner: str | None) -> dict[str, Any] | None:
    """The job as the API shows it, with its result counts by status; None when absent or not the caller's."""
    with db.connect() as connection:
        job = connection.execute(select(Job).where(Job.id == job_id)).first()
        if job is None or job.status in HIDDEN or not _visible(job, owner):
            return None
        counts = dict(
            connection.execute(
                select(JobResult.status, func.count())
                .where(JobResult.job_id == job_id)
                .group_by(JobResult.status)
            ).all()
        )
    return {
        "job_id": job.id,
        "status": job.status,
        "total": job.total,
        "done": job.done,
        "counts": {str(status): int(count) for status, count in sorted(counts.items())},
        "verifier": job.verifier,
        "response_field": job.response_field,
        "reference_field": job.reference_field,
        "source": job.source,
        "error": job.error,
        "created_at": job.created_at,
        "started_at": job.started_at,
        "finished_at": job.finished_at,
    }


def cancel_job(db: Engine, job_id: str, owner: str | None) -> dict[str, Any] | None:
    """Cancel a queued or running job (its runner stops at its next check); a finished job is a 409."""
    view = job_view(db, job_id, owner)
    if view is None:
        return None
    with db.begin() as connection:
        connection.execute(
            update(Job)
            .where(Job.id == job_id, Job.status.in_(UNFINISHED))
            .values(status="cancelled", finished_at=time.time(), lease_owner=None, lease_expires=None)
        )
    view = job_view(db, job_id, owner)
    assert view is not None
    if view["status"] in ("done", "failed"):
        raise JobError(409, f"job {job_id} is already {view['status']}; there is nothing to cancel", "job_id")
    return view


class ResultsTruncated(RuntimeError):
    """The job's results went away while they were read (the retention sweep deleted the job)."""


def result_count(db: Engine, job_id: str) -> int:
    """How many of the job's rows have a result."""
    with db.connect() as connection:
        return connection.execute(
            select(func.count()).select_from(JobResult).where(JobResult.job_id == job_id)
        ).scalar_one()


def iter_results(db: Engine, job_id: str, page: int = 500, expected: int | None = None) -> Iterator[str]:
    """Each scored row as a JSONL line (the input row with its `score`, as `proctor rescore` writes it), in
    input order, read a page at a time. A finished job's results do not change, so fewer lines than
    `expected` (default: the count of results when reading starts) means the job was deleted meanwhile:
    ResultsTruncated is raised after the last line read, never a clean end (the service then drops the
    connection, so the client sees a broken response, not a short one)."""
    if expected is None:
        expected = result_count(db, job_id)
    sent = 0
    after = -1
    while True:
        with db.connect() as connection:
            rows = connection.execute(
                select(JobRow.row_index, JobRow.data, JobResult.score)
                .join(
                    JobResult,
                    (JobResult.job_id == JobRow.job_id) & (JobResult.row_index == JobRow.row_index),
                )
                .where(JobRow.job_id == job_id, JobRow.row_index > after)
                .order_by(JobRow.row_index)
                .limit(page)
            ).all()
        if not rows:
            break
        for index, data, score in rows:
            row = json.loads(data)
            row["score"] = json.loads(score)
            yield io.dumps_row(row) + "\n"
            sent += 1
            after = index
    if sent != expected:
        raise ResultsTruncated(
            f"job {job_id}: {sent} of its {expected} results could be read; it was deleted (retention) meanwhile"
        )


# -- who holds a lease --------------------------------------------------------------------------------------


def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


def _host_identity() -> tuple[str, str, str]:
    """Host name, boot id and pid namespace: two processes agreeing on all three can see each other's pids."""
    try:
        pid_ns = os.readlink("/proc/self/ns/pid")
    except OSError:
        pid_ns = ""
    return socket.gethostname(), _read("/proc/sys/kernel/random/boot_id"), pid_ns


def _process_started(pid: int) -> str | None:
    """The start time (clock ticks since boot) of a live process; None when it is gone or a zombie."""
    stat = _read(f"/proc/{pid}/stat")
    if not stat:
        return None
    fields = stat.rpartition(")")[2].split()
    if not fields or fields[0] in ("Z", "X"):
        return None
    return fields[19] if len(fields) > 19 else None


def new_owner_id() -> str:
    """A lease owner id naming this process on this host, unique per runner."""
    host, boot, pid_ns = _host_identity()
    pid = os.getpid()
    return "|".join((host, boot, pid_ns, str(pid), _process_started(pid) or "", uuid.uuid4().hex[:8]))


def owner_is_dead(owner: str | None) -> bool:
    """Whether `owner` was a process of this host (same boot, same pid namespace) that no longer runs.

    An owner on another host, or one this process cannot judge, is never called dead: its lease expires.
    """
    parts = (owner or "").split("|")
    if len(parts) != 6 or not parts[1] or not parts[4]:
        return False
    if tuple(parts[:3]) != _host_identity():
        return False
    try:
        pid = int(parts[3])
    except ValueError:
        return False
    return _process_started(pid) != parts[4]


# -- the runner ---------------------------------------------------------------------------------------------


class _Stopped(Exception):
    """The runner is stopping: leave the job for the next runner."""


class _LeaseLost(Exception):
    """Another runner holds the job now, or it was cancelled: write nothing more."""


@dataclass
class _Claim:
    id: str
    config: RescoreConfig
    claims: int
    owner: str | None = None


job_owner: contextvars.ContextVar[str | None] = contextvars.ContextVar("proctor_job_owner", default=None)
"""The owner key of the job whose rows the runner thread is scoring (for the audit record of each score)."""


def _transient(exc: BaseException) -> bool:
    """A lost or refused connection (the database restarts, fails over, is unreachable): worth a retry."""
    if isinstance(exc, (OperationalError, InterfaceError)):
        return True
    return isinstance(exc, DBAPIError) and exc.connection_invalidated


def _insert_ignoring_duplicates(db: Engine) -> Any:
    dialect = db.dialect.name
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert(JobResult).on_conflict_do_nothing(index_elements=["job_id", "row_index"])
    if dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        return sqlite_insert(JobResult).on_conflict_do_nothing(index_elements=["job_id", "row_index"])
    return insert(JobResult)  # the lease check before it is what keeps rows single on other databases


def result_fields(score: Score | ItemError | dict[str, Any]) -> tuple[str, float | None]:
    """The (status, reward) stored beside a row's score: `rejected` for an item error; a reward only when ok."""
    data = score if isinstance(score, dict) else score.model_dump(mode="json")
    if "error" in data:
        return "rejected", None
    status = str(data["status"])
    return status, float(data["reward"]) if status == "ok" else None


class JobRunner:
    """Claims jobs from the database and scores them with `scorer`, one job at a time, on its own thread."""

    def __init__(
        self,
        db: Engine,
        scorer: Scorer | Callable[[], Scorer],
        *,
        window: int = 8,
        lease_s: float = LEASE_S,
        poll_s: float = POLL_S,
        chunk_rows: int = CHUNK_ROWS,
        flush_s: float = FLUSH_S,
        ready: Callable[[], None] | None = None,
        retention_s: float | None = RETENTION_S,
        sweep_s: float = SWEEP_S,
    ):
        self.db = db
        self._scorer = scorer
        self.window = max(1, window)
        self.lease_s = lease_s
        self.poll_s = poll_s
        self.chunk_rows = max(1, chunk_rows)
        self.flush_s = flush_s
        self.ready = ready or (lambda: None)
        self.retention_s = retention_s
        self.sweep_s = sweep_s
        self.owner_id = new_owner_id()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._lost = threading.Event()
        self._current: _Claim | None = None
        self._threads: list[threading.Thread] = []
        self._db_failing = False

    @property
    def scorer(self) -> Scorer:
        """The scorer (built on first use when a factory was given)."""
        scorer = self._scorer
        return scorer if hasattr(scorer, "score_batch") else scorer()  # type: ignore[operator, return-value]

    # -- lifecycle --

    def start(self) -> None:
        """Start the runner, heartbeat and sweep threads."""
        threads = (
            (self._loop, "proctor-jobs"),
            (self._heartbeat, "proctor-jobs-heartbeat"),
            (self._sweeper, "proctor-jobs-sweep"),
        )
        for target, name in threads:
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def wake(self) -> None:
        """Look for work now (a job was just created)."""
        self._wake.set()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop: a chunk being scored is dropped unwritten and its job handed back as queued."""
        self._stop.set()
        self._wake.set()
        for thread in self._threads:
            thread.join(timeout_s)

    # -- the loop --

    def _loop(self) -> None:
        delay = _RETRY_MIN_S
        while not self._stop.is_set():
            try:
                self.ready()
                claim = self.claim()
                self._db_ok()
            except SQLAlchemyError as exc:
                self._db_down(exc)
                self._stop.wait(delay)
                delay = min(delay * 2, _RETRY_MAX_S)
                continue
            except Exception:
                log.exception("jobs: the runner could not look for work")
                self._stop.wait(_RETRY_MAX_S)
                continue
            delay = _RETRY_MIN_S
            if claim is None:
                self._wake.wait(self.poll_s)
                self._wake.clear()
                continue
            self.run_claim(claim)

    def run_claim(self, claim: _Claim) -> None:
        """Score a claimed job to its end, or until the lease is lost or the runner stops."""
        self._lost.clear()
        self._current = claim
        token = job_owner.set(claim.owner)
        try:
            self._run(claim)
        except _LeaseLost:
            log.info("jobs: job %s was cancelled or is held by another runner; leaving it", claim.id)
        except _Stopped:
            self._release(claim)
        except Exception as exc:
            log.exception("jobs: job %s failed", claim.id)
            self._fail(claim, exc)
        finally:
            job_owner.reset(token)
            self._current = None

    def claim(self) -> _Claim | None:
        """Take the oldest queued job, or a running one whose lease expired or whose owner died; None if none."""
        for job in self._candidates():
            claim = self._take(job)
            if claim is not None:
                return claim
        return None

    def _candidates(self) -> list[Any]:
        """Unfinished jobs this runner may take, oldest first: queued ones, and running ones whose lease
        expired or whose owner (a process on this host) is gone."""
        now = time.time()
        with self.db.connect() as connection:
            jobs = connection.execute(
                select(
                    Job.id,
                    Job.status,
                    Job.claims,
                    Job.lease_owner,
                    Job.lease_expires,
                    Job.verifier,
                    Job.response_field,
                    Job.reference_field,
                    Job.source,
                    Job.owner,
                )
                .where(Job.status.in_(UNFINISHED))
                .order_by(Job.created_at)
                .limit(50)
            ).all()
        free = []
        for job in jobs:
            held = job.status == "running" and job.lease_expires is not None and job.lease_expires >= now
            if held and (job.lease_owner == self.owner_id or not owner_is_dead(job.lease_owner)):
                continue
            free.append(job)
        return free

    def _take(self, job: Any) -> _Claim | None:
        """Claim `job` as it was read, by compare-and-set: a lease renewed since (its holder is alive after
        all), another claim, or a status change makes this a no-op and answers None."""
        now = time.time()
        same_lease = (
            Job.lease_owner.is_(None) if job.lease_owner is None else Job.lease_owner == job.lease_owner,
            Job.lease_expires.is_(None)
            if job.lease_expires is None
            else Job.lease_expires == job.lease_expires,
        )
        with self.db.begin() as connection:
            taken = connection.execute(
                update(Job)
                .where(Job.id == job.id, Job.status == job.status, Job.claims == job.claims, *same_lease)
                .values(
                    status="running",
                    lease_owner=self.owner_id,
                    lease_expires=time.time() + self.lease_s,
                    claims=Job.claims + 1,
                    started_at=func.coalesce(Job.started_at, now),
                )
            ).rowcount
        if taken != 1:
            return None
        if job.status == "running":
            log.warning("jobs: took over job %s from %s", job.id, job.lease_owner)
        config = RescoreConfig(
            input=Path(job.source or "-"),
            output=Path("-"),
            verifier=job.verifier,
            response_field=job.response_field,
            reference_field=job.reference_field,
        )
        return _Claim(job.id, config, job.claims + 1, job.owner)

    def _check(self) -> None:
        if self._stop.is_set():
            raise _Stopped
        if self._lost.is_set():
            raise _LeaseLost

    def _missing(self, claim: _Claim, after: int) -> list[tuple[int, dict[str, Any]]]:
        """The next rows in input order that have no result yet."""
        scored = select(JobResult.row_index).where(
            JobResult.job_id == JobRow.job_id, JobResult.row_index == JobRow.row_index
        )
        with self.db.connect() as connection:
            rows = connection.execute(
                select(JobRow.row_index, JobRow.data)
                .where(JobRow.job_id == claim.id, JobRow.row_index > after, ~scored.exists())
                .order_by(JobRow.row_index)
                .limit(self.chunk_rows)
            ).all()
        return [(index, json.loads(data)) for index, data in rows]

    def _run(self, claim: _Claim) -> None:
        after = -1
        while True:
            self._check()
            chunk = self._retrying(lambda start=after: self._missing(claim, start))
            if not chunk:
                self._retrying(lambda: self._finish(claim))
                return
            after = chunk[-1][0]
            pending: list[dict[str, Any]] = []
            flushed = time.monotonic()
            for start in range(0, len(chunk), self.window):
                part = chunk[start : start + self.window]
                # Scored a window at a time so the job keeps few items in the pool's queue: live requests
                # wait behind at most a window of job items, not behind the whole chunk.
                scores = score_chunk(self.scorer, [row for _, row in part], claim.config)
                self._check()  # scores made while stopping may be pool_closed failures: never write them
                for (index, _), score in zip(part, scores, strict=True):
                    status, reward = result_fields(score)
                    pending.append(
                        {
                            "job_id": claim.id,
                            "row_index": index,
                            "status": status,
                            "reward": reward,
                            "score": io.dumps_row(score),
                        }
                    )
                if len(pending) >= self.chunk_rows or time.monotonic() - flushed >= self.flush_s:
                    self._retrying(lambda rows=pending: self._write(claim, rows))
                    pending, flushed = [], time.monotonic()
            if pending:
                self._retrying(lambda rows=pending: self._write(claim, rows))

    def _write(self, claim: _Claim, rows: list[dict[str, Any]]) -> None:
        """Write results in one transaction, only while this runner holds the job's lease."""
        with self.db.begin() as connection:
            held = connection.execute(
                update(Job)
                .where(Job.id == claim.id, Job.lease_owner == self.owner_id, Job.status == "running")
                .values(done=Job.done + len(rows), lease_expires=time.time() + self.lease_s)
            ).rowcount
            if held != 1:
                raise _LeaseLost
            connection.execute(_insert_ignoring_duplicates(self.db), rows)

    def _finish(self, claim: _Claim) -> None:
        with self.db.begin() as connection:
            done = connection.execute(
                select(func.count()).select_from(JobResult).where(JobResult.job_id == claim.id)
            ).scalar_one()
            held = connection.execute(
                update(Job)
                .where(Job.id == claim.id, Job.lease_owner == self.owner_id, Job.status == "running")
                .values(
                    status="done", done=done, finished_at=time.time(), lease_owner=None, lease_expires=None
                )
            ).rowcount
            if held != 1:
                raise _LeaseLost

    def _release(self, claim: _Claim) -> None:
        """Hand the job back as queued, so the next runner (this service restarted) takes it at once."""
        try:
            with self.db.begin() as connection:
                connection.execute(
                    update(Job)
                    .where(Job.id == claim.id, Job.lease_owner == self.owner_id, Job.status == "running")
                    .values(status="queued", lease_owner=None, lease_expires=None)
                )
        except SQLAlchemyError as exc:  # its lease expires instead
            log.warning("jobs: could not hand job %s back (%s); its lease will expire", claim.id, exc)

    def _fail(self, claim: _Claim, exc: BaseException) -> None:
        message = f"{type(exc).__name__}: {exc}"[:4000]
        try:
            with self.db.begin() as connection:
                connection.execute(
                    update(Job)
                    .where(Job.id == claim.id, Job.lease_owner == self.owner_id, Job.status == "running")
                    .values(
                        status="failed",
                        error=message,
                        finished_at=time.time(),
                        lease_owner=None,
                        lease_expires=None,
                    )
                )
        except SQLAlchemyError:
            log.exception("jobs: could not mark job %s failed; its lease will expire", claim.id)

    def _retrying(self, action: Callable[[], Any]) -> Any:
        """Run a database action, retrying while the database is unreachable; stopping or a lost lease ends it."""
        delay = _RETRY_MIN_S
        while True:
            self._check()
            try:
                result = action()
            except SQLAlchemyError as exc:
                if not _transient(exc):
                    raise
                self._db_down(exc)
                self._stop.wait(delay)
                delay = min(delay * 2, _RETRY_MAX_S)
                continue
            self._db_ok()
            return result

    def _db_down(self, exc: BaseException) -> None:
        if not self._db_failing:
            log.error("jobs: the database is unreachable (%s); retrying", str(exc).splitlines()[0][:300])
            self._db_failing = True

    def _db_ok(self) -> None:
        if self._db_failing:
            log.warning("jobs: the database answers again")
            self._db_failing = False

    # -- heartbeat --

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.lease_s / 4):
            claim = self._current
            if claim is None:
                continue
            try:
                held = self._renew(claim)
            except SQLAlchemyError as exc:
                # The write path retries and reports; the lease may lapse meanwhile.
                log.debug("jobs: heartbeat failed: %s", exc)
                continue
            if not held and self._current is claim:
                self._lost.set()

    def _renew(self, claim: _Claim) -> bool:
        """Extend the lease on `claim`'s job; False when this runner no longer holds it."""
        with self.db.begin() as connection:
            held = connection.execute(
                update(Job)
                .where(Job.id == claim.id, Job.lease_owner == self.owner_id, Job.status == "running")
                .values(lease_expires=time.time() + self.lease_s)
            ).rowcount
        return held == 1

    # -- retention --

    def _sweeper(self) -> None:
        """Delete expired and abandoned jobs every sweep_s (every replica sweeps; deleting twice is harmless)."""
        while not self._stop.wait(self.sweep_s):
            try:
                self.ready()
                deleted = sweep(self.db, self.retention_s)
            except Exception as exc:  # the database is down, say: the next sweep tries again
                log.warning(
                    "jobs: the retention sweep failed (%s)",
                    str(exc).splitlines()[0][:300] if str(exc) else exc,
                )
                continue
            if deleted:
                log.info("jobs: deleted %d jobs past retention or abandoned while created", len(deleted))
