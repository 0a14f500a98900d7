"""The `code` verifier: run a model-written program against the task's tests in sandboxes and judge it here.

Pipeline: extract the program (extract.py), compile it once (`Submission`; for the call and assert-script
formats a warm `WarmPython`, or a `HarnessProgram` in the other languages), run every test in the sandbox, and judge each test in this process from plain
data: captured stdout compared by a named preset (compare.py) or by a special-judge checker that runs in a
sandbox of its own; call-format return values decoded as plain data and compared here; an assert script run
in a second sandbox where only the entry point (and the names the reference lists) are proxies into the
candidate's sandbox (a candidate's `abs` never replaces the script's). The exit status of a program never
decides a pass; a value that is not plain data (a forged `__eq__`, an `int` subclass) is a
wrong answer.

Formats: all three in all seven languages. `stdio` runs the program per test (compiled once; warm: one jail
per submission). `call` and `assert_script` call functions: Python through the warm server's call mode, the
others through a generated call harness (calls.py, harness.py: the entry point's signature parsed from the
source for C, C++, Java, Go and Rust, JSON for JavaScript), one fork+exec per call in one jail. An assert
script is always Python and runs in its own sandbox with proxies into the candidate's.

Time limit per test is CPU time: `limits.cpu_s` (default 2 s) for every test, or, when a `reference_solution`
is given, a limit per test (EvalPlus style): test i gets max(time_floor_s, time_multiple x the reference's CPU
time on test i), never above MAX_CPU_S. So a program that is slow on a light test fails it even when a heavy
test's limit would have covered it. The reference's per-test times are measured once per worker process and
cached (a GRPO group in one worker sees the same limits). Measurement noise is bounded so rewards stay
reproducible: a reference time counts as at least MIN_REFERENCE_CPU_S (the CPU clock's granularity cannot
give a test a near-zero limit), every test whose multiple falls under the floor gets exactly the floor, however
the measurement jittered (with the defaults, every test whose reference takes under 0.25 s), and above the
floor a measurement off by x% moves the limit by x% while the limit itself is `time_multiple` (4x) the
reference, so only a program within a few % of that multiple can flip between workers. Each test's limit is
in its details (`cpu_limit_s`) and in details.limits.

Verdicts: reward 1 when every test passes (`all_pass`, default) or the fraction passed (`fraction`); reason
of the first failing test: wrong_answer, compile_error, runtime_error, time_limit, memory_limit, output_limit;
no_code when the response holds no program. A sandbox failure is status sandbox_error, a checker or reference
solution that fails is verifier_error: never a reward of 0.

Runs in the worker pool (execution="pool"); the default deadline is 60 s: compiling (a few seconds) plus, with
stop_on_first_failure, the passing tests and one failing one. Under `fraction`, after MAX_TIME_LIMITS tests
end in time_limit the remaining tests are not run and count as time_limit, which keeps a program that loops on
every test within the deadline (a deterministic rule); a failed test that sat idle longer than its CPU limit
counts toward it too. Behind that, `Budget`: a wall budget per response (BUDGET_SHARE of the deadline, less the
time the program waited for a CPU) caps each test's backstop and, once spent, ends the run with the remaining
tests as time_limit, so sleeping or blocking can never reach the pool's deadline (a masked timeout).
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import json
import math
import os
import re
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationInfo,
    field_validator,
    model_validator,
)

from proctor.contract import Status, Verdict
from proctor.registry import BaseOptions, Example, VerifierSpec, register_verifier
from proctor.sandboxes import warm_server
from proctor.sandboxes.backends import resolve_backend
from proctor.sandboxes.backends.runner import take_cpu_wait_s
from proctor.sandboxes.job import CommandResult, RunLimits, RunVerdict, SandboxFailure
from proctor.sandboxes.languages import get_language
from proctor.sandboxes.program import Caller, NotCompiled, Submission
from proctor.sandboxes.warm import CallResult, WarmPython
from proctor.settings import get_settings
from proctor.verifiers.code.calls import TYPED, HarnessProgram
from proctor.verifiers.code.compare import COMPARATORS, CompareName, compare_output, compare_values
from proctor.verifiers.code.extract import extract_code
from proctor.verifiers.code.signature import json_fits

VERSION = "1.0.0"
LANGUAGE_NAMES = ("python", "c", "cpp", "java", "javascript", "go", "rust")
DEFAULT_CPU_S = 2.0
DEFAULT_MEMORY_MB = 1024
MAX_CPU_S = 20.0
MIN_REFERENCE_CPU_S = 0.01
MAX_TIME_LIMITS = 3
MAX_RESTARTS = 3  # reloads of a Python program that took its call-mode server down (each one re-imports it)
MAX_CASES = 10_000
MAX_DETAILS = 100
MIB = 1024 * 1024
UNCAPPED_OUTPUT = 16 * MIB
CHECKER_LIMITS = RunLimits(cpu_s=10.0, memory_mb=1024)
SCRIPT_LIMITS = RunLimits(cpu_s=10.0, memory_mb=1024)
CALIBRATION_CACHE = 256
FAILED_VERDICTS = ("runtime_error", "time_limit", "memory_limit", "output_limit")
DEADLINE_S = 60.0  # the verifier pool's default deadline for one item (options.deadline_s overrides it)
BUDGET_SHARE = 0.8  # the judge's own wall budget per submission: this share of the item's deadline
MIN_WALL_S = 0.05  # the smallest wall backstop a test gets when the budget is nearly spent
CORES = max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)

Identifier = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=200)]


def _parses(source: str, what: str) -> ast.Module:
    """Parse Python source without running it; a ValueError (a 422) when it is not valid Python."""
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise ValueError(f"the {what} is not valid Python: {type(exc).__name__}: {exc}") from None


# -- names an assert script sees ----------------------------------------------------------------------------

BUILTIN_NAMES = frozenset(dir(builtins))
# Globals every script module has (warm_server's child_script), and what the server itself binds there.
MODULE_NAMES = frozenset(
    {
        "__name__",
        "__file__",
        "__doc__",
        "__builtins__",
        "__spec__",
        "__loader__",
        "__package__",
        "__annotations__",
    }
)
RESERVED_NAMES = frozenset({"CandidateFailed"})
# A script that uses one of these (or a star import) may bind names no parse can see: its names are not
# checked before it runs (a missing one is still caught when it runs).
_DYNAMIC = frozenset({"exec", "eval", "globals", "vars", "locals", "setattr", "__import__", "__builtins__"})
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_LOCAL_SCOPES = (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


@dataclass(frozen=True)
class ScriptNames:
    """What an assert script (with its setup) binds and uses, from its syntax tree alone."""

    defined: frozenset[str]  # bound in the module's own scope: the names a candidate's must never replace
    bound: frozenset[str]  # bound in any scope (parameters and locals included)
    loaded: frozenset[str]  # read in any scope
    dynamic: bool  # a star import, exec, globals() ...: names can be bound that the tree does not show

    def missing(self, provided: list[str]) -> list[str]:
        """Names the script reads that nobody binds: not the script, its setup, the builtins or `provided`."""
        if self.dynamic:
            return []
        known = self.bound | BUILTIN_NAMES | MODULE_NAMES | RESERVED_NAMES | set(provided)
        return sorted(self.loaded - known)


def _binds(node: ast.AST) -> list[str]:
    """The names one node binds in the scope it belongs to (not the names of a nested scope)."""
    if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
        return [node.id]
    if isinstance(node, _SCOPES):
        return [node.name]
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [a.asname or a.name.split(".")[0] for a in node.names if a.name != "*"]
    if isinstance(node, ast.ExceptHandler) and node.name:
        return [node.name]
    if isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
        return [node.name]
    if isinstance(node, ast.MatchMapping) and node.rest:
        return [node.rest]
    if isinstance(node, (ast.Global, ast.Nonlocal)):
        return list(node.names)
    if isinstance(node, ast.arg):
        return [node.arg]
    return []


def _module_scope(tree: ast.Module) -> set[str]:
    """Names bound in the module's own scope: its statements (not inside functions, classes, lambdas or
    comprehensions, but a walrus there and a `global` anywhere count)."""
    names: set[str] = set()
    stack: list[ast.AST] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (*_SCOPES, *_LOCAL_SCOPES)):
            if isinstance(node, _SCOPES):
                names.add(node.name)
                # Decorators, defaults and bases are evaluated in the module's scope.
                outer = [*node.decorator_list, *getattr(node, "bases", []), *getattr(node, "keywords", [])]
                if not isinstance(node, ast.ClassDef):
                    outer += [*node.args.defaults, *[d for d in node.args.kw_defaults if d is not None]]
                stack.extend(outer)
            for inner in ast.walk(node):
                if isinstance(inner, ast.Global):
                    names.update(inner.names)
                elif isinstance(node, _LOCAL_SCOPES[1:]) and isinstance(inner, ast.NamedExpr):
                    names.update(_binds(inner.target))
            continue
        if not isinstance(node, ast.arg):
            names.update(_binds(node))
        stack.extend(ast.iter_child_nodes(node))
    return names


_script_names_cache: OrderedDict[tuple[str, str], ScriptNames] = OrderedDict()


def script_names(tests: AssertScriptTests) -> ScriptNames:
    """What the script and its setup bind and read (cached: the validator and the judge both ask)."""
    key = (tests.script, tests.setup or "")
    found = _script_names_cache.get(key)
    if found is not None:
        return found
    defined: set[str] = set()
    bound: set[str] = set()
    loaded: set[str] = set()
    dynamic = False
    for source in (tests.setup, tests.script):
        if not source:
            continue
        tree = ast.parse(source)
        defined |= _module_scope(tree)
        for node in ast.walk(tree):
            bound.update(_binds(node))
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                loaded.add(node.id)
                dynamic = dynamic or node.id in _DYNAMIC
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                dynamic = dynamic or any(a.name in ("*", "builtins") for a in node.names)
                dynamic = dynamic or (isinstance(node, ast.ImportFrom) and node.module == "builtins")
    found = ScriptNames(frozenset(defined), frozenset(bound), frozenset(loaded), dynamic)
    _script_names_cache[key] = found
    while len(_script_names_cache) > 64:
        _script_names_cache.popitem(last=False)
    return found


class StdioCase(BaseModel):
    """One stdin and its expected stdout."""

    model_config = ConfigDict(extra="forbid")

    stdin: str = Field("", description="Standard input.")
    stdout: str = Field(description="Expected standard output ('' is fine when a checker judges).")


class StdioTests(BaseModel):
    """Programs read stdin and write stdout; the output is compared by a preset or judged by a checker."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["stdio"]
    cases: list[StdioCase] = Field(min_length=1, max_length=MAX_CASES)
    compare: CompareName = Field(
        "tokens",
        description="tokens@1 (default): whitespace tokens; lines@1: lines less trailing spaces; exact@1: "
        "the exact text; float@1: tokens, numbers within the `tolerance` option.",
    )
    checker: str | None = Field(
        None,
        description="A special judge: Python source defining check(input, output, expected) -> bool; it runs in "
        "a sandbox of its own and replaces the comparator.",
    )

    @field_validator("checker")
    @classmethod
    def _checker_defines_check(cls, value: str | None) -> str | None:
        if value is None:
            return value
        tree = _parses(value, "checker")
        if not any(isinstance(node, ast.FunctionDef) and node.name == "check" for node in tree.body):
            raise ValueError("the checker must define a top-level function check(input, output, expected)")
        return value


