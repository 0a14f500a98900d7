"""What the routes share: settings, the engine, admission control, metrics and the sandbox pool, on `app.state.proctor`."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request

from proctor.api.admission import Admission
from proctor.api.metrics import Metrics
from proctor.engine import Engine
from proctor.sandboxes.pool import SandboxPool
from proctor.settings import Settings

log = logging.getLogger(__name__)

SANDBOX_RECHECK_S = 10.0
DOCTOR_TTL_S = 600.0


class SandboxUnavailable(Exception):
    """The configured sandbox backend does not work here (the message says why)."""


@dataclass
class ServiceState:
    """One app's service objects; `engine` is set by the lifespan, the sandbox pool on first use."""

    settings: Settings
    admission: Admission
    metrics: Metrics
    engine: Engine | None = None
    verifiers: list[dict[str, Any]] = field(default_factory=list)
    sandbox_pool: SandboxPool | None = None
    sandbox_unavailable: str | None = None
    _sandbox_checked: float = field(default=float("-inf"), repr=False)
    _sandbox_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    doctor_cached: dict[str, Any] | None = None
    _doctor_at: float = field(default=float("-inf"), repr=False)
    _doctor_lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)

    def require_engine(self) -> Engine:
        """The engine; only missing if the app is served without running its lifespan."""
        if self.engine is None:
            raise RuntimeError("the app's lifespan has not run: serve it with uvicorn (lifespan on)")
        return self.engine

    async def sandbox(self) -> SandboxPool:
        """The sandbox pool, started on first use; raises SandboxUnavailable when the backend does not work here."""
        pool = self.sandbox_pool
        if pool is None:
            # Starting checks the backend (nsjail runs a probe), so keep it off the event loop.
            pool = await asyncio.to_thread(self._start_sandbox)
        return pool

    def _start_sandbox(self) -> SandboxPool:
        with self._sandbox_lock:
            if self.sandbox_pool is not None:
                return self.sandbox_pool
            # A backend that failed its check is checked again only every few seconds, not on every request.
            if (
                self.sandbox_unavailable is not None
                and time.monotonic() - self._sandbox_checked < SANDBOX_RECHECK_S
            ):
                raise SandboxUnavailable(self.sandbox_unavailable)
            self._sandbox_checked = time.monotonic()
            name = self.settings.sandbox_backend
            try:
                # Imported here so a service that never runs code never loads a backend (or the docker SDK).
                from proctor.sandboxes.backends import get_backend

                backend = get_backend(name)
                ok, reason = backend.available()
            except Exception as exc:  # a backend that cannot even be built is unavailable, not a 500
                log.exception("sandbox backend %s could not be started", name)
                ok, reason = False, f"{type(exc).__name__}: {exc}"
            if not ok:
                self.sandbox_unavailable = f"sandbox backend {name} is unavailable: {reason}"
                log.error("%s", self.sandbox_unavailable)
                raise SandboxUnavailable(self.sandbox_unavailable)
            self.sandbox_unavailable = None
            self.sandbox_pool = SandboxPool(
                backend,
                self.settings.sandbox_workers,
                self.settings.sandbox_queue,
                on_result=self.metrics.observe_sandbox_result,
            )
            return self.sandbox_pool

    def sandbox_stats(self) -> dict[str, Any] | None:
        """The sandbox pool's stats, or None before it starts."""
        pool = self.sandbox_pool
        return pool.stats() if pool is not None else None

    def close_sandbox(self) -> None:
        """Stop the sandbox pool if it started."""
        with self._sandbox_lock:
            pool, self.sandbox_pool = self.sandbox_pool, None
        if pool is not None:
            pool.close()

    async def doctor_report(self) -> dict[str, Any]:
        """Which backends and toolchains work here: run in a thread at most once per DOCTOR_TTL_S, then cached."""
        async with self._doctor_lock:  # concurrent callers share one run
            if self.doctor_cached is None or time.monotonic() - self._doctor_at > DOCTOR_TTL_S:
                self.doctor_cached = await asyncio.to_thread(_doctor_summary, self.settings.sandbox_backend)
                self._doctor_at = time.monotonic()
            return self.doctor_cached

    def refresh_gauges(self) -> None:
        """Copy admission, verifier pool and sandbox pool state into the metric gauges."""
        engine = self.engine
        pool = engine.pool.stats() if engine is not None and engine.pool_started else None
        self.metrics.refresh(self.admission.stats(), pool, self.sandbox_stats())


def _doctor_summary(backend: str) -> dict[str, Any]:
    """A compact doctor report (what works, what does not and why); a report that fails says so."""
    try:
        from proctor.sandboxes.doctor import doctor_report  # runs compilers: only imported when asked for

        report = doctor_report(backend=backend)
    except Exception as exc:
        log.exception("the sandbox doctor report failed")
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    return {
        "ok": report["ok"],
        "default_backend": report["default_backend"],
        "backends": {item["name"]: item["ok"] for item in report["backends"]},
        "languages": {item["name"]: item["ok"] for item in report["languages"]},
        "problems": report["problems"],
        "seconds": report["seconds"],
    }


async def get_state(request: Request) -> ServiceState:
    """The service state of the app serving this request (a FastAPI dependency).

    `async` so FastAPI calls it on the event loop: a plain `def` dependency is run on its thread pool, a thread
    hop (and a wait for a free thread) on every request, for an attribute read."""
    return request.app.state.proctor
