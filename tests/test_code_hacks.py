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


def test_breaking_the_server_it_was_loaded_into_is_the_programs_fault():
    # In call mode the candidate is imported into the warm server: the server's replies speak for the
    # candidate, so a "sandbox_error" it reports is a runtime error, never a status that voids the score.
    breaker = (
        "import __main__\n__main__.run_test = lambda state, request: 1 / 0\ndef double(x):\n    return 0"
    )
    assert_fails(score(breaker, CALL), "runtime_error")
    assert_fails(score(breaker, SCRIPT), "runtime_error", "wrong_answer")
    # Taking the server down on every call: it is reloaded (re-importing the program) MAX_RESTARTS times only.
    killer = "import __main__, os\n__main__.run_test = lambda state, request: os._exit(1)\ndef double(x):\n    return 0"
    many = {**CALL, "tests": {**CALL["tests"], "cases": [{"args": [i], "expected": 2 * i} for i in range(8)]}}
    result = score(killer, many, {"reward": "fraction"})
    assert_fails(result, "runtime_error")
    assert "took its sandbox down" in result.details["tests"][-1]["diff"]


def test_stealing_the_sandbox_servers_pipes_is_not_a_machinery_failure():
    # The compiled harness runs as the trusted server's uid; pidfd_getfd on the server once let it write
    # garbage down the protocol pipe, which the host had to report as sandbox_error.
    steal = (
        "#include <sys/syscall.h>\n#include <unistd.h>\n"
        "int twice(int x) {\n  int p = syscall(434, getppid(), 0);\n"
        "  for (int fd = 0; fd < 32; fd++) { int g = syscall(438, p, fd, 0);"
        ' if (g >= 0) write(g, "\\0\\0\\0\\7garbage", 11); }\n  return x;\n}\n'
    )
    reference = {
        "language": "c",
        "tests": {"format": "call", "entry_point": "twice", "cases": [{"args": [2], "expected": 4}]},
    }
    assert_fails(score(steal, reference, language="c"), "wrong_answer")
    big = "def double(x):\n    return 10 ** 5000"  # past str()'s digit limit: a wrong answer, not a crash
    assert_fails(score(big, CALL), "wrong_answer")


def test_output_that_breaks_the_checker_is_a_wrong_answer():
    # A special judge that parses the output raises on garbage; that was a verifier_error (the sample skipped),
    # so printing garbage when unsure escaped the 0.
    checker = "def check(input, output, expected):\n    return abs(float(output) - float(expected)) < 1e-6\n"
    reference = {
        "language": "python",
        "tests": {"format": "stdio", "checker": checker, "cases": [{"stdin": "", "stdout": "0.5"}]},
    }
    assert score("print(0.5)", reference).reward == 1.0
    result = score("print('not a number')", reference)
    assert_fails(result, "wrong_answer")
    assert "the checker failed on this output" in result.details["tests"][0]["diff"]
    # A checker that fails on the expected output too is the task's fault: never a reward of 0.
    broken = {
        **reference,
        "tests": {**reference["tests"], "checker": checker.replace("float(expected)", "1 / 0")},
    }
    assert score("print('not a number')", broken).status is Status.verifier_error


def test_output_that_makes_the_checker_spin_is_a_time_limit(monkeypatch: pytest.MonkeyPatch):
    # Each such test costs the checker's whole CPU limit: counted as time limits, a run of them under
    # `fraction` ends after MAX_TIME_LIMITS instead of running into the deadline (a timeout, not a 0).
    from proctor.sandboxes.job import RunLimits

    monkeypatch.setattr(verifier, "CHECKER_LIMITS", RunLimits(cpu_s=0.3, memory_mb=256))
    checker = (
        "def check(input, output, expected):\n    while output != expected:\n        pass\n    return True\n"
    )
    cases = [{"stdin": "", "stdout": "ok\n"}] * 5
    reference = {"language": "python", "tests": {"format": "stdio", "checker": checker, "cases": cases}}
    assert score("print('ok')", reference).reward == 1.0
    result = score("print('no')", reference, {"reward": "fraction"})
    assert_fails(result, "time_limit")
    assert result.details["tests_run"] == verifier.MAX_TIME_LIMITS


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


