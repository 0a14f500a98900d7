"""Judge-side comparison of a program's output with the expected output, on plain data only.

stdio comparators are named presets with a version (`tokens@1` ...), reported in every score so a change in
leniency is visible:
- tokens@1 (default): the whitespace-separated tokens must be equal, all of them (never a zip over the shorter
  side), case-sensitively. Spacing and line breaks do not matter.
- lines@1: the lines must be equal after removing trailing spaces (and a CR) from each and trailing blank
  lines from the end; leading spaces count.
- exact@1: byte-for-byte equal text.
- float@1: tokens, but two numeric tokens match when |got - expected| <= tol * max(1, |expected|) (absolute or
  relative error, as Codeforces states it); tol is the `tolerance` option, 1e-6 unless the task states one.

Call-format return values are compared here too (`compare_values`), after they left the sandbox as plain
data: exact built-in types, tuples equal to lists, numbers by value (floats at a tolerance only when stated).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

CompareName = Literal["tokens", "lines", "exact", "float"]
DEFAULT_FLOAT_TOLERANCE = 1e-6
CLIP = 80
# Each part starts with its own character class, so a failed match backtracks in linear time (`\d+\.?\d*` was
# quadratic on a long run of digits that is not a number, and the output is the candidate's). ASCII digits
# only: float() also reads full-width, Arabic-Indic and mathematical digits, which no judge's output contains.
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def clip(text: str, limit: int = CLIP) -> str:
    """A short, single-line excerpt for a diff."""
    text = repr(text) if len(text) <= limit else repr(text[:limit]) + "..."
    return text


def _compare_sequences(
    got: list[str], expected: list[str], unit: str, same: Callable[[str, str], bool]
) -> str | None:
    for index, (want, have) in enumerate(zip(expected, got, strict=False)):
        if not same(have, want):
            return f"{unit} {index + 1}: expected {clip(want)}, got {clip(have)}"
    if len(got) < len(expected):
        return f"output ended after {len(got)} {unit}s; expected {len(expected)} (next: {clip(expected[len(got)])})"
    if len(got) > len(expected):
        return f"{len(got) - len(expected)} extra {unit}(s) after {len(expected)}: {clip(got[len(expected)])}"
    return None


def _equal(a: str, b: str) -> bool:
    return a == b


def compare_tokens(output: str, expected: str, tolerance: float | None = None) -> str | None:
    """tokens@1: whitespace-separated tokens equal; None when they match, else a short diff."""
    return _compare_sequences(output.split(), expected.split(), "token", _equal)


def _trimmed_lines(text: str) -> list[str]:
    lines = [line.rstrip(" \t\r\f\v") for line in text.split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def compare_lines(output: str, expected: str, tolerance: float | None = None) -> str | None:
    """lines@1: lines equal after trailing spaces and trailing blank lines are removed."""
    return _compare_sequences(_trimmed_lines(output), _trimmed_lines(expected), "line", _equal)


def compare_exact(output: str, expected: str, tolerance: float | None = None) -> str | None:
    """exact@1: the whole text equal."""
    if output == expected:
        return None
    at = next(
        (i for i, (a, b) in enumerate(zip(output, expected, strict=False)) if a != b),
        min(len(output), len(expected)),
    )
    start = max(0, at - 20)
    return (
        f"character {at + 1}: expected {clip(expected[start : at + 40])}, got {clip(output[start : at + 40])}"
    )


def numbers_match(got: str, want: str, tolerance: float) -> bool:
    """Whether two tokens match under float@1: numerically within tolerance if both are numbers, else equal."""
    if got == want:
        return True
    if not (_NUMBER.fullmatch(got) and _NUMBER.fullmatch(want)):
        return False
    a, b = float(got), float(want)
    if not (math.isfinite(a) and math.isfinite(b)):
        return False
    return abs(a - b) <= tolerance * max(1.0, abs(b))


def compare_float(output: str, expected: str, tolerance: float | None = None) -> str | None:
    """float@1: tokens, numeric ones within tolerance (absolute or relative)."""
    tol = DEFAULT_FLOAT_TOLERANCE if tolerance is None else tolerance
    return _compare_sequences(
        output.split(), expected.split(), "token", lambda a, b: numbers_match(a, b, tol)
    )


@dataclass(frozen=True)
class Comparator:
    """A named, versioned stdio comparison preset."""

    name: str
    version: int
    compare: Callable[[str, str, float | None], str | None]

    @property
    def preset(self) -> str:
        """name@version, reported in the score's details."""
        return f"{self.name}@{self.version}"


