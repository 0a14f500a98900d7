"""`tool.math_python`: math problems solved with a `python` tool; the final answer graded by the `math` verifier.

The tool runs the model's code in the sandbox (the configured backend, nsjail by default), one fresh process
per call (stateless: nothing survives from one call to the next). CPU time, memory, wall time and output size
come from the session's limits (`SessionLimits.call_cpu_s`, `call_memory_mb`, `call_wall_s`,
`max_observation_chars`), never from the call's arguments; the operator's sandbox maxima clamp them as for
every job. The observation is what the program printed (stdout, then stderr when there is any), or an error
line when it ran out of time or memory. A sandbox that fails (not the program) raises ToolMachineryError: the
session ends with `sandbox_error`.

The grade is the `math` verifier's, through the engine, on the assistant's own text after the last
observation, and only when the last assistant message is a final answer (it calls no tool; see
`base.final_answer`). What the code printed is never read: a program that prints `\\boxed{42}` earns nothing
unless the model then answers 42 itself.

Bundled tasks are seeded number problems (primes, modular powers, divisor counts, digit sums, counting with
inclusion-exclusion, bounded compositions, Fibonacci residues) at three levels; an item's split is decided by
the hash of its content, so train and test never share a problem.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import random
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import BaseModel

from proctor.capacity import PoolFull
from proctor.contract import ChatMessage, RequestError, Verdict
from proctor.engine import current_engine, prepare
from proctor.environments.puzzles.seeding import content_split, digest, item_rng, puzzle_id
from proctor.environments.registry import GenerationError, Task
from proctor.environments.tools.base import (
    SessionLimits,
    ToolEnvironment,
    ToolMachineryError,
    ToolResult,
    ToolSpec,
    final_answer,
    register_tool_environment,
)
from proctor.registry import Example, get_verifier
from proctor.sandboxes.job import Backend, File, Job, RunLimits, RunVerdict

NAME = "tool.math_python"
VERSION = "1.0.0"
MAX_CODE_CHARS = 100_000
"""A `code` argument longer than this is an error observation (no task needs that much code)."""
MAX_ATTEMPTS = 200

PYTHON_TOOL = ToolSpec(
    name="python",
    description="Run a Python 3 program in a fresh sandboxed process and return what it printed (stdout, then "
    "stderr). Nothing is kept between calls; print() every value you want to see. No network, no files "
    "outside a scratch directory; CPU time, memory and output are limited.",
    parameters={
        "type": "object",
        "properties": {"code": {"type": "string", "description": "The Python 3 program to run."}},
        "required": ["code"],
        "additionalProperties": False,
    },
)

INSTRUCTIONS = (
    "You can run Python code with the `python` tool (each call is a fresh process: print what you need). "
    "When you are done, reply without a tool call and give the final answer in \\boxed{}."
)


# -- bundled tasks ----------------------------------------------------------------------------------------

LEVELS: dict[str, int] = {"easy": 1, "medium": 2, "hard": 3}


@dataclass(frozen=True)
class Problem:
    kind: str
    params: dict[str, int]
    text: str
    answer: int


def _primes_below(n: int) -> list[int]:
    sieve = bytearray([1]) * n
    sieve[0:2] = b"\x00\x00"
    for p in range(2, math.isqrt(n - 1) + 1):
        if sieve[p]:
            sieve[p * p :: p] = bytearray(len(range(p * p, n, p)))
    return [i for i in range(n) if sieve[i]]


def _divisor_count(n: int) -> int:
    count, p = 1, 2
    while p * p <= n:
        e = 0
        while n % p == 0:
            n //= p
            e += 1
        count *= e + 1
        p += 1
    return count * (2 if n > 1 else 1)


def _fib_mod(n: int, m: int) -> int:
    """F(n) mod m by fast doubling."""

    def pair(k: int) -> tuple[int, int]:
        if k == 0:
            return 0, 1
        f, g = pair(k // 2)
        c = f * ((2 * g - f) % m) % m
        d = (f * f + g * g) % m
        return (d, (c + d) % m) if k % 2 else (c, d)

    return pair(n)[0]


def _multiples(n: int, a: int, b: int) -> int:
    """How many integers in [1, n] are divisible by a or by b."""
    return n // a + n // b - n // math.lcm(a, b)


def _sum_of_primes(rng: random.Random, level: int) -> Problem:
    n = rng.randint(10 ** (level + 2), 5 * 10 ** (level + 2))
    text = f"What is the sum of all prime numbers less than {n}?"
    return Problem("sum_of_primes", {"n": n}, text, sum(_primes_below(n)))


def _modular_power(rng: random.Random, level: int) -> Problem:
    a = rng.randint(2, 10**level * 50)
    b = rng.randint(10 ** (level + 3), 10 ** (level + 5))
    m = rng.randint(10**level * 100, 10 ** (level + 3) * 7)
    return Problem(
        "modular_power", {"a": a, "b": b, "m": m}, f"What is ${a}^{{{b}}} \\bmod {m}$?", pow(a, b, m)
    )


def _divisors(rng: random.Random, level: int) -> Problem:
    primes = [2, 3, 5, 7, 11, 13, 17, 19, 23]
    n = 1
    for _ in range(level + 3):
        n *= rng.choice(primes)
    n *= rng.randint(1, 50)
    return Problem("divisor_count", {"n": n}, f"How many positive divisors does {n} have?", _divisor_count(n))


def _digit_sum_factorial(rng: random.Random, level: int) -> Problem:
    n = rng.randint(20 * level, 120 * level)
    answer = sum(int(d) for d in str(math.factorial(n)))
    return Problem(
        "factorial_digit_sum", {"n": n}, f"What is the sum of the decimal digits of ${n}!$?", answer
    )


def _inclusion_exclusion(rng: random.Random, level: int) -> Problem:
    n = rng.randint(10 ** (level + 2), 10 ** (level + 4))
    a, b, c = rng.sample([3, 4, 5, 6, 7, 9, 11, 13], 3)
    answer = _multiples(n, a, b) - _multiples(n, math.lcm(a, c), math.lcm(b, c))
    text = f"How many integers from 1 to {n} are divisible by {a} or by {b} but not by {c}?"
    return Problem("inclusion_exclusion", {"n": n, "a": a, "b": b, "c": c}, text, answer)


def _compositions(rng: random.Random, level: int) -> Problem:
    parts = level + 2
    cap = rng.randint(5, 8 + 4 * level)
    total = rng.randint(cap, parts * cap - 1)
    ways = [1] + [0] * total
    for _ in range(parts):
        nxt = [0] * (total + 1)
        for s, w in enumerate(ways):
            if w:
                for x in range(min(cap, total - s) + 1):
                    nxt[s + x] += w
        ways = nxt
    text = f"How many ordered {parts}-tuples of integers, each between 0 and {cap} inclusive, sum to {total}?"
    return Problem("bounded_compositions", {"parts": parts, "cap": cap, "total": total}, text, ways[total])


def _fibonacci_residue(rng: random.Random, level: int) -> Problem:
    n = rng.randint(10 ** (level + 2), 10 ** (level + 3))
    m = rng.randint(1000, 10**6)
    text = f"Let $F_0 = 0$, $F_1 = 1$ and $F_{{k+1}} = F_k + F_{{k-1}}$. What is $F_{{{n}}} \\bmod {m}$?"
    return Problem("fibonacci_residue", {"n": n, "m": m}, text, _fib_mod(n, m))


GENERATORS: tuple[Callable[[random.Random, int], Problem], ...] = (
    _sum_of_primes,
    _modular_power,
    _divisors,
    _digit_sum_factorial,
    _inclusion_exclusion,
    _compositions,
    _fibonacci_residue,
)


def make_problem(split: str, seed: int, index: int, level: str) -> tuple[Problem, str]:
    """The problem at (split, seed, index, level) and its content key; its split is its content hash's."""
    depth = LEVELS[level]
    for attempt in range(MAX_ATTEMPTS):
        rng = item_rng(NAME, VERSION, {"level": level}, split, seed, index, attempt)
        problem = rng.choice(GENERATORS)(rng, depth)
        key = digest({"kind": problem.kind, "params": problem.params})
        if content_split(key) == split:
            return problem, key
    raise GenerationError(f"no {split} problem in {MAX_ATTEMPTS} attempts")


