"""`puzzle.activity_scheduling`: choose non-overlapping activities, as many (or as valuable) as possible.

Activities are numbered, each with a start and an end time (the half-open interval [start, end): one may
start exactly when another ends). An unweighted config asks for the largest number of activities; a weighted
level gives every activity a value and asks for the largest total value. The answer is the chosen activity
numbers; the checker accepts any set of distinct, pairwise compatible activities whose count (or total
value) equals the optimum, which it recomputes by dynamic programming over activities sorted by end time.
The generator counts the optimal sets and redraws instances where a random pick of that many activities
would be optimal more than 2% of the time. Every level is weighted: on unweighted instances a random maximal
schedule (add random activities while they fit, no optimising) is optimal about 40% of the time, which no
rejection can fix; weighted instances are redrawn while such a schedule is optimal in more than
GUESS_HITS of GUESS_TRIALS simulated picks. (`weighted: false` is still a config, ungated.)
"""

from __future__ import annotations

import bisect
import random
from math import comb

from pydantic import Field, model_validator

from proctor.environments.puzzles.answer import Checked
from proctor.environments.puzzles.base import (
    Puzzle,
    PuzzleConfig,
    PuzzleFamily,
    PuzzleReference,
    register_family,
)
from proctor.environments.puzzles.lis import parse_numbers

MAX_ACTIVITIES = 60
MAX_TIME = 10_000
MAX_GUESS_RATE = 0.02
GUESS_TRIALS = 100
GUESS_HITS = 1
"""Weighted instances: at most this many of GUESS_TRIALS random maximal schedules may be optimal."""


class ActivityConfig(PuzzleConfig):
    """How many activities, the time horizon, durations, and whether activities carry values."""

    # At least 8: with fewer, a random pick of activities is optimal more than 2% of the time.
    min_activities: int = Field(default=10, ge=8, le=MAX_ACTIVITIES)
    max_activities: int = Field(default=13, ge=8, le=MAX_ACTIVITIES)
    horizon: int = Field(default=40, ge=4, le=MAX_TIME)
    min_duration: int = Field(default=2, ge=1, le=MAX_TIME)
    max_duration: int = Field(default=9, ge=1, le=MAX_TIME)
    weighted: bool = False
    max_weight: int = Field(default=20, ge=1, le=1_000)


class ActivityReference(PuzzleReference):
    """(start, end) of activities 1..n, and their values when the instance is weighted."""

    intervals: list[tuple[int, int]] = Field(min_length=1, max_length=MAX_ACTIVITIES)
    weights: list[int] | None = Field(default=None, max_length=MAX_ACTIVITIES)

    @model_validator(mode="after")
    def _well_formed(self) -> ActivityReference:
        if any(not 0 <= start < end <= MAX_TIME for start, end in self.intervals):
            raise ValueError(f"every activity needs 0 <= start < end <= {MAX_TIME}")
        if self.weights is not None and (
            len(self.weights) != len(self.intervals) or any(not 1 <= w <= 10**6 for w in self.weights)
        ):
            raise ValueError("one weight in [1, 10^6] per activity")
        return self

    def weight(self, index: int) -> int:
        """The value of activity `index` (0-based); 1 when unweighted."""
        return 1 if self.weights is None else self.weights[index]


def optimum(intervals: list[tuple[int, int]], weights: list[int]) -> tuple[int, int, list[int]]:
    """(best total, number of optimal sets, one optimal set as 0-based indexes) by DP over end times."""
    order = sorted(range(len(intervals)), key=lambda i: (intervals[i][1], intervals[i][0], i))
    ends = [intervals[i][1] for i in order]
    best = [0] * (len(order) + 1)  # best[k]: the best over the first k activities in end order
    ways = [1] * (len(order) + 1)
    fits = [0] * len(order)
    for k, i in enumerate(order, 1):
        fits[k - 1] = bisect.bisect_right(ends, intervals[i][0], 0, k - 1)  # earlier ones ending by our start
        take = weights[i] + best[fits[k - 1]]
        skip = best[k - 1]
        best[k] = max(take, skip)
        ways[k] = (ways[fits[k - 1]] if take == best[k] else 0) + (ways[k - 1] if skip == best[k] else 0)
    chosen: list[int] = []
    k = len(order)
    while k > 0:
        i = order[k - 1]
        if weights[i] + best[fits[k - 1]] == best[k]:
            chosen.append(i)
            k = fits[k - 1]
        else:
            k -= 1
    return best[-1], ways[-1], sorted(chosen)


def random_maximal(rng: random.Random, intervals: list[tuple[int, int]]) -> list[int]:
    """A random maximal schedule: activities in random order, each kept when it fits (0-based, sorted)."""
    order = list(range(len(intervals)))
    rng.shuffle(order)
    chosen: list[int] = []
    for i in order:
        start, end = intervals[i]
        if all(end <= intervals[j][0] or intervals[j][1] <= start for j in chosen):
            chosen.append(i)
    return sorted(chosen)


