"""The trainer's toy tasks: demo.max_digit and demo.sum, as environments and as verifiers."""

from __future__ import annotations

import time

import pytest

import proctor
from proctor.contract import RequestError
from proctor.environments.registry import get_environment


def test_max_digit_tasks_list_digits_and_ask_for_the_largest() -> None:
    tasks = get_environment("demo.max_digit").tasks("train", 7, 200, config={"count": 3, "high": 5})
    for task in tasks:
        digits = [int(part) for part in task.prompt[0]["content"].split()]
        assert len(digits) == 3 and all(0 <= d <= 5 for d in digits)
        assert task.reference == {"answer": max(digits)} and task.verifier == "demo.max_digit"
        assert task.metadata["gold_answer"] == str(max(digits)) and task.metadata["index"] == tasks.index(
            task
        )
    assert len({task.prompt[0]["content"] for task in tasks}) > 100  # 216 possible prompts, well spread


def test_sum_tasks() -> None:
    tasks = get_environment("demo.sum").tasks("train", 0, 50, config={"terms": 3, "high": 20})
    for task in tasks:
        terms = [int(part) for part in task.prompt[0]["content"].split("+")]
        assert len(terms) == 3 and max(terms) <= 20 and task.reference == {"answer": sum(terms)}


def test_tasks_are_deterministic_and_seeds_and_splits_differ() -> None:
    spec = get_environment("demo.max_digit")
    first = spec.tasks("train", 1, 20, difficulty="medium")
    assert first == spec.tasks("train", 1, 20, difficulty="medium")
    assert first != spec.tasks("train", 2, 20, difficulty="medium")
    assert first != spec.tasks("test", 1, 20, difficulty="medium")


def test_levels_and_instruction() -> None:
    spec = get_environment("demo.max_digit")
    assert set(spec.levels) == {"easy", "medium", "hard"} and spec.default_level == "easy"
    hard = spec.tasks("train", 0, 1, difficulty="hard")[0]
    assert len(hard.prompt[0]["content"].split()) == 8
    worded = get_environment("demo.sum").tasks("train", 0, 1, config={"instruction": True})[0]
    assert worded.prompt[0]["content"].startswith("What is ")
    with pytest.raises(RequestError) as error:
        spec.tasks("train", 0, 1, config={"count": 1})
    assert error.value.status == 422 and error.value.field == "config.count"


@pytest.mark.parametrize(
    ("response", "reward", "reason"),
    [
        ("5", 1.0, None),
        ("5 because 5 > 3", 1.0, None),
        ("The answer: 5", 1.0, None),
        ("3 5", 0.0, "wrong_answer"),  # the first digit is the answer
        ("53", 1.0, None),  # only the first digit is read
        ("", 0.0, "no_answer"),
        ("five", 0.0, "no_answer"),
        ("\u0665", 0.0, "no_answer"),  # an Arabic-Indic five is not read as a digit
    ],
)
def test_max_digit_verifier(response: str, reward: float, reason: str | None) -> None:
    score = proctor.score("demo.max_digit", response, {"answer": 5})
    assert score.status == "ok" and score.reward == reward and score.reason == reason
    assert score.components == {"answered": 0.0 if reason == "no_answer" else 1.0}


@pytest.mark.parametrize(
    ("response", "reward"),
    [("12", 1.0), ("012", 1.0), ("12 is the sum of 3 and 9", 1.0), ("1 2", 0.0), ("123", 0.0), ("-12", 1.0)],
)
def test_sum_verifier_reads_the_first_whole_number(response: str, reward: float) -> None:
    assert proctor.score("demo.sum", response, {"answer": 12}).reward == reward


def test_a_huge_number_is_cheap_and_wrong() -> None:
    started = time.perf_counter()
    score = proctor.score("demo.sum", "9" * 90_000, {"answer": 12})
    assert score.reward == 0.0 and score.reason == "wrong_answer" and len(score.details["answer"]) == 23
    assert time.perf_counter() - started < 5  # a bound for hang detection, not a timing assertion


def test_a_bad_reference_is_a_422_naming_the_field() -> None:
    with pytest.raises(RequestError) as error:
        proctor.score("demo.max_digit", "5", {"answer": -1})
    assert error.value.status == 422 and error.value.field.startswith("reference")
