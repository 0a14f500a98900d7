"""Red team 17: the math verifier's new leniencies (3d122bf..HEAD) attacked as a reward-hacking policy would.

Every finding the red team confirmed is a test asserting the correct verdict (each failed when it was written,
and passes since its fix); the tests named ..._held are attacks that held from the start.
"""

from __future__ import annotations

import pytest

from proctor.verifiers.math.verifier import MathOptions, MathReference, score_math
from tests.math_helpers import reward

# -- F1: "Final Answer: <sentence> is X" reads only what follows the LAST "is": a hedge in two clauses passes.

COPULA_HEDGES = [
    ("Final Answer: it is 3 or it is 4", "4"),
    ("Final Answer: x is 3 or x is 4", "4"),
    ("The final answer is 3 if n is odd; otherwise it is 4.", "4"),
    ("Final Answer: the number of ways is 7 or maybe it is 8", "8"),
    ("Final Answer: The value is 3; if rounded it is 4", "4"),
    ("Final Answer: x is 3 and y is 4", "4"),
    ("Answer: m is 3, n is 4", "4"),
    ("Final Answer: the smallest is 3 and the largest is 4", "4"),
]


@pytest.mark.parametrize(("response", "gold"), COPULA_HEDGES)
def test_copula_sentence_hedge_is_not_credited(response: str, gold: str) -> None:
    assert reward(response, gold) == 0.0


def test_copula_plain_hedge_held() -> None:
    assert reward("Final Answer: x is 3 or 4", "4") == 0.0
    assert reward("\\boxed{4}\n\nFinal Answer: 3 or 4", "4") == 0.0
    assert reward("Final Answer: The largest $n$ is $34$", "34") == 1.0


# -- F2: a labelled tuple (p,q)=(a,b) is compared without its order: swapped values pass.

LABELLED_SWAPS = [
    ("\\boxed{(p,q)=(2,3)}", "(p,q)=(3,2)"),
    ("\\boxed{(x,y)=(2,3)}", "(x,y)=(3,2)"),
    ("\\boxed{(x,y,z)=(1,3,2)}", "(x,y,z)=(1,2,3)"),
    ("\\boxed{(a,b)=(1,-1)}", "(a,b)=(-1,1)"),
]


@pytest.mark.parametrize(("response", "gold"), LABELLED_SWAPS)
def test_labelled_tuple_swap_is_wrong(response: str, gold: str) -> None:
    assert reward(response, gold) == 0.0


def test_labelled_relations_held() -> None:
    assert reward("\\boxed{(q,p)=(2,3)}", "(p,q)=(3,2)") == 1.0  # renamed, same assignment
    assert reward("\\boxed{q=3,p=2}", "(p,q)=(3,2)") == 0.0
    assert reward("\\boxed{(2,3)}", "(p,q)=(3,2)") == 0.0
    assert reward("\\boxed{x=2, y=3}", "(x,y)=(3,2)") == 0.0
    assert reward("\\boxed{AB=5, CD=4}", "AB=4, CD=5") == 0.0
    assert reward("\\boxed{CD=4}", "AB=4") == 0.0
    assert reward("\\boxed{V_1:V_2=21:11}", "V_1:V_2=11:21") == 0.0
    assert reward("\\boxed{V_2:V_1=21:11}", "V_1:V_2=11:21") == 1.0
    assert reward("\\boxed{b_n=2n+1}", "a_n=2n+1") == 0.0
    assert reward("\\boxed{p=5,q=2;p=5,q=2}", "(5,2),(7,2)") == 0.0


# -- F3: a later anchor phrase in commentary after a correct box replaces the box whenever the anchored
# text parses as anything (text, a product of letters): correct answers lost (all scored 1 at 3d122bf).

BOX_THEN_COMMENTARY = [
    ("\\boxed{5}\n\nNote: the answer is in lowest terms (5/1).", "5"),
    ("\\boxed{20}\n\nSo the answer is 20% of the total.", "20"),
    ("\\boxed{x=2}\n\nThe final answer is x = 2 (a double root).", "2"),
    ("\\boxed{3}\n\nAnswer: 3 (from step 2)", "3"),
    ("\\boxed{10}\n\nThe answer is consistent with n=10.", "10"),
    ("\\boxed{10}\n\nThe answer is the same for n=2.", "10"),
    ("\\boxed{10}\n\nThe answer is 10 for all n \\ge 1.", "10"),
    ("\\boxed{10}\n\nThe answer is 10 in base 2.", "10"),
    ("\\boxed{\\frac{3}{4}}\n\nFinal Answer: The probability is 3/4 or 75%.", "\\frac34"),
    ("\\boxed{5}\n答案是 5 个苹果。", "5"),
    ("\\boxed{5}\n答案：x=5 符合题意", "5"),
]


