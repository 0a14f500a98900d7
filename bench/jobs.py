"""Batch jobs through the service (`POST /v1/jobs` → done → results) against `proctor rescore` on the same file.

    .venv/bin/python bench/jobs.py [--rows 10000] [--workers 2] [--no-write]

Both paths score the same distinct rows (half `text.match`, half `math`) with the same number of pool workers,
back to back; the job's results must equal rescore's row for row (timings and `cached` aside). Appends a dated
section to bench/RESULTS.md unless --no-write.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from common import append_results, git_commit  # noqa: E402

from tests.conftest import ServerProcess, free_port, server_env  # noqa: E402

VOLATILE = ("elapsed_ms", "cached")


def make_rows(count: int) -> list[dict]:
    """Distinct rows (no cache can help): odd ids text.match (a third of them wrong), even ids math."""
    rows = []
    for i in range(count):
        if i % 2:
            reference = f"ans {i if i % 3 else -i}"
            rows.append({"id": i, "verifier": "text.match", "response": f"ans {i}", "reference": reference})
        else:
            rows.append(
                {"id": i, "verifier": "math", "response": f"so \\boxed{{{i}/2}}", "reference": str(i / 2)}
            )
    return rows


def stable(row: dict) -> dict:
    """A result row without the fields that differ run to run."""
    return {**row, "score": {k: v for k, v in row["score"].items() if k not in VOLATILE}}


def run(count: int, workers: int) -> dict:
    """Time rescore, then the same file as a job; returns the measurements."""
    work = Path(tempfile.mkdtemp(prefix="bench-jobs-"))
    source = work / "in.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in make_rows(count)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROCTOR_")}
    started = time.perf_counter()
    command = [sys.executable, "-m", "proctor", "rescore", str(source), "-o", str(work / "out.jsonl")]
    subprocess.run([*command, "--workers", str(workers)], check=True, env=env, capture_output=True)
    rescore_s = time.perf_counter() - started
    rescored = [json.loads(line) for line in (work / "out.jsonl").read_text().splitlines()]

    port = free_port()
    overrides = {
        "PROCTOR_POOL_WORKERS": workers,
        "PROCTOR_DATA_DIR": str(work / "data"),
        "PROCTOR_PLUGINS": "",
    }
    server = ServerProcess(server_env(port, **overrides), work / "server.log")
    server.wait_ready(120)
    try:
        with httpx.Client(base_url=server.base_url, timeout=300) as client:
            started = time.perf_counter()
            with source.open("rb") as handle:
                job = client.post("/v1/jobs", files={"file": ("in.jsonl", handle)}).json()
            while (view := client.get(f"/v1/jobs/{job['job_id']}").json())["status"] in ("queued", "running"):
                time.sleep(0.1)
            done_s = time.perf_counter() - started
            results = client.get(f"/v1/jobs/{job['job_id']}/results")
            total_s = time.perf_counter() - started
    finally:
        server.stop()
    lines = [json.loads(line) for line in results.text.splitlines()]
    return {
        "status": view["status"],
        "rescore_s": rescore_s,
        "job_s": done_s,
        "job_with_results_s": total_s,
        "equal": [stable(r) for r in lines] == [stable(r) for r in rescored],
    }


def main() -> None:
    """Measure, print the table and append it to bench/RESULTS.md."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    got = run(args.rows, args.workers)
    load = os.getloadavg()[0]
    report = "\n".join(
        [
            f"## Batch jobs through the service vs `proctor rescore` ({time.strftime('%Y-%m-%d')}, "
            f"commit {git_commit()})",
            "",
            f"`.venv/bin/python bench/jobs.py --rows {args.rows} --workers {args.workers}`: {args.rows:,} distinct "
            f"rows (half text.match, half math), {args.workers} pool workers each, load average {load:.1f} at the "
            "end. The job's time runs from the upload until `GET /v1/jobs/{id}` says done; rescore's includes "
            "the interpreter and pool start-up.",
            "",
            "| path | seconds | rows/s |",
            "|---|---:|---:|",
            f"| `proctor rescore` | {got['rescore_s']:.1f} | {args.rows / got['rescore_s']:,.0f} |",
            f"| job until done | {got['job_s']:.1f} | {args.rows / got['job_s']:,.0f} |",
            f"| job with its results streamed | {got['job_with_results_s']:.1f} | "
            f"{args.rows / got['job_with_results_s']:,.0f} |",
            "",
            f"Job status `{got['status']}`; results equal rescore's row for row: {got['equal']}.",
            "",
        ]
    )
    print(report)
    if not args.no_write:
        append_results(report)


if __name__ == "__main__":
    main()
