"""`<answer>...</answer>` tags: the last one, or every one; a final tag left open runs to the end.

The open-ended form is what a generation stopped by the stop string "</answer>" looks like.
"""

from __future__ import annotations

from collections import deque

ANSWER_OPEN = "<answer>"
ANSWER_CLOSE = "</answer>"


def has_answer_tag(text: str) -> bool:
    """Whether the text contains an <answer> or </answer> tag."""
    return ANSWER_OPEN in text or ANSWER_CLOSE in text


def last_answer_tag(text: str) -> str | None:
    """Content of the last <answer>...</answer>; a final <answer> with no closing tag runs to the end."""
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
