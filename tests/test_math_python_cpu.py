"""The persistent interpreter of `tool.math_python_persistent` runs nothing between calls (red team 18, F2).

Threads and processes the model's code leaves behind are paused (SIGSTOP) once a call's reply is in and
continued when the next call begins: they run only during calls, on the call's CPU limit (the whole jail's CPU),
and every CPU second the jail uses is billed to a call. Uses the configured sandbox (skipped where it cannot run).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

from proctor.environments.tools import math_python
from proctor.environments.tools.math_python import PythonInterpreter, jail_processes

pytestmark = pytest.mark.usefixtures("backend")

SPIN_THREAD = (
    "import threading\n"
    "def spin():\n"
    "    while True:\n"
    "        sum(range(1000))\n"
    "threading.Thread(target=spin, daemon=True).start()\n"
    "print('started')"
)
SPIN_CHILD = (
    "import subprocess, sys\n"
    "child = subprocess.Popen([sys.executable, '-c', 'while True: pass'])\n"
    "print('spawned')"
)


@pytest.fixture
def interpreter(backend: Any) -> Iterator[PythonInterpreter]:
    # A 1 s nap beside a spinning thread uses up to 1 s of the jail's CPU: the limit must leave it room, or the
    # nap itself runs out of CPU on a quiet machine (a CPU limit of 1 s did, in CI).
    limits = math_python.ENVIRONMENT.limits().model_copy(update={"call_cpu_s": 3.0, "call_wall_s": 10.0})
    interpreter = PythonInterpreter(backend, limits)
    yield interpreter
    interpreter.close()


def idle_cpu_s(interpreter: PythonInterpreter, seconds: float = 1.0) -> float:
    """CPU seconds the jail used over `seconds` of wall time between calls."""
    jail = interpreter.jail
    before = jail.cpu_s()
    time.sleep(seconds)
    return jail.cpu_s() - before


def states(pids: list[int]) -> set[str]:
    found = set()
    for pid in pids:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/stat") as handle:
                found.add(handle.read().rsplit(")", 1)[1].split()[0])
    return found


def needs_cgroup(interpreter: PythonInterpreter) -> None:
    if interpreter.jail.cpu_s() is None:
        pytest.skip("the sandbox has no cgroups: the jail's CPU is not measured")


@pytest.mark.parametrize("code", [SPIN_THREAD, SPIN_CHILD], ids=["thread", "child"])
def test_nothing_runs_between_calls(interpreter: PythonInterpreter, code: str):
    first = interpreter.run(code)
    assert first.status == "ok" and first.content in ("started", "spawned"), first
    needs_cgroup(interpreter)
    pids = jail_processes(interpreter.jail)
    assert len(pids) == (2 if code == SPIN_CHILD else 1)
    assert states(pids) <= {"T", "t"}, "a process of the jail runs after its call returned"
    assert idle_cpu_s(interpreter) < 0.05
    # Continued for the next call (state kept), and paused again after it.
    second = interpreter.run("print(1 + 1)")
    assert (second.status, second.content) == ("ok", "2"), second
    assert idle_cpu_s(interpreter) < 0.05


def billed_nap(interpreter: PythonInterpreter) -> Any:
    """A call that sleeps while what the code left behind spins: all the jail's CPU meanwhile is its bill."""
    before = interpreter.jail.cpu_s()
    napped = interpreter.run("import time\ntime.sleep(1.0)\nprint('napped')")
    used_ms = (interpreter.jail.cpu_s() - before) * 1000
    assert napped.status == "ok" and napped.content == "napped", napped
    assert abs(napped.cpu_ms - used_ms) < 1.0, (napped, used_ms)
    assert napped.cpu_ms >= 50, napped  # it did run during the call (even on a loaded machine)
    return napped


def test_a_background_child_runs_on_the_calls_cpu_limit_and_bill(interpreter: PythonInterpreter):
    assert interpreter.run(SPIN_CHILD).content == "spawned"
    needs_cgroup(interpreter)
    billed_nap(interpreter)
    # A call long enough for the child to pass the call's CPU limit is stopped (the whole jail's CPU counts).
    slept = interpreter.run("import time\ntime.sleep(30)\nprint('slept')")
    assert slept.status == "timeout" and "ran out of time" in slept.content, slept
    assert slept.cpu_ms >= 900, slept
    assert interpreter.jail is None
    fresh = interpreter.run("print('child' in globals())")
    assert fresh.content.splitlines()[-1] == "False" and "fresh interpreter" in fresh.content


def test_a_background_thread_is_billed_to_the_calls_it_runs_in(interpreter: PythonInterpreter):
    assert interpreter.run(SPIN_THREAD).content == "started"
    needs_cgroup(interpreter)
    billed_nap(interpreter)
    assert idle_cpu_s(interpreter, 0.5) < 0.05


def test_state_survives_pauses(interpreter: PythonInterpreter):
    assert interpreter.run("x = 41").status == "ok"
    assert interpreter.run("x += 1").status == "ok"
    assert interpreter.run("x").content == "42"
    assert interpreter.starts == 1


def test_a_jail_that_cannot_be_paused_is_stopped(interpreter: PythonInterpreter, monkeypatch):
    assert interpreter.run("x = 1").status == "ok"
    monkeypatch.setattr(math_python, "pause", lambda jail: False)
    result = interpreter.run(SPIN_THREAD)
    assert result.status == "error" and "could not be paused" in result.content, result
    assert interpreter.jail is None
    monkeypatch.undo()
    fresh = interpreter.run("print('x' in globals())")
    assert fresh.content.splitlines()[-1] == "False" and "fresh interpreter" in fresh.content
