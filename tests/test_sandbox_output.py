"""The capped concurrent reader of stdout/stderr, driven by real subprocesses through real pipes."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from proctor.sandboxes.output import Pump, Stream, decode

HANG_S = 20  # a pump that has not finished by then is deadlocked


def start(code: str) -> tuple[subprocess.Popen[bytes], int, dict[str, Stream], int]:
    """A Python child with raw pipes; returns it, the stdin write end, the output streams and a pidfd."""
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=in_r, stdout=out_w, stderr=err_w)
    for fd in (in_r, out_w, err_w):
        os.close(fd)
    return (
        proc,
        in_w,
        {"stdout": Stream(out_r, 1 << 30), "stderr": Stream(err_r, 1 << 30)},
        os.pidfd_open(proc.pid),
    )


def pump_until_done(pump: Pump, proc: subprocess.Popen[bytes], pidfd: int | None = None) -> int:
    """Run the pump until the child exited and every pipe closed; returns how many ticks ran."""
    ticks = 0
    began = time.monotonic()

    def tick() -> bool:
        nonlocal ticks
        ticks += 1
        assert time.monotonic() - began < HANG_S, "the pump is stuck"
        return proc.poll() is not None and pump.all_closed

    pump.run(tick, 0.01, pidfd)
    return ticks


def test_stdout_is_capped_and_counted() -> None:
    proc, stdin, streams, pidfd = start("import sys\nsys.stdout.write('a' * 1_000_000)\n")
    streams["stdout"].cap = 1000
    pump = Pump(streams, stdin)
    pump_until_done(pump, proc, pidfd)
    os.close(pidfd)
    out = streams["stdout"]
    assert out.data == b"a" * 1000
    assert out.total == 1_000_000
    assert out.truncated and pump.over_cap("stdout")
    assert not streams["stderr"].truncated


def test_floods_on_both_streams_do_not_deadlock() -> None:
    code = "import sys\nfor _ in range(40):\n    sys.stdout.write('o' * 262144)\n    sys.stderr.write('e' * 262144)\n"
    proc, stdin, streams, pidfd = start(code)
    streams["stderr"].cap = 65536
    pump_until_done(Pump(streams, stdin), proc, pidfd)
    os.close(pidfd)
    assert len(streams["stdout"].data) == 40 * 262144
    assert len(streams["stderr"].data) == 65536 and streams["stderr"].total == 40 * 262144
    assert proc.wait() == 0


def test_large_stdin_while_the_program_writes_back() -> None:
    # The classic deadlock: a child echoing its input while the parent is still writing it.
    data = os.urandom(3 << 20)
    code = "import sys\nwhile chunk := sys.stdin.buffer.read1(65536):\n    sys.stdout.buffer.write(chunk)\n"
    proc, stdin, streams, pidfd = start(code)
    pump_until_done(Pump(streams, stdin, data), proc, pidfd)
    os.close(pidfd)
    assert bytes(streams["stdout"].data) == data


def test_stdin_the_program_never_reads() -> None:
    proc, stdin, streams, pidfd = start("print('bye')")
    pump_until_done(Pump(streams, stdin, b"x" * (4 << 20)), proc, pidfd)
    os.close(pidfd)
    assert streams["stdout"].text() == "bye\n"


def test_ticks_run_while_the_program_is_silent_and_can_stop_the_pump() -> None:
    proc, stdin, streams, pidfd = start("import time\ntime.sleep(60)\n")
    ticks = 0

    def tick() -> bool:
        nonlocal ticks
        ticks += 1
        return ticks >= 5

    began = time.monotonic()
    Pump(streams, stdin).run(tick, 0.01)
    assert ticks == 5
    assert time.monotonic() - began < HANG_S
    assert proc.poll() is None  # stopping the pump does not touch the process
    proc.kill()
    proc.wait()
    os.close(pidfd)
    assert all(stream.closed for stream in streams.values())


def test_a_pidfd_wakes_the_pump_when_the_process_exits() -> None:
    # The child closes its pipes long before it exits; only the pidfd says when it is gone.
    code = "import os, time\nos.close(1)\nos.close(2)\ntime.sleep(0.3)\n"
    proc, stdin, streams, pidfd = start(code)
    ticks_seen: list[bool] = []

    def tick() -> bool:
        ticks_seen.append(proc.poll() is not None)
        return ticks_seen[-1]

    began = time.monotonic()
    Pump(streams, stdin).run(tick, 5.0, pidfd)  # interval far longer than the child lives
    os.close(pidfd)
    assert time.monotonic() - began < HANG_S
    assert ticks_seen[-1] is True and len(ticks_seen) <= 4


def test_decode_replaces_invalid_utf8() -> None:
    assert decode("héllo".encode()) == "héllo"
    assert decode(b"ok \xff\xfe end") == "ok \ufffd\ufffd end"
    stream = Stream(fd=-1, cap=2)
    stream.feed("é!".encode())
    assert stream.data == "é".encode() and stream.truncated
    stream = Stream(fd=-1, cap=1)
    stream.feed("é".encode())
    assert stream.text() == "\ufffd"  # a character cut at the cap
