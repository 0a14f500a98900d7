"""The judge's own handling of candidate text and values: every scan of a model-written source or output is
linear, and every value a candidate can return is judged (a wrong answer), never a verifier crash."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from proctor.sandboxes.languages import java_classes
from proctor.verifiers.code import harness, signature
from proctor.verifiers.code.compare import compare_float, compare_values
from proctor.verifiers.reading import fenced_blocks

HANG_S = 20.0  # each call below takes milliseconds; the quadratic scans it replaced took minutes


def finishes(work: Callable[[], object]) -> bool:
    """Whether `work` returns within HANG_S (a bounded wait for hang detection; the thread is a daemon)."""
    done = threading.Event()

    def run() -> None:
        try:
            work()
        finally:
            done.set()

    threading.Thread(target=run, daemon=True).start()
    return done.wait(HANG_S)


@pytest.mark.parametrize(
    ("what", "work"),
    [
        ("float@1 on a long digit run", lambda: compare_float("1" * 300_000 + "x", "1")),
        ("float@1 on a long decimal", lambda: compare_float("1" * 150_000 + "." + "1" * 150_000 + "x", "1")),
        ("Java class names: modifiers", lambda: java_classes("public " * 40_000)),
        ("Java main class: static", lambda: java_classes("static " * 40_000)),
        ("Java: unclosed comments", lambda: java_classes("/* " * 40_000)),
        ("Java: escaped quotes", lambda: java_classes('"\\' * 40_000)),
        ("signatures: escaped quotes", lambda: signature.blank('"\\' * 40_000)),
        ("signatures: text ending in a backslash", lambda: signature.blank('"a\\' * 40_000)),
        ("Rust harness: blank lines", lambda: harness.rust_program("\n" * 60_000 + "x", [])),
        ("Java harness: blank lines", lambda: harness.java_program("\n" * 200_000 + "x", [])),
        ("Go harness: blank lines", lambda: harness.go_program("\n" * 200_000 + "x", [])),
        ("JavaScript names: function and spaces", lambda: harness.js_names("function" + " " * 100_000 + "(")),
        ("a fence line full of spaces", lambda: fenced_blocks("```" + " " * 5_000 + "x`\ncode\n```\n")),
    ],
)
def test_scans_of_candidate_text_are_linear(what: str, work: Callable[[], object]):
    assert finishes(work), f"{what}: still running after {HANG_S} s"


def test_fences_still_open_as_before():
    text = "```python  \nprint(1)\n```\n  ~~~ {.cpp}\nint x;\n~~~\n```a`b\nnot a fence\n````\nx\n````\n"
    assert [(b.info, b.code) for b in fenced_blocks(text)] == [
        ("python", "print(1)\n"),
        ("cpp", "int x;\n"),
        ("", "x\n"),
    ]


def test_number_tokens_still_parse_as_before():
    assert compare_float("1. .5 -2e3 +4.0E-1", "1 0.5 -2000 0.4") is None
    assert compare_float("1.2.3", "1.2") is not None and compare_float("1e", "1") is not None


@pytest.mark.parametrize("digits", ["３.0", "٣", "۳", "३", "𝟑", "３e0", "3.０", "³"])
def test_float_compare_counts_only_ascii_digits(digits: str):
    # float() reads these as 3; a program that prints them did not print the expected number.
    assert compare_float(digits, "3") is not None
    assert compare_float("3.0000001", "3") is None


def test_java_classes_after_the_linear_rewrite():
    source = '/* class X */ public final class Foo { // class Y\n String s = "class Z {"; }\n'
    assert java_classes(source) == ("Foo", "Foo")
    assert java_classes(
        "class A {}\npublic class B {}\nclass C { static public void main(String[] a) {} }"
    ) == (
        "B",
        "C",
    )
    assert java_classes("class A { void main() {} }\nclass B { public static void main(String[] a) {} }") == (
        "Main",
        "B",
    )


def test_values_past_pythons_limits_are_wrong_answers_not_crashes():
    # A Python candidate can return an int too long for str() (past 4300 digits) or for a float.
    huge = 10**5000
    assert "bits" in (compare_values(huge, 3) or "")
    assert compare_values(huge, 1.5, 1e-6) is not None
    assert compare_values([1, huge], [1, 2]) is not None
    assert compare_values({huge: 1}, {"1": 1}) is not None
    # A forged harness record can hold any token where a character's code goes.
    for token in ("99999999999999999999", "-1", str(0x110000)):
        with pytest.raises(ValueError):
            signature.decode(iter([token]), signature.Type("char"))
    assert signature.decode(iter(["233"]), signature.Type("char")) == "é"


@pytest.mark.parametrize("language", ["c", "cpp"])
def test_a_function_right_after_an_include_is_found(language: str):
    # Most C and C++ answers start with #include lines; the one right before the function was read as part of
    # its return type, so a correct program was a compile_error ("no function twice").
    for head in (
        "#include <stdlib.h>\n",
        "#include <stdio.h>\n#define N 10\n",
        "#define M(a) \\\n  ((a) + 1)\n",
    ):
        found = signature.entry(language, head + "int twice(int x) {\n  return 2 * x;\n}\n", "twice")
        assert found.describe() == "twice(i32 x) -> i32"


def test_javascript_strings_with_unicode_line_separators_round_trip():
    # JSON.stringify leaves U+2028, U+2029 and U+0085 raw; reading the record with splitlines() cut it there,
    # and a correct answer was an "undecodable record" (a wrong answer).
    from proctor.verifiers.code import verifier

    text = "a\u2028b\u2029c\x85d 🙂"
    reference = {
        "language": "javascript",
        "tests": {"format": "call", "entry_point": "echo", "cases": [{"args": [text], "expected": text}]},
    }
    spec = verifier.SPEC
    response = "```javascript\nfunction echo(s) { return s; }\n```"
    result = spec.score(response, spec.parse_reference(reference), spec.parse_options({}))
    assert (result.reward, result.reason) == (1.0, None), result.details


FLOAT_PROGRAMS = {
    "c": "float tenth(int n) { return 1.0f / n; }",
    "cpp": "class Solution {\npublic:\n    vector<float> tenth(int n) { return {1.0f / n, 2.5f}; }\n};",
    "java": "class Solution {\n    public float[] tenth(int n) { return new float[] {1.0f / n, 2.5f}; }\n}",
    "go": "func tenth(n int) []float32 { return []float32{1.0 / float32(n), 2.5} }",
    "rust": "impl Solution {\n    pub fn tenth(n: i32) -> Vec<f32> { vec![1.0 / n as f32, 2.5] }\n}",
}


@pytest.mark.parametrize("language", list(FLOAT_PROGRAMS))
def test_a_32_bit_float_result_reads_as_its_own_digits(language: str):
    # 1.0f / 10 was written as the double it widens to, 0.10000000149011612: a wrong answer against 0.1
    # without a tolerance, though it is exactly the float nearest 0.1.
    from proctor.verifiers.code import verifier

    expected: object = 0.1 if language == "c" else [0.1, 2.5]
    tests = {"format": "call", "entry_point": "tenth", "cases": [{"args": [10], "expected": expected}]}
    if language in ("cpp", "java", "rust"):
        tests["method_of"] = "Solution"
    spec = verifier.SPEC
    response = f"```{language}\n{FLOAT_PROGRAMS[language]}\n```"
    reference = spec.parse_reference({"language": language, "tests": tests})
    result = spec.score(response, reference, spec.parse_options({}))
    assert (result.reward, result.reason) == (1.0, None), result.details