# -- the environment --------------------------------------------------------------------------------------


class PythonState(BaseModel):
    """A stateless session's state: only its limits (every call is a fresh process)."""

    limits: SessionLimits
    calls: int = 0


class MathPython(ToolEnvironment):
    """Math with a stateless sandboxed `python` tool; see the module docstring."""

    name: ClassVar[str] = NAME
    rebuildable_state: ClassVar[bool] = True  # every call is a fresh process
    version: ClassVar[str] = VERSION
    description: ClassVar[str] = (
        "Math problems solved with a sandboxed `python` tool (a fresh process per call); the final answer "
        "(the assistant's own text after the last observation) is graded by the math verifier."
    )
    levels: ClassVar[tuple[str, ...]] = tuple(LEVELS)
    default_level: ClassVar[str | None] = "medium"
    reference_model: ClassVar[Any] = Any

    def __init__(self, backend: Backend | str | None = None):
        self._backend = backend

    @property
    def backend(self) -> Backend:
        """The sandbox backend (PROCTOR_SANDBOX_BACKEND, else nsjail), resolved on first use."""
        from proctor.sandboxes.backends import resolve_backend

        if not hasattr(self._backend, "run"):
            self._backend = resolve_backend(self._backend)  # type: ignore[arg-type]
        return self._backend  # type: ignore[return-value]

    def limits(self) -> SessionLimits:
        return SessionLimits(
            max_turns=16,
            max_tool_calls=24,
            max_tool_errors=6,
            tool_cpu_s=60.0,
            call_cpu_s=5.0,
            call_wall_s=10.0,
            call_memory_mb=512,
            max_observation_chars=4_000,
            max_total_observation_chars=60_000,
            ttl_s=600.0,
        )

    def tools(self) -> list[ToolSpec]:
        return [PYTHON_TOOL]

    def make_tasks(self, split: str, seed: int, count: int, level: str | None = None) -> list[Task]:
        level = level or self.default_level or "medium"
        if level not in LEVELS:
            raise RequestError(422, f"unknown level {level!r}; levels: {', '.join(LEVELS)}", "level")
        tasks = []
        for index in range(count):
            problem, key = make_problem(split, seed, index, level)
            tasks.append(
                Task(
                    prompt=[{"role": "user", "content": f"{problem.text}\n\n{INSTRUCTIONS}"}],
                    reference={"answer": str(problem.answer)},
                    verifier=NAME,
                    metadata={
                        "environment": NAME,
                        "version": VERSION,
                        "split": split,
                        "seed": seed,
                        "index": index,
                        "difficulty": level,
                        "kind": problem.kind,
                        "gold_answer": str(problem.answer),
                        "id": puzzle_id(key),
                    },
                )
            )
        return tasks

    def user_task(self, prompt: str | list[dict[str, str]], reference: Any) -> Task:
        """A user's task: the reference is the `math` verifier's (a gold answer string or its object)."""
        spec = get_verifier("math")
        try:
            parsed = spec.parse_reference(reference)
        except RequestError as exc:
            field = "task.reference" + (exc.field[len("reference") :] if exc.field else "")
            raise RequestError(422, exc.message.replace("reference", "task.reference", 1), field) from None
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
        if not messages:
            raise RequestError(422, "invalid task.prompt: no messages", "task.prompt")
        return Task(
            prompt=messages,
            reference=spec.reference_adapter.dump_python(parsed, mode="json"),
            verifier=NAME,
            metadata={"environment": NAME, "version": VERSION, "source": "user"},
        )

    async def start(self, task: Task, limits: SessionLimits) -> PythonState:
        return PythonState(limits=limits)

    async def call(self, state: PythonState, name: str, arguments: dict[str, Any]) -> ToolResult:
        if name != "python":
            return ToolResult(content=f"Error: unknown tool {name!r}", status="error")
        code = arguments.get("code")
        if not isinstance(code, str):
            return ToolResult(content="Error: `code` must be a string", status="error")
        if len(code) > MAX_CODE_CHARS:
            return ToolResult(
                content=f"Error: the code is longer than {MAX_CODE_CHARS} characters", status="error"
            )
        state.calls += 1
        return await run_python(self.backend, code, state.limits)

    async def score(self, reference: Any, transcript: list[ChatMessage]) -> Verdict:
        answer = final_answer(transcript, self.tools())
        if answer is None or not answer.strip():
            return Verdict.wrong("no_final_answer", turns=_turns(transcript))
        engine = current_engine()
        graded = await engine.score_nested(
            prepare({"verifier": "math", "response": answer, "reference": reference})
        )
        details = {"math": graded.details, "turns": _turns(transcript)}
        return Verdict(
            reward=graded.reward,
            correct=graded.correct,
            reason=graded.reason,
            status=graded.status,
            components=graded.components,
            details=details,
        )


