"""`puzzle.knights_knaves`: knights always tell the truth, knaves always lie; say who is which.

Each inhabitant makes one statement. The generator keeps a puzzle only when exactly one assignment is
consistent (checked over all 2^n assignments), so the answer is unique; the checker still judges by the
rules: an answer scores 1 when every knight's statement is true and every knave's is false.
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

NAMES = (
    "Alice", "Ben", "Clara", "David", "Ella", "Felix", "Grace", "Henry", "Iris", "Jack", "Kate", "Leo",
    "Maya", "Noah", "Olivia", "Paul", "Quinn", "Rosa", "Sam", "Tara", "Uma", "Victor", "Wendy", "Xavier",
    "Yara", "Zoe",
)  # fmt: skip
MAX_PEOPLE = 8
Kind = Literal["is", "both", "either", "same", "different", "count", "implies"]
KINDS: tuple[str, ...] = ("is", "both", "either", "same", "different", "count", "implies")
_ENTRY = re.compile(r"([A-Za-z]+)\s*(?:is\s+an?|:|-|=|—)?\s*(knight|knave)s?", re.IGNORECASE)
_SPLIT = re.compile(r"\s*(?:[,;\n]|\band\b)\s*", re.IGNORECASE)


class KnightsConfig(PuzzleConfig):
    """How many inhabitants."""

    min_people: int = Field(default=5, ge=2, le=MAX_PEOPLE)
    max_people: int = Field(default=6, ge=2, le=MAX_PEOPLE)


class Statement(PuzzleReference):
    """One inhabitant's claim: about persons a (and b), with claimed kinds ka/kb, or a count k of knights."""

    kind: Kind
    a: int = Field(default=0, ge=0, lt=MAX_PEOPLE)
    b: int = Field(default=0, ge=0, lt=MAX_PEOPLE)
    ka: bool = True
    kb: bool = True
    k: int = Field(default=0, ge=0, le=MAX_PEOPLE)


class KnightsReference(PuzzleReference):
    """The inhabitants' names and each one's statement (statement i is said by person i)."""

    names: list[str] = Field(min_length=2, max_length=MAX_PEOPLE)
    statements: list[Statement] = Field(min_length=2, max_length=MAX_PEOPLE)

    @model_validator(mode="after")
    def _consistent(self) -> KnightsReference:
        n = len(self.names)
        if len(self.statements) != n or len({name.lower() for name in self.names}) != n:
            raise ValueError("one statement per person, distinct names")
        if any(not name.isascii() or not name.isalpha() or len(name) > 20 for name in self.names):
            raise ValueError("names are ASCII letters")
        if any(s.a >= n or s.b >= n for s in self.statements):
            raise ValueError("statements must name inhabitants")
        return self


def holds(statement: Statement, knights: tuple[bool, ...]) -> bool:
    """Whether the statement is true when `knights[i]` says person i is a knight."""
    a, b = knights[statement.a], knights[statement.b]
    if statement.kind == "is":
        return a == statement.ka
    if statement.kind == "both":
        return a == statement.ka and b == statement.kb
    if statement.kind == "either":
        return a == statement.ka or b == statement.kb
    if statement.kind == "same":
        return a == b
    if statement.kind == "different":
        return a != b
    if statement.kind == "count":
        return sum(knights) == statement.k
    return a != statement.ka or b == statement.kb  # implies


def consistent(reference: KnightsReference, knights: tuple[bool, ...]) -> bool:
    """Knights say true things, knaves false ones."""
    return all(holds(s, knights) == knights[i] for i, s in enumerate(reference.statements))


def solutions(reference: KnightsReference) -> list[tuple[bool, ...]]:
    """Every consistent assignment, by enumeration."""
    n = len(reference.names)
    found = []
    for mask in range(1 << n):
        knights = tuple(bool(mask >> i & 1) for i in range(n))
        if consistent(reference, knights):
            found.append(knights)
    return found


def _kind(knight: bool) -> str:
    return "a knight" if knight else "a knave"


