"""`puzzle.countdown`: reach a target with + - * / over given numbers (the Countdown numbers game, and 24).

Modes: `countdown` (use any of the numbers, each at most once) and `24` (use all four numbers exactly
once). The answer is an arithmetic expression; it is parsed by the bounded parser in `arith` (never
evaluated as Python), computed exactly with fractions (so 24 = 8/(3-8/3) counts), and checked by the rules:
the value equals the target and the numbers used are allowed. Any such expression scores 1.
"""

from __future__ import annotations

import random
from collections import Counter
from fractions import Fraction
from typing import Literal

from pydantic import Field, model_validator

from proctor.environments.puzzles.answer import Checked
from proctor.environments.puzzles.arith import MAX_CHARS, ArithError, parse_expression
from proctor.environments.puzzles.base import (
    Puzzle,
    PuzzleConfig,
    PuzzleFamily,
    PuzzleReference,
    register_family,
)

LARGE = (25, 50, 75, 100)
OPS = ("+", "-", "*", "/")
MAX_24_NUMBERS = 4
TRIES_24 = 200
"""Number sets drawn per 24-mode attempt before giving up (an unreachable target fails in about a second)."""
TRIES_COUNTDOWN = 20_000
"""Random expressions drawn per countdown attempt before giving up (the levels need under 300)."""


class CountdownConfig(PuzzleConfig):
    """Which game, how many numbers and which targets."""

    mode: Literal["countdown", "24"] = "countdown"
    count: int = Field(default=6, ge=2, le=8, description="How many numbers are given (24 mode: all used).")
    max_small: int = Field(default=10, ge=2, le=100, description="Small numbers are drawn from 1..max_small.")
    max_large: int = Field(default=2, ge=0, le=4, description="Countdown: at most this many of 25/50/75/100.")
    min_target: int = Field(default=100, ge=1, le=10**6)
    max_target: int = Field(default=999, ge=1, le=10**6)
    min_used: int = Field(default=4, ge=2, le=8, description="Countdown: the gold uses at least this many.")
    target: int = Field(default=24, ge=1, le=10**6, description="24 mode: the target.")

    @model_validator(mode="after")
    def _solvable_quickly(self) -> CountdownConfig:
        # 24 mode proves each set solvable by exhaustive search, which is milliseconds for four numbers
        # but minutes for five or more: a request must not be able to pin a worker that long.
        if self.mode == "24" and self.count > MAX_24_NUMBERS:
            raise ValueError(f"24 mode uses at most {MAX_24_NUMBERS} numbers")
        return self


class CountdownReference(PuzzleReference):
    """The numbers (a multiset), the target and whether every number must be used exactly once."""

    numbers: list[int] = Field(min_length=2, max_length=8)
    target: int = Field(ge=-(10**9), le=10**9)
    use_all: bool = False

    @model_validator(mode="after")
    def _bounded(self) -> CountdownReference:
        if any(not 0 <= number <= 10**6 for number in self.numbers):
            raise ValueError("numbers must lie in [0, 1000000]")
        return self


def _combine(a: Fraction, b: Fraction, op: str) -> Fraction | None:
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    return None if b == 0 else a / b


def random_expression(
    rng: random.Random, numbers: list[int], integer_steps: bool
) -> tuple[str, Fraction] | None:
    """Combine the numbers pairwise with random operators; with integer_steps, every step is a positive integer."""
    items: list[tuple[str, Fraction]] = [(str(n), Fraction(n)) for n in numbers]
    while len(items) > 1:
        i, j = rng.sample(range(len(items)), 2)
        (left, a), (right, b) = items[i], items[j]
        op = rng.choice(OPS)
        if integer_steps and op in "-/" and a < b:
            (left, a), (right, b) = (right, b), (left, a)
        value = _combine(a, b, op)
        if value is None:
            return None
        if integer_steps and (value.denominator != 1 or value <= 0 or (op in "*/" and 1 in (a, b))):
            return None
        items = [item for k, item in enumerate(items) if k not in (i, j)]
        items.append((f"({left} {op} {right})", value))
    text, value = items[0]
    return (text[1:-1] if text.startswith("(") else text), value


def solve24(values: list[Fraction], texts: list[str], target: Fraction) -> str | None:
    """An expression using every value once that equals target, by exhaustive pairwise combination."""
    if len(values) == 1:
        return texts[0] if values[0] == target else None
    for i in range(len(values)):
        for j in range(len(values)):
            if i == j:
                continue
            rest_values = [values[k] for k in range(len(values)) if k not in (i, j)]
            rest_texts = [texts[k] for k in range(len(values)) if k not in (i, j)]
            for op in OPS:
                if op in "+*" and i > j:  # commutative: one order is enough
                    continue
                value = _combine(values[i], values[j], op)
                if value is None:
                    continue
                found = solve24([*rest_values, value], [*rest_texts, f"({texts[i]} {op} {texts[j]})"], target)
                if found is not None:
                    return found
    return None


