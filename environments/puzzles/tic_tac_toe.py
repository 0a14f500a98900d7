"""`puzzle.tic_tac_toe`: name every best move in a tic-tac-toe position (3x3, and n x n with k in a row).

A move is best when, with perfect play by both sides afterwards, it wins as fast as possible, or failing a
win draws, or failing that loses as late as possible (exhaustive minimax with depth-aware scores: a win at
ply p scores 100 - p). The answer is the SET of all best moves, e.g. `b2, c3`, checked by running the
minimax on the reference board.

Why the set and not "any one best move": a position has at most 9 (3x3) to 16 (4x4) empty cells, so a
single random legal move would be a best move 10-15% of the time, over the trivial-policy gate's 0.05
(measured while building this family). A random subset of the empty cells is the whole best set about 1-2%
of the time. The generator also drops positions where every legal move is best (then "all empty cells"
would win), so listing every move never pays.

The default level is 4x4 with three in a row (as many distinct positions as the gate needs; plain 3x3 has
only a few thousand non-terminal positions, the easy level). Minimax results are cached per board, so
scoring many samples of one task costs one search.
"""

from __future__ import annotations

import random
from functools import lru_cache

from pydantic import Field, model_validator

from proctor.environments.puzzles.answer import Checked
from proctor.environments.puzzles.base import (
    Puzzle,
    PuzzleConfig,
    PuzzleFamily,
    PuzzleReference,
    register_family,
)

MAX_SIDE = 5
MAX_EMPTY = 10
"""A reference may leave at most this many empty cells (bounds the checker's search; 3x3 is always fine)."""
WIN = 100
MEMO_LIMIT = 200_000
_memo: dict[int, int] = {}
"""Minimax values shared by every search (positions recur across puzzles); cleared when it grows too big."""
COLUMNS = "abcde"


class TicTacToeConfig(PuzzleConfig):
    """Board side, line length to win, and how many cells are still empty."""

    side: int = Field(default=4, ge=3, le=MAX_SIDE)
    to_win: int = Field(default=3, ge=3, le=MAX_SIDE)
    min_empty: int = Field(default=5, ge=2, le=MAX_EMPTY)
    max_empty: int = Field(default=8, ge=2, le=MAX_EMPTY)


class TicTacToeReference(PuzzleReference):
    """The board as a string of side*side cells ('X', 'O', '.'), row by row from the top; X moves first."""

    board: str = Field(min_length=9, max_length=MAX_SIDE * MAX_SIDE)
    to_win: int = Field(ge=3, le=MAX_SIDE)

    @model_validator(mode="after")
    def _legal(self) -> TicTacToeReference:
        side = round(len(self.board) ** 0.5)
        if side * side != len(self.board) or self.board.strip("XO."):
            raise ValueError("the board is side*side cells of 'X', 'O' and '.'")
        if self.to_win > side:
            raise ValueError("to_win is at most the board side")
        x, o, empty = self.board.count("X"), self.board.count("O"), self.board.count(".")
        if x - o not in (0, 1) or empty == 0:
            raise ValueError("X moves first (X has as many marks as O, or one more) and a cell is empty")
        if side > 3 and empty > MAX_EMPTY:
            raise ValueError(f"boards larger than 3x3 may have at most {MAX_EMPTY} empty cells")
        if finished(self.board, side, self.to_win):
            raise ValueError("the game is already won")
        return self

    @property
    def side(self) -> int:
        """The board's side length."""
        return round(len(self.board) ** 0.5)

    @property
    def player(self) -> str:
        """Whose move it is."""
        return "X" if self.board.count("X") == self.board.count("O") else "O"


@lru_cache(maxsize=16)
def lines(side: int, to_win: int) -> tuple[tuple[tuple[int, ...], ...], ...]:
    """For every cell, the winning lines (cell index tuples) through it."""
    all_lines = []
    for r in range(side):
        for c in range(side):
            for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
                cells = [(r + i * dr, c + i * dc) for i in range(to_win)]
                if all(0 <= a < side and 0 <= b < side for a, b in cells):
                    all_lines.append(tuple(a * side + b for a, b in cells))
    return tuple(tuple(line for line in all_lines if cell in line) for cell in range(side * side))


