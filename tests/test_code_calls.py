"""Calls into C, C++, Java, Go, Rust and JavaScript programs: the signature grammar, the token format, the
generated harnesses (compiled once, one fork+exec per call in one jail), the `call` and `assert_script` formats
through the `code` verifier, and hacks in each language, in real nsjail sandboxes.
"""

from __future__ import annotations

import pytest

from proctor.contract import Status, Verdict
from proctor.sandboxes.job import RunLimits, RunVerdict
from proctor.verifiers.code import signature, verifier
from proctor.verifiers.code.calls import HarnessProgram

SPEC = verifier.SPEC
LIMITS = RunLimits(cpu_s=2.0, memory_mb=512)


def score(response: str, reference: dict, options: dict | None = None) -> Verdict:
    """Score as the engine would: validate the reference and options, then run the verifier."""
    return SPEC.score(response, SPEC.parse_reference(reference), SPEC.parse_options(options or {}))


def fence(code: str, language: str) -> str:
    return f"My answer:\n```{language}\n{code}\n```\n"


# -- the grammar and the tokens, no sandbox ---------------------------------------------------------------


def test_signatures_parse_in_each_language():
    cases = {
        "cpp": (
            "class Solution {\npublic:\n    vector<vector<int>> f(const vector<string>& words, long long k,"
            " double x, bool b, char c) { return {}; }\n};",
            "f(list[str] words, i64 k, f64 x, bool b, byte c) -> list[list[i32]]",
            "Solution",
        ),
        "c": (
            "int* f(int* nums, int numsSize, char* s, int* returnSize) { return 0; }",
            "f(list[i32] nums, str s) -> list[i32]",
            None,
        ),
        "java": (
            "class Solution {\n    public List<List<Integer>> f(int[][] grid, String s, long k) { return null; }\n}",
            "f(list[list[i32]] grid, str s, i64 k) -> list[list[i32]]",
            "Solution",
        ),
        "go": (
            "package main\nfunc f(a, b int, words []string, x float64) [][]int { return nil }",
            "f(i64 a, i64 b, list[str] words, f64 x) -> list[list[i64]]",
            None,
        ),
        "rust": (
            "impl Solution {\n    pub fn f(nums: &[i32], s: &str, mut v: Vec<Vec<i64>>) -> Vec<String> { vec![] }\n}",
            "f(list[i32] nums, str s, list[list[i64]] v) -> list[str]",
            "Solution",
        ),
    }
    for language, (source, described, owner) in cases.items():
        found = signature.entry(language, source, "f")
        assert (found.describe(), found.owner) == (described, owner), language


def test_signatures_outside_the_grammar_say_why():
    with pytest.raises(signature.Unsupported, match="outside"):
        signature.entry("cpp", "TreeNode* f(TreeNode* root) { return root; }", "f")
    with pytest.raises(signature.Unsupported, match="outside"):
        signature.entry("java", "class S { Map<String, Integer> f(int x) { return null; } }", "f")
    with pytest.raises(signature.Unsupported, match="no function g"):
        signature.entry("go", "package main\nfunc f() int { return 1 }", "g")
    with pytest.raises(signature.Unsupported, match="deeper"):
        signature.entry("rust", "fn f(x: Vec<Vec<Vec<i32>>>) -> i32 { 0 }", "f")
    # A function in a comment or a string is not a function.
    with pytest.raises(signature.Unsupported):
        signature.entry("c", '/* int f(int x) { */ const char* s = "int f(int y) {";', "f")


