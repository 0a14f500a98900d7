"""Rubric items and principles, and the checks that need no model: RE2 patterns and sandboxed Python checks.

An item is a criterion with points (negative points mark a pitfall: "met" means the response falls into it,
as in HealthBench). `llm` items go to the judge; `regex` items are RE2 patterns searched in the graded text
(linear time, so they run in the service process, on a thread, as in `text.match`; a text past
MAX_REGEX_CHARS is not searched); `code` items are a Python function `check(response: str) -> bool` written by
the reference's author, run in the sandbox (nsjail by default) with the response as a data file, never in the
service process. A check that cannot decide (it raises, times out, returns a non-bool; a pattern over too long
a text) counts against the response: a positive item is not met, a pitfall is met.
"""

from __future__ import annotations

import ast
import asyncio
import base64
import hashlib
import hmac
import json
import secrets
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from proctor.sandboxes.backends import resolve_backend
from proctor.sandboxes.job import Command, File, Job, RunLimits, RunVerdict
from proctor.verifiers.patterns import MAX_REGEX_CHARS, pattern_error, regex_matches

MAX_ITEMS = 100
CHECK_LIMITS = RunLimits(cpu_s=5.0, memory_mb=256, processes=8, output_bytes=64 * 1024)
RESULT = ".proctor_check.json"


def forked_harness(result_path: str, key: str, valid: str, body: str) -> str:
    """A sandbox harness whose untrusted part never shares a process with the run's nonce.

    The trusted parent makes itself non-dumpable (prctl PR_SET_DUMPABLE 0: a child of the same uid can neither
    open /proc/<parent>/fd nor read its memory; the sandbox's seccomp forbids ptrace), then forks before it
    reads anything. The child closes stdin (where the nonce waits) first, runs `body` (the author's code,
    which may exec the model's text), and sends only `reply` as JSON on a pipe. The parent waits for the child,
    keeps `reply` only when it passes `valid` (an expression of `value`), THEN reads the nonce from stdin and
    writes {key: value, "mac": HMAC-SHA256(nonce, JSON of value)} to `result_path`, so neither the child nor
    anything it left running can forge the file, and a file the parent wrote names no nonce to copy. A child
    that dies or is killed ends the parent the same way; one that exits without replying leaves no file.

    What this does not give: code the author's function exec()s in its own process has that function's whole
    power, so it can choose the reply (patch json.dumps, write the pipe itself and exit). The harness keeps
    output and files from deciding anything; only the author can keep untrusted text out of their process
    (run it in a subprocess inside check()/grade() and judge what comes back)."""
    child = "".join(f"        {line}\n" if line else "\n" for line in body.splitlines())
    return f"""\
import ctypes, hashlib, hmac, json, math, os, signal, sys, traceback
if ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0) != 0:
    sys.exit("the harness could not make itself non-dumpable")
read_end, write_end = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(0)
    os.close(read_end)
    status = 1
    try:
{child}        os.write(write_end, json.dumps(reply).encode())
        status = 0
    except SystemExit as stop:
        status = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        if not isinstance(stop.code, int) and stop.code is not None:
            print(stop.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(status)
os.close(write_end)
_, status = os.waitpid(pid, 0)
if os.WIFSIGNALED(status):
    signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
    os.kill(os.getpid(), os.WTERMSIG(status))
    os._exit(1)
if os.WEXITSTATUS(status) != 0:
    os._exit(os.WEXITSTATUS(status))
os.set_blocking(read_end, False)
try:
    data = os.read(read_end, 65536)
except BlockingIOError:
    data = b""
if not data:
    os._exit(0)
try:
    value = json.loads(data)
except (ValueError, RecursionError):
    value = None
if not ({valid}):
    value = None
nonce = sys.stdin.read().encode()
text = json.dumps(value)
mac = hmac.new(nonce, text.encode(), hashlib.sha256).hexdigest()
with open(os.path.abspath({result_path!r}), "w", encoding="utf-8") as out:
    json.dump({{{key!r}: value, "mac": mac}}, out)
"""


# check()'s verdict comes back in a file the trusted harness writes after check() returned in a child process
# that never held the nonce (forked_harness); never on stdout, which check() (and, if it prints it, the
# response) writes. So a check that prints the response and exits decides nothing, and a check that exec()s
# the response cannot reach the nonce (though that code, running in check()'s process, can choose check()'s
# reply: see forked_harness).
_HARNESS = forked_harness(
    RESULT,
    "met",
    "type(value) is bool",
    """\
namespace = {"__name__": "check"}
with open("check.py", encoding="utf-8") as source:
    code = compile(source.read(), "check.py", "exec")
with open("response.txt", encoding="utf-8", errors="replace") as text:
    response = text.read()
exec(code, namespace)
met = namespace["check"](response)
reply = met if type(met) is bool else None""",
)


