"""Number formatting: thousands separators of every kind, and the decimal-comma rule."""

from __future__ import annotations

import pytest

from proctor.verifiers.math.verifier import MathOptions, MathReference, score_math


def reward(response: str, gold: str) -> float:
    """The math reward of a boxed response against a gold."""
    return score_math(f"\\boxed{{{response}}}", MathReference(answer=gold), MathOptions()).reward


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
