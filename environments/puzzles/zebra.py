"""`puzzle.zebra`: Einstein puzzles; deduce every house's attributes from clues. Unique by construction.

The generator draws a random solution and a pool of clues true of it; it adds clues until a solver finds
exactly one solution (each added clue rules out the second solution the solver found). The checker
accepts any full assignment (every attribute a permutation of its values) that satisfies every clue.
"""

from __future__ import annotations

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
from proctor.environments.puzzles.seeding import canonical

CATALOG: dict[str, tuple[str, ...]] = {
    "colour": ("red", "green", "blue", "yellow", "white", "black", "orange"),
    "nationality": ("Brit", "Swede", "Dane", "German", "Norwegian", "Spaniard", "Japanese"),
    "pet": ("dog", "cat", "bird", "fish", "horse", "rabbit", "snake"),
    "drink": ("tea", "coffee", "milk", "water", "juice", "beer", "cocoa"),
    "sport": ("tennis", "golf", "chess", "soccer", "hockey", "rowing", "cycling"),
    "food": ("pizza", "sushi", "pasta", "tacos", "curry", "salad", "soup"),
}
ATTRIBUTES = tuple(CATALOG)
MAX_HOUSES = 6
Kind = Literal["at", "not_at", "same", "not_same", "left_of", "next_to", "before"]
BINARY: tuple[str, ...] = ("same", "not_same", "left_of", "next_to", "before")
_HOUSE_LINE = re.compile(r"(?:house\s*)?(\d+)\s*[:.)-]\s*(.+)", re.IGNORECASE)


class ZebraConfig(PuzzleConfig):
    """Houses and attributes."""

    min_houses: int = Field(default=4, ge=2, le=MAX_HOUSES)
    max_houses: int = Field(default=4, ge=2, le=MAX_HOUSES)
    attributes: int = Field(default=4, ge=2, le=len(ATTRIBUTES))


class Clue(PuzzleReference):
    """A fact about value v1 of attribute a1 (and v2 of a2), or house h (1-based)."""

    kind: Kind
    a1: int = Field(ge=0, lt=len(ATTRIBUTES))
    v1: int = Field(ge=0, lt=MAX_HOUSES)
    a2: int = Field(default=0, ge=0, lt=len(ATTRIBUTES))
    v2: int = Field(default=0, ge=0, lt=MAX_HOUSES)
    house: int = Field(default=1, ge=1, le=MAX_HOUSES)


class ZebraReference(PuzzleReference):
    """Attribute names, their values (one per house) and the clues."""

    attributes: list[str] = Field(min_length=1, max_length=len(ATTRIBUTES))
    values: list[list[str]] = Field(min_length=1, max_length=len(ATTRIBUTES))
    clues: list[Clue] = Field(min_length=1, max_length=200)

    @model_validator(mode="after")
    def _shape(self) -> ZebraReference:
        n = len(self.values[0])
        if len(self.values) != len(self.attributes) or not 2 <= n <= MAX_HOUSES:
            raise ValueError("one value list per attribute, 2..6 houses")
        names = [v.lower() for vs in self.values for v in vs]
        if any(len(vs) != n for vs in self.values) or len(set(names)) != len(names):
            raise ValueError("every attribute needs one distinct value per house")
        for clue in self.clues:
            if clue.a1 >= len(self.attributes) or clue.a2 >= len(self.attributes):
                raise ValueError("clues must name attributes of the puzzle")
            if clue.v1 >= n or clue.v2 >= n or clue.house > n:
                raise ValueError("clues must name values and houses of the puzzle")
        return self


def holds(clue: Clue, houses: list[list[int]]) -> bool:
    """Whether the clue holds when houses[a][v] is the 0-based house of value v of attribute a."""
    h1 = houses[clue.a1][clue.v1]
    if clue.kind == "at":
        return h1 == clue.house - 1
    if clue.kind == "not_at":
        return h1 != clue.house - 1
    h2 = houses[clue.a2][clue.v2]
    if clue.kind == "same":
        return h1 == h2
    if clue.kind == "not_same":
        return h1 != h2
    if clue.kind == "left_of":
        return h1 + 1 == h2
    if clue.kind == "next_to":
        return abs(h1 - h2) == 1
    return h1 < h2  # before


def _revise(clue: Clue, dom: list[int], n: int, full: int) -> None:
    """Narrow the two values' house sets (bitmasks) to those the clue allows."""
    x, y = clue.a1 * n + clue.v1, clue.a2 * n + clue.v2
    dx, dy = dom[x], dom[y]
    if clue.kind == "same":
        dom[x] = dom[y] = dx & dy
    elif clue.kind == "not_same":
        if dy & (dy - 1) == 0:
            dom[x] = dx & ~dy
        if dx & (dx - 1) == 0:
            dom[y] = dy & ~dx
    elif clue.kind == "left_of":
        dom[x] = dx & (dy >> 1)
        dom[y] = dy & (dx << 1) & full
    elif clue.kind == "next_to":
        dom[x] = dx & ((dy << 1) | (dy >> 1)) & full
        dom[y] = dy & ((dx << 1) | (dx >> 1)) & full
    elif clue.kind == "before":
        # x's house is left of y's rightmost possible house; y's is right of x's leftmost possible one.
        dom[x] = dx & ((1 << (dy.bit_length() - 1)) - 1) if dy else 0
        dom[y] = dy & full & ~((1 << (dx & -dx).bit_length()) - 1) if dx else 0


