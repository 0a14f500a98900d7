"""Syntax tree -> typed values: scalars, relations, collections, intervals, matrices, text, choices, times.

A `Scalar` keeps its tree and computes on demand:
- `rational`: its exact value when it is a rational constant (Fraction arithmetic with guarded powers and
  factorials, so `1/2^99` is exact and `2^{2^{30}}` is refused before anything is computed);
- `approx`: the decimal places and significant digits its literal states (`0.333` -> 3 places, 3 digits;
  `1.2\\times10^{-4}` -> 5 places, 2 digits), which equivalence.py uses to scale tolerances;
- `at(k)`: its value at the k-th seeded sample point of its variables, in double precision (fast rejection)
  or with mpmath at 60 digits (confirmation). Sample points are a pure function of (variable name, k), so
  gold and answer see the same points in every process, and a group of responses reuses the gold's values.

Evaluation uses our own evaluator over the tree (cmath / mpmath functions), never sympy's parser, eval or
lambdify. Magnitudes are bounded there too: an exponent or an exp() argument beyond guards.MAX_EXPONENT, or a
factorial beyond guards.MAX_FACTORIAL, raises TooComplex instead of asking mpmath for 10^(10^9) digits.
"""

from __future__ import annotations

import cmath
import math
import re
import zlib
from fractions import Fraction
from functools import lru_cache

import mpmath

from proctor.verifiers.math import guards
from proctor.verifiers.math.grammar import (
    FUNCTIONS,
    GREEK,
    Node,
    Number,
    number_literal,
    parse_prepared,
    prepare,
    to_text,
)
from proctor.verifiers.math.guards import ParseError, TooComplex

SAMPLE_POINTS = 5
"""Points at which expressions with variables are compared in double precision."""
PRECISE_POINTS = 2
"""Of those, how many are re-checked with mpmath."""
PRECISE_DPS = 60
"""mpmath working precision (decimal digits) of the confirmation."""

_SCALAR_OPS = frozenset(
    {"num", "sym", "const", "add", "mul", "div", "neg", "pow", "func", "root", "mixed", "fact", "pct", "deg",
     "unit", "group", "call", "sum", "prod"}
)  # fmt: skip


class Undefined(Exception):
    """A value has no number at this point (division by zero, a pole, infinity, overflow)."""


# -- values ------------------------------------------------------------------------------------------------


class Value:
    """Base of every typed value; `raw` is the prepared source text."""

    __slots__ = ("raw",)
    kind = "value"

    def __init__(self, raw: str):
        self.raw = raw

    def normalized(self) -> str:
        """A canonical text form (for details)."""
        return self.raw

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.normalized()})"


class Scalar(Value):
    """A number or an expression, with its percent and unit annotations."""

    __slots__ = ("node", "core", "percent", "unit", "_rational", "_symbols", "_double", "_precise", "_real")
    kind = "scalar"

    def __init__(self, node: Node, raw: str = "", percent: bool = False, unit: str | None = None):
        super().__init__(raw)
        self.node = node  # the value, percent included (50% -> pct(50))
        self.core = node.args[0] if percent else node  # the number as written, without the percent sign
        self.percent = percent
        self.unit = unit
        self._rational: object = _MISSING
        self._symbols: frozenset[str] | None = None
        self._double: dict[int, complex | None] = {}
        self._precise: dict[tuple[int, int], object] = {}
        self._real: dict[int, bool] = {}
        _check_scalar(node)

    @property
    def rational(self) -> Fraction | None:
        """The exact value when this is a rational constant, else None (guards apply)."""
        if self._rational is _MISSING:
            self._rational = fold(self.node)
        return self._rational  # type: ignore[return-value]

    @property
    def symbols(self) -> frozenset[str]:
        """Names of the free variables."""
        if self._symbols is None:
            self._symbols = free_symbols(self.node)
        return self._symbols

    @property
    def infinite(self) -> int:
        """+1 or -1 for ±infinity, 0 otherwise."""
        return infinite_sign(self.node)

    @property
    def approx(self) -> tuple[int, int] | None:
        """(decimal places, significant digits) stated by a decimal literal, or None when exact."""
        return approximation(self.node)

    def at(self, k: int, precise: bool = False) -> complex | mpmath.mpc:
        """The value at the k-th sample point (double, or mpmath at PRECISE_DPS); raises Undefined."""
        if precise:
            return self.precise_at(k, PRECISE_DPS)
        if k not in self._double:
            try:
                self._double[k] = _evaluate(self.node, _Env(k, False), _DOUBLE)
            except (Undefined, ZeroDivisionError, OverflowError, ValueError):
                self._double[k] = None
        value = self._double[k]
        if value is None:
            raise Undefined("no value at this point")
        return value

    def real_at(self, k: int) -> bool:
        """Whether the value at point k is computed through real numbers only (no square root of a negative,
        no logarithm of a non-positive, no i): outside that domain two forms of one function may differ."""
        if k not in self._real:
            try:
                _evaluate(self.node, _Env(k, False), _REAL)
                self._real[k] = True
            except (Undefined, ZeroDivisionError, OverflowError, ValueError):
                self._real[k] = False
        return self._real[k]

    def precise_at(self, k: int, dps: int) -> mpmath.mpc:
        """The value at the k-th sample point with mpmath at `dps` digits; raises Undefined."""
        key = (k, dps)
        if key not in self._precise:
            try:
                with mpmath.workdps(dps):
                    self._precise[key] = mpmath.mpc(_evaluate(self.node, _Env(k, True), _PRECISE))
            except (Undefined, ZeroDivisionError, OverflowError, ValueError):
                self._precise[key] = None
        value = self._precise[key]
        if value is None:
            raise Undefined("no value at this point")
        return value  # type: ignore[return-value]

    def with_node(self, node: Node, percent: bool = False, unit: str | None = None) -> Scalar:
        """A scalar with another tree and the same source text."""
        return Scalar(node, self.raw, percent, unit)

    def normalized(self) -> str:
        text = to_text(self.node)
        if self.unit:
            text += f" {self.unit}"
        return text


_MISSING = object()


class Relation(Value):
    """An equation or inequality (possibly a chain such as 1 < x <= 2)."""

    __slots__ = ("ops", "sides")
    kind = "relation"

    def __init__(self, ops: tuple[str, ...], sides: tuple[Scalar, ...], raw: str = ""):
        super().__init__(raw)
        self.ops = ops
        self.sides = sides

    def normalized(self) -> str:
        out = self.sides[0].normalized()
        for op, side in zip(self.ops, self.sides[1:], strict=True):
            out += f" {op} {side.normalized()}"
        return out


class Items(Value):
    """A collection: "list" (bare a, b), "tuple", "pair" ((a, b): a tuple or an open interval), "set", "pm".

    `decimal`: for a bare `1000,99` or `0,111` (one comma between digits, no blank, not a thousands
    grouping), the same text read with a decimal comma; equivalence.py uses it only against a single number.
    """

    __slots__ = ("shape", "items", "decimal")
    kind = "items"

    def __init__(self, kind: str, items: tuple[Value, ...], raw: str = "", decimal: Scalar | None = None):
        super().__init__(raw)
        self.shape = kind
        self.items = items
        self.decimal = decimal

    def normalized(self) -> str:
        inner = ", ".join(item.normalized() for item in self.items)
        return {"set": "{%s}", "tuple": "(%s)", "pair": "(%s)", "pm": "±{%s}"}.get(self.shape, "%s") % inner


class Interval(Value):
    """An interval with open or closed ends (infinite ends are always open)."""

    __slots__ = ("lo", "hi", "lo_open", "hi_open")
    kind = "interval"

    def __init__(self, lo: Scalar, hi: Scalar, lo_open: bool, hi_open: bool, raw: str = ""):
        super().__init__(raw)
        self.lo, self.hi, self.lo_open, self.hi_open = lo, hi, lo_open, hi_open

    def normalized(self) -> str:
        return f"{'(' if self.lo_open else '['}{self.lo.normalized()}, {self.hi.normalized()}{')' if self.hi_open else ']'}"


class SetOp(Value):
    """A union (or intersection / difference) of sets and intervals."""

    __slots__ = ("op", "parts")
    kind = "setop"

    def __init__(self, op: str, parts: tuple[Value, ...], raw: str = ""):
        super().__init__(raw)
        self.op = op
        self.parts = parts

    def normalized(self) -> str:
        return f" {self.op} ".join(part.normalized() for part in self.parts)


class Matrix(Value):
    """A matrix (a vector is a one-row or one-column matrix)."""

    __slots__ = ("rows", "env")
    kind = "matrix"

    def __init__(self, rows: tuple[tuple[Scalar, ...], ...], env: str, raw: str = ""):
        super().__init__(raw)
        self.rows = rows
        self.env = env

    def normalized(self) -> str:
        return "[" + "; ".join(", ".join(cell.normalized() for cell in row) for row in self.rows) + "]"


