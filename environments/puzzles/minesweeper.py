"""`puzzle.minesweeper`: deduce every mine from the revealed numbers, or write the numbers for a mine layout.

- find_mines: a board with revealed cells (their count of adjacent mines, 0-8) and hidden cells `?`, and
  the total number of mines, all of them hidden. The answer lists every mine as (row, column), 1-based.
  The checker accepts any set of that many hidden cells that matches every revealed number; the generator
  proves by exhaustive search (backtracking with bounds) that exactly one such set exists, hiding extra safe
  cells only while the solution stays unique, and keeps boards where a random guess of that many hidden
  cells is right at most 1 time in 50.
- numbers: a full mine layout (`*` mine, `.` empty); the answer is the board with every `.` replaced by its
  count of adjacent mines, one row per line (or rows separated by blanks, commas or `/`). The checker
  recounts.
"""

from __future__ import annotations

import functools
import math
import random
import re
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

Kind = Literal["find_mines", "numbers"]
KINDS: tuple[Kind, ...] = ("find_mines", "numbers")
MAX_SIDE = 16
MIN_GUESS_SPACE = 50
"""A board is kept only when C(hidden cells, mines) >= this, so guessing the mines is hopeless."""

_PAIR = re.compile(r"[(\[]\s*(\d{1,2})\s*[,;]\s*(\d{1,2})\s*[)\]]", re.ASCII)
_PAIR_SEPARATORS = re.compile(r"[\s,;]*")
_ROW_SPLIT = re.compile(r"[\s,/|]+")
_ROW = re.compile(r"[*0-8]+")


class MinesweeperConfig(PuzzleConfig):
    """Difficulty knobs: board size, mines, how many safe cells stay hidden, and the kinds of task."""

    rows: int = Field(default=7, ge=3, le=MAX_SIDE)
    cols: int = Field(default=7, ge=3, le=MAX_SIDE)
    mines: int = Field(default=8, ge=2, le=60)
    hidden_safe: int = Field(default=10, ge=0, le=80, description="Safe cells left hidden (find_mines).")
    kinds: list[Kind] = Field(default=list(KINDS), min_length=1, max_length=2)

    @model_validator(mode="after")
    def _fits(self) -> MinesweeperConfig:
        if self.mines + self.hidden_safe >= self.rows * self.cols - 2:
            raise ValueError("mines + hidden_safe must leave revealed cells on the board")
        return self


class MinesweeperReference(PuzzleReference):
    """The board as rows of characters: find_mines uses `?` and 0-8, numbers uses `*` and `.`."""

    kind: Kind
    board: list[str] = Field(min_length=3, max_length=MAX_SIDE)
    mines: int = Field(ge=1, le=MAX_SIDE * MAX_SIDE)

    @model_validator(mode="after")
    def _shape(self) -> MinesweeperReference:
        width = len(self.board[0])
        allowed = "?012345678" if self.kind == "find_mines" else "*."
        if not 3 <= width <= MAX_SIDE or any(len(row) != width for row in self.board):
            raise ValueError("the board must be a rectangle of 3 to 16 columns")
        if any(c not in allowed for row in self.board for c in row):
            raise ValueError(f"board cells must be among {allowed!r}")
        if self.kind == "numbers" and sum(row.count("*") for row in self.board) != self.mines:
            raise ValueError("mines must equal the number of * cells")
        if self.kind == "find_mines" and sum(row.count("?") for row in self.board) < self.mines:
            raise ValueError("fewer hidden cells than mines")
        return self


@functools.lru_cache(maxsize=64)
def neighbour_table(rows: int, cols: int) -> tuple[tuple[int, ...], ...]:
    """For each cell (flat index r * cols + c), the flat indexes of the up to 8 cells around it."""
    table = []
    for r in range(rows):
        for c in range(cols):
            table.append(
                tuple(
                    (r + dr) * cols + c + dc
                    for dr in (-1, 0, 1)
                    for dc in (-1, 0, 1)
                    if (dr or dc) and 0 <= r + dr < rows and 0 <= c + dc < cols
                )
            )
    return tuple(table)


def counts(mines: set[int], rows: int, cols: int) -> list[int]:
    """The adjacent-mine count of every cell (flat indexes)."""
    result = [0] * (rows * cols)
    table = neighbour_table(rows, cols)
    for mine in mines:
        for n in table[mine]:
            result[n] += 1
    return result


