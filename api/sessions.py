"""The /v1/sessions routes: multi-turn tool sessions over HTTP (`proctor.environments.tools.sessions`).

| route | answer |
|---|---|
| `POST /v1/sessions` | 201 `{session_id, environment, messages, tools, limits, expires_at}` |
| `POST /v1/sessions/{id}/step` | `{step, observations, tool_results, done, end_reason, usage, score?}` |
| `POST /v1/sessions/{id}/finish` | the final `Score` |
| `GET /v1/sessions/{id}` | the record: task, transcript, action log, steps, usage, end reason, score |
| `DELETE /v1/sessions/{id}` | 204, idempotent |
| `POST /v1/sessions/step/batch` | `{results: [...]}`, one per item in order; a bad item is `{session_id, error}` |

Errors: 404 unknown environment or session (another caller's session is unknown to you), 410 expired, 409 a
step out of order or after the end (then with the final `score`) or an idempotency key reused with another
create request, 413 a message or task past the session size limits, 422 naming the field, 429 with Retry-After
when the service holds as many sessions as it may or its admission queue is full. Sessions are bound to a hash
of the caller's bearer token when auth is on. Steps take a pool-lane admission slot, as code items do.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request
from prometheus_client import Counter, Gauge, Histogram
from pydantic import BaseModel, Field, ValidationError
from starlette.responses import Response

from proctor.api.admission import POOL
from proctor.api.errors import ErrorResponse
from proctor.api.metrics import Metrics
from proctor.api.rendering import json_response
from proctor.api.responses import error_responses, server_validated
from proctor.api.state import ServiceState, get_state
from proctor.contract import RequestError, Score, check_nesting, request_error_from
from proctor.environments.tools.sessions import (
    MAX_BATCH_STEPS,
    BatchStepItem,
    CreateSession,
    FinishRequest,
    MemorySessionStore,
    RedisSessionStore,
    SessionConflict,
    SessionElsewhere,
    SessionManager,
    SessionStore,
    StepRequest,
    owner_of,
)
from proctor.redis_backend import connect

router = APIRouter(prefix="/v1", tags=["sessions"])

MAX_OPEN_SESSIONS = 10_000
"""Open sessions one service process holds; past it, `POST /v1/sessions` is a 429 with Retry-After."""

_SESSION_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class PrometheusSessionObserver:
    """Session metrics in the service's registry: open sessions, created, ended by reason, steps, tool time."""

    def __init__(self, metrics: Metrics):
        reg = metrics.registry
        self.open = Gauge(
            "proctor_sessions_open", "Tool sessions open now.", multiprocess_mode="livesum", registry=reg
        )
        self.created_total = Counter(
            "proctor_sessions_created", "Tool sessions opened, by environment.", ["environment"], registry=reg
        )
        self.ended_total = Counter(
            "proctor_sessions_ended",
            "Tool sessions ended, by environment and end reason (expired: abandoned past their time-to-live; "
            "closed: deleted before they ended).",
            ["environment", "end_reason"],
            registry=reg,
        )
        self.steps_total = Histogram(
            "proctor_session_step_duration_seconds",
            "Time to take one session step (tool calls and final scoring included), by environment.",
            ["environment"],
            buckets=_SESSION_BUCKETS,
            registry=reg,
        )
        self.tool_seconds = Histogram(
            "proctor_session_tool_duration_seconds",
            "Wall time of one tool call, by environment, tool and status.",
            ["environment", "tool", "status"],
            buckets=_SESSION_BUCKETS,
            registry=reg,
        )
        self.open.set(0)

    def created(self, environment: str) -> None:
        self.created_total.labels(environment).inc()
        self.open.inc()

    def ended(self, environment: str, end_reason: str, status: str) -> None:
        self.ended_total.labels(environment, end_reason).inc()
        self.open.dec()

    def step(self, environment: str, seconds: float) -> None:
        self.steps_total.labels(environment).observe(seconds)

    def tool(self, environment: str, tool: str, status: str, seconds: float) -> None:
        self.tool_seconds.labels(environment, tool, status).observe(seconds)


