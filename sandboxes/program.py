"""Running a program: `Submission` compiles (or loads) it once and runs every test against it, through the one
`ProgramRunner` it chooses when it is made.

The three runners:
- `ColdRunner` (`warm=False`, and backends without warm slots, such as docker): every test is a command of a
  fresh job. A job runs in one fresh working directory, so the compiled program travels with it: the compile
  job packs `out/` as `out.tar`, the host fetches it, and every test job carries the unpacked files (a C binary
  is ~16 KB, Go ~1.3 MB, Java a few class files). `run_batch` puts several tests into one job, one command
  each. Measured on this machine, both cost about the same per test (every command gets a fresh jail either
  way: ~7 ms for C, ~60 ms for Java whose JVM start dominates), except that batching spares re-sending a
  large binary (Go: ~9 ms against ~13 ms).
- `WarmPythonRunner` (the default for Python on nsjail and local): one jail per submission whose server
  loaded the program and forks per test (warm.py; ~2 ms against ~14 ms).
- `WarmExecRunner` (the default for the other languages on nsjail and local): compile once as above, then
  the same server, which runs no candidate code, fork+execs the binary (or node, java) per test inside one
  jail: about 3 ms per test for a C binary instead of ~7 ms for a fresh jail.

Function calls are the other way to run a program: a `Caller` (warm.py's `WarmPython` in call mode, the code
verifier's `HarnessProgram` for the compiled languages) loads it once and answers `call` with plain data.
"""

from __future__ import annotations

import base64
import io
import os
import tarfile
import threading
from collections.abc import Sequence
from typing import Any, Protocol

from proctor.sandboxes.backends import resolve_backend
from proctor.sandboxes.job import (
    Backend,
    Command,
    CommandResult,
    CompileOutcome,
    File,
    Job,
    RunLimits,
    RunVerdict,
)
from proctor.sandboxes.languages import ARCHIVE, BASE_ENV, OUT_DIR, Language, get_language
from proctor.sandboxes.warm import BatchTest, CallResult, WarmPython

MAX_ARTIFACT_BYTES = 64 * 1024 * 1024


class ProgramRunner(Protocol):
    """How one submission's tests run; `Submission` picks one when it is made and never branches again."""

    warm: bool  # tests share one sandbox (so a batch is one test at a time)

    def prepare(self) -> CompileOutcome:
        """Compile or load the program (called once)."""
        ...

    def ready(self) -> bool:
        """Whether a prepared program can run (False once closed, where closing forgets the compiled files)."""
        ...

    def run(self, stdin: str, limits: RunLimits) -> CommandResult:
        """Run the prepared program once on `stdin`, judged by the language (`Language.judge`)."""
        ...

    def run_batch(
        self,
        stdins: Sequence[str],
        limits: Sequence[RunLimits],
        *,
        first: int = 0,
        stop_on_failure: bool = False,
        wall_budget_s: float | None = None,
    ) -> list[CommandResult]:
        """Run test `first + i` on `stdins[i]` under `limits[i]`, in order; with `stop_on_failure` the first
        test that does not end ok ends the batch. A cold batch is one job (its commands named test<index>);
        the list is shorter when the backend ran fewer commands. `wall_budget_s`: the wall time the batch may
        take (warm runners: each test's backstop is cut to what is left and no test starts once it is spent,
        so the list is shorter; a cold batch is sized by its caller instead)."""
        ...

    def close(self) -> None:
        """Release the sandbox and forget the program."""
        ...


class Caller(Protocol):
    """A program loaded once whose functions are called with plain data (`WarmPython` in call mode, the code
    verifier's `HarnessProgram`); the value comes back as plain data or not at all."""

    def start(self) -> CompileOutcome:
        """Load (or compile) the program once; later calls return the first outcome."""
        ...

    def call(
        self,
        name: str,
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
        *,
        method_of: str | None = None,
        limits: RunLimits | None = None,
    ) -> CallResult:
        """Call `name(*args, **kwargs)` (a method of a fresh `method_of()` instance if given) once."""
        ...

    def close(self) -> None:
        """Kill the sandbox."""
        ...

    def __enter__(self) -> Any: ...

    def __exit__(self, *exc: object) -> None: ...


