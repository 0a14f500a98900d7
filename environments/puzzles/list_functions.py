"""`puzzle.list_functions`: infer a list transformation from examples and apply it to a new list.

A hidden program (one to `max_steps` steps from a fixed library of list operations: reverse, sort, add or
multiply by a constant, keep the evens, take the first k, rotate, running sums ...) maps each example input
to its output. The answer is the output for the test input.

Uniqueness is proved over the library: the generator runs every program of up to `max_steps` steps (every
operation with every parameter) on the examples and keeps the item only if all programs that fit every
example give the same output for the test input; otherwise it adds an example, up to `max_examples`, and
then redraws. (A rule outside the library could still fit the examples; the prompt says the rule is one of
these simple operations or a composition of them.) The checker replays the reference's program on the test
input and compares lists; it also redraws items whose answer is empty or equals the test input.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from functools import lru_cache
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
from proctor.environments.puzzles.lis import parse_numbers

MAX_LIST = 20
MAX_ABS = 10**6
MAX_EXAMPLES = 8
Op = Callable[[list[int], int], list[int]]
Values = Annotated[list[int], Field(max_length=MAX_LIST * 2)]


def _unique(xs: list[int], _: int) -> list[int]:
    seen: dict[int, None] = {}
    for x in xs:
        seen.setdefault(x, None)
    return list(seen)


def _running(xs: list[int], _: int) -> list[int]:
    out, total = [], 0
    for x in xs:
        total += x
        out.append(total)
    return out


def _running_max(xs: list[int], _: int) -> list[int]:
    out: list[int] = []
    for x in xs:
        out.append(x if not out or x > out[-1] else out[-1])
    return out


OPS: dict[str, tuple[Op, tuple[int, ...]]] = {
    # name: (function of (list, parameter), the parameters it takes; (0,) means none)
    "reverse": (lambda xs, _: xs[::-1], (0,)),
    "sort_ascending": (lambda xs, _: sorted(xs), (0,)),
    "sort_descending": (lambda xs, _: sorted(xs, reverse=True), (0,)),
    "add": (lambda xs, k: [x + k for x in xs], (-3, -2, -1, 1, 2, 3, 5, 10)),
    "multiply": (lambda xs, k: [x * k for x in xs], (-1, 2, 3)),
    "keep_even": (lambda xs, _: [x for x in xs if x % 2 == 0], (0,)),
    "keep_odd": (lambda xs, _: [x for x in xs if x % 2], (0,)),
    "keep_greater_than": (lambda xs, k: [x for x in xs if x > k], (3, 5, 10)),
    "remove_value": (lambda xs, k: [x for x in xs if x != k], (0, 1, 2, 3, 4, 5, 6, 7, 8, 9)),
    "take_first": (lambda xs, k: xs[:k], (1, 2, 3, 4)),
    "drop_first": (lambda xs, k: xs[k:], (1, 2, 3)),
    "take_last": (lambda xs, k: xs[-k:] if k <= len(xs) else xs, (1, 2, 3)),
    "drop_last": (lambda xs, k: xs[:-k] if k < len(xs) else [], (1, 2)),
    "rotate_left": (lambda xs, k: xs[k % len(xs) :] + xs[: k % len(xs)] if xs else xs, (1, 2)),
    "rotate_right": (lambda xs, k: xs[-(k % len(xs)) :] + xs[: -(k % len(xs))] if xs else xs, (1, 2)),
    "unique": (_unique, (0,)),
    "running_sum": (_running, (0,)),
    "running_max": (_running_max, (0,)),
    "double_each": (lambda xs, _: [y for x in xs for y in (x, x)], (0,)),
    "append": (lambda xs, k: [*xs, k], (0, 1, 7)),
    "prepend": (lambda xs, k: [k, *xs], (0, 1, 7)),
    "swap_ends": (lambda xs, _: [xs[-1], *xs[1:-1], xs[0]] if len(xs) > 1 else xs, (0,)),
    "differences": (lambda xs, _: [b - a for a, b in zip(xs, xs[1:], strict=False)], (0,)),
    "mod": (lambda xs, k: [x % k for x in xs], (2, 3, 5)),
}
OP_NAMES = tuple(OPS)
STEPS: tuple[tuple[str, int], ...] = tuple((name, k) for name in OP_NAMES for k in OPS[name][1])
"""Every (operation, parameter) pair: the library the uniqueness proof ranges over."""

WORDS: dict[str, str] = {
    "reverse": "reverse",
    "sort_ascending": "sort ascending",
    "sort_descending": "sort descending",
    "add": "add k to each element",
    "multiply": "multiply each element by k",
    "keep_even": "keep the even elements",
    "keep_odd": "keep the odd elements",
    "keep_greater_than": "keep the elements greater than k",
    "remove_value": "remove every k",
    "take_first": "take the first k",
    "drop_first": "drop the first k",
    "take_last": "take the last k",
    "drop_last": "drop the last k",
    "rotate_left": "rotate left by k",
    "rotate_right": "rotate right by k",
    "unique": "drop repeated values",
    "running_sum": "running sums",
    "running_max": "running maximum",
    "double_each": "repeat each element twice",
    "append": "append k",
    "prepend": "prepend k",
    "swap_ends": "swap first and last",
    "differences": "differences of neighbours",
    "mod": "each element modulo k",
}


class ListFunctionsConfig(PuzzleConfig):
    """Program length, list lengths and values, and how many examples may be shown."""

    min_steps: int = Field(default=1, ge=1, le=3)
    max_steps: int = Field(default=2, ge=1, le=3)
    min_length: int = Field(default=5, ge=2, le=MAX_LIST)
    max_length: int = Field(default=8, ge=2, le=MAX_LIST)
    max_value: int = Field(default=20, ge=3, le=1_000)
    min_examples: int = Field(default=3, ge=1, le=MAX_EXAMPLES)
    max_examples: int = Field(default=5, ge=1, le=MAX_EXAMPLES)


class ListFunctionsReference(PuzzleReference):
    """The hidden program (steps of the library), the shown examples and the test input."""

    program: list[tuple[str, int]] = Field(min_length=1, max_length=3)
    examples: list[tuple[Values, Values]] = Field(min_length=1, max_length=MAX_EXAMPLES)
    test_input: list[int] = Field(min_length=1, max_length=MAX_LIST)

    @model_validator(mode="after")
    def _known_steps(self) -> ListFunctionsReference:
        if any((name, k) not in _STEP_SET for name, k in self.program):
            raise ValueError("program steps come from the library (operation, parameter)")
        for values in [self.test_input, *(x for pair in self.examples for x in pair)]:
            if len(values) > MAX_LIST * 2 or any(abs(v) > MAX_ABS for v in values):
                raise ValueError("lists are short and values small")
        return self


_STEP_SET = frozenset(STEPS)


def apply(program: list[tuple[str, int]] | tuple[tuple[str, int], ...], xs: list[int]) -> list[int]:
    """Run a program on a list."""
    for name, k in program:
        xs = OPS[name][0](xs, k)
    return xs


_SAME_LENGTH = frozenset(
    [
        "reverse",
        "sort_ascending",
        "sort_descending",
        "add",
        "multiply",
        "rotate_left",
        "rotate_right",
        "running_sum",
        "running_max",
        "swap_ends",
        "mod",
    ]
)
_SHORTER_OR_SAME = frozenset(["keep_even", "keep_odd", "keep_greater_than", "remove_value", "unique"])


@lru_cache(maxsize=4096)
def _steps_of_length(n: int, m: int) -> tuple[tuple[str, int], ...]:
    """The steps that can turn a list of length n into one of length m."""
    steps = []
    for name, k in STEPS:
        if name in _SAME_LENGTH:
            fits = m == n
        elif name in _SHORTER_OR_SAME:
            fits = m <= n
        elif name in ("take_first", "take_last"):
            fits = m == min(k, n)
        elif name in ("drop_first", "drop_last"):
            fits = m == max(0, n - k)
        elif name in ("append", "prepend"):
            fits = m == n + 1
        elif name == "double_each":
            fits = m == 2 * n
        else:
            fits = name != "differences" or m == max(0, n - 1)
        if fits:
            steps.append((name, k))
    return tuple(steps)


def _plausible_last_steps(xs: list[int], y: list[int]) -> list[tuple[str, int]]:
    """The steps that could map `xs` to `y`, by output length and, for `add` and `remove_value`, by value.

    Only a speed-up of `candidates`: every step left out provably cannot give `y`.
    """
    shift = y[0] - xs[0] if xs and y else None
    return [
        (name, k)
        for name, k in _steps_of_length(len(xs), len(y))
        if not (name == "add" and shift is not None and k != shift)
        and not (name == "remove_value" and k not in xs and len(y) != len(xs))
    ]


def _too_big(xs: list[int]) -> bool:
    # Intermediate lists past these bounds are not extended (the generator's own programs stay inside them).
    return len(xs) > MAX_LIST * 2 or bool(xs) and (max(xs) > MAX_ABS or min(xs) < -MAX_ABS)


def candidates(x: list[int], y: list[int], max_steps: int) -> list[tuple[tuple[str, int], ...]]:
    """Every library program of 1 to `max_steps` steps that maps `x` to `y`.

    Programs are grown breadth-first; prefixes that give the same intermediate list are run once (their
    continuations are listed for each prefix, so no program is lost).
    """
    found: list[tuple[tuple[str, int], ...]] = []
    frontier: dict[tuple[int, ...], list[tuple[tuple[str, int], ...]]] = {tuple(x): [()]}
    for depth in range(1, max_steps + 1):
        nxt: dict[tuple[int, ...], list[tuple[tuple[str, int], ...]]] = {}
        for state, prefixes in frontier.items():
            xs = list(state)
            for step in STEPS if depth < max_steps else _plausible_last_steps(xs, y):
                out = OPS[step[0]][0](xs, step[1])
                if out == y:
                    found.extend(prefix + (step,) for prefix in prefixes)
                if depth < max_steps and not _too_big(out):
                    nxt.setdefault(tuple(out), []).extend(prefix + (step,) for prefix in prefixes)
        frontier = nxt
    return found


def _outputs(
    programs: list[tuple[tuple[str, int], ...]], examples: list[tuple[list[int], list[int]]], test: list[int]
) -> list[tuple[int, ...]]:
    # The distinct test outputs of the programs that also fit `examples`.
    fitting = [p for p in programs if all(apply(p, x) == y for x, y in examples)]
    return sorted({tuple(apply(p, test)) for p in fitting})


@lru_cache(maxsize=1)
def _describe_library() -> str:
    return "; ".join(WORDS[name] for name in OP_NAMES)


class ListFunctions(PuzzleFamily[ListFunctionsConfig, ListFunctionsReference]):
    """ARC-1D-like list functions: infer the rule from examples, apply it to a new input."""

    name = "list_functions"
    version = "1"
    description = "Infer a list transformation from input/output examples and apply it to a new list."
    Config = ListFunctionsConfig
    Reference = ListFunctionsReference
    levels = {
        "easy": {
            "min_steps": 1,
            "max_steps": 1,
            "min_length": 4,
            "max_length": 7,
            "min_examples": 3,
            "max_examples": 4,
        },
        "medium": {
            "min_steps": 1,
            "max_steps": 2,
            "min_length": 5,
            "max_length": 8,
            "min_examples": 3,
            "max_examples": 5,
        },
        "hard": {
            "min_steps": 2,
            "max_steps": 2,
            "min_length": 6,
            "max_length": 10,
            "min_examples": 4,
            "max_examples": 6,
        },
    }
    max_answer_chars = 300

    def generate(self, rng: random.Random, config: ListFunctionsConfig) -> Puzzle[ListFunctionsReference]:
        """A random program and random lists; examples are added until the test output is forced."""
        max_steps = max(config.min_steps, config.max_steps)
        max_length = max(config.min_length, config.max_length)
        max_examples = max(config.min_examples, config.max_examples)

        def draw_list() -> list[int]:
            return [
                rng.randint(0, config.max_value) for _ in range(rng.randint(config.min_length, max_length))
            ]

        for attempt in range(1, 2_001):
            steps = rng.randint(config.min_steps, max_steps)
            program = [rng.choice(STEPS) for _ in range(steps)]
            test = draw_list()
            answer = apply(program, test)
            if not answer or answer == test or len(answer) > MAX_LIST * 2:
                continue
            examples = []
            for _ in range(config.min_examples):
                x = draw_list()
                examples.append((x, apply(program, x)))
            programs = candidates(examples[0][0], examples[0][1], max_steps)
            while True:
                outputs = _outputs(programs, examples[1:], test)
                if len(outputs) == 1 or len(examples) >= max_examples:
                    break
                x = draw_list()
                examples.append((x, apply(program, x)))
            if outputs != [tuple(answer)] or any(not y or len(y) > MAX_LIST * 2 for _, y in examples):
                continue
            reference = ListFunctionsReference(program=program, examples=examples, test_input=test)
            shown = "\n".join(f"{x} -> {y}" for x, y in examples)
            question = (
                "Each input list below is turned into its output list by the same rule. The rule is one simple "
                f"operation or a composition of up to {max_steps} of them ({_describe_library()}; k is a "
                f"small constant).\n\n{shown}\n\n"
                f"Apply the rule to {test}. Answer with the output list, e.g. [1, 2, 3]."
            )
            gold = "[" + ", ".join(map(str, answer)) + "]"
            measure = {"steps": steps, "examples": len(examples), "attempts": attempt}
            return Puzzle(question, reference, gold, measure)
        raise RuntimeError("no list function whose examples force the answer")

    def check(self, answer: str, reference: ListFunctionsReference) -> Checked:
        """Valid when the list equals the hidden program applied to the test input."""
        values = parse_numbers(answer)
        if values is None:
            return Checked.malformed("malformed", expected="a list of integers like [1, 2, 3]")
        return (
            Checked.right()
            if values == apply(reference.program, reference.test_input)
            else Checked.wrong("wrong_list")
        )

    def random_answer(self, rng: random.Random, reference: ListFunctionsReference) -> str:
        """A random list as long as the expected output, with values from the examples' range."""
        length = len(apply(reference.program, reference.test_input))
        pool = sorted(
            {v for pair in reference.examples for xs in pair for v in xs} | set(reference.test_input)
        )
        return "[" + ", ".join(str(rng.choice(pool)) for _ in range(length)) + "]"


register_family(ListFunctions)
