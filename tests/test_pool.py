"""The killable worker pool: deadlines, crashes, memory caps and replacement, with real worker processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from concurrent.futures import wait

import pytest

from proctor.capacity import PoolClosed, PoolFull
from proctor.contract import Status
from proctor.worker_pool import WorkerPool

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module", autouse=True)
def _plugins():
    """Workers inherit the environment, so PROCTOR_PLUGINS registers the misbehaving test verifier there."""
    old = os.environ.get("PROCTOR_PLUGINS")
    os.environ["PROCTOR_PLUGINS"] = "tests.plugins.slow"
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    yield
    if old is None:
        os.environ.pop("PROCTOR_PLUGINS", None)
    else:
        os.environ["PROCTOR_PLUGINS"] = old


@pytest.fixture
def pool():
    with WorkerPool(2, memory_mb=1024, queue_size=8) as p:
        yield p


def wait_until_busy(pool: WorkerPool, busy: int = 1) -> None:
    """Wait (bounded) until `busy` workers are running an item, i.e. it has left the queue."""
    deadline = time.monotonic() + 30
    while pool.stats()["busy"] < busy:
        assert time.monotonic() < deadline, f"no worker took the item: {pool.stats()}"
        time.sleep(0.02)


def run(pool: WorkerPool, response: str, deadline: float = 1.0):
    return pool.submit("test.misbehave", (response, "ok", None), deadline).result(timeout=30)


def test_scores_in_a_worker_process(pool):
    verdict = run(pool, "pid")
    assert verdict.status is Status.ok
    assert verdict.details["pid"] != os.getpid()
    assert run(pool, "ok").reward == 1.0
    assert run(pool, "nope").reward == 0.0


def worker_pids(pool: WorkerPool) -> set[int]:
    """The pids of the pool's live workers, once every slot has one (bounded wait)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if pool.stats()["alive"] == pool.workers:
            return {slot.process.pid for slot in pool.slots if slot.process is not None}
        time.sleep(0.05)
    raise AssertionError(f"pool did not recover: {pool.stats()}")


@pytest.mark.parametrize("response", ["sleep", "spin"])
def test_overrun_is_a_timeout_and_the_worker_is_replaced(pool, response):
    before = worker_pids(pool)
    started = time.monotonic()
    verdict = run(pool, response, deadline=0.5)
    elapsed = time.monotonic() - started
    assert verdict.status is Status.timeout
    assert verdict.reason == "deadline_exceeded"
    # A hang guard, not a timing check: the item sleeps or spins for 60 s, and killing at the deadline ends
    # it long before that even on a loaded machine.
    assert elapsed < 30.0
    after = worker_pids(pool)
    assert len(after - before) == 1, "exactly the killed worker is replaced by a new process"
    assert run(pool, "ok").reward == 1.0
    assert pool.stats()["timeouts"] == 1


def test_crash_raise_and_memory_are_verifier_errors_not_zero_rewards(pool):
    crash = run(pool, "crash")
    assert (crash.status, crash.reason, crash.details["exitcode"]) == (
        Status.verifier_error,
        "worker_crashed",
        3,
    )
    raised = run(pool, "raise")
    assert (raised.status, raised.reason) == (Status.verifier_error, "verifier_exception")
    assert "ValueError: verifier bug" in raised.details["error"]
    memory = run(pool, "memory")
    assert (memory.status, memory.reason) == (Status.verifier_error, "worker_memory_limit")
    assert run(pool, "ok").reward == 1.0  # the pool keeps serving after each failure


def test_other_items_keep_being_served_while_one_hangs(pool):
    hanging = pool.submit("test.misbehave", ("sleep", "ok", None), 3.0)
    quick = [pool.submit("test.misbehave", ("ok", "ok", None), 1.0) for _ in range(5)]
    done, _ = wait(quick, timeout=10)
    assert len(done) == 5 and all(f.result().reward == 1.0 for f in quick)
    assert not hanging.done()
    assert hanging.result(timeout=10).status is Status.timeout


def test_full_queue_raises_pool_full():
    with WorkerPool(1, memory_mb=1024, queue_size=1) as small:
        busy = small.submit("test.misbehave", ("sleep", "ok", None), 5.0)
        wait_until_busy(small)  # the only worker has taken the sleeping item off the queue
        queued = small.submit("test.misbehave", ("ok", "ok", None), 1.0)
        with pytest.raises(PoolFull):
            small.submit("test.misbehave", ("ok", "ok", None), 1.0)
        assert busy.result(timeout=10).status is Status.timeout
        assert queued.result(timeout=10).reward == 1.0