def test_tokens_round_trip_and_mismatches_name_the_place():
    kind = signature.Type("list", signature.Type("list", signature.Type("str")))
    value = [["a b", ""], ["é\n"]]
    assert signature.decode(iter(signature.encode(value, kind)), kind) == value
    with pytest.raises(signature.Mismatch, match=r"x\[1\]"):
        signature.encode([1, "2"], signature.Type("list", signature.Type("i32")), "x")
    with pytest.raises(signature.Mismatch, match="fits i32"):
        signature.encode(2**31, signature.Type("i32"))
    with pytest.raises(signature.Mismatch):
        signature.encode(True, signature.Type("i64"))  # a bool is not a number
    assert signature.encode(3, signature.Type("f64")) == ["3.0"]  # an integer passes as a double
    assert signature.json_fits([[1, 2.5], ["a", True]]) and not signature.json_fits([[[1]]])
    assert not signature.json_fits({"a": 1}) and not signature.json_fits(None)


# -- one compile, many calls, per language -----------------------------------------------------------------

# Each program: an entry point over nested lists, a string helper, a double helper (for the proxies too).
PROGRAMS = {
    "cpp": """
class Solution {
public:
    vector<vector<long long>> scale(vector<vector<int>>& grid, long long k) {
        cout << "debug output is fine" << endl;
        vector<vector<long long>> out;
        for (auto& row : grid) { vector<long long> r; for (int x : row) r.push_back(x * k); out.push_back(r); }
        return out;
    }
    string shout(const string& s, bool twice) { string t = s + "!"; return twice ? t + t : t; }
    double mean(vector<double> xs) { double t = 0; for (double x : xs) t += x; return xs.empty() ? 0 : t / xs.size(); }
};
""",
    "c": """
long long** unused_helper_with_unsupported_types(void) { return 0; }
long long* scale(int* xs, int xsSize, long long k, int* returnSize) {
    printf("debug output is fine\\n");
    long long* out = malloc(sizeof(long long) * (xsSize + 1));
    for (int i = 0; i < xsSize; i++) out[i] = xs[i] * k;
    *returnSize = xsSize;
    return out;
}
char* shout(char* s, bool twice) {
    size_t n = strlen(s);
    char* t = malloc(2 * n + 3);
    strcpy(t, s); strcat(t, "!");
    if (twice) { strcat(t, s); strcat(t, "!"); }
    return t;
}
double mean(double* xs, int n) { double t = 0; for (int i = 0; i < n; i++) t += xs[i]; return n ? t / n : 0; }
""",
    "java": """
import java.util.*;

class Solution {
    public long[][] scale(int[][] grid, long k) {
        System.out.println("debug output is fine");
        long[][] out = new long[grid.length][];
        for (int i = 0; i < grid.length; i++) {
            out[i] = new long[grid[i].length];
            for (int j = 0; j < grid[i].length; j++) out[i][j] = grid[i][j] * k;
        }
        return out;
    }
    public String shout(String s, boolean twice) { String t = s + "!"; return twice ? t + t : t; }
    public double mean(List<Double> xs) { double t = 0; for (double x : xs) t += x; return xs.isEmpty() ? 0 : t / xs.size(); }
}
""",
    "go": """
package main

import "fmt"

func scale(grid [][]int, k int64) [][]int64 {
	fmt.Println("debug output is fine")
	out := [][]int64{}
	for _, row := range grid {
		r := []int64{}
		for _, x := range row {
			r = append(r, int64(x)*k)
		}
		out = append(out, r)
	}
	return out
}

func shout(s string, twice bool) string {
	t := s + "!"
	if twice {
		return t + t
	}
	return t
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	t := 0.0
	for _, x := range xs {
		t += x
	}
	return t / float64(len(xs))
}

func main() { fmt.Println("the candidate's own main never runs") }
""",
    "rust": """
impl Solution {
    pub fn scale(grid: Vec<Vec<i32>>, k: i64) -> Vec<Vec<i64>> {
        println!("debug output is fine");
        grid.iter().map(|row| row.iter().map(|&x| x as i64 * k).collect()).collect()
    }
    pub fn shout(s: &str, twice: bool) -> String {
        let t = format!("{}!", s);
        if twice { format!("{}{}", t, t) } else { t }
    }
    pub fn mean(xs: &[f64]) -> f64 {
        if xs.is_empty() { 0.0 } else { xs.iter().sum::<f64>() / xs.len() as f64 }
    }
}
""",
    "javascript": """
function scale(grid, k) {
  console.log("debug output is fine");
  return grid.map((row) => row.map((x) => x * k));
}
const shout = (s, twice) => (twice ? `${s}!${s}!` : `${s}!`);
async function mean(xs) { return xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : 0; }
""",
}
GRID = [[1, 2], [3, -4], []]
SCALED = [[3, 6], [9, -12], []]