def _turns(transcript: list[ChatMessage]) -> int:
    return sum(1 for message in transcript if message.role == "assistant")


def python_job(code: str, limits: SessionLimits) -> Job:
    """The sandbox job of one `python` call: the code as a file, run by python3 with the session's limits."""
    from proctor.sandboxes.languages import get_language

    language = get_language("python")
    run_limits = RunLimits(
        cpu_s=limits.call_cpu_s,
        wall_s=limits.call_wall_s,
        memory_mb=limits.call_memory_mb,
        output_bytes=4 * limits.max_observation_chars,
        stderr_bytes=4 * limits.max_observation_chars,
        file_size_mb=16,
    )
    source = language.file_name(code)
    return Job(
        files=[File(path=source, content=code)],
        commands=[language.run_command(code, "", run_limits)],
        env=language.env(limits.call_memory_mb),
    )


_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


def sandbox_executor() -> ThreadPoolExecutor:
    """The threads that wait on `python` calls' sandboxes: PROCTOR_SANDBOX_WORKERS of them, so at most that many
    calls run at once in this process (the rest wait their turn, in order)."""
    global _executor
    if _executor is None:
        with _executor_lock:
            if _executor is None:
                from proctor.settings import get_settings

                workers = get_settings().sandbox_workers
                _executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="proctor-python-tool")
    return _executor


