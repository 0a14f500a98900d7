"""What a dead process left of its sandboxes, released by the process that knows it died.

A pool worker killed with SIGKILL (a verifier past its deadline) runs no clean-up of its own: the cgroups of its
warm slots and running command stay (with the command's program still running in one), and so do its slot and
job directories under /dev/shm with their tmpfs mounts. Their names carry the worker's pid (cgroups.py,
backends/runner.private_dir), so the pool releases them right after reaping the worker.
"""

from __future__ import annotations

import logging

from .backends.runner import sweep_private_dirs
from .cgroups import Cgroups

log = logging.getLogger(__name__)


def release_process(pid: int) -> int:
    """Kill what still runs in the cgroups of the (dead, reaped) process `pid`, remove those cgroups, and
    unmount and delete its private directories; returns how many things were removed. Never raises."""
    removed = 0
    try:
        removed += Cgroups().sweep(owner=pid)
    except Exception:  # noqa: BLE001 - clean-up must not break the caller
        log.warning("could not sweep the cgroups of process %d", pid, exc_info=True)
    try:
        removed += sweep_private_dirs(owner=pid)
    except Exception:  # noqa: BLE001
        log.warning("could not sweep the directories of process %d", pid, exc_info=True)
    return removed
