"""The final answer of a response, found with one method (`extract_answer`), and `clip` for a Score's details."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from proctor.verifiers.reading.boxes import has_box, last_boxed
from proctor.verifiers.reading.lines import has_answer_line, last_answer_line, last_line
from proctor.verifiers.reading.tags import has_answer_tag, last_answer_tag
from proctor.verifiers.reading.think import after_think

ExtractMethod = Literal["auto", "boxed", "answer_tag", "answer_line", "last_line", "none"]

DETAIL_CHARS = 200
"""Extracted text longer than this is shortened in a Score's details."""


@dataclass(frozen=True)
class Extraction:
    """The answer found in a response: `text` is None when none was found; `method` says how."""

    text: str | None
    method: str


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
        elif has_answer_line(text):
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
