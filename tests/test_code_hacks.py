"""Reward hacking and abuse against the `code` verifier: every hack from issue 5 gets its verdict (reward 0,
status ok, the stated reason), and benign-but-tricky programs still pass. Real nsjail sandboxes throughout."""

from __future__ import annotations

import pytest

from proctor.contract import Status, Verdict
from proctor.verifiers.code import verifier

SPEC = verifier.SPEC
SECRET = "7395817263"  # the expected output; nothing the candidate can reach holds it


def score(code: str, reference: dict, options: dict | None = None, language: str = "python") -> Verdict:
    response = f"```{language}\n{code}\n```"
    return SPEC.score(response, SPEC.parse_reference(reference), SPEC.parse_options(options or {}))


def stdio(cases: list[tuple[str, str]], language: str = "python", **limits) -> dict:
    reference = {
        "language": language,
        "tests": {"format": "stdio", "cases": [{"stdin": i, "stdout": o} for i, o in cases]},
    }
    if limits:
        reference["limits"] = limits
    return reference


CALL = {
    "language": "python",
    "tests": {
        "format": "call",
        "entry_point": "double",
        "cases": [{"args": [2], "expected": 4}, {"args": [21], "expected": 42}],
    },
}
SCRIPT = {
    "language": "python",
    "tests": {
        "format": "assert_script",
        "entry_point": "double",
        "script": "def check(candidate):\n    assert candidate(2) == 4\n    assert candidate(21) == 42\n",
    },
}
DOUBLE_STDIO = stdio([("2", "4"), ("21", "42")])


def assert_fails(result: Verdict, *reasons: str) -> None:
    assert result.status is Status.ok, result
    assert (result.reward, result.correct) == (0.0, False), result.details
    assert result.reason in reasons, (result.reason, result.details)


@pytest.mark.parametrize(
    ("reference", "reason"),
    [(CALL, "runtime_error"), (SCRIPT, "runtime_error"), (DOUBLE_STDIO, "wrong_answer")],
)
def test_os_exit_at_import(reference: dict, reason: str):
    assert_fails(score("import os\nos._exit(0)\ndef double(x):\n    return 2 * x", reference), reason)


@pytest.mark.parametrize("reference", [CALL, SCRIPT])
def test_sys_exit_inside_the_function(reference: dict):
    assert_fails(score("import sys\ndef double(x):\n    sys.exit(0)", reference), "runtime_error")


def test_atexit_forcing_status_zero():
    hook = "import atexit, os\natexit.register(lambda: os._exit(0))\n"
    assert_fails(score(hook + "def double(x):\n    raise RuntimeError", CALL), "runtime_error")
    assert_fails(score(hook + "def double(x):\n    raise RuntimeError", SCRIPT), "runtime_error")
    assert_fails(score(hook + "print('ok')\nraise SystemExit(3)", DOUBLE_STDIO), "wrong_answer")


FORGED_EQ = "class Anything:\n    def __eq__(self, other):\n        return True\n    __hash__ = None\n"
INT_SUBCLASS = (
    "class Int(int):\n    def __eq__(self, other):\n        return True\n    __hash__ = int.__hash__\n"
)


@pytest.mark.parametrize("reference", [CALL, SCRIPT])
def test_forged_eq(reference: dict):
    result = score(FORGED_EQ + "def double(x):\n    return Anything()", reference)
    assert_fails(result, "wrong_answer")
    assert "not plain data" in result.details["tests"][0]["diff"]


@pytest.mark.parametrize("reference", [CALL, SCRIPT])
def test_int_subclass_with_forged_eq(reference: dict):
    assert_fails(score(INT_SUBCLASS + "def double(x):\n    return Int(0)", reference), "wrong_answer")


def test_forged_eq_nested_in_a_list():
    reference = {
        "language": "python",
        "tests": {"format": "call", "entry_point": "f", "cases": [{"args": [], "expected": [1, 2]}]},
    }
    assert_fails(score(FORGED_EQ + "def f():\n    return [1, Anything()]", reference), "wrong_answer")


SNOOP = f'''
import os
found = []
for value in os.environ.values():
    if "{SECRET[:4]}" in value:
        found.append(value)
for root in [".", "/", "/tmp", "/box", "/proc/1", os.path.expanduser("~")]:
    for directory, dirs, files in os.walk(root):
        if directory.startswith(("/proc", "/sys", "/dev", "/usr", "/lib")) and directory != "/proc/1":
            dirs[:] = []
            continue
        for name in files:
            try:
                with open(os.path.join(directory, name), errors="ignore") as handle:
                    text = handle.read(1 << 20)
            except Exception:
                continue
            if "{SECRET[:4]}" in text:
                found.append(text.strip())
'''


def test_reading_tests_or_expected_output_from_disk_or_environment():
    stdio_ref = stdio([("", SECRET)], cpu_s=10)
    assert_fails(
        score(SNOOP + "print(found[0] if found else 'nothing')", stdio_ref), "wrong_answer", "time_limit"
    )
    call_ref = {
        "language": "python",
        "limits": {"cpu_s": 10},
        "tests": {"format": "call", "entry_point": "f", "cases": [{"args": [], "expected": SECRET}]},
    }
    assert_fails(
        score(SNOOP + "def f():\n    return found[0] if found else 'nothing'", call_ref),
        "wrong_answer",
        "time_limit",
    )


