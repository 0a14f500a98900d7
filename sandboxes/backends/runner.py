"""What the local and nsjail backends share: the working directory, starting a command in a warm slot (already
inside its cgroup; see slots.py), watching its CPU time while pumping its output, killing the tree, and turning
what was measured into a verdict."""

from __future__ import annotations

import base64
import contextlib
import functools
import logging
import math
import os
import resource
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..cgroups import CgroupError, Cgroups, JobCgroup
from ..job import Command, CommandResult, Job, Maxima, Result, RunLimits, RunVerdict
from ..output import Pump, Stream, decode
from ..storage import StorageFull, clear, copy_tree, full, release_path
from .slots import Slot, SlotError, SlotPool, make_slot, script, wait_readable

log = logging.getLogger(__name__)

POLL_S = 0.01
DRAIN_S = 0.5  # how long pipes may stay open after the main process ended (a stray holder is killed)
KILL_WAIT_S = 2.0  # how long a killed tree may take to die before we stop pumping
BASE_PATH = "/usr/local/bin:/usr/bin:/bin"
MB = 1024 * 1024
SHM_MIN_FREE = 1024 * MB
WAIT_SAMPLE_S = 0.05  # how often a running command's wait for a CPU is sampled
# Lines of a failing program's stderr that show it ran out of memory when no cgroup counter can say so.
OOM_WORDS = ("MemoryError", "std::bad_alloc", "Cannot allocate memory", "out of memory", "OutOfMemoryError")


@functools.cache
def work_base() -> Path:
    """Where job and slot directories go: /dev/shm (tmpfs, pages charged to the writer's memory cgroup) when it
    is writable and roomy (containers often give it only 64 MB), else the system temp directory. Chosen once
    per process, so job and slot directories share a filesystem and files move between them by rename."""
    shm = Path("/dev/shm")
    try:
        stats = os.statvfs(shm)
        if os.access(shm, os.W_OK | os.X_OK) and stats.f_bavail * stats.f_frsize >= SHM_MIN_FREE:
            return shm
    except OSError:
        pass
    return Path(tempfile.gettempdir())


def private_dir(kind: str) -> Path:
    """A fresh directory name under work_base() that records the creating process (see sweep_private_dirs)."""
    return work_base() / f"proctor-{kind}-{os.getpid()}-{uuid.uuid4().hex}"


def _private_owner(name: str) -> int | None:
    """The pid recorded in a private directory's name (see private_dir), else None."""
    parts = name.split("-")
    if len(parts) != 4 or parts[0] != "proctor" or not parts[2].isdigit():
        return None
    return int(parts[2])


def sweep_private_dirs(owner: int | None = None) -> int:
    """Remove job and slot directories (and their tmpfs mounts) left by processes that died (their pid is
    gone), or only those of `owner`, a process the caller knows is dead; returns how many."""
    removed = 0
    base = work_base()
    try:
        entries = list(base.iterdir())
    except OSError:
        return 0
    for entry in entries:
        pid = _private_owner(entry.name)
        if pid is None or pid == os.getpid() or (owner is not None and pid != owner):
            continue
        if owner is None:
            try:
                os.kill(pid, 0)
                continue  # still alive (or a reused pid): leave it
            except ProcessLookupError:
                pass
            except PermissionError:
                continue
        release_path(entry)
        removed += 1
    return removed


_cpu_wait = threading.local()


def add_cpu_wait_s(seconds: float) -> None:
    """Count `seconds` that a program this thread ran waited for a CPU (see take_cpu_wait_s)."""
    _cpu_wait.total = getattr(_cpu_wait, "total", 0.0) + max(0.0, seconds)


def take_cpu_wait_s() -> float:
    """Seconds the programs this thread ran (commands here, warm tests and calls in warm.py) spent waiting for
    a CPU since the last call, and reset: a loaded machine, which a caller keeping its own wall-clock budget
    (the code verifier's) discounts. Sampled while a command runs, so a short one may report less."""
    total = getattr(_cpu_wait, "total", 0.0)
    _cpu_wait.total = 0.0
    return total


