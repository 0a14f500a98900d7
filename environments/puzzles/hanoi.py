"""`puzzle.hanoi`: move a Tower of Hanoi position to a goal position in the fewest moves; any optimal list scores 1.

Start and goal are random legal positions of n disks on pegs A, B, C (not the classic single tower, so the
space of puzzles is 9^n, not 6 per n). The answer is a move list such as `A->C, A->B, C->B`; the checker
replays it by the rules (the top disk of the source peg moves; never onto a smaller disk) and accepts it
when it reaches the goal within the minimum number of moves. The checker computes that minimum itself in
O(n) (`min_moves`, the direct-or-detour recursion on the largest misplaced disk; a test confirms it against
breadth-first search), so every optimal list is accepted, not only the generator's.
"""

from __future__ import annotations

import random
import re
from typing import Annotated

from pydantic import Field, model_validator

from proctor.environments.puzzles.answer import Checked
from proctor.environments.puzzles.base import (
    Puzzle,
    PuzzleConfig,
    PuzzleFamily,
    PuzzleReference,
    register_family,
)

MAX_DISKS = 10
PEGS = "ABC"
Peg = Annotated[list[int], Field(max_length=MAX_DISKS)]
# One \s* per gap, so a failed match cannot backtrack quadratically over long runs of spaces.
_MOVE = re.compile(r"([ABCabc])\s*(?:(?:->|→|-|to)\s*)?([ABCabc])")
_GAP = re.compile(r"[\s,;]*")


class HanoiConfig(PuzzleConfig):
    """Number of disks; start and goal are random legal positions at least `min_moves` apart."""

    min_disks: int = Field(default=5, ge=2, le=MAX_DISKS)
    max_disks: int = Field(default=6, ge=2, le=MAX_DISKS)
    min_moves: int = Field(default=8, ge=1, le=2**MAX_DISKS - 1)


def _legal(pegs: list[list[int]]) -> int:
    """The number of disks of a legal position (disks 1..n once each, larger below smaller); else ValueError."""
    disks = sorted(disk for peg in pegs for disk in peg)
    if not 1 <= len(disks) <= MAX_DISKS or disks != list(range(1, len(disks) + 1)):
        raise ValueError(f"the pegs hold disks 1..n exactly once each (n <= {MAX_DISKS})")
    if any(peg[i] < peg[i + 1] for peg in pegs for i in range(len(peg) - 1)):
        raise ValueError("a peg lists its disks bottom to top, largest first")
    return len(disks)


class HanoiReference(PuzzleReference):
    """Start and goal positions: disk numbers (1 = smallest) on pegs A, B, C, bottom to top."""

    start: list[Peg] = Field(min_length=3, max_length=3)
    goal: list[Peg] = Field(min_length=3, max_length=3)

    @model_validator(mode="after")
    def _positions(self) -> HanoiReference:
        if _legal(self.start) != _legal(self.goal):
            raise ValueError("start and goal hold the same disks")
        return self


def positions(pegs: list[list[int]]) -> list[int]:
    """Peg index (0-2) of every disk, indexed by disk number (index 0 unused)."""
    where = [0] * (sum(len(peg) for peg in pegs) + 1)
    for index, peg in enumerate(pegs):
        for disk in peg:
            where[disk] = index
    return where


def tower_moves(where: list[int], top: int, target: int) -> int:
    """Fewest moves to gather disks 1..top (at `where`) on `target`: the optimal recursion, largest first."""
    moves = 0
    for disk in range(top, 0, -1):
        if where[disk] != target:
            moves += 2 ** (disk - 1)  # this disk's move plus the smaller tower's 2^(disk-1) - 1
            target = 3 - where[disk] - target  # before that, the smaller disks gather on the third peg
    return moves


def min_moves(start: list[list[int]], goal: list[list[int]]) -> int:
    """Fewest moves from one legal position to another.

    Disks larger than the largest misplaced disk k never move. Disk k moves either once (the smaller disks
    wait on the third peg) or twice (via the third peg, the smaller tower shuttling between); no other
    plan can be shorter, and each part of each plan is a tower move of known optimal length.
    """
    here, there = positions(start), positions(goal)
    k = max((disk for disk in range(1, len(here)) if here[disk] != there[disk]), default=0)
    if k == 0:
        return 0
    source, destination = here[k], there[k]
    spare = 3 - source - destination
    direct = tower_moves(here, k - 1, spare) + 1 + tower_moves(there, k - 1, spare)
    detour = tower_moves(here, k - 1, destination) + 2 ** (k - 1) + 1 + tower_moves(there, k - 1, source)
    return min(direct, detour)


def tower_plan(where: list[int], top: int, target: int) -> list[tuple[int, int]]:
    """An optimal move list gathering disks 1..top on `target` (updates a copy of `where`)."""
    where = list(where)
    moves: list[tuple[int, int]] = []

    def gather(disk: int, goal: int) -> None:
        if disk == 0:
            return
        if where[disk] == goal:
            gather(disk - 1, goal)
            return
        spare = 3 - where[disk] - goal
        gather(disk - 1, spare)
        moves.append((where[disk], goal))
        where[disk] = goal
        gather(disk - 1, goal)

    gather(top, target)
    return moves


