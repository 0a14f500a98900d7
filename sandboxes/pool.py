"""A bounded pool of threads that run sandbox jobs on one backend: a fixed number at once, a bounded queue.

Each job already runs in its own sandboxed process tree, so a thread per running job is all the service
needs: the thread only waits on the backend. The bound is on jobs in flight (running + waiting); past it
`submit` raises `proctor.capacity.PoolFull` at once, which the API answers with 429 and Retry-After, so a burst
never piles up unbounded work or memory behind the pool.

`run(job, wait_s=...)` is back-pressure instead (`/run_code` uses it, since verl retries nothing but 504): a job
that finds the pool full waits, first come first served, for a place; a finishing job hands its place to the
longest-waiting one. `wait_s` bounds the whole time before the job starts, waiting for a place and then in the
queue: a job not started `wait_s` seconds after `run` was called is never run (taken out of the line or the
queue) and raises PoolFull, so the caller's time before its job starts is bounded however slow the jobs ahead
are. Waiting jobs hold no thread and take a place before any later `submit`, so a steady stream of new jobs
cannot starve them. Jobs run with `wait_s` that have not started are bounded in number (MAX_WAITING_FOR_PLACE
waiting for a place) and in size (MAX_WAITING_BYTES of files and stdin, queued or waiting); past either, PoolFull
at once.

A job given up on with a `retry_key` (the caller's fingerprint of the request) keeps its place in line: when
the same key comes again within RETRY_MEMORY_S, the retry waits as if it had arrived when the first attempt
did, ahead of everything that came later. So a client that retries (verl: 3 attempts) waits its attempts'
waits added up, not each one from the back of the line.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from bisect import insort
from collections import Counter, OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from itertools import count
from queue import Empty, SimpleQueue

from proctor.capacity import PoolClosed, PoolFull
from proctor.sandboxes.job import Backend, CommandResult, Job, Result, RunVerdict

log = logging.getLogger(__name__)

CLOSE_JOIN_S = 10.0
RETRY_MEMORY_S = 120.0  # how long a given-up job's place in line is kept for its retry
RETRY_MEMORY_MAX = 16384  # at most this many places kept
MAX_WAITING_FOR_PLACE = 4096  # run(wait_s=...) jobs waiting at once; past it PoolFull at once (bounds memory)
# Files (the code included) and stdin of run(wait_s=...) jobs not started yet; past it PoolFull at once.
MAX_WAITING_BYTES = 256 * 1024 * 1024


def job_size(job: Job) -> int:
    """What a job holds while it waits: the characters of its files (the code included) and its stdin."""
    return sum(len(file.content) for file in job.files) + sum(len(command.stdin) for command in job.commands)


@dataclass(eq=False)  # compared by identity: two equal jobs are two jobs
class _Item:
    job: Job
    future: Future = field(default_factory=Future)
    since: tuple[float, int] = (0.0, 0)  # (arrival, sequence): the place in line of a waiting job
    start_by: float | None = None  # run(wait_s=...): not started by then (monotonic), the job is not run
    size: int = 0  # job_size, counted in _waiting_bytes until the job starts or leaves
    dropped: bool = False  # taken out of the queue before it started: the worker skips it


class SandboxPool:
    """Runs jobs on `backend` with `workers` at once and at most `queue` waiting; stats for /metrics."""

    def __init__(
        self,
        backend: Backend,
        workers: int,
        queue: int,
        *,
        on_result: Callable[[Result], None] | None = None,
    ):
        if workers < 1 or queue < 0:
            raise ValueError("workers must be >= 1 and queue >= 0")
        self.backend = backend
        self.workers = workers
        self.queue_size = queue
        self.on_result = on_result
        self._items: SimpleQueue[_Item | None] = SimpleQueue()  # bounded by the counts below
        self._parked: list[_Item] = []  # run(wait_s=...) jobs waiting for a place, oldest arrival first
        self._sequence = count()
        self._given_up: OrderedDict[str, list[float]] = (
            OrderedDict()
        )  # retry_key -> arrivals of given-up jobs
        self._lock = threading.Lock()
        self._running = 0
        self._waiting = 0
        self._waiting_bytes = 0
        self._completed = 0
        self._rejected = 0
        self._waited = 0
        self._verdicts: Counter[str] = Counter()
        self.closed = False
        self._threads = [
            threading.Thread(target=self._work, name=f"proctor-sandbox-{i}", daemon=True)
            for i in range(workers)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, job: Job) -> Future[Result]:
        """Queue one job; the future resolves to its Result. Raises PoolFull when the queue is full."""
        item = _Item(job)
        with self._lock:  # the check and the count change together, so the bound holds across threads
            if self.closed:
                raise PoolClosed("the sandbox pool is closed")
            if self._full():
                self._rejected += 1
                raise PoolFull(self._full_message())
            self._enqueue(item)
        return item.future

    async def run(self, job: Job, *, wait_s: float = 0.0, retry_key: str | None = None) -> Result:
        """Run one job without blocking the event loop. A full pool raises PoolFull at once, or with `wait_s` > 0
        waits (oldest arrival first) for a place; a job not started within wait_s seconds of this call, waiting
        or queued, is not run and raises PoolFull. A retry of a job given up on with the same `retry_key` keeps
        the first attempt's arrival (its place in line); its own wait_s starts again."""
        if wait_s <= 0:
            return await asyncio.wrap_future(self.submit(job))
        now = time.monotonic()
        item = _Item(job, start_by=now + wait_s, size=job_size(job))
        with self._lock:
            if self.closed:
                raise PoolClosed("the sandbox pool is closed")
            arrival = self._arrival(retry_key)
            item.since = (arrival, next(self._sequence))
            refused = None
            if self._full() and len(self._parked) >= MAX_WAITING_FOR_PLACE:
                refused = f"{self._full_message()}, and {len(self._parked)} jobs are waiting for a place"
            elif self._waiting_bytes + item.size > MAX_WAITING_BYTES:
                refused = (
                    f"{self._full_message()}, and the jobs not started yet hold {self._waiting_bytes} bytes "
                    f"of code and input (at most {MAX_WAITING_BYTES})"
                )
            if refused is not None:
                self._rejected += 1
                self._remember(retry_key, arrival)  # its retry keeps the place it would have had
                raise PoolFull(refused)
            self._waiting_bytes += item.size
            if self._full():
                insort(self._parked, item, key=lambda parked: parked.since)
            else:
                self._enqueue(item)
        done = asyncio.wrap_future(item.future)
        try:
            await asyncio.wait({done}, timeout=max(0.0, item.start_by - time.monotonic()))
            with self._lock:
                # Not started by its deadline (waiting for a place, or queued behind slow jobs): never run.
                gave_up = self._drop(item)
                if gave_up:
                    self._waited += 1
                    self._remember(retry_key, item.since[0])
                    message = self._full_message()
            if gave_up:
                done.cancel()
                raise PoolFull(f"{message}, and this job did not start within {wait_s:g} s")
            return await done
        except asyncio.CancelledError:  # the caller went away: a job that has not started is not run
            with self._lock:
                self._drop(item)
            done.cancel()
            raise

    def stats(self) -> dict[str, int | dict[str, int]]:
        """Workers, queue bound, running and queued jobs, jobs waiting for a place (run with wait_s), lifetime
        completed/rejected/waited_then_rejected (run with wait_s: not started in time), the files and stdin held
        by run(wait_s=...) jobs not started yet (waiting_bytes), and jobs by verdict."""
        with self._lock:
            return {
                "workers": self.workers,
                "queue": self.queue_size,
                "running": self._running,
                "queued": self._waiting,
                "completed": self._completed,
                "rejected": self._rejected,
                "waiting_for_place": len(self._parked),
                "waited_then_rejected": self._waited,
                "waiting_bytes": self._waiting_bytes,
                "verdicts": dict(self._verdicts),
            }

    def close(self, timeout_s: float = CLOSE_JOIN_S) -> None:
        """Refuse new jobs, fail waiting ones with PoolClosed, wait up to timeout_s for running ones, then close
        the backend's warm sandboxes (their directories, mounts and cgroups; a later job starts them again).

        A service stopped with SIGTERM never runs exit handlers (uvicorn re-raises the signal once it has shut
        down), so this is where what the sandboxes keep on the host is given back."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            waiting = [item for item in self._drain() if not item.dropped]  # dropped ones were counted out
            self._waiting -= len(waiting)
            waiting.extend(self._parked)
            self._parked.clear()
            self._waiting_bytes = 0
        for item in waiting:
            if item.future.set_running_or_notify_cancel():
                item.future.set_exception(PoolClosed("the sandbox pool closed before this job ran"))
        for _ in self._threads:
            self._items.put(None)
        # Running jobs end within their own wall-clock backstops; the threads are daemons either way.
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        close = getattr(self.backend, "close", None)
        if close is not None and not any(thread.is_alive() for thread in self._threads):
            try:
                close()
            except Exception:  # noqa: BLE001 - shutting down: log, never raise
                log.exception("closing sandbox backend %s failed", self.backend.name)

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _work(self) -> None:
        while True:
            item = self._items.get()
            if item is None:
                return
            with self._lock:
                if item.dropped:  # its caller gave up on it; it was counted out then
                    continue
                if item.start_by is not None and time.monotonic() > item.start_by and self._drop(item):
                    continue  # past its start-by deadline: its caller answers busy, the job is not run
                self._waiting -= 1
                self._release(item)
                # A job whose caller went away (client disconnected, future cancelled) is not run at all.
                started = item.future.set_running_or_notify_cancel()
                if started:
                    self._running += 1
                else:
                    self._admit_parked()  # its place is free
            if not started:
                continue
            result = self._run_one(item.job)
            with self._lock:
                self._running -= 1
                self._completed += 1
                self._verdicts[result.verdict.value] += 1
                self._admit_parked()
            if self.on_result is not None:
                try:
                    self.on_result(result)
                except Exception:  # a broken listener must not lose the job's result
                    log.exception("sandbox pool on_result listener failed")
            item.future.set_result(result)

    def _arrival(self, retry_key: str | None) -> float:
        """When this job counts as having arrived: the oldest given-up attempt with its key, else now (under
        _lock)."""
        now = time.monotonic()
        arrivals = self._given_up.get(retry_key) if retry_key is not None else None
        if not arrivals:
            return now
        arrival = arrivals.pop(0)
        if not arrivals:
            del self._given_up[retry_key]
        return arrival if now - arrival < RETRY_MEMORY_S else now

    def _remember(self, retry_key: str | None, arrival: float) -> None:
        """Keep a given-up job's arrival for its retry; forget the oldest past the bounds (under _lock)."""
        if retry_key is None:
            return
        insort(self._given_up.setdefault(retry_key, []), arrival)
        self._given_up.move_to_end(retry_key)
        now = time.monotonic()
        while self._given_up and (
            len(self._given_up) > RETRY_MEMORY_MAX
            or now - next(iter(self._given_up.values()))[-1] > RETRY_MEMORY_S
        ):
            self._given_up.popitem(last=False)

    def _full(self) -> bool:
        """Whether every running and queued place is taken, or jobs are already waiting for one (under _lock)."""
        return bool(self._parked) or self._running + self._waiting >= self.workers + self.queue_size

    def _full_message(self) -> str:
        return f"the sandbox pool is full: {self._running} jobs running and {self._waiting} waiting"

    def _enqueue(self, item: _Item) -> None:
        """Give the job a place in the queue (under _lock)."""
        self._waiting += 1
        self._items.put(item)

    def _release(self, item: _Item) -> None:
        """The job no longer waits: its files and stdin leave the count (under _lock)."""
        self._waiting_bytes -= item.size
        item.size = 0

    def _drop(self, item: _Item) -> bool:
        """Take a run(wait_s=...) job that has not started out of the line or the queue; whether it had not
        started (under _lock). A queued job stays in the queue until a worker skips it, holding neither its
        place nor its job."""
        if item.dropped:
            return True
        if item in self._parked:
            self._parked.remove(item)
        elif item.future.cancel():  # queued, not started: pending futures cancel, running or done ones do not
            self._waiting -= 1
            item.job = None  # type: ignore[assignment] - the skipped entry keeps no code in memory
            self._admit_parked()
        else:
            return False
        item.dropped = True
        self._release(item)
        return True

    def _admit_parked(self) -> None:
        """Move the longest-waiting parked jobs into the places that are free (under _lock)."""
        while self._parked and self._running + self._waiting < self.workers + self.queue_size:
            item = self._parked.pop(0)
            if item.future.cancelled():
                self._release(item)
            else:
                self._enqueue(item)

    def _drain(self) -> list[_Item]:
        """Take every job waiting now out of the queue."""
        items = []
        while True:
            try:
                item = self._items.get_nowait()
            except Empty:
                return items
            if item is not None:
                items.append(item)

    def _run_one(self, job: Job) -> Result:
        """The backend's result; an exception (backends should not raise) becomes a sandbox_error result."""
        try:
            return self.backend.run(job)
        except Exception as exc:
            log.exception("sandbox backend %s raised instead of returning a result", self.backend.name)
            failed = CommandResult(
                name=job.commands[0].name,
                verdict=RunVerdict.sandbox_error,
                detail=f"backend {self.backend.name} raised {type(exc).__name__}: {exc}",
            )
            return Result(backend=self.backend.name, commands=[failed])