def test_printing_the_expected_output_of_a_visible_example():
    reference = stdio([("2", "4"), ("21", "42"), ("50", "100")])
    assert_fails(score("print(4)", reference), "wrong_answer")
    partial = score("print(4)", reference, {"reward": "fraction"})
    assert (partial.reward, partial.correct) == (pytest.approx(1 / 3), False)


def test_monkeypatching_builtins():
    # The script's own sandbox never sees the candidate's patches, so its asserts still fail.
    gentle = "import builtins\nbuiltins.AssertionError = SystemExit\n"
    assert_fails(score(gentle + "def double(x):\n    return 0", SCRIPT), "wrong_answer")
    assert_fails(score(gentle + "def double(x):\n    return 0", CALL), "wrong_answer")
    # Patches that break the interpreter itself end the candidate's own sandbox: still never a pass.
    rough = "import builtins\nbuiltins.isinstance = lambda *a: True\nbuiltins.print = lambda *a, **k: None\n"
    assert_fails(score(rough + "def double(x):\n    return 0", SCRIPT), "wrong_answer", "runtime_error")
    assert_fails(score(rough + "def double(x):\n    return 0", CALL), "wrong_answer", "runtime_error")
    equal = "import operator\noperator.eq = lambda a, b: True\nint.__eq__ = lambda a, b: True\n"
    assert_fails(score(equal + "def double(x):\n    return 0", CALL), "wrong_answer", "runtime_error")


def test_infinite_loops():
    assert_fails(score("while True:\n    pass", stdio([("2", "4")], cpu_s=0.5)), "time_limit")
    reference = {**CALL, "limits": {"cpu_s": 0.5}}
    assert_fails(score("def double(x):\n    while True:\n        pass", reference), "time_limit")
    loop = "int main(){ volatile long x = 0; for (;;) x++; }"
    assert_fails(score(loop, stdio([("2", "4")], language="c", cpu_s=0.5), language="c"), "time_limit")
    sleeper = "import time\ntime.sleep(60)"
    assert_fails(score(sleeper, stdio([("2", "4")], cpu_s=0.5)), "time_limit")


def test_huge_outputs():
    assert_fails(
        score("import sys\nwhile True:\n    sys.stdout.write('4' * 65536)", DOUBLE_STDIO), "output_limit"
    )
    flood = 'int main(){ for(;;) fputs("4444444444444444\\n", stdout); }'
    code = "#include <stdio.h>\n" + flood
    assert_fails(score(code, stdio([("2", "4")], language="c"), language="c"), "output_limit")
    big_value = "def double(x):\n    return 'x' * (64 * 1024 * 1024)"
    assert_fails(score(big_value, CALL), "output_limit")


def test_fork_bomb():
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    assert_fails(score(bomb, stdio([("2", "4")], cpu_s=1)), "runtime_error", "time_limit", "memory_limit")
    c_bomb = "#include <unistd.h>\nint main(){ for(;;) fork(); }"
    result = score(c_bomb, stdio([("2", "4")], language="c", cpu_s=1), language="c")
    assert_fails(result, "runtime_error", "time_limit", "memory_limit")


def test_memory_bombs():
    grow = "chunks = []\nwhile True:\n    chunks.append(bytearray(16 * 1024 * 1024))"
    assert_fails(score(grow, stdio([("2", "4")], memory_mb=256)), "memory_limit")
    reference = {**CALL, "limits": {"memory_mb": 256}}
    hog = (
        "def double(x):\n    chunks = []\n    while True:\n        chunks.append(bytearray(16 * 1024 * 1024))"
    )
    assert_fails(score(hog, reference), "memory_limit")


# -- benign but tricky: must pass ------------------------------------------------------------------------


def test_heavy_recursion_passes():
    python = (
        "import sys\nsys.setrecursionlimit(1_000_000)\n"
        "def depth(n):\n    return 0 if n == 0 else 1 + depth(n - 1)\n"
        "print(depth(int(input())))"
    )
    assert score(python, stdio([("200000", "200000")])).reward == 1.0
    cpp = (
        "#include <cstdio>\nlong depth(long n){ return n == 0 ? 0 : 1 + depth(n - 1); }\n"
        'int main(){ long n; scanf("%ld", &n); printf("%ld\\n", depth(n)); }'
    )
    result = score(cpp, stdio([("1000000", "1000000")], language="cpp"), language="cpp")
    assert result.reward == 1.0, result.details


def test_large_correct_output_passes():
    n = 300_000
    expected = "\n".join(str(i) for i in range(n)) + "\n"
    result = score("print('\\n'.join(map(str, range(int(input())))))", stdio([(str(n), expected)]))
    assert result.reward == 1.0, result.details


def test_reading_all_of_stdin_at_once_passes():
    numbers = list(range(200_000))
    stdin = " ".join(map(str, numbers))
    expected = str(sum(numbers))
    python = "import sys\nprint(sum(map(int, sys.stdin.buffer.read().split())))"
    assert score(python, stdio([(stdin, expected)])).reward == 1.0
    cpp = (
        "#include <iostream>\n#include <iterator>\n#include <sstream>\n#include <string>\n"
        "int main(){ std::string all((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());"
        " std::istringstream in(all); long long x, s = 0; while (in >> x) s += x; std::cout << s << '\\n'; }"
    )
    assert score(cpp, stdio([(stdin, expected)], language="cpp"), language="cpp").reward == 1.0


def test_registered_examples_include_the_hacks():
    cheats = [example for example in SPEC.examples if example.expect == 0.0]
    golds = [example for example in SPEC.examples if example.expect == 1.0]
    assert len(golds) >= 5 and len(cheats) >= 8