@pytest.mark.parametrize(("response", "gold"), BOX_THEN_COMMENTARY)
def test_commentary_after_box_keeps_the_box(response: str, gold: str) -> None:
    assert reward(response, gold) == 1.0


def test_later_anchor_held() -> None:
    assert reward("\\boxed{5}\n\nThe answer: x=5 satisfies the equation.", "5") == 1.0
    assert reward("\\boxed{10}\n\nThe answer is 10, as computed in step 3.", "10") == 1.0
    assert reward("\\boxed{3}\n\nFinal Answer: The final answer is 3 or 4. I hope it is correct.", "4") == 0.0
    assert reward("\\boxed{3}\n\nFinal Answer: The final answer is \\boxed{3}. Other answer is 4", "4") == 0.0
    assert reward("\\boxed{4}\n答案为：3或4", "4") == 0.0
    assert reward("答案为 3 或 4", "4") == 0.0


# -- F4: a later anchor that is conditional or negated still overrides the box (box 3, gold 4: was 0).

CONDITIONAL_LATER_ANCHORS = [
    ("\\boxed{3}\n\nAnswer $4$ is wrong", "4"),
    ("\\boxed{3}\n\nThe answer is $4$ if we count reflections.", "4"),
    ("\\boxed{3}\n\nthe answer is 4 when n is odd", "4"),
    ("The answer is 3.\nAnswer $4$ would be wrong.", "4"),
]


@pytest.mark.parametrize(("response", "gold"), CONDITIONAL_LATER_ANCHORS)
def test_conditional_later_anchor_does_not_override(response: str, gold: str) -> None:
    assert reward(response, gold) == 0.0


# -- F5: multi-part golds in k boxes: swapped parts, the response's own part numbers ignored, and a rejected
# box counted as a part.

MULTI_BOX_TRICKS = [
    ("First \\boxed{7}. Then \\boxed{5}.", "\\text{(1) } 5; \\text{(2) } 7"),
    ("(2) \\boxed{5} (1) \\boxed{7}", "\\text{(1) } 5; \\text{(2) } 7"),
    ("Maybe \\boxed{2}. Hmm, no, it's \\boxed{3}.", "\\{2, 3\\}"),
    ("I first got \\boxed{2} but that is wrong. The roots are \\boxed{3}.", "x=2 \\text{ or } x=3"),
]


@pytest.mark.parametrize(("response", "gold"), MULTI_BOX_TRICKS)
def test_multi_box_tricks_fail(response: str, gold: str) -> None:
    assert reward(response, gold) == 0.0


def test_multi_box_held() -> None:
    assert reward("First \\boxed{5}. Then \\boxed{5}.", "5, 7") == 0.0
    assert reward("First \\boxed{5, 7}. Then \\boxed{6}.", "5, 7") == 0.0
    assert reward("First \\boxed{5 \\text{ or } 6}. Then \\boxed{7}.", "5, 7") == 0.0
    assert (
        reward("(1) the width is \\boxed{7}\n(2) the length is \\boxed{5}", "\\text{(1) } 5; \\text{(2) } 7")
        == 0.0
    )
    assert reward("\\boxed{3} or \\boxed{4}", "3") == 0.0


# -- F6: radians dropped as "no unit" also against a gold in degrees: 2 rad passes for 2° (was 0).


def test_radians_are_not_degrees() -> None:
    assert reward("\\boxed{2 \\text{ rad}}", "2^\\circ") == 0.0


