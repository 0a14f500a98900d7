"""What a sandbox runs and what it reports: jobs, limits, results, verdicts and the machinery's failure (plain data)."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator

if TYPE_CHECKING:
    from proctor.settings import Settings


class RunVerdict(str, Enum):
    """How one command ended; `sandbox_error` alone means the machinery failed rather than the program."""

    ok = "ok"
    runtime_error = "runtime_error"
    time_limit = "time_limit"
    memory_limit = "memory_limit"
    output_limit = "output_limit"
    sandbox_error = "sandbox_error"


class RunLimits(BaseModel):
    """Resource limits for one command. CPU time is the whole process tree's; wall time only catches sleepers."""

    model_config = ConfigDict(extra="forbid")

    cpu_s: float = Field(2.0, gt=0, le=600, description="CPU seconds of the whole process tree.")
    wall_s: float | None = Field(
        None, gt=0, le=1800, description="Wall-clock backstop; default 2 x cpu_s + 1 s."
    )
    memory_mb: int = Field(512, ge=16, le=65536, description="Memory of the whole process tree (cgroup).")
    processes: int = Field(64, ge=1, le=4096, description="Processes and threads alive at once.")
    output_bytes: int = Field(16 * 1024 * 1024, ge=0, description="stdout beyond this is output_limit.")
    stderr_bytes: int = Field(64 * 1024, ge=0, description="stderr kept; the rest is drained and dropped.")
    file_size_mb: int = Field(64, ge=0, description="Largest file the program may write.")
    open_files: int = Field(256, ge=16, le=65536, description="Open file descriptors per process.")

    @property
    def wall_backstop_s(self) -> float:
        """The wall-clock limit actually applied."""
        return self.wall_s if self.wall_s is not None else 2 * self.cpu_s + 1


@dataclass(frozen=True)
class Maxima:
    """The operator's ceilings for every sandboxed job (PROCTOR_SANDBOX_MAX_*): a request asking for more is a 422
    naming its field, and every backend clamps a command's limits to them (so no caller can exceed them)."""

    memory_mb: int
    cpu_s: float
    files: int
    disk_mb: int

    @classmethod
    def from_settings(cls, settings: Settings | None = None) -> Maxima:
        """The maxima of `settings`, else of this process's (PROCTOR_SANDBOX_MAX_MEMORY_MB, _CPU_S, _FILES,
        _DISK_MB)."""
        if settings is None:
            from proctor.settings import get_settings

            settings = get_settings()
        return cls(
            memory_mb=settings.sandbox_max_memory_mb,
            cpu_s=settings.sandbox_max_cpu_s,
            files=settings.sandbox_max_files,
            disk_mb=settings.sandbox_max_disk_mb,
        )

    def clamp(self, limits: RunLimits) -> RunLimits:
        """`limits` with memory, CPU time and file size no higher than these maxima (the same object if within)."""
        update: dict[str, float | int] = {}
        if limits.memory_mb > self.memory_mb:
            update["memory_mb"] = max(16, self.memory_mb)
        if limits.cpu_s > self.cpu_s:
            update["cpu_s"] = self.cpu_s
            if limits.wall_s is not None:
                update["wall_s"] = min(limits.wall_s, 2 * self.cpu_s + 1)
        if limits.file_size_mb > self.disk_mb:
            update["file_size_mb"] = self.disk_mb
        return limits.model_copy(update=update) if update else limits


def over_maximum(name: str, value: float, maximum: float, unit: str) -> str | None:
    """The 422 message for a requested limit above the operator's maximum, else None."""
    if value > maximum:
        return f"{name} {value:g} {unit} is above this service's maximum of {maximum:g} {unit}"
    return None


class File(BaseModel):
    """A file placed in the job's fresh working directory before the first command."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(min_length=1, description="Relative path inside the working directory.")
    content: str = Field("", description="Text, or base64 when `base64` is true.")
    base64: bool = False
    executable: bool = False

    @model_validator(mode="after")
    def _relative(self) -> File:
        parts = self.path.replace("\\", "/").split("/")
        if self.path.startswith("/") or ".." in parts:
            raise ValueError("path must stay inside the working directory")
        return self

    def data(self) -> bytes:
        """The file's bytes."""
        return base64.b64decode(self.content) if self.base64 else self.content.encode()


class Command(BaseModel):
    """One program run inside the job's sandbox, with its own stdin and limits."""

    model_config = ConfigDict(extra="forbid")

    argv: list[str] = Field(min_length=1)
    stdin: str = ""
    limits: RunLimits = Field(default_factory=RunLimits)
    name: str = Field("run", description="A label for results, e.g. 'compile' or 'run'.")
    oom_markers: tuple[str, ...] = Field(
        (),
        description="stderr words of a runtime stopping itself at its heap cap (java.lang.OutOfMemoryError, "
        "...): a failed command whose stderr holds one is memory_limit, not runtime_error.",
    )


class Job(BaseModel):
    """Files plus commands run in order in one fresh working directory; stops after a command that fails."""

    model_config = ConfigDict(extra="forbid")

    files: list[File] = Field(default_factory=list)
    commands: list[Command] = Field(min_length=1)
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment; nothing is inherited.")
    keep_going: bool = Field(False, description="Run later commands even after one does not end ok.")
    fetch: list[str] = Field(default_factory=list, description="Files to read back after the last command.")


class CommandResult(BaseModel):
    """How one command ended, measured by the sandbox, never reported by the program itself."""

    name: str
    verdict: RunVerdict
    exit_code: int | None = None
    signal: int | None = None
    cpu_s: float = 0.0
    wall_s: float = 0.0
    peak_memory_mb: float | None = None
    stdout: str = ""
    stderr: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    detail: str = Field("", description="Why: which limit, which machinery failure.")
    cpu_wait_s: float = Field(
        0.0,
        description="Time it spent waiting for a CPU (a loaded machine), where measured per command (warm).",
    )


class Result(BaseModel):
    """The job's outcome: one CommandResult per command that ran, and the fetched files (base64)."""

    backend: str
    commands: list[CommandResult]
    files: dict[str, str] = Field(default_factory=dict)

    @property
    def verdict(self) -> RunVerdict:
        """The first verdict that is not ok, else ok."""
        return next((c.verdict for c in self.commands if c.verdict is not RunVerdict.ok), RunVerdict.ok)


class Backend(Protocol):
    """A way to run jobs: nsjail (default), docker, or local (development only)."""

    name: str

    def available(self) -> tuple[bool, str]:
        """Whether this backend works on this machine, and why not."""
        ...

    def run(self, job: Job) -> Result:
        """Run the job to completion; machinery failures are results with verdict sandbox_error, not exceptions."""
        ...


class CompileOutcome(BaseModel):
    """How preparing a program went: ok (or nothing to compile), compile_error (the program's fault, with the
    compiler's messages), sandbox_error (the machinery failed). Loading warm Python can also end in
    runtime_error, time_limit or memory_limit (the program failed while being imported)."""

    status: Literal["ok", "compile_error", "runtime_error", "time_limit", "memory_limit", "sandbox_error"]
    result: CommandResult | None = None
    message: str = ""

    @property
    def ok(self) -> bool:
        """Whether tests can run."""
        return self.status == "ok"


class SandboxFailure(Exception):
    """The sandbox machinery failed (a `sandbox_error`): a verifier that meets it scores the item with that
    status, never a reward."""
