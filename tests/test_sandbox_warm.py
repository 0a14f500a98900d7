"""The warm-start mode for Python: one sandbox per submission, a fork per test, every misbehaviour contained.

Real runs in the default backend (nsjail): the server is the jail's init and the tests are its children.
"""

from __future__ import annotations

import math
import time

import pytest

from proctor.sandboxes import warm_server
from proctor.sandboxes.job import Backend, RunLimits, RunVerdict
from proctor.sandboxes.program import Submission
from proctor.sandboxes.warm import WarmPython

LIMITS = RunLimits(cpu_s=0.5, memory_mb=128, output_bytes=1 << 20)
SUM = "import sys\na, b = map(int, sys.stdin.read().split())\nprint(a + b)\n"
# A program that runs whatever Python its stdin holds: one server, many different misbehaviours.
ANYTHING = "import sys\nexec(compile(sys.stdin.read(), 'test', 'exec'))\n"


@pytest.fixture(scope="module")
def anything(backend: Backend):
    with WarmPython(ANYTHING, limits=LIMITS, backend=backend) as server:
        assert server.start().ok
        yield server


def test_hundred_tests_one_server(backend: Backend) -> None:
    with WarmPython(SUM, limits=LIMITS, backend=backend) as server:
        assert server.start().ok
        results = [server.run(f"{i} {i * i}\n") for i in range(100)]
        assert [r.stdout for r in results] == [f"{i + i * i}\n" for i in range(100)]
        assert all(r.verdict is RunVerdict.ok for r in results)
        assert server.starts == 1
        assert server.tests == 100


def test_large_input_and_output(backend: Backend) -> None:
    program = "import sys\nnumbers = sys.stdin.read().split()\nprint(len(numbers))\nprint('y' * 3_000_000)\n"
    with WarmPython(program, limits=RunLimits(cpu_s=2.0, memory_mb=256), backend=backend) as server:
        result = server.run(" ".join(["12345"] * 1_000_000))  # 6 MB of stdin
        assert result.verdict is RunVerdict.ok, result
        assert result.stdout.splitlines()[0] == "1000000"
        assert len(result.stdout) == len("1000000\n") + 3_000_001


def test_each_test_starts_from_the_loaded_state(anything: WarmPython) -> None:
    code = "import builtins, os\nbuiltins.runs = getattr(builtins, 'runs', 0) + 1\nprint(builtins.runs, os.getpid())"
    outputs = [anything.run(code).stdout.split() for _ in range(5)]
    assert [runs for runs, _ in outputs] == ["1"] * 5  # nothing a test changes reaches the next one
    assert len({pid for _, pid in outputs}) == 5  # a fresh process per test


def test_runs_inside_the_jail(anything: WarmPython, backend: Backend) -> None:
    if backend.name != "nsjail":
        pytest.skip("isolation is the nsjail backend's")
    code = (
        "import os\nprint(os.getcwd(), os.path.exists('/work'), os.path.exists('/root'), os.getuid())\n"
        "print(open('/proc/1/cmdline', 'rb').read().split(b'\\0')[2].decode())"
    )
    result = anything.run(code)
    assert result.stdout.splitlines() == ["/box False False 99999", ".proctor_warm_server.py"]


def test_stdin_stdout_and_exit_status_like_a_fresh_interpreter(anything: WarmPython) -> None:
    result = anything.run("import sys\nprint('out')\nsys.exit(3)")
    assert (result.verdict, result.exit_code, result.stdout) == (RunVerdict.runtime_error, 3, "out\n")
    result = anything.run("import atexit\natexit.register(lambda: print('bye'))\nprint('hi')")
    assert (result.verdict, result.stdout) == (RunVerdict.ok, "hi\nbye\n")
    result = anything.run("import sys\nsys.stderr.write('e' * 3_000_000)\nprint('answer')")
    assert (result.verdict, result.stdout, result.stderr_truncated) == (RunVerdict.ok, "answer\n", True)