async def run_python(backend: Backend, code: str, limits: SessionLimits) -> ToolResult:
    """Run one stateless call; the program's failures are results, the sandbox's raise ToolMachineryError."""
    job = python_job(code, limits)
    try:
        result = await asyncio.get_running_loop().run_in_executor(sandbox_executor(), backend.run, job)
    except Exception as exc:  # a backend that raises instead of reporting is a machinery failure too
        raise ToolMachineryError(f"the sandbox failed: {type(exc).__name__}: {exc}") from None
    if not result.commands:
        raise ToolMachineryError("the sandbox ran nothing")
    command = result.commands[-1]
    return observe(command.verdict, command.stdout, command.stderr, command, limits)


def observe(verdict: RunVerdict, stdout: str, stderr: str, command: Any, limits: SessionLimits) -> ToolResult:
    """The observation of one finished run (shared by the stateless and persistent tools)."""
    elapsed_ms = round(float(getattr(command, "wall_s", 0.0)) * 1000, 3)
    cpu_ms = round(float(getattr(command, "cpu_s", 0.0)) * 1000, 3)
    truncated = bool(
        getattr(command, "stdout_truncated", False) or getattr(command, "stderr_truncated", False)
    )
    if verdict is RunVerdict.sandbox_error:
        raise ToolMachineryError(getattr(command, "detail", "") or "sandbox_error")
    parts = [stdout.rstrip("\n")] if stdout.strip() else []
    if stderr.strip():
        parts.append(stderr.rstrip("\n"))
    status = "ok"
    if verdict is RunVerdict.time_limit:
        status = "timeout"
        parts.append(
            f"Error: the program ran out of time ({limits.call_cpu_s:g} s of CPU, {limits.call_wall_s:g} s)"
        )
    elif verdict is RunVerdict.memory_limit:
        status = "error"
        parts.append(f"Error: the program ran out of memory ({limits.call_memory_mb} MB)")
    elif verdict is RunVerdict.output_limit:
        truncated = True
        parts.append("[output truncated: the program printed more than the tool returns]")
    elif verdict is RunVerdict.runtime_error:
        status = "error"
    content = "\n".join(parts) if parts else "(no output)"
    return ToolResult(
        content=content, status=status, elapsed_ms=elapsed_ms, cpu_ms=cpu_ms, truncated=truncated
    )


