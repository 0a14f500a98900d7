"""The math grammar: tokenizer, parser and the cost guards in front of them.

Trees are checked through their canonical text (`to_text`) and through exact values (`fold`), so a test
fails when the parser reads notation differently, not when a printing detail changes.
"""

from __future__ import annotations

import time
from fractions import Fraction

import pytest

from proctor.verifiers.math.grammar import Number, parse, prepare, to_text, tokenize
from proctor.verifiers.math.guards import ParseError, TooComplex
from proctor.verifiers.math.values import fold, parse_value


def value(text: str) -> Fraction | None:
    return fold(parse(text))


def literal(text: str) -> Number:
    node = parse(text)
    assert node.op == "num", to_text(node)
    return node.value


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("42", 42), ("-7", -7), ("0.25", Fraction(1, 4)), (".5", Fraction(1, 2)),
        ("\\frac{1}{2}", Fraction(1, 2)), ("\\dfrac{3}{4}", Fraction(3, 4)), ("\\tfrac{3}{4}", Fraction(3, 4)),
        ("\\frac12", Fraction(1, 2)), ("\\frac1{3}", Fraction(1, 3)), ("\\frac{1}2", Fraction(1, 2)),
        ("\\frac{10}{4}", Fraction(5, 2)), ("3/4", Fraction(3, 4)), ("1/2/2", Fraction(1, 4)),
        ("3\\frac{1}{2}", Fraction(7, 2)), ("3 1/2", Fraction(7, 2)), ("-3\\frac12", Fraction(-7, 2)),
        ("2\\frac{3}{2}", 3),  # not a proper fraction, so a product: 2·3/2
        ("1,000,000", 10**6), ("1{,}000", 1000), ("1\\,000", 1000), ("1 000", 1000), ("10 455 000", 10455000), ("12,345.5", Fraction(24691, 2)),
        ("1.2e-4", Fraction(12, 100000)), ("1.2E-4", Fraction(12, 100000)), ("2e3", 2000),
        ("1.2\\times10^{-4}", Fraction(12, 100000)), ("1.2 \\cdot 10^{-4}", Fraction(12, 100000)),
        ("1.2*10^-4", Fraction(12, 100000)), ("3 x 4", 12),
        ("2^{10}", 1024), ("2^10", 1024), ("2^3^2", 512), ("(2^3)^2", 64), ("x^0", None), ("10^{-2}", Fraction(1, 100)),
        ("4^{1/2}", 2), ("8^{2/3}", 4), ("\\sqrt{16}", 4), ("\\sqrt{2}", None), ("\\sqrt[3]{27}", 3),
        ("\\sqrt[3]{-8}", -2), ("\\sqrt 16", 4),
        ("5!", 120), ("\\binom{5}{2}", 10), ("\\dbinom{6}{3}", 20),
        ("50\\%", Fraction(1, 2)), ("50%", Fraction(1, 2)), ("-3 + 4", 1), ("2(3+4)", 14), ("(1)(2)(3)", 6),
        ("\\left(\\frac{1}{2}\\right)^2", Fraction(1, 4)), ("\\left.5\\right.", 5),
        ("\\log_2 8", 3), ("\\log_{10} 0.01", -2), ("\\ln 1", 0), ("|-3|", 3), ("\\lvert -3 \\rvert", 3),
        ("\\lfloor 3.7 \\rfloor", 3), ("\\lceil 3.2 \\rceil", 4), ("\\max(2, 5)", 5), ("\\gcd(12, 18)", 6),
        ("\\operatorname{lcm}(4, 6)", 12),
        ("\\displaystyle\\frac{1}{2}", Fraction(1, 2)), ("\\mathbf{5}", 5), ("\\boldsymbol{5}", 5),
        ("\\!5\\,", 5), ("$5$", 5), ("\\(5\\)", 5), ("5.", 5), ("5;", 5), ("{5}", 5),
        ("−5", -5), ("½", Fraction(1, 2)), ("3½", Fraction(7, 2)), ("¾", Fraction(3, 4)), ("2²", 4),
        ("2³", 8), ("10⁻²", Fraction(1, 100)), ("6÷3", 2), ("2×3", 6), ("2·3", 6), ("√16", 4), ("∛27", 3),
    ],
)  # fmt: skip
def test_exact_values(text: str, expected):
    assert value(text) == (None if expected is None else Fraction(expected))


@pytest.mark.parametrize(
    ("text", "places", "sig"),
    [("0.333", 3, 3), ("3.14", 2, 3), ("100.0", 1, 4), ("0.00012", 5, 2), ("1.2e-4", 5, 2), ("1.20e-4", 6, 3),
     ("6.02e23", -21, 3), ("0.000", 3, 0)],
)  # fmt: skip
def test_decimal_literals_keep_their_stated_digits(text: str, places: int, sig: int):
    number = literal(text)
    assert (number.places, number.sig) == (places, sig)


