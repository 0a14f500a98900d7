"""`puzzle.n_queens`: complete an N-queens board from a few given queens; any valid completion scores 1."""

from __future__ import annotations

import random

from pydantic import Field, model_validator

from proctor.environments.puzzles.answer import Checked
from proctor.environments.puzzles.base import (
    Puzzle,
    PuzzleConfig,
    PuzzleFamily,
    PuzzleReference,
    register_family,
)

MAX_N = 20


class NQueensConfig(PuzzleConfig):
    """Board sizes and how many queens are given."""

    min_n: int = Field(default=10, ge=4, le=MAX_N)
    max_n: int = Field(default=12, ge=4, le=MAX_N)
    min_givens: int = Field(default=3, ge=0, le=MAX_N)
    max_givens: int = Field(default=5, ge=0, le=MAX_N)


class NQueensReference(PuzzleReference):
    """Board size and the given queens as (row, column), 1-based, one per listed row."""

    n: int = Field(ge=4, le=MAX_N)
    givens: list[tuple[int, int]] = Field(max_length=MAX_N)

    @model_validator(mode="after")
    def _inside(self) -> NQueensReference:
        for row, column in self.givens:
            if not (1 <= row <= self.n and 1 <= column <= self.n):
                raise ValueError("givens must lie on the board")
        return self


def random_solution(rng: random.Random, n: int) -> list[int]:
    """A random N-queens solution (column per row, 0-based) by randomized backtracking."""
    columns: list[int] = []
    choices: list[list[int]] = []
    used, diag, anti = 0, 0, 0
    while len(columns) < n:
        row = len(columns)
        if len(choices) == row:
            options = [c for c in range(n) if not (used >> c) & 1]
            rng.shuffle(options)
            choices.append(options)
        placed = False
        while choices[row]:
            column = choices[row].pop()
            if not (diag >> (row + column)) & 1 and not (anti >> (row - column + n)) & 1:
                columns.append(column)
                used |= 1 << column
                diag |= 1 << (row + column)
                anti |= 1 << (row - column + n)
                placed = True
                break
        if not placed:
            choices.pop()
            column = columns.pop()
            row -= 1
            used &= ~(1 << column)
            diag &= ~(1 << (row + column))
            anti &= ~(1 << (row - column + n))
    return columns


def parse_columns(answer: str, n: int) -> list[int] | None:
    """`c1,c2,...,cN` (1-based columns, one per row) as a list, or None when it has another shape."""
    parts = [part.strip() for part in answer.replace(" ", ",").split(",") if part.strip()]
    if len(parts) != n or not all(part.isascii() and part.isdigit() and len(part) <= 3 for part in parts):
        return None
    return [int(part) for part in parts]


class NQueens(PuzzleFamily[NQueensConfig, NQueensReference]):
    """Place N non-attacking queens, keeping the given ones."""

    name = "n_queens"
    version = "1"
    description = "Complete an N-queens placement from given queens; any valid completion scores 1."
    Config = NQueensConfig
    Reference = NQueensReference
    levels = {
        "easy": {"min_n": 6, "max_n": 8, "min_givens": 2, "max_givens": 3},
        "medium": {"min_n": 10, "max_n": 12, "min_givens": 3, "max_givens": 5},
        "hard": {"min_n": 13, "max_n": 16, "min_givens": 1, "max_givens": 3},
    }
    max_answer_chars = 200

    def generate(self, rng: random.Random, config: NQueensConfig) -> Puzzle[NQueensReference]:
        """A random solution, a few of whose queens are given."""
        n = rng.randint(config.min_n, max(config.min_n, config.max_n))
        solution = random_solution(rng, n)
        k = min(n, rng.randint(config.min_givens, max(config.min_givens, config.max_givens)))
        rows = sorted(rng.sample(range(n), k))
        givens = [(row + 1, solution[row] + 1) for row in rows]
        reference = NQueensReference(n=n, givens=givens)
        listed = "; ".join(f"row {r}, column {c}" for r, c in givens) or "none"
        question = (
            f"Place {n} queens on a {n}x{n} chessboard so that no two attack each other (no two share a "
            f"row, a column or a diagonal). Queens are already placed at: {listed}; keep them.\n"
            f"Answer with the column (1 to {n}) of the queen in each row, rows 1 to {n} in order, separated "
            "by commas, e.g. 2,4,1,3 for a 4x4 board."
        )
        gold = ",".join(str(column + 1) for column in solution)
        return Puzzle(question, reference, gold, {"n": n, "givens": k})

    def check(self, answer: str, reference: NQueensReference) -> Checked:
        """Valid when every row has one queen, no two attack, and the given queens are kept."""
        columns = parse_columns(answer, reference.n)
        if columns is None:
            return Checked.malformed("malformed", expected=f"{reference.n} comma-separated columns")
        if any(not 1 <= column <= reference.n for column in columns):
            return Checked.wrong("off_board")
        for row, column in reference.givens:
            if columns[row - 1] != column:
                return Checked.wrong("given_moved", row=row)
        if len(set(columns)) != reference.n:
            return Checked.wrong("same_column")
        if (
            len({row + column for row, column in enumerate(columns)}) != reference.n
            or len({row - column for row, column in enumerate(columns)}) != reference.n
        ):
            return Checked.wrong("same_diagonal")
        return Checked.right()

    def random_answer(self, rng: random.Random, reference: NQueensReference) -> str:
        """N random columns."""
        return ",".join(str(rng.randint(1, reference.n)) for _ in range(reference.n))


register_family(NQueens)