def hard_wall_s(limits: RunLimits) -> float:
    """Absolute wall-clock cap: the backstop stretched for load, so only a starved program can reach it."""
    return limits.wall_backstop_s * 5 + 5


def cpu_rlimit(limits: RunLimits, cgroup: bool, init: bool = False) -> tuple[int, int]:
    """RLIMIT_CPU (soft, hard): a second line behind the cgroup poll, or the first line without cgroups.

    The soft limit sends SIGXCPU, the hard one SIGKILL; a pid namespace's init (the program under nsjail)
    never gets SIGXCPU, so there both are the same.
    """
    soft = math.ceil(limits.cpu_s) + (1 if cgroup else 0)
    return (soft, soft) if init else (soft, soft + 1)


@dataclass
class Workdir:
    """A job's private directory on the host: `box` (the working directory) and `tmp` (scratch)."""

    root: Path
    box: Path
    tmp: Path
    # Whether the files must survive the next command (a later command or `fetch` reads them); run_job sets it.
    keep_files: bool = True

    @classmethod
    def create(cls, job: Job, owner: tuple[int, int] | None = None) -> Workdir:
        """Make the directory, write the job's files, and hand everything to `owner` (uid, gid) if given."""
        root = private_dir("job")
        root.mkdir(mode=0o700)
        made = cls(root, root / "box", root / "tmp")
        try:
            made.box.mkdir()
            made.tmp.mkdir()
            for item in job.files:
                target = made.box / item.path
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(item.data())
                target.chmod(0o755 if item.executable else 0o644)
            if owner is not None:
                for path in [root, *root.rglob("*")]:
                    os.lchown(path, *owner)
        except BaseException:
            made.remove()
            raise
        return made

    def fetch(self, names: list[str], max_bytes: int) -> dict[str, str]:
        """Read back the named files (base64); a missing file, a link out of the box or a directory is skipped."""
        out: dict[str, str] = {}
        box = self.box.resolve()
        for name in names:
            path = (box / name).resolve()
            if not path.is_relative_to(box) or not path.is_file():
                continue
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            except OSError:
                continue
            with os.fdopen(fd, "rb") as handle:
                out[name] = base64.b64encode(handle.read(max_bytes)).decode()
        return out

    def remove(self) -> None:
        """Delete the directory (rmtree never follows links the program may have planted)."""
        shutil.rmtree(self.root, ignore_errors=True)


@dataclass
class Launch:
    """How one command is started: argv, environment and working directory for exec, and its rlimits."""

    argv: list[str]
    env: dict[str, str]
    cwd: Path | str
    rlimits: dict[int, tuple[int, int]] = field(default_factory=dict)
    extra_processes: int = 0


@dataclass
class Measurement:
    """What the runner measured for one command, before anyone decides a verdict."""

    returncode: int | None
    stdout: Stream
    stderr: Stream
    log: str
    kill_reason: RunVerdict | None
    kill_detail: str
    cpu_s: float
    wall_s: float
    peak_memory_mb: float | None
    oom_kills: int
    pids_refused: int
    cgroup: bool
    memory_failures: int = (
        0  # times memory use hit the limit (a SIGKILL then means the limit, on old kernels)
    )
    storage_full: str = ""  # why the sandbox's bounded storage filled up ("" when it did not)


