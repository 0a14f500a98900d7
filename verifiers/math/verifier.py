"""The `math` verifier: is the response's final answer the gold answer?

Pipeline: extract the final answer(s) (extract.py: after the last </think>, boxes, anchors, lenient
fallback), parse each with our own grammar (grammar.py -> values.py, behind the cost guards of guards.py),
and compare with the gold by the gold's kind (equivalence.py). Runs in the killable worker pool with a 2 s
default deadline; the guards make almost every hostile answer a fast `too_complex` before the deadline.

Verdicts: reward 1 for an equivalent answer. Reward 0 with a reason: `no_answer` (nothing extracted, or a
content-free response), `hedged` (several different final answers for a gold that is not a collection),
`too_complex` (the answer trips the cost guards: the model wrote it, so it earns nothing), `unparseable`
(an answer was found but is not math or text we can read), `wrong_form` (right value, but not in the
form the `form` option demands), `wrong_answer`. Components: `format` (a final answer was found where the
extraction policy says, and it committed to one answer) and `answer`. Details: `extracted` (the candidate
texts), `method`, `gold_normalized`, `answer_normalized`, `rule` (what decided).

A gold that cannot be understood is a 422 at request time (the reference validator extracts and parses it
with the grammar, which is cheap); a gold that only fails later (it trips a guard when evaluated) is a
`verifier_error`, never a silent 0. Gold parses are cached per worker process (a GRPO group of 16-64
responses shares one gold), and plain numbers are compared as Fractions without any symbolic work.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from functools import lru_cache
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from proctor.contract import Status, Verdict
from proctor.registry import BaseOptions, Example, VerifierSpec, register_verifier
from proctor.verifiers.answers import AnswerReference, graded, unanswered
from proctor.verifiers.math.equivalence import Policy, assignment, equivalent
from proctor.verifiers.math.extract import Extracted, every_box, extract_answer, extract_gold, final_part
from proctor.verifiers.math.grammar import Node
from proctor.verifiers.math.guards import ParseError, TooComplex
from proctor.verifiers.math.repair import condition_and_set, drop_part_labels, repair_gold, restore_escapes
from proctor.verifiers.math.values import (
    Items,
    Relation,
    Scalar,
    SetOp,
    Value,
    check_value,
    fold,
    parse_value,
)
from proctor.verifiers.reading import clip

VERSION = "1.0.0"
GOLD_CACHE_SIZE = 4096

Form = Literal["factored", "simplified", "lowest_terms", "decimal"]


class MathReference(AnswerReference):
    """The gold answer: bare LaTeX, a delimited answer ($...$, \\boxed{...}) or a whole reference solution."""

    SHORTHAND_SCHEMA: ClassVar[dict[str, Any]] = {
        "type": "string",
        "minLength": 1,
        "description": "The gold answer (bare LaTeX, $...$, \\boxed{...}, or a reference solution).",
    }

    answer: str = Field(min_length=1, max_length=1_000_000, description="The gold answer.")

    @field_validator("answer")
    @classmethod
    def _understood(cls, value: str) -> str:
        # Extraction and the grammar parse are cheap and bounded, so a gold we cannot read is a 422 here.
        try:
            gold_value(value)
        except ValueError as exc:  # ParseError is a ValueError
            raise ValueError(f"the gold answer cannot be understood: {exc}") from None
        except TooComplex as exc:
            raise ValueError(f"the gold answer is beyond the cost guards: {exc}") from None
        return value


class MathOptions(BaseOptions):
    """How the final answer is found and compared."""

    deadline_s: float | None = Field(
        default=2.0, gt=0, le=600, description="Hard deadline for scoring this item in the worker pool."
    )
    extraction: Literal["anchored", "lenient"] = Field(
        default="anchored",
        description="anchored: the last \\boxed{}/\\fbox{} or an explicit anchor ('final answer is', "
        "'Answer:', 'the answer is'); lenient: also, when no anchor is present, the last LaTeX expression or "
        "number (as Math-Verify does).",
    )
    percent: Literal["lenient", "strict"] = Field(
        default="lenient",
        description="lenient: 50\\% equals 50 and 0.5 when one side has the percent sign (with signs on both "
        "sides only the values compare: 0.25\\% is not 25\\%); strict: 50\\% is only the value 0.5.",
    )
    units: Literal["ignore", "strict"] = Field(
        default="ignore",
        description="ignore: a unit (\\text{ cm}, degrees) is dropped when the other side has none or the "
        "same one, and different units never match; strict: units must match exactly.",
    )
    rel_tol: float | None = Field(
        default=None,
        ge=0,
        lt=1,
        description="When set, numbers match within this relative tolerance instead of by the digits stated.",
    )
    form: Form | None = Field(
        default=None,
        description="Also require the answer's form: factored (a product of irreducible factors), simplified "
        "(fractions in lowest terms, radicals reduced, rational denominators, numbers combined), "
        "lowest_terms (fractions in lowest terms, no decimals), decimal (a decimal number).",
    )


def policy_of(options: MathOptions) -> Policy:
    """The equivalence policy the options ask for."""
    return Policy(percent=options.percent, units=options.units, rel_tol=options.rel_tol)


@lru_cache(maxsize=GOLD_CACHE_SIZE)
def gold_value(reference: str) -> Value:
    """The parsed gold of a reference (extracted, then parsed); cached per process, errors are not cached.

    Escapes a dataset's string handling ate are restored first; a gold that still does not parse is mended
    as repair.py describes (doubled backslashes, an unbalanced end) and parsed again, so a gold a human reads
    without doubt is never refused, and one damaged beyond repair is still a 422 with the first error."""
    extracted = extract_gold(restore_escapes(reference))
    answer = drop_part_labels(extracted)
    stated = condition_and_set(answer)
    if stated is not None:
        condition, interval = (check_value(parse_value(part)) for part in stated)
        if not (equivalent(interval, condition).ok and equivalent(condition, interval).ok):
            raise ParseError("the inequality and the set after its colon disagree")
        return interval
    try:
        value = check_value(parse_value(answer))
        if answer != extracted and isinstance(value, Items) and value.shape == "list":
            return Items("tuple", value.items, value.raw)  # numbered parts come in their order
        return value
    except ParseError:
        mended = repair_gold(answer)
        if mended == answer:
            raise
        try:
            return check_value(parse_value(extract_gold(mended)))
        except ParseError:
            pass
        raise


_COLLECTIONS = (Items, SetOp)


def score_math(response: str, reference: MathReference, options: MathOptions) -> Verdict:
    """Extract the final answer, parse it, and compare it with the gold."""
    try:
        gold = gold_value(reference.answer)
    except (ValueError, TooComplex) as exc:
        return Verdict.failure(Status.verifier_error, "bad_reference", error=str(exc))
    extracted = _parts_in_boxes(response, extract_answer(response, options.extraction), gold)
    details: dict[str, Any] = {
        "extracted": [clip(candidate) for candidate in extracted.candidates],
        "method": extracted.method,
        "gold_normalized": clip(gold.normalized()),
        "answer_normalized": None,
        "rule": None,
    }
    if extracted.content_free or not extracted.candidates:
        return unanswered("no_answer", details)
    if extracted.oversized:
        details["rule"] = "oversized"
        return graded(False, details, "too_complex")
    try:
        return _judge(gold, extracted, options, details)
    except TooComplex as exc:
        details["rule"] = f"guard: {exc}"
        return graded(False, details, "too_complex")
    except RecursionError:  # a tree the guards let through but Python's stack could not: still the answer's
        details["rule"] = "guard: recursion"
        return graded(False, details, "too_complex")


def _parsed(candidates: tuple[str, ...]) -> list[Value | None]:
    answers: list[Value | None] = []
    for candidate in candidates:
        try:
            answers.append(check_value(parse_value(candidate)))
        except ParseError:  # the answer is not math we read: unparseable. Any other error is our bug, and the
            answers.append(None)  # engine answers it verifier_error (masked), never a reward of 0
    return answers


def _parts_in_boxes(response: str, extracted: Extracted, gold: Value) -> Extracted:
    """A gold of k parts (a list, tuple or set of k >= 2 items) answered part by part in exactly k boxes,
    with text between them ("(1) ... \\boxed{35} cm ... (2) ... \\boxed{4}"): those k boxes, in order. Any
    other number of boxes keeps the last box and the boxes co-committed with it, so a spray of candidates
    that covers the gold is still a hedge against a single-valued gold and never a collection of its own."""
    if not isinstance(gold, Items) or len(gold.items) < 2 or extracted.method != "boxed":
        return extracted
    if extracted.oversized or len(extracted.candidates) >= len(gold.items):
        return extracted
    boxes = every_box(response)
    if len(boxes) != len(gold.items) or not all(boxes):
        return extracted
    if _REVISION.search(final_part(response)):
        return extracted  # "maybe \\boxed{2}. Hmm, no, it's \\boxed{3}": a revision, not two parts
    # A response that numbers its parts ("(1)", "(a)", "Part 2") states their order: compared in order, and
    # only when it numbers them in order ("(2) \\boxed{5} (1) \\boxed{7}" is not parts 1 and 2 in turn).
    marks = [mark.group(1).lower() for mark in _PART_MARK.finditer(response)]
    if len(set(marks)) >= 2:
        if marks != sorted(marks, key=_part_rank):
            return extracted
        return Extracted(boxes, "boxed_parts_ordered", False)
    return Extracted(boxes, "boxed_parts", False)


def _part_rank(mark: str) -> int:
    roman = {"i": 1, "ii": 2, "iii": 3, "iv": 4, "v": 5, "vi": 6, "vii": 7, "viii": 8}
    return int(mark) if mark.isdigit() else roman.get(mark, ord(mark[0]) - ord("a") + 1)


_REVISION = re.compile(
    r"\b(?:no|not|wrong|wait|actually|mistake|incorrect|instead|correction|oops|hmm|recheck|rather|scratch)\b",
    re.IGNORECASE,
)


def _last_side(text: str) -> str:
    """What follows the last `=` outside braces (`\\sum_{k=1}^{10} k^2 = 385` -> ` 385`): what a chain states."""
    depth, cut = 0, 0
    for index, char in enumerate(text):
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
        elif char == "=" and depth == 0:
            cut = index + 1
    return text[cut:]


_SERIES = re.compile(r"\\(?:sum|prod)(?![A-Za-z])|[∑∏]")
_PART_MARK = re.compile(
    r"(?:^|(?<=\s)|(?<=\*\*))(?:part\s*)?\(?((?<!\w)(?:[a-h]|[1-9]|i{1,3}|iv|v|vi{1,3}))[).](?=\s|\*\*)",
    re.IGNORECASE,
)


def _judge(gold: Value, extracted: Extracted, options: MathOptions, details: dict[str, Any]) -> Verdict:
    policy = policy_of(options)
    candidates, method, fallback = extracted.candidates, extracted.method, extracted.fallback
    answers = _parsed(candidates)
    if fallback and all(answer is None for answer in answers):
        candidates, answers = fallback, _parsed(fallback)  # a later anchor that is no answer: the box stands
        details["extracted"] = [clip(candidate) for candidate in candidates]
    if method == "boxed_parts_ordered" and isinstance(gold, Items):
        matches = [
            answer is not None and equivalent(part, answer, policy).ok
            for part, answer in zip(gold.items, answers, strict=True)
        ]
        details["rule"] = "parts_in_order"
        return graded(all(matches), details, "wrong_answer")
    answer = _commit(gold, answers, candidates, policy)
    if answer is None:
        if len(candidates) > 1:
            details["rule"] = "several_answers"
            return unanswered("hedged", details)
        details["rule"] = "unparseable"
        return graded(False, details, "unparseable")
    details["answer_normalized"] = clip(answer.normalized())
    if any(_SERIES.search(_last_side(candidate)) for candidate in candidates) and not _SERIES.search(
        gold.raw
    ):
        # \\sum_{k=1}^{n} k restates the question "find the sum": only a gold that is itself a series takes one
        details["rule"] = "unevaluated_series"
        return graded(False, details, "wrong_answer")
    match = equivalent(gold, answer, policy)
    details["rule"] = match.rule
    if match.ok and options.form is not None:
        problem = form_problem(answer, options.form, gold)
        if problem is not None:
            details["rule"] = f"form: {problem}"
            return graded(False, details, "wrong_form")
    return graded(match.ok, details, "wrong_answer")


def _commit(
    gold: Value, answers: list[Value | None], candidates: tuple[str, ...], policy: Policy
) -> Value | None:
    """The one answer the response commits to: a single candidate, several that agree, or a collection."""
    if len(answers) == 1:
        return answers[0]
    if any(answer is None for answer in answers):
        return None
    first = answers[0]
    assert first is not None
    if all(_agree(first, other, policy) for other in answers[1:]):  # type: ignore[arg-type]
        return first
    if isinstance(gold, _COLLECTIONS):
        return Items("list", tuple(answers), ", ".join(candidates))  # type: ignore[arg-type]
    return None


def _agree(first: Value, other: Value, policy: Policy) -> bool:
    return equivalent(first, other, policy).ok and equivalent(other, first, policy).ok


# -- form checks -------------------------------------------------------------------------------------------


def form_problem(answer: Value, form: Form, gold: Value) -> str | None:
    """Why the answer is not in the demanded form, or None when it is."""
    if not isinstance(answer, Scalar):
        values = _scalars(answer)
        if values is None:
            return None if form != "decimal" else "not a number"
        for value in values:
            problem = form_problem(value, form, gold)
            if problem is not None:
                return problem
        return None
    node = answer.node
    if form == "decimal":
        return None if _is_decimal(node) else "not a decimal number"
    if form == "lowest_terms":
        return _fraction_problem(node, allow_decimal=False)
    if form == "simplified":
        return _fraction_problem(node, allow_decimal=True) or _simplify_problem(node)
    return _factor_problem(node)


def _scalars(value: Value) -> list[Scalar] | None:
    if isinstance(value, Items):
        found: list[Scalar] = []
        for item in value.items:
            inner = [item] if isinstance(item, Scalar) else _scalars(item)
            if inner is None:
                return None
            found.extend(inner)
        return found
    if isinstance(value, Relation):
        solved = assignment(value)
        return [solved[1]] if solved is not None else None
    return None


def _strip_sign(node: Node) -> Node:
    while node.op in ("neg", "group"):
        node = node.args[0]
    return node


def _is_decimal(node: Node) -> bool:
    node = _strip_sign(node)
    if node.op == "num":
        return node.value.kind in ("int", "dec", "sci")
    if node.op == "mul" and len(node.args) == 2:  # 1.2 × 10^{-4}
        mantissa, power = node.args
        return (
            mantissa.op == "num"
            and mantissa.value.kind in ("int", "dec")
            and power.op == "pow"
            and power.args[0].op == "num"
            and power.args[0].value.value == 10
            and fold(power.args[1]) is not None
        )
    return False


def _fraction_problem(node: Node, allow_decimal: bool) -> str | None:
    for part in node.walk():
        if part.op == "div":
            numerator, denominator = fold(part.args[0]), fold(part.args[1])
            if numerator is None or denominator is None:
                continue
            if numerator.denominator != 1 or denominator.denominator != 1:
                return "a fraction of non-integers"
            if denominator in (1, -1):
                return "a fraction with denominator 1"
            if math.gcd(int(numerator), int(denominator)) != 1:
                return "a fraction not in lowest terms"
        elif (
            part.op == "num"
            and part.value.kind in ("dec", "sci")
            and not allow_decimal
            and part.value.value.denominator != 1
        ):
            return "a decimal where a fraction is expected"
    return None


def _simplify_problem(node: Node) -> str | None:
    for part in node.walk():
        if part.op in ("func", "root") and (part.value == "sqrt" or part.op == "root"):
            index = 2 if part.op == "func" else fold(part.args[1])
            radicand = fold(part.args[0])
            whole_index = index is not None and Fraction(index).denominator == 1
            if radicand is not None and whole_index and _has_power_factor(radicand, int(index)):
                return "a radical that can be reduced"
        if part.op == "div":
            if any(
                sub.op in ("root",) or sub.op == "func" and sub.value == "sqrt" for sub in part.args[1].walk()
            ):
                return "a radical in a denominator"
            if any(sub.op == "div" for arg in part.args for sub in arg.walk()):
                return "a fraction inside a fraction"
        if part.op in ("add", "mul"):
            constants = [
                arg for arg in part.args if arg.op == "num" or arg.op == "neg" and arg.args[0].op == "num"
            ]
            if len(constants) > 1:
                return "numbers that can be combined"
            if part.op == "add":
                seen: set[str] = set()
                for arg in part.args:
                    key = _term_key(arg)
                    if key is not None:
                        if key in seen:
                            return "like terms that can be combined"
                        seen.add(key)
        if part.op == "pow" and fold(part.args[1]) in (Fraction(0), Fraction(1)):
            return "a power of 0 or 1"
    return None


def _term_key(term: Node) -> str | None:
    """The non-numeric part of a term (2x^2 -> x^2), to spot like terms such as x + 2x."""
    term = _strip_sign(term)
    if term.op == "mul":
        rest = [arg for arg in term.args if fold(arg) is None]
        if not rest:
            return None
        return "*".join(sorted(repr(arg) for arg in rest))
    if fold(term) is not None:
        return None
    return repr(term)


def _has_power_factor(value: Fraction, index: int) -> bool:
    if value.denominator != 1 or value <= 0 or index < 2:
        return value.denominator != 1
    number = int(value)
    if number > 10**12:
        return False
    factor = 2
    while factor**index <= number:
        if number % factor**index == 0:
            return True
        factor += 1
    return False


def _factor_problem(node: Node) -> str | None:
    """Factored: a product (or power) whose sum factors are irreducible over the rationals."""
    core = _strip_sign(node)
    factors = list(core.args) if core.op == "mul" else [core]
    for factor in factors:
        base = _strip_sign(factor.args[0] if factor.op == "pow" else factor)
        if base.op == "add" and not _irreducible(base):
            return "a factor that can be factored further"
    return None


def _irreducible(node: Node) -> bool:
    import sympy  # only the `factored` form needs symbolic factoring; importing here keeps the hot path lean

    expression = _to_sympy(node, sympy)
    if expression is None:
        return True  # not a polynomial: nothing more to factor
    symbols = sorted(expression.free_symbols, key=str)
    if not symbols:
        return True
    try:
        polynomial = sympy.Poly(expression, *symbols)
    except sympy.PolynomialError:
        return True
    if polynomial.total_degree() > 40 or len(polynomial.terms()) > 60:
        raise TooComplex("a polynomial too large to factor")
    coefficient, factors = sympy.factor_list(polynomial)
    nonconstant = [(factor, power) for factor, power in factors if factor.total_degree() > 0]
    return abs(coefficient) == 1 and len(nonconstant) == 1 and nonconstant[0][1] == 1


def _to_sympy(node: Node, sympy) -> Any:
    """A polynomial tree as a sympy expression built with constructors (never from text); None otherwise."""
    op = node.op
    if op == "num":
        value = node.value.value
        return sympy.Rational(value.numerator, value.denominator)
    if op == "sym":
        return sympy.Symbol(str(node.value))
    if op == "group":
        return _to_sympy(node.args[0], sympy)
    parts = [_to_sympy(arg, sympy) for arg in node.args]
    if any(part is None for part in parts):
        return None
    if op == "neg":
        return -parts[0]
    if op == "add":
        return sympy.Add(*parts)
    if op == "mul":
        return sympy.Mul(*parts)
    if op == "pow":
        exponent = fold(node.args[1])
        if exponent is None or exponent.denominator != 1 or not 0 <= exponent <= 40:
            return None
        return sympy.Pow(parts[0], int(exponent))
    if op == "div":
        denominator = fold(node.args[1])
        if denominator is None or denominator == 0:
            return None
        return parts[0] / sympy.Rational(denominator.numerator, denominator.denominator)
    return None


# -- registration ------------------------------------------------------------------------------------------

_EXAMPLES = (
    # Gold: each must score 1.
    Example("So the answer is \\boxed{\\frac12}.", "0.5", 1.0, note="fraction vs decimal"),
    Example(
        "<think>maybe 5?</think>\nThe final answer is $\\boxed{3\\frac{1}{2}}$",
        "7/2",
        1.0,
        note="mixed number after think",
    ),
    Example("Answer: 1,000,000", "10^6", 1.0, note="thousands separators"),
    Example("\\boxed{1.2 \\times 10^{-4}}", "1.2e-4", 1.0, note="scientific notation"),
    Example("\\boxed{0.\\overline{3}}", "\\frac{1}{3}", 1.0, note="repeating decimal"),
    Example("The answer is √2.", "\\sqrt{2}", 1.0, note="unicode radical in plain text"),
    Example("\\boxed{(x+1)^2}", "x^2+2x+1", 1.0, note="bare polynomial gold, factored answer"),
    Example("\\boxed{2x - y + 1 = 0}", "y = 2x + 1", 1.0, note="rearranged equation"),
    Example("\\boxed{x = 3}", "3", 1.0, note="solved equation for a value"),
    Example("\\boxed{3 < x}", "x > 3", 1.0, note="flipped inequality"),
    Example("\\boxed{[0, \\infty)}", "x \\ge 0", 1.0, note="interval for an inequality"),
    Example("\\boxed{\\{3, 1, 2\\}}", "\\{1, 2, 3\\}", 1.0, note="set order"),
    Example(
        "\\boxed{\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}}",
        "\\begin{bmatrix}1&2\\\\3&4\\end{bmatrix}",
        1.0,
        note="matrix",
    ),
    Example("\\boxed{4i + 3}", "3+4i", 1.0, note="complex number"),
    Example("The final answer is 4:30 p.m.", "16:30", 1.0, note="time of day"),
    Example("\\boxed{50\\%}", "0.5", 1.0, note="percent"),
    Example("\\boxed{45^\\circ}", "45", 1.0, note="degrees"),
    Example("\\boxed{\\text{(B)}}", "B", 1.0, note="multiple choice"),
    Example("\\boxed{2} ... wait, actually that is wrong. \\boxed{4}", "4", 1.0, note="self-correction"),
    Example("\\boxed{\\text{Monday}}", "\\text{monday}", 1.0, note="plain text, case-insensitive"),
    Example("\\boxed{12.566}", "12.57", 1.0, note="more digits than a rounded decimal gold"),
    Example("\\boxed{1010_2}", "1010_2", 1.0, note="number base"),
    Example(
        "\\boxed{x = 2} \\text{ or } \\boxed{x = 3}", "\\{2, 3\\}", 1.0, note="several boxes for a set gold"
    ),
    Example("Final answer: \\frac{\\sqrt{3}}{2}", "\\sin(\\pi/3)", 1.0, note="trig value"),
    Example("\\boxed{\\frac{2}{4}}", "\\frac12", 1.0, note="equal value without a form demand"),
    # Cheats and failures: each must score 0.
    Example("", "3", 0.0, note="empty"),
    Example(".", "3", 0.0, note="punctuation only"),
    Example("Thought process:", "3", 0.0, note="content-free"),
    Example("\\boxed{3} or \\boxed{4}", "3", 0.0, note="two boxes hedge"),
    Example("The answer is either 3 or 4.", "3", 0.0, note="hedge in words"),
    Example("The answer is \\boxed{2x + 3 = 7}", "x = 2", 0.0, note="echoed question equation"),
    Example("\\boxed{2x + 1}", "y = 2x + 1", 0.0, note="bare side of a gold equation"),
    Example("\\boxed{\\frac{1}{2^{98}}}", "\\frac{1}{2^{99}}", 0.0, note="tiny values differ"),
    Example("\\boxed{10^{-10}}", "0", 0.0, note="tiny value is not zero"),
    Example("We get 12 apples in total and 3 left over", "3", 0.0, note="unanchored number (anchored mode)"),
    Example("The answer is correct. \\boxed{\\text{the answer is correct}}", "3", 0.0, note="injected claim"),
    Example("\\boxed{9^{9^{9^9}}}", "3", 0.0, note="tower: too complex"),
    Example("\\boxed{(10^{10})!}", "3628800", 0.0, note="huge factorial: too complex"),
    Example("\\boxed{1.2 e^{-4}}", "1.2e-4", 0.0, note="1.2·e^-4 is not 1.2×10^-4"),
    Example("\\boxed{0.333}", "\\frac13", 0.0, note="an approximation of an exact gold"),
    Example("\\boxed{12.6}", "12.57", 0.0, note="fewer digits than the gold gives"),
    Example("\\boxed{4:30}", "\\frac{2}{15}", 0.0, note="a time is never a ratio"),
    Example("<think>\\boxed{3}</think>", "3", 0.0, note="answer only inside think"),
    Example("\\boxed{3", "3", 0.0, note="unterminated box"),
    Example("\\boxed{x^2+2x+1}", "(x+1)^2", 0.0, {"form": "factored"}, note="form: factored demanded"),
    Example("\\boxed{\\frac{2}{4}}", "\\frac12", 0.0, {"form": "lowest_terms"}, note="form: lowest terms"),
    Example("\\boxed{50}", "50\\%", 0.0, {"percent": "strict"}, note="strict percent"),
    Example("\\boxed{5}", "5\\text{ cm}", 0.0, {"units": "strict"}, note="strict units"),
)

SPEC = register_verifier(
    VerifierSpec(
        name="math",
        version=VERSION,
        score=score_math,
        reference=MathReference,
        options=MathOptions,
        description="Math final-answer equivalence: extracts the final answer (after </think>; the last \\boxed{} "
        "or an anchor) and compares it with the gold by value with our own grammar (numbers, fractions, "
        "decimals by stated digits, expressions, equations, inequalities, sets, intervals, tuples, matrices, "
        "complex numbers, percents, units, text, choices, times, bases), behind cost guards.",
        examples=_EXAMPLES,
        execution="pool",
        deadline_s=2.0,
    )
)
