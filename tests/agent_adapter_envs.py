"""Test-only tool environments for the agent-adapter tests (loaded by the server with PROCTOR_PLUGINS).

- `tool.test_echo`: tool `echo(text)` answers its text; tool `crash()` fails the machinery
  (ToolMachineryError: the session ends `sandbox_error`, which every adapter must mask). The answer is right when
  the final assistant text equals the reference's `answer` and at least one echo ran.
- `tool.test_user`: a scripted user (`reply`) who says each of the reference's `user_turns` in order after each
  assistant message without a tool call; the answer is right when the last assistant text equals `answer`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proctor.contract import ChatMessage, Verdict, content_text
from proctor.environments.registry import Task
from proctor.environments.tools.base import (
    SessionLimits,
    ToolEnvironment,
    ToolMachineryError,
    ToolResult,
    ToolSpec,
    final_answer_text,
    register_tool_environment,
)


def _task(name: str, index: int, reference: dict[str, Any], prompt: str) -> Task:
    return Task(
        prompt=[{"role": "user", "content": prompt}],
        reference=reference,
        verifier=name,
        metadata={"environment": name, "version": "1", "index": index},
    )


class Echo(ToolEnvironment):
    """Echo tool and a crash tool."""

    name = "tool.test_echo"
    version = "1"
    description = "test-only: echo, crash"

    def tools(self) -> list[ToolSpec]:
        """echo and crash."""
        return [
            ToolSpec(
                name="echo",
                description="Echo the text.",
                parameters={
                    "type": "object",
                    "properties": {"text": {"type": "string", "description": "What to echo."}},
                    "required": ["text"],
                },
            ),
            ToolSpec(name="crash", description="Fail the machinery."),
        ]

    def make_tasks(self, split: str, seed: int, count: int, level: str | None = None) -> list[Task]:
        """Task i: answer `w<seed>-<i>` after echoing it."""
        return [
            _task(self.name, i, {"answer": f"w{seed}-{i}"}, f"Echo w{seed}-{i}, then answer it.")
            for i in range(count)
        ]

    async def start(self, task: Task, limits: SessionLimits) -> dict[str, Any]:
        """No state."""
        return {}

    async def call(self, state: Any, name: str, arguments: dict[str, Any]) -> ToolResult:
        """echo returns its text; crash is a machinery failure."""
        if name == "crash":
            raise ToolMachineryError("the test sandbox crashed")
        return ToolResult(content=str(arguments.get("text", "")))

    async def score(self, reference: Any, transcript: list[ChatMessage]) -> Verdict:
        """Right when an echo ran and the final text is the answer."""
        echoed = any(m.role == "tool" for m in transcript)
        final = final_answer_text(transcript).strip()
        if echoed and final == reference["answer"]:
            return Verdict.right()
        return Verdict.wrong("wrong_answer")


@dataclass
class UserState:
    """Which user turn comes next."""

    turns: list[str]
    said: int = 0


class ScriptedUser(ToolEnvironment):
    """A user who replies from a script."""

    name = "tool.test_user"
    version = "1"
    description = "test-only: a scripted user"

    def tools(self) -> list[ToolSpec]:
        """One harmless tool."""
        return [ToolSpec(name="noop", description="Does nothing.")]

    def make_tasks(self, split: str, seed: int, count: int, level: str | None = None) -> list[Task]:
        """Task i: two user turns, then the answer `done-<i>`."""
        return [
            _task(
                self.name,
                i,
                {"answer": f"done-{i}", "user_turns": [f"first {i}", f"second {i}"]},
                f"Talk to the user, then say done-{i}.",
            )
            for i in range(count)
        ]

    async def start(self, task: Task, limits: SessionLimits) -> UserState:
        """The script."""
        return UserState(list(task.reference["user_turns"]))

    async def call(self, state: Any, name: str, arguments: dict[str, Any]) -> ToolResult:
        """noop."""
        return ToolResult(content="ok")

    def reply(self, state: UserState, message: ChatMessage) -> dict[str, Any] | None:
        """The next scripted line, or None when the script is over."""
        if state.said >= len(state.turns):
            return None
        state.said += 1
        return {"role": "user", "content": state.turns[state.said - 1]}

    async def score(self, reference: Any, transcript: list[ChatMessage]) -> Verdict:
        """Right when every user turn was heard and the last assistant text is the answer."""
        heard = sum(1 for m in transcript if m.role == "user") - 1
        last = next((m for m in reversed(transcript) if m.role == "assistant"), None)
        text = content_text(last.content).strip() if last is not None else ""
        if heard >= len(reference["user_turns"]) and text == reference["answer"]:
            return Verdict.right()
        return Verdict.wrong("wrong_answer")


register_tool_environment(Echo())
register_tool_environment(ScriptedUser())
