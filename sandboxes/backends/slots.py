"""Warm start slots: a shell already waiting inside a fresh cgroup (and, for nsjail, inside a finished jail),
so starting a command costs about as much as exec'ing it.

Why. Moving a process into a cgroup waits for an RCU grace period when such moves are rare (measured here:
4-14 ms), and starting nsjail costs about 6.5 ms of its own (loading the binary, namespaces, mounts) before the
program runs. Both are done ahead of time, off the request path, by a background thread.

How. A slot starts `/bin/sh -c SPAWNER` with an empty environment and its own pipes, and moves it into its
cgroup. The spawner prints one `.` on stdout when it is ready, then reads a script from stdin, line by line,
up to a `#go` line, and evals it; the script cds, exports the environment and execs the command (every word is
shell-quoted, newlines inside words are written as "$_proctor_nl", so no line of data can end the script
early). The
command's stdin continues after the `#go` line. Before sending the script, the runner sets the cgroup's limits
and the rlimits (prlimit(2), from outside) of the waiting shell, so every process the command forks is born
inside the cgroup with them, and no Python code runs in a forked child.

A jail slot (nsjail) sends a first script that execs nsjail, whose jailed process is a second spawner: it
prints its own `.` once the jail is built, and the command's script is sent to it later.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import select
import shlex
import shutil
import signal
import subprocess
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..cgroups import Cgroups, JobCgroup
from ..storage import Storage, unmount

log = logging.getLogger(__name__)

# The spawner's own variables start with _proctor_, a prefix the job's environment may not use.
SPAWNER_SCRIPT = (
    "_proctor_nl='\n'; _proctor_s=''; printf .; "
    "while IFS= read -r _proctor_l; do "
    '[ "$_proctor_l" = \'#go\' ] && break; _proctor_s="$_proctor_s$_proctor_l$_proctor_nl"; done; '
    '[ "$_proctor_l" = \'#go\' ] && eval "$_proctor_s"'
)
SPAWNER = ["/bin/sh", "-c", SPAWNER_SCRIPT, "sandbox"]
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
READY_TIMEOUT_S = 20.0
# A slot waiting longer than this is replaced rather than used, so that a jail's own lifetime cap (which
# ends programs orphaned by a crash of this process) is never near while a command runs.
MAX_IDLE_S = 3600.0
# Limits a waiting slot's cgroup has before its command sets its own (a jail slot holds nsjail and a shell).
IDLE_MEMORY_MB = 256
IDLE_PROCESSES = 8


def wait_readable(fd: int, timeout: float) -> bool:
    """Whether `fd` became readable (or hung up) within `timeout` seconds (poll: no FD_SETSIZE limit)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(max(0.0, timeout) * 1000))


class SlotError(RuntimeError):
    """A slot could not be prepared (the shell or nsjail did not start); the message says why."""


def quote(word: str) -> str:
    """Shell-quote a word so that it stays on one line of the script."""
    return shlex.quote(word).replace("\n", "'\"$_proctor_nl\"'")


def script(argv: list[str], env: dict[str, str], cwd: str | Path) -> list[str]:
    """The lines that start a command: cd, exported environment, exec."""
    lines = [f"cd -- {quote(str(cwd))} || exit 126", "unset OLDPWD"]
    for name, value in env.items():
        if not ENV_NAME.match(name) or name.startswith("_proctor_"):
            raise ValueError(f"invalid environment variable name {name!r}")
        lines.append(f"export {name}={quote(value)}")
    lines.append("exec " + " ".join(quote(arg) for arg in argv))
    return lines


