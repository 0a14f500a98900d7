"""/run_code under verl's concurrency: a full sandbox queue waits (back-pressure), then 504; verl's own client.

verl's client is verl's real code: `verl/utils/reward_score/sandbox_fusion/` (`compute_score`, which calls
`check_correctness`, `_process_single_case` and `call_sandbox_api`) from the verl wheel pinned in the Makefile
(VERL_VERSION, installed by `make setup` with `pip install --no-deps`: verl's own dependencies, ray and torch
among them, are not installed). Importing `verl` runs `verl/__init__.py`, which imports ray, so that one folder
is loaded from the installed wheel's files with importlib as a package of its own; its modules import only the
standard library and `requests`. Nothing of verl's is stubbed or copied. verl 0.9.1's client constants:
MAX_RETRIES = 3 attempts, a 504 (and nothing else) retried after INITIAL_RETRY_DELAY * attempt (1 s, then 2 s),
request time-out compile_timeout + run_timeout + API_TIMEOUT (10 s); any other status is an API error (-1).
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import importlib.util
import json
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType

import httpx
import pytest

from proctor.capacity import PoolFull
from proctor.sandboxes.job import Command, CommandResult, File, Job, Result, RunLimits, RunVerdict
from proctor.sandboxes.pool import SandboxPool
from tests.test_run_code import HTTP_TIMEOUT_S, call_verl, start, wait_for

VERL_VERSION = "0.9.1"  # the Makefile's VERL_VERSION


def load_verl_sandbox_fusion() -> ModuleType:
    """verl's `verl.utils.reward_score.sandbox_fusion` package, loaded from the installed wheel's files."""
    name = "verl_sandbox_fusion"
    if name in sys.modules:
        return sys.modules[name]
    try:
        installed = importlib.metadata.version("verl")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"verl is not installed: run `make setup` (pip install --no-deps verl=={VERL_VERSION})")
    assert installed == VERL_VERSION, f"verl {installed} installed; these tests read verl {VERL_VERSION}"
    spec = importlib.util.find_spec("verl")  # finds the top-level package without running its __init__
    assert spec is not None and spec.submodule_search_locations
    folder = Path(spec.submodule_search_locations[0]) / "utils" / "reward_score" / "sandbox_fusion"
    package = importlib.util.spec_from_file_location(
        name, folder / "__init__.py", submodule_search_locations=[str(folder)]
    )
    assert package is not None and package.loader is not None
    module = importlib.util.module_from_spec(package)
    sys.modules[name] = module
    package.loader.exec_module(module)
    return module


# -- the pool: wait for a place, first come first served -------------------------------------------------


class GatedBackend:
    """A backend whose jobs run until `release` is set; records the order jobs started in."""

    name = "gated"

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started: list[str] = []

    def available(self) -> tuple[bool, str]:
        return True, ""

    def run(self, job: Job) -> Result:
        self.started.append(job.commands[0].name)
        self.release.wait(30)
        return Result(
            backend=self.name, commands=[CommandResult(name=job.commands[0].name, verdict=RunVerdict.ok)]
        )


def job(name: str) -> Job:
    return Job(commands=[Command(name=name, argv=["true"], limits=RunLimits(cpu_s=1))])


async def test_a_full_pool_waits_then_raises_pool_full() -> None:
    backend = GatedBackend()
    with SandboxPool(backend, workers=1, queue=0) as pool:
        holder = asyncio.ensure_future(pool.run(job("holder")))
        while pool.stats()["running"] != 1:
            await asyncio.sleep(0.01)
        started = time.monotonic()
        with pytest.raises(PoolFull, match="did not start within 0.3 s"):
            await pool.run(job("late"), wait_s=0.3)
        assert time.monotonic() - started >= 0.3
        stats = pool.stats()
        assert stats["waited_then_rejected"] == 1 and stats["waiting_for_place"] == 0
        backend.release.set()
        await holder
        assert backend.started == ["holder"]  # the job that gave up never ran


async def test_a_place_freed_within_the_wait_serves_the_oldest_waiter_first() -> None:
    backend = GatedBackend()
    with SandboxPool(backend, workers=1, queue=0) as pool:
        holder = asyncio.ensure_future(pool.run(job("holder")))
        while pool.stats()["running"] != 1:
            await asyncio.sleep(0.01)
        waiters = []
        for name in ("first", "second", "third"):
            waiters.append(asyncio.ensure_future(pool.run(job(name), wait_s=20)))
            await asyncio.sleep(0.02)
        assert pool.stats()["waiting_for_place"] == 3
        with pytest.raises(PoolFull):  # a job that does not wait cannot jump the line
            pool.submit(job("pushy"))
        backend.release.set()
        results = await asyncio.gather(holder, *waiters)
        assert [r.verdict for r in results] == [RunVerdict.ok] * 4
        assert backend.started == ["holder", "first", "second", "third"]


async def test_a_retry_keeps_its_first_attempts_place_in_line() -> None:
    """verl re-sends the same body after a 504: with the same retry_key it goes ahead of later arrivals."""
    backend = GatedBackend()
    with SandboxPool(backend, workers=1, queue=0) as pool:
        holder = asyncio.ensure_future(pool.run(job("holder")))
        while pool.stats()["running"] != 1:
            await asyncio.sleep(0.01)
        with pytest.raises(PoolFull):
            await pool.run(job("retried"), wait_s=0.1, retry_key="same body")
        later = asyncio.ensure_future(pool.run(job("later"), wait_s=20, retry_key="another body"))
        await asyncio.sleep(0.05)
        retry = asyncio.ensure_future(pool.run(job("retried"), wait_s=20, retry_key="same body"))
        await asyncio.sleep(0.05)
        fresh = asyncio.ensure_future(pool.run(job("fresh"), wait_s=20, retry_key="another body"))
        await asyncio.sleep(0.05)
        backend.release.set()
        await asyncio.gather(holder, later, retry, fresh)
        assert backend.started == ["holder", "retried", "later", "fresh"]


async def test_the_line_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("proctor.sandboxes.pool.MAX_WAITING_FOR_PLACE", 2)
    backend = GatedBackend()
    with SandboxPool(backend, workers=1, queue=0) as pool:
        holder = asyncio.ensure_future(pool.run(job("holder")))
        while pool.stats()["running"] != 1:
            await asyncio.sleep(0.01)
        waiters = [asyncio.ensure_future(pool.run(job(f"w{i}"), wait_s=20)) for i in range(2)]
        await asyncio.sleep(0.05)
        started = time.monotonic()
        with pytest.raises(PoolFull, match="2 jobs are waiting for a place"):
            await pool.run(job("third"), wait_s=20)
        assert time.monotonic() - started < 1  # at once, not after the wait
        backend.release.set()
        await asyncio.gather(holder, *waiters)


async def test_a_waiter_that_goes_away_leaves_the_line() -> None:
    backend = GatedBackend()
    with SandboxPool(backend, workers=1, queue=0) as pool:
        holder = asyncio.ensure_future(pool.run(job("holder")))
        while pool.stats()["running"] != 1:
            await asyncio.sleep(0.01)
        gone = asyncio.ensure_future(pool.run(job("gone"), wait_s=20))
        await asyncio.sleep(0.05)
        gone.cancel()
        with pytest.raises(asyncio.CancelledError):
            await gone
        assert pool.stats()["waiting_for_place"] == 0
        backend.release.set()
        await holder
        assert (await pool.run(job("next"), wait_s=5)).verdict is RunVerdict.ok
        assert backend.started == ["holder", "next"]


async def test_a_queued_job_past_its_start_by_deadline_is_not_run() -> None:
    """wait_s bounds the whole time before a job starts: a job that got a queue place but not a worker is dropped."""
    backend = GatedBackend()
    with SandboxPool(backend, workers=1, queue=1) as pool:
        holder = asyncio.ensure_future(pool.run(job("holder")))
        while pool.stats()["running"] != 1:
            await asyncio.sleep(0.01)
        queued = asyncio.ensure_future(pool.run(job("queued"), wait_s=0.3, retry_key="queued body"))
        await asyncio.sleep(0.05)
        assert pool.stats()["queued"] == 1 and pool.stats()["waiting_for_place"] == 0  # a place, not a worker
        started = time.monotonic()
        with pytest.raises(PoolFull, match="did not start within 0.3 s"):
            await queued
        assert time.monotonic() - started < 1  # at its deadline, not when the holder ends
        stats = pool.stats()
        assert stats["queued"] == 0 and stats["waited_then_rejected"] == 1 and stats["waiting_bytes"] == 0
        later = asyncio.ensure_future(pool.run(job("later"), wait_s=20))  # the dropped job's place is free
        await asyncio.sleep(0.05)
        assert pool.stats()["queued"] == 1
        backend.release.set()
        await asyncio.gather(holder, later)
        assert backend.started == ["holder", "later"]  # the job past its deadline never ran


async def test_a_worker_does_not_start_a_job_past_its_deadline() -> None:
    """Even when the event loop is late to give up on it, a worker that reaches a job after its deadline skips it."""
    backend = GatedBackend()
    with SandboxPool(backend, workers=1, queue=1) as pool:
        holder = asyncio.ensure_future(pool.run(job("holder")))
        while pool.stats()["running"] != 1:
            await asyncio.sleep(0.01)
        queued = asyncio.ensure_future(pool.run(job("queued"), wait_s=0.2))
        await asyncio.sleep(0.05)
        time.sleep(0.3)  # the event loop is blocked past the deadline ...
        backend.release.set()  # ... while the worker comes free and reaches the queued job
        time.sleep(0.3)
        with pytest.raises(PoolFull, match="did not start within 0.2 s"):
            await queued
        await holder
        assert backend.started == ["holder"]
        stats = pool.stats()
        assert stats["queued"] == 0 and stats["running"] == 0 and stats["waiting_bytes"] == 0


def sized_job(name: str, size: int) -> Job:
    return Job(
        files=[File(path="main.py", content="#" * size)],
        commands=[Command(name=name, argv=["true"], limits=RunLimits(cpu_s=1))],
    )


async def test_jobs_not_started_are_bounded_in_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("proctor.sandboxes.pool.MAX_WAITING_BYTES", 100)
    backend = GatedBackend()
    with SandboxPool(backend, workers=1, queue=1) as pool:
        holder = asyncio.ensure_future(pool.run(sized_job("holder", 100), wait_s=20))
        while pool.stats()["running"] != 1:
            await asyncio.sleep(0.01)
        assert pool.stats()["waiting_bytes"] == 0  # a running job no longer counts
        queued = asyncio.ensure_future(pool.run(sized_job("queued", 40), wait_s=20))
        parked = asyncio.ensure_future(pool.run(sized_job("parked", 40), wait_s=20))
        await asyncio.sleep(0.05)
        assert pool.stats()["waiting_bytes"] == 80
        started = time.monotonic()
        with pytest.raises(PoolFull, match="hold 80 bytes of code and input"):
            await pool.run(sized_job("too much", 30), wait_s=20)
        assert time.monotonic() - started < 1  # at once, not after the wait
        small = asyncio.ensure_future(pool.run(sized_job("small", 20), wait_s=20))  # fits: 100 bytes
        await asyncio.sleep(0.05)
        backend.release.set()
        await asyncio.gather(holder, queued, parked, small)
        assert backend.started == ["holder", "queued", "parked", "small"]
        assert pool.stats()["waiting_bytes"] == 0


# -- a live server -----------------------------------------------------------------------------------------


@pytest.fixture
def background() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=4) as pool:
        yield pool


def test_a_place_freed_within_the_wait_serves_the_request(
    tmp_path: Path, background: ThreadPoolExecutor
) -> None:
    process = start(
        tmp_path, PROCTOR_SANDBOX_WORKERS=1, PROCTOR_SANDBOX_QUEUE=0, PROCTOR_RUN_CODE_QUEUE_WAIT_S=20
    )
    base = process.base_url
    try:
        # The sleeper holds the only worker until its wall-clock backstop (2 x 1 s + 1 s) stops it.
        busy = background.submit(call_verl, base, "import time\ntime.sleep(3600)\n", "", timeout=1)

        def running() -> bool:
            pool = httpx.get(f"{base}/healthz", timeout=HTTP_TIMEOUT_S).json()["sandbox"]["pool"]
            return pool is not None and pool["running"] == 1

        wait_for(running, "the sleeper to hold the only sandbox worker")
        started = time.monotonic()
        answer = call_verl(base, "print(6 * 7)", "")
        assert answer["status"] == "Success" and answer["run_result"]["stdout"] == "42\n"
        assert time.monotonic() - started > 0.5  # it waited for the sleeper's place
        assert busy.result(timeout=HTTP_TIMEOUT_S)["run_result"]["status"] == "TimeLimitExceeded"
    finally:
        process.stop()


def test_only_run_code_waits_and_answers_504_other_routes_keep_429(
    tmp_path: Path, background: ThreadPoolExecutor
) -> None:
    """One server, everything full: /v1/score is 429 at once, /run_code waits then 504, both with Retry-After."""
    process = start(
        tmp_path,
        PROCTOR_MAX_CONCURRENCY=1,
        PROCTOR_MAX_QUEUE=0,
        PROCTOR_SANDBOX_WORKERS=1,
        PROCTOR_SANDBOX_QUEUE=0,
        PROCTOR_RUN_CODE_QUEUE_WAIT_S=1,
        PROCTOR_RETRY_AFTER_S=5,
    )
    base = process.base_url
    try:
        sleep_item = {
            "verifier": "test.misbehave",
            "response": "sleep",
            "reference": "x",
            "options": {"deadline_s": 4},
        }
        scoring = background.submit(httpx.post, f"{base}/v1/score", json=sleep_item, timeout=HTTP_TIMEOUT_S)
        running = background.submit(call_verl, base, "import time\ntime.sleep(3600)\n", "", timeout=3)

        def both_busy() -> bool:
            health = httpx.get(f"{base}/healthz", timeout=HTTP_TIMEOUT_S).json()
            pool = health["sandbox"]["pool"]
            admission = httpx.get(f"{base}/metrics", timeout=HTTP_TIMEOUT_S).text
            scoring_running = 'proctor_admission{state="running"} 1.0' in admission
            return pool is not None and pool["running"] == 1 and scoring_running

        wait_for(both_busy, "a scoring request and a sandbox job to hold their only places")
        scored = httpx.post(
            f"{base}/v1/score", json={**sleep_item, "response": "a", "reference": "a"}, timeout=10
        )
        assert scored.status_code == 429 and scored.headers["Retry-After"] == "5", scored.text
        ran = httpx.post(f"{base}/run_code", json={"code": "print(1)", "language": "python"}, timeout=10)
        assert ran.status_code == 504 and ran.headers["Retry-After"] == "5", ran.text
        assert scoring.result(timeout=HTTP_TIMEOUT_S).status_code == 200
        assert running.result(timeout=HTTP_TIMEOUT_S)["run_result"]["status"] == "TimeLimitExceeded"
    finally:
        process.stop()


SUM_CORRECT = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
SUM_WRONG = "```python\na, b = map(int, input().split())\nprint(a - b)\n```"
TESTS = json.dumps({"inputs": ["1 2\n", "40 2\n"], "outputs": ["3\n", "42\n"]})


def test_verls_own_client_loses_no_correct_program_to_a_busy_service(tmp_path: Path) -> None:
    """verl's compute_score, many at once against a two-worker pool with no queue: right 1.0, wrong 0.0."""
    verl = load_verl_sandbox_fusion()
    process = start(tmp_path, PROCTOR_SANDBOX_WORKERS=2, PROCTOR_SANDBOX_QUEUE=0)
    url = f"{process.base_url}/run_code"
    semaphore = threading.Semaphore(64)  # verl's sandbox_fusion.max_concurrent default
    completions = [SUM_CORRECT if i % 2 == 0 else SUM_WRONG for i in range(32)]
    try:

        def score(completion: str) -> tuple[float, list]:
            # As verl's default_compute_score calls it (continuous=True), with compute_score's default timeout.
            return verl.compute_score(url, semaphore, 1024, completion, TESTS, continuous=True)

        with ThreadPoolExecutor(max_workers=len(completions)) as threads:
            results = list(threads.map(score, completions))
        text = process.output()
    finally:
        process.stop()
    for completion, (value, metadata) in zip(completions, results, strict=True):
        statuses = [case["status"] for case in metadata]
        assert all(case["api_request_error"] is None for case in metadata), (metadata, text)
        if completion is SUM_CORRECT:
            assert value == 1.0 and statuses == ["success", "success"], metadata
        else:
            assert value == 0.0 and statuses == ["wrong_answer", "wrong_answer"], metadata


