"""`puzzle.maze`: give a shortest path from S to G through a grid maze; any shortest path scores 1.

The grid has walls (`#`), open cells (`.`), the start `S` and the goal `G`. The answer is the path as moves
U/D/L/R; it must stay on open cells and end on G in exactly the shortest distance (BFS, computed by the
generator and stored in the reference as `shortest`). Random walls leave loops, so many mazes have several
shortest paths, and every one of them is accepted. A reference whose `shortest` is not the BFS distance is
refused (422), so the checker never trusts a wrong stored distance.

The generator redraws mazes where a random self-avoiding walk from S that reaches G is a shortest path more
than 1% of the time (see `guessable`): otherwise wandering without planning earns reward. The
medium level's distances are long enough that such walks rarely arrive by a shortest route.
"""

from __future__ import annotations

import random
from collections import deque
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
MOVES: dict[str, tuple[int, int]] = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}
_SEPARATORS = str.maketrans("", "", " \t\r\n,;")
GUESS_TRIALS = 100
GUESS_RATE = 0.01
GUESS_RETRIES = 20
"""Mazes are redrawn while more than this share of random walks reaching G are shortest."""


class MazeConfig(PuzzleConfig):
    """Grid side, wall density (percent) and the range of the shortest start-goal distance."""

    min_side: int = Field(default=8, ge=3, le=MAX_SIDE)
    max_side: int = Field(default=11, ge=3, le=MAX_SIDE)
    wall_percent: int = Field(default=32, ge=0, le=60)
    min_distance: int = Field(default=8, ge=1, le=400)
    max_distance: int = Field(default=18, ge=1, le=400)


class MazeReference(PuzzleReference):
    """The grid rows (`#` wall, `.` open, one `S`, one `G`) and the shortest S-G distance."""

    grid: list[Annotated[str, Field(max_length=MAX_SIDE)]] = Field(min_length=1, max_length=MAX_SIDE)
    shortest: int = Field(ge=1, le=MAX_SIDE * MAX_SIDE)

    @model_validator(mode="after")
    def _well_formed(self) -> MazeReference:
        width = len(self.grid[0])
        if not 1 <= width <= MAX_SIDE or any(len(row) != width for row in self.grid):
            raise ValueError(f"grid rows must all have the same length (1 to {MAX_SIDE})")
        text = "".join(self.grid)
        if any(char not in "#.SG" for char in text) or text.count("S") != 1 or text.count("G") != 1:
            raise ValueError("grid cells are '#', '.', and exactly one 'S' and one 'G'")
        path = shortest_path(self.grid)
        if path is None or len(path) != self.shortest:
            raise ValueError("shortest must be the BFS distance from S to G (and G must be reachable)")
        return self


def find(grid: list[str], char: str) -> tuple[int, int]:
    """(row, column) of the first `char` in the grid."""
    for row, line in enumerate(grid):
        column = line.find(char)
        if column >= 0:
            return row, column
    raise ValueError(f"no {char!r} in the grid")


def shortest_path(grid: list[str]) -> str | None:
    """A shortest S-to-G path as moves (BFS in U, D, L, R order), or None when G cannot be reached."""
    height, width = len(grid), len(grid[0])
    start, goal = find(grid, "S"), find(grid, "G")
    parent: dict[tuple[int, int], tuple[tuple[int, int], str]] = {}
    seen = {start}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        if cell == goal:
            moves = []
            while cell != start:
                cell, move = parent[cell]
                moves.append(move)
            return "".join(reversed(moves))
        for move, (dr, dc) in MOVES.items():
            nxt = (cell[0] + dr, cell[1] + dc)
            if (
                0 <= nxt[0] < height
                and 0 <= nxt[1] < width
                and grid[nxt[0]][nxt[1]] != "#"
                and nxt not in seen
            ):
                seen.add(nxt)
                parent[nxt] = (cell, move)
                queue.append(nxt)
    return None


def distances(grid: list[list[str]], start: tuple[int, int]) -> dict[tuple[int, int], int]:
    """BFS distance from `start` to every reachable open cell."""
    height, width = len(grid), len(grid[0])
    dist = {start: 0}
    queue = deque([start])
    while queue:
        r, c = queue.popleft()
        for dr, dc in MOVES.values():
            nr, nc = r + dr, c + dc
            if 0 <= nr < height and 0 <= nc < width and grid[nr][nc] != "#" and (nr, nc) not in dist:
                dist[(nr, nc)] = dist[(r, c)] + 1
                queue.append((nr, nc))
    return dist


def parse_moves(answer: str) -> str | None:
    """The moves as an upper-case U/D/L/R string (spaces and commas between moves allowed), or None."""
    moves = answer.translate(_SEPARATORS).upper()
    if not moves or any(move not in MOVES for move in moves):
        return None
    return moves


def follow(grid: list[str], moves: str) -> tuple[str, int]:
    """Walk the moves from S: ('ok', steps) ending on G, or the first broken rule and the step it broke at."""
    height, width = len(grid), len(grid[0])
    row, column = find(grid, "S")
    for step, move in enumerate(moves, 1):
        dr, dc = MOVES[move]
        row, column = row + dr, column + dc
        if not (0 <= row < height and 0 <= column < width):
            return "off_grid", step
        if grid[row][column] == "#":
            return "hits_wall", step
    return ("ok" if grid[row][column] == "G" else "not_at_goal"), len(moves)


