"""OpenAI-graders-compatible routes, a thin mapping onto the `openai.grader` verifier's code
(proctor.verifiers.openai_grader): `POST /v1/graders/run` and `/validate`, and the same at the openai SDK's
paths, `POST /v1/fine_tuning/alpha/graders/run` and `/validate` (with the SDK's response types).

An invalid spec is a 422 naming the field on every route; a machinery failure (judge, embeddings, pool,
sandbox) is a 503 with Retry-After and OpenAI's error flags in the body, never a 200 with reward 0 (see
docs/verifiers/graders.md for why this differs from OpenAI). Requests may add `judge` (a Proctor extension)
to pick an allowed judge.
"""

from __future__ import annotations

import json
import time
from typing import Any

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict
from starlette.responses import Response

from proctor.api.admission import POOL
from proctor.api.rendering import json_response
from proctor.api.responses import error_responses, server_validated
from proctor.api.state import ServiceState, get_state
from proctor.contract import MAX_NESTING, RequestError, check_nesting
from proctor.end_of_turn import cut_end_of_turn
from proctor.verifiers.openai_grader import (
    JudgeOverride,
    check_image_urls,
    check_templates,
    parse_grader,
    run_grader,
)

router = APIRouter(tags=["graders"])
PREFIX = "/v1/graders"
# The openai SDK's `client.fine_tuning.alpha.graders.run / validate` post here (with base_url ending in /v1).
SDK_PREFIX = "/v1/fine_tuning/alpha/graders"


class RunRequest(BaseModel):
    """OpenAI's run body: the grader, the model sample (populates `sample`) and the dataset item (`item`)."""

    model_config = ConfigDict(extra="forbid")

    grader: dict[str, Any]
    model_sample: str
    item: Any = None
    reference_answer: Any = None
    judge: JudgeOverride | None = None


class ValidateRequest(BaseModel):
    """OpenAI's validate body."""

    model_config = ConfigDict(extra="forbid")

    grader: dict[str, Any]


# -- routes --------------------------------------------------------------------------------------------------


_GRADER_RULES = (
    "One of OpenAI's grader specs (string_check, text_similarity, score_model, label_model, python, multi), "
    "validated by the server: its type's fields, templates, metrics, content parts (no audio; a literal input_image URL as for item), python "
    "source (must define grade) and calculate_output formula (which "
    "must have a value over the sub-rewards' ranges); lists and objects may nest at most 200 levels."
)


_RUN_FIELDS = {
    "grader": _GRADER_RULES,
    "item": "Must hold the fields the grader's templates name ({{item.…}}); an input_image URL rendered from "
    "it must be https:// (no user-info, no private address) or a data:image/(png|jpeg|gif|webp);base64, URL "
    "of at most 8 MiB; nests at most 200 levels.",
    "reference_answer": "Lists and objects may nest at most 200 levels.",
    "model_sample": "Must be JSON when the grader's templates read {{sample.output_json…}}.",
    "judge__base_url": "Only the configured judge URL or one on the operator's PROCTOR_JUDGE_ALLOWED_URLS.",
}


# What the plain and the SDK path of each route share in the OpenAPI document.
_RUN_ROUTE: dict[str, Any] = {
    "responses": error_responses(400, 401, 413, 422, 429, 503),
    "openapi_extra": server_validated(**_RUN_FIELDS),
}
_VALIDATE_ROUTE: dict[str, Any] = {
    "responses": error_responses(400, 401, 413, 422),
    "openapi_extra": server_validated(grader=_GRADER_RULES),
}


def _check_encodable(value: Any, field: str) -> None:
    """422 naming the field when its text holds a lone surrogate (a JSON body may send `"\\ud800"`): no judge
    call, sandbox file or response can carry it in UTF-8, so grading it would fail as a 500 or a sandbox error."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise RequestError(
            422,
            f"invalid {field}: holds a lone surrogate (U+D800 to U+DFFF), which UTF-8 cannot encode",
            field,
        ) from None


async def _run(body: RunRequest, state: ServiceState, sdk: bool) -> Response:
    started = time.perf_counter()
    # The body's data fields nest at most MAX_NESTING levels, as in /v1/score: deeper ones would reach
    # recursive code (pydantic's serializer, json.dumps of a template value) as a 500.
    for field in ("grader", "item", "reference_answer"):
        check_nesting(getattr(body, field), field, MAX_NESTING)
    for field in ("model_sample", "grader", "item", "reference_answer"):
        _check_encodable(getattr(body, field), field)
    grader = parse_grader(body.grader)
    check_templates(grader)
    item = (
        body.item
        if body.item is not None
        else ({"reference_answer": body.reference_answer} if body.reference_answer is not None else {})
    )
    # input_image URLs the spec and item decide are checked before anything runs (a 422 naming the field).
    check_image_urls(grader, item)
    engine = state.require_engine()
    # As for every verifier: the sample's end-of-turn tokens (PROCTOR_END_TOKENS) are cut before it is graded.
    cut = cut_end_of_turn(body.model_sample, state.settings.end_token_list)
    async with state.admission.slot(POOL):  # a python grader runs in a sandbox
        outcome = await run_grader(grader, item, cut.text, engine, body.judge)
    if cut.token is not None:
        outcome.scores["end_of_turn"] = {"token": cut.token, "cut_chars": cut.cut_chars}
    result = outcome.body(started)
    if sdk:
        # The SDK's GraderRunResponse types metadata.token_usage as one integer: the total tokens.
        usage = result["metadata"]["token_usage"]
        result["metadata"]["token_usage"] = usage.get("total_tokens") if usage else None
    if outcome.server_failure:
        # A machinery failure is not a grade: 503, with OpenAI's error flags for clients that read them.
        result["error"] = {"status": 503, "message": outcome.server_failure, "field": None}
        return json_response(
            result, status_code=503, headers={"Retry-After": str(state.settings.retry_after_s)}
        )
    return json_response(result)


def _validate(body: ValidateRequest) -> Response:
    check_nesting(body.grader, "grader", MAX_NESTING)
    grader = parse_grader(body.grader)
    check_templates(grader)
    return json_response({"grader": grader.model_dump(mode="json", exclude_none=True)})


@router.post(PREFIX + "/run", summary="Run an OpenAI grader spec", **_RUN_ROUTE)
async def run(body: RunRequest, state: ServiceState = Depends(get_state)) -> Response:
    """Grade one model sample with an OpenAI grader spec; OpenAI's run response shape."""
    return await _run(body, state, sdk=False)


@router.post(SDK_PREFIX + "/run", summary="Run an OpenAI grader spec (the openai SDK's path)", **_RUN_ROUTE)
async def sdk_run(body: RunRequest, state: ServiceState = Depends(get_state)) -> Response:
    """`client.fine_tuning.alpha.graders.run(...)`: /v1/graders/run with the SDK's response types
    (`metadata.token_usage` is the total token count)."""
    return await _run(body, state, sdk=True)


@router.post(PREFIX + "/validate", summary="Validate an OpenAI grader spec", **_VALIDATE_ROUTE)
async def validate(body: ValidateRequest) -> Response:
    """A dry run: parse the spec, check its metrics, templates and formula (over the sub-rewards' ranges)."""
    return _validate(body)


@router.post(
    SDK_PREFIX + "/validate",
    summary="Validate an OpenAI grader spec (the openai SDK's path)",
    **_VALIDATE_ROUTE,
)
async def sdk_validate(body: ValidateRequest) -> Response:
    """`client.fine_tuning.alpha.graders.validate(...)`: the same dry run as /v1/graders/validate."""
    return _validate(body)
