"""`puzzle.game_of_life`: the board of Conway's Game of Life after k steps.

The answer is the whole board (rows of 0/1), so guessing is hopeless; the checker runs the rules itself
(B3/S23, Moore neighbourhood, cells beyond the edge dead or, with `wrap`, the board a torus) from the
start board in the reference and compares cell by cell. The result is unique by construction. The generator
redraws boards whose result is empty or equal to the start (answers a trivial policy could copy).
"""

from __future__ import annotations

import random
from typing import Annotated

from pydantic import Field, model_validator

from proctor.environments.puzzles.answer import Checked
from proctor.environments.puzzles.base import (
    Puzzle,
    PuzzleConfig,
    PuzzleFamily,
    PuzzleReference,
    register_family,
)

MAX_SIDE = 30
MAX_STEPS = 20


class LifeConfig(PuzzleConfig):
    """Board side, live-cell density (percent), steps, and whether the board wraps around."""

    min_side: int = Field(default=6, ge=3, le=MAX_SIDE)
    max_side: int = Field(default=8, ge=3, le=MAX_SIDE)
    density_percent: int = Field(default=35, ge=1, le=90)
    min_steps: int = Field(default=1, ge=1, le=MAX_STEPS)
    max_steps: int = Field(default=2, ge=1, le=MAX_STEPS)
    wrap: bool = False


class LifeReference(PuzzleReference):
    """The start board (rows of '0'/'1'), the number of steps, and the edge rule."""

    board: list[Annotated[str, Field(max_length=MAX_SIDE)]] = Field(min_length=1, max_length=MAX_SIDE)
    steps: int = Field(ge=1, le=MAX_STEPS)
    wrap: bool = False

    @model_validator(mode="after")
    def _rectangular(self) -> LifeReference:
        width = len(self.board[0])
        if not 1 <= width <= MAX_SIDE or any(len(row) != width or row.strip("01") for row in self.board):
            raise ValueError(f"board rows are equal-length strings of 0 and 1 (at most {MAX_SIDE})")
        return self


def step(rows: list[int], width: int, wrap: bool) -> list[int]:
    """One generation of B3/S23 on rows stored as bit masks (bit c = column c), all cells of a row at once."""
    full = (1 << width) - 1
    height = len(rows)
    out = []
    for r in range(height):
        if wrap:
            above, below = rows[(r - 1) % height], rows[(r + 1) % height]
        else:
            above = rows[r - 1] if r > 0 else 0
            below = rows[r + 1] if r + 1 < height else 0
        row = rows[r]
        ones = twos = fours = eights = 0
        for line, centre in ((above, True), (row, False), (below, True)):
            if wrap:
                left = ((line << 1) | (line >> (width - 1))) & full
                right = (line >> 1) | ((line & 1) << (width - 1))
            else:
                left, right = (line << 1) & full, line >> 1
            for mask in (left, right, line) if centre else (left, right):
                # Bit-sliced counter: add `mask` to the per-cell neighbour count (ones, twos, fours, eights).
                carry = ones & mask
                ones ^= mask
                carry2 = twos & carry
                twos ^= carry
                eights |= fours & carry2
                fours ^= carry2
        two_or_three = twos & ~fours & ~eights
        out.append(two_or_three & (ones | row))
    return out


def run(rows: list[str], steps: int, wrap: bool) -> list[str]:
    """The board after `steps` generations, as rows of '0'/'1'."""
    width = len(rows[0])
    board = [int(row[::-1], 2) for row in rows]
    for _ in range(steps):
        board = step(board, width, wrap)
    return [format(mask, f"0{width}b")[::-1] for mask in board]


def run_slow(rows: list[str], steps: int, wrap: bool) -> list[str]:
    """The same as `run`, cell by cell (the plain statement of the rules; tests compare the two)."""
    board = [[int(char) for char in row] for row in rows]
    height, width = len(board), len(board[0])
    for _ in range(steps):
        nxt = [[0] * width for _ in range(height)]
        for r in range(height):
            for c in range(width):
                live = 0
                for dr in (-1, 0, 1):
                    for dc in (-1, 0, 1):
                        rr, cc = r + dr, c + dc
                        if (dr or dc) and wrap:
                            live += board[rr % height][cc % width]
                        elif (dr or dc) and 0 <= rr < height and 0 <= cc < width:
                            live += board[rr][cc]
                nxt[r][c] = 1 if live == 3 or (live == 2 and board[r][c]) else 0
        board = nxt
    return ["".join(str(cell) for cell in row) for row in board]


