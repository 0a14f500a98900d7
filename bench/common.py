"""What every benchmark shares: where results go and which commit was measured."""

from __future__ import annotations

import subprocess
from pathlib import Path

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