class NotCompiled(RuntimeError):
    """Running a submission whose compile did not succeed."""

    def __init__(self, outcome: CompileOutcome):
        super().__init__(f"{outcome.status}: {outcome.message[:200]}")
        self.outcome = outcome


def _unpack(archive: bytes) -> list[File]:
    """The files of out.tar as job files under out/ (regular files and directories only, no escapes)."""
    files = []
    total = 0
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        for member in tar.getmembers():
            name = os.path.normpath(member.name)
            if not member.isfile() or name.startswith(("/", "..")):
                continue
            handle = tar.extractfile(member)
            data = handle.read() if handle else b""
            total += len(data)
            if total > MAX_ARTIFACT_BYTES:
                raise ValueError(f"compiled program is larger than {MAX_ARTIFACT_BYTES} bytes")
            files.append(
                File(
                    path=f"{OUT_DIR}/{name}",
                    content=base64.b64encode(data).decode(),
                    base64=True,
                    executable=bool(member.mode & 0o111),
                )
            )
    return files


def _compile_message(result: CommandResult) -> str:
    text = (result.stderr + ("\n" if result.stderr and result.stdout else "") + result.stdout).strip()
    if result.verdict is RunVerdict.time_limit:
        return f"compile time limit ({result.detail or 'cpu'})\n{text}".strip()
    if result.verdict is RunVerdict.memory_limit:
        return f"compile memory limit\n{text}".strip()
    if result.verdict is RunVerdict.output_limit:
        return f"compiler output limit\n{text}".strip()
    return text


class Build:
    """A program compiled once into the files every test carries: its source, the extra files, and out/."""

    def __init__(
        self,
        language: Language,
        source: str,
        extra_files: Sequence[File],
        compile_limits: RunLimits,
        backend: Backend,
    ):
        self.language = language
        self.source = source
        self.extra_files = list(extra_files)
        self.compile_limits = compile_limits
        self.backend = backend
        self.file_name = language.file_name(source)
        self.runs = 0  # compile jobs run
        self.files: list[File] | None = None  # once built

    def source_file(self) -> File:
        """The source under the name its language wants."""
        return File(path=self.file_name, content=self.source)

    def build(self) -> CompileOutcome:
        """Compile (interpreted languages: nothing to do) and keep the files."""
        command = self.language.compile_command(self.source, self.compile_limits)
        if command is None:
            self.files = [self.source_file(), *self.extra_files]
            return CompileOutcome(status="ok")
        self.runs += 1
        job = Job(
            files=[self.source_file(), *self.extra_files],
            commands=[command],
            env=BASE_ENV,
            fetch=[ARCHIVE],
        )
        result = self.backend.run(job)
        compiled = result.commands[0] if result.commands else None
        if compiled is None or compiled.verdict is RunVerdict.sandbox_error:
            detail = compiled.detail if compiled else "the backend ran no command"
            return CompileOutcome(status="sandbox_error", result=compiled, message=detail)
        if compiled.verdict is not RunVerdict.ok:
            message = _compile_message(compiled)
            return CompileOutcome(status="compile_error", result=compiled, message=message)
        if ARCHIVE not in result.files:
            message = f"the compiler ended ok but {ARCHIVE} did not come back"
            return CompileOutcome(status="sandbox_error", result=compiled, message=message)
        try:
            artifacts = _unpack(base64.b64decode(result.files[ARCHIVE]))
        except (ValueError, tarfile.TarError) as exc:
            return CompileOutcome(status="compile_error", result=compiled, message=str(exc))
        # The source travels too: some runtimes read files next to the program.
        self.files = [self.source_file(), *self.extra_files, *artifacts]
        return CompileOutcome(status="ok", result=compiled)

    def command(self, stdin: str, limits: RunLimits, name: str = "run") -> Command:
        """The command that runs the program on `stdin`."""
        return self.language.run_command(self.source, stdin, limits, name)


