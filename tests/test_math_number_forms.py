"""Number formatting: thousands separators of every kind, and the decimal-comma rule."""

from __future__ import annotations

import pytest

from proctor.verifiers.math.verifier import MathReference
from tests.math_helpers import boxed_reward as reward


@pytest.mark.parametrize(
    ("response", "gold"),
    [
        ("1 000", "1000"),
        ("10 455", "10,455"),
        ("11,\\!111,\\!100", "11111100"),
        ("32{,}349", "32349"),
        ("1\\,000", "1 000"),
        (
            "1000,99",
            "1000.99",
        ),  # a decimal comma: the first group has four digits, so it is no thousands group
        ("1000.99", "1000,99"),
        ("0,111", "0.111"),  # a leading 0 starts no thousands group
        ("-1,5", "-1.5"),
        ("2,74", "2,74 $"),
        ("3,5 \\text{ cm}", "3.5"),
        ("1\\,000,99", "1000.99"),
    ],
)
def test_the_same_number_written_another_way_matches(response: str, gold: str) -> None:
    assert reward(response, gold) == 1.0


@pytest.mark.parametrize(
    ("response", "gold"),
    [
        ("1,234", "1.234"),  # three digits after a 1-3 digit group: thousands, never a decimal comma
        ("1.234", "1,234"),
        ("(2,74)", "2.74"),  # brackets make a pair
        ("\\{2,74\\}", "2.74"),  # and braces a set
        ("2, 74", "2.74"),  # a blank after the comma separates items
        ("2,74,5", "2.745"),
        ("1,500", "1.5"),
        ("2,75", "2.74"),
        ("3.2", "(3,2)"),  # a single number never passes for a pair
        ("3.2", "3, 2"),
    ],
)
def test_a_tuple_or_a_grouping_never_passes_as_a_decimal(response: str, gold: str) -> None:
    assert reward(response, gold) == 0.0


def test_a_two_number_list_is_still_a_list_against_a_list() -> None:
    assert reward("5,2", "2, 5") == 1.0  # the list reading: the decimal reading is only for a single number
    assert reward("2, 5", "5,2") == 1.0


@pytest.mark.parametrize(
    ("response", "gold", "expected"),
    [
        # a long decimal stands for an exact gold when it is the gold rounded or cut off at its last digit
        ("0.0833333333333333", "\\frac1{12}", 1),
        ("0.666667", "\\frac23", 1),
        ("0.666666", "\\frac23", 1),
        ("-0.666667", "-\\frac23", 1),
        ("0.577350", "\\frac{\\sqrt3}{3}", 1),
        ("0.666668", "\\frac23", 0),  # neither rounded nor cut off
        ("0.08333", "\\frac1{12}", 0),  # five significant digits: an approximation
        ("0.577351", "\\frac{\\sqrt3}{3}", 0),
        # an exact answer glossed with its decimal: the exact side is the answer
        ("\\frac{\\sqrt3}{3} \\approx 0.577", "\\frac{1}{\\sqrt3}", 1),
        ("x = \\frac13 \\approx 0.333", "\\frac13", 1),
        ("\\frac{1}{2} \\approx 0.577", "\\frac{1}{\\sqrt3}", 0),  # a wrong exact value with a gloss
        ("x = \\frac13 \\approx 1.3", "\\frac13", 0),  # a gloss that contradicts it: the last side stands
        ("\\approx 0.577", "\\frac{1}{\\sqrt3}", 0),  # only the approximation
        ("8.24 \\text{ mph}", "\\approx 8.24 \\text{ mph}", 1),  # a gold that says it is rounded
        # angles: degrees against radians when the gold is in π; a degree-marked π is a tiny angle
        ("30^\\circ", "\\frac{\\pi}{6}", 1),
        ("60 \\text{ degrees}", "\\frac{\\pi}{3}", 1),
        ("\\frac{2\\pi}{3} \\text{ rad}", "120^\\circ", 1),
        ("30", "\\frac{\\pi}{6}", 0),
        ("\\frac{\\pi}{6}^\\circ", "\\frac{\\pi}{6}", 0),
        ("57.2958^\\circ", "1", 0),
        ("100^\\circ", "100^\\circ \\text{C}", 1),
        # units stay strict between different units; a percent is not a currency
        ("5 \\text{ m}", "5 \\text{ cm}", 0),
        ("5\\%", "\\$5", 0),
        ("5", "5 \\text{ cm}", 1),
    ],
)
def test_long_decimals_glosses_angles_and_units(response: str, gold: str, expected: int) -> None:
    assert reward(response, gold) == expected


@pytest.mark.parametrize(
    ("response", "gold", "expected"),
    [
        # a one-letter "unit" the expression goes on after is a variable (public golds refused before)
        ("\\frac{3m-2}{2}", "\\frac{3 m}{2}-1", 1),
        ("\\frac{1}{4 m}", "\\frac{1}{4m}", 1),
        ("3m + 1", "3 m + 1", 1),
        ("\\frac{1}{L C s^2+R C s+1}", "\\frac{1}{L C s^{2}+R C s+1}", 1),
        ("\\frac{1}{L C s^2+R C s+2}", "\\frac{1}{L C s^{2}+R C s+1}", 0),
        ("10 \\text{ m/s}", "10 m/s", 1),
        ("5 \\text{ m}^2", "5 m^2", 1),
        # accents are variables of their own
        ("\\bar{x}", "\\bar{x}", 1),
        ("x", "\\bar{x}", 0),
        ("\\vec{v}+\\vec{w}", "\\vec{w}+\\vec{v}", 1),
    ],
)
def test_letters_and_accents(response: str, gold: str, expected: int) -> None:
    assert reward(response, gold) == expected


@pytest.mark.parametrize(
    ("response", "gold", "expected"),
    [
        ("11,\\! 111,\\! 111,\\! 100", "11111111100", 1),  # stray blanks around a group's separator
        ("14 {, }916", "14916", 1),
        ("1, 234", "1234", 0),  # a comma and a blank separate items
        ("2\\sqrt6, -2\\sqrt6", "\\pm 2 \\sqrt{6}", 1),  # ± inside an expression: both values
        ("2\\sqrt6", "\\pm 2 \\sqrt{6}", 0),
        ("\\frac12, \\frac{-1+\\sqrt{13}}{4}, \\frac{-1-\\sqrt{13}}{4}", "x = \\frac{1}{2}, x = \\frac{-1 \\pm \\sqrt{13}}{4}", 1),
        ("\\frac12, \\frac{-1+\\sqrt{13}}{4}", "x = \\frac{1}{2}, x = \\frac{-1 \\pm \\sqrt{13}}{4}", 0),
        ("y=\\sqrt3 x, y=-\\sqrt3 x", "y=\\pm\\sqrt{3}x", 1),
        ("\\pm 3", "3", 0),  # two values for one: a hedge
        ("i, -i, 2\\sqrt2, -2\\sqrt2", "\\pm i, \\pm 2 \\sqrt{2}", 1),
    ],
)  # fmt: skip
def test_loose_groups_and_plus_minus_inside_expressions(response: str, gold: str, expected: int) -> None:
    assert reward(response, gold) == expected


def test_too_many_plus_minus_signs_are_refused_not_expanded() -> None:
    with pytest.raises(ValueError, match="cannot be understood"):
        MathReference(answer="\\frac{1 \\pm 2 \\pm 3 \\pm 4 \\pm 5}{2}")
