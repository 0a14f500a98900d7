"""The tool-environment protocol: what every `tool.<name>` environment guarantees to sessions and to replay.

A tool environment is a task maker whose tasks are solved over several turns: the policy (run by the trainer,
never by Proctor) writes assistant messages, some of them calling the environment's tools; Proctor runs the
calls and returns observations; at the end the transcript is scored. The contract, method by method:

- `name` (`"tool.<env>"`) and `version` identify the environment; the replay verifier of the same name scores
  its transcripts (`register_tool_environment` registers both).
- `tools()` returns the tools' OpenAI function specs (`ToolSpec`), the same list on every call. Their JSON
  Schemas are what `GET /v1/environments` lists and what a session hands the policy.
- `make_tasks(split, seed, count, level)` returns bundled tasks: the same arguments always give identical
  tasks (seeded; splits are disjoint). `user_task(prompt, reference)` turns a user's own task (a prompt
  string or chat messages, and the environment's reference) into a `Task`, raising `RequestError(422)` naming
  the field when the reference is not one this environment can grade.
- `async start(task, limits)` opens the per-session state (an interpreter, a database copy ...). Its initial
  messages are the task's prompt; the tools go beside them. It may raise `ToolMachineryError` when the
  machinery cannot start (the session then ends with a non-ok status, never a verdict).
- `async call(state, name, arguments)` runs one call of a tool from `tools()`, with `arguments` already
  parsed (a JSON object). Limits come from the environment and the session's `SessionLimits`, never from the
  arguments. It returns a `ToolResult`: the observation text (at most `limits.max_observation_chars`;
  `truncated` says it was cut), `status` (`ok`, `error` when the model's call failed: bad arguments, its code
  raised; `timeout` when the model's own code ran out of time) and `elapsed_ms`. The model's mistakes are
  results, never exceptions. A machinery failure (a sandbox that could not run, was killed from outside) raises
  `ToolMachineryError`; sessions turn it into `status: sandbox_error` for the whole session. No result reveals
  whether the answer is right, and nothing is rewarded for calling a tool.
- `async close(state)` frees everything `start` and `call` acquired (processes, files); it is idempotent and
  never raises. Sessions call it on answer, limit, delete and expiry.
- `async score(reference, transcript)` is a pure function of the task's reference and the exact transcript
  (chat messages as exchanged: the prompt, assistant messages, tool observations). Only the model's own words
  count: the assistant text after the last tool observation (`final_answer_text`); text such as
  `<tool_response>` written by the model is plain assistant text, never an observation. It returns a `Verdict`
  (`status: ok` for a policy outcome; a non-ok status only when the grading machinery failed). The live
  session and `POST /v1/score {verifier: "tool.<env>", response: transcript, reference}` call the same method,
  so both give the same `Score`.
- `reply(state, message)`: an environment with a simulated user returns the user's next message after an
  assistant message without tool calls (the episode goes on); the default `None` ends the episode with
  `end_reason: "answer"`.
- `terminal(state)`: whether the environment itself ended the episode (`env_terminal`); default False.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from proctor.contract import ChatMessage, RequestError, Verdict, content_text, request_error_from
from proctor.environments.registry import (
    CUSTOM_DIFFICULTY,
    EnvConfig,
    EnvironmentSpec,
    Task,
    get_environment,
    register_environment,
)
from proctor.registry import BaseOptions, Example, VerifierSpec

ToolStatus = Literal["ok", "error", "timeout"]

EndReason = Literal[
    "answer",
    "no_tool_call",
    "max_turns",
    "max_tool_calls",
    "max_tool_errors",
    "tool_budget",
    "observation_limit",
    "env_terminal",
    "sandbox_error",
    "verifier_error",
    "timeout",
    "expired",
    "closed",
]
"""Why a session ended. Policy outcomes (scored, `status: ok`): `answer` (an assistant message without a tool
call), `no_tool_call` (finished by the caller without a final answer after the last observation),
`max_turns`, `max_tool_calls`, `max_tool_errors`, `tool_budget` (tool CPU), `observation_limit` (total
observation size), `env_terminal`. Machinery failures (non-ok status, masked): `sandbox_error`,
`verifier_error`, `timeout`. Abandoned: `expired` (its time-to-live passed), `closed` (deleted before it ended)."""

POLICY_END_REASONS: frozenset[str] = frozenset(
    {
        "answer",
        "no_tool_call",
        "max_turns",
        "max_tool_calls",
        "max_tool_errors",
        "tool_budget",
        "observation_limit",
        "env_terminal",
    }
)


class ToolSpec(BaseModel):
    """One tool as OpenAI describes a function: name, description and a JSON Schema for its arguments."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=256)
    description: str = ""
    parameters: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object", "properties": {}, "required": []},
        description="JSON Schema of the arguments object.",
    )

    def openai(self) -> dict[str, Any]:
        """The spec in OpenAI's `tools` shape: `{"type": "function", "function": {...}}`."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


class ToolResult(BaseModel):
    """What one tool call returned: the observation text and how the call went (never the answer's grade)."""

    model_config = ConfigDict(extra="forbid")

    content: str
    status: ToolStatus = "ok"
    elapsed_ms: float = Field(default=0.0, ge=0.0)
    truncated: bool = False
    cpu_ms: float = Field(
        default=0.0, ge=0.0, description="CPU time the call used (counts toward tool_cpu_s)."
    )


class ToolMachineryError(RuntimeError):
    """The machinery behind a tool failed (not the model's doing): the session ends with a non-ok status."""

    def __init__(self, message: str, status: Literal["sandbox_error", "timeout"] = "sandbox_error"):
        super().__init__(message)
        self.status = status


class SessionLimits(BaseModel):
    """Per-session limits; an environment sets the defaults, a session's options may only lower the turn cap
    and the time-to-live. None of them ever comes from a tool call's arguments."""

    model_config = ConfigDict(extra="forbid")

    max_turns: int = Field(default=16, ge=1, le=256, description="Assistant messages per session.")
    max_tool_calls: int = Field(default=32, ge=0, le=1024, description="Tool calls per session.")
    max_calls_per_turn: int = Field(default=8, ge=1, le=128, description="Tool calls in one message.")
    max_tool_errors: int = Field(
        default=8, ge=1, le=1024, description="Failed calls (parse errors, unknown tools, bad arguments)."
    )
    tool_cpu_s: float = Field(default=60.0, gt=0, le=3600, description="Tool CPU seconds per session.")
    call_cpu_s: float = Field(default=5.0, gt=0, le=600, description="CPU seconds for one call.")
    call_wall_s: float = Field(default=10.0, gt=0, le=600, description="Wall seconds for one call.")
    call_memory_mb: int = Field(default=512, ge=16, le=65536, description="Memory of one call's process.")
    max_observation_chars: int = Field(
        default=8_000, ge=64, le=1_000_000, description="One observation's text; longer is cut."
    )
    max_total_observation_chars: int = Field(
        default=200_000, ge=64, le=10_000_000, description="All observations of a session together."
    )
    ttl_s: float = Field(default=600.0, gt=0, le=86_400, description="Idle time before the session expires.")


class UserTask(BaseModel):
    """A task the user brings: a prompt (a string, or chat messages) and the environment's reference."""

    model_config = ConfigDict(extra="forbid")

    prompt: str | list[dict[str, str]]
    reference: Any


class ToolEnvironment(ABC):
    """Base class of every tool environment; see the module docstring for what each method guarantees."""

    name: ClassVar[str]
    version: ClassVar[str]
    description: ClassVar[str] = ""
    levels: ClassVar[tuple[str, ...]] = ()
    default_level: ClassVar[str | None] = None
    reference_model: ClassVar[Any] = Any
    """The reference type (a pydantic model or a type) the replay verifier validates `reference` with."""
    rebuildable_state: ClassVar[bool] = False
    """True when `start` alone rebuilds everything `call` needs (no state changes from one call to the next), so
    with replicas sharing Redis any replica can step the session; False (an interpreter, a database the tools
    write) keeps the session on the replica that opened it."""

    def limits(self) -> SessionLimits:
        """The environment's default session limits."""
        return SessionLimits()

    @abstractmethod
    def tools(self) -> list[ToolSpec]:
        """The tools the model may call."""

    @abstractmethod
    def make_tasks(self, split: str, seed: int, count: int, level: str | None = None) -> list[Task]:
        """`count` bundled tasks; identical for identical arguments."""

    def user_task(self, prompt: str | list[dict[str, str]], reference: Any) -> Task:
        """A user's own task; the reference is validated with `reference_model` (422 naming the field)."""
        try:
            parsed = TypeAdapter(self.reference_model).validate_python(reference)
        except ValidationError as exc:
            raise request_error_from(exc, "task.reference") from None
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
        if not messages:
            raise RequestError(422, "invalid task.prompt: no messages", "task.prompt")
        dumped = parsed.model_dump(mode="json") if isinstance(parsed, BaseModel) else parsed
        return Task(
            prompt=messages,
            reference=dumped,
            verifier=self.name,
            metadata={"environment": self.name, "version": self.version, "source": "user"},
        )

    @abstractmethod
    async def start(self, task: Task, limits: SessionLimits) -> Any:
        """Open the session's state."""

    @abstractmethod
    async def call(self, state: Any, name: str, arguments: dict[str, Any]) -> ToolResult:
        """Run one tool call (limits from the environment); the model's mistakes are results, not exceptions."""

    async def close(self, state: Any) -> None:  # noqa: B027 - stateless environments have nothing to free
        """Free what the session holds; idempotent, never raises."""

    @abstractmethod
    async def score(self, reference: Any, transcript: list[ChatMessage]) -> Verdict:
        """Grade the transcript against the reference: a pure function of both."""

    def reply(self, state: Any, message: ChatMessage) -> dict[str, Any] | None:
        """The simulated user's next message after an answer, or None to end the episode (`answer`)."""
        return None

    def terminal(self, state: Any) -> bool:
        """Whether the environment itself ended the episode."""
        return False

    def describe(self) -> dict[str, Any]:
        """What `GET /v1/environments` adds for a tool environment: its tools and default limits."""
        return {
            "tools": [tool.openai() for tool in self.tools()],
            "limits": self.limits().model_dump(mode="json"),
        }


# -- helpers every environment shares ---------------------------------------------------------------------


def final_messages(transcript: list[ChatMessage]) -> list[ChatMessage]:
    """The assistant messages after the last observation.

    A `tool` message is an observation; so is a `user` message after the first assistant turn (an
    environment's reply).
    """
    last = -1
    seen_assistant = False
    for index, message in enumerate(transcript):
        if message.role == "assistant":
            seen_assistant = True
        elif message.role == "tool" or (message.role == "user" and seen_assistant):
            last = index
    return [m for m in transcript[last + 1 :] if m.role == "assistant"]


def final_answer_text(transcript: list[ChatMessage]) -> str:
    """The model's own final words: the text of the assistant messages after the last tool observation
    (`final_messages`). Assistant text is taken verbatim: tags the model wrote (`<tool_response>`,
    `<information>`) are its own words, never evidence. Empty when the transcript ends on an observation.
    """
    parts = [content_text(m.content) for m in final_messages(transcript)]
    return "\n".join(part for part in parts if part)


def final_answer(transcript: list[ChatMessage], tools: list[ToolSpec] | None = None) -> str | None:
    """The final answer, or None when the model gave none: `final_answer_text`, unless there is no assistant
    message after the last observation or the last assistant message calls a tool (its `tool_calls`, or a
    call written in its text in any dialect, readable or not). An answer written inside a call that never ran
    is not an answer."""
    from proctor.verifiers.reading.tool_calls import parse_message

    if not transcript or transcript[-1].role != "assistant":
        return None
    last = transcript[-1]
    schemas = {tool.name: tool.parameters for tool in tools or []}
    raw_calls = [call.model_dump(exclude_none=True) for call in last.tool_calls or []]
    parsed = parse_message(raw_calls, content_text(last.content), "auto", schemas)
    if parsed.calls or parsed.errors:
        return None
    return final_answer_text(transcript)


def clip_observation(text: str, limit: int) -> tuple[str, bool]:
    """Cut an observation to `limit` characters, saying so at the cut; returns (text, truncated)."""
    if len(text) <= limit:
        return text, False
    marker = f"\n[... output truncated: {len(text) - limit} more characters]"
    keep = max(0, limit - len(marker))
    return text[:keep] + marker, True


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
    "null": (type(None),),
}


