"""`puzzle.modular_arithmetic`: modular inverse, modular power, Chinese remainder theorem, linear congruences.

Every answer is a residue in [0, m) (integers in the format of `_numbers`), so the checker verifies the
defining property rather than comparing strings: a*x % m == 1 for an inverse, every congruence for CRT, every
listed x solving a*x = b (mod m) and as many of them as gcd(a, m) says exist for a linear congruence, and
pow(a, e, m) for a power. Moduli come from the top three quarters of their range, so a random residue is
right well under 5% of the time.
"""

from __future__ import annotations

import math
import random
import re
from typing import Literal

from pydantic import Field, model_validator

from proctor.environments.puzzles._numbers import parse_integer
from proctor.environments.puzzles.answer import Checked
from proctor.environments.puzzles.base import (
    Puzzle,
    PuzzleConfig,
    PuzzleFamily,
    PuzzleReference,
    register_family,
)

Kind = Literal["inverse", "power", "crt", "linear"]
KINDS: tuple[Kind, ...] = ("inverse", "power", "crt", "linear")
MAX_MODULUS = 10**12
MAX_EXPONENT = 10**18
MAX_CONGRUENCES = 6
MAX_LINEAR_SOLUTIONS = 6
MIN_CRT_PRODUCT = 100
"""Fewer candidates than this would let a random guess hit too often."""
_SPLIT = re.compile(r"\s*[,;]\s*|\s+")


class ModularConfig(PuzzleConfig):
    """Difficulty knobs: modulus size, exponent size, CRT congruences and moduli, kinds asked."""

    max_modulus: int = Field(default=10_000, ge=40, le=MAX_MODULUS)
    max_exponent: int = Field(default=10_000, ge=2, le=MAX_EXPONENT)
    congruences: int = Field(
        default=3, ge=2, le=MAX_CONGRUENCES, description="Congruences in a CRT question."
    )
    max_crt_modulus: int = Field(
        default=60, ge=8, le=10_000, description="Largest modulus of one congruence."
    )
    kinds: list[Kind] = Field(default=list(KINDS), min_length=1, max_length=4)

    @model_validator(mode="after")
    def _crt_fits(self) -> ModularConfig:
        if self.max_crt_modulus**self.congruences > MAX_MODULUS:
            raise ValueError(f"max_crt_modulus ** congruences must be at most {MAX_MODULUS}")
        if self.max_crt_modulus**self.congruences < MIN_CRT_PRODUCT * 4:
            raise ValueError("max_crt_modulus ** congruences is too small for a CRT question")
        return self


class Congruence(PuzzleReference):
    """x = remainder (mod modulus)."""

    remainder: int = Field(ge=0, lt=MAX_MODULUS)
    modulus: int = Field(ge=2, le=MAX_MODULUS)


class ModularReference(PuzzleReference):
    """The question: a, m (inverse, linear with b, power with e) or the congruences (crt)."""

    kind: Kind
    a: int = Field(default=0, ge=0, lt=MAX_MODULUS)
    b: int = Field(default=0, ge=0, lt=MAX_MODULUS)
    e: int = Field(default=0, ge=0, le=MAX_EXPONENT)
    m: int = Field(default=2, ge=2, le=MAX_MODULUS)
    congruences: list[Congruence] = Field(default_factory=list, max_length=MAX_CONGRUENCES)

    @model_validator(mode="after")
    def _well_posed(self) -> ModularReference:
        if self.kind == "crt":
            if len(self.congruences) < 2:
                raise ValueError("crt needs at least two congruences")
            moduli = [c.modulus for c in self.congruences]
            if any(math.gcd(p, q) != 1 for i, p in enumerate(moduli) for q in moduli[i + 1 :]):
                raise ValueError("crt moduli must be pairwise coprime")
            if math.prod(moduli) > MAX_MODULUS:
                raise ValueError("the product of the crt moduli is too large")
        elif self.kind == "inverse" and math.gcd(self.a, self.m) != 1:
            raise ValueError("a has no inverse modulo m")
        elif self.kind == "linear":
            d = math.gcd(self.a, self.m)
            if self.a == 0 or self.b % d or d > MAX_LINEAR_SOLUTIONS:
                raise ValueError("the linear congruence must have 1 to 6 solutions")
        return self


def crt_solution(congruences: list[Congruence]) -> int:
    """The x in [0, product of moduli) meeting every congruence (moduli pairwise coprime)."""
    x, modulus = 0, 1
    for c in congruences:
        # x + modulus*t = c.remainder (mod c.modulus)
        t = (c.remainder - x) * pow(modulus, -1, c.modulus) % c.modulus
        x, modulus = x + modulus * t, modulus * c.modulus
    return x % modulus


