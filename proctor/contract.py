"""The scoring contract: one request shape and one result shape, used in-process, over HTTP and by adapters."""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)


def _not_a_bool(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError("Input should be a valid integer, not a boolean")
    return value


JsonInt = Annotated[int, BeforeValidator(_not_a_bool)]
"""An integer as JSON Schema's "integer" means it: 3 or 3.0, never `true`/`false` (pydantic reads a bool as 0/1)."""

RequestId = str | JsonInt | None
"""A request's id: a string or an integer (never a bool), echoed back in its Score."""

MAX_NESTING = 200
"""How deep lists and objects may nest in a request's reference, options or chat response (the value itself is
level 1). Deeper data is a 422 naming the field: recursive code further on (pydantic, JSON encoders) would
otherwise fail on it as a server error or a masked verifier_error."""


class Status(str, Enum):
    """Whether a score is a true verdict (`ok`) or which part of the machinery failed."""

    ok = "ok"
    timeout = "timeout"
    sandbox_error = "sandbox_error"
    verifier_error = "verifier_error"
    judge_error = "judge_error"


class ToolCallFunction(BaseModel):
    """The function an assistant tool call names, with its arguments as the model wrote them."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=256)
    # OpenAI sends a JSON string, kept exactly as written (a parser reads it; nothing here repairs it). An
    # object is accepted too (Hugging Face chat templates write one) and read as already-parsed arguments.
    arguments: str | dict[str, Any]


class ToolCall(BaseModel):
    """One entry of an assistant message's `tool_calls`, in OpenAI's shape."""

    model_config = ConfigDict(extra="forbid")

    id: str | None = Field(default=None, max_length=256)
    type: Literal["function"] = "function"
    function: ToolCallFunction


class ChatMessage(BaseModel):
    """One message of an OpenAI-style chat transcript; tool calls and tool results are typed."""

    model_config = ConfigDict(extra="allow")

    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str | list[dict[str, Any]] | None = None
    tool_calls: list[ToolCall] | None = Field(
        default=None, description="Assistant messages only: the calls the model made."
    )
    tool_call_id: str | None = Field(
        default=None, max_length=256, description="Tool messages only: the call this result answers."
    )
    name: str | None = Field(default=None, max_length=256, description="A tool's or participant's name.")

    # Field validators (not one model validator) so a 422 names the field itself; `role` is validated first.
    @field_validator("tool_calls")
    @classmethod
    def _calls_from_the_assistant(cls, value: list[ToolCall] | None, info: ValidationInfo) -> Any:
        if value is not None and info.data.get("role") != "assistant":
            raise ValueError(f"only assistant messages carry tool_calls, not {info.data.get('role')!r} ones")
        return value

    @field_validator("tool_call_id")
    @classmethod
    def _results_from_a_tool(cls, value: str | None, info: ValidationInfo) -> Any:
        if value is not None and info.data.get("role") != "tool":
            raise ValueError(f"only tool messages answer a call, not {info.data.get('role')!r} ones")
        return value


class ScoreRequest(BaseModel):
    """Ask one verifier to score one response against a reference."""

    model_config = ConfigDict(extra="forbid")

    verifier: str = Field(
        min_length=1, max_length=200, description="Registered verifier name, e.g. 'text.match'."
    )
    response: str | list[ChatMessage] = Field(description="The model's response, or a chat transcript.")
    reference: Any = Field(
        default=None,
        description="Verifier-specific reference (gold answer, tests, ...): see the verifier's reference_schema. "
        f"Lists and objects may nest at most {MAX_NESTING} levels.",
    )
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="Verifier-specific overrides: see the verifier's options_schema. "
        f"Lists and objects may nest at most {MAX_NESTING} levels.",
    )
    id: RequestId = Field(default=None, description="Echoed back in the Score.")


class Score(BaseModel):
    """The result of scoring one response; `reward` is a true verdict only when `status == ok`."""

    model_config = ConfigDict(extra="forbid")

    id: RequestId = None
    verifier: str = Field(description="name@version of the verifier that produced this score.")
    status: Status
    reward: float = Field(ge=0.0, le=1.0)
    correct: bool | None = None
    reason: str | None = Field(default=None, description="Short machine code for why reward < 1.")
    components: dict[str, float] = Field(default_factory=dict)
    details: dict[str, Any] = Field(default_factory=dict)
    elapsed_ms: float = 0.0
    cached: bool = False


class ErrorBody(BaseModel):
    """Why a request (or one batch item) could not be scored at all."""

    status: int = Field(
        description="HTTP-style status: 404 unknown verifier, 413 too large, 422 invalid field."
    )
    message: str
    field: str | None = Field(
        default=None, description="Dotted path of the offending field, when there is one."
    )


class ItemError(BaseModel):
    """A batch slot whose item was rejected; the rest of the batch is still scored."""

    id: RequestId = None
    error: ErrorBody


class BatchRequest(BaseModel):
    """Several score requests; results come back one per item, in order."""

    model_config = ConfigDict(extra="forbid")

    items: list[dict[str, Any]] = Field(description="ScoreRequest objects; each is validated on its own.")


class BatchResponse(BaseModel):
    """One Score or ItemError per request item, in request order."""

    results: list[Score | ItemError]


class Verdict(BaseModel):
    """What a verifier function returns; the engine turns it into a Score."""

    model_config = ConfigDict(extra="forbid")

    reward: float = Field(ge=0.0, le=1.0)
    correct: bool | None = None
    reason: str | None = None
    components: dict[str, float] = Field(default_factory=dict)
    details: dict[str, Any] = Field(default_factory=dict)
    status: Status = Status.ok

    @classmethod
    def right(cls, **details: Any) -> Verdict:
        """A fully correct response."""
        return cls(reward=1.0, correct=True, details=details)

    @classmethod
    def wrong(cls, reason: str, **details: Any) -> Verdict:
        """An incorrect response, with the reason code."""
        return cls(reward=0.0, correct=False, reason=reason, details=details)

    @classmethod
    def failure(cls, status: Status, reason: str, **details: Any) -> Verdict:
        """The machinery failed: no verdict on the response."""
        if status is Status.ok:
            raise ValueError("a failure verdict needs a non-ok status")
        return cls(reward=0.0, correct=None, reason=reason, status=status, details=details)


class RequestError(Exception):
    """A request that cannot be scored: unknown verifier (404), invalid field (422), too large (413)."""

    def __init__(self, status: int, message: str, field: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field

    def body(self) -> ErrorBody:
        """The JSON error body for this failure."""
        return ErrorBody(status=self.status, message=self.message, field=self.field)


def nested_deeper_than(value: Any, limit: int) -> bool:
    """Whether lists, tuples and dicts nest more than `limit` levels deep in value (value itself is level 1).

    Iterative and linear in the size of the value, so a 100,000-deep value costs no Python stack. A container
    met again (shared, or a cycle in data built in code) is walked again only from a deeper level, so a cycle
    stops once it passes the limit.
    """
    if not isinstance(value, (dict, list, tuple)):
        return False
    deepest: dict[int, int] = {}
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        container, depth = stack.pop()
        if depth > limit:
            return True
        if deepest.get(id(container), 0) >= depth:
            continue
        deepest[id(container)] = depth
        children = container.values() if isinstance(container, dict) else container
        for child in children:
            if isinstance(child, (dict, list, tuple)):
                stack.append((child, depth + 1))
    return False


def check_nesting(value: Any, field: str, limit: int = MAX_NESTING) -> None:
    """Raise RequestError(422) naming `field` when value nests lists and objects more than `limit` deep."""
    if nested_deeper_than(value, limit):
        raise RequestError(
            422, f"invalid {field}: lists and objects nested more than {limit} levels deep", field=field
        )


_BUILTIN_TAGS = frozenset({"str", "int", "float", "bool", "dict", "list", "none", "tuple", "bytes"})


def _model_names() -> set[str]:
    """Names of every pydantic model class defined so far: pydantic tags union branches with them."""
    names, stack = set(), [BaseModel]
    while stack:
        for sub in stack.pop().__subclasses__():
            names.add(sub.__name__)
            stack.append(sub)
    return names


def _is_union_tag(part: object, model_names: set[str]) -> bool:
    return isinstance(part, str) and (part in _BUILTIN_TAGS or "[" in part or part in model_names)


def request_error_from(exc: ValidationError, prefix: str | None = None) -> RequestError:
    """A 422 RequestError naming the field of the most specific validation error.

    pydantic puts union branch tags ('str', 'list[ChatMessage]', a model's class name) into error locations;
    they mean nothing to a client, so they are dropped. Of several errors (one per union branch), the deepest
    location is the most useful one to report.
    """
    best_path: list[str] = []
    best_msg = "invalid value"
    model_names = _model_names()
    for error in exc.errors(include_url=False):
        path = [str(part) for part in error["loc"] if not _is_union_tag(part, model_names)]
        if len(path) > len(best_path) or best_msg == "invalid value":
            best_path, best_msg = path, error["msg"]
    parts = [prefix, *best_path] if prefix else best_path
    field = ".".join(parts) or None
    return RequestError(422, f"invalid {field or 'request'}: {best_msg}", field=field)


def response_text(response: str | list[ChatMessage]) -> str:
    """The text a single-turn verifier grades: the string itself, or the last assistant message's content."""
    if isinstance(response, str):
        return response
    for message in reversed(response):
        if message.role == "assistant":
            return content_text(message.content)
    return ""


def content_text(content: str | list[dict[str, Any]] | None) -> str:
    """Flatten an OpenAI message content (string or list of parts) into plain text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(str(part.get("text", "")) for part in content if part.get("type", "text") == "text")