def random_walk(rng: random.Random, grid: list[str]) -> str | None:
    """A self-avoiding walk from S taking random open unvisited neighbours until G; None when stuck."""
    height, width = len(grid), len(grid[0])
    row, column = find(grid, "S")
    seen = {(row, column)}
    moves = []
    while grid[row][column] != "G":
        options = [
            (move, (row + dr, column + dc))
            for move, (dr, dc) in MOVES.items()
            if 0 <= row + dr < height
            and 0 <= column + dc < width
            and grid[row + dr][column + dc] != "#"
            and (row + dr, column + dc) not in seen
        ]
        if not options:
            return None
        move, (row, column) = rng.choice(options)
        seen.add((row, column))
        moves.append(move)
    return "".join(moves)


def guessable(rng: random.Random, grid: list[str], shortest: int) -> bool:
    """Whether random walks that reach G are shortest paths more than GUESS_RATE of the time.

    Up to 3 * GUESS_TRIALS walks, until GUESS_TRIALS arrive (the policy retries stuck walks); a maze few
    walks reach is judged as if GUESS_TRIALS // 2 had arrived, so one lucky arrival does not reject it.
    """
    walks = reached = hits = 0
    while walks < GUESS_TRIALS * 3 and reached < GUESS_TRIALS:
        walks += 1
        walk = random_walk(rng, grid)
        if walk is not None:
            reached += 1
            hits += len(walk) == shortest
    return hits > GUESS_RATE * max(reached, GUESS_TRIALS // 2)


class Maze(PuzzleFamily[MazeConfig, MazeReference]):
    """Shortest path through a random grid maze, answered as a move string."""

    name = "maze"
    version = "2"
    description = (
        "Find a shortest path from S to G in a grid maze, as U/D/L/R moves; any shortest path scores 1."
    )
    Config = MazeConfig
    Reference = MazeReference
    levels = {
        "easy": {"min_side": 6, "max_side": 8, "wall_percent": 30, "min_distance": 7, "max_distance": 12},
        "medium": {"min_side": 9, "max_side": 12, "wall_percent": 32, "min_distance": 12, "max_distance": 22},
        "hard": {"min_side": 12, "max_side": 16, "wall_percent": 35, "min_distance": 18, "max_distance": 40},
    }
    max_answer_chars = 1_000

    def generate(self, rng: random.Random, config: MazeConfig) -> Puzzle[MazeReference]:
        """Random walls; S anywhere open; G among the cells whose BFS distance from S is in range."""
        low, high = config.min_distance, max(config.min_distance, config.max_distance)
        for _ in range(10_000):
            side = rng.randint(config.min_side, max(config.min_side, config.max_side))
            height, width = side, rng.randint(max(3, side - 2), side)
            cells = [
                ["#" if rng.random() * 100 < config.wall_percent else "." for _ in range(width)]
                for _ in range(height)
            ]
            open_cells = [(r, c) for r in range(height) for c in range(width) if cells[r][c] == "."]
            if len(open_cells) < 2:
                continue
            start = rng.choice(open_cells)
            dist = distances(cells, start)
            goals = [cell for cell in open_cells if low <= dist.get(cell, -1) <= high]
            if not goals:
                continue
            goal = rng.choice(goals)
            cells[start[0]][start[1]] = "S"
            cells[goal[0]][goal[1]] = "G"
            grid = ["".join(row) for row in cells]
            path = shortest_path(grid)
            assert path is not None and len(path) == dist[goal]
            if guessable(rng, grid, len(path)):
                continue
            reference = MazeReference(grid=grid, shortest=len(path))
            question = (
                "Find a shortest path from S to G in this maze. '#' is a wall, '.' is open floor; you may step "
                "up, down, left or right onto any cell that is not a wall, and never leave the grid.\n\n"
                + "\n".join(grid)
                + "\n\nAnswer with the moves as one string of letters U (up), D (down), L (left), R (right), "
                "for example RRDLD. Any shortest path is accepted; a longer path is not."
            )
            measure = {"height": height, "width": width, "shortest": len(path), "open_cells": len(open_cells)}
            return Puzzle(question, reference, path, measure)
        raise RuntimeError("no maze met the distance range; widen it or lower the wall density")

    def check(self, answer: str, reference: MazeReference) -> Checked:
        """Valid when the moves stay on open cells and reach G in exactly the shortest distance."""
        moves = parse_moves(answer)
        if moves is None:
            return Checked.malformed("malformed", expected="a string of U, D, L, R moves")
        if len(moves) > reference.shortest:
            return Checked.wrong("not_shortest", moves=len(moves), shortest=reference.shortest)
        outcome, step = follow(reference.grid, moves)
        if outcome != "ok":
            return Checked.wrong(outcome, step=step)
        if len(moves) != reference.shortest:  # shorter than BFS is impossible: the reference is wrong
            return Checked.wrong("shorter_than_shortest", moves=len(moves), shortest=reference.shortest)
        return Checked.right()

    def random_answer(self, rng: random.Random, reference: MazeReference) -> str:
        """A random self-avoiding walk from S to G (redrawn while it gets stuck), else random moves."""
        for _ in range(GUESS_RETRIES):
            walk = random_walk(rng, reference.grid)
            if walk is not None:
                return walk
        return "".join(rng.choice("UDLR") for _ in range(reference.shortest))


register_family(Maze)