def finished(board: str, side: int, to_win: int) -> bool:
    """Whether someone already has `to_win` in a row."""
    through = lines(side, to_win)
    return any(
        board[cell] != "." and all(board[j] == board[cell] for j in line)
        for cell in range(len(board))
        for line in through[cell]
    )


@lru_cache(maxsize=16)
def _line_masks(side: int, to_win: int) -> tuple[tuple[int, ...], ...]:
    """For every cell, the winning lines through it as bit masks."""
    return tuple(tuple(sum(1 << j for j in line) for line in through) for through in lines(side, to_win))


@lru_cache(maxsize=4096)
def move_scores(board: str, to_win: int) -> tuple[tuple[int, int], ...]:
    """(cell, score) for every legal move of the player to move: +(WIN - plies) for a win, 0 a draw.

    Exhaustive minimax on bit masks (one per player), memoised across searches in `_memo`; a node stops
    at an immediate win, which no other move can beat.
    """
    side = round(len(board) ** 0.5)
    masks = _line_masks(side, to_win)
    full = (1 << len(board)) - 1
    if len(_memo) > MEMO_LIMIT:
        _memo.clear()

    def after(me: int, them: int, cell: int) -> int:
        # Score, for the player who just played `cell` (now in `me`), of the position; one ply per move.
        if any(me & line == line for line in masks[cell]):
            return WIN - 1
        if me | them == full:
            return 0
        reply = best(them, me)
        return -reply + (1 if reply > 0 else -1 if reply < 0 else 0)

    def best(me: int, them: int) -> int:
        key = (((me << 25) | them) << 6) | (side << 3) | to_win  # one int: a small, fast dict key
        found = _memo.get(key)
        if found is None:
            found = -WIN
            free = full & ~(me | them)
            for cell in range(len(board)):
                if free >> cell & 1:
                    score = after(me | 1 << cell, them, cell)
                    if score > found:
                        found = score
                        if score == WIN - 1:
                            break
            _memo[key] = found
        return found

    x = sum(1 << i for i, mark in enumerate(board) if mark == "X")
    o = sum(1 << i for i, mark in enumerate(board) if mark == "O")
    me, them = (x, o) if board.count("X") == board.count("O") else (o, x)
    return tuple((i, after(me | 1 << i, them, i)) for i in range(len(board)) if board[i] == ".")


def best_moves(board: str, to_win: int) -> list[int]:
    """The cells of every best move, in board order."""
    scores = move_scores(board, to_win)
    top = max(score for _, score in scores)
    return [cell for cell, score in scores if score == top]


def cell_name(cell: int, side: int) -> str:
    """`b3`: column letter, row number from the top."""
    return f"{COLUMNS[cell % side]}{cell // side + 1}"


def parse_cells(answer: str, side: int) -> list[int] | None:
    """`b2, c3` as cell indexes (order kept, repeats kept), or None when it has another shape."""
    cells = []
    for token in answer.replace(",", " ").replace(";", " ").split():
        token = token.lower()
        if len(token) != 2 or token[0] not in COLUMNS[:side] or token[1] not in "123456789":
            return None
        row = int(token[1])
        if not 1 <= row <= side:
            return None
        cells.append((row - 1) * side + COLUMNS.index(token[0]))
    return cells or None


def show(board: str, side: int) -> str:
    """The board with column letters and row numbers."""
    header = "  " + " ".join(COLUMNS[:side])
    rows = [f"{r + 1} " + " ".join(board[r * side : (r + 1) * side]) for r in range(side)]
    return "\n".join([header, *rows])


