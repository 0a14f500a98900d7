"""`puzzle.arithmetic_chain`: templated word problems over a chain of arithmetic steps; exact integer answer.

A person starts with some items; each step (buying packs, giving some away, collecting for several days,
giving away a fraction or a percentage, doubling, splitting into boxes) changes the count. Steps are only
chosen when their result is a whole, positive number, so the story never asks for half an apple. The
question asks for the final count, or for the change since the start (negative when there are fewer). The
reference holds the steps as data; the checker replays them and compares integers exactly (format in
`_numbers`: `-4.0` is -4, `-40` is not -4).
"""

from __future__ import annotations

import random
import re
from typing import Literal

from pydantic import Field

from proctor.environments.puzzles._numbers import parse_integer
from proctor.environments.puzzles.answer import Checked
from proctor.environments.puzzles.base import (
    Puzzle,
    PuzzleConfig,
    PuzzleFamily,
    PuzzleReference,
    register_family,
)

MAX_STEPS = 20
MAX_VALUE = 10**12

Op = Literal["packs", "receive", "give", "days", "fraction", "percent", "multiply", "split"]
OPS: tuple[Op, ...] = ("packs", "receive", "give", "days", "fraction", "percent", "multiply", "split")

PEOPLE = (
    ("Amara", "her"), ("Bashir", "his"), ("Chen", "his"), ("Dalia", "her"), ("Elif", "her"), ("Farid", "his"),
    ("Greta", "her"), ("Hiro", "his"), ("Ines", "her"), ("Jonas", "his"), ("Kemal", "his"), ("Lucia", "her"),
    ("Mateo", "his"), ("Nadia", "her"), ("Oskar", "his"), ("Priya", "her"), ("Rafael", "his"), ("Sofia", "her"),
    ("Tariq", "his"), ("Ulla", "her"), ("Viktor", "his"), ("Wen", "her"), ("Yusuf", "his"), ("Zofia", "her"),
)  # fmt: skip
FRIENDS = ("a neighbour", "a cousin", "a classmate", "a friend", "an uncle", "a teacher", "a colleague")
ITEMS = (
    "marbles", "stickers", "apples", "coins", "books", "trading cards", "sea shells", "pencils", "stamps",
    "cookies", "beads", "postcards", "buttons", "seeds", "bottle caps", "keychains",
)  # fmt: skip
FRACTIONS = {2: "half", 3: "a third", 4: "a quarter", 5: "a fifth"}
MULTIPLIERS = {2: "doubles", 3: "triples"}
PERCENTS = (10, 20, 25, 40, 50, 60, 75)
_UNIT_SUFFIX = re.compile(r"\s+[a-z][a-z ]*\.?\s*$", re.IGNORECASE)


class ChainConfig(PuzzleConfig):
    """Difficulty knobs: number of steps and the size of the numbers."""

    steps: int = Field(default=5, ge=1, le=MAX_STEPS)
    max_start: int = Field(default=200, ge=20, le=10**6, description="Largest starting count.")
    max_operand: int = Field(default=30, ge=5, le=10**4, description="Largest number a step adds or takes.")
    change_share: float = Field(
        default=0.3, ge=0.0, le=1.0, description="Share asking for the change, not the total."
    )


class Step(PuzzleReference):
    """One step: the operation and its numbers (`a`, and `b` for packs and days)."""

    op: Op
    a: int = Field(ge=0, le=10**6)
    b: int = Field(default=0, ge=0, le=10**6)


class ChainReference(PuzzleReference):
    """The starting count, the steps, and whether the question asks for the final count or the change."""

    start: int = Field(ge=0, le=10**6)
    steps: list[Step] = Field(min_length=1, max_length=MAX_STEPS)
    ask: Literal["final", "change"]


def apply(value: int, step: Step) -> int | None:
    """The count after one step, or None when the step does not give a whole, positive count."""
    op, a, b = step.op, step.a, step.b
    if op == "packs" or op == "days":
        result = value + a * b
    elif op == "receive":
        result = value + a
    elif op == "give":
        result = value - a
    elif op == "fraction":
        if a < 2 or value % a:
            return None
        result = value - value // a
    elif op == "percent":
        if value * a % 100:
            return None
        result = value - value * a // 100
    elif op == "multiply":
        result = value * a
    else:  # split: keep one of `a` equal boxes
        if a < 2 or value % a:
            return None
        result = value // a
    return result if 0 < result <= MAX_VALUE else None


def replay(reference: ChainReference) -> int | None:
    """The answer the steps give (final count or change), or None when a step is impossible."""
    value = reference.start
    for step in reference.steps:
        value = apply(value, step)  # type: ignore[assignment]
        if value is None:
            return None
    return value if reference.ask == "final" else value - reference.start


