"""text.choice: accepted answer forms, hedges, English words that look like labels, references, hostile input."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from proctor.contract import RequestError, Status
from proctor.engine import Engine
from proctor.settings import Settings
from proctor.verifiers.text.choice import (
    ChoiceReference,
    Question,
    fragment_choice,
    line_choice,
    named_options,
    resolve_label,
    scan_labels,
)

CAPITALS = {"answer": "B", "options": ["London", "Paris", "Rome", "Berlin"]}
BIG = 10 * 1024 * 1024


@pytest.fixture(scope="module")
def engine():
    engine = Engine(Settings(cache_size=0))
    yield engine
    engine.close()


def score(engine, response, reference):
    return engine.score({"verifier": "text.choice", "response": response, "reference": reference})


def question(reference=CAPITALS) -> Question:
    return Question(ChoiceReference.model_validate(reference))


# -- accepted forms ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("response", "reference", "method"),
    [
        ("B", "B", "bare"),
        ("(B)", "B", "bare"),
        ("B)", "B", "bare"),
        ("B.", "B", "bare"),
        ("**B**", "B", "bare"),
        ("option B", "B", "bare"),
        ("b", "B", "bare"),
        ("(b)", "B", "bare"),
        ("\\boxed{B}", "B", "boxed"),
        ("The final answer is $\\boxed{\\text{B}}$.", "B", "boxed"),
        ("\\fbox{(B)}", "B", "boxed"),
        ("The answer is B", "B", "answer_phrase"),
        ("Answer: (B)", "B", "answer_phrase"),
        ("**Answer:** B", "B", "answer_phrase"),
        ("ANSWER: b", "B", "answer_phrase"),
        ("The correct answer is: B) Paris", CAPITALS, "answer_phrase"),
        ("I think the answer is probably B.", "B", "answer_phrase"),
        ("A good choice is B", "B", "answer_phrase"),
        ("The answer is B, because A ignores friction.", "B", "answer_phrase"),
        ("The answer is B (A ignores friction).", "B", "answer_phrase"),
        ("Answer: maybe B", "B", "answer_phrase"),
        ("The answer is not A. The answer is B.", "B", "answer_phrase"),
        ("Option B is correct.", "B", "answer_phrase"),
        ("A is wrong, B is correct", "B", "answer_phrase"),
        ("I choose B", "B", "answer_phrase"),
        ("I'd go with (B).", "B", "answer_phrase"),
        ("The answer is Paris.", CAPITALS, "answer_phrase"),
        ("<answer>B</answer>", "B", "answer_tag"),
        ("<answer>The answer is B</answer>", "B", "answer_tag"),
        ("Paris", CAPITALS, "bare"),
        ("  paris. ", CAPITALS, "bare"),
        ("B) Paris", CAPITALS, "bare"),
        ("Let me think.\nParis is the capital.\n\nB", "B", "bare"),
        ("B\n\nExplanation: the capital of France is Paris.", "B", "bare"),
        ("<think>A or C? A looks tempting.</think>\nThe correct option is **B**.", "B", "answer_phrase"),
        ("The answer is 3.", {"answer": "3", "labels": "1234"}, "answer_phrase"),
        ("(ii)", {"answer": "ii", "labels": ["i", "ii", "iii", "iv"]}, "bare"),
        ("I", {"answer": "I", "labels": "ABCDEFGHIJ"}, "bare"),
        ("A", "A", "bare"),
        ("A is correct.", "A", "answer_phrase"),
        ("Answer: A because the others are wrong", "A", "answer_phrase"),
    ],
)
def test_accepted_forms_score_one(engine, response, reference, method):
    result = score(engine, response, reference)
    assert result.status is Status.ok
    assert (result.reward, result.reason) == (1.0, None), result.details
    assert result.details["method"] == method
    assert result.components == {"format": 1.0, "answer": 1.0}
    assert result.verifier == "text.choice@1.0.0"


# -- hedges, silence, English, wrong answers ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("response", "reference", "reason"),
    [
        ("", "B", "no_answer"),
        ("   \n ", "B", "no_answer"),
        ("A or B", "B", "hedged"),
        ("(A) or (B)", "B", "hedged"),
        ("option A or option B", "B", "hedged"),
        ("A/B", "B", "hedged"),
        ("A and C", "C", "hedged"),
        ("A, B, C, D", "C", "hedged"),
        ("Either B or D", "B", "hedged"),
        ("\\boxed{A} \\boxed{B}", "B", "hedged"),
        ("\\boxed{A, B}", "B", "hedged"),
        ("<answer>B</answer> <answer>C</answer>", "B", "hedged"),
        ("Answer: A\nAnswer: B", "B", "hedged"),
        ("The answer is B. A is correct.", "B", "hedged"),
        ("The answer is A or B because both fit.", "B", "hedged"),
        ("The answer is B (or possibly A).", "B", "hedged"),
        ("Answer: B, or maybe C", "B", "hedged"),
        ("B) Rome", CAPITALS, "hedged"),  # the label names B, the text names C
        ("Which city is the capital of France?\nA) London\nB) Paris\nC) Rome\nD) Berlin", CAPITALS, "hedged"),
        ("Which city?\nLondon\nParis\nRome\nBerlin", CAPITALS, "hedged"),
        ("<think>The answer is B.</think>", "B", "no_answer"),
        ("<think>The answer is B.", "B", "no_answer"),
        ("B <think>thinking</think>", "B", "no_answer"),
        ("Which city is the capital of France?", CAPITALS, "no_answer"),
        ("The answer is a bit unclear", "A", "no_answer"),
        ("I think so", {"answer": "I", "labels": "ABCDEFGHIJ"}, "no_answer"),
        ("\\boxed{42}", "B", "no_answer"),
        ("Paris, probably", CAPITALS, "no_answer"),
        ("A good choice is B", "A", "wrong_answer"),  # "A" is the article, B is the choice
        ("The answer is A.", "B", "wrong_answer"),
        ("\\boxed{C}", CAPITALS, "wrong_answer"),
        ("The answer is \\boxed{C}. Answer: B", "B", "wrong_answer"),  # a box outranks an answer line
    ],
)
def test_rejected_responses_score_zero(engine, response, reference, reason):
    result = score(engine, response, reference)
    assert result.status is Status.ok
    assert (result.reward, result.reason) == (0.0, reason), result.details
    assert result.correct is False
    assert result.components["answer"] == 0.0
    assert result.components["format"] == (1.0 if reason == "wrong_answer" else 0.0)


def test_details_name_the_options_found(engine):
    result = score(engine, "Either B or D", "B")
    assert result.details["named"] == ["B", "D"]
    assert result.details["expected"] == "B"
    assert result.details["extracted"] == "Either B or D"


# -- helpers -----------------------------------------------------------------------------------------------


def test_scan_labels_reads_from_the_start_only():
    q = question("B")
    assert scan_labels("B because A is wrong", q) == (["B"], 1)
    assert scan_labels("(A) or (B) maybe", q)[0] == ["A", "B"]
    assert scan_labels("Either B or D", q)[0] == ["B", "D"]
    assert scan_labels("A good choice", q) == ([], 0)
    assert scan_labels("I think", q) == ([], 0)
    assert scan_labels("a bit", q) == ([], 0)
    assert scan_labels("Bob", q) == ([], 0)


def test_fragment_and_line_choice():
    q = question()
    assert fragment_choice(" Paris.", q) == ["B"]
    assert fragment_choice("Rome, I think", q) == []
    assert line_choice("B) Paris", q) == ["B"]
    assert line_choice("B) Rome", q) == ["B", "C"]
    assert line_choice("B because", q) == []
    assert line_choice("x" * 10_000, q) == []


def test_named_options_steps_in_order():
    q = question("B")
    assert named_options("\\boxed{C}\n<answer>A</answer>\nAnswer: D\nB", q)[:2] == (["C"], "boxed")
    assert named_options("<answer>A</answer>\nAnswer: D\nB", q)[:2] == (["A"], "answer_tag")
    assert named_options("Answer: D\nB", q)[:2] == (["D"], "answer_phrase")
    assert named_options("so\nB", q)[:2] == (["B"], "bare")
    assert named_options("nothing here", q)[:2] == ([], "none")


def test_option_texts_shared_by_two_options_match_neither(engine):
    reference = {"answer": "A", "options": ["Yes", "yes", "No"]}
    assert score(engine, "yes", reference).reason == "no_answer"
    assert score(engine, "A", reference).reward == 1.0


# -- references --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reference", "label"),
    [
        ("B", "B"),
        ("b", "B"),
        ("(C)", "C"),
        ({"answer": 1, "options": ["x", "y"]}, "B"),
        ({"answer": "Paris", "options": ["London", "Paris"]}, "B"),
        ({"answer": "3", "labels": "1234"}, "3"),
        ({"answer": 0, "labels": ["i", "ii"]}, "i"),
        ({"answer": "Z"}, "Z"),
    ],
)
def test_reference_resolves_to_a_label(reference, label):
    assert ChoiceReference.model_validate(reference).answer == label


def test_reference_schema_lists_the_bare_string_and_the_object_form():
    from proctor.registry import get_verifier

    schema = get_verifier("text.choice").describe()["reference_schema"]
    string_form, object_form = schema["anyOf"]
    assert string_form == {"type": "string", "description": "The correct label, e.g. 'B'."}
    assert set(object_form["properties"]) == {"options", "labels", "answer"}
    with pytest.raises(ValueError, match="extra"):
        ChoiceReference.model_validate({"answer": "B", "bogus": 1})


def test_resolve_label():
    assert resolve_label("[d].", list("ABCD"), None) == "D"
    assert resolve_label("E", list("ABCD"), None) is None
    assert resolve_label(" rome ", list("ABCD"), ["London", "Paris", "Rome", "Berlin"]) == "C"


@pytest.mark.parametrize(
    ("reference", "field"),
    [
        ({"answer": "E", "options": ["a", "b", "c", "d"]}, "reference.answer"),
        ({"answer": 4, "options": ["a", "b", "c", "d"]}, "reference.answer"),
        ({"answer": -1}, "reference.answer"),
        ({"answer": True}, "reference.answer"),
        ({"answer": None}, "reference.answer"),
        ({"answer": "Madrid", "options": ["London", "Paris"]}, "reference.answer"),
        ({"answer": "A", "labels": "AA"}, "reference.labels"),
        ({"answer": "A", "labels": "Aa"}, "reference.labels"),
        ({"answer": "A", "labels": ["A", "B C"]}, "reference.labels"),
        ({"answer": "A", "options": ["x", "y", "z"], "labels": "AB"}, "reference.labels"),
        ({"answer": "A", "options": [f"o{i}" for i in range(27)]}, "reference.labels"),
        ({"answer": "A", "options": []}, "reference.options"),
        ({"answer": "A", "options": ["x", ""]}, "reference.options.1"),
        ({"answer": "A", "extra": 1}, "reference.extra"),
        ({"options": ["x"]}, "reference.answer"),
        ("", "reference.answer"),
        (3, "reference"),
    ],
)
def test_bad_reference_is_a_422_naming_the_field(engine, reference, field):
    with pytest.raises(RequestError) as caught:
        score(engine, "A", reference)
    assert caught.value.status == 422
    assert caught.value.field == field


def test_options_are_validated(engine):
    with pytest.raises(RequestError) as caught:
        engine.score({"verifier": "text.choice", "response": "A", "reference": "A", "options": {"x": 1}})
    assert caught.value.field == "options.x"


# -- hostile inputs ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("response", "reward"),
    [
        ("x" * BIG + "\nThe answer is B.", 1.0),
        ("\\boxed{" + "{" * BIG, 0.0),
        ("\\boxed{B}" * (BIG // 9), 1.0),
        ("Answer: B\n" * (BIG // 10), 1.0),
        ("Answer: A\nAnswer: B\n" * (BIG // 20), 0.0),
        ("answer" + " " * BIG + "x", 0.0),
        ("(" * BIG + "B", 0.0),
        ("A or " * (BIG // 5), 0.0),
        ("\n" * BIG + "B", 1.0),
    ],
    ids=[
        "long-prefix",
        "open-braces",
        "many-boxes",
        "many-answers",
        "many-hedges",
        "blank-run",
        "brackets",
        "endless-hedge",
        "newlines",
    ],
)
def test_ten_megabyte_responses(engine, response, reward):
    with ThreadPoolExecutor(max_workers=1) as pool:
        result = pool.submit(score, engine, response, "B").result(timeout=60)
    assert result.status is Status.ok
    assert result.reward == reward