class CallCase(BaseModel):
    """One call: positional (and keyword) arguments as JSON, and the expected return value."""

    model_config = ConfigDict(extra="forbid")

    args: list[Any] = Field(default_factory=list)
    kwargs: dict[str, Any] = Field(default_factory=dict)
    expected: Any = Field(description="The expected return value (JSON).")


class CallTests(BaseModel):
    """The program defines a function (or a class's method, LeetCode style); each case calls it once."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["call"]
    entry_point: Identifier
    method_of: Identifier | None = Field(
        None, description="Call entry_point on a fresh instance of this class."
    )
    cases: list[CallCase] = Field(min_length=1, max_length=MAX_CASES)


class AssertScriptTests(BaseModel):
    """A HumanEval/MBPP test script that calls the candidate and asserts (a `check(candidate)` it defines and
    never calls is called with the entry point).

    The script sees only the candidate's `entry_point`, the names in `candidate_names`, what `setup` defines
    and the builtins: never the rest of the candidate's top-level names, so a candidate's `def abs(x)` (or
    `set`, `sorted`, a helper such as HumanEval's `poly`) cannot replace a name of the judge's own asserts."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["assert_script"]
    entry_point: Identifier
    script: str = Field(min_length=1, max_length=10 * MIB)
    setup: str | None = Field(
        None,
        min_length=1,
        max_length=10 * MIB,
        description="Trusted Python code the reference supplies, run in the test script's globals before the "
        "script: the helpers and imports the script uses (HumanEval's `poly`, `import math`). A helper the "
        "script calls belongs here, never taken from the candidate.",
    )
    candidate_names: list[Identifier] = Field(
        default_factory=list,
        max_length=100,
        description="Candidate functions the script calls by name besides entry_point (for example a helper "
        "the task asks for). A name that is a builtin, or that the script or setup defines or imports, is "
        "refused (422): it would let the candidate replace the judge's own name.",
    )

    @field_validator("script")
    @classmethod
    def _script_parses(cls, value: str) -> str:
        _parses(value, "script")
        return value

    @field_validator("setup")
    @classmethod
    def _setup_parses(cls, value: str | None) -> str | None:
        if value is not None:
            _parses(value, "setup")
        return value

    @model_validator(mode="after")
    def _names_do_not_shadow(self) -> AssertScriptTests:
        defined = script_names(self).defined
        if self.entry_point in RESERVED_NAMES:
            raise ValueError(f"tests.entry_point: {self.entry_point!r} is reserved for the judge")
        if self.entry_point in defined:
            raise ValueError(
                f"tests.entry_point: the script or setup itself defines or imports {self.entry_point!r}, so the "
                "candidate would never be called"
            )
        for index, name in enumerate(self.candidate_names):
            if name in BUILTIN_NAMES or name in RESERVED_NAMES or name in MODULE_NAMES:
                raise ValueError(
                    f"tests.candidate_names[{index}]: {name!r} is a builtin; a candidate's {name} must never "
                    "replace the script's"
                )
            if name in defined:
                raise ValueError(
                    f"tests.candidate_names[{index}]: the script or setup defines or imports {name!r}; a "
                    "candidate's must never replace it"
                )
        return self

    def bound_names(self) -> list[str]:
        """The candidate's names the script sees: the entry point and `candidate_names`."""
        return list(dict.fromkeys([self.entry_point, *self.candidate_names]))


def _format_of(value: Any) -> str | None:
    raw = value.get("format") if isinstance(value, dict) else getattr(value, "format", None)
    return {"stdio": "StdioTests", "call": "CallTests", "assert_script": "AssertScriptTests"}.get(raw)


# Tagged with the model names, which the contract's error reporting drops from field paths.
Tests = Annotated[
    Annotated[StdioTests, Tag("StdioTests")]
    | Annotated[CallTests, Tag("CallTests")]
    | Annotated[AssertScriptTests, Tag("AssertScriptTests")],
    Discriminator(
        _format_of,
        custom_error_type="format",
        custom_error_message="tests.format must be 'stdio', 'call' or 'assert_script'",
    ),
]


class CodeLimits(BaseModel):
    """Per-test limits: CPU seconds and memory."""

    model_config = ConfigDict(extra="forbid")

    cpu_s: float | None = Field(
        None, gt=0, le=MAX_CPU_S, description=f"CPU seconds per test ({DEFAULT_CPU_S})."
    )
    memory_mb: int | None = Field(None, ge=32, le=8192, description=f"Memory per test ({DEFAULT_MEMORY_MB}).")

    @field_validator("cpu_s")
    @classmethod
    def _cpu_within_operator_maximum(cls, value: float | None) -> float | None:
        most = get_settings().sandbox_max_cpu_s
        if value is not None and value > most:
            raise ValueError(
                f"{value:g} s is above this server's maximum of {most:g} s (PROCTOR_SANDBOX_MAX_CPU_S)"
            )
        return value

    @field_validator("memory_mb")
    @classmethod
    def _memory_within_operator_maximum(cls, value: int | None) -> int | None:
        most = get_settings().sandbox_max_memory_mb
        if value is not None and value > most:
            raise ValueError(
                f"{value} MB is above this server's maximum of {most} MB (PROCTOR_SANDBOX_MAX_MEMORY_MB)"
            )
        return value


class CodeReference(BaseModel):
    """The task: its language, its tests, optional limits and a reference solution to calibrate the time limit."""

    model_config = ConfigDict(extra="forbid")

    # `tests` comes first so the `language` validator can see the format.
    tests: Tests
    language: str = Field(description=f"One of {', '.join(LANGUAGE_NAMES)} (or an alias: py, c++, js ...).")
    limits: CodeLimits | None = None
    reference_solution: str | None = Field(
        None,
        min_length=1,
        description="A correct program; the time limit becomes a multiple of its CPU time.",
    )

    @field_validator("language")
    @classmethod
    def _known_language(cls, value: str, info: ValidationInfo) -> str:
        try:
            name = get_language(value).name
        except KeyError as exc:
            raise ValueError(str(exc.args[0])) from None
        tests = info.data.get("tests")
        if isinstance(tests, CallTests) and name != "python":
            for index, case in enumerate(tests.cases):
                if case.kwargs:
                    raise ValueError(f"tests.cases[{index}].kwargs: keyword arguments are Python-only")
                if name in TYPED and not all(json_fits(v) for v in [*case.args, case.expected]):
                    raise ValueError(
                        f"tests.cases[{index}]: {name} calls take numbers, bools, strings and lists of them "
                        "nested at most twice (no objects or nulls)"
                    )
        return name


class CodeOptions(BaseOptions):
    """How tests add up to a reward, and the comparator's tolerance."""

    reward: Literal["all_pass", "fraction"] = Field(
        "all_pass", description="all_pass: 1 only when every test passes; fraction: the fraction passed."
    )
    stop_on_first_failure: bool | None = Field(
        None,
        description="Stop at the first failing test (default: true under all_pass, false under fraction).",
    )
    tolerance: float | None = Field(
        None,
        ge=0,
        lt=1,
        description="Numeric tolerance (absolute or relative): the float comparator's (default 1e-6), and for "
        "call-format floats (compared exactly unless set).",
    )
    time_multiple: float = Field(
        4.0,
        ge=1,
        le=100,
        description="With a reference solution: the CPU limit is this multiple of its time.",
    )
    time_floor_s: float = Field(
        1.0, gt=0, le=MAX_CPU_S, description="With a reference solution: the CPU limit is never below this."
    )


class CheckerFailure(Exception):
    """The task's own checker or reference solution failed: a verifier_error."""


@dataclass
class TestResult:
    """One test as judged here."""

    verdict: str  # passed, wrong_answer, runtime_error, time_limit, memory_limit, output_limit
    cpu_s: float = 0.0
    wall_s: float = 0.0
    diff: str = ""
    cpu_limit_s: float | None = None
    slow: bool = False  # idle (sleeping, blocked) longer than its CPU limit, machine load discounted

    @property
    def passed(self) -> bool:
        """Whether the test passed."""
        return self.verdict == "passed"

    def public(self, index: int) -> dict[str, Any]:
        """The per-test detail reported in the score."""
        item: dict[str, Any] = {"test": index, "verdict": self.verdict, "cpu_s": round(self.cpu_s, 4)}
        item["wall_s"] = round(self.wall_s, 4)
        if self.cpu_limit_s is not None:
            item["cpu_limit_s"] = round(self.cpu_limit_s, 4)
        if self.diff:
            item["diff"] = self.diff[:300]
        return item


@dataclass
class JudgedRun:
    """Everything a format's run of one submission reports back: compiled or not, and each test as judged."""

    compiled: bool
    results: list[TestResult] = field(default_factory=list)
    total: int = 0
    load_failure: str | None = None  # compile_error or a failure while loading (every test fails with it)
    message: str = ""
    budget_spent: bool = False  # the judge's wall budget ran out: the tests not run count as time_limit


class Budget:
    """The judge's own wall-clock budget for one submission, well inside the item's deadline, so that a
    program's own waiting (sleeping, blocking on input, a pipe, a futex) can never push the item past the pool's
    deadline into a masked `timeout`: once the budget is spent, the tests not run count as time_limit.

    It counts the candidate's wall time from the start of scoring (compile, load, tests, checker calls) less the
    time its processes waited for a CPU (/proc schedstat, taken from the sandboxes through
    `take_cpu_wait_s`): a loaded machine stretches the budget instead of spending it, so overload never turns
    into a 0 for a correct program (a real machinery stall may still reach the deadline, a masked timeout). A
    run's discount is at most its wall time less its CPU time spread over every core, since a program that keeps
    its own threads waiting for a CPU burns its CPU time to do it. `seconds=None`: no budget.
    """

    def __init__(self, seconds: float | None):
        self.seconds = seconds
        self.started = time.monotonic()
        self.discount = 0.0
        take_cpu_wait_s()  # forget waits this thread measured before

    def used_s(self) -> float:
        """Wall seconds since scoring started, less what was waiting for a CPU."""
        return time.monotonic() - self.started - self.discount

    def left_s(self) -> float:
        """Seconds left (infinite without a budget)."""
        return math.inf if self.seconds is None else self.seconds - self.used_s()

    def spent(self) -> bool:
        """Whether no test may start any more."""
        return self.left_s() <= MIN_WALL_S

    def begin(self) -> float:
        """A run starts: waits measured before it (compiling, loading) are discounted in full."""
        self.discount += take_cpu_wait_s()
        return time.monotonic()

    def charge(self, began: float, cpu_s: float) -> float:
        """A run that began at `began` and used `cpu_s` of CPU ended: discount its wait for a CPU (at most its
        wall time less its CPU time over every core); its own wall time."""
        wall = time.monotonic() - began
        wait = min(take_cpu_wait_s(), max(0.0, wall - cpu_s / CORES))
        self.discount += wait
        return wall - wait

    def limits(self, limits: RunLimits) -> RunLimits:
        """`limits` with the wall backstop cut to what is left, so one test cannot overrun the budget."""
        left = self.left_s()
        if left >= limits.wall_backstop_s:
            return limits
        return limits.model_copy(update={"wall_s": round(max(MIN_WALL_S, left), 3)})

    def public(self) -> dict[str, Any]:
        """The budget as reported in details."""
        return {"wall_budget_s": self.seconds, "used_s": round(self.used_s(), 3)}


# nsjail's own log lines ("[I][2026-01-01T00:00:00+0000] Mount: ..."); the first line of a clipped log may
# have lost its head, so a bare "...+0000] " prefix counts too.
_NSJAIL_LINE = re.compile(r"^(?:\[[A-Z]\]\[)?[\d:T-]*[+-]\d{4}\] ")
_NSJAIL_EXIT = re.compile(r"exited with status: (\d+)")
_NSJAIL_SIGNAL = re.compile(r"terminated with signal: (\w+) \((\d+)\)")
_ENDED_WHILE_LOADING = re.compile(r"^the program ended while loading \(([^)]*)\)\.\s*", re.S)


def program_message(message: str) -> str:
    """A load or compile message about the program: how it ended (exit status or signal) and the tail of its
    own stderr, without the sandbox's setup log."""
    ended = _ENDED_WHILE_LOADING.match(message)
    body = message[ended.end() :] if ended else message
    status = ""
    kept: list[str] = []
    for line in body.splitlines():
        if _NSJAIL_LINE.match(line):
            # The last status line is nsjail's real one: the program had ended before nsjail wrote it.
            if found := _NSJAIL_EXIT.search(line):
                status = f"exit status {found.group(1)}"
            elif found := _NSJAIL_SIGNAL.search(line):
                status = f"killed by signal {found.group(1)} ({found.group(2)})"
            continue
        kept.append(line)
    stderr = "\n".join(kept).strip()
    if not ended and not status:
        return stderr[-2000:]
    # nsjail's status line can arrive after the server's end of file was seen: then the status is unknown.
    head = "the program ended while being loaded, before any test ran"
    if status:
        head += f" ({status})"
    elif ended and ended.group(1) not in ("eof", ""):
        head += f" ({ended.group(1)})"
    return f"{head}; stderr: {stderr[-1500:]}" if stderr else f"{head}; no stderr"


def _from_command(result: CommandResult) -> TestResult | None:
    """A failed test from how the program ended (None when it ended ok); sandbox errors raise."""
    if result.verdict is RunVerdict.sandbox_error:
        raise SandboxFailure(result.detail or "sandbox_error")
    if result.verdict is RunVerdict.ok and not result.stdout_truncated:
        return None
    verdict = "output_limit" if result.stdout_truncated else result.verdict.value
    detail = result.detail or ""
    if result.stderr:
        detail = f"{detail}; stderr: {result.stderr.strip()[-200:]}"
    return TestResult(verdict, result.cpu_s, result.wall_s, detail)


class Judge:
    """Runs one program against one reference's tests under given limits (`cpu_s`: one CPU limit per test,
    else `limits.cpu_s` for every test)."""

    def __init__(
        self,
        reference: CodeReference,
        options: CodeOptions,
        limits: RunLimits,
        stop: bool,
        cpu_s: list[float] | None = None,
        budget: Budget | None = None,
    ):
        self.reference = reference
        self.options = options
        self.limits = limits
        self.cpu_s = cpu_s
        self.stop = stop
        self.fraction = options.reward == "fraction"
        self.backend = resolve_backend(None)
        self.budget = budget or Budget(None)

    def limits_for(self, index: int) -> RunLimits:
        """The limits of test `index`."""
        if self.cpu_s is None:
            return self.limits
        return self.limits.model_copy(update={"cpu_s": self.cpu_s[index]})

    def _judged(self, index: int, result: TestResult, own_s: float | None = None) -> TestResult:
        """`result` with its CPU limit; `own_s`: the test's own wall time (budget.charge), when it ran alone."""
        result.cpu_limit_s = self.limits_for(index).cpu_s
        if own_s is not None:
            result.slow = own_s - result.cpu_s > result.cpu_limit_s
        return result

    def _stop_after(self, results: list[TestResult]) -> bool:
        if not results or results[-1].passed:
            return False
        if self.stop:
            return True
        # A failed test that sat idle longer than its CPU limit counts like a time limit: a program that
        # sleeps (or blocks) under the wall backstop on every test stops after MAX_TIME_LIMITS of them.
        return sum(r.verdict == "time_limit" or r.slow for r in results) >= MAX_TIME_LIMITS

    def _out_of_time(self, run: JudgedRun) -> bool:
        """Whether the budget is spent (then the tests not run count as time_limit)."""
        if self.budget.spent():
            run.budget_spent = True
        return run.budget_spent

    def run(self, code: str) -> JudgedRun:
        """Compile or load the program once and run every test."""
        tests = self.reference.tests
        if isinstance(tests, StdioTests):
            return self._stdio(code, tests)
        if isinstance(tests, CallTests):
            return self._call(code, tests)
        return self._script(code, tests)

    # -- stdio ---------------------------------------------------------------------------------------

    def _stdio(self, code: str, tests: StdioTests) -> JudgedRun:
        run = JudgedRun(compiled=False, total=len(tests.cases))
        checker = Checker(tests.checker, self.backend, self.budget) if tests.checker else None
        try:
            with Submission(
                self.reference.language, code, limits=self.limits, backend=self.backend
            ) as program:
                outcome = program.compile()
                if outcome.status == "sandbox_error":
                    raise SandboxFailure(outcome.message)
                if outcome.status == "compile_error":
                    run.load_failure, run.message = "compile_error", program_message(outcome.message)
                    return run
                run.compiled = True
                if not outcome.ok:  # warm Python that failed while loading
                    run.load_failure, run.message = outcome.status, program_message(outcome.message)
                    return run
                # Tests go in batches: one job (cold), or one request to the warm jail's server, which runs
                # them one process each and stops at a failing test; the next batch starts after it (under
                # fraction) so a run of failures never costs a whole batch at once.
                index = 0
                while index < len(tests.cases):
                    if self._out_of_time(run):
                        return run
                    batch = self._batch_size(index, program.warm)
                    cases = tests.cases[index : index + batch]
                    began = self.budget.begin()
                    outputs = self._run_batch(program, index, [c.stdin for c in cases])
                    if not outputs:
                        raise SandboxFailure("the sandbox ran no test")
                    judged_batch = [
                        self._judge_stdio(case, result, tests, checker)
                        for case, result in zip(cases, outputs, strict=False)
                    ]
                    own = self.budget.charge(began, sum(r.cpu_s for r in outputs))
                    for offset, judged in enumerate(judged_batch):
                        # A warm batch's tests each come with their own wait for a CPU (the jail's server
                        # measures it), so each has its own time; a cold batch's do not.
                        result = outputs[offset]
                        alone = (
                            own
                            if len(outputs) == 1
                            else (result.wall_s - result.cpu_wait_s if program.warm else None)
                        )
                        run.results.append(self._judged(index + offset, judged, alone))
                        if self._stop_after(run.results):
                            return run
                    index += len(outputs)
        except NotCompiled as exc:
            raise SandboxFailure(str(exc)) from None
        finally:
            if checker is not None:
                checker.close()
        return run

    def _batch_size(self, first: int, warm: bool = False) -> int:
        """Tests go 25 to a batch. A warm batch keeps to the budget itself (its server cuts each test's backstop
        to what is left and starts none once it is spent); a cold job cannot, so cold tests go 25 to a job
        only while the budget covers all their wall backstops, else one at a time."""
        count = min(25, len(self.reference.tests.cases) - first)
        if warm:
            return count
        backstops = sum(self.limits_for(first + i).wall_backstop_s for i in range(count))
        return count if backstops <= self.budget.left_s() else 1

    def _run_batch(self, program: Submission, first: int, stdins: list[str]) -> list[CommandResult]:
        """Run tests first, first+1, ... each under its own limits; stops after the first that does not end ok
        (a warm batch also once the budget is spent: the list is shorter)."""
        limits = [self.budget.limits(self.limits_for(first + offset)) for offset in range(len(stdins))]
        left = self.budget.left_s()
        budget = None if left == math.inf else left
        return program.run_batch(stdins, limits, first=first, stop_on_failure=True, wall_budget_s=budget)

    def _judge_stdio(
        self, case: StdioCase, result: CommandResult, tests: StdioTests, checker: Checker | None
    ) -> TestResult:
        failed = _from_command(result)
        if failed is not None:
            return failed
        if checker is not None:
            verdict, diff = checker.check(case.stdin, result.stdout, case.stdout)
            return TestResult(verdict, result.cpu_s, result.wall_s, diff)
        diff = compare_output(tests.compare, result.stdout, case.stdout, self.options.tolerance)
        return TestResult(
            "passed" if diff is None else "wrong_answer", result.cpu_s, result.wall_s, diff or ""
        )

    # -- call ----------------------------------------------------------------------------------------

    def _load(
        self,
        code: str,
        run: JudgedRun,
        entry_point: str,
        method_of: str | None = None,
        extra_names: list[str] | None = None,
    ) -> Caller | None:
        """The candidate loaded for calls: a WarmPython (Python) or a HarnessProgram (the others); None when
        it did not load (run says why). `extra_names`: functions besides the entry point that will be called."""
        program: Caller
        if self.reference.language == "python":
            program = WarmPython(
                code, mode="call", limits=self.limits, backend=self.backend, max_restarts=MAX_RESTARTS
            )
        else:
            program = HarnessProgram(
                self.reference.language,
                code,
                entry_point=entry_point,
                method_of=method_of,
                limits=self.limits,
                backend=self.backend,
                extra_names=extra_names or (),
            )
        outcome = program.start()
        if outcome.status == "sandbox_error":
            program.close()
            raise SandboxFailure(outcome.message)
        run.compiled = outcome.status != "compile_error"
        if not outcome.ok:
            program.close()
            run.load_failure, run.message = outcome.status, program_message(outcome.message)
            return None
        return program

    def _call(self, code: str, tests: CallTests) -> JudgedRun:
        run = JudgedRun(compiled=False, total=len(tests.cases))
        program = self._load(code, run, tests.entry_point, tests.method_of)
        if program is None:
            return run
        with program:
            if isinstance(program, HarnessProgram):
                # A signature that cannot take the task's arguments is the program's fault, as a judge that
                # compiles the call would report it.
                for index, case in enumerate(tests.cases):
                    problem = program.check(tests.entry_point, case.args)
                    if problem is not None:
                        run.compiled = False
                        run.load_failure = "compile_error"
                        run.message = f"cannot call the entry point with test {index}'s arguments: {problem}"
                        return run
            for index, case in enumerate(tests.cases):
                if self._out_of_time(run):
                    break
                limits = self.budget.limits(self.limits_for(index))
                began = self.budget.begin()
                called = program.call(
                    tests.entry_point, case.args, case.kwargs, method_of=tests.method_of, limits=limits
                )
                own = self.budget.charge(began, called.result.cpu_s)
                run.results.append(self._judged(index, self._judge_call(called, case.expected), own))
                if self._stop_after(run.results):
                    break
        return run

    def _judge_call(self, called: CallResult, expected: Any) -> TestResult:
        result = called.result
        failed = _from_command(result)
        if failed is not None:
            return failed
        if not called.returned:
            return TestResult("runtime_error", result.cpu_s, result.wall_s, result.detail)
        if not called.plain:
            diff = f"returned a value that is not plain data ({called.not_plain})"
            return TestResult("wrong_answer", result.cpu_s, result.wall_s, diff)
        diff = compare_values(called.value, expected, self.options.tolerance)
        return TestResult(
            "passed" if diff is None else "wrong_answer", result.cpu_s, result.wall_s, diff or ""
        )

    # -- assert script -------------------------------------------------------------------------------

    def _script(self, code: str, tests: AssertScriptTests) -> JudgedRun:
        # The script sees the candidate's entry point and the names the reference lists, nothing else of the
        # candidate's: a candidate's `abs`, `set` or `poly` never replaces a name of the judge's asserts.
        names = tests.bound_names()
        found = script_names(tests)
        missing = found.missing(names)
        if missing:
            raise CheckerFailure(_missing_message(missing))
        run = JudgedRun(compiled=False, total=1)
        program = self._load(code, run, tests.entry_point, extra_names=names)
        if program is None:
            return run
        script = with_check_call(tests.script, tests.entry_point)
        cpu = [0.0]
        limits = self.limits_for(0)  # the script is one test; each call into the candidate gets its limit

        def on_call(name: str, args: list[Any], kwargs: dict[str, Any]) -> CallResult:
            if self.budget.spent():
                # Every call waits for the candidate, and the script's own clock stops meanwhile: the budget
                # is what ends a script whose candidate sleeps in every call.
                return CallResult(result=budget_spent_result(name))
            began = self.budget.begin()
            called = program.call(name, args, kwargs, limits=self.budget.limits(limits))
            self.budget.charge(began, called.result.cpu_s)
            cpu[0] += called.result.cpu_s
            return called

        with program, WarmPython("", mode="stdio", limits=SCRIPT_LIMITS, backend=self.backend) as tester:
            if not tester.start().ok:
                raise SandboxFailure("the test script's sandbox did not start")
            outcome = tester.run_script(script, names, on_call, setup=tests.setup, limits=SCRIPT_LIMITS)
        result = outcome.result
        unknown = missing_name(result)
        if unknown is not None and unknown in found.loaded and unknown not in found.bound:
            # A name the script's own text reads and nobody binds anywhere (the static check cannot see through
            # a star import or exec, and the sandbox's builtins may differ): the reference's fault. A name that
            # only a candidate's value brought in (a script that evals it) is the candidate's wrong answer.
            raise CheckerFailure(_missing_message([unknown]))
        if outcome.failed_call is not None:
            called = outcome.failed_call
            judged = self._judge_call(called, None)
            judged.diff = f"{outcome.failed_name}(): {judged.diff}"
            judged.cpu_s = cpu[0]
            run.results.append(self._judged(0, judged))
            return run
        if result.verdict is RunVerdict.sandbox_error:
            raise SandboxFailure(result.detail or "the test script's sandbox failed")
        if result.verdict is RunVerdict.ok:
            judged = TestResult("passed", cpu[0], result.wall_s)
        elif result.verdict is RunVerdict.runtime_error:  # an assertion failed (or the script raised)
            lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
            judged = TestResult("wrong_answer", cpu[0], result.wall_s, lines[-1] if lines else "")
        else:
            judged = TestResult(result.verdict.value, cpu[0], result.wall_s, f"test script: {result.detail}")
        run.results.append(self._judged(0, judged))
        return run


_MISSING_LINE = re.compile(r"^proctor: the test script's name '([A-Za-z_][A-Za-z0-9_]*)' is not defined$")


def budget_spent_result(name: str) -> CommandResult:
    """A call not made because the judge's wall budget for the submission is spent."""
    return CommandResult(
        name=name,
        verdict=RunVerdict.time_limit,
        detail="not run: the program's own wall time used up the judge's budget for the submission",
    )


def missing_name(result: CommandResult) -> str | None:
    """The name a test script died on for want of a binding (warm_server's MISSING_NAME status), else None."""
    if result.verdict is not RunVerdict.runtime_error or result.exit_code != warm_server.MISSING_NAME:
        return None
    lines = result.stderr.rstrip().splitlines()
    found = _MISSING_LINE.match(lines[-1]) if lines else None
    return found.group(1) if found else None


def _missing_message(names: list[str]) -> str:
    listed = ", ".join(names[:20])
    return (
        f"the test script uses {listed}, which nothing provides: the script sees only the candidate's "
        "entry_point and tests.candidate_names; put the helpers and imports it needs in tests.setup"
    )


def with_check_call(script: str, entry_point: str) -> str:
    """HumanEval scripts define check(candidate) without calling it: add the call `check(entry_point)`."""
    tree = ast.parse(script)
    defines = any(isinstance(node, ast.FunctionDef) and node.name == "check" for node in tree.body)
    calls = any(
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Call)
        and isinstance(node.value.func, ast.Name)
        and node.value.func.id == "check"
        for node in tree.body
    )
    return f"{script}\n\ncheck({entry_point})\n" if defines and not calls else script


