"""A pool of killable worker processes for CPU-bound verifiers.

Each worker slot is a thread in the calling process that owns one worker process and a pipe to it. The
thread hands the worker one item at a time and waits on the pipe with the item's hard deadline; a worker
that overruns is killed with SIGKILL and replaced, and that item gets `status: timeout`. No signal.alarm:
the deadline lives in the parent, so it works from any thread and stops C code too. A killed worker cleans
nothing up, so the parent releases what its sandboxes left (cgroups, /dev/shm directories; see
sandboxes/leftovers.py) once it has reaped it.
"""

from __future__ import annotations

import logging
import queue
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from proctor.capacity import PoolClosed, PoolFull
from proctor.contract import Status, Verdict

log = logging.getLogger(__name__)


class WorkerStartError(Exception):
    """A worker process did not come up (import error in a plugin, or it died while loading)."""


WORKER_START_TIMEOUT_S = 120.0


def release_leftovers(pid: int) -> None:
    """Release the sandbox cgroups and directories of a worker that died without cleaning up (imported late:
    most pools never run a sandbox)."""
    from proctor.sandboxes.leftovers import release_process

    release_process(pid)


@dataclass
class _Job:
    verifier: str
    payload: tuple[Any, Any, Any]
    deadline_s: float
    future: Future = field(default_factory=Future)


class _Slot(threading.Thread):
    """One worker process and the thread that feeds it, enforcing deadlines."""

    def __init__(self, pool: WorkerPool, index: int):
        super().__init__(name=f"proctor-pool-{index}", daemon=True)
        self.pool = pool
        self.process: subprocess.Popen | None = None
        self.conn: Connection | None = None
        self.tasks_done = 0
        self.busy = False

    def start_worker(self) -> None:
        """Start (or restart) this slot's worker: a fresh `python -m proctor.worker` on a socket pair.

        A plain subprocess rather than multiprocessing.Process, because spawn and forkserver re-run the
        caller's __main__ in the child, which would make every script using proctor need a main guard.
        """
        parent_sock, child_sock = socket.socketpair()
        process = subprocess.Popen(
            [sys.executable, "-m", "proctor.worker", str(child_sock.fileno())],
            pass_fds=(child_sock.fileno(),),
            stdin=subprocess.DEVNULL,
            close_fds=True,
        )
        child_sock.close()
        conn = Connection(parent_sock.detach())
        conn.send({"sys_path": sys.path, "memory_mb": self.pool.memory_mb, "plugins": self.pool.plugins})
        self.process, self.conn, self.tasks_done = process, conn, 0
        # Wait for the worker's imports here, so they never count against an item's deadline.
        try:
            ready = conn.poll(WORKER_START_TIMEOUT_S) and conn.recv()[0] == "ready"
        except (EOFError, OSError):
            ready = False
        if not ready:
            exitcode = process.poll()
            self.stop_worker(kill=True)
            raise WorkerStartError(f"worker did not start (exit code {exitcode})")

    def stop_worker(self, kill: bool) -> None:
        """Stop the worker process: SIGKILL when it overran, else a polite close."""
        process, conn = self.process, self.conn
        self.process = self.conn = None
        if conn is not None:
            conn.close()
        if process is None:
            return
        if kill:
            process.kill()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)
        if kill or process.returncode != 0:
            release_leftovers(process.pid)

    def _reap(self, timeout: float = 2.0) -> int | None:
        """The exit code of a worker whose socket closed: wait briefly, since EOF can precede the exit."""
        if self.process is None:
            return None
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def run(self) -> None:
        # Start the worker from this long-lived thread: PR_SET_PDEATHSIG fires when the *thread* that
        # forked the child exits, and starting here also keeps the caller (the event loop) from waiting.
        try:
            self.start_worker()
        except WorkerStartError:
            log.exception("pool worker %s did not start; it will be retried with its first item", self.name)
        while True:
            job = self.pool.jobs.get()
            if job is None:
                self.stop_worker(kill=False)
                return
            if not job.future.set_running_or_notify_cancel():
                continue
            self.busy = True
            try:
                verdict = self.run_job(job)
                job.future.set_result(verdict)
            except Exception as exc:  # keep the slot alive whatever happens to one job
                log.exception("pool slot failed on a job")
                job.future.set_result(Verdict.failure(Status.verifier_error, "pool_error", error=str(exc)))
            finally:
                self.busy = False
            if self.process is None and not self.pool.closed:
                try:
                    self.start_worker()  # replace a killed worker now, not when the next item is waiting
                except WorkerStartError:
                    log.exception("could not restart a pool worker; retrying with the next item")

    def run_job(self, job: _Job) -> Verdict:
        """Send one job to the worker and wait for its verdict until the job's deadline."""
        if self.process is None or self.process.poll() is not None or self.tasks_done >= self.pool.max_tasks:
            self.stop_worker(kill=True)
            try:
                self.start_worker()
            except WorkerStartError as exc:
                self.pool.count("crashes")
                return Verdict.failure(Status.verifier_error, "worker_start_failed", error=str(exc))
        assert self.conn is not None
        self.conn.send((job.verifier, job.payload))
        self.tasks_done += 1
        if not self.conn.poll(job.deadline_s):
            self.stop_worker(kill=True)
            self.pool.count("timeouts")
            return Verdict.failure(Status.timeout, "deadline_exceeded", deadline_s=job.deadline_s)
        try:
            kind, value = self.conn.recv()
        except (EOFError, OSError):
            exitcode = self._reap()
            self.stop_worker(kill=True)
            self.pool.count("crashes")
            return Verdict.failure(Status.verifier_error, "worker_crashed", exitcode=exitcode)
        if kind == "verdict":
            return value
        if kind == "memory":
            self.stop_worker(kill=True)  # a worker that hit its cap may be in a bad state
            self.pool.count("crashes")
            return Verdict.failure(Status.verifier_error, "worker_memory_limit", error=value)
        return Verdict.failure(Status.verifier_error, "verifier_exception", error=value)