def test_integers_are_exact_literals():
    assert literal("42").places is None
    assert literal("1,000").kind == "int"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0.\\overline{3}", Fraction(1, 3)), ("0.(3)", Fraction(1, 3)), ("0.3\\overline{3}", Fraction(1, 3)),
        ("0.\\dot{3}", Fraction(1, 3)), ("0.333...", Fraction(1, 3)), ("0.333\\ldots", Fraction(1, 3)),
        ("0.1\\overline{6}", Fraction(1, 6)), ("0.1666...", Fraction(1, 6)), ("0.\\overline{142857}", Fraction(1, 7)),
        ("0.142857142857...", Fraction(1, 7)), ("0.\\dot{1}\\dot{2}", Fraction(4, 33)), ("0.\\dot{1}2\\dot{3}", Fraction(41, 333)),
        ("1.\\overline{09}", Fraction(12, 11)), ("0.\\overline{9}", 1), ("0.12121...", Fraction(4, 33)),
    ],
)  # fmt: skip
def test_repeating_decimals_are_exact(text: str, expected):
    node = parse(text)
    assert node.op == "num" and node.value.kind == "rep"
    assert node.value.value == Fraction(expected)


def test_an_ellipsis_without_a_repeat_keeps_the_rounded_decimal():
    number = literal("3.14159...")
    assert number.kind == "dec" and number.places == 5


@pytest.mark.parametrize(
    ("text", "base", "decimal"),
    [("1010_2", 2, 10), ("1010_{2}", 2, 10), ("(1010)_2", 2, 10), ("777_8", 8, 511), ("12_{10}", 10, 12)],
)
def test_number_bases(text: str, base: int, decimal: int):
    number = literal(text)
    assert (number.kind, number.base, number.value) == ("base", base, decimal)


def test_digits_invalid_in_their_base_are_rejected():
    with pytest.raises(ParseError):
        parse("1012_2")


@pytest.mark.parametrize(
    ("text", "rendered"),
    [
        ("2x", "2*x"), ("2\\pi", "2*pi"), ("x(x+1)", "x*(x + 1)"), ("2\\sqrt{3}", "2*sqrt(3)"),
        ("ab", "a*b"), ("xy^2", "x*y^2"), ("-x^2", "-x^2"), ("\\sin x \\cos x", "sin(x)*cos(x)"),
        ("\\sin 2x", "sin(2*x)"), ("\\sin^2 x", "sin(x)^2"), ("\\sin^{-1} x", "asin(x)"), ("\\arcsin x", "asin(x)"),
        ("\\cos(x)^2", "cos(x)^2"), ("\\log_2 x", "log(x, 2)"), ("\\ln|x|", "ln(abs(x))"), ("e^{x}", "e^x"),
        ("\\exp(x)", "exp(x)"), ("sqrt(x)", "sqrt(x)"), ("sin(x)", "sin(x)"), ("x**2", "x^2"), ("pi/4", "pi/4"),
        ("\\sqrt[3]{x}", "root(x, 3)"), ("x_1 + x_2", "x_{1} + x_{2}"), ("a_{n+1}", "a_{n + 1}"),
        ("\\alpha + \\beta", "alpha + beta"), ("3+4i", "3 + 4*i"), ("\\infty", "oo"), ("-\\infty", "-oo"),
        ("1 \\pm \\sqrt{2}", "1 ± sqrt(2)"), ("\\frac{x}{\\sqrt{x^2+1}}", "x/sqrt(x^2 + 1)"),
        ("x \\cdot y \\div z", "x*y/z"), ("f(x)", "f(x)"),
    ],
)  # fmt: skip
def test_expressions(text: str, rendered: str):
    assert to_text(parse(text)) == rendered


