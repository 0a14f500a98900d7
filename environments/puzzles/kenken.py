"""`puzzle.kenken`: a Latin square split into cages, each with an operation and a target; unique by construction.

The generator cuts a random Latin square into random cages; while a solver finds two solutions, a cell
where they differ becomes a cage of its own (a given). The checker accepts any Latin square in which every
cage's numbers combine to its target (for - and /: the larger by the smaller).
"""

from __future__ import annotations

import math
import random
from typing import Literal

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

MIN_N, MAX_N = 3, 7
Op = Literal["+", "-", "*", "/", "="]


class KenkenConfig(PuzzleConfig):
    """Grid sizes and the largest cage."""

    min_size: int = Field(default=5, ge=MIN_N, le=MAX_N)
    max_size: int = Field(default=5, ge=MIN_N, le=MAX_N)
    max_cage: int = Field(default=3, ge=1, le=5)


class Cage(PuzzleReference):
    """Cells (row-major, 0-based), the operation and the target."""

    cells: list[int] = Field(min_length=1, max_length=MAX_N * MAX_N)
    op: Op
    target: int = Field(ge=0, le=10**9)


class KenkenReference(PuzzleReference):
    """Grid size and cages that partition the grid."""

    size: int = Field(ge=MIN_N, le=MAX_N)
    cages: list[Cage] = Field(min_length=1, max_length=MAX_N * MAX_N)

    @model_validator(mode="after")
    def _partition(self) -> KenkenReference:
        cells = sorted(cell for cage in self.cages for cell in cage.cells)
        if cells != list(range(self.size * self.size)):
            raise ValueError("cages must cover every cell exactly once")
        for cage in self.cages:
            if (cage.op in "-/" and len(cage.cells) != 2) or (cage.op == "=" and len(cage.cells) != 1):
                raise ValueError("- and / cages have two cells, = cages one")
        return self


def cage_holds(op: str, target: int, values: list[int]) -> bool:
    """Whether the cage's values combine to its target."""
    if op == "=":
        return values[0] == target
    if op == "+":
        return sum(values) == target
    if op == "*":
        return math.prod(values) == target
    big, small = max(values), min(values)
    if op == "-":
        return big - small == target
    return small != 0 and big % small == 0 and big // small == target


def _cage_ok(n: int, cages: list[Cage]):
    """An `ok` callback for the solver: partial cages can still reach their targets."""
    owner = [0] * (n * n)
    for index, cage in enumerate(cages):
        for cell in cage.cells:
            owner[cell] = index

    def ok(grid: list[int], cell: int, value: int) -> bool:
        cage = cages[owner[cell]]
        placed = [grid[c] for c in cage.cells if c != cell and grid[c]]
        remaining = len(cage.cells) - 1 - len(placed)
        values = [*placed, value]
        if remaining == 0:
            return cage_holds(cage.op, cage.target, values)
        if cage.op == "+":
            total = sum(values)
            return total + remaining <= cage.target <= total + remaining * n
        if cage.op == "*":
            return cage.target % math.prod(values) == 0
        if cage.op == "-":
            return value + cage.target <= n or value - cage.target >= 1
        if cage.op == "/":
            return value * cage.target <= n or value % cage.target == 0
        return True

    return ok


def _neighbours(cell: int, n: int) -> list[int]:
    r, c = divmod(cell, n)
    return [
        (r + dr) * n + c + dc
        for dr, dc in ((-1, 0), (1, 0), (0, -1), (0, 1))
        if 0 <= r + dr < n and 0 <= c + dc < n
    ]


def _components(cells: list[int], n: int) -> list[list[int]]:
    left, parts = sorted(cells), []
    while left:
        part, frontier = [left[0]], [left[0]]
        while frontier:
            cell = frontier.pop()
            for other in _neighbours(cell, n):
                if other in left and other not in part:
                    part.append(other)
                    frontier.append(other)
        parts.append(sorted(part))
        left = [cell for cell in left if cell not in part]
    return parts


def _make_cage(rng: random.Random, cells: list[int], solution: list[int]) -> Cage:
    values = [solution[c] for c in cells]
    if len(cells) == 1:
        return Cage(cells=cells, op="=", target=values[0])
    ops = ["+", "*"]
    if len(cells) == 2:
        big, small = max(values), min(values)
        ops += ["-", "-"] + (["/", "/"] if big % small == 0 else [])
    op = rng.choice(ops)
    if op == "+":
        target = sum(values)
    elif op == "*":
        target = math.prod(values)
    elif op == "-":
        target = max(values) - min(values)
    else:
        target = max(values) // min(values)
    return Cage(cells=cells, op=op, target=target)


