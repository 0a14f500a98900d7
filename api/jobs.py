"""The /v1/jobs routes (batch jobs) and the audit log, both on the service's database.

`install(app, state)` adds the routes and, around the app's lifespan, opens the database (migrating it),
starts the job runner and, with PROCTOR_AUDIT_LOG=true, the audit log. The database is opened at start-up
when PROCTOR_DATABASE_URL is set, the audit log is on, or the default SQLite file already exists (so jobs
resume after a restart); otherwise on the first job request, so a service that never runs a job creates no
files.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import os
import shutil
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Depends, FastAPI, Request
from prometheus_client import Counter
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.datastructures import UploadFile
from starlette.responses import Response, StreamingResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from proctor import io
from proctor.api.errors import describe_validation_error
from proctor.api.rendering import json_response
from proctor.api.responses import error_responses, server_validated
from proctor.api.sessions import caller
from proctor.api.state import ServiceState, get_state
from proctor.contract import ItemError, RequestError, Score
from proctor.environments.tools.sessions import owner_of
from proctor.settings import Settings

if TYPE_CHECKING:  # SQLAlchemy is imported only when a job or the audit log is used
    from sqlalchemy import Engine

    from proctor.jobs import JobLimits, JobRunner

log = logging.getLogger(__name__)

router = APIRouter(prefix="/v1", tags=["jobs"])

UPLOAD_FIELDS = ("verifier", "response_field", "reference_field")


class JobFromPath(BaseModel):
    """A job over a file already on the server, under PROCTOR_JOBS_INPUT_DIR."""

    model_config = ConfigDict(extra="forbid")

    input_path: str = Field(min_length=1, max_length=4096)
    verifier: str | None = None
    response_field: str = "response"
    reference_field: str = "reference"


class JobStatus(BaseModel):
    """What the job routes answer."""

    job_id: str
    status: str = Field(description="queued | running | done | failed | cancelled")
    total: int = Field(description="Rows in the input.")
    done: int = Field(description="Rows scored so far.")
    counts: dict[str, int] = Field(
        description="Scored rows by status (`rejected`: the row was not scorable)."
    )
    verifier: str | None = None
    response_field: str
    reference_field: str
    source: str
    error: str | None = None
    created_at: float
    started_at: float | None = None
    finished_at: float | None = None


# -- the database, the runner and the audit log -------------------------------------------------------------


class JobService:
    """The app's database engine (opened and migrated once), its job runner and its audit log."""

    def __init__(self, state: ServiceState):
        self.state = state
        self.settings: Settings = state.settings
        self.db: Engine | None = None
        self.runner: JobRunner | None = None
        self.audit: Any = None
        self._migrated = False
        self._lock = threading.Lock()

    def _engine(self) -> Engine:
        if self.db is None:
            from proctor.db.connect import create_db_engine, database_url

            self.db = create_db_engine(database_url(self.settings))
        return self.db

    def open(self) -> Engine:
        """The database, migrated to the shipped schema on first use (raises SQLAlchemyError when down)."""
        with self._lock:
            db = self._engine()
            if not self._migrated:
                from proctor.db.connect import migrate

                migrate(db)
                self._migrated = True
            return db

    def wanted_at_start(self) -> bool:
        """Whether to open the database at start-up (see the module's docstring)."""
        from proctor.db.connect import database_url

        if self._migrated or self.settings.database_url or self.settings.audit_log:
            return True
        url = database_url(self.settings)
        return url.database is not None and Path(url.database).exists()

    def start_runner(self) -> JobRunner:
        """Start the job runner once (it opens and migrates the database itself, retrying while it is down)."""
        with self._lock:
            if self.runner is None:
                from proctor.jobs import JobRunner

                workers = self.settings.pool_workers
                self.runner = JobRunner(
                    self._engine(),
                    lambda: _EngineScorer(self.state),
                    window=4 * workers,
                    ready=lambda: self.open(),
                    retention_s=self.settings.jobs_retention_s or None,
                )
                self.runner.start()
            return self.runner

    def limits(self) -> JobLimits:
        """How much one job may store (PROCTOR_JOBS_MAX_ROWS, PROCTOR_JOBS_MAX_BYTES), and one caller's jobs
        in all (PROCTOR_JOBS_MAX_ACTIVE, PROCTOR_JOBS_MAX_STORED_BYTES)."""
        from proctor.jobs import JobLimits

        return JobLimits(
            max_rows=self.settings.jobs_max_rows,
            max_bytes=self.settings.jobs_max_bytes,
            max_active=self.settings.jobs_max_active,
            max_stored_bytes=self.settings.jobs_max_stored_bytes,
        )

    def start_audit(self) -> None:
        """Start the audit log and make every score the service answers reach it."""
        from proctor.db.audit import AuditLog

        counter = Counter(
            "proctor_audit_records",
            "Audit log records by outcome (written; dropped: the queue was full or the service stopped with the "
            "database away; write_error: failed write attempts, retried).",
            ["outcome"],
            registry=self.state.metrics.registry,
        )
        for outcome in ("written", "dropped", "write_error"):
            counter.labels(outcome)
        self.audit = AuditLog(self._engine(), observer=lambda outcome, n: counter.labels(outcome).inc(n))
        metrics = self.state.metrics
        observe = metrics.observe_score
        audit = self.audit

        from proctor.jobs import job_owner

        def observe_and_audit(score: Score) -> None:
            observe(score)
            # A request's caller, or, for a job's rows (scored on the runner's thread), the job's owner.
            audit.record(score, _caller_key.get() or job_owner.get())

        # Every scoring route reports each Score here (observe_score), so the audit sees exactly what was answered.
        metrics.observe_score = observe_and_audit  # type: ignore[method-assign]

    def close(self) -> None:
        """Stop the runner (its job goes back to the queue) and flush the audit log."""
        if self.runner is not None:
            self.runner.stop()
        if self.audit is not None:
            self.audit.close()
        if self.db is not None:
            self.db.dispose()


