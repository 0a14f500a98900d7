"""Warm-start mode: one sandbox per submission holds a server that loaded the candidate once and forks per
test, so a test costs about a millisecond instead of a fresh interpreter (Python), or a fork+exec of the
compiled binary in the same jail instead of a fresh jail per test (`execute`: C, C++, Go, Rust, Java, Node).

The server (warm_server.py) runs inside a jail taken from the backend's warm slots (the same jail, cgroup and
rlimits a job's command gets), as its pid namespace's init. Host and server talk over the jail's stdin and
stdout in length-prefixed JSON frames: one request per test (stdin or a call with plain-data arguments, and
the test's limits), one reply (stdout, stderr, exit status, CPU time, verdict, return value as plain data).

What the host trusts. In `stdio` mode the server never runs candidate code (children do), so its replies are
the sandbox's measurements, provided the tests cannot reach it: the server says it is init and not dumpable
(`guarded`), else it is not trusted. In `call` mode the candidate was imported into the server, so the server
is candidate code too (a `sandbox_error` it reports is the program's runtime error): the host checks every
reply against its own measurements (the jail's cgroup: CPU time and OOM kills per test), keeps its own
wall-clock limit per test, caps frame sizes, and kills and restarts the jail when the server misbehaves. A
return value is only ever plain data decoded here; nothing the candidate says about itself (exit status,
"passed") decides anything.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import resource
import select
import shutil
import stat
import struct
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from proctor.sandboxes import storage, warm_server
from proctor.sandboxes.backends import resolve_backend
from proctor.sandboxes.backends.runner import add_cpu_wait_s, cpu_waits
from proctor.sandboxes.job import Backend, CommandResult, CompileOutcome, File, Job, RunLimits, RunVerdict
from proctor.sandboxes.languages import BASE_ENV, COMPILE_LIMITS, get_language

log = logging.getLogger(__name__)

SERVER_FILE = ".proctor_warm_server.py"
PYTHON = "/usr/bin/python3"
HEADER = struct.Struct(">I")
MB = 1024 * 1024
# Time allowed beyond a test's own wall-clock backstop before the host gives up on the server.
GRACE_S = 2.0
# CPU the server may spend per test on its own bookkeeping (fork, pipes, JSON) above the test's limit.
SERVER_CPU_SLACK_S = 0.05
# A batch's cgroup CPU may exceed the sum of its replies' cpu_s and the server's own CPU over the batch (its
# RUSAGE_SELF, in the reply: watching a test costs it CPU in proportion to the test's wall time and threads,
# 0.23 s for 25 Java tests of 0.35 s) by what the server spends outside that measure (reading the request,
# writing the reply) and no more: past it, CPU was used where the server's per-test measure cannot see it,
# and the batch's tests run again one request each. Measured on a 2-core host, batches of 25 C, Python, Java
# and JavaScript tests: the cgroup's CPU was 0.01-0.06 s below that sum. Too small a slack only costs a
# rerun; too large lets one test of a batch pass its limit by up to the slack (docs/sandboxes.md).
BATCH_CPU_SLACK_S = 0.1
BATCH_CPU_SLACK_PER_TEST_S = 0.005
# How long the server may take to read one request (it reads whole requests before running anything).
SEND_TIMEOUT_S = 10.0
WAIT_SAMPLE_S = 0.02  # how often the host samples the jail's wait for a CPU during a request
LOAD_LIMITS = RunLimits(cpu_s=10.0, memory_mb=512)
Mode = Literal["stdio", "call"]


class CallResult(BaseModel):
    """One call of a candidate function: how the process ended, and the return value as plain data."""

    result: CommandResult
    returned: bool = False
    plain: bool = False
    value: Any = None
    not_plain: str = ""
    args_after: list[Any] | None = None  # the positional arguments as the call left them (plain data only)


class ScriptResult(BaseModel):
    """One test script run against proxies: how the script ended, and the first call that failed."""

    result: CommandResult
    calls: int = 0
    failed_name: str = ""
    failed_call: CallResult | None = None

    @property
    def passed(self) -> bool:
        """The script ended ok and every call into the candidate returned plain data."""
        return self.result.verdict is RunVerdict.ok and self.failed_call is None


CallHandler = Callable[[str, list[Any], dict[str, Any]], CallResult]


def _relay(
    request: dict[str, Any], on_call: CallHandler, calls: list[tuple[str, CallResult]]
) -> dict[str, Any]:
    """Answer a script's call into the candidate: the value as plain data, or why there is none."""
    try:
        name = str(request["call"])
        args = warm_server.decode(request.get("args") or [])
        kwargs = warm_server.decode(request.get("kwargs") or {"dict": []})
        if not isinstance(args, list) or not isinstance(kwargs, dict):
            raise TypeError("arguments must be a list and a dict")
    except (KeyError, ValueError, TypeError, AttributeError, RecursionError) as exc:
        raise _Protocol(f"a bad call from the script ({type(exc).__name__})") from None
    outcome = on_call(name, args, {str(k): v for k, v in kwargs.items()})
    calls.append((name, outcome))
    if outcome.returned and outcome.plain:
        return {"value": warm_server.encode(outcome.value)}
    if outcome.returned:
        return {"failed": f"returned a value that is not plain data ({outcome.not_plain})"}
    return {"failed": f"{outcome.result.verdict.value}: {outcome.result.detail}"}


MAX_BATCH = 100  # tests in one batch request at most
MIN_WALL_S = 0.05  # the least wall backstop a test gets from what is left of a batch's wall budget


class RaisedLimits(PermissionError):
    """A request wants rlimits above the jail's hard ones, which only ever come down: it needs a fresh jail."""


def _ceiling(*limits: RunLimits | None) -> RunLimits:
    """The rlimits an exec server's jail starts with: the highest of `limits` and of a compile run in it."""
    return _highest(COMPILE_LIMITS, *limits)


def _highest(first: RunLimits, *limits: RunLimits | None) -> RunLimits:
    """`first` with the highest rlimit-setting values of it and `limits`."""
    given = [first, *(x for x in limits if x is not None)]
    return first.model_copy(
        update={
            "file_size_mb": max(x.file_size_mb for x in given),
            "open_files": max(x.open_files for x in given),
            "processes": max(x.processes for x in given),
            "memory_mb": max(x.memory_mb for x in given),
        }
    )


def _rlimits(limits: RunLimits) -> dict[int, tuple[int, int]]:
    """The server's rlimits for a request's limits (every process of the test inherits them)."""
    return {
        resource.RLIMIT_FSIZE: (limits.file_size_mb * MB,) * 2,
        resource.RLIMIT_NOFILE: (max(limits.open_files, 64),) * 2,
        resource.RLIMIT_NPROC: (limits.processes + 2,) * 2,
        resource.RLIMIT_STACK: (limits.memory_mb * MB,) * 2,
    }


def _jail_limits(limits: RunLimits) -> tuple[int, int, int, int]:
    """What a whole jail applies (cgroup, the server's rlimits): tests share a batch only when these agree."""
    return (limits.memory_mb, limits.processes, limits.file_size_mb, limits.open_files)


@dataclass(frozen=True)
class BatchTest:
    """One stdio test of a batch: the loaded program (`argv` None) or a compiled program's `argv` and `env`."""

    stdin: str = ""
    limits: RunLimits | None = None
    name: str = "run"
    argv: tuple[str, ...] | None = None
    env: dict[str, str] | None = None
    # The host's own step (a compiler on the candidate's source), as execute()'s `trusted`: the files it
    # writes stay for the tests after it, and the server's failures after it still count as the machinery's.
    trusted: bool = False
    cwd: str | None = None  # a compiled program's working directory, a folder of the jail's (execute's `cwd`)

    def request(self) -> dict[str, Any]:
        """The server request of this test alone."""
        if self.argv is None:
            if self.cwd is not None or self.trusted:
                raise ValueError("cwd and trusted are for compiled programs (argv) only")
            return {"op": "run", "stdin": self.stdin}
        request: dict[str, Any] = {
            "op": "exec",
            "argv": list(self.argv),
            "env": dict(self.env or {}),
            "stdin": self.stdin,
        }
        if self.trusted:
            request["trusted"] = True
        if self.cwd is not None:
            request["cwd"] = _folder(self.cwd)
        return request


