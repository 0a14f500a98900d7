"""`puzzle.sudoku`: fill a 4x4, 6x6 or 9x9 sudoku; any fill that respects the givens and the rules scores 1.

The generator proves the puzzle has exactly one solution: it blanks cells of a random full grid, then a
solver counts solutions (up to two); while there are two, one cell where they differ is given back.
"""

from __future__ import annotations

import random
from typing import Literal

from pydantic import Field, model_validator

from proctor.environments.puzzles.answer import Checked
from proctor.environments.puzzles.base import (
    Puzzle,
    PuzzleConfig,
    PuzzleFamily,
    PuzzleReference,
    register_family,
)

BOXES = {4: (2, 2), 6: (2, 3), 9: (3, 3)}
_DIGITS = {n: frozenset("123456789"[:n]) for n in range(1, 10)}
SEPARATORS = str.maketrans("", "", " \t\r\n,|;")


class SudokuConfig(PuzzleConfig):
    """Grid sizes and how many cells are given (before the uniqueness repair adds any)."""

    sizes: list[Literal[4, 6, 9]] = Field(default=[9], min_length=1, max_length=3)
    min_givens_fraction: float = Field(default=0.44, ge=0.1, le=1.0)
    max_givens_fraction: float = Field(default=0.52, ge=0.1, le=1.0)


class SudokuReference(PuzzleReference):
    """The grid as rows of digits, '.' for a blank; box shape follows from the size (4: 2x2, 6: 2x3, 9: 3x3)."""

    grid: list[str] = Field(min_length=4, max_length=9)

    @model_validator(mode="after")
    def _shape(self) -> SudokuReference:
        n = len(self.grid)
        if n not in BOXES:
            raise ValueError(f"the grid must have {sorted(BOXES)} rows")
        allowed = set(".123456789"[: n + 1])
        for row in self.grid:
            if len(row) != n or not set(row) <= allowed:
                raise ValueError(f"each row must have {n} characters among '.' and 1..{n}")
        return self


def _units(n: int) -> list[list[int]]:
    rows, cols = BOXES[n]
    units = [[r * n + c for c in range(n)] for r in range(n)]
    units += [[r * n + c for r in range(n)] for c in range(n)]
    for br in range(0, n, rows):
        for bc in range(0, n, cols):
            units.append([(br + r) * n + bc + c for r in range(rows) for c in range(cols)])
    return units


UNITS = {n: _units(n) for n in BOXES}


