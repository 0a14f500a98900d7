"""Warm tool jails: the verifier's tool runs (iverilog, vvp, yosys, yosys-abc) fork+exec'd in a jail that is
already up, instead of one fresh jail per tool run.

A fresh nsjail per run costs about as much as a small iverilog compile, and a testbench verdict used to take
four of them; here a verdict takes none. Each jail is the sandbox's own warm server (sandboxes/warm.py,
`WarmPython.execute`, stdio mode: the server runs no tool or candidate code, it spawns each run as a child
with the run's own CPU, memory, process and output limits, and kills whatever the run left behind before the
next one). Every job starts from a clean slate, as a fresh jail would:

- direct jobs (`DIRECT`, where the jail's /tmp is on the slot's own tmpfs and every run is a program): the
  host empties the jail's /box and /tmp and writes the job's files into the job's directory
  (`WarmPython.put_files`: no link followed, nothing outside the directory, sizes within the jail's limits);
  then all the job's runs go to the server in one exchange (`run_batch`), each spawned in the job's directory
  (`cwd`), the tools as the verifier's own steps (`trusted`: their files stay for the runs after them) and the
  simulator as the candidate's (what it leaves is removed after it). No shell or tar starts in the jail. Files
  that could not be put in place, or a run that went to a jail started after they were, is a machinery
  failure: the job runs again in a fresh jail, then cold, never a verdict on the candidate;
- other jobs: the job's files are unpacked (tar, from stdin) into the job's directory, which tar empties
  first, after anything else in the jail's /box and /tmp is removed; the first run's shell prints a random
  marker once the files are in place, before it execs the tool: a job whose set-up did not print it (a full
  disk, a broken jail) is a machinery failure, handled the same way;
- a jail serves one job at a time and is retired after `MAX_JOBS` jobs or any machinery failure.

Only the nsjail backend is used warm (its /tmp is the jail's own); other backends run cold jobs.
"""

from __future__ import annotations

import atexit
import base64
import inspect
import io
import logging
import os
import secrets
import tarfile
import threading
import time

from proctor.sandboxes.job import Backend, CommandResult, Job, Result, RunLimits, RunVerdict
from proctor.sandboxes.warm import BatchTest, WarmPython

log = logging.getLogger(__name__)

SH = "/bin/sh"
TAR = "/usr/bin/tar"
ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/tmp"}
MAX_IDLE = 4  # idle jails kept; more are started while more jobs run at once, and closed when handed back
MAX_JOBS = 256  # jobs one jail serves before it is replaced
IDLE_S = 120.0  # an idle jail older than this is closed when the pool is next used
DIRECTORY = "job"  # a job's directory, under the jail's /box
# What a job's first run removes before it unpacks the job's files: everything in /box (the server has read
# its own files already; a restarted server gets a fresh jail) and in /tmp, dot files included. The shell
# looks first and starts `rm` only when something besides the last job's directory is there (tar empties
# that one itself, --recursive-unlink), so a job in a clean jail costs no extra process.
CLEAN = "/box/* /box/.[!.]* /box/..?* /tmp/* /tmp/.[!.]* /tmp/..?*"
SETUP = (
    f"x=; for f in {CLEAN}; do case $f in /box/{DIRECTORY}) ;; *) "
    '{ [ -e "$f" ] || [ -L "$f" ]; } && x=1;; esac; done; '
    f'[ -z "$x" ] || rm -rf {CLEAN} 2>/dev/null; {TAR} -x --recursive-unlink -f - || exit 97; '
)


# Tools that run the candidate's code (the simulator runs its processes). The others (iverilog, yosys, ABC,
# tar, the shell that sets a job up) only read its text: where the sandbox tells the two apart (`trusted`
# runs keep the files they write; after any other run the jail goes back to how it was before it), the
# verifier's own steps are marked trusted, so a compile's output is there for the simulation after it.
RUNS_CANDIDATE = frozenset({"/usr/bin/vvp"})
_TRUSTED_RUNS = "trusted" in inspect.signature(WarmPython.execute).parameters
_HOST_READS = hasattr(WarmPython, "kept_files")  # the jail's files read on the host (else tar, in the jail)
# A job as the sandbox's own requests (its files written on the host, every run spawned by the server in the
# job's folder, all of them in one exchange), where the sandbox has them; else the set-up shell and tar.
DIRECT = hasattr(WarmPython, "put_files") and "cwd" in inspect.signature(WarmPython.execute).parameters