class _OneAtATime:
    """A warm runner's batch: one test after another in the same sandbox."""

    warm = True

    def run(self, stdin: str, limits: RunLimits) -> CommandResult:
        raise NotImplementedError

    def run_batch(
        self,
        stdins: Sequence[str],
        limits: Sequence[RunLimits],
        *,
        first: int = 0,
        stop_on_failure: bool = False,
        wall_budget_s: float | None = None,
    ) -> list[CommandResult]:
        results: list[CommandResult] = []
        for stdin, limit in zip(stdins, limits, strict=True):
            results.append(self.run(stdin, limit))
            if stop_on_failure and results[-1].verdict is not RunVerdict.ok:
                break
        return results


class ColdRunner:
    """A fresh job per test, or per batch of tests (one command each)."""

    warm = False

    def __init__(self, build: Build):
        self.build = build

    def prepare(self) -> CompileOutcome:
        return self.build.build()

    def ready(self) -> bool:
        return self.build.files is not None

    def job(self, commands: Sequence[Command], keep_going: bool = True) -> Job:
        """A job holding the compiled program and `commands`."""
        assert self.build.files is not None
        memory = max(c.limits.memory_mb for c in commands)
        env = self.build.language.env(memory)
        return Job(files=self.build.files, commands=list(commands), env=env, keep_going=keep_going)

    def run(self, stdin: str, limits: RunLimits) -> CommandResult:
        result = self.build.backend.run(self.job([self.build.command(stdin, limits)]))
        if not result.commands:
            return CommandResult(
                name="run", verdict=RunVerdict.sandbox_error, detail="the backend ran no command"
            )
        return self.build.language.judge(result.commands[0])

    def run_batch(
        self,
        stdins: Sequence[str],
        limits: Sequence[RunLimits],
        *,
        first: int = 0,
        stop_on_failure: bool = False,
        wall_budget_s: float | None = None,
    ) -> list[CommandResult]:
        commands = [
            self.build.command(stdin, limit, name=f"test{first + i}")
            for i, (stdin, limit) in enumerate(zip(stdins, limits, strict=True))
        ]
        result = self.build.backend.run(self.job(commands, keep_going=not stop_on_failure))
        return [self.build.language.judge(r) for r in result.commands]

    def close(self) -> None:
        self.build.files = None


class WarmPythonRunner(_OneAtATime):
    """Python forked per test from a server that loaded the program once (warm.py, stdio mode)."""

    def __init__(self, language: Language, server: WarmPython):
        self.language = language
        self.server = server

    def prepare(self) -> CompileOutcome:
        return self.server.start()

    def ready(self) -> bool:
        return True  # a server that a test took down is started again

    def run(self, stdin: str, limits: RunLimits) -> CommandResult:
        return self.language.judge(self.server.run(stdin, limits))

    def run_batch(
        self,
        stdins: Sequence[str],
        limits: Sequence[RunLimits],
        *,
        first: int = 0,
        stop_on_failure: bool = False,
        wall_budget_s: float | None = None,
    ) -> list[CommandResult]:
        tests = [
            BatchTest(stdin=stdin, limits=limit, name=f"test{first + i}")
            for i, (stdin, limit) in enumerate(zip(stdins, limits, strict=True))
        ]
        results = self.server.run_batch(tests, stop_on_failure=stop_on_failure, wall_budget_s=wall_budget_s)
        return [self.language.judge(result) for result in results]

    def close(self) -> None:
        self.server.close()


