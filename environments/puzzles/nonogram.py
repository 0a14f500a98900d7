"""`puzzle.nonogram`: shade cells so every row's and column's runs match the clues; unique by construction.

The generator draws a random picture and keeps it only when a line-solving and branching solver finds
exactly one grid with its clues. The checker accepts any grid whose runs match every clue.
"""

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

MAX_SIDE = 12
FILLED, EMPTY = "#", "."
_CELL = {"#": 1, "1": 1, "X": 1, "x": 1, "■": 1, "█": 1, ".": 0, "0": 0, "_": 0, "-": 0, "□": 0}
_pattern_cache: dict[tuple[tuple[int, ...], int], list[int]] = {}


class NonogramConfig(PuzzleConfig):
    """Grid size and the share of shaded cells."""

    min_side: int = Field(default=7, ge=3, le=MAX_SIDE)
    max_side: int = Field(default=8, ge=3, le=MAX_SIDE)
    density: float = Field(default=0.55, gt=0, lt=1)


class NonogramReference(PuzzleReference):
    """Run lengths of shaded cells, per row (left to right) and per column (top to bottom)."""

    rows: list[list[int]] = Field(min_length=1, max_length=MAX_SIDE)
    columns: list[list[int]] = Field(min_length=1, max_length=MAX_SIDE)

    @model_validator(mode="after")
    def _fit(self) -> NonogramReference:
        for clues, length in ((self.rows, len(self.columns)), (self.columns, len(self.rows))):
            for clue in clues:
                if any(run < 1 for run in clue) or sum(clue) + len(clue) - 1 > length:
                    raise ValueError("every clue must be runs >= 1 that fit in its line")
        return self


def runs(bits: list[int]) -> list[int]:
    """Lengths of the runs of 1s."""
    found, count = [], 0
    for bit in bits:
        if bit:
            count += 1
        elif count:
            found.append(count)
            count = 0
    if count:
        found.append(count)
    return found


def patterns(clue: tuple[int, ...], length: int) -> list[int]:
    """Every line (bit i = cell i shaded) whose runs are `clue`."""
    key = (clue, length)
    cached = _pattern_cache.get(key)
    if cached is not None:
        return cached
    found: list[int] = []

    def place(index: int, start: int, mask: int) -> None:
        if index == len(clue):
            found.append(mask)
            return
        run = clue[index]
        rest = sum(clue[index + 1 :]) + len(clue) - index - 1
        for position in range(start, length - rest - run + 1):
            place(index + 1, position + run + 1, mask | ((1 << run) - 1) << position)

    place(0, 0, 0)
    _pattern_cache[key] = found
    return found


def _propagate(rows: list[list[int]], cols: list[list[int]]) -> bool:
    """Filter candidates by what every candidate of the crossing lines agrees on; False on a contradiction."""
    height, width = len(rows), len(cols)
    lines, crossing, size = rows, cols, width
    stable = 0
    while stable < 2:
        changed = False
        ones = [0] * len(crossing)
        zeros = [0] * len(crossing)
        for i, candidates in enumerate(lines):
            if not candidates:
                return False
            must, may = -1, 0
            for pattern in candidates:
                must &= pattern
                may |= pattern
            for j in range(size):
                if must >> j & 1:
                    ones[j] |= 1 << i
                elif not may >> j & 1:
                    zeros[j] |= 1 << i
        for j, candidates in enumerate(crossing):
            kept = [p for p in candidates if p & ones[j] == ones[j] and not p & zeros[j]]
            if len(kept) != len(candidates):
                crossing[j] = kept
                changed = True
            if not kept:
                return False
        stable = 0 if changed else stable + 1
        lines, crossing = crossing, lines
        size = height if size == width else width
    return True


def solve(rows: list[list[int]], columns: list[list[int]], limit: int = 2) -> list[list[int]]:
    """Up to `limit` solutions (as row bitmasks) by propagation and branching on the least open line."""
    width, height = len(columns), len(rows)
    solutions: list[list[int]] = []

    def search(row_c: list[list[int]], col_c: list[list[int]]) -> None:
        if not _propagate(row_c, col_c):
            return
        open_rows = [(len(c), i) for i, c in enumerate(row_c) if len(c) > 1]
        if not open_rows:
            grid = [c[0] for c in row_c]
            if all(sum(1 << r for r in range(height) if grid[r] >> j & 1) in col_c[j] for j in range(width)):
                solutions.append(grid)
            return
        _, row = min(open_rows)
        for pattern in row_c[row]:
            branch_rows = [list(c) for c in row_c]
            branch_rows[row] = [pattern]
            search(branch_rows, [list(c) for c in col_c])
            if len(solutions) >= limit:
                return

    search(
        [list(patterns(tuple(clue), width)) for clue in rows],
        [list(patterns(tuple(clue), height)) for clue in columns],
    )
    return solutions


