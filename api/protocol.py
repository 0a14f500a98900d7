"""uvicorn's HTTP protocol with read time-outs: a client that never finishes its headers or its body is dropped.

uvicorn times out idle keep-alive connections (`timeout_keep_alive`), but not a request that never ends: a
connection that sends nothing, or `GET / HTTP/1.1\\r\\nX-a: b\\r\\n` and then one byte now and then
(slowloris), or complete headers and then a body at one byte a second, holds a socket, a protocol object
and a request task for ever. Here:

- Headers: each request's headers must be complete within HEADER_TIMEOUT_S of the connection opening
  (first request) or of its first byte (later requests on a kept-alive connection); otherwise the
  connection is closed. Trickling bytes does not extend the time-out.
- Body (Content-Length or chunked alike): once the headers are complete, the body must arrive at an average
  of at least BODY_MIN_RATE bytes a second after a grace of BODY_GRACE_S, i.e. `t <= BODY_GRACE_S +
  received / BODY_MIN_RATE` (ASP.NET Kestrel's MinRequestBodyDataRate, 240 B/s after 5 s). Otherwise the
  client gets 408 (or, when its response has begun, nothing) and the connection is closed. A rate, not a
  fixed deadline: any link faster than 1 KiB/s (8 kbit/s) sends a body of any size, the 32 MiB limit
  included, and a client must keep paying bandwidth to keep a connection. A time-out between reads
  (nginx's client_body_timeout) would let one byte a minute hold it for ever; a deadline scaled by
  Content-Length would let a trickle hold it for hours and does not apply to chunked bodies. Time the
  server holds the client back does not count: while uvicorn stops reading because the app has not taken
  the buffered body, and before a `100 Continue` is sent to a client that waits for it.
- A client answered before its body ended (a 401, say) is still bound by the body rate; once that body
  ends its next request's headers are timed from there, since uvicorn arms no keep-alive timer then.

The server names the class through `HTTP_PROTOCOL` (an import string, so uvicorn's worker processes load it
too). It is the httptools protocol when httptools is installed, as uvicorn's own "auto" choice, else h11's.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import h11
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.h11_impl import H11Protocol

HEADER_TIMEOUT_S = 5.0
"""Seconds a client has to send a request's complete headers."""

BODY_GRACE_S = 10.0
"""Seconds of a request body's transfer not held to BODY_MIN_RATE (a slow start, a stalled first segment)."""

BODY_MIN_RATE = 1024
"""Bytes a second a request body must average, past BODY_GRACE_S; slower clients get 408."""

HTTP_PROTOCOL = "proctor.api.protocol:HeaderTimeoutProtocol"

_TIMEOUT_BODY = json.dumps(
    {
        "error": {
            "status": 408,
            "message": "request body not received in time (under the minimum data rate)",
            "field": None,
        }
    }
).encode()
REQUEST_TIMEOUT_RESPONSE = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
    b"content-length: " + str(len(_TIMEOUT_BODY)).encode() + b"\r\n\r\n" + _TIMEOUT_BODY
)


class _WatchedFlow(FlowControl):
    """uvicorn's read back-pressure, telling the protocol when it stops and resumes reading the client."""

    def __init__(self, transport: asyncio.Transport, protocol: _ReadDeadlines):
        super().__init__(transport)
        self._protocol = protocol

    def pause_reading(self) -> None:
        if not self.read_paused:
            self._protocol._reading_held()
        super().pause_reading()

    def resume_reading(self) -> None:
        if self.read_paused:
            self._protocol._reading_released()
        super().resume_reading()


