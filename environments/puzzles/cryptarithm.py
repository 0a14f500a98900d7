"""`puzzle.cryptarithm`: replace letters by digits so that an addition holds; any valid assignment scores 1.

Puzzles are made by drawing numbers, adding them and hiding the digits behind distinct random letters.
A column-by-column solver counts the puzzle's solutions (up to `max_solutions + 1`): a puzzle with more than
`max_solutions` solutions is redrawn, and `max_solutions = 1` (the hard level) proves the solution unique.
The checker never compares with the stored mapping: it checks that every letter has a distinct digit, no
number of two or more letters starts with 0, and the addition holds.
"""

from __future__ import annotations

import random
import re
import string
from collections.abc import Sequence

from pydantic import Field, model_validator

from proctor.environments.puzzles.answer import Checked
from proctor.environments.puzzles.base import (
    Puzzle,
    PuzzleConfig,
    PuzzleFamily,
    PuzzleReference,
    register_family,
)

MAX_WORDS = 5
MAX_LETTERS_PER_WORD = 8
_PAIR = re.compile(r"([A-Za-z])\s*(?:=|:|->|→)\s*([0-9])")
_GAP = re.compile(r"[\s,;]*")


class CryptarithmConfig(PuzzleConfig):
    """Number of addends, their length in letters, and how many solutions a puzzle may have."""

    min_words: int = Field(default=2, ge=2, le=MAX_WORDS)
    max_words: int = Field(default=2, ge=2, le=MAX_WORDS)
    min_length: int = Field(default=4, ge=2, le=MAX_LETTERS_PER_WORD - 1)
    max_length: int = Field(default=5, ge=2, le=MAX_LETTERS_PER_WORD - 1)
    max_solutions: int = Field(default=5, ge=1, le=100)


class CryptarithmReference(PuzzleReference):
    """The addends and the sum, as upper-case letter words (at most 10 distinct letters)."""

    words: list[str] = Field(min_length=2, max_length=MAX_WORDS)
    result: str = Field(min_length=1, max_length=MAX_LETTERS_PER_WORD)

    @model_validator(mode="after")
    def _well_formed(self) -> CryptarithmReference:
        for word in [*self.words, self.result]:
            if not 1 <= len(word) <= MAX_LETTERS_PER_WORD or any(
                c not in string.ascii_uppercase for c in word
            ):
                raise ValueError(f"words are 1 to {MAX_LETTERS_PER_WORD} upper-case letters A-Z")
        if len(letters_of(self.words, self.result)) > 10:
            raise ValueError("a cryptarithm has at most 10 distinct letters")
        return self


def letters_of(words: Sequence[str], result: str) -> list[str]:
    """The distinct letters of the puzzle, sorted."""
    return sorted({char for word in [*words, result] for char in word})


def leading_letters(words: Sequence[str], result: str) -> list[str]:
    """Letters that start a number of two or more letters (they may not be 0), sorted."""
    return sorted({word[0] for word in [*words, result] if len(word) > 1})


def count_solutions(words: Sequence[str], result: str, limit: int) -> int:
    """Solutions of the puzzle, counted up to `limit`, by column-wise backtracking from the units column."""
    width = len(result)
    if any(len(word) > width for word in words):
        return 0
    leading = set(leading_letters(words, result))
    high = dict.fromkeys(leading | set(result) | {c for w in words for c in w}, 9)
    if width > max(len(word) for word in words):
        high[result[0]] = len(words) - 1  # the overhanging sum digit is the final carry, below the word count
    columns = [([w[-1 - i] for w in words if i < len(w)], result[-1 - i]) for i in range(width)]
    assigned: dict[str, int] = {}
    used = [False] * 10
    found = 0

    def column(i: int, carry: int) -> None:
        nonlocal found
        if found >= limit:
            return
        if i == width:
            found += carry == 0
            return
        fill(i, carry, 0, 0)

    def fill(i: int, carry: int, j: int, total: int) -> None:
        letters, res = columns[i]
        if found >= limit:
            return
        if j < len(letters):
            char = letters[j]
            if char in assigned:
                fill(i, carry, j + 1, total + assigned[char])
                return
            rest = letters[j + 1 :]
            if res in assigned and all(other in assigned for other in rest):
                # The column's last free letter: its digit is forced by the sum digit.
                forced = (assigned[res] - total - carry - sum(assigned[other] for other in rest)) % 10
                fits = (0 if char not in leading else 1) <= forced <= high[char]
                digits: range | tuple[int] = (forced,) if fits else ()
            else:
                digits = range(1 if char in leading else 0, high[char] + 1)
            for digit in digits:
                if not used[digit]:
                    assigned[char], used[digit] = digit, True
                    fill(i, carry, j + 1, total + digit)
                    used[digit] = False
                    del assigned[char]
            return
        total += carry
        digit, next_carry = total % 10, total // 10
        if res in assigned:
            if assigned[res] == digit:
                column(i + 1, next_carry)
        elif not used[digit] and not (digit == 0 and res in leading) and digit <= high[res]:
            assigned[res], used[digit] = digit, True
            column(i + 1, next_carry)
            used[digit] = False
            del assigned[res]

    column(0, 0)
    return found