def guess_hits(rng: random.Random, intervals: list[tuple[int, int]], weights: list[int], best: int) -> int:
    """How many of GUESS_TRIALS random maximal schedules reach the optimum `best`."""
    return sum(sum(weights[i] for i in random_maximal(rng, intervals)) == best for _ in range(GUESS_TRIALS))


def compatible(intervals: list[tuple[int, int]]) -> bool:
    """Whether no two half-open intervals overlap."""
    ordered = sorted(intervals)
    return all(a[1] <= b[0] for a, b in zip(ordered, ordered[1:], strict=False))


class ActivityScheduling(PuzzleFamily[ActivityConfig, ActivityReference]):
    """Interval scheduling (unweighted or weighted), answered as the chosen activity numbers."""

    name = "activity_scheduling"
    version = "2"
    description = "Pick non-overlapping activities: as many as possible, or the most total value; any optimal set scores 1."
    Config = ActivityConfig
    Reference = ActivityReference
    levels = {
        "easy": {
            "min_activities": 10,
            "max_activities": 12,
            "horizon": 30,
            "min_duration": 2,
            "max_duration": 8,
            "weighted": True,
            "max_weight": 20,
        },
        "medium": {
            "min_activities": 12,
            "max_activities": 14,
            "horizon": 50,
            "min_duration": 2,
            "max_duration": 11,
            "weighted": True,
            "max_weight": 30,
        },
        "hard": {
            "min_activities": 14,
            "max_activities": 18,
            "horizon": 60,
            "min_duration": 2,
            "max_duration": 14,
            "weighted": True,
            "max_weight": 30,
        },
    }
    max_answer_chars = 400

    def generate(self, rng: random.Random, config: ActivityConfig) -> Puzzle[ActivityReference]:
        """Random intervals (and values), redrawn while a random pick is optimal too often."""
        for _ in range(10_000):
            n = rng.randint(config.min_activities, max(config.min_activities, config.max_activities))
            intervals = []
            for _ in range(n):
                length = rng.randint(config.min_duration, max(config.min_duration, config.max_duration))
                length = min(length, config.horizon - 1)
                start = rng.randint(0, config.horizon - length)
                intervals.append((start, start + length))
            weights = [rng.randint(1, config.max_weight) for _ in range(n)] if config.weighted else None
            reference = ActivityReference(intervals=intervals, weights=weights)
            total, ways, chosen = optimum(intervals, [reference.weight(i) for i in range(n)])
            if len(chosen) == n or ways / comb(n, len(chosen)) > MAX_GUESS_RATE:
                continue
            if weights is not None and guess_hits(rng, intervals, weights, total) > GUESS_HITS:
                continue
            lines = [
                f"{i + 1}: from {s} to {e}" + (f", value {weights[i]}" if weights else "")
                for i, (s, e) in enumerate(intervals)
            ]
            goal = "the largest possible total value" if weights else "as many activities as possible"
            question = (
                f"Here are {n} activities, each with a start and an end time:\n\n" + "\n".join(lines) + "\n\n"
                f"Choose activities that do not overlap, with {goal}. An activity occupies the time from its "
                "start up to its end, so one may start exactly when another ends.\n"
                "Answer with the numbers of the chosen activities, comma-separated (in any order). "
                "Any optimal choice is accepted."
            )
            gold = ", ".join(str(i + 1) for i in chosen)
            measure = {"activities": n, "chosen": len(chosen), "optimum": total, "optimal_sets": ways}
            return Puzzle(question, reference, gold, measure)
        raise RuntimeError("no activity instance with few enough optimal choices; add activities")

    def check(self, answer: str, reference: ActivityReference) -> Checked:
        """Valid when the numbers are distinct activities, pairwise compatible, and reach the optimum."""
        numbers = parse_numbers(answer, max_digits=3)
        n = len(reference.intervals)
        if numbers is None:
            return Checked.malformed("malformed", expected="comma-separated activity numbers")
        if any(not 1 <= number <= n for number in numbers):
            return Checked.wrong("unknown_activity")
        if len(set(numbers)) != len(numbers):
            return Checked.wrong("repeated_activity")
        if not compatible([reference.intervals[number - 1] for number in numbers]):
            return Checked.wrong("overlap")
        total = sum(reference.weight(number - 1) for number in numbers)
        best, _, _ = optimum(list(reference.intervals), [reference.weight(i) for i in range(n)])
        if total != best:
            return Checked.wrong("not_optimal", total=total, optimum=best)
        return Checked.right()

    def random_answer(self, rng: random.Random, reference: ActivityReference) -> str:
        """A random maximal schedule: compatible activities picked in random order, without optimising."""
        return ", ".join(str(i + 1) for i in random_maximal(rng, list(reference.intervals)))


register_family(ActivityScheduling)
