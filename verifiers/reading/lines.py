"""Answer lines ("Answer: x", "**Final Answer:** x", "The answer is x") and the last non-blank line."""

from __future__ import annotations

import re

# A line that starts with "Answer: x", "**Final Answer:** x", "The final answer is: x", "The answer is x" or
# "Therefore, the answer is x". No two adjacent quantifiers can trade characters (the optional emphasis
# group starts with * or _), so a long run of blanks costs linear time, never quadratic.
_ANSWER_LINE = re.compile(
    r"^[ \t>#*_-]*(?:(?:so|thus|therefore|hence),?[ \t]+)?(?:the[ \t]+)?(?:final[ \t]+)?answer"
    r"(?:[ \t]+is\b[ \t]*:?|[ \t]*(?:(?:\*\*|__)[ \t]*)?[:：])(.*)$",
    re.IGNORECASE | re.MULTILINE,
)


def has_answer_line(text: str) -> bool:
    """Whether some line of the text starts with an answer phrase."""
    return _ANSWER_LINE.search(text) is not None


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