def _trust(trusted: bool) -> dict[str, bool]:
    """execute()'s `trusted` argument where the sandbox has it."""
    return {"trusted": trusted} if _TRUSTED_RUNS else {}


class SetupFailed(Exception):
    """A job's files could not be put in place in a warm jail (the machinery's failure, not the candidate's)."""


def archive(directory: str, files: dict[str, str]) -> str:
    """A tar archive of `files` inside `directory`, as text: the headers are ASCII and the contents UTF-8, so
    the server's UTF-8 encoding of a request's stdin gives back exactly these bytes."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        folder = tarfile.TarInfo(directory)
        folder.type, folder.mode = tarfile.DIRTYPE, 0o700
        tar.addfile(folder)
        for name, text in files.items():
            data = text.encode()
            entry = tarfile.TarInfo(f"{directory}/{name}")
            entry.size, entry.mode = len(data), 0o644
            tar.addfile(entry, io.BytesIO(data))
    return buffer.getvalue().decode()


def unarchive(text: str) -> dict[str, str]:
    """The regular files of a tar archive read back as text (tar's stdout), base64 as Result.files holds them;
    a damaged archive gives what could be read."""
    out: dict[str, str] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(text.encode()), mode="r:") as tar:
            for member in tar:
                handle = tar.extractfile(member) if member.isfile() else None
                if handle is not None:
                    out[member.name] = base64.b64encode(handle.read()).decode()
    except (tarfile.TarError, EOFError, OSError):
        pass
    return out


def jail_key(limits: RunLimits) -> tuple[int, int, int, int]:
    """The limits a whole jail holds (cgroup memory and processes, the server's rlimits that its runs
    inherit): a jail only serves jobs whose runs all ask for the same, so none is ever raised after a run."""
    return (limits.memory_mb, limits.processes, limits.file_size_mb, limits.open_files)


class ToolJail:
    """One warm jail, the limits it holds, and the jobs it has served."""

    def __init__(self, backend: Backend, limits: RunLimits):
        self.key = jail_key(limits)
        self.limits = limits
        self.server = WarmPython("", limits=limits, backend=backend)
        self.jobs = 0
        self.idle_since = time.monotonic()

    def start(self) -> bool:
        """Start the server; False when it cannot (the caller runs the job cold or reports the failure)."""
        outcome = self.server.start()
        if not outcome.ok:
            log.warning("verilog warm jail could not start: %s %s", outcome.status, outcome.message[:500])
        return outcome.ok

    def run(self, job: Job) -> Result:
        """Run the job's commands in order (keep going past failures), then fetch its files; SetupFailed when
        the files could not be put in place."""
        self.jobs += 1
        # Direct where the host sees the jail's /tmp to clear it (bounded storage: the slot's own tmpfs) and
        # every run is a program, not a shell script.
        direct = DIRECT and getattr(self.server.backend, "storage", None) is not None
        if direct and all(c.argv[0].startswith("/") and c.argv[0] != SH for c in job.commands):
            return self._run_direct(job)
        directory = DIRECTORY
        marker = secrets.token_hex(16)
        files = {item.path: item.content for item in job.files}
        results: list[CommandResult] = []
        for index, command in enumerate(job.commands):
            # Paths in the argv are relative to the job's directory: a shell enters it and runs the tool (a
            # command that is a shell script itself is spliced in, so no second shell starts).
            setup = SETUP if index == 0 else ""
            if command.argv[:2] == [SH, "-c"] and len(command.argv) > 3:
                body, args = command.argv[2], command.argv[3:]
            else:
                body, args = 'exec "$@"', ["sh", *command.argv]
            argv = [SH, "-c", f"{setup}cd {directory} && echo {marker} && {body}", *args]
            stdin = archive(directory, files) if index == 0 else command.stdin
            env = {**ENV, **job.env}
            trusted = command.argv[0] not in RUNS_CANDIDATE and not (
                command.argv[0] == SH and RUNS_CANDIDATE & set(command.argv)
            )
            result = self.server.execute(argv, env, stdin, command.limits, command.name, **_trust(trusted))
            if result.verdict is RunVerdict.sandbox_error:
                raise SetupFailed(f"{command.name}: {result.detail}")
            head, _, rest = result.stdout.partition("\n")
            if head != marker:
                raise SetupFailed(
                    f"{command.name}: the job's files were not put in place ({result.detail}): {result.stderr[-300:]}"
                )
            result.stdout = rest
            if result.verdict is RunVerdict.time_limit and result.detail.startswith("cpu "):
                # the words a cold jail uses, with the limit applied (the server says "cpu X s > Y s")
                result.detail = f"CPU time passed {command.limits.cpu_s:g} s ({result.detail})"
            results.append(result)
        fetched = self._fetch(job, directory, marker) if job.fetch else {}
        return Result(backend="nsjail-warm", commands=results, files=fetched)

    def _run_direct(self, job: Job) -> Result:
        """The job with no process of its own in the jail: its files written on the host into a cleared /box
        (and /tmp where the host sees it), then its runs as one batch, each spawned by the server in the job's
        folder; the files read back on the host."""
        starts = self.server.starts
        try:
            self.server.put_files(job.files, DIRECTORY, clear=True)
        except (OSError, ValueError) as exc:  # too large for a warm jail's limits too: a fresh one, then cold
            raise SetupFailed(f"the job's files were not put in place: {exc}") from exc
        env = {**ENV, **job.env}
        tests = [
            BatchTest(
                command.stdin,
                command.limits,
                command.name,
                tuple(command.argv),
                env,
                trusted=not RUNS_CANDIDATE & set(command.argv),  # a run naming the simulator anywhere is not
                cwd=DIRECTORY,
            )
            for command in job.commands
        ]
        results = self.server.run_batch(tests)
        if self.server.starts != starts or len(results) != len(tests):
            # a run went to a jail started after the files were put (the first broke): not a verdict
            raise SetupFailed("the jail was replaced during the job")
        for command, result in zip(job.commands, results, strict=True):
            if result.verdict is RunVerdict.sandbox_error:
                raise SetupFailed(f"{result.name}: {result.detail}")
            if result.verdict is RunVerdict.time_limit and result.detail.startswith("cpu "):
                result.detail = f"CPU time passed {command.limits.cpu_s:g} s ({result.detail})"
        fetched = self._fetch(job, DIRECTORY, "") if job.fetch else {}
        return Result(backend="nsjail-warm", commands=results, files=fetched)

    def _fetch(self, job: Job, directory: str, marker: str) -> dict[str, str]:
        limit = max(c.limits.file_size_mb for c in job.commands) << 20
        if _HOST_READS:
            # read on the host, no process in the jail (links and anything but regular files left out)
            try:
                kept = self.server.kept_files(directory, limit * (len(job.files) + len(job.fetch) + 8))
            except OSError as exc:
                raise SetupFailed(f"fetch: the job's files could not be read back ({exc})") from exc
            except ValueError:
                kept = None  # larger than the job's files can be: tar tells which it can read
            if kept is not None:
                found = {item.path[len(directory) + 1 :]: item for item in kept}
                if any(item.path not in found for item in job.files):
                    # the job's own files are gone: the jail was replaced under it, not a verdict
                    raise SetupFailed("fetch: the job's directory is gone")
                return {name: found[name].content for name in job.fetch if name in found}
        size = {"cpu_s": 5.0, "wall_s": 11.0, "output_bytes": 2 * limit * len(job.fetch) + 4096}
        limits = self.limits.model_copy(update=size)
        script = f'cd {directory} && echo {marker} && exec {TAR} -c -f - --ignore-failed-read -- "$@"'
        argv = [SH, "-c", script, "sh", *job.fetch]
        result = self.server.execute(argv, ENV, "", limits, "fetch", **_trust(True))
        head, _, rest = result.stdout.partition("\n")
        if result.verdict is RunVerdict.sandbox_error or head != marker:
            raise SetupFailed(f"fetch: the job's files could not be read back ({result.detail})")
        return unarchive(rest)  # tar names the files as given, relative to the job's directory

    def close(self) -> None:
        """Kill the jail."""
        self.server.close()


class JailPool:
    """Idle warm jails, each taken by one job at a time and handed back after it; at most `max_idle` are kept
    (the longest idle are closed first)."""

    def __init__(self, max_idle: int = MAX_IDLE, max_jobs: int = MAX_JOBS, idle_s: float = IDLE_S):
        self.max_idle = max_idle
        self.max_jobs = max_jobs
        self.idle_s = idle_s
        self._idle: list[ToolJail] = []  # oldest first
        self._lock = threading.Lock()

    def run(self, backend: Backend, job: Job) -> Result | None:
        """The job's result from a warm jail (a second, fresh jail when the first fails to set it up), or None
        when no warm jail could run it (the caller runs it cold)."""
        if len({jail_key(command.limits) for command in job.commands}) != 1:
            return None
        for _ in range(2):
            jail = self._take(backend, job.commands[0].limits)
            if jail is None:
                return None
            try:
                result = jail.run(job)
            except SetupFailed as exc:
                log.warning("verilog warm jail retired: %s", str(exc)[:500])
                jail.close()
                continue
            except BaseException:
                jail.close()
                raise
            self._give(jail)
            return result
        return None

    def _take(self, backend: Backend, limits: RunLimits) -> ToolJail | None:
        key = jail_key(limits)
        found = None
        with self._lock:
            stale = self._stale()
            for index in range(len(self._idle) - 1, -1, -1):
                if self._idle[index].key == key and self._idle[index].server.backend is backend:
                    found = self._idle.pop(index)
                    break
        for old in stale:
            old.close()
        if found is not None:
            return found
        jail = ToolJail(backend, limits)
        if not jail.start():
            jail.close()
            return None
        return jail

    def _give(self, jail: ToolJail) -> None:
        closing = [jail] if jail.jobs >= self.max_jobs else []
        jail.idle_since = time.monotonic()
        with self._lock:
            closing += self._stale()
            if jail not in closing:
                self._idle.append(jail)
            while len(self._idle) > self.max_idle:
                closing.append(self._idle.pop(0))
        for old in closing:
            old.close()

    def _stale(self) -> list[ToolJail]:
        """Take out the jails idle for longer than idle_s (under the lock; the caller closes them)."""
        cutoff = time.monotonic() - self.idle_s
        stale = [jail for jail in self._idle if jail.idle_since < cutoff]
        self._idle = [jail for jail in self._idle if jail.idle_since >= cutoff]
        return stale

    @property
    def idle(self) -> int:
        """How many jails are idle now."""
        with self._lock:
            return len(self._idle)

    def close(self) -> None:
        """Kill every idle jail."""
        with self._lock:
            idle, self._idle = self._idle, []
        for jail in idle:
            jail.close()

    def forget(self) -> None:
        """Drop the idle jails without closing them: in a forked child they are the parent's (their pipes
        and servers), which it goes on using."""
        self._idle = []
        self._lock = threading.Lock()


POOL = JailPool()
atexit.register(POOL.close)
os.register_at_fork(after_in_child=POOL.forget)


def warm_usable(backend: Backend) -> bool:
    """Whether jobs on this backend run in warm jails: nsjail only (its /tmp and /box are the jail's own)."""
    return backend.name == "nsjail" and hasattr(backend, "runner")


__all__ = ["POOL", "JailPool", "SetupFailed", "ToolJail", "archive", "unarchive", "warm_usable"]
