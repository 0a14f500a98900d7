"""The `code` verifier: formats, languages, verdicts, rewards and request validation, in real nsjail sandboxes.

Each test scores through the registered spec (parse the reference and options as a request would, then score),
so the compile, the sandboxes and the judging are the real ones; one test goes through the HTTP service.
"""

from __future__ import annotations

import httpx
import pytest

from proctor.contract import RequestError, Status, Verdict
from proctor.sandboxes.languages import get_language
from proctor.verifiers.code import verifier
from proctor.verifiers.code.compare import compare_output, compare_values
from proctor.verifiers.code.extract import extract_code

SPEC = verifier.SPEC


def score(response: str, reference: dict, options: dict | None = None) -> Verdict:
    """Score as the engine would: validate the reference and options, then run the verifier."""
    return SPEC.score(response, SPEC.parse_reference(reference), SPEC.parse_options(options or {}))


def fence(code: str, language: str = "python") -> str:
    return f"Solution:\n```{language}\n{code}\n```\n"


def stdio(language: str, cases: list[tuple[str, str]], **extra) -> dict:
    tests = {"format": "stdio", "cases": [{"stdin": i, "stdout": o} for i, o in cases], **extra}
    return {"language": language, "tests": tests}


SUM_CASES = [("1 2\n", "3\n"), ("40 2\n", "42\n"), ("-5 5\n", "0\n")]
SUM = {
    "python": ("import sys\na, b = map(int, sys.stdin.read().split())\nprint(a + b)", "print(3)"),
    "c": (
        '#include <stdio.h>\nint main(void){long long a,b;scanf("%lld %lld",&a,&b);printf("%lld\\n",a+b);}',
        '#include <stdio.h>\nint main(void){long long a,b;scanf("%lld %lld",&a,&b);printf("%lld\\n",a-b);}',
    ),
    "cpp": (
        "#include <iostream>\nint main(){long long a,b;std::cin>>a>>b;std::cout<<a+b<<'\\n';}",
        "#include <iostream>\nint main(){long long a,b;std::cin>>a>>b;std::cout<<a*b<<'\\n';}",
    ),
    "javascript": (
        'const [a,b]=require("fs").readFileSync(0,"utf8").trim().split(/\\s+/).map(Number);console.log(a+b);',
        'const [a,b]=require("fs").readFileSync(0,"utf8").trim().split(/\\s+/).map(Number);console.log(a+b+1);',
    ),
    "java": (
        "import java.util.*;\npublic class Main { public static void main(String[] x) {"
        " Scanner s = new Scanner(System.in); System.out.println(s.nextLong() + s.nextLong()); } }",
        "import java.util.*;\npublic class Main { public static void main(String[] x) {"
        " Scanner s = new Scanner(System.in); System.out.println(s.nextLong() - s.nextLong()); } }",
    ),
    "go": (
        'package main\nimport "fmt"\nfunc main() { var a, b int64; fmt.Scan(&a, &b); fmt.Println(a + b) }',
        'package main\nimport "fmt"\nfunc main() { var a, b int64; fmt.Scan(&a, &b); fmt.Println(a * b) }',
    ),
    "rust": (
        "use std::io::Read;\nfn main() { let mut s = String::new(); std::io::stdin().read_to_string(&mut s)"
        ".unwrap(); let v: Vec<i64> = s.split_whitespace().map(|x| x.parse().unwrap()).collect();"
        ' println!("{}", v[0] + v[1]); }',
        "use std::io::Read;\nfn main() { let mut s = String::new(); std::io::stdin().read_to_string(&mut s)"
        ".unwrap(); let v: Vec<i64> = s.split_whitespace().map(|x| x.parse().unwrap()).collect();"
        ' println!("{}", v[0] + v[1] + 1); }',
    ),
}


@pytest.mark.parametrize("language", sorted(SUM))
def test_stdio_passes_a_correct_program_and_fails_a_wrong_one(language: str):
    right, wrong = SUM[language]
    good = score(fence(right, language), stdio(language, SUM_CASES))
    assert (good.status, good.reward, good.correct, good.reason) == (Status.ok, 1.0, True, None)
    assert good.components == {"tests_passed": 1.0, "compiled": 1.0}
    assert [t["verdict"] for t in good.details["tests"]] == ["passed"] * 3
    bad = score(fence(wrong, language), stdio(language, SUM_CASES))
    assert (bad.status, bad.reward, bad.correct, bad.reason) == (Status.ok, 0.0, False, "wrong_answer")
    assert "expected" in bad.details["first_failure"]["diff"]