def linear_solutions(a: int, b: int, m: int) -> list[int]:
    """Every x in [0, m) with a*x = b (mod m), ascending."""
    d = math.gcd(a, m)
    if b % d:
        return []
    step = m // d
    base = (b // d) * pow(a // d, -1, step) % step if step > 1 else 0
    return [base + k * step for k in range(d)]


def parse_integers(text: str, limit: int) -> list[int] | None:
    """Integers separated by commas, semicolons or blanks (at most `limit`), or None."""
    parts = [p for p in _SPLIT.split(text.strip()) if p]
    if not parts or len(parts) > limit:
        return None
    values = [parse_integer(p) for p in parts]
    return None if any(v is None for v in values) else values  # type: ignore[return-value]


def _draw_modulus(rng: random.Random, top: int) -> int:
    return rng.randint(max(2, top // 4), top)


class ModularArithmetic(PuzzleFamily[ModularConfig, ModularReference]):
    """Modular inverse, power, CRT and linear congruences."""

    name = "modular_arithmetic"
    description = "Modular arithmetic: inverses, powers, Chinese remainder theorem, linear congruences."
    Config = ModularConfig
    Reference = ModularReference
    max_answer_chars = 200
    levels = {
        "easy": {"max_modulus": 200, "max_exponent": 50, "congruences": 2, "max_crt_modulus": 20},
        "medium": {"max_modulus": 10_000, "max_exponent": 10_000, "congruences": 3, "max_crt_modulus": 60},
        "hard": {"max_modulus": 10**9, "max_exponent": 10**12, "congruences": 4, "max_crt_modulus": 1000},
    }

    def generate(self, rng: random.Random, config: ModularConfig) -> Puzzle[ModularReference]:
        """Pick a kind and draw a well-posed question of it."""
        kind = rng.choice(config.kinds)
        if kind == "inverse":
            m = _draw_modulus(rng, config.max_modulus)
            a = rng.randrange(2, m)
            while math.gcd(a, m) != 1:
                a = rng.randrange(2, m)
            reference = ModularReference(kind=kind, a=a, m=m)
            question = (
                f"Find the multiplicative inverse of {a} modulo {m}: the integer x with 0 <= x < {m} and "
                f"{a} * x = 1 (mod {m}). Answer with x."
            )
            gold = [pow(a, -1, m)]
        elif kind == "power":
            m = _draw_modulus(rng, config.max_modulus)
            a, e = rng.randrange(2, m), rng.randint(2, config.max_exponent)
            reference = ModularReference(kind=kind, a=a, e=e, m=m)
            question = f"Compute {a}^{e} mod {m}: the remainder in [0, {m}). Answer with the remainder."
            gold = [pow(a, e, m)]
        elif kind == "crt":
            while True:
                congruences: list[Congruence] = []
                while len(congruences) < config.congruences:
                    modulus = rng.randint(2, config.max_crt_modulus)
                    if all(math.gcd(modulus, c.modulus) == 1 for c in congruences):
                        congruences.append(Congruence(remainder=rng.randrange(modulus), modulus=modulus))
                if math.prod(c.modulus for c in congruences) >= MIN_CRT_PRODUCT:
                    break
            reference = ModularReference(kind=kind, congruences=congruences)
            product = math.prod(c.modulus for c in congruences)
            lines = ", ".join(f"x = {c.remainder} (mod {c.modulus})" for c in congruences)
            question = (
                f"Find the smallest non-negative integer x with {lines}. (The moduli are pairwise coprime, so "
                f"exactly one such x lies in [0, {product}).) Answer with x."
            )
            gold = [crt_solution(congruences)]
        else:
            while True:
                m = _draw_modulus(rng, config.max_modulus)
                a = rng.randrange(2, m)
                if math.gcd(a, m) <= MAX_LINEAR_SOLUTIONS:
                    break
            b = a * rng.randrange(m) % m
            reference = ModularReference(kind=kind, a=a, b=b, m=m)
            question = (
                f"Find every integer x with 0 <= x < {m} and {a} * x = {b} (mod {m}). Answer with all of "
                "them, separated by commas."
            )
            gold = linear_solutions(a, b, m)
        measure = {
            "kind": kind,
            "modulus": reference.m if kind != "crt" else math.prod(c.modulus for c in reference.congruences),
        }
        return Puzzle(question=question, reference=reference, gold=", ".join(map(str, gold)), measure=measure)

    def check(self, answer: str, reference: ModularReference) -> Checked:
        """Verify the defining property of the answer (see the module doc)."""
        limit = MAX_LINEAR_SOLUTIONS if reference.kind == "linear" else 1
        values = parse_integers(answer, limit)
        if values is None:
            return Checked.malformed("not_integers")
        kind, m = reference.kind, reference.m
        if kind == "crt":
            product = math.prod(c.modulus for c in reference.congruences)
            x = values[0]
            if not 0 <= x < product:
                return Checked.wrong("out_of_range")
            ok = all(x % c.modulus == c.remainder % c.modulus for c in reference.congruences)
            return Checked.right() if ok else Checked.wrong("congruence_fails")
        if any(not 0 <= x < m for x in values):
            return Checked.wrong("out_of_range")
        if kind == "inverse":
            return Checked.right() if reference.a * values[0] % m == 1 else Checked.wrong("not_inverse")
        if kind == "power":
            return (
                Checked.right()
                if values[0] == pow(reference.a, reference.e, m)
                else Checked.wrong("wrong_power")
            )
        if len(set(values)) != len(values):
            return Checked.wrong("repeated_solution")
        if any((reference.a * x - reference.b) % m for x in values):
            return Checked.wrong("not_a_solution")
        if len(values) != math.gcd(reference.a, m):
            return Checked.wrong("missing_solutions")
        return Checked.right()

    def random_answer(self, rng: random.Random, reference: ModularReference) -> str:
        """Random residues of the right range (as many as the question has solutions)."""
        if reference.kind == "crt":
            return str(rng.randrange(math.prod(c.modulus for c in reference.congruences)))
        count = math.gcd(reference.a, reference.m) if reference.kind == "linear" else 1
        return ", ".join(str(rng.randrange(reference.m)) for _ in range(count))


register_family(ModularArithmetic)
