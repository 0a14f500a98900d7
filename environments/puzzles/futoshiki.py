"""`puzzle.futoshiki`: a Latin square with inequalities between neighbouring cells; unique by construction.

The generator starts from a random Latin square, shows some cells and some inequalities, and while a
solver finds two solutions it adds a given or an inequality at a cell where they differ. The checker
accepts any Latin square that keeps the givens and satisfies every inequality.
"""

from __future__ import annotations

import random

from pydantic import Field, model_validator

from proctor.environments.puzzles._latin import cell_name, is_latin, parse_square, render, solve_latin
from proctor.environments.puzzles.answer import Checked
from proctor.environments.puzzles.base import (
    Puzzle,
    PuzzleConfig,
    PuzzleFamily,
    PuzzleReference,
    register_family,
)

MIN_N, MAX_N = 4, 7


class FutoshikiConfig(PuzzleConfig):
    """Grid sizes, the share of neighbouring pairs with an inequality, and the share of given cells."""

    min_size: int = Field(default=5, ge=MIN_N, le=MAX_N)
    max_size: int = Field(default=5, ge=MIN_N, le=MAX_N)
    inequality_fraction: float = Field(default=0.45, ge=0, le=1)
    givens_fraction: float = Field(default=0.12, ge=0, le=1)


class FutoshikiReference(PuzzleReference):
    """Rows of digits ('.' blank) and inequalities [a, b] meaning cell a < cell b (cells row-major, 0-based)."""

    grid: list[str] = Field(min_length=MIN_N, max_length=MAX_N)
    less: list[tuple[int, int]] = Field(default_factory=list, max_length=2 * MAX_N * MAX_N)

    @model_validator(mode="after")
    def _shape(self) -> FutoshikiReference:
        n = len(self.grid)
        allowed = set(".123456789"[: n + 1])
        if any(len(row) != n or not set(row) <= allowed for row in self.grid):
            raise ValueError(f"each row must have {n} characters among '.' and 1..{n}")
        for a, b in self.less:
            if not (0 <= a < n * n and 0 <= b < n * n) or b not in _neighbours(a, n):
                raise ValueError("inequalities join neighbouring cells")
        return self


def _neighbours(cell: int, n: int) -> list[int]:
    r, c = divmod(cell, n)
    found = []
    for dr, dc in ((-1, 0), (1, 0), (0, -1), (0, 1)):
        if 0 <= r + dr < n and 0 <= c + dc < n:
            found.append((r + dr) * n + c + dc)
    return found


def _constraint_ok(n: int, less: list[tuple[int, int]]):
    """An `ok` callback for the solver: placed values respect the inequalities (with bound pruning)."""
    smaller: list[list[int]] = [[] for _ in range(n * n)]  # cells that must be smaller than this one
    larger: list[list[int]] = [[] for _ in range(n * n)]
    for a, b in less:
        smaller[b].append(a)
        larger[a].append(b)

    def ok(grid: list[int], cell: int, value: int) -> bool:
        if (smaller[cell] and value == 1) or (larger[cell] and value == n):
            return False
        for other in smaller[cell]:
            if grid[other] and grid[other] >= value:
                return False
        return all(not grid[other] or grid[other] > value for other in larger[cell])

    return ok


class Futoshiki(PuzzleFamily[FutoshikiConfig, FutoshikiReference]):
    """Futoshiki (inequality Latin square)."""

    name = "futoshiki"
    version = "1"
    description = "Fill the Latin square so every given and every inequality holds (unique solution)."
    Config = FutoshikiConfig
    Reference = FutoshikiReference
    levels = {
        "easy": {"min_size": 4, "max_size": 4, "inequality_fraction": 0.3, "givens_fraction": 0.15},
        "medium": {"min_size": 5, "max_size": 5, "inequality_fraction": 0.45, "givens_fraction": 0.12},
        "hard": {"min_size": 6, "max_size": 6, "inequality_fraction": 0.45, "givens_fraction": 0.1},
    }
    max_answer_chars = 200

    def generate(self, rng: random.Random, config: FutoshikiConfig) -> Puzzle[FutoshikiReference]:
        """Random square, random clues, then clues added where two solutions differ until one is left."""
        n = rng.randint(config.min_size, max(config.min_size, config.max_size))
        solution = solve_latin(n, [0] * (n * n), limit=1, rng=rng)[0]
        pairs = [(a, b) for a in range(n * n) for b in _neighbours(a, n) if a < b]
        chosen = [pair for pair in pairs if rng.random() < config.inequality_fraction]
        shown = sorted(rng.sample(range(n * n), round(config.givens_fraction * n * n)))
        cells = [solution[i] if i in shown else 0 for i in range(n * n)]
        repairs = 0
        while True:
            less = sorted((a, b) if solution[a] < solution[b] else (b, a) for a, b in chosen)
            found = solve_latin(n, cells, _constraint_ok(n, less), limit=2)
            if len(found) == 1:
                break
            repairs += 1
            cell = rng.choice([i for i in range(n * n) if found[0][i] != found[1][i]])
            free = [(min(cell, o), max(cell, o)) for o in _neighbours(cell, n)]
            free = [pair for pair in free if pair not in chosen]
            if free and rng.random() < 0.3:
                chosen.append(rng.choice(free))
            else:
                cells[cell] = solution[cell]
        reference = FutoshikiReference(grid=render(cells, n), less=less)
        constraints = "\n".join(f"{cell_name(a, n)} < {cell_name(b, n)}" for a, b in less) or "(none)"
        question = (
            f"Solve this {n}x{n} Futoshiki: fill every '.' with a digit 1-{n} so that each row and each column "
            f"contains every digit 1-{n} exactly once and every inequality holds. RrCc is the cell in row r, "
            f"column c.\n\n" + "\n".join(reference.grid) + f"\n\nInequalities:\n{constraints}\n\n"
            f"Answer with the completed grid: {n} lines of {n} digits."
        )
        gold = "\n".join(render(solution, n))
        measure = {"size": n, "blanks": cells.count(0), "inequalities": len(less), "repairs": repairs}
        return Puzzle(question, reference, gold, measure)

    def check(self, answer: str, reference: FutoshikiReference) -> Checked:
        """A Latin square keeping the givens and every inequality."""
        n = len(reference.grid)
        cells = parse_square(answer, n)
        if cells is None:
            return Checked.malformed("malformed", expected=f"{n} lines of {n} digits 1-{n}")
        for i, char in enumerate("".join(reference.grid)):
            if char != "." and cells[i] != int(char):
                return Checked.wrong("given_changed", cell=cell_name(i, n))
        if not is_latin(cells, n):
            return Checked.wrong("repeated_digit")
        for a, b in reference.less:
            if not cells[a] < cells[b]:
                return Checked.wrong("inequality_broken", cells=[cell_name(a, n), cell_name(b, n)])
        return Checked.right()

    def random_answer(self, rng: random.Random, reference: FutoshikiReference) -> str:
        """Givens kept, random digits elsewhere."""
        n = len(reference.grid)
        return "\n".join(
            "".join(ch if ch != "." else str(rng.randint(1, n)) for ch in row) for row in reference.grid
        )


register_family(Futoshiki)