def test_call_format_compares_plain_return_values_here():
    reference = {
        "language": "python",
        "tests": {
            "format": "call",
            "entry_point": "pair",
            "cases": [
                {"args": [1, 2], "expected": [1, 2]},
                {"args": [3], "kwargs": {"b": 4}, "expected": [3, 4]},
            ],
        },
    }
    good = score(fence("def pair(a, b):\n    return (a, b)"), reference)  # a tuple equals a JSON list
    assert (good.reward, good.correct) == (1.0, True)
    bad = score(fence("def pair(a, b):\n    return [b, a]"), reference)
    assert (bad.reward, bad.reason) == (0.0, "wrong_answer")
    assert "expected 1, got 2" in bad.details["first_failure"]["diff"]
    assert bad.details["tests_run"] == 1  # all_pass stops at the first failure


def test_call_format_leetcode_method_and_type_strictness():
    reference = {
        "language": "python",
        "tests": {
            "format": "call",
            "entry_point": "isEven",
            "method_of": "Solution",
            "cases": [{"args": [2], "expected": True}, {"args": [3], "expected": False}],
        },
    }
    good = score(fence("class Solution:\n    def isEven(self, n):\n        return n % 2 == 0"), reference)
    assert good.reward == 1.0
    as_int = score(
        fence("class Solution:\n    def isEven(self, n):\n        return int(n % 2 == 0)"), reference
    )
    assert (as_int.reward, as_int.reason) == (0.0, "wrong_answer")  # 1 is not True


def test_assert_script_humaneval_style_with_a_helper():
    script = (
        "def check(candidate):\n"
        "    assert candidate([1, 2, 3], 2) == 17\n"  # 1 + 2*2 + 3*4
        "    assert poly([1, 1], 3) == 4\n"  # the script calls the candidate's helper too, which the reference lists
    )
    reference = {
        "language": "python",
        "tests": {
            "format": "assert_script",
            "entry_point": "evaluate",
            "script": script,
            "candidate_names": ["poly"],
        },
    }
    right = "def poly(xs, x):\n    return sum(c * x**i for i, c in enumerate(xs))\n\ndef evaluate(xs, x):\n    return poly(xs, x)"
    good = score(fence(right), reference)
    assert (good.reward, good.correct) == (1.0, True), good.details
    wrong = right.replace("return poly(xs, x)", "return poly(xs, x) + 1")
    bad = score(fence(wrong), reference)
    assert (bad.reward, bad.reason) == (0.0, "wrong_answer")
    assert "AssertionError" in bad.details["tests"][0]["diff"]


def test_mbpp_style_asserts():
    reference = {
        "language": "python",
        "tests": {
            "format": "assert_script",
            "entry_point": "sq",
            "script": "assert sq(3) == 9\nassert sq(-2) == 4\n",
        },
    }
    assert score(fence("def sq(x):\n    return x * x"), reference).reward == 1.0
    assert score(fence("def sq(x):\n    return 2 * x"), reference).reason == "wrong_answer"


def test_compile_errors():
    cpp = score(fence("int main( { return 0; }", "cpp"), stdio("cpp", SUM_CASES))
    assert (cpp.status, cpp.reward, cpp.reason) == (Status.ok, 0.0, "compile_error")
    assert cpp.components == {"tests_passed": 0.0, "compiled": 0.0}
    assert "error" in cpp.details["message"]
    python = score(fence("def f(:\n    pass"), stdio("python", SUM_CASES))
    assert (python.reason, python.components["compiled"]) == ("compile_error", 0.0)