def count_solutions(board: list[str], total: int, limit: int = 2) -> int:
    """How many sets of `total` hidden cells match every revealed number (stops counting at `limit`)."""
    rows, cols = len(board), len(board[0])
    flat = "".join(board)
    table = neighbour_table(rows, cols)
    hidden = [i for i, ch in enumerate(flat) if ch == "?"]
    index = {cell: v for v, cell in enumerate(hidden)}
    targets: list[int] = []
    members: list[list[int]] = []
    for i, ch in enumerate(flat):
        if ch != "?":
            around = [index[n] for n in table[i] if n in index]
            if int(ch) > len(around):
                return 0
            if around:
                targets.append(int(ch))
                members.append(around)
    # the total is one more constraint over every hidden cell
    targets.append(total)
    members.append(list(range(len(hidden))))
    of_var: list[list[int]] = [[] for _ in hidden]
    for k, group in enumerate(members):
        for v in group:
            of_var[v].append(k)
    sums = [0] * len(targets)
    left = [len(group) for group in members]
    if any(t > n for t, n in zip(targets, left, strict=True)):
        return 0
    found = 0

    def search(v: int) -> None:
        nonlocal found
        if v == len(hidden):
            found += 1
            return
        constraints = of_var[v]
        for value in (0, 1):
            ok = True
            for k in constraints:
                sums[k] += value
                left[k] -= 1
                if sums[k] > targets[k] or sums[k] + left[k] < targets[k]:
                    ok = False
            if ok:
                search(v + 1)
            for k in constraints:
                sums[k] -= value
                left[k] += 1
            if found >= limit:
                return

    search(0)
    return found


def parse_cells(text: str) -> list[tuple[int, int]] | None:
    """(row, column) pairs, 1-based, separated by commas, semicolons or blanks; None when malformed."""
    cells: list[tuple[int, int]] = []
    position, text = 0, text.strip()
    while position < len(text):
        match = _PAIR.match(text, position)
        if match is None or len(cells) >= MAX_SIDE * MAX_SIDE:
            return None
        cells.append((int(match.group(1)), int(match.group(2))))
        position = _PAIR_SEPARATORS.match(text, match.end()).end()
    return cells or None


def _rows(flat: str, cols: int) -> list[str]:
    return [flat[i : i + cols] for i in range(0, len(flat), cols)]


def show_board(board: list[str]) -> str:
    """The board with 1-based row and column numbers."""
    header = "    " + " ".join(f"{c + 1:>2}" for c in range(len(board[0])))
    lines = [f"{r + 1:>2}  " + " ".join(f"{ch:>2}" for ch in row) for r, row in enumerate(board)]
    return "\n".join([header, *lines])


