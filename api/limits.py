"""Request body size limit as pure ASGI middleware: checks Content-Length and counts streamed (chunked) bytes."""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proctor.api.rendering import dump_json


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


async def _send_error(send: Send, status: int, message: str) -> None:
    body = dump_json({"error": {"status": status, "message": message, "field": None}})
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