class Text(Value):
    """A plain-text answer, normalised: lower case, single spaces, no wrappers or end punctuation."""

    __slots__ = ("text",)
    kind = "text"

    def __init__(self, text: str, raw: str = ""):
        super().__init__(raw)
        self.text = text

    def normalized(self) -> str:
        return self.text


class Choice(Value):
    """A multiple-choice letter."""

    __slots__ = ("letter",)
    kind = "choice"

    def __init__(self, letter: str, raw: str = ""):
        super().__init__(raw)
        self.letter = letter.upper()

    def normalized(self) -> str:
        return f"({self.letter})"


class Time(Value):
    """A time of day; `meridiem` is "am", "pm" or None when the text does not say (4:30)."""

    __slots__ = ("hour", "minute", "meridiem")
    kind = "time"

    def __init__(self, hour: int, minute: int, meridiem: str | None, raw: str = ""):
        super().__init__(raw)
        self.hour, self.minute, self.meridiem = hour, minute, meridiem

    def minutes(self) -> set[int]:
        """Minutes after midnight this time can mean (two for an ambiguous 4:30, one otherwise)."""
        if self.meridiem is None:
            if self.hour > 12 or self.hour == 0:
                return {(self.hour % 24) * 60 + self.minute}
            return {(self.hour % 12) * 60 + self.minute, (self.hour % 12 + 12) * 60 + self.minute}
        offset = 12 if self.meridiem == "pm" else 0
        return {((self.hour % 12) + offset) * 60 + self.minute}

    def normalized(self) -> str:
        return f"{self.hour}:{self.minute:02d}" + (f" {self.meridiem}" if self.meridiem else "")


class Ratio(Value):
    """a:b, or a:b:c (`parts`; `left` and `right` are the first and last)."""

    __slots__ = ("left", "right", "parts")
    kind = "ratio"

    def __init__(self, left: Scalar, right: Scalar, raw: str = "", middle: tuple[Scalar, ...] = ()):
        super().__init__(raw)
        self.left, self.right = left, right
        self.parts = (left, *middle, right)

    def normalized(self) -> str:
        return ":".join(part.normalized() for part in self.parts)


class Labelled(Value):
    """A value with the name the answer gives it: `(p,q)=(3,2)`'s tuple, `AB=4`, `|AB|=1`, `V_1:V_2=11:21`,
    `m\\angle ABC = 40^\\circ`, `a_n=2n+1`, `B^{-1}=[matrix]`. The value is the answer; the label only has to
    agree when both sides give one (`label_key`: a segment or angle read either way round)."""

    __slots__ = ("label", "value")
    kind = "labelled"

    def __init__(self, label: Node, value: Value, raw: str = ""):
        super().__init__(raw)
        self.label = label
        self.value = value

    def normalized(self) -> str:
        return f"{to_text(self.label)} = {self.value.normalized()}"


# -- parsing text into a value -------------------------------------------------------------------------------

_PLAIN_NUMBER = re.compile(r"-?(?:\d+(?:\.\d+)?|\.\d+)")
_DANGLING_RELATION = re.compile(r"(?:=|<|>|≤|≥)\s*$")
_LEADING_APPROX = re.compile(r"^(?:\\approx|\\sim|\\simeq|\\thickapprox)(?![A-Za-z])\s*")
_PLAIN_FRACTION = re.compile(r"(-?)(\d+)/(\d+)")
_UNWRAP = re.compile(
    r"\\(?:text|textbf|textrm|textit|mathrm|mathbf|mbox|textnormal|boxed|fbox)\s*\{([^{}]*)\}|\\[,;:! ]|~|\*\*"
)
_CHOICE = re.compile(
    r"(?:(?i:option|choice|answer)\s*:?\s*)?(?:\(([A-Ja-df-h])\)|\[([A-Ja-df-h])\]|([A-J]))(?:[.):])?"
)
_TIME = re.compile(
    r"(\d{1,2})(?::([0-5]\d)(?::[0-5]\d)?)?\s*(?:([ap])\.?\s*m\b\.?|(noon|midnight))?(?:\s*o'?clock)?", re.I
)
_TEXT_JUNK = re.compile(r"[\s{}]+")
_EDGE_PUNCT = " .,;:!?\"'`*_"


def parse_value(text: str) -> Value:
    """Read one answer (or gold) into a typed value; raises ParseError or TooComplex."""
    try:
        value = _parse_value(text)
        if isinstance(value, Items) and value.shape == "list" and len(value.items) == 2:
            value.decimal = _decimal_comma(prepare(text))
        return value
    except RecursionError:  # the guards bound depth well below the limit; this is the last line of defence
        raise TooComplex("nesting too deep") from None


# A number written with a decimal comma, then at most a unit or currency: "1000,99", "-1,5", "1\\,000,99",
# "3,5 \\text{ cm}", "2,74 $" (the dollar sign was a math delimiter to prepare(), so only "2,74" is left).
_DECIMAL_COMMA = re.compile(
    r"(?P<sign>-?)(?P<whole>\d+(?:(?:\\[,! ]|\{,\}|[ ~])\d{3})*),(?P<fraction>\d+)"
    r"(?P<rest>\s*(?:\\text\s*\{[^{}]*\}|\\mathrm\s*\{[^{}]*\}|[A-Za-z]{1,12}|\\?%|\\\$|€)?)"
)
_THOUSANDS_GROUP = re.compile(r"[1-9]\d{0,2}")


def _decimal_comma(prepared: str) -> Scalar | None:
    """The decimal-comma reading of a bare two-number list, or None. `1,234` is never one (three digits
    after a comma that follows a one-to-three-digit group is a thousands separator, and the tokenizer reads it
    so); a blank after the comma, brackets or a second comma make a list, never a decimal."""
    match = _DECIMAL_COMMA.fullmatch(prepared)
    if match is None:
        return None
    whole = _GROUP_SPLIT_CHARS.sub("", match.group("whole"))
    if len(match.group("fraction")) == 3 and _THOUSANDS_GROUP.fullmatch(whole):
        return None
    reading = f"{match.group('sign')}{whole}.{match.group('fraction')}{match.group('rest')}"
    try:
        value = _parse_value(reading)
    except ParseError:
        return None
    return value if isinstance(value, Scalar) else None


_GROUP_SPLIT_CHARS = re.compile(r"\\[,! ]|\{,\}|[ ~]")


def _parse_value(text: str) -> Value:
    guards.check_text(text)
    prepared = _LEADING_APPROX.sub("", prepare(text))  # "\\approx 8.24 mph" states 8.24 mph, to its digits
    if not prepared:
        raise ParseError("empty answer")
    if _PLAIN_NUMBER.fullmatch(prepared):
        if prepared[0] == "-":
            return Scalar(Node("neg", (_literal_node(prepared[1:]),)), prepared)
        return Scalar(_literal_node(prepared), prepared)
    fraction = _PLAIN_FRACTION.fullmatch(prepared)
    if fraction:
        node = Node("div", (_literal_node(fraction.group(2)), _literal_node(fraction.group(3))), "slash")
        if fraction.group(1):
            node = Node("neg", (node,))
        return Scalar(node, prepared)
    unwrapped = _UNWRAP.sub(lambda m: m.group(1) if m.group(1) is not None else " ", prepared).strip()
    choice = _CHOICE.fullmatch(unwrapped)
    if choice:
        letter = next(group for group in choice.groups() if group)
        if choice.group(3) or letter.isalpha():
            return Choice(letter, prepared)
    time = _TIME.fullmatch(unwrapped)
    if time:
        found = _time(time, prepared)
        if found is not None:
            return found
    based = _BASED.fullmatch(unwrapped)
    if based is not None:
        found_base = _letter_base(based)
        if found_base is not None:
            return Scalar(found_base, prepared)
    if _is_prose(unwrapped) or unwrapped.lower() in _SHORT_WORDS:
        words = _text_form(unwrapped)
        number = number_from_words(words)
        if number is not None:
            return Scalar(Node("num", (), Number(Fraction(number), words, "int")), prepared)
        return Text(words, prepared)
    try:
        return to_value(parse_prepared(prepared), prepared)
    except ParseError:
        # Words we cannot read as math are a plain-text answer; broken LaTeX ("\\frac{1}{") is not.
        words = _text_form(unwrapped)
        if words and "\\" not in unwrapped and any(char.isalpha() for char in words):
            if _DANGLING_RELATION.search(unwrapped):  # "x = ": a relation with its value missing, not words
                raise
            return Text(words, prepared)
        raise


