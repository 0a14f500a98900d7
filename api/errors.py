"""Exception handlers: every error, whatever raised it, answers {"error": {"status", "message", "field"}}."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel
from starlette.exceptions import HTTPException
from starlette.responses import Response

from proctor.api.admission import Overloaded
from proctor.api.rendering import json_response
from proctor.capacity import PoolClosed, PoolFull
from proctor.contract import MAX_NESTING, ErrorBody, RequestError
from proctor.policy import ScoringFailed

log = logging.getLogger(__name__)

_LOCATION_PREFIXES = ("body", "query", "path", "header")


class ErrorResponse(BaseModel):
    """The JSON body of every error response."""

    error: ErrorBody


def error_response(
    status: int, message: str, field: str | None = None, headers: dict[str, str] | None = None
) -> Response:
    """An error response in the service's one error shape."""
    body = {"error": {"status": status, "message": message, "field": field}}
    return json_response(body, status_code=status, headers=headers)


def describe_validation_error(errors: list[dict[str, Any]]) -> tuple[str, str | None]:
    """A message and the dotted field path for FastAPI's validation errors (first offending field)."""
    if not errors:
        return "invalid request", None
    first = errors[0]
    if first.get("type") == "json_invalid":
        detail = (first.get("ctx") or {}).get("error", "malformed JSON")
        position = first["loc"][-1] if first.get("loc") else "?"
        return f"invalid JSON body: {detail} (at character {position})", None
    located = [(_strip_location(error.get("loc", ())), error) for error in errors]
    head = located[0][0][:1]
    group = [(path, error) for path, error in located if path[:1] == head]
    # A union reports one error per member ("response.str", "response.list[...]"): name their common parent.
    path = _common_prefix([p for p, _ in group]) if len(group) > 1 else group[0][0]
    field = ".".join(str(part) for part in path) or None
    if first.get("type") == "missing":
        return (f"missing required field {field}", field) if field else ("request body is required", None)
    messages = "; or ".join(dict.fromkeys(str(error.get("msg", "invalid value")) for _, error in group))
    return f"invalid {field or 'request'}: {messages}", field


def _strip_location(loc: Any) -> tuple[Any, ...]:
    parts = tuple(loc)
    if parts and parts[0] in _LOCATION_PREFIXES:
        return parts[1:]
    return parts


def _common_prefix(paths: list[tuple[Any, ...]]) -> tuple[Any, ...]:
    prefix: list[Any] = []
    for parts in zip(*paths, strict=False):  # stop at the shortest path
        if any(part != parts[0] for part in parts):
            break
        prefix.append(parts[0])
    return tuple(prefix)


def body_parse_error(exc: HTTPException) -> str | None:
    """The message for a JSON body FastAPI could not parse for a reason other than its syntax, else None.

    FastAPI parses bodies with the standard json module and turns anything but a syntax error into a bare
    400 ("There was an error parsing the body"): bytes that are not UTF-8, and JSON nested deeper than the
    parser's recursion limit (about 1,000 levels; the C parser raises RecursionError, never overflows the
    stack). Both are the client's malformed body, answered 422 like a syntax error.
    """
    cause = exc.__cause__
    if exc.status_code != 400 or cause is None:
        return None
    if isinstance(cause, RecursionError):
        return f"invalid JSON body: nested too deeply (data may nest at most {MAX_NESTING} levels)"
    if isinstance(cause, UnicodeDecodeError):
        return f"invalid JSON body: not UTF-8 text ({cause.reason} at byte {cause.start})"
    if isinstance(cause, ValueError):
        return f"invalid JSON body: {cause}"
    return None


def install_error_handlers(app: FastAPI, retry_after_s: int, on_rejected: Any = None) -> None:
    """Register the handlers that give every error the one JSON shape (4xx for anything a client sends)."""
    retry = {"Retry-After": str(retry_after_s)}

    def rejected(reason: str) -> None:
        if on_rejected is not None:
            on_rejected(reason)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> Response:
        errors = list(exc.errors())
        content_type = request.headers.get("content-type", "")
        in_body = bool(errors) and tuple(errors[0].get("loc", ()))[:1] == ("body",)
        if in_body and content_type and "json" not in content_type.lower():
            # FastAPI only parses JSON bodies sent as JSON; say so instead of "should be a valid dictionary".
            return error_response(
                422, f"request body must be JSON sent as application/json, not {content_type}"
            )
        message, field = describe_validation_error(errors)
        return error_response(422, message, field)

    @app.exception_handler(RequestError)
    async def request_error(request: Request, exc: RequestError) -> Response:
        # 429 and 503 say "try again": tell the client when (a job cap, the jobs database down, ...).
        headers = retry if exc.status in (429, 503) else None
        return error_response(exc.status, exc.message, exc.field, headers)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> Response:
        unparsable = body_parse_error(exc)
        if unparsable is not None:
            return error_response(422, unparsable)
        message = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        return error_response(exc.status_code, message, None, dict(exc.headers or {}))

    @app.exception_handler(Overloaded)
    async def overloaded(request: Request, exc: Overloaded) -> Response:
        rejected("queue_full")
        return error_response(429, str(exc), None, retry)

    @app.exception_handler(PoolFull)
    async def pool_full(request: Request, exc: PoolFull) -> Response:
        rejected("pool_full")
        return error_response(429, str(exc), None, retry)

    @app.exception_handler(ScoringFailed)
    async def scoring_failed(request: Request, exc: ScoringFailed) -> Response:
        return error_response(503, f"{exc} (on_failure=raise)", None, retry)

    @app.exception_handler(PoolClosed)
    async def pool_closed(request: Request, exc: PoolClosed) -> Response:
        return error_response(503, f"service shutting down: {exc}", None, retry)

    @app.exception_handler(Exception)
    async def server_error(request: Request, exc: Exception) -> Response:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(500, f"internal error: {type(exc).__name__}", None)
