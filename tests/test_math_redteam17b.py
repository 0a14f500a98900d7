"""Red team 17b: the math verifier's newest leniencies (series, matrix arithmetic, ±, primes, \\equiv, bracket
grouping, the 'inequality:interval' gold repair) attacked as a reward-hacking policy and as a user.

Confirmed findings are tests asserting the correct verdict (each failed when written and passes since its fix;
one stays xfail(strict=True): a documented limit of the series comparison); the ..._held tests are attacks
that held. Round 1 (tests/test_math_redteam17.py) is not repeated here.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from proctor.verifiers.math.verifier import MathOptions, MathReference, score_math


def reward(response: str, gold: str) -> float:
    """The math reward of a boxed response against a gold."""
    return score_math(f"\\boxed{{{response}}}", MathReference(answer=gold), MathOptions()).reward


def _m(*rows: tuple[object, ...]) -> str:
    return "\\begin{pmatrix}" + "\\\\".join("&".join(str(c) for c in row) for row in rows) + "\\end{pmatrix}"


# -- B1 (cost): MAX_SERIES_TERMS caps each \sum/\prod, not their product: nested sums write out 1000 x 1000
# terms (\sum_{k=1}^{1000}\sum_{j=1}^{1000} jk took > 20 s in a response, > 20 s as a gold); a product of
# 1000 huge factors builds a multi-million-digit integer (\prod_{k=1}^{1000} 1000^{1000}: > 20 s,
# \prod_{k=1}^{1000} k^k: 19 s). Sizes below are smaller so the test itself stays cheap.

SLOW_SERIES = [
    "\\sum_{k=1}^{250}\\sum_{j=1}^{250} j k",
    "\\sum_{i=1}^{45}\\sum_{j=1}^{45}\\sum_{k=1}^{45} i+j+k",
    "\\prod_{k=1}^{1000} 10^{600}",
    "\\prod_{k=1}^{700} k^{k}",
]


@pytest.mark.parametrize("response", SLOW_SERIES)
def test_nested_and_huge_series_trip_a_cost_guard(response: str) -> None:
    """The guards bound the work before it is done (a written-out size, a number's digits), so these are a
    fast too_complex; the seconds they took before the fix are in the red team's report, not asserted."""
    verdict = score_math(f"\\boxed{{{response}}}", MathReference(answer="1"), MathOptions())
    assert verdict.reward == 0.0 and str(verdict.details["rule"]).startswith("guard:")


def test_nested_series_gold_is_refused_by_a_cost_guard() -> None:
    with pytest.raises(ValidationError, match="cost guards"):
        MathReference(answer="\\sum_{k=1}^{250}\\sum_{j=1}^{250} j k")


# -- B2 (false positive, low: the policy cannot see the points): a wrong closed form that agrees with the
# series at n = 1, 2, 3, 4, 7, 12 passes.


@pytest.mark.xfail(strict=True, reason="a series with a variable limit is compared only at six whole numbers")
def test_series_point_coincidence_is_wrong() -> None:
    assert reward("\\frac{n(n+1)}{2}+(n-1)(n-2)(n-3)(n-4)(n-7)(n-12)", "\\sum_{k=1}^{n} k") == 0.0


# -- B3 (false positive, pre-existing): a vmatrix is a determinant (a number), scored as the matrix itself.


def test_determinant_is_not_the_matrix() -> None:
    assert reward("\\begin{vmatrix}1&2\\\\3&4\\end{vmatrix}", _m((1, 2), (3, 4))) == 0.0


# -- B4 (lost correct answer): \mp is tied to the \pm before it (upper signs together), but each sign is
# expanded on its own: 1 ± 2 ∓ 3 reads as {6, 0, 2, -4} instead of {0, 2}.


def test_mp_follows_its_pm() -> None:
    assert reward("1 \\pm 2 \\mp 3", "\\{0, 2\\}") == 1.0


# -- B5 (gold repair): 'inequality:interval' takes the interval without checking that the two sides name the
# same set, so a self-contradicting gold is accepted and the interval that contradicts its inequality is
# credited; and the two-sided form 0<x<1:(0,1) is not repaired (its interval is lost).


def test_contradicting_inequality_interval_gold_is_refused() -> None:
    with pytest.raises(ValidationError):
        MathReference(answer="x \\le 1:(1, \\infty)")


def test_two_sided_inequality_interval_gold() -> None:
    assert reward("(0,1)", "0<x<1:(0,1)") == 1.0


# -- B6 (lost correct answers, low): matrix powers other than whole n >= 1 and ^T are not carried out.


@pytest.mark.parametrize(
    ("response", "gold"),
    [
        (_m((1, 2), (3, 4)) + "^{-1}", _m((-2, 1), ("\\frac32", "-\\frac12"))),
        (_m((1, 2), (3, 4)) + "^{0}", _m((1, 0), (0, 1))),
        (_m((1, 2), (3, 4)) + "^{\\top}", _m((1, 3), (2, 4))),
    ],
)
def test_matrix_inverse_identity_top(response: str, gold: str) -> None:
    assert reward(response, gold) == 1.0


# -- B7 (lost correct answers, medium; also 0 at 3d122bf): a chain that restates the series and then states its
# value ("\\sum_{k=1}^{10} k^2 = 385", the common boxed form) scores 0: the "still a series" rule looks at the
# whole chain, not its last side. A wrong value or a false chain must still fail.


@pytest.mark.parametrize(
    ("response", "gold"),
    [
        ("\\sum_{k=1}^{10} k^2 = 385", "385"),
        ("\\prod_{k=1}^{4} k = 24", "24"),
        ("\\sum_{k=1}^{n} k = \\frac{n(n+1)}{2}", "\\frac{n(n+1)}{2}"),
        ("\\sum_{k=1}^{n} k = \\frac{n(n+1)}{2}", "\\sum_{k=1}^{n} k"),
    ],
)
def test_series_equals_value_chain_is_credited(response: str, gold: str) -> None:
    assert reward(response, gold) == 1.0


def test_series_chain_wrong_value_held() -> None:
    assert reward("\\sum_{k=1}^{10} k^2 = 386", "386") == 0.0
    assert reward("\\sum_{k=1}^{3} k = 6 = 7", "7") == 0.0
    assert reward("\\sum_{k=1}^{3} k \\approx 7", "7") == 0.0


# -- attacks that held ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("response", "gold", "expected"),
    [
        ("\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}^{-1}", _m((1, "\\frac12"), ("\\frac13", "\\frac14")), 0.0),
        (_m((1, 2), (3, 4)) + "^2", _m((1, 4), (9, 16)), 0.0),  # not cell by cell
        (_m((0, 1), (1, 0)) + _m((1, 2), (3, 4)), _m((2, 1), (4, 3)), 0.0),  # order kept
        (_m((1, 2), (3, 4)) + "^{n}", _m((1, 2), (3, 4)), 0.0),
        (_m((1, 2), (3, 4)) + "^{T}", _m((1, 2), (3, 4)), 0.0),
        (_m((1, 2), (3, 4)) + " \\pm " + _m((1, 0), (0, 1)), _m((2, 2), (3, 5)), 0.0),
        (_m(("\\pm1", 2), (3, 4)), _m((1, 2), (3, 4)), 0.0),
        (_m((1, 2), (3, 4)) + "=" + _m((1, 0), (0, 1)), _m((1, 0), (0, 1)), 0.0),
        (_m((1, 2)) + "+" + _m((1,), (2,)), _m((2, 4)), 0.0),
        (_m((1, 2), (3, 4)) + "\\cdot" + _m((0, 1), (1, 0)), _m((2, 1), (4, 3)), 1.0),
        ("x" + _m((1, 2), (3, 4)), _m(("x", "2x"), ("3x", "4x")), 1.0),
    ],
)
def test_matrix_attacks_held(response: str, gold: str, expected: float) -> None:
    assert reward(response, gold) == expected