@pytest.mark.parametrize(
    ("text", "op", "rendered"),
    [
        ("(1, 2)", "bracket", "(1, 2)"), ("[0, \\infty)", "bracket", "[0, oo)"), ("(-1, 2]", "bracket", "(-1, 2]"),
        ("\\{1, 2\\}", "set", "{1, 2}"), ("\\{\\}", "set", "{}"), ("\\emptyset", "set", "{}"),
        ("1, 2, 3", "list", "1, 2, 3"), ("x = 2 \\text{ or } x = 3", "list", "x = 2, x = 3"),
        ("2 and 3", "list", "2, 3"), ("(1,100)", "bracket", "(1, 100)"), ("(1, 000)", "bracket", "(1, 0)"),
        ("\\langle 1, 2 \\rangle", "bracket", "<1, 2>"), ("x = 3", "rel", "x = 3"), ("y=2x+1", "rel", "y = 2*x + 1"),
        ("1 < x \\le 2", "rel", "1 < x <= 2"), ("x \\geq 3", "rel", "x >= 3"), ("x ≥ 3", "rel", "x >= 3"),
        ("x \\neq 3", "rel", "x != 3"), ("x \\in [0, 1)", "rel", "x in [0, 1)"),
        ("(-\\infty, 1) \\cup (2, \\infty)", "union", "(-oo, 1) U (2, oo)"),
        ("\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}", "matrix", "[1, 2; 3, 4]"),
        ("\\begin{bmatrix} 1 \\\\ 2 \\end{bmatrix}", "matrix", "[1; 2]"),
        ("\\begin{array}{cc} 1 & 2 \\end{array}", "matrix", "[1, 2]"),
        ("45^\\circ", "deg", "45°"), ("45^{\\circ}", "deg", "45°"), ("45°", "deg", "45°"), ("45\\degree", "deg", "45°"),
        ("5\\text{ cm}", "unit", "5 cm"), ("5 cm", "unit", "5 cm"), ("5\\,\\mathrm{m}", "unit", "5 m"),
        ("\\$5", "unit", "5 $"), ("4:30", "ratio", "4:30"), ("\\text{Monday}", "text", "Monday"),
        ("\\{x \\mid x > 0\\}", "builder", "{x | x > 0}"), ("\\mathbb{R}", "domain", "R"),
    ],
)  # fmt: skip
def test_structures(text: str, op: str, rendered: str):
    node = parse(text)
    assert (node.op, to_text(node)) == (op, rendered)


@pytest.mark.parametrize(
    "text",
    ["2 3", "1 00", "12 34", "\\frac{1}", "(1, 2", "x +", "\\unknowncommand{3}", "3 @ 4", "\\begin{pmatrix}1 & 2\\\\3\\end{pmatrix}",
     "\\begin{cases} 1 \\end{cases}", "5!!", "", "   "],
)  # fmt: skip
def test_rejected_as_parse_errors(text: str):
    with pytest.raises(ParseError):
        parse(text)


def test_prepare_maps_unicode_and_drops_delimiters_and_end_punctuation():
    assert prepare("$x ≤ 3$.") == "x \\le  3"
    assert prepare("\\[\\displaystyle \\frac12\\]") == "\\frac12"
    assert prepare("0.333...") == "0.333..."  # an ellipsis is not end punctuation
    assert prepare("x²³") == "x^{23}"
    assert prepare("5\\quad") == "5"


def test_tokens_are_not_eval_and_unknown_characters_fail_fast():
    assert [token.kind for token in tokenize("\\frac{1}{2}+x")] == [
        "cmd",
        "op",
        "num",
        "op",
        "op",
        "num",
        "op",
        "op",
        "id",
    ]
    with pytest.raises(ParseError):
        tokenize("__import__('os')@")


# -- guards ------------------------------------------------------------------------------------------------

HOSTILE = {
    "3,000-deep braces": "{" * 3000 + "1" + "}" * 3000,
    "3,000-deep parens": "(" * 3000 + "1" + ")" * 3000,
    "1,900-deep parens (under the length cap)": "(" * 1900 + "1" + ")" * 1900,
    "deep \\frac": "\\frac{1}{" * 350 + "1" + "}" * 350,
    "brace-less \\frac chain": "\\frac1" * 600 + "1",
    "\\sqrt chain": "\\sqrt" * 700 + "2",
    "unary minus chain": "-" * 1900 + "1",
    "exponent tower 1,900 high": "^".join(["2"] * 1900),
    "braced tower": "2^{" * 900 + "2" + "}" * 900,
    "left-nested division": "/".join(["2"] * 1000),
    "percent chain": "5" + "\\%" * 1000,
    "\\mathbf chain": "\\mathbf" * 500 + "{1}",
    "10 MB of digits": "9" * (10 * 1024 * 1024),
    "2,001 tokens": "+".join(["1"] * 1001),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_text_is_refused_fast_without_recursion_errors(name: str):
    started = time.perf_counter()
    with pytest.raises(TooComplex):
        parse_value(HOSTILE[name])
    assert time.perf_counter() - started < 10  # hang detection, not a latency target


@pytest.mark.parametrize(
    "text",
    ["9^9^9^9", "9^{9^{9^{9}}}", "2^{2^{30}}", "(10^{10})!", "10^{10^{10}}", "x^{100000}", "1e999999",
     "\\binom{100000}{50000}", "(1000.5)!", "2^{2^{30}} - 2^{2^{30}} + 4"],
)  # fmt: skip
def test_values_beyond_the_bounds_are_too_complex(text: str):
    with pytest.raises(TooComplex):
        parse_value(text).rational  # noqa: B018 - folding is what the guards protect


def test_legitimate_nesting_and_sizes_still_parse():
    assert value("(" * 50 + "1" + ")" * 50) == 1
    assert value("\\frac{" * 40 + "1" + "}{2}" * 40) == Fraction(1, 2**40)
    assert value("2^{4000}") == 2**4000
    assert value("100!") is not None
    assert value("9" * 3000) == int("9" * 3000)