class WarmExecRunner(_OneAtATime):
    """A compiled program spawned per test by a warm server that runs no candidate code, in one jail: the
    program is compiled in that jail (by the server, as the host's own trusted step) and stays where it was
    compiled, so nothing is packed, fetched or copied; the server itself is usually one started ahead of
    time (warm.py's ReadyServers)."""

    def __init__(self, build: Build, limits: RunLimits):
        self.build = build
        self.limits = limits
        self.server: WarmPython | None = None

    def prepare(self) -> CompileOutcome:
        build = self.build
        sources = [build.source_file(), *build.extra_files]
        # One jail for every test: a server that runs no candidate code and spawns the program.
        self.server = WarmPython("", limits=self.limits, backend=build.backend, files=sources)
        started = self.server.start()
        if not started.ok:
            return CompileOutcome(status="sandbox_error", message=f"warm exec: {started.message}")
        command = build.language.compile_command(build.source, build.compile_limits, pack=False)
        if command is None:
            build.files = sources
            return CompileOutcome(status="ok")
        build.runs += 1
        argv = build.language.compile_argv(build.source, build.compile_limits)
        if argv is not None:
            # The compiler alone, without the shell, mkdir and rm around it (a few ms on a busy machine).
            # HOME and TMPDIR are the jail's (the server passes its own on): no .tmp is left in the jail.
            try:
                self.server.make_dirs([OUT_DIR])
            except OSError as exc:
                return CompileOutcome(status="sandbox_error", message=f"warm exec: {exc}")
            compiled = self.server.execute(argv, BASE_ENV, "", command.limits, command.name, trusted=True)
        else:
            compiled = self.server.execute(
                command.argv, BASE_ENV, "", command.limits, command.name, trusted=True
            )
        if compiled.verdict is RunVerdict.sandbox_error:
            return CompileOutcome(status="sandbox_error", result=compiled, message=compiled.detail)
        if compiled.verdict is not RunVerdict.ok:
            return CompileOutcome(status="compile_error", result=compiled, message=_compile_message(compiled))
        try:
            artifacts = self.server.kept_files(OUT_DIR, MAX_ARTIFACT_BYTES)
        except ValueError as exc:
            return CompileOutcome(status="compile_error", result=compiled, message=str(exc))
        except OSError as exc:
            return CompileOutcome(status="sandbox_error", result=compiled, message=f"warm exec: {exc}")
        # A server started again (after a test filled the jail's disk) gets the compiled files written in.
        build.files = [*sources, *artifacts]
        self.server.extra_files = list(build.files)
        return CompileOutcome(status="ok", result=compiled)

    def ready(self) -> bool:
        return self.build.files is not None

    def run(self, stdin: str, limits: RunLimits) -> CommandResult:
        assert self.server is not None
        command = self.build.command(stdin, limits)
        env = self.build.language.env(limits.memory_mb)
        return self.build.language.judge(self.server.execute(command.argv, env, stdin, limits, command.name))

    def run_batch(
        self,
        stdins: Sequence[str],
        limits: Sequence[RunLimits],
        *,
        first: int = 0,
        stop_on_failure: bool = False,
        wall_budget_s: float | None = None,
    ) -> list[CommandResult]:
        assert self.server is not None
        tests = []
        for i, (stdin, limit) in enumerate(zip(stdins, limits, strict=True)):
            command = self.build.command(stdin, limit, name=f"test{first + i}")
            env = self.build.language.env(limit.memory_mb)
            tests.append(BatchTest(stdin, limit, command.name, tuple(command.argv), env))
        results = self.server.run_batch(tests, stop_on_failure=stop_on_failure, wall_budget_s=wall_budget_s)
        return [self.build.language.judge(result) for result in results]

    def close(self) -> None:
        self.build.files = None
        if self.server is not None:
            self.server.close()


def choose_runner(build: Build, limits: RunLimits, warm: bool | None) -> ProgramRunner:
    """The runner for a submission: warm (one jail) when asked, or by default where the backend has warm
    slots (nsjail, local); cold otherwise."""
    wanted = warm or (warm is None and hasattr(build.backend, "runner"))
    if not wanted:
        return ColdRunner(build)
    if build.language.name == "python":
        server = WarmPython(build.source, limits=limits, backend=build.backend, files=build.extra_files)
        return WarmPythonRunner(build.language, server)
    return WarmExecRunner(build, limits)


