"""`puzzle.lis`: give a longest strictly increasing subsequence of a list; any longest one scores 1.

The answer is the subsequence itself (its values, in order), not its length: a length is a small integer
that guessing hits far too often (the trivial-policy gate), while a subsequence is checked by the rules:
strictly increasing, a subsequence of the list (greedy matching), and as long as the longest (patience
sorting, computed by the checker). The generator counts the longest subsequences (by positions) and redraws
lists where picking that many positions at random would hit one more than 1% of the time.
"""

from __future__ import annotations

import bisect
import random
from math import comb
from typing import Annotated

from pydantic import Field

from proctor.environments.puzzles.answer import Checked
from proctor.environments.puzzles.base import (
    Puzzle,
    PuzzleConfig,
    PuzzleFamily,
    PuzzleReference,
    register_family,
)

MAX_LENGTH = 200
MAX_VALUE = 10**6
MAX_GUESS_RATE = 0.01


class LisConfig(PuzzleConfig):
    """List length and the value range."""

    # At least 9: on shorter lists a random pick of positions is a longest subsequence more than 1% of the time.
    min_length: int = Field(default=12, ge=9, le=MAX_LENGTH)
    max_length: int = Field(default=16, ge=9, le=MAX_LENGTH)
    max_value: int = Field(default=50, ge=4, le=MAX_VALUE)


class LisReference(PuzzleReference):
    """The list of integers."""

    numbers: list[Annotated[int, Field(ge=-MAX_VALUE, le=MAX_VALUE)]] = Field(
        min_length=1, max_length=MAX_LENGTH
    )


def lis_length(numbers: list[int]) -> int:
    """Length of the longest strictly increasing subsequence (patience sorting, O(n log n))."""
    tails: list[int] = []
    for number in numbers:
        at = bisect.bisect_left(tails, number)
        if at == len(tails):
            tails.append(number)
        else:
            tails[at] = number
    return len(tails)


def longest_and_count(numbers: list[int]) -> tuple[list[int], int]:
    """One longest strictly increasing subsequence (leftmost choices) and how many there are, by positions."""
    n = len(numbers)
    length = [1] * n
    ways = [1] * n
    before = [-1] * n
    for i in range(n):
        for j in range(i):
            if numbers[j] < numbers[i]:
                if length[j] + 1 > length[i]:
                    length[i], ways[i], before[i] = length[j] + 1, ways[j], j
                elif length[j] + 1 == length[i]:
                    ways[i] += ways[j]
    best = max(length)
    count = sum(ways[i] for i in range(n) if length[i] == best)
    end = length.index(best)
    sequence = []
    while end >= 0:
        sequence.append(numbers[end])
        end = before[end]
    return sequence[::-1], count


def parse_numbers(answer: str, max_digits: int = 7) -> list[int] | None:
    """`3, 5, 9` (or `[3, 5, 9]`, or space-separated) as integers, or None when it has another shape."""
    text = answer.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    parts = text.replace(",", " ").split()
    if not parts:
        return None
    for part in parts:
        digits = part[1:] if part.startswith("-") else part
        if not (digits.isascii() and digits.isdigit() and len(digits) <= max_digits):
            return None
    return [int(part) for part in parts]


def is_subsequence(values: list[int], numbers: list[int]) -> bool:
    """Whether `values` occurs in `numbers` in order (greedy matching is exact for this)."""
    position = 0
    for value in values:
        while position < len(numbers) and numbers[position] != value:
            position += 1
        if position == len(numbers):
            return False
        position += 1
    return True


class Lis(PuzzleFamily[LisConfig, LisReference]):
    """Longest strictly increasing subsequence, answered as the subsequence."""

    name = "lis"
    version = "1"
    description = "Give a longest strictly increasing subsequence of a list; any longest one scores 1."
    Config = LisConfig
    Reference = LisReference
    levels = {
        "easy": {"min_length": 9, "max_length": 11, "max_value": 30},
        "medium": {"min_length": 12, "max_length": 16, "max_value": 50},
        "hard": {"min_length": 20, "max_length": 30, "max_value": 100},
    }
    max_answer_chars = 1_000

    def generate(self, rng: random.Random, config: LisConfig) -> Puzzle[LisReference]:
        """Random integers, redrawn while a random pick of positions would too often be a longest run."""
        for _ in range(10_000):
            n = rng.randint(config.min_length, max(config.min_length, config.max_length))
            numbers = [rng.randint(1, config.max_value) for _ in range(n)]
            sequence, count = longest_and_count(numbers)
            if count / comb(n, len(sequence)) > MAX_GUESS_RATE:
                continue
            question = (
                f"Find a longest strictly increasing subsequence of this list:\n\n{', '.join(map(str, numbers))}\n\n"
                "A subsequence keeps the list's order but may skip elements; strictly increasing means every "
                "element is larger than the one before. Answer with the subsequence's numbers in order, "
                "comma-separated. If there are several longest ones, any of them is accepted."
            )
            gold = ", ".join(map(str, sequence))
            measure = {"length": n, "lis_length": len(sequence), "longest_count": count}
            return Puzzle(question, LisReference(numbers=numbers), gold, measure)
        raise RuntimeError("no list with few enough longest subsequences; lengthen the lists")

    def check(self, answer: str, reference: LisReference) -> Checked:
        """Valid when strictly increasing, a subsequence of the list, and as long as the longest."""
        values = parse_numbers(answer)
        if values is None:
            return Checked.malformed("malformed", expected="comma-separated integers")
        if any(a >= b for a, b in zip(values, values[1:], strict=False)):
            return Checked.wrong("not_increasing")
        best = lis_length(reference.numbers)
        if len(values) != best:
            return Checked.wrong("not_longest" if len(values) < best else "too_long", length=len(values))
        if not is_subsequence(values, reference.numbers):
            return Checked.wrong("not_a_subsequence")
        return Checked.right()

    def random_answer(self, rng: random.Random, reference: LisReference) -> str:
        """The values at as many random positions (in order) as the longest subsequence has."""
        numbers = reference.numbers
        picked = sorted(rng.sample(range(len(numbers)), lis_length(numbers)))
        return ", ".join(str(numbers[i]) for i in picked)


register_family(Lis)