def _is_bool(called: CallResult) -> bool:
    return called.returned and called.plain and type(called.value) is bool


class Checker:
    """A special judge loaded once in its own sandbox; check() returns (accepted, why not)."""

    def __init__(self, source: str, backend: Any, budget: Budget | None = None):
        self.program = WarmPython(source, mode="call", limits=CHECKER_LIMITS, backend=backend)
        self.loaded = False
        self.budget = budget or Budget(None)

    def check(self, stdin: str, output: str, expected: str) -> tuple[str, str]:
        """Ask the checker: (passed, wrong_answer or time_limit; why not). Its own failure raises
        CheckerFailure (or SandboxFailure)."""
        if not self.loaded:
            outcome = self.program.start()
            if outcome.status == "sandbox_error":
                raise SandboxFailure(outcome.message)
            if not outcome.ok:
                why = program_message(outcome.message)[-500:]
                raise CheckerFailure(f"the checker did not load ({outcome.status}): {why}")
            self.loaded = True
        called = self._ask(stdin, output, expected)
        if _is_bool(called):
            return ("passed", "") if called.value else ("wrong_answer", "rejected by the checker")
        why = called.not_plain or called.result.detail or repr(called.value)[:100]
        if called.result.verdict is RunVerdict.time_limit and self.budget.spent():
            # Cut short by the submission's budget, spent by the candidate's own time (this output included).
            return "time_limit", f"the checker ran out of the submission's time on this output ({why})"[:300]
        # The output is the candidate's: a checker that fails on it (float("abc"), a slow parse of a flood)
        # but accepts the expected output as an answer failed because of the output, a wrong answer as in
        # testlib. Otherwise the checker is at fault: a verifier_error, never a reward of 0. Were every
        # failure the checker's, printing garbage would turn a 0 into a skipped sample.
        sane = self._ask(stdin, expected, expected)
        if _is_bool(sane) and sane.value is True:
            # A checker stuck on the output counts as a time limit, so that under `fraction` a run of them
            # ends after MAX_TIME_LIMITS (each costs up to the checker's CPU limit) instead of the deadline.
            stuck = called.result.verdict is RunVerdict.time_limit
            return "time_limit" if stuck else "wrong_answer", f"the checker failed on this output ({why})"[
                :300
            ]
        raise CheckerFailure(
            f"the checker did not return a bool ({why}); stderr: {called.result.stderr[-300:]}"
        )

    def _ask(self, stdin: str, output: str, expected: str) -> CallResult:
        limits = self.budget.limits(CHECKER_LIMITS)
        called = self.program.call("check", [stdin, output, expected], limits=limits)
        if called.result.verdict is RunVerdict.sandbox_error:
            raise SandboxFailure(called.result.detail)
        return called

    def close(self) -> None:
        """Kill the checker's sandbox."""
        self.program.close()


