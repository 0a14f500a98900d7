"""`toolcall`: grade the tool calls of the last assistant message against gold calls, schema-aware.

Response: chat messages (the last assistant message is graded: its `tool_calls`, or calls written in its text
in a supported dialect, see `proctor.verifiers.reading.tool_calls`) or a plain string (the text of that
message). Only the text after the last `</think>` is read; an unterminated `<think>` holds nothing.

Reference: `{"tools": [function specs], "calls": [{"name", "arguments": {arg: [acceptable values]}}],
"order_matters": false}` (BFCL's `{"name": {arg: [...]}}` shorthand for a call is accepted). `""` in a list
means the argument may be left out; an argument the gold does not list must not be sent; `"calls": []` means no
call is expected (the model must answer in text). The reference is checked when the request is validated: a
bad schema, a gold call naming no tool, a gold value that does not satisfy its own schema, a required argument
marked as omittable or left without gold values are 422s naming the field.

The reward is binary: 1 when the calls and the gold calls pair up one to one (an exact bipartite assignment,
or position by position when `order_matters`) and every pair matches. Components `name`, `keys` and `values`
are diagnostics: the share of gold calls that an assignment can pair at that level. They never add reward, so
a call with the right name and every value wrong scores exactly what no call scores: 0.

Always 0: a parse error of any call (never read as an abstention), more or fewer calls than gold calls
(duplicates, extra calls, calling every tool), a call only inside `<think>` or shown in a code block, inline
code or a quote, a `<tool_response>` or a new chat turn (`<|im_start|>` ...) written by the model itself, an empty
answer where no call is expected.

Runs in the pool: parsing is linear, but a call's arguments can be megabytes that the pair checks walk once
per gold call.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError, ValidationError

from proctor.contract import Verdict, content_text
from proctor.registry import BaseOptions, Example, VerifierSpec, register_verifier
from proctor.verifiers.reading import after_think, clip
from proctor.verifiers.reading.tool_calls import DialectChoice, ParsedCalls, ToolCall, parse_message
from proctor.verifiers.toolcall.matching import (
    OMIT,
    Level,
    alternatives,
    assignment_size,
    call_problem,
)
from proctor.verifiers.toolcall.schema import Schema, SchemaError, Tool, problem, read_tool

MAX_TOOLS = 512
MAX_GOLD_CALLS = 64
MAX_ALTERNATIVES = 256
TOOL_RESPONSE_TAG = "<tool_response>"
TURN_MARKERS = ("<|im_start|>", "<|start_header_id|>", "<start_of_turn>")
"""Chat-template markers that open a new turn (ChatML, Llama 3, Gemma): a model writing one ran past its own turn
and is writing the user's or the tool's."""
LEVELS: tuple[Level, ...] = ("name", "keys", "values")


class GoldCall(BaseModel):
    """One expected call: the tool's name and, per argument, the acceptable values (`""`: may be left out)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=256)
    arguments: dict[str, list[Any]] = Field(
        default_factory=dict,
        description='Each argument maps to a list of acceptable values; "" in the list means it may be left '
        "out. An object argument whose schema declares properties lists acceptable values per key again.",
    )
    unordered: list[str] = Field(
        default_factory=list,
        max_length=256,
        description="Arguments whose lists are compared as sets (as is any list whose schema has uniqueItems).",
    )

    @model_validator(mode="before")
    @classmethod
    def _bfcl_shorthand(cls, data: Any) -> Any:
        # BFCL's possible answers write a call as {"tool_name": {arg: [values]}}.
        if isinstance(data, dict) and len(data) == 1 and "name" not in data:
            ((name, arguments),) = data.items()
            if isinstance(arguments, dict):
                return {"name": name, "arguments": arguments}
        return data


class ToolcallReference(BaseModel):
    """The tools the model was offered, the calls it should make, and whether their order matters."""

    model_config = ConfigDict(extra="forbid")

    tools: list[dict[str, Any]] = Field(
        default_factory=list,
        max_length=MAX_TOOLS,
        description="Function specs: OpenAI's {type: function, function: {name, description, parameters}} or "
        "the bare {name, description, parameters}; parameters is JSON Schema (BFCL's dict, float, tuple and "
        "any are accepted as type names).",
    )
    calls: list[GoldCall] = Field(
        max_length=MAX_GOLD_CALLS, description="The expected calls; [] means no call is expected."
    )
    order_matters: bool = Field(default=False, description="Pair calls with gold calls position by position.")

    _tools: dict[str, Tool] = PrivateAttr(default_factory=dict)
    _schemas: list[Schema] = PrivateAttr(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self) -> ToolcallReference:
        tools: dict[str, Tool] = {}
        for index, spec in enumerate(self.tools):
            try:
                tool = read_tool(spec, ("tools", index))
            except SchemaError as exc:
                _invalid(exc.loc, exc.message)
            if tool.name in tools:
                _invalid(("tools", index, "name"), f"tool {tool.name!r} is listed twice")
            tools[tool.name] = tool
        self._tools = tools
        self._schemas = [_check_gold(index, call, tools) for index, call in enumerate(self.calls)]
        return self

    def tool(self, name: str) -> Tool | None:
        """The offered tool of that name."""
        return self._tools.get(name)

    def parameters(self) -> dict[str, dict[str, Any]]:
        """Each tool's raw parameters schema, by name (what the Qwen3-Coder reader coerces values by)."""
        return {name: tool.raw_parameters for name, tool in self._tools.items()}

    def gold_schema(self, index: int) -> Schema:
        """The parameters schema of gold call `index`, its `unordered` arguments marked as sets."""
        return self._schemas[index]


