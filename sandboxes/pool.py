"""A bounded pool of threads that run sandbox jobs on one backend: a fixed number at once, a bounded queue.

Each job already runs in its own sandboxed process tree, so a thread per running job is all the service
needs: the thread only waits on the backend. The bound is on jobs in flight (running + waiting); past it
`submit` raises `proctor.capacity.PoolFull` at once, which the API answers with 429 and Retry-After, so a burst
never piles up unbounded work or memory behind the pool.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from queue import Empty, SimpleQueue

from proctor.capacity import PoolClosed, PoolFull
from proctor.sandboxes.job import Backend, CommandResult, Job, Result, RunVerdict

log = logging.getLogger(__name__)

CLOSE_JOIN_S = 10.0


@dataclass
class _Item:
    job: Job
    future: Future = field(default_factory=Future)


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
        self._lock = threading.Lock()
        self._running = 0
        self._waiting = 0
        self._completed = 0
        self._rejected = 0
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
            if self._running + self._waiting >= self.workers + self.queue_size:
                self._rejected += 1
                raise PoolFull(
                    f"the sandbox pool is full: {self._running} jobs running and {self._waiting} waiting"
                )
            self._waiting += 1
            self._items.put(item)
        return item.future

    async def run(self, job: Job) -> Result:
        """Run one job without blocking the event loop; raises PoolFull when the queue is full."""
        return await asyncio.wrap_future(self.submit(job))

    def stats(self) -> dict[str, int | dict[str, int]]:
        """Workers, queue bound, running and waiting jobs, lifetime completed/rejected, and jobs by verdict."""
        with self._lock:
            return {
                "workers": self.workers,
                "queue": self.queue_size,
                "running": self._running,
                "queued": self._waiting,
                "completed": self._completed,
                "rejected": self._rejected,
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
            waiting = self._drain()
            self._waiting -= len(waiting)
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
                self._waiting -= 1
                # A job whose caller went away (client disconnected, future cancelled) is not run at all.
                started = item.future.set_running_or_notify_cancel()
                if started:
                    self._running += 1
            if not started:
                continue
            result = self._run_one(item.job)
            with self._lock:
                self._running -= 1
                self._completed += 1
                self._verdicts[result.verdict.value] += 1
            if self.on_result is not None:
                try:
                    self.on_result(result)
                except Exception:  # a broken listener must not lose the job's result
                    log.exception("sandbox pool on_result listener failed")
            item.future.set_result(result)

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
