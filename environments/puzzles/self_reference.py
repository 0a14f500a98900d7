"""Self-referential truth puzzles: n statements about each other; give every consistent truth assignment.

An assignment (statement 1 first, T or F each) is consistent when every statement marked T holds and every
statement marked F fails. The generator finds every consistent assignment by exhaustive search over all 2^n
and keeps puzzles with 1..max_solutions of them. The answer lists them all (any order), so the answer space
is large even though a puzzle has few solutions (asking only for their count, 1..4, would let a guess win).
The checker evaluates each listed assignment against the statements and requires as many distinct
consistent ones as the search found.
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

MAX_STATEMENTS = 12

_PRIMES = frozenset({2, 3, 5, 7, 11, 13})
_COMPOSITES = frozenset({4, 6, 8, 9, 10, 12, 14})
_SQUARES = frozenset({0, 1, 4, 9, 16})

Kind = Literal[
    "atleast_true",
    "atmost_true",
    "exactly_true",
    "atleast_false",
    "atmost_false",
    "exactly_false",
    "is_true",
    "is_false",
    "xor",
    "both",
    "neither",
    "implies",
    "prime_true",
    "composite_false",
    "even_true",
    "odd_false",
    "square_true",
]
COUNT_KINDS = (
    "atleast_true",
    "atmost_true",
    "exactly_true",
    "atleast_false",
    "atmost_false",
    "exactly_false",
)
PAIR_KINDS = ("xor", "both", "neither", "implies")
SINGLE_KINDS = ("is_true", "is_false")
GLOBAL_KINDS = ("prime_true", "composite_false", "even_true", "odd_false", "square_true")


class Statement(PuzzleReference):
    """One statement: its kind, the number it names (count kinds) and the statements it names (0-based)."""

    kind: Kind
    k: int = Field(default=0, ge=0, le=MAX_STATEMENTS)
    i: int = Field(default=0, ge=0, lt=MAX_STATEMENTS)
    j: int = Field(default=0, ge=0, lt=MAX_STATEMENTS)


class SelfReferenceConfig(PuzzleConfig):
    """Difficulty knobs: how many statements, and how many consistent assignments a puzzle may have."""

    statements: int = Field(default=8, ge=4, le=MAX_STATEMENTS, description="Number of statements.")
    max_solutions: int = Field(default=3, ge=1, le=4, description="Most consistent assignments a puzzle has.")
    link_weight: int = Field(
        default=3, ge=0, le=10, description="Weight of statements about other statements (vs about counts)."
    )


class SelfReferenceReference(PuzzleReference):
    """The statements and how many consistent assignments exhaustive search found."""

    statements: list[Statement] = Field(min_length=4, max_length=MAX_STATEMENTS)
    solutions: int = Field(ge=1, le=1 << MAX_STATEMENTS)

    @model_validator(mode="after")
    def _indices_in_range(self) -> SelfReferenceReference:
        n = len(self.statements)
        for s in self.statements:
            if s.i >= n or s.j >= n or s.k > n:
                raise ValueError("a statement names a statement or a count beyond the puzzle's size")
        return self


def holds(s: Statement, values: tuple[bool, ...], n_true: int) -> bool:
    """Whether a statement's claim is true under `values` (an assignment with n_true statements true)."""
    kind = s.kind
    n_false = len(values) - n_true
    if kind == "atleast_true":
        return n_true >= s.k
    if kind == "atmost_true":
        return n_true <= s.k
    if kind == "exactly_true":
        return n_true == s.k
    if kind == "atleast_false":
        return n_false >= s.k
    if kind == "atmost_false":
        return n_false <= s.k
    if kind == "exactly_false":
        return n_false == s.k
    if kind == "is_true":
        return values[s.i]
    if kind == "is_false":
        return not values[s.i]
    if kind == "xor":
        return values[s.i] != values[s.j]
    if kind == "both":
        return values[s.i] and values[s.j]
    if kind == "neither":
        return not values[s.i] and not values[s.j]
    if kind == "implies":
        return (not values[s.i]) or values[s.j]
    if kind == "prime_true":
        return n_true in _PRIMES
    if kind == "composite_false":
        return n_false in _COMPOSITES
    if kind == "even_true":
        return n_true % 2 == 0
    if kind == "odd_false":
        return n_false % 2 == 1
    return n_true in _SQUARES  # square_true


def consistent(statements: list[Statement], values: tuple[bool, ...]) -> bool:
    """Whether every statement marked true holds and every statement marked false fails."""
    n_true = sum(values)
    return all(holds(s, values, n_true) == v for s, v in zip(statements, values, strict=True))


def to_values(assignment: str) -> tuple[bool, ...]:
    """'TFT' -> (True, False, True)."""
    return tuple(c == "T" for c in assignment)


def solutions(statements: list[Statement]) -> list[str]:
    """Every consistent assignment as a T/F string, by exhaustive search over all 2^n assignments.

    Claims about counts depend only on how many statements are true, so they are tabulated once per count;
    claims about other statements are evaluated per assignment.
    """
    n = len(statements)
    counted = [k for k, s in enumerate(statements) if s.kind not in PAIR_KINDS and s.kind not in SINGLE_KINDS]
    linked = [k for k in range(n) if k not in counted]
    expected_by_count = []
    for n_true in range(n + 1):
        dummy = (True,) * n_true + (False,) * (n - n_true)
        expected_by_count.append([holds(statements[k], dummy, n_true) for k in counted])
    found = []
    for mask in range(1 << n):
        values = tuple(bool(mask >> (n - 1 - i) & 1) for i in range(n))
        n_true = mask.bit_count()
        if [values[k] for k in counted] != expected_by_count[n_true]:
            continue
        if all(holds(statements[k], values, n_true) == values[k] for k in linked):
            found.append("".join("T" if v else "F" for v in values))
    return found


