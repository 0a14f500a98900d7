"""A safe arithmetic formula language for `multi` and OpenAI's `calculate_output` (never `eval`).

A formula is parsed with `ast.parse(mode="eval")` and accepted only if every node is on a whitelist:
numbers, variables that were declared, `+ - * / ** ^ %`, unary minus, comparisons, `a if c else b`,
`and`/`or`/`not`, and calls of the functions below. `^` is a power, as in OpenAI's formulas. It is then
evaluated by walking that tree here; no Python code is ever compiled or run. Sizes are bounded (text length,
node count). Powers are float powers (`math.pow`, constant time whatever the exponent): a result that
underflows is 0, a value like any other; one that overflows, a domain error (a negative number to a fractional
power, 0 to a negative one) or a result that is not a finite number is a `FormulaError`.

`unevaluable(formula, points)` finds a point where a formula has no value; `corner_points` builds the points
that check a formula over its variables' ranges (`multi` and the graders refuse such a formula with a 422 at
request time instead of failing scores later).

Functions: min, max, abs, floor, ceil, round, exp, log, sqrt, clip(x, lo, hi), and the length-shaping
presets:
- `overlong(length, max_length, cache_length)`: DAPO's soft overlong punishment: 0 up to
  max_length - cache_length, then falling linearly to -1 at max_length, and -1 beyond.
- `cosine_scale(correct, length, max_length, r_c0=2, r_cl=1, r_w0=-10, r_wl=0, r_exceed=-10)`: cosine length
  scaling (Yeo et al., 2025, "Demystifying long chain-of-thought reasoning"): a correct answer earns from
  r_c0 (short) down to r_cl (at max_length), a wrong one from r_w0 (short) up to r_wl, and r_exceed past
  max_length; `correct` counts as correct when >= 0.5.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

MAX_CHARS = 2_000
MAX_NODES = 400


class FormulaError(ValueError):
    """A formula that cannot be parsed, names an unknown variable or function, or has no finite value."""


def overlong(length: float, max_length: float, cache_length: float) -> float:
    """DAPO's soft overlong punishment for a response of `length` (0, a linear ramp to -1, then -1)."""
    if cache_length <= 0 or max_length <= 0:
        raise FormulaError("overlong needs positive max_length and cache_length")
    start = max_length - cache_length
    if length <= start:
        return 0.0
    if length <= max_length:
        return (start - length) / cache_length
    return -1.0


def cosine_scale(
    correct: float,
    length: float,
    max_length: float,
    r_c0: float = 2.0,
    r_cl: float = 1.0,
    r_w0: float = -10.0,
    r_wl: float = 0.0,
    r_exceed: float = -10.0,
) -> float:
    """Cosine length scaling: reward moves along half a cosine from the length-0 value to the max_length one."""
    if max_length <= 0:
        raise FormulaError("cosine_scale needs a positive max_length")
    if length > max_length:
        return r_exceed
    start, end = (r_c0, r_cl) if correct >= 0.5 else (r_w0, r_wl)
    return end + 0.5 * (start - end) * (1.0 + math.cos(math.pi * length / max_length))


def _clip(value: float, low: float, high: float) -> float:
    return min(high, max(low, value))


def _log(value: float, base: float = math.e) -> float:
    if value <= 0 or base <= 0 or base == 1:
        raise FormulaError("log of a non-positive number")
    return math.log(value, base)


def _sqrt(value: float) -> float:
    if value < 0:
        raise FormulaError("sqrt of a negative number")
    return math.sqrt(value)


MAX_ROUND_DIGITS = 15


def _round(value: float, digits: float = 0) -> float:
    # Python's round(int, -n) computes 10**n: an unbounded n would hang the service on a request's formula.
    if digits != int(digits) or abs(digits) > MAX_ROUND_DIGITS:
        raise FormulaError(
            f"round's digits must be an integer from -{MAX_ROUND_DIGITS} to {MAX_ROUND_DIGITS}"
        )
    return float(round(float(value), int(digits)))


FUNCTIONS: dict[str, Callable[..., float]] = {
    "min": min,
    "max": max,
    "abs": abs,
    "floor": math.floor,
    "ceil": math.ceil,
    "round": _round,
    "exp": lambda x: math.exp(min(x, 700.0)),
    "log": _log,
    "sqrt": _sqrt,
    "clip": _clip,
    "overlong": overlong,
    "cosine_scale": cosine_scale,
}

_BINARY: dict[type, Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Mod: operator.mod,
    ast.Pow: math.pow,
}
_COMPARE: dict[type, Callable[[float, float], bool]] = {
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
}


