"""What every benchmark shares: where results go, which commit was measured, and starting a server."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "RESULTS.md"
HEADER = "# Benchmark results\n\nEach section is appended by the benchmark that measured it.\n\n"


def git_commit() -> str:
    """The short hash of the commit being measured, or 'unknown' outside a git checkout."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
        )
    except OSError:
        return "unknown"
    return out.stdout.strip() or "unknown"


def append_results(report: str) -> None:
    """Append one benchmark's markdown section to bench/RESULTS.md (creating it with its header)."""
    header = "" if RESULTS.exists() else HEADER
    with RESULTS.open("a") as out:
        out.write(header + report + "\n")


def free_port() -> int:
    """A free TCP port on loopback."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(port: int, env: dict[str, str]) -> subprocess.Popen:
    """Start `python -m proctor.api` on port with exactly env (PROCTOR_PORT set) and wait until /healthz answers."""
    server = subprocess.Popen(
        [sys.executable, "-m", "proctor.api"], cwd=ROOT, env={**env, "PROCTOR_PORT": str(port)}
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return server
        except httpx.HTTPError:
            time.sleep(0.2)
    server.kill()
    raise SystemExit("bench: the server did not come up")
