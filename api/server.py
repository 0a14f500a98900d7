"""Run the service with uvicorn: refuse an open bind without a token, share settings with worker processes, and
split the host's budget among them.

The admission lanes, the verifier pool, the sandbox pool and their queues are sized per host: with
`--workers N` each uvicorn worker takes a share of every setting in HOST_SETTINGS (split_budget: shares differ
by at most one and add up to the setting; a share is never below the setting's own minimum, so a setting
smaller than N, say PROCTOR_POOL_WORKERS=1 with 2 workers, gives each worker 1). Which share a worker takes
depends on the slot it holds: serve() makes a directory of N lock files and each worker locks the first free one
(flock) for its lifetime. A worker that dies frees its slot (the kernel drops the lock) and uvicorn's
replacement takes it, so the shares keep adding up to the host's budget.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import logging
import os
import shutil
import tempfile
from typing import TYPE_CHECKING

from proctor.api.budget import HOST_SETTINGS, setting_minimum, take, worker_budget
from proctor.api.metrics import MULTIPROC_ENV
from proctor.api.protocol import HTTP_PROTOCOL
from proctor.settings import Settings, get_settings

if TYPE_CHECKING:
    from fastapi import FastAPI

log = logging.getLogger(__name__)

APP_FACTORY = "proctor.api.server:create_worker_app"
SLOTS_ENV = "_PROCTOR_WORKER_SLOTS"
"""The directory of the workers' slot lock files, set by serve() for its uvicorn workers (not a setting)."""
LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")
GRACEFUL_SHUTDOWN_S = 10
KEEP_ALIVE_S = 5
"""Seconds an idle kept-alive connection stays open (uvicorn's timeout_keep_alive, its default made explicit)."""


def is_loopback(host: str) -> bool:
    """Whether host only accepts connections from this machine."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(settings: Settings) -> None:
    """Raise SystemExit with one readable line when the bind would expose the service without a token."""
    if not is_loopback(settings.host) and not settings.token:
        raise SystemExit(
            f"proctor: refusing to bind {settings.host} without PROCTOR_TOKEN "
            "(set PROCTOR_TOKEN, or bind 127.0.0.1)"
        )
    if settings.log_level.lower() not in LOG_LEVELS:
        raise SystemExit(
            f"proctor: invalid PROCTOR_LOG_LEVEL {settings.log_level!r}; use one of {', '.join(LOG_LEVELS)}"
        )


def check_sandbox(settings: Settings) -> None:
    """Raise SystemExit with one readable line when unjailed programs could reach the shared Redis's secrets."""
    # A `local` program runs as this user on the host: it can read PROCTOR_TOKEN, PROCTOR_CACHE_SECRET and the
    # Redis URL (its password) from its parent's /proc/<pid>/environ, then plant signed scores for itself.
    if settings.sandbox_backend == "local" and settings.redis_url:
        raise SystemExit(
            "proctor: refusing PROCTOR_SANDBOX_BACKEND=local with PROCTOR_REDIS_URL "
            "(unjailed programs could read the Redis password and cache secret; use nsjail or docker)"
        )


def export_settings(settings: Settings) -> None:
    """Write the settings to PROCTOR_* variables, so worker processes (uvicorn's and the pool's) read the same."""
    for name, value in settings.model_dump().items():
        key = f"PROCTOR_{name.upper()}"
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = str(value)


# The descriptor whose lock is this process's slot: kept open as long as the process lives.
_held_slot: list[int] = []


