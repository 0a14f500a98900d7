"""Tool calls in a model's output: one parser for the `toolcall` verifier, sessions and environments.

Four dialects:

- `openai`: the `tool_calls` field of an assistant message, `[{id, type: "function", function: {name,
  arguments: <JSON string>}}]` (an object for `arguments` is read as already parsed);
- `hermes`: Hermes / Qwen2.5 / Qwen3 text, `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, several
  per message;
- `qwen_xml`: Qwen3-Coder text, `<function=name><parameter=p>value</parameter></function>`, usually inside
  `<tool_call>` tags; values are text by design and are coerced by the tool's JSON schema when one is given;
- `pythonic`: `name(a=1, b="x")` or `[f(a=1), g(b=2)]` (Llama 3.2 / BFCL style), read with `ast.parse`, never
  evaluated; only literals are argument values, and it counts only when the whole message is the call.

`auto` (the default) reads a message's `tool_calls` when it has any; otherwise its text, where the first
`<tool_call>` tag decides (a body opening with `<function=` is `qwen_xml`, anything else `hermes`); with no
`<tool_call>` tag a `<function=` tag means `qwen_xml`; otherwise the text is `pythonic` when the whole of it
parses as calls; otherwise it holds no call. Under `auto`, text that opens like a call but is not one as a whole
is an error only when it opens with an offered tool's name (`search(query=` cut short); prose that opens with
notation such as `f(2) = 5, so ...` or `gcd(12, 18) = 6` is text.

Nothing is repaired and nothing is dropped: a call that cannot be read is an entry in `errors` (a
`parse_error` for sessions, reward 0 for the verifier), never an abstention. JSON arguments must be an object;
NaN and Infinity, duplicate keys and nesting past MAX_ARGUMENT_DEPTH are errors; string values are never
coerced into numbers. In text, prose may surround the calls, but a call block that lies in quoted text (a fenced
code block, inline code, a Markdown quote line) is a `quoted_call` error, and so is such code opening a pythonic
call of an offered tool (when `tools` are given): a call shown as an example is neither a call nor an abstention.

Every scan is linear: `str.find` loops and one-pass bracket counting, no regular expressions, no recursion on
the model's text (`ast.parse` and `json.loads` run only after a linear depth check has bounded their input).
"""

from __future__ import annotations

import ast
import json
import math
from collections.abc import Container, Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Dialect = Literal["openai", "hermes", "qwen_xml", "pythonic"]
DialectChoice = Literal["auto", "openai", "hermes", "qwen_xml", "pythonic"]

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
FUNCTION_OPEN = "<function="
FUNCTION_CLOSE = "</function>"
PARAMETER_OPEN = "<parameter="
PARAMETER_CLOSE = "</parameter>"

MAX_ARGUMENT_DEPTH = 64
"""How deep lists and objects may nest in one call's arguments (the arguments object is level 1)."""
MAX_CALLS = 128
"""More calls than this in one message is an error (`too_many_calls`): no task asks for that many at once."""
MAX_NAME_CHARS = 256
"""A tool name longer than this is an error."""
MAX_PYTHONIC_CHARS = 200_000
"""Pythonic calls longer than this are an error (`too_long`) before `ast.parse`, which costs microseconds per
character and far more memory than the text (1 MB of `1,` takes seconds); JSON dialects parse in C and have no cap."""


class ToolCall(BaseModel):
    """One call read from a message: the tool's name and its arguments as a JSON object."""

    model_config = ConfigDict(extra="forbid")

    name: str
    arguments: dict[str, Any]
    id: str | None = None


class ParseError(BaseModel):
    """A call that could not be read: which dialect, a short code, a message, and which call (0-based)."""

    model_config = ConfigDict(extra="forbid")

    dialect: Dialect
    code: str = Field(description="invalid_json, not_an_object, non_finite_number, duplicate_key, ...")
    message: str
    index: int | None = None


