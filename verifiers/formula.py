"""A safe arithmetic formula language for `multi` and OpenAI's `calculate_output` (never `eval`).

A formula is parsed with `ast.parse(mode="eval")` and accepted only if every node is on a whitelist:
numbers, variables that were declared, `+ - * / ** ^ %`, unary minus, comparisons, `a if c else b`,
`and`/`or`/`not`, and calls of the functions below. `^` is a power, as in OpenAI's formulas. It is then
evaluated by walking that tree here; no Python code is ever compiled or run. Sizes are bounded (text length,
node count). Powers are float powers (`math.pow`, constant time whatever the exponent): a result that
underflows is 0, a value like any other; one that overflows, a domain error (a negative number to a fractional
power, 0 to a negative one) or a result that is not a finite number is a `FormulaError`.

`domain_problem(formula, ranges)` is the sound request-time check: interval arithmetic over the variables'
ranges, naming the first sub-expression whose arguments can reach a point where it has no value (division by
a range holding 0, log/sqrt out of domain, a possibly negative base to a possibly fractional power, overflow,
wrong arguments). It is conservative: an interval cannot hold a hole, so some formulas that never fail are
refused (`1 / (length - 7) if length != 7 else 0`); in `a if c else b` a comparison of a variable narrows its
range in each branch. `multi` and the graders refuse a formula that fails it with a 422 at request time, so
a validated formula cannot fail at scoring time (probing points as well would add nothing: the check is sound,
which tests/test_formula_domain.py checks by brute force).

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
from collections.abc import Callable, Iterable, Mapping
from functools import lru_cache
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


@lru_cache(maxsize=1024)
def parse_formula(text: str, variables: frozenset[str]) -> Formula:
    """A Formula, cached (a Formula does not change once built): `multi` and the openai multi grader evaluate
    the same few validated formulas for every sample, so each is parsed and checked once."""
    return Formula(text, variables)


# -- the sound domain check: interval arithmetic ---------------------------------------------------------------


class Interval:
    """Every value an expression can take lies in [lo, hi] (finite floats); `integer`: they are all integers."""

    __slots__ = ("hi", "integer", "lo")

    def __init__(self, lo: float, hi: float, integer: bool = False):
        self.lo, self.hi, self.integer = float(lo), float(hi), integer

    def __repr__(self) -> str:
        return f"[{self.lo:.12g}, {self.hi:.12g}]" if self.lo != self.hi else f"{self.lo:.12g}"

    def has(self, value: float) -> bool:
        """Whether value lies in the interval."""
        return self.lo <= value <= self.hi

    def empty(self) -> bool:
        """Whether no value is left (a branch that cannot be taken)."""
        return self.lo > self.hi


_BOOLEAN = Interval(0.0, 1.0, integer=True)
_FLIP = {
    ast.Lt: ast.Gt,
    ast.LtE: ast.GtE,
    ast.Gt: ast.Lt,
    ast.GtE: ast.LtE,
    ast.Eq: ast.Eq,
    ast.NotEq: ast.NotEq,
}
_NEGATE = {
    ast.Lt: ast.GtE,
    ast.LtE: ast.Gt,
    ast.Gt: ast.LtE,
    ast.GtE: ast.Lt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
}
# Positional parameter names and defaults of the functions, to check each call's arguments before any score.
_PARAMS: dict[str, tuple[tuple[str, ...], dict[str, float], bool]] = {
    # name: (parameters, defaults, positional only)
    "abs": (("x",), {}, True),
    "floor": (("x",), {}, True),
    "ceil": (("x",), {}, True),
    "exp": (("x",), {}, False),
    "sqrt": (("value",), {}, False),
    "log": (("value", "base"), {"base": math.e}, False),
    "round": (("value", "digits"), {"digits": 0.0}, False),
    "clip": (("value", "low", "high"), {}, False),
    "overlong": (("length", "max_length", "cache_length"), {}, False),
    "cosine_scale": (
        ("correct", "length", "max_length", "r_c0", "r_cl", "r_w0", "r_wl", "r_exceed"),
        {"r_c0": 2.0, "r_cl": 1.0, "r_w0": -10.0, "r_wl": 0.0, "r_exceed": -10.0},
        False,
    ),
}


class _Domain:
    """Interval arithmetic over a formula's tree: FormulaError naming the first sub-expression that can fail.

    Sound, so conservative: an interval is a superset of the values an expression takes, so an operation
    whose argument interval reaches a point where it has no value is refused even when the formula never
    actually gets there. Float rounding is monotone, so bounds computed with the evaluator's own float
    operations at the intervals' ends enclose what it computes anywhere inside.
    """

    def __init__(self, formula: Formula):
        self.formula = formula
        self.memo: dict[tuple[int, int], Interval] = {}
        self.envs: list[dict[str, Interval]] = []  # kept alive so their ids stay unique while memoised

    def fail(self, node: ast.AST, why: str) -> FormulaError:
        return FormulaError(f"{ast.unparse(node)}: {why}")

    def finite(self, node: ast.AST, values: Iterable[float], integer: bool) -> Interval:
        values = list(values)
        if not all(math.isfinite(value) for value in values):
            raise self.fail(node, "overflows (its value can be too large for a float)")
        return Interval(min(values), max(values), integer)

    def value(self, node: ast.AST, env: dict[str, Interval]) -> Interval:
        key = (id(node), id(env))
        found = self.memo.get(key)
        if found is None:
            found = self.memo[key] = self._value(node, env)
        return found

    def _value(self, node: ast.AST, env: dict[str, Interval]) -> Interval:
        if isinstance(node, ast.Constant):
            try:
                number = float(node.value)
            except OverflowError:
                raise self.fail(node, "is too large for a float") from None
            if not math.isfinite(number):
                raise self.fail(node, "is not a finite number")
            return Interval(number, number, number.is_integer())
        if isinstance(node, ast.Name):
            if node.id not in env:
                raise self.fail(node, "has no range")
            return env[node.id]
        if isinstance(node, ast.BinOp):
            return self.binary(node, self.value(node.left, env), self.value(node.right, env))
        if isinstance(node, ast.UnaryOp):
            operand = self.value(node.operand, env)
            if isinstance(node.op, ast.Not):
                return _BOOLEAN
            if isinstance(node.op, ast.USub):
                return Interval(-operand.hi, -operand.lo, operand.integer)
            return operand
        if isinstance(node, (ast.Compare, ast.BoolOp)):
            # Every operand is evaluated (the evaluator does not short-circuit `and`/`or`), so each is checked
            # over the whole range; only `a if c else b` takes one branch.
            for part in (node.left, *node.comparators) if isinstance(node, ast.Compare) else node.values:
                self.value(part, env)
            return _BOOLEAN
        if isinstance(node, ast.IfExp):
            self.value(node.test, env)
            branches = []
            for branch, truth in ((node.body, True), (node.orelse, False)):
                narrowed = self.narrow(node.test, env, truth)
                if narrowed is not None:
                    branches.append(self.value(branch, narrowed))
            if not branches:  # cannot happen for a consistent narrowing; stay sound regardless
                branches = [self.value(node.body, env), self.value(node.orelse, env)]
            return Interval(
                min(b.lo for b in branches), max(b.hi for b in branches), all(b.integer for b in branches)
            )
        if isinstance(node, ast.Call):
            return self.call(node, env)
        raise self.fail(node, "is not allowed in a formula")

    # -- narrowing in `a if c else b` --------------------------------------------------------------------------

    def narrow(self, test: ast.AST, env: dict[str, Interval], truth: bool) -> dict[str, Interval] | None:
        """The variables' ranges where `test` is truthy (truth) or falsy; None when that cannot happen.

        Understood: comparisons of a variable with any expression (`length > 7`, `fmt >= 0.5`,
        `0 < length <= max_length`), `and` when true, `or` when false, and `not`. Anything else leaves the
        ranges as they are (sound, only less precise).
        """
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return self.narrow(test.operand, env, not truth)
        if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And if truth else ast.Or):
            current: dict[str, Interval] | None = env
            for part in test.values:
                current = self.narrow(part, current, truth) if current is not None else None
            return current
        if not isinstance(test, ast.Compare) or (not truth and len(test.ops) > 1):
            return env
        narrowed = dict(env)
        operands = [test.left, *test.comparators]
        for position, op in enumerate(test.ops):
            left, right = operands[position], operands[position + 1]
            kind = type(op) if truth else _NEGATE[type(op)]
            for name_node, other, relation in ((left, right, kind), (right, left, _FLIP[kind])):
                if isinstance(name_node, ast.Name) and name_node.id in narrowed:
                    bound = self.value(other, env)
                    narrowed[name_node.id] = _restrict(narrowed[name_node.id], relation, bound)
                    if narrowed[name_node.id].empty():
                        return None
        if narrowed == env:
            return env
        self.envs.append(narrowed)
        return narrowed

    # -- operators and functions -------------------------------------------------------------------------------

    def binary(self, node: ast.BinOp, left: Interval, right: Interval) -> Interval:
        both = left.integer and right.integer
        corners = [(a, b) for a in (left.lo, left.hi) for b in (right.lo, right.hi)]
        if isinstance(node.op, ast.Add):
            return self.finite(node, (left.lo + right.lo, left.hi + right.hi), both)
        if isinstance(node.op, ast.Sub):
            return self.finite(node, (left.lo - right.hi, left.hi - right.lo), both)
        if isinstance(node.op, ast.Mult):
            return self.finite(node, (a * b for a, b in corners), both)
        if isinstance(node.op, (ast.Div, ast.Mod)) and right.has(0.0):
            verb = "divides" if isinstance(node.op, ast.Div) else "takes a remainder"
            raise self.fail(
                node, f"{verb} by {ast.unparse(node.right)}, which can be 0 (it ranges over {right!r})"
            )
        if isinstance(node.op, ast.Div):
            return self.finite(node, (a / b for a, b in corners), False)
        if isinstance(node.op, ast.Mod):
            # Python's float remainder has the divisor's sign and is at most its size.
            return Interval(0.0, right.hi, both) if right.lo > 0 else Interval(right.lo, 0.0, both)
        return self.power(node, left, right)

    def power(self, node: ast.BinOp, base: Interval, exponent: Interval) -> Interval:
        where = f"{ast.unparse(node.left)} ranges over {base!r}, {ast.unparse(node.right)} over {exponent!r}"
        if base.lo < 0 and not exponent.integer:
            raise self.fail(node, f"a negative number to a fractional power has no real value ({where})")
        if base.has(0.0) and exponent.lo < 0:
            raise self.fail(node, f"0 to a negative power has no value ({where})")
        # Magnitudes at the corners: |x| ** y is monotone in |x| and in y separately, so its extremes lie there.
        low_mag = 0.0 if base.has(0.0) else min(abs(base.lo), abs(base.hi))
        high_mag = max(abs(base.lo), abs(base.hi))
        values = []
        for magnitude in (low_mag, high_mag):
            for power in (exponent.lo, exponent.hi):
                try:
                    values.append(math.pow(magnitude, power))
                except OverflowError:
                    raise self.fail(node, f"overflows ({where})") from None
                except ValueError:  # 0 ** negative, excluded above
                    raise self.fail(node, f"has no value somewhere ({where})") from None
        integer = base.integer and exponent.integer and exponent.lo >= 0
        if base.lo >= 0:
            return self.finite(node, values, integer)
        if exponent.lo == exponent.hi:
            # A negative base to one integer power: monotone on each side of 0, so the ends (and 0) bound it.
            ends = [base.lo, base.hi] + ([0.0] if base.has(0.0) else [])
            try:
                return self.finite(node, (math.pow(end, exponent.lo) for end in ends), integer)
            except OverflowError:
                raise self.fail(node, f"overflows ({where})") from None
        top = max(values)
        return self.finite(node, (-top, top), integer)

    def call(self, node: ast.Call, env: dict[str, Interval]) -> Interval:
        assert isinstance(node.func, ast.Name)
        name = node.func.id
        positional = [self.value(arg, env) for arg in node.args]
        keywords = {keyword.arg: self.value(keyword.value, env) for keyword in node.keywords}
        if name in ("min", "max"):
            if keywords or len(positional) < 2:
                raise self.fail(node, f"{name} takes two or more numbers, without keywords")
            pick = min if name == "min" else max
            return Interval(
                pick(a.lo for a in positional),
                pick(a.hi for a in positional),
                all(a.integer for a in positional),
            )
        args = self.bind(node, name, positional, keywords)
        if name == "abs":
            (x,) = args
            low = 0.0 if x.has(0.0) else min(abs(x.lo), abs(x.hi))
            return Interval(low, max(abs(x.lo), abs(x.hi)), x.integer)
        if name in ("floor", "ceil"):
            (x,) = args
            rounding = math.floor if name == "floor" else math.ceil
            return Interval(rounding(x.lo), rounding(x.hi), True)
        if name == "exp":
            (x,) = args
            return self.finite(node, (math.exp(min(x.lo, 700.0)), math.exp(min(x.hi, 700.0))), False)
        if name == "sqrt":
            (x,) = args
            if x.lo < 0:
                raise self.fail(
                    node, f"the square root of {ast.unparse(node.args[0])}, which can be negative ({x!r})"
                )
            return Interval(math.sqrt(x.lo), math.sqrt(x.hi))
        if name == "log":
            x, base = args
            if x.lo <= 0:
                raise self.fail(node, f"the logarithm's argument can be 0 or negative (it ranges over {x!r})")
            if base.lo <= 0 or base.has(1.0):
                raise self.fail(
                    node, f"the logarithm's base can be 0, negative or 1 (it ranges over {base!r})"
                )
            logs = (math.log(x.lo), math.log(x.hi))
            bases = (math.log(base.lo), math.log(base.hi))
            return self.finite(node, (a / b for a in logs for b in bases), False)
        if name == "round":
            x, digits = args
            if not (digits.integer and digits.lo >= -MAX_ROUND_DIGITS and digits.hi <= MAX_ROUND_DIGITS):
                raise self.fail(
                    node, f"round's digits must be an integer from -{MAX_ROUND_DIGITS} to {MAX_ROUND_DIGITS}"
                )
            counts = range(int(digits.lo), int(digits.hi) + 1)
            ends = [round(end, count) for end in (x.lo, x.hi) for count in counts]
            return self.finite(node, ends, digits.hi <= 0)
        if name == "clip":
            x, low, high = args
            floor_lo, floor_hi = max(low.lo, x.lo), max(low.hi, x.hi)
            return Interval(
                min(high.lo, floor_lo), min(high.hi, floor_hi), x.integer and low.integer and high.integer
            )
        if name == "overlong":
            _length, max_length, cache_length = args
            if max_length.lo <= 0 or cache_length.lo <= 0:
                raise self.fail(node, "max_length and cache_length must be positive")
            return Interval(-1.0, 0.0)
        # cosine_scale: between its reward parameters; the cosine's argument must stay finite.
        correct, length, max_length, *rewards = args
        if max_length.lo <= 0:
            raise self.fail(node, f"max_length must be positive (it ranges over {max_length!r})")
        scaled = self.finite(node, (math.pi * length.lo, math.pi * length.hi), False)
        self.finite(
            node, (a / b for a in (scaled.lo, scaled.hi) for b in (max_length.lo, max_length.hi)), False
        )
        spread = [value for reward in rewards for value in (reward.lo, reward.hi)]
        self.finite(node, (0.5 * (a - b) for a in spread for b in spread), False)
        return Interval(min(spread), max(spread))

    def bind(
        self, node: ast.Call, name: str, positional: list[Interval], keywords: dict[str | None, Interval]
    ) -> list[Interval]:
        params, defaults, positional_only = _PARAMS[name]
        if len(positional) > len(params) or (keywords and positional_only):
            raise self.fail(node, f"{name} takes {', '.join(params)}")
        bound = dict(zip(params, positional, strict=False))
        for key, interval in keywords.items():
            if key not in params or key in bound:
                raise self.fail(node, f"{name} takes {', '.join(params)}")
            bound[key] = interval
        for param in params:
            if param not in bound:
                if param not in defaults:
                    raise self.fail(node, f"{name} needs {param}")
                bound[param] = Interval(defaults[param], defaults[param], float(defaults[param]).is_integer())
        return [bound[param] for param in params]


def _restrict(interval: Interval, relation: type, bound: Interval) -> Interval:
    """The part of interval where `x relation y` can hold for some y in bound."""
    lo, hi = interval.lo, interval.hi
    strict = 1.0 if interval.integer and bound.integer else 0.0  # integers: x < y means x <= y - 1
    if relation is ast.Lt:
        hi = min(hi, bound.hi - strict)
    elif relation is ast.LtE:
        hi = min(hi, bound.hi)
    elif relation is ast.Gt:
        lo = max(lo, bound.lo + strict)
    elif relation is ast.GtE:
        lo = max(lo, bound.lo)
    elif relation is ast.Eq:
        lo, hi = max(lo, bound.lo), min(hi, bound.hi)
    elif lo == hi == bound.lo == bound.hi:  # NotEq: only a single point against itself is excluded
        return Interval(1.0, 0.0)
    return Interval(lo, hi, interval.integer)


def domain_problem(formula: Formula, ranges: Mapping[str, Interval]) -> str | None:
    """Why the formula may have no value somewhere in its variables' ranges (naming the sub-expression), or
    None when interval arithmetic proves it has a finite value everywhere there."""
    for name, interval in ranges.items():
        if name in formula.names and not (math.isfinite(interval.lo) and math.isfinite(interval.hi)):
            return f"{name} ranges over {interval!r}, which is not finite"
    checker = _Domain(formula)
    env = dict(ranges)
    checker.envs.append(env)
    try:
        checker.value(formula.tree, env)
    except FormulaError as exc:
        return str(exc)
    return None
