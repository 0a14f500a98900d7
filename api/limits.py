"""Request limits as pure ASGI middleware: the body size limit (checks Content-Length and counts streamed,
chunked bytes) and the per-token rate limit (token buckets in Redis or in this process)."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proctor.api.rendering import dump_json
from proctor.redis_backend import LocalBuckets

if TYPE_CHECKING:
    from proctor.redis_backend import SharedRedis


class BodyTooLarge(HTTPException):
    """The request body passed the configured limit (HTTP 413)."""

    def __init__(self, limit: int):
        super().__init__(413, f"request body exceeds the limit of {limit} bytes (PROCTOR_MAX_BODY_BYTES)")


class BodyLimitMiddleware:
    """Answer 413 for bodies over `max_body_bytes`, before reading them when Content-Length says so."""

    def __init__(self, app: ASGIApp, max_body_bytes: int):
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_body_bytes:
            await _send_error(send, 413, BodyTooLarge(self.max_body_bytes).detail)
            return
        if declared == -1:
            await _send_error(send, 400, "invalid Content-Length header")
            return

        received = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body_bytes:
                    # An HTTPException: FastAPI lets it through its body parsing to the 413 handler.
                    raise BodyTooLarge(self.max_body_bytes)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except BodyTooLarge as exc:
            # Reached only when the body was read outside FastAPI's handlers (e.g. by another middleware).
            if started:
                raise
            await _send_error(send, 413, exc.detail)


def _content_length(scope: Scope) -> int | None:
    """The declared body length; None when absent, -1 when malformed."""
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                length = int(value)
            except ValueError:
                return -1
            return length if length >= 0 else -1
    return None


async def _send_error(
    send: Send, status: int, message: str, extra: dict[str, str] | None = None, *, close: bool = True
) -> None:
    body = dump_json({"error": {"status": status, "message": message, "field": None}})
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    if close:  # a body refused for its size is not read: close rather than read what is left of it
        headers.append((b"connection", b"close"))
    headers.extend((name.encode(), value.encode()) for name, value in (extra or {}).items())
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


RATE_LIMIT_EXEMPT = frozenset({"/healthz", "/metrics", "/docs", "/redoc", "/openapi.json"})
"""Paths the rate limit never counts: load balancers' health checks, scrapes and the API's own docs."""


class RateLimiter:
    """Per-caller token buckets: in Redis when the service shares one (atomic, on Redis's clock), else, and
    while Redis is down, in this process. `take` answers (allowed, seconds to wait, where the bucket was)."""

    def __init__(self, rate_per_s: float, burst: int, shared: SharedRedis | None = None):
        self.rate_per_s = rate_per_s
        self.burst = burst
        self.shared = shared
        self.local = LocalBuckets()

    def take(self, key: str) -> tuple[bool, float, str]:
        """Take one token from `key`'s bucket."""
        if self.shared is not None:
            taken = self.shared.take(key, self.rate_per_s, self.burst)
            if taken is not None:
                return taken[0], taken[1], "redis"
        allowed, wait = self.local.take(key, self.rate_per_s, self.burst)
        return allowed, wait, "local"


def caller_key(scope: Scope, by_token: bool) -> str:
    """Whose bucket a request takes from: a hash of its bearer token when the service checks tokens, else its
    client address (without auth any header is unchecked: a caller could name a fresh bucket per request)."""
    if by_token:
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                # The credentials as the token check reads them (any case of "Bearer", surrounding blanks), so
                # respelling the header cannot buy a fresh bucket.
                credentials = value.partition(b" ")[2].strip()
                return "token:" + hashlib.sha256(credentials).hexdigest()[:32]
    client = scope.get("client")
    return "addr:" + (str(client[0]) if client else "unknown")


class RateLimitMiddleware:
    """Answer 429 with Retry-After when a caller's bucket is empty (PROCTOR_RATE_LIMIT_PER_S and _BURST).

    Added inside the bearer-token check, so only callers that passed it spend tokens (a stranger's requests
    are turned away with 401 before they reach a bucket); `by_token` is whether that check is on."""

    def __init__(
        self,
        app: ASGIApp,
        limiter: RateLimiter,
        on_limited: Callable[[str], None] | None = None,
        by_token: bool = False,
    ):
        self.app = app
        self.limiter = limiter
        self.on_limited = on_limited
        self.by_token = by_token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in RATE_LIMIT_EXEMPT:
            await self.app(scope, receive, send)
            return
        allowed, wait_s, bucket = self.limiter.take(caller_key(scope, self.by_token))
        if allowed:
            await self.app(scope, receive, send)
            return
        if self.on_limited is not None:
            self.on_limited(bucket)
        retry_after = max(1, math.ceil(wait_s))
        message = (
            f"rate limit: {self.limiter.rate_per_s:g} requests per second (burst {self.limiter.burst}) per "
            f"token or client; retry after {retry_after} s"
        )
        # A rate-limited client stays connected: its next request, after Retry-After, reuses the connection.
        await _send_error(send, 429, message, {"retry-after": str(retry_after)}, close=False)
