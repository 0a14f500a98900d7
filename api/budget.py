"""The host's budget and one uvicorn worker's share of it: the settings sized per host (HOST_SETTINGS), split
among the workers of `proctor serve --workers N` (api/server.py claims the slots; /healthz reports the share).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from proctor.settings import Settings

HOST_SETTINGS: tuple[str, ...] = (
    "max_concurrency",
    "max_queue",
    "max_inline_concurrency",
    "max_inline_queue",
    "pool_workers",
    "pool_queue",
    "sandbox_workers",
    "sandbox_queue",
)
"""Settings that are a budget for the whole host, split among the uvicorn workers."""


def split_budget(total: int, parts: int, minimum: int = 0) -> list[int]:
    """`total` split into `parts` shares that differ by at most one (the larger ones first), each at least
    `minimum`; they add up to `total` unless `total` is below `parts * minimum`."""
    if parts < 1 or total < 0 or minimum < 0:
        raise ValueError(f"cannot split {total} into {parts} parts of at least {minimum}")
    base, extra = divmod(total, parts)
    return [max(minimum, base + (1 if index < extra else 0)) for index in range(parts)]


def setting_minimum(name: str) -> int:
    """The smallest value Settings accepts for `name` (its `ge` bound; 0 without one)."""
    for rule in Settings.model_fields[name].metadata:
        bound = getattr(rule, "ge", None)
        if isinstance(bound, int):
            return bound
    return 0


@dataclass(frozen=True)
class WorkerBudget:
    """One uvicorn worker's share of the host's budget: its slot (None: it found none free), the number of
    workers, and each HOST_SETTINGS value for the host and for this worker."""

    slot: int | None
    workers: int
    host: Mapping[str, int]
    share: Mapping[str, int]

    def report(self) -> dict[str, Any]:
        """The budget as /healthz shows it."""
        return {
            "slot": self.slot,
            "workers": self.workers,
            "host": dict(self.host),
            "share": dict(self.share),
        }


def worker_budget(host: Settings, slot: int | None) -> WorkerBudget:
    """The share of worker `slot` of `host.workers`; a worker without a slot takes the smallest share."""
    index = host.workers - 1 if slot is None else slot
    if not 0 <= index < host.workers:
        raise ValueError(f"slot {slot} is not one of {host.workers} workers")
    totals = {name: int(getattr(host, name)) for name in HOST_SETTINGS}
    share = {
        name: split_budget(total, host.workers, setting_minimum(name))[index]
        for name, total in totals.items()
    }
    return WorkerBudget(slot, host.workers, totals, share)


_current: list[WorkerBudget] = []  # this process's share, once create_worker_app took it


def budget_report(settings: Settings) -> dict[str, Any]:
    """This process's budget for /healthz: the share it took when serve() started it, else (an app built
    in-process) the whole of `settings`."""
    if _current:
        return _current[-1].report()
    totals = {name: int(getattr(settings, name)) for name in HOST_SETTINGS}
    return WorkerBudget(0, 1, totals, totals).report()


def take(budget: WorkerBudget) -> None:
    """Record the share this worker process took (what /healthz then reports)."""
    _current.append(budget)
