"""The `math` verifier end to end: reference and options validation, extraction, hedges, reasons, details,
the `form` option, the gold cache, and scoring through the real engine and worker pool.

Most tests call the registered spec the way a worker does (validated reference and options, then the score
function); the engine tests at the end run the same verifier through `Engine` and its subprocess pool.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from proctor.contract import RequestError, Status, Verdict
from proctor.engine import Engine
from proctor.registry import get_verifier
from proctor.settings import Settings
from proctor.verifiers.math.verifier import SPEC, gold_value

PLUGIN = "proctor.verifiers.math"


def score(response: str, reference: Any, **options: Any) -> Verdict:
    return SPEC.score(response, SPEC.parse_reference(reference), SPEC.parse_options(options))


def reward(response: str, reference: Any, **options: Any) -> float:
    return score(response, reference, **options).reward


# -- the failures the issue lists for Math-Verify ----------------------------------------------------------


@pytest.mark.parametrize(
    ("response", "gold", "expected"),
    [
        # false positives of Math-Verify: each must score 0
        ("\\boxed{\\frac{1}{2^{98}}}", "\\frac{1}{2^{99}}", 0.0),
        ("\\boxed{-0.738}", "1.2e-4", 0.0),  # 1.2e-4 read as 1.2·e − 4 = −0.738...
        ("\\boxed{1.2e-4}", "1.2e^{-4}", 0.0),
        ("\\boxed{\\frac{2}{15}}", "4:30", 0.0),  # 4:30 read as a ratio
        ("\\boxed{4:30}", "\\frac{2}{15}", 0.0),
        ("\\boxed{1}", "x^2+2x+1", 0.0),  # bare gold x^2+2x+1 parsed as 1
        ("After 3 steps we have 17 marbles, 5 of them red.", "5", 0.0),  # unanchored last number
        # and the same answers where they are right: each must score 1
        ("\\boxed{\\frac{1}{2^{99}}}", "\\frac{1}{2^{99}}", 1.0),
        ("\\boxed{1.2e-4}", "0.00012", 1.0),
        ("\\boxed{0.00012}", "1.2e-4", 1.0),
        ("\\boxed{(x+1)^2}", "x^2+2x+1", 1.0),
        # false negatives of Math-Verify: each must score 1
        ("\\boxed{0.\\overline{3}}", "\\frac{1}{3}", 1.0),
        ("The answer is √2", "\\sqrt{2}", 1.0),
        ("The answer is 4:30 p.m.", "16:30", 1.0),
        ("Final answer: 4:30 p.m.", "4:30\\text{ p.m.}", 1.0),
        ("First I got \\boxed{2}. Wait, that is wrong: recomputing gives \\boxed{4}.", "4", 1.0),
    ],
)  # fmt: skip
def test_math_verify_failure_cases(response: str, gold: str, expected: float):
    assert reward(response, gold) == expected


def test_lenient_extraction_takes_the_last_number_only_when_asked():
    response = "After 3 steps we have 17 marbles, 5 of them red. So 5"
    assert score(response, "5").reason == "no_answer"
    assert reward(response, "5", extraction="lenient") == 1.0


# -- hedges and commitments ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("response", "gold", "expected", "reason"),
    [
        ("\\boxed{3} or \\boxed{4}", "3", 0.0, "hedged"),
        ("\\boxed{3}, \\boxed{4}", "4", 0.0, "hedged"),
        ("The answer is either 3 or 4.", "3", 0.0, "hedged"),
        ("The answer is 3 or 4", "4", 0.0, "hedged"),
        ("\\boxed{\\frac12} or \\boxed{0.5}", "0.5", 1.0, None),  # two forms of one answer: no hedge
        ("\\boxed{3} or \\boxed{4}", "\\{3, 4\\}", 1.0, None),  # a set gold: the boxes are its members
        ("\\boxed{x=2} or \\boxed{x=3}", "x = 2 \\text{ or } x = 3", 1.0, None),
        ("\\boxed{3} or \\boxed{5}", "\\{3, 4\\}", 0.0, "wrong_answer"),
        ("\\boxed{3, 4}", "3", 0.0, "wrong_answer"),  # a list for a single value
        ("\\boxed{\\pm 3}", "3", 0.0, "wrong_answer"),
    ],
)  # fmt: skip
def test_hedges(response: str, gold: str, expected: float, reason: str | None):
    verdict = score(response, gold)
    assert (verdict.reward, verdict.reason) == (expected, reason)


@pytest.mark.parametrize(
    "response", ["", " ", ".", ":", "Thought process:", "The answer is", "\\boxed{}", "<think>x"]
)
def test_content_free_responses_have_no_answer(response: str):
    verdict = score(response, "3")
    assert verdict.reward == 0.0
    assert verdict.reason == "no_answer"
    assert verdict.components == {"format": 0.0, "answer": 0.0}


@pytest.mark.parametrize(
    "response",
    ["\\boxed{\\infty}", "\\boxed{\\text{undefined}}", "\\boxed{\\emptyset}", "\\boxed{\\mathbb{R}}",
     "\\boxed{x}", "\\boxed{\\text{any real number}}", "\\boxed{\\text{all of the above}}", "\\boxed{3 \\pm 1}",
     "\\boxed{(-\\infty, \\infty)}", "\\boxed{\\{1, 2, 3, 4, 5\\}}", "\\boxed{3x/x + 1}", "\\boxed{0.}",
     "The answer is correct.", "\\boxed{\\text{The answer is correct}}",
     "\\boxed{3 \\neq 3}", "\\boxed{x = x}"],
)  # fmt: skip
def test_master_keys_score_zero(response: str):
    assert reward(response, "3") == 0.0


@pytest.mark.parametrize(
    "response",
    ["\\boxed{9^9^9^9}", "\\boxed{9^{9^{9^{9}}}}", "\\boxed{2^{2^{30}}}", "\\boxed{(10^{10})!}",
     "\\boxed{" + "(" * 100 + "1" + ")" * 100 + "}", "\\boxed{" + "1+" * 3000 + "1}", "\\boxed{x^{10^{6}}}",
     "\\boxed{e^{e^{e^{e^{10}}}}}", "\\boxed{2^{2^{30}} - 2^{2^{30}} + 3}"],
)  # fmt: skip
def test_answers_beyond_the_guards_are_too_complex(response: str):
    verdict = score(response, "3")
    assert verdict.status is Status.ok
    assert (verdict.reward, verdict.reason) == (0.0, "too_complex")
    assert verdict.components == {"format": 1.0, "answer": 0.0}


def test_unparseable_and_wrong_answers_have_their_reasons():
    assert score("\\boxed{3 @@ 4}", "3").reason == "unparseable"
    assert score("\\boxed{5}", "3").reason == "wrong_answer"
    assert score("\\boxed{\\text{blue}}", "3").reason == "wrong_answer"


# -- details and components -------------------------------------------------------------------------------------


def test_details_name_the_extraction_both_normal_forms_and_the_rule():
    verdict = score("<think>hmm</think> so \\boxed{\\frac{2}{4}}", "0.5")
    assert verdict.reward == 1.0
    assert verdict.components == {"format": 1.0, "answer": 1.0}
    assert verdict.details == {
        "extracted": ["\\frac{2}{4}"],
        "method": "boxed",
        "gold_normalized": "0.5",
        "answer_normalized": "2/4",
        "rule": "exact",
    }


def test_a_wrong_answer_keeps_its_details():
    verdict = score("Answer: 7", "x = 3")
    assert (verdict.reward, verdict.reason) == (0.0, "wrong_answer")
    assert verdict.components == {"format": 1.0, "answer": 0.0}
    assert verdict.details["extracted"] == ["7"]
    assert verdict.details["gold_normalized"] == "x = 3"
    assert verdict.details["rule"].startswith("digits")


# -- references ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "reference",
    ["\\frac{1}{2}", "$\\frac{1}{2}$", "\\boxed{\\frac{1}{2}}", {"answer": "0.5"},
     "We halve the whole. Therefore the answer is $\\boxed{\\frac12}$.", "Half of it.\n#### 0.5"],
)  # fmt: skip
def test_reference_forms(reference: Any):
    assert reward("\\boxed{0.5}", reference) == 1.0


@pytest.mark.parametrize(
    ("reference", "field"),
    [("", "reference.answer"), ({"answer": ""}, "reference.answer"), ({"answer": "1", "op": "eq"}, "reference.op"),
     ("\\frac{1}{", "reference.answer"), ({"answer": "3 @ 4"}, "reference.answer"), (42, "reference"),
     ("\\boxed{9^9^9^9}", "reference.answer")],
)  # fmt: skip
def test_bad_references_are_422_naming_the_field(reference: Any, field: str):
    with pytest.raises(RequestError) as caught:
        SPEC.parse_reference(reference)
    assert caught.value.status == 422
    assert caught.value.field == field


@pytest.mark.parametrize(
    "options",
    [{"extraction": "loose"}, {"percent": "maybe"}, {"units": "convert"}, {"form": "expanded"}, {"rel_tol": -1},
     {"tolerance": 0.1}],
)  # fmt: skip
def test_bad_options_are_rejected(options: dict[str, Any]):
    with pytest.raises(RequestError) as caught:
        SPEC.parse_options(options)
    assert caught.value.status == 422
    assert caught.value.field.startswith("options")


def test_the_gold_is_parsed_once_per_process_for_a_group():
    gold = "\\frac{\\sqrt{3}}{7} + 0.0001234"
    gold_value.cache_clear()
    for answer in ["\\frac{\\sqrt3}{7} + 0.0001234", "1", "0.2475", "\\frac{1}{7}"] * 4:
        score(f"\\boxed{{{answer}}}", gold)
    info = gold_value.cache_info()
    assert info.misses == 1  # the validator's parse and every response share one entry
    assert info.hits >= 16


def test_plain_numbers_never_import_sympy():
    code = (
        "import sys; from proctor.verifiers.math.verifier import SPEC\n"
        "for r, g in [('\\\\boxed{3}', '3'), ('Answer: 0.5', '1/2'), ('\\\\boxed{1,000}', '1000'),"
        " ('\\\\boxed{x^2}', 'x^2'), ('\\\\boxed{\\\\frac{\\\\pi}{4}}', '0.785')]:\n"
        "    SPEC.score(r, SPEC.parse_reference(g), SPEC.parse_options({}))\n"
        "print('sympy' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


# -- options -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("response", "gold", "options", "expected", "reason"),
    [
        ("\\boxed{50}", "50\\%", {}, 1.0, None),
        ("\\boxed{0.5}", "50\\%", {}, 1.0, None),
        ("\\boxed{50}", "50\\%", {"percent": "strict"}, 0.0, "wrong_answer"),
        ("\\boxed{0.5}", "50\\%", {"percent": "strict"}, 1.0, None),
        ("\\boxed{5}", "5\\text{ cm}", {}, 1.0, None),
        ("\\boxed{5\\text{ m}}", "5\\text{ cm}", {}, 0.0, "wrong_answer"),
        ("\\boxed{5}", "5\\text{ cm}", {"units": "strict"}, 0.0, "wrong_answer"),
        ("\\boxed{5\\text{ cm}}", "5\\text{ cm}", {"units": "strict"}, 1.0, None),
        ("\\boxed{0.33}", "\\frac{1}{3}", {"rel_tol": 0.02}, 1.0, None),
        ("\\boxed{0.33}", "\\frac{1}{3}", {}, 0.0, "wrong_answer"),
        # form: factored
        ("\\boxed{(x+1)^2}", "x^2+2x+1", {"form": "factored"}, 1.0, None),
        ("\\boxed{x^2+2x+1}", "(x+1)^2", {"form": "factored"}, 0.0, "wrong_form"),
        ("\\boxed{(x-1)(x^2-1)}", "(x-1)^2(x+1)", {"form": "factored"}, 0.0, "wrong_form"),
        ("\\boxed{2(x+1)}", "2x+2", {"form": "factored"}, 1.0, None),
        ("\\boxed{2x+2}", "2(x+1)", {"form": "factored"}, 0.0, "wrong_form"),
        ("\\boxed{x^2+1}", "x^2+1", {"form": "factored"}, 1.0, None),
        # form: lowest_terms
        ("\\boxed{\\frac{1}{2}}", "\\frac{2}{4}", {"form": "lowest_terms"}, 1.0, None),
        ("\\boxed{\\frac{2}{4}}", "\\frac{1}{2}", {"form": "lowest_terms"}, 0.0, "wrong_form"),
        ("\\boxed{0.5}", "\\frac{1}{2}", {"form": "lowest_terms"}, 0.0, "wrong_form"),
        ("\\boxed{\\frac{6}{1}}", "6", {"form": "lowest_terms"}, 0.0, "wrong_form"),
        ("\\boxed{3\\frac{1}{2}}", "\\frac72", {"form": "lowest_terms"}, 1.0, None),
        # form: simplified
        ("\\boxed{2\\sqrt{2}}", "\\sqrt{8}", {"form": "simplified"}, 1.0, None),
        ("\\boxed{\\sqrt{8}}", "2\\sqrt{2}", {"form": "simplified"}, 0.0, "wrong_form"),
        ("\\boxed{\\frac{1}{\\sqrt{2}}}", "\\frac{\\sqrt2}{2}", {"form": "simplified"}, 0.0, "wrong_form"),
        ("\\boxed{\\frac{\\sqrt{2}}{2}}", "\\frac{1}{\\sqrt2}", {"form": "simplified"}, 1.0, None),
        ("\\boxed{2+3}", "5", {"form": "simplified"}, 0.0, "wrong_form"),
        ("\\boxed{x + x}", "2x", {"form": "simplified"}, 0.0, "wrong_form"),
        ("\\boxed{3x+2}", "2+3x", {"form": "simplified"}, 1.0, None),
        # form: decimal
        ("\\boxed{0.25}", "\\frac14", {"form": "decimal"}, 1.0, None),
        ("\\boxed{\\frac13}", "\\frac13", {"form": "decimal"}, 0.0, "wrong_form"),
        ("\\boxed{1.2\\times10^{-4}}", "1.2e-4", {"form": "decimal"}, 1.0, None),
        ("\\boxed{x = 2.5}", "x = \\frac52", {"form": "decimal"}, 1.0, None),
    ],
)  # fmt: skip
def test_options(response: str, gold: str, options: dict[str, Any], expected: float, reason: str | None):
    verdict = score(response, gold, **options)
    assert (verdict.reward, verdict.reason) == (expected, reason), verdict.details


def test_a_wrong_value_is_a_wrong_answer_even_when_a_form_is_asked():
    assert score("\\boxed{\\frac{2}{6}}", "\\frac12", form="lowest_terms").reason == "wrong_answer"


# -- categories end to end (response text, not bare values) ------------------------------------------------------


@pytest.mark.parametrize(
    ("response", "gold"),
    [
        ("So the total is **Answer:** 1,234", "1234"),
        ("The final answer is $\\boxed{3\\frac{1}{2}}$", "3.5"),
        ("Thus the probability is \\boxed{\\dfrac{5}{12}}.", "\\frac{5}{12}"),
        ("The answer is $x = 5$.", "5"),
        ("Final Answer: The final answer is $\\boxed{[-2, 7)}$. I hope it is correct.", "[-2,7)"),
        ("\\boxed{(3, -1)}", "(3,-1)"),
        ("\\boxed{\\begin{pmatrix} -1 \\\\ 2 \\end{pmatrix}}", "\\begin{pmatrix}-1\\\\2\\end{pmatrix}"),
        ("\\boxed{2 - 3i}", "2-3i"),
        ("\\boxed{60^\\circ}", "60"),
        ("\\boxed{\\text{(C)}}", "C"),
        ("The answer is 12\\text{ cm}.", "12"),
        ("\\boxed{y = -\\frac{1}{2}x + 3}", "x + 2y = 6"),
        ("\\boxed{x \\in (-\\infty, 2) \\cup (5, \\infty)}", "(-\\infty,2)\\cup(5,\\infty)"),
        ("\\boxed{\\frac{\\pi}{3}}", "60^\\circ"),
        ("\\boxed{2^{10}}", "1024"),
        ("\\boxed{\\text{even}}", "\\text{Even}"),
    ],
)
def test_category_examples_score_one(response: str, gold: str):
    verdict = score(response, gold)
    assert verdict.reward == 1.0, verdict.details


# -- through the real engine and its worker pool --------------------------------------------------------------


@pytest.fixture(scope="module")
def engine():
    engine = Engine(Settings(cache_size=0, pool_workers=1, plugins=PLUGIN))
    yield engine
    engine.close()


def test_registered_with_the_issue_contract():
    spec = get_verifier("math")
    assert (spec.version, spec.execution, spec.deadline_s) == ("1.0.0", "pool", 2.0)
    kinds = [example.expect for example in spec.examples]
    assert kinds.count(1.0) >= 15 and kinds.count(0.0) >= 15


def test_engine_scores_a_grpo_group_through_the_pool(engine: Engine):
    gold = "\\frac{\\sqrt{3}}{2}"
    answers = ["\\frac{\\sqrt3}{2}", "0.866", "\\frac12", "\\sin(\\pi/3)", "\\frac{\\sqrt{3}}{3}", "0.87",
               "\\frac{3}{2\\sqrt3}", "1"] * 2  # fmt: skip
    requests = [
        {"verifier": "math", "response": f"Thus \\boxed{{{answer}}}", "reference": gold, "id": index}
        for index, answer in enumerate(answers)
    ]
    results = engine.score_batch(requests)
    assert [result.status for result in results] == [Status.ok] * 16
    assert [result.reward for result in results] == [1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0] * 2


def test_engine_answers_guards_as_verdicts_and_bad_golds_as_422(engine: Engine):
    tower = engine.score({"verifier": "math", "response": "\\boxed{9^{9^{9^{9}}}}", "reference": "3"})
    assert (tower.status, tower.reward, tower.reason) == (Status.ok, 0.0, "too_complex")
    with pytest.raises(RequestError) as caught:
        engine.score({"verifier": "math", "response": "\\boxed{3}", "reference": "\\frac{1}{"})
    assert (caught.value.status, caught.value.field) == (422, "reference.answer")
    batch = engine.score_batch(
        [{"verifier": "math", "response": "\\boxed{3}", "reference": "\\frac{1}{", "id": "bad"},
         {"verifier": "math", "response": "\\boxed{3}", "reference": "3", "id": "good"}]
    )  # fmt: skip
    assert batch[0].error.status == 422 and batch[0].error.field == "reference.answer"
    assert (batch[1].status, batch[1].reward) == (Status.ok, 1.0)


@pytest.mark.parametrize("slash", ["\u2044", "\u2215"])
def test_unicode_fraction_and_division_slashes_read_as_division(slash):
    assert score(f"The answer is 3{slash}2.", "\\frac{3}{2}").reward == 1.0