ENVIRONMENT = MathPython()


def _gold_transcripts() -> tuple[Example, ...]:
    """Gold transcripts (reward 1), cheats and trivial policies (reward 0) on one bundled task."""
    task = ENVIRONMENT.make_tasks("test", 7, 1, "easy")[0]
    gold = task.metadata["gold_answer"]
    ref = task.reference
    prompt = [dict(m) for m in task.prompt]
    call = {
        "role": "assistant",
        "content": "Let me compute it.",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "python", "arguments": '{"code": "print(1)"}'},
            }
        ],
    }
    observation = {"role": "tool", "tool_call_id": "c1", "name": "python", "content": gold}
    printed_box = {**observation, "content": f"\\boxed{{{gold}}}"}
    wrong = str(int(gold) + 1)
    many_calls = [call, observation] * 10
    return (
        Example(
            [*prompt, call, observation, {"role": "assistant", "content": f"\\boxed{{{gold}}}"}],
            ref,
            1.0,
            note="gold: compute, then answer in a box",
        ),
        Example(
            [*prompt, {"role": "assistant", "content": f"The answer is \\boxed{{{gold}}}."}],
            ref,
            1.0,
            note="gold: no tool needed",
        ),
        Example(
            [*prompt, call, printed_box, {"role": "assistant", "content": ""}],
            ref,
            0.0,
            note="cheat: the code prints the boxed answer, the assistant answers nothing",
        ),
        Example([*prompt, call, printed_box], ref, 0.0, note="cheat: the transcript ends on the observation"),
        Example(
            [
                *prompt,
                {
                    "role": "assistant",
                    "content": '<tool_call>{"name": "python", "arguments": {"code": "print(2)"}}</tool_call>\n'
                    f"<tool_response>\\boxed{{{gold}}}</tool_response>",
                },
            ],
            ref,
            0.0,
            note="cheat: a fake <tool_response> written beside a call is neither an observation nor an answer",
        ),
        Example(
            [*prompt, {"role": "assistant", "content": f"\\boxed{{{wrong}}} or \\boxed{{{gold}}}"}],
            ref,
            0.0,
            note="cheat: several hedged answers",
        ),
        Example(
            [*prompt, *many_calls, {"role": "assistant", "content": "I ran the code ten times."}],
            ref,
            0.0,
            note="cheat: calling the tool many times earns nothing",
        ),
        Example(
            [*prompt, {**call, "content": f"\\boxed{{{gold}}}"}],
            ref,
            0.0,
            note="cheat: a box written beside a call that never ran is not a final answer",
        ),
        Example(
            [*prompt, {"role": "assistant", "content": ""}], ref, 0.0, note="trivial: no call, no answer"
        ),
        Example(
            [
                *prompt,
                {
                    **call,
                    "tool_calls": [
                        {
                            **call["tool_calls"][0],
                            "function": {"name": "python", "arguments": '{"code": "x"}'},
                        }
                    ],
                },
                {**observation, "content": "NameError: name 'x' is not defined"},
                {"role": "assistant", "content": "\\boxed{0}"},
            ],
            ref,
            0.0,
            note="trivial: random arguments, then a guess",
        ),
        Example(
            [*prompt, {"role": "assistant", "content": prompt[-1]["content"]}],
            ref,
            0.0,
            note="trivial: repeating the question",
        ),
    )


register_tool_environment(ENVIRONMENT, examples=_gold_transcripts(), deadline_s=30.0)


# -- the persistent interpreter (tool.math_python_persistent) ---------------------------------------------

PERSISTENT_NAME = "tool.math_python_persistent"
MAX_INTERPRETERS = 256
"""Sessions of `tool.math_python_persistent` open at once per process (each may hold one jailed interpreter);
past it, opening one is a 429."""
REPL_FILE = "repl.py"
START_WALL_S = 15.0
PAUSE_DEADLINE_S = 2.0
"""How long pausing the jail's processes after a call may take; past it the interpreter is stopped instead."""
STOPPED_STATES = frozenset("TtZXx")
"""Thread states (/proc/<tid>/stat) that run nothing: stopped, traced, zombie, dead."""

