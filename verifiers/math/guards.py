"""Cost guards: bound what the math engine reads and computes, so no answer can make it explode.

Every guard raises `TooComplex`. For a response that means "wrong answer, reason too_complex": the model wrote
it, so it earns nothing, and no policy can dodge a penalty by being expensive to check. The checks run
before the work they protect (a linear scan before recursive descent, a digit estimate before a power is
computed), so tripping one costs microseconds. The pool's hard deadline is only the backstop.
"""

from __future__ import annotations

import math
from fractions import Fraction


class TooComplex(Exception):
    """The text or a value it asks for is beyond the engine's cost bounds."""


class ParseError(ValueError):
    """The text is not math the grammar understands."""


MAX_CHARS = 4_000
"""Longest answer (or gold) text the grammar will read; a final answer is short, a longer one is a dodge."""

MAX_DEPTH = 60
"""Deepest bracket/brace nesting, checked by a linear scan before parsing."""

MAX_PARSE_DEPTH = 180
"""Deepest recursion of the parser, counted in its own calls (about three per level of nesting: brackets,
unary chains, \\frac and \\sqrt chains without braces); far below Python's recursion limit."""

MAX_TOKENS = 2_000
"""Most tokens in one answer."""

MAX_DIGITS = 5_000
"""Most decimal digits of any exact integer built (numerator or denominator)."""

MAX_EXPONENT = 10_000
"""Largest |exponent| of a power whose base is not 0 or ±1 and cannot be computed exactly."""

MAX_FACTORIAL = 1_000
"""Largest n whose factorial (or binomial row) is computed; 1000! has 2,568 digits."""

MAX_TREE_DEPTH = 80
"""Deepest syntax tree (left-nested chains such as 1/2/3/... are flat to the parser but deep as trees)."""

MAX_ITEMS = 100
"""Most items in a list, set, tuple or matrix."""

MAX_NODES = 3_000
"""Most nodes in one syntax tree."""

_OPENERS = frozenset("([{")
_CLOSERS = frozenset(")]}")
_LOG10_2 = math.log10(2)


def check_text(text: str) -> None:
    """Reject text that is too long or nested too deeply, in one linear scan (no recursion)."""
    if len(text) > MAX_CHARS:
        raise TooComplex(f"answer longer than {MAX_CHARS} characters")
    depth = deepest = 0
    for char in text:
        if char in _OPENERS:
            depth += 1
            if depth > deepest:
                deepest = depth
        elif char in _CLOSERS and depth:
            depth -= 1
    if deepest > MAX_DEPTH:
        raise TooComplex(f"nesting deeper than {MAX_DEPTH}")


def digits(value: int) -> int:
    """An upper bound on the decimal digits of |value| (from its bit length, without converting it)."""
    return int(abs(value).bit_length() * _LOG10_2) + 1


def check_fraction(value: Fraction) -> Fraction:
    """Return value, or raise when its numerator or denominator has too many digits."""
    if digits(value.numerator) > MAX_DIGITS or digits(value.denominator) > MAX_DIGITS:
        raise TooComplex(f"a number with more than {MAX_DIGITS} digits")
    return value


def power(base: Fraction, exponent: int) -> Fraction:
    """base ** exponent for an integer exponent, refused before computing when the result would be huge."""
    if base in (0, 1) or exponent in (0, 1):
        if base == 0 and exponent < 0:
            raise ZeroDivisionError("0 to a negative power")
        return base**exponent
    if base == -1:
        return Fraction(-1 if exponent % 2 else 1)
    size = max(digits(base.numerator), digits(base.denominator))
    # log10 of the larger part, from its leading digits, times the exponent bounds the result's digits.
    magnitude = max(abs(_log10(base.numerator)), abs(_log10(base.denominator)), 0.3)
    if abs(exponent) > MAX_EXPONENT * 10 or abs(exponent) * magnitude > MAX_DIGITS or size > MAX_DIGITS:
        raise TooComplex(f"a power with more than {MAX_DIGITS} digits")
    return check_fraction(base**exponent)


def _log10(value: int) -> float:
    value = abs(value)
    if value == 0:
        return 0.0
    bits = value.bit_length()
    if bits < 1000:
        return math.log10(value)
    return math.log10(value >> (bits - 64)) + (bits - 64) * _LOG10_2


def factorial(n: Fraction) -> Fraction:
    """n! for a non-negative integer n up to MAX_FACTORIAL."""
    if n.denominator != 1 or n < 0:
        raise ValueError("factorial of a non-integer or negative number")
    if n > MAX_FACTORIAL:
        raise TooComplex(f"factorial of more than {MAX_FACTORIAL}")
    return Fraction(math.factorial(int(n)))


def binomial(n: Fraction, k: Fraction) -> Fraction:
    """C(n, k) for integers with 0 <= n <= MAX_FACTORIAL (0 when k is out of range)."""
    if n.denominator != 1 or k.denominator != 1 or n < 0:
        raise ValueError("binomial of non-integers")
    if n > MAX_FACTORIAL:
        raise TooComplex(f"binomial of more than {MAX_FACTORIAL}")
    if k < 0 or k > n:
        return Fraction(0)
    return Fraction(math.comb(int(n), int(k)))