def post_run_code(base: str, code: str, run_timeout: int = 1) -> tuple[int, dict, float]:
    """One verl-shaped /run_code request: status, JSON answer, seconds it took (a hang fails at HTTP_TIMEOUT_S)."""
    started = time.monotonic()
    response = httpx.post(
        f"{base}/run_code",
        json={"code": code, "language": "python", "run_timeout": run_timeout, "compile_timeout": 10},
        timeout=HTTP_TIMEOUT_S,
    )
    return response.status_code, response.json(), time.monotonic() - started


def test_a_flood_of_sleepers_answers_correct_programs_within_the_bound(tmp_path: Path) -> None:
    """The red team's scenario scaled down: sleeping programs fill the workers, the queue and the line, then
    correct programs come. Every request is answered 200 or 504 within the start wait plus its own limits; a
    504 was never run; once the flood is answered the same correct programs (verl's retry) are 200."""
    wait_s, sleepers, correct = 2, 40, 6
    process = start(
        tmp_path,
        PROCTOR_SANDBOX_WORKERS=2,
        PROCTOR_SANDBOX_QUEUE=16,
        PROCTOR_RUN_CODE_QUEUE_WAIT_S=wait_s,
    )
    base = process.base_url
    # run_timeout 1: each sleeper holds a worker for its wall-clock backstop, 2 x 1 + 1 = 3 s. Before the start
    # deadline, the 16 queued sleepers ran one after another: the last answered after (16 + 2) / 2 x 3 = 27 s.
    bound_s = wait_s + 3 + 7  # start wait + the job's wall limit + slack for a shared machine
    sleeping = [f"import time\ntime.sleep(60)  # {i}\n" for i in range(sleepers)]
    right = [f"print({i} + 1)\n" for i in range(correct)]
    try:
        with ThreadPoolExecutor(max_workers=sleepers + correct) as threads:
            flood = [threads.submit(post_run_code, base, code) for code in sleeping]
            time.sleep(0.5)
            answers = [threads.submit(post_run_code, base, code) for code in right]
            flood_results = [future.result() for future in flood]
            results = [future.result() for future in answers]
        for i, (status, answer, took) in enumerate(results):
            assert took < bound_s, (i, status, took)
            if status == 200:
                assert answer["status"] == "Success" and answer["run_result"]["stdout"] == f"{i + 1}\n", (
                    answer
                )
            else:
                assert status == 504 and "did not start within" in answer["error"]["message"], answer
        statuses = [status for status, _, _ in flood_results]
        assert set(statuses) <= {200, 504} and 504 in statuses, statuses
        assert max(took for _, _, took in flood_results) < bound_s
        for status, answer, _ in flood_results:
            if status == 200:
                assert answer["run_result"]["status"] == "TimeLimitExceeded", answer
        pool = httpx.get(f"{base}/healthz", timeout=HTTP_TIMEOUT_S).json()["sandbox"]["pool"]
        answered = sum(status == 200 for status, _, _ in flood_results + results)
        assert pool["completed"] == answered  # a 504 was never run
        assert pool["running"] == pool["queued"] == pool["waiting_for_place"] == pool["waiting_bytes"] == 0
        for i, code in enumerate(right):  # verl's retry of each correct program, the flood answered
            status, answer, _ = post_run_code(base, code)
            assert status == 200 and answer["run_result"]["stdout"] == f"{i + 1}\n", answer
    finally:
        process.stop()


