"""Read time-outs: clients that never finish their headers, or send their body too slowly, are dropped.

Real sockets, 127.0.0.1 only: the live service with its defaults, and uvicorn on a thread with small bounds on
both protocol flavours (h11, and the default one: httptools when installed).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
import uvicorn

from proctor.api.protocol import BODY_GRACE_S, HEADER_TIMEOUT_S, HeaderTimeoutH11, HeaderTimeoutProtocol
from proctor.api.server import KEEP_ALIVE_S
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


def read_response(sock: socket.socket, within_s: float = 10) -> bytes:
    """Read until a full response head and its Content-Length body have arrived (or the server closed)."""
    data = b""
    sock.settimeout(within_s)
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        (
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        ),
        0,
    )
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


def trickle(
    pieces: dict[socket.socket, bytes], within_s: float, every_s: float = 0.2
) -> dict[socket.socket, bytes]:
    """Send each socket its piece every every_s until the server has closed them all; what each received.

    Fails past within_s with a connection still open."""
    received = {sock: b"" for sock in pieces}
    open_ = list(pieces)
    started = time.monotonic()
    while open_ and time.monotonic() - started < within_s:
        for sock in list(open_):
            with contextlib.suppress(OSError):
                sock.sendall(pieces[sock])
            sock.setblocking(False)
            try:
                while chunk := sock.recv(65536):
                    received[sock] += chunk
                open_.remove(sock)  # EOF
            except BlockingIOError:
                pass
            except ConnectionError:
                open_.remove(sock)
            finally:
                sock.setblocking(True)
        time.sleep(every_s)
    assert not open_, f"{len(open_)} of {len(pieces)} slow connections still open after {within_s} s"
    return received


def post_head(path: str, length: int | None, *extra: bytes) -> bytes:
    """A POST's head: Content-Length when length is given, else chunked."""
    framing = b"Content-Length: %d" % length if length is not None else b"Transfer-Encoding: chunked"
    lines = [b"POST %s HTTP/1.1" % path.encode(), b"Host: 127.0.0.1", framing, *extra]
    return b"\r\n".join(lines) + b"\r\n\r\n"


def chunked(body: bytes, size: int = 1024) -> bytes:
    pieces = [
        b"%x\r\n%s\r\n" % (len(body[i : i + size]), body[i : i + size]) for i in range(0, len(body), size)
    ]
    return b"".join(pieces) + b"0\r\n\r\n"


def test_live_server_drops_slow_bodies_and_idle_connections(live_server: str) -> None:
    """The red team's case on the service itself: a body at one byte a second gets 408 and is closed."""
    port = int(live_server.rsplit(":", 1)[1])
    score = b"POST /v1/score HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    by_length = connect(port, score + b"Content-Length: 100000\r\n\r\n")
    by_chunks = connect(port, score + b"Transfer-Encoding: chunked\r\n\r\n")
    idle = connect(port)
    socks = [by_length, by_chunks, idle]
    try:
        assert get_over(idle).startswith(b"HTTP/1.1 200")  # then idle: timeout_keep_alive closes it
        started = time.monotonic()
        received = trickle(
            {by_length: b"{", by_chunks: b"1\r\n{\r\n", idle: b""}, BODY_GRACE_S + 10, every_s=1.0
        )
        assert time.monotonic() - started >= min(KEEP_ALIVE_S, BODY_GRACE_S) - 1
        for sock in (by_length, by_chunks):
            assert received[sock].startswith(b"HTTP/1.1 408"), received[sock][:200]
            assert b'"status":408' in received[sock].replace(b" ", b"")
        # Meanwhile the server answers everyone else.
        assert httpx.get(f"{live_server}/healthz", timeout=30).status_code == 200
    finally:
        for sock in socks:
            sock.close()


class _Quick:
    header_timeout_s = 1.0
    body_grace_s = 1.0
    body_min_rate = 1024


class QuickH11(_Quick, HeaderTimeoutH11):
    pass


class QuickDefault(_Quick, HeaderTimeoutProtocol):  # httptools when installed
    pass


async def _read_body(receive) -> bytes:  # type: ignore[no-untyped-def]
    body = b""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ConnectionError("client gone")
        body += message.get("body", b"")
        if not message.get("more_body", False):
            return body