def test_runtime_errors():
    python = score(fence("raise ValueError('boom')"), stdio("python", SUM_CASES))
    assert (python.reward, python.reason) == (0.0, "runtime_error")
    assert "ValueError" in python.details["tests"][0]["diff"]
    c = score(fence("int main(void){ int *p = 0; return *p; }", "c"), stdio("c", SUM_CASES))
    assert (c.reward, c.reason) == (0.0, "runtime_error")
    call = {
        "language": "python",
        "tests": {"format": "call", "entry_point": "f", "cases": [{"args": [], "expected": 1}]},
    }
    assert score(fence("def f():\n    return 1 / 0"), call).reason == "runtime_error"
    assert score(fence("def g():\n    return 1"), call).reason == "runtime_error"  # no entry point


# A compile error and a runtime error per language the SUM table's programs do not cover elsewhere.
BROKEN = {
    "java": (
        "public class Main { public static void main(String[] x) { int y = ; } }",
        "public class Main { public static void main(String[] x) { int[] a = new int[1]; a[5] = 1; } }",
        "ArrayIndexOutOfBoundsException",
        "error:",
    ),
    "go": (
        "package main\nfunc main() { x := 1 }",
        "package main\nfunc main() { var a []int; a[3] = 1 }",
        "index out of range",
        "declared but not used",
    ),
    "rust": (
        'fn main() { let x: i32 = "a"; }',
        'fn main() { let v: Vec<i32> = Vec::new(); println!("{}", v[3]); }',
        "index out of bounds",
        "mismatched types",
    ),
}


@pytest.mark.parametrize("language", sorted(BROKEN))
def test_compile_and_runtime_errors_in_java_go_rust(language: str):
    does_not_compile, crashes, says, compiler_says = BROKEN[language]
    compiled = score(fence(does_not_compile, language), stdio(language, SUM_CASES))
    assert (compiled.status, compiled.reward, compiled.reason) == (Status.ok, 0.0, "compile_error")
    assert compiled.components == {"tests_passed": 0.0, "compiled": 0.0}
    assert compiler_says in compiled.details["message"]
    crashed = score(fence(crashes, language), stdio(language, SUM_CASES))
    assert (crashed.status, crashed.reward, crashed.reason) == (Status.ok, 0.0, "runtime_error")
    assert crashed.components["compiled"] == 1.0
    assert says in crashed.details["tests"][0]["diff"]


def test_time_limit_is_cpu_time():
    reference = {**stdio("cpp", SUM_CASES), "limits": {"cpu_s": 0.5}}
    result = score(fence("int main(){ volatile unsigned long x = 0; for(;;) x++; }", "cpp"), reference)
    assert (result.status, result.reward, result.reason) == (Status.ok, 0.0, "time_limit")
    assert result.details["limits"] == {"memory_mb": 1024, "cpu_s": 0.5, "cpu_from": "limits"}


def test_memory_limit():
    reference = {**stdio("python", SUM_CASES), "limits": {"memory_mb": 128}}
    result = score(fence("x = bytearray(512 * 1024 * 1024)\nprint(len(x))"), reference)
    assert (result.status, result.reward, result.reason) == (Status.ok, 0.0, "memory_limit")
    cpp = {**stdio("cpp", SUM_CASES), "limits": {"memory_mb": 128}}
    code = '#include <vector>\n#include <cstdio>\nint main(){std::vector<char> v(1u<<30, 1); printf("%d", v[7]);}'
    assert score(fence(code, "cpp"), cpp).reason == "memory_limit"


def test_output_limit_and_truncated_output_never_passes():
    result = score(fence("while True:\n    print('3 ' * 1000)"), stdio("python", SUM_CASES))
    assert (result.reward, result.reason) == (0.0, "output_limit")


def test_no_code():
    reference = stdio("python", SUM_CASES)
    for response in ["", "   \n", "<think>```python\nprint(3)\n```", "Here:\n```python\n```\n"]:
        result = score(response, reference)
        assert (result.status, result.reward, result.reason) == (Status.ok, 0.0, "no_code"), response
        assert result.components == {"tests_passed": 0.0, "compiled": 0.0}