def _propagate(dom: list[int], clues: list[Clue], n: int, m: int, full: int) -> bool:
    """Apply every clue and each attribute's all-different rule until nothing changes; False if stuck."""
    while True:
        before = list(dom)
        for clue in clues:
            _revise(clue, dom, n, full)
        for a in range(m):
            cells = range(a * n, a * n + n)
            for i in cells:
                d = dom[i]
                if d == 0:
                    return False
                if d & (d - 1) == 0:
                    for j in cells:
                        if j != i:
                            dom[j] &= ~d
            for house in range(n):
                bit = 1 << house
                holders = [i for i in cells if dom[i] & bit]
                if not holders:
                    return False
                if len(holders) == 1:
                    dom[holders[0]] = bit
        if dom == before:
            return all(dom)


def solve(n: int, m: int, clues: list[Clue], limit: int = 2) -> list[list[list[int]]]:
    """Up to `limit` solutions (houses[a][v]) by propagation over house bitmasks and branching."""
    full = (1 << n) - 1
    dom = [full] * (n * m)
    binary = []
    for clue in clues:
        index = clue.a1 * n + clue.v1
        if clue.kind == "at":
            dom[index] &= 1 << (clue.house - 1)
        elif clue.kind == "not_at":
            dom[index] &= ~(1 << (clue.house - 1))
        else:
            binary.append(clue)
    solutions: list[list[list[int]]] = []

    def search(dom: list[int]) -> None:
        if not _propagate(dom, binary, n, m, full):
            return
        open_cells = [(d.bit_count(), i) for i, d in enumerate(dom) if d & (d - 1)]
        if not open_cells:
            houses = [[dom[a * n + v].bit_length() - 1 for v in range(n)] for a in range(m)]
            if all(holds(clue, houses) for clue in clues):
                solutions.append(houses)
            return
        _, cell = min(open_cells)
        for house in range(n):
            if dom[cell] >> house & 1:
                branch = list(dom)
                branch[cell] = 1 << house
                search(branch)
                if len(solutions) >= limit:
                    return

    search(dom)
    return solutions


def random_clue(rng: random.Random, houses: list[list[int]], n: int, m: int) -> Clue | None:
    """A random clue that is true of the solution (None when the drawn kind does not fit)."""
    kind = rng.choice(("at", "not_at", "same", "same", "not_same", "left_of", "next_to", "before", "same"))
    a1, a2 = rng.randrange(m), rng.randrange(m)
    v1 = rng.randrange(n)
    h1 = houses[a1][v1]
    if kind == "at":
        return Clue(kind=kind, a1=a1, v1=v1, house=h1 + 1)
    if kind == "not_at":
        return Clue(kind=kind, a1=a1, v1=v1, house=rng.choice([h for h in range(n) if h != h1]) + 1)
    if kind == "same":
        if a1 == a2:
            return None
        h2 = h1
    elif kind == "not_same":
        h2 = rng.choice([h for h in range(n) if h != h1])
    elif kind == "left_of":
        if h1 == n - 1:
            return None
        h2 = h1 + 1
    elif kind == "next_to":
        h2 = rng.choice([h for h in (h1 - 1, h1 + 1) if 0 <= h < n])
    else:
        if h1 == n - 1:
            return None
        h2 = rng.randint(h1 + 1, n - 1)
    v2 = houses[a2].index(h2)
    if a1 == a2 and v1 == v2:
        return None
    return Clue(kind=kind, a1=a1, v1=v1, a2=a2, v2=v2)


def describe(clue: Clue, reference_values: list[list[str]], attributes: list[str]) -> str:
    """The clue in English."""
    first = f"the {attributes[clue.a1]} {reference_values[clue.a1][clue.v1]}"
    if clue.kind == "at":
        return f"The house with {first} is house {clue.house}."
    if clue.kind == "not_at":
        return f"The house with {first} is not house {clue.house}."
    second = f"the {attributes[clue.a2]} {reference_values[clue.a2][clue.v2]}"
    if clue.kind == "same":
        return f"The house with {first} also has {second}."
    if clue.kind == "not_same":
        return f"The house with {first} does not have {second}."
    if clue.kind == "left_of":
        return f"The house with {first} is directly left of the house with {second}."
    if clue.kind == "next_to":
        return f"The house with {first} is next to the house with {second}."
    return f"The house with {first} is somewhere left of the house with {second}."