@dataclass
class Slot:
    """A started spawner waiting for its script, with the parent's ends of its pipes."""

    proc: subprocess.Popen[bytes]
    group: JobCgroup | None
    stdin: int
    stdout: int
    stderr: int
    log: int | None = None  # read end of the log pipe (nsjail's --log_fd)
    log_fd: int | None = None  # the write end's number in the child
    target: int | None = None  # pid of the waiting shell that will exec the command (inside the jail)
    box: Path | None = None  # host directory mounted as the jail's working directory
    home: Path | None = None  # host directory owned by the slot, removed with it
    storage: Storage | None = None  # the budget of the tmpfs mounted at `home`, when it is bounded
    born: float = field(default_factory=time.monotonic)

    @property
    def waiting_pid(self) -> int:
        """The process that will become the command: rlimits go there."""
        return self.target if self.target is not None else self.proc.pid

    def send(self, lines: list[str]) -> None:
        """Send a script; the spawner evals it after the `#go` line."""
        data = memoryview("".join(line + "\n" for line in [*lines, "#go"]).encode())
        while data:
            data = data[os.write(self.stdin, data) :]

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        """Consume the spawner's `.`; SlotError if it exits or stays silent instead."""
        ready = wait_readable(self.stdout, timeout)
        marker = os.read(self.stdout, 1) if ready else b""
        if marker != b".":
            raise SlotError(self._why(timeout if not ready else None))

    def _why(self, timed_out: float | None) -> str:
        if timed_out is not None:
            return f"the sandbox did not start within {timed_out:g} s"
        lines: list[str] = []
        for fd in (self.stderr, self.log):
            if fd is not None:
                os.set_blocking(fd, False)
                with contextlib.suppress(OSError):
                    lines += os.read(fd, 65536).decode(errors="replace").splitlines()
        # nsjail's informational and debug lines ([I], [D]) say nothing about what went wrong.
        problems = [line.strip() for line in lines if line.strip() and not line.startswith(("[I]", "[D]"))]
        return ("the sandbox did not start: " + "; ".join(problems))[:4000]

    def discard(self) -> None:
        """Kill everything the slot started, close our pipe ends, remove its cgroup and directory."""
        self.stop()
        self.clean()

    def stop(self) -> None:
        """Kill everything the slot started and close our pipe ends."""
        if self.group is not None:
            self.group.kill()
        if self.proc.returncode is None:  # once reaped, its pid (and group id) may belong to someone else
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError, OSError, subprocess.TimeoutExpired):
            self.proc.wait(timeout=2)
        for fd in (self.stdin, self.stdout, self.stderr, self.log):
            if fd is not None and fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)

    def clean(self) -> None:
        """Remove the (stopped) slot's cgroup and directory."""
        if self.group is not None:
            self.group.remove()
        if self.home is not None:
            if self.storage is not None:
                # Its own tmpfs first (rmtree cannot remove a mount point), the only mount there on this side:
                # the jail's are in its own namespace, so no scan of the mount table (release_path) is needed.
                unmount(self.home)
            shutil.rmtree(self.home, ignore_errors=True)


def make_slot(cgroups: Cgroups | None, log_pipe: bool = False) -> Slot:
    """Start one waiting spawner (in a fresh cgroup when `cgroups` is given) and wait until it is ready."""
    group = cgroups.create(IDLE_MEMORY_MB, IDLE_PROCESSES) if cgroups is not None else None
    pipes = [os.pipe() for _ in range(4 if log_pipe else 3)]
    (in_r, in_w), (out_r, out_w), (err_r, err_w) = pipes[:3]
    log_r, log_w = pipes[3] if log_pipe else (None, None)
    try:
        proc = subprocess.Popen(
            SPAWNER,
            stdin=in_r,
            stdout=out_w,
            stderr=err_w,
            cwd="/",
            env={},
            pass_fds=(log_w,) if log_w is not None else (),
            start_new_session=True,
        )
    except BaseException:
        for pair in pipes:
            for fd in pair:
                os.close(fd)
        if group is not None:
            group.remove()
        raise
    for fd in (in_r, out_w, err_w, log_w):
        if fd is not None:
            os.close(fd)
    slot = Slot(proc, group, in_w, out_r, err_r, log_r, log_w)
    try:
        if group is not None:
            for procs in group.procs_files:
                with open(procs, "w") as handle:
                    handle.write(str(proc.pid))
        slot.wait_ready()
    except BaseException:
        slot.discard()
        raise
    return slot


