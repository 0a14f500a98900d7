"""Operational routes: /healthz (open even with a token, except its detail) and /metrics (Prometheus text)."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, Field
from starlette.responses import Response

import proctor
from proctor.api.auth import token_matches, unauthorized
from proctor.api.budget import budget_report
from proctor.api.rendering import json_response
from proctor.api.responses import Health, error_responses
from proctor.api.state import ServiceState, get_state
from proctor.engine import Engine

router = APIRouter(tags=["operations"])


class SandboxHealth(BaseModel):
    """The sandbox backend, its pool (null until the first job) and the cached toolchain report."""

    backend: str = Field(description="The configured backend (PROCTOR_SANDBOX_BACKEND).")
    unavailable: str | None = Field(description="Why the backend failed its last check, or null.")
    pool: dict[str, Any] | None = Field(description="Sandbox pool stats, or null before the first job.")
    doctor: dict[str, Any] | None = Field(
        description="Which backends and toolchains work here (from `proctor doctor`); computed on the first "
        "/healthz?detail=true, cached, and null until then."
    )


class ServiceHealth(Health):
    """Health plus the sandbox section and whether the Redis replicas share is in use."""

    sandbox: SandboxHealth
    redis: Literal["off", "ok", "unavailable"] = Field(
        description="Redis shared by replicas (PROCTOR_REDIS_URL): off when not configured; unavailable while "
        "this replica serves without it (its own cache, memory sessions for new sessions, per-process rate "
        "limits) until it answers again."
    )
    budget: dict[str, Any] = Field(
        description="The settings sized per host (admission lanes, verifier pool, sandbox pool, their queues): "
        "`host` as the operator gave them, `share` this uvicorn worker's part of them, `workers` how many "
        "workers split them and `slot` which one this is."
    )


@router.get(
    "/healthz",
    response_model=ServiceHealth,
    responses=error_responses(401),
    summary="Health and limits",
)
async def healthz(
    request: Request,
    detail: bool = Query(
        False,
        description="Also run (once, then cached) the sandbox toolchain report. Needs the bearer token when "
        "PROCTOR_TOKEN is set (plain /healthz stays open for load balancers).",
    ),
    state: ServiceState = Depends(get_state),
) -> Response:
    """Status, version, verifier count, pool stats (null before the pool starts), request limits, sandbox health."""
    token = state.settings.token
    header = request.headers.get("authorization")
    if detail and token and not token_matches(None if header is None else header.encode("latin-1"), token):
        # The report runs every toolchain once (costly) and tells what is installed: not for anonymous callers.
        return unauthorized(header is not None)
    engine = state.engine
    doctor = await state.doctor_report() if detail else state.doctor_cached
    health = ServiceHealth(
        status="ok",
        version=proctor.__version__,
        verifiers=len(state.verifiers),
        pool=engine.pool.stats() if engine is not None and engine.pool_started else None,
        limits={
            "max_body_bytes": state.settings.max_body_bytes,
            "max_batch_items": state.settings.max_batch_items,
        },
        sandbox=SandboxHealth(
            backend=state.settings.sandbox_backend,
            unavailable=state.sandbox_unavailable,
            pool=state.sandbox_stats(),
            doctor=doctor,
        ),
        redis=_redis_status(engine),
        budget=budget_report(state.settings),
    )
    return json_response(health)


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text format."}}
    | error_responses(401),
    summary="Prometheus metrics",
)
async def metrics(state: ServiceState = Depends(get_state)) -> Response:
    """Requests, latencies, scores by verifier and status, pool, admission and sandbox gauges, 429 counts."""
    state.refresh_gauges()
    body, content_type = state.metrics.render()
    return Response(body, media_type=content_type)


def _redis_status(engine: Engine | None) -> Literal["off", "ok", "unavailable"]:
    """off without PROCTOR_REDIS_URL; else whether this replica's last Redis call got an answer."""
    shared = engine.shared if engine is not None else None
    if shared is None:
        return "off"
    return "ok" if shared.available else "unavailable"
