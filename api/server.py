"""Run the service with uvicorn: refuse an open bind without a token, share settings with worker processes."""

from __future__ import annotations

import ipaddress
import os
import shutil
import tempfile

from proctor.api.metrics import MULTIPROC_ENV
from proctor.api.protocol import HTTP_PROTOCOL
from proctor.settings import Settings

APP_FACTORY = "proctor.api.app:create_app"
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


def export_settings(settings: Settings) -> None:
    """Write the settings to PROCTOR_* variables, so worker processes (uvicorn's and the pool's) read the same."""
    for name, value in settings.model_dump().items():
        key = f"PROCTOR_{name.upper()}"
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = str(value)


def serve(settings: Settings) -> None:
    """Serve until interrupted; with workers > 1 each uvicorn worker builds its own app from the environment."""
    check_bind(settings)
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

        uvicorn.run(create_app(settings), **common)
        return
    # Counters and histograms from every worker are summed through files in this directory (metrics.py).
    created = None
    if not os.environ.get(MULTIPROC_ENV):
        created = tempfile.mkdtemp(prefix="proctor-metrics-")
        os.environ[MULTIPROC_ENV] = created
    try:
        uvicorn.run(APP_FACTORY, factory=True, workers=settings.workers, **common)
    finally:
        if created is not None:
            shutil.rmtree(created, ignore_errors=True)
            os.environ.pop(MULTIPROC_ENV, None)