def say(statement: Statement, names: list[str]) -> str:
    """The statement in English."""
    a, b = names[statement.a], names[statement.b]
    if statement.kind == "is":
        return f"{a} is {_kind(statement.ka)}."
    if statement.kind == "both":
        return f"{a} is {_kind(statement.ka)} and {b} is {_kind(statement.kb)}."
    if statement.kind == "either":
        return f"{a} is {_kind(statement.ka)} or {b} is {_kind(statement.kb)} (or both)."
    if statement.kind == "same":
        return f"{a} and {b} are the same kind."
    if statement.kind == "different":
        return f"{a} and {b} are different kinds."
    if statement.kind == "count":
        return f"Exactly {statement.k} of us {'is a knight' if statement.k == 1 else 'are knights'}."
    return f"If {a} is {_kind(statement.ka)}, then {b} is {_kind(statement.kb)}."


def random_statement(rng: random.Random, speaker: int, n: int) -> Statement:
    """A random claim about others (and sometimes the speaker)."""
    kind = rng.choice(KINDS)
    others = [i for i in range(n) if i != speaker]
    a, b = rng.sample(others, 2) if len(others) >= 2 else (others[0], speaker)
    return Statement(
        kind=kind,
        a=a,
        b=b,
        ka=rng.random() < 0.5,
        kb=rng.random() < 0.5,
        k=rng.randint(0, n) if kind == "count" else 0,
    )


def parse_assignment(answer: str, names: list[str]) -> tuple[bool, ...] | None:
    """`Name: knight, Name: knave, ...` (or `Name is a knight`), every name exactly once; else None."""
    index = {name.lower(): i for i, name in enumerate(names)}
    found: dict[int, bool] = {}
    for part in _SPLIT.split(answer.strip().rstrip(".")):
        if not part:
            continue
        match = _ENTRY.fullmatch(part.strip().rstrip("."))
        if match is None or match.group(1).lower() not in index:
            return None
        person = index[match.group(1).lower()]
        if person in found:
            return None
        found[person] = match.group(2).lower() == "knight"
    if len(found) != len(names):
        return None
    return tuple(found[i] for i in range(len(names)))


class KnightsKnaves(PuzzleFamily[KnightsConfig, KnightsReference]):
    """Who is a knight and who is a knave."""

    name = "knights_knaves"
    version = "1"
    description = "Knights tell the truth, knaves lie: deduce every inhabitant's kind (unique solution)."
    Config = KnightsConfig
    Reference = KnightsReference
    levels = {
        "easy": {"min_people": 3, "max_people": 4},
        "medium": {"min_people": 5, "max_people": 6},
        "hard": {"min_people": 7, "max_people": 8},
    }
    max_answer_chars = 400

    def generate(self, rng: random.Random, config: KnightsConfig) -> Puzzle[KnightsReference]:
        """Random statements until exactly one assignment is consistent."""
        n = rng.randint(config.min_people, max(config.min_people, config.max_people))
        names = sorted(rng.sample(NAMES, n))
        tries = 0
        while True:
            tries += 1
            statements = [random_statement(rng, i, n) for i in range(n)]
            reference = KnightsReference(names=names, statements=statements)
            found = solutions(reference)
            if len(found) == 1:
                break
        lines = "\n".join(f'{names[i]} says: "{say(s, names)}"' for i, s in enumerate(statements))
        question = (
            "On an island, knights always tell the truth and knaves always lie. Every inhabitant is one or "
            f"the other. You meet {n} inhabitants: {', '.join(names)}.\n{lines}\n\n"
            "Who is a knight and who is a knave? Answer in the form "
            f"{names[0]}: knight, {names[1]}: knave, ... listing every inhabitant once."
        )
        gold = ", ".join(
            f"{name}: {'knight' if k else 'knave'}" for name, k in zip(names, found[0], strict=True)
        )
        return Puzzle(question, reference, gold, {"people": n, "tries": tries, "knights": sum(found[0])})

    def check(self, answer: str, reference: KnightsReference) -> Checked:
        """The assignment makes every knight's statement true and every knave's false."""
        knights = parse_assignment(answer, reference.names)
        if knights is None:
            return Checked.malformed("malformed", expected="Name: knight|knave for every inhabitant")
        return Checked.right() if consistent(reference, knights) else Checked.wrong("inconsistent")

    def random_answer(self, rng: random.Random, reference: KnightsReference) -> str:
        """A random assignment."""
        return ", ".join(f"{name}: {rng.choice(('knight', 'knave'))}" for name in reference.names)


register_family(KnightsKnaves)