class ParsedCalls(BaseModel):
    """The calls read from one message, the dialect they were read in (None: no call) and every failure."""

    model_config = ConfigDict(extra="forbid")

    calls: list[ToolCall] = Field(default_factory=list)
    dialect: Dialect | None = None
    errors: list[ParseError] = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every call was read (no errors)."""
        return not self.errors


# -- JSON without repairs ---------------------------------------------------------------------------------


class _Refused(ValueError):
    """A JSON document that parses but is refused (NaN, duplicate keys); carries the error code."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


def _no_constants(name: str) -> Any:
    raise _Refused("non_finite_number", f"{name} is not a JSON number")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _Refused("duplicate_key", f"key {key!r} appears twice in one object")
        result[key] = value
    return result


def bracket_depth(text: str) -> int:
    """The deepest nesting of [] {} () in text, skipping JSON/Python string literals; one linear pass."""
    depth = deepest = 0
    index, size = 0, len(text)
    while index < size:
        char = text[index]
        if char == '"' or char == "'":
            # Skip to the closing quote of the same kind, honouring backslash escapes.
            index += 1
            while index < size and text[index] != char:
                index += 2 if text[index] == "\\" else 1
        elif char in "[{(":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]})":
            depth -= 1
        index += 1
    return deepest


def load_json(text: str) -> tuple[Any, tuple[str, str] | None]:
    """Parse JSON strictly: (value, None), or (None, (code, message)); never repairs, never raises."""
    if bracket_depth(text) > MAX_ARGUMENT_DEPTH:
        return None, ("too_deep", f"lists and objects nest more than {MAX_ARGUMENT_DEPTH} levels")
    try:
        return json.loads(text, parse_constant=_no_constants, object_pairs_hook=_unique_keys), None
    except _Refused as exc:
        return None, (exc.code, str(exc))
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, an integer past Python's digit limit
        return None, ("invalid_json", _short(str(exc)))


def _short(message: str, limit: int = 200) -> str:
    return message if len(message) <= limit else message[:limit] + "..."