def statement_text(s: Statement, n: int) -> str:
    """The English sentence for a statement."""
    kind = s.kind
    if kind in COUNT_KINDS:
        bound, side = kind.split("_")
        word = {"atleast": "At least", "atmost": "At most", "exactly": "Exactly"}[bound]
        verb = "is" if s.k == 1 else "are"
        return f"{word} {s.k} of these {n} statements {verb} {side}."
    i, j = s.i + 1, s.j + 1
    texts = {
        "is_true": f"Statement {i} is true.",
        "is_false": f"Statement {i} is false.",
        "xor": f"Exactly one of statement {i} and statement {j} is true.",
        "both": f"Statement {i} and statement {j} are both true.",
        "neither": f"Statement {i} and statement {j} are both false.",
        "implies": f"If statement {i} is true, then statement {j} is true.",
        "prime_true": "The number of true statements is a prime number.",
        "composite_false": "The number of false statements is a composite number.",
        "even_true": "The number of true statements is even (zero is even).",
        "odd_false": "The number of false statements is odd.",
        "square_true": "The number of true statements is a perfect square (0, 1, 4, 9, ...).",
    }
    return texts[kind]


def random_statement(rng: random.Random, index: int, n: int, link_weight: int) -> Statement:
    """One random statement for position `index` among n statements."""
    group = rng.choices(("count", "link", "global"), weights=(4, link_weight, 2))[0]
    if group == "count":  # bounds that make a claim always true ("at least 0") are left out
        kind = rng.choice(COUNT_KINDS)
        low, high = (
            (1, n) if kind.startswith("atleast") else (0, n - 1) if kind.startswith("atmost") else (0, n)
        )
        return Statement(kind=kind, k=rng.randint(low, high))
    if group == "global":
        return Statement(kind=rng.choice(GLOBAL_KINDS))
    others = [k for k in range(n) if k != index]
    if rng.random() < 0.3:
        return Statement(kind=rng.choice(SINGLE_KINDS), i=rng.choice(others))
    i, j = rng.sample(others, 2)
    return Statement(kind=rng.choice(PAIR_KINDS), i=i, j=j)


_SPLIT = re.compile(r"[\s,;]+")
_ASSIGNMENT = re.compile(r"[TF]+")


def parse_assignments(text: str, n: int) -> list[str] | None:
    """Distinct T/F strings of length n separated by commas or blanks; None when malformed."""
    tokens = [t for t in _SPLIT.split(text.strip().upper()) if t]
    if not tokens or len(tokens) > 1 << n:
        return None
    if any(len(t) != n or not _ASSIGNMENT.fullmatch(t) for t in tokens):
        return None
    if len(set(tokens)) != len(tokens):
        return None
    return tokens


class SelfReference(PuzzleFamily[SelfReferenceConfig, SelfReferenceReference]):
    """Self-referential statements; list every consistent truth assignment."""

    name = "self_reference"
    description = "Self-referential truth puzzles: list every consistent truth assignment of n statements."
    Config = SelfReferenceConfig
    Reference = SelfReferenceReference
    max_answer_chars = 400
    levels = {
        "easy": {"statements": 6, "max_solutions": 2, "link_weight": 2},
        "medium": {"statements": 8, "max_solutions": 3, "link_weight": 3},
        "hard": {"statements": 10, "max_solutions": 4, "link_weight": 4},
    }

    def generate(self, rng: random.Random, config: SelfReferenceConfig) -> Puzzle[SelfReferenceReference]:
        """Draw statements until the puzzle has between 1 and max_solutions consistent assignments."""
        n = config.statements
        while True:
            statements = [random_statement(rng, index, n, config.link_weight) for index in range(n)]
            found = solutions(statements)
            if 1 <= len(found) <= config.max_solutions:
                break
        lines = "\n".join(f"{k + 1}. {statement_text(s, n)}" for k, s in enumerate(statements))
        question = (
            f"Here are {n} statements, each of which is either true or false:\n{lines}\n\n"
            "An assignment of true/false to the statements is consistent when every true statement's claim "
            "holds and every false statement's claim does not. Find every consistent assignment. Write each "
            f"as {n} letters, T or F, statement 1 first (like TFF...); separate several "
            "assignments with commas. At least one consistent assignment exists."
        )
        reference = SelfReferenceReference(statements=statements, solutions=len(found))
        measure = {"statements": n, "solutions": len(found)}
        return Puzzle(question=question, reference=reference, gold=", ".join(found), measure=measure)

    def check(self, answer: str, reference: SelfReferenceReference) -> Checked:
        """Every listed assignment must be consistent, and as many distinct ones as exist must be listed."""
        n = len(reference.statements)
        listed = parse_assignments(answer, n)
        if listed is None:
            return Checked.malformed("not_assignments")
        for assignment in listed:
            if not consistent(reference.statements, to_values(assignment)):
                return Checked.wrong("inconsistent_assignment", assignment=assignment)
        if len(listed) != reference.solutions:
            return Checked.wrong("missing_assignments", listed=len(listed), expected=reference.solutions)
        return Checked.right()

    def random_answer(self, rng: random.Random, reference: SelfReferenceReference) -> str:
        """One to three random T/F strings of the right length."""
        n = len(reference.statements)
        picks = rng.sample(range(1 << n), min(rng.randint(1, 3), 1 << n))
        return ", ".join(format(p, f"0{n}b").replace("1", "T").replace("0", "F") for p in picks)


register_family(SelfReference)
