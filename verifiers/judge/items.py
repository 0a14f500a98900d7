"""Rubric items and principles, and the checks that need no model: RE2 patterns and sandboxed Python checks.

An item is a criterion with points (negative points mark a pitfall: "met" means the response falls into it,
as in HealthBench). `llm` items go to the judge; `regex` items are RE2 patterns searched in the graded text
(linear time, so they run in the service process, as in `text.match`); `code` items are a Python function
`check(response: str) -> bool` written by the reference's author, run in the sandbox (nsjail by default)
with the response as a data file, never in the service process. A check that cannot decide (it raises, times
out, returns a non-bool) counts against the response: a positive item is not met, a pitfall is met.
"""

from __future__ import annotations

import ast
import asyncio
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from proctor.sandboxes.backends import resolve_backend
from proctor.sandboxes.job import Command, File, Job, RunLimits, RunVerdict
from proctor.verifiers.patterns import pattern_error, regex_matches

MAX_ITEMS = 100
CHECK_LIMITS = RunLimits(cpu_s=5.0, memory_mb=256, processes=8, output_bytes=64 * 1024)
MARKER = "proctor-item-met:"
_HARNESS = f"""\
import json
namespace = {{"__name__": "check"}}
with open("check.py", encoding="utf-8") as source:
    exec(compile(source.read(), "check.py", "exec"), namespace)
with open("response.txt", encoding="utf-8", errors="replace") as text:
    met = namespace["check"](text.read())
print()
print({MARKER!r} + (json.dumps(met) if isinstance(met, bool) else "null"))
"""


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


def regex_met(item: Item, text: str) -> bool:
    """Whether a regex item's pattern occurs in the text."""
    assert item.pattern is not None
    return regex_matches(text, [item.pattern], case_sensitive=item.case_sensitive, search=True)


def check_job(code: str, text: str) -> Job:
    """The sandbox job that runs a code item's check() on the response text."""
    return Job(
        files=[
            File(path="harness.py", content=_HARNESS),
            File(path="check.py", content=code),
            File(path="response.txt", content=text),
        ],
        commands=[Command(argv=["/usr/bin/python3", "-I", "harness.py"], limits=CHECK_LIMITS, name="check")],
        env={"PYTHONDONTWRITEBYTECODE": "1", "PYTHONIOENCODING": "utf-8"},
    )


def code_met_sync(item: Item, text: str) -> tuple[bool | None, str]:
    """(met, note) from running a code item in the sandbox; CheckError when the sandbox itself failed.

    met is True or False only when check() returned that bool. A check that raises, runs out of time or
    memory, prints past its output cap, exits early or returns anything but a bool has not decided: met is
    None, and the caller counts it against the response (`undecided_met`), so breaking a check never pays.
    """
    assert item.code is not None
    result = resolve_backend(None).run(check_job(item.code, text))
    command = result.commands[-1] if result.commands else None
    if command is None or command.verdict is RunVerdict.sandbox_error:
        raise CheckError(command.detail if command else "the sandbox ran nothing")
    if command.verdict is not RunVerdict.ok:
        return None, f"undecided: check ended with {command.verdict.value}: {command.stderr[-300:]}"
    last = command.stdout.rstrip("\n").rsplit("\n", 1)[-1]
    verdict = last[len(MARKER) :] if last.startswith(MARKER) else None
    if verdict == "true":
        return True, ""
    if verdict == "false":
        return False, ""
    if verdict is None:
        return None, "undecided: check printed no verdict"
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