def _argument_problem(arguments: Any) -> tuple[str, str] | None:
    """Why parsed arguments are not usable: not an object, a NaN/Infinity inside, or nested too deep."""
    if not isinstance(arguments, dict):
        return "not_an_object", f"arguments must be a JSON object, not {type(arguments).__name__}"
    stack: list[tuple[Any, int]] = [(arguments, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_ARGUMENT_DEPTH:
            return "too_deep", f"lists and objects nest more than {MAX_ARGUMENT_DEPTH} levels"
        if isinstance(value, float) and not math.isfinite(value):
            return "non_finite_number", "NaN and Infinity are not JSON numbers"
        if isinstance(value, dict):
            if not all(isinstance(key, str) for key in value):
                return "not_an_object", "object keys must be strings"
            stack.extend((child, depth + 1) for child in value.values())
        elif isinstance(value, list):
            stack.extend((child, depth + 1) for child in value)
        elif not (value is None or isinstance(value, (str, int, float, bool))):
            return "not_json", f"{type(value).__name__} is not a JSON value"
    return None


def _name_problem(name: Any) -> str | None:
    if not isinstance(name, str) or not name.strip():
        return "the call has no tool name"
    if len(name) > MAX_NAME_CHARS:
        return f"the tool name is longer than {MAX_NAME_CHARS} characters"
    if any(char.isspace() or char in _NOT_IN_NAMES for char in name):
        return f"{_short(name, 40)!r} is not a tool name (spaces, quotes, brackets or tags in it)"
    return None


_NOT_IN_NAMES = frozenset("<>()[]{}\"',=`")


# -- OpenAI tool_calls ------------------------------------------------------------------------------------


def parse_openai(tool_calls: Sequence[Any]) -> ParsedCalls:
    """Read an assistant message's `tool_calls` (OpenAI's shape); arguments must be a JSON object."""
    result = ParsedCalls(dialect="openai")
    if len(tool_calls) > MAX_CALLS:
        return _too_many(result, "openai")
    for index, entry in enumerate(tool_calls):
        function = entry.get("function") if isinstance(entry, Mapping) else None
        if not isinstance(function, Mapping):
            result.errors.append(
                ParseError(dialect="openai", code="bad_call", message="no function", index=index)
            )
            continue
        name, raw = function.get("name"), function.get("arguments")
        problem = _name_problem(name)
        if problem is not None:
            result.errors.append(ParseError(dialect="openai", code="bad_name", message=problem, index=index))
            continue
        if isinstance(raw, str):
            arguments, failure = load_json(raw)
        else:
            arguments, failure = raw, None
        failure = failure or _argument_problem(arguments)
        if failure is not None:
            result.errors.append(
                ParseError(dialect="openai", code=failure[0], message=failure[1], index=index)
            )
            continue
        call_id = entry.get("id")
        result.calls.append(
            ToolCall(name=name, arguments=arguments, id=call_id if isinstance(call_id, str) else None)
        )
    return result


def _too_many(result: ParsedCalls, dialect: Dialect) -> ParsedCalls:
    result.errors.append(
        ParseError(
            dialect=dialect, code="too_many_calls", message=f"more than {MAX_CALLS} calls in one message"
        )
    )
    return result


# -- text: <tool_call> blocks -------------------------------------------------------------------------------


def _blocks(text: str, open_tag: str, close_tag: str) -> tuple[list[str], list[int], str | None]:
    """The bodies of open_tag...close_tag blocks, where each began, and the first non-blank gap (or None).

    A last block left open runs to the end (a generation stopped at its stop string, the closing tag). The gap
    is text between blocks or after the last one: prose to a caller reading a message, a structural error to
    one reading the inside of a block.
    """
    bodies: list[str] = []
    starts: list[int] = []
    position = text.find(open_tag)
    stray: str | None = None
    while position >= 0 and len(bodies) <= MAX_CALLS:
        start = position + len(open_tag)
        starts.append(position)
        end = text.find(close_tag, start)
        if end < 0:
            bodies.append(text[start:])
            break
        bodies.append(text[start:end])
        after = end + len(close_tag)
        following = text.find(open_tag, after)
        gap = text[after:] if following < 0 else text[after:following]
        if gap.strip() and stray is None:
            stray = _short(gap.strip(), 80)
        position = following
    return bodies, starts, stray


def quoted(text: str, positions: Sequence[int]) -> list[bool]:
    """For each position (ascending), whether it lies in quoted text: a fenced code block, inline code
    (an odd number of backticks before it on its line) or a Markdown quote line (`>`). One pass over text."""
    flags: list[bool] = []
    in_fence = False
    line_start = 0
    for position in positions:
        # Advance line by line up to the line holding `position`, toggling fences on the lines passed.
        while True:
            line_end = text.find("\n", line_start)
            if line_end < 0 or line_end >= position:
                break
            if text[line_start:line_end].lstrip().startswith(("```", "~~~")):
                in_fence = not in_fence
            line_start = line_end + 1
        prefix = text[line_start:position]
        flags.append(in_fence or prefix.count("`") % 2 == 1 or prefix.lstrip().startswith(">"))
    return flags


def _quoted_error(text: str, starts: list[int], dialect: Dialect) -> ParseError | None:
    for index, flag in enumerate(quoted(text, starts)):
        if flag:
            return ParseError(
                dialect=dialect,
                code="quoted_call",
                message="a call inside a code block, inline code or a quote is not a call",
                index=index,
            )
    return None


def parse_hermes(text: str) -> ParsedCalls:
    """Read `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks (Hermes, Qwen2.5, Qwen3)."""
    result = ParsedCalls(dialect="hermes")
    bodies, starts, _ = _blocks(text, TOOL_CALL_OPEN, TOOL_CALL_CLOSE)
    if len(bodies) > MAX_CALLS:
        return _too_many(result, "hermes")
    problem = _quoted_error(text, starts, "hermes")
    if problem is not None:
        result.errors.append(problem)
        return result
    for index, body in enumerate(bodies):
        value, failure = load_json(body.strip())
        if failure is None and not isinstance(value, dict):
            failure = ("not_an_object", "a <tool_call> must hold one JSON object")
        if failure is None:
            call, failure = _hermes_call(value)
            if call is not None:
                result.calls.append(call)
        if failure is not None:
            result.errors.append(
                ParseError(dialect="hermes", code=failure[0], message=failure[1], index=index)
            )
    return result


def _hermes_call(value: dict[str, Any]) -> tuple[ToolCall | None, tuple[str, str] | None]:
    """One call from a <tool_call> object; `parameters` is accepted in place of `arguments` (Llama 3.1)."""
    name = value.get("name")
    problem = _name_problem(name)
    if problem is not None:
        return None, ("bad_name", problem)
    if "arguments" in value and "parameters" in value:
        return None, ("bad_call", "both arguments and parameters")
    unknown = set(value) - {"name", "arguments", "parameters", "id"}
    if unknown:
        return None, ("bad_call", f"unknown keys in the call: {sorted(unknown)}")
    arguments = value.get("arguments", value.get("parameters", {}))
    failure = _argument_problem(arguments)
    if failure is not None:
        return None, failure
    return ToolCall(name=name, arguments=arguments), None


# -- text: Qwen3-Coder XML ----------------------------------------------------------------------------------


def parse_qwen_xml(text: str, tools: Mapping[str, Mapping[str, Any]] | None = None) -> ParsedCalls:
    """Read `<function=name><parameter=p>value</parameter></function>` blocks, inside <tool_call> or bare.

    `tools` maps a tool name to its parameters' JSON schema: each value is coerced by its property's type
    (integer, number, boolean, null, object and array values read as JSON); a value of a tool or parameter
    without a schema, or of type string, stays text. One newline on each side of a value is dropped. Inside a
    block only whitespace may surround the function and its parameters (`stray_text`).
    """
    result = ParsedCalls(dialect="qwen_xml")
    wrapped = TOOL_CALL_OPEN in text
    tag = TOOL_CALL_OPEN if wrapped else FUNCTION_OPEN
    outer, starts, _ = _blocks(text, tag, TOOL_CALL_CLOSE if wrapped else FUNCTION_CLOSE)
    if len(outer) > MAX_CALLS:
        return _too_many(result, "qwen_xml")
    problem = _quoted_error(text, starts, "qwen_xml")
    if problem is not None:
        result.errors.append(problem)
        return result
    for index, body in enumerate(outer):
        if wrapped:
            inner, inner_starts, gap = _blocks(body, FUNCTION_OPEN, FUNCTION_CLOSE)
            if len(inner) != 1 or body[: inner_starts[0]].strip() or gap is not None:
                result.errors.append(
                    ParseError(
                        dialect="qwen_xml",
                        code="bad_call",
                        message="a <tool_call> must hold one <function=...> block and nothing else",
                        index=index,
                    )
                )
                continue
            body = inner[0]
        call, failure = _xml_call(body, tools)
        if call is not None:
            result.calls.append(call)
        if failure is not None:
            result.errors.append(
                ParseError(dialect="qwen_xml", code=failure[0], message=failure[1], index=index)
            )
    return result


def _xml_call(
    function: str, tools: Mapping[str, Mapping[str, Any]] | None
) -> tuple[ToolCall | None, tuple[str, str] | None]:
    """One call from the text after `<function=` (up to its `</function>`)."""
    close = function.find(">")
    if close < 0:
        return None, ("bad_call", "unterminated <function= tag")
    name = function[:close].strip()
    problem = _name_problem(name)
    if problem is not None:
        return None, ("bad_name", problem)
    body = function[close + 1 :]
    schema = (tools or {}).get(name)
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    params, starts, gap = _blocks(body, PARAMETER_OPEN, PARAMETER_CLOSE)
    before = body[: starts[0]] if starts else body
    if before.strip() or gap is not None:
        return None, (
            "stray_text",
            f"text in the function body: {_short((before.strip() or gap or ''), 80)!r}",
        )
    arguments: dict[str, Any] = {}
    for param in params:
        end = param.find(">")
        if end < 0:
            return None, ("bad_call", "unterminated <parameter= tag")
        key = param[:end].strip()
        if not key:
            return None, ("bad_call", "a parameter without a name")
        if key in arguments:
            return None, ("duplicate_key", f"parameter {key!r} appears twice")
        raw = _strip_one_newline(param[end + 1 :])
        prop = properties.get(key) if isinstance(properties, Mapping) else None
        value, failure = coerce_text(raw, prop)
        if failure is not None:
            return None, (failure[0], f"parameter {key!r}: {failure[1]}")
        arguments[key] = value
    failure = _argument_problem(arguments)
    if failure is not None:
        return None, failure
    return ToolCall(name=name, arguments=arguments), None


def _strip_one_newline(value: str) -> str:
    if value.startswith("\n"):
        value = value[1:]
    if value.endswith("\n"):
        value = value[:-1]
    return value


_TEXT_TYPES = {"string", "str"}
_JSON_TYPES = {
    "integer",
    "int",
    "number",
    "float",
    "boolean",
    "bool",
    "null",
    "object",
    "dict",
    "array",
    "tuple",
    "list",
}


def coerce_text(raw: str, schema: Any) -> tuple[Any, tuple[str, str] | None]:
    """A Qwen3-Coder parameter's text read as its schema's type (JSON for anything but a string)."""
    types = schema.get("type") if isinstance(schema, Mapping) else None
    listed = [types] if isinstance(types, str) else types if isinstance(types, list) else []
    names = {name.lower() for name in listed if isinstance(name, str)}
    if not names & _JSON_TYPES or names & _TEXT_TYPES:
        return raw, None  # text by design: a string parameter, or no schema to say otherwise
    value, failure = load_json(raw.strip())
    if failure is not None:
        return None, ("parameter_type", f"{_short(raw, 40)!r} is not a JSON {'/'.join(sorted(names))}")
    return value, None


# -- text: pythonic calls -----------------------------------------------------------------------------------


def parse_pythonic(text: str) -> ParsedCalls:
    """Read `name(a=1)` or `[f(a=1), g(b=2)]` when that is the whole text; literals only, never evaluated.

    Text that does not open like a call (`looks_like_pythonic_call`) holds no call; call-shaped text that does not parse, or holds anything but keyword arguments with
    literal values, is an error, never an abstention.
    """
    stripped = text.strip()
    if not looks_like_pythonic_call(stripped):
        return ParsedCalls()
    result = ParsedCalls(dialect="pythonic")
    if len(stripped) > MAX_PYTHONIC_CHARS:
        return _failed(result, "too_long", f"pythonic calls longer than {MAX_PYTHONIC_CHARS} characters")
    if bracket_depth(stripped) > MAX_ARGUMENT_DEPTH + 2:
        return _failed(result, "too_deep", f"lists and objects nest more than {MAX_ARGUMENT_DEPTH} levels")
    try:
        tree = ast.parse(stripped, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return _failed(result, "invalid_python", _short(str(exc)))
    body = tree.body
    nodes = body.elts if isinstance(body, ast.List) else [body]
    if not nodes or not all(isinstance(node, ast.Call) for node in nodes):
        return _failed(result, "bad_call", "the message must be one call or a list of calls")
    if len(nodes) > MAX_CALLS:
        return _too_many(result, "pythonic")
    for index, node in enumerate(nodes):
        assert isinstance(node, ast.Call)
        call, problem = _pythonic_call(node)
        if problem is not None:
            result.errors.append(
                ParseError(dialect="pythonic", code=problem[0], message=problem[1], index=index)
            )
        elif call is not None:
            result.calls.append(call)
    return result


def _failed(result: ParsedCalls, code: str, message: str) -> ParsedCalls:
    result.errors.append(ParseError(dialect=result.dialect or "pythonic", code=code, message=message))
    return result


def looks_like_pythonic_call(text: str) -> bool:
    """Whether stripped text opens like pythonic calls: an optional `[`, then a dotted name right before `(`.

    The end is not checked, so a call cut short (`f(a=1`) is a malformed call, not prose; a name followed
    by a space (`Paris (France)`) is prose.
    """
    return leading_call_name(text) is not None


def leading_call_name(text: str) -> str | None:
    """The dotted name a pythonic call in stripped text opens with (`[f(` or `f(`), or None."""
    index = len(text) - len(text[1:].lstrip()) if text.startswith("[") else 0
    start = index
    while index < len(text) and (text[index].isalnum() or text[index] in "_."):
        index += 1
    if index == start or not (text[start].isalpha() or text[start] == "_"):
        return None
    return text[start:index] if text.startswith("(", index) else None


def quoted_pythonic_call(text: str, names: Container[str]) -> bool:
    """Whether code in the text (a fenced block's line, an inline code span, a quote line) opens a pythonic call
    of one of the named tools: a call shown as code is neither a call nor an answer. One pass over the text."""
    in_fence = False
    for line in text.split("\n"):
        stripped = line.strip()
        if stripped.startswith(("```", "~~~")):
            in_fence = not in_fence
            continue
        if in_fence:
            pieces = [stripped]
        else:
            pieces = line.split("`")[1::2]  # the inside of each inline code span
            if stripped.startswith(">"):
                pieces.append(stripped.lstrip("> "))
        for piece in pieces:
            name = leading_call_name(piece.strip())
            if name is not None and name in names:
                return True
    return False


def _dotted_name(node: ast.expr) -> str | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def _pythonic_call(node: ast.Call) -> tuple[ToolCall | None, tuple[str, str] | None]:
    name = _dotted_name(node.func)
    if name is None:
        return None, ("bad_name", "the called thing is not a (dotted) name")
    if node.args:
        return None, ("positional_argument", f"{name}: arguments must be given by name")
    arguments: dict[str, Any] = {}
    for keyword in node.keywords:
        if keyword.arg is None:
            return None, ("bad_call", f"{name}: ** arguments are not allowed")
        if keyword.arg in arguments:
            return None, ("duplicate_key", f"{name}: argument {keyword.arg!r} appears twice")
        value, problem = literal_value(keyword.value)
        if problem is not None:
            return None, ("not_a_literal", f"{name}: argument {keyword.arg!r}: {problem}")
        arguments[keyword.arg] = value
    failure = _argument_problem(arguments)
    if failure is not None:
        return None, failure
    return ToolCall(name=name, arguments=arguments), None


def literal_value(node: ast.expr) -> tuple[Any, str | None]:
    """The JSON value of a literal expression (tuples read as lists), or a problem; an explicit stack walk."""
    # Post-order over an explicit stack, so a deep literal costs no Python recursion.
    done: dict[int, Any] = {}
    stack: list[tuple[ast.expr, bool]] = [(node, False)]
    while stack:
        current, expanded = stack.pop()
        children = _literal_children(current)
        if children is None:
            value, problem = _leaf_value(current)
            if problem is not None:
                return None, problem
            done[id(current)] = value
        elif not expanded:
            stack.append((current, True))
            stack.extend((child, False) for child in children)
        else:
            if isinstance(current, ast.Dict):
                keys = [done[id(key)] for key in current.keys if key is not None]
                if len(keys) != len(current.keys) or not all(isinstance(key, str) for key in keys):
                    return None, "dictionary keys must be strings"
                if len(set(keys)) != len(keys):
                    return None, "a dictionary key appears twice"
                done[id(current)] = {key: done[id(v)] for key, v in zip(keys, current.values, strict=True)}
            else:
                assert isinstance(current, (ast.List, ast.Tuple))
                done[id(current)] = [done[id(element)] for element in current.elts]
    return done[id(node)], None


def _literal_children(node: ast.expr) -> list[ast.expr] | None:
    if isinstance(node, (ast.List, ast.Tuple)):
        return list(node.elts)
    if isinstance(node, ast.Dict):
        return [key for key in node.keys if key is not None] + list(node.values)
    return None


def _leaf_value(node: ast.expr) -> tuple[Any, str | None]:
    if isinstance(node, ast.Constant) and (
        node.value is None or isinstance(node.value, (str, int, float, bool))
    ):
        if isinstance(node.value, float) and not math.isfinite(node.value):
            return None, "not a finite number"
        return node.value, None
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, (ast.USub, ast.UAdd))
        and isinstance(node.operand, ast.Constant)
        and isinstance(node.operand.value, (int, float))
        and not isinstance(node.operand.value, bool)
    ):
        value = node.operand.value
        if isinstance(value, float) and not math.isfinite(value):
            return None, "not a finite number"
        return (-value if isinstance(node.op, ast.USub) else value), None
    return None, f"{type(node).__name__} is not a literal"


# -- one message ----------------------------------------------------------------------------------------------


def detect_dialect(text: str) -> Dialect | None:
    """The text dialect `auto` reads: by the first <tool_call>'s body, else a <function= tag, else pythonic."""
    first = text.find(TOOL_CALL_OPEN)
    if first >= 0:
        body = text[first + len(TOOL_CALL_OPEN) :].lstrip()
        return "qwen_xml" if body.startswith(FUNCTION_OPEN) else "hermes"
    if FUNCTION_OPEN in text:
        return "qwen_xml"
    return "pythonic"


def parse_text(
    text: str, dialect: DialectChoice = "auto", tools: Mapping[str, Mapping[str, Any]] | None = None
) -> ParsedCalls:
    """The calls written in a message's text, in `dialect` (`auto`: see the module docstring)."""
    chosen = detect_dialect(text) if dialect == "auto" else dialect
    if chosen == "hermes":
        return parse_hermes(text) if TOOL_CALL_OPEN in text else ParsedCalls()
    if chosen == "qwen_xml":
        return parse_qwen_xml(text, tools) if FUNCTION_OPEN in text else ParsedCalls()
    if chosen == "pythonic":
        parsed = parse_pythonic(text)
        if dialect == "auto" and parsed.errors and not parsed.calls and not _offered(text, tools):
            # `f(2) = 5, so the answer is 5`, `gcd(12, 18) = 6`, `P(A) = 1/2`: prose that opens like a call to a
            # function nobody offered, and is not a call as a whole, is text, not a malformed call. A malformed
            # call to an offered tool (`search(query=`) stays an error, never an abstention.
            return ParsedCalls()
        if parsed.dialect is None and tools and quoted_pythonic_call(text, tools):
            return _failed(
                ParsedCalls(dialect="pythonic"), "quoted_call", "a call shown as code is not a call"
            )
        return parsed
    return ParsedCalls()  # openai: calls are never read from text


def _offered(text: str, tools: Mapping[str, Mapping[str, Any]] | None) -> bool:
    """Whether the call a text opens with names an offered tool (with no tools given: any name)."""
    name = leading_call_name(text.strip())
    return name is not None and (not tools or name in tools)


def parse_message(
    tool_calls: Sequence[Any] | None,
    text: str | None,
    dialect: DialectChoice = "auto",
    tools: Mapping[str, Mapping[str, Any]] | None = None,
) -> ParsedCalls:
    """The calls of one assistant message: its `tool_calls` (openai) or the calls written in its text.

    With `auto`, a non-empty `tool_calls` wins and the text is then plain text; `openai` reads only
    `tool_calls`, a text dialect only the text. `text` None (an unterminated <think>) holds no call.
    """
    if dialect in ("auto", "openai") and tool_calls:
        return parse_openai(tool_calls)
    if dialect == "openai" or text is None:
        return ParsedCalls()
    return parse_text(text, dialect, tools)
