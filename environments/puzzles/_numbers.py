"""Exact number parsing for puzzle answers: integers and fractions read by regular expressions, never evaluated.

Integer format (every family with an integer answer uses it): an optional sign (`+`, `-` or the Unicode
minus), digits, optionally grouped in threes with commas (`1,234`), optionally followed by a decimal point and
only zeros (`-4.0` is the integer -4; `-4.5` is not an integer). No exponents, spaces inside the number or
words. Comparison is exact: `-40` never matches `-4`.

Fraction format: an integer as above, `p/q` with integers p and q (q nonzero), or a terminating decimal
(`-0.75`); values are exact `Fraction`s.
"""

from __future__ import annotations

import re
from fractions import Fraction

MAX_DIGITS = 400
"""Longer numbers are not read (they are never a right answer, and bound the work per answer)."""

_INTEGER = re.compile(r"([+-]?)(\d{1,3}(?:,\d{3})+|\d+)(?:\.0+)?", re.ASCII)
_DECIMAL = re.compile(r"([+-]?)(\d+)\.(\d+)", re.ASCII)
_FRACTION = re.compile(r"\s*([+-]?\d+)\s*/\s*([+-]?\d+)\s*", re.ASCII)


def _clean(text: str) -> str:
    return text.strip().replace("\u2212", "-")


def parse_integer(text: str) -> int | None:
    """The integer the text spells (see the module doc), or None."""
    text = _clean(text)
    if len(text) > MAX_DIGITS + MAX_DIGITS // 3 + 2:
        return None
    match = _INTEGER.fullmatch(text)
    if match is None:
        return None
    value = int(match.group(2).replace(",", ""))
    return -value if match.group(1) == "-" else value


def parse_fraction(text: str) -> Fraction | None:
    """The exact rational number the text spells (integer, p/q or terminating decimal), or None."""
    text = _clean(text)
    if len(text) > 2 * MAX_DIGITS + 3:
        return None
    integer = parse_integer(text)
    if integer is not None:
        return Fraction(integer)
    match = _FRACTION.fullmatch(text)
    if match is not None:
        denominator = int(match.group(2))
        return None if denominator == 0 else Fraction(int(match.group(1)), denominator)
    match = _DECIMAL.fullmatch(text)
    if match is not None:
        value = Fraction(int(match.group(2) + match.group(3)), 10 ** len(match.group(3)))
        return -value if match.group(1) == "-" else value
    return None


def format_fraction(value: Fraction) -> str:
    """'3', '-3/4'."""
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"