COMPARATORS: dict[str, Comparator] = {
    c.name: c
    for c in (
        Comparator("tokens", 1, compare_tokens),
        Comparator("lines", 1, compare_lines),
        Comparator("exact", 1, compare_exact),
        Comparator("float", 1, compare_float),
    )
}


def compare_output(name: str, output: str, expected: str, tolerance: float | None = None) -> str | None:
    """Compare captured stdout with the expected output by a named preset; None when they match."""
    return COMPARATORS[name].compare(output, expected, tolerance)


def _is_number(value: Any) -> bool:
    return type(value) in (int, float)


def _short(value: Any) -> str:
    try:
        text = repr(value)
    except ValueError:  # an int past Python's digit limit for str(): the candidate's value, so say what it is
        return f"an integer of {value.bit_length()} bits" if type(value) is int else "an unprintable value"
    return text if len(text) <= CLIP else text[:CLIP] + "..."


def _close(got: float, expected: float, tolerance: float) -> bool:
    try:
        return math.isclose(got, expected, rel_tol=tolerance, abs_tol=tolerance)
    except OverflowError:  # an int too large for a float is not close to any float
        return False


def compare_values(got: Any, expected: Any, tolerance: float | None = None, path: str = "") -> str | None:
    """Compare a returned plain value with the expected JSON value; None when equal, else where they differ.

    Only exact built-in types count (bool is not a number here, a tuple equals a list, int keys equal their
    JSON string form); floats compare exactly unless a tolerance is stated.
    """
    where = path or "value"
    if type(expected) is bool or expected is None or type(got) is bool or got is None:
        if type(got) is type(expected) and got == expected:
            return None
        return f"{where}: expected {_short(expected)}, got {_short(got)}"
    if _is_number(expected):
        if not _is_number(got):
            return f"{where}: expected {_short(expected)}, got {_short(got)} ({type(got).__name__})"
        if got == expected:
            return None
        floats = type(got) is float or type(expected) is float
        if tolerance is not None and floats and _close(got, expected, tolerance):
            return None
        return f"{where}: expected {_short(expected)}, got {_short(got)}"
    if type(expected) is str:
        if type(got) is str and got == expected:
            return None
        return f"{where}: expected {_short(expected)}, got {_short(got)}"
    if type(expected) is list:
        if type(got) not in (list, tuple):
            return f"{where}: expected a list, got {type(got).__name__} {_short(got)}"
        if len(got) != len(expected):
            return f"{where}: expected {len(expected)} items, got {len(got)}: {_short(got)}"
        for index, (have, want) in enumerate(zip(got, expected, strict=True)):
            problem = compare_values(have, want, tolerance, f"{path}[{index}]")
            if problem is not None:
                return problem
        return None
    if type(expected) is dict:
        if type(got) is not dict:
            return f"{where}: expected an object, got {type(got).__name__} {_short(got)}"
        keyed: dict[str, Any] = {}
        for key, value in got.items():
            if type(key) is str or (type(key) is int and key.bit_length() < 10_000):
                keyed[str(key)] = value  # (str() of a longer int raises: no JSON key is that long anyway)
            else:
                return f"{where}: key {_short(key)} is not a string or an integer"
        if len(keyed) != len(got) or set(keyed) != set(expected):
            return f"{where}: expected keys {_short(sorted(expected))}, got {_short(sorted(keyed))}"
        for key in expected:
            problem = compare_values(keyed[key], expected[key], tolerance, f"{path}[{key!r}]")
            if problem is not None:
                return problem
        return None
    return f"{where}: the expected value has an unsupported type {type(expected).__name__}"