def test_fraction_reward_runs_every_test():
    program = fence("import sys\na, b = map(int, sys.stdin.read().split())\nprint(a + b if a > 0 else 0)")
    reference = stdio("python", [("1 2", "3"), ("-5 1", "-4"), ("2 2", "4")])
    fraction = score(program, reference, {"reward": "fraction"})
    assert fraction.reward == pytest.approx(2 / 3)
    assert (fraction.correct, fraction.reason, fraction.details["tests_run"]) == (False, "wrong_answer", 3)
    assert fraction.components["tests_passed"] == pytest.approx(2 / 3)
    strict = score(program, reference)
    assert (strict.reward, strict.details["tests_run"]) == (0.0, 2)
    assert (
        score(program, reference, {"reward": "fraction", "stop_on_first_failure": True}).details["tests_run"]
        == 2
    )


def test_fraction_stops_running_after_repeated_time_limits():
    cases = [(str(i), str(i)) for i in range(6)]
    reference = {**stdio("python", cases), "limits": {"cpu_s": 0.3}}
    result = score(fence("n = int(input())\nwhile n:\n    pass\nprint(n)"), reference, {"reward": "fraction"})
    assert result.reward == pytest.approx(1 / 6)
    assert result.details["tests_run"] == 1 + verifier.MAX_TIME_LIMITS


def test_special_judge_checker():
    checker = (
        "def check(input, output, expected):\n"
        "    n = int(input)\n"
        "    parts = output.split()\n"
        "    return len(parts) == 2 and int(parts[0]) + int(parts[1]) == n and min(map(int, parts)) >= 0\n"
    )
    reference = stdio("python", [("10", ""), ("3", "")], checker=checker)
    good = score(fence("n = int(input())\nprint(n - 1, 1)"), reference)
    assert (good.reward, good.details["compare"]) == (1.0, "checker")
    bad = score(fence("n = int(input())\nprint(n, 1)"), reference)
    assert (bad.reward, bad.reason) == (0.0, "wrong_answer")
    broken = stdio("python", [("10", "")], checker="def check(input, output, expected):\n    return 'yes'\n")
    failed = score(fence("print(1)"), broken)
    assert (failed.status, failed.reason) == (Status.verifier_error, "bad_reference")


def test_reference_solution_calibrates_the_cpu_limit():
    reference = {**stdio("python", SUM_CASES), "reference_solution": SUM["python"][0]}
    good = score(fence(SUM["python"][0]), reference, {"time_floor_s": 0.5})
    assert good.reward == 1.0
    limits = good.details["limits"]
    assert limits["cpu_from"] == "reference_solution"
    assert limits["cpu_s_per_test"] == pytest.approx(
        [max(0.5, 4.0 * max(t, verifier.MIN_REFERENCE_CPU_S)) for t in limits["reference_cpu_s_per_test"]],
        abs=1e-3,
    )
    assert [t["cpu_limit_s"] for t in good.details["tests"]] == limits["cpu_s_per_test"]
    slow = score(fence("while True:\n    pass"), reference, {"time_floor_s": 0.5})
    assert slow.reason == "time_limit"
    wrong_ref = {**stdio("python", SUM_CASES), "reference_solution": "print(3)"}
    failed = score(fence(SUM["python"][0]), wrong_ref)
    assert (failed.status, failed.reason) == (Status.verifier_error, "bad_reference")


HEAVY_N = 60_000_000  # sum(range(HEAVY_N)) takes about half a CPU second


