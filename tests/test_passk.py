"""The unbiased pass@k estimator against the closed form 1 - C(n-c, k) / C(n, k)."""

from __future__ import annotations

from fractions import Fraction
from math import comb

import pytest

from proctor.passk import mean_pass_at_k, pass_at_k


def closed_form(n: int, c: int, k: int) -> Fraction:
    return 1 - Fraction(comb(n - c, k), comb(n, k))


def test_matches_the_closed_form_for_every_small_case():
    for n in range(1, 31):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(float(closed_form(n, c, k)), abs=1e-12), (n, c, k)


@pytest.mark.parametrize(
    ("n", "c", "k"), [(1000, 3, 256), (2048, 1, 1), (2048, 17, 64), (500, 499, 100), (2048, 5, 1024)]
)
def test_is_stable_where_the_binomials_are_huge(n, c, k):
    assert pass_at_k(n, c, k) == pytest.approx(float(closed_form(n, c, k)), rel=1e-9)


def test_binomials_beyond_float_range_still_work():
    with pytest.raises(OverflowError):
        float(comb(2048, 1024))  # what a naive ratio of binomials would have to compute
    assert 0.0 < pass_at_k(2048, 5, 1024) < 1.0


def test_edge_cases():
    assert pass_at_k(10, 0, 1) == 0.0
    assert pass_at_k(10, 0, 10) == 0.0
    assert pass_at_k(10, 10, 1) == 1.0
    assert pass_at_k(10, 10, 10) == 1.0
    assert pass_at_k(10, 3, 8) == 1.0  # fewer wrong samples than draws: a correct one is always drawn
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)
    assert pass_at_k(1, 1, 1) == 1.0


@pytest.mark.parametrize(("n", "c", "k"), [(3, 1, 4), (0, 0, 1), (5, 6, 1), (5, -1, 1), (5, 2, 0)])
def test_rejects_undefined_cases(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def test_mean_counts_only_groups_with_at_least_k_samples():
    groups = [(4, 1), (2, 2), (10, 0)]
    mean, counted = mean_pass_at_k(groups, 3)
    assert counted == 2  # (2, 2) has too few samples for k = 3
    assert mean == pytest.approx((float(closed_form(4, 1, 3)) + 0.0) / 2)
    assert mean_pass_at_k(groups, 1) == (pytest.approx((0.25 + 1.0 + 0.0) / 3), 3)
    assert mean_pass_at_k(groups, 11) == (None, 0)
    assert mean_pass_at_k([], 1) == (None, 0)