class _EngineScorer:
    """`rescore`'s Scorer over the service's own engine, so jobs share its pool, cache and verifiers."""

    concurrency = 1

    def __init__(self, state: ServiceState):
        self.state = state

    def check(self, verifier: str | None) -> None:
        """Verifiers are checked when the job is created."""

    def score_batch(self, items: list[dict[str, Any]]) -> list[Score | ItemError]:
        """Score in order with the service's engine (blocking this thread, not the event loop)."""
        results = self.state.require_engine().score_batch(items)
        for result in results:
            if isinstance(result, Score):
                self.state.metrics.observe_score(result)  # counted (and audited) like any other score
        return results

    def close(self) -> None:
        """The engine belongs to the service."""


_caller_key: contextvars.ContextVar[str | None] = contextvars.ContextVar("proctor_caller_key", default=None)


class CallerKeyMiddleware:
    """Remember the hash of the request's bearer token for the audit record of the scores it gets."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        header = next((v for k, v in scope.get("headers", ()) if k == b"authorization"), b"")
        scheme, _, credentials = header.decode("latin-1").partition(" ")
        token = credentials.strip() if scheme.lower() == "bearer" else ""
        reset = _caller_key.set(owner_of(token) if token else None)
        try:
            await self.app(scope, receive, send)
        finally:
            _caller_key.reset(reset)


def install(app: FastAPI, state: ServiceState) -> JobService:
    """Add the job routes, and open the database, the runner and the audit log around the app's lifespan."""
    service = JobService(state)
    app.state.jobs = service
    app.include_router(router)
    if state.settings.audit_log:
        app.add_middleware(CallerKeyMiddleware)
    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(app_: FastAPI) -> AsyncIterator[Any]:
        async with inner(app_) as value:  # the engine exists from here on
            if state.settings.audit_log:
                service.start_audit()
            if service.wanted_at_start():
                service.start_runner()
            try:
                yield value
            finally:
                await asyncio.to_thread(service.close)

    app.router.lifespan_context = lifespan
    return service


def get_jobs(request: Request) -> JobService:
    """The app's job service (a FastAPI dependency)."""
    return request.app.state.jobs


async def _db(service: JobService) -> Engine:
    from sqlalchemy.exc import SQLAlchemyError

    try:
        db = await asyncio.to_thread(service.open)
    except SQLAlchemyError as exc:
        raise RequestError(503, f"the jobs database is unavailable: {_first_line(exc)}") from None
    service.start_runner()
    return db


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]


