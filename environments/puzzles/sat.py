"""Propositional satisfiability: give any assignment that satisfies a CNF formula, or UNSAT when none does.

The generator counts the satisfying assignments exactly, by exhaustive search over all 2^n assignments at
once (one bit per assignment in a Python integer, one AND per clause), so "UNSAT" golds are proved. It keeps
satisfiable formulas whose solutions are at most `max_solution_share` of all assignments (so a random
assignment rarely satisfies one), and makes a formula unsatisfiable with probability `unsat_share` (kept at
or below 0.05, so answering UNSAT to everything cannot pass the trivial-policy gate). The checker accepts
any assignment that makes every clause true.
"""

from __future__ import annotations

import functools
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

MAX_VARIABLES = 20
MAX_CLAUSES = 200
UNSAT_WORDS = ("UNSAT", "UNSATISFIABLE")


class SatConfig(PuzzleConfig):
    """Difficulty knobs: variables, clause length, clauses per variable, and the UNSAT share."""

    variables: int = Field(default=10, ge=3, le=MAX_VARIABLES, description="Number of variables x1..xn.")
    clause_size: int = Field(default=3, ge=2, le=5, description="Literals per clause.")
    clause_ratio: float = Field(default=4.3, ge=0.5, le=10.0, description="Clauses per variable.")
    unsat_share: float = Field(
        default=0.025, ge=0.0, le=0.05, description="Probability that a formula is unsatisfiable."
    )
    max_solution_share: float = Field(
        default=0.02, gt=0.0, le=0.05, description="Most satisfying assignments, as a share of all 2^n."
    )

    @model_validator(mode="after")
    def _fits(self) -> SatConfig:
        if self.clause_size > self.variables:
            raise ValueError("clause_size must not exceed variables")
        if round(self.variables * self.clause_ratio) > MAX_CLAUSES:
            raise ValueError(f"variables * clause_ratio must be at most {MAX_CLAUSES} clauses")
        return self


class SatReference(PuzzleReference):
    """The formula (clauses of signed 1-based variable numbers) and whether it has a satisfying assignment."""

    variables: int = Field(ge=1, le=MAX_VARIABLES)
    clauses: list[list[int]] = Field(min_length=1, max_length=MAX_CLAUSES)
    satisfiable: bool

    @model_validator(mode="after")
    def _literals_in_range(self) -> SatReference:
        for clause in self.clauses:
            if not 1 <= len(clause) <= MAX_VARIABLES:
                raise ValueError("a clause must have 1 to 20 literals")
            if any(lit == 0 or abs(lit) > self.variables for lit in clause):
                raise ValueError("a literal names a variable outside 1..variables")
        return self