def plans(
    start: list[list[int]], goal: list[list[int]]
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """The direct and the detour plan from `start` to `goal` (each optimal for its route; both [] if equal)."""
    here, there = positions(start), positions(goal)
    k = max((disk for disk in range(1, len(here)) if here[disk] != there[disk]), default=0)
    if k == 0:
        return [], []
    source, destination = here[k], there[k]
    spare = 3 - source - destination

    def unwind(top: int, peg: int) -> list[tuple[int, int]]:
        # From a tower of disks 1..top on `peg` to the goal's placement: a gathering of the goal, reversed.
        return [(b, a) for a, b in reversed(tower_plan(there, top, peg))]

    direct = [*tower_plan(here, k - 1, spare), (source, destination), *unwind(k - 1, spare)]
    smaller_tower = tower_plan([0] + [destination] * (k - 1), k - 1, source)
    detour = [
        *tower_plan(here, k - 1, destination),
        (source, spare),
        *smaller_tower,
        (spare, destination),
        *unwind(k - 1, source),
    ]
    return direct, detour


def solve(start: list[list[int]], goal: list[list[int]]) -> list[tuple[int, int]]:
    """An optimal move list from `start` to `goal` (the shorter of the direct and the detour plan)."""
    direct, detour = plans(start, goal)
    return direct if len(direct) <= len(detour) else detour


def parse_moves(answer: str) -> list[tuple[int, int]] | None:
    """`A->C, B->A ...` as (source, destination) peg indexes; None when the text has another shape."""
    moves: list[tuple[int, int]] = []
    position = _GAP.match(answer).end()
    while position < len(answer):
        move = _MOVE.match(answer, position)
        if move is None:
            return None
        moves.append((PEGS.index(move.group(1).upper()), PEGS.index(move.group(2).upper())))
        position = _GAP.match(answer, move.end()).end()
    return moves


def replay(pegs: list[list[int]], moves: list[tuple[int, int]]) -> tuple[str, int, list[list[int]]]:
    """Play the moves: ('ok', moves, final pegs) or the first broken rule and the move number it broke at."""
    state = [list(peg) for peg in pegs]
    for number, (source, destination) in enumerate(moves, 1):
        if source == destination:
            return "same_peg", number, state
        if not state[source]:
            return "empty_peg", number, state
        if state[destination] and state[destination][-1] < state[source][-1]:
            return "larger_on_smaller", number, state
        state[destination].append(state[source].pop())
    return "ok", len(moves), state


def describe(pegs: list[list[int]]) -> str:
    """One line per peg, bottom to top."""
    return "\n".join(
        f"Peg {PEGS[i]}: " + (" ".join(str(d) for d in peg) if peg else "(empty)")
        for i, peg in enumerate(pegs)
    )


def random_position(rng: random.Random, n: int) -> list[list[int]]:
    """Each disk on a random peg, largest first (so every position is legal)."""
    pegs: list[list[int]] = [[], [], []]
    for disk in range(n, 0, -1):
        pegs[rng.randrange(3)].append(disk)
    return pegs


class Hanoi(PuzzleFamily[HanoiConfig, HanoiReference]):
    """Tower of Hanoi between two random legal positions, answered as a move list."""

    name = "hanoi"
    version = "1"
    description = (
        "Move a Tower of Hanoi position to a goal position in the fewest moves; any optimal list scores 1."
    )
    Config = HanoiConfig
    Reference = HanoiReference
    levels = {
        "easy": {"min_disks": 3, "max_disks": 4, "min_moves": 4},
        "medium": {"min_disks": 5, "max_disks": 6, "min_moves": 8},
        "hard": {"min_disks": 7, "max_disks": 8, "min_moves": 40},
    }
    max_answer_chars = 8_192

    def generate(self, rng: random.Random, config: HanoiConfig) -> Puzzle[HanoiReference]:
        """Random legal start and goal positions, redrawn until they are at least `min_moves` apart."""
        for _ in range(10_000):
            n = rng.randint(config.min_disks, max(config.min_disks, config.max_disks))
            start, goal = random_position(rng, n), random_position(rng, n)
            optimal = min_moves(start, goal)
            if optimal < min(config.min_moves, 2**n - 1):
                continue
            moves = solve(start, goal)
            assert len(moves) == optimal
            reference = HanoiReference(start=start, goal=goal)
            question = (
                f"Tower of Hanoi with {n} disks numbered 1 (smallest) to {n} (largest) on pegs A, B and C. "
                "Each line lists a peg's disks from bottom to top.\n\n"
                f"Start:\n{describe(start)}\n\nGoal:\n{describe(goal)}\n\n"
                "Reach the goal position from the start in the fewest possible moves. A move takes the top "
                "disk of one peg and puts it on another peg; a disk may never be put on a smaller disk.\n"
                "Answer with the moves in order, comma-separated, each as source->destination, e.g. "
                "A->C, A->B, C->B. Any optimal move list is accepted; a longer one is not."
            )
            gold = ", ".join(f"{PEGS[s]}->{PEGS[d]}" for s, d in moves)
            return Puzzle(question, reference, gold, {"disks": n, "optimal_moves": optimal})
        raise RuntimeError("no Hanoi positions far enough apart; lower min_moves")

    def check(self, answer: str, reference: HanoiReference) -> Checked:
        """Valid when the moves are legal and reach the goal in the minimum number of moves."""
        optimal = min_moves(reference.start, reference.goal)
        moves = parse_moves(answer)
        if moves is None:
            return Checked.malformed("malformed", expected="moves like A->C, A->B")
        if len(moves) > optimal:
            return Checked.wrong("too_many_moves", moves=len(moves), optimal=optimal)
        outcome, number, state = replay(reference.start, moves)
        if outcome != "ok":
            return Checked.wrong(outcome, move=number)
        if state != reference.goal:
            return Checked.wrong("not_at_goal", moves=len(moves), optimal=optimal)
        return Checked.right()

    def random_answer(self, rng: random.Random, reference: HanoiReference) -> str:
        """As many random moves between distinct pegs as the optimal solution has."""
        optimal = min_moves(reference.start, reference.goal)
        return ", ".join("->".join(rng.sample(PEGS, 2)) for _ in range(optimal))


register_family(Hanoi)