class Kenken(PuzzleFamily[KenkenConfig, KenkenReference]):
    """KenKen (cage arithmetic Latin square)."""

    name = "kenken"
    version = "1"
    description = "Fill the Latin square so each cage's numbers combine to its target (unique solution)."
    Config = KenkenConfig
    Reference = KenkenReference
    levels = {
        "easy": {"min_size": 4, "max_size": 4, "max_cage": 3},
        "medium": {"min_size": 5, "max_size": 5, "max_cage": 3},
        "hard": {"min_size": 6, "max_size": 6, "max_cage": 4},
    }
    max_answer_chars = 200

    def generate(self, rng: random.Random, config: KenkenConfig) -> Puzzle[KenkenReference]:
        """Random square, random cages, singleton cages split off where two solutions differ."""
        n = rng.randint(config.min_size, max(config.min_size, config.max_size))
        solution = solve_latin(n, [0] * (n * n), limit=1, rng=rng)[0]
        order = list(range(n * n))
        rng.shuffle(order)
        taken = [False] * (n * n)
        groups: list[list[int]] = []
        for start in order:
            if taken[start]:
                continue
            size = 1 if rng.random() < 0.1 or config.max_cage < 2 else rng.randint(2, config.max_cage)
            group = [start]
            taken[start] = True
            while len(group) < size:
                free = sorted({o for c in group for o in _neighbours(c, n) if not taken[o]})
                if not free:
                    break
                cell = rng.choice(free)
                group.append(cell)
                taken[cell] = True
            groups.append(sorted(group))
        cages = [_make_cage(rng, group, solution) for group in groups]
        repairs = 0
        while True:
            found = solve_latin(n, [0] * (n * n), _cage_ok(n, cages), limit=2)
            if len(found) == 1:
                break
            repairs += 1
            cell = rng.choice([i for i in range(n * n) if found[0][i] != found[1][i]])
            index = next(i for i, cage in enumerate(cages) if cell in cage.cells)
            rest = [c for c in cages[index].cells if c != cell]
            parts = [[cell], *_components(rest, n)] if rest else [[cell]]
            cages = cages[:index] + cages[index + 1 :] + [_make_cage(rng, part, solution) for part in parts]
        cages.sort(key=lambda cage: cage.cells[0])
        reference = KenkenReference(size=n, cages=cages)
        listed = "\n".join(
            f"{', '.join(cell_name(c, n) for c in cage.cells)}: "
            + (f"{cage.target}" if cage.op == "=" else f"{cage.target} ({cage.op})")
            for cage in cages
        )
        question = (
            f"Solve this {n}x{n} KenKen: fill the grid with digits 1-{n} so that each row and each column "
            f"contains every digit exactly once, and the digits of each cage combine to the cage's target with "
            f"its operation (for - and /, the larger number minus or divided by the smaller; a cage without an "
            f"operation is a single cell holding its target). RrCc is the cell in row r, column c.\n\n"
            f"Cages:\n{listed}\n\nAnswer with the completed grid: {n} lines of {n} digits."
        )
        gold = "\n".join(render(solution, n))
        return Puzzle(question, reference, gold, {"size": n, "cages": len(cages), "repairs": repairs})

    def check(self, answer: str, reference: KenkenReference) -> Checked:
        """A Latin square in which every cage reaches its target."""
        n = reference.size
        cells = parse_square(answer, n)
        if cells is None:
            return Checked.malformed("malformed", expected=f"{n} lines of {n} digits 1-{n}")
        if not is_latin(cells, n):
            return Checked.wrong("repeated_digit")
        for cage in reference.cages:
            if not cage_holds(cage.op, cage.target, [cells[c] for c in cage.cells]):
                return Checked.wrong("cage_broken", cage=cell_name(cage.cells[0], n))
        return Checked.right()

    def random_answer(self, rng: random.Random, reference: KenkenReference) -> str:
        """Random digits."""
        n = reference.size
        return "\n".join("".join(str(rng.randint(1, n)) for _ in range(n)) for _ in range(n))


register_family(Kenken)
