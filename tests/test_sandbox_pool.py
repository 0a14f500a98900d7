"""The sandbox pool with real jobs on the real default backend: bounds, PoolFull, close, cancellation, stats."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future

import pytest

from proctor.capacity import PoolClosed, PoolFull
from proctor.sandboxes.backends import get_backend
from proctor.sandboxes.job import Backend, Command, Job, Result, RunLimits, RunVerdict
from proctor.sandboxes.pool import SandboxPool

PYTHON = "/usr/bin/python3"
WAIT_S = 20.0  # hang detection only


def python_job(source: str, cpu_s: float = 2.0, wall_s: float | None = None) -> Job:
    """One Python program as a job."""
    limits = RunLimits(cpu_s=cpu_s, wall_s=wall_s, memory_mb=256)
    return Job(commands=[Command(argv=[PYTHON, "-c", source], limits=limits)])


def sleeper(wall_s: float = 3.0) -> Job:
    """A job that holds its worker until the wall-clock backstop stops it (uses no CPU)."""
    return python_job("import time; time.sleep(60)", cpu_s=1.0, wall_s=wall_s)


def wait_for(condition: Callable[[], bool], what: str) -> None:
    """Poll until condition() holds; fail naming `what` after WAIT_S."""
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.01)


@pytest.fixture(scope="module")
def backend() -> Backend:
    """The default backend (nsjail), which must work on this machine."""
    chosen = get_backend("nsjail")
    ok, reason = chosen.available()
    assert ok, f"nsjail backend unavailable: {reason}"
    return chosen


@pytest.fixture
def make_pool(backend: Backend) -> Iterator[Callable[..., SandboxPool]]:
    """Factory for pools on the real backend, all closed at the end."""
    pools: list[SandboxPool] = []

    def make(workers: int, queue: int, **kwargs: object) -> SandboxPool:
        pool = SandboxPool(backend, workers, queue, **kwargs)
        pools.append(pool)
        return pool

    yield make
    for pool in pools:
        pool.close()


def test_runs_jobs_and_counts_them_by_verdict(make_pool: Callable[..., SandboxPool]) -> None:
    seen: list[Result] = []
    pool = make_pool(2, 4, on_result=seen.append)
    futures = {
        "ok": pool.submit(python_job("print(6 * 7)")),
        "runtime_error": pool.submit(python_job("raise SystemExit(3)")),
        "time_limit": pool.submit(python_job("while True: pass", cpu_s=0.3)),
    }
    results = {name: future.result(timeout=WAIT_S) for name, future in futures.items()}
    assert results["ok"].verdict is RunVerdict.ok
    assert results["ok"].commands[0].stdout == "42\n"
    assert results["runtime_error"].verdict is RunVerdict.runtime_error
    assert results["runtime_error"].commands[0].exit_code == 3
    assert results["time_limit"].verdict is RunVerdict.time_limit
    stats = pool.stats()
    assert stats["completed"] == 3
    assert stats["verdicts"] == {"ok": 1, "runtime_error": 1, "time_limit": 1}
    assert (stats["running"], stats["queued"], stats["rejected"]) == (0, 0, 0)
    assert (stats["workers"], stats["queue"]) == (2, 4)
    assert sorted(result.verdict.value for result in seen) == ["ok", "runtime_error", "time_limit"]


def test_runs_up_to_workers_at_once_and_queues_the_rest(make_pool: Callable[..., SandboxPool]) -> None:
    pool = make_pool(2, 3)
    futures = [pool.submit(sleeper()) for _ in range(3)]
    wait_for(lambda: pool.stats()["running"] == 2, "two jobs running")
    assert pool.stats()["queued"] == 1
    for future in futures:
        assert future.result(timeout=WAIT_S).verdict is RunVerdict.time_limit
    assert pool.stats()["completed"] == 3


def test_full_queue_raises_pool_full_at_once(make_pool: Callable[..., SandboxPool]) -> None:
    pool = make_pool(1, 1)
    running, waiting = pool.submit(sleeper()), pool.submit(sleeper())
    with pytest.raises(PoolFull, match="sandbox pool is full"):
        pool.submit(python_job("print(1)"))
    assert pool.stats()["rejected"] == 1
    running.result(timeout=WAIT_S)
    waiting.result(timeout=WAIT_S)
    # Room again once they finish.
    assert pool.submit(python_job("print(1)")).result(timeout=WAIT_S).verdict is RunVerdict.ok


def test_queue_of_zero_admits_only_what_can_run(make_pool: Callable[..., SandboxPool]) -> None:
    pool = make_pool(1, 0)
    busy = pool.submit(sleeper())
    with pytest.raises(PoolFull):
        pool.submit(python_job("print(1)"))
    busy.result(timeout=WAIT_S)


def test_close_fails_waiting_jobs_and_refuses_new_ones(make_pool: Callable[..., SandboxPool]) -> None:
    pool = make_pool(1, 2)
    running = pool.submit(sleeper())
    wait_for(lambda: pool.stats()["running"] == 1, "the sleeper to start")
    waiting = [pool.submit(python_job("print(1)")) for _ in range(2)]
    pool.close()
    for future in waiting:
        with pytest.raises(PoolClosed):
            future.result(timeout=WAIT_S)
    assert running.result(timeout=WAIT_S).verdict is RunVerdict.time_limit  # a running job still finishes
    with pytest.raises(PoolClosed):
        pool.submit(python_job("print(1)"))
    assert pool.stats()["queued"] == 0
    pool.close()  # twice is harmless


def test_a_cancelled_waiting_job_never_runs(make_pool: Callable[..., SandboxPool]) -> None:
    pool = make_pool(1, 1)
    running = pool.submit(sleeper())
    wait_for(lambda: pool.stats()["running"] == 1, "the sleeper to start")
    waiting: Future = pool.submit(python_job("print(1)"))
    assert waiting.cancel()
    running.result(timeout=WAIT_S)
    wait_for(lambda: pool.stats()["queued"] == 0, "the cancelled job to leave the queue")
    assert pool.stats()["completed"] == 1
    assert pool.stats()["verdicts"] == {"time_limit": 1}


def test_async_run_waits_without_blocking_the_loop(make_pool: Callable[..., SandboxPool]) -> None:
    pool = make_pool(1, 1)

    async def main() -> tuple[Result, int]:
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        ticker = asyncio.create_task(tick())
        result = await pool.run(python_job("import time; time.sleep(0.5); print('done')"))
        ticker.cancel()
        return result, ticks

    result, ticks = asyncio.run(main())
    assert result.verdict is RunVerdict.ok and result.commands[0].stdout == "done\n"
    assert ticks >= 2  # the loop woke the ticker again while the job ran


class RaisingBackend:
    """A backend that breaks its contract by raising: the pool must turn that into sandbox_error."""

    name = "raising"

    def available(self) -> tuple[bool, str]:
        return True, ""

    def run(self, job: Job) -> Result:
        raise RuntimeError("backend exploded")


def test_a_backend_that_raises_gives_sandbox_error_not_an_exception() -> None:
    with SandboxPool(RaisingBackend(), 1, 1) as pool:
        result = pool.submit(python_job("print(1)")).result(timeout=WAIT_S)
        assert result.verdict is RunVerdict.sandbox_error
        assert "backend exploded" in result.commands[0].detail
        assert pool.stats()["verdicts"] == {"sandbox_error": 1}


@pytest.mark.parametrize(("workers", "queue"), [(0, 1), (1, -1)])
def test_rejects_impossible_sizes(workers: int, queue: int) -> None:
    with pytest.raises(ValueError):
        SandboxPool(RaisingBackend(), workers, queue)