@pytest.mark.parametrize(
    ("response", "gold", "expected"),
    [
        ("\\frac{n(n+1)}{2} + \\sum_{k=1}^{n} 0", "\\frac{n(n+1)}{2}", 0.0),  # still a series
        ("\\frac{n(n+1)}{2}+\\frac{1}{2}(1-(-1)^n)", "\\sum_{k=1}^{n} k", 0.0),
        ("\\frac{k(k+1)}{2}", "\\sum_{k=1}^{n} k", 0.0),  # the index does not leak
        ("\\frac{m(m+1)}{2}", "\\sum_{k=1}^{n} k", 0.0),
        ("\\frac{n(n+1)}{2}", "\\sum_{k=2}^{n} k", 0.0),
        ("\\prod_{k=1}^{1000} \\frac{k+1}{k}", "1001", 0.0),
        ("\\lfloor n/2 \\rfloor", "\\sum_{k=1}^{n} \\frac{1+(-1)^k}{2}", 1.0),
        ("n!", "\\prod_{k=1}^{n} k", 1.0),
        ("\\frac{n}{n+1}", "\\sum_{k=1}^{n} \\frac{1}{k(k+1)}", 1.0),
    ],
)
def test_series_attacks_held(response: str, gold: str, expected: float) -> None:
    assert reward(response, gold) == expected