@pytest.mark.parametrize("language", sorted(PROGRAMS))
def test_harness_calls_every_function_with_typed_values(language: str):
    with HarnessProgram(language, PROGRAMS[language], entry_point="scale", limits=LIMITS) as program:
        assert program.start().ok, program.start().message
        assert {"scale", "shout", "mean"} <= set(program.names)
        grid, want = ([1, 2, -3], [3, 6, -9]) if language == "c" else (GRID, SCALED)
        called = program.call("scale", [grid, 3])
        assert (called.result.verdict, called.returned, called.plain) == (RunVerdict.ok, True, True)
        assert called.value == want
        assert "debug output is fine" in called.result.stderr  # the candidate's prints never reach the record
        assert program.call("shout", ["héllo wörld", True]).value == "héllo wörld!héllo wörld!"
        assert program.call("shout", ["", False]).value == "!"
        assert program.call("mean", [[1, 2, 4.5]]).value == 2.5
        # Arguments that do not fit the signature never reach the program.
        if language != "javascript":
            assert "expected a list" in program.check("scale", [5, 3])
            refused = program.call("scale", [[["x"]], 3])
            assert (refused.returned, refused.result.verdict) == (False, RunVerdict.runtime_error)
            assert program.check("scale", [grid]) is not None  # arity


# -- the call format through the verifier -------------------------------------------------------------------

WRONG = {
    "cpp": ("r.push_back(x * k)", "r.push_back(x + k)"),
    "c": ("out[i] = xs[i] * k", "out[i] = xs[i] + k"),
    "java": ("out[i][j] = grid[i][j] * k", "out[i][j] = grid[i][j] + k"),
    "go": ("int64(x)*k", "int64(x)+k"),
    "rust": ("x as i64 * k", "x as i64 + k"),
    "javascript": ("x * k", "x + k"),
}


def call_reference(language: str) -> dict:
    cases = (
        [{"args": [[1, 2, -3], 3], "expected": [3, 6, -9]}, {"args": [[], 7], "expected": []}]
        if language == "c"
        else [{"args": [GRID, 3], "expected": SCALED}, {"args": [[[5]], 0], "expected": [[0]]}]
    )
    method_of = {"cpp": "Solution", "java": "Solution"}.get(language)
    tests = {"format": "call", "entry_point": "scale", "cases": cases}
    if method_of:
        tests["method_of"] = method_of
    return {"language": language, "tests": tests}


@pytest.mark.parametrize("language", sorted(PROGRAMS))
def test_call_format_passes_a_correct_program_and_fails_a_wrong_one(language: str):
    good = score(fence(PROGRAMS[language], language), call_reference(language))
    assert (good.status, good.reward, good.correct, good.reason) == (Status.ok, 1.0, True, None), good.details
    assert [t["verdict"] for t in good.details["tests"]] == ["passed", "passed"]
    right, wrong = WRONG[language]
    assert right in PROGRAMS[language]
    bad = score(fence(PROGRAMS[language].replace(right, wrong), language), call_reference(language))
    assert (bad.status, bad.reward, bad.reason) == (Status.ok, 0.0, "wrong_answer")
    assert "expected" in bad.details["first_failure"]["diff"]


