"""Golds damaged by a dataset's string handling are mended; golds damaged beyond repair stay a 422."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from proctor.verifiers.math.repair import repair_gold, restore_escapes
from proctor.verifiers.math.verifier import MathOptions, MathReference, score_math


@pytest.mark.parametrize(
    ("damaged", "mended"),
    [
        ("\x0crac{1}{2}", "\\frac{1}{2}"),  # "\f" of \frac read as a form feed
        ("\x08oxed{3}", "\\boxed{3}"),
        ("3\times 4", "3\\times 4"),
        ("\x07lpha", "\\alpha"),
        ("\x0bec{v}", "\\vec{v}"),
        ("\\left(1, 2\right)", "\\left(1, 2\\right)"),
        ("x \neq 3", "x \\neq 3"),
        ("\\\\frac{1}{2}", "\\frac{1}{2}"),  # double-escaped JSON
        ("\\\\begin{pmatrix}1\\\\\\\\2\\\\end{pmatrix}", "\\begin{pmatrix}1\\\\2\\end{pmatrix}"),
        ("\\frac{1}{2}}", "\\frac{1}{2}"),
        ("\\frac{1}{2}\\", "\\frac{1}{2}"),
        ("\\{1, 2\\}\\}", "\\{1, 2\\}"),
        ("5\\}", "5"),
    ],
)
def test_damage_a_human_reads_through_is_mended(damaged: str, mended: str) -> None:
    assert repair_gold(damaged) == mended


@pytest.mark.parametrize(
    "sound",
    [
        "\\begin{pmatrix}1\\\\2\\end{pmatrix}",  # a single \\ row break beside single-backslash commands
        "1 \\\\ 2",  # \\ before a blank: a line break, not a doubled command
        "a\nb",  # a real newline followed by a letter that starts no command
        "\tx",  # a real tab
        "\\{1, 2\\}",
        "{1}",
    ],
)
def test_sound_text_is_left_alone(sound: str) -> None:
    assert repair_gold(sound) == sound


def test_newlines_are_restored_only_when_asked() -> None:
    assert restore_escapes("Step 1\nnot needed") == "Step 1\nnot needed"
    assert restore_escapes("x \neq 3", newline=True) == "x \\neq 3"


@pytest.mark.parametrize(
    ("gold", "response"),
    [
        ("\x0crac{1}{2}", "\\boxed{\\frac{1}{2}}"),
        ("\\\\frac{\\\\sqrt{3}}{2}", "\\boxed{\\frac{\\sqrt3}{2}}"),
        ("\\frac{1}{2}}", "\\boxed{0.5}"),
        ("7\\", "The answer is 7."),
        ("\\dfrac{3}{4}\\}", "\\boxed{\\frac34}"),
    ],
)
def test_a_mended_gold_scores_its_answer(gold: str, response: str) -> None:
    assert score_math(response, MathReference(answer=gold), MathOptions()).reward == 1.0
    assert score_math("\\boxed{0.1234}", MathReference(answer=gold), MathOptions()).reward == 0.0


@pytest.mark.parametrize("gold", ["\\frac{1}{", "{{{", "\\frac{1}{2", "\\sqrt{"])
def test_a_gold_damaged_beyond_repair_is_still_refused(gold: str) -> None:
    with pytest.raises(ValidationError, match="cannot be understood"):
        MathReference(answer=gold)


def test_a_response_is_never_mended() -> None:
    """Broken LaTeX from the model is answered as written: the mending is for the dataset's damage only."""
    verdict = score_math("\\boxed{\\\\frac{1}{2}}", MathReference(answer="\\frac{1}{2}"), MathOptions())
    assert verdict.reward == 0.0