MISBEHAVIOUR = {
    "spin": ("while True:\n    pass", RunVerdict.time_limit),
    "sleep": ("import time\ntime.sleep(60)", RunVerdict.time_limit),
    "crash": ("import ctypes\nctypes.string_at(0)", RunVerdict.runtime_error),
    "exception": ("raise ValueError('boom')", RunVerdict.runtime_error),
    "forked spinners": (
        "import os\nfor _ in range(8):\n    if os.fork() == 0:\n        break\nwhile True:\n    pass",
        RunVerdict.time_limit,
    ),
    "memory bomb": ("keep = []\nwhile True:\n    keep.append(bytearray(1 << 24))", RunVerdict.memory_limit),
    "output flood": ("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)", RunVerdict.output_limit),
    "fork bomb": (
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
        RunVerdict.time_limit,
    ),
    "kill the server": (
        "import os, signal\nos.kill(1, signal.SIGKILL)\nos.kill(os.getppid(), signal.SIGKILL)",
        RunVerdict.ok,
    ),
}


@pytest.mark.parametrize("name", list(MISBEHAVIOUR))
def test_misbehaviour_is_contained_and_the_server_keeps_serving(anything: WarmPython, name: str) -> None:
    code, verdict = MISBEHAVIOUR[name]
    if name == "kill the server" and anything.backend.name != "nsjail":
        pytest.skip("only a pid namespace's init is safe from its children's signals")
    started = time.monotonic()
    result = anything.run(code)
    assert result.verdict is verdict, result
    assert time.monotonic() - started < 10
    after = anything.run("print(6 * 7)")
    assert (after.verdict, after.stdout) == (RunVerdict.ok, "42\n")


# A test runs as the server's uid: it tries to take the server's protocol pipes (pidfd_getfd, /proc/<pid>/fd)
# and its memory, and to write garbage down every pipe it got, which would garble the next reply.
STEAL_THE_PIPES = """import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
server = os.getppid()
stolen = []
pidfd = os.pidfd_open(server)
for fd in range(32):
    got = libc.syscall(438, pidfd, fd, 0)  # pidfd_getfd
    if got >= 0:
        stolen.append(got)
    try:
        stolen.append(os.open(f"/proc/{server}/fd/{fd}", os.O_WRONLY))
    except OSError:
        pass
try:
    os.close(os.open(f"/proc/{server}/mem", os.O_RDWR))
    print("mem")
except OSError:
    pass
for fd in stolen:
    try:
        os.write(fd, b"\\x00\\x00\\x00\\x07garbage")
    except OSError:
        pass
print(len(stolen))
"""


def test_a_test_cannot_reach_the_servers_pipes_or_memory(anything: WarmPython) -> None:
    # Before the server made itself non-dumpable this garbled its reply: a sandbox_error (a machinery failure
    # that voids the score) caused by the program.
    result = anything.run(STEAL_THE_PIPES)
    assert (result.verdict, result.stdout) == (RunVerdict.ok, "0\n"), result
    after = anything.run("print(6 * 7)")
    assert (after.verdict, after.stdout) == (RunVerdict.ok, "42\n")


def test_exit_zero_without_output_is_not_a_pass(anything: WarmPython) -> None:
    result = anything.run("import os\nos._exit(0)")
    assert (result.verdict, result.exit_code, result.stdout) == (
        RunVerdict.ok,
        0,
        "",
    )  # the judge compares output


def test_daemon_left_behind_dies_with_the_test(anything: WarmPython) -> None:
    code = (
        "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        "        while True: time.sleep(0.01)\n    os._exit(0)\nprint('parent done')"
    )
    assert anything.run(code).stdout == "parent done\n"
    count = "import os\nprint(sum(1 for p in os.listdir('/proc') if p.isdigit()))"
    # The server (init) and this test's own process: nothing of the earlier test survives.
    if anything.backend.name == "nsjail":
        assert anything.run(count).stdout == "2\n"


def test_syntax_error_is_a_compile_error(backend: Backend) -> None:
    with WarmPython("def f(:\n    pass\n", backend=backend) as server:
        outcome = server.start()
        assert outcome.status == "compile_error"
        assert "SyntaxError" in outcome.message
        result = server.run("")
        assert result.verdict is RunVerdict.runtime_error