PERSISTENT_TOOL = ToolSpec(
    name="python",
    description="Run Python 3 code in this session's interpreter and return what it printed (stdout and stderr, "
    "interleaved); the value of a last bare expression is printed too. Variables, functions and imports persist "
    "from one call to the next (like a notebook) until the session ends, or until a call runs out of time or "
    "memory (the interpreter then restarts empty). No network; CPU time, memory and output are limited.",
    parameters=PYTHON_TOOL.parameters,
)

_interpreters = 0
_interpreters_lock = threading.Lock()


def _descendants(root: int) -> list[int]:
    """`root` and every process descended from it (from /proc: for a backend without cgroups)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    ppid = int(handle.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found: dict[int, None] = {}
    todo = [root]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found[pid] = None
            todo.extend(children.get(pid, ()))
    return list(found)


def jail_processes(jail: Any) -> list[int]:
    """Host pids of the interpreter and of every process the model's code started in its jail (never nsjail's
    own process, which holds the jail and runs none of the model's code)."""
    slot = jail.slot
    outer = slot.proc.pid if slot.target is not None else None
    pids = jail.group.pids() if jail.group is not None else _descendants(slot.waiting_pid)
    return [pid for pid in pids if pid != outer]


def _running(pid: int) -> bool:
    """Whether a thread of process `pid` may still run (a gone process runs nothing)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as handle:
                state = handle.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in STOPPED_STATES:
            return True
    return False


def pause(jail: Any, deadline_s: float = PAUSE_DEADLINE_S) -> bool:
    """SIGSTOP every process of the model's in the jail (the interpreter, its threads, its children) and wait
    until none of their threads runs; False if that did not happen within `deadline_s` (processes that keep
    waking each other, or a thread that cannot stop). SIGSTOP cannot be caught, blocked or ignored, and a
    stopped process can neither fork nor wake another, so the loop ends once every process is stopped at
    once."""
    end = time.monotonic() + deadline_s
    delay = 0.00005
    while True:
        pids = jail_processes(jail)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGSTOP)
        if not any(_running(pid) for pid in pids) and set(jail_processes(jail)) <= set(pids):
            return True
        if time.monotonic() > end:
            return False
        time.sleep(delay)  # a stop takes effect once each thread is scheduled: usually within microseconds
        delay = min(2 * delay, 0.002)


def resume(jail: Any) -> None:
    """SIGCONT every process of the model's in the jail (undoes `pause`)."""
    for pid in jail_processes(jail):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGCONT)