def _folder(path: str) -> str:
    """`path` when it names a place inside the jail's working directory (relative, no empty, `.` or `..`
    part, no NUL); ValueError otherwise. The server checks again, links included."""
    if not path or "\0" in path or path.startswith("/") or any(p in ("", ".", "..") for p in path.split("/")):
        raise ValueError(f"not a relative path inside the jail's working directory: {path!r}")
    return path


def _hidden_cpu(
    cpu_after: float | None,
    cpu_before: float | None,
    replies: Sequence[dict[str, Any]],
    server_cpu: Any = 0.0,
) -> bool:
    """Whether the jail's cgroup used more CPU over a batch than its replies report plus the server's own
    (`server_cpu`, its RUSAGE_SELF over the batch, and BATCH_CPU_SLACK_S, BATCH_CPU_SLACK_PER_TEST_S for what
    it spends outside that: reading the request, writing the reply); a malformed number counts 0."""
    if cpu_after is None or cpu_before is None:
        return False
    reported = 0.0
    with contextlib.suppress(TypeError, ValueError):
        reported += max(0.0, float(server_cpu or 0.0))
    for item in replies:
        with contextlib.suppress(TypeError, ValueError):
            reported += max(0.0, float(item.get("cpu_s") or 0.0))
    slack = BATCH_CPU_SLACK_S + BATCH_CPU_SLACK_PER_TEST_S * len(replies)
    return cpu_after - cpu_before > reported + slack


class _Protocol(Exception):
    """The server broke the protocol or died; the message says how."""


class _Jail:
    """A slot of the backend with the warm server running in it, and our ends of its pipes."""

    def __init__(
        self,
        backend: Backend,
        files: list[File],
        argv: list[str],
        env: dict[str, str],
        limits: RunLimits,
        ceiling: RunLimits | None = None,
        nice: int | None = None,
    ):
        runner = getattr(backend, "runner", None)
        if runner is None or not hasattr(runner, "slots"):
            raise RuntimeError(f"backend {backend.name!r} has no warm slots for the warm-start mode")
        self.pool = runner.slots
        self.slot = self.pool.take()
        self.workdir: Any = None
        self.group = self.slot.group
        self.limited: tuple[int, int, int, int] | None = None
        self.cwd = ""
        self.buffer = bytearray()
        self.side = bytearray()  # the server's stderr and nsjail's log, last bytes kept for diagnostics
        # Test requests the server received: from the first on, candidate code may have run in the jail, and
        # whatever then goes wrong with the server (its death, its own errors) may be the program's doing.
        self.requests = 0
        # The host changed the jail's files (put_files): the next request tells the server to take them as
        # the state every later test must find.
        self.renewed = False
        self.wait_base: dict[int, float] = {}  # per task: its wait for a CPU when the request began
        self.waited = 0.0
        self._next_sample = 0.0
        try:
            if self.slot.box is not None:  # nsjail: the slot's own directory is the jail's /box
                from proctor.sandboxes.backends.nsjail import BOX, SANDBOX_ID

                _write_files(self.slot.box, files, (SANDBOX_ID, SANDBOX_ID))
                cwd, tmp = BOX, "/tmp"
            else:  # local: a fresh host directory
                from proctor.sandboxes.backends.runner import Workdir

                self.workdir = Workdir.create(Job(files=files, commands=[{"argv": ["true"]}]))
                cwd, tmp = str(self.workdir.box), str(self.workdir.tmp)
            self.cwd = cwd
            full_env = {"PATH": "/usr/bin:/bin", "HOME": cwd, "TMPDIR": tmp, **env}
            # The server's own CPU limit; each child gets the test's (RLIMIT_CPU, the server's watch).
            resource.prlimit(self.slot.waiting_pid, resource.RLIMIT_CPU, (3600, 3600))
            resource.prlimit(self.slot.waiting_pid, resource.RLIMIT_CORE, (0, 0))
            # Hard rlimits can only come down from here (the host may lack CAP_SYS_RESOURCE to raise them):
            # the server starts at `ceiling` (a compile's, for an exec server) and each request then lowers
            # them to its own; the cgroup holds the server's own start to `limits`.
            for which, value in _rlimits(ceiling or limits).items():
                resource.prlimit(self.slot.waiting_pid, which, value)
            self._set_cgroup(limits)
            if nice is not None:  # a server started in the background starts at this priority
                os.setpriority(os.PRIO_PROCESS, self.slot.waiting_pid, nice)
            from proctor.sandboxes.backends.slots import script

            self.slot.send(script(argv, full_env, cwd))
        except BaseException:
            self.close()
            raise

    def set_limits(self, limits: RunLimits) -> None:
        """The jail's memory and process limits for the next test (cgroup; RLIMIT_DATA without one)."""
        wanted = _jail_limits(limits)
        if wanted == self.limited:
            return
        self.limited = None  # until every limit below is in place
        # The server's rlimits, which every test's process inherits: set from outside (prlimit) for each
        # request's limits, so a compile and the tests after it in one jail each get their own. They only
        # come down: a request wanting more than the jail's hard limits needs a fresh jail (RaisedLimits).
        rlimits = _rlimits(limits)
        for which, (_, hard) in rlimits.items():
            if hard > resource.prlimit(self.slot.waiting_pid, which)[1]:
                raise RaisedLimits(f"rlimit {which} above this jail's")
        for which, value in rlimits.items():
            resource.prlimit(self.slot.waiting_pid, which, value)
        self._set_cgroup(limits)
        self.limited = wanted

    def _set_cgroup(self, limits: RunLimits) -> None:
        """The jail's memory and process limits (cgroup; RLIMIT_DATA without one)."""
        if self.group is None:
            # Never RLIMIT_AS (see languages.py); children inherit the server's limit when they fork.
            memory = (limits.memory_mb * MB,) * 2
            resource.prlimit(self.slot.waiting_pid, resource.RLIMIT_DATA, memory)
            return
        # The server and nsjail count as processes too.
        self.group.set_limits(limits.memory_mb, limits.processes + 2)
        oom_group = self.group.dirs.get("unified", Path("/nonexistent")) / "memory.oom.group"
        if oom_group.exists():  # v2: an OOM kill takes the test's child only, not the server with it
            with contextlib.suppress(OSError):
                oom_group.write_text("0")

    def cpu_s(self) -> float | None:
        """CPU seconds used by the whole jail so far (None without cgroups)."""
        return self.group.cpu_s() if self.group is not None else None

    def oom_kills(self) -> int:
        """OOM kills in the jail so far."""
        return self.group.oom_kills() if self.group is not None else 0

    def send(self, message: dict[str, Any], timeout_s: float = SEND_TIMEOUT_S) -> None:
        """Write one frame to the server; _Protocol if it stops reading (a wedged server cannot hang us)."""
        body = json.dumps(message, separators=(",", ":")).encode()
        data = memoryview(HEADER.pack(len(body)) + body)
        deadline = time.monotonic() + timeout_s
        os.set_blocking(self.slot.stdin, False)
        try:
            while data:
                try:
                    data = data[os.write(self.slot.stdin, data) :]
                except BlockingIOError:
                    left = deadline - time.monotonic()
                    if left <= 0 or not select.select([], [self.slot.stdin], [], left)[1]:
                        raise _Protocol("the server stopped reading") from None
        except OSError as exc:
            raise _Protocol(f"the server stopped reading ({exc.strerror})") from None

    def begin_wait(self) -> None:
        """Start measuring a request's wait for a CPU: what the jail's tasks wait from now on."""
        self.wait_base = cpu_waits(self._tids())
        self.waited = 0.0

    def sample_wait(self) -> float:
        """The longest time one task of the jail has waited for a CPU since begin_wait (a loaded machine is not
        a slow program), measured here from /proc: the server's own report may not be trusted. Sampled, so a
        task that ended between samples may have waited more."""
        now = cpu_waits(self._tids())
        waits = [seconds - self.wait_base.get(tid, 0.0) for tid, seconds in now.items()]
        self.waited = max(self.waited, *waits) if waits else self.waited
        return self.waited

    def _tids(self) -> list[int]:
        return self.group.threads()[:32] if self.group is not None else [self.slot.waiting_pid]

    def receive(
        self, started: float, backstop_s: float, max_bytes: int, cpu_cap: float | None = None
    ) -> dict[str, Any]:
        """Read one frame, draining the side channels; _Protocol on EOF, a bad frame, the CPU cap, or the
        wall clock: `backstop_s` after `started` not counting time spent waiting for a CPU, and five times
        that at most."""
        fds = [self.slot.stdout, self.slot.stderr] + ([self.slot.log] if self.slot.log is not None else [])
        while True:
            frame = self._frame(max_bytes)
            if frame is not None:
                return frame
            now = time.monotonic()
            elapsed = now - started
            # The jail's wait for a CPU is read once per sample; the backstop is checked on that sample.
            sampled = now >= self._next_sample
            if sampled:
                self._next_sample = now + WAIT_SAMPLE_S
                self.sample_wait()
            if elapsed > 5 * backstop_s or (sampled and elapsed - self.waited > backstop_s):
                raise _Protocol("deadline")
            if cpu_cap is not None and (self.cpu_s() or 0.0) > cpu_cap:
                raise _Protocol("cpu")
            ready, _, _ = select.select(fds, [], [], 0.05)
            for fd in ready:
                try:
                    chunk = os.read(fd, 1 << 20)
                except OSError:
                    chunk = b""
                if fd == self.slot.stdout:
                    if not chunk:
                        raise _Protocol("eof")
                    self.buffer += chunk
                elif chunk:
                    self.side = (self.side + chunk)[-65536:]
                else:
                    fds.remove(fd)

    def _frame(self, max_bytes: int) -> dict[str, Any] | None:
        if len(self.buffer) < HEADER.size:
            return None
        (size,) = HEADER.unpack_from(self.buffer)
        if size > max_bytes:
            raise _Protocol(f"a reply of {size} bytes (more than {max_bytes})")
        if len(self.buffer) < HEADER.size + size:
            return None
        body = bytes(self.buffer[HEADER.size : HEADER.size + size])
        del self.buffer[: HEADER.size + size]
        try:
            message = json.loads(body)
        except (ValueError, RecursionError):
            raise _Protocol("a reply that is not JSON") from None
        if not isinstance(message, dict):
            raise _Protocol("a reply that is not a JSON object")
        return message

    def host_dir(self) -> Path | None:
        """The jail's working directory as the host sees it."""
        if self.slot.box is not None:
            return self.slot.box
        return self.workdir.box if self.workdir is not None else None

    def side_text(self) -> str:
        """What the server and nsjail wrote on their side channels (last 64 KB)."""
        return self.side.decode("utf-8", "replace")

    def close(self) -> None:
        """Kill the jail now; its cgroup, mounts and files are removed off the request path (the slot pool's
        thread), as a job's slot is."""
        self.pool.release(self.slot)
        if self.workdir is not None:
            self.workdir.remove()


