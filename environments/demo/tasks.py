"""The trainer's toy tasks: `demo.max_digit` (the largest of a few digits) and `demo.sum` (a sum of small numbers).

Both need the model to compute something from the prompt, and both are small enough that a randomly
initialised tiny transformer learns them with GRPO in a few minutes on a CPU (tests/test_trainer_learns.py).
The prompt is only the numbers (`3 7`, `3+4`) unless `instruction` is set, so a character-level tokenizer
with a handful of symbols covers it. The answer read from a response is:

- `demo.max_digit`: the first digit in the response (the answer is one digit);
- `demo.sum`: the first whole number in the response.

Train and test use different seed streams but are not disjoint: the space of prompts is tiny on purpose.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from proctor.contract import Verdict
from proctor.environments.puzzles.seeding import item_rng
from proctor.environments.registry import EnvConfig, EnvironmentSpec, Task, register_environment
from proctor.registry import BaseOptions, Example, VerifierSpec, register_verifier

VERSION = "1"
_DIGIT = re.compile(r"[0-9]")
_NUMBER = re.compile(r"[0-9]+")


class DemoReference(BaseModel):
    """The expected answer of a demo task."""

    model_config = ConfigDict(extra="forbid")

    answer: int = Field(ge=0, le=10**9)


class MaxDigitConfig(EnvConfig):
    """How many digits the prompt lists and the largest digit that may appear."""

    count: int = Field(default=2, ge=2, le=16)
    high: int = Field(default=9, ge=1, le=9)
    instruction: bool = Field(default=False, description="Prefix the digits with a question in words.")


class SumConfig(EnvConfig):
    """How many terms the sum has and the largest term."""

    terms: int = Field(default=2, ge=2, le=8)
    high: int = Field(default=9, ge=1, le=999)
    instruction: bool = Field(default=False, description="Prefix the sum with a question in words.")


def first_digit(response: str) -> str | None:
    """The first digit in the response, or None."""
    match = _DIGIT.search(response)
    return match.group() if match else None


def first_number(response: str) -> str | None:
    """The first run of digits in the response (a sign is not read), or None."""
    match = _NUMBER.search(response)
    return match.group() if match else None


def _verdict(answer: str | None, expected: int) -> Verdict:
    if answer is None:
        return Verdict(reward=0.0, correct=False, reason="no_answer", components={"answered": 0.0})
    # Compared as text, never converted: a run of a million digits costs no more than reading it.
    value = answer.lstrip("0") or "0"
    details = {"answer": value if len(value) <= 20 else value[:20] + "...", "expected": expected}
    if value == str(expected):
        return Verdict(reward=1.0, correct=True, components={"answered": 1.0}, details=details)
    return Verdict(
        reward=0.0, correct=False, reason="wrong_answer", components={"answered": 1.0}, details=details
    )


def score_max_digit(response: str, reference: DemoReference, options: BaseOptions) -> Verdict:
    """1 when the first digit of the response is the largest digit of the prompt."""
    return _verdict(first_digit(response), reference.answer)


def score_sum(response: str, reference: DemoReference, options: BaseOptions) -> Verdict:
    """1 when the first number in the response is the sum."""
    return _verdict(first_number(response), reference.answer)


def _task(name: str, content: str, answer: int, split: str, seed: int, index: int, label: str) -> Task:
    return Task(
        prompt=[{"role": "user", "content": content}],
        reference={"answer": answer},
        verifier=name,
        metadata={
            "gold_answer": str(answer),
            "difficulty": label,
            "environment": name,
            "version": VERSION,
            "split": split,
            "seed": seed,
            "index": index,
        },
    )


def make_max_digit(config: MaxDigitConfig, split: str, seed: int, count: int, label: str) -> list[Task]:
    """`count` prompts listing `config.count` digits in 0..high; the answer is the largest."""
    tasks = []
    for index in range(count):
        rng = item_rng("demo.max_digit", VERSION, config.model_dump(), split, seed, index)
        digits = [rng.randint(0, config.high) for _ in range(config.count)]
        content = " ".join(map(str, digits))
        if config.instruction:
            content = f"Which is the largest digit: {content}? Answer with one digit."
        tasks.append(_task("demo.max_digit", content, max(digits), split, seed, index, label))
    return tasks


def make_sum(config: SumConfig, split: str, seed: int, count: int, label: str) -> list[Task]:
    """`count` prompts `a+b+...` with terms in 0..high; the answer is the sum."""
    tasks = []
    for index in range(count):
        rng = item_rng("demo.sum", VERSION, config.model_dump(), split, seed, index)
        terms = [rng.randint(0, config.high) for _ in range(config.terms)]
        content = "+".join(map(str, terms))
        if config.instruction:
            content = f"What is {content}? Answer with the number."
        tasks.append(_task("demo.sum", content, sum(terms), split, seed, index, label))
    return tasks


def _examples(expected: int, right: str, wrong: str, cheat_note: str) -> tuple[Example, ...]:
    reference: dict[str, Any] = {"answer": expected}
    return (
        Example(right, reference, 1.0, note="right answer"),
        Example(f"{right}, I am sure", reference, 1.0, note="right answer first"),
        Example(wrong, reference, 0.0, note=cheat_note),
        Example("", reference, 0.0, note="empty response"),
        Example("no idea", reference, 0.0, note="no number"),
    )


MAX_DIGIT_VERIFIER = register_verifier(
    VerifierSpec(
        name="demo.max_digit",
        version=VERSION,
        score=score_max_digit,
        reference=DemoReference,
        options=BaseOptions,
        description="Toy task for the reference trainer: the first digit of the response must be the largest "
        "digit of the prompt.",
        examples=_examples(7, "7", "3 7", "a smaller digit written first"),
        execution="inline",
    )
)

SUM_VERIFIER = register_verifier(
    VerifierSpec(
        name="demo.sum",
        version=VERSION,
        score=score_sum,
        reference=DemoReference,
        options=BaseOptions,
        description="Toy task for the reference trainer: the first number in the response must be the sum.",
        examples=_examples(12, "12", "1 2", "the digits of the sum apart"),
        execution="inline",
    )
)

register_environment(
    EnvironmentSpec(
        name="demo.max_digit",
        version=VERSION,
        config=MaxDigitConfig,
        make=make_max_digit,
        levels={"easy": {"count": 2, "high": 4}, "medium": {"count": 3, "high": 9}, "hard": {"count": 8}},
        default_level="easy",
        description="The largest of a few digits (`3 7` -> 7). A toy task for the reference trainer.",
        verifier="demo.max_digit",
        kind="demo",
    ),
    verifier=MAX_DIGIT_VERIFIER,
)

register_environment(
    EnvironmentSpec(
        name="demo.sum",
        version=VERSION,
        config=SumConfig,
        make=make_sum,
        levels={
            "easy": {"terms": 2, "high": 4},
            "medium": {"terms": 2, "high": 9},
            "hard": {"terms": 3, "high": 99},
        },
        default_level="easy",
        description="The sum of a few small numbers (`3+4` -> 7). A toy task for the reference trainer.",
        verifier="demo.sum",
        kind="demo",
    ),
    verifier=SUM_VERIFIER,
)