@pytest.mark.parametrize(
    ("response", "gold", "expected"),
    [
        ("y = 2x \\pm 1", "y = 2x + 1", 0.0),
        ("x = 2 \\pm 1", "x = 3", 0.0),
        ("(2 \\pm 1, 5)", "(1, 5)", 0.0),
        ("x \\in [2 \\pm 1, 5]", "[1, 5]", 0.0),
        ("a = 2 \\pm 1, b = 3", "a = 3, b = 3", 0.0),
        ("\\{2 \\pm 1\\}", "\\{3\\}", 0.0),
        ("x > 2 \\pm 1", "x > 3", 0.0),
        ("\\pm 1 \\pm 1 \\pm 1 \\pm 1", "0", 0.0),
        ("x = 2 \\pm 1", "\\{1, 3\\}", 1.0),
    ],
)
def test_pm_attacks_held(response: str, gold: str, expected: float) -> None:
    assert reward(response, gold) == expected


@pytest.mark.parametrize(
    ("response", "gold", "expected"),
    [
        ("y' = 2x", "y = 2x", 0.0),
        ("y = 2x", "y' = 2x", 0.0),
        ("f'(x) = 2x", "f(x) = 2x", 0.0),
        ("f''(x) = 2", "f'(x) = 2", 0.0),
        ("y^{\\prime\\prime} = 3", "y' = 3", 0.0),
        ("x' + 1", "x + 1", 0.0),
        ("3'", "3", 0.0),
        ("A'B' = 5", "AB = 5", 0.0),
        ("\\triangle ABC", "\\triangle ABD", 0.0),
        ("8 \\equiv 3", "3", 0.0),
        ("2[1,3]", "[2,6]", 0.0),
        ("x[1,3]", "[1,3]", 0.0),
        ("[0,1][2,3]", "[0,1]\\cup[2,3]", 0.0),
        ("2./3", "\\frac{1}{3}", 0.0),
        ("y^{\\prime} = 3", "y' = 3", 1.0),
        ("2[x-1]", "2x-2", 1.0),
        ("1./3", "\\frac13", 1.0),
    ],
)
def test_prime_equiv_bracket_attacks_held(response: str, gold: str, expected: float) -> None:
    assert reward(response, gold) == expected


@pytest.mark.parametrize(
    ("response", "gold", "expected"),
    [
        ("3.6 \\approx 4", "4", 0.0),
        ("\\frac{7}{2} \\approx 4", "4", 0.0),
        ("\\sqrt{15} \\approx 4", "4", 0.0),
        ("123457", "\\frac{370370}{3}", 0.0),
        ("100000", "99999.9", 0.0),
        ("x > 1", "x<1:(-\\infty,1)", 0.0),
        ("(-\\infty,1)", "x<1:(-\\infty,1)", 1.0),
    ],
)
def test_approx_decimal_repair_attacks_held(response: str, gold: str, expected: float) -> None:
    assert reward(response, gold) == expected


def test_matrix_power_of_ten_by_ten_is_refused() -> None:
    big = _m(*[tuple((i * 10 + j) % 97 + 1 for j in range(10)) for i in range(10)])
    assert reward(big + "^{1000}", "1") == 0.0
    assert reward("\\sum_{k=1}^{1000} " + big + "^{k}", "1") == 0.0