def _read_files(root: Path, folder: str, max_bytes: int) -> list[File]:
    """Regular files under root/folder as `File`s named relative to root (see WarmPython.kept_files)."""
    found: list[File] = []
    total = 0
    base = root / folder
    if base.is_symlink() or not base.is_dir():
        return found
    for directory, names, files in os.walk(base, followlinks=False):
        names.sort()
        for name in sorted(files):
            path = Path(directory) / name
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            with os.fdopen(fd, "rb") as handle:
                info = os.fstat(handle.fileno())
                if not stat.S_ISREG(info.st_mode):
                    continue
                total += info.st_size
                if total > max_bytes:
                    raise ValueError(f"compiled program is larger than {max_bytes} bytes")
                data = handle.read(info.st_size + 1)
            if len(data) > info.st_size:
                raise ValueError("a compiled file kept growing while it was read")
            found.append(
                File(
                    path=str(path.relative_to(root)),
                    content=base64.b64encode(data).decode(),
                    base64=True,
                    executable=bool(info.st_mode & 0o111),
                )
            )
    return found


def _clear(root: Path) -> None:
    """Remove everything in `root` (links themselves, never what they point to); OSError when something stays."""
    for entry in os.scandir(root):
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path)  # never follows a link (the fd-based walk)
        else:
            os.unlink(entry.path)


NOFOLLOW_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _open_dir(parent: int, relative: str, owner: tuple[int, int] | None) -> int:
    """An fd of parent/relative, each part made where missing and opened relative to the one before it with
    O_NOFOLLOW: a part that is a link or not a folder is an OSError, so no path reaches outside the jail even
    if something swapped one in after a check."""
    fd = os.dup(parent)
    try:
        for part in relative.split("/") if relative else ():
            try:
                os.mkdir(part, 0o755, dir_fd=fd)
                if owner is not None:
                    os.chown(part, *owner, dir_fd=fd, follow_symlinks=False)
            except FileExistsError:
                pass
            inner = os.open(part, NOFOLLOW_DIR, dir_fd=fd)
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def _write_file(folder: int, name: str, item: File, owner: tuple[int, int] | None) -> None:
    """One file written into the folder `folder` (an fd) as a fresh inode, never through a link (O_NOFOLLOW,
    O_EXCL), replacing what was there."""
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISDIR(os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode):
            raise OSError(f"{name} in the jail is a folder")
        os.unlink(name, dir_fd=folder)  # a link or a file a leftover holds open is left behind, not written
    mode = 0o755 if item.executable else 0o644
    fd = os.open(
        name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=folder
    )
    with os.fdopen(fd, "wb") as handle:
        handle.write(item.data())
        os.fchmod(fd, mode)
        if owner is not None:
            os.fchown(fd, *owner)


def _write_files(box: Path, files: list[File], owner: tuple[int, int]) -> None:
    for item in files:
        target = box / item.path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(item.data())
        target.chmod(0o755 if item.executable else 0o644)
        os.lchown(target, *owner)
        for parent in target.relative_to(box).parents:
            if str(parent) != ".":
                os.lchown(box / parent, *owner)


def _failure(
    name: str, verdict: RunVerdict, detail: str, wall_s: float = 0.0, stderr: str = ""
) -> CommandResult:
    return CommandResult(name=name, verdict=verdict, detail=detail, wall_s=round(wall_s, 6), stderr=stderr)


READY_SERVERS = 1  # exec servers kept started ahead of time per backend (with warm slots, nsjail only)


def _server_files(source: str) -> list[File]:
    """The files a server's jail starts with: the program (`main.py`) and the server itself."""
    server = Path(warm_server.__file__).read_text()
    return [File(path="main.py", content=source), File(path=SERVER_FILE, content=server)]


_POOL_CEILING = _ceiling(LOAD_LIMITS)  # the rlimits a ready server's jail starts with


def _start_exec_server(backend: Backend) -> _Jail | None:
    """A jail whose trusted server (stdio mode, no program: it runs no candidate code) is up and has said it is
    the jail's init and not dumpable; None when it did not come up so (the caller starts its own and reports)."""
    maxima = getattr(backend, "maxima", None)
    limits = maxima.clamp(LOAD_LIMITS) if maxima is not None else LOAD_LIMITS
    env = {**BASE_ENV, **get_language("python").env(limits.memory_mb)}
    argv = [PYTHON, "-I", SERVER_FILE, "stdio", "main.py"]
    started = time.monotonic()
    # Started in the background at the lowest priority, so that on a busy machine it takes only CPU time that
    # the requests being scored leave (a compile in a jail taken a moment ago); taken, it gets the jails'
    # own priority back (ReadyServers.take).
    jail = _Jail(
        backend, _server_files(""), argv, env, limits, _highest(_POOL_CEILING, limits), nice=BACKGROUND_NICE
    )
    cpu_before = jail.cpu_s()
    cap = None if cpu_before is None else cpu_before + limits.cpu_s
    try:
        ready = jail.receive(started, limits.wall_backstop_s + GRACE_S, 1 << 20, cap)
    except _Protocol:
        jail.close()
        return None
    if not (ready.get("ready") and ready.get("init") is True and ready.get("guarded") is True):
        jail.close()
        return None
    return jail


