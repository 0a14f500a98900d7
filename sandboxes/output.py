"""Read a running program's pipes concurrently with capped buffers, so no output size can deadlock the sandbox.

One selector loop feeds stdin and drains stdout, stderr and any side channel (nsjail's log) while the
program runs; a `tick` callback runs between reads (every `interval` seconds at most) so the caller can poll
CPU time and kill the process tree. Bytes beyond a stream's cap are read and dropped, never left in the pipe.
"""

from __future__ import annotations

import contextlib
import errno
import os
import selectors
import time
from collections.abc import Callable
from dataclasses import dataclass, field

CHUNK = 65536
_WAKE = object()


@dataclass
class Stream:
    """One pipe read into memory up to `cap` bytes; the rest is drained and counted."""

    fd: int
    cap: int
    data: bytearray = field(default_factory=bytearray)
    total: int = 0
    closed: bool = False

    @property
    def truncated(self) -> bool:
        """Whether more bytes arrived than were kept."""
        return self.total > self.cap

    def feed(self, chunk: bytes) -> None:
        """Keep what fits under the cap and count everything."""
        room = self.cap - len(self.data)
        if room > 0:
            self.data += chunk[:room]
        self.total += len(chunk)

    def text(self) -> str:
        """The kept bytes as text (UTF-8, invalid sequences replaced)."""
        return decode(bytes(self.data))


def decode(data: bytes) -> str:
    """UTF-8 with replacement characters, so any bytes a program prints become a string."""
    return data.decode("utf-8", errors="replace")


class Pump:
    """Feeds stdin and drains output pipes with one selector until every output pipe is closed.

    The pump owns the fds it is given and closes them. `tick()` is called at least every `interval`
    seconds, right after a stream first passes its cap and right after a pipe closes; pumping goes on until
    it returns True (typically: the process has exited and `all_closed`, or a stray holder of the pipes
    outlived it for too long).
    """

    def __init__(
        self, streams: dict[str, Stream], stdin_fd: int | None = None, stdin_data: bytes = b""
    ) -> None:
        self.streams = streams
        self._stdin_fd = stdin_fd
        self._stdin = memoryview(stdin_data)
        self._stdin_done = stdin_fd is None

    @property
    def all_closed(self) -> bool:
        """Whether every output pipe has reached EOF."""
        return all(stream.closed for stream in self.streams.values())

    def over_cap(self, name: str) -> bool:
        """Whether the named stream has passed its cap."""
        return self.streams[name].truncated

    def run(self, tick: Callable[[], bool], interval: float, wake_fd: int | None = None) -> None:
        """Pump until `tick` returns True; always closes every fd it owns.

        `wake_fd` (e.g. a pidfd, readable once the process exits) triggers a tick as soon as it is readable;
        the pump does not read or close it.
        """
        sel = selectors.DefaultSelector()
        try:
            if wake_fd is not None:
                sel.register(wake_fd, selectors.EVENT_READ, _WAKE)
            for name, stream in self.streams.items():
                os.set_blocking(stream.fd, False)
                sel.register(stream.fd, selectors.EVENT_READ, name)
            if self._stdin_fd is not None:
                if self._stdin:
                    os.set_blocking(self._stdin_fd, False)
                    sel.register(self._stdin_fd, selectors.EVENT_WRITE, None)
                else:
                    self._close_stdin()
            self._loop(sel, tick, interval)
        finally:
            sel.close()
            self._close_stdin()
            for stream in self.streams.values():
                if not stream.closed:
                    stream.closed = True
                    os.close(stream.fd)

    def _loop(self, sel: selectors.BaseSelector, tick: Callable[[], bool], interval: float) -> None:
        next_tick = time.monotonic() + interval
        while True:
            timeout = max(0.0, next_tick - time.monotonic())
            wake = False
            for key, _ in sel.select(timeout):
                if key.data is _WAKE:
                    sel.unregister(key.fd)
                    wake = True
                    continue
                if key.data is None:
                    if self._write_stdin():
                        sel.unregister(key.fd)
                        self._close_stdin()
                    continue
                stream = self.streams[key.data]
                was_over = stream.truncated
                if self._read(stream):
                    sel.unregister(stream.fd)
                    stream.closed = True
                    os.close(stream.fd)
                    wake = True
                wake = wake or (stream.truncated and not was_over)
            if wake or time.monotonic() >= next_tick:
                next_tick = time.monotonic() + interval
                if tick():
                    return

    @staticmethod
    def _read(stream: Stream) -> bool:
        """Read what is available; True at EOF."""
        try:
            chunk = os.read(stream.fd, CHUNK)
        except BlockingIOError:
            return False
        except OSError as exc:
            if exc.errno in (errno.EIO, errno.EBADF):
                return True
            raise
        if not chunk:
            return True
        stream.feed(chunk)
        return False

    def _write_stdin(self) -> bool:
        """Write a piece of stdin; True when done (all written, or the program closed its end)."""
        assert self._stdin_fd is not None
        try:
            written = os.write(self._stdin_fd, self._stdin[:CHUNK])
        except BlockingIOError:
            return False
        except (BrokenPipeError, OSError):
            return True
        self._stdin = self._stdin[written:]
        return not self._stdin

    def _close_stdin(self) -> None:
        if not self._stdin_done and self._stdin_fd is not None:
            self._stdin_done = True
            with contextlib.suppress(OSError):
                os.close(self._stdin_fd)