# -- time limit ------------------------------------------------------------------------------------------

_calibrations: OrderedDict[str, tuple[float, ...]] = OrderedDict()
_calibration_lock = threading.Lock()


def _calibration_key(reference: CodeReference, memory_mb: int) -> str:
    payload = json.dumps(
        [
            reference.language,
            reference.reference_solution,
            reference.tests.model_dump(mode="json"),
            memory_mb,
        ],
        sort_keys=True,
    )
    return hashlib.sha256(payload.encode()).hexdigest()


def reference_cpu_s(reference: CodeReference, options: CodeOptions, memory_mb: int) -> tuple[float, ...]:
    """The reference solution's CPU time on each test (measured once, cached per process); CheckerFailure when
    the reference solution itself does not pass."""
    key = _calibration_key(reference, memory_mb)
    with _calibration_lock:
        if key in _calibrations:
            _calibrations.move_to_end(key)
            return _calibrations[key]
    limits = RunLimits(cpu_s=MAX_CPU_S, memory_mb=memory_mb, output_bytes=UNCAPPED_OUTPUT)
    probe = options.model_copy(update={"reward": "all_pass", "stop_on_first_failure": True})
    run = Judge(reference, probe, limits, stop=True).run(reference.reference_solution or "")
    failed = next((r for r in run.results if not r.passed), None)
    if run.load_failure or failed is not None or len(run.results) < run.total:
        why = run.load_failure or (failed.verdict + ": " + failed.diff if failed else "not every test ran")
        raise CheckerFailure(f"the reference solution does not pass its own tests ({why})")
    times = tuple(r.cpu_s for r in run.results)
    with _calibration_lock:
        _calibrations[key] = times
        while len(_calibrations) > CALIBRATION_CACHE:
            _calibrations.popitem(last=False)
    return times


