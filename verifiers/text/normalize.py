"""Text normalisation for answer comparison: case, whitespace, punctuation and wrappers around an answer.

Each step is a C-level string operation (translate, re.sub with a plain replacement, strip), so
normalising a 10 MB answer stays fast and linear.
"""

from __future__ import annotations

import re
import string
import sys
import unicodedata
from functools import lru_cache

from proctor.verifiers.reading import match_brace

_WHITESPACE = re.compile(r"\s+")
_TRAILING = ".,;:!?。，；：！？"
_PAIRS = (
    ("**", "**"),
    ("__", "__"),
    ("*", "*"),
    ("_", "_"),
    ("`", "`"),
    ("$$", "$$"),
    ("$", "$"),
    ("\\(", "\\)"),
    ("\\[", "\\]"),
    ('"', '"'),
    ("'", "'"),
    ("“", "”"),
    ("‘", "’"),
)
_COMMANDS = ("\\boxed", "\\fbox", "\\text", "\\textbf", "\\textit", "\\emph", "\\mathrm", "\\mathbf")
_MAX_UNWRAP = 16


@lru_cache(maxsize=1)
def _punctuation_table() -> dict[int, None]:
    # Built once: ASCII punctuation and symbols (string.punctuation) plus every Unicode P* character.
    table = {ord(char): None for char in string.punctuation}
    for code in range(sys.maxunicode + 1):
        if unicodedata.category(chr(code)).startswith("P"):
            table[code] = None
    return table


def collapse_whitespace(text: str) -> str:
    """Trim the ends and turn every run of whitespace into one space."""
    return _WHITESPACE.sub(" ", text).strip()


def strip_punctuation(text: str) -> str:
    """Remove ASCII punctuation and symbols (string.punctuation) and all Unicode punctuation."""
    return text.translate(_punctuation_table())


def _unwrap_command(text: str) -> str | None:
    for command in _COMMANDS:
        if text.startswith(command):
            brace = len(command)
            if (
                text.startswith("{", brace)
                and text.endswith("}")
                and match_brace(text, brace) == len(text) - 1
            ):
                return text[brace + 1 : -1]
    return None


def strip_wrappers(text: str) -> str:
    """Remove what surrounds a whole answer: markdown emphasis and code, $...$, \\(...\\), quotes,
    \\text{}/\\boxed{}-style commands, and trailing sentence punctuation (". , ; : ! ?")."""
    for _ in range(_MAX_UNWRAP):
        before = text
        text = text.strip().rstrip(_TRAILING).strip()
        inner = _unwrap_command(text)
        if inner is not None:
            text = inner
        else:
            for left, right in _PAIRS:
                if len(text) > len(left) + len(right) and text.startswith(left) and text.endswith(right):
                    text = text[len(left) : -len(right)]
                    break
        if text == before:
            break
    return text.strip()


def normalize(
    text: str,
    *,
    case_sensitive: bool = False,
    whitespace: bool = True,
    punctuation: bool = False,
    wrappers: bool = True,
) -> str:
    """Normalise text for comparison: unwrap, drop punctuation, collapse whitespace, casefold (as asked)."""
    if wrappers:
        text = strip_wrappers(text)
    if punctuation:
        text = strip_punctuation(text)
    if whitespace:
        text = collapse_whitespace(text)
    if not case_sensitive:
        text = text.casefold()
    return text