class TicTacToe(PuzzleFamily[TicTacToeConfig, TicTacToeReference]):
    """All best moves of a tic-tac-toe (m,n,k) position, by exhaustive minimax."""

    name = "tic_tac_toe"
    version = "1"
    description = (
        "Name every best move of a tic-tac-toe position (3x3 or n x n, k in a row), by exact minimax."
    )
    Config = TicTacToeConfig
    Reference = TicTacToeReference
    levels = {
        "easy": {"side": 3, "to_win": 3, "min_empty": 4, "max_empty": 8},
        "medium": {"side": 4, "to_win": 3, "min_empty": 5, "max_empty": 8},
        "hard": {"side": 5, "to_win": 4, "min_empty": 6, "max_empty": 8},
    }
    max_answer_chars = 200
    execution = "pool"  # a fresh 5x5 search takes tens of milliseconds: keep it off the event loop

    def generate(self, rng: random.Random, config: TicTacToeConfig) -> Puzzle[TicTacToeReference]:
        """Random play to a non-finished position; redrawn while every legal move is best."""
        side, to_win = config.side, min(config.to_win, config.side)
        for _ in range(2_000):
            empty = rng.randint(config.min_empty, max(config.min_empty, config.max_empty))
            empty = min(empty, side * side - 1, MAX_EMPTY if side > 3 else 9)
            cells = ["."] * (side * side)
            mover = "X"
            for _ in range(side * side - empty):
                free = [i for i, mark in enumerate(cells) if mark == "."]
                cells[rng.choice(free)] = mover
                mover = "O" if mover == "X" else "X"
            board = "".join(cells)
            if finished(board, side, to_win):
                continue
            best = best_moves(board, to_win)
            if len(best) == empty:
                continue
            player = "X" if board.count("X") == board.count("O") else "O"
            question = (
                f"Tic-tac-toe on a {side}x{side} board: players alternate placing their mark (X first) on an "
                f"empty cell, and the first to get {to_win} of their marks in a row (horizontally, vertically "
                f"or diagonally) wins; a full board without such a row is a draw. It is {player}'s turn:\n\n"
                f"{show(board, side)}\n\n"
                f"A move is best if, when both sides play perfectly afterwards, {player} wins as quickly as "
                f"possible; if {player} cannot force a win, draws; and if {player} must lose, loses as late as "
                "possible. List EVERY best move for "
                f"{player}, as cells like b2 (column letter, row number), comma-separated."
            )
            gold = ", ".join(cell_name(cell, side) for cell in best)
            measure = {"side": side, "to_win": to_win, "empty": empty, "best_moves": len(best)}
            return Puzzle(question, TicTacToeReference(board=board, to_win=to_win), gold, measure)
        raise RuntimeError("no position where only some moves are best")

    def check(self, answer: str, reference: TicTacToeReference) -> Checked:
        """Valid when the cells are exactly the best moves (minimax on the reference board)."""
        side = reference.side
        cells = parse_cells(answer, side)
        if cells is None:
            return Checked.malformed("malformed", expected="cells like b2, c3")
        if len(set(cells)) != len(cells):
            return Checked.wrong("repeated_cell")
        if any(reference.board[cell] != "." for cell in cells):
            return Checked.wrong("occupied_cell")
        best = best_moves(reference.board, reference.to_win)
        if sorted(cells) != best:
            missing = [cell_name(c, side) for c in best if c not in cells]
            extra = [cell_name(c, side) for c in cells if c not in best]
            return Checked.wrong("not_the_best_moves", missing=len(missing), extra=len(extra))
        return Checked.right()

    def random_answer(self, rng: random.Random, reference: TicTacToeReference) -> str:
        """A random non-empty subset of the empty cells."""
        side = reference.side
        empty = [i for i, mark in enumerate(reference.board) if mark == "."]
        while True:
            chosen = [cell for cell in empty if rng.random() < 0.5]
            if chosen:
                return ", ".join(cell_name(cell, side) for cell in chosen)


register_family(TicTacToe)
