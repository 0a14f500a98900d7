"""`puzzle.knapsack`: pick items of the greatest total value within a weight capacity; any optimal set scores 1.

0/1 knapsack with small integer weights. The answer is the chosen item numbers; the checker accepts any
set of distinct items whose total weight fits and whose total value equals the optimum, which it recomputes
by dynamic programming over weights (O(items x capacity), bounded by the reference limits). The generator
counts the optimal sets and redraws instances where a random pick of that many items would be optimal more
than 2% of the time.
"""

from __future__ import annotations

import random
from functools import lru_cache
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

MAX_ITEMS = 30
MAX_CAPACITY = 1_000
MAX_GUESS_RATE = 0.02


class KnapsackConfig(PuzzleConfig):
    """Number of items, their weight and value ranges, and the capacity as a percentage of the total weight."""

    # At least 8: with fewer, a random pick of items is optimal more than 2% of the time.
    min_items: int = Field(default=8, ge=8, le=MAX_ITEMS)
    max_items: int = Field(default=11, ge=8, le=MAX_ITEMS)
    max_weight: int = Field(default=20, ge=1, le=100)
    max_value: int = Field(default=40, ge=1, le=1_000)
    capacity_percent: int = Field(default=45, ge=5, le=95)


class KnapsackReference(PuzzleReference):
    """Item weights and values (items 1..n) and the capacity."""

    weights: list[int] = Field(min_length=1, max_length=MAX_ITEMS)
    values: list[int] = Field(min_length=1, max_length=MAX_ITEMS)
    capacity: int = Field(ge=0, le=MAX_CAPACITY)

    @model_validator(mode="after")
    def _well_formed(self) -> KnapsackReference:
        if len(self.weights) != len(self.values):
            raise ValueError("one weight and one value per item")
        if any(not 1 <= w <= MAX_CAPACITY for w in self.weights) or any(
            not 0 <= v <= 10**6 for v in self.values
        ):
            raise ValueError(f"weights are in [1, {MAX_CAPACITY}], values in [0, 10^6]")
        return self