_solved: dict[tuple[tuple[int, ...], int], str | None] = {}


def solve24_cached(numbers: tuple[int, ...], target: int) -> str | None:
    """solve24 on sorted integers, remembered: the same set always gives the same expression."""
    key = (numbers, target)
    if key not in _solved:
        if len(_solved) > 100_000:  # bounded memory; a cleared cache only costs time
            _solved.clear()
        _solved[key] = solve24([Fraction(n) for n in numbers], [str(n) for n in numbers], Fraction(target))
    return _solved[key]


def _strip_equation(answer: str, target: int) -> str | None:
    """`expr = target` -> `expr`; None when what follows '=' is not the target."""
    if "=" not in answer:
        return answer
    left, _, right = answer.rpartition("=")
    right = right.strip()
    if "=" in left or right.lstrip("-") != str(abs(target)) or right.startswith("-") != (target < 0):
        return None
    return left


class Countdown(PuzzleFamily[CountdownConfig, CountdownReference]):
    """Hit the target with the given numbers."""

    name = "countdown"
    version = "1"
    description = "Countdown numbers game and the 24 game: an arithmetic expression over the given numbers."
    Config = CountdownConfig
    Reference = CountdownReference
    levels = {
        "easy": {"mode": "24", "count": 4, "max_small": 9},
        "medium": {"mode": "countdown", "count": 5, "max_large": 1, "min_target": 100, "max_target": 500},
        "hard": {"mode": "countdown", "count": 6, "max_large": 2, "min_target": 500, "max_target": 999},
        "24": {"mode": "24", "count": 4, "max_small": 13},
    }
    max_answer_chars = MAX_CHARS

    def generate(self, rng: random.Random, config: CountdownConfig) -> Puzzle[CountdownReference]:
        """24 mode: draw numbers until the solver finds a solution; countdown: a random integer expression."""
        if config.mode == "24":
            for tries in range(1, TRIES_24 + 1):
                numbers = sorted(rng.randint(1, config.max_small) for _ in range(config.count))
                gold = solve24_cached(tuple(numbers), config.target)
                if gold is not None:
                    reference = CountdownReference(numbers=numbers, target=config.target, use_all=True)
                    return Puzzle(self._question(reference), reference, gold[1:-1], {"tries": tries})
            raise RuntimeError("no solvable 24 set found")
        lo, hi = config.min_target, max(config.min_target, config.max_target)
        for tries in range(1, TRIES_COUNTDOWN + 1):
            large = rng.randint(0, min(config.max_large, config.count))
            numbers = rng.sample(LARGE, large) + [
                rng.randint(1, config.max_small) for _ in range(config.count - large)
            ]
            used = rng.sample(numbers, rng.randint(min(config.min_used, config.count), config.count))
            found = random_expression(rng, used, integer_steps=True)
            if found is not None and found[1].denominator == 1 and lo <= found[1] <= hi:
                reference = CountdownReference(numbers=sorted(numbers), target=int(found[1]), use_all=False)
                return Puzzle(
                    self._question(reference), reference, found[0], {"used": len(used), "tries": tries}
                )
        raise RuntimeError("no countdown target found")

    def _question(self, reference: CountdownReference) -> str:
        numbers = ", ".join(str(n) for n in reference.numbers)
        rule = (
            "Use every number exactly once"
            if reference.use_all
            else "Use each number at most once (you need not use all of them)"
        )
        return (
            f"Using the numbers {numbers}, make {reference.target}. {rule}, with +, -, * and / and "
            "parentheses; fractions are allowed along the way. Answer with the expression only, for example "
            "(1 + 2) * 3."
        )

    def check(self, answer: str, reference: CountdownReference) -> Checked:
        """Parse (bounded, no eval), compute exactly, check the value and the numbers used."""
        expression = _strip_equation(answer, reference.target)
        if expression is None:
            return Checked.wrong("wrong_equation")
        try:
            parsed = parse_expression(expression)
        except ArithError as exc:
            return Checked.malformed(exc.reason)
        except RecursionError:
            return Checked.malformed("too_deep")
        used, allowed = Counter(parsed.numbers), Counter(reference.numbers)
        if any(used[n] > allowed[n] for n in used):
            return Checked.wrong("number_not_allowed")
        if reference.use_all and used != allowed:
            return Checked.wrong("not_all_numbers_used")
        if parsed.value != reference.target:
            return Checked.wrong("wrong_value", value=str(parsed.value))
        return Checked.right()

    def random_answer(self, rng: random.Random, reference: CountdownReference) -> str:
        """A random expression over (a random subset of) the numbers."""
        k = len(reference.numbers) if reference.use_all else rng.randint(2, len(reference.numbers))
        numbers = rng.sample(reference.numbers, k)
        while True:
            found = random_expression(rng, numbers, integer_steps=False)
            if found is not None:
                return found[0]


register_family(Countdown)
