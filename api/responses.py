"""Response models and the documented error responses shared by the route modules (they shape /openapi.json)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from proctor.api.errors import ErrorResponse


class VerifierInfo(BaseModel):
    """A registered verifier: name, version and the JSON schemas of its reference and options."""

    name: str
    version: str
    description: str
    execution: Literal["inline", "pool"]
    accepts_messages: bool
    reference_schema: dict[str, Any]
    options_schema: dict[str, Any]


class Limits(BaseModel):
    """Request limits a client needs to split its batches."""

    max_body_bytes: int
    max_batch_items: int


class Health(BaseModel):
    """Liveness, version, verifier count, pool state (null until the pool starts) and request limits."""

    status: Literal["ok"]
    version: str
    verifiers: int
    pool: dict[str, int] | None = Field(description="Worker pool stats, or null if the pool has not started.")
    limits: Limits


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI entries for the given error status codes, all with the one error shape."""
    meaning = {
        400: "Malformed request.",
        401: "Missing or wrong bearer token.",
        404: "Unknown verifier (the message lists the known ones).",
        413: "Request body or batch too large.",
        422: "Invalid field (named in error.field).",
        429: "Too many requests waiting; retry after the Retry-After header.",
        503: "Scoring failed under on_failure=raise, or the service is shutting down.",
    }
    return {code: {"model": ErrorResponse, "description": meaning[code]} for code in codes}


SERVER_VALIDATED = "x-server-validated"
"""OpenAPI extension on an operation: {field: why} for fields whose rules the schema cannot express."""


def server_validated(**fields: str) -> dict[str, Any]:
    """`openapi_extra` naming the fields a schema-valid request may still be rejected on, and why.

    A request the schema allows is accepted, except for a 422 whose `error.field` is one of these fields or a
    path below it (a verifier's reference, an environment's config ...). Dotted names are written with `__`.
    """
    return {SERVER_VALIDATED: {name.replace("__", "."): why for name, why in fields.items()}}


VERIFIER_REFERENCE = (
    "Verifier-specific: validated against the verifier's reference_schema (GET /v1/verifiers/{name}); "
    "lists and objects may nest at most 200 levels."
)
VERIFIER_OPTIONS = (
    "Verifier-specific: validated against the verifier's options_schema (GET /v1/verifiers/{name}); "
    "lists and objects may nest at most 200 levels."
)