def install(app: FastAPI, state: ServiceState, manager: SessionManager | None = None) -> SessionManager:
    """Add the session routes, the 409 handler and a session manager (scoring with the app's engine)."""
    if manager is None:
        settings = state.settings
        store: SessionStore = MemorySessionStore(max_open=MAX_OPEN_SESSIONS)
        if settings.redis_url:  # replicas share the records; state stays with the replica that opened it
            shared = connect(settings.redis_url, replica_url=settings.advertise_url or None)
            store = RedisSessionStore(shared, max_open=MAX_OPEN_SESSIONS)
        manager = SessionManager(
            store,
            engine=state.require_engine,
            observer=PrometheusSessionObserver(state.metrics),
        )
    app.state.sessions = manager
    app.include_router(router)

    async def conflict(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, SessionConflict)
        return json_response(_conflict_body(exc), status_code=409)

    app.add_exception_handler(SessionConflict, conflict)

    async def elsewhere(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, SessionElsewhere)
        body = {"error": {"status": 421, "message": exc.message, "field": exc.field}, "replica": exc.replica}
        headers = {}
        if exc.replica_url:
            body["replica_url"] = exc.replica_url
            headers["Location"] = exc.replica_url.rstrip("/") + request.url.path
        return json_response(body, status_code=421, headers=headers)

    app.add_exception_handler(SessionElsewhere, elsewhere)
    return manager


async def shutdown(app: FastAPI) -> None:
    """Close every open session's environment state (called by the app's lifespan)."""
    manager: SessionManager | None = getattr(app.state, "sessions", None)
    if manager is not None:
        await manager.close()


def _conflict_body(exc: SessionConflict) -> dict[str, Any]:
    body: dict[str, Any] = {"error": {"status": 409, "message": exc.message, "field": exc.field}}
    if exc.end_reason is not None:
        body["end_reason"] = exc.end_reason
    if exc.score is not None:
        body["score"] = exc.score
    return body


def get_sessions(request: Request) -> SessionManager:
    """The app's session manager (a FastAPI dependency)."""
    return request.app.state.sessions


def caller(request: Request, state: ServiceState = Depends(get_state)) -> str | None:
    """The owner key of the caller: a hash of its bearer token when auth is on, else None."""
    if not state.settings.token:
        return None
    header = request.headers.get("authorization", "")
    scheme, _, credentials = header.partition(" ")
    return owner_of(credentials.strip()) if scheme.lower() == "bearer" else None


class OpenedSession(BaseModel):
    """What `POST /v1/sessions` answers."""

    session_id: str
    environment: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    limits: dict[str, Any]
    expires_at: float


class StepResult(BaseModel):
    """What one step answers."""

    step: int
    observations: list[dict[str, Any]]
    tool_results: list[dict[str, Any]]
    done: bool
    end_reason: str | None
    usage: dict[str, Any]
    score: Score | None = None


class BatchSteps(BaseModel):
    """Several steps, each `{session_id, message, step?}`; validated one by one."""

    items: list[Any] = Field(
        description="Steps, each `{session_id, message, step?}`; each is validated on its own, and a bad one "
        "(even one that is not an object) is an error in its own slot."
    )


_ERRORS = error_responses(400, 401, 413, 422, 429)
_NOT_FOUND = {404: {"model": ErrorResponse, "description": "Unknown environment or session."}}
_GONE = {410: {"model": ErrorResponse, "description": "The session expired (unused past its time-to-live)."}}


class ConflictResponse(ErrorResponse):
    """A 409: a step out of order or reused with another message, or a step after the end (with the final
    score and end reason)."""

    end_reason: str | None = None
    score: Score | None = None


class ElsewhereResponse(ErrorResponse):
    """A 421 (replicas sharing Redis): another replica holds the session's state; the request goes there."""

    replica: str
    replica_url: str | None = None


_CONFLICT = {409: {"model": ConflictResponse, "description": "Step out of order, or the session has ended."}}
_UNAVAILABLE = {
    503: {
        "model": ErrorResponse,
        "description": "The session store shared by replicas (Redis) is down; retry.",
    }
}
_ELSEWHERE = {
    421: {
        "model": ElsewhereResponse,
        "description": "Another replica holds the session's state: send the request to `replica_url` "
        "(also in the Location header).",
    }
}
_STEP_ERRORS = {**_ERRORS, **_NOT_FOUND, **_GONE, **_CONFLICT, **_ELSEWHERE, **_UNAVAILABLE}
_MESSAGE = "An assistant message in OpenAI's chat format, validated as a chat message."


_KEY_CONFLICT = {
    409: {"model": ErrorResponse, "description": "The idempotency key was used with another request."}
}


@router.post(
    "/sessions",
    status_code=201,
    response_model=OpenedSession,
    responses={**_ERRORS, **_NOT_FOUND, **_KEY_CONFLICT},
    summary="Open a tool session",
    openapi_extra=server_validated(
        task="Validated against the environment: a bundled task's seed, split and level, or your reference.",
        environment="Must name a registered tool environment (404 otherwise).",
    ),
)
async def create_session(
    body: CreateSession,
    sessions: SessionManager = Depends(get_sessions),
    owner: str | None = Depends(caller),
) -> Response:
    """Open a session on a bundled task (`{seed, index?, split?, level?}`), a task object, or your own
    `{prompt, reference}`; answers the initial messages and the tools' OpenAI specs."""
    check_nesting(body.task, "task")
    opened = await sessions.create(body, owner)
    return json_response(opened, status_code=201)