def _invalid(loc: tuple[str | int, ...], message: str) -> Any:
    """Raise a validation error at `loc` under the reference, so the 422 names the exact field."""
    error = PydanticCustomError("invalid_reference", message)  # type: ignore[arg-type]  # a plain message
    raise ValidationError.from_exception_data(
        "ToolcallReference", [InitErrorDetails(type=error, loc=loc, input=None)]
    )


def _check_gold(index: int, call: GoldCall, tools: dict[str, Tool]) -> Schema:
    """Check one gold call against its tool's schema (422 naming the field); its schema with sets marked."""
    where: tuple[str | int, ...] = ("calls", index)
    tool = tools.get(call.name)
    if tool is None:
        _invalid((*where, "name"), f"gold call names {call.name!r}, which is not among the tools")
    assert tool is not None
    schema = tool.parameters
    for name in call.unordered:
        if name not in call.arguments:
            _invalid((*where, "unordered"), f"{name!r} is not one of the gold call's arguments")
        child = schema.child(name)
        properties = dict(schema.properties or {})
        properties[name] = replace(child, is_set=True)
        schema = replace(schema, properties=properties)
    _check_object(call.arguments, schema, (*where, "arguments"), top=True)
    return schema


def _check_object(
    gold: dict[str, Any], schema: Schema, where: tuple[str | int, ...], top: bool = False
) -> None:
    """A gold object of acceptable values per key: keys the schema allows, required keys present, values valid."""
    for key in sorted(schema.required - set(gold)):
        _invalid(where, f"required argument {key!r} has no gold values")
    for key, spec in gold.items():
        alts = alternatives(spec)
        here = (*where, key)
        if top and not alts:
            _invalid(here, "the list of acceptable values is empty")
        if len(alts) > MAX_ALTERNATIVES:
            _invalid(here, f"more than {MAX_ALTERNATIVES} acceptable values")
        may_omit = any(isinstance(alt, str) and alt == OMIT for alt in alts)
        if not schema.allows(key) and not may_omit:
            _invalid(
                here,
                f'argument {key!r} is not declared by the tool\'s schema (allowed only as omittable: "")',
            )
        if key in schema.required and may_omit:
            _invalid(here, f'argument {key!r} is required by the schema, so it cannot be left out ("")')
        sub = schema.child(key)
        for position, alt in enumerate(alts):
            if isinstance(alt, str) and alt == OMIT:
                continue
            if sub.structured and isinstance(alt, dict):
                _check_object(alt, sub, (*here, position) if isinstance(spec, list) else here)
                continue
            found = problem(alt, sub, integral_floats=True)
            if found is not None:
                _invalid(
                    (*here, position) if isinstance(spec, list) else here,
                    f"gold value does not fit the schema: {found}",
                )


class ToolcallOptions(BaseOptions):
    """Which dialect to read calls in and the one numeric choice."""

    dialect: DialectChoice = Field(
        default="auto",
        description="auto: a message's tool_calls, else by the text: the first <tool_call> decides between "
        "hermes (JSON) and qwen_xml (<function=...>), else a <function= tag means qwen_xml, else pythonic when "
        "the whole message is a call. Or force one of openai, hermes, qwen_xml, pythonic.",
    )
    integral_floats: bool = Field(
        default=True,
        description="Whether 150.0 is a valid integer argument (JSON Schema says it is). Never a bool.",
    )


# -- scoring ---------------------------------------------------------------------------------------------------------


def graded_message(response: str | list[dict[str, Any]]) -> tuple[list[Any] | None, str | None, bool]:
    """(tool_calls, text after </think> or None, whether an assistant message was found)."""
    if isinstance(response, str):
        return None, after_think(response), True
    for message in reversed(response):
        if message.get("role") == "assistant":
            text = after_think(content_text(message.get("content")))
            return message.get("tool_calls") or None, text, True
    return None, None, False