async def _app(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
    """/healthz: ok; /early: ok without reading the body; /echo: the body's length; /sleepy: the same, 2.5 s late."""
    if scope["type"] != "http":
        return
    reply = b"ok"
    if scope["path"] == "/sleepy":
        await asyncio.sleep(2.5)
    if scope["path"] in ("/echo", "/sleepy"):
        reply = str(len(await _read_body(receive))).encode()
    headers = [(b"content-length", str(len(reply)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": reply})


@contextlib.contextmanager
def running(protocol: type, timeout_keep_alive: int = 5) -> Iterator[int]:
    """uvicorn serving _app on a thread with this protocol class; its port."""
    port = free_port()
    config = uvicorn.Config(
        _app,
        host="127.0.0.1",
        port=port,
        http=protocol,
        lifespan="off",
        log_level="error",
        timeout_keep_alive=timeout_keep_alive,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture(params=[QuickH11, QuickDefault], ids=["h11", "default"])
def flavour(request: pytest.FixtureRequest) -> type:
    """A protocol class with 1 s header and body bounds (1 KiB/s), on h11 and on the default flavour."""
    return request.param


@pytest.fixture
def quick_server(flavour: type) -> Iterator[int]:
    with running(flavour, timeout_keep_alive=60) as port:
        yield port


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


def test_body_under_the_minimum_rate_gets_408_and_is_dropped(quick_server: int) -> None:
    """Content-Length or chunked, trickled or silent after the headers: 408 after the grace, then closed."""
    port = quick_server
    by_length = connect(port, post_head("/echo", 100_000))
    by_chunks = connect(port, post_head("/echo", None))
    silent = connect(port, post_head("/echo", 100_000) + b"x" * 500)
    socks = [by_length, by_chunks, silent]
    try:
        started = time.monotonic()
        received = trickle({by_length: b"a", by_chunks: b"1\r\na\r\n", silent: b""}, 5)
        assert time.monotonic() - started < 4  # 1 s grace (+ 0.5 s for the 500 bytes)
        for sock in socks:
            assert received[sock].startswith(b"HTTP/1.1 408"), received[sock][:200]
            assert received[sock].endswith(b'"field": null}}')
    finally:
        for sock in socks:
            sock.close()


def test_body_at_a_fair_rate_is_served_past_the_grace(quick_server: int) -> None:
    """16 KiB at about 10 KiB/s takes longer than the grace but keeps above the rate: served, both framings."""
    port = quick_server
    body = b"x" * 16 * 1024
    for head, payload in ((post_head("/echo", len(body)), body), (post_head("/echo", None), chunked(body))):
        sock = connect(port, head)
        try:
            for i in range(0, len(payload), 1024):
                sock.sendall(payload[i : i + 1024])
                time.sleep(0.1)
            assert read_response(sock).endswith(b"\r\n\r\n16384")
        finally:
            sock.close()
    big = connect(port, post_head("/echo", 8 * 1024 * 1024))  # a large body on a fast link
    try:
        big.sendall(b"y" * 8 * 1024 * 1024)
        assert read_response(big).endswith(b"\r\n\r\n8388608")
    finally:
        big.close()


def test_time_the_server_holds_the_body_back_does_not_count(flavour: type) -> None:
    """The app reads 2.5 s late: neither a body paused by back-pressure nor one awaiting 100 Continue is late."""
    strict = type("Strict", (flavour,), {"body_min_rate": 1_000_000})  # 64 KiB buys 0.07 s, not 2.5 s
    with running(strict) as port:
        body = b"z" * 4 * 1024 * 1024
        pushed = connect(port, post_head("/sleepy", len(body)))
        sender = threading.Thread(target=pushed.sendall, args=(body,), daemon=True)
        sender.start()
        waiting = connect(port, post_head("/sleepy", 10, b"Expect: 100-continue"))
        try:
            waiting.settimeout(10)
            assert waiting.recv(65536).startswith(b"HTTP/1.1 100")
            waiting.sendall(b"0123456789")
            assert read_response(waiting).endswith(b"\r\n\r\n10")
            assert read_response(pushed).endswith(b"\r\n\r\n%d" % len(body))
            sender.join(timeout=10)
        finally:
            pushed.close()
            waiting.close()


def test_client_answered_before_its_body_ends_is_still_bounded(quick_server: int) -> None:
    """/early answers without reading: a body trickled after that, or an idle connection after it, is dropped."""
    port = quick_server
    trickling = connect(port, post_head("/early", 100_000) + b"a" * 10)
    finished = connect(port, post_head("/early", 100))
    try:
        assert read_response(trickling).endswith(b"\r\n\r\nok")
        assert read_response(finished).endswith(b"\r\n\r\nok")
        finished.sendall(b"b" * 100)  # the body ends after its response; then nothing (keep-alive is 60 s)
        received = trickle({trickling: b"a", finished: b""}, 5)
        assert received == {trickling: b"", finished: b""}  # nothing more is answered
    finally:
        trickling.close()
        finished.close()


def test_idle_kept_alive_connection_is_closed_by_timeout_keep_alive(flavour: type) -> None:
    """uvicorn's timeout_keep_alive bounds an idle connection between requests (the server sets KEEP_ALIVE_S)."""
    with running(flavour, timeout_keep_alive=1) as port:
        sock = connect(port)
        try:
            assert get_over(sock).startswith(b"HTTP/1.1 200")
            started = time.monotonic()
            wait_all_closed([sock], 4)
            assert time.monotonic() - started >= 0.5
        finally:
            sock.close()