def test_each_test_gets_its_own_limit_from_the_reference_solution():
    reference = {
        **stdio("python", [(str(HEAVY_N), str(HEAVY_N * (HEAVY_N - 1) // 2)), ("3", "3")]),
        "reference_solution": "n = int(input())\nprint(sum(range(n)))",
    }
    options = {"time_floor_s": 0.1, "reward": "fraction"}
    good = score(fence(reference["reference_solution"]), reference, options)
    assert (good.status, good.reward, good.correct) == (Status.ok, 1.0, True), good.details
    limits = good.details["limits"]
    heavy_limit, light_limit = limits["cpu_s_per_test"]
    heavy_ref, light_ref = limits["reference_cpu_s_per_test"]
    assert heavy_limit == pytest.approx(min(20.0, 4.0 * heavy_ref), abs=1e-3)
    assert light_limit == pytest.approx(
        max(0.1, 4.0 * max(light_ref, verifier.MIN_REFERENCE_CPU_S)), abs=1e-3
    )
    assert (
        light_limit < heavy_ref < heavy_limit
    )  # the heavy work fits the heavy test's limit, not the light one's
    assert [t["cpu_limit_s"] for t in good.details["tests"]] == [heavy_limit, light_limit]
    assert limits["cpu_s"] == heavy_limit
    # Fast where it must be, but doing the heavy test's work on the light test too.
    slow_on_light = f"n = int(input())\nif n < 1000:\n    sum(range({HEAVY_N}))\nprint(sum(range(n)))"
    slow = score(fence(slow_on_light), reference, options)
    assert (slow.status, slow.reward, slow.reason) == (Status.ok, 0.5, "time_limit"), slow.details
    heavy, light = slow.details["tests"]
    assert (heavy["verdict"], heavy["cpu_limit_s"]) == ("passed", heavy_limit)
    assert (light["verdict"], light["cpu_limit_s"]) == ("time_limit", light_limit)
    assert light["cpu_s"] < heavy_limit  # one limit for every test would have passed it


def test_a_death_at_import_reports_the_program_not_the_sandbox_log():
    call = {
        "language": "python",
        "tests": {"format": "call", "entry_point": "f", "cases": [{"args": [], "expected": 1}]},
    }
    program = "import os, sys, time\nsys.stderr.write('bye now\\n')\nsys.stderr.flush()\ntime.sleep(0.3)\nos._exit(0)"
    result = score(fence(program), call)
    assert (result.status, result.reward, result.reason) == (Status.ok, 0.0, "runtime_error")
    message = result.details["message"]
    assert message.startswith("the program ended while being loaded, before any test ran"), message
    assert message.endswith("stderr: bye now"), message
    assert "exit status" not in message or "(exit status 0)" in message
    for noise in ("Symlink", "Mount:", "[I][", "STANDALONE"):
        assert noise not in message, message
    silent = score(fence("import os\nos._exit(0)"), call)
    assert silent.details["message"].startswith("the program ended while being loaded")
    assert "[I][" not in silent.details["message"]


def test_program_message_keeps_the_program_and_drops_the_sandbox_log():
    log = (
        "the program ended while loading (eof). "
        "1-21T03:57:02+0000] Symlink: 'usr/bin' -> '/bin' type:'' options:'' symlink:true\n"
        "[I][2026-11-21T03:57:02+0000] Mount: '/dev/null' -> '/dev/null' type:'' options:''\n"
        "[I][2026-11-21T03:57:02+0000] Executing '/bin/sh' for '[STANDALONE MODE]'\n"
        "Traceback: boom\n"
        "[I][2026-11-21T03:57:02+0000] pid=6448 ([STANDALONE MODE]) terminated with signal: SIGKILL (9), (PIDs left: 0)\n"
    )
    assert verifier.program_message(log) == (
        "the program ended while being loaded, before any test ran (killed by signal SIGKILL (9)); "
        "stderr: Traceback: boom"
    )
    exited = log.replace("terminated with signal: SIGKILL (9)", "exited with status: 3").replace(
        "Traceback: boom\n", ""
    )
    assert verifier.program_message(exited) == (
        "the program ended while being loaded, before any test ran (exit status 3); no stderr"
    )
    assert verifier.program_message("main.c:1: error: expected ';'\n") == "main.c:1: error: expected ';'"


def test_a_broken_sandbox_is_a_sandbox_error_never_a_zero(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PROCTOR_SANDBOX_BACKEND", "docker")  # no docker daemon here: the backend fails
    result = score(fence(SUM["python"][0]), stdio("python", SUM_CASES))
    assert (result.status, result.reason, result.correct) == (Status.sandbox_error, "sandbox_error", None)


def test_reference_validation_names_the_field():
    base = stdio("python", SUM_CASES)
    cases = [
        ({**base, "timeout": 3}, "reference.timeout"),
        ({**base, "tests": {**base["tests"], "cmp": "tokens"}}, "reference.tests.cmp"),
        ({**base, "limits": {"cpu": 1}}, "reference.limits.cpu"),
        ({**base, "language": "cobol"}, "reference.language"),
        (
            {
                **base,
                "tests": {"format": "call", "entry_point": "f", "cases": [{"expected": {"a": 1}}]},
                "language": "cpp",
            },
            "reference.language",  # typed languages' calls take no objects: the request's fault
        ),
        (
            {
                **base,
                "tests": {
                    "format": "call",
                    "entry_point": "f",
                    "cases": [{"kwargs": {"a": 1}, "expected": 1}],
                },
                "language": "javascript",
            },
            "reference.language",  # keyword arguments are Python-only
        ),
        (
            {**base, "tests": {"format": "assert_script", "entry_point": "f", "script": "assert (("}},
            "reference.tests.script",
        ),
        (
            {
                **base,
                "tests": {"format": "stdio", "cases": [{"stdin": "", "stdout": ""}], "checker": "x = 1"},
            },
            "reference.tests.checker",
        ),
        ({**base, "tests": {"format": "junit"}}, "reference.tests"),
    ]
    for reference, field in cases:
        with pytest.raises(RequestError) as caught:
            SPEC.parse_reference(reference)
        assert (caught.value.status, caught.value.field) == (422, field)
    with pytest.raises(RequestError) as caught:
        SPEC.parse_options({"rewards": "fraction"})
    assert caught.value.field == "options.rewards"


def test_comparators():
    assert compare_output("tokens", "1  2\n3", "1 2 3\n") is None
    assert compare_output("tokens", "1 2", "1 2 3") is not None  # truncated output never passes
    assert compare_output("tokens", "1 2 3 4", "1 2 3") is not None
    assert compare_output("tokens", "YES", "yes") is not None  # never lower-cased
    assert compare_output("lines", "a b\nc\n", "a b   \nc  \n\n") is None  # padding in the expected output
    assert compare_output("lines", "a  b\n", "a b\n") is not None
    assert compare_output("lines", "a\n", "a\nb\n") is not None
    assert compare_output("exact", "a\n", "a\n") is None
    assert compare_output("exact", "a", "a\n") is not None
    assert compare_output("float", "0.3333334 x", "0.333333 x") is None
    assert compare_output("float", "0.334", "0.333") is not None
    assert compare_output("float", "0.334", "0.333", 0.01) is None
    assert compare_output("float", "nan", "1.0") is not None
    assert compare_output("tokens", "0.3333334", "0.333333") is not None  # tolerance only when asked


def test_value_comparison():
    assert compare_values((1, [2, 3]), [1, [2, 3]]) is None
    assert compare_values({1: "a"}, {"1": "a"}) is None
    assert compare_values(True, 1) is not None
    assert compare_values(1, True) is not None
    assert compare_values(2, 2.0) is None
    assert compare_values(0.1 + 0.2, 0.3) is not None
    assert compare_values(0.1 + 0.2, 0.3, 1e-9) is None
    assert compare_values({1, 2}, [1, 2]) is not None
    assert compare_values([1], [1, 2]) is not None


def test_extraction():
    python = get_language("python")
    response = "```cpp\nint x;\n```\ntext\n```python\nprint(1)\n```\nand\n```\nlast\n```"
    assert extract_code(response, python).code == "print(1)\n"
    assert extract_code(response, get_language("c")).code == "last\n"  # no C block: the last block
    assert extract_code("print(2)", python).method == "whole"
    assert extract_code("<think>```py\nx\n```</think>\n```py\nprint(3)\n```", python).code == "print(3)\n"
    assert extract_code("~~~~py\na = '```'\n~~~~", python).code == "a = '```'\n"
    assert extract_code("<think>still thinking", python).code == ""


def test_over_http(start_server):
    url = start_server(PROCTOR_PLUGINS="tests.plugins.slow,proctor.verifiers.code")
    body = {"verifier": "code", "response": fence(SUM["cpp"][0], "cpp"), "reference": stdio("cpp", SUM_CASES)}
    answer = httpx.post(f"{url}/v1/score", json=body, timeout=60)
    assert answer.status_code == 200, answer.text
    assert (answer.json()["status"], answer.json()["reward"], answer.json()["verifier"]) == (
        "ok",
        1.0,
        "code@1.0.0",
    ), answer.text
    body["reference"] = {**body["reference"], "tests": {**body["reference"]["tests"], "comparator": "tokens"}}
    rejected = httpx.post(f"{url}/v1/score", json=body, timeout=60)
    assert rejected.status_code == 422
    assert "reference.tests.comparator" in rejected.text