async def _call(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run a database call on a thread; an outage is a 503 that says so, never a 500."""
    from sqlalchemy.exc import SQLAlchemyError

    try:
        return await asyncio.to_thread(function, *args, **kwargs)
    except SQLAlchemyError as exc:
        raise RequestError(503, f"the jobs database is unavailable: {_first_line(exc)}") from None


# -- reading the input -------------------------------------------------------------------------------------


def resolve_input_path(settings: Settings, input_path: str) -> tuple[Path, str]:
    """The real path of `input_path` (relative to PROCTOR_JOBS_INPUT_DIR, or absolute) and its format; a path
    that is not a readable JSONL or Parquet file inside that folder, after every symlink, is a 422 naming
    input_path."""
    if not settings.jobs_input_dir:
        raise RequestError(
            422,
            "input_path is not accepted here: PROCTOR_JOBS_INPUT_DIR is not set; upload the file instead",
            "input_path",
        )
    root = Path(os.path.realpath(Path(settings.jobs_input_dir).expanduser()))
    if "\x00" in input_path:
        raise RequestError(422, "input_path must not contain NUL", "input_path")
    candidate = Path(os.path.realpath(root / input_path))  # an absolute input_path replaces root here
    if candidate == root or not candidate.is_relative_to(root):
        raise RequestError(
            422, f"input_path {input_path!r} is not inside PROCTOR_JOBS_INPUT_DIR", "input_path"
        )
    try:
        kind = io.file_format(candidate)
    except ValueError as exc:
        raise RequestError(422, f"input_path: {exc}", "input_path") from None
    if not candidate.is_file():
        raise RequestError(
            422, f"input_path {input_path!r} is not a file in PROCTOR_JOBS_INPUT_DIR", "input_path"
        )
    return candidate, kind


def _rows_from_path(
    root: Path, path: Path, kind: str, label: str, limits: JobLimits
) -> Iterator[dict[str, Any]]:
    """The file's rows, read through a descriptor checked to still be inside `root` after it was opened
    (a folder swapped for a symlink after the check above cannot redirect the read)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise RequestError(422, f"cannot read input_path {label!r}: {exc.strerror}", "input_path") from None
    try:
        opened = Path(os.readlink(f"/proc/self/fd/{fd}"))
        if not opened.is_relative_to(root):
            raise RequestError(
                422, f"input_path {label!r} is not inside PROCTOR_JOBS_INPUT_DIR", "input_path"
            )
        from proctor.jobs import read_input

        through = f"/proc/self/fd/{fd}"
        yield from read_input(through, kind, limits, field="input_path")
    except io.DataError as exc:
        raise type(exc)(str(exc).replace(f"/proc/self/fd/{fd}", label)) from None  # DataTooLarge stays one
    finally:
        os.close(fd)


def _upload_dir(settings: Settings) -> Path:
    from proctor.db.connect import data_dir

    folder = data_dir(settings) / "uploads"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _form_text(form: Any, name: str, default: str | None) -> str | None:
    value = form.get(name)
    if value is None:
        return default
    if not isinstance(value, str):
        raise RequestError(422, f"{name} must be a text field, not a file", name)
    return value


# -- routes ------------------------------------------------------------------------------------------------

_JOB_ERRORS = {
    404: "No such job (or not the caller's), or, when creating one, an unknown verifier.",
    409: "The job is still running (results), or already finished (cancel).",
    413: "The upload is over PROCTOR_MAX_BODY_BYTES, or the file holds more rows than PROCTOR_JOBS_MAX_ROWS or "
    "more bytes of rows than PROCTOR_JOBS_MAX_BYTES, or it would take the caller's kept jobs past "
    "PROCTOR_JOBS_MAX_STORED_BYTES (nothing of the job is kept).",
    429: "The caller has PROCTOR_JOBS_MAX_ACTIVE jobs not finished yet (or the rate limit); retry later.",
    415: "Neither multipart/form-data nor application/json.",
    503: "The jobs database is unavailable (the message says why); retry later.",
}


def _errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI entries in the one error shape, with what each status means for a job route."""
    entries = error_responses(*(code for code in codes if code not in _JOB_ERRORS))
    model = next(iter(error_responses(400).values()))["model"]
    for code in codes:
        if code in _JOB_ERRORS:
            entries[code] = {"model": model, "description": _JOB_ERRORS[code]}
    return dict(sorted(entries.items(), key=lambda item: str(item[0])))


_CREATE_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file"],
                    "additionalProperties": False,
                    "properties": {
                        "file": {
                            "type": "string",
                            "format": "binary",
                            "description": "A .jsonl or .parquet file.",
                        },
                        "verifier": {"type": "string"},
                        "response_field": {"type": "string", "default": "response"},
                        "reference_field": {"type": "string", "default": "reference"},
                    },
                }
            },
            "application/json": {"schema": JobFromPath.model_json_schema()},
        },
    }
}


@router.post(
    "/jobs",
    status_code=201,
    response_model=JobStatus,
    responses=_errors(400, 401, 404, 413, 415, 422, 429, 503),
    summary="Create a batch job",
    openapi_extra={
        **_CREATE_BODY,
        **server_validated(
            file="Must be a readable .jsonl or .parquet file (by its name) holding at least one row.",
            input_path="Must name a .jsonl or .parquet file inside PROCTOR_JOBS_INPUT_DIR (unset: not accepted).",
            response_field="A field name of 1 to 200 characters.",
            reference_field="A field name of 1 to 200 characters.",
            verifier="A registered verifier (an unknown one is a 404).",
        ),
    },
)
async def create(
    request: Request,
    state: ServiceState = Depends(get_state),
    service: JobService = Depends(get_jobs),
    owner: str | None = Depends(caller),
) -> Response:
    """Score every row of an uploaded file, or of a file under PROCTOR_JOBS_INPUT_DIR, as a job that survives
    restarts; 201 with the job's status."""
    from proctor.jobs import new_job_id

    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    job_id = new_job_id()
    if content_type == "multipart/form-data":
        view = await _create_from_upload(request, state.settings, service, owner, job_id)
    elif content_type == "application/json":
        view = await _create_from_path(request, state.settings, service, owner, job_id)
    else:
        raise RequestError(
            415,
            "send multipart/form-data (an uploaded file) or application/json (input_path)",
            "Content-Type",
        )
    if service.runner is not None:
        service.runner.wake()
    return json_response(view, status_code=201)


async def _create_from_upload(
    request: Request, settings: Settings, service: JobService, owner: str | None, job_id: str
) -> dict[str, Any]:
    try:
        form = await request.form(max_files=1, max_fields=16)
    except Exception as exc:  # starlette raises MultiPartException / HTTPException for a malformed body
        raise RequestError(
            400, f"cannot read the multipart body: {getattr(exc, 'detail', None) or exc}"
        ) from None
    try:
        for name in form:
            if name != "file" and name not in UPLOAD_FIELDS:
                raise RequestError(
                    422, f"unknown field {name!r}; fields: file, {', '.join(UPLOAD_FIELDS)}", name
                )
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise RequestError(422, "upload the input as the multipart file field 'file'", "file")
        name = upload.filename or ""
        try:
            kind = io.file_format(name)
        except ValueError as exc:
            raise RequestError(422, f"file: {exc}", "file") from None
        from proctor.jobs import JobSpec

        spec = JobSpec(
            verifier=_form_text(form, "verifier", None) or None,
            response_field=_form_text(form, "response_field", "response") or "",
            reference_field=_form_text(form, "reference_field", "reference") or "",
            owner=owner,
            source=f"upload:{Path(name).name}",
        )
        db = await _db(service)
        target = _upload_dir(settings) / f"{job_id}.{'jsonl' if kind == 'jsonl' else 'parquet'}"
        try:
            await asyncio.to_thread(_save_upload, upload, target)
            limits = service.limits()
            return await _call(
                _create_from_file, db, target, kind, spec, limits=limits, field="file", job_id=job_id
            )
        finally:
            with contextlib.suppress(OSError):
                target.unlink()  # the rows are in the database now: any replica can run the job
    finally:
        await form.close()


def _create_from_file(
    db: Engine, path: Path, kind: str, spec: Any, *, limits: JobLimits, field: str, job_id: str
) -> dict[str, Any]:
    """A job over an uploaded file, read within the job limits (a footer over them is refused unread)."""
    from proctor.jobs import JobError, create_job, read_input

    try:
        rows = read_input(path, kind, limits, field=field)
    except io.DataError as exc:
        raise JobError(422, str(exc), field) from None
    return create_job(db, rows, spec, field=field, job_id=job_id, limits=limits)


def _save_upload(upload: UploadFile, target: Path) -> None:
    upload.file.seek(0)
    with open(target, "wb") as handle:
        shutil.copyfileobj(upload.file, handle, 1 << 20)


async def _create_from_path(
    request: Request, settings: Settings, service: JobService, owner: str | None, job_id: str
) -> dict[str, Any]:
    try:
        raw = await request.json()
    except ValueError:
        raise RequestError(400, "the body is not valid JSON") from None
    try:
        body = JobFromPath.model_validate(raw)
    except ValidationError as exc:
        message, field = describe_validation_error(exc.errors(include_url=False))
        raise RequestError(422, message, field) from None
    from proctor.jobs import JobSpec, create_job

    path, kind = resolve_input_path(settings, body.input_path)
    root = Path(os.path.realpath(Path(settings.jobs_input_dir).expanduser()))
    spec = JobSpec(
        verifier=body.verifier,
        response_field=body.response_field,
        reference_field=body.reference_field,
        owner=owner,
        source=f"input_path:{body.input_path}",
    )
    db = await _db(service)
    limits = service.limits()
    rows = _rows_from_path(root, path, kind, body.input_path, limits)
    return await _call(create_job, db, rows, spec, field="input_path", job_id=job_id, limits=limits)


async def _job_or_404(service: JobService, job_id: str, owner: str | None) -> dict[str, Any]:
    from proctor.jobs import job_view

    if not service.wanted_at_start():  # no database yet, so no job: reading must not create one
        raise RequestError(404, f"no job {job_id!r}", "job_id")
    db = await _db(service)
    view = await _call(job_view, db, job_id, owner)
    if view is None:
        raise RequestError(404, f"no job {job_id!r}", "job_id")
    return view


@router.get(
    "/jobs/{job_id}",
    response_model=JobStatus,
    responses=_errors(401, 404, 503),
    summary="A job's status",
)
async def status(
    job_id: str, service: JobService = Depends(get_jobs), owner: str | None = Depends(caller)
) -> Response:
    """The job's status, how many rows are scored, and the scored rows by status."""
    return json_response(await _job_or_404(service, job_id, owner))


@router.get(
    "/jobs/{job_id}/results",
    responses={
        200: {
            "content": {"application/x-ndjson": {}},
            "description": "One JSON line per scored row, X-Proctor-Job-Results of them. A job deleted while "
            "its results are sent (retention) breaks the response off: the chunked body never ends cleanly.",
        },
        **_errors(401, 404, 409, 503),
    },
    summary="A job's results",
)
async def results(
    job_id: str, service: JobService = Depends(get_jobs), owner: str | None = Depends(caller)
) -> Response:
    """The scored rows as JSONL, in input order (each input row with its `score`); 409 while the job runs."""
    view = await _job_or_404(service, job_id, owner)
    if view["status"] in ("queued", "running"):
        raise RequestError(
            409,
            f"job {job_id} is {view['status']} ({view['done']} of {view['total']} rows scored); "
            "its results are ready when it is done",
            "job_id",
        )
    from proctor.jobs import iter_results

    assert service.db is not None
    expected = sum(view["counts"].values())  # a finished job's results no longer change
    return StreamingResponse(
        # A sync iterator (Starlette reads it on a thread). Should the job be deleted meanwhile, it raises
        # after its last line instead of ending: the server drops the connection before the chunked body's
        # end, so no client takes a short result set for a whole one.
        iter_results(service.db, job_id, expected=expected),
        media_type="application/x-ndjson",
        headers={"X-Proctor-Job-Status": view["status"], "X-Proctor-Job-Results": str(expected)},
    )


@router.delete(
    "/jobs/{job_id}",
    response_model=JobStatus,
    responses=_errors(401, 404, 409, 503),
    summary="Cancel a job",
)
async def cancel(
    job_id: str, service: JobService = Depends(get_jobs), owner: str | None = Depends(caller)
) -> Response:
    """Cancel a queued or running job; the rows scored so far stay readable. A finished job is a 409."""
    from proctor.jobs import cancel_job

    if not service.wanted_at_start():
        raise RequestError(404, f"no job {job_id!r}", "job_id")
    db = await _db(service)
    view = await _call(cancel_job, db, job_id, owner)
    if view is None:
        raise RequestError(404, f"no job {job_id!r}", "job_id")
    return json_response(view)
