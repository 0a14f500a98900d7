"""Admission control: a bounded number of scoring requests run at once, a bounded number wait, the rest get 429."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class Overloaded(Exception):
    """Every running slot is taken and the waiting queue is full; the client should retry later."""


class Admission:
    """Bounded concurrency plus a bounded queue for one process's scoring requests."""

    def __init__(self, max_concurrency: int, max_queue: int):
        if max_concurrency < 1 or max_queue < 0:
            raise ValueError("max_concurrency must be >= 1 and max_queue >= 0")
        self.max_concurrency = max_concurrency
        self.max_queue = max_queue
        self.running = 0
        self.queued = 0
        self.rejected = 0
        self._free = asyncio.Semaphore(max_concurrency)

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold one running slot for the duration of the block; raises Overloaded when the queue is full."""
        # No await between the check and the queue increment, so the bound holds on one event loop.
        if (self.running >= self.max_concurrency or self.queued > 0) and self.queued >= self.max_queue:
            self.rejected += 1
            raise Overloaded(
                f"server busy: {self.running} scoring requests running and {self.queued} waiting"
            )
        self.queued += 1
        try:
            await self._free.acquire()
        finally:
            self.queued -= 1
        self.running += 1
        try:
            yield
        finally:
            self.running -= 1
            self._free.release()

    def stats(self) -> dict[str, int]:
        """Running and waiting requests, their bounds, and how many were turned away."""
        return {
            "running": self.running,
            "queued": self.queued,
            "max_concurrency": self.max_concurrency,
            "max_queue": self.max_queue,
            "rejected": self.rejected,
        }