def test_python_submissions_are_warm_by_default(backend: Backend) -> None:
    with Submission("python", SUM, limits=LIMITS, backend=backend) as submission:
        assert submission.warm
        assert submission.compile().ok
        assert [
            r.stdout for r in submission.run_many(["1 2", "3 4", "x y", "5 6"], stop_on_failure=True)
        ] == [
            "3\n",
            "7\n",
            "",
        ]


# -- warm exec: compiled programs, one jail, a fork+exec per test --------------------------------------

# What it does depends on its stdin: one compile, many behaviours.
EXEC_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
int main(void) {
    char what[32] = {0};
    if (scanf("%31s", what) != 1) return 2;
    if (!strcmp(what, "parent")) { printf("%d %d\n", (int)getppid(), (int)getpid() > 1); return 0; }
    if (!strcmp(what, "crash")) { volatile int* p = 0; return *p; }
    if (!strcmp(what, "loop")) { for (volatile unsigned long i = 0;; i++) {} }
    if (!strcmp(what, "memory")) {
        for (;;) { char* p = malloc(1 << 20); if (!p) return 3; memset(p, 1, 1 << 20); }
    }
    if (!strcmp(what, "daemon")) { if (fork() == 0) { sleep(30); _exit(0); } puts("left a child"); return 0; }
    if (!strcmp(what, "exit0")) { return 0; }
    long long a, b;
    if (scanf("%lld %lld", &a, &b) != 2) return 4;
    printf("%lld\n", a + b);
    return 0;
}
"""


def test_compiled_programs_run_warm_one_jail_one_compile(backend: Backend) -> None:
    with Submission("c", EXEC_C, limits=LIMITS, backend=backend) as submission:
        assert submission.warm and submission.compile().ok
        stdins = ["add 1 2", "parent", "crash", "add 40 2", "loop", "memory", "daemon", "exit0", "add 5 5"]
        results = submission.run_many(stdins)
        assert submission.compile_runs == 1
        verdicts = [r.verdict for r in results]
        assert verdicts == [
            RunVerdict.ok,
            RunVerdict.ok,
            RunVerdict.runtime_error,
            RunVerdict.ok,
            RunVerdict.time_limit,
            RunVerdict.memory_limit,
            RunVerdict.ok,
            RunVerdict.ok,
            RunVerdict.ok,
        ], [(r.verdict, r.detail) for r in results]
        assert [results[i].stdout for i in (0, 3, 7, 8)] == ["3\n", "42\n", "", "10\n"]
        # The warm server (the jail's init, pid 1) is every test's parent: the same jail for every test.
        assert results[1].stdout == "1 1\n"
        assert results[4].cpu_s > LIMITS.cpu_s
        # The daemon the earlier test left behind was killed: a later test runs alone.
        assert submission.run("daemon").verdict is RunVerdict.ok


def test_compiled_programs_run_cold_when_asked(backend: Backend) -> None:
    with Submission("c", EXEC_C, limits=LIMITS, backend=backend, warm=False) as submission:
        assert not submission.warm and submission.compile().ok
        assert submission.run("parent").stdout == "0 0\n"  # the program is its own jail's init


# -- call mode -----------------------------------------------------------------------------------------

CANDIDATE = """
import os, sys
CALLS = []

def add(a, b):
    CALLS.append(a)
    return a + b, len(CALLS)

def echo(*args, **kwargs):
    return args, kwargs

class Always:
    def __eq__(self, other):
        return True

def forged():
    return Always()

class Sneaky(int):
    def __eq__(self, other):
        return True

def sneaky():
    return Sneaky(3)

def leaves():
    sys.exit(0)

def hard_exit():
    os._exit(0)

def spin():
    while True:
        pass

def shout(n):
    print("x" * n)
    return n

class Solution:
    def twice(self, x):
        return helper(x) * 2

def helper(x):
    return x + 1

def rotate(nums, k):
    nums[:] = nums[-k:] + nums[:-k]

def poly(xs, x):
    return sum(c * x**i for i, c in enumerate(xs))
