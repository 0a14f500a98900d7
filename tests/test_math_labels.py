"""Golds and answers written as labelled relations: the value side is the answer, the label must agree."""

from __future__ import annotations

import pytest

from proctor.verifiers.math.extract import extract_answer
from proctor.verifiers.math.verifier import MathOptions, MathReference, score_math
from tests.math_helpers import boxed_reward as reward


@pytest.mark.parametrize(
    ("response", "gold", "expected"),
    [
        ("(3,2)", "(p,q)=(3,2)", 1),
        ("p=3,\\ q=2", "(p,q)=(3,2)", 1),
        ("q=2, p=3", "(p,q)=(3,2)", 1),
        ("(2,3)", "(p,q)=(3,2)", 0),
        ("p=2, q=3", "(p,q)=(3,2)", 0),
        ("(x, y) = (5, 8)", "(5, 8)", 1),
        ("4, 5", "AB=4, CD=5", 1),
        ("CD=5, AB=4", "AB=4, CD=5", 1),
        ("AB=5, CD=4", "AB=4, CD=5", 0),
        ("5, 4", "AB=4, CD=5", 0),  # bare values against named parts come in the gold's order
        ("BA=4, CD=5", "AB=4, CD=5", 1),  # a segment read the other way round
        ("11:21", "V_1:V_2=11:21", 1),
        ("\\frac{11}{21}", "V_1:V_2=11:21", 1),
        ("V_2:V_1=21:11", "V_1:V_2=11:21", 1),
        ("V_2:V_1=11:21", "V_1:V_2=11:21", 0),
        ("21:11", "V_1:V_2=11:21", 0),
        ("6:8:10", "a:b:c=3:4:5", 1),
        ("3:5:4", "a:b:c=3:4:5", 0),
        ("\\frac{\\sqrt6}{6}", "\\frac{NO}{BO}=\\frac{1}{\\sqrt6}", 1),
        ("1", "|AB|=1", 1),
        ("AB = 1", "|AB|=1", 1),
        ("CD = 1", "|AB|=1", 0),  # the wrong quantity named
        ("2", "|AB|=1", 0),
        ("40", "m\\angle ABC = 40^\\circ", 1),
        ("\\angle CBA = 40^\\circ", "m\\angle ABC = 40^\\circ", 1),
        ("\\frac{2\\pi}{9}", "m\\angle ABC = 40^\\circ", 1),
        ("m\\angle ABC = 50^\\circ", "m\\angle ABC = 40^\\circ", 0),
        ("2n+1", "a_n=2n+1", 1),
        ("a_n = 1 + 2n", "a_n=2n+1", 1),
        ("2n-1", "a_n=2n+1", 0),
        ("(5,2),(7,2)", "p=5,q=2;p=7,q=2", 1),
        ("(7,2),(5,2)", "p=5,q=2;p=7,q=2", 1),
        ("(5,2)", "p=5,q=2;p=7,q=2", 0),
        ("x=2 \\text{ or } x=-3", "x_1=2,\\quad x_2=-3", 1),
        ("-3, 2", "x_1=2,\\quad x_2=-3", 0),
        ("\\begin{pmatrix}3&7\\\\5&12\\end{pmatrix}", "B^{-1}=\\begin{pmatrix}3&7\\\\5&12\\end{pmatrix}", 1),
        ("5, (-1, \\frac72)", "d=5, M=\\left(-1, \\frac{7}{2}\\right)", 1),
        # an equation is still an equation: a bare side does not answer it
        ("2x+1", "y=2x+1", 0),
        ("4", "xy=4", 0),
    ],
)
def test_labelled_relations(response: str, gold: str, expected: int) -> None:
    assert reward(response, gold) == expected


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("Final Answer: The largest $n$ is 34.", ("34",)),
        ("Final Answer: The volume of $ABCDEFGH$ is 120. I hope it is correct.", ("120",)),
        ("Final Answer: The side is 5 cm.", ("5 cm",)),  # the unit stays with the value
        ("Final Answer: Jane started growing it 3 hours ago.", ("3",)),  # no "is", one number: that number
        ("Final Answer: Jane did not start it 3 hours ago.", ("Jane did not start it 3 hours ago",)),
        ("Final Answer: 3 apples and 4 pears", ("3 apples", "4 pears")),
    ],
)
def test_a_final_answer_sentence_states_the_value_after_its_last_is(response: str, expected: tuple) -> None:
    assert extract_answer(response).candidates == expected


@pytest.mark.parametrize(
    ("response", "gold", "expected"),
    [
        # public golds refused before issue 17
        ("y'+ry-rx(t)=0", "y^{\\prime}+r y-r x(t)=0", 1),  # a derivative's prime names its own variable
        ("y+ry-rx(t)=0", "y^{\\prime}+r y-r x(t)=0", 0),
        ("\\frac{\\triangle ABC}{7}", "\\frac{1}{7}\\triangle ABC", 1),
        ("y = 0", "y \\equiv 0", 1),
        ("(-\\infty,-7)", "x<-7:(-\\infty,-7)", 1),  # an inequality, a colon, then the same set
        ("x < -7", "x<-7:(-\\infty,-7)", 1),
        ("(-\\infty,-7]", "x<-7:(-\\infty,-7)", 0),
        ("2x-2", "2[x-1]", 1),  # square brackets grouping a factor
        ("2x-1", "2[x-1]", 0),
        ("-\\frac13", "-1./3", 1),  # a float literal with a bare trailing point
    ],
)
def test_forms_from_public_golds(response: str, gold: str, expected: int) -> None:
    assert reward(response, gold) == expected


@pytest.mark.parametrize(
    ("response", "gold", "expected", "extraction"),
    [
        # Math-Verify's own test cases that issue 17's work made agree
        ("\\boxed{1,2}", "\\boxed{1} papers and \\boxed{2} bins", 1, "anchored"),  # a gold of boxed parts
        ("\\boxed{2}", "\\boxed{1} papers and \\boxed{2} bins", 0, "anchored"),
        ("\\boxed{1,2}", "\\boxed{1} no no no no no \\boxed{2}", 0, "anchored"),  # boxes not joined as parts
        ("\\boxed{2}", "\\boxed{1} no no no no no \\boxed{2}", 1, "anchored"),
        (
            "there is $d = \\frac{90}{n}$ for each. So there are 12 sequences.",
            "12",
            1,
            "lenient",
        ),  # later number
        ("Soucis : 2,74 $ au total.", "2.74", 1, "lenient"),
        (
            "Final Answer: The maximum number of points that could be in the domain of $f(x)$ is 19.",
            "19",
            1,
            "anchored",
        ),
        ("Final Answer: it is not 3.", "3", 0, "anchored"),
    ],
)
def test_math_verify_cases(response: str, gold: str, expected: int, extraction: str) -> None:
    verdict = score_math(response, MathReference(answer=gold), MathOptions(extraction=extraction))  # type: ignore[arg-type]
    assert verdict.reward == expected
