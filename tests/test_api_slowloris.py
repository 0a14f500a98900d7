"""The header read time-out: clients that never finish their headers are dropped (real sockets, 127.0.0.1 only)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
import uvicorn

from proctor.api.protocol import HEADER_TIMEOUT_S, HeaderTimeoutH11, HeaderTimeoutProtocol
from tests.conftest import free_port

PARTIAL = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "


def connect(port: int, send: bytes = b"") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    if send:
        sock.sendall(send)
    return sock


def is_closed(sock: socket.socket) -> bool:
    """Whether the server closed the connection (EOF or reset), without waiting for it."""
    sock.setblocking(False)
    try:
        return sock.recv(4096) == b""
    except BlockingIOError:
        return False
    except ConnectionError:
        return True
    finally:
        sock.setblocking(True)


def wait_all_closed(socks: list[socket.socket], within_s: float) -> None:
    """Wait until the server has closed every socket; fail past within_s."""
    started = time.monotonic()
    open_ = list(socks)
    while open_ and time.monotonic() - started < within_s:
        open_ = [sock for sock in open_ if not is_closed(sock)]
        time.sleep(0.1)
    assert not open_, f"{len(open_)} of {len(socks)} connections still open after {within_s} s"


def get_over(sock: socket.socket) -> bytes:
    """Send a complete request on sock and read the response head."""
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    sock.settimeout(30)
    return sock.recv(65536)


def test_live_server_drops_clients_that_never_finish_their_headers(live_server: str) -> None:
    port = int(live_server.rsplit(":", 1)[1])
    socks = [connect(port, PARTIAL) for _ in range(50)] + [connect(port) for _ in range(10)]
    try:
        # Meanwhile the server answers everyone else.
        assert httpx.get(f"{live_server}/healthz", timeout=30).status_code == 200
        for sock in socks[:5]:  # trickling bytes does not extend the time-out
            sock.sendall(b"a")
        wait_all_closed(socks, HEADER_TIMEOUT_S + 10)
    finally:
        for sock in socks:
            sock.close()


class _Quick:
    header_timeout_s = 1.0


class QuickH11(_Quick, HeaderTimeoutH11):
    pass


class QuickDefault(_Quick, HeaderTimeoutProtocol):  # httptools when installed
    pass


async def _app(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


@pytest.fixture(params=[QuickH11, QuickDefault], ids=["h11", "default"])
def quick_server(request: pytest.FixtureRequest) -> Iterator[int]:
    """uvicorn on a thread with a 1 s header time-out, on the h11 protocol and on the default one."""
    port = free_port()
    config = uvicorn.Config(
        _app, host="127.0.0.1", port=port, http=request.param, lifespan="off", log_level="error"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started
    yield port
    server.should_exit = True
    thread.join(timeout=10)


def test_header_timeout_drops_slow_and_silent_clients_but_not_finished_ones(quick_server: int) -> None:
    port = quick_server
    silent, partial, dripping = connect(port), connect(port, PARTIAL), connect(port, PARTIAL)
    served = connect(port)
    try:
        assert get_over(served).startswith(b"HTTP/1.1 200")
        started = time.monotonic()
        closed: list[socket.socket] = []
        while time.monotonic() - started < 5 and len(closed) < 3:
            with contextlib.suppress(OSError):
                dripping.sendall(b"a")  # one byte at a time never extends the time-out
            closed = [sock for sock in (silent, partial, dripping) if sock in closed or is_closed(sock)]
            time.sleep(0.2)
        assert len(closed) == 3, "slow clients were not dropped"
        assert time.monotonic() - started < 4
        # A kept-alive connection whose next request stalls in its headers is dropped too ...
        served.sendall(PARTIAL)
        wait_all_closed([served], 4)
        # ... while a client that finishes its headers in time is served on a kept-alive connection.
        fine = connect(port)
        assert get_over(fine).startswith(b"HTTP/1.1 200")
        time.sleep(1.5)  # past the header time-out: the request's headers were complete
        assert get_over(fine).startswith(b"HTTP/1.1 200")
        fine.close()
    finally:
        for sock in (silent, partial, dripping, served):
            sock.close()
