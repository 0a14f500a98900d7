"""The unbiased pass@k estimator of the Codex paper (Chen et al., 2021), computed stably."""

from __future__ import annotations

from collections.abc import Iterable


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k samples drawn from n (c of them correct) is correct.

    Equals 1 - C(n-c, k) / C(n, k); the ratio is taken as a product of k terms so that large n never
    overflows and never loses precision to huge binomials.
    """
    if k < 1 or n < 1:
        raise ValueError(f"pass@k needs n >= 1 and k >= 1 (got n={n}, k={k})")
    if k > n:
        raise ValueError(f"pass@{k} is undefined for a group of only {n} samples")
    if not 0 <= c <= n:
        raise ValueError(f"correct count c={c} must lie in [0, n={n}]")
    if n - c < k:
        return 1.0  # every draw of k samples contains a correct one
    # C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (1 - k / i)
    ratio = 1.0
    for i in range(n - c + 1, n + 1):
        ratio *= 1.0 - k / i
    return 1.0 - ratio


def mean_pass_at_k(groups: Iterable[tuple[int, int]], k: int) -> tuple[float | None, int]:
    """Mean pass@k over (n, c) groups that have at least k samples, and how many groups counted."""
    values = [pass_at_k(n, c, k) for n, c in groups if n >= k]
    if not values:
        return None, 0
    return sum(values) / len(values), len(values)
