"""The `local` backend: a plain subprocess with rlimits and cgroup accounting. Development only: no isolation.

It must be chosen explicitly (never a fallback) and warns once that the program can see and change the host.
With cgroups (see sandboxes/cgroups.py) it measures and limits the whole tree exactly like nsjail; without them
it falls back to rlimits (RLIMIT_CPU per process, RLIMIT_DATA for memory) and the process group.

It cannot bound a job's files (PROCTOR_SANDBOX_MAX_FILES, PROCTOR_SANDBOX_MAX_DISK_MB): the program runs as this
process's user in the host's filesystem and may write wherever that user may; only RLIMIT_FSIZE bounds each
file. The CPU and memory maxima (PROCTOR_SANDBOX_MAX_CPU_S, _MEMORY_MB) do apply.
"""

from __future__ import annotations

import logging
import resource
import shutil
from pathlib import Path

from ..cgroups import DEFAULT_ROOT, PARENT, Cgroups
from ..job import Command, CommandResult, Job, Maxima, Result
from .runner import (
    BASE_PATH,
    MB,
    Launch,
    Runner,
    Workdir,
    cpu_rlimit,
    judge,
    run_job,
    sandbox_error,
    sweep_private_dirs,
)

log = logging.getLogger(__name__)
_warned = False


class LocalBackend:
    """Runs each command as a subprocess of this process, in a new session, in a fresh host directory."""

    name = "local"

    def __init__(
        self,
        cgroup_root: Path | str = DEFAULT_ROOT,
        cgroup_parent: str = PARENT,
        warm: int = 2,
        maxima: Maxima | None = None,
    ) -> None:
        global _warned
        if not _warned:
            _warned = True
            log.warning("sandbox backend 'local' does not isolate programs: use it for development only")
        self.cgroups = Cgroups(cgroup_root, cgroup_parent)
        self.maxima = maxima or Maxima.from_settings()
        sweep_private_dirs()
        ok, why = self.cgroups.usable()
        self.cgroup_reason = why
        if not ok:
            log.warning("local sandbox: cgroups unusable (%s); falling back to rlimits", why)
        self.runner = Runner(self.cgroups if ok else None, warm=warm)

    def close(self) -> None:
        """Discard the warm slots (a later job starts them again)."""
        self.runner.slots.close()

    def available(self) -> tuple[bool, str]:
        """Always available where /bin/sh is; says whether CPU/memory accounting uses cgroups."""
        if shutil.which("sh", path="/bin:/usr/bin") is None:
            return False, "/bin/sh is missing"
        mode = (
            self.cgroup_reason if self.runner.cgroups is not None else f"rlimits only ({self.cgroup_reason})"
        )
        return True, f"no isolation; {mode}; job files unbounded"

    def run(self, job: Job) -> Result:
        """Run the job's commands in order in one fresh directory."""
        return run_job(
            job, self.name, None, lambda workdir, command: self._one(job, workdir, command), self.maxima
        )

    def _one(self, job: Job, workdir: Workdir, command: Command) -> CommandResult:
        limits = command.limits
        env = {"PATH": BASE_PATH, "HOME": str(workdir.box), "LANG": "C.UTF-8", "TMPDIR": str(workdir.tmp)}
        env.update(job.env)
        program = command.argv[0]
        if "/" in program:
            found = (workdir.box / program).exists()  # relative to the working directory, or absolute
        else:
            found = shutil.which(program, path=env["PATH"]) is not None
        if not found:
            return sandbox_error(command.name, f"cannot execute {program!r}: not found")
        cgroup = self.runner.cgroups is not None
        rlimits = {
            resource.RLIMIT_CPU: cpu_rlimit(limits, cgroup),
            resource.RLIMIT_FSIZE: (limits.file_size_mb * MB,) * 2,
            resource.RLIMIT_NOFILE: (limits.open_files,) * 2,
            resource.RLIMIT_CORE: (0, 0),
        }
        if not cgroup:
            # Never RLIMIT_AS (it stops the JVM, Go and Node); DATA counts only memory actually made writable.
            rlimits[resource.RLIMIT_DATA] = (limits.memory_mb * MB,) * 2
        launch = Launch(argv=command.argv, env=env, cwd=workdir.box, rlimits=rlimits)
        outcome = self.runner.run(launch, command)
        code = outcome.returncode
        exit_code = code if code is not None and code >= 0 else None
        signum = -code if code is not None and code < 0 else None
        return judge(command.name, outcome, limits, exit_code, signum, oom_markers=command.oom_markers)