def test_a_signature_that_cannot_take_the_arguments_is_a_compile_error():
    reference = call_reference("cpp")
    result = score(fence("class Solution { public: int scale(string s) { return 0; } };", "cpp"), reference)
    assert (result.status, result.reward, result.reason) == (Status.ok, 0.0, "compile_error")
    assert "takes 1 arguments" in result.details["message"]
    unsupported = score(
        fence("struct T {};\nclass Solution { public: int scale(T* t, long long k) { return 0; } };", "cpp"),
        reference,
    )
    assert (unsupported.reward, unsupported.reason) == (0.0, "compile_error")
    assert "T*" in unsupported.details["message"]
    broken = score(
        fence("long long* scale(int* xs, int n, long long k, int* rs) { return xs + ; }", "c"),
        call_reference("c"),
    )
    assert (broken.reward, broken.reason, broken.components["compiled"]) == (0.0, "compile_error", 0.0)
    assert "error" in broken.details["message"]
    missing = score(fence("int other(int x) { return x; }", "go"), call_reference("go"))
    assert (missing.reason, missing.components["compiled"]) == ("compile_error", 0.0)
    assert "no function scale" in missing.details["message"]


# -- assert scripts against non-Python candidates ------------------------------------------------------------

SCRIPT = """
def check(candidate):
    assert candidate([[1, 2]], 2) == [[2, 4]]
    assert candidate([], 5) == []
    assert shout("a", False) == "a!"
    assert abs(mean([1.0, 2.0]) - 1.5) < 1e-9
"""


@pytest.mark.parametrize("language", ["javascript", "go"])
def test_assert_script_calls_the_candidate_and_its_helpers_through_proxies(language: str):
    reference = {
        "language": language,
        "tests": {
            "format": "assert_script",
            "entry_point": "scale",
            "script": SCRIPT,
            "candidate_names": ["shout", "mean"],
        },
    }
    good = score(fence(PROGRAMS[language], language), reference)
    assert (good.status, good.reward, good.reason) == (Status.ok, 1.0, None), good.details
    right, wrong = WRONG[language]
    bad = score(fence(PROGRAMS[language].replace(right, wrong), language), reference)
    assert (bad.status, bad.reward, bad.reason) == (Status.ok, 0.0, "wrong_answer")


# -- hacks ---------------------------------------------------------------------------------------------------

# Each prints a line that looks like a result and ends with status 0 before the harness can write its record.
EARLY_EXITS = {
    "c": 'long long* scale(int* xs, int n, long long k, int* rs) { printf("ok 3 6 -9\\n"); fflush(stdout);'
    " exit(0); }",
    "cpp": "class Solution { public: vector<vector<long long>> scale(vector<vector<int>>& g, long long k) {"
    ' printf("ok [[3,6],[9,-12],[]]\\n"); exit(0); } };',
    "java": "class Solution { public long[][] scale(int[][] g, long k) {"
    ' System.out.println("ok [[3,6],[9,-12],[]]"); System.exit(0); return null; } }',
    "go": 'package main\nimport ("fmt"; "os")\nfunc scale(g [][]int, k int64) [][]int64 {'
    ' fmt.Println("ok [[3,6],[9,-12],[]]"); os.Exit(0); return nil }',
    "rust": "fn scale(g: Vec<Vec<i32>>, k: i64) -> Vec<Vec<i64>> {"
    ' println!("ok [[3,6],[9,-12],[]]"); std::process::exit(0) }',
    "javascript": 'function scale(g, k) { require("fs").writeSync(1, "ok [[3,6],[9,-12],[]]\\n"); process.exit(0); }',
}


@pytest.mark.parametrize("language", sorted(EARLY_EXITS))
def test_printing_a_fake_result_and_exiting_zero_is_not_a_pass(language: str):
    result = score(fence(EARLY_EXITS[language], language), call_reference(language))
    assert (result.status, result.reward, result.reason) == (Status.ok, 0.0, "runtime_error"), result.details
    assert "without returning" in result.details["tests"][0]["diff"]


