"""The seven languages a sandbox runs: how each compiles and runs, and the heap flags sized from a memory limit.

A compiled program has to travel between jobs, since a job runs in one fresh working directory: the compile
command writes everything the program needs into `out/` and packs it as `out.tar`, which the host fetches
(`program.py` then sends the unpacked files with every test job). How the tests then run (a fresh jail per
test, or one warm jail per submission) is `program.py`'s choice.

Memory limits are the cgroup's (never RLIMIT_AS, which stops the JVM, Go and Node before they start); the
managed runtimes also get heap flags sized from the limit so they stop themselves just before the cgroup
would, and that stop counts as memory_limit.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field

from proctor.sandboxes.job import Command, CommandResult, RunLimits, RunVerdict

OUT_DIR = "out"
ARCHIVE = "out.tar"
BASE_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
COMPILE_LIMITS = RunLimits(
    cpu_s=30.0,
    wall_s=120.0,
    memory_mb=2048,
    processes=256,
    output_bytes=1024 * 1024,
    stderr_bytes=64 * 1024,
    file_size_mb=256,
    open_files=1024,
)


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
    compile_script: Callable[[str, RunLimits], str] | None
    # (source file name, source text, memory limit) -> argv of the program
    run_argv: Callable[[str, str, int], list[str]]
    run_env: Callable[[int], dict[str, str]] = field(default=lambda memory_mb: {})
    compile_limits: RunLimits = field(default_factory=lambda: COMPILE_LIMITS)
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

    def compile_command(
        self, source: str, limits: RunLimits | None = None, *, pack: bool = True
    ) -> Command | None:
        """The compile command: compile into out/ and (with `pack`) pack it as out.tar for the host to fetch;
        a warm jail that keeps the program where it was compiled needs no archive. None for interpreted
        languages."""
        if self.compile_script is None:
            return None
        limits = limits or self.compile_limits
        script = "\n".join(
            [
                "set -e",
                f"mkdir -p {OUT_DIR} .tmp",
                'export HOME="$PWD" TMPDIR="$PWD/.tmp"',
                self.compile_script(self.file_name(source), limits),
                # In place, the tests find what a test job gets: the sources and out/, no build caches.
                f"tar -C {OUT_DIR} -cf {ARCHIVE} ." if pack else "rm -rf .tmp .go",
            ]
        )
        return Command(argv=["/bin/sh", "-c", script], limits=limits, name="compile")

    def compile_argv(self, source: str, limits: RunLimits | None = None) -> list[str] | None:
        """The compiler's argv alone, when the compile is one plain command (no shell needed: C, C++, Java,
        Rust), for a jail that already has out/ and gives HOME and TMPDIR; else None (use compile_command)."""
        if self.compile_script is None:
            return None
        line = self.compile_script(self.file_name(source), limits or self.compile_limits)
        if "\n" in line or any(char in line for char in "$;&|<>`(){}*?~#\\"):
            return None
        return shlex.split(line)

    def run_command(self, source: str, stdin: str, limits: RunLimits, name: str = "run") -> Command:
        """The command that runs the program (compiled or not) on one stdin."""
        argv = self.run_argv(self.file_name(source), source, limits.memory_mb)
        return Command(argv=argv, stdin=stdin, limits=limits, name=name, oom_markers=self.oom_markers)

    def env(self, memory_mb: int) -> dict[str, str]:
        """The program's whole environment for a memory limit."""
        return {**BASE_ENV, **self.run_env(memory_mb)}

    def judge(self, result: CommandResult) -> CommandResult:
        """A runtime error that is the runtime's own out-of-memory stop becomes memory_limit."""
        if result.verdict is RunVerdict.runtime_error and any(m in result.stderr for m in self.oom_markers):
            result.verdict = RunVerdict.memory_limit
            result.detail = f"the runtime ran out of memory ({result.detail})"
        return result


def _c_script(src: str, limits: RunLimits) -> str:
    return f"/usr/bin/gcc -O2 -std=gnu17 -pipe -o {OUT_DIR}/main {shlex.quote(src)} -lm"


def _cpp_script(src: str, limits: RunLimits) -> str:
    return f"/usr/bin/g++ -O2 -std=c++17 -pipe -o {OUT_DIR}/main {shlex.quote(src)}"


def _java_script(src: str, limits: RunLimits) -> str:
    flags = " ".join(f"-J{flag}" for flag in _java_jvm_flags(min(1024, limits.memory_mb // 2), 16))
    return f"/usr/bin/javac {flags} -encoding UTF-8 -nowarn -d {OUT_DIR} {shlex.quote(src)}"


def _go_script(src: str, limits: RunLimits) -> str:
    # Module mode with no go.mod builds the single file; GOFLAGS=-mod=mod and GOPROXY=off keep go from
    # reaching for the network; the build cache lives in the working directory (nothing else is writable).
    return "\n".join(
        [
            'export GOCACHE="$PWD/.go/cache" GOPATH="$PWD/.go/path" GOTMPDIR="$PWD/.tmp"',
            "export CGO_ENABLED=0 GOFLAGS=-mod=mod GOPROXY=off GOSUMDB=off GO111MODULE=on GOTOOLCHAIN=local",
            f'/usr/bin/go build -ldflags="-s -w" -o {OUT_DIR}/main {shlex.quote(src)}',
        ]
    )


def _rust_script(src: str, limits: RunLimits) -> str:
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
