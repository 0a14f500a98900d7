"""Helpers shared by the sandbox tests."""

from __future__ import annotations

from pathlib import Path


def processes_with(marker: str) -> list[int]:
    """Host pids whose command line contains the marker (to prove nothing of a job outlived it)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found
