"""Multi-part answers in several boxes, told apart from hedging; a later anchor corrects an earlier box."""

from __future__ import annotations

import pytest

from proctor.verifiers.math.repair import drop_part_labels
from tests.math_helpers import reward


@pytest.mark.parametrize(
    ("response", "gold", "expected"),
    [
        ("(1) The radius is $\\boxed{35 \\text{ cm}}$.\n\n(2) There are $\\boxed{4}$ tangents.", "35 \\text{ cm}, 4", 1),
        ("(1) $\\boxed{4}$\n(2) $\\boxed{35 \\text{ cm}}$", "35 \\text{ cm}, 4", 0),  # numbered parts, swapped
        ("(a) $\\boxed{12}$ (b) $\\boxed{5}$ (c) $\\boxed{7}$", "12, 5, 7", 1),
        ("(a) $\\boxed{12}$ (b) $\\boxed{7}$ (c) $\\boxed{5}$", "12, 5, 7", 0),
        ("so $x = \\boxed{2}$ and then $x = \\boxed{-3}$.", "2, -3", 1),  # roots: a set, any order
        ("so $x = \\boxed{-3}$ and then $x = \\boxed{2}$.", "2, -3", 1),
        ("$x = \\boxed{1}$, $y = \\boxed{2}$.", "(1, 2)", 1),
        ("(1) $\\boxed{a_n = 2n-1}$\n\n(2) $\\boxed{S_n = n^2}$", "\\text{(1) } a_n=2n-1;\\ \\text{(2) } S_n=n^2", 1),
        # hedging is still hedging: more boxes than parts, or several boxes for one value
        ("It is $\\boxed{2}$, maybe $\\boxed{-3}$, or $\\boxed{5}$.", "2, -3", 0),
        ("Try $\\boxed{2}$. Hmm, or it is $\\boxed{3}$.", "3", 1),  # a later box corrects an earlier one
        ("$\\boxed{3}$ and also possibly $\\boxed{4}$", "3", 0),
        ("first $\\boxed{2}$, second $\\boxed{2}$", "2, -3", 0),
    ],
)  # fmt: skip
def test_parts_in_boxes(response: str, gold: str, expected: int) -> None:
    assert reward(response, gold) == expected


@pytest.mark.parametrize(
    ("response", "gold", "expected"),
    [
        ("So $\\boxed{8}$. But that missed a case.\n\nFinal Answer: The final answer is $9$. I hope it is correct.", "9", 1),
        ("So $\\boxed{8}$. But that missed a case.\n\nFinal Answer: The final answer is $9$. I hope it is correct.", "8", 0),
        ("The total is $\\boxed{42}$.\n\nThe answer is boxed above.", "42", 1),  # an anchor pointing back
        ("所以答案为 9。", "9", 1),
        ("最终答案是：$\\frac{1}{2}$", "0.5", 1),
    ],
)  # fmt: skip
def test_a_later_anchor_and_other_anchors(response: str, gold: str, expected: int) -> None:
    assert reward(response, gold) == expected


def test_part_labels_are_dropped_from_golds_only_where_they_label_parts() -> None:
    assert drop_part_labels("(1) 3; (2) 5") == "3; 5"
    assert drop_part_labels("(1)") == "(1)"
    assert drop_part_labels("(1, 2)") == "(1, 2)"
    assert drop_part_labels("f(1) = 2") == "f(1) = 2"


def test_one_leading_number_in_brackets_is_a_factor_not_a_part() -> None:
    """MATH's gold "(2) (x+2) (x-2)": 2(x+2)(x-2), never (x+2)(x-2)."""
    assert drop_part_labels("(2) (x+2) (x-2)") == "(2) (x+2) (x-2)"
    assert reward("\\boxed{2(x+2)(x-2)}", "(2) (x+2) (x-2)") == 1
    assert reward("\\boxed{(x+2)(x-2)}", "(2) (x+2) (x-2)") == 0


def test_a_later_anchor_that_is_no_answer_leaves_the_box_in_charge() -> None:
    response = (
        "so there are $56 \\cdot 10 = \\boxed{560}$ sequences.\nBy stars and bars, the answer is "
        "${{2+4-1}\\choose2}$ * ${{5+4-1}\\choose5}$ =560"
    )
    assert reward(response, "560") == 1
    assert reward(response.replace("boxed{560}", "boxed{561}"), "560") == 0


def test_a_line_start_anchor_after_a_box_must_start_its_line() -> None:
    """`Answer $4$` right after a box on the same line is no line-start anchor: the box stands."""
    assert reward("So \\boxed{3} Answer $4$\n", "4") == 0
    assert reward("So \\boxed{3} Answer $4$\n", "3") == 1
    assert reward("So \\boxed{3}.\nAnswer $4$\n", "4") == 1  # on a line of its own it corrects the box


def test_a_bug_in_reading_an_answer_is_not_a_reward_of_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only a ParseError means "not math we read" (reward 0); any other error escapes score_math, and the engine
    answers it verifier_error, masked (tests/test_engine.py), never a wrong answer."""
    from proctor.verifiers.math import verifier

    def broken(text: str) -> None:
        raise ValueError(
            "invalid literal for int() with base 10: '1 000'"
        )  # the kind of bug red team 17 found

    gold = verifier.MathReference(answer="5")  # read before the bug is planted
    monkeypatch.setattr(verifier, "parse_value", broken)
    with pytest.raises(ValueError, match="invalid literal"):
        verifier.score_math("\\boxed{5}", gold, verifier.MathOptions())