@functools.lru_cache(maxsize=32)
def _variable_masks(n: int) -> tuple[int, ...]:
    # Bit a of mask v is set when assignment number a makes variable v+1 true (bit v of a).
    ones = (1 << (1 << n)) - 1
    masks = []
    for v in range(n):
        half = 1 << v
        block = ((1 << half) - 1) << half
        masks.append(block * (ones // ((1 << (2 * half)) - 1)))
    return tuple(masks)


def _satisfying_mask(n: int, clauses: list[list[int]]) -> int:
    """One bit per assignment (x1 is the lowest bit of its index), set when the assignment satisfies every clause."""
    masks = _variable_masks(n)
    ones = (1 << (1 << n)) - 1
    alive = ones
    for clause in clauses:
        satisfied = 0
        for lit in clause:
            mask = masks[abs(lit) - 1]
            satisfied |= mask if lit > 0 else ones ^ mask
        alive &= satisfied
        if not alive:
            break
    return alive


def count_solutions(n: int, clauses: list[list[int]]) -> int:
    """How many of the 2^n assignments satisfy every clause, by exhaustive bit-parallel search."""
    return _satisfying_mask(n, clauses).bit_count()


def satisfies(clauses: list[list[int]], values: dict[int, bool]) -> bool:
    """Whether the assignment makes every clause true."""
    return all(any(values[abs(lit)] == (lit > 0) for lit in clause) for clause in clauses)


def random_clauses(rng: random.Random, n: int, m: int, k: int) -> list[list[int]]:
    """m clauses of k distinct variables each (sorted), each literal negated with probability 1/2."""
    clauses = []
    for _ in range(m):
        chosen = sorted(rng.sample(range(1, n + 1), k))
        clauses.append([v if rng.random() < 0.5 else -v for v in chosen])
    return clauses


def clause_text(clause: list[int]) -> str:
    """'x1 or not x3 or x4'."""
    return " or ".join(f"x{lit}" if lit > 0 else f"not x{-lit}" for lit in clause)


_PAIR = re.compile(r"x(\d{1,3})\s*[=:]\s*(true|false|1|0|t|f)\b", re.IGNORECASE | re.ASCII)
_ASSIGNMENTS = re.compile(
    r"(?:x\d{1,3}\s*[=:]\s*(?:true|false|1|0|t|f)\b[\s,;]*)+", re.IGNORECASE | re.ASCII
)  # each item starts with x and the separators cannot, so matching is linear
_VALUES = {"1": True, "t": True, "true": True, "0": False, "f": False, "false": False}


def parse_assignment(text: str, n: int) -> dict[int, bool] | None:
    """`x1=1, x2=0, ...` naming each of x1..xn exactly once; None when malformed."""
    text = text.strip()
    if _ASSIGNMENTS.fullmatch(text) is None:
        return None
    values: dict[int, bool] = {}
    for number, value in _PAIR.findall(text):
        variable = int(number)
        if not 1 <= variable <= n or variable in values:
            return None
        values[variable] = _VALUES[value.lower()]
    return values if len(values) == n else None


def format_assignment(values: dict[int, bool]) -> str:
    """'x1=1, x2=0, ...'."""
    return ", ".join(f"x{v}={int(values[v])}" for v in sorted(values))


def find_solution(n: int, clauses: list[list[int]]) -> dict[int, bool] | None:
    """The first satisfying assignment in counting order (x1 is the lowest bit), or None."""
    alive = _satisfying_mask(n, clauses)
    if not alive:
        return None
    first = (alive & -alive).bit_length() - 1
    return {v + 1: bool(first >> v & 1) for v in range(n)}


class Sat(PuzzleFamily[SatConfig, SatReference]):
    """CNF satisfiability: any satisfying assignment, or UNSAT."""

    name = "sat"
    description = "Propositional logic (CNF SAT): give any satisfying assignment, or UNSAT when none exists."
    Config = SatConfig
    Reference = SatReference
    max_answer_chars = 600
    levels = {
        "easy": {"variables": 6, "clause_size": 3, "clause_ratio": 4.5},
        "medium": {"variables": 10, "clause_size": 3, "clause_ratio": 4.3},
        "hard": {"variables": 16, "clause_size": 3, "clause_ratio": 4.26},
    }

    def generate(self, rng: random.Random, config: SatConfig) -> Puzzle[SatReference]:
        """Random k-CNF formulas until one has the wanted status (and few enough solutions)."""
        n, k = config.variables, config.clause_size
        m = max(1, round(n * config.clause_ratio))
        want_unsat = rng.random() < config.unsat_share
        most = max(1, int(config.max_solution_share * (1 << n)))
        while True:
            clauses = random_clauses(rng, n, m, k)
            count = count_solutions(n, clauses)
            if (count == 0) if want_unsat else (1 <= count <= most):
                break
        lines = "\n".join(f"{i + 1}. {clause_text(c)}" for i, c in enumerate(clauses))
        question = (
            f"Variables x1 to x{n} are each true (1) or false (0). A clause is satisfied when at least one of "
            f"its parts is true ('not x3' is true when x3 is false). Find values that satisfy all {m} "
            f"clauses:\n{lines}\n\n"
            f"Answer with a value for every variable, like x1=1, x2=0, ..., x{n}=1. Any satisfying "
            "assignment is accepted. If no assignment satisfies every clause, answer UNSAT."
        )
        solution = find_solution(n, clauses)
        gold = "UNSAT" if solution is None else format_assignment(solution)
        reference = SatReference(variables=n, clauses=clauses, satisfiable=solution is not None)
        measure = {"variables": n, "clauses": m, "solutions": count}
        return Puzzle(question=question, reference=reference, gold=gold, measure=measure)

    def check(self, answer: str, reference: SatReference) -> Checked:
        """UNSAT is right only for proved-unsatisfiable formulas; an assignment must satisfy every clause."""
        if answer.strip().rstrip(".").upper() in UNSAT_WORDS:
            if reference.satisfiable:
                return Checked.wrong("satisfiable")
            return Checked.right()
        values = parse_assignment(answer, reference.variables)
        if values is None:
            return Checked.malformed("not_an_assignment")
        true_literals = {v if value else -v for v, value in values.items()}
        for number, clause in enumerate(reference.clauses, start=1):
            if true_literals.isdisjoint(clause):
                return Checked.wrong("clause_false", clause=number)
        return Checked.right()

    def random_answer(self, rng: random.Random, reference: SatReference) -> str:
        """A uniformly random full assignment."""
        return format_assignment({v: rng.random() < 0.5 for v in range(1, reference.variables + 1)})


register_family(Sat)