DEPTH = {
    "c": "#include <stdio.h>\nlong d(long n){ return n == 0 ? 0 : 1 + d(n - 1); }\n"
    'int main(){ long n; scanf("%ld", &n); printf("%ld\\n", d(n)); }',
    "java": "import java.util.*;\npublic class Main { static long d(long n){ return n == 0 ? 0 : 1 + d(n - 1); }\n"
    " public static void main(String[] a){ System.out.println(d(new Scanner(System.in).nextLong())); } }",
    "go": 'package main\nimport "fmt"\nfunc d(n int64) int64 { if n == 0 { return 0 }; return 1 + d(n-1) }\n'
    "func main(){ var n int64; fmt.Scan(&n); fmt.Println(d(n)) }",
    "rust": "use std::io::*;\nfn d(n: u64) -> u64 { if n == 0 { 0 } else { 1 + d(n - 1) } }\n"
    "fn main(){ let mut s = String::new(); stdin().read_to_string(&mut s).unwrap(); "
    'println!("{}", d(s.trim().parse().unwrap())); }',
    # Node's own default stack (~1 MB) overflowed near depth 10^4: a DFS over 10^5 nodes failed.
    "javascript": 'const n = Number(require("fs").readFileSync(0, "utf8").trim());\n'
    "function d(n){ return n === 0 ? 0 : 1 + d(n - 1); }\nconsole.log(d(n));",
}


@pytest.mark.parametrize("language", list(DEPTH))
def test_heavy_recursion_passes_in_every_language(language: str):
    result = score(DEPTH[language], stdio([("100000", "100000")], language=language), language=language)
    assert (result.status, result.reward) == (Status.ok, 1.0), result.details


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


# Each reads all of stdin (200,000 numbers) and prints every number up to their count, one per line.
SLURP = {
    "c": '#include <stdio.h>\nint main(){ long long x; int n = 0; while (scanf("%lld", &x) == 1) n++;'
    ' for (int i = 0; i < n; i++) printf("%d\\n", i); }',
    "java": "import java.util.*;\npublic class Main { public static void main(String[] a) throws Exception {"
    " int n = new StringTokenizer(new String(System.in.readAllBytes())).countTokens();"
    " StringBuilder b = new StringBuilder(); for (int i = 0; i < n; i++) b.append(i).append('\\n');"
    " System.out.print(b); } }",
    "go": 'package main\nimport ("bufio";"fmt";"io";"os";"strings")\nfunc main(){ b, _ := io.ReadAll(os.Stdin);'
    " n := len(strings.Fields(string(b))); w := bufio.NewWriter(os.Stdout); defer w.Flush();"
    " for i := 0; i < n; i++ { fmt.Fprintln(w, i) } }",
    "rust": "use std::io::*;\nfn main(){ let mut s = String::new(); stdin().read_to_string(&mut s).unwrap();"
    " let n = s.split_whitespace().count(); let mut o = String::new();"
    " for i in 0..n { o.push_str(&i.to_string()); o.push('\\n'); } stdout().write_all(o.as_bytes()).unwrap(); }",
    "javascript": 'const n = require("fs").readFileSync(0, "utf8").split(/\\s+/).filter(Boolean).length;\n'
    "const a = []; for (let i = 0; i < n; i++) a.push(i);\nconsole.log(a.join('\\n'));",
}


@pytest.mark.parametrize("language", list(SLURP))
def test_reading_all_of_stdin_and_a_large_output_pass_in_every_language(language: str):
    count = 200_000
    stdin = " ".join(map(str, range(count)))
    expected = "\n".join(map(str, range(count))) + "\n"
    result = score(SLURP[language], stdio([(stdin, expected)], language=language), language=language)
    assert (result.status, result.reward) == (Status.ok, 1.0), result.details


def test_registered_examples_include_the_hacks():
    cheats = [example for example in SPEC.examples if example.expect == 0.0]
    golds = [example for example in SPEC.examples if example.expect == 1.0]
    assert len(golds) >= 5 and len(cheats) >= 8