class _ReadyState:
    """The ready servers one backend's refill thread keeps (apart from the pool, which can be collected)."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.jails: list[_Jail] = []
        self.cond = threading.Condition()
        self.closed = False
        self.thread: threading.Thread | None = None

    def close(self) -> None:
        """Stop refilling and kill every ready server."""
        with self.cond:
            self.closed = True
            jails, self.jails = self.jails, []
            self.cond.notify_all()
        for jail in jails:
            jail.close()


def _refill_servers(state: _ReadyState, backend_ref: weakref.ref[Backend]) -> None:
    """Keep `state.count` servers started while the backend lives and the pool is open; back off on failures."""
    backoff = 1.0
    while True:
        with state.cond:
            while not state.closed and len(state.jails) >= state.count:
                state.cond.wait()
            if state.closed:
                return
        backend = backend_ref()
        if backend is None:
            return
        try:
            jail = _start_exec_server(backend)
        except Exception:  # noqa: BLE001 - the request path starts its own server and reports the error
            log.warning("could not start a warm exec server ahead of time", exc_info=True)
            jail = None
        del backend
        if jail is None:
            with state.cond:
                state.cond.wait(timeout=backoff)
            backoff = min(backoff * 2, 60.0)
            continue
        backoff = 1.0
        with state.cond:
            if state.closed:
                jail.close()
                return
            state.jails.append(jail)


class ReadyServers:
    """Exec servers (warm_server in stdio mode with no program) started ahead of time in jails of the backend's
    warm slots, so a compiled submission takes one (~0.1 ms) instead of starting Python in a jail on its
    request path (~25 ms). A taken server is the caller's alone: it gets the submission's files and limits,
    and is killed with the submission; a background thread starts its replacement."""

    def __init__(self, backend: Backend, count: int = READY_SERVERS) -> None:
        self.backend_ref = weakref.ref(backend)
        self.state = _ReadyState(count)
        self._lock = threading.Lock()
        self._finalizer = weakref.finalize(self, self.state.close)

    def take(self) -> _Jail | None:
        """A started server whose jail is still alive, or None (none ready: the caller starts one itself)."""
        with self._lock:
            if self.state.thread is None and self.state.count > 0 and not self.state.closed:
                thread = threading.Thread(
                    target=_refill_servers,
                    args=(self.state, self.backend_ref),
                    name="warm-exec-servers",
                    daemon=True,
                )
                self.state.thread = thread
                thread.start()
        with self.state.cond:
            jail = self.state.jails.pop(0) if self.state.jails else None
            self.state.cond.notify_all()
        if jail is not None and (
            jail.slot.proc.poll() is not None or time.monotonic() - jail.slot.born > MAX_READY_S
        ):
            jail.close()
            return None
        if jail is not None:
            backend = self.backend_ref()
            try:
                # The priority every jail's programs run at (nsjail's --nice_level); raising it back needs
                # CAP_SYS_NICE, which a service that runs nsjail has.
                nice = getattr(backend, "nice", os.getpriority(os.PRIO_PROCESS, 0))
                os.setpriority(os.PRIO_PROCESS, jail.slot.waiting_pid, nice)
            except OSError:
                log.warning("a ready warm server could not get its priority back; starting one instead")
                jail.close()
                return None
        return jail

    def close(self) -> None:
        """Kill the ready servers and stop refilling (a later `take` starts again)."""
        with self._lock:
            self._finalizer()
            self.state = _ReadyState(self.state.count)
            self._finalizer = weakref.finalize(self, self.state.close)


MAX_READY_S = 1800.0  # a ready server older than this is replaced (its slot's jail has a lifetime cap)
BACKGROUND_NICE = 19  # a ready server starts at this nice value (see _start_exec_server)
_ready_lock = threading.Lock()
_ready: weakref.WeakKeyDictionary[Any, ReadyServers] = weakref.WeakKeyDictionary()


def ready_servers(backend: Backend) -> ReadyServers | None:
    """The backend's ready exec servers: nsjail backends with warm slots only (a server's files are written into
    the slot's own directory after it started); None elsewhere."""
    runner = getattr(backend, "runner", None)
    slots = getattr(runner, "slots", None)
    if slots is None or getattr(slots, "warm", 0) <= 0 or getattr(backend, "name", "") != "nsjail":
        return None
    with _ready_lock:
        found = _ready.get(backend)
        if found is None:
            found = _ready[backend] = ReadyServers(backend)
            hooks = getattr(backend, "close_hooks", None)
            if hooks is not None:  # the backend's close kills them first
                hooks.append(found.close)
        return found


def _batch_bounds(limits: Sequence[RunLimits], wall_budget_s: float | None) -> tuple[int, float]:
    """The largest reply a batch under `limits` may send (bytes) and how long the host waits for it (s)."""
    # The server ends a batch once its replies hold BATCH_OUTPUT_CHARS, so a reply holds that and one test's
    # output at most (JSON escapes a byte as up to 6); a larger one is a protocol error.
    most = max(2 * x.output_bytes + x.stderr_bytes for x in limits)
    max_bytes = 8 * (min(most * len(limits), most + warm_server.BATCH_OUTPUT_CHARS)) + MB
    backstop = sum(x.wall_backstop_s for x in limits)
    if wall_budget_s is not None:  # the server starts no test past the budget; one may run its backstop
        backstop = min(backstop, wall_budget_s + max(x.wall_backstop_s for x in limits))
    return max_bytes, backstop + GRACE_S


def _replied_waits(replies: Sequence[dict[str, Any]]) -> float:
    """Seconds the batch's tests waited for a CPU, as their replies say (each at most its own wall time)."""
    waits = 0.0
    for item in replies:
        with contextlib.suppress(TypeError, ValueError):
            waits += min(float(item.get("cpu_wait_s") or 0.0), float(item.get("wall_s") or 0.0))
    return waits