def test_degrees_radians_held() -> None:
    assert reward("\\boxed{60}", "\\frac{\\pi}{3}") == 0.0
    assert reward("\\boxed{180}", "\\pi") == 0.0
    assert reward("\\boxed{\\frac{\\pi}{3}}", "60") == 0.0
    assert reward("\\boxed{60^\\circ}", "60\\pi") == 0.0
    assert reward("\\boxed{60^\\circ}", "\\{\\frac{\\pi}{3}, \\frac{2\\pi}{3}\\}") == 0.0
    assert reward("\\boxed{100^\\circ C}", "100^\\circ F") == 0.0
    assert reward("\\boxed{60^\\circ}", "\\frac{\\pi}{3}") == 1.0


# -- F7 (pre-existing, also before 3d122bf): a false relation's last side is taken as the answer.

FALSE_RELATIONS = [
    ("\\boxed{5=4}", "4"),
    ("3=4", "4"),
    ("\\boxed{\\sqrt{2} \\approx 1.5}", "1.5"),
    ("\\boxed{0.5 \\approx \\frac13}", "\\frac13"),
    ("\\boxed{3 \\approx 3.0 \\approx 4}", "4"),
]


@pytest.mark.parametrize(("response", "gold"), FALSE_RELATIONS)
def test_false_relation_is_not_credited(response: str, gold: str) -> None:
    assert reward(response, gold) == 0.0


# -- attacks that held ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("response", "gold", "expected"),
    [
        ("3 or 4", "3", 0.0),
        ("3, 4", "3", 0.0),
        ("\\pm 4", "4", 0.0),
        ("3 \\le x \\le 4", "4", 0.0),
        ("3 cm or 4 cm", "4", 0.0),
        ("x \\in \\{3, 4\\}", "4", 0.0),
        ("3 min 4 sec", "4", 0.0),
    ],
)
def test_whole_response_hedges_held(response: str, gold: str, expected: float) -> None:
    assert reward(response, gold) == expected


@pytest.mark.parametrize(
    ("response", "gold", "expected"),
    [
        ("\\boxed{1,000}", "1", 0.0),
        ("\\boxed{1 000}", "1", 0.0),
        ("\\boxed{1 2}", "12", 0.0),
        ("\\boxed{123 45}", "12345", 0.0),
        ("\\boxed{1, 5}", "1.5", 0.0),
        ("\\boxed{(1,5)}", "1.5", 0.0),
        ("\\boxed{x=3,5}", "3.5", 0.0),
        ("Answer: 1,2,3", "1.23", 0.0),
        ("Answer: 12,345", "12.345", 0.0),
        ("\\boxed{1,5}", "-1.5", 0.0),
        ("\\boxed{0,111}", "111", 0.0),
    ],
)
def test_number_forms_held(response: str, gold: str, expected: float) -> None:
    assert reward(response, gold) == expected


@pytest.mark.parametrize(
    ("response", "gold", "expected"),
    [
        ("\\boxed{0.333334}", "\\frac13", 0.0),
        ("\\boxed{1.414215}", "\\sqrt2", 0.0),
        ("\\boxed{1.41422}", "\\sqrt2", 0.0),
        ("\\boxed{3.14160}", "\\pi", 0.0),
        ("\\boxed{0.66666}", "\\frac23", 0.0),
        ("\\boxed{0.999999}", "1", 0.0),
        ("\\boxed{4.999999}", "5", 0.0),
        ("\\boxed{99999.9}", "100000", 0.0),
        ("\\boxed{3.141593}", "3.1415926", 0.0),
        ("\\boxed{0.000000}", "10^{-7}", 0.0),
        ("\\boxed{\\approx 3.14}", "\\pi", 0.0),
        ("\\boxed{\\pi \\approx 3.14}", "\\frac{22}{7}", 0.0),
        ("\\boxed{\\frac{1}{3} \\approx 0.4}", "\\frac13", 0.0),
        ("\\boxed{\\sqrt{2} \\approx 1.5}", "\\sqrt2", 0.0),
        ("\\boxed{0.142857}", "\\frac17", 1.0),
    ],
)
def test_long_decimals_and_approx_held(response: str, gold: str, expected: float) -> None:
    assert reward(response, gold) == expected


# -- cost: adversarial sizes stay fast and never raise ----------------------------------------------------

