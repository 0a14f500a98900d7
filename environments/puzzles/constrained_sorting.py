"""`puzzle.constrained_sorting`: sort a table of records by several keys, with tie and missing-value rules.

Keys are numeric (ascending or descending), text (alphabetical or reverse) or categorical with a given custom
order; a key may have missing values (shown as `-`) that go first or last. Records equal on every key follow
the puzzle's tie rule: `any` (any order among them), `input` (the order of the table) or `name` (alphabetical
by name). The answer is every record's name, comma-separated, in sorted order. The checker accepts any order
the rules allow: it checks that the answer is a permutation of the names and that each adjacent pair is in
order under the keys (and the tie rule), so with tie rule `any` several answers are right.
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

MAX_RECORDS = 30
MAX_KEYS = 4

NAMES = (
    "Ada", "Bela", "Cyrus", "Dara", "Emil", "Fiona", "Goran", "Hana", "Ivo", "Jana", "Kofi", "Lena", "Milo",
    "Nora", "Omar", "Pia", "Quinn", "Rosa", "Sami", "Tara", "Ugo", "Vera", "Wes", "Xena", "Yuri", "Zara",
    "Arlo", "Bruno", "Cleo", "Dmitri", "Elsa", "Femi", "Gwen", "Hugo", "Iris", "Joel", "Kira", "Luca",
    "Maya", "Nils", "Olga", "Paco", "Rhea", "Soren", "Tomas", "Uma", "Vito", "Wanda", "Yara", "Zeno",
)  # fmt: skip
CITIES = ("Oslo", "Lima", "Kyiv", "Pune", "Rome", "Baku", "Doha", "Nice", "Lyon", "Gent", "Bern", "Cork")
TEAMS = ("red", "blue", "green", "gold", "gray")
LEVEL_ORDER = ("low", "medium", "high", "urgent")

SortField = Literal["age", "score", "city", "team", "level", "name"]
NUMERIC = ("age", "score")
TEXT = ("city", "name")
CATEGORICAL = {"team": TEAMS, "level": LEVEL_ORDER}
TieRule = Literal["any", "input", "name"]

_NUMBERING = re.compile(r"^\s*(?:\d{1,2}[.):]|[-*])\s*")
_SPLIT = re.compile(r"\s*[,;\n]\s*")


class SortingConfig(PuzzleConfig):
    """Difficulty knobs: records, sort keys, custom orders, missing values and tie rules."""

    records: int = Field(default=9, ge=4, le=MAX_RECORDS)
    keys: int = Field(default=2, ge=1, le=MAX_KEYS - 1, description="Sort keys before the tie rule.")
    custom_orders: bool = Field(default=True, description="Categorical keys in a stated custom order.")
    missing_share: float = Field(default=0.0, ge=0.0, le=0.5, description="Share of missing numeric values.")
    tie_rules: list[TieRule] = Field(default=["any", "input", "name"], min_length=1, max_length=3)


class SortKey(PuzzleReference):
    """One key: the field, its direction, where missing values go, and a custom order (categorical)."""

    field: SortField
    descending: bool = False
    missing_first: bool = False
    order: list[str] = Field(default_factory=list, max_length=8)


class Row(PuzzleReference):
    """One record (None = missing value)."""

    name: str = Field(min_length=1, max_length=20)
    age: int | None = Field(default=None, ge=0, le=200)
    score: int | None = Field(default=None, ge=0, le=1000)
    city: str = Field(default="", max_length=20)
    team: str = Field(default="", max_length=20)
    level: str = Field(default="", max_length=20)


class SortingReference(PuzzleReference):
    """The table (in its shown order), the keys and the tie rule."""

    rows: list[Row] = Field(min_length=2, max_length=MAX_RECORDS)
    keys: list[SortKey] = Field(min_length=1, max_length=MAX_KEYS)
    tie_rule: TieRule

    @model_validator(mode="after")
    def _consistent(self) -> SortingReference:
        names = [row.name.lower() for row in self.rows]
        if len(set(names)) != len(names):
            raise ValueError("names must be distinct")
        for key in self.keys:
            if key.field in CATEGORICAL:
                if not key.order:
                    raise ValueError(f"key {key.field} needs its order")
                if any(getattr(row, key.field) not in key.order for row in self.rows):
                    raise ValueError(f"a value of {key.field} is not in its order")
        return self


def component(row: Row, key: SortKey) -> tuple:
    """A comparable value for one key, ascending (descending keys are flipped by `compare`)."""
    value = getattr(row, key.field)
    if key.field in CATEGORICAL:
        return (0, key.order.index(value))
    if value is None:
        return (-1 if key.missing_first else 1, 0)
    return (0, value)


def compare(a: Row, b: Row, keys: list[SortKey]) -> int:
    """-1, 0 or 1: how a and b compare under the keys (missing-value placement ignores the direction)."""
    for key in keys:  # a categorical key's custom order is never reversed
        x, y = component(a, key), component(b, key)
        if x == y:
            continue
        if x[0] != y[0]:
            return -1 if x[0] < y[0] else 1
        smaller = x < y
        descending = key.descending and key.field not in CATEGORICAL
        return (1 if smaller else -1) if descending else (-1 if smaller else 1)
    return 0


def in_order(rows: list[Row], indexes: list[int], reference: SortingReference) -> int | None:
    """The position of the first adjacent pair out of order (rows given by table index), or None."""
    for position in range(len(indexes) - 1):
        i, j = indexes[position], indexes[position + 1]
        order = compare(rows[i], rows[j], reference.keys)
        if order > 0:
            return position
        if order == 0:
            if reference.tie_rule == "input" and i > j:
                return position
            if reference.tie_rule == "name" and rows[i].name.lower() > rows[j].name.lower():
                return position
    return None


def sorted_indexes(reference: SortingReference) -> list[int]:
    """One order the rules allow: sorted by the keys, ties by the rule (input order for `any`)."""
    rows = reference.rows
    indexes = list(range(len(rows)))
    if reference.tie_rule == "name":
        indexes.sort(key=lambda i: rows[i].name.lower())
    # insertion sort by `compare`: stable, and n is small
    result: list[int] = []
    for i in indexes:
        position = len(result)
        while position > 0 and compare(rows[result[position - 1]], rows[i], reference.keys) > 0:
            position -= 1
        result.insert(position, i)
    return result


def key_text(key: SortKey, missing: bool) -> str:
    """How a key is stated in the question."""
    if key.field in CATEGORICAL:
        return f"{key.field} in the order {', '.join(key.order)}"
    if key.field in TEXT:
        return f"{key.field} {'in reverse alphabetical order (Z to A)' if key.descending else 'alphabetically (A to Z)'}"
    text = f"{key.field} {'from highest to lowest' if key.descending else 'from lowest to highest'}"
    if not missing:
        return text
    return (
        text
        + f" (records with a missing {key.field}, shown as -, {'first' if key.missing_first else 'last'})"
    )


TIE_TEXT = {
    "any": "Records that are equal on all of these may appear in any order.",
    "input": "Records that are equal on all of these keep their order from the table.",
    "name": "Records that are equal on all of these are ordered by name alphabetically.",
}


def parse_names(text: str, limit: int) -> list[str] | None:
    """Names separated by commas, semicolons or lines (optionally numbered), lower-cased; None if malformed."""
    parts = [_NUMBERING.sub("", p).strip().strip(".") for p in _SPLIT.split(text.strip())]
    parts = [p.lower() for p in parts if p]
    if not parts or len(parts) > limit:
        return None
    return parts


class ConstrainedSorting(PuzzleFamily[SortingConfig, SortingReference]):
    """Multi-key sorting with tie rules, custom orders and missing values."""

    name = "constrained_sorting"
    description = "Sort records by several keys with custom orders, missing values and tie rules."
    Config = SortingConfig
    Reference = SortingReference
    max_answer_chars = 600
    levels = {
        "easy": {"records": 6, "keys": 1, "custom_orders": False, "tie_rules": ["input", "name"]},
        "medium": {"records": 9, "keys": 2, "custom_orders": True},
        "hard": {"records": 14, "keys": 3, "custom_orders": True, "missing_share": 0.2},
    }

    def generate(self, rng: random.Random, config: SortingConfig) -> Puzzle[SortingReference]:
        """Draw a table with deliberate ties, then keys and a tie rule."""
        names = rng.sample(NAMES, config.records)
        ages = [rng.randint(18, 70) for _ in range(max(2, config.records // 2))]  # repeats make ties
        rows = []
        for name in names:

            def maybe(value: int) -> int | None:
                return None if rng.random() < config.missing_share else value

            rows.append(
                Row(
                    name=name,
                    age=maybe(rng.choice(ages)),
                    score=maybe(rng.randrange(0, 101, 5)),
                    city=rng.choice(CITIES[:6]),
                    # columns the table does not show stay empty: the reference is the puzzle and nothing else
                    team=rng.choice(TEAMS) if config.custom_orders else "",
                    level=rng.choice(LEVEL_ORDER) if config.custom_orders else "",
                )
            )
        fields = list(NUMERIC) + ["city"] + (list(CATEGORICAL) if config.custom_orders else [])
        keys = []
        for field in rng.sample(fields, config.keys):
            order: list[str] = []
            if field in CATEGORICAL:
                order = list(CATEGORICAL[field])
                rng.shuffle(order)
            keys.append(
                SortKey(
                    field=field,
                    descending=field not in CATEGORICAL and rng.random() < 0.5,
                    missing_first=config.missing_share > 0 and field in NUMERIC and rng.random() < 0.5,
                    order=order,
                )
            )
        tie_rule = rng.choice(config.tie_rules)
        reference = SortingReference(rows=rows, keys=keys, tie_rule=tie_rule)
        columns = ["name", "age", "score", "city"] + (list(CATEGORICAL) if config.custom_orders else [])
        header = "| " + " | ".join(columns) + " |"
        lines = [header, "|" + "---|" * len(columns)]
        for row in rows:
            cells = [getattr(row, c) for c in columns]
            lines.append("| " + " | ".join("-" if c is None else str(c) for c in cells) + " |")
        missing = config.missing_share > 0
        rules = "\n".join(
            f"{i + 1}. by {key_text(k, missing and k.field in NUMERIC)}" for i, k in enumerate(keys)
        )
        question = (
            "Sort these records:\n"
            + "\n".join(lines)
            + f"\n\nSort by these keys, the first deciding first:\n"
            f"{rules}\n{TIE_TEXT[tie_rule]}\n"
            "Answer with all the names in sorted order, separated by commas."
        )
        order = sorted_indexes(reference)
        gold = ", ".join(rows[i].name for i in order)
        ties = sum(1 for a, b in zip(order, order[1:], strict=False) if compare(rows[a], rows[b], keys) == 0)
        measure = {"records": len(rows), "keys": len(keys), "tied_pairs": ties, "tie_rule": tie_rule}
        return Puzzle(question=question, reference=reference, gold=gold, measure=measure)

    def check(self, answer: str, reference: SortingReference) -> Checked:
        """A permutation of the names, each adjacent pair in order by the keys and the tie rule."""
        rows = reference.rows
        given = parse_names(answer, 2 * len(rows))
        if given is None:
            return Checked.malformed("not_names")
        index = {row.name.lower(): i for i, row in enumerate(rows)}
        if any(name not in index for name in given):
            return Checked.malformed("unknown_name")
        indexes = [index[name] for name in given]
        if len(indexes) != len(rows) or len(set(indexes)) != len(rows):
            return Checked.wrong("not_a_permutation")
        bad = in_order(rows, indexes, reference)
        return Checked.right() if bad is None else Checked.wrong("out_of_order", position=bad + 1)

    def random_answer(self, rng: random.Random, reference: SortingReference) -> str:
        """The names in a random order."""
        names = [row.name for row in reference.rows]
        rng.shuffle(names)
        return ", ".join(names)


register_family(ConstrainedSorting)