def parse_mapping(answer: str) -> dict[str, int] | None:
    """`A=1, B=2, ...` as a dict (upper-case letters), or None when it has another shape or repeats a letter."""
    mapping: dict[str, int] = {}
    position = _GAP.match(answer).end()
    while position < len(answer):
        pair = _PAIR.match(answer, position)
        if pair is None:
            return None
        letter = pair.group(1).upper()
        if letter in mapping:
            return None
        mapping[letter] = int(pair.group(2))
        position = _GAP.match(answer, pair.end()).end()
    return mapping or None


def value(word: str, mapping: dict[str, int]) -> int:
    """The number a word spells under a mapping."""
    number = 0
    for char in word:
        number = number * 10 + mapping[char]
    return number


class Cryptarithm(PuzzleFamily[CryptarithmConfig, CryptarithmReference]):
    """Letter arithmetic: WORD + WORD = RESULT."""

    name = "cryptarithm"
    version = "1"
    description = (
        "Solve a letter-addition puzzle (distinct digits, no leading zeros); any valid mapping scores 1."
    )
    Config = CryptarithmConfig
    Reference = CryptarithmReference
    levels = {
        "easy": {"min_words": 2, "max_words": 2, "min_length": 3, "max_length": 4, "max_solutions": 20},
        "medium": {"min_words": 2, "max_words": 2, "min_length": 4, "max_length": 5, "max_solutions": 5},
        "hard": {"min_words": 3, "max_words": 3, "min_length": 4, "max_length": 6, "max_solutions": 1},
    }
    max_answer_chars = 200

    def generate(self, rng: random.Random, config: CryptarithmConfig) -> Puzzle[CryptarithmReference]:
        """Random addends, summed and encoded with random distinct letters; redrawn while too ambiguous."""
        min_words, max_words = config.min_words, max(config.min_words, config.max_words)
        min_length, max_length = config.min_length, max(config.min_length, config.max_length)
        for attempt in range(1, 20_001):
            lengths = [rng.randint(min_length, max_length) for _ in range(rng.randint(min_words, max_words))]
            numbers = [rng.randint(10 ** (length - 1), 10**length - 1) for length in lengths]
            total = sum(numbers)
            digits = sorted(set("".join(str(n) for n in [*numbers, total])))
            if len(total_text := str(total)) > MAX_LETTERS_PER_WORD or len(digits) > 10:
                continue
            code = dict(zip(digits, rng.sample(string.ascii_uppercase, len(digits)), strict=True))
            words = ["".join(code[d] for d in str(n)) for n in numbers]
            result = "".join(code[d] for d in total_text)
            solutions = count_solutions(words, result, config.max_solutions + 1)
            if solutions > config.max_solutions:
                continue
            reference = CryptarithmReference(words=words, result=result)
            equation = " + ".join(words) + " = " + result
            width = len(result) + 2
            column = "\n".join(
                [*(f"{w:>{width}}" for w in words[:-1]), f"+ {words[-1]:>{len(result)}}", "-" * width]
            )
            question = (
                f"Solve the cryptarithm {equation}:\n\n{column}\n{result:>{width}}\n\n"
                "Each letter stands for a different digit (0-9) and the same letter always for the same digit; "
                "no number of two or more letters starts with 0. "
                "Answer with the digit of every letter as comma-separated pairs, e.g. A=1, B=2, C=3. "
                "If several assignments work, any one of them is accepted."
            )
            mapping = {letter: int(digit) for digit, letter in code.items()}
            gold = ", ".join(f"{letter}={mapping[letter]}" for letter in sorted(mapping))
            measure = {
                "letters": len(digits),
                "words": len(words),
                "solutions": solutions,
                "attempts": attempt,
            }
            return Puzzle(question, reference, gold, measure)
        raise RuntimeError("no cryptarithm with few enough solutions; raise max_solutions")

    def check(self, answer: str, reference: CryptarithmReference) -> Checked:
        """Valid when every letter has a distinct digit, no leading zero, and the addition holds."""
        mapping = parse_mapping(answer)
        if mapping is None:
            return Checked.malformed("malformed", expected="pairs like A=1, B=2")
        letters = letters_of(reference.words, reference.result)
        missing = [letter for letter in letters if letter not in mapping]
        if missing:
            return Checked.wrong("missing_letter", letters=missing)
        if len(mapping) != len(letters):
            return Checked.wrong("unknown_letter")
        if len(set(mapping.values())) != len(mapping):
            return Checked.wrong("repeated_digit")
        if any(mapping[letter] == 0 for letter in leading_letters(reference.words, reference.result)):
            return Checked.wrong("leading_zero")
        if sum(value(word, mapping) for word in reference.words) != value(reference.result, mapping):
            return Checked.wrong("sum_wrong")
        return Checked.right()

    def random_answer(self, rng: random.Random, reference: CryptarithmReference) -> str:
        """A random assignment of distinct digits to the puzzle's letters."""
        letters = letters_of(reference.words, reference.result)
        digits = rng.sample(range(10), len(letters))
        return ", ".join(f"{letter}={digit}" for letter, digit in zip(letters, digits, strict=True))


register_family(Cryptarithm)