def claim_slot(directory: str, workers: int) -> int | None:
    """Lock the first free of `workers` slot files in `directory` for the life of this process; None if all are
    held (a rolling restart: the old worker still holds its slot while its replacement starts)."""
    for slot in range(workers):
        # O_CLOEXEC: a child (a pool worker, a sandbox) must not inherit the descriptor and with it the lock.
        fd = os.open(
            os.path.join(directory, f"worker-{slot}.lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600
        )
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        _forget_dead_holder(fd)
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        _held_slot.append(fd)
        return slot
    return None


def _forget_dead_holder(fd: int) -> None:
    """Drop the live gauges of the slot's previous holder if it died without doing so (SIGKILL, a crash), so
    /metrics stops adding a dead worker's pool and admission figures to the live ones."""
    with contextlib.suppress(OSError, ValueError):
        previous = int(os.pread(fd, 32, 0) or b"0")
        if (
            previous > 0
            and previous != os.getpid()
            and not _alive(previous)
            and os.environ.get(MULTIPROC_ENV)
        ):
            from prometheus_client import multiprocess

            multiprocess.mark_process_dead(previous)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process now has that pid
        return True
    return True


def create_worker_app() -> FastAPI:
    """uvicorn's app factory in each worker process: claim a slot, take its share of the host's budget, build the
    app with it."""
    from proctor.api.app import create_app

    host = get_settings()  # the host's settings, as serve() exported them
    directory = os.environ.get(SLOTS_ENV)
    slot = claim_slot(directory, host.workers) if directory else None
    if slot is None:
        log.warning(
            "no free worker slot (a rolling restart, or started outside `proctor serve`): this worker takes the "
            "smallest share of the host's budget, so the host may run one share over it for a while"
        )
    budget = worker_budget(host, slot)
    settings = host.model_copy(update=dict(budget.share))
    # Code that reads the process-wide settings (get_settings) and the pool's worker processes see the share too.
    export_settings(settings)
    get_settings.cache_clear()
    take(budget)
    app = create_app(settings)
    app.state.proctor.metrics.show_budget(budget.workers, budget.host, budget.share)
    return app


def serve(settings: Settings) -> None:
    """Serve until interrupted; with workers > 1 each uvicorn worker builds its own app from the environment."""
    check_bind(settings)
    check_sandbox(settings)
    import uvicorn

    export_settings(settings)
    common = {
        "host": settings.host,
        "port": settings.port,
        "log_level": settings.log_level.lower(),
        "timeout_graceful_shutdown": GRACEFUL_SHUTDOWN_S,
        "timeout_keep_alive": KEEP_ALIVE_S,
        "http": HTTP_PROTOCOL,  # drops clients that never finish their headers or send their body too slowly
    }
    if settings.workers == 1:
        from proctor.api.app import create_app

        app = create_app(settings)
        totals = {name: int(getattr(settings, name)) for name in HOST_SETTINGS}
        app.state.proctor.metrics.show_budget(1, totals, totals)
        uvicorn.run(app, **common)
        return
    for name in HOST_SETTINGS:
        total, minimum = int(getattr(settings, name)), setting_minimum(name)
        if total < settings.workers * minimum:
            log.warning(
                "PROCTOR_%s=%d is less than %d workers x %d: each worker takes %d, %d on this host",
                name.upper(),
                total,
                settings.workers,
                minimum,
                minimum,
                settings.workers * minimum,
            )
    # Counters and histograms from every worker are summed through files in this directory (metrics.py).
    metrics_dir = None
    if not os.environ.get(MULTIPROC_ENV):
        metrics_dir = tempfile.mkdtemp(prefix="proctor-metrics-")
        os.environ[MULTIPROC_ENV] = metrics_dir
    slots_dir = tempfile.mkdtemp(prefix="proctor-slots-")  # the workers' slot locks (claim_slot)
    os.environ[SLOTS_ENV] = slots_dir
    try:
        uvicorn.run(APP_FACTORY, factory=True, workers=settings.workers, **common)
    finally:
        shutil.rmtree(slots_dir, ignore_errors=True)
        os.environ.pop(SLOTS_ENV, None)
        if metrics_dir is not None:
            shutil.rmtree(metrics_dir, ignore_errors=True)
            os.environ.pop(MULTIPROC_ENV, None)