_COMMANDS = re.compile(r"\\(?:begin|end)\s*\{[^{}]*\}|\\[A-Za-z]+")
_WORD = re.compile(r"[A-Za-z]{3,}")
_KNOWN_WORDS = frozenset(FUNCTIONS) | frozenset(GREEK) | {"pi", "inf", "infty", "infinity", "and"}


def _is_prose(text: str) -> bool:
    """Words and no digits ("no solution", "Monday", "all real numbers"): a plain-text answer."""
    if any(char.isdigit() for char in text):
        return False
    words = _WORD.findall(_COMMANDS.sub(" ", text))
    return any(word.lower() not in _KNOWN_WORDS for word in words)


_SHORT_WORDS = frozenset({"no", "yes", "ok", "na", "n/a"})
_BASED = re.compile(r"\(?([0-9A-Za-z]+)\)?\s*_\s*\{?\s*\(?(\d{1,2})\)?\s*\}?")


def _letter_base(match: re.Match) -> Node | None:
    """2A_{16}, ff_{16}: numerals with letter digits (the grammar reads pure digit numerals itself)."""
    digits, base = match.group(1), int(match.group(2))
    if digits.isdigit() or not 11 <= base <= 36:
        return None
    try:
        value = int(digits, base)
    except ValueError:
        return None
    return Node("num", (), Number(Fraction(value), digits.upper(), "base", base=base))