"""


@pytest.fixture(scope="module")
def calls(backend: Backend):
    with WarmPython(CANDIDATE, mode="call", limits=LIMITS, backend=backend) as server:
        assert server.start().ok
        yield server


def test_hundred_calls(calls: WarmPython) -> None:
    results = [calls.call("add", [i, 1]) for i in range(100)]
    # (a + b, calls so far): each call starts from the module as imported, so the count is always 1.
    assert [r.value for r in results] == [(i + 1, 1) for i in range(100)]
    assert all(r.returned and r.plain and r.result.verdict is RunVerdict.ok for r in results)
    assert calls.starts == 1


def test_plain_data_round_trip(calls: WarmPython) -> None:
    values = [
        None,
        True,
        2**200,
        -(2**60),
        1.5,
        "ü\n",
        b"\x00\xff",
        (1, (2,)),
        [1, [2]],
        {1, 2},
        frozenset({3}),
    ]
    result = calls.call("echo", values, {"k": {"nested": (1, {"a": None})}})
    assert result.plain
    args, kwargs = result.value
    assert list(args) == values
    assert [type(v) for v in args] == [type(v) for v in values]
    assert kwargs == {"k": {"nested": (1, {"a": None})}}
    special = calls.call("echo", [math.inf, -math.inf, math.nan, 1 + 2j]).value[0]
    assert special[:2] == (math.inf, -math.inf) and math.isnan(special[2]) and special[3] == 1 + 2j


def test_in_place_changes_come_back(calls: WarmPython) -> None:
    result = calls.call("rotate", [[1, 2, 3, 4], 1])
    assert (result.value, result.args_after) == (None, [[4, 1, 2, 3], 1])


def test_methods_and_helpers(calls: WarmPython) -> None:
    assert calls.call("twice", [4], method_of="Solution").value == 10
    assert calls.call("helper", [4]).value == 5


def test_values_that_are_not_plain_data_never_compare(calls: WarmPython) -> None:
    for name in ("forged", "sneaky"):
        result = calls.call(name)
        assert result.returned and not result.plain and result.value is None, result
        assert result.result.verdict is RunVerdict.ok
    assert "Sneaky" in calls.call("sneaky").not_plain


@pytest.mark.parametrize("name", ["leaves", "hard_exit"])
def test_exiting_instead_of_returning_is_a_runtime_error(calls: WarmPython, name: str) -> None:
    result = calls.call(name)
    assert not result.returned
    assert result.result.exit_code == 0  # the process said "success"; the judge does not listen
    assert result.result.verdict is RunVerdict.runtime_error


def test_call_limits(calls: WarmPython) -> None:
    hung = calls.call("spin")
    assert (hung.returned, hung.result.verdict) == (False, RunVerdict.time_limit)
    loud = calls.call("shout", [2 << 20])
    assert (loud.returned, loud.result.verdict) == (False, RunVerdict.output_limit)
    assert calls.call("add", [1, 1]).value == (2, 1)
    missing = calls.call("no_such_function")
    assert missing.result.verdict is RunVerdict.runtime_error and "AttributeError" in missing.result.stderr


@pytest.mark.parametrize(
    "source, status, says",
    [
        ("import os\nos._exit(0)\n", "runtime_error", "ended while loading"),
        ("import sys\nsys.exit(0)\n", "runtime_error", "exited while loading"),
        ("raise ImportError('no numpy here')\n", "runtime_error", "no numpy here"),
        ("while True:\n    pass\n", "time_limit", "loading"),
        ("def f(:\n", "compile_error", "SyntaxError"),
    ],
)
def test_load_failures(backend: Backend, source: str, status: str, says: str) -> None:
    load = RunLimits(cpu_s=0.5, memory_mb=128)
    with WarmPython(source, mode="call", load_limits=load, backend=backend) as server:
        outcome = server.start()
        assert outcome.status == status, outcome
        assert says in outcome.message
        assert not server.call("f").returned


# -- assert scripts: the script in its own sandbox, the candidate's functions as proxies ------------------


@pytest.fixture(scope="module")
def scripts(backend: Backend):
    with WarmPython("", limits=LIMITS, backend=backend) as server:
        assert server.start().ok
        yield server


def relay(calls: WarmPython):
    return lambda name, args, kwargs: calls.call(name, args, kwargs)


def test_assert_script_passes_through_proxies(scripts: WarmPython, calls: WarmPython) -> None:
    script = (
        "def check(candidate):\n"
        "    assert candidate(2, 3) == (5, 1)\n"
        "    assert poly([1, 2, 3], 2) == 17\n"
        "    assert type(candidate(1, 1)[0]) is int\n"
        "check(add)\n"
        "print('checked')\n"
    )
    outcome = scripts.run_script(script, ["add", "poly"], relay(calls))
    assert outcome.passed, outcome
    assert (outcome.calls, outcome.result.stdout) == (3, "checked\n")


def test_assert_script_failures(scripts: WarmPython, calls: WarmPython) -> None:
    wrong = scripts.run_script("assert poly([1], 5) == 2\n", ["poly"], relay(calls))
    assert not wrong.passed and wrong.failed_call is None
    assert wrong.result.verdict is RunVerdict.runtime_error and "AssertionError" in wrong.result.stderr
    # A forged __eq__ never reaches the script: the proxy raises instead of returning the object.
    forged = scripts.run_script("assert forged() == 42\n", ["forged"], relay(calls))
    assert not forged.passed and forged.failed_name == "forged"
    assert "CandidateFailed" in forged.result.stderr
    # Swallowing the failure in the script does not help: the failed call is on record.
    code = "try:\n    spin()\nexcept Exception:\n    pass\n"
    swallowed = scripts.run_script(code, ["spin"], relay(calls))
    assert swallowed.result.verdict is RunVerdict.ok and not swallowed.passed
    assert swallowed.failed_call is not None and swallowed.failed_call.result.verdict is RunVerdict.time_limit
    # The script's own limits still hold.
    stuck = scripts.run_script("while True:\n    pass\n", [], relay(calls))
    assert stuck.result.verdict is RunVerdict.time_limit


def test_a_program_that_keeps_taking_its_server_down_is_reloaded_a_bounded_number_of_times(
    backend: Backend,
) -> None:
    # Imported into the server, the program replaces the server's own test loop with an exit: every call
    # kills the server, and each reload imports the program again (up to its load limit each time).
    source = "import __main__, os\n__main__.run_test = lambda state, request: os._exit(1)\ndef f():\n    return 1\n"
    with WarmPython(source, mode="call", limits=LIMITS, backend=backend, max_restarts=2) as server:
        assert server.start().ok
        results = [server.call("f") for _ in range(6)]
    assert all(r.result.verdict is RunVerdict.runtime_error and not r.returned for r in results)
    assert server.starts == 3
    assert "took its sandbox down 3 times" in results[-1].result.stderr


def test_a_script_sees_only_the_names_it_is_given_and_its_setup(
    scripts: WarmPython, calls: WarmPython
) -> None:
    # `poly` is the candidate's too, but only `add` is bound: the script's `poly` is the setup's, and `abs`
    # stays the builtin even though a proxy could have been named so.
    setup = "def poly(xs, x):\n    return -1\n"
    text = "assert poly([1], 2) == -1\nassert abs(-2) == 2\nassert add(1, 1) == (2, 1)\n"
    outcome = scripts.run_script(text, ["add"], relay(calls), setup=setup)
    assert outcome.passed and outcome.calls == 1, outcome
    # A name nothing defines ends the script with MISSING_NAME and a last line naming it; an
    # UnboundLocalError is the script's own flow, an ordinary failure.
    missing = scripts.run_script("assert poly([1], 2) == 1\n", ["add"], relay(calls))
    assert missing.result.exit_code == warm_server.MISSING_NAME
    assert missing.result.stderr.rstrip().endswith("proctor: the test script's name 'poly' is not defined")
    local = scripts.run_script(
        "def f():\n    if False:\n        y = 1\n    return y\nf()\n", [], relay(calls)
    )
    assert local.result.verdict is RunVerdict.runtime_error and local.result.exit_code == 1