class Minesweeper(PuzzleFamily[MinesweeperConfig, MinesweeperReference]):
    """Minesweeper deduction (unique, proved) and number filling."""

    name = "minesweeper"
    description = "Minesweeper: deduce every mine from revealed numbers (unique), or fill in the numbers."
    Config = MinesweeperConfig
    Reference = MinesweeperReference
    max_answer_chars = 800
    levels = {
        "easy": {"rows": 5, "cols": 5, "mines": 4, "hidden_safe": 6},
        "medium": {"rows": 7, "cols": 7, "mines": 8, "hidden_safe": 10},
        "hard": {"rows": 9, "cols": 9, "mines": 14, "hidden_safe": 16},
    }

    def generate(self, rng: random.Random, config: MinesweeperConfig) -> Puzzle[MinesweeperReference]:
        """Place mines; for find_mines hide safe cells while the solution stays unique."""
        rows, cols = config.rows, config.cols
        kind = rng.choice(config.kinds)
        size = rows * cols
        while True:
            mines = sorted(rng.sample(range(size), config.mines))
            mine_set = set(mines)
            numbers = counts(mine_set, rows, cols)
            if kind == "numbers":
                flat = "".join("*" if i in mine_set else "." for i in range(size))
                solved = "".join("*" if i in mine_set else str(numbers[i]) for i in range(size))
                board = _rows(flat, cols)
                reference = MinesweeperReference(kind=kind, board=board, mines=len(mines))
                question = (
                    f"In this {rows}x{cols} minesweeper board, * is a mine and . is an empty cell:\n"
                    + "\n".join(board)
                    + "\n\nReplace every . with the number of mines in the (up to 8) cells around it, keeping the "
                    f"* cells. Answer with the {rows} rows, one per line, with no spaces inside a row."
                )
                measure = {"kind": kind, "cells": size, "mines": len(mines)}
                gold = "\n".join(_rows(solved, cols))
                return Puzzle(question=question, reference=reference, gold=gold, measure=measure)
            grid = ["?" if i in mine_set else str(numbers[i]) for i in range(size)]
            safe = [i for i in range(size) if i not in mine_set]
            rng.shuffle(safe)
            hidden_safe = 0
            for i in safe:
                if hidden_safe >= config.hidden_safe:
                    break
                grid[i] = "?"
                if count_solutions(_rows("".join(grid), cols), len(mines)) == 1:
                    hidden_safe += 1
                else:
                    grid[i] = str(numbers[i])
            if math.comb(len(mines) + hidden_safe, len(mines)) >= MIN_GUESS_SPACE:
                break
        board = _rows("".join(grid), cols)
        reference = MinesweeperReference(kind=kind, board=board, mines=len(mines))
        question = (
            f"This {rows}x{cols} minesweeper board has {len(mines)} mines, all of them in hidden cells (?). Each "
            "number is a safe cell showing how many mines are in the (up to 8) cells around it:\n"
            f"{show_board(board)}\n\nThe numbers and the mine count determine the mines uniquely. List every mine "
            "as (row, column), rows counted from the top and columns from the left, starting at 1, separated "
            "by commas."
        )
        gold = ", ".join(f"({i // cols + 1}, {i % cols + 1})" for i in mines)
        measure = {"kind": kind, "cells": size, "mines": len(mines), "hidden": len(mines) + hidden_safe}
        return Puzzle(question=question, reference=reference, gold=gold, measure=measure)

    def check(self, answer: str, reference: MinesweeperReference) -> Checked:
        """find_mines: the right number of hidden cells, matching every number; numbers: recount each cell."""
        board = reference.board
        rows, cols = len(board), len(board[0])
        flat = "".join(board)
        if reference.kind == "numbers":
            given = [row for row in _ROW_SPLIT.split(answer.strip()) if row]
            if len(given) != rows or any(len(row) != cols or not _ROW.fullmatch(row) for row in given):
                return Checked.malformed("not_a_board")
            mines = {i for i, ch in enumerate(flat) if ch == "*"}
            numbers = counts(mines, rows, cols)
            want = "".join("*" if ch == "*" else str(n) for ch, n in zip(flat, numbers, strict=True))
            if "".join(given) != want:
                return Checked.wrong("wrong_cells")
            return Checked.right()
        cells = parse_cells(answer)
        if cells is None:
            return Checked.malformed("not_cells")
        if any(not (1 <= r <= rows and 1 <= c <= cols) for r, c in cells):
            return Checked.wrong("outside_board")
        chosen = {(r - 1) * cols + c - 1 for r, c in cells}
        if len(chosen) != len(cells):
            return Checked.wrong("repeated_cell")
        if any(flat[i] != "?" for i in chosen):
            return Checked.wrong("not_a_hidden_cell")
        if len(chosen) != reference.mines:
            return Checked.wrong("wrong_mine_count")
        numbers = counts(chosen, rows, cols)
        for i, ch in enumerate(flat):
            if ch != "?" and int(ch) != numbers[i]:
                return Checked.wrong("number_mismatch", row=i // cols + 1, column=i % cols + 1)
        return Checked.right()

    def random_answer(self, rng: random.Random, reference: MinesweeperReference) -> str:
        """find_mines: as many random hidden cells as there are mines; numbers: random digits around the mines."""
        board = reference.board
        if reference.kind == "numbers":
            return "\n".join(
                "".join(ch if ch == "*" else str(rng.randint(0, 3)) for ch in row) for row in board
            )
        hidden = [(r, c) for r, row in enumerate(board) for c, ch in enumerate(row) if ch == "?"]
        picks = sorted(rng.sample(hidden, min(reference.mines, len(hidden))))
        return ", ".join(f"({r + 1}, {c + 1})" for r, c in picks)


register_family(Minesweeper)