class Runner:
    """Runs one command in a warm slot: limits, go, pump with a CPU/wall watchdog, kill, measurements."""

    def __init__(
        self,
        cgroups: Cgroups | None,
        make: Callable[[], Slot] | None = None,
        warm: int = 2,
        poll_s: float = POLL_S,
    ) -> None:
        self.cgroups = cgroups
        self.poll_s = poll_s
        self.slots = SlotPool(make or (lambda: make_slot(cgroups)), warm)

    def run(
        self, launch: Launch, command: Command, box: Path | None = None, keep: bool = True
    ) -> Measurement:
        """Run to completion (or to a limit) and return the measurements; always removes the slot.

        For a slot with a directory of its own (a jail's /box), `box`'s entries are moved in before the
        command and, when `keep`, back out after it, so consecutive commands of a job see the same files.
        A slot whose storage is bounded (its own tmpfs, see storage.py) and full after the run reports it in
        `storage_full`; so does a copy back that does not fit. StorageFull: the job's files do not fit the slot.
        """
        slot = self.slots.take()
        moved = False
        try:
            if box is not None and slot.box is not None:
                _move_entries(box, slot.box)
                moved = True
            outcome = self._run(slot, launch, command)
            if slot.storage is not None and slot.home is not None:
                what = full(slot.home)
                if what:
                    outcome.storage_full = slot.storage.describe(what)
            if moved and keep and box is not None and slot.box is not None:
                moved = False
                try:
                    _move_entries(slot.box, box)
                except StorageFull as exc:
                    outcome.storage_full = outcome.storage_full or str(exc)
            return outcome
        finally:
            if moved and keep and box is not None and slot.box is not None:
                with contextlib.suppress(OSError, StorageFull):
                    _move_entries(slot.box, box)
            self.slots.release(slot)

    def _run(self, slot: Slot, launch: Launch, command: Command) -> Measurement:
        limits = command.limits
        proc, group = slot.proc, slot.group
        watch = _Watch(proc, group, limits, slot.waiting_pid)
        try:
            if group is not None:
                group.set_limits(limits.memory_mb, limits.processes + launch.extra_processes)
                group.start_accounting()
            for which, value in launch.rlimits.items():
                resource.prlimit(slot.waiting_pid, which, value)
            lines = script(launch.argv, launch.env, launch.cwd)
            watch.start = time.monotonic()
            slot.send(lines)
        except BaseException:
            watch.close()
            raise
        streams = {
            "stdout": Stream(slot.stdout, limits.output_bytes),
            "stderr": Stream(slot.stderr, limits.stderr_bytes),
        }
        if slot.log is not None:
            streams["log"] = Stream(slot.log, 256 * 1024)
        pump = Pump(streams, slot.stdin, command.stdin.encode())
        watch.pump = pump
        try:
            pump.run(watch.tick, self.poll_s, watch.pidfd)
        finally:
            # The pump closed these; the slot must not close them again (the numbers may be reused).
            slot.stdin = slot.stdout = slot.stderr = -1
            slot.log = None
            if watch.status is None:
                watch.wait()
            watch.close()
        wall = time.monotonic() - watch.start
        add_cpu_wait_s(watch.waited)
        cpu = group.cpu_s() if group is not None else watch.rusage_cpu
        peak = group.peak_memory_mb() if group is not None else watch.rusage_peak_mb
        return Measurement(
            returncode=watch.returncode,
            stdout=streams["stdout"],
            stderr=streams["stderr"],
            log=streams["log"].text() if "log" in streams else "",
            kill_reason=watch.reason,
            kill_detail=watch.detail,
            cpu_s=round(cpu, 4),
            wall_s=round(wall, 4),
            peak_memory_mb=None if peak is None else round(peak, 2),
            oom_kills=group.oom_kills() if group is not None else 0,
            memory_failures=group.memory_failures() if group is not None else 0,
            pids_refused=group.pids_refused() if group is not None else 0,
            cgroup=group is not None,
        )


