"""Operational routes: /healthz (open even with a token) and /metrics (Prometheus text)."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from starlette.responses import Response

import proctor
from proctor.api.rendering import json_response
from proctor.api.responses import Health, error_responses
from proctor.api.state import ServiceState, get_state

router = APIRouter(tags=["operations"])


@router.get("/healthz", response_model=Health, summary="Health and limits")
async def healthz(state: ServiceState = Depends(get_state)) -> Response:
    """Status, version, verifier count, pool stats (null before the pool starts) and request limits."""
    engine = state.engine
    health = Health(
        status="ok",
        version=proctor.__version__,
        verifiers=len(state.verifiers),
        pool=engine.pool.stats() if engine is not None and engine.pool_started else None,
        limits={
            "max_body_bytes": state.settings.max_body_bytes,
            "max_batch_items": state.settings.max_batch_items,
        },
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
    """Requests, latencies, scores by verifier and status, pool and admission gauges, 429 counts."""
    state.refresh_gauges()
    body, content_type = state.metrics.render()
    return Response(body, media_type=content_type)
