"""`proctor serve --workers 1` vs `--workers 2` on one host: throughput, text.match and math latency, and how the
host's budget is spread over the workers.

Run with `.venv/bin/python bench/serve_workers.py [--out FILE]` (about 2 minutes). Each row starts
`python -m proctor serve --workers W` on a free port with default settings (pool and sandbox workers = cores,
cache off) and drives it with `--clients` keep-alive clients for `--warmup` + `--duration` seconds, each client
alternating `text.match` (inline) and `math` (a pool verifier) items, every item different (bench/replicas_load.py's
client and items). Rows:

- `--workers 1`, this tree;
- `--workers 2`, this tree: the host's budget split (each worker half the pool workers, sandbox slots, admission);
- `--workers 2` on `--baseline-rev` (default: the commit before the split), each worker sized as if alone.

For each row it also counts the verifier pool's processes on the host and each uvicorn worker's share of the
CPU the server used in the measured window (the worker and its pool processes): with the split, a worker that
gets more connections than the other cannot use the other's idle pool workers.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
from common import free_port, git_commit  # bench/common.py: the script's folder is on sys.path
from replicas_load import ROOT, Tally, drive, export_tree, ms, percentile, wait_healthy, warm

BASELINE_REV = "9fdd8dd^"  # every uvicorn worker sized as if it were alone on the host


@contextlib.contextmanager
def serve(workers: int, tree: Path, logs: Path) -> Iterator[tuple[int, psutil.Process]]:
    """`proctor serve --workers N` from `tree` on a free port; yields the port and the server's process."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PROCTOR_")}
    env.pop("PYTHONPATH", None)  # the tree's own `proctor` package, first on the path as the working folder
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    port = free_port()
    env.update(PROCTOR_CACHE_SIZE="0", PROCTOR_LOG_LEVEL="warning", PROCTOR_PORT=str(port))
    log = (logs / f"serve-{tree.name}-{workers}.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "proctor", "serve", "--workers", str(workers)],
        cwd=tree,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_healthy(port)
        warm([port] * 4 * workers)  # fresh connections, so every worker has probably started its pool
        yield port, psutil.Process(process.pid)
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def uvicorn_workers(root: psutil.Process, workers: int) -> list[psutil.Process]:
    """The processes that serve requests: the server itself with one worker, else its spawned workers."""
    if workers == 1:
        return [root]
    return [child for child in root.children() if "spawn_main" in " ".join(child.cmdline())]


def pool_processes(worker: psutil.Process) -> list[psutil.Process]:
    """The verifier pool's processes of one worker."""
    return [child for child in worker.children() if "proctor.worker" in " ".join(child.cmdline())]


def cpu_seconds(worker: psutil.Process) -> float:
    """CPU seconds used so far by a worker and its live pool processes (sandboxes they waited on included)."""
    total = 0.0
    for process in [worker, *pool_processes(worker)]:
        with contextlib.suppress(psutil.NoSuchProcess):
            times = process.cpu_times()
            total += times.user + times.system + times.children_user + times.children_system
    return total


def row(label: str, workers: int, tree: Path, logs: Path, args: argparse.Namespace) -> str:
    """One table row: the clients against `proctor serve --workers N` of `tree`."""
    with serve(workers, tree, logs) as (port, root):
        servers = uvicorn_workers(root, workers)
        pools = [len(pool_processes(server)) for server in servers]

        async def measured() -> tuple[Tally, list[float], list[float]]:
            task = asyncio.create_task(
                drive([port], [(args.clients, ["text.match", "math"], 0.0)], args.duration, args.warmup)
            )
            await asyncio.sleep(args.warmup)
            before = [cpu_seconds(server) for server in servers]
            await asyncio.sleep(args.duration)
            after = [cpu_seconds(server) for server in servers]
            return await task, before, after

        tally, before, after = asyncio.run(measured())
    used = [end - start for start, end in zip(before, after, strict=True)]
    split = "/".join(f"{100 * value / max(sum(used), 1e-9):.0f}" for value in used)
    text, math = tally.latencies_ms["text.match"], tally.latencies_ms["math"]
    cells = [
        label,
        f"{sum(tally.in_window.values()) / args.duration:,.0f}",
        ms(percentile(text, 0.5)),
        ms(percentile(text, 0.99)),
        ms(percentile(math, 0.5)),
        ms(percentile(math, 0.99)),
        f"{tally.answered:,}",
        str(sum(tally.rejected.values())),
        str(tally.lost),
        str(sum(tally.not_ok.values())),
        f"{sum(pools)} ({'+'.join(map(str, pools))})",
        f"{sum(used) / args.duration:.2f}",
        # Requests per CPU-second the server used: comparable across rows even when other work takes the cores.
        f"{sum(tally.in_window.values()) / max(sum(used), 1e-9):,.0f}",
        split if workers > 1 else "—",
    ]
    print("  ".join(cells), flush=True)
    return "| " + " | ".join(cells) + " |"


def main() -> None:
    """Run the rows and print the markdown section."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--duration", type=float, default=15.0, help="measured seconds per row")
    parser.add_argument(
        "--warmup", type=float, default=3.0, help="seconds of load before the measured window"
    )
    parser.add_argument("--baseline-rev", default=BASELINE_REV, help="tree for the before row; empty: none")
    parser.add_argument("--rounds", type=int, default=1, help="times to run the rows, interleaved")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="proctor-serve-workers-"))
    logs = work / "logs"
    logs.mkdir()
    load_before = os.getloadavg()[0]
    started = time.monotonic()
    try:
        baseline = export_tree(args.baseline_rev, work) if args.baseline_rev else None
        rows = []
        for round_ in range(
            1, args.rounds + 1
        ):  # rows interleaved, so a change in the machine's load hits each
            tag = f" (round {round_})" if args.rounds > 1 else ""
            rows.append(row(f"`--workers 1`{tag}", 1, ROOT, logs, args))
            rows.append(row(f"`--workers 2`, split{tag}", 2, ROOT, logs, args))
            if baseline is not None:
                label = f"`--workers 2`, each sized alone (`{args.baseline_rev}`){tag}"
                rows.append(row(label, 2, baseline, logs, args))
    except BaseException:
        print(f"bench: server logs kept in {logs}", file=sys.stderr)
        raise
    total_s = time.monotonic() - started
    load_after = os.getloadavg()[0]
    shutil.rmtree(work, ignore_errors=True)
    lines = [
        f"## `proctor serve --workers N`: one host budget split over the workers ({dt.date.today().isoformat()}, "
        f"commit {git_commit()})",
        "",
        f"Machine: {os.cpu_count()} cores, shared with other engineers' work during the run (1-min load average "
        f"{load_before:.1f} before and {load_after:.1f} after), Python {platform.python_version()}; {total_s:.0f} s "
        "in all. Default settings (pool and sandbox workers = cores = 2 per host, admission 64 + 256 pool lane, "
        "256 + 1024 inline lane), cache off. "
        f"{args.clients} keep-alive clients, each alternating `text.match` and `math` items (every item different), "
        f"{args.warmup:g} s warm-up then {args.duration:g} s measured. Latency is the client's. Pool processes: "
        "the verifier pool's worker processes on the host (per uvicorn worker). CPU: cores the server used in the "
        "measured window (uvicorn workers and their pool processes), and requests answered per CPU-second of it; "
        "split: each uvicorn worker's part of it. "
        "Reproduce: `.venv/bin/python bench/serve_workers.py`.",
        "",
        "| server | answered/s | text p50 ms | text p99 ms | math p50 ms | math p99 ms | answered | 429 (retried) | lost | "
        "not ok | pool processes | CPU (cores) | answered per CPU-s | CPU split % |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---|",
        *rows,
        "",
    ]
    report = "\n".join(lines)
    print(report)
    if args.out:
        args.out.write_text(report)


if __name__ == "__main__":
    main()