def parse_board(answer: str, height: int, width: int) -> list[str] | None:
    """Rows of 0/1, one per line (spaces or commas between cells allowed), or None when another shape."""
    rows = [line.replace(" ", "").replace(",", "").strip("[]") for line in answer.strip().splitlines()]
    rows = [row for row in rows if row]
    if len(rows) != height or any(len(row) != width or row.strip("01") for row in rows):
        return None
    return rows


class GameOfLife(PuzzleFamily[LifeConfig, LifeReference]):
    """Conway's Game of Life, k generations ahead, answered as the board."""

    name = "game_of_life"
    version = "1"
    description = "Give the Game of Life board after k steps (B3/S23); the checker simulates the rules."
    Config = LifeConfig
    Reference = LifeReference
    levels = {
        "easy": {"min_side": 5, "max_side": 6, "density_percent": 35, "min_steps": 1, "max_steps": 1},
        "medium": {"min_side": 6, "max_side": 8, "density_percent": 35, "min_steps": 1, "max_steps": 2},
        "hard": {
            "min_side": 8,
            "max_side": 10,
            "density_percent": 35,
            "min_steps": 2,
            "max_steps": 4,
            "wrap": True,
        },
    }
    max_answer_chars = 2_000

    def generate(self, rng: random.Random, config: LifeConfig) -> Puzzle[LifeReference]:
        """A random board, redrawn while its result is empty or unchanged."""
        for _ in range(10_000):
            height = rng.randint(config.min_side, max(config.min_side, config.max_side))
            width = rng.randint(config.min_side, max(config.min_side, config.max_side))
            board = [
                "".join("1" if rng.random() * 100 < config.density_percent else "0" for _ in range(width))
                for _ in range(height)
            ]
            steps = rng.randint(config.min_steps, max(config.min_steps, config.max_steps))
            result = run(board, steps, config.wrap)
            if result == board or "1" not in "".join(result):
                continue
            edge = (
                "The board wraps around: the top row neighbours the bottom row and the left column the right one."
                if config.wrap
                else "Cells beyond the edge of the board are dead and stay dead."
            )
            plural = "s" if steps > 1 else ""
            question = (
                "Conway's Game of Life: each cell is alive (1) or dead (0) and has eight neighbours (including "
                "diagonals). In each step, all at once, a live cell with 2 or 3 live neighbours stays alive, a "
                "dead cell with exactly 3 live neighbours becomes alive, and every other cell is dead next step. "
                f"{edge}\n\nStart board ({height} rows, {width} columns):\n\n"
                + "\n".join(board)
                + f"\n\nWhat is the board after {steps} step{plural}? Answer with the {height} rows, one per line, "
                "each as a string of 0 and 1, in the same layout as the start board."
            )
            reference = LifeReference(board=board, steps=steps, wrap=config.wrap)
            changed = sum(
                a != b for row, out in zip(board, result, strict=True) for a, b in zip(row, out, strict=True)
            )
            measure = {"height": height, "width": width, "steps": steps, "changed_cells": changed}
            return Puzzle(question, reference, "\n".join(result), measure)
        raise RuntimeError("no board with a non-trivial result; change density or steps")

    def check(self, answer: str, reference: LifeReference) -> Checked:
        """Valid when the board equals the one the rules give, cell for cell."""
        height, width = len(reference.board), len(reference.board[0])
        rows = parse_board(answer, height, width)
        if rows is None:
            return Checked.malformed("malformed", expected=f"{height} rows of {width} digits 0/1")
        result = run(reference.board, reference.steps, reference.wrap)
        wrong = sum(
            a != b for row, out in zip(rows, result, strict=True) for a, b in zip(row, out, strict=True)
        )
        return Checked.right() if wrong == 0 else Checked.wrong("wrong_cells", cells=wrong)

    def random_answer(self, rng: random.Random, reference: LifeReference) -> str:
        """A random 0/1 board of the right size."""
        width = len(reference.board[0])
        return "\n".join("".join(rng.choice("01") for _ in range(width)) for _ in range(len(reference.board)))


register_family(GameOfLife)