def child_of(pid: int) -> int | None:
    """The (single) child process of `pid`, found through /proc."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as handle:
                    fields = handle.read().rsplit(b")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[1]) == pid:
                return int(entry)
    return None


class _Ready:
    """The state the refill thread shares with the pool (kept apart so the pool can be garbage-collected)."""

    def __init__(self) -> None:
        self.slots: list[Slot] = []
        self.cond = threading.Condition()
        self.closed = False
        self.thread: threading.Thread | None = None
        self.trash: list[Slot] = []  # stopped slots whose cgroup and directory the thread removes

    def close(self, timeout: float = 30.0) -> None:
        """Stop the refill thread (waiting for a slot it is making) and discard every ready slot."""
        with self.cond:
            self.closed = True
            self.cond.notify_all()
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join(timeout)
        with self.cond:
            slots, self.slots = self.slots, []
            trash, self.trash = self.trash, []
        for slot in slots:
            slot.discard()
        for slot in trash:
            slot.clean()


class SlotPool:
    """Hands out slots made by `make`, keeping `warm` of them ready in the background."""

    def __init__(self, make: Callable[[], Slot], warm: int = 2) -> None:
        self.make = make
        self.warm = warm
        self._ready = _Ready()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._finalizer = weakref.finalize(self, self._ready.close)

    def take(self) -> Slot:
        """A ready slot whose spawner is still waiting, else a new one made now."""
        self._start()
        while True:
            with self._ready.cond:
                slot = self._ready.slots.pop(0) if self._ready.slots else None
                self._ready.cond.notify_all()
            if slot is None:
                return self.make()
            if slot.proc.poll() is None and time.monotonic() - slot.born < MAX_IDLE_S:
                return slot
            slot.discard()

    def release(self, slot: Slot) -> None:
        """Done with a slot: stop it now; its cgroup and directory are removed off the request path."""
        slot.stop()
        with self._ready.cond:
            if self._thread is not None and not self._ready.closed:
                self._ready.trash.append(slot)
                self._ready.cond.notify_all()
                return
        slot.clean()

    def close(self) -> None:
        """Stop refilling, wait for a slot being made, and discard every ready slot (also run at exit).

        The pool stays usable: a later `take` starts refilling again."""
        with self._lock:
            self._finalizer()
            self._ready = _Ready()
            self._thread = None
            self._finalizer = weakref.finalize(self, self._ready.close)

    def _start(self) -> None:
        with self._lock:
            if self.warm <= 0 or self._thread is not None:
                return
            self._thread = threading.Thread(
                target=_refill, args=(self._ready, self.make, self.warm), name="sandbox-slots", daemon=True
            )
            self._ready.thread = self._thread
            self._thread.start()


def _refill(ready: _Ready, make: Callable[[], Slot], warm: int) -> None:
    """Keep `warm` slots ready until the pool closes; on errors, back off (up to a minute) rather than spin."""
    backoff = 1.0
    while True:
        with ready.cond:
            while not ready.closed and not ready.trash and len(ready.slots) >= warm:
                ready.cond.wait()
            if ready.closed:
                return
            trash, ready.trash = ready.trash, []
        for slot in trash:
            slot.clean()
        if len(ready.slots) >= warm:
            continue
        try:
            slot = make()
        except Exception:  # noqa: BLE001 - the request path makes its own slot and reports the error
            log.warning("could not prepare a sandbox slot; retrying in %g s", backoff, exc_info=True)
            with ready.cond:
                ready.cond.wait(timeout=backoff)
            backoff = min(backoff * 2, 60.0)
            continue
        backoff = 1.0
        with ready.cond:
            if ready.closed:
                slot.discard()
                return
            ready.slots.append(slot)
