"""`\\boxed{...}` and `\\fbox{...}`: the last box, every box, and the brace scanner they share.

Linear in the scanned span, with no recursion, so a million nested braces cannot hang or crash the service.
"""

from __future__ import annotations

import re
from collections import deque

MAX_BOX_CHARS = 100_000
"""A \\boxed{} whose closing brace is further than this from its opening brace counts as unterminated."""

_BOX_MARKER = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
# One token of a brace scan: an escaped character (so \{ and \} are literal braces), or a brace.
_BRACE_TOKEN = re.compile(r"\\.|[{}]", re.DOTALL)
_BLANKS = re.compile(r"[ \t]*")
_BOX_TOKEN_FORM = re.compile(r"[^\s$]+")


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