@router.post(
    "/sessions/step/batch",
    responses=_ERRORS,
    summary="Take steps of many sessions",
    openapi_extra=server_validated(items="Each item is validated on its own; a bad one fails only its slot."),
)
async def step_batch(
    body: BatchSteps,
    state: ServiceState = Depends(get_state),
    sessions: SessionManager = Depends(get_sessions),
    owner: str | None = Depends(caller),
) -> Response:
    """Take every step; results come back in request order, and a bad item's slot holds `{session_id, error}`.

    Steps of different sessions run at once; steps of one session run in the order given."""
    if len(body.items) > MAX_BATCH_STEPS:
        raise RequestError(413, f"batch has {len(body.items)} steps; the limit is {MAX_BATCH_STEPS}", "items")
    results: list[Any] = [None] * len(body.items)
    chains: dict[str, list[tuple[int, BatchStepItem]]] = {}
    for index, raw in enumerate(body.items):
        try:
            check_nesting(raw, f"items.{index}")
            item = BatchStepItem.model_validate(raw)
        except ValidationError as exc:
            results[index] = _item_error(raw, request_error_from(exc, f"items.{index}"))
            continue
        except RequestError as exc:
            results[index] = _item_error(raw, exc)
            continue
        chains.setdefault(item.session_id, []).append((index, item))

    async def run(chain: list[tuple[int, BatchStepItem]]) -> None:
        for index, item in chain:
            try:
                results[index] = await sessions.step(item.session_id, item.message, item.step, owner)
            except SessionConflict as exc:
                results[index] = {"session_id": item.session_id, **_conflict_body(exc)}
            except RequestError as exc:
                results[index] = _item_error(item.model_dump(), exc)

    async with state.admission.slot(POOL):
        await asyncio.gather(*(run(chain) for chain in chains.values()))
    return json_response({"results": results})


def _item_error(raw: Any, exc: RequestError) -> dict[str, Any]:
    session_id = raw.get("session_id") if isinstance(raw, dict) else None
    return {"session_id": session_id, "error": exc.body().model_dump()}


@router.post(
    "/sessions/{session_id}/step",
    response_model=StepResult,
    responses=_STEP_ERRORS,
    summary="Take one step",
    openapi_extra=server_validated(message=_MESSAGE),
)
async def step_session(
    session_id: str,
    body: StepRequest,
    state: ServiceState = Depends(get_state),
    sessions: SessionManager = Depends(get_sessions),
    owner: str | None = Depends(caller),
) -> Response:
    """Run the tool calls of one assistant message; the episode's end carries the final `score`."""
    async with state.admission.slot(POOL):
        result = await sessions.step(session_id, body.message, body.step, owner)
    return json_response(result)


@router.post(
    "/sessions/{session_id}/finish",
    response_model=Score,
    responses=_STEP_ERRORS,
    summary="End a session and score it",
    openapi_extra=server_validated(message=_MESSAGE),
)
async def finish_session(
    session_id: str,
    body: FinishRequest | None = None,
    state: ServiceState = Depends(get_state),
    sessions: SessionManager = Depends(get_sessions),
    owner: str | None = Depends(caller),
) -> Response:
    """End the episode (an optional final assistant message first) and answer its Score."""
    async with state.admission.slot(POOL):
        score = await sessions.finish(session_id, body.message if body else None, owner)
    return json_response(score)


@router.get(
    "/sessions/{session_id}",
    responses={**error_responses(401), **_NOT_FOUND, **_GONE, **_UNAVAILABLE},
    summary="A session's record",
)
async def get_session(
    session_id: str, sessions: SessionManager = Depends(get_sessions), owner: str | None = Depends(caller)
) -> Response:
    """The record: task, tools, limits, the exact transcript, the action log, usage, end reason and score."""
    return json_response(await sessions.get(session_id, owner))


@router.delete(
    "/sessions/{session_id}",
    status_code=204,
    responses={**error_responses(401), **_ELSEWHERE, **_UNAVAILABLE},
    summary="Close a session",
)
async def delete_session(
    session_id: str, sessions: SessionManager = Depends(get_sessions), owner: str | None = Depends(caller)
) -> Response:
    """Close the session and free what it holds; deleting again (or an unknown id) is also 204."""
    await sessions.delete(session_id, owner)
    return Response(status_code=204)