class Formula:
    """A parsed, checked formula; `evaluate(variables)` computes it."""

    def __init__(self, text: str, variables: set[str] | frozenset[str]):
        if len(text) > MAX_CHARS:
            raise FormulaError(f"the formula is longer than {MAX_CHARS} characters")
        self.text = text
        try:
            tree = ast.parse(text.replace("^", "**"), mode="eval")
        except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
            raise FormulaError(f"the formula does not parse: {exc}") from None
        nodes = list(ast.walk(tree))
        if len(nodes) > MAX_NODES:
            raise FormulaError(f"the formula has more than {MAX_NODES} parts")
        self.names: set[str] = set()
        called = {id(node.func) for node in nodes if isinstance(node, ast.Call)}
        for node in nodes:
            self._check(node, variables)
            if isinstance(node, ast.Name) and node.id not in variables and id(node) not in called:
                raise FormulaError(f"{node.id} is a function: call it, as in {node.id}(...)")
        self.tree = tree.body

    def _check(self, node: ast.AST, variables: set[str] | frozenset[str]) -> None:
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
                raise FormulaError(f"only numbers may appear as constants, not {node.value!r}")
        elif isinstance(node, ast.Name):
            if node.id not in variables and node.id not in FUNCTIONS:
                known = ", ".join(sorted(variables)) or "none"
                raise FormulaError(f"unknown variable {node.id!r}; known: {known}")
            self.names.add(node.id)
        elif isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
                raise FormulaError(f"unknown function; allowed: {', '.join(sorted(FUNCTIONS))}")
            if node.keywords and any(keyword.arg is None for keyword in node.keywords):
                raise FormulaError("** arguments are not allowed")
        elif isinstance(node, ast.BinOp):
            if type(node.op) not in _BINARY:
                raise FormulaError(f"operator {type(node.op).__name__} is not allowed")
        elif isinstance(node, ast.UnaryOp):
            if not isinstance(node.op, (ast.USub, ast.UAdd, ast.Not)):
                raise FormulaError(f"operator {type(node.op).__name__} is not allowed")
        elif isinstance(node, ast.Compare):
            if any(type(op) not in _COMPARE for op in node.ops):
                raise FormulaError("only <, <=, >, >=, ==, != comparisons are allowed")
        elif not isinstance(
            node,
            (
                ast.Expression,
                ast.IfExp,
                ast.BoolOp,
                ast.And,
                ast.Or,
                ast.Load,
                ast.keyword,
                ast.operator,
                ast.unaryop,
                ast.cmpop,
            ),
        ):
            raise FormulaError(f"{type(node).__name__} is not allowed in a formula")

    def evaluate(self, variables: dict[str, float]) -> float:
        """The formula's value for these variables; FormulaError when it is not a finite number."""
        try:
            value = float(self._eval(self.tree, variables))
        except FormulaError:
            raise
        except (ZeroDivisionError, OverflowError, ValueError, TypeError) as exc:
            raise FormulaError(f"the formula could not be computed: {type(exc).__name__}: {exc}") from None
        if not math.isfinite(value):
            raise FormulaError("the formula's value is not a finite number")
        return value

    def _eval(self, node: ast.AST, env: dict[str, float]) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in env:
                raise FormulaError(f"no value for {node.id!r}")
            return env[node.id]
        if isinstance(node, ast.BinOp):
            left, right = self._eval(node.left, env), self._eval(node.right, env)
            if isinstance(node.op, ast.Pow):
                # A float power: an int power could build an integer of any size (10 ** 10 ** 9).
                return math.pow(float(left), float(right))
            return _BINARY[type(node.op)](left, right)
        if isinstance(node, ast.UnaryOp):
            operand = self._eval(node.operand, env)
            if isinstance(node.op, ast.Not):
                return float(not operand)
            return -operand if isinstance(node.op, ast.USub) else +operand
        if isinstance(node, ast.Compare):
            left = self._eval(node.left, env)
            for op, comparator in zip(node.ops, node.comparators, strict=True):
                right = self._eval(comparator, env)
                if not _COMPARE[type(op)](left, right):
                    return 0.0
                left = right
            return 1.0
        if isinstance(node, ast.IfExp):
            return self._eval(node.body if self._eval(node.test, env) else node.orelse, env)
        if isinstance(node, ast.BoolOp):
            values = [self._eval(value, env) for value in node.values]
            return float(all(values) if isinstance(node.op, ast.And) else any(values))
        if isinstance(node, ast.Call):
            assert isinstance(node.func, ast.Name)
            args = [self._eval(arg, env) for arg in node.args]
            kwargs = {keyword.arg: self._eval(keyword.value, env) for keyword in node.keywords}
            return FUNCTIONS[node.func.id](*args, **kwargs)
        raise FormulaError(f"{type(node).__name__} is not allowed in a formula")  # unreachable after _check


def corner_points(
    ranges: Mapping[str, tuple[float, float]],
    sweeps: Mapping[str, Sequence[float]] | None = None,
    fixed: Mapping[str, float] | None = None,
) -> Iterator[dict[str, float]]:
    """Points that probe a formula over its variables' ranges.

    The ranged variables (component rewards) all at their low, middle and high values together, and each one
    alone at its low with the others high and at its high with the others low; crossed with every value of
    each swept variable (a response's length from 0 to the longest possible); `fixed` variables keep their value.
    """
    names = list(ranges)
    vectors: list[dict[str, float]] = [
        {name: ranges[name][0] for name in names},
        {name: ranges[name][1] for name in names},
        {name: (ranges[name][0] + ranges[name][1]) / 2 for name in names},
    ]
    for name in names:
        vectors.append({other: ranges[other][1] for other in names} | {name: ranges[name][0]})
        vectors.append({other: ranges[other][0] for other in names} | {name: ranges[name][1]})
    crossed: list[dict[str, float]] = [dict(fixed or {})]
    for name, values in (sweeps or {}).items():
        crossed = [point | {name: value} for point in crossed for value in values]
    seen: set[tuple[tuple[str, float], ...]] = set()
    for vector in vectors:
        for extra in crossed:
            point = vector | extra
            key = tuple(sorted(point.items()))
            if key not in seen:
                seen.add(key)
                yield point


def unevaluable(formula: Formula, points: Iterable[dict[str, float]]) -> str | None:
    """Why the formula has no value at the first point where it has none (naming the point), or None."""
    for point in points:
        try:
            formula.evaluate(point)
        except FormulaError as exc:
            where = ", ".join(f"{name}={value:g}" for name, value in point.items() if name in formula.names)
            return f"{exc} (at {where or 'any values'})"
    return None
