"""equivalent(gold, answer, policy) -> Match: is the answer the gold's value, by the gold's own kind?

The gold decides how the answer is read (an answer `(1, 2)` is a point for a tuple gold and an open interval
for an interval gold), and the comparison is asymmetric where that protects the reward:
- a gold equation in solved form (`x = 2`) is matched by `2`, `x = 2` or `2 = x`, never by an unsolved
  equation with the same solutions (`2x + 3 = 7`, the question echoed); a general equation (`y = 2x + 1`) is
  matched by any rearrangement (`2x - y + 1 = 0`) but not by a bare side (`2x + 1`);
- a gold inequality in solved form (`x > 3`) is an interval: `3 < x`, `(3, \\infty)`, `x \\in (3, \\infty)`;
- a scalar gold is not matched by a list that contains it.

Numbers: two exact values compare exactly (Fractions: `1/2^99` and `1/2^98` differ). Tolerance comes
from the digits the gold gives: a decimal gold with at least MIN_SIG significant digits (12.57) is matched
by any value that rounds to it at its places, provided a decimal answer states at least as many places
(12.566 and 4π yes; 12.6 and 12.58 no); an exact gold (1/3, π, 0.5) needs an exact answer (0.333 and 3.14
are approximations of it; the `rel_tol` option loosens this). Values that are not rational (π, √2, expressions
with variables) are compared at seeded sample points in double precision (a fast rejection), then at two
points with mpmath at 60 digits; a difference smaller than 1e-40 that does not shrink when the precision
doubles is a real difference, so a tiny value is never rounded to zero (`e^{-1000}` is not 0).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

import mpmath

from proctor.verifiers.math.grammar import Node, Number, to_text
from proctor.verifiers.math.linear import solve_for
from proctor.verifiers.math.values import (
    PRECISE_DPS,
    PRECISE_POINTS,
    SAMPLE_POINTS,
    Choice,
    Interval,
    Items,
    Labelled,
    Matrix,
    Ratio,
    Relation,
    Scalar,
    SetOp,
    Text,
    Time,
    Undefined,
    Value,
    expand_series,
    free_symbols,
    ratio_parts,
    substitute,
    text_form,
)

MIN_SIG = 3
"""Significant digits a decimal gold needs before it counts as a rounded value (0.5 and 2.5 are exact)."""

MIN_POINTS = 2
"""Sample points that must agree before two expressions with variables are equal."""

DOUBLE_REL_TOL = 1e-6
DOUBLE_ABS_TOL = 1e-9
PRECISE_REL_TOL = mpmath.mpf(10) ** -45
TINY = mpmath.mpf(10) ** -40

_EMPTY_WORDS = frozenset(
    {"no solution", "no solutions", "none", "no real solution", "no real solutions", "empty set",
     "the empty set", "there is no solution", "there are no solutions", "no such number", "no roots",
     "no real roots"}
)  # fmt: skip
_ALL_REALS_WORDS = frozenset({"all real numbers", "all reals", "every real number", "any real number"})


@dataclass(frozen=True)
class Policy:
    """How percent signs, units and tolerances are treated (the verifier's options)."""

    percent: Literal["lenient", "strict"] = "lenient"
    units: Literal["ignore", "strict"] = "ignore"
    rel_tol: float | None = None


@dataclass(frozen=True)
class Match:
    """The verdict of one comparison and the rule that decided it."""

    ok: bool
    rule: str


DEFAULT_POLICY = Policy()
_LABELLED_CHOICE = re.compile(r"\(([A-J])\)|([A-J])[.:)](?=\s|$)")
_NO = Match(False, "different")


def equivalent(gold: Value, answer: Value, policy: Policy = DEFAULT_POLICY) -> Match:
    """Whether `answer` states the gold's value; `rule` names what decided."""
    if gold.raw and _compact(gold.raw) == _compact(answer.raw):  # same text: same value, units and signs
        return Match(True, "identical")
    if isinstance(gold, Labelled):
        return _labelled_gold(gold, answer, policy)
    if isinstance(answer, Labelled):  # "(x, y) = (5, 8)" or "|AB| = 1" against a bare gold: the value
        found = equivalent(gold, answer.value, policy)
        return Match(found.ok, found.rule + "+label")
    if isinstance(gold, Choice):
        return _choice(gold, answer)
    if isinstance(gold, Time):
        return _time(gold, answer)
    if isinstance(gold, Text):
        return _text(gold, answer)
    if isinstance(gold, Scalar):
        return _scalar_gold(gold, answer, policy)
    if isinstance(gold, Relation):
        return _relation_gold(gold, answer, policy)
    if isinstance(gold, Items):
        return _items_gold(gold, answer, policy)
    if isinstance(gold, Interval):
        return _interval_gold(gold, answer, policy)
    if isinstance(gold, SetOp):
        return _setop_gold(gold, answer, policy)
    if isinstance(gold, Matrix):
        return _matrix_gold(gold, answer, policy)
    if isinstance(gold, Ratio):
        return _ratio_gold(gold, answer, policy)
    return _NO


def _compact(text: str) -> str:
    return "".join(text.split())


# -- leaves ------------------------------------------------------------------------------------------------


def _choice(gold: Choice, answer: Value) -> Match:
    if isinstance(answer, Choice):
        return Match(answer.letter == gold.letter, "choice")
    if isinstance(answer, Scalar) and answer.node.op == "sym" and len(str(answer.node.value)) == 1:
        return Match(str(answer.node.value).upper() == gold.letter, "choice")
    # "(B) 12", "B. 12", "\\textbf{(B)} 12": a letter that labels the option, then its content.
    labelled = _LABELLED_CHOICE.match(text_form(answer.raw).upper())
    letter = labelled and (labelled.group(1) or labelled.group(2))
    return Match(letter == gold.letter, "choice")


def _time(gold: Time, answer: Value) -> Match:
    if isinstance(answer, Time):
        return Match(bool(gold.minutes() & answer.minutes()), "time")
    return Match(False, "time")


def _text(gold: Text, answer: Value) -> Match:
    if isinstance(answer, Text):
        if answer.text == gold.text:
            return Match(True, "text")
        if gold.text in _EMPTY_WORDS and answer.text in _EMPTY_WORDS:
            return Match(True, "empty_set")
        return Match(False, "text")
    if gold.text in _EMPTY_WORDS and isinstance(answer, Items) and answer.shape == "set" and not answer.items:
        return Match(True, "empty_set")
    if gold.text in _ALL_REALS_WORDS and isinstance(answer, Interval):
        return Match(answer.lo.infinite == -1 and answer.hi.infinite == 1, "all_reals")
    return Match(text_form(answer.raw) == gold.text, "text")


# -- scalars -----------------------------------------------------------------------------------------------


def _scalar_gold(gold: Scalar, answer: Value, policy: Policy) -> Match:
    if isinstance(answer, Scalar):
        return compare_scalars(gold, answer, policy)
    if isinstance(answer, Relation):
        value = _stated_value(answer)
        if value is not None:
            found = compare_scalars(gold, value, policy)
            return Match(found.ok, found.rule + "+equation")
        return Match(False, "equation_for_value")
    if isinstance(answer, Items) and len(answer.items) == 1 and answer.shape in ("set", "list", "tuple"):
        return equivalent(gold, answer.items[0], policy)
    if isinstance(answer, Items) and answer.decimal is not None:  # "2,74" against one number: 2.74
        found = compare_scalars(gold, answer.decimal, policy)
        return Match(found.ok, found.rule + "+decimal_comma")
    if isinstance(answer, Items):
        return Match(False, "several_values")
    if isinstance(answer, Ratio) and gold.rational is not None:
        left, right = answer.left.rational, answer.right.rational
        if left is not None and right:
            return Match(left / right == gold.rational, "ratio")
    return Match(False, "kind")


def compare_scalars(gold: Scalar, answer: Scalar, policy: Policy = DEFAULT_POLICY) -> Match:
    """Compare two scalars under the unit and percent policies."""
    if policy.units == "ignore":
        # Radians are the unit-less measure of an angle: "2π/3 rad" is 2π/3, and compares with 120°; against a
        # gold in degrees only as converted (2 rad is not 2°).
        radians = gold.unit in _RADIANS or answer.unit in _RADIANS
        gold, answer = _without_radians(gold), _without_radians(answer)
        if radians and "deg" in (gold.unit, answer.unit):
            if gold.unit == "deg":
                return same_value(gold.with_node(Node("deg", (gold.node,))), answer, policy)
            return same_value(gold, answer.with_node(Node("deg", (answer.node,))), policy)
    units = _unit_rule(gold, answer, policy)
    if units is False:
        return Match(False, "unit")
    if (gold.percent and answer.unit not in (None, "deg")) or (
        answer.percent and gold.unit not in (None, "deg")
    ):
        return Match(False, "unit")  # 5% is not $5 nor 5 cm
    golds = [gold]
    answers = [answer]
    if policy.percent == "lenient" and gold.percent != answer.percent:
        # One side has the percent sign: 50% may be written 50 or 0.5. With signs on both sides only the
        # values compare (0.25% is not 25%).
        if gold.percent:
            golds.append(gold.with_node(gold.core))
        if answer.percent:
            answers.append(answer.with_node(answer.core))
    if gold.unit == "deg" and answer.unit is None and policy.units == "ignore":
        # 45° answered in radians: π/4.
        golds.append(gold.with_node(Node("deg", (gold.node,))))
    if answer.unit == "deg" and gold.unit is None and policy.units == "ignore" and _has_pi(gold.node):
        # π/6 answered in degrees: 30°. Only against a gold in π, so a bare gold 30 is never matched by 30°
        # read as radians, nor a gold 1 by 57.2958°; and then only converted (π/6° is a tiny angle, not π/6).
        answer = answer.with_node(Node("deg", (answer.node,)))
        answers = [answer]
    for candidate in golds:
        for given in answers:
            found = same_value(candidate, given, policy)
            if found.ok:
                return found
    return same_value(gold, answer, policy)


def _unit_rule(gold: Scalar, answer: Scalar, policy: Policy) -> bool:
    if policy.units == "strict":
        return gold.unit == answer.unit
    if {gold.unit, answer.unit} in ({"deg", "degc"}, {"deg", "degf"}):
        return True  # 100° for 100 °C: the scale left unsaid, as a missing unit is
    return gold.unit is None or answer.unit is None or gold.unit == answer.unit


_RADIANS = frozenset({"rad", "radian"})


def _without_radians(value: Scalar) -> Scalar:
    return value.with_node(value.node, value.percent, None) if value.unit in _RADIANS else value


def _has_pi(node: Node) -> bool:
    return any(part.op == "const" and part.value == "pi" for part in node.walk())


def same_value(gold: Scalar, answer: Scalar, policy: Policy = DEFAULT_POLICY) -> Match:
    """Whether two scalars have the same value (exact, by stated digits, or numerically)."""
    if gold.infinite or answer.infinite:
        return Match(gold.infinite == answer.infinite, "infinity")
    based = _bases(gold, answer)
    if based is not None:
        return based
    exact_gold, exact_answer = gold.rational, answer.rational
    if exact_gold is not None and exact_answer is not None:
        if exact_gold == exact_answer:
            return Match(True, "exact")
        if policy.rel_tol is not None:
            return Match(_within_rel(exact_gold, exact_answer, policy.rel_tol), "rel_tol")
        if _long_decimal_of(gold, answer):
            return Match(True, "long_decimal")
        return Match(_digits_agree(gold, answer, exact_gold, exact_answer), "digits")
    if _has_series(gold.node) or _has_series(answer.node):
        return _at_whole_numbers(gold, answer, policy)
    if gold.symbols or answer.symbols:
        if not gold.symbols and answer.symbols == {"j"} and _has_i(gold.node):
            answer = answer.with_node(_j_to_i(answer.node))
        return _numeric(gold, answer, "symbolic")  # x - x + 1 has a variable yet equals 1: points decide
    if policy.rel_tol is not None:
        try:
            x, y = gold.at(0, precise=True), answer.at(0, precise=True)
        except Undefined:
            return Match(False, "undefined")
        return Match(_within_rel(x, y, policy.rel_tol), "rel_tol")
    if answer.approx is not None or gold.approx is not None:
        try:
            if _long_decimal_of(gold, answer):
                return Match(True, "long_decimal")
            if _digits_agree_irrational(gold, answer):
                return Match(True, "digits")
        except Undefined:
            return Match(False, "undefined")
    return _numeric(gold, answer, "numeric")


WHOLE_POINTS = (1, 2, 3, 4, 7, 12)
"""Values given to a series' variable limit (n in \\sum_{k=1}^{n}) when two sides are compared."""


def _has_series(node: Node) -> bool:
    return any(part.op in ("sum", "prod") for part in node.walk())


def _at_whole_numbers(gold: Scalar, answer: Scalar, policy: Policy) -> Match:
    """Sides with a series whose limit is a variable (\\sum_{k=1}^{n} k against n(n+1)/2): equal when they
    agree with that variable set to each of WHOLE_POINTS (other variables sampled as usual). A sum is only
    defined at whole numbers, so the usual real sample points cannot be used."""
    limits = frozenset().union(
        *(
            free_symbols(part.args[1]) | free_symbols(part.args[2])
            for side in (gold, answer)
            for part in side.node.walk()
            if part.op in ("sum", "prod")
        )
    )
    if len(limits) != 1:
        return Match(False, "series")
    name = next(iter(limits))
    for point in WHOLE_POINTS:
        at_gold = gold.with_node(
            expand_series(substitute(gold.node, name, Fraction(point))), gold.percent, gold.unit
        )
        at_answer = answer.with_node(
            expand_series(substitute(answer.node, name, Fraction(point))), answer.percent, answer.unit
        )
        if (
            _has_series(at_gold.node)
            or _has_series(at_answer.node)
            or not same_value(at_gold, at_answer, policy).ok
        ):
            return Match(False, "series")
    return Match(True, "series")


def _bases(gold: Scalar, answer: Scalar) -> Match | None:
    """Numbers in other bases: same base (or the answer's bare digits in the gold's base) only."""
    gold_base = _base_of(gold)
    answer_base = _base_of(answer)
    if gold_base is None and answer_base is None:
        return None
    if gold_base is not None:
        base, digits = gold_base
        if answer_base is not None:
            return Match(answer_base[0] == base and int(answer_base[1], base) == int(digits, base), "base")
        literal = _plain_digits(answer)
        if literal is None:
            return Match(False, "base")
        try:
            return Match(int(literal, base) == int(digits, base), "base_digits")
        except ValueError:
            return Match(False, "base_digits")
    base, digits = answer_base  # type: ignore[misc]
    return Match(base == 10 and gold.rational == int(digits, 10), "base")


def _base_of(value: Scalar) -> tuple[int, str] | None:
    node = value.node
    if node.op == "num" and node.value.kind == "base":
        return node.value.base, node.value.text
    return None


def _plain_digits(value: Scalar) -> str | None:
    node = value.node
    if node.op == "num" and node.value.kind == "int" and node.value.text.isdigit():
        return node.value.text
    return None


def _within_rel(x, y, tolerance: float) -> bool:
    if x == y:
        return True
    scale = max(abs(x), abs(y))
    return (
        abs(x - y) <= Fraction(tolerance) * scale
        if isinstance(x, Fraction)
        else abs(x - y) <= tolerance * scale
    )


def _gold_places(gold: Scalar, answer: Scalar) -> int | None:
    """The places a rounded decimal gold states, when the answer may be compared at them; else None.

    Only a decimal gold with at least MIN_SIG significant digits is a rounded value (0.5 or 2.5 is exact),
    and an answer that is itself a decimal must state at least as many places (12.6 for 12.57 is not
    "to the nearest hundredth"). An exact gold (1/3, π) gives no digits to round at, so it needs an exact
    answer: 0.333 and 3.14 are approximations of it, not it.
    """
    gold_digits, answer_digits = gold.approx, answer.approx
    if gold_digits is None or gold_digits[1] < MIN_SIG:
        return None
    if answer_digits is not None and answer_digits[0] < gold_digits[0]:
        return None
    return gold_digits[0]


MIN_LONG_SIG = 6
"""Significant digits from which a decimal answer stands for an exact gold (see _long_decimal_of)."""


def _long_decimal_of(gold: Scalar, answer: Scalar) -> bool:
    """A decimal answer of at least MIN_LONG_SIG significant digits that is an exact gold rounded or cut off
    at its own last digit: 0.0833333333333333 and 0.083333 for 1/12, 0.666667 and 0.666666 for 2/3, 0.577350
    for √3/3. Not 0.08333 (five digits: an approximation), not 0.666668 (neither rounded nor cut off)."""
    node = answer.node.args[0] if answer.node.op == "neg" else answer.node
    digits = answer.approx
    if node.op != "num" or node.value.kind != "dec" or digits is None or digits[1] < MIN_LONG_SIG:
        return False
    if gold.approx is not None or gold.symbols or gold.unit != answer.unit or gold.percent != answer.percent:
        return False
    places = digits[0]
    stated = answer.rational
    if stated is None or places > 60:
        return False
    target = stated * Fraction(10) ** places
    exact = gold.rational
    if exact is not None:
        scaled = exact * Fraction(10) ** places
        return target.denominator == 1 and target in (Fraction(math.trunc(scaled)), Fraction(round(scaled)))
    dps = places + 30
    with mpmath.workdps(dps):
        value = gold.precise_at(0, dps)
        if abs(mpmath.im(value)) > 0:
            return False
        scaled_value = mpmath.re(value) * mpmath.mpf(10) ** places
        candidates = {int(mpmath.nint(scaled_value)), int(scaled_value)}  # int() cuts toward zero
    return target.denominator == 1 and int(target) in candidates


def _digits_agree(gold: Scalar, answer: Scalar, exact_gold: Fraction, exact_answer: Fraction) -> bool:
    places = _gold_places(gold, answer)
    if places is None:
        return False
    return abs(exact_gold - exact_answer) <= Fraction(1, 2) * Fraction(10) ** -places


def _digits_agree_irrational(gold: Scalar, answer: Scalar) -> bool:
    places = _gold_places(gold, answer)
    if places is None:
        return False
    dps = max(PRECISE_DPS, places + 30)
    x, y = gold.precise_at(0, dps), answer.precise_at(0, dps)
    with mpmath.workdps(dps):
        if abs(mpmath.im(x)) > 0 or abs(mpmath.im(y)) > 0:
            return False
        return abs(x - y) <= mpmath.mpf(10) ** -places / 2


def _numeric(gold: Scalar, answer: Scalar, rule: str) -> Match:
    """Compare at sample points: double precision first (fast rejection), then mpmath at 60 digits.

    With variables, a point where the two sides differ only because one of them leaves the real numbers
    there (√x·√y against √(xy) at negative x and y) is skipped, as long as no side uses i; where both are
    real and differ (√(x²) against x at x < 0), they differ. At least MIN_POINTS points must agree.
    """
    variables = bool(gold.symbols or answer.symbols)
    points = SAMPLE_POINTS if variables else 1
    agreed: list[int] = []
    for k in range(points):
        try:
            x, y = gold.at(k), answer.at(k)
        except Undefined:
            continue
        if abs(x - y) > max(DOUBLE_REL_TOL * max(abs(x), abs(y)), DOUBLE_ABS_TOL):
            if variables and not (gold.real_at(k) and answer.real_at(k)) and not _uses_i(gold, answer):
                continue
            return Match(False, rule)
        agreed.append(k)
    if len(agreed) < (MIN_POINTS if variables else 1):
        return Match(False, "undefined")
    confirmed = 0
    for k in agreed:
        try:
            x, y = gold.at(k, precise=True), answer.at(k, precise=True)
        except Undefined:
            continue
        verdict = _precise_close(gold, answer, k, x, y)
        if not verdict:
            return Match(False, rule)
        confirmed += 1
        if confirmed >= PRECISE_POINTS:
            break
    return Match(confirmed > 0, rule if confirmed else "undefined")


def _precise_close(gold: Scalar, answer: Scalar, k: int, x, y) -> bool:
    difference = abs(x - y)
    if difference <= PRECISE_REL_TOL * max(abs(x), abs(y)):
        return True
    if difference > TINY:
        return False
    # A tiny difference: a true zero shrinks when the precision doubles, a tiny value (e^-1000) does not.
    try:
        x2, y2 = gold.precise_at(k, 2 * PRECISE_DPS), answer.precise_at(k, 2 * PRECISE_DPS)
    except Undefined:
        return False
    with mpmath.workdps(2 * PRECISE_DPS):
        return abs(x2 - y2) <= difference * mpmath.mpf(10) ** -(PRECISE_DPS // 2)


def _uses_i(gold: Scalar, answer: Scalar) -> bool:
    return _has_i(gold.node) or _has_i(answer.node)


def _has_i(node: Node) -> bool:
    return any(part.op == "const" and part.value == "i" for part in node.walk())


def _j_to_i(node: Node) -> Node:
    if node.op == "sym" and node.value == "j":
        return Node("const", (), "i")
    if not node.args:
        return node
    return Node(node.op, tuple(_j_to_i(arg) for arg in node.args), node.value)


# -- relations ---------------------------------------------------------------------------------------------


def _is_label(side: Scalar) -> bool:
    node = side.node
    if node.op == "sym":
        return True
    return node.op == "call" and all(arg.op == "sym" for arg in node.args)


def _label(side: Scalar) -> str:
    node = side.node
    return label_key(node) if node.op == "sym" else f"{node.value}()"


def assignment(relation: Relation) -> tuple[Scalar, Scalar] | None:
    """(label, value) for a solved equation: x = 3, 3 = x, x = 1 + 2 = 3, f(x) = x^2 (a function)."""
    if not relation.ops or any(op != "=" for op in relation.ops):
        return None
    first, last = relation.sides[0], relation.sides[-1]
    for label, value in ((first, last), (last, first)):
        if not _is_label(label):
            continue
        if label.node.op == "call":
            arguments = {str(arg.value) for arg in label.node.args}
            if value.symbols <= arguments:
                return label, value
        elif not value.symbols:
            return label, value
    return None


def _stated_value(relation: Relation) -> Scalar | None:
    """The value an answer equation states: x = 3 -> 3; 2 + 3 = 5 -> 5; x^2 = 9 -> None. A chain that ends in
    a decimal approximation of an exact side (`\\frac{\\sqrt3}{3} \\approx 0.577`, `x = 1/3 = 0.333`) states
    the exact side: the decimal is a gloss, and only one that agrees with it to its stated digits."""
    found = assignment(relation)
    if found is not None:
        sides = relation.sides[1:] if found[0] is relation.sides[0] else relation.sides[:-1]
    elif all(op == "=" for op in relation.ops) and not any(side.symbols for side in relation.sides):
        sides = relation.sides
    elif all(op == "=" for op in relation.ops) and _has_series(relation.sides[0].node):
        sides = relation.sides  # \\sum_{k=1}^{n} k = \\frac{n(n+1)}{2}: the sum worked out, if it is right
    else:
        return None
    if not _consistent(sides):
        return None  # "5 = 4", "\\sqrt2 \\approx 1.5": a chain that contradicts itself states nothing
    return _exact_before_gloss(sides)


def _consistent(sides: tuple[Scalar, ...]) -> bool:
    """Whether each side of a chain of constants equals the next (a decimal side to the digits it states)."""
    for left, right in zip(sides, sides[1:], strict=False):
        try:
            if right.approx is not None and left.approx is None:
                agree = same_value(right, left).ok or _long_decimal_of(left, right)
            elif left.approx is not None and right.approx is None:
                agree = same_value(left, right).ok or _long_decimal_of(right, left)
            else:
                agree = same_value(left, right).ok
        except Undefined:
            return False
        if not agree:
            return False
    return True


def _exact_before_gloss(sides: tuple[Scalar, ...]) -> Scalar:
    """The last side, unless it is a decimal that rounds an earlier exact side: then that exact side."""
    last = sides[-1]
    if len(sides) < 2 or last.approx is None or last.symbols:
        return last
    exact = sides[-2]
    if exact.approx is not None or exact.symbols or exact.unit != last.unit:
        return last
    try:
        return exact if same_value(last, exact).ok else last
    except Undefined:
        return last


def _relation_gold(gold: Relation, answer: Value, policy: Policy) -> Match:
    solved = assignment(gold)
    if solved is not None:
        return _assignment_gold(solved, answer, policy)
    if all(op == "=" for op in gold.ops) and not any(side.symbols for side in gold.sides):
        return equivalent(gold.sides[-1], answer, policy)  # "2 + 3 = 5" as a gold means 5
    interval = relation_interval(gold, solve=True)
    if interval is not None:
        if isinstance(answer, Relation) and not _same_variable(gold, answer):
            return Match(False, "variable")  # y > 1 is not x > 1, nor 0 < f(x) < 1 the set 0 < x < 1
        return _interval_gold(interval, answer, policy)
    band = abs_band(gold)
    if isinstance(band, SetOp):
        return _setop_gold(band, answer, policy)
    if isinstance(band, Interval):
        return _interval_gold(band, answer, policy)
    if not isinstance(answer, Relation):
        return Match(False, "equation_needs_equation")
    if gold.ops == ("!=",) and answer.ops == ("!=",):
        return _proportional(gold, answer, positive=False, rule="not_equal")
    if len(gold.ops) != 1 or len(answer.ops) != 1:
        return Match(False, "relation")
    gold_op, answer_op = gold.ops[0], answer.ops[0]
    if gold_op == "=":
        if answer_op != "=":
            return Match(False, "relation")
        return _proportional(gold, answer, positive=False, rule="equation")
    if _strict(gold_op) != _strict(answer_op) or "=" in (answer_op,) or answer_op == "!=":
        return Match(False, "inequality")
    return _proportional(_greater(gold), _greater(answer), positive=True, rule="inequality")


def _assignment_gold(solved: tuple[Scalar, Scalar], answer: Value, policy: Policy) -> Match:
    label, value = solved
    if isinstance(answer, Relation):
        given = assignment(answer)
        if given is None:
            return Match(False, "unsolved_equation")
        other_label, other_value = given
        named = label.node.op == "sym" and other_label.node.op == "sym"
        # x = 2 for x_1 = 2: a root named without its index is still that variable's value
        if named and _label(other_label) not in (_label(label), _unindexed(_label(label))):
            return Match(False, "variable")
        found = compare_scalars(value, other_value, policy)
        return Match(found.ok, found.rule + "+equation")
    if isinstance(answer, Items) and len(answer.items) == 1:
        return _assignment_gold(solved, answer.items[0], policy)
    if isinstance(answer, Scalar):
        found = compare_scalars(value, answer, policy)
        return Match(found.ok, found.rule + "+value")
    return (
        equivalent(value, answer, policy) if not isinstance(answer, Items) else Match(False, "several_values")
    )


def _strict(op: str) -> bool:
    return op in ("<", ">")


def _greater(relation: Relation) -> Relation:
    """a < b as b > a, so every inequality reads "left > right" or "left >= right"."""
    op = relation.ops[0]
    left, right = relation.sides
    if op in ("<", "<="):
        return Relation((">" if op == "<" else ">=",), (right, left), relation.raw)
    return relation


def _difference(relation: Relation) -> Scalar:
    left, right = relation.sides[0], relation.sides[-1]
    return left.with_node(Node("add", (left.node, Node("neg", (right.node,)))))


def _proportional(gold: Relation, answer: Relation, positive: bool, rule: str) -> Match:
    """Whether (left - right) of the answer is a constant, nonzero multiple of the gold's (positive for >)."""
    gold_diff, answer_diff = _difference(gold), _difference(answer)
    if gold_diff.symbols != answer_diff.symbols:
        return Match(False, rule)
    ratios = []
    for k in range(SAMPLE_POINTS):
        try:
            x, y = gold_diff.at(k), answer_diff.at(k)
        except Undefined:
            continue
        if x == 0 or y == 0:
            if abs(x) + abs(y) > DOUBLE_ABS_TOL:
                return Match(False, rule)
            continue
        ratios.append(y / x)
    if not ratios:
        return Match(False, rule)
    first = ratios[0]
    if any(abs(ratio - first) > DOUBLE_REL_TOL * abs(first) for ratio in ratios):
        return Match(False, rule)
    if positive and (first.real <= 0 or abs(first.imag) > DOUBLE_ABS_TOL):
        return Match(False, rule)
    # Confirm at two points with mpmath: answer = c · gold, with c taken from the first point.
    try:
        x0, y0 = gold_diff.at(0, precise=True), answer_diff.at(0, precise=True)
        x1, y1 = gold_diff.at(1, precise=True), answer_diff.at(1, precise=True)
    except Undefined:
        return Match(True, rule + "_double")
    with mpmath.workdps(PRECISE_DPS):
        if x0 == 0:
            return Match(abs(y0) <= TINY, rule)
        factor = y0 / x0
        return Match(abs(y1 - factor * x1) <= PRECISE_REL_TOL * max(abs(y1), abs(factor * x1)) + TINY, rule)


def relation_interval(relation: Relation, solve: bool = False) -> Interval | None:
    """The interval a solved inequality describes: x > 3 -> (3, oo); -1 < x <= 2 -> (-1, 2]; -x > -1 -> (-oo, 1)
    (a sign is no work left undone); else None. With `solve` (a gold, which is trusted), any one-variable
    linear inequality: 5 - 2x >= 1 -> (-oo, 2]. An answer's `2x > 6` is the question, not its solution."""
    ops = relation.ops
    sides = relation.sides
    if not ops or any(op in ("=", "!=", "in") for op in ops):
        return None
    if len(ops) == 1:
        left, right = sides
        op = ops[0]
        if right.symbols and not left.symbols:  # 3 > x reads x < 3
            left, right, op = right, left, _MIRROR[op]
        if _is_range_label(left.node) and not right.symbols:
            bound = right
        else:
            # -x > -1 is x < 1; 5 - 2x >= 1 is x <= 2 (a negative coefficient turns the relation round).
            solved = _solve(left, right, solve)
            if solved is None:
                return None
            bound, sign = solved
            if sign < 0:
                op = _MIRROR[op]
        if op in (">", ">="):
            return Interval(bound, _INFINITY, op == ">", True, relation.raw)
        return Interval(_MINUS_INFINITY, bound, True, op == "<", relation.raw)
    if len(ops) == 2:
        low, middle, high = sides
        if low.symbols or high.symbols:
            return None
        if ops[0] in (">", ">=") and ops[1] in (">", ">="):  # 3 > x > 1 reads 1 < x < 3
            low, high, ops = high, low, (_MIRROR[ops[1]], _MIRROR[ops[0]])
        if not (ops[0] in ("<", "<=") and ops[1] in ("<", "<=")):
            return None
        if _is_range_label(middle.node):
            return Interval(low, high, ops[0] == "<", ops[1] == "<", relation.raw)
        lower, upper = (
            _solve(middle, low, solve),
            _solve(middle, high, solve),
        )  # -1 < 2x + 1 <= 3: -1 < x <= 1
        if lower is None or upper is None:
            return None
        if lower[1] > 0:
            return Interval(lower[0], upper[0], ops[0] == "<", ops[1] == "<", relation.raw)
        return Interval(upper[0], lower[0], ops[1] == "<", ops[0] == "<", relation.raw)
    return None


_MIRROR = {"<": ">", ">": "<", "<=": ">=", ">=": "<="}


def _variable_of(relation: Relation) -> str | None:
    """The one variable (or function value) an inequality bounds, as text; None when it is not one name."""
    bounded = [side for side in relation.sides if side.symbols]
    if len(bounded) != 1:
        return None
    side = bounded[0]
    if _is_range_label(side.node):
        return to_text(side.node)
    return next(iter(side.symbols)) if len(side.symbols) == 1 else None


def _same_variable(gold: Relation, answer: Relation) -> bool:
    """Both bound the same name, or one of them bounds something that is not a single name."""
    gold_name, answer_name = _variable_of(gold), _variable_of(answer)
    return gold_name is None or answer_name is None or gold_name == answer_name


def _is_range_label(node: Node) -> bool:
    """A variable, or a function applied to variables (`0 < f(x) < 1` is the range (0, 1))."""
    return node.op == "sym" or (node.op == "call" and all(arg.op == "sym" for arg in node.args))


def _solve(side: Scalar, other: Scalar, solve: bool) -> tuple[Scalar, int] | None:
    """`side OP other` with side linear in its one variable: (the bound, the coefficient's sign); without
    `solve`, only a side that is the variable with a minus sign (-x)."""
    if len(side.symbols) != 1 or other.symbols or side.unit or other.unit or side.percent or other.percent:
        return None
    if not solve and not (side.node.op == "neg" and side.node.args[0].op == "sym"):
        return None
    solved = solve_for(side.node, other.node, next(iter(side.symbols)))
    if solved is None:
        return None
    bound, sign = solved
    return Scalar(bound, to_text(bound)), sign


_INFINITY = Scalar(Node("const", (), "oo"), "oo")
_MINUS_INFINITY = Scalar(Node("neg", (Node("const", (), "oo"),)), "-oo")


# -- collections -------------------------------------------------------------------------------------------


def _items_gold(gold: Items, answer: Value, policy: Policy) -> Match:
    if gold.decimal is not None and isinstance(answer, Scalar):  # a gold "1000,99" against one number
        found = compare_scalars(gold.decimal, answer, policy)
        return Match(found.ok, found.rule + "+decimal_comma")
    if gold.shape == "list" and _is_system(gold):
        # x = 1, y = 2: labelled answers match by label (below); bare values must come in the gold's order.
        members = _members(answer, ordered_ok=True)
        if members is not None and not all(_labelled(member) for member in members):
            return Match(_ordered(gold.items, members, policy), "system")
    if gold.shape in ("set", "list", "pm"):
        members = _members(answer, ordered_ok=True)
        if members is None:
            if len(gold.items) == 1:
                return equivalent(gold.items[0], answer, policy)
            if gold.shape == "set" and not gold.items and isinstance(answer, Text):
                return Match(answer.text in _EMPTY_WORDS, "empty_set")
            return Match(False, "kind")
        return Match(_unordered(gold.items, members, policy), "unordered")
    # tuple or pair: ordered, or an open interval for a pair.
    if gold.shape == "pair":
        as_interval = _as_interval(answer)
        if as_interval is not None and not isinstance(answer, Items):
            lo, hi = gold.items
            interval = Interval(lo, hi, True, True, gold.raw)  # type: ignore[arg-type]
            return _interval_gold(interval, answer, policy)
    members = _members(answer, ordered_ok=True, ordered_only=True)
    if members is None:
        return Match(False, "kind")
    return Match(_ordered(gold.items, members, policy), "ordered")


def _is_system(gold: Items) -> bool:
    labels = []
    for item in gold.items:
        if isinstance(item, Labelled):
            labels.append(label_key(item.label))
            continue
        solved = assignment(item) if isinstance(item, Relation) else None
        if solved is None:
            return False
        labels.append(_label(solved[0]))
    return len(set(labels)) == len(labels) > 1


def _labelled(value: Value) -> bool:
    return isinstance(value, Labelled) or isinstance(value, Relation) and assignment(value) is not None


def _unindexed(name: str) -> str:
    """x_{1} -> x: the variable a subscripted name indexes."""
    return name.partition("_")[0]


def label_key(label: Node) -> str:
    """A label in a comparable form: a segment or angle read either way round (AB is BA, ∠ABC is ∠CBA), the
    measure's `m` and an overline dropped (m∠ABC is ∠ABC, \\overline{AB} is AB); else its text, blanks out."""
    text = (
        "".join(to_text(label).split())
        .replace("m*angle(", "angle(")
        .replace("bar(", "(")
        .replace("abs(", "(")
    )
    letters = re.fullmatch(r"\(?((?:[A-Z]\*?)+)\)?|angle\(([A-Z]+)\)", text)
    if letters:
        name = (letters.group(1) or letters.group(2)).replace("*", "")
        prefix = "angle:" if letters.group(2) else "segment:"
        return prefix + min(name, name[::-1])
    return text


def _labelled_gold(gold: Labelled, answer: Value, policy: Policy) -> Match:
    """A named gold: a bare value answers it; a named answer must name the same quantity (or, for a ratio, the
    same quantities in any order: V_2:V_1 = 21:11 is V_1:V_2 = 11:21)."""
    label: Node | None = None
    if isinstance(answer, Labelled):
        label, answer = answer.label, answer.value
        if label.op == "ratio" and isinstance(answer, Time):  # "V_2:V_1 = 21:11": a ratio, not 9:11 p.m.
            answer = Ratio(_integer_scalar(answer.hour), _integer_scalar(answer.minute), answer.raw)
    elif isinstance(answer, Relation) and (solved := assignment(answer)) is not None:
        label, answer = solved[0].node, solved[1]
    value = gold.value
    if label is not None and label_key(label) != label_key(gold.label):
        reordered = _reordered_ratio(gold, label, answer)
        if reordered is None:
            return Match(False, "label")
        answer = reordered
    found = equivalent(value, answer, policy)
    return Match(found.ok, found.rule + "+label")


def _reordered_ratio(gold: Labelled, label: Node, answer: Value) -> Value | None:
    """The answer's ratio in the gold's order of names, when both name the same quantities; else None."""
    if not (gold.label.op == "ratio" and label.op == "ratio" and isinstance(answer, Ratio)):
        return None
    gold_names = [label_key(part) for part in ratio_parts(gold.label)]
    answer_names = [label_key(part) for part in ratio_parts(label)]
    if sorted(gold_names) != sorted(answer_names) or len(set(gold_names)) != len(gold_names):
        return None
    if len(answer.parts) != len(answer_names):
        return None
    by_name = dict(zip(answer_names, answer.parts, strict=True))
    parts = [by_name[name] for name in gold_names]
    raw = ":".join(
        part.raw or part.normalized() for part in parts
    )  # its own text: the identity check reads it
    return Ratio(parts[0], parts[-1], raw, tuple(parts[1:-1]))


def _members(answer: Value, ordered_ok: bool, ordered_only: bool = False) -> tuple[Value, ...] | None:
    if isinstance(answer, Items):
        if ordered_only and answer.shape in ("set", "pm"):
            return None
        return answer.items
    if isinstance(answer, Matrix):
        if len(answer.rows) == 1:
            return answer.rows[0]
        if all(len(row) == 1 for row in answer.rows):
            return tuple(row[0] for row in answer.rows)
        return None
    if isinstance(answer, (Scalar, Relation)) and not ordered_only:
        return (answer,)
    return None


def _unordered(golds: tuple[Value, ...], answers: tuple[Value, ...], policy: Policy) -> bool:
    """Set equality: every gold item is matched by an answer item and every answer item matches a gold."""
    if not golds or not answers:
        return not golds and not answers
    matched_answers = set()
    for gold in golds:
        found = False
        for index, answer in enumerate(answers):
            if equivalent(gold, answer, policy).ok:
                matched_answers.add(index)
                found = True
                break
        if not found:
            return False
    for index, answer in enumerate(answers):
        if index in matched_answers:
            continue
        if not any(equivalent(gold, answer, policy).ok for gold in golds):
            return False
    return True


def _ordered(golds: tuple[Value, ...], answers: tuple[Value, ...], policy: Policy) -> bool:
    return len(golds) == len(answers) and all(
        equivalent(gold, answer, policy).ok for gold, answer in zip(golds, answers, strict=True)
    )


# -- intervals and set operations --------------------------------------------------------------------------


def _as_interval(answer: Value) -> Interval | None:
    if isinstance(answer, Interval):
        return answer
    if isinstance(answer, Relation):
        interval = relation_interval(answer)
        if interval is None:
            band = abs_band(answer)
            interval = band if isinstance(band, Interval) else None
        return interval
    if isinstance(answer, Items) and answer.shape == "pair":
        lo, hi = answer.items
        return Interval(lo, hi, True, True, answer.raw)  # type: ignore[arg-type]
    return None


def _interval_gold(gold: Interval, answer: Value, policy: Policy) -> Match:
    interval = _as_interval(answer)
    if interval is None:
        if isinstance(answer, Text) and gold.lo.infinite == -1 and gold.hi.infinite == 1:
            return Match(answer.text in _ALL_REALS_WORDS, "all_reals")
        return Match(False, "kind")
    if interval.lo_open != gold.lo_open or interval.hi_open != gold.hi_open:
        return Match(False, "interval_ends")
    ok = same_value(gold.lo, interval.lo, policy).ok and same_value(gold.hi, interval.hi, policy).ok
    return Match(ok, "interval")


def abs_band(relation: Relation) -> SetOp | Interval | None:
    """The real solution set of a bound on |x|: 1 <= |x| <= 3/2 is [-3/2, -1] ∪ [1, 3/2], |x| < 2 is (-2, 2),
    |x| > 2 is (-oo, -2) ∪ (2, oo); None for any other relation (or a lower bound that is not a nonnegative
    rational, where the set is not two bands)."""
    ops, sides = relation.ops, relation.sides
    if len(ops) == 2 and ops[0] in ("<", "<=") and ops[1] in ("<", "<="):
        low, middle, high = sides
        lo_open, hi_open = ops[0] == "<", ops[1] == "<"
    elif len(ops) == 2 and ops[0] in (">", ">=") and ops[1] in (">", ">="):
        high, middle, low = sides
        lo_open, hi_open = ops[1] == ">", ops[0] == ">"
    elif len(ops) == 1 and ops[0] in ("<", "<=", ">", ">="):
        middle, bound = sides
        if ops[0] in ("<", "<="):
            low, high, lo_open, hi_open = _ZERO_SCALAR, bound, False, ops[0] == "<"
        else:
            low, high, lo_open, hi_open = bound, _INFINITY, ops[0] == ">", True
    else:
        return None
    node = middle.node
    if not (node.op == "func" and node.value == "abs" and node.args and node.args[0].op == "sym"):
        return None
    if low.symbols or high.symbols or low.rational is None or low.rational < 0:
        return None
    upper = Interval(low, high, lo_open, hi_open, relation.raw)
    negative_high = Scalar(Node("neg", (high.node,)), "-" + high.raw)
    negative_low = Scalar(Node("neg", (low.node,)), "-" + low.raw)
    if low.rational == 0 and not lo_open:  # |x| <= 2: one band through 0
        return Interval(negative_high, high, hi_open, hi_open, relation.raw)
    lower = Interval(negative_high, negative_low, hi_open, lo_open, relation.raw)
    return SetOp("union", (lower, upper), relation.raw)


_ZERO_SCALAR = Scalar(Node("num", (), Number(Fraction(0), "0", "int")), "0")


def _setop_gold(gold: SetOp, answer: Value, policy: Policy) -> Match:
    if isinstance(answer, Relation):
        band = abs_band(answer)
        if band is not None:
            answer = band
    if isinstance(answer, SetOp):
        if answer.op != gold.op:
            return Match(False, "set_operation")
        return Match(_unordered(gold.parts, answer.parts, policy), "union")
    if gold.op == "union" and isinstance(answer, Items) and answer.shape == "list":
        parts = tuple(_as_interval(item) or item for item in answer.items)
        return Match(_unordered(gold.parts, parts, policy), "union")
    return Match(False, "kind")


# -- matrices and ratios -----------------------------------------------------------------------------------


def _matrix_gold(gold: Matrix, answer: Value, policy: Policy) -> Match:
    if isinstance(answer, Matrix):
        if len(answer.rows) != len(gold.rows) or any(
            len(a) != len(g) for a, g in zip(answer.rows, gold.rows, strict=True)
        ):
            return Match(False, "matrix_shape")
        ok = all(
            compare_scalars(g, a, policy).ok
            for grow, arow in zip(gold.rows, answer.rows, strict=True)
            for g, a in zip(grow, arow, strict=True)
        )
        return Match(ok, "matrix")
    vector = _members(gold, ordered_ok=True, ordered_only=True)
    if vector is not None and isinstance(answer, Items) and answer.shape in ("tuple", "pair", "list"):
        return Match(_ordered(vector, answer.items, policy), "vector")
    return Match(False, "kind")


def _ratio_gold(gold: Ratio, answer: Value, policy: Policy) -> Match:
    if isinstance(answer, Time):
        answer = Ratio(_integer_scalar(answer.hour), _integer_scalar(answer.minute), answer.raw)
    if len(gold.parts) > 2 or isinstance(answer, Ratio) and len(answer.parts) > 2:
        # a:b:c = 3:4:5 is matched by 6:8:10: every part in the same proportion to the first
        if not isinstance(answer, Ratio) or len(answer.parts) != len(gold.parts):
            return Match(False, "ratio")
        first_gold, first_answer = gold.parts[0], answer.parts[0]
        ok = all(
            same_value(
                Scalar(Node("mul", (part.node, first_answer.node))),
                Scalar(Node("mul", (other.node, first_gold.node))),
                policy,
            ).ok
            for part, other in zip(gold.parts[1:], answer.parts[1:], strict=True)
        )
        return Match(ok, "ratio")
    if isinstance(answer, Ratio):
        left = Scalar(Node("mul", (gold.left.node, answer.right.node)))
        right = Scalar(Node("mul", (gold.right.node, answer.left.node)))
        return Match(same_value(left, right, policy).ok, "ratio")
    if isinstance(answer, Scalar):
        quotient = Scalar(Node("div", (gold.left.node, gold.right.node), "slash"))
        return Match(same_value(quotient, answer, policy).ok, "ratio_value")
    return Match(False, "kind")


def _integer_scalar(value: int) -> Scalar:
    return Scalar(Node("num", (), Number(Fraction(value), str(value), "int")))