def output_cap(tests: Any) -> int:
    """stdout cap: twice the longest expected output plus 1 MiB under a comparator (so a flood ends fast),
    16 MiB otherwise."""
    if isinstance(tests, StdioTests) and tests.checker is None:
        longest = max(len(case.stdout.encode()) for case in tests.cases)
        return 2 * longest + MIB
    return UNCAPPED_OUTPUT


def calibrated_cpu_s(reference_s: float, options: CodeOptions) -> float:
    """A test's CPU limit from the reference's time on it: the multiple, never below the floor nor above
    MAX_CPU_S (the reference time counts as at least MIN_REFERENCE_CPU_S)."""
    scaled = options.time_multiple * max(reference_s, MIN_REFERENCE_CPU_S)
    return round(min(MAX_CPU_S, max(options.time_floor_s, scaled)), 4)


def test_limits(
    reference: CodeReference, options: CodeOptions
) -> tuple[RunLimits, list[float] | None, dict[str, Any]]:
    """The limits shared by every test, the CPU limit of each test (None: `limits.cpu_s` for all), and how
    they were chosen."""
    given = reference.limits or CodeLimits()
    memory = given.memory_mb or DEFAULT_MEMORY_MB
    how: dict[str, Any] = {"memory_mb": memory}
    per_test: list[float] | None = None
    if reference.reference_solution is not None:
        measured = reference_cpu_s(reference, options, memory)
        per_test = [calibrated_cpu_s(seconds, options) for seconds in measured]
        cpu = max(per_test)
        how.update(
            cpu_s=cpu,
            cpu_from="reference_solution",
            time_multiple=options.time_multiple,
            time_floor_s=options.time_floor_s,
            cpu_s_per_test=per_test[:MAX_DETAILS],
            reference_cpu_s_per_test=[round(seconds, 4) for seconds in measured[:MAX_DETAILS]],
        )
    else:
        cpu = given.cpu_s or DEFAULT_CPU_S
        how.update(cpu_s=cpu, cpu_from="limits" if given.cpu_s else "default")
    limits = RunLimits(cpu_s=cpu, memory_mb=memory, output_bytes=output_cap(reference.tests))
    return limits, per_test, how