def test_javascript_forgeries_are_wrong_answers():
    reference = call_reference("javascript")
    forged = {
        # The harness keeps its own JSON.stringify: patching the global one changes nothing.
        "patched stringify": "JSON.stringify = () => '[[3,6],[9,-12],[]]';\nfunction scale(g, k) { return 0; }",
        # An object claiming to serialise as the answer is not plain data.
        "toJSON": "function scale(g, k) { return { toJSON() { return [[3, 6], [9, -12], []]; } }; }",
        "class instance": "class V extends Array {}\nfunction scale(g, k) { return V.from([[3, 6], [9, -12], []]); }",
        "undefined": "function scale(g, k) {}",
    }
    for name, code in forged.items():
        result = score(fence(code, "javascript"), reference)
        assert (result.reward, result.reason) == (0.0, "wrong_answer"), (name, result.details)


def test_a_second_result_record_is_a_wrong_answer():
    # A candidate that writes a record through the harness's own channel and then returns: two records.
    code = (
        "function scale(g, k) {\n"
        "  __proctor.finish([[3, 6], [9, -12], []]);\n"
        "  return g.map((row) => row.map((x) => x * k));\n"
        "}"
    )
    result = score(fence(code, "javascript"), call_reference("javascript"))
    assert (result.reward, result.reason) == (0.0, "wrong_answer")
    assert "more than one result record" in result.details["tests"][0]["diff"]


def test_a_crash_or_a_loop_in_one_call_fails_that_call_only():
    code = (
        "long long* scale(int* xs, int n, long long k, int* rs) {\n"
        "    if (k == 0) { volatile int* p = 0; *p = 1; }\n"
        "    if (k == 1) { for (volatile long i = 0;; i++) {} }\n"
        "    long long* out = malloc(sizeof(long long) * (n + 1));\n"
        "    for (int i = 0; i < n; i++) out[i] = xs[i] * k;\n"
        "    *rs = n;\n    return out;\n}"
    )
    reference = call_reference("c")
    reference["tests"]["cases"] = [
        {"args": [[1], 0], "expected": [0]},
        {"args": [[1], 1], "expected": [1]},
        {"args": [[1, 2], 2], "expected": [2, 4]},
    ]
    reference["limits"] = {"cpu_s": 0.5}
    result = score(fence(code, "c"), reference, {"reward": "fraction"})
    assert [t["verdict"] for t in result.details["tests"]] == ["runtime_error", "time_limit", "passed"]
    assert result.reward == pytest.approx(1 / 3)


def test_hostile_sources_parse_in_linear_time():
    # Each once took minutes in a regex that backtracked over the whole source; now every scan is bounded.
    hostile = [
        "a " * 100_000,
        "int " + "x " * 100_000 + "{",
        "/* " * 50_000,
        "` " * 50_000,
        "vector<" * 3_000 + "int" + ">" * 3_000 + " f(int x) { return 0; }",
        "a::" * 50_000,
        "a<" * 50_000 + " f() {",
    ]
    for language in signature.FINDERS:
        for source in hostile:
            with pytest.raises(signature.Unsupported):
                signature.entry(language, source, "f")


def test_module_syntax_and_crate_attributes_are_accepted():
    # ES module exports in a CommonJS harness, and a Rust crate attribute that must stay first in the file.
    with HarnessProgram(
        "javascript", "export default function add(a, b) {\n  return a + b;\n}\n", entry_point="add"
    ) as js:
        assert js.start().ok and js.call("add", [1, 2]).value == 3
    rust = "#![allow(unused)]\nimpl Solution {\n    pub fn add(a: i32, b: i32) -> i32 { a + b }\n}\n"
    with HarnessProgram("rust", rust, entry_point="add", limits=LIMITS) as program:
        assert program.start().ok, program.start().message
        assert program.call("add", [40, 2]).value == 42
