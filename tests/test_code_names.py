"""Names the judge's own code uses, which a candidate must never replace (issue 14, item 1).

An assert script used to get every top-level name of the candidate as a global, so `def abs(x): return 0`
replaced the `abs` of the judge's own asserts and a wrong program scored 1. Now the script sees the entry
point, the names the reference lists (`candidate_names`), the reference's trusted `setup` and the builtins;
a name nobody provides is the reference's fault (bad_reference). The call and stdio formats are checked for
the same class: a candidate that shadows what a generated harness uses (strcmp, JSON.stringify, the harness's
own buffers ...) or names a checker uses still scores 0, because expected values and the comparison never
enter its sandbox. Controls: correct programs that define their own `abs` or `sorted` still score 1.
Real nsjail sandboxes throughout.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proctor.contract import RequestError, Status, Verdict
from proctor.settings import get_settings
from proctor.verifiers.code import verifier

SPEC = verifier.SPEC
DATASET = Path(__file__).resolve().parents[1] / "datasets" / "code" / "problems.jsonl"
ROWS = {row["id"]: row for row in map(json.loads, DATASET.read_text().splitlines())}


def score(code: str, reference: dict, language: str = "python") -> Verdict:
    response = f"```{language}\n{code}\n```"
    return SPEC.score(response, SPEC.parse_reference(reference), SPEC.parse_options({}))


def program_of(response: str) -> str:
    return response.split("```", 2)[1].split("\n", 1)[1]


def script(entry_point: str, text: str, language: str = "python", **extra) -> dict:
    return {
        "language": language,
        "tests": {"format": "assert_script", "entry_point": entry_point, "script": text, **extra},
    }


def assert_zero(result: Verdict) -> None:
    assert result.status is Status.ok, result
    assert (result.reward, result.correct) == (0.0, False), result.details
    assert result.reason in ("wrong_answer", "runtime_error"), (result.reason, result.details)


def assert_one(result: Verdict) -> None:
    assert (result.status, result.reward, result.correct) == (Status.ok, 1.0, True), result.details


# -- assert_script, Python: each shadowed builtin, on a wrong program --------------------------------------

# (name, script, wrong program, the shadowing lines that used to make it pass, a correct program)
SHADOWS = {
    "abs": (
        "mean_absolute_deviation",
        None,  # the dataset's own item
        None,
        "def abs(x):\n    return 0\n",
        None,
    ),
    "set": (  # an MBPP test, verbatim
        "similar_elements",
        "assert set(similar_elements((3, 4, 5, 6),(5, 7, 4, 10))) == set((4, 5))\n",
        "def similar_elements(a, b):\n    return []\n",
        "def set(*args):\n    return 0\n",
        "def similar_elements(a, b):\n    return tuple(x for x in a if x in b)\n",
    ),
    "sorted": (
        "evens",
        "assert sorted(evens([4, 1, 2])) == sorted([2, 4])\n",
        "def evens(xs):\n    return [1]\n",
        "def sorted(xs, **k):\n    return 0\n",
        "def evens(xs):\n    return [x for x in xs if x % 2 == 0]\n",
    ),
    "len": (
        "triple",
        "def check(candidate):\n    assert len(candidate('ab')) == 3\n",
        "def triple(s):\n    return ''\n",
        "def len(x):\n    return 3\n",
        "def triple(s):\n    return s[0] * 3\n",
    ),
    "round": (
        "area",
        "assert round(area(1.0), 2) == 3.14\n",
        "def area(r):\n    return 0.0\n",
        "def round(x, n=None):\n    return 3.14\n",
        "def area(r):\n    return 3.14159265 * r * r\n",
    ),
    "all_any": (
        "positives",
        "assert all([x > 0 for x in positives([-1, 2])])\nassert not any([x < 0 for x in positives([-3])])\n",
        "def positives(xs):\n    return xs\n",
        "def all(x):\n    return True\ndef any(x):\n    return False\n",
        "def positives(xs):\n    return [x for x in xs if x > 0]\n",
    ),
    "sum_max": (
        "counts",
        "def check(candidate):\n    assert sum(candidate('aab')) == 3\n    assert max(candidate('aab')) == 2\n",
        "def counts(s):\n    return [0]\n",
        "def sum(x):\n    return 3\ndef max(x):\n    return 2\n",
        "def counts(s):\n    return [s.count(c) for c in dict.fromkeys(s)]\n",
    ),
    "str_int": (
        "answer",
        "assert str(answer()) == '42'\nassert int(answer()) == 42\n",
        "def answer():\n    return 0\n",
        "def str(x):\n    return '42'\ndef int(x):\n    return 42\n",
        "def answer():\n    return 42\n",
    ),
}


def shadow_case(key: str) -> tuple[dict, str, str, str | None]:
    entry, text, wrong, hack, right = SHADOWS[key]
    if text is None:
        row = ROWS["assert-python-mean-abs-dev"]
        return row["reference"], program_of(row["wrong"]), hack, program_of(row["correct"])
    return script(entry, text), wrong, hack, right


@pytest.mark.parametrize("key", list(SHADOWS))
def test_a_candidate_that_shadows_a_builtin_the_asserts_use_scores_zero(key: str):
    reference, wrong, hack, right = shadow_case(key)
    assert_zero(score(hack + wrong, reference))
    assert_zero(score(wrong + hack, reference))  # defined after the entry point, too
    if right is not None:
        assert_one(score(right, reference))


def test_correct_programs_that_define_their_own_abs_or_sorted_still_pass():
    row = ROWS["assert-python-mean-abs-dev"]
    own_abs = (
        "def abs(x):\n    return x if x >= 0 else -x\n\n"
        "def mean_absolute_deviation(xs):\n    m = sum(xs) / len(xs)\n    return sum(abs(x - m) for x in xs) / len(xs)\n"
    )
    assert_one(score(own_abs, row["reference"]))
    own_sorted = (
        "def sorted(xs):\n    out = []\n    for x in xs:\n        i = 0\n"
        "        while i < len(out) and out[i] < x:\n            i += 1\n        out.insert(i, x)\n    return out\n\n"
        "def median(xs):\n    s = sorted(xs)\n    mid = len(s) // 2\n"
        "    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2\n"
    )
    assert_one(score(own_sorted, ROWS["assert-python-median"]["reference"]))


# -- helpers: from the reference (setup), never from the candidate -----------------------------------------

FIND_ZERO = (
    "def check(candidate):\n"
    "    for xs in ([1, 2], [-6, 11, -6, 1], [-2, 0, 0, 1]):\n"
    "        x = candidate(xs)\n"
    "        assert math.fabs(poly(xs, x)) < 1e-4\n"
)
POLY = "import math\n\ndef poly(xs, x):\n    return sum(c * math.pow(x, i) for i, c in enumerate(xs))\n"
FIND_ZERO_RIGHT = (
    "def find_zero(xs):\n    lo, hi = -100.0, 100.0\n"
    "    f = lambda x: sum(c * x ** i for i, c in enumerate(xs))\n"
    "    if f(lo) > 0:\n        lo, hi = hi, lo\n"
    "    for _ in range(200):\n        mid = (lo + hi) / 2\n"
    "        if f(mid) < 0:\n            lo = mid\n        else:\n            hi = mid\n    return lo\n"
)
FIND_ZERO_HACK = "import math\ndef poly(xs, x):\n    return 0\n\ndef find_zero(xs):\n    return 12345.0\n"


def test_a_helper_the_script_calls_comes_from_setup_never_from_the_candidate():
    # HumanEval/32 style: the script calls `poly`; a candidate's poly returning 0 passed any find_zero.
    reference = script("find_zero", FIND_ZERO, setup=POLY)
    assert_zero(score(FIND_ZERO_HACK, reference))
    assert_one(score(FIND_ZERO_RIGHT, reference))
    assert_one(score(POLY + "\n" + FIND_ZERO_RIGHT, reference))  # its own poly (and math) is harmless


def test_a_helper_nobody_provides_is_the_references_fault():
    # Without setup, `poly` and `math` come from nowhere: bad_reference before any program runs, for the
    # hack and the right answer alike, so a dataset missing its helpers is visible at once.
    reference = script("find_zero", FIND_ZERO)
    for code in (FIND_ZERO_HACK, FIND_ZERO_RIGHT, POLY + FIND_ZERO_RIGHT):
        result = score(code, reference)
        assert (result.status, result.reason) == (Status.verifier_error, "bad_reference"), result
        assert "math, poly" in result.details["error"] and "tests.setup" in result.details["error"]


def test_a_name_missing_only_at_run_time_is_the_references_fault_too():
    # A star import hides what it binds, so nothing is checked before the run; the script then dies on `poly`.
    star = script("f", "from math import *\nassert poly(f(1)) == sqrt(4)\n")
    result = score("def f(x):\n    return x\ndef poly(x):\n    return 2.0\n", star)
    assert (result.status, result.reason) == (Status.verifier_error, "bad_reference"), result
    assert "poly" in result.details["error"]
    # A name the script does bind, unbound on this run because of what the candidate returned (or an
    # UnboundLocalError), is the candidate's wrong answer: a wrong program must not turn its 0 into a skip.
    branchy = script("f", "if f(1) == 1:\n    helper = abs\nassert helper(-1) == 1\n")
    assert_one(score("def f(x):\n    return x\n", branchy))
    assert_zero(score("def f(x):\n    return 0\n", branchy))
    # A name only the candidate's value brings in (a script that evals it) is not the reference's fault.
    evals = script("f", "from math import *\nassert eval(f(1)) == 1\n")
    assert_zero(score("def f(x):\n    return 'undefined_name'\n", evals))
    assert_one(score("def f(x):\n    return 'floor(1.5)'\n", evals))
    local = script(
        "f", "def check(candidate):\n    if candidate(1) == 1:\n        y = 1\n    assert y == 1\n"
    )
    assert_zero(score("def f(x):\n    return 0\n", local))


def test_candidate_names_the_reference_lists_are_bound():
    reference = script(
        "decode_shift",
        "assert decode_shift(encode_shift('abc')) == 'abc'\nassert encode_shift('a') == 'f'\n",
        candidate_names=["encode_shift"],
    )
    right = (
        "def encode_shift(s):\n    return ''.join(chr((ord(c) - 97 + 5) % 26 + 97) for c in s)\n"
        "def decode_shift(s):\n    return ''.join(chr((ord(c) - 97 - 5) % 26 + 97) for c in s)\n"
    )
    assert_one(score(right, reference))
    missing = score("def decode_shift(s):\n    return s\n", reference)  # the task asked for encode_shift too
    assert_zero(missing)


@pytest.mark.parametrize(
    ("tests", "field"),
    [
        ({"candidate_names": ["abs"]}, "abs"),
        ({"candidate_names": ["sorted"]}, "sorted"),
        ({"candidate_names": ["CandidateFailed"]}, "CandidateFailed"),
        ({"candidate_names": ["__name__"]}, "__name__"),
        ({"candidate_names": ["poly"], "setup": "def poly(x):\n    return x\n"}, "poly"),
        ({"candidate_names": ["check"], "script": "def check(c):\n    assert c(1) == 1\n"}, "check"),
        ({"candidate_names": ["sqrt"], "script": "from math import sqrt\nassert f(1) == sqrt(1)\n"}, "sqrt"),
        ({"script": "def f(x):\n    return x\nassert f(1) == 1\n"}, "never be called"),
        ({"script": "from os import f\nassert f(1) == 1\n"}, "never be called"),
        ({"setup": "f = lambda x: x\n"}, "never be called"),
        ({"setup": "def f(:\n"}, "setup"),
    ],
)
def test_a_reference_whose_names_shadow_the_judges_is_a_422(tests: dict, field: str):
    reference = script("f", "assert f(1) == 1\n")
    reference["tests"].update(tests)
    with pytest.raises(RequestError) as caught:
        SPEC.parse_reference(reference)
    assert caught.value.status == 422
    assert field in str(caught.value), str(caught.value)


def test_an_entry_point_named_like_a_builtin_is_the_candidate():
    # The reference chose the name, and its script means the candidate by it.
    reference = script("max", "assert max([1, 3, 2]) == 3\nassert max([]) is None\n")
    assert_one(
        score(
            "def max(xs):\n    best = None\n    for x in xs:\n        best = x if best is None or x > best else best\n    return best\n",
            reference,
        )
    )
    assert_zero(score("def max(xs):\n    return 3 if xs else 0\n", reference))


def test_the_dataset_items_with_helpers_use_setup():
    for key in ("assert-python-shift-cipher", "assert-python-poly-eval"):
        row = ROWS[key]
        assert row["reference"]["tests"].get("setup"), key
        assert_one(SPEC.score(row["correct"], SPEC.parse_reference(row["reference"]), SPEC.parse_options({})))
        assert_zero(SPEC.score(row["wrong"], SPEC.parse_reference(row["reference"]), SPEC.parse_options({})))


# -- assert_script in the other languages: a shadowing function is never a proxy -----------------------------

# A wrong `twice` (returns 0) plus a function named like the builtin the script uses.
SHADOW_PROGRAMS = {
    "javascript": "function abs(x) { return 0; }\nfunction twice(x) { return 0; }\n",
    "go": "package main\n\nfunc abs(x int) int { return 0 }\n\nfunc twice(x int) int { return 0 }\n",
    "c": "int twice(int x) { return 0; }\nlong long hash(long long x) { return 0; }\n",
    "cpp": "int twice(int x) { return 0; }\nlong long len(vector<int> xs) { return 4; }\n",
    "java": "class Solution {\n    public int twice(int x) { return 0; }\n    public int abs(int x) { return 0; }\n}\n",
    "rust": "fn twice(x: i32) -> i32 { 0 }\nfn abs(x: i32) -> i32 { 0 }\n",
}
SHADOW_SCRIPTS = {
    "c": "assert hash(twice(2) - 4) == hash(0)\n",  # hash(0) == 0, hash(-4) == -4
    "cpp": "assert len([twice(2)] * twice(2)) == 4\n",
}
RIGHT = {
    "javascript": "function abs(x) { return x < 0 ? -x : x; }\nfunction twice(x) { return 2 * x + abs(x) - abs(x); }\n",
    "go": "package main\n\nfunc abs(x int) int { if x < 0 { return -x }; return x }\n\nfunc twice(x int) int { return 2 * x }\n",
    "c": "int abs_(int x) { return x < 0 ? -x : x; }\nint twice(int x) { return 2 * x + abs_(x) - abs_(x); }\n",
    "cpp": "int twice(int x) { return 2 * x; }\nlong long len(vector<int> xs) { return xs.size(); }\n",
    "java": "class Solution {\n    public int twice(int x) { return 2 * x + abs(x) - abs(x); }\n    public int abs(int x) { return x < 0 ? -x : x; }\n}\n",
    "rust": "fn twice(x: i32) -> i32 { 2 * x + abs(x) - abs(x) }\nfn abs(x: i32) -> i32 { if x < 0 { -x } else { x } }\n",
}


@pytest.mark.parametrize("language", list(SHADOW_PROGRAMS))
def test_other_languages_cannot_shadow_the_scripts_builtins(language: str):
    text = SHADOW_SCRIPTS.get(language, "assert abs(twice(2) - 4) == 0\nassert abs(twice(-3) + 6) == 0\n")
    reference = script("twice", text, language=language)
    assert_zero(score(SHADOW_PROGRAMS[language], reference, language))
    assert_one(score(RIGHT[language], reference, language))


# -- call format: what the generated harness uses ------------------------------------------------------------

CALL_CASES = [{"args": [2], "expected": 4}, {"args": [21], "expected": 42}]

# Each is wrong (it never computes 2x) and replaces or reaches into something the harness itself uses.
HARNESS_SHADOWS = {
    "c": [
        # every dispatch comparison "matches", and the record's writer is ours
        "int strcmp(const char* a, const char* b) { return 0; }\nint twice(int x) { return 4; }\n",
        '#undef main\n#define proctor_pw_i(v) proctor_pput("4")\nint twice(int x) { return 0; }\n',
        "#include <stdio.h>\nint snprintf(char* b, size_t n, const char* f, ...) { b[0] = '4'; b[1] = 0; return 1; }\n"
        "int twice(int x) { return 0; }\n",
    ],
    "cpp": [
        '#define to_string(v) std::string("4")\nint twice(int x) { return 0; }\n',
        'namespace proctor_h { static std::string O = "4 "; }\nint twice(int x) { return 0; }\n',
    ],
    "java": [
        'class Solution {\n    static { ProctorHarness.O.append("4 "); }\n    public int twice(int x) { return 0; }\n}\n',
        "class Solution {\n    public int twice(int x) { System.setOut(System.err); return 4; }\n}\n",
    ],
    "go": [
        'package main\n\nfunc init() { proctorO.WriteString("4 ") }\n\nfunc twice(x int) int { return 0 }\n',
        "package main\n\nvar proctorP = 1\n\nfunc twice(x int) int { return 4 }\n",
    ],
    "rust": [
        'fn twice(x: i32) -> i32 { 4 }\n#[allow(dead_code)]\nfn put(o: &mut String, t: &str) { o.push_str("4"); }\n',
    ],
    "javascript": [
        "JSON.stringify = () => '4';\nfunction twice(x) { return 0; }\n",
        "Array.isArray = () => true;\nObject.getPrototypeOf = () => Object.prototype;\n"
        "function twice(x) { return { toJSON() { return 4; } }; }\n",
        "const fs = require('fs');\nfs.writeSync = () => 0;\nfunction twice(x) { return 4; }\n",
        "__proctor.finish = () => require('fs').writeSync(1, 'ok 4\\n');\nfunction twice(x) { return 0; }\n",
        "function twice(x) { __proctor.request.args = [21]; return 4; }\n",
    ],
}


@pytest.mark.parametrize(
    ("language", "index"),
    [(language, index) for language, programs in HARNESS_SHADOWS.items() for index in range(len(programs))],
)
def test_shadowing_what_the_call_harness_uses_is_never_a_pass(language: str, index: int):
    # Expected values never enter the sandbox and the comparison happens here: whatever the candidate does to
    # the harness, the record can only say what it could have returned itself.
    reference = {
        "language": language,
        "tests": {"format": "call", "entry_point": "twice", "cases": CALL_CASES},
    }
    result = score(HARNESS_SHADOWS[language][index], reference, language)
    assert result.status is Status.ok, result
    assert (result.reward, result.correct) == (0.0, False), result.details
    assert result.reason in ("wrong_answer", "runtime_error", "compile_error"), result.details


def test_a_python_call_candidate_that_shadows_builtins_is_judged_on_its_value():
    reference = {
        "language": "python",
        "tests": {"format": "call", "entry_point": "twice", "cases": CALL_CASES},
    }
    hack = "def isinstance(*a):\n    return True\ndef type(x):\n    return int\ndef twice(x):\n    return str(2 * x)\n"
    assert_zero(score(hack, reference))
    control = "def abs(x):\n    return -x if x < 0 else x\ndef sorted(x):\n    return x\ndef twice(x):\n    return 2 * abs(x)\n"
    assert_one(score(control, reference))


# -- stdio: a checker runs apart from the candidate ---------------------------------------------------------


def test_a_candidate_cannot_reach_the_checkers_names():
    checker = "def check(input, output, expected):\n    return abs(float(output) - float(expected)) < 1e-6\n"
    reference = {
        "language": "python",
        "tests": {"format": "stdio", "checker": checker, "cases": [{"stdin": "", "stdout": "0.5"}]},
    }
    hack = "import builtins\nbuiltins.abs = lambda x: 0\ndef abs(x):\n    return 0\nprint(7)\n"
    assert_zero(score(hack, reference))
    assert_one(score("def abs(x):\n    return x\nprint(abs(0.5))\n", reference))
    # The output is only ever a string to the checker: code in it is not run.
    assert_zero(score("print('abs = lambda x: 0')\n", reference))


# -- operator maxima for the limits a reference asks for ----------------------------------------------------


@pytest.fixture
def small_maxima(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PROCTOR_SANDBOX_MAX_CPU_S", "3")
    monkeypatch.setenv("PROCTOR_SANDBOX_MAX_MEMORY_MB", "512")
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


@pytest.mark.parametrize(
    ("limits", "field"),
    [({"cpu_s": 4}, "reference.limits.cpu_s"), ({"memory_mb": 1024}, "reference.limits.memory_mb")],
)
def test_limits_above_the_operator_maxima_are_a_422(small_maxima, limits: dict, field: str):
    reference = {**script("f", "assert f(1) == 1\n"), "limits": limits}
    with pytest.raises(RequestError) as caught:
        SPEC.parse_reference(reference)
    assert (caught.value.status, caught.value.field) == (422, field)
    assert "maximum" in str(caught.value)
    within = SPEC.parse_reference({**reference, "limits": {"cpu_s": 3, "memory_mb": 512}})
    assert within.limits.cpu_s == 3 and within.limits.memory_mb == 512
