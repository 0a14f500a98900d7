"""Answer extraction shared by the text verifiers: think blocks, \\boxed{}, <answer> tags and "Answer:" lines.

Every function here runs in time linear in its input (or bounded by a constant), with no recursion, so a
10 MB response or a million nested braces cannot hang or crash the service.

Also what the text verifiers share around extraction: a reference model that takes a bare string as its
answer (`AnswerReference`), and the verdict for what was found (`unanswered`, `graded`), whose `format`
component says whether an answer was found and `answer` whether it was right.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, GetJsonSchemaHandler, model_validator
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

from proctor.contract import Verdict

ExtractMethod = Literal["auto", "boxed", "answer_tag", "answer_line", "last_line", "none"]

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
ANSWER_OPEN = "<answer>"
ANSWER_CLOSE = "</answer>"

MAX_BOX_CHARS = 100_000
"""A \\boxed{} whose closing brace is further than this from its opening brace counts as unterminated."""

DETAIL_CHARS = 200
"""Extracted text longer than this is shortened in a Score's details."""

_BOX_MARKER = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
# One token of a brace scan: an escaped character (so \{ and \} are literal braces), or a brace.
_BRACE_TOKEN = re.compile(r"\\.|[{}]", re.DOTALL)
# A line that starts with "Answer: x", "**Final Answer:** x", "The final answer is: x", "The answer is x" or
# "Therefore, the answer is x". No two adjacent quantifiers can trade characters (the optional emphasis
# group starts with * or _), so a long run of blanks costs linear time, never quadratic.
_ANSWER_LINE = re.compile(
    r"^[ \t>#*_-]*(?:(?:so|thus|therefore|hence),?[ \t]+)?(?:the[ \t]+)?(?:final[ \t]+)?answer"
    r"(?:[ \t]+is\b[ \t]*:?|[ \t]*(?:(?:\*\*|__)[ \t]*)?[:：])(.*)$",
    re.IGNORECASE | re.MULTILINE,
)
_BLANKS = re.compile(r"[ \t]*")
_BOX_TOKEN_FORM = re.compile(r"[^\s$]+")


@dataclass(frozen=True)
class Extraction:
    """The answer found in a response: `text` is None when none was found; `method` says how."""

    text: str | None
    method: str


def after_think(response: str) -> str | None:
    """The part of a response that is graded: all of it, or what follows the last </think>.

    An unterminated <think> (one with no </think> after it) means the model never gave an answer: None.
    """
    close = response.rfind(THINK_CLOSE)
    tail = response if close < 0 else response[close + len(THINK_CLOSE) :]
    if THINK_OPEN in tail:
        return None
    return tail


def has_box(text: str) -> bool:
    """Whether the text contains a \\boxed or \\fbox command."""
    return _BOX_MARKER.search(text) is not None


def match_brace(text: str, open_index: int, limit: int = MAX_BOX_CHARS) -> int | None:
    """Index of the `}` closing the `{` at open_index, or None when it is not closed within `limit` chars.

    Iterative (no recursion limit on nesting) and linear in the scanned span; `\\{` and `\\}` are literal.
    """
    depth = 0
    end = min(len(text), open_index + 1 + limit)
    for token in _BRACE_TOKEN.finditer(text, open_index, end):
        value = token.group()
        if value == "{":
            depth += 1
        elif value == "}":
            depth -= 1
            if depth == 0:
                return token.start()
    return None


def _box_content(text: str, marker_end: int, limit: int) -> str | None:
    position = _BLANKS.match(text, marker_end).end()
    if position < len(text) and text[position] == "{":
        close = match_brace(text, position, limit)
        return None if close is None else text[position + 1 : close]
    if position == marker_end:  # "\\boxed" followed directly by something that is neither blank nor brace
        return None
    token = _BOX_TOKEN_FORM.match(text, position, position + limit)
    return token.group() if token else None


def last_boxed(text: str, limit: int = MAX_BOX_CHARS) -> str | None:
    """Content of the last \\boxed{...} or \\fbox{...} (nested braces allowed); None if absent or unterminated.

    Scans only from the last marker, so the cost is bounded by `limit` whatever the text's length.
    Also accepts the brace-less form `\\boxed 42` (a single token up to whitespace or `$`).
    """
    # Two cursors, each moved only backwards past its own rejects, keep this linear on "\\boxedx\\boxedx...".
    boxed, fbox = text.rfind("\\boxed"), text.rfind("\\fbox")
    marker = None
    while marker is None:
        start = max(boxed, fbox)
        if start < 0:
            return None
        marker = _BOX_MARKER.match(text, start)
        if marker is None:  # "\\boxedx" is another command; look further back
            if start == boxed:
                boxed = text.rfind("\\boxed", 0, start)
            else:
                fbox = text.rfind("\\fbox", 0, start)
    return _box_content(text, marker.end(), limit)


def all_boxed(text: str, max_items: int = 64, limit: int = MAX_BOX_CHARS) -> list[str]:
    """Contents of the last `max_items` \\boxed{}/\\fbox{} markers, in order (nested boxes included).

    Each box is read up to `limit` characters; unterminated ones are left out. The cost is one scan for
    markers plus at most `max_items * limit`, however the boxes nest.
    """
    markers = deque((marker.end() for marker in _BOX_MARKER.finditer(text)), maxlen=max_items)
    contents = (_box_content(text, end, limit) for end in markers)
    return [content for content in contents if content is not None]