SIZED = [
    ("Final Answer: " + " is" * 600 + " 5", "5"),
    ("Final Answer: the x is $" + "1+" * 900 + "1$", "5"),
    ("\\boxed{5}" + ("x " * 500_000)[:999_000] + "\nFinal Answer: 5", "5"),
    ("Answer $5$\n" * 90_000, "5"),
    ("答案为 5。" * 150_000, "5"),
    ("(1) " * 100_000 + "\\boxed{5} (2) \\boxed{6}", "5, 6"),
    ("\\boxed{" + "1" + " 000" * 490 + "}", "1"),
    ("\\boxed{" + "1" * 1000 + "," + "9" * 990 + "}", "1.5"),
    ("\\boxed{0." + "3" * 1990 + "}", "\\frac13"),
    ("\\boxed{" + "\\sqrt2 \\approx " * 130 + "1.41}", "\\sqrt2"),
    ("\\boxed{" + "-" * 1990 + "x>-1}", "x<1"),
    ("\\boxed{" + "|" * 300 + "x" + "|" * 300 + "<1}", "(-1,1)"),
    ("\\boxed{" + ";".join(f"p={i % 7},q={i % 5}" for i in range(150)) + "}", "(1,2),(3,4)"),
    ("\\boxed{" + ":".join(f"V_{{{i}}}" for i in range(200)) + "=" + ":".join(str(i + 1) for i in range(200)) + "}",
     "V_1:V_2=1:2"),
    ("x=" * 990 + "1", "1"),
    ("\\boxed{1." + "7" * 1900 + "}", "\\sqrt{\\sqrt{\\sqrt{\\sqrt{3}+\\sqrt5}+\\sqrt7}+\\sqrt{11}}"),
]  # fmt: skip


@pytest.mark.parametrize(("response", "gold"), SIZED)
def test_adversarial_sizes_get_a_verdict(response: str, gold: str) -> None:
    """Each is scored (no exception, status ok); how fast is measured by the red team, not asserted here."""
    verdict = score_math(response, MathReference(answer=gold), MathOptions())
    assert verdict.status.value == "ok" and verdict.reward in (0.0, 1.0)


# -- F8: score_math raises on a grouped-thousands number with a repeating block: ValueError from int('1 000')
# in grammar._repeating. The space form is new with '1 000' numbers; the ',' and '\\,' forms predate 3d122bf.

RAISING = [
    "\\boxed{1 000.(3)}",
    "\\boxed{1 000.\\overline{3}}",
    "\\boxed{1 000.\\dot{3}}",
    "1 000.(2)",
    "\\boxed{12 345.(6)}",
    "\\boxed{1,000.(3)}",
    "\\boxed{1\\,000.(3)}",
]


@pytest.mark.parametrize("response", RAISING)
def test_grouped_repeating_decimal_does_not_raise(response: str) -> None:
    verdict = score_math(response, MathReference(answer="\\frac{3001}{3}"), MathOptions())
    assert verdict.reward in (0.0, 1.0)


# -- F9 (pre-existing): a gold of two labelled inequalities with the same bound collapses to one interval, so
# half the answer passes.


def test_half_of_a_two_part_inequality_gold_fails() -> None:
    assert reward("\\boxed{x>1}", "x>1, y>1") == 0.0
    assert reward("\\boxed{x>1}", "x>1 \\text{ and } y>1") == 0.0


# -- F10 (new with 0 < f(x) < 1 read as a range): the range of f passes for a gold that is a set of x.


def test_range_of_f_is_not_an_x_interval() -> None:
    assert reward("\\boxed{0<f(x)<1}", "0<x<1") == 0.0


def test_inequalities_held() -> None:
    assert reward("\\boxed{-x<-1}", "x<1") == 0.0
    assert reward("\\boxed{x^2<1}", "x<1") == 0.0
    assert reward("\\boxed{|x|<1}", "x<1") == 0.0
    assert reward("\\boxed{|x|>1}", "x>1") == 0.0
    assert reward("\\boxed{|x|<-1}", "(-1,1)") == 0.0
    assert reward("\\boxed{0x>1}", "x>1") == 0.0
    assert reward("\\boxed{x > 1}", "-2x+2>0") == 0.0
    assert reward("\\boxed{1<x<0}", "(0,1)") == 0.0
    assert reward("\\boxed{k \\ge 3}", "3-k\\ge 0") == 0.0
    assert reward("\\boxed{|x|>1}", "(-\\infty,-1)\\cup(1,\\infty)") == 1.0