# -- scoring ---------------------------------------------------------------------------------------------


def score_code(response: str, reference: CodeReference, options: CodeOptions) -> Verdict:
    """Extract the program, run it against the tests in sandboxes, and judge every test here."""
    started = time.monotonic()
    language = get_language(reference.language)
    tests = reference.tests
    details: dict[str, Any] = {"language": language.name, "format": tests.format}
    if isinstance(tests, StdioTests):
        details["compare"] = "checker" if tests.checker else COMPARATORS[tests.compare].preset
    extracted = extract_code(response, language)
    details["extraction"] = extracted.method
    if not extracted.code:
        return Verdict(
            reward=0.0,
            correct=False,
            reason="no_code",
            components={"tests_passed": 0.0, "compiled": 0.0},
            details=details,
        )
    stop = options.stop_on_first_failure
    if stop is None:
        stop = options.reward == "all_pass"
    budget = Budget(BUDGET_SHARE * (options.deadline_s or DEADLINE_S))
    try:
        limits, per_test, details["limits"] = test_limits(reference, options)
        run = Judge(reference, options, limits, stop, per_test, budget).run(extracted.code)
    except SandboxFailure as exc:
        return Verdict.failure(Status.sandbox_error, "sandbox_error", error=str(exc)[:2000], **details)
    except CheckerFailure as exc:
        return Verdict.failure(Status.verifier_error, "bad_reference", error=str(exc)[:2000], **details)
    details["elapsed_s"] = round(time.monotonic() - started, 3)
    details["budget"] = {**budget.public(), "spent": run.budget_spent or budget.spent()}
    return _verdict(run, options, details)