class Item(BaseModel):
    """One rubric item: a criterion worth `points`, checked by the judge, an RE2 pattern, or Python code."""

    model_config = ConfigDict(extra="forbid")

    criterion: str = Field(
        min_length=1, max_length=10_000, description="What the response must do (or avoid)."
    )
    points: float = Field(
        default=1.0,
        ge=-100,
        le=100,
        description="Worth when met; negative for a pitfall (met = fell into it).",
    )
    kind: Literal["llm", "regex", "code"] = Field(
        default="llm", description="llm: the judge decides; regex: an RE2 pattern; code: a sandboxed check()."
    )
    pattern: str | None = Field(
        default=None, description="regex items: an RE2 pattern searched in the response (after </think>)."
    )
    case_sensitive: bool = Field(default=False, description="regex items: match case-sensitively.")
    code: str | None = Field(
        default=None,
        max_length=100_000,
        description="code items: Python defining check(response: str) -> bool, run in the sandbox.",
    )

    @model_validator(mode="after")
    def _kind_fields(self) -> Item:
        if self.points == 0:
            raise ValueError("points must not be 0")
        if self.kind == "regex":
            if self.pattern is None:
                raise ValueError("a regex item needs a pattern")
            problem = pattern_error(self.pattern)
            if problem is not None:
                raise ValueError(f"pattern is not a valid RE2 pattern: {problem}")
        elif self.pattern is not None:
            raise ValueError("only regex items take a pattern")
        if self.kind == "code":
            if self.code is None:
                raise ValueError("a code item needs code")
            _check_defines_check(self.code)
        elif self.code is not None:
            raise ValueError("only code items take code")
        return self


def _check_defines_check(source: str) -> None:
    try:
        tree = ast.parse(source)  # parsed, never run, in the service process
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise ValueError(f"code is not valid Python: {type(exc).__name__}: {exc}") from None
    if not any(isinstance(node, ast.FunctionDef) and node.name == "check" for node in tree.body):
        raise ValueError("code must define a top-level function check(response) -> bool")


class CheckError(Exception):
    """The sandbox failed while running a code item (a machinery failure, not the response's fault)."""


def regex_met(item: Item, text: str) -> bool | None:
    """Whether a regex item's pattern occurs in the text; None (undecided, so it counts against the response)
    for a text past MAX_REGEX_CHARS, as text.match refuses to search one."""
    assert item.pattern is not None
    if len(text) > MAX_REGEX_CHARS:
        return None
    return regex_matches(text, [item.pattern], case_sensitive=item.case_sensitive, search=True)


def check_job(code: str, text: str, nonce: str = "") -> Job:
    """The sandbox job that runs a code item's check() on the response text; the harness (forked_harness)
    writes {"met", "mac"} to RESULT after check() returned in a child that never held the nonce (the nonce
    reaches the parent on stdin)."""
    return Job(
        files=[
            File(path="harness.py", content=_HARNESS),
            File(path="check.py", content=code),
            File(path="response.txt", content=text),
        ],
        commands=[
            Command(
                argv=["/usr/bin/python3", "-I", "harness.py"], stdin=nonce, limits=CHECK_LIMITS, name="check"
            )
        ],
        env={"PYTHONDONTWRITEBYTECODE": "1", "PYTHONIOENCODING": "utf-8"},
        fetch=[RESULT],
    )


def result_document(files: dict[str, str], path: str, nonce: str, key: str) -> dict[str, Any] | None:
    """The result file a forked_harness wrote after the untrusted function returned, or None: it must be
    there, be a JSON object and carry the HMAC-SHA256 of its `key` value under this run's nonce (so nothing
    the function printed, or wrote without the nonce, counts). Shared with the python graders of
    `openai.grader`."""
    raw = files.get(path)
    if raw is None:
        return None
    try:
        document = json.loads(base64.b64decode(raw))
    except (ValueError, TypeError, RecursionError):
        return None
    if not isinstance(document, dict) or key not in document or not isinstance(document.get("mac"), str):
        return None
    expected = hmac.new(nonce.encode(), json.dumps(document[key]).encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(document["mac"].encode(), expected.encode()):
        return None
    return document


def code_met_sync(item: Item, text: str) -> tuple[bool | None, str]:
    """(met, note) from running a code item in the sandbox; CheckError when the sandbox itself failed.

    met is True or False only when check() returned that bool (read from the harness's result file with this
    run's nonce, never from stdout). A check that raises, runs out of time or memory, prints past its output
    cap, exits early or returns anything but a bool has not decided: met is None, and the caller counts it
    against the response (`undecided_met`), so breaking a check never pays.
    """
    assert item.code is not None
    nonce = secrets.token_hex(16)
    result = resolve_backend(None).run(check_job(item.code, text, nonce))
    command = result.commands[0] if result.commands else None
    failed = next((c for c in result.commands if c.verdict is RunVerdict.sandbox_error), None)
    if command is None or failed is not None:
        raise CheckError(failed.detail if failed else "the sandbox ran nothing")
    if command.verdict is not RunVerdict.ok:
        return None, f"undecided: check ended with {command.verdict.value}: {command.stderr[-300:]}"
    document = result_document(result.files, RESULT, nonce, "met")
    if document is None:
        return None, "undecided: check() did not return (it exited first)"
    verdict = document.get("met")
    if verdict is True or verdict is False:
        return verdict, ""
    return None, "undecided: check() returned something other than True or False"


def undecided_met(item: Item) -> float:
    """How an item whose check could not decide counts: against the response, whichever way that is.

    A positive item is not met (no points); a pitfall (negative points) is met (its penalty applies). So a
    response that makes a check raise or time out never scores more than one the check could judge.
    """
    return 1.0 if item.points < 0 else 0.0


async def code_met(item: Item, text: str) -> tuple[bool | None, str]:
    """code_met_sync on a thread, so the event loop keeps serving while the sandbox runs."""
    return await asyncio.to_thread(code_met_sync, item, text)