def parse_solution(answer: str, values: list[list[str]]) -> list[list[int]] | None:
    """`House k: v1, v2, ...` lines (attribute order as asked), each house once; houses[a][v] or None."""
    n, m = len(values[0]), len(values)
    lines = [line.strip() for line in answer.strip().splitlines() if line.strip()]
    if len(lines) != n:
        return None
    lookup = [{value.lower(): index for index, value in enumerate(vs)} for vs in values]
    houses = [[-1] * n for _ in range(m)]
    seen = set()
    for line in lines:
        match = _HOUSE_LINE.fullmatch(line.rstrip("."))
        if match is None:
            return None
        house = int(match.group(1)) - 1 if len(match.group(1)) <= 2 else -1
        items = [item.strip().lower() for item in match.group(2).split(",")]
        if not 0 <= house < n or house in seen or len(items) != m:
            return None
        seen.add(house)
        for a, item in enumerate(items):
            v = lookup[a].get(item)
            if v is None or houses[a][v] != -1:
                return None
            houses[a][v] = house
    return houses


class Zebra(PuzzleFamily[ZebraConfig, ZebraReference]):
    """Einstein's zebra puzzle."""

    name = "zebra"
    version = "1"
    description = "Deduce every house's attributes from clues (Einstein puzzle, unique solution)."
    Config = ZebraConfig
    Reference = ZebraReference
    levels = {
        "easy": {"min_houses": 3, "max_houses": 3, "attributes": 3},
        "medium": {"min_houses": 4, "max_houses": 4, "attributes": 4},
        "hard": {"min_houses": 5, "max_houses": 5, "attributes": 5},
    }
    max_answer_chars = 1000

    def generate(self, rng: random.Random, config: ZebraConfig) -> Puzzle[ZebraReference]:
        """Random solution; add true clues that rule out the solver's second solution until it is unique."""
        n = rng.randint(config.min_houses, max(config.min_houses, config.max_houses))
        m = config.attributes
        attributes = sorted(rng.sample(ATTRIBUTES, m), key=ATTRIBUTES.index)
        values = [sorted(rng.sample(CATALOG[a], n)) for a in attributes]
        houses = []
        for _ in range(m):
            perm = list(range(n))
            rng.shuffle(perm)
            houses.append(perm)
        clues: list[Clue] = []
        while len(clues) < n + m - 1:
            clue = random_clue(rng, houses, n, m)
            if clue is not None and clue not in clues:
                clues.append(clue)
        rounds = 0
        while True:
            found = solve(n, m, clues, limit=2)
            if len(found) == 1:
                break
            rounds += 1
            other = next(s for s in found if s != houses)
            while True:
                clue = random_clue(rng, houses, n, m)
                if clue is not None and clue not in clues and not holds(clue, other):
                    clues.append(clue)
                    break
        reference = ZebraReference(attributes=attributes, values=values, clues=clues)
        listing = "\n".join(f"- {a}: {', '.join(vs)}" for a, vs in zip(attributes, values, strict=True))
        told = "\n".join(f"{i + 1}. {describe(c, values, attributes)}" for i, c in enumerate(clues))
        question = (
            f"There are {n} houses in a row, numbered 1 to {n} from left to right. Each house has exactly one "
            f"value of each attribute, and no two houses share a value:\n{listing}\n\nClues:\n{told}\n\n"
            f"Give every house's values. Answer with {n} lines, one per house, in the form "
            f"'House k: {', '.join(attributes)}' (the values in that attribute order)."
        )
        lines = []
        for house in range(n):
            row = [values[a][houses[a].index(house)] for a in range(m)]
            lines.append(f"House {house + 1}: {', '.join(row)}")
        return Puzzle(
            question,
            reference,
            "\n".join(lines),
            {"houses": n, "attributes": m, "clues": len(clues), "rounds": rounds},
        )

    def key(self, reference: ZebraReference) -> str:
        """The puzzle's content with its clues as a set: the same clues in another order are the same puzzle."""
        data = reference.model_dump(mode="json")
        data["clues"] = sorted(canonical(clue) for clue in data["clues"])
        return canonical(data)

    def check(self, answer: str, reference: ZebraReference) -> Checked:
        """A full assignment that satisfies every clue."""
        houses = parse_solution(answer, reference.values)
        if houses is None:
            return Checked.malformed("malformed", expected="one 'House k: values' line per house")
        for index, clue in enumerate(reference.clues):
            if not holds(clue, houses):
                return Checked.wrong("clue_broken", clue=index + 1)
        return Checked.right()

    def random_answer(self, rng: random.Random, reference: ZebraReference) -> str:
        """Random values for every house."""
        n = len(reference.values[0])
        columns = [rng.sample(vs, n) for vs in reference.values]
        return "\n".join(f"House {h + 1}: {', '.join(col[h] for col in columns)}" for h in range(n))


register_family(Zebra)