def solve(cells: list[int], n: int, limit: int = 2, rng: random.Random | None = None) -> list[list[int]]:
    """Up to `limit` solutions (0 = blank), by MRV backtracking over bitmask candidates; rng shuffles values."""
    full = (1 << (n + 1)) - 2
    box_rows, box_cols = BOXES[n]
    box_of = [(i // n) // box_rows * (n // box_cols) + (i % n) // box_cols for i in range(n * n)]
    grid = list(cells)
    rows, cols, boxes = [0] * n, [0] * n, [0] * n
    for i, value in enumerate(grid):
        if value:
            rows[i // n] |= 1 << value
            cols[i % n] |= 1 << value
            boxes[box_of[i]] |= 1 << value
    solutions: list[list[int]] = []

    def search() -> None:
        best, best_mask, best_count = -1, 0, n + 1
        for cell in range(n * n):
            if grid[cell] == 0:
                mask = full & ~(rows[cell // n] | cols[cell % n] | boxes[box_of[cell]])
                count = mask.bit_count()
                if count < best_count:
                    best, best_mask, best_count = cell, mask, count
                    if count <= 1:
                        break
        if best < 0:
            solutions.append(list(grid))
            return
        values = [v for v in range(1, n + 1) if best_mask >> v & 1]
        if rng is not None:
            rng.shuffle(values)
        r, c, b = best // n, best % n, box_of[best]
        for value in values:
            bit = 1 << value
            grid[best] = value
            rows[r] |= bit
            cols[c] |= bit
            boxes[b] |= bit
            search()
            rows[r] &= ~bit
            cols[c] &= ~bit
            boxes[b] &= ~bit
            if len(solutions) >= limit:
                break
        grid[best] = 0

    search()
    return solutions


def parse_grid(answer: str, n: int) -> list[int] | None:
    """n*n digits 1..n (whitespace, commas and bars ignored), or None when the answer has another shape."""
    digits = answer.translate(SEPARATORS)
    if len(digits) != n * n or not set(digits) <= _DIGITS[n]:
        return None
    return [int(d) for d in digits]


def render(cells: list[int], n: int) -> list[str]:
    """Rows of digits, '.' for a blank."""
    return ["".join(str(v) if v else "." for v in cells[r * n : (r + 1) * n]) for r in range(n)]


class Sudoku(PuzzleFamily[SudokuConfig, SudokuReference]):
    """Classic sudoku on 4x4, 6x6 and 9x9 grids, with a unique solution."""

    name = "sudoku"
    version = "1"
    description = (
        "Fill the sudoku grid (4x4, 6x6 or 9x9); any fill obeying the rules and the givens scores 1."
    )
    Config = SudokuConfig
    Reference = SudokuReference
    levels = {
        "easy": {"sizes": [4, 6], "min_givens_fraction": 0.45, "max_givens_fraction": 0.55},
        "medium": {"sizes": [9], "min_givens_fraction": 0.44, "max_givens_fraction": 0.52},
        "hard": {"sizes": [9], "min_givens_fraction": 0.30, "max_givens_fraction": 0.36},
    }
    max_answer_chars = 400

    def generate(self, rng: random.Random, config: SudokuConfig) -> Puzzle[SudokuReference]:
        """A random full grid, blanks at random, then givens added back until the solution is unique."""
        n = rng.choice(config.sizes)
        solution = solve([0] * (n * n), n, limit=1, rng=rng)[0]
        low = config.min_givens_fraction
        high = max(low, config.max_givens_fraction)
        givens = round(n * n * rng.uniform(low, high))
        order = list(range(n * n))
        rng.shuffle(order)
        shown = set(order[:givens])
        cells = [solution[i] if i in shown else 0 for i in range(n * n)]
        repairs = 0
        while True:
            found = solve(cells, n, limit=2)
            if len(found) == 1:
                break
            differing = [i for i in range(n * n) if found[0][i] != found[1][i]]
            cell = rng.choice(differing)
            cells[cell] = solution[cell]
            repairs += 1
        reference = SudokuReference(grid=render(cells, n))
        rows, cols = BOXES[n]
        board = "\n".join(reference.grid)
        question = (
            f"Solve this {n}x{n} sudoku: fill every '.' with a digit 1-{n} so that each row, each column and "
            f"each {rows}x{cols} box contains every digit 1-{n} exactly once.\n\n{board}\n\n"
            f"Answer with the completed grid: {n} lines of {n} digits."
        )
        gold = "\n".join(render(solution, n))
        blanks = cells.count(0)
        return Puzzle(question, reference, gold, {"size": n, "blanks": blanks, "repairs": repairs})

    def check(self, answer: str, reference: SudokuReference) -> Checked:
        """Every row, column and box holds 1..n once, and the givens are kept."""
        n = len(reference.grid)
        cells = parse_grid(answer, n)
        if cells is None:
            return Checked.malformed("malformed", expected=f"{n} lines of {n} digits 1-{n}")
        given = "".join(reference.grid)
        for i, char in enumerate(given):
            if char != "." and cells[i] != int(char):
                return Checked.wrong("given_changed", row=i // n + 1, column=i % n + 1)
        for unit in UNITS[n]:
            if len({cells[i] for i in unit}) != n:
                return Checked.wrong("repeated_digit")
        return Checked.right()

    def random_answer(self, rng: random.Random, reference: SudokuReference) -> str:
        """The givens kept, random digits in the blanks."""
        n = len(reference.grid)
        rows = ["".join(c if c != "." else str(rng.randint(1, n)) for c in row) for row in reference.grid]
        return "\n".join(rows)


register_family(Sudoku)
