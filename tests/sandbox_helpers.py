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


def setsid_daemon_program(marker: str) -> str:
    """Python that double-forks a setsid daemon (`sleep MARKER`), prints "up", and exits: it must die with the job."""
    return f"""
        import os
        r, w = os.pipe()
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.write(w, b"up")
                os.execv("/bin/sleep", ["sleep", "{marker}"])
            os._exit(0)
        os.close(w)
        print(os.read(r, 2).decode())
    """