def test_workers_are_recycled_after_max_tasks():
    with WorkerPool(1, memory_mb=1024, max_tasks=2) as recycled:
        pids = [recycled.submit("test.misbehave", ("pid", "ok", None), 5.0).result(timeout=30).details["pid"]]
        pids += [
            recycled.submit("test.misbehave", ("pid", "ok", None), 5.0).result(timeout=30).details["pid"]
        ]
        pids += [
            recycled.submit("test.misbehave", ("pid", "ok", None), 5.0).result(timeout=30).details["pid"]
        ]
    assert pids[0] == pids[1] != pids[2]


def test_closed_pool_refuses_work():
    p = WorkerPool(1, memory_mb=1024)
    p.close()
    with pytest.raises(PoolClosed):
        p.submit("test.misbehave", ("ok", "ok", None), 1.0)
    assert all(slot.process is None for slot in p.slots)


def test_a_script_without_main_guard_can_use_the_pool(tmp_path):
    """Workers never re-run the caller's __main__ (as spawn/forkserver would), so no main guard is needed."""
    script = tmp_path / "user_script.py"
    script.write_text(
        f"import os, sys; os.environ['PROCTOR_PLUGINS'] = 'tests.plugins.slow'; sys.path.insert(0, {ROOT!r})\n"
        "import proctor\n"
        "print('MAIN RAN')\n"
        "print(proctor.score('test.misbehave', 'ok', 'ok').reward)\n"
    )
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["MAIN", "RAN", "1.0"]


def test_close_releases_callers_blocked_on_a_full_queue():
    import threading

    p = WorkerPool(1, memory_mb=1024, queue_size=1)
    p.submit("test.misbehave", ("sleep", "ok", None), 5.0)
    wait_until_busy(p)
    p.submit("test.misbehave", ("ok", "ok", None), 1.0)  # fills the queue
    outcomes: list[str] = []

    def blocked_submitter() -> None:
        try:
            p.submit("test.misbehave", ("ok", "ok", None), 1.0, block=True)
            outcomes.append("queued")
        except PoolClosed:
            outcomes.append("closed")

    threads = [threading.Thread(target=blocked_submitter) for _ in range(3)]
    for thread in threads:
        thread.start()
    time.sleep(0.2)
    p.close()
    for thread in threads:
        thread.join(timeout=10)
    assert not any(thread.is_alive() for thread in threads), "a caller stayed blocked after close()"
    assert outcomes.count("closed") == 3


LEAKY_PLUGIN = '''
import os, time
from proctor.contract import Verdict
from proctor.registry import VerifierSpec, register_verifier


def _leaky(response, reference, options):
    """Starts a real nsjail job that sleeps, then records this worker's pid: the pool kills it mid-job."""
    from proctor.sandboxes.backends.nsjail import NsjailBackend
    from proctor.sandboxes.job import Command, Job, RunLimits

    backend = NsjailBackend(warm=1)
    with open(reference, "w") as handle:
        handle.write(str(os.getpid()))
    backend.run(Job(commands=[Command(argv=["/bin/sleep", response], limits=RunLimits(cpu_s=1, wall_s=600))]))
    return Verdict.right()


register_verifier(
    VerifierSpec(name="test.leaky_sandbox", version="1", score=_leaky, reference=str, execution="pool", deadline_s=1.0)
)
'''


def _leftovers(pid: int) -> list[str]:
    """What process `pid` still has on the host: cgroups, private directories, mounts, processes."""
    from pathlib import Path

    from proctor.sandboxes.backends.runner import work_base
    from proctor.sandboxes.cgroups import Cgroups

    found = [str(c) for parent in Cgroups().parent_dirs() if parent.is_dir() for c in parent.glob(f"{pid}-*")]
    found += [str(d) for d in work_base().glob(f"proctor-*-{pid}-*")]
    found += [line for line in Path("/proc/self/mountinfo").read_text().splitlines() if f"-{pid}-" in line]
    return found


def test_a_killed_worker_leaves_no_sandbox_cgroups_directories_or_programs(tmp_path):
    from proctor.sandboxes.backends.nsjail import NsjailBackend
    from tests.sandbox_helpers import processes_with

    ok, why = NsjailBackend(warm=0).available()
    if not ok:
        pytest.skip(f"nsjail unavailable: {why}")
    (tmp_path / "leaky_sandbox_plugin.py").write_text(LEAKY_PLUGIN)
    sys.path.insert(0, str(tmp_path))
    marker = f"{4000 + os.getpid() % 1000}.{time.monotonic_ns() % 10**6}"
    pid_file = tmp_path / "worker.pid"
    try:
        with WorkerPool(1, memory_mb=1024, queue_size=2, plugins="leaky_sandbox_plugin") as pool:
            future = pool.submit("test.leaky_sandbox", (marker, str(pid_file), None), 8.0)
            verdict = future.result(timeout=60)
            assert verdict.status is Status.timeout
            worker = int(pid_file.read_text())
            assert _leftovers(worker) == []
            assert processes_with(f"sleep\0{marker}") == []  # the jailed program died with its cgroup
    finally:
        sys.path.remove(str(tmp_path))
