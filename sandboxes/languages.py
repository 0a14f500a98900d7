"""The seven languages a sandbox runs, and `Submission`: compile a program once, then run every test against it.

A job runs in one fresh working directory, so a compiled program has to travel between jobs: the compile job
writes everything the program needs into `out/`, packs it as `out.tar` and the host fetches that; every test
job then carries the unpacked files (a C binary is ~16 KB, Go ~1.3 MB, Java a few class files). `run_many`
puts a batch of tests into one job, one command per test. Measured on this machine, both cost about the same
per test (every command gets a fresh jail either way: ~7 ms for C, ~60 ms for Java whose JVM start dominates),
except that batching spares re-sending a large binary (Go: ~9 ms against ~13 ms). That is the cold path
(`warm=False`, and backends without warm slots, such as docker). By default on nsjail and local, every language
runs warm (warm.py): one jail per submission. Python forks per test from a server that loaded the program
(~2 ms against ~14 ms). The other languages compile once, and then the same server, which runs no candidate
code, fork+execs the binary (or node, java) per test inside that one jail: about 3 ms per test for a C binary
instead of ~7 ms for a fresh jail.

Memory limits are the cgroup's (never RLIMIT_AS, which stops the JVM, Go and Node before they start); the
managed runtimes also get heap flags sized from the limit so they stop themselves just before the cgroup
would, and that stop counts as memory_limit.
"""

from __future__ import annotations

import base64
import io
import os
import re
import shlex
import tarfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel

from proctor.sandboxes.job import Backend, Command, CommandResult, File, Job, Limits, Verdict

OUT_DIR = "out"
ARCHIVE = "out.tar"
BASE_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
COMPILE_LIMITS = Limits(
    cpu_s=30.0,
    wall_s=120.0,
    memory_mb=2048,
    processes=256,
    output_bytes=1024 * 1024,
    stderr_bytes=64 * 1024,
    file_size_mb=256,
    open_files=1024,
)
MAX_ARTIFACT_BYTES = 64 * 1024 * 1024