_SMALL = {
    word: index
    for index, word in enumerate(
        [
            "zero",
            "one",
            "two",
            "three",
            "four",
            "five",
            "six",
            "seven",
            "eight",
            "nine",
            "ten",
            "eleven",
            "twelve",
            "thirteen",
            "fourteen",
            "fifteen",
            "sixteen",
            "seventeen",
            "eighteen",
            "nineteen",
        ]
    )
}
_TENS = {
    word: 10 * (index + 2)
    for index, word in enumerate(
        ["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
    )
}
_SCALES = {"hundred": 100, "thousand": 1000, "million": 10**6, "billion": 10**9}


def number_from_words(text: str) -> int | None:
    """The integer that English number words name ("twelve", "twenty-one", "three hundred and five")."""
    words = text.replace("-", " ").replace(",", " ").split()
    if not words or len(words) > 12:
        return None
    total = current = 0
    negative = False
    seen = False
    for index, word in enumerate(words):
        if word in ("minus", "negative") and index == 0:
            negative = True
        elif word in _SMALL:
            current += _SMALL[word]
            seen = True
        elif word in _TENS:
            current += _TENS[word]
            seen = True
        elif word == "hundred" and seen:
            current = max(current, 1) * 100
        elif word in _SCALES and seen:
            total += max(current, 1) * _SCALES[word]
            current = 0
        elif word == "and" and seen:
            continue
        elif word == "a" and index + 1 < len(words) and words[index + 1] in _SCALES:
            current, seen = 1, True
        else:
            return None
    if not seen:
        return None
    value = total + current
    return -value if negative else value


def check_value(value: Value) -> Value:
    """Fold every scalar of a value, so the cost guards trip now (for a gold: at request time) if at all."""
    stack = [value]
    while stack:
        current = stack.pop()
        if isinstance(current, Scalar):
            current.rational  # noqa: B018 - folding is the check
        elif isinstance(current, Relation):
            stack.extend(current.sides)
        elif isinstance(current, Items):
            stack.extend(current.items)
        elif isinstance(current, Interval):
            stack.extend((current.lo, current.hi))
        elif isinstance(current, SetOp):
            stack.extend(current.parts)
        elif isinstance(current, Matrix):
            stack.extend(cell for row in current.rows for cell in row)
        elif isinstance(current, Ratio):
            stack.extend(current.parts)
        elif isinstance(current, Labelled):
            stack.append(current.value)
    return value


def _time(match: re.Match, raw: str) -> Time | None:
    if match.group(2) is None and match.group(3) is None and match.group(4) is None:
        return None  # a bare "6" is a number, not six o'clock
    hour, minute = int(match.group(1)), int(match.group(2) or 0)
    meridiem = (match.group(3).lower() + "m") if match.group(3) else None
    if match.group(4):
        if hour != 12:
            return None
        meridiem = "pm" if match.group(4).lower() == "noon" else "am"
    if meridiem is not None and not 1 <= hour <= 12:
        return None
    if hour > 24:
        return None
    return Time(hour, minute, meridiem, raw)


def _text_form(text: str) -> str:
    return _TEXT_JUNK.sub(" ", text.replace("\\ ", " ").replace("\\", " ")).strip(_EDGE_PUNCT).lower()


def text_form(text: str) -> str:
    """The normalised plain-text form of an answer (case, spacing, wrappers and end punctuation dropped)."""
    return _text_form(_UNWRAP.sub(lambda m: m.group(1) if m.group(1) is not None else " ", prepare(text)))


def _literal_node(text: str) -> Node:
    return Node("num", (), number_literal(text))


def to_value(node: Node, raw: str = "") -> Value:
    """Interpret a tree as a typed value."""
    op = node.op
    if op == "group":
        return to_value(node.args[0], raw)
    if op == "list":
        items: list[Value] = []
        for item in node.args:
            value = to_value(item, to_text(item))
            # "\\pm i, \\pm 2\\sqrt2" and "x = 1/2, x = (-1 ± √13)/4": each ± gives its two values to the list
            items.extend(value.items if isinstance(value, Items) and value.shape == "pm" else (value,))
        return _solutions(Items("list", tuple(items), raw))
    if op != "rel" and sum(part.op == "pm" for part in node.walk()) > (op == "pm"):
        return _expanded_pm(node, raw)  # ± inside an expression, or several of them (1 ± 2 ∓ 3)
    if op in ("add", "mul", "neg", "pow", "div") and any(part.op == "matrix" for part in node.walk()):
        return _matrix_arithmetic(node, raw)
    if op == "bracket":
        return _bracket(node, raw)
    if op == "set":
        return Items("set", tuple(to_value(item, to_text(item)) for item in node.args), raw)
    if op == "pm":
        return _plus_minus(node, raw)
    if op == "rel":
        return _relation(node, raw)
    if op in ("union", "intersect", "setminus"):
        return SetOp(op, tuple(to_value(part, to_text(part)) for part in node.args), raw)
    if op == "matrix":
        if node.value in ("vmatrix", "Vmatrix"):  # |a b; c d| is a determinant: a number, not a matrix
            return scalar(_cells(node), raw)  # type: ignore[arg-type]  # _cells writes the determinant out
        rows = tuple(tuple(scalar(cell) for cell in row.args) for row in node.args)
        return Matrix(rows, str(node.value), raw)
    if op == "ratio":
        return _ratio(node, raw)
    if op == "text":
        return Text(_text_form(str(node.value)), raw)
    if op == "domain":
        if node.value == "R":
            return Interval(_INF_NEG, _INF_POS, True, True, raw)
        return Text(f"domain {node.value}", raw)
    if op == "builder":
        return to_value(node.args[1], raw)
    if op == "empty":
        raise ParseError("an empty group")
    if op == "unit":
        inner = to_value(node.args[0], raw)
        if isinstance(inner, Scalar):
            return scalar(node, raw)
        if isinstance(inner, Time):
            # Only a meridiem may follow a time: "4:30 a.m. or p.m." is a hedge, not a time.
            raise ParseError("text after a time of day")
        if isinstance(inner, Relation):
            last = inner.sides[-1]
            last = last.with_node(last.node, last.percent, _unit_key(str(node.value)))
            return Relation(inner.ops, (*inner.sides[:-1], last), raw)
        return inner
    return scalar(node, raw)


def scalar(node: Node, raw: str = "") -> Scalar:
    """A Scalar from a tree, lifting a top-level percent sign, degree sign or unit into annotations."""
    percent = False
    unit = None
    negate = False
    while True:
        if node.op == "group":
            node = node.args[0]
        elif node.op == "neg" and node.args[0].op in ("pct", "deg", "unit", "group"):
            negate = not negate
            node = node.args[0]
        elif node.op == "pct" and not percent:
            percent = True
            node = node.args[0]
        elif node.op == "deg" and (unit is None or unit in ("c", "f")):
            unit = "deg" + (unit or "")  # 100°C: the unit node wraps the degree sign
            node = node.args[0]
        elif node.op == "unit" and unit is None:
            unit = _unit_key(str(node.value))
            node = node.args[0]
            if unit in _PERCENT_WORDS and not percent:  # "50 percent"
                unit, percent = None, True
        else:
            break
    if negate:
        node = Node("neg", (node,))
    ops = {part.op for part in node.walk()}  # one walk decides which rewrites the tree needs
    if "bracket" in ops and node.op != "bracket":
        node = _grouped(node)
    if "unit" in ops:
        node = _symbolise(node)
    if "sum" in ops or "prod" in ops:
        node = _expanded(node)
    if percent:
        node = Node("pct", (node,))
    return Scalar(node, raw or to_text(node), percent, unit)


MAX_SERIES_NODES = 6_000
"""Most nodes a series may write out to, nested series included (a double sum of 1000 x 1000 terms is not)."""
MAX_SERIES_TERMS = 1_000
"""Most terms a \\sum or \\prod with whole-number limits is written out to; more is TooComplex."""


def expand_series(node: Node) -> Node:
    """Every \\sum / \\prod whose limits are whole numbers written out as a sum or product of its terms
    (the index replaced by each number); one with a variable limit (\\sum_{k=1}^{n}) is left as it is, and
    equivalence.py compares it at whole numbers."""
    return _expanded(node) if any(part.op in ("sum", "prod") for part in node.walk()) else node


def _expanded(node: Node) -> Node:
    args = tuple(_expanded(arg) for arg in node.args)
    if node.op in ("sum", "prod"):
        body, first, last = args
        start, stop = fold(first), fold(last)
        if start is None or stop is None:
            return Node(node.op, args, node.value)
        if start.denominator != 1 or stop.denominator != 1:
            raise ParseError("a series whose limits are not whole numbers")
        count = int(stop) - int(start) + 1
        if count > MAX_SERIES_TERMS:
            raise TooComplex(f"a series of more than {MAX_SERIES_TERMS} terms")
        if count * sum(1 for _ in body.walk()) > MAX_SERIES_NODES:  # nested series multiply their terms
            raise TooComplex(f"a series that writes out to more than {MAX_SERIES_NODES} nodes")
        if count <= 0:  # an empty sum is 0, an empty product 1
            return Node(
                "num", (), Number(Fraction(int(node.op == "prod")), str(int(node.op == "prod")), "int")
            )
        terms = tuple(
            substitute(body, str(node.value), Fraction(index)) for index in range(int(start), int(stop) + 1)
        )
        return Node("group", (Node("add" if node.op == "sum" else "mul", terms),))
    return node if args == node.args else Node(node.op, args, node.value)


def substitute(node: Node, name: str, value: Fraction) -> Node:
    """The tree with the variable `name` replaced by a number (a series' own index inside it is left alone)."""
    if node.op in ("sym", "const") and node.value == name:  # \\prod_{i=1}^{4} i: i is the index there
        number = Node(
            "num", (), Number(abs(value), str(abs(value)), "int" if value.denominator == 1 else "dec")
        )
        return Node("group", (Node("neg", (number,)),)) if value < 0 else number
    if node.op in ("sum", "prod") and node.value == name:
        body, first, last = node.args
        return Node(
            node.op, (body, substitute(first, name, value), substitute(last, name, value)), node.value
        )
    args = tuple(substitute(arg, name, value) for arg in node.args)
    return node if args == node.args else Node(node.op, args, node.value)


def _symbolise(node: Node) -> Node:
    """A one-letter "unit" inside an expression is a variable: `\\frac{3 m}{2}`, `3m + 1`, `\\frac{1}{LCs^2}`
    (a unit only ends a whole answer, `5 m`, and that one scalar() has already lifted off)."""
    args = tuple(_symbolise(arg) for arg in node.args)
    if node.op == "unit" and isinstance(node.value, str) and len(node.value) == 1 and node.value.isalpha():
        return Node("mul", (args[0], Node("sym", (), node.value)))
    return node if args == node.args else Node(node.op, args, node.value)


def _grouped(node: Node) -> Node:
    """`2[x-1]`, `x\\left[c_1\\cos x + c_2\\sin x\\right]`: square brackets around one expression inside a
    larger one group it, as parentheses do (alone, `[a, b]` stays an interval and `[x]` a one-item list)."""
    args = tuple(_grouped(arg) for arg in node.args)
    if node.op == "bracket" and len(args) == 1 and node.value in ("[]", "()"):
        return Node("group", args)
    return node if args == node.args else Node(node.op, args, node.value)


def _bracket(node: Node, raw: str) -> Value:
    opener, closer = node.value[0], node.value[-1]
    items = node.args
    if len(items) == 2 and opener in "([" and closer in ")]":
        try:
            lo, hi = scalar(items[0]), scalar(items[1])
        except ParseError:
            lo = hi = None
        if lo is not None and hi is not None:
            if opener == "(" and closer == ")" and not (lo.infinite or hi.infinite):
                return Items("pair", (lo, hi), raw)
            return Interval(lo, hi, opener == "(" or lo.infinite != 0, closer == ")" or hi.infinite != 0, raw)
    if opener == "(" and closer == "]" or opener == "[" and closer == ")":
        raise ParseError("an interval needs two ends")
    return Items("tuple", tuple(to_value(item, to_text(item)) for item in items), raw)


def _plus_minus(node: Node, raw: str) -> Items:
    center, spread = node.args
    plus = Node("add", (center, spread))
    minus = Node("add", (center, Node("neg", (spread,))))
    if node.value == "mp":
        plus, minus = minus, plus
    return Items("pm", (scalar(plus), scalar(minus)), raw)


MAX_MATRIX_SIDE = 10
"""Largest matrix side that matrix arithmetic is carried out on (its cells stay trees, compared as usual)."""

_Cells = tuple[tuple[Node, ...], ...]


def _matrix_arithmetic(node: Node, raw: str) -> Matrix | Scalar:
    """A sum, product, scalar multiple, negation, whole power or transpose of written-out matrices, carried out
    cell by cell on the trees (nothing is evaluated here): `\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix} +
    \\begin{pmatrix}1&0\\\\0&1\\end{pmatrix}` is the matrix of the sums. Shapes that do not fit are a ParseError."""
    cells = _cells(node)
    if not isinstance(cells, tuple):
        if any(part.op == "matrix" and part.value not in ("vmatrix", "Vmatrix") for part in cells.walk()):
            raise ParseError("a matrix inside an expression that is not matrix arithmetic")
        return scalar(cells, raw)  # determinants only: a number
    env = next(str(part.value) for part in node.walk() if part.op == "matrix")
    return Matrix(tuple(tuple(scalar(cell) for cell in row) for row in cells), env, raw)


def _cells(node: Node) -> _Cells | Node:
    """The cells of a matrix-valued tree, or the tree itself when it is a scalar."""
    op = node.op
    if op == "matrix":
        rows = tuple(tuple(row.args) for row in node.args)
        if len(rows) > MAX_MATRIX_SIDE or any(len(row) != len(rows[0]) for row in rows):
            raise ParseError("a matrix too large or with ragged rows for arithmetic")
        if node.value in ("vmatrix", "Vmatrix"):
            return _determinant(rows)  # a determinant is a number inside the arithmetic too
        return rows
    if op == "group":
        return _cells(node.args[0])
    if op == "neg":
        inner = _cells(node.args[0])
        return (
            _map(inner, lambda cell: Node("neg", (cell,)))
            if isinstance(inner, tuple)
            else Node("neg", (inner,))
        )
    if op == "add":
        parts = [_cells(arg) for arg in node.args]
        if not any(isinstance(part, tuple) for part in parts):
            return Node("add", tuple(parts), node.value)  # type: ignore[arg-type]
        if not all(isinstance(part, tuple) for part in parts):
            raise ParseError("a matrix added to a number")
        shape = _shape(parts[0])  # type: ignore[arg-type]
        if any(_shape(part) != shape for part in parts):  # type: ignore[arg-type]
            raise ParseError("matrices of different shapes added")
        return tuple(
            tuple(Node("add", tuple(part[i][j] for part in parts)) for j in range(shape[1]))  # type: ignore[index]
            for i in range(shape[0])
        )
    if op == "mul":
        result: _Cells | Node | None = None
        for arg in node.args:
            part = _cells(arg)
            result = part if result is None else _multiply(result, part)
        return node if result is None else result
    if op == "div":
        top, bottom = _cells(node.args[0]), _cells(node.args[1])
        if isinstance(bottom, tuple):
            raise ParseError("division by a matrix")
        if isinstance(top, tuple):
            return _map(top, lambda cell: Node("div", (cell, bottom)))
        return Node("div", (top, bottom), node.value)
    if op == "pow":
        base = _cells(node.args[0])
        if not isinstance(base, tuple):
            return Node("pow", (base, node.args[1]), node.value)
        exponent = node.args[1]
        if exponent.op == "sym" and exponent.value == "T":
            return tuple(zip(*base, strict=True))
        power = fold(exponent)
        if power is None or power.denominator != 1 or not -1 <= power <= 8:
            raise ParseError("a matrix power that is not a whole number from -1 to 8")
        rows, columns = _shape(base)
        if power <= 0 and rows != columns:
            raise ParseError("a power of a matrix that is not square")
        if power == 0:
            return tuple(tuple(_number(int(i == j)) for j in range(columns)) for i in range(rows))
        if power == -1:
            return _inverse(base)
        result = base
        for _ in range(int(power) - 1):
            result = _multiply(result, base)  # type: ignore[assignment]
        return result
    if any(part.op == "matrix" for part in node.walk()):
        raise ParseError(f"a matrix inside {op}")
    return node


MAX_INVERSE_SIDE = 4
"""Largest square matrix whose determinant and inverse are written out (cofactors grow as n!)."""


def _number(value: int) -> Node:
    return Node("num", (), Number(Fraction(value), str(value), "int"))


def _determinant(cells: _Cells) -> Node:
    """The determinant of a square matrix of trees, by cofactor expansion along the first row (n <= 4)."""
    size = len(cells)
    if size == 0 or any(len(row) != size for row in cells) or size > MAX_INVERSE_SIDE:
        raise ParseError(f"a determinant of a matrix that is not square or larger than {MAX_INVERSE_SIDE}")
    if size == 1:
        return cells[0][0]
    terms = []
    for column in range(size):
        minor = tuple(tuple(row[:column] + row[column + 1 :]) for row in cells[1:])
        term = Node("mul", (cells[0][column], _determinant(minor)))
        terms.append(term if column % 2 == 0 else Node("neg", (term,)))
    return Node("group", (Node("add", tuple(terms)),))


def _inverse(cells: _Cells) -> _Cells:
    """The inverse of a square matrix of trees: its adjugate over its determinant (n <= 4); a singular one
    has no value at any point, so it equals nothing."""
    size = len(cells)
    determinant = _determinant(cells)
    if size == 1:
        return ((Node("div", (_number(1), determinant)),),)

    def cofactor(i: int, j: int) -> Node:
        minor = tuple(tuple(row[:j] + row[j + 1 :]) for index, row in enumerate(cells) if index != i)
        value = _determinant(minor)
        return value if (i + j) % 2 == 0 else Node("neg", (value,))

    return tuple(tuple(Node("div", (cofactor(j, i), determinant)) for j in range(size)) for i in range(size))


def _shape(cells: _Cells) -> tuple[int, int]:
    return len(cells), len(cells[0]) if cells else 0


def _map(cells: _Cells, function) -> _Cells:
    return tuple(tuple(function(cell) for cell in row) for row in cells)


def _multiply(left: _Cells | Node, right: _Cells | Node) -> _Cells | Node:
    if not isinstance(left, tuple) and not isinstance(right, tuple):
        return Node("mul", (left, right))
    if not isinstance(left, tuple):
        return _map(right, lambda cell: Node("mul", (left, cell)))  # type: ignore[arg-type]
    if not isinstance(right, tuple):
        return _map(left, lambda cell: Node("mul", (cell, right)))
    (rows, inner), (inner_right, columns) = _shape(left), _shape(right)
    if inner != inner_right:
        raise ParseError("matrices whose shapes cannot be multiplied")
    return tuple(
        tuple(
            Node("add", tuple(Node("mul", (left[i][k], right[k][j])) for k in range(inner)))
            for j in range(columns)
        )
        for i in range(rows)
    )


MAX_PM = 3
"""Most ± signs one value may hold (2^3 = 8 values): more is a ParseError, never an explosion."""


def _expanded_pm(node: Node, raw: str) -> Items:
    """An expression with ± inside (`\\frac{-1 \\pm \\sqrt{13}}{4}`, `\\pm 2\\sqrt6`, `y = \\pm\\sqrt3 x`): the
    values with each ± read as + and as -, in that order."""
    signs = sum(part.op == "pm" for part in node.walk())
    if signs > MAX_PM:
        raise ParseError(f"more than {MAX_PM} ± signs")
    if any(part.op == "pm" and part.value == "mp" for part in node.walk()):
        # ± with ∓ in one expression are read together (upper signs, then lower): 1 ± 2 ∓ 3 is {0, 2}
        trees = [_linked_signs(node, upper=True), _linked_signs(node, upper=False)]
    else:
        trees = [node]
        for _ in range(signs):
            trees = [branch for tree in trees for branch in _split_first_pm(tree)]
    return Items("pm", tuple(to_value(tree, to_text(tree)) for tree in trees), raw)


def _linked_signs(node: Node, upper: bool) -> Node:
    """The tree with every ± as + and every ∓ as - (upper), or the other way round (lower)."""
    args = tuple(_linked_signs(arg, upper) for arg in node.args)
    if node.op == "pm":
        center, spread = args
        plus = (node.value != "mp") == upper
        return Node("add", (center, spread if plus else Node("neg", (spread,))))
    return node if args == node.args else Node(node.op, args, node.value)


def _split_first_pm(node: Node) -> tuple[Node, Node]:
    """The tree with its first ± (depth first) as + and as -."""
    if node.op == "pm":
        center, spread = node.args
        plus = Node("add", (center, spread))
        minus = Node("add", (center, Node("neg", (spread,))))
        return (minus, plus) if node.value == "mp" else (plus, minus)
    for index, arg in enumerate(node.args):
        if any(part.op == "pm" for part in arg.walk()):
            plus, minus = _split_first_pm(arg)
            return (
                Node(node.op, (*node.args[:index], plus, *node.args[index + 1 :]), node.value),
                Node(node.op, (*node.args[:index], minus, *node.args[index + 1 :]), node.value),
            )
    return node, node


def _flat_pm(values: tuple[Value, ...], raw: str) -> Items:
    flat: list[Value] = []
    for value in values:
        flat.extend(value.items if isinstance(value, Items) and value.shape == "pm" else (value,))
    if len(flat) > 2**MAX_PM:
        raise ParseError(f"more than {MAX_PM} ± signs")
    return Items("pm", tuple(flat), raw)


def _solutions(items: Items) -> Items:
    """`p=5, q=2; p=7, q=2`: assignments whose names repeat in the same order are several solutions, each a
    tuple in the order of the names: (5, 2), (7, 2). Anything else is left as it is."""
    names: list[str] = []
    for item in items.items:
        if not (isinstance(item, Relation) and item.ops == ("=",) and item.sides[0].node.op == "sym"):
            return items
        if item.sides[1].symbols:
            return items
        names.append(str(item.sides[0].node.value))
    period = len(dict.fromkeys(names))
    if period < 2 or len(names) % period or len(names) == period:
        return items
    if any(names[index] != names[index % period] for index in range(len(names))):
        return items
    solutions = tuple(
        Items("tuple", tuple(item.sides[1] for item in items.items[start : start + period]))  # type: ignore[attr-defined]
        for start in range(0, len(names), period)
    )
    return Items("list", solutions, items.raw)


def ratio_parts(node: Node) -> list[Node]:
    """The parts of a ratio chain, `a:b:c` parsed as (a:b):c."""
    if node.op != "ratio":
        return [node]
    return [*ratio_parts(node.args[0]), *ratio_parts(node.args[1])]


def _relation(node: Node, raw: str) -> Value:
    ops = node.value
    if ops == ("in",):
        return to_value(node.args[1], raw)
    if ops == ("=",) and len(node.args) == 2:
        labelled = _labelled(node.args[0], node.args[1], raw)
        if labelled is not None:
            return labelled
    sides = []
    for side in node.args:
        if side.op == "text":  # "\\text{area} = 5": a word as a label
            side = Node("sym", (), str(side.value).strip())
        if (
            side.op != "pm"
            and side is node.args[-1]
            and len(node.args) == 2
            and any(part.op == "pm" for part in side.walk())
        ):
            # x = (-1 ± √13)/4, y = ±√3 x: as many relations as the ± gives values
            branches = _split_first_pm(side)
            return _flat_pm(
                tuple(to_value(Node("rel", (*node.args[:-1], branch), ops), raw) for branch in branches), raw
            )
        if side.op == "pm":
            # x = 1 ± √2 means two solutions.
            values = _plus_minus(side, to_text(side)).items
            relations = tuple(
                Relation(ops, tuple(scalar(other) for other in node.args[:-1]) + (value,), raw)  # type: ignore[operator]
                for value in values
            )
            if side is node.args[-1] and len(node.args) == 2:
                return Items("pm", relations, raw)
            raise ParseError("± inside a chain of relations")
        sides.append(scalar(side))
    if "in" in ops:
        raise ParseError("membership inside a chain of relations")
    return Relation(tuple(ops), tuple(sides), raw)


def is_label(node: Node) -> bool:
    """A name for a quantity rather than an expression in variables: a segment (AB, \\overline{AB}), its
    length (|AB|), a quotient of such (\\frac{NO}{BO}), an angle (\\angle ABC, m\\angle ABC), an accented or
    subscripted letter (\\bar{x}, V_1, a_n)."""
    op = node.op
    if op == "sym":
        return True
    if op == "func" and node.value == "abs" and node.args:
        return is_label(node.args[0])
    if op == "div":
        return _segment(node.args[0]) and _segment(node.args[1])
    return _segment(node)


def _segment(node: Node) -> bool:
    """Capital letters side by side (AB, ABC), or an angle with or without its measure's `m`."""
    if node.op == "sym":
        name = str(node.value)
        return (len(name) == 1 and name.isupper()) or name.startswith(("angle(", "bar("))
    if node.op != "mul" or not all(arg.op == "sym" for arg in node.args):
        return False
    names = [str(arg.value) for arg in node.args]
    if any(name.startswith("angle(") for name in names):
        return all(name.startswith("angle(") or name == "m" for name in names)
    return all(len(name) == 1 and name.isupper() for name in names)


def _subscript_symbols(name: str) -> frozenset[str]:
    """The letters of a subscript (`a_{n}` -> {n}); a sequence term may be stated in its index."""
    _, underscore, subscript = name.partition("_")
    return frozenset(re.findall(r"[A-Za-z]", subscript)) if underscore else frozenset()


def _labelled(left: Node, right: Node, raw: str) -> Value | None:
    """The value of `label = value` when the left side names a quantity (see Labelled); None for an equation."""
    if left.op == "bracket" and right.op == "bracket" and len(left.args) == len(right.args) > 1:
        if all(arg.op == "sym" for arg in left.args):
            # (p, q) = (3, 2) is the system p = 3, q = 2, so "p=3, q=2", "q=2, p=3" and "(3, 2)" all match it.
            try:
                sides = [
                    (scalar(name), scalar(value)) for name, value in zip(left.args, right.args, strict=True)
                ]
            except ParseError:
                return Labelled(left, to_value(right, to_text(right)), raw)
            if not any(value.symbols for _, value in sides):
                return Items(
                    "list",
                    tuple(
                        Relation(("=",), pair, f"{to_text(pair[0].node)} = {to_text(pair[1].node)}")
                        for pair in sides
                    ),
                    raw,
                )
        return None
    if left.op == "ratio" and right.op in ("ratio", "num", "div"):
        names = ratio_parts(left)
        if not all(is_label(name) for name in names):
            return None
        values = ratio_parts(right)
        if len(values) == len(names) > 1:  # a ratio, even where "11:21" alone would read as a time of day
            scalars = tuple(scalar(part) for part in values)
            return Labelled(left, Ratio(scalars[0], scalars[-1], to_text(right), scalars[1:-1]), raw)
        return Labelled(left, to_value(right, to_text(right)), raw)
    if right.op == "matrix" and free_symbols(left) and not free_symbols(right):
        return Labelled(left, to_value(right, to_text(right)), raw)  # B^{-1} = [...]
    if not is_label(left):
        return None
    value_symbols = free_symbols(right)
    if left.op == "sym" and right.op in ("bracket", "set", "matrix", "union") and not value_symbols:
        return Labelled(left, to_value(right, to_text(right)), raw)  # M = (-1, 7/2): a point named M
    if left.op == "sym":
        # x = 3, x_1 = 2, \\angle ABC = 40° stay Relations (assignment() reads them, systems are built of them);
        # a_n = 2n + 1 is a sequence's term stated in its index; y = 2x + 1 stays an equation.
        if not value_symbols or not value_symbols <= _subscript_symbols(str(left.value)):
            return None
    elif value_symbols:
        return None
    return Labelled(left, to_value(right, to_text(right)), raw)


def _ratio(node: Node, raw: str) -> Value:
    parts = ratio_parts(node)
    if len(parts) > 2:  # a:b:c
        scalars = tuple(scalar(part) for part in parts)
        return Ratio(scalars[0], scalars[-1], raw, scalars[1:-1])
    left, right = node.args
    if (
        left.op == "num"
        and right.op == "num"
        and left.value.kind == "int"
        and right.value.kind == "int"
        and len(right.value.text) == 2
        and left.value.value <= 24
        and right.value.value < 60
    ):
        return Time(int(left.value.value), int(right.value.value), None, raw)
    return Ratio(scalar(left), scalar(right), raw)


_PERCENT_WORDS = frozenset({"percent", "percentage", "pct", "percentagepoint"})
_UNIT_SYNONYMS = {
    "centimeter": "cm", "centimetre": "cm", "millimeter": "mm", "millimetre": "mm", "kilometer": "km",
    "kilometre": "km", "meter": "m", "metre": "m", "inch": "in", "inche": "in", "foot": "ft", "feet": "ft",
    "yard": "yd", "mile": "mi", "second": "s", "sec": "s", "minute": "min", "hour": "h", "hr": "h",
    "gram": "g", "kilogram": "kg", "pound": "lb", "lb": "lb", "degree": "deg", "°": "deg", "dollar": "$",
    "usd": "$", "cent": "cent", "liter": "l", "litre": "l", "milliliter": "ml", "day": "day", "week": "week",
    "year": "year", "unit": "unit", "hrs": "h", "hours": "h", "mins": "min", "secs": "s", "ft": "ft",
    "mph": "mi/h", "kph": "km/h", "kmh": "km/h", "celsius": "degc", "fahrenheit": "degf", "°c": "degc",
    "°f": "degf", "degreec": "degc", "degreef": "degf", "degcelsiu": "degc", "inches": "in", "pounds": "lb", "lbs": "lb", "ms": "ms", "mass": "mass", "gas": "gas", "bus": "bus",
}  # fmt: skip


_UNIT_TOKEN = re.compile(r"\^\s*\{?\s*(\d+)\s*\}?|/|[A-Za-z$°%]+")


def _unit_key(unit: str) -> str:
    """A unit in a comparable form: "12 square centimeters" and "12 cm^2" both give cm^2; "miles per hour"
    and "mph" give mi/h. Case and plurals are dropped and common spellings merged."""
    parts: list[str] = []
    power = ""
    for token in _UNIT_TOKEN.finditer(unit.replace("\\", " ")):
        text = token.group()
        if token.group(1) is not None:
            if parts and parts[-1] != "/":
                parts[-1] += "^" + token.group(1)
            continue
        word = text.lower()
        if word in ("square", "sq"):
            power = "^2"
            continue
        if word in ("cubic", "cu"):
            power = "^3"
            continue
        if word in ("per", "/"):
            parts.append("/")
            continue
        if word.endswith("s") and len(word) > 3 and word not in _UNIT_SYNONYMS:
            word = word[:-1]
        word = _UNIT_SYNONYMS.get(word, word)
        parts.append(word + power)
        power = ""
    key = "".join(parts)
    return _UNIT_SYNONYMS.get(key, key)


def _check_scalar(node: Node) -> None:
    for part in node.walk():
        if part.op not in _SCALAR_OPS:
            raise ParseError(f"{part.op} inside an expression")
        if part.op == "unit" and part is not node:
            raise ParseError("a unit inside an expression")


# -- exact folding -----------------------------------------------------------------------------------------


def fold(node: Node) -> Fraction | None:
    """The exact rational value of a constant tree, or None when it is not a rational constant.

    Guards bound every integer built: `2^{2^{30}}` and `(10^{10})!` raise TooComplex here, before any
    work, and an exponent too large to be exact on a non-rational base raises it too.
    """
    op = node.op
    args = node.args
    if op == "num":
        return node.value.value
    if op in ("group", "unit"):
        return fold(args[0])
    if op == "neg":
        value = fold(args[0])
        return None if value is None else -value
    if op == "add" or op == "mixed":
        total = Fraction(0)
        missing = False
        for arg in args:
            value = fold(arg)
            if value is None:
                missing = True
            else:
                total += value
        return None if missing else guards.check_fraction(total)
    if op == "mul":
        product = Fraction(1)
        missing = False
        for arg in args:
            value = fold(arg)
            if value is None:
                missing = True
            else:
                product = guards.check_fraction(product * value)  # each step: \\prod of 1000 huge factors
        if missing:
            return None
        return product
    if op == "div":
        numerator, denominator = fold(args[0]), fold(args[1])
        if numerator is None or denominator is None:
            return None
        if denominator == 0:
            return None
        return guards.check_fraction(numerator / denominator)
    if op == "pct":
        value = fold(args[0])
        return None if value is None else value / 100
    if op == "pow":
        return _fold_power(args[0], args[1])
    if op == "fact":
        value = fold(args[0])
        if value is None:
            _check_factorial_size(args[0])
            return None
        if value.denominator != 1 or value < 0:
            if abs(value) > guards.MAX_FACTORIAL:
                raise TooComplex(f"factorial of more than {guards.MAX_FACTORIAL}")
            return None
        return guards.factorial(value)
    if op == "root":
        radicand, index = fold(args[0]), fold(args[1])
        if radicand is None or index is None or index.denominator != 1 or index <= 0:
            return None
        return _exact_root(radicand, int(index))
    if op == "func":
        return _fold_function(node)
    return None


def _fold_power(base_node: Node, exponent_node: Node) -> Fraction | None:
    exponent = fold(exponent_node)
    base = fold(base_node)
    if exponent is None:
        return None
    if base is None:
        if abs(exponent) > guards.MAX_EXPONENT:
            raise TooComplex(f"an exponent larger than {guards.MAX_EXPONENT}")
        return None
    if exponent.denominator == 1:
        if base == 0 and exponent < 0:
            return None
        return guards.power(base, int(exponent))
    if abs(exponent) > guards.MAX_EXPONENT and base not in (0, 1):
        raise TooComplex(f"an exponent larger than {guards.MAX_EXPONENT}")
    if base < 0:
        return None
    root = _exact_root(base, exponent.denominator)
    if root is None:
        return None
    return guards.power(root, exponent.numerator)


def _exact_root(value: Fraction, index: int) -> Fraction | None:
    if index > 64:
        return None
    if value < 0:
        if index % 2 == 0:
            return None
        root = _exact_root(-value, index)
        return None if root is None else -root
    numerator = _integer_root(value.numerator, index)
    denominator = _integer_root(value.denominator, index)
    if numerator is None or denominator is None:
        return None
    return Fraction(numerator, denominator)


def _integer_root(value: int, index: int) -> int | None:
    if index == 2:
        root = math.isqrt(value)
        return root if root * root == value else None
    root = round(value ** (1.0 / index)) if value < 2**1000 else None
    if root is None:
        return None
    for candidate in (root - 1, root, root + 1):
        if candidate >= 0 and candidate**index == value:
            return candidate
    return None


def _check_factorial_size(argument: Node) -> None:
    # A factorial of a non-rational constant is evaluated numerically; bound it the same way.
    try:
        value = abs(_evaluate(argument, _Env(0, False), _DOUBLE))
    except (Undefined, ZeroDivisionError, OverflowError, ValueError):
        return
    if value > guards.MAX_FACTORIAL:
        raise TooComplex(f"factorial of more than {guards.MAX_FACTORIAL}")


def _fold_function(node: Node) -> Fraction | None:
    name = node.value
    values = [fold(arg) for arg in node.args]
    if any(value is None for value in values):
        return None
    if name == "sqrt":
        return _exact_root(values[0], 2)
    if name == "cbrt":
        return _exact_root(values[0], 3)
    if name == "abs":
        return abs(values[0])
    if name == "floor":
        return Fraction(math.floor(values[0]))
    if name == "ceil":
        return Fraction(math.ceil(values[0]))
    if name == "max":
        return max(values)
    if name == "min":
        return min(values)
    if name == "sign":
        return Fraction((values[0] > 0) - (values[0] < 0))
    if name == "binom" and len(values) == 2:
        return guards.binomial(values[0], values[1])
    if name in ("gcd", "lcm") and all(value.denominator == 1 for value in values):
        result = int(values[0])
        for value in values[1:]:
            result = (
                math.gcd(result, int(value))
                if name == "gcd"
                else abs(result * int(value)) // max(math.gcd(result, int(value)), 1)
            )
            guards.check_fraction(Fraction(result))
        return Fraction(result)
    if name == "log" and len(values) == 2:
        return _exact_log(values[0], values[1])
    if name == "lg":
        return _exact_log(values[0], Fraction(10))
    if name in ("ln", "log") and values[0] == 1:
        return Fraction(0)
    if name in ("sin", "tan", "asin", "atan", "sinh", "tanh") and values[0] == 0:
        return Fraction(0)
    if name in ("cos", "cosh", "exp") and values[0] == 0:
        return Fraction(1)
    return None


def _exact_log(value: Fraction, base: Fraction) -> Fraction | None:
    """log_b(x) when it is an integer (log_2 8 = 3, log_10 0.01 = -2)."""
    if value <= 0 or base <= 0 or base == 1:
        return None
    for exponent in range(-64, 65):
        try:
            if guards.power(base, exponent) == value:
                return Fraction(exponent)
        except TooComplex:
            return None
    return None


# -- structure helpers -------------------------------------------------------------------------------------


def free_symbols(node: Node) -> frozenset[str]:
    """Names of the variables in a tree (a series' index is bound inside it, not free)."""
    if node.op in ("sum", "prod"):
        body, first, last = node.args
        return (free_symbols(body) - {str(node.value)}) | free_symbols(first) | free_symbols(last)
    if node.op == "sym" or node.op == "call":
        return frozenset({str(node.value)}) | frozenset().union(*(free_symbols(arg) for arg in node.args))
    names: set[str] = set()
    for arg in node.args:
        names |= free_symbols(arg)
    return frozenset(names)


def infinite_sign(node: Node) -> int:
    """+1 for oo (or +oo), -1 for -oo, 0 for anything else."""
    sign = 1
    while node.op in ("neg", "group"):
        if node.op == "neg":
            sign = -sign
        node = node.args[0]
    if node.op == "const" and node.value == "oo":
        return sign
    return 0


def approximation(node: Node) -> tuple[int, int] | None:
    """(places, significant digits) a decimal literal states; None for exact values.

    Recognises d, -d, d% and d×10^k / d·10^k / d e k, where d is a decimal literal.
    """
    shift = 0
    while True:
        if node.op in ("neg", "group"):
            node = node.args[0]
        elif node.op == "pct":
            shift += 2
            node = node.args[0]
        else:
            break
    if node.op == "num":
        literal: Number = node.value
        if literal.kind in ("dec", "sci") and literal.places is not None:
            return literal.places + shift, literal.sig or 0
        return None
    if node.op == "mul" and len(node.args) == 2:
        mantissa, power = node.args
        if mantissa.op == "num" and mantissa.value.kind == "dec" and power.op == "pow":
            base, exponent = power.args
            if base.op == "num" and base.value.value == 10 and base.value.kind == "int":
                value = fold(exponent)
                if value is not None and value.denominator == 1:
                    return mantissa.value.places - int(value) + shift, mantissa.value.sig or 0
    return None


# -- numeric evaluation ------------------------------------------------------------------------------------


@lru_cache(maxsize=4096)
def sample(name: str, k: int) -> float:
    """The value of variable `name` at sample point k, in ±[0.35, 2.3].

    Points 0 and 1 are positive in every variable (where lengths, logs and roots of products live); the
    others take signs from a hash of (name, k), so most expressions are also seen at negative values.
    """
    digest = zlib.crc32(f"{name}#{k}".encode())
    magnitude = 0.35 + 1.95 * ((digest % 1_000_003) / 1_000_003)
    negative = k >= 2 and (digest >> 24) & 1 == 1
    return -magnitude if negative else magnitude


class _Env:
    """Variable values at one sample point."""

    __slots__ = ("k", "precise")

    def __init__(self, k: int, precise: bool):
        self.k = k
        self.precise = precise

    def get(self, name: str):
        value = sample(name, self.k)
        return mpmath.mpf(value) if self.precise else complex(value)


class _Double:
    """Double-precision complex arithmetic (cmath)."""

    pi = complex(math.pi)
    e = complex(math.e)
    i = 1j

    @staticmethod
    def number(value: Fraction) -> complex:
        return complex(value.numerator / value.denominator)

    @staticmethod
    def power(base: complex, exponent: complex) -> complex:
        _check_power(base, exponent)
        if base == 0:
            if exponent.real > 0:
                return 0j
            raise Undefined("0 to a non-positive power")
        if exponent.imag == 0 and exponent.real == int(exponent.real) and abs(exponent.real) <= 64:
            return base ** int(exponent.real)
        return base**exponent

    @staticmethod
    def real_root(value: complex, index: int) -> complex:
        if value.imag == 0 and value.real < 0 and index % 2 == 1:
            return complex(-((-value.real) ** (1.0 / index)))
        return value ** (1.0 / index)

    functions = {
        "sin": cmath.sin, "cos": cmath.cos, "tan": cmath.tan, "sinh": cmath.sinh, "cosh": cmath.cosh,
        "tanh": cmath.tanh, "asin": cmath.asin, "acos": cmath.acos, "atan": cmath.atan, "asinh": cmath.asinh,
        "acosh": cmath.acosh, "atanh": cmath.atanh, "sqrt": cmath.sqrt, "ln": cmath.log,
        "exp": lambda z: cmath.exp(_check_exp(z)),
        "sec": lambda z: 1 / cmath.cos(z), "csc": lambda z: 1 / cmath.sin(z), "cot": lambda z: 1 / cmath.tan(z),
        "asec": lambda z: cmath.acos(1 / z), "acsc": lambda z: cmath.asin(1 / z),
        "acot": lambda z: cmath.atan(1 / z), "coth": lambda z: 1 / cmath.tanh(z),
        "sech": lambda z: 1 / cmath.cosh(z), "csch": lambda z: 1 / cmath.sinh(z),
        "lg": lambda z: cmath.log10(z), "abs": lambda z: complex(abs(z)),
    }  # fmt: skip

    @staticmethod
    def gamma(value: complex) -> complex:
        if value.imag != 0:
            raise Undefined("gamma of a complex number")
        return complex(math.gamma(value.real))

    @staticmethod
    def real(value: complex) -> float:
        if abs(value.imag) > 1e-12 * max(1.0, abs(value.real)):
            raise Undefined("not real")
        return value.real

    @staticmethod
    def log(value: complex, base: complex) -> complex:
        return cmath.log(value) / cmath.log(base)

    make = complex


class _Precise:
    """mpmath arithmetic at the working precision set by the caller."""

    @property
    def pi(self):
        return mpmath.mpf(mpmath.pi)

    @property
    def e(self):
        return mpmath.mpf(mpmath.e)

    i = mpmath.mpc(0, 1)

    @staticmethod
    def number(value: Fraction):
        return mpmath.mpf(value.numerator) / value.denominator

    @staticmethod
    def power(base, exponent):
        _check_power(complex(base), complex(exponent))
        if base == 0:
            if mpmath.re(exponent) > 0:
                return mpmath.mpf(0)
            raise Undefined("0 to a non-positive power")
        real = mpmath.re(exponent)
        if mpmath.im(exponent) == 0 and real == int(real) and abs(int(real)) <= 64:
            return base ** int(real)
        if mpmath.im(base) == 0 and base > 0:
            return mpmath.power(base, exponent)
        return mpmath.power(mpmath.mpc(base), exponent)

    @staticmethod
    def real_root(value, index: int):
        if mpmath.im(value) == 0 and mpmath.re(value) < 0 and index % 2 == 1:
            return -mpmath.root(-mpmath.re(value), index)
        return mpmath.root(value, index)

    functions = {
        "sin": mpmath.sin, "cos": mpmath.cos, "tan": mpmath.tan, "sinh": mpmath.sinh, "cosh": mpmath.cosh,
        "tanh": mpmath.tanh, "asin": mpmath.asin, "acos": mpmath.acos, "atan": mpmath.atan,
        "asinh": mpmath.asinh, "acosh": mpmath.acosh, "atanh": mpmath.atanh, "sqrt": mpmath.sqrt,
        "ln": mpmath.log, "exp": lambda z: mpmath.exp(_check_exp(z)),
        "sec": mpmath.sec, "csc": mpmath.csc, "cot": mpmath.cot, "asec": mpmath.asec, "acsc": mpmath.acsc,
        "acot": mpmath.acot, "coth": mpmath.coth, "sech": mpmath.sech, "csch": mpmath.csch,
        "lg": lambda z: mpmath.log(z, 10), "abs": lambda z: mpmath.mpf(abs(z)),
    }  # fmt: skip

    @staticmethod
    def gamma(value):
        if mpmath.im(value) != 0:
            raise Undefined("gamma of a complex number")
        return mpmath.gamma(mpmath.re(value))

    @staticmethod
    def real(value):
        if abs(mpmath.im(value)) > mpmath.mpf(10) ** (-40) * max(1, abs(mpmath.re(value))):
            raise Undefined("not real")
        return mpmath.re(value)

    @staticmethod
    def log(value, base):
        return mpmath.log(value) / mpmath.log(base)

    make = mpmath.mpf


def _real_only(function):
    return lambda value: _real(function(value))


class _RealDouble(_Double):
    """Double precision that refuses to leave the real numbers (for domain checks)."""

    i = property(lambda self: _not_real())

    @staticmethod
    def power(base: complex, exponent: complex) -> complex:
        return _real(_Double.power(base, exponent))

    @staticmethod
    def real_root(value: complex, index: int) -> complex:
        return _real(_Double.real_root(value, index))

    functions = {name: _real_only(function) for name, function in _Double.functions.items()}

    @staticmethod
    def log(value: complex, base: complex) -> complex:
        return _real(_Double.log(value, base))


def _real(value: complex) -> complex:
    if abs(value.imag) > 1e-12 * max(1.0, abs(value.real)):
        raise Undefined("not real")
    return value


def _not_real():
    raise Undefined("the imaginary unit")


_DOUBLE = _Double()
_PRECISE = _Precise()
_REAL = _RealDouble()


def _check_power(base: complex, exponent: complex) -> None:
    if abs(exponent) > guards.MAX_EXPONENT and base != 0 and abs(abs(base) - 1) > 1e-12:
        raise TooComplex(f"an exponent larger than {guards.MAX_EXPONENT}")


def _check_exp(value):
    if abs(complex(value).real) > guards.MAX_EXPONENT:
        raise TooComplex(f"exp of more than {guards.MAX_EXPONENT}")
    return value


def _evaluate(node: Node, env: _Env, lib):
    op = node.op
    args = node.args
    if op == "num":
        return lib.number(node.value.value)
    if op == "sym":
        return env.get(str(node.value))
    if op == "const":
        if node.value == "oo":
            raise Undefined("infinity")
        return getattr(lib, str(node.value))
    if op in ("group", "unit"):
        return _evaluate(args[0], env, lib)
    if op == "neg":
        return -_evaluate(args[0], env, lib)
    if op in ("add", "mixed"):
        total = _evaluate(args[0], env, lib)
        for arg in args[1:]:
            total = total + _evaluate(arg, env, lib)
        return total
    if op == "mul":
        product = _evaluate(args[0], env, lib)
        for arg in args[1:]:
            product = product * _evaluate(arg, env, lib)
        return product
    if op == "call":
        product = env.get(str(node.value))
        for arg in args:
            product = product * _evaluate(arg, env, lib)
        return product
    if op == "div":
        denominator = _evaluate(args[1], env, lib)
        if denominator == 0:
            raise Undefined("division by zero")
        return _evaluate(args[0], env, lib) / denominator
    if op == "pow":
        return lib.power(_evaluate(args[0], env, lib), _evaluate(args[1], env, lib))
    if op == "pct":
        return _evaluate(args[0], env, lib) / 100
    if op == "deg":
        return _evaluate(args[0], env, lib) * lib.pi / 180
    if op == "fact":
        value = _evaluate(args[0], env, lib)
        if abs(value) > guards.MAX_FACTORIAL:
            raise TooComplex(f"factorial of more than {guards.MAX_FACTORIAL}")
        return lib.gamma(value + 1)
    if op == "root":
        index = fold(args[1])
        if index is not None and index.denominator == 1 and 0 < index <= 64:
            return lib.real_root(_evaluate(args[0], env, lib), int(index))
        return lib.power(_evaluate(args[0], env, lib), 1 / _evaluate(args[1], env, lib))
    if op == "func":
        return _function(node, env, lib)
    if op in ("sum", "prod"):
        raise Undefined("a series with a variable limit")  # compared at whole numbers instead
    raise Undefined(f"{op} has no numeric value")


def _function(node: Node, env: _Env, lib):
    name = node.value
    values = [_evaluate(arg, env, lib) for arg in node.args]
    if name in lib.functions and len(values) == 1:
        return lib.functions[name](values[0])
    if name == "log":
        if len(values) == 2:
            return lib.log(values[0], values[1])
        return lib.functions["ln"](values[0])
    if name == "cbrt":
        return lib.real_root(values[0], 3)
    if name in ("floor", "ceil"):
        real = lib.real(values[0])
        return lib.make(math.floor(real) if name == "floor" else math.ceil(real))
    if name in ("max", "min"):
        reals = [lib.real(value) for value in values]
        return lib.make(max(reals) if name == "max" else min(reals))
    if name == "sign":
        real = lib.real(values[0])
        return lib.make((real > 0) - (real < 0))
    if name == "binom" and len(values) == 2:
        n, k = values
        if abs(n) > guards.MAX_FACTORIAL or abs(k) > guards.MAX_FACTORIAL:
            raise TooComplex(f"binomial of more than {guards.MAX_FACTORIAL}")
        return lib.gamma(n + 1) / (lib.gamma(k + 1) * lib.gamma(n - k + 1))
    exact = fold(node)
    if exact is not None:
        return lib.number(exact)
    raise Undefined(f"{name} has no numeric value here")


_INF_POS = Scalar(Node("const", (), "oo"), "oo")
_INF_NEG = Scalar(Node("neg", (Node("const", (), "oo"),)), "-oo")
