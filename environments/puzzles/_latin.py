"""Latin-square helpers shared by futoshiki and kenken: a counting solver, answer parsing, rule checks."""

from __future__ import annotations

import random
from collections.abc import Callable

_DIGITS = {n: frozenset("123456789"[:n]) for n in range(1, 10)}
SEPARATORS = str.maketrans("", "", " \t\r\n,|;")

OkFn = Callable[[list[int], int, int], bool]
"""(grid, cell, value) -> whether placing value at cell can still satisfy the family's own constraints."""


def solve_latin(
    n: int, cells: list[int], ok: OkFn | None = None, limit: int = 2, rng: random.Random | None = None
) -> list[list[int]]:
    """Up to `limit` Latin squares extending `cells` (0 = blank) that `ok` accepts; MRV backtracking."""
    grid = list(cells)
    full = (1 << (n + 1)) - 2
    rows = [0] * n
    cols = [0] * n
    for cell, value in enumerate(grid):
        if value:
            rows[cell // n] |= 1 << value
            cols[cell % n] |= 1 << value
    solutions: list[list[int]] = []

    def search() -> None:
        # Most-constrained cell first, counting only values the family's constraints still allow, so a
        # dead end (a cell with no value) is found at once.
        best, best_values = -1, list(range(n + 1))
        for cell in range(n * n):
            if grid[cell] == 0:
                mask = full & ~(rows[cell // n] | cols[cell % n])
                values = [v for v in range(1, n + 1) if mask >> v & 1]
                if ok is not None:
                    values = [v for v in values if ok(grid, cell, v)]
                if len(values) < len(best_values):
                    best, best_values = cell, values
                    if len(values) <= 1:
                        break
        if best < 0:
            solutions.append(list(grid))
            return
        values = best_values
        if rng is not None:
            rng.shuffle(values)
        r, c = divmod(best, n)
        for value in values:
            grid[best] = value
            rows[r] |= 1 << value
            cols[c] |= 1 << value
            search()
            grid[best] = 0
            rows[r] &= ~(1 << value)
            cols[c] &= ~(1 << value)
            if len(solutions) >= limit:
                return

    search()
    return solutions


def parse_square(answer: str, n: int) -> list[int] | None:
    """n*n digits 1..n (whitespace, commas, bars ignored) or None when the answer has another shape."""
    digits = answer.translate(SEPARATORS)
    if len(digits) != n * n or not set(digits) <= _DIGITS[n]:
        return None
    return [int(d) for d in digits]


def is_latin(cells: list[int], n: int) -> bool:
    """Every row and column holds 1..n once."""
    for i in range(n):
        if len(set(cells[i * n : (i + 1) * n])) != n or len({cells[r * n + i] for r in range(n)}) != n:
            return False
    return True


def render(cells: list[int], n: int) -> list[str]:
    """Rows of digits, '.' for a blank."""
    return ["".join(str(v) if v else "." for v in cells[r * n : (r + 1) * n]) for r in range(n)]


def cell_name(cell: int, n: int) -> str:
    """R<row>C<col>, 1-based."""
    return f"R{cell // n + 1}C{cell % n + 1}"
