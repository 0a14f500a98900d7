"""Sandbox backends by name: `nsjail` (default), `docker`, and `local` (development only, chosen explicitly)."""

from __future__ import annotations

import importlib
import os
import threading

from ..job import Backend

# name -> "module:Class"; imported on first use so a missing optional dependency breaks only its backend.
BACKENDS: dict[str, str] = {
    "nsjail": "proctor.sandboxes.backends.nsjail:NsjailBackend",
    "docker": "proctor.sandboxes.backends.docker:DockerBackend",
    "local": "proctor.sandboxes.backends.local:LocalBackend",
}
DEFAULT = "nsjail"

_instances: dict[str, Backend] = {}
_lock = threading.Lock()


def default_backend_name() -> str:
    """The configured backend: PROCTOR_SANDBOX_BACKEND, else nsjail."""
    return os.environ.get("PROCTOR_SANDBOX_BACKEND", DEFAULT)


def get_backend(name: str | None = None) -> Backend:
    """The shared instance of a backend by name (None: the configured default); ValueError for unknown names."""
    name = name or default_backend_name()
    if name not in BACKENDS:
        raise ValueError(f"unknown sandbox backend {name!r}; choose one of {sorted(BACKENDS)}")
    with _lock:
        if name not in _instances:
            module, cls = BACKENDS[name].split(":")
            _instances[name] = getattr(importlib.import_module(module), cls)()
        return _instances[name]


def resolve_backend(backend: Backend | str | None) -> Backend:
    """A backend instance from an instance, a name, or None (PROCTOR_SANDBOX_BACKEND, else nsjail)."""
    if backend is None or isinstance(backend, str):
        return get_backend(backend)
    return backend
