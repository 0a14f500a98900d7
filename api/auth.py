"""Bearer-token auth as pure ASGI middleware: when a token is configured every route but /healthz needs it."""

from __future__ import annotations

import hmac

from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from proctor.api.rendering import dump_json

OPEN_PATHS = frozenset({"/healthz"})
"""Paths answered without the token (for load balancers); /healthz?detail=true checks it in its route."""


def token_matches(authorization: bytes | None, token: str) -> bool:
    """Whether an Authorization header value carries exactly this bearer token (constant-time compare)."""
    if not authorization:
        return False
    scheme, _, credentials = authorization.partition(b" ")
    if scheme.lower() != b"bearer":
        return False
    return hmac.compare_digest(credentials.strip(), token.encode("utf-8"))


def unauthorized(header_sent: bool) -> Response:
    """A 401 response in the service's error shape, with the bearer challenge: the token is missing, or it is
    not the right one."""
    message = "invalid bearer token" if header_sent else "missing bearer token"
    return Response(
        dump_json({"error": {"status": 401, "message": message, "field": "Authorization"}}),
        status_code=401,
        media_type="application/json",
        headers={"WWW-Authenticate": 'Bearer realm="proctor"'},
    )


class BearerAuthMiddleware:
    """Answer 401 with the error JSON to requests without the right `Authorization: Bearer <token>`."""

    def __init__(self, app: ASGIApp, token: str):
        if not token:
            raise ValueError("BearerAuthMiddleware needs a non-empty token")
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        header = next((value for name, value in scope.get("headers", ()) if name == b"authorization"), None)
        if token_matches(header, self.token):
            await self.app(scope, receive, send)
            return
        await unauthorized(header is not None)(scope, receive, send)