def step_text(step: Step, name: str, pronoun: str, items: str, friend: str) -> str:
    """The sentence for one step."""
    op, a, b = step.op, step.a, step.b
    if op == "packs":
        return f"{name} buys {a} packs with {b} {items} in each pack."
    if op == "days":
        return f"For the next {a} days, {name} collects {b} {items} every day."
    if op == "receive":
        return f"Then {friend} gives {name} {a} more {items}."
    if op == "give":
        return f"{name} gives {a} {items} to {friend}."
    if op == "fraction":
        return f"{name} sells {FRACTIONS[a]} of {pronoun} {items}."
    if op == "percent":
        return f"{name} gives away {a}% of {pronoun} {items}."
    if op == "multiply":
        return f"After a lucky trade, the number of {items} {name} has {MULTIPLIERS[a]}."
    return f"{name} splits all of {pronoun} {items} equally into {a} boxes, gives away all but one box, and keeps that one."


def random_step(rng: random.Random, value: int, config: ChainConfig) -> Step | None:
    """A step that keeps the count whole and positive, or None when the drawn one does not."""
    op = rng.choice(OPS)
    top = config.max_operand
    if op == "packs":
        step = Step(op=op, a=rng.randint(2, 9), b=rng.randint(2, max(2, top // 3)))
    elif op == "days":
        step = Step(op=op, a=rng.randint(2, 7), b=rng.randint(2, max(2, top // 3)))
    elif op == "receive":
        step = Step(op=op, a=rng.randint(2, top))
    elif op == "give":
        step = Step(op=op, a=rng.randint(1, min(top, value - 1))) if value > 1 else None
    elif op == "fraction":
        step = Step(op=op, a=rng.choice(sorted(FRACTIONS)))
    elif op == "percent":
        step = Step(op=op, a=rng.choice(PERCENTS))
    elif op == "multiply":
        step = Step(op=op, a=rng.choice(sorted(MULTIPLIERS))) if value <= 10 * config.max_start else None
    else:
        step = Step(op=op, a=rng.randint(2, 5))
    if step is None or apply(value, step) is None:
        return None
    return step


class ArithmeticChain(PuzzleFamily[ChainConfig, ChainReference]):
    """Word problems over arithmetic chains."""

    name = "arithmetic_chain"
    description = "Templated word problems over a chain of arithmetic steps, with an exact integer answer."
    Config = ChainConfig
    Reference = ChainReference
    max_answer_chars = 100
    levels = {
        "easy": {"steps": 3, "max_start": 120, "max_operand": 20},
        "medium": {"steps": 5, "max_start": 200, "max_operand": 30},
        "hard": {"steps": 9, "max_start": 2000, "max_operand": 200},
    }

    def generate(self, rng: random.Random, config: ChainConfig) -> Puzzle[ChainReference]:
        """Draw a story whose every step keeps the count whole and positive."""
        name, pronoun = rng.choice(PEOPLE)
        items = rng.choice(ITEMS)
        start = rng.randint(max(10, config.max_start // 5), config.max_start)
        value, steps, sentences = start, [], []
        while len(steps) < config.steps:
            step = random_step(rng, value, config)
            if step is None:
                continue
            steps.append(step)
            sentences.append(step_text(step, name, pronoun, items, rng.choice(FRIENDS)))
            value = apply(value, step)  # type: ignore[assignment]
        ask: Literal["final", "change"] = "change" if rng.random() < config.change_share else "final"
        reference = ChainReference(start=start, steps=steps, ask=ask)
        if ask == "final":
            query = f"How many {items} does {name} have now?"
        else:
            query = (
                f"How much has {name}'s number of {items} changed since the start? Answer with the "
                "new count minus the starting count (negative if it went down)."
            )
        question = f"{name} has {start} {items}. " + " ".join(sentences) + f" {query} Answer with an integer."
        answer = replay(reference)
        measure = {"steps": len(steps), "largest": max(start, value), "ask": ask}
        return Puzzle(question=question, reference=reference, gold=str(answer), measure=measure)

    def check(self, answer: str, reference: ChainReference) -> Checked:
        """Replay the steps and compare the integer exactly (a trailing unit word is allowed)."""
        value = parse_integer(_UNIT_SUFFIX.sub("", answer.strip()))
        if value is None:
            return Checked.malformed("not_an_integer")
        expected = replay(reference)
        if expected is None:
            return Checked.wrong("impossible_story")
        return Checked.right() if value == expected else Checked.wrong("wrong_value")

    def random_answer(self, rng: random.Random, reference: ChainReference) -> str:
        """A random integer of about the right size and sign."""
        expected = replay(reference) or 1
        magnitude = max(10, 2 * abs(expected))
        return str(
            rng.randint(-magnitude, magnitude) if reference.ask == "change" else rng.randint(1, magnitude)
        )


register_family(ArithmeticChain)