class WorkerPool:
    """A fixed number of killable worker processes fed from one bounded queue."""

    def __init__(
        self,
        workers: int,
        *,
        memory_mb: int = 2048,
        queue_size: int = 4096,
        max_tasks: int = 10_000,
        plugins: str = "",
    ):
        self.plugins = plugins
        self.workers = workers
        self.memory_mb = memory_mb
        self.max_tasks = max_tasks
        self.jobs: queue.Queue[_Job | None] = queue.Queue(maxsize=queue_size)
        self.counters = {"submitted": 0, "timeouts": 0, "crashes": 0}
        self._counter_lock = threading.Lock()
        self._close_lock = threading.Lock()
        self.closed = False
        self.slots = [_Slot(self, i) for i in range(workers)]
        for slot in self.slots:
            slot.start()  # each slot starts its own worker from its own thread (see _Slot.run)

    def count(self, name: str) -> None:
        """Increment one of the pool's counters (thread-safe)."""
        with self._counter_lock:
            self.counters[name] += 1

    def submit(
        self, verifier: str, payload: tuple[Any, Any, Any], deadline_s: float, *, block: bool = False
    ) -> Future:
        """Queue one item; the future resolves to a Verdict. Raises PoolFull when the queue is full.

        With block=True it waits for room, but never inside queue.put, so a close() always reaches it.
        """
        job = _Job(verifier, payload, deadline_s)
        while True:
            with self._close_lock:  # close() cannot fall between the check and the put
                if self.closed:
                    raise PoolClosed("the worker pool is closed")
                try:
                    self.jobs.put_nowait(job)
                    break
                except queue.Full:
                    if not block:
                        raise PoolFull("the verifier pool's queue is full") from None
            time.sleep(0.005)
        self.count("submitted")
        return job.future

    def stats(self) -> dict[str, int]:
        """Workers, busy workers, queued items and lifetime counters, for /metrics and /healthz."""
        alive = sum(1 for slot in self.slots if (p := slot.process) is not None and p.poll() is None)
        busy = sum(1 for slot in self.slots if slot.busy)
        return {
            "workers": self.workers,
            "alive": alive,
            "busy": busy,
            "queued": self.jobs.qsize(),
            **self.counters,
        }

    def close(self) -> None:
        """Stop every worker; items still queued resolve to PoolClosed."""
        with self._close_lock:
            if self.closed:
                return
            self.closed = True
        while True:
            try:
                job = self.jobs.get_nowait()
            except queue.Empty:
                break
            if job is not None and job.future.set_running_or_notify_cancel():
                job.future.set_exception(PoolClosed("the worker pool closed before this item ran"))
        for _ in self.slots:
            self.jobs.put(None)  # no submit can add work once closed, so the drained queue has room
        deadline = time.monotonic() + 10
        for slot in self.slots:
            slot.join(timeout=max(0.1, deadline - time.monotonic()))
            if slot.is_alive():
                slot.stop_worker(kill=True)

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
