"""The formula language's sound domain check (`formula.domain_problem`): interval arithmetic over the variables'
ranges, so a formula accepted at request time can never fail at scoring time."""

from __future__ import annotations

import random

import pytest

from proctor.verifiers.formula import Formula, FormulaError, Interval, domain_problem

TOP = 100_000
RANGES = {
    "a": Interval(0.0, 1.0),
    "b": Interval(0.0, 1.0),
    "length": Interval(0.0, float(TOP), integer=True),
    "max_length": Interval(1000.0, 1000.0, integer=True),
    "cache_length": Interval(200.0, 200.0, integer=True),
}


def problem(text: str) -> str | None:
    return domain_problem(Formula(text, set(RANGES)), RANGES)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        # The red team's formula: fine at every probe point, a verifier_error at exactly 7 words.
        ("a / (length - 7)", "a / (length - 7): divides by length - 7, which can be 0"),
        ("a % (length - 3)", "takes a remainder by length - 3"),
        ("1 / a", "divides by a, which can be 0"),
        ("a / b if b > 0 else 0", "divides by b"),  # b can be 5e-324: 1 / b overflows, so this is refused too
        ("log(length)", "log(length): the logarithm's argument can be 0"),
        ("log(a + 1, 1)", "base can be 0, negative or 1"),
        ("sqrt(a - 0.5)", "sqrt(a - 0.5): the square root of a - 0.5, which can be negative"),
        ("(a - 0.5) ** 0.5", "a negative number to a fractional power"),
        ("(a - 0.5) ^ (length / 2)", "a negative number to a fractional power"),
        ("(a - 0.5) ** -1", "0 to a negative power"),
        ("length ** -2", "0 to a negative power"),
        ("2 ** length", "2 ** length: overflows"),
        ("exp(length) * 1e300", "overflows"),
        ("a * 1e400", "not a finite number"),
        ("min(a)", "min takes two or more numbers"),
        ("max(a, b, key=1)", "without keywords"),
        ("sqrt(a, b)", "sqrt takes value"),
        ("sqrt(x=a)", "sqrt takes value"),
        ("clip(a, 0)", "clip needs high"),
        ("round(a, length)", "round's digits must be an integer"),
        ("round(a, a)", "round's digits must be an integer"),
        ("overlong(length, max_length, a)", "max_length and cache_length must be positive"),
        ("cosine_scale(a, length, a)", "max_length must be positive"),
        ("cosine_scale(a, length, 1e-320)", "overflows"),
        ("a and 1 / length", "divides by length"),  # `and` evaluates every operand: no short circuit
        ("a if length > 3 else 1 / (length - 2)", "divides by length - 2"),  # the else branch has length 2
    ],
)
def test_formulas_that_can_fail_somewhere_are_refused_naming_the_sub_expression(text, words):
    found = problem(text)
    assert found is not None and words in found, found


@pytest.mark.parametrize(
    "text",
    [
        "a * b",
        "0.2 * a + 0.8 * b",
        "b if a >= 1 else 0",
        "(2 * a - 1) + overlong(length, max_length, cache_length)",
        "cosine_scale(a, length, max_length)",
        "a * 0.5 ** (length / 100)",
        "1 / length if length > 0 else 0",  # integers: length > 0 means length >= 1
        "1 / length if not length < 1 else 0",
        "a / (length - 7) if length > 7 else 0",
        "a / b if b >= 0.5 else 0",
        "a / (b + 1)",
        "log(length + 1) * a",
        "log(a + 2, base=2)",
        "sqrt(abs(a - 0.5))",
        "(a - 0.5) ** 2 + (length - 500) ** 3",
        "a * 2 ** length / 2 ** (length + 1) if length < 1000 else 0",
        "min(a, b, length) + max(a, b) + clip(a * 3, 0, 1) + floor(a) + ceil(b) + round(a, 2)",
        "exp(length) * 0 + exp(-length)",
        "a % 3 + length % 7",
        "1 / length if 0 < length <= max_length else 0",
    ],
)
def test_formulas_with_a_value_everywhere_are_accepted(text):
    assert problem(text) is None


def test_conservative_refusals_are_the_documented_ones():
    # `length < 7 or length > 7` is false only at 7: the else branch sees length = 7, but an interval cannot
    # hold a hole, so the if branch is checked over the whole range and refused although it never fails there.
    assert problem("a if length < 7 or length > 7 else 1 / (length - 7)") is not None
    assert problem("1 / (length - 7) if length < 7 or length > 7 else a") is not None
    assert problem("1 / (length - 7) if length != 7 else a") is not None
    assert problem("a / (length - 7.5)") is not None  # length is whole, but [-7.5, ...] holds 0
    # Not conservative, in fact: b may be 5e-324 and 1 / b then overflows to inf.
    assert problem("1 / b if b > 0 else 0") is not None


def _random_formula(rng: random.Random, depth: int = 0) -> str:
    leaves = ["a", "b", "length", "max_length", "0", "1", "2", "0.5", "7", "-1", "3.5"]
    if depth > 3 or rng.random() < 0.25:
        return rng.choice(leaves)
    left, right = _random_formula(rng, depth + 1), _random_formula(rng, depth + 1)
    shape = rng.randrange(9)
    if shape == 0:
        return f"({left} {rng.choice(['+', '-', '*', '/', '%', '**'])} {right})"
    if shape == 1:
        return f"{rng.choice(['sqrt', 'log', 'exp', 'abs', 'floor', 'ceil'])}({left})"
    if shape == 2:
        return f"{rng.choice(['min', 'max'])}({left}, {right})"
    if shape == 3:
        return f"({left} if {_random_formula(rng, depth + 2)} {rng.choice(['<', '>', '<=', '>=', '=='])} {right} else {right})"
    if shape == 4:
        return f"({left} if length {rng.choice(['<', '>', '>=', '<='])} {rng.choice(['3', '7', 'max_length'])} else {right})"
    if shape == 5:
        return f"round({left}, {rng.choice(['0', '1', '-1'])})"
    if shape == 6:
        return f"clip({left}, {right}, 1)"
    return f"({left} {rng.choice(['+', '-', '*', '/'])} {right})"


def test_an_accepted_formula_never_fails_at_any_point():
    """Soundness, checked by brute force: every formula the interval check accepts evaluates at every point."""
    rng = random.Random(20250101)
    lengths = list(range(0, 40)) + [999, 1000, 1001, TOP - 1, TOP] + [rng.randrange(TOP) for _ in range(20)]
    rewards = [0.0, 5e-324, 1e-300, 0.25, 0.5, 0.75, 1 - 1e-16, 1.0]
    accepted = 0
    for _ in range(1500):
        text = _random_formula(rng)
        formula = Formula(text, set(RANGES))
        if domain_problem(formula, RANGES) is not None:
            continue
        accepted += 1
        for length in lengths:
            for a in rewards:
                b = rng.choice(rewards)
                point = {"a": a, "b": b, "length": float(length), "max_length": 1000.0, "cache_length": 200.0}
                try:
                    formula.evaluate(point)
                except FormulaError as exc:  # pragma: no cover - a soundness bug
                    pytest.fail(f"{text} was accepted but fails at {point}: {exc}")
    assert accepted > 200  # the check is conservative, not useless