class _ReadDeadlines:
    """The timers: headers by a fixed deadline, never extended; bodies by a minimum average data rate."""

    header_timeout_s = HEADER_TIMEOUT_S
    body_grace_s = BODY_GRACE_S
    body_min_rate = BODY_MIN_RATE
    _header_timer: asyncio.TimerHandle | None = None
    _body_timer: asyncio.TimerHandle | None = None
    _body_started: float | None = None  # loop time the body clock started; None when no body is being read
    _body_received = 0  # bytes received since
    _body_held_s = 0.0  # time since then the server held the client back
    _body_held_since: float | None = None
    transport: asyncio.Transport
    loop: asyncio.AbstractEventLoop
    flow: FlowControl
    cycle: Any

    # Both protocols: this class comes first in their bases, so super() is uvicorn's protocol.
    def connection_made(self, transport: asyncio.Transport) -> None:
        """Watch uvicorn's flow control (made in connection_made, before any request); time the first headers."""
        super().connection_made(transport)  # type: ignore[misc]
        self.flow = _WatchedFlow(self.transport, self)
        self._arm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        """Drop the timers with the connection."""
        self._disarm_header_timer()
        self._stop_body_clock()
        super().connection_lost(exc)  # type: ignore[misc]

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

    # The body clock.
    def _start_body_clock(self) -> None:
        if self._body_started is not None:
            return
        now = self.loop.time()
        self._body_started, self._body_received, self._body_held_s = now, 0, 0.0
        self._body_held_since = now if self.flow.read_paused else None
        self._arm_body_timer(self.body_grace_s)

    def _stop_body_clock(self) -> None:
        self._body_started = self._body_held_since = None
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _count_body_bytes(self, count: int) -> None:
        if self._body_started is not None:
            self._body_received += count

    def _arm_body_timer(self, delay: float) -> None:
        if self._body_timer is None:
            self._body_timer = self.loop.call_later(max(delay, 0.001), self._check_body_rate)

    def _reading_held(self) -> None:
        if self._body_started is not None and self._body_held_since is None:
            self._body_held_since = self.loop.time()

    def _reading_released(self) -> None:
        if self._body_held_since is not None:
            self._body_held_s += self.loop.time() - self._body_held_since
            self._body_held_since = None
            if self._body_started is not None:
                self._arm_body_timer(self._body_time_left())

    def _body_time_left(self) -> float:
        """Seconds until the body falls under the minimum rate (not counting time the server held it back)."""
        assert self._body_started is not None
        elapsed = self.loop.time() - self._body_started - self._body_held_s
        return self.body_grace_s + self._body_received / self.body_min_rate - elapsed

    def _check_body_rate(self) -> None:
        self._body_timer = None
        if (
            self._body_started is None
            or self.transport.is_closing()
            or self.transport.get_protocol() is not self
        ):
            return
        if self.cycle is not None and self.cycle.waiting_for_100_continue:
            # The client waits for our 100 Continue (sent when the app reads): its clock starts from then.
            self._body_started, self._body_received, self._body_held_s = self.loop.time(), 0, 0.0
            self._arm_body_timer(self.body_grace_s)
            return
        if self._body_held_since is not None:
            return  # re-armed when reading resumes
        left = self._body_time_left()
        if left > 0:
            self._arm_body_timer(left)
            return
        self._stop_body_clock()
        cycle = self.cycle
        if cycle is not None and not cycle.response_started and self._may_answer():
            self.transport.write(REQUEST_TIMEOUT_RESPONSE)
            cycle.response_started = True
        if cycle is not None:  # the app's receive() now says http.disconnect, and its sends are dropped
            cycle.disconnected = True
            cycle.message_event.set()
        self.transport.close()

    def _may_answer(self) -> bool:
        """Whether a 408 written now cannot interleave with another response on the connection."""
        return True


class HeaderTimeoutH11(_ReadDeadlines, H11Protocol):
    """h11's protocol with the read time-outs, on h11's view of the client's state."""

    def data_received(self, data: bytes) -> None:
        """Arm on the bytes of a new request; disarm once uvicorn has started its cycle; follow the body."""
        if self.conn.their_state is h11.IDLE:
            self._arm_header_timer()
        self._count_body_bytes(len(data))
        before = self.cycle
        super().data_received(data)
        if self.cycle is not before:
            self._disarm_header_timer()
        self._follow_body()
        if self.conn.their_state is h11.IDLE:
            # A body that ended after its response leaves a connection with no timer: time the next request.
            self._arm_header_timer()

    def on_response_complete(self) -> None:
        """A pipelined request parsed from the buffer may be waiting for its body."""
        super().on_response_complete()
        self._follow_body()

    def _follow_body(self) -> None:
        if self.conn.their_state is h11.SEND_BODY:
            self._start_body_clock()
        else:
            self._stop_body_clock()


HeaderTimeoutProtocol: Any = HeaderTimeoutH11

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # pragma: no cover - httptools comes with uvicorn[standard]
    pass
else:

    class HeaderTimeoutHttpTools(_ReadDeadlines, HttpToolsProtocol):
        """httptools' protocol with the read time-outs, on the parser's message callbacks."""

        def data_received(self, data: bytes) -> None:
            """Count the bytes of a body being read."""
            self._count_body_bytes(len(data))
            super().data_received(data)

        def on_message_begin(self) -> None:
            """A later request on a kept-alive connection starts its own clock."""
            super().on_message_begin()
            self._arm_header_timer()

        def on_headers_complete(self) -> None:
            """The headers arrived in time; the body's clock starts (a request without one completes at once)."""
            self._disarm_header_timer()
            super().on_headers_complete()
            self._start_body_clock()

        def on_message_complete(self) -> None:
            """The body arrived in time; if it ended after its response, time the next request's headers."""
            self._stop_body_clock()
            if self.cycle is not None and self.cycle.response_complete:
                self._arm_header_timer()
            super().on_message_complete()

        def _may_answer(self) -> bool:
            return not self.pipeline

    HeaderTimeoutProtocol = HeaderTimeoutHttpTools