class _Watch:
    """The watchdog that `Pump` ticks: reaps the main process, enforces CPU, wall and output limits."""

    def __init__(
        self, proc: subprocess.Popen[bytes], group: JobCgroup | None, limits: RunLimits, main_pid: int
    ) -> None:
        self.proc = proc
        self.main_pid = main_pid
        self.group = group
        self.limits = limits
        self.start = time.monotonic()
        self.pump: Pump | None = None
        self.status: int | None = None
        self.rusage_cpu = 0.0
        self.rusage_peak_mb: float | None = None
        self.reason: RunVerdict | None = None
        self.detail = ""
        self.ended_at: float | None = None
        self.killed_at: float | None = None
        self.waited = 0.0  # the longest wait for a CPU seen so far (sampled)
        self._next_wait_sample = self.start + WAIT_SAMPLE_S
        try:
            # Readable when the process exits, so the pump reaps it at once rather than at the next poll.
            self.pidfd: int | None = os.pidfd_open(proc.pid)
        except (AttributeError, OSError):
            self.pidfd = None

    def close(self) -> None:
        """Release the pidfd."""
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None

    @property
    def returncode(self) -> int | None:
        """Like Popen.returncode: exit code, or minus the signal number."""
        if self.status is None:
            return None
        return os.waitstatus_to_exitcode(self.status)

    def tick(self) -> bool:
        """Called by the pump between reads; True means stop pumping."""
        now = time.monotonic()
        if self.status is None:
            self._reap(os.WNOHANG)
            if self.status is not None:
                # The main process is gone: whatever it left behind (daemons holding the pipes) dies with it.
                self.kill()
                self.ended_at = now
        starved = None  # the tree's wait for a CPU, when sampled on this tick
        if self.status is None and now >= self._next_wait_sample:
            self._next_wait_sample = now + WAIT_SAMPLE_S
            starved = self._starved_s()
            self.waited = max(self.waited, starved)
        if self.reason is None and self.status is None:
            self._check_limits(now, starved)
        if self.status is not None:
            all_closed = self.pump is None or self.pump.all_closed
            return all_closed or now - (self.ended_at or now) > DRAIN_S
        # Killed but not reaped yet: give up on the pipes after a while, wait() then reaps or reports.
        return self.killed_at is not None and now - self.killed_at > KILL_WAIT_S

    def _check_limits(self, now: float, starved: float | None) -> None:
        """Stop the tree at a limit; the wall-clock ones only on a tick that sampled its wait for a CPU."""
        limits = self.limits
        elapsed = now - self.start
        if self.pump is not None and self.pump.over_cap("stdout"):
            self._stop(RunVerdict.output_limit, f"stdout passed {limits.output_bytes} bytes")
        elif self.group is not None and self.group.cpu_s() > limits.cpu_s:
            self._stop(RunVerdict.time_limit, f"CPU time of the process tree passed {limits.cpu_s:g} s")
        elif elapsed > limits.wall_backstop_s and starved is not None:
            if elapsed >= hard_wall_s(limits):
                if starved > elapsed / 2:
                    self._stop(
                        RunVerdict.sandbox_error, f"machine overloaded: waited {starved:.1f} s for a CPU"
                    )
                else:
                    self._stop(RunVerdict.time_limit, f"wall-clock hard cap {hard_wall_s(limits):g} s")
            elif elapsed - starved > limits.wall_backstop_s:
                self._stop(
                    RunVerdict.time_limit,
                    f"wall-clock backstop {limits.wall_backstop_s:g} s (sleeping or blocked)",
                )

    def _starved_s(self) -> float:
        """Longest time any live task of the tree has waited for a CPU (runnable, not running)."""
        return longest_cpu_wait_s(self.group.threads()[:32] if self.group is not None else [self.main_pid])

    def _stop(self, reason: RunVerdict, detail: str) -> None:
        self.reason, self.detail = reason, detail
        self.kill()
        self.killed_at = time.monotonic()

    def kill(self) -> None:
        """SIGKILL the whole tree: everything in the cgroup, else the process group."""
        if self.group is not None:
            self.group.kill()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    def _reap(self, flags: int) -> None:
        try:
            pid, status, usage = os.wait4(self.proc.pid, flags)
        except ChildProcessError:
            # Someone else reaped it: the status is lost, which must not pass for a clean exit.
            raise RuntimeError("lost track of the sandboxed process (reaped elsewhere)") from None
        if pid == 0:
            return
        self.status = status
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        self.rusage_cpu = usage.ru_utime + usage.ru_stime
        self.rusage_peak_mb = usage.ru_maxrss / 1024

    def wait(self) -> None:
        """Reap the main process, killing it if it does not end within the drain time."""
        deadline = time.monotonic() + DRAIN_S
        while self.status is None:
            self._reap(os.WNOHANG)
            if self.status is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    self.kill()
                    self._reap(0)
                    return
                if self.pidfd is not None:
                    wait_readable(self.pidfd, left)
                else:
                    time.sleep(0.002)