def _verdict(run: JudgedRun, options: CodeOptions, details: dict[str, Any]) -> Verdict:
    passed = sum(r.passed for r in run.results)
    fraction = passed / run.total if run.total else 0.0
    first = next((r for r in run.results if not r.passed), None)
    if run.load_failure is not None:
        reason = run.load_failure
        details["message"] = run.message
    elif first is not None:
        reason = first.verdict
    elif len(run.results) < run.total:
        reason = "time_limit"  # the rest were skipped: MAX_TIME_LIMITS time limits, or the budget ran out
    else:
        reason = None
    details["tests_run"] = len(run.results)
    details["tests_total"] = run.total
    details["tests"] = [r.public(i) for i, r in enumerate(run.results[:MAX_DETAILS])]
    if first is not None and first.diff:
        details["first_failure"] = {"test": run.results.index(first), "diff": first.diff[:500]}
    correct = reason is None and passed == run.total
    reward = 1.0 if correct else (fraction if options.reward == "fraction" else 0.0)
    return Verdict(
        reward=reward,
        correct=correct,
        reason=reason,
        components={"tests_passed": fraction, "compiled": 1.0 if run.compiled else 0.0},
        details=details,
    )


# -- registration ----------------------------------------------------------------------------------------


def _fence(code: str, language: str = "python") -> str:
    return f"Here is my solution.\n\n```{language}\n{code}```\n"