def parse_picture(answer: str, height: int, width: int) -> list[list[int]] | None:
    """`height` lines of `width` cells ('#' shaded, '.' empty; 1/0 too), spaces ignored; None otherwise."""
    lines = [line.replace(" ", "").replace("\t", "") for line in answer.strip().splitlines()]
    lines = [line for line in lines if line]
    if len(lines) != height or any(len(line) != width for line in lines):
        return None
    if any(char not in _CELL for line in lines for char in line):
        return None
    return [[_CELL[char] for char in line] for line in lines]


class Nonogram(PuzzleFamily[NonogramConfig, NonogramReference]):
    """Nonogram (paint by numbers)."""

    name = "nonogram"
    version = "1"
    description = "Shade the grid so every row's and column's runs match the clues (unique solution)."
    Config = NonogramConfig
    Reference = NonogramReference
    levels = {
        "easy": {"min_side": 5, "max_side": 5, "density": 0.6},
        "medium": {"min_side": 7, "max_side": 8, "density": 0.55},
        "hard": {"min_side": 10, "max_side": 10, "density": 0.55},
    }
    max_answer_chars = 400

    def generate(self, rng: random.Random, config: NonogramConfig) -> Puzzle[NonogramReference]:
        """Random pictures until one has a unique solution."""
        height = rng.randint(config.min_side, max(config.min_side, config.max_side))
        width = rng.randint(config.min_side, max(config.min_side, config.max_side))
        tries = 0
        while True:
            tries += 1
            grid = [[1 if rng.random() < config.density else 0 for _ in range(width)] for _ in range(height)]
            row_clues = [runs(row) for row in grid]
            col_clues = [runs([grid[r][c] for r in range(height)]) for c in range(width)]
            if len(solve(row_clues, col_clues, limit=2)) == 1:
                break
        reference = NonogramReference(rows=row_clues, columns=col_clues)

        def show(clues: list[list[int]]) -> str:
            return "\n".join(f"{i + 1}: {' '.join(map(str, clue)) or '0'}" for i, clue in enumerate(clues))

        question = (
            f"Solve this {height}x{width} nonogram. Each clue lists, in order, the lengths of the runs of shaded "
            "cells in that line (0 means the line is empty); runs are separated by at least one empty cell.\n\n"
            f"Row clues (top to bottom):\n{show(row_clues)}\n\nColumn clues (left to right):\n{show(col_clues)}"
            f"\n\nAnswer with the grid: {height} lines of {width} characters, '#' for shaded and '.' for empty."
        )
        gold = "\n".join("".join(FILLED if bit else EMPTY for bit in row) for row in grid)
        shaded = sum(map(sum, grid))
        return Puzzle(
            question, reference, gold, {"height": height, "width": width, "shaded": shaded, "tries": tries}
        )

    def check(self, answer: str, reference: NonogramReference) -> Checked:
        """Every row's and column's runs equal the clues."""
        height, width = len(reference.rows), len(reference.columns)
        grid = parse_picture(answer, height, width)
        if grid is None:
            return Checked.malformed("malformed", expected=f"{height} lines of {width} '#'/'.'")
        for r, row in enumerate(grid):
            if runs(row) != reference.rows[r]:
                return Checked.wrong("row_clue_broken", row=r + 1)
        for c in range(width):
            if runs([grid[r][c] for r in range(height)]) != reference.columns[c]:
                return Checked.wrong("column_clue_broken", column=c + 1)
        return Checked.right()

    def random_answer(self, rng: random.Random, reference: NonogramReference) -> str:
        """A random grid of the right size."""
        height, width = len(reference.rows), len(reference.columns)
        return "\n".join("".join(rng.choice("#.") for _ in range(width)) for _ in range(height))


register_family(Nonogram)