def solve(weights: list[int], values: list[int], capacity: int) -> tuple[int, int, list[int]]:
    """(optimal value, number of optimal item sets, one optimal set as 0-based indexes) by DP over weights."""
    n = len(weights)
    # table[i][w]: the best value from items i.. with exactly... at most w capacity left; ways counts the sets.
    best = [[0] * (capacity + 1) for _ in range(n + 1)]
    ways = [[1] * (capacity + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        weight, value = weights[i], values[i]
        row, nxt, row_ways, nxt_ways = best[i], best[i + 1], ways[i], ways[i + 1]
        for w in range(capacity + 1):
            skip = nxt[w]
            take = value + nxt[w - weight] if weight <= w else -1
            row[w] = max(skip, take)
            row_ways[w] = (nxt_ways[w] if skip == row[w] else 0) + (
                nxt_ways[w - weight] if take == row[w] else 0
            )
    chosen, w = [], capacity
    for i in range(n):
        if weights[i] <= w and values[i] + best[i + 1][w - weights[i]] == best[i][w]:
            chosen.append(i)
            w -= weights[i]
    return best[0][capacity], ways[0][capacity], chosen


def optimal_value(weights: list[int], values: list[int], capacity: int) -> int:
    """The optimal value alone, for the checker (cached: many samples of one task share an instance)."""
    return _optimal_value(tuple(weights), tuple(values), capacity)


@lru_cache(maxsize=4096)
def _optimal_value(weights: tuple[int, ...], values: tuple[int, ...], capacity: int) -> int:
    # A Pareto front of (weight, value) states, usually far smaller than the capacity.
    front = [(0, 0)]  # sorted by weight, values strictly increasing: no state dominates another
    for weight, value in zip(weights, values, strict=True):
        shifted = [(w + weight, v + value) for w, v in front if w + weight <= capacity]
        merged = sorted(front + shifted)
        front = []
        for w, v in merged:
            if not front or v > front[-1][1]:
                if front and front[-1][0] == w:
                    front[-1] = (w, v)
                else:
                    front.append((w, v))
    return front[-1][1]


class Knapsack(PuzzleFamily[KnapsackConfig, KnapsackReference]):
    """0/1 knapsack, answered as the chosen item numbers."""

    name = "knapsack"
    version = "1"
    description = (
        "0/1 knapsack: the most total value within a weight capacity; any optimal item set scores 1."
    )
    Config = KnapsackConfig
    Reference = KnapsackReference
    levels = {
        "easy": {"min_items": 8, "max_items": 9, "max_weight": 15, "max_value": 30, "capacity_percent": 50},
        "medium": {
            "min_items": 8,
            "max_items": 11,
            "max_weight": 20,
            "max_value": 40,
            "capacity_percent": 45,
        },
        "hard": {
            "min_items": 14,
            "max_items": 20,
            "max_weight": 40,
            "max_value": 100,
            "capacity_percent": 40,
        },
    }
    max_answer_chars = 400

    def generate(self, rng: random.Random, config: KnapsackConfig) -> Puzzle[KnapsackReference]:
        """Random weights and values; redrawn while a random pick of items is optimal too often."""
        for _ in range(10_000):
            n = rng.randint(config.min_items, max(config.min_items, config.max_items))
            weights = [rng.randint(1, config.max_weight) for _ in range(n)]
            values = [rng.randint(1, config.max_value) for _ in range(n)]
            capacity = min(MAX_CAPACITY, max(1, sum(weights) * config.capacity_percent // 100))
            best, ways, chosen = solve(weights, values, capacity)
            if not chosen or len(chosen) == n or ways / comb(n, len(chosen)) > MAX_GUESS_RATE:
                continue
            lines = [
                f"{i + 1}: weight {w}, value {v}"
                for i, (w, v) in enumerate(zip(weights, values, strict=True))
            ]
            question = (
                f"A knapsack holds a total weight of at most {capacity}. The items are:\n\n"
                + "\n".join(lines)
                + "\n\nChoose items (each at most once) whose total weight is at most "
                f"{capacity} and whose total value is as large as possible.\n"
                "Answer with the numbers of the chosen items, comma-separated (in any order). "
                "Any optimal choice is accepted."
            )
            gold = ", ".join(str(i + 1) for i in chosen)
            measure = {
                "items": n,
                "capacity": capacity,
                "optimum": best,
                "chosen": len(chosen),
                "optimal_sets": ways,
            }
            return Puzzle(
                question, KnapsackReference(weights=weights, values=values, capacity=capacity), gold, measure
            )
        raise RuntimeError("no knapsack instance with few enough optimal choices; add items")

    def check(self, answer: str, reference: KnapsackReference) -> Checked:
        """Valid when the items are distinct, fit in the capacity, and reach the optimal value."""
        numbers = parse_numbers(answer, max_digits=3)
        n = len(reference.weights)
        if numbers is None:
            return Checked.malformed("malformed", expected="comma-separated item numbers")
        if any(not 1 <= number <= n for number in numbers):
            return Checked.wrong("unknown_item")
        if len(set(numbers)) != len(numbers):
            return Checked.wrong("repeated_item")
        weight = sum(reference.weights[number - 1] for number in numbers)
        if weight > reference.capacity:
            return Checked.wrong("over_capacity", weight=weight, capacity=reference.capacity)
        value = sum(reference.values[number - 1] for number in numbers)
        best = optimal_value(reference.weights, reference.values, reference.capacity)
        if value != best:
            return Checked.wrong("not_optimal", value=value, optimum=best)
        return Checked.right()

    def random_answer(self, rng: random.Random, reference: KnapsackReference) -> str:
        """A random set of distinct items, as many as an optimal set has."""
        _, _, chosen = solve(reference.weights, reference.values, reference.capacity)
        n = len(reference.weights)
        return ", ".join(str(i + 1) for i in sorted(rng.sample(range(n), max(1, len(chosen)))))


register_family(Knapsack)