def signal_name(number: int) -> str:
    """SIGKILL for 9, and so on."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def longest_cpu_wait_s(tids: list[int]) -> float:
    """The longest time any of these tasks has waited for a CPU, from /proc/<tid>/schedstat (0 if unreadable).

    A loaded machine is not a slow program: wall-clock backstops subtract this so load cannot cause time limits.
    """
    return max(cpu_waits(tids).values(), default=0.0)


def cpu_waits(tids: list[int]) -> dict[int, float]:
    """Each readable task's total time waiting for a CPU (runnable, not running), in seconds; a task that
    lowered its own priority (`lowered_priority`) waited by its own choice and is left out."""
    found: dict[int, float] = {}
    nice = os.getpriority(os.PRIO_PROCESS, 0)  # a jail's tasks start at this process's (nsjail --nice_level)
    for tid in tids:
        try:
            if lowered_priority(tid, nice):
                continue
            with open(f"/proc/{tid}/schedstat") as handle:
                found[tid] = int(handle.read().split()[1]) / 1e9
        except (OSError, ValueError, IndexError):
            continue
    return found


def lowered_priority(tid: int, nice: int) -> bool:
    """Whether task `tid` runs at a nice value above `nice` or under SCHED_IDLE: a program may lower its own
    priority (the seccomp policy lets it), and on a busy machine it then waits for a CPU as long as it likes,
    a wait that must not stretch its wall-clock limits or the code verifier's budget. OSError if unreadable."""
    with open(f"/proc/{tid}/stat", "rb") as handle:
        fields = handle.read().rsplit(b")", 1)[1].split()
    # After the command's name: field 3 (state) is fields[0]; nice is field 19, the policy field 41.
    return int(fields[16]) > nice or int(fields[38]) == os.SCHED_IDLE


def runtime_out_of_memory(stderr: str, markers: tuple[str, ...]) -> bool:
    """Whether a failed program's stderr shows its runtime stopping at the heap cap the sandbox gave it."""
    return any(marker in stderr for marker in markers)


def judge(
    name: str,
    measured: Measurement,
    limits: RunLimits,
    exit_code: int | None,
    signum: int | None,
    detail: str = "",
    oom_markers: tuple[str, ...] = (),
) -> CommandResult:
    """The verdict for one command from measurements, and for a failed one, the language runtime's own words
    about running out of the heap it was given (`oom_markers`, see languages.py): memory_limit either way.

    The program could print those words itself, but only to turn its own failure into another failure.
    """
    if measured.kill_reason is not None and exit_code is None and signum is None:
        signum = signal.SIGKILL  # we killed it before it reported a status of its own
    failed = bool(exit_code) or signum is not None
    verdict, why = RunVerdict.ok, detail
    if measured.kill_reason is not None:
        verdict, why = measured.kill_reason, measured.kill_detail
    elif measured.stdout.truncated:
        verdict, why = RunVerdict.output_limit, f"stdout passed {limits.output_bytes} bytes"
    elif measured.oom_kills:
        verdict, why = RunVerdict.memory_limit, f"memory limit {limits.memory_mb} MB (OOM kill)"
    elif signum == signal.SIGKILL and measured.memory_failures:
        # Kernels without an oom_kill counter: killed while the cgroup was at its memory limit.
        verdict, why = RunVerdict.memory_limit, f"memory limit {limits.memory_mb} MB (killed at the limit)"
    elif signum == signal.SIGXCPU or (measured.cgroup and measured.cpu_s > limits.cpu_s):
        verdict, why = RunVerdict.time_limit, f"CPU time passed {limits.cpu_s:g} s"
    elif signum == signal.SIGKILL and not measured.cgroup and measured.cpu_s >= 0.9 * limits.cpu_s:
        # RLIMIT_CPU's kill; rusage, counted in ticks, may read a little under the limit that fired.
        verdict, why = RunVerdict.time_limit, f"CPU time passed {limits.cpu_s:g} s (RLIMIT_CPU)"
    elif signum == signal.SIGXFSZ:
        verdict, why = (
            RunVerdict.output_limit,
            f"a file passed the file size limit of {limits.file_size_mb} MB",
        )
    elif measured.storage_full:
        verdict, why = RunVerdict.output_limit, measured.storage_full
    elif failed and oom_markers and runtime_out_of_memory(measured.stderr.text(), oom_markers):
        verdict, why = (
            RunVerdict.memory_limit,
            f"memory limit {limits.memory_mb} MB (the runtime ran out of memory)",
        )
    elif failed and not measured.cgroup and _looks_out_of_memory(measured, limits):
        verdict, why = RunVerdict.memory_limit, f"memory limit {limits.memory_mb} MB (rlimit, no cgroup)"
    elif failed:
        verdict = RunVerdict.runtime_error
        why = f"killed by {signal_name(signum)}" if signum is not None else f"exit code {exit_code}"
    if measured.pids_refused and verdict is not RunVerdict.ok:
        why += f"; the process limit ({limits.processes}) refused {measured.pids_refused} forks"
    return CommandResult(
        name=name,
        verdict=verdict,
        exit_code=exit_code,
        signal=signum,
        cpu_s=measured.cpu_s,
        wall_s=measured.wall_s,
        peak_memory_mb=measured.peak_memory_mb,
        stdout=measured.stdout.text(),
        stderr=measured.stderr.text(),
        stdout_truncated=measured.stdout.truncated,
        stderr_truncated=measured.stderr.truncated,
        detail=why,
    )