class WarmPython:
    """A Python submission loaded once in its own sandbox; `run` (stdio mode) or `call` (call mode) per test.

    `start()` loads the program and says whether it can be tested (a syntax error is `compile_error`; an
    exception or exit while importing in call mode is `runtime_error`). Tests run one at a time (a lock
    serialises callers). A test that kills or wedges the server is judged, and the next test gets a fresh
    server. `close()` (or the context manager) kills the sandbox.
    """

    def __init__(
        self,
        source: str,
        *,
        mode: Mode = "stdio",
        limits: RunLimits | None = None,
        load_limits: RunLimits | None = None,
        backend: Backend | str | None = None,
        files: Sequence[File] = (),
        max_restarts: int | None = None,
    ):
        if mode not in ("stdio", "call"):
            raise ValueError(f"mode must be 'stdio' or 'call', not {mode!r}")
        self.source = source
        self.mode = mode
        self.limits = limits or RunLimits()
        self.load_limits = load_limits or LOAD_LIMITS.model_copy(update={"memory_mb": self.limits.memory_mb})
        self.backend = resolve_backend(backend)
        self.extra_files = list(files)
        self.starts = 0
        self.tests = 0
        # How often a server that ran the candidate (call mode) may be reloaded after a test took it down;
        # None: always. Each reload re-imports the program, which may take its load limit every time.
        self.max_restarts = max_restarts
        self._jail: _Jail | None = None
        self._outcome: CompileOutcome | None = None
        self._lock = threading.Lock()
        self._next_id = 0
        self._trusted = False
        self._raised: RunLimits | None = None  # limits above a jail's rlimits: the next jail starts with them

    def __enter__(self) -> WarmPython:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def outcome(self) -> CompileOutcome | None:
        """How the first load went, once `start` has run."""
        return self._outcome

    def close(self) -> None:
        """Kill the sandbox (idempotent)."""
        with self._lock:
            self._stop()

    def _stop(self) -> None:
        if self._jail is not None:
            jail, self._jail = self._jail, None
            with contextlib.suppress(_Protocol, OSError):
                jail.send({"op": "exit"})
            jail.close()

    def start(self) -> CompileOutcome:
        """Load the program once (later calls return the first outcome)."""
        with self._lock:
            if self._outcome is None:
                self._outcome = self._load()
            return self._outcome

    def _files(self) -> list[File]:
        return [*_server_files(self.source), *self.extra_files]

    def _take_ready(self) -> bool:
        """Adopt a server started ahead of time (an exec server: stdio mode, no program) with this
        submission's files written into its jail; False when none is ready or the files do not go in."""
        if self.mode != "stdio" or self.source or self._raised is not None:
            return False
        if _jail_limits(_highest(self._clamp(self.limits), _POOL_CEILING)) != _jail_limits(_POOL_CEILING):
            return False  # tests that want more than a ready jail's rlimits: a jail started with them
        pool = ready_servers(self.backend)
        jail = pool.take() if pool is not None else None
        if jail is None or jail.slot.box is None:
            if jail is not None:
                jail.close()
            return False
        try:
            from proctor.sandboxes.backends.nsjail import SANDBOX_ID

            _write_files(jail.slot.box, self.extra_files, (SANDBOX_ID, SANDBOX_ID))
        except OSError as exc:
            log.warning("could not write a submission's files into a ready warm server: %s", exc)
            jail.close()
            return False
        self._jail = jail
        self._trusted = True  # _start_exec_server checked: stdio mode, init, not dumpable
        return True

    def _load(self) -> CompileOutcome:
        """Start a server (or take one started ahead of time); CompileOutcome says whether tests can run."""
        self.starts += 1
        if self._take_ready():
            return CompileOutcome(status="ok")
        limits = self._clamp(self.load_limits)
        env = {**BASE_ENV, **get_language("python").env(limits.memory_mb)}
        argv = [PYTHON, "-I", SERVER_FILE, self.mode, "main.py"]
        started = time.monotonic()
        try:
            # An exec server (no program) runs a compile first; a loaded program starts at its own limits.
            exec_server = self.mode == "stdio" and not self.source
            if exec_server:
                ceiling: RunLimits | None = _ceiling(self.limits, self._raised)
            else:
                ceiling = _highest(limits, self._raised) if self._raised is not None else None
            jail = _Jail(self.backend, self._files(), argv, env, limits, ceiling)
        except Exception as exc:  # noqa: BLE001 - no jail is a machinery failure, reported as such
            log.warning("warm sandbox could not start: %s", exc)
            return CompileOutcome(status="sandbox_error", message=f"{type(exc).__name__}: {exc}")
        oom_before = jail.oom_kills()
        cpu_before = jail.cpu_s() or 0.0
        cap = cpu_before + limits.cpu_s if jail.group is not None else None
        try:
            ready = jail.receive(started, limits.wall_backstop_s + GRACE_S, 1 << 20, cap)
        except _Protocol as exc:
            add_cpu_wait_s(jail.sample_wait())
            wall = time.monotonic() - started
            side = jail.side_text()
            oom = jail.oom_kills() > oom_before
            jail.close()
            if str(exc) == "cpu":
                return CompileOutcome(
                    status="time_limit", message=f"loading used more than {limits.cpu_s:g} s CPU"
                )
            if str(exc) == "deadline":
                return CompileOutcome(status="time_limit", message=f"loading took more than {wall:.1f} s")
            if oom:
                return CompileOutcome(status="memory_limit", message=f"loading passed {limits.memory_mb} MB")
            status = "runtime_error" if self.mode == "call" else "sandbox_error"
            return CompileOutcome(
                status=status,
                message=f"the program ended while loading ({exc}). {side[-4000:]}",  # the end holds the status
            )
        add_cpu_wait_s(jail.sample_wait())
        error = ready.get("error")
        if not ready.get("ready"):
            jail.close()
            kind = error.get("kind") if isinstance(error, dict) else None
            message = str(error.get("message", "")) if isinstance(error, dict) else str(error)
            status = kind if kind in ("compile_error", "runtime_error") else "runtime_error"
            return CompileOutcome(status=status, message=message[:8000])
        self._jail = jail
        # Only a server that ran no candidate code and that the tests cannot signal (the pid namespace's
        # init) is trusted: its death is then the machinery's failure, else the candidate's doing.
        # It must also be out of the tests' reach (not dumpable), or a test could forge or garble its replies.
        self._trusted = self.mode == "stdio" and ready.get("init") is True and ready.get("guarded") is True
        return CompileOutcome(status="ok")

    def _ensure(self) -> _Jail | CompileOutcome:
        if self._outcome is None:
            self._outcome = self._load()
            if not self._outcome.ok:
                return self._outcome
        if not self._outcome.ok:
            return self._outcome
        if self._jail is None:
            restarts = self.starts - 1
            if not self._trusted and self.max_restarts is not None and restarts >= self.max_restarts:
                return CompileOutcome(
                    status="runtime_error",
                    message=f"the program took its sandbox down {restarts + 1} times; not loading it again",
                )
            again = self._load()  # a previous test took the server down: a fresh one for this test
            if not again.ok:
                return again
        assert self._jail is not None
        return self._jail

    def run(self, stdin: str = "", limits: RunLimits | None = None) -> CommandResult:
        """Run the program as `__main__` on `stdin` (stdio mode); the result of a fresh `python3 main.py`."""
        if self.mode != "stdio":
            raise ValueError("run() needs mode='stdio'; use call() in call mode")
        reply, result = self._request({"op": "run", "stdin": stdin}, limits or self.limits, "run")
        return result

    def execute(
        self,
        argv: Sequence[str],
        env: dict[str, str],
        stdin: str = "",
        limits: RunLimits | None = None,
        name: str = "run",
        *,
        trusted: bool = False,
        cwd: str | None = None,
    ) -> CommandResult:
        """Run a compiled program (`argv`, relative to the job's directory, with exactly `env`) on `stdin` in a
        spawned child of the server (stdio mode; the server itself runs no candidate code). `trusted`: the
        host's own step, such as the compiler on the candidate's source, which runs none of the candidate's
        code: the server's failures after it still count as the machinery's (a first test's too). `cwd`: a
        folder inside the jail's working directory to run in (ValueError for anything else; the server
        refuses one that leads outside through a link)."""
        if self.mode != "stdio":
            raise ValueError("execute() needs mode='stdio'")
        request = BatchTest(stdin, None, name, tuple(argv), dict(env), trusted, cwd).request()
        reply, result = self._request(request, limits or self.limits, name)
        return result

    def make_dirs(self, names: Sequence[str]) -> str:
        """Make empty folders in the jail's working directory (owned by the jail's user), before a step that
        writes into them; the working directory's path inside the jail. OSError when the jail is gone."""
        with self._lock:
            jail = self._jail
            root = jail.host_dir() if jail is not None else None
            if jail is None or root is None:
                raise OSError("the warm sandbox is gone")
            for name in names:
                folder = root / name
                folder.mkdir(exist_ok=True)
                if jail.slot.box is not None:
                    from proctor.sandboxes.backends.nsjail import SANDBOX_ID

                    os.lchown(folder, SANDBOX_ID, SANDBOX_ID)
            return jail.cwd

    def kept_files(self, folder: str, max_bytes: int) -> list[File]:
        """The regular files under `folder` of the jail's working directory, read on the host (links and
        anything else are left out, and never followed), as files a fresh jail can be given; ValueError past
        `max_bytes` in all, OSError when the jail is gone."""
        with self._lock:
            jail = self._jail
            if jail is None:
                raise OSError("the warm sandbox is gone")
            root = jail.host_dir()
            if root is None:
                raise OSError("the warm sandbox has no working directory on the host")
            return _read_files(root, folder, max_bytes)

    def put_files(self, files: Sequence[File], folder: str, *, clear: bool = True) -> str:
        """Write `files` (paths relative to `folder`) into `folder` of the jail's working directory, on the
        host, owned by the jail's user: a job's set-up without a process in the jail (the counterpart of
        `kept_files`). `clear`: first remove everything in the working directory (and in /tmp where the host
        sees it), the server's own files included, as a fresh jail for the job. Refused (ValueError) for a path
        outside the folder, a file larger than the jail's file-size limit, or files beyond its storage; never
        follows a link (OSError, as when the jail is gone). The next test takes the files as the state that
        every test after it must find. The folder's path inside the jail is returned."""
        _folder(folder)
        limits = self._clamp(self.limits)
        sizes = []
        for item in files:
            _folder(item.path)
            sizes.append(len(item.data()))
            if sizes[-1] > limits.file_size_mb * MB:
                raise ValueError(f"{item.path} is larger than the jail's {limits.file_size_mb} MB file limit")
        with self._lock:
            jail = self._jail
            root = jail.host_dir() if jail is not None else None
            if jail is None or root is None:
                raise OSError("the warm sandbox is gone")
            if not self._trusted:
                # Only a trusted server (stdio mode, the jail's init, every test's processes killed after it)
                # guarantees that nothing in the jail runs while the host writes there.
                raise OSError("put_files needs a trusted warm server (stdio mode, no program loaded)")
            budget = jail.slot.storage
            if budget is not None and (sum(sizes) > budget.disk_mb * MB or len(files) >= budget.files):
                raise ValueError(
                    f"the files do not fit the jail's storage ({budget.disk_mb} MB, {budget.files})"
                )
            owner: tuple[int, int] | None = None
            if jail.slot.box is not None:
                from proctor.sandboxes.backends.nsjail import SANDBOX_ID

                owner = (SANDBOX_ID, SANDBOX_ID)
            jail.renewed = True  # set first: a failure half-way leaves changed files all the same
            if clear:
                _clear(root)
                if jail.workdir is not None:  # local: the job's own TMPDIR
                    tmp: Path | None = Path(jail.workdir.tmp)
                elif budget is not None and jail.slot.home is not None:
                    tmp = jail.slot.home / "tmp"  # nsjail: the jail's /tmp, on the slot's own tmpfs
                else:
                    tmp = None  # nsjail's own tmpfs, out of the host's sight
                if tmp is not None and tmp.is_dir() and not tmp.is_symlink():
                    _clear(tmp)
            top = os.open(root, NOFOLLOW_DIR)
            try:
                base = _open_dir(top, folder, owner)
                try:
                    for item in files:
                        *parents, name = item.path.split("/")
                        where = _open_dir(base, "/".join(parents), owner)
                        try:
                            _write_file(where, name, item, owner)
                        finally:
                            os.close(where)
                finally:
                    os.close(base)
            finally:
                os.close(top)
            return f"{jail.cwd}/{folder}"

    def run_batch(
        self,
        tests: Sequence[BatchTest],
        *,
        stop_on_failure: bool = False,
        wall_budget_s: float | None = None,
    ) -> list[CommandResult]:
        """Run several stdio tests (`BatchTest`: the program itself, or a compiled `argv` with its `env`) in
        order, each in a fresh process exactly as `run`/`execute` would, but sent to the server in one
        request when it is trusted (it ran no candidate code: stdio mode, the jail's init, not dumpable), so
        the host pays one exchange instead of one per test. With `stop_on_failure` the first test that does
        not end ok ends the list. Tests are sent together only while they share the jail's limits (memory,
        processes, rlimits); anything a batch cannot attribute to one test (an OOM kill, a lost server) makes
        the host run that batch's tests again one request each, so each verdict is the one a lone request
        would get. `wall_budget_s`: the wall time all of them may take (waiting for a CPU not counted): each
        test's backstop is cut to what is left, and once it is spent no further test starts (the list is
        shorter; the first test always runs)."""
        if self.mode != "stdio":
            raise ValueError("run_batch() needs mode='stdio'")
        results: list[CommandResult] = []
        index = 0
        began = time.monotonic()
        waited = 0.0
        while index < len(tests):
            left = None if wall_budget_s is None else wall_budget_s - (time.monotonic() - began - waited)
            if left is not None and results and left <= MIN_WALL_S:
                break
            group = [tests[index]]
            jail_limits = _jail_limits(self._clamp(tests[index].limits or self.limits))
            while (
                index + len(group) < len(tests)
                and len(group) < MAX_BATCH
                and _jail_limits(self._clamp(tests[index + len(group)].limits or self.limits)) == jail_limits
            ):
                group.append(tests[index + len(group)])
            ran, idle = self._batch(group, stop_on_failure, left)
            results.extend(ran)
            waited += sum(result.cpu_wait_s for result in ran)
            # A batch also ends early at a full disk or a broken server: the rest go on in a fresh jail. Under
            # stop_on_failure it ends at a test that sat idle longer than its CPU limit, and so does the list.
            if not ran or idle or (stop_on_failure and ran[-1].verdict is not RunVerdict.ok):
                break
            index += len(ran)
        return results

    def _batch(
        self, tests: Sequence[BatchTest], stop_on_failure: bool, wall_budget_s: float | None = None
    ) -> tuple[list[CommandResult], bool]:
        """One batch request, or one request per test where a batch cannot be used or judged; and whether it
        stopped at a test that sat idle longer than its CPU limit (stop_on_failure)."""
        with self._lock:
            ready = self._ensure()
            if isinstance(ready, CompileOutcome) or not self._trusted or len(tests) == 1:
                batched = None
            else:
                self.tests += len(tests)
                batched = self._exchange_batch(ready, tests, stop_on_failure, wall_budget_s)
        if batched is not None:
            return batched
        results: list[CommandResult] = []
        began = time.monotonic()
        waited = 0.0
        for test in tests:
            limits = self._clamp(test.limits or self.limits)
            if wall_budget_s is not None:
                left = wall_budget_s - (time.monotonic() - began - waited)
                if results and left <= MIN_WALL_S:
                    break
                if left < limits.wall_backstop_s:
                    limits = limits.model_copy(update={"wall_s": round(max(MIN_WALL_S, left), 3)})
            _, result = self._request(test.request(), limits, test.name)
            waited += result.cpu_wait_s
            results.append(result)
            if stop_on_failure and result.verdict is not RunVerdict.ok:
                break
            if stop_on_failure and result.wall_s - result.cpu_wait_s - result.cpu_s > limits.cpu_s:
                return results, True
        return results, False

    def _batch_message(
        self,
        jail: _Jail,
        tests: Sequence[BatchTest],
        limits: Sequence[RunLimits],
        stop_on_failure: bool,
        wall_budget_s: float | None,
    ) -> dict[str, Any]:
        """The `batch` request for `tests` under their clamped `limits`."""
        requests = []
        for test, limit in zip(tests, limits, strict=True):
            request = test.request()
            request.update(
                cpu_s=limit.cpu_s,
                wall_s=limit.wall_backstop_s,
                output_bytes=limit.output_bytes,
                stderr_bytes=limit.stderr_bytes,
            )
            requests.append(request)
        if jail.renewed:
            requests[0]["baseline"], jail.renewed = True, False
        budget, home = jail.slot.storage, jail.slot.home
        full = jail.cwd if budget is not None and home is not None and jail.slot.box is not None else None
        return {
            "op": "batch",
            "id": self._next_id,
            "tests": requests,
            "stop_on_failure": stop_on_failure,
            "full": full,
            "wall_budget_s": wall_budget_s,
        }

    def _exchange_batch(
        self,
        jail: _Jail,
        tests: Sequence[BatchTest],
        stop_on_failure: bool,
        wall_budget_s: float | None = None,
    ) -> tuple[list[CommandResult], bool] | None:
        """Send `tests` as one batch to a trusted server and judge each reply as `_exchange` would; None when
        the batch must be run again one test at a time (an OOM kill in the jail, which no reply can be matched
        to, or a server lost mid-batch: its next request gets a fresh one)."""
        self._next_id += 1
        limits = [self._clamp(test.limits or self.limits) for test in tests]
        message = self._batch_message(jail, tests, limits, stop_on_failure, wall_budget_s)
        budget, home = jail.slot.storage, jail.slot.home
        try:
            jail.set_limits(limits[0])
        except OSError:
            return None  # one request per test reports it as `_exchange` does
        oom_before = jail.oom_kills()
        cpu_before = jail.cpu_s()
        started = time.monotonic()
        cap = None if cpu_before is None else cpu_before + sum(x.cpu_s * 1.5 + 0.5 for x in limits)
        max_bytes, backstop = _batch_bounds(limits, wall_budget_s)
        jail.begin_wait()
        prior = jail.requests  # untrusted requests before this batch
        try:
            jail.send(message)
            jail.requests += 0 if all(test.trusted for test in tests) else 1
            reply = jail.receive(started, backstop, max_bytes, cap)
            if reply.get("id") != self._next_id or not isinstance(reply.get("results"), list):
                raise _Protocol("a reply to another request")
        except _Protocol:
            add_cpu_wait_s(jail.sample_wait())
            self._jail = None
            jail.close()
            return None
        replies = [item for item in reply["results"][: len(tests)] if isinstance(item, dict)]
        add_cpu_wait_s(max(jail.sample_wait(), _replied_waits(replies)))
        if jail.oom_kills() > oom_before:
            return None  # which test's process the kernel killed is not in any reply: ask one at a time
        if _hidden_cpu(jail.cpu_s(), cpu_before, replies, reply.get("server_cpu_s")):
            # The replies' CPU (the server's /proc-based measure per test) misses CPU that the cgroup saw: a
            # program's auto-reaped workers (SIGCHLD ignored) are in no one's rusage. The batch cannot say
            # which test used it, so each test runs again as a request of its own, where the cgroup decides.
            log.warning("warm batch: the jail's cgroup CPU exceeds its replies' sum; rerunning one test each")
            return None
        results: list[CommandResult] = []
        broken = False
        for position, item in enumerate(replies):
            result = self._judge(
                item,
                limits[position],
                tests[position].name,
                0.0,
                None,
                False,
                # candidate code may have run before this test: an earlier request, or an untrusted test
                ran_before=prior > 0 or any(not test.trusted for test in tests[:position]),
            )
            with contextlib.suppress(TypeError, ValueError):
                result.cpu_wait_s = round(min(float(item.get("cpu_wait_s") or 0.0), result.wall_s), 6)
            if result.verdict is RunVerdict.memory_limit and cpu_before is not None:
                # The server guesses memory from a SIGKILL it cannot explain; the cgroup counted no OOM kill
                # over the batch (checked above), so it was not: what `_judge` says of a request of its own.
                result.verdict, result.detail = RunVerdict.runtime_error, "killed by SIGKILL"
            what = str(item.get("full") or "")
            if budget is not None and what in ("bytes", "files"):
                if result.verdict in (RunVerdict.ok, RunVerdict.runtime_error):
                    result.verdict, result.detail = RunVerdict.output_limit, budget.describe(what)
                broken = True
            broken = broken or bool(item.get("server_failed")) or bool(item.get("tampered"))
            results.append(result)
        if broken or (budget is not None and home is not None and storage.full(home)):
            self._jail = None
            jail.close()
        if not results:
            return None
        return results, bool(replies[len(results) - 1].get("idle"))

    def call(
        self,
        name: str,
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
        *,
        method_of: str | None = None,
        stdin: str = "",
        limits: RunLimits | None = None,
    ) -> CallResult:
        """Call `name(*args, **kwargs)` (a method of a fresh `method_of()` instance if given) in a child of the
        loaded module; the value comes back as plain data or not at all (call mode)."""
        if self.mode != "call":
            raise ValueError("call() needs mode='call'; use run() in stdio mode")
        request = {
            "op": "call",
            "name": name,
            "method_of": method_of,
            "args": warm_server.encode(list(args)),
            "kwargs": warm_server.encode(dict(kwargs or {})),
            "stdin": stdin,
        }
        reply, result = self._request(request, limits or self.limits, name)
        outcome = CallResult(result=result)
        if reply is None or not reply.get("returned"):
            if result.verdict is RunVerdict.ok:
                code = result.exit_code
                result.verdict = RunVerdict.runtime_error
                result.detail = f"the call ended without returning (exit status {code})"
            return outcome
        try:
            message = json.loads(reply.get("result", ""))
            if "value" in message:
                outcome.value = warm_server.decode(message["value"])
                outcome.plain = True
            else:
                outcome.not_plain = str(message.get("not_plain", "unknown"))[:200]
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
            outcome.not_plain = f"undecodable value ({type(exc).__name__})"
            outcome.plain = False
            outcome.value = None
        else:
            with contextlib.suppress(ValueError, TypeError, KeyError, AttributeError, RecursionError):
                after = warm_server.decode(message["args"]) if "args" in message else None
                outcome.args_after = after if isinstance(after, list) else None
        outcome.returned = True
        return outcome

    def run_script(
        self,
        script: str,
        names: Sequence[str],
        on_call: CallHandler,
        *,
        setup: str | None = None,
        stdin: str = "",
        limits: RunLimits | None = None,
    ) -> ScriptResult:
        """Run a test script (an assert script from the task, untrusted too) as `__main__` in a child, with
        each of `names` a proxy: calling it sends the plain-data arguments out, `on_call(name, args, kwargs)`
        answers (typically another WarmPython's `call`, the candidate's sandbox), and the proxy returns the
        plain value or raises CandidateFailed. `setup` (the reference's trusted helpers) runs in the script's
        globals first. Only `names` are bound: pass the names the script may take from the candidate, never
        all of the candidate's (its `abs` would replace the script's). Needs stdio mode; the loaded program
        itself is not run. A script that dies on an undefined name ends with exit status
        `warm_server.MISSING_NAME`.

        The script's own CPU time and wall clock are limited by `limits`; time spent in calls is not its own.
        """
        if self.mode != "stdio":
            raise ValueError("run_script() needs mode='stdio'")
        calls: list[tuple[str, CallResult]] = []
        request = {"op": "script", "script": script, "names": list(names), "setup": setup, "stdin": stdin}
        _, result = self._request(request, limits or self.limits, "script", on_call, calls)
        failed = next(((n, c) for n, c in calls if not (c.returned and c.plain)), None)
        return ScriptResult(
            result=result,
            calls=len(calls),
            failed_name=failed[0] if failed else "",
            failed_call=failed[1] if failed else None,
        )

    def _request(
        self,
        request: dict[str, Any],
        limits: RunLimits,
        name: str,
        on_call: CallHandler | None = None,
        calls: list[tuple[str, CallResult]] | None = None,
    ) -> tuple[dict[str, Any] | None, CommandResult]:
        with self._lock:
            ready = self._ensure()
            if isinstance(ready, CompileOutcome):
                verdict = (
                    RunVerdict.sandbox_error if ready.status == "sandbox_error" else RunVerdict.runtime_error
                )
                return None, _failure(
                    name, verdict, f"the program is not loaded: {ready.status}", stderr=ready.message
                )
            self.tests += 1
            return self._exchange(ready, request, limits, name, on_call, calls)

    def _exchange(
        self,
        jail: _Jail,
        request: dict[str, Any],
        limits: RunLimits,
        name: str,
        on_call: CallHandler | None = None,
        calls: list[tuple[str, CallResult]] | None = None,
    ) -> tuple[dict[str, Any] | None, CommandResult]:
        self._next_id += 1
        limits = self._clamp(limits)
        budget, home = jail.slot.storage, jail.slot.home
        if budget is not None and home is not None and jail.slot.box is not None:
            request["full"] = jail.cwd  # the server says whether the test filled it, before it cleans up
        if jail.renewed:
            request["baseline"], jail.renewed = True, False
        request.update(
            id=self._next_id,
            cpu_s=limits.cpu_s,
            # A script waits for the candidate's calls: the host keeps its clock, paused during the calls.
            wall_s=limits.wall_backstop_s if on_call is None else 1800.0,
            output_bytes=limits.output_bytes,
            stderr_bytes=limits.stderr_bytes,
        )
        try:
            try:
                jail.set_limits(limits)
            except RaisedLimits:
                # rlimits only come down in a jail: this request gets a fresh one that starts with its own.
                self._raised = _highest(limits, self._raised)
                self._jail = None
                jail.close()
                again = self._ensure()
                if isinstance(again, CompileOutcome):
                    return None, _failure(name, RunVerdict.sandbox_error, f"no fresh jail: {again.message}")
                jail = again
                jail.set_limits(limits)
        except OSError as exc:
            if jail.requests and isinstance(exc, ProcessLookupError):  # the server died after a test ran
                self._jail = None
                jail.close()
                return None, _failure(
                    name, RunVerdict.runtime_error, f"the warm server is gone after a test: {exc}"
                )
            return None, _failure(name, RunVerdict.sandbox_error, f"cannot set the sandbox's limits: {exc}")
        oom_before = jail.oom_kills()
        cpu_before = jail.cpu_s()
        started = time.monotonic()
        paused = 0.0
        cap = None if cpu_before is None else cpu_before + limits.cpu_s * 1.5 + 0.5
        max_bytes = 8 * (2 * limits.output_bytes + limits.stderr_bytes) + MB
        jail.begin_wait()
        try:
            jail.send(request)
            jail.requests += 0 if request.get("trusted") else 1
            while True:
                reply = jail.receive(started + paused, limits.wall_backstop_s + GRACE_S, max_bytes, cap)
                if on_call is None or "call" not in reply:
                    break
                began = time.monotonic()
                jail.send(_relay(reply, on_call, calls if calls is not None else []))
                paused += time.monotonic() - began
            if reply.get("id") != self._next_id:
                raise _Protocol("a reply to another request")
        except _Protocol as exc:
            add_cpu_wait_s(jail.sample_wait())
            return None, self._lost(jail, exc, limits, name, started, oom_before, script=on_call is not None)
        wall = time.monotonic() - started - paused
        waited = jail.sample_wait()
        if self._trusted:  # the server ran no candidate code: its measure of the child's wait holds
            with contextlib.suppress(TypeError, ValueError):
                waited = max(waited, min(float(reply.get("cpu_wait_s") or 0.0), wall))
        add_cpu_wait_s(waited)
        cpu_used = None if cpu_before is None else (jail.cpu_s() or 0.0) - cpu_before
        result = self._judge(
            reply, limits, name, wall, cpu_used, jail.oom_kills() > oom_before, ran_before=jail.requests > 1
        )
        result.cpu_wait_s = round(min(waited, max(wall, result.wall_s)), 6)
        self._after_test(jail, reply, result)
        return reply, result

    def _clamp(self, limits: RunLimits) -> RunLimits:
        """`limits` clamped to the backend's operator maxima (PROCTOR_SANDBOX_MAX_*), as every job's are."""
        maxima = getattr(self.backend, "maxima", None)
        return maxima.clamp(limits) if maxima is not None else limits

    def _after_test(self, jail: _Jail, reply: dict[str, Any], result: CommandResult) -> None:
        """What the jail says after a test: its tmpfs full (no byte or no inode left, even if the program
        ignored the error) is `output_limit`, as for a job's command; a full or broken jail is replaced. The
        server measures it before it removes what the test left; the host looks again after the reply."""
        budget, home = jail.slot.storage, jail.slot.home
        what = storage.full(home) if budget is not None and home is not None else ""
        said = str(reply.get("full") or "")
        if budget is not None and not what and said in ("bytes", "files"):
            what = said
        if budget is not None and what and result.verdict in (RunVerdict.ok, RunVerdict.runtime_error):
            result.verdict, result.detail = RunVerdict.output_limit, budget.describe(what)
        # A test that changed the files the jail started with (the server removes what tests add) leaves a
        # jail that is not as fresh as the next test must find it: it gets a new one.
        if what or reply.get("server_failed") or reply.get("tampered"):
            self._jail = None
            jail.close()

    def _lost(
        self,
        jail: _Jail,
        exc: _Protocol,
        limits: RunLimits,
        name: str,
        started: float,
        oom_before: int,
        script: bool = False,
    ) -> CommandResult:
        """The server died, wedged or lied about framing during a test: judge the test, drop the server."""
        wall = time.monotonic() - started
        oom = jail.oom_kills() > oom_before
        side = jail.side_text()[-2000:]
        self._jail = None
        jail.close()
        why = str(exc)
        if oom:
            return _failure(
                name, RunVerdict.memory_limit, f"memory limit {limits.memory_mb} MB (OOM kill)", wall
            )
        if why == "cpu":
            return _failure(
                name, RunVerdict.time_limit, f"CPU time passed {limits.cpu_s:g} s (jail cgroup)", wall
            )
        # Once a test request reached the server, candidate code may have run in its jail: a test can starve or
        # limit the server (setpriority, prlimit: refused by the seccomp policy, allowed by the kernel), so its
        # death or silence is the program's verdict. Only a server that never got a test fails as machinery.
        machinery = self._trusted and not jail.requests
        if why == "deadline":
            # Only a wedged server gets here: the server itself stops a test at its backstop.
            verdict = RunVerdict.sandbox_error if machinery and not script else RunVerdict.time_limit
            return _failure(name, verdict, f"the warm server did not answer within {wall:.1f} s", wall, side)
        verdict = RunVerdict.sandbox_error if machinery else RunVerdict.runtime_error
        return _failure(name, verdict, f"the warm server failed: {why}", wall, side)

    def _judge(
        self,
        reply: dict[str, Any],
        limits: RunLimits,
        name: str,
        wall: float,
        cpu_used: float | None,
        oom: bool,
        ran_before: bool = False,
    ) -> CommandResult:
        """The test's result from the server's reply, checked against the jail's own counters. `ran_before`:
        an earlier test ran in this jail, so even a trusted server's failure may be the program's doing."""
        machinery = self._trusted and not ran_before
        try:
            verdict = RunVerdict(reply.get("verdict"))
            result = CommandResult(
                name=name,
                verdict=verdict,
                exit_code=reply.get("exit_code"),
                signal=reply.get("signal"),
                cpu_s=float(reply.get("cpu_s") or 0.0),
                wall_s=float(reply.get("wall_s") or wall),
                peak_memory_mb=reply.get("peak_memory_mb"),
                stdout=str(reply.get("stdout", ""))[: limits.output_bytes],
                stderr=str(reply.get("stderr", ""))[: limits.stderr_bytes],
                stdout_truncated=bool(reply.get("stdout_truncated")),
                stderr_truncated=bool(reply.get("stderr_truncated")),
                detail=str(reply.get("detail", ""))[:2000],
            )
        except (ValueError, TypeError) as exc:
            verdict = RunVerdict.sandbox_error if machinery else RunVerdict.runtime_error
            return _failure(name, verdict, f"a malformed reply from the warm server: {exc}", wall)
        if result.verdict is RunVerdict.sandbox_error and not machinery:
            # A server that loaded the candidate speaks for the candidate: its "sandbox_error" is the program's
            # doing (say, it replaced the server's run_test), never a machinery failure that voids the score.
            result.verdict = RunVerdict.runtime_error
            result.detail = f"the server that loaded the program reported a failure: {result.detail}"[:2000]
        if cpu_used is not None:
            # The server's own measure may not be trusted (call mode): the cgroup's is.
            result.cpu_s = round(max(result.cpu_s, cpu_used - SERVER_CPU_SLACK_S), 6)
        if result.verdict in (RunVerdict.ok, RunVerdict.runtime_error):
            if oom:
                result.verdict, result.detail = (
                    RunVerdict.memory_limit,
                    f"memory limit {limits.memory_mb} MB (OOM kill)",
                )
            elif result.cpu_s > limits.cpu_s:
                result.verdict, result.detail = RunVerdict.time_limit, f"CPU time passed {limits.cpu_s:g} s"
        elif result.verdict is RunVerdict.memory_limit and not oom and cpu_used is not None:
            # The server guessed memory from an unexplained SIGKILL; with a cgroup that says no OOM, it was not.
            result.verdict, result.detail = RunVerdict.runtime_error, "killed by SIGKILL"
        return result
