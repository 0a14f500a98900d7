"""A small, bounded arithmetic parser for countdown-style answers: parsed, never evaluated as Python.

Grammar (integers only, exact rational arithmetic with Fraction)::

    expr   := term (("+" | "-") term)*
    term   := unary (("*" | "/") unary)*
    unary  := ("-" | "+") unary | power
    power  := atom (("**" | "^") unary)?          -- only when powers are allowed
    atom   := INTEGER | "(" expr ")"

Bounds keep every input cheap: at most MAX_CHARS characters (so nesting depth is bounded too), integer
literals of at most MAX_DIGITS digits, exponents in [0, max_exponent], and every intermediate numerator and
denominator below MAX_MAGNITUDE (checked before a power is computed, so `9**9**9` is rejected at once).
Anything else (names, calls, attributes, strings, `__import__`) is a syntax error.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

MAX_CHARS = 300
MAX_DIGITS = 12
MAX_MAGNITUDE = 10**18
DEFAULT_MAX_EXPONENT = 0
"""Powers are off unless a caller allows them."""

_TRANSLATE = str.maketrans({"×": "*", "∗": "*", "·": "*", "÷": "/", "∕": "/", "−": "-", "–": "-"})


class ArithError(ValueError):
    """The text is not a valid bounded expression; `reason` is a short code."""

    def __init__(self, reason: str, message: str = ""):
        super().__init__(message or reason)
        self.reason = reason


@dataclass(frozen=True)
class Parsed:
    """An expression's exact value and the integer literals it uses, in order of appearance."""

    value: Fraction
    numbers: tuple[int, ...]


def tokenize(text: str) -> list[str]:
    """Split into integer literals, operators and parentheses; anything else is an error."""
    tokens: list[str] = []
    position, length = 0, len(text)
    while position < length:
        char = text[position]
        if char in " \t\n":
            position += 1
        elif char.isascii() and char.isdigit():
            end = position
            while end < length and text[end].isascii() and text[end].isdigit():
                end += 1
            if end - position > MAX_DIGITS:
                raise ArithError("number_too_large", f"a literal has more than {MAX_DIGITS} digits")
            tokens.append(text[position:end])
            position = end
        elif text.startswith("**", position):
            tokens.append("**")
            position += 2
        elif char in "+-*/()^":
            tokens.append(char)
            position += 1
        else:
            raise ArithError("syntax", f"unexpected character {char!r}")
    return tokens


def _bounded(value: Fraction) -> Fraction:
    if abs(value.numerator) >= MAX_MAGNITUDE or value.denominator >= MAX_MAGNITUDE:
        raise ArithError("too_large", "an intermediate value is out of bounds")
    return value


class _Parser:
    def __init__(self, tokens: list[str], max_exponent: int):
        self.tokens = tokens
        self.position = 0
        self.max_exponent = max_exponent
        self.numbers: list[int] = []

    def peek(self) -> str | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def take(self) -> str:
        token = self.peek()
        if token is None:
            raise ArithError("syntax", "unexpected end of expression")
        self.position += 1
        return token

    def expr(self) -> Fraction:
        value = self.term()
        while self.peek() in ("+", "-"):
            operator = self.take()
            right = self.term()
            value = _bounded(value + right if operator == "+" else value - right)
        return value

    def term(self) -> Fraction:
        value = self.unary()
        while self.peek() in ("*", "/"):
            operator = self.take()
            right = self.unary()
            if operator == "*":
                value = _bounded(value * right)
            elif right == 0:
                raise ArithError("division_by_zero", "division by zero")
            else:
                value = _bounded(value / right)
        return value

    def unary(self) -> Fraction:
        if self.peek() in ("-", "+"):
            sign = self.take()
            value = self.unary()
            return -value if sign == "-" else value
        return self.power()

    def power(self) -> Fraction:
        base = self.atom()
        if self.peek() in ("**", "^"):
            self.take()
            if self.max_exponent <= 0:
                raise ArithError("power_not_allowed", "powers are not allowed")
            exponent = self.unary()
            if exponent.denominator != 1 or not 0 <= exponent <= self.max_exponent:
                raise ArithError("bad_exponent", f"exponents must be integers in [0, {self.max_exponent}]")
            power = int(exponent)
            # Bound the result before computing it: bits(base) * exponent must stay below the magnitude.
            bits = max(abs(base.numerator).bit_length(), base.denominator.bit_length())
            if bits * power > MAX_MAGNITUDE.bit_length():
                raise ArithError("too_large", "a power is out of bounds")
            return _bounded(base**power)
        return base

    def atom(self) -> Fraction:
        token = self.take()
        if token == "(":
            value = self.expr()
            if self.take() != ")":
                raise ArithError("syntax", "unbalanced parenthesis")
            return value
        if token.isdigit():
            number = int(token)
            self.numbers.append(number)
            return Fraction(number)
        raise ArithError("syntax", f"unexpected {token!r}")


def parse_expression(text: str, max_exponent: int = DEFAULT_MAX_EXPONENT) -> Parsed:
    """Parse and compute an arithmetic expression exactly; raises ArithError on anything else."""
    if len(text) > MAX_CHARS:
        raise ArithError("too_long", f"expressions are limited to {MAX_CHARS} characters")
    tokens = tokenize(text.translate(_TRANSLATE))
    if not tokens:
        raise ArithError("syntax", "empty expression")
    parser = _Parser(tokens, max_exponent)
    value = parser.expr()
    if parser.position != len(tokens):
        raise ArithError("syntax", f"unexpected {tokens[parser.position]!r}")
    return Parsed(value, tuple(parser.numbers))
