"""\\sum and \\prod: written out when the limits are numbers, compared at whole numbers when a limit is a variable."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from proctor.verifiers.math.verifier import MathReference
from tests.math_helpers import boxed_reward as reward


@pytest.mark.parametrize(
    ("response", "gold", "expected"),
    [
        ("385", "\\sum_{k=1}^{10} k^2", 1),
        ("386", "\\sum_{k=1}^{10} k^2", 0),
        ("70", "\\sum_{k=1}^{5}(3 k+5)", 1),
        ("386", "\\sum_{k=1}^{10} k^2 + 1", 1),  # the body ends at the + of its level
        ("24", "\\prod_{i=1}^{4} i", 1),  # i is the index here, not the imaginary unit
        ("0", "\\sum_{k=5}^{1} k", 1),  # an empty sum
        ("\\frac{n(n+1)}{2}", "\\sum_{k=1}^{n} k", 1),
        ("\\frac{n(n-1)}{2}", "\\sum_{k=1}^{n} k", 0),
        ("n^2", "\\sum_{k=1}^{n} (2k-1)", 1),
        ("2^n", "\\sum_{k=0}^{n}\\binom{n}{k}", 1),
        ("\\frac{x^n-1}{x-1}", "\\sum_{k=0}^{n-1} x^k", 1),
        ("\\sum_{j=1}^{n} j", "\\sum_{k=1}^{n} k", 1),
        # an answer that is still a series has not evaluated it: the question restated
        ("\\sum_{k=1}^{n} k", "\\frac{n(n+1)}{2}", 0),
        ("\\sum_{k=1}^{10} k^2", "385", 0),
    ],
)
def test_series(response: str, gold: str, expected: int) -> None:
    assert reward(response, gold) == expected


@pytest.mark.parametrize(
    "gold",
    [
        "\\sum_{n=0}^{\\infty}(n+1) x^{n}",  # infinite: no value to compare at a point
        "\\sum_{k=1}^{100000} k",  # past MAX_SERIES_TERMS
        "\\sum k",  # no limits
        "\\sum_{k} k^2",
    ],
)
def test_series_without_a_comparable_value_are_refused(gold: str) -> None:
    with pytest.raises(ValidationError):
        MathReference(answer=gold)


def _matrix(a: int, b: int, c: int, d: int) -> str:
    return f"\\begin{{pmatrix}}{a}&{b}\\\\{c}&{d}\\end{{pmatrix}}"


@pytest.mark.parametrize(
    ("response", "gold", "expected"),
    [
        (_matrix(1, 2, 3, 4) + "+" + _matrix(1, 0, 0, 1), _matrix(2, 2, 3, 5), 1),
        (_matrix(1, 2, 0, 1) + _matrix(1, 0, 3, 1), _matrix(7, 2, 3, 1), 1),  # a product, row by column
        (_matrix(1, 2, 0, 1) + _matrix(1, 0, 3, 1), _matrix(1, 2, 3, 1), 0),  # not cell by cell
        ("2" + _matrix(1, 2, 3, 4), _matrix(2, 4, 6, 8), 1),
        (_matrix(1, 2, 3, 4) + "^T", _matrix(1, 3, 2, 4), 1),
        (_matrix(1, 1, 0, 1) + "^2", _matrix(1, 2, 0, 1), 1),
        ("-" + _matrix(1, 2, 3, 4), _matrix(-1, -2, -3, -4), 1),
        (_matrix(1, 2, 3, 4) + "+1", _matrix(2, 3, 4, 5), 0),  # a number added to a matrix is no matrix
    ],
)
def test_matrix_arithmetic(response: str, gold: str, expected: int) -> None:
    assert reward(response, gold) == expected


def test_a_relation_with_its_value_missing_is_a_damaged_gold() -> None:
    with pytest.raises(ValidationError):
        MathReference(answer="x = ")
