"""The code verifier's wall budget per submission: a program that sleeps or blocks under each test's wall
backstop must end as status ok with its 0 (or its fraction), never push the item past the pool's deadline into
a masked `timeout`. Small CPU limits (0.5 s: a 2 s backstop per test) and a small deadline (6 s: a 4.8 s
budget) keep each case short; before the budget, each of these ran 16 x 1.5 s = 24 s."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from proctor.contract import Status, Verdict
from proctor.sandboxes import warm_server
from proctor.sandboxes.backends.runner import add_cpu_wait_s, cpu_waits
from proctor.verifiers.code import verifier
from proctor.worker_pool import WorkerPool

SPEC = verifier.SPEC
DEADLINE_S = 6.0
CPU_S = 0.5
N = 16

# Ways to wait 1.5 s without using CPU: each is under the 2 s backstop of a 0.5 s CPU limit.
WAITS = {
    "sleep": "import time\ntime.sleep(1.5)\n",
    "select": "import os, select\nr, w = os.pipe()\nselect.select([r], [], [], 1.5)\n",
    "futex": "import threading\nthreading.Event().wait(1.5)\n",
    # A pipe that a child fills after 1.5 s: the program blocks in read().
    "pipe": (
        "import os, time\nr, w = os.pipe()\nif os.fork() == 0:\n    time.sleep(1.5)\n    os.write(w, b'x')\n"
        "    os._exit(0)\nos.read(r, 1)\n"
    ),
    "pause": "import signal\nsignal.signal(signal.SIGALRM, lambda *a: None)\nsignal.setitimer(signal.ITIMER_REAL, 1.5)\n"
    "signal.pause()\n",
}
READ_N = "n = int(input())\n"


def stdio_reference(language: str = "python") -> dict:
    cases = [{"stdin": f"{i}\n", "stdout": f"{2 * i}\n"} for i in range(N)]
    return {"language": language, "tests": {"format": "stdio", "cases": cases}, "limits": {"cpu_s": CPU_S}}


def score(code: str, reference: dict, reward: str, language: str = "python") -> tuple[Verdict, float]:
    response = f"```{language}\n{code}\n```"
    options = SPEC.parse_options({"reward": reward, "deadline_s": DEADLINE_S})
    started = time.monotonic()
    result = SPEC.score(response, SPEC.parse_reference(reference), options)
    return result, time.monotonic() - started


def assert_within_deadline(result: Verdict, elapsed: float) -> None:
    assert result.status is Status.ok, result
    assert elapsed < DEADLINE_S, (elapsed, result.details)


def test_the_red_team_case_through_the_pool_is_ok_and_zero():
    """The reported shape: 16 wrong answers, each after a sleep under the backstop, under `fraction`, scored
    in the verifier pool with its deadline: status ok, reward 0 (it was `timeout / deadline_exceeded`)."""
    reference = SPEC.parse_reference(stdio_reference())
    options = SPEC.parse_options({"reward": "fraction", "deadline_s": DEADLINE_S})
    response = "```python\nimport time\ntime.sleep(1.5)\nprint(-1)\n```"
    with WorkerPool(1, memory_mb=2048, queue_size=2) as pool:
        result = pool.submit("code", (response, reference, options), DEADLINE_S).result(timeout=60)
    assert result.status is Status.ok, result
    assert (result.reward, result.reason) == (0.0, "wrong_answer"), result.details
    # Slow failures count toward MAX_TIME_LIMITS: it stops after three of them.
    assert result.details["tests_run"] == verifier.MAX_TIME_LIMITS


@pytest.mark.parametrize("wait", sorted(WAITS))
def test_waiting_wrong_answers_stop_early_under_fraction(wait: str):
    result, elapsed = score(WAITS[wait] + READ_N + "print(-1)\n", stdio_reference(), "fraction")
    assert_within_deadline(result, elapsed)
    assert (result.reward, result.reason) == (0.0, "wrong_answer"), result.details
    assert result.details["tests_run"] == verifier.MAX_TIME_LIMITS, result.details


def test_slow_passes_then_a_failure_under_all_pass_is_zero_not_a_timeout():
    code = WAITS["sleep"] + READ_N + "print(-1 if n == 15 else 2 * n)\n"
    result, elapsed = score(code, stdio_reference(), "all_pass")
    assert_within_deadline(result, elapsed)
    assert (result.reward, result.reason) == (0.0, "time_limit"), result.details
    assert result.details["budget"]["spent"] is True
    assert 0 < result.details["tests_run"] < N
    # The tests before the budget ran out passed; the one it cut short (if any) is the time limit.
    assert all(t["verdict"] == "passed" for t in result.details["tests"][:-1])


@pytest.mark.parametrize("wait", ["sleep", "pipe"])
def test_slow_correct_program_under_fraction_gets_what_ran_in_the_budget(wait: str):
    result, elapsed = score(WAITS[wait] + READ_N + "print(2 * n)\n", stdio_reference(), "fraction")
    assert_within_deadline(result, elapsed)
    assert result.reason == "time_limit", result.details
    assert 0 < result.reward < 1
    passed = sum(t["verdict"] == "passed" for t in result.details["tests"])
    assert result.reward == passed / N and passed >= result.details["tests_run"] - 1


def test_sleeping_c_program():
    code = (
        "#include <stdio.h>\n#include <unistd.h>\n"
        'int main(){int n; scanf("%d", &n); usleep(1500000); printf("%d\\n", -1); return 0;}\n'
    )
    result, elapsed = score(code, stdio_reference("c"), "fraction", language="c")
    assert_within_deadline(result, elapsed)
    assert (result.reward, result.reason) == (0.0, "wrong_answer"), result.details


CALL = {
    "language": "python",
    "tests": {
        "format": "call",
        "entry_point": "double",
        "cases": [{"args": [i], "expected": 2 * i} for i in range(N)],
    },
    "limits": {"cpu_s": CPU_S},
}
SCRIPT = {
    "language": "python",
    "tests": {
        "format": "assert_script",
        "entry_point": "double",
        "script": f"def check(candidate):\n    for i in range({N}):\n        assert candidate(i) == 2 * i\n",
    },
    "limits": {"cpu_s": CPU_S},
}
SLEEPY_DOUBLE = "import time\ndef double(x):\n    time.sleep(1.5)\n    return {}\n"


@pytest.mark.parametrize("reward", ["fraction", "all_pass"])
def test_sleeping_calls(reward: str):
    result, elapsed = score(SLEEPY_DOUBLE.format("2 * x"), CALL, reward)
    assert_within_deadline(result, elapsed)
    assert result.reason == "time_limit" and result.reward < 1, result.details
    wrong, elapsed = score(SLEEPY_DOUBLE.format("-1"), CALL, "fraction")
    assert_within_deadline(wrong, elapsed)
    assert (wrong.reward, wrong.reason, wrong.details["tests_run"]) == (0.0, "wrong_answer", 3)


def test_assert_script_with_a_sleeping_candidate():
    """Each call into the candidate may sleep under its backstop while the script's own clock is paused: the
    budget ends the script (the call it refuses is a time limit)."""
    result, elapsed = score(SLEEPY_DOUBLE.format("2 * x"), SCRIPT, "all_pass")
    assert_within_deadline(result, elapsed)
    assert (result.reward, result.reason) == (0.0, "time_limit"), result.details
    assert result.details["budget"]["spent"] is True


def test_a_fast_correct_program_is_untouched():
    result, _ = score(READ_N + "print(2 * n)\n", stdio_reference(), "all_pass")
    assert (result.status, result.reward, result.reason) == (Status.ok, 1.0, None), result.details
    assert result.details["budget"]["spent"] is False
    called, _ = score("def double(x):\n    return 2 * x\n", SCRIPT, "all_pass")
    assert (called.status, called.reward) == (Status.ok, 1.0), called.details


def test_waiting_for_a_cpu_does_not_spend_the_budget():
    """Machine load (time a program waited for a CPU, from /proc schedstat) is discounted, so overload never
    turns into a 0; but a program's own threads waiting on each other burn CPU, and that is not discounted."""
    budget = verifier.Budget(0.2)
    began = budget.begin()
    time.sleep(0.3)
    add_cpu_wait_s(0.3)  # the whole run was spent waiting for a CPU
    budget.charge(began, cpu_s=0.0)
    assert not budget.spent() and budget.used_s() < 0.1
    budget = verifier.Budget(0.2)
    began = budget.begin()
    time.sleep(0.3)
    add_cpu_wait_s(0.3)  # ... while its own threads kept every core busy
    budget.charge(began, cpu_s=0.3 * verifier.CORES)
    assert budget.spent()
    assert budget.limits(verifier.RunLimits(cpu_s=1.0)).wall_backstop_s == verifier.MIN_WALL_S