async def test_run_code_bounds_the_bytes_of_waiting_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past MAX_WAITING_BYTES of code and input not started yet, 504 at once; one request over it alone, 413."""
    from proctor.api.app import create_app
    from proctor.settings import Settings

    monkeypatch.setattr("proctor.sandboxes.pool.MAX_WAITING_BYTES", 1000)
    app = create_app(Settings(sandbox_workers=1, sandbox_queue=0, run_code_queue_wait_s=20))
    transport = httpx.ASGITransport(app=app)

    def body(code: str) -> dict:
        return {"code": code, "language": "python", "run_timeout": 1}

    padded = "print(7)\n#" + "x" * 590  # 600 characters
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://t", timeout=HTTP_TIMEOUT_S) as client,
    ):
        sleeper = asyncio.ensure_future(client.post("/run_code", json=body("import time\ntime.sleep(60)\n")))
        while True:  # the sleeper holds the only worker for its 3 s wall-clock backstop
            pool = (await client.get("/healthz")).json()["sandbox"]["pool"]
            if pool is not None and pool["running"] == 1:
                break
            await asyncio.sleep(0.05)
        waiting = asyncio.ensure_future(client.post("/run_code", json=body(padded)))
        while (await client.get("/healthz")).json()["sandbox"]["pool"]["waiting_bytes"] != 600:
            await asyncio.sleep(0.05)
        over = await client.post("/run_code", json=body(padded + "y"))
        assert over.status_code == 504 and over.headers["Retry-After"], over.text
        assert "bytes of code and input" in over.json()["error"]["message"]
        alone = await client.post("/run_code", json=body("#" * 1001))
        assert alone.status_code == 413, alone.text
        assert (await sleeper).json()["run_result"]["status"] == "TimeLimitExceeded"
        answer = (await waiting).json()
        assert answer["status"] == "Success" and answer["run_result"]["stdout"] == "7\n", answer