class PythonInterpreter:
    """One session's interpreter: `python_repl.py` in a jail taken from the backend's warm slots (the same jail,
    cgroup and rlimits a `code` verifier job gets), started on the first call, killed on `close`.

    Blame: a jail that cannot start before any of the model's code ran is the machinery's failure
    (ToolMachineryError); once code ran, anything that goes wrong with the interpreter (it dies, runs out of
    CPU, memory or wall time, garbles its reply) is the program's doing: an observation, and the next call gets
    a fresh interpreter. CPU time and memory are measured and enforced from outside (the jail's cgroup).

    Nothing runs between calls: once a call's reply is in, every process of the jail but nsjail (the
    interpreter with all its threads, and every process the code started) is stopped with SIGSTOP, and
    continued when the next call begins. A thread or child process the code leaves behind therefore runs only
    during later calls, on their CPU limit (the whole jail's CPU counts, not the interpreter's alone), and every
    CPU second the jail used since the last call's bill is billed to the call (`cpu_ms`, the session's
    `tool_cpu_s`). A jail that cannot be paused is stopped like one that ran out of time.
    """

    def __init__(self, backend: Backend, limits: SessionLimits):
        self.backend = backend
        self.limits = limits
        self.jail: Any = None
        self.starts = 0
        self.billed: float | None = None  # the jail's CPU seconds when its last call was billed
        self._lock = threading.Lock()

    def _run_limits(self) -> RunLimits:
        """The jail's limits: the session's, clamped to the operator's sandbox maxima (as every job's are)."""
        from proctor.sandboxes.job import Maxima

        limits = RunLimits(
            cpu_s=self.limits.call_cpu_s,
            wall_s=self.limits.call_wall_s,
            memory_mb=self.limits.call_memory_mb,
            output_bytes=4 * self.limits.max_observation_chars,
            file_size_mb=16,
        )
        return Maxima.from_settings().clamp(limits)

    def _start(self) -> Any:
        from pathlib import Path

        from proctor.sandboxes.languages import get_language
        from proctor.sandboxes.warm import PYTHON, _Jail, _Protocol

        from . import python_repl

        limits = self._run_limits()
        source = Path(python_repl.__file__).read_text()
        env = get_language("python").env(limits.memory_mb)
        try:
            jail = _Jail(
                self.backend, [File(path=REPL_FILE, content=source)], [PYTHON, "-I", REPL_FILE], env, limits
            )
        except Exception as exc:  # no jail: the machinery failed, before any of the model's code ran
            raise ToolMachineryError(
                f"the interpreter's sandbox could not start: {type(exc).__name__}: {exc}"
            ) from None
        try:
            ready = jail.receive(time.monotonic(), START_WALL_S, 1 << 16)
        except _Protocol as exc:
            detail = jail.side_text()[-2000:]
            jail.close()
            raise ToolMachineryError(f"the interpreter did not start ({exc}): {detail}") from None
        if ready.get("ready") is not True:
            jail.close()
            raise ToolMachineryError("the interpreter did not report ready")
        self.starts += 1
        return jail

    def run(self, code: str) -> ToolResult:
        """Run one cell (blocking: call it on a thread)."""
        from proctor.sandboxes.warm import _Protocol

        with self._lock:
            restarted = self.jail is None and self.starts > 0
            if self.jail is None:
                self.jail = self._start()
                self.billed = self.jail.cpu_s()  # starting the interpreter is not the code's doing
            else:
                resume(self.jail)
            jail = self.jail
            limits = self.limits
            clamped = self._run_limits()
            # Billed from the last bill, so nothing the jail did since (there should be nothing) goes unbilled.
            cpu_before = self.billed if self.billed is not None else jail.cpu_s()
            oom_before = jail.oom_kills()
            cap = cpu_before + clamped.cpu_s if cpu_before is not None else None
            started = time.monotonic()
            max_bytes = 4 * limits.max_observation_chars
            failure: str | None = None
            reply: dict[str, Any] = {}
            jail.begin_wait()
            try:
                jail.send({"op": "run", "code": code, "max_bytes": max_bytes})
                reply = jail.receive(started, clamped.wall_backstop_s, 4 * max_bytes + 65536, cap)
                if not isinstance(reply.get("output"), str) or not isinstance(reply.get("error"), bool):
                    failure = "garbled"
            except _Protocol as exc:
                failure = str(exc)
            elapsed_ms = round((time.monotonic() - started) * 1000, 3)
            if failure is None and not pause(jail):  # a failed call's jail is killed below
                failure = "pause"
            cpu_after = jail.cpu_s()
            self.billed = cpu_after
            cpu_ms = round(max(0.0, (cpu_after or 0.0) - (cpu_before or 0.0)) * 1000, 3)
            note = (
                "[a fresh interpreter: the previous one was lost, with its variables]\n" if restarted else ""
            )
            if failure is None:
                output = reply["output"]
                truncated = bool(reply.get("truncated"))
                content = note + (output.rstrip("\n") if output.strip() else "(no output)")
                if truncated:
                    content += "\n[output truncated: the code printed more than the tool returns]"
                status = "error" if reply["error"] else "ok"
                return ToolResult(
                    content=content, status=status, elapsed_ms=elapsed_ms, cpu_ms=cpu_ms, truncated=truncated
                )
            oom = jail.oom_kills() > oom_before
            self._kill()
            lost = "The interpreter was stopped; its variables are lost and the next call starts a fresh one."
            if failure == "cpu" or failure == "deadline":
                content = f"Error: the code ran out of time ({limits.call_cpu_s:g} s of CPU, {limits.call_wall_s:g} s). {lost}"
                status = "timeout"
            elif oom:
                content = f"Error: the code ran out of memory ({limits.call_memory_mb} MB). {lost}"
                status = "error"
            elif failure == "pause":
                content = (
                    "Error: the code left threads or processes running that could not be paused after the call "
                    f"(nothing may run between calls). {lost}"
                )
                status = "error"
            else:
                content = f"Error: the interpreter ended ({failure}). {lost}"
                status = "error"
            return ToolResult(content=note + content, status=status, elapsed_ms=elapsed_ms, cpu_ms=cpu_ms)

    def _kill(self) -> None:
        jail, self.jail = self.jail, None
        if jail is not None:
            with contextlib.suppress(Exception):
                jail.send({"op": "exit"}, timeout_s=0.5)
            jail.close()

    def close(self) -> None:
        """Kill the interpreter's jail (idempotent)."""
        with self._lock:
            self._kill()


