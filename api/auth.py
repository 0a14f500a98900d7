"""Bearer-token auth as pure ASGI middleware: when a token is configured every route but /healthz needs it."""

from __future__ import annotations

import hmac

from starlette.types import ASGIApp, Receive, Scope, Send

from proctor.api.rendering import dump_json

OPEN_PATHS = frozenset({"/healthz"})


def token_matches(authorization: bytes | None, token: str) -> bool:
    """Whether an Authorization header value carries exactly this bearer token (constant-time compare)."""
    if not authorization:
        return False
    scheme, _, credentials = authorization.partition(b" ")
    if scheme.lower() != b"bearer":
        return False
    return hmac.compare_digest(credentials.strip(), token.encode("utf-8"))


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
        message = "missing bearer token" if header is None else "invalid bearer token"
        body = dump_json({"error": {"status": 401, "message": message, "field": "Authorization"}})
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"www-authenticate", b'Bearer realm="proctor"'),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
