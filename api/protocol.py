"""uvicorn's HTTP protocol with a header read time-out: a client that never finishes its headers is dropped.

uvicorn times out idle keep-alive connections (`timeout_keep_alive`), but not a request whose headers never
end: a connection that sends nothing, or `GET / HTTP/1.1\\r\\nX-a: b\\r\\n` and then one byte now and then
(slowloris), holds a socket and a protocol object for ever. Here each request's headers must be complete
within HEADER_TIMEOUT_S of the connection opening (first request) or of its first byte (later requests on a
kept-alive connection); otherwise the connection is closed. Trickling bytes does not extend the time-out.
Bodies are not covered: they are read by the app, under the body limit and the admission queue.

The server names the class through `HTTP_PROTOCOL` (an import string, so uvicorn's worker processes load it
too). It is the httptools protocol when httptools is installed, as uvicorn's own "auto" choice, else h11's.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

HEADER_TIMEOUT_S = 5.0
"""Seconds a client has to send a request's complete headers."""

HTTP_PROTOCOL = "proctor.api.protocol:HeaderTimeoutProtocol"


class _HeaderDeadline:
    """The timer: armed when a request may begin, disarmed when its headers are complete, never extended."""

    header_timeout_s = HEADER_TIMEOUT_S
    _header_timer: asyncio.TimerHandle | None = None
    transport: asyncio.Transport
    loop: asyncio.AbstractEventLoop

    def _arm_header_timer(self) -> None:
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(self.header_timeout_s, self._header_timed_out)

    def _disarm_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _header_timed_out(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing():
            self.transport.close()


class HeaderTimeoutH11(_HeaderDeadline, H11Protocol):
    """h11's protocol with the header time-out (a new request cycle means its headers are complete)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Start the clock for the first request's headers."""
        super().connection_made(transport)
        self._arm_header_timer()

    def data_received(self, data: bytes) -> None:
        """Arm on the first bytes of a new request; disarm once uvicorn has started its cycle."""
        if self.cycle is None or self.cycle.response_complete:
            self._arm_header_timer()
        before = self.cycle
        super().data_received(data)
        if self.cycle is not before:
            self._disarm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        """Drop the timer with the connection."""
        self._disarm_header_timer()
        super().connection_lost(exc)


HeaderTimeoutProtocol: Any = HeaderTimeoutH11

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # pragma: no cover - httptools comes with uvicorn[standard]
    pass
else:

    class HeaderTimeoutHttpTools(_HeaderDeadline, HttpToolsProtocol):
        """httptools' protocol with the header time-out, on the parser's message-begin and headers-complete."""

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            """Start the clock for the first request's headers."""
            super().connection_made(transport)
            self._arm_header_timer()

        def on_message_begin(self) -> None:
            """A later request on a kept-alive connection starts its own clock."""
            super().on_message_begin()
            self._arm_header_timer()

        def on_headers_complete(self) -> None:
            """The headers arrived in time."""
            self._disarm_header_timer()
            super().on_headers_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            """Drop the timer with the connection."""
            self._disarm_header_timer()
            super().connection_lost(exc)

    HeaderTimeoutProtocol = HeaderTimeoutHttpTools