def argument_problem(spec: ToolSpec, arguments: dict[str, Any]) -> str | None:
    """Why `arguments` do not fit the tool's top-level schema (required, unknown and primitive types), or None.

    The check the session runs before `call`: a failure is an `error` observation for the model.
    """
    schema = spec.parameters
    properties: dict[str, Any] = schema.get("properties", {}) or {}
    for key in schema.get("required", []) or []:
        if key not in arguments:
            return f"missing required argument {key!r}"
    if schema.get("additionalProperties", True) is False:
        for key in arguments:
            if key not in properties:
                return f"unknown argument {key!r}; {spec.name} takes {', '.join(properties) or 'none'}"
    for key, value in arguments.items():
        wanted = (properties.get(key) or {}).get("type")
        if not isinstance(wanted, str) or wanted not in _JSON_TYPES:
            continue
        ok = isinstance(value, _JSON_TYPES[wanted])
        if wanted in ("integer", "number") and isinstance(value, bool):
            ok = False
        if wanted == "number" and isinstance(value, float) and not math.isfinite(value):
            ok = False
        if not ok:
            return f"argument {key!r} must be of type {wanted}"
    return None


# -- registration -----------------------------------------------------------------------------------------

_tool_environments: dict[str, ToolEnvironment] = {}


def register_tool_environment(
    env: ToolEnvironment,
    *,
    examples: tuple[Example, ...] = (),
    deadline_s: float = 30.0,
) -> ToolEnvironment:
    """Register `env` three ways: as a tool environment (sessions), in the environment registry (`kind:
    "tool"`, task making, listed by `GET /v1/environments` with its tools' schemas) and as the replay verifier
    of the same name (`POST /v1/score {verifier: env.name, response: transcript, reference}`).

    `examples` are the gold (expect 1) and cheat / trivial-policy (expect 0) transcripts the registry's
    example tests score.
    """
    existing = _tool_environments.get(env.name)
    if existing is not None and type(existing) is not type(env):
        raise ValueError(f"tool environment {env.name!r} is already registered")
    _tool_environments[env.name] = env

    async def score_transcript(response: Any, reference: Any, options: BaseOptions) -> Verdict:
        if isinstance(response, str):  # a bare string is one assistant message with no tool call
            response = [{"role": "assistant", "content": response}]
        transcript = [m if isinstance(m, ChatMessage) else ChatMessage.model_validate(m) for m in response]
        return await env.score(reference, transcript)

    def make(config: Any, split: str, seed: int, count: int, label: str) -> list[Task]:
        return env.make_tasks(split, seed, count, None if label == CUSTOM_DIFFICULTY else label)

    verifier = VerifierSpec(
        name=env.name,
        version=env.version,
        score=score_transcript,
        reference=env.reference_model,
        description=f"Replays a {env.name} session transcript: {env.description}",
        examples=examples,
        execution="inline",
        deadline_s=deadline_s,
        accepts_messages=True,
    )
    register_environment(
        EnvironmentSpec(
            name=env.name,
            version=env.version,
            config=EnvConfig,
            make=make,
            levels={level: {} for level in env.levels},
            default_level=env.default_level,
            description=env.description,
            verifier=env.name,
            kind="tool",
            extra=env.describe(),
        ),
        verifier,
    )
    return env


def get_tool_environment(name: str) -> ToolEnvironment:
    """The tool environment registered under `name`; RequestError(404) when there is none."""
    env = _tool_environments.get(name)
    if env is None:
        try:
            get_environment(name)  # imports the module that registers it
        except RequestError as exc:
            raise RequestError(exc.status, exc.message, "environment") from None
        env = _tool_environments.get(name)
    if env is None:
        known = ", ".join(sorted(_tool_environments)) or "none"
        raise RequestError(
            404, f"{name!r} is not a tool environment; tool environments: {known}", "environment"
        )
    return env
