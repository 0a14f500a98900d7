"""The /v1 routes: score one request, score a batch, list and describe verifiers."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from starlette.responses import Response

from proctor.api.admission import lane_of, lane_of_requests
from proctor.api.rendering import json_response
from proctor.api.responses import (
    VERIFIER_OPTIONS,
    VERIFIER_REFERENCE,
    VerifierInfo,
    error_responses,
    server_validated,
)
from proctor.api.state import ServiceState, get_state
from proctor.contract import BatchRequest, BatchResponse, RequestError, Score, ScoreRequest
from proctor.registry import get_verifier

router = APIRouter(prefix="/v1", tags=["scoring"])


@router.post(
    "/score",
    response_model=Score,
    responses=error_responses(400, 401, 404, 413, 422, 429),
    summary="Score one response",
    openapi_extra=server_validated(
        reference=VERIFIER_REFERENCE,
        options=VERIFIER_OPTIONS,
        response="A chat transcript may nest at most 200 levels.",
    ),
)
async def score(body: ScoreRequest, state: ServiceState = Depends(get_state)) -> Response:
    """Score one response against its reference; a machinery failure is a Score with a non-ok status."""
    engine = state.require_engine()
    item = await engine.prepare_async(body)  # 404 unknown verifier, 422 invalid fields, before taking a slot
    async with state.admission.slot(lane_of(engine, item)):  # text.match never waits behind code items
        result = await engine.score_async(item)
    state.metrics.observe_score(result)
    return json_response(result)


@router.post(
    "/score/batch",
    response_model=BatchResponse,
    responses=error_responses(400, 401, 413, 422, 429),
    summary="Score many responses",
)
async def score_batch(body: BatchRequest, state: ServiceState = Depends(get_state)) -> Response:
    """Score every item in order; a bad item's slot holds {id, error} and the rest are still scored."""
    limit = state.settings.max_batch_items
    if len(body.items) > limit:
        raise RequestError(
            413, f"batch has {len(body.items)} items; the limit is {limit} (PROCTOR_MAX_BATCH_ITEMS)", "items"
        )
    engine = state.require_engine()
    # A batch is one request here, in the pool lane if any item may use the pool; the engine bounds its pool use.
    async with state.admission.slot(lane_of_requests(engine, body.items)):
        results = await engine.score_batch_async(body.items)
    for result in results:
        if isinstance(result, Score):
            state.metrics.observe_score(result)
    return json_response({"results": results})


@router.get("/verifiers", response_model=list[VerifierInfo], summary="List verifiers")
async def list_verifiers(state: ServiceState = Depends(get_state)) -> Response:
    """Every registered verifier with its version and the JSON schemas of its reference and options."""
    return json_response(state.verifiers)


@router.get(
    "/verifiers/{name}",
    response_model=VerifierInfo,
    responses=error_responses(401, 404),
    summary="Describe one verifier",
)
async def describe_verifier(name: str) -> Response:
    """One verifier's description and schemas; 404 naming the known ones if it is unknown."""
    try:
        spec = get_verifier(name)
    except RequestError as exc:
        raise RequestError(exc.status, exc.message, "name") from None
    return json_response(spec.describe())
