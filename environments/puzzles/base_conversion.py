"""`puzzle.base_conversion`: write a number given in one base (2..36) in another.

Digits are 0-9 then a-z (either case) for 10..35. The checker reads the answer as a number in the target
base and compares values exactly, so leading zeros, either letter case and the prefix matching the base
(0b, 0o, 0x) are accepted; a digit that does not exist in the base, another prefix, spaces or a second
number are not. Values are drawn from the top part of the range, so every answer has several digits and a
random string of the right length is hopeless.
"""

from __future__ import annotations

import random
import re

from pydantic import Field, model_validator

from proctor.environments.puzzles.answer import Checked
from proctor.environments.puzzles.base import (
    Puzzle,
    PuzzleConfig,
    PuzzleFamily,
    PuzzleReference,
    register_family,
)

DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"
COMMON_BASES = (2, 8, 10, 16)
MAX_BITS = 128
_PREFIXES = {2: "0b", 8: "0o", 16: "0x"}
_NUMBER = re.compile(r"([+-]?)(0[box])?([0-9a-z]+)", re.ASCII)


class BaseConversionConfig(PuzzleConfig):
    """Difficulty knobs: which bases, how large the numbers, whether negatives appear."""

    bits: int = Field(default=20, ge=6, le=MAX_BITS, description="Numbers are below 2**bits.")
    min_base: int = Field(default=2, ge=2, le=36)
    max_base: int = Field(default=16, ge=2, le=36)
    common_bases_only: bool = Field(default=False, description="Only bases 2, 8, 10 and 16.")
    negative_share: float = Field(default=0.0, ge=0.0, le=1.0, description="Share of negative numbers.")

    @model_validator(mode="after")
    def _bases(self) -> BaseConversionConfig:
        if self.min_base >= self.max_base:
            raise ValueError("min_base must be below max_base")
        return self


class BaseConversionReference(PuzzleReference):
    """The number and the two bases."""

    value: int = Field(gt=-(1 << MAX_BITS), lt=1 << MAX_BITS)
    from_base: int = Field(ge=2, le=36)
    to_base: int = Field(ge=2, le=36)


def to_digits(value: int, base: int) -> str:
    """The value written in `base` with digits 0-9a-z (a leading '-' for negatives)."""
    if value == 0:
        return "0"
    sign, value = ("-", -value) if value < 0 else ("", value)
    digits = []
    while value:
        value, digit = divmod(value, base)
        digits.append(DIGITS[digit])
    return sign + "".join(reversed(digits))


def read_number(text: str, base: int) -> int | None:
    """The value of `text` read in `base` (sign, optional 0b/0o/0x matching the base, digits), or None."""
    text = text.strip().lower()
    if len(text) > MAX_BITS + 4:
        return None
    match = _NUMBER.fullmatch(text)
    if match is None:
        return None
    prefix, digits = match.group(2), match.group(3)
    if prefix is not None and _PREFIXES.get(base) != prefix:
        if base > 11:  # "0b1" in base 12+ is a digit string, the regex took "0b" as a prefix
            digits = prefix + digits
        else:
            return None
    if any(DIGITS.index(d) >= base for d in digits):
        return None
    value = int(digits, base)
    return -value if match.group(1) == "-" else value


def base_name(base: int) -> str:
    """'base 16 (hexadecimal)' for the common bases, else 'base 7'."""
    names = {2: "binary", 8: "octal", 10: "decimal", 16: "hexadecimal"}
    return f"base {base} ({names[base]})" if base in names else f"base {base}"


class BaseConversion(PuzzleFamily[BaseConversionConfig, BaseConversionReference]):
    """Base conversion between bases 2..36."""

    name = "base_conversion"
    description = "Convert a number from one base (2..36) to another."
    Config = BaseConversionConfig
    Reference = BaseConversionReference
    max_answer_chars = 200
    levels = {
        "easy": {"bits": 12, "min_base": 2, "max_base": 16, "common_bases_only": True},
        "medium": {"bits": 20, "min_base": 2, "max_base": 16},
        "hard": {"bits": 48, "min_base": 2, "max_base": 36, "negative_share": 0.2},
    }

    def generate(self, rng: random.Random, config: BaseConversionConfig) -> Puzzle[BaseConversionReference]:
        """Two different bases and a number from the top seven eighths of the range."""
        if config.common_bases_only:
            bases = [b for b in COMMON_BASES if config.min_base <= b <= config.max_base]
        else:
            bases = list(range(config.min_base, config.max_base + 1))
        if len(bases) < 2:
            bases = [config.min_base, config.max_base]
        from_base, to_base = rng.sample(bases, 2)
        top = 1 << config.bits
        value = rng.randrange(top // 8, top)
        if rng.random() < config.negative_share:
            value = -value
        shown = to_digits(value, from_base)
        question = (
            f"Convert the {base_name(from_base)} number {shown} to {base_name(to_base)}. Digits above 9 are "
            "written with letters (a = 10, b = 11, ..., z = 35). Answer with the digits only, no prefix "
            "or base subscript."
        )
        reference = BaseConversionReference(value=value, from_base=from_base, to_base=to_base)
        gold = to_digits(value, to_base)
        measure = {
            "bits": value.bit_length(),
            "from_base": from_base,
            "to_base": to_base,
            "digits": len(gold),
        }
        return Puzzle(question=question, reference=reference, gold=gold, measure=measure)

    def check(self, answer: str, reference: BaseConversionReference) -> Checked:
        """The answer, read in the target base, must equal the number."""
        value = read_number(answer, reference.to_base)
        if value is None:
            return Checked.malformed("not_a_number_in_base")
        return Checked.right() if value == reference.value else Checked.wrong("wrong_value")

    def random_answer(self, rng: random.Random, reference: BaseConversionReference) -> str:
        """Random digits of the target base, as many as the right answer has."""
        length = len(to_digits(abs(reference.value), reference.to_base))
        digits = "".join(rng.choice(DIGITS[: reference.to_base]) for _ in range(length))
        return ("-" if reference.value < 0 else "") + digits


register_family(BaseConversion)