class PersistentState(BaseModel):
    """A persistent session's state: its limits and its interpreter (started on the first call)."""

    model_config = {"arbitrary_types_allowed": True}

    limits: SessionLimits
    interpreter: PythonInterpreter
    closed: bool = False


class MathPythonPersistent(MathPython):
    """`tool.math_python` with one persistent interpreter per session (state kept between calls)."""

    rebuildable_state: ClassVar[bool] = False  # the interpreter lives in the replica that opened the session

    name: ClassVar[str] = PERSISTENT_NAME
    description: ClassVar[str] = (
        "Math problems solved with a sandboxed `python` tool whose interpreter persists for the session "
        "(variables survive between calls); graded like tool.math_python by the math verifier."
    )

    def tools(self) -> list[ToolSpec]:
        return [PERSISTENT_TOOL]

    def make_tasks(self, split: str, seed: int, count: int, level: str | None = None) -> list[Task]:
        tasks = super().make_tasks(split, seed, count, level)
        for task in tasks:
            task.verifier = PERSISTENT_NAME
            task.metadata["environment"] = PERSISTENT_NAME
        return tasks

    def user_task(self, prompt: str | list[dict[str, str]], reference: Any) -> Task:
        task = super().user_task(prompt, reference)
        task.verifier = PERSISTENT_NAME
        task.metadata["environment"] = PERSISTENT_NAME
        return task

    async def start(self, task: Task, limits: SessionLimits) -> PersistentState:  # type: ignore[override]
        global _interpreters
        with _interpreters_lock:
            if _interpreters >= MAX_INTERPRETERS:
                raise PoolFull(
                    f"{_interpreters} persistent interpreters are open, the most this process holds"
                )
            _interpreters += 1
        return PersistentState(limits=limits, interpreter=PythonInterpreter(self.backend, limits))

    async def call(self, state: PersistentState, name: str, arguments: dict[str, Any]) -> ToolResult:  # type: ignore[override]
        if name != "python":
            return ToolResult(content=f"Error: unknown tool {name!r}", status="error")
        code = arguments.get("code")
        if not isinstance(code, str):
            return ToolResult(content="Error: `code` must be a string", status="error")
        if len(code) > MAX_CODE_CHARS:
            return ToolResult(
                content=f"Error: the code is longer than {MAX_CODE_CHARS} characters", status="error"
            )
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(sandbox_executor(), state.interpreter.run, code)

    async def close(self, state: PersistentState) -> None:  # type: ignore[override]
        global _interpreters
        if state.closed:
            return
        state.closed = True
        with _interpreters_lock:
            _interpreters -= 1
        await asyncio.get_running_loop().run_in_executor(None, state.interpreter.close)


def open_interpreters() -> int:
    """Persistent interpreters (sessions of tool.math_python_persistent) open in this process."""
    return _interpreters


PERSISTENT = MathPythonPersistent()


def _persistent_examples() -> tuple[Example, ...]:
    return tuple(
        Example(example.response, example.reference, example.expect, note=example.note)
        for example in _gold_transcripts()
    )


register_tool_environment(PERSISTENT, examples=_persistent_examples(), deadline_s=30.0)