SPIN = "import os, sys, time\n{lower}\nend = time.monotonic() + 5\nwhile time.monotonic() < end:\n    pass\n"


def test_a_program_that_lowers_its_own_priority_gets_no_discount_for_waiting():
    """A program may lower its own priority (nice, SCHED_IDLE: the seccomp policy allows it); on a busy machine
    it then waits for a CPU as long as it likes. That wait is its own choice: neither the host's measure
    (runner.cpu_waits, which the wall backstops and this budget discount) nor the warm server's counts it."""
    cpu = {min(os.sched_getaffinity(0))}
    lowered = {
        "nice": "os.nice(19)",
        "idle": "os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))",
    }
    programs = {"normal": "", **lowered}
    procs = {
        name: subprocess.Popen([sys.executable, "-c", SPIN.format(lower=code)])
        for name, code in programs.items()
    }
    try:
        for proc in procs.values():
            os.sched_setaffinity(proc.pid, cpu)  # all on one CPU: the lowered ones wait behind the normal one
        raw: dict[str, float] = {}
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline:  # until the lowered ones have waited a long time (how long varies)
            time.sleep(0.2)
            for name, proc in procs.items():
                with open(f"/proc/{proc.pid}/schedstat") as handle:
                    raw[name] = int(handle.read().split()[1]) / 1e9
            if all(raw[name] > 0.1 for name in lowered):
                break
        assert all(raw[name] > 0.1 for name in lowered), raw  # they did wait, for a long time
        found = cpu_waits([proc.pid for proc in procs.values()])
        assert set(found) == {procs["normal"].pid}, (found, raw)
        assert all(warm_server.waited_for_cpu(procs[name].pid) == 0.0 for name in lowered)
        assert warm_server.waited_for_cpu(procs["normal"].pid) >= 0.0
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()
