"""Admission control in lanes: each lane runs a bounded number of requests at once, lets a bounded number wait, and
turns the rest away with 429.

Two lanes, so cheap work never waits behind expensive work: `inline` for requests the engine scores on the event
loop (an inline verifier whose response, reference and options together are within `inline_max_chars`, e.g.
`text.match`: a fraction of a millisecond)
and `pool` for everything else (pool verifiers such as `code` and `math`, sandboxes, async judges, sessions, task
generation). With one shared lane, 120 clients sending code held every slot and a `text.match` request waited
seconds for one; now it takes an `inline` slot, which pool work never holds.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Literal

from proctor.contract import RequestError

if TYPE_CHECKING:
    from proctor.engine import Engine, Prepared
    from proctor.settings import Settings

Lane = Literal["inline", "pool"]
INLINE: Lane = "inline"
POOL: Lane = "pool"
LANES: tuple[Lane, ...] = (INLINE, POOL)


class Overloaded(Exception):
    """Every running slot of a lane is taken and its waiting queue is full; the client should retry later."""


class LaneLimit:
    """Bounded concurrency plus a bounded queue for one lane of one process's requests."""

    def __init__(self, name: str, max_concurrency: int, max_queue: int):
        if max_concurrency < 1 or max_queue < 0:
            raise ValueError("max_concurrency must be >= 1 and max_queue >= 0")
        self.name = name
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
                f"server busy: {self.running} {self.name} requests running and {self.queued} waiting"
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


class Admission:
    """One process's admission control: a `pool` lane (PROCTOR_MAX_CONCURRENCY, PROCTOR_MAX_QUEUE) and an
    `inline` lane (PROCTOR_MAX_INLINE_CONCURRENCY, PROCTOR_MAX_INLINE_QUEUE), each with its own slots and queue."""

    def __init__(
        self, max_concurrency: int, max_queue: int, inline_concurrency: int = 256, inline_queue: int = 1024
    ):
        self.lanes: dict[Lane, LaneLimit] = {
            POOL: LaneLimit(POOL, max_concurrency, max_queue),
            INLINE: LaneLimit(INLINE, inline_concurrency, inline_queue),
        }

    @classmethod
    def from_settings(cls, settings: Settings) -> Admission:
        """The lanes sized by the service's settings."""
        return cls(
            settings.max_concurrency,
            settings.max_queue,
            settings.max_inline_concurrency,
            settings.max_inline_queue,
        )

    def slot(self, lane: Lane = POOL) -> Any:
        """An async context manager holding one running slot of `lane`; raises Overloaded when its queue is full.

        The default is the pool lane: a route that cannot tell how costly its work is waits with the costly work."""
        return self.lanes[lane].slot()

    def stats(self) -> dict[str, Any]:
        """Running, waiting and turned-away requests summed over the lanes, and each lane's own figures."""
        lanes = {name: limit.stats() for name, limit in self.lanes.items()}
        totals = {
            key: sum(stats[key] for stats in lanes.values())
            for key in ("running", "queued", "max_concurrency", "max_queue", "rejected")
        }
        return {**totals, "lanes": lanes}


def lane_of(engine: Engine, item: Prepared) -> Lane:
    """The lane of one prepared item: `inline` exactly when the engine scores it on the event loop."""
    return INLINE if engine.runs_inline(item) else POOL


BATCH_SIZING_PER_ITEM = 256
"""Structure (`proctor.engine.Size.structure`) a batch may hold per item, above one item's inline_max_chars,
and still be sized for the inline lane: its lane is chosen on the event loop, so a batch of many mid-sized
references stops being walked and takes the pool lane (a plain text.match item holds about 60)."""


def lane_of_requests(engine: Engine, requests: Sequence[Any]) -> Lane:
    """The lane of a batch of raw score requests: `pool` if any item may run in the pool (or is not plain).

    Read from each item's verifier and size (response, reference and options, as `Engine.runs_inline` counts
    them) without preparing it (the batch prepares its items on a thread, inside its slot); an item naming no
    known verifier is an item error, which costs nothing."""
    # Imported here: the engine module pulls in the registry, and this module is imported by the app's errors.
    from proctor.engine import is_async, request_size
    from proctor.registry import get_verifier

    limit = engine.settings.inline_max_chars
    budget = limit + BATCH_SIZING_PER_ITEM * len(requests)
    for request in requests:
        if not isinstance(request, dict):
            continue  # an item error
        name = request.get("verifier")
        if not isinstance(name, str):
            continue  # an item error
        try:
            spec = get_verifier(name)
        except RequestError:
            continue  # an item error
        if spec.execution != "inline" or is_async(spec):
            return POOL
        size = request_size(request, limit)
        budget -= size.structure
        if size.total > limit or budget < 0 or not _plain(request.get("response")):
            return POOL
    return INLINE


def _plain(response: Any) -> bool:
    """Whether a response is text or a transcript of message objects; anything else is an item error that the
    pool lane takes, as it is not trusted to be cheap."""
    if isinstance(response, str):
        return True
    return isinstance(response, list) and all(isinstance(message, dict) for message in response)