_SUM_STDIO = {
    "format": "stdio",
    "cases": [
        {"stdin": "1 2\n", "stdout": "3\n"},
        {"stdin": "10 -4\n", "stdout": "6\n"},
        {"stdin": "1000000000000 1\n", "stdout": "1000000000001\n"},
    ],
}
_SUM_PY = {"language": "python", "tests": _SUM_STDIO}
_SUM_CALL = {
    "language": "python",
    "tests": {
        "format": "call",
        "entry_point": "add",
        "cases": [{"args": [1, 2], "expected": 3}, {"args": [5, 5], "expected": 10}],
    },
}
_SUM_CALL_JS = {**_SUM_CALL, "language": "javascript"}
_SUM_SCRIPT = {
    "language": "python",
    "tests": {
        "format": "assert_script",
        "entry_point": "add",
        "script": "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(-1, 1) == 0\n",
    },
}
_PY_SUM = "import sys\na, b = map(int, sys.stdin.read().split())\nprint(a + b)\n"
_CPP_SUM = "#include <iostream>\nint main(){long long a,b;std::cin>>a>>b;std::cout<<a+b<<'\\n';}\n"
_PY_ADD = "def add(a, b):\n    return a + b\n"

_EXAMPLES = (
    # Gold: each must score 1.
    Example(_fence(_PY_SUM), _SUM_PY, 1.0, note="stdio, Python"),
    Example(_fence(_CPP_SUM, "cpp"), {"language": "cpp", "tests": _SUM_STDIO}, 1.0, note="stdio, C++"),
    Example(
        "```text\nnot this\n```\nFinal:\n```py\n" + _PY_SUM + "```",
        _SUM_PY,
        1.0,
        note="the last block in the task's language",
    ),
    Example(_fence(_PY_ADD), _SUM_CALL, 1.0, note="call format"),
    Example(_fence(_PY_ADD), _SUM_SCRIPT, 1.0, note="HumanEval-style check(candidate)"),
    Example(
        _fence("function add(a, b) {\n  return a + b;\n}\n", "javascript"),
        _SUM_CALL_JS,
        1.0,
        note="call format, JavaScript (the harness calls it; the value is compared here)",
    ),
    Example(
        _fence("import sys\na, b = map(int, sys.stdin.read().split())\nprint(a / b)\n"),
        {
            "language": "python",
            "tests": {
                "format": "stdio",
                "compare": "float",
                "cases": [{"stdin": "1 3", "stdout": "0.333333"}],
            },
        },
        1.0,
        note="float comparator at the default tolerance",
    ),
    # Cheats and failures: each must score 0.
    Example("", _SUM_PY, 0.0, note="empty response"),
    Example("I am not sure how to solve this.```\n```", _SUM_PY, 0.0, note="no code"),
    Example(
        _fence("import os\nprint(3)\nos._exit(0)\n"), _SUM_PY, 0.0, note="prints a visible example's answer"
    ),
    Example(_fence("import os\nos._exit(0)\n"), _SUM_CALL, 0.0, note="os._exit(0) at import"),
    Example(
        _fence("import sys\ndef add(a, b):\n    sys.exit(0)\n"),
        _SUM_CALL,
        0.0,
        note="sys.exit(0) in the call",
    ),
    Example(
        _fence(
            "import atexit, os\natexit.register(lambda: os._exit(0))\ndef add(a, b):\n    raise ValueError\n"
        ),
        _SUM_CALL,
        0.0,
        note="atexit forcing status 0",
    ),
    Example(
        _fence(
            "class Any:\n    def __eq__(self, other):\n        return True\ndef add(a, b):\n    return Any()\n"
        ),
        _SUM_CALL,
        0.0,
        note="forged __eq__",
    ),
    Example(
        _fence("def abs(x):\n    return 0\ndef add(a, b):\n    return 0\n"),
        {
            "language": "python",
            "tests": {
                "format": "assert_script",
                "entry_point": "add",
                "script": "assert abs(add(1, 2) - 3) == 0\nassert abs(add(2, 2) - 4) == 0\n",
            },
        },
        0.0,
        note="defines abs to replace the builtin the asserts use (the script sees only the entry point)",
    ),
    Example(
        _fence(
            "class I(int):\n    def __eq__(self, other):\n        return True\ndef add(a, b):\n    return I(0)\n"
        ),
        _SUM_SCRIPT,
        0.0,
        note="int subclass with a forged __eq__, through the assert script",
    ),
    Example(
        _fence("import builtins\nbuiltins.AssertionError = SystemExit\ndef add(a, b):\n    return 0\n"),
        _SUM_SCRIPT,
        0.0,
        note="monkeypatched builtins",
    ),
    Example(
        _fence('function add(a, b) {\n  console.log("3");\n  process.exit(0);\n}\n', "javascript"),
        _SUM_CALL_JS,
        0.0,
        note="JavaScript: prints an answer and exits 0 before returning",
    ),
    Example(_fence("while True:\n    pass\n"), _SUM_PY, 0.0, note="infinite loop"),
    Example(_fence("while True:\n    print('3' * 4096)\n"), _SUM_PY, 0.0, note="huge output"),
    Example(
        _fence("int main( { return 0; }\n", "cpp"),
        {"language": "cpp", "tests": _SUM_STDIO},
        0.0,
        note="compile error",
    ),
)

SPEC = register_verifier(
    VerifierSpec(
        name="code",
        version=VERSION,
        score=score_code,
        reference=CodeReference,
        options=CodeOptions,
        description="Run the response's program against the task's tests (stdio, function calls and "
        "HumanEval/MBPP assert scripts, in seven languages) in sandboxes, judging plain data outside them; "
        "reward all_pass or the fraction of tests passed.",
        examples=_EXAMPLES,
        execution="pool",
        deadline_s=DEADLINE_S,
    )
)
