"""Regular expressions from requests, run with RE2 (linear time, no backtracking): `text.match`'s regex op
and the judges' programmatic rubric items share these, so a pattern one accepts the other accepts too."""

from __future__ import annotations

import re2

MAX_PATTERN_CHARS = 10_000
MAX_REGEX_CHARS = 1_000_000
"""A longer text is not searched (text.match: reason answer_too_long; a rubric regex item: undecided): RE2 time
is linear in the text but grows with the pattern too, and a DFA-hostile pattern on 10 MB could take seconds."""


def _re2_options(case_sensitive: bool) -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # RE2 would print every rejected pattern to stderr
    options.case_sensitive = case_sensitive
    return options


def pattern_error(pattern: str) -> str | None:
    """Why RE2 rejects a pattern (backreferences, look-around, syntax, size), or None when it compiles."""
    if len(pattern) > MAX_PATTERN_CHARS:
        return f"longer than {MAX_PATTERN_CHARS} characters"
    try:
        re2.compile(pattern, _re2_options(True))
    except re2.error as exc:
        message = exc.args[0] if exc.args else "rejected"
        return message.decode("utf-8", "replace") if isinstance(message, bytes) else str(message)
    except UnicodeEncodeError:
        return "contains characters that are not valid Unicode (lone surrogates)"
    return None


def regex_matches(answer: str, patterns: list[str], *, case_sensitive: bool, search: bool) -> bool:
    """Whether any RE2 pattern matches the answer (the whole of it, or anywhere when `search`)."""
    options = _re2_options(case_sensitive)
    # RE2 works on UTF-8; a lone surrogate cannot be encoded, so it is replaced rather than crashing.
    safe = answer.encode("utf-8", "replace").decode("utf-8")
    for pattern in patterns:
        compiled = re2.compile(pattern, options)
        found = compiled.search(safe) if search else compiled.fullmatch(safe)
        if found is not None:
            return True
    return False