def _looks_out_of_memory(measured: Measurement, limits: RunLimits) -> bool:
    peak = measured.peak_memory_mb or 0
    tail = decode(bytes(measured.stderr.data[-4096:]))
    return peak >= 0.8 * limits.memory_mb or any(word in tail for word in OOM_WORDS)


def sandbox_error(name: str, detail: str, wall_s: float = 0.0) -> CommandResult:
    """A result saying the machinery failed (not the program)."""
    return CommandResult(name=name, verdict=RunVerdict.sandbox_error, wall_s=wall_s, detail=detail)


def clamp_job(job: Job, maxima: Maxima | None) -> Job:
    """The job with every command's limits clamped to the operator's maxima."""
    if maxima is None:
        return job
    commands = [c.model_copy(update={"limits": maxima.clamp(c.limits)}) for c in job.commands]
    if all(new.limits is old.limits for new, old in zip(commands, job.commands, strict=True)):
        return job
    return job.model_copy(update={"commands": commands})


def run_job(
    job: Job,
    backend: str,
    workdir_owner: tuple[int, int] | None,
    one: Callable[[Workdir, Command], CommandResult],
    maxima: Maxima | None = None,
) -> Result:
    """Create the working directory, run the commands in order with `one` (their limits clamped to `maxima`),
    fetch files, always clean up."""
    job = clamp_job(job, maxima)
    try:
        workdir = Workdir.create(job, workdir_owner)
    except (OSError, ValueError) as exc:  # ValueError: a file's base64 content does not decode
        return Result(
            backend=backend, commands=[sandbox_error(job.commands[0].name, f"working directory: {exc}")]
        )
    results: list[CommandResult] = []
    try:
        for index, command in enumerate(job.commands):
            workdir.keep_files = bool(job.fetch) or index < len(job.commands) - 1
            try:
                result = one(workdir, command)
            except StorageFull as exc:
                result = CommandResult(name=command.name, verdict=RunVerdict.output_limit, detail=str(exc))
            except (CgroupError, SlotError) as exc:
                result = sandbox_error(command.name, str(exc))
            except Exception as exc:  # noqa: BLE001 - a machinery failure is a result, never an exception
                log.exception("sandbox machinery failed")
                result = sandbox_error(command.name, f"{type(exc).__name__}: {exc}")
            results.append(result)
            if result.verdict is not RunVerdict.ok and not job.keep_going:
                break
        limit = max(c.limits.file_size_mb for c in job.commands) * MB
        files = workdir.fetch(job.fetch, max(limit, 1)) if job.fetch else {}
        return Result(backend=backend, commands=results, files=files)
    finally:
        workdir.remove()


def _move_entries(source: Path, target: Path) -> None:
    """Move every entry of `source` into `target`: renames on one filesystem, else a copy (storage.copy_tree,
    StorageFull when it does not fit) and `source` emptied."""
    if os.stat(source).st_dev == os.stat(target).st_dev:
        for name in os.listdir(source):
            os.rename(source / name, target / name)
        return
    copy_tree(source, target)
    clear(source)