class Submission:
    """One program: compile once (`compile`), then run many tests against it (`run`, `run_many`, `run_batch`).

    Tests run warm by default where the backend has warm slots (nsjail, local): one sandbox per submission,
    where Python forks per test from the loaded program and the other languages fork+exec the compiled program
    per test (see warm.py); `warm=False` gives a fresh sandbox per test. The runner is chosen once, here. Use
    as a context manager: `close` kills the warm sandbox and forgets the compiled files. `run` is safe to call
    from several threads.
    """

    def __init__(
        self,
        language: str | Language,
        source: str,
        *,
        limits: RunLimits | None = None,
        compile_limits: RunLimits | None = None,
        backend: Backend | str | None = None,
        files: Sequence[File] = (),
        warm: bool | None = None,
    ):
        self.language = language if isinstance(language, Language) else get_language(language)
        self.source = source
        self.limits = limits or RunLimits()
        self.backend = resolve_backend(backend)
        compiling = compile_limits or self.language.compile_limits
        self._build = Build(self.language, source, files, compiling, self.backend)
        self.runner = choose_runner(self._build, self.limits, warm)
        self._lock = threading.Lock()
        self._outcome: CompileOutcome | None = None

    def __enter__(self) -> Submission:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def warm(self) -> bool:
        """Whether tests run in the warm-start mode (Python: fork per test; others: fork+exec per test)."""
        return self.runner.warm

    @property
    def compile_runs(self) -> int:
        """Compile jobs run so far (one at most)."""
        return self._build.runs

    def close(self) -> None:
        """Kill the warm sandbox, if any, and forget the compiled program."""
        self.runner.close()

    @property
    def outcome(self) -> CompileOutcome | None:
        """The compile outcome, once `compile` has run."""
        return self._outcome

    def compile(self) -> CompileOutcome:
        """Compile once (later calls return the first outcome); interpreted languages are ok at once, except
        that warm Python loads the program here (a syntax error is compile_error)."""
        with self._lock:
            if self._outcome is None:
                self._outcome = self.runner.prepare()
            return self._outcome

    def _ready(self) -> None:
        outcome = self.compile()
        if not outcome.ok or not self.runner.ready():
            raise NotCompiled(outcome)

    def command(self, stdin: str = "", limits: RunLimits | None = None, name: str = "run") -> Command:
        """The command that runs this program on `stdin` (for callers that build their own jobs)."""
        return self._build.command(stdin, limits or self.limits, name)

    def run(self, stdin: str = "", limits: RunLimits | None = None) -> CommandResult:
        """Run the program once on `stdin` in a fresh process; raises NotCompiled after a failed compile."""
        self._ready()
        return self.runner.run(stdin, limits or self.limits)

    def run_batch(
        self,
        stdins: Sequence[str],
        limits: Sequence[RunLimits],
        *,
        first: int = 0,
        stop_on_failure: bool = False,
        wall_budget_s: float | None = None,
    ) -> list[CommandResult]:
        """Tests `first`, `first + 1`, ... each under its own limits (see `ProgramRunner.run_batch`); a cold
        batch is one job. Raises NotCompiled after a failed compile."""
        self._ready()
        return self.runner.run_batch(
            stdins, limits, first=first, stop_on_failure=stop_on_failure, wall_budget_s=wall_budget_s
        )

    def run_many(
        self,
        stdins: Sequence[str],
        limits: RunLimits | None = None,
        *,
        stop_on_failure: bool = False,
        batch: int = 25,
    ) -> list[CommandResult]:
        """Run the program once per stdin, results in order; cold runs put `batch` tests in one sandbox job.

        With `stop_on_failure`, the first test that does not end ok (runtime error, a limit) ends the run and
        the list is shorter; wrong answers are for the caller to judge.
        """
        limits = limits or self.limits
        results: list[CommandResult] = []
        size = max(1, batch)
        for start in range(0, len(stdins), size):
            chunk = stdins[start : start + size]
            ran = self.run_batch(chunk, [limits] * len(chunk), first=start, stop_on_failure=stop_on_failure)
            results.extend(ran)
            if stop_on_failure and any(r.verdict is not RunVerdict.ok for r in ran):
                break
            for i in range(len(ran), len(chunk)):
                detail = f"the backend ran {len(ran)} of {len(chunk)} commands"
                results.append(
                    CommandResult(name=f"test{start + i}", verdict=RunVerdict.sandbox_error, detail=detail)
                )
        return results
