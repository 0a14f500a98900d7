"""Per-command cgroups: memory and pids limits, CPU time of the whole process tree, peak memory, OOM kills.

Layout. cgroup v1 (this machine): one directory per controller, `<root>/{memory,pids,cpuacct}/proctor/<id>`
(the `cpuacct` hierarchy may be mounted together with `cpu`; the same directory is then used once).
cgroup v2: one directory `<root>/proctor/<id>`, with `+memory +pids` enabled in the subtree control files on
the way down; CPU time comes from `cpu.stat`, which every v2 cgroup has. `<root>` is /sys/fs/cgroup unless
given, so tests can point the code at an unusable root and see the rlimit fallback.

A waiting process is moved in by writing its pid to each `cgroup.procs` (see `JobCgroup.procs_files`) before
it execs the program, so every descendant is born inside (backends/slots.py). Nothing here signals our own
process: only pids listed in the job's cgroup are killed. A cgroup's name starts with the pid of the process
that made it (`<pid>-<uuid>`), so what a dead process left (a pool worker killed with SIGKILL, a service
stopped with SIGTERM) is found by its owner: `Cgroups.sweep` kills what still runs in those cgroups and removes
them, when a backend starts and, for a worker it killed, from the worker pool (`sweep(owner=pid)`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

DEFAULT_ROOT = Path("/sys/fs/cgroup")
PARENT = "proctor"
V1_CONTROLLERS = ("memory", "pids", "cpuacct")
OWNED_NAME = re.compile(r"(\d+)-[0-9a-f]{32}\Z")


def owner_of(name: str) -> int | None:
    """The pid of the process that made a cgroup called `name`, None for a name without one."""
    match = OWNED_NAME.match(name)
    return int(match.group(1)) if match else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class CgroupError(RuntimeError):
    """Cgroups cannot be used here (missing controller, no permission, read-only mount)."""


def _write(path: Path, value: str) -> None:
    with open(path, "w") as handle:
        handle.write(value)


def _read(path: Path) -> str:
    with open(path) as handle:
        return handle.read()


def _keyed(path: Path) -> dict[str, int]:
    """A flat keyed file (`name value` per line) as a dict; missing file -> {}."""
    try:
        text = _read(path)
    except OSError:
        return {}
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            out[parts[0]] = int(parts[1])
    return out


def _int(path: Path) -> int | None:
    try:
        return int(_read(path).strip())
    except (OSError, ValueError):
        return None


@dataclass
class JobCgroup:
    """The cgroup(s) of one command: limits set at creation, counters read while it runs, removed after.

    Counters count from `start_accounting()` (creation until then), so what a warm slot did while it waited
    (a shell starting, nsjail building the jail) is not charged to the command.
    """

    version: int
    dirs: dict[str, Path]
    _base: dict[str, float] = field(default_factory=dict)

    def start_accounting(self) -> None:
        """Count CPU, OOM kills, memory failures and refused forks from now; restart the peak (v1)."""
        self._base = {}
        self._base = {
            "cpu": self.cpu_s(),
            "oom": self.oom_kills(),
            "fail": self.memory_failures(),
            "pids": self.pids_refused(),
        }
        if self.version == 1:
            with contextlib.suppress(OSError):
                _write(self.dirs["memory"] / "memory.max_usage_in_bytes", "0")

    @property
    def procs_files(self) -> list[Path]:
        """The `cgroup.procs` files a process writes its pid to in order to join (one per hierarchy)."""
        seen: list[Path] = []
        for directory in self.dirs.values():
            if directory / "cgroup.procs" not in seen:
                seen.append(directory / "cgroup.procs")
        return seen

    def cpu_s(self) -> float:
        """CPU seconds used so far by every process that ever ran in the cgroup."""
        if self.version == 1:
            usage = (_int(self.dirs["cpuacct"] / "cpuacct.usage") or 0) / 1e9
        else:
            usage = _keyed(self.dirs["unified"] / "cpu.stat").get("usage_usec", 0) / 1e6
        return usage - self._base.get("cpu", 0.0)

    def peak_memory_mb(self) -> float | None:
        """Largest memory use seen (MiB), where the kernel records it."""
        if self.version == 1:
            peak = _int(self.dirs["memory"] / "memory.max_usage_in_bytes")
        else:
            peak = _int(self.dirs["unified"] / "memory.peak")
        return None if peak is None else peak / (1024 * 1024)

    def oom_kills(self) -> int:
        """How many processes the kernel killed for passing the memory limit."""
        if self.version == 1:
            count = _keyed(self.dirs["memory"] / "memory.oom_control").get("oom_kill", 0)
        else:
            count = _keyed(self.dirs["unified"] / "memory.events").get("oom_kill", 0)
        return count - int(self._base.get("oom", 0))

    def memory_failures(self) -> int:
        """How often memory use hit the limit (v1 failcnt, v2 `max` events), OOM kill or not."""
        if self.version == 1:
            count = _int(self.dirs["memory"] / "memory.failcnt") or 0
        else:
            count = _keyed(self.dirs["unified"] / "memory.events").get("max", 0)
        return count - int(self._base.get("fail", 0))

    def pids_refused(self) -> int:
        """How many forks the pids limit refused."""
        directory = self.dirs["pids" if self.version == 1 else "unified"]
        return _keyed(directory / "pids.events").get("max", 0) - int(self._base.get("pids", 0))

    def pids(self) -> list[int]:
        """Processes in the cgroup now (none when no hierarchy could be made: read-only cgroups, rlimits only)."""
        if not self.procs_files:
            return []
        try:
            return [int(p) for p in _read(self.procs_files[0]).split()]
        except OSError:
            return []

    def threads(self) -> list[int]:
        """Threads in the cgroup now (for per-task scheduler statistics)."""
        name = "tasks" if self.version == 1 else "cgroup.threads"
        if not self.procs_files:
            return []
        try:
            return [int(p) for p in _read(self.procs_files[0].parent / name).split()]
        except OSError:
            return []

    def set_limits(self, memory_mb: int, processes: int) -> None:
        """Set the memory (RAM + swap) and process limits; raises OSError when the kernel refuses."""
        memory_bytes = memory_mb * 1024 * 1024
        if self.version == 1:
            memory = self.dirs["memory"]
            # Without the memsw (RAM + swap) limit, a machine with swap would let the program swap instead of
            # failing. The kernel wants memsw >= limit at every step, so the order depends on the direction.
            names = ["memory.limit_in_bytes"]
            if (memory / "memory.memsw.limit_in_bytes").exists():
                names.append("memory.memsw.limit_in_bytes")
                if memory_bytes > (_int(memory / "memory.limit_in_bytes") or 0):
                    names.reverse()
            for name in names:
                _write(memory / name, str(memory_bytes))
            _write(self.dirs["pids"] / "pids.max", str(processes))
            return
        unified = self.dirs["unified"]
        _write(unified / "memory.max", str(memory_bytes))
        if (unified / "memory.swap.max").exists():
            _write(unified / "memory.swap.max", "0")
        if (unified / "memory.oom.group").exists():
            _write(unified / "memory.oom.group", "1")
        _write(unified / "pids.max", str(processes))

    def kill(self, deadline_s: float = 2.0) -> bool:
        """SIGKILL every process in the cgroup until it is empty (forks racing the kill are caught by looping)."""
        kill_file = self.dirs.get("unified", Path("/nonexistent")) / "cgroup.kill"
        if self.version == 2 and kill_file.exists():
            with contextlib.suppress(OSError):
                _write(kill_file, "1")
        end = time.monotonic() + deadline_s
        while True:
            pids = self.pids()
            if not pids:
                return True
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if time.monotonic() > end:
                return False
            time.sleep(0.001)

    def remove(self) -> None:
        """Kill what is left and remove the directories; retries while exiting processes leave."""
        self.kill()
        for directory in self.dirs.values():
            for attempt in range(200):
                try:
                    directory.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if attempt == 199:
                        log.warning("could not remove cgroup %s", directory)
                    time.sleep(0.005)


class Cgroups:
    """Creates per-command cgroups under `<root>`; `usable()` says whether that works here and why not."""

    def __init__(self, root: Path | str = DEFAULT_ROOT, parent: str = PARENT) -> None:
        self.root = Path(root)
        self.parent = parent
        self._checked: tuple[bool, str] | None = None
        self.version = 2 if (self.root / "cgroup.controllers").exists() else 1

    def parent_dirs(self) -> list[Path]:
        """The directories that hold this instance's per-command cgroups (one per v1 controller)."""
        if self.version == 2:
            return [self.root / self.parent]
        return [(self.root / controller).resolve() / self.parent for controller in V1_CONTROLLERS]

    def sweep(self, min_age_s: float = 300.0, owner: int | None = None) -> int:
        """Remove per-command cgroups left by processes that died; returns how many directories were removed.

        A cgroup named after its maker (`<pid>-<uuid>`) whose maker is gone is emptied (SIGKILL to what still
        runs there: orphaned sandboxed programs) and removed at once; with `owner`, only that (dead) process's
        cgroups are. Without `owner`, any other cgroup is removed when empty and older than `min_age_s` (rmdir
        fails on a cgroup that still has processes; the age spares one just created and not yet entered).
        """
        removed = 0
        now = time.time()
        alive: dict[int, bool] = {}
        for parent in self.parent_dirs():
            try:
                children = [child for child in parent.iterdir() if child.is_dir()]
            except OSError:
                continue
            for child in children:
                pid = owner_of(child.name)
                if owner is not None:
                    orphaned = pid == owner
                    if not orphaned:
                        continue
                else:
                    orphaned = (
                        pid is not None and pid != os.getpid() and not alive.setdefault(pid, _alive(pid))
                    )
                if orphaned:
                    JobCgroup(self.version, {"unified" if self.version == 2 else "orphan": child}).remove()
                    removed += 0 if child.exists() else 1
                    continue
                try:
                    if now - child.stat().st_mtime >= min_age_s:
                        child.rmdir()
                        removed += 1
                except OSError:
                    continue
        return removed

    def usable(self) -> tuple[bool, str]:
        """Whether per-command cgroups can be created here (checked once by creating and removing one)."""
        if self._checked is None:
            self.sweep()
            try:
                self.create(memory_mb=64, processes=8).remove()
                self._checked = (True, f"cgroup v{self.version} at {self.root}")
            except CgroupError as exc:
                self._checked = (False, str(exc))
        return self._checked

    def create(self, memory_mb: int, processes: int) -> JobCgroup:
        """Make a fresh cgroup with these limits; raises CgroupError when cgroups cannot be used."""
        name = f"{os.getpid()}-{uuid.uuid4().hex}"
        dirs: dict[str, Path] = {}
        job = JobCgroup(self.version, dirs)
        try:
            if self.version == 1:
                self._create_v1(name, dirs)
            else:
                self._create_v2(name, dirs)
            job.set_limits(memory_mb, processes)
        except OSError as exc:
            job.remove()
            raise CgroupError(f"cgroup setup failed under {self.root}: {exc}") from exc
        return job

    def _create_v1(self, name: str, dirs: dict[str, Path]) -> None:
        for controller in V1_CONTROLLERS:
            mount = self.root / controller
            if not (mount / "cgroup.procs").exists():
                raise CgroupError(f"cgroup v1 controller {controller!r} is not mounted at {mount}")
            resolved = mount.resolve() / self.parent
            resolved.mkdir(exist_ok=True)
            directory = resolved / name
            if directory not in dirs.values():
                directory.mkdir()
            dirs[controller] = directory

    def _create_v2(self, name: str, dirs: dict[str, Path]) -> None:
        available = _read(self.root / "cgroup.controllers").split()
        missing = {"memory", "pids"} - set(available)
        if missing:
            raise CgroupError(f"cgroup v2 at {self.root} lacks controllers {sorted(missing)}")
        parent = self.root / self.parent
        # Controllers reach a child only when every ancestor enables them for its subtree.
        self._enable(self.root)
        parent.mkdir(exist_ok=True)
        self._enable(parent)
        directory = parent / name
        directory.mkdir()
        dirs["unified"] = directory

    @staticmethod
    def _enable(directory: Path) -> None:
        if not {"memory", "pids"} <= set(_read(directory / "cgroup.subtree_control").split()):
            _write(directory / "cgroup.subtree_control", "+memory +pids")