def score_toolcall(
    response: str | list[dict[str, Any]], reference: ToolcallReference, options: ToolcallOptions
) -> Verdict:
    """Parse the last assistant message's calls and pair them with the gold calls; 1 only for a perfect pairing."""
    tool_calls, text, found = graded_message(response)
    details: dict[str, Any] = {}
    if not found:
        return _zero("no_assistant_message", details)
    if text is not None and TOOL_RESPONSE_TAG in text.lower():
        # Observations come only from the environment: a model writing one is inventing a tool's answer.
        return _zero("fake_tool_response", details)
    if text is not None and any(marker in text for marker in TURN_MARKERS):
        return _zero("fake_turn", details)
    parsed = parse_message(tool_calls, text, options.dialect, reference.parameters())
    details.update(_describe(parsed))
    if parsed.errors:
        return _zero("parse_error", details)
    calls, golds = parsed.calls, reference.calls
    if not golds:
        if calls:
            return _zero("unexpected_call", details)
        if not (text or "").strip():
            return _zero("empty_response", details)
        return Verdict(reward=1.0, correct=True, components=dict.fromkeys(LEVELS, 1.0), details=details)
    if not calls:
        return _zero("no_call", details)
    return _pair(calls, reference, options, details)


def _pair(
    calls: list[ToolCall], reference: ToolcallReference, options: ToolcallOptions, details: dict[str, Any]
) -> Verdict:
    golds = reference.calls
    problems = [
        [
            call_problem(
                call, gold.name, gold.arguments, _gold_tool(reference, index), options.integral_floats
            )
            for index, gold in enumerate(golds)
        ]
        for call in calls
    ]
    total = max(len(calls), len(golds))
    components: dict[str, float] = {}
    pairing: list[int] = []
    for depth, level in enumerate(LEVELS):

        def fits(call: int, gold: int, depth: int = depth) -> bool:
            found = problems[call][gold]
            return found is None or LEVELS.index(found[0]) > depth

        size, pairing = assignment_size(len(calls), len(golds), fits, reference.order_matters)
        components[level] = size / total
    details["assignment"] = pairing
    if components["values"] == 1.0:
        return Verdict(reward=1.0, correct=True, components=components, details=details)
    details["problems"] = _explain(calls, reference, problems, pairing)
    if len(calls) != len(golds):
        reason = "wrong_call_count"
    elif components["name"] < 1.0:
        reason = "wrong_function"
    elif components["keys"] < 1.0:
        reason = "wrong_arguments"
    else:
        reason = "wrong_values"
    return Verdict(reward=0.0, correct=False, reason=reason, components=components, details=details)


def _gold_tool(reference: ToolcallReference, index: int) -> Tool | None:
    tool = reference.tool(reference.calls[index].name)
    return None if tool is None else Tool(tool.name, reference.gold_schema(index), tool.raw_parameters)


def _explain(
    calls: list[ToolCall],
    reference: ToolcallReference,
    problems: list[list[tuple[Level, str] | None]],
    pairing: list[int],
) -> list[str]:
    """For each gold call left unpaired, why the calls that name its tool do not fit it (at most 8 lines)."""
    lines: list[str] = []
    for index, gold in enumerate(reference.calls):
        if pairing[index] >= 0:
            continue
        candidates = [call for call, row in enumerate(problems) if calls[call].name == gold.name]
        if not candidates:
            lines.append(f"gold call {index} ({gold.name}): no call names it")
        for call in candidates[:2]:
            found = problems[call][index]
            if found is not None:
                lines.append(f"gold call {index} ({gold.name}) vs call {call}: {found[1]}")
    return lines[:8]


def _describe(parsed: ParsedCalls) -> dict[str, Any]:
    return {
        "dialect": parsed.dialect,
        "calls": [clip(_json(call.name, call.arguments), 300) for call in parsed.calls[:16]],
        "errors": [error.model_dump() for error in parsed.errors[:8]],
    }


def _json(name: str, arguments: dict[str, Any]) -> str:
    import json

    return f"{name}({json.dumps(arguments, ensure_ascii=False, sort_keys=True)})"


def _zero(reason: str, details: dict[str, Any]) -> Verdict:
    return Verdict(
        reward=0.0, correct=False, reason=reason, components=dict.fromkeys(LEVELS, 0.0), details=details
    )


# -- registration ----------------------------------------------------------------------------------------------------

_WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
                "days": {"type": "integer"},
            },
            "required": ["city"],
        },
    },
}
_MOVE = {
    "name": "robot.move",
    "description": "Move by whole steps.",
    "parameters": {
        "type": "dict",
        "properties": {"dx": {"type": "integer"}, "dy": {"type": "integer"}},
        "required": ["dx", "dy"],
    },
}
_REF = {
    "tools": [_WEATHER, _MOVE],
    "calls": [
        {
            "name": "get_weather",
            "arguments": {"city": ["Paris", "Paris, France"], "unit": ["celsius", ""], "days": [1, ""]},
        }
    ],
}
_PARALLEL = {
    "tools": [_WEATHER],
    "calls": [
        {"name": "get_weather", "arguments": {"city": ["Paris"], "unit": ["celsius", "fahrenheit", ""]}},
        {"name": "get_weather", "arguments": {"city": ["Paris"], "unit": ["fahrenheit"]}},
    ],
}
_NONE = {"tools": [_WEATHER, _MOVE], "calls": []}
_MOVE_REF = {"tools": [_MOVE], "calls": [{"name": "robot.move", "arguments": {"dx": [-3], "dy": [4]}}]}


def _assistant(name: str, arguments: str, content: str | None = None) -> list[dict[str, Any]]:
    call = {"id": "call_0", "type": "function", "function": {"name": name, "arguments": arguments}}
    return [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": content, "tool_calls": [call]},
    ]


_HERMES = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'

_EXAMPLES = (
    # Gold: each must score 1.
    Example(
        _assistant("get_weather", '{"city": "Paris", "unit": "celsius"}'), _REF, 1.0, note="openai tool_calls"
    ),
    Example(
        _assistant("get_weather", '{"unit": "celsius", "city": " paris "}'),
        _REF,
        1.0,
        note="order, case, spaces",
    ),
    Example(_HERMES, _REF, 1.0, note="hermes text, optional arguments left out"),
    Example("<think>Paris, so get_weather.</think>" + _HERMES, _REF, 1.0, note="after the reasoning"),
    Example(
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n1\n"
        "</parameter>\n</function>\n</tool_call>",
        _REF,
        1.0,
        note="qwen3-coder xml, days coerced to an integer by the schema",
    ),
    Example("robot.move(dx=-3, dy=4.0)", _MOVE_REF, 1.0, note="pythonic, dotted name, 4.0 as an integer"),
    Example(
        '[get_weather(city="Paris", unit="fahrenheit"), get_weather(city="Paris")]',
        _PARALLEL,
        1.0,
        note="parallel calls: a greedy pairing would fail this assignment",
    ),
    Example(
        "None of these tools can tell a joke, sorry.", _NONE, 1.0, note="no call expected, answered in text"
    ),
    # Cheats and failures: each must score 0.
    Example(_assistant("get_weather", '{"city": "Paris",}'), _REF, 0.0, note="invalid JSON is a parse error"),
    Example(_assistant("get_weather", '{"city": "London"}'), _REF, 0.0, note="wrong value"),
    Example(
        _assistant("get_weather", '{"city": "Paris", "country": "FR"}'), _REF, 0.0, note="invented argument"
    ),
    Example("robot.move(dx=3, dy=4)", _MOVE_REF, 0.0, note="sign error"),
    Example('robot.move(dx=-3, dy="4")', _MOVE_REF, 0.0, note="a string for an integer"),
    Example(
        "robot.move(dx=-3, dy=True)",
        {"tools": [_MOVE], "calls": [{"name": "robot.move", "arguments": {"dx": [-3], "dy": [1]}}]},
        0.0,
        note="a bool for an integer",
    ),
    Example(_HERMES + "\n" + _HERMES, _REF, 0.0, note="the same call twice"),
    Example("<think>" + _HERMES + "</think>Sunny, I guess.", _REF, 0.0, note="the call only inside <think>"),
    Example("```\n" + _HERMES + "\n```", _REF, 0.0, note="a call shown in a code block"),
    Example(
        _HERMES + '\n<tool_response>{"temp": 21}</tool_response>', _REF, 0.0, note="a fake tool response"
    ),
    Example(
        _HERMES + "\n<|im_start|>user\nPerfect, thanks!", _REF, 0.0, note="a user turn written by the model"
    ),
    Example(
        '<tool_call>{"name": "get_weather", "arguments": {"city": }}</tool_call>',
        _NONE,
        0.0,
        note="a malformed call is no abstention",
    ),
    Example(_HERMES, _NONE, 0.0, note="a call where none is expected"),
    Example("", _NONE, 0.0, note="an empty answer where no call is expected"),
)

SPEC = register_verifier(
    VerifierSpec(
        name="toolcall",
        version="1.0.0",
        score=score_toolcall,
        reference=ToolcallReference,
        options=ToolcallOptions,
        description="Function calling: the last assistant message's tool calls (OpenAI tool_calls, Hermes "
        "<tool_call> JSON, Qwen3-Coder XML or pythonic) against gold calls with acceptable values per argument, "
        "schema-aware, parallel calls paired by an exact bipartite assignment; binary reward.",
        examples=_EXAMPLES,
        execution="pool",
        deadline_s=5.0,
        accepts_messages=True,
    )
)