def java_heap_mb(memory_mb: int) -> int:
    """The JVM heap for a memory limit: the rest covers metaspace, code cache, stacks and the JVM itself."""
    return max(16, memory_mb - min(256, max(64, memory_mb // 4)))


def java_stack_mb(memory_mb: int) -> int:
    """The main thread's stack (-Xss): deep recursion needs room, but it counts against the limit once used."""
    return max(4, min(64, memory_mb // 8))


def node_semi_space_mb(memory_mb: int) -> int:
    """V8's semi-space (--max-semi-space-size): the young generation is three of them."""
    return max(1, min(16, memory_mb // 32))


def node_heap_mb(memory_mb: int) -> int:
    """V8's old space (--max-old-space-size): the limit less Node itself (~48 MB) and the young generation."""
    return max(16, memory_mb - 48 - 3 * node_semi_space_mb(memory_mb))


def node_stack_kb(memory_mb: int) -> int:
    """V8's stack (--stack-size, KB): Node's default (~1 MB) overflows near depth 10^4, so a DFS over 10^5
    nodes would fail; the jail's RLIMIT_STACK is the memory limit, far above this (as for -Xss)."""
    return java_stack_mb(memory_mb) * 1024


def go_memlimit_mb(memory_mb: int) -> int:
    """GOMEMLIMIT: the Go collector works harder near it instead of letting the cgroup kill the program."""
    return max(8, memory_mb * 9 // 10)


def _java_jvm_flags(heap_mb: int, stack_mb: int) -> list[str]:
    # SerialGC and one "processor" keep the JVM to a dozen threads; C1 only (TieredStopAtLevel=1) starts
    # fastest; no perf data file, since nothing outside the working directory is writable.
    return [
        f"-Xmx{heap_mb}m",
        f"-Xss{stack_mb}m",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        "-XX:ActiveProcessorCount=1",
        "-XX:-UsePerfData",
        "-Xshare:auto",
    ]


# Every pattern here scans a model-written source in linear time: an unclosed comment or string ends at the end
# of the text or line (else each of many openers would rescan the rest), and modifiers before `class` or
# `void main` are looked up in a bounded window behind the keyword instead of by a repeated group.
_JAVA_COMMENT_OR_STRING = re.compile(
    r'//[^\n]*|/\*.*?(?:\*/|\Z)|"(?:\\.|[^"\\\n])*(?:"|\\?$)|\'(?:\\.|[^\'\\\n])*(?:\'|\\?$)', re.S | re.M
)
_JAVA_TYPE = re.compile(r"\b(?:class|interface|enum|record)\s+([A-Za-z_$][\w$]*)")
_JAVA_MAIN = re.compile(r"\bvoid\s+main\s*\(")
_JAVA_MODIFIERS = {
    "public",
    "private",
    "protected",
    "static",
    "final",
    "abstract",
    "sealed",
    "non-sealed",
    "strictfp",
}
_BEHIND = 300


def _modifiers_before(text: str, at: int) -> set[str]:
    """The modifier words just before position `at` (within _BEHIND characters)."""
    found: set[str] = set()
    for word in reversed(text[max(0, at - _BEHIND) : at].split()):
        if word not in _JAVA_MODIFIERS:
            break
        found.add(word)
    return found


def _is_static_main(text: str, at: int) -> bool:
    """Whether the `void main(` at `at` is declared static (a `static` since the last ; { } ( or ))."""
    head = text[max(0, at - _BEHIND) : at]
    cut = max(head.rfind(char) for char in ";{}()")
    return re.search(r"\bstatic\b", head[cut + 1 :]) is not None


def java_classes(source: str) -> tuple[str, str]:
    """(file stem, main class) of a Java program: the public top-level class names the file, and the
    top-level type whose body declares `static void main` is the one to run (Main when unsure)."""
    text = _JAVA_COMMENT_OR_STRING.sub(lambda m: " " * len(m.group()), source)
    depth_at = []
    depth = 0
    for char in text:
        depth_at.append(depth)
        depth += (char == "{") - (char == "}")
    top: list[tuple[str, bool, int]] = []  # (name, public, position)
    for match in _JAVA_TYPE.finditer(text):
        if depth_at[match.start(1)] == 0:
            top.append((match.group(1), "public" in _modifiers_before(text, match.start()), match.start()))
    public = next((name for name, is_public, _ in top if is_public), None)
    stem = public or "Main"
    main = None
    found = next((m for m in _JAVA_MAIN.finditer(text) if _is_static_main(text, m.start())), None)
    if found:
        before = [name for name, _, start in top if start < found.start()]
        main = before[-1] if before else None
    return stem, main or public or (top[0][0] if top else "Main")


@dataclass(frozen=True)
class Language:
    """How to compile and run one language; argv paths are relative to the job's working directory."""

    name: str
    aliases: tuple[str, ...]
    source_name: str
    binaries: tuple[str, ...]
    version_argv: tuple[str, ...]
    # (source file name, memory limit) -> shell lines that compile into out/; None: run the source itself.
    compile_script: Callable[[str, Limits], str] | None
    # (source file name, source text, memory limit) -> argv of the program
    run_argv: Callable[[str, str, int], list[str]]
    run_env: Callable[[int], dict[str, str]] = field(default=lambda memory_mb: {})
    compile_limits: Limits = field(default_factory=lambda: COMPILE_LIMITS)
    packages: tuple[str, ...] = ()
    # stderr words of a runtime that hit the heap cap we gave it (-Xmx, --max-old-space-size ...): that is
    # the memory limit, reached a little before the cgroup's.
    oom_markers: tuple[str, ...] = ()

    @property
    def compiled(self) -> bool:
        """Whether a compile step runs before the tests."""
        return self.compile_script is not None

    def file_name(self, source: str) -> str:
        """The name the source must have (Java: the public class's name)."""
        if self.name == "java":
            return java_classes(source)[0] + ".java"
        return self.source_name

    def compile_command(self, source: str, limits: Limits | None = None) -> Command | None:
        """The compile command: compile into out/ and pack it as out.tar; None for interpreted languages."""
        if self.compile_script is None:
            return None
        limits = limits or self.compile_limits
        script = "\n".join(
            [
                "set -e",
                f"mkdir -p {OUT_DIR} .tmp",
                'export HOME="$PWD" TMPDIR="$PWD/.tmp"',
                self.compile_script(self.file_name(source), limits),
                f"tar -C {OUT_DIR} -cf {ARCHIVE} .",
            ]
        )
        return Command(argv=["/bin/sh", "-c", script], limits=limits, name="compile")

    def run_command(self, source: str, stdin: str, limits: Limits, name: str = "run") -> Command:
        """The command that runs the program (compiled or not) on one stdin."""
        argv = self.run_argv(self.file_name(source), source, limits.memory_mb)
        return Command(argv=argv, stdin=stdin, limits=limits, name=name, oom_markers=self.oom_markers)

    def env(self, memory_mb: int) -> dict[str, str]:
        """The program's whole environment for a memory limit."""
        return {**BASE_ENV, **self.run_env(memory_mb)}

    def judge(self, result: CommandResult) -> CommandResult:
        """A runtime error that is the runtime's own out-of-memory stop becomes memory_limit."""
        if result.verdict is Verdict.runtime_error and any(m in result.stderr for m in self.oom_markers):
            result.verdict = Verdict.memory_limit
            result.detail = f"the runtime ran out of memory ({result.detail})"
        return result


def _c_script(src: str, limits: Limits) -> str:
    return f"/usr/bin/gcc -O2 -std=gnu17 -pipe -o {OUT_DIR}/main {shlex.quote(src)} -lm"


def _cpp_script(src: str, limits: Limits) -> str:
    return f"/usr/bin/g++ -O2 -std=c++17 -pipe -o {OUT_DIR}/main {shlex.quote(src)}"


def _java_script(src: str, limits: Limits) -> str:
    flags = " ".join(f"-J{flag}" for flag in _java_jvm_flags(min(1024, limits.memory_mb // 2), 16))
    return f"/usr/bin/javac {flags} -encoding UTF-8 -nowarn -d {OUT_DIR} {shlex.quote(src)}"


def _go_script(src: str, limits: Limits) -> str:
    # Module mode with no go.mod builds the single file; GOFLAGS=-mod=mod and GOPROXY=off keep go from
    # reaching for the network; the build cache lives in the working directory (nothing else is writable).
    return "\n".join(
        [
            'export GOCACHE="$PWD/.go/cache" GOPATH="$PWD/.go/path" GOTMPDIR="$PWD/.tmp"',
            "export CGO_ENABLED=0 GOFLAGS=-mod=mod GOPROXY=off GOSUMDB=off GO111MODULE=on GOTOOLCHAIN=local",
            f'/usr/bin/go build -ldflags="-s -w" -o {OUT_DIR}/main {shlex.quote(src)}',
        ]
    )


def _rust_script(src: str, limits: Limits) -> str:
    return f"/usr/bin/rustc -O --edition 2021 -C strip=symbols -o {OUT_DIR}/main {shlex.quote(src)}"


def _binary(src: str, source: str, memory_mb: int) -> list[str]:
    return [f"./{OUT_DIR}/main"]


def _python(src: str, source: str, memory_mb: int) -> list[str]:
    return ["/usr/bin/python3", src]


def _node(src: str, source: str, memory_mb: int) -> list[str]:
    return [
        "/usr/bin/node",
        f"--max-old-space-size={node_heap_mb(memory_mb)}",
        f"--max-semi-space-size={node_semi_space_mb(memory_mb)}",
        f"--stack-size={node_stack_kb(memory_mb)}",
        src,
    ]


def _java(src: str, source: str, memory_mb: int) -> list[str]:
    main = java_classes(source)[1]
    flags = _java_jvm_flags(java_heap_mb(memory_mb), java_stack_mb(memory_mb))
    return ["/usr/bin/java", *flags, "-cp", OUT_DIR, main]


def _python_env(memory_mb: int) -> dict[str, str]:
    return {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0", "PYTHONIOENCODING": "utf-8"}


def _go_env(memory_mb: int) -> dict[str, str]:
    # One P, like a judge's single core: the garbage collector's threads would otherwise add CPU time.
    return {"GOMEMLIMIT": f"{go_memlimit_mb(memory_mb)}MiB", "GOMAXPROCS": "1"}


LANGUAGES: dict[str, Language] = {
    lang.name: lang
    for lang in [
        Language(
            "python",
            ("python3", "py", "py3"),
            "main.py",
            ("/usr/bin/python3",),
            ("/usr/bin/python3", "--version"),
            None,
            _python,
            _python_env,
            packages=("python3",),
            oom_markers=("\nMemoryError",),
        ),
        Language(
            "c",
            ("gcc",),
            "main.c",
            ("/usr/bin/gcc",),
            ("/usr/bin/gcc", "--version"),
            _c_script,
            _binary,
            packages=("gcc", "libc6-dev"),
        ),
        Language(
            "cpp",
            ("c++", "g++", "cxx"),
            "main.cpp",
            ("/usr/bin/g++",),
            ("/usr/bin/g++", "--version"),
            _cpp_script,
            _binary,
            packages=("g++",),
            oom_markers=("std::bad_alloc",),
        ),
        Language(
            "java",
            (),
            "Main.java",
            ("/usr/bin/javac", "/usr/bin/java"),
            ("/usr/bin/javac", "-version"),
            _java_script,
            _java,
            packages=("openjdk-17-jdk-headless",),
            oom_markers=("java.lang.OutOfMemoryError",),
        ),
        Language(
            "javascript",
            ("js", "node", "nodejs"),
            "main.js",
            ("/usr/bin/node",),
            ("/usr/bin/node", "--version"),
            None,
            _node,
            packages=("nodejs",),
            oom_markers=("JavaScript heap out of memory",),
        ),
        Language(
            "go",
            ("golang",),
            "main.go",
            ("/usr/bin/go",),
            ("/usr/bin/go", "version"),
            _go_script,
            _binary,
            _go_env,
            packages=("golang-go",),
            oom_markers=("runtime: out of memory",),
        ),
        Language(
            "rust",
            ("rs",),
            "main.rs",
            ("/usr/bin/rustc", "/usr/bin/cc"),
            ("/usr/bin/rustc", "--version"),
            _rust_script,
            _binary,
            packages=("rustc", "gcc"),
            oom_markers=("memory allocation of",),
        ),
    ]
}
_BY_ALIAS = {alias: lang for lang in LANGUAGES.values() for alias in (lang.name, *lang.aliases)}


def get_language(name: str) -> Language:
    """The language called `name` (or one of its aliases: py, js, c++ ...); KeyError names the choices."""
    try:
        return _BY_ALIAS[name.strip().lower()]
    except KeyError:
        raise KeyError(f"unknown language {name!r}; one of {', '.join(LANGUAGES)}") from None


def resolve_backend(backend: Backend | str | None) -> Backend:
    """A backend instance from an instance, a name, or None (PROCTOR_SANDBOX_BACKEND, else nsjail)."""
    if backend is None or isinstance(backend, str):
        from proctor.sandboxes.backends import get_backend

        return get_backend(backend)
    return backend


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
    if result.verdict is Verdict.time_limit:
        return f"compile time limit ({result.detail or 'cpu'})\n{text}".strip()
    if result.verdict is Verdict.memory_limit:
        return f"compile memory limit\n{text}".strip()
    if result.verdict is Verdict.output_limit:
        return f"compiler output limit\n{text}".strip()
    return text


class Submission:
    """One program: compile once (`compile`), then run many tests against it (`run`, `run_many`).

    Tests run warm by default where the backend has warm slots (nsjail, local): one sandbox per submission,
    where Python forks per test from the loaded program and the other languages fork+exec the compiled program
    per test (see warm.py); `warm=False` gives a fresh sandbox per test. Use as a context manager: `close`
    kills the warm sandbox and forgets the compiled files. `run` is safe to call from several threads.
    """

    def __init__(
        self,
        language: str | Language,
        source: str,
        *,
        limits: Limits | None = None,
        compile_limits: Limits | None = None,
        backend: Backend | str | None = None,
        files: Sequence[File] = (),
        warm: bool | None = None,
    ):
        self.language = language if isinstance(language, Language) else get_language(language)
        self.source = source
        self.limits = limits or Limits()
        self.compile_limits = compile_limits or self.language.compile_limits
        self.backend = resolve_backend(backend)
        self.extra_files = list(files)
        self.file_name = self.language.file_name(source)
        self.compile_runs = 0
        self._lock = threading.Lock()
        self._outcome: CompileOutcome | None = None
        self._files: list[File] | None = None
        self._warm = None
        self._exec = None  # the warm server that fork+execs the compiled program, once compiled
        self._warm_exec = False
        wanted = warm or (warm is None and hasattr(self.backend, "runner"))
        if self.language.name == "python" and wanted:
            from proctor.sandboxes.warm import WarmPython

            self._warm = WarmPython(source, limits=self.limits, backend=self.backend, files=self.extra_files)
        elif wanted:
            self._warm_exec = True

    def __enter__(self) -> Submission:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def warm(self) -> bool:
        """Whether tests run in the warm-start mode (Python: fork per test; others: fork+exec per test)."""
        return self._warm is not None or self._warm_exec

    def close(self) -> None:
        """Kill the warm sandbox, if any, and forget the compiled program."""
        self._files = None
        if self._warm is not None:
            self._warm.close()
        if self._exec is not None:
            self._exec.close()

    @property
    def outcome(self) -> CompileOutcome | None:
        """The compile outcome, once `compile` has run."""
        return self._outcome

    def _source_file(self) -> File:
        return File(path=self.file_name, content=self.source)

    def compile(self) -> CompileOutcome:
        """Compile once (later calls return the first outcome); interpreted languages are ok at once, except
        that warm Python loads the program here (a syntax error is compile_error)."""
        with self._lock:
            if self._outcome is None:
                self._outcome = self._compile()
            return self._outcome

    def _compile(self) -> CompileOutcome:
        if self._warm is not None:
            return self._warm.start()
        outcome = self._build()
        if outcome.ok and self._warm_exec:
            from proctor.sandboxes.warm import WarmPython

            # One jail for every test: a server that runs no candidate code and fork+execs the program.
            self._exec = WarmPython("", limits=self.limits, backend=self.backend, files=self._files or [])
            started = self._exec.start()
            if not started.ok:
                return CompileOutcome(status="sandbox_error", message=f"warm exec: {started.message}")
        return outcome

    def _build(self) -> CompileOutcome:
        command = self.language.compile_command(self.source, self.compile_limits)
        if command is None:
            self._files = [self._source_file(), *self.extra_files]
            return CompileOutcome(status="ok")
        self.compile_runs += 1
        job = Job(
            files=[self._source_file(), *self.extra_files],
            commands=[command],
            env=BASE_ENV,
            fetch=[ARCHIVE],
        )
        result = self.backend.run(job)
        compiled = result.commands[0] if result.commands else None
        if compiled is None or compiled.verdict is Verdict.sandbox_error:
            detail = compiled.detail if compiled else "the backend ran no command"
            return CompileOutcome(status="sandbox_error", result=compiled, message=detail)
        if compiled.verdict is not Verdict.ok:
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
        self._files = [self._source_file(), *self.extra_files, *artifacts]
        return CompileOutcome(status="ok", result=compiled)

    def _ready(self) -> list[File]:
        outcome = self.compile()
        if not outcome.ok or self._files is None:
            raise NotCompiled(outcome)
        return self._files

    def command(self, stdin: str = "", limits: Limits | None = None, name: str = "run") -> Command:
        """The command that runs this program on `stdin` (for callers that build their own jobs)."""
        return self.language.run_command(self.source, stdin, limits or self.limits, name)

    def job(self, commands: Sequence[Command], keep_going: bool = True) -> Job:
        """A job holding this compiled program and `commands` (for callers that build their own jobs)."""
        memory = max(c.limits.memory_mb for c in commands)
        return Job(
            files=self._ready(), commands=list(commands), env=self.language.env(memory), keep_going=keep_going
        )

    def run(self, stdin: str = "", limits: Limits | None = None) -> CommandResult:
        """Run the program once on `stdin` in a fresh process; raises NotCompiled after a failed compile."""
        if self._warm is not None:
            outcome = self.compile()
            if not outcome.ok:
                raise NotCompiled(outcome)
            return self.language.judge(self._warm.run(stdin, limits))
        if self._exec is not None or self._warm_exec:
            self._ready()
            assert self._exec is not None
            limits = limits or self.limits
            command = self.command(stdin, limits)
            env = self.language.env(limits.memory_mb)
            return self.language.judge(self._exec.execute(command.argv, env, stdin, limits, command.name))
        result = self.backend.run(self.job([self.command(stdin, limits)]))
        if not result.commands:
            return CommandResult(
                name="run", verdict=Verdict.sandbox_error, detail="the backend ran no command"
            )
        return self.language.judge(result.commands[0])

    def run_many(
        self,
        stdins: Sequence[str],
        limits: Limits | None = None,
        *,
        stop_on_failure: bool = False,
        batch: int = 25,
    ) -> list[CommandResult]:
        """Run the program once per stdin, results in order; cold runs put `batch` tests in one sandbox job.

        With `stop_on_failure`, the first test that does not end ok (runtime error, a limit) ends the run and
        the list is shorter; wrong answers are for the caller to judge.
        """
        results: list[CommandResult] = []
        if self.warm:
            for stdin in stdins:
                results.append(self.run(stdin, limits))
                if stop_on_failure and results[-1].verdict is not Verdict.ok:
                    break
            return results
        size = max(1, batch)
        for start in range(0, len(stdins), size):
            chunk = stdins[start : start + size]
            commands = [self.command(s, limits, name=f"test{start + i}") for i, s in enumerate(chunk)]
            outcome = self.backend.run(self.job(commands, keep_going=not stop_on_failure))
            results.extend(self.language.judge(r) for r in outcome.commands)
            if stop_on_failure and any(r.verdict is not Verdict.ok for r in outcome.commands):
                break
            for i in range(len(outcome.commands), len(chunk)):
                detail = f"the backend ran {len(outcome.commands)} of {len(chunk)} commands"
                results.append(
                    CommandResult(name=f"test{start + i}", verdict=Verdict.sandbox_error, detail=detail)
                )
        return results


def compile_and_run(
    language: str,
    source: str,
    stdins: Sequence[str],
    *,
    limits: Limits | None = None,
    backend: Backend | str | None = None,
) -> tuple[CompileOutcome, list[CommandResult]]:
    """Compile once and run every stdin; no results when the compile failed."""
    with Submission(language, source, limits=limits, backend=backend) as submission:
        outcome = submission.compile()
        if not outcome.ok:
            return outcome, []
        return outcome, submission.run_many(stdins, limits)