def has_answer_tag(text: str) -> bool:
    """Whether the text contains an <answer> or </answer> tag."""
    return ANSWER_OPEN in text or ANSWER_CLOSE in text


def last_answer_tag(text: str) -> str | None:
    """Content of the last <answer>...</answer>; a final <answer> with no closing tag runs to the end.

    The open-ended form is what a generation stopped by the stop string "</answer>" looks like.
    """
    open_index = text.rfind(ANSWER_OPEN)
    close_index = text.rfind(ANSWER_CLOSE)
    if open_index < 0:
        return None
    if close_index < open_index:
        return text[open_index + len(ANSWER_OPEN) :]
    return text[open_index + len(ANSWER_OPEN) : close_index]


def all_answer_tags(text: str, max_items: int = 64) -> list[str]:
    """Contents of the last `max_items` <answer>...</answer> pairs in order (a final unclosed one runs to the end)."""
    contents: deque[str] = deque(maxlen=max_items)
    position = 0
    while True:
        open_index = text.find(ANSWER_OPEN, position)
        if open_index < 0:
            break
        start = open_index + len(ANSWER_OPEN)
        close_index = text.find(ANSWER_CLOSE, start)
        if close_index < 0:
            contents.append(text[start:])
            break
        contents.append(text[start:close_index])
        position = close_index + len(ANSWER_CLOSE)
    return list(contents)


def last_answer_line(text: str) -> str | None:
    """What follows the last "Answer:", "Final answer:" or "The answer is" that starts a line."""
    last = None
    for last in _ANSWER_LINE.finditer(text):  # noqa: B007 - only the last match is wanted
        pass
    if last is None:
        return None
    content = last.group(1).strip()
    for mark in ("**", "__"):
        # "**Answer:** 42" leaves an unpaired "**" in front of the answer; a paired one wraps it.
        if content.startswith(mark) and content.count(mark) % 2 == 1:
            content = content[len(mark) :].lstrip()
    return content


def last_line(text: str) -> str | None:
    """The last line that is not blank, or None when every line is."""
    stripped = text.rstrip()
    if not stripped:
        return None
    return stripped[stripped.rfind("\n") + 1 :].strip()


def extract_answer(response: str, method: ExtractMethod = "auto") -> Extraction:
    """Find the answer in a response with the asked method; `auto` tries boxed, answer tag, answer line, whole.

    Under `auto` a method applies as soon as its marker appears: a response whose last \\boxed{ is never
    closed has no answer, rather than falling back to some earlier text.
    """
    text = after_think(response)
    if text is None:
        return Extraction(None, "think_unterminated")
    if method == "auto":
        if has_box(text):
            method = "boxed"
        elif has_answer_tag(text):
            method = "answer_tag"
        elif _ANSWER_LINE.search(text) is not None:
            method = "answer_line"
        else:
            method = "none"
    if method == "boxed":
        found = last_boxed(text)
    elif method == "answer_tag":
        found = last_answer_tag(text)
    elif method == "answer_line":
        found = last_answer_line(text)
    elif method == "last_line":
        found = last_line(text)
    else:
        method = "whole"
        found = text
    if found is not None and not found.strip():
        found = None
    return Extraction(found, method)


def clip(text: str | None, limit: int = DETAIL_CHARS) -> str | None:
    """A short, JSON-safe copy of text for a Score's details (lone surrogates replaced)."""
    if text is None:
        return None
    if len(text) > limit:
        text = text[:limit] + f"…[{len(text) - limit} more chars]"
    return text.encode("utf-8", "replace").decode("utf-8")


class AnswerReference(BaseModel):
    """A reference model that also accepts a bare string, meaning {"answer": that string}."""

    model_config = ConfigDict(extra="forbid")

    SHORTHAND_SCHEMA: ClassVar[dict[str, Any]] = {"type": "string"}
    """The JSON schema of the bare-string form, listed beside the object form."""

    @model_validator(mode="before")
    @classmethod
    def _plain_string(cls, data: Any) -> Any:
        return {"answer": data} if isinstance(data, str) else data

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {"anyOf": [dict(cls.SHORTHAND_SCHEMA), handler(schema)]}


def unanswered(reason: str, details: dict[str, Any]) -> Verdict:
    """Reward 0 for a response with no usable answer (no_answer, hedged ...): format 0, answer 0."""
    return Verdict(
        reward=0.0, correct=False, reason=reason, components={"format": 0.0, "answer": 0.0}, details=details
    )


def graded(right: bool, details: dict[str, Any], reason: str = "wrong_answer") -> Verdict:
    """Reward 1 or 0 for an answer that was found (format 1); `reason` says why a wrong one scored 0."""
    reward = 1.0 if right else 0.0
    return Verdict(
        reward=reward,
        correct=right,
        reason=None if right else reason,
        components={"format": 1.0, "answer": reward},
        details=details,
    )
