"""Rows per second of `proctor rescore`: the local engine against `--engine ray`, on this machine, one run.

Run with `.venv/bin/python bench/rescore_engines.py` (a few minutes; `--math-rows N`, `--text-rows N`,
`--repeats R`, `--out FILE`). Each measurement is one whole `python -m proctor rescore` command, timed from
its start to its exit, on the same input file:

- local: the in-process engine and its worker pool (one worker per CPU), the default;
- ray (own instance): `--engine ray` without `--address`, so the command starts a local Ray instance with
  one CPU per CPU of this machine, and stops it; its start-up is part of the time;
- ray (running head): `--engine ray --address` against a head this script starts once beforehand (`ray start
  --head`, same CPUs), as on a cluster: the time includes joining it and starting the job's workers.

Two datasets with no repeated item (so no run is helped by a cache): `math` (pool-executed, CPU-bound: values
of fractions and expressions, half right) and `text.match` (inline, about 0.2 ms an item). Configurations run
in a rotated order in each repeat; the table gives the median rows/s over repeats and its ratio to local.
The machine is shared: the load average at start and end is printed with the table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import free_port, git_commit  # noqa: E402

RAY = Path(sys.executable).with_name("ray")


def math_rows(n: int) -> list[dict[str, Any]]:
    """Fractions and sums by value: `\\boxed{a/b}` against `\\frac{ka}{kb}`, every second one off by one."""
    rows = []
    for i in range(n):
        a, b, k = i + 1, i % 97 + 2, i % 5 + 2
        answer = f"{a}/{b}" if i % 2 == 0 else f"{a + 1}/{b}"
        rows.append(
            {
                "id": i,
                "response": f"Adding the parts gives \\boxed{{{answer}}}",
                "reference": f"\\frac{{{a * k}}}{{{b * k}}}",
            }
        )
    return rows


def text_rows(n: int) -> list[dict[str, Any]]:
    """Final-answer lines, every third one wrong."""
    return [
        {"id": i, "response": f"So...\nAnswer: {i}", "reference": str(i + (i % 3 == 0))} for i in range(n)
    ]


def environment(token: str) -> dict[str, str]:
    """This environment without PROCTOR_* and RAY_* settings from outside, with a Ray token of the run's own."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PROCTOR_", "RAY_"))}
    env.update(PYTHONPATH=str(ROOT), RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token, RAY_USAGE_STATS_ENABLED="0")
    return env


def start_head(env: dict[str, str], cpus: int, temp_dir: str) -> tuple[subprocess.Popen, str]:
    """`ray start --head` in its own process group; returns the starter process and the head's address."""
    port = free_port()
    starter = subprocess.Popen(
        [
            str(RAY), "start", "--head", f"--port={port}", f"--num-cpus={cpus}", "--include-dashboard=false",
            f"--dashboard-port={free_port()}", f"--dashboard-agent-listen-port={free_port()}",
            f"--temp-dir={temp_dir}", "--disable-usage-stats",
        ],
        env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    output, _ = starter.communicate(timeout=300)
    if starter.returncode != 0:
        raise SystemExit(f"bench: ray start --head failed:\n{output}")
    return starter, f"127.0.0.1:{port}"


def stop_group(pgid: int) -> None:
    """TERM, then KILL, the head's process group."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        for _ in range(50):
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)


def timed_rescore(
    data: Path, verifier: str, extra: list[str], env: dict[str, str], workdir: Path, rows: int
) -> float:
    """Seconds one whole `proctor rescore` command takes; checks it scored every row."""
    out = workdir / "out.jsonl"
    summary = workdir / "summary.json"
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "proctor", "rescore", str(data), "-o", str(out), "--verifier", verifier,
         "--force", "--no-progress", "--summary-json", str(summary), *extra],
        env=env, capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"bench: rescore {' '.join(extra)} failed:\n{result.stderr}")
    counts = json.loads(summary.read_text())
    if counts["rows"] != rows or counts.get("status", {}).get("ok") != rows:
        raise SystemExit(f"bench: rescore {' '.join(extra)} did not score every row ok: {counts}")
    return elapsed


def main() -> None:
    """Measure and print the table (and write it to --out)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--math-rows", type=int, default=4000)
    parser.add_argument("--text-rows", type=int, default=40000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, help="also write the markdown section here")
    args = parser.parse_args()

    cpus = os.cpu_count() or 1
    env = environment(secrets.token_hex(32))
    workdir = Path(tempfile.mkdtemp(prefix="rescore-bench-"))
    ray_temp = tempfile.mkdtemp(prefix="rbh", dir="/tmp")  # Ray's socket paths must stay short
    load_start = os.getloadavg()
    starter, address = start_head(env, cpus, ray_temp)
    try:
        datasets = {"math": math_rows(args.math_rows), "text.match": text_rows(args.text_rows)}
        configs = {
            "local": [],
            "ray (own instance)": ["--engine", "ray"],
            "ray (running head)": ["--engine", "ray", "--address", address],
        }
        times: dict[tuple[str, str], list[float]] = {}
        for verifier, rows in datasets.items():
            data = workdir / f"{verifier}.jsonl"
            data.write_text("".join(json.dumps(row) + "\n" for row in rows))
            names = list(configs)
            for repeat in range(args.repeats):
                order = names[repeat % len(names) :] + names[: repeat % len(names)]
                for name in order:
                    seconds = timed_rescore(data, verifier, configs[name], env, workdir, len(rows))
                    times.setdefault((verifier, name), []).append(seconds)
                    print(f"{verifier:<11} {name:<19} {len(rows) / seconds:8.1f} rows/s ({seconds:.1f} s)")
    finally:
        stop_group(starter.pid)
        shutil.rmtree(ray_temp, ignore_errors=True)
        shutil.rmtree(workdir, ignore_errors=True)
    load_end = os.getloadavg()

    lines = [
        "## `proctor rescore`: local engine vs `--engine ray` (bench/rescore_engines.py)",
        "",
        f"Commit {git_commit()}, {platform.machine()}, {cpus} CPUs, Python {platform.python_version()}; "
        f"{args.repeats} repeats, median rows/s of the whole command (start-up included); load average "
        f"{load_start[0]:.1f} at start, {load_end[0]:.1f} at end (a shared machine).",
        "",
        "| dataset | rows | engine | rows/s (median) | seconds (median) | vs local |",
        "|---|---:|---|---:|---:|---:|",
    ]
    for verifier, rows in datasets.items():
        local = statistics.median(len(rows) / s for s in times[(verifier, "local")])
        for name in configs:
            runs = times[(verifier, name)]
            rate = statistics.median(len(rows) / s for s in runs)
            lines.append(
                f"| {verifier} | {len(rows)} | {name} | {rate:.1f} | {statistics.median(runs):.1f} "
                f"| {rate / local:.2f}x |"
            )
    lines += ["", "Reproduce: `.venv/bin/python bench/rescore_engines.py`", ""]
    report = "\n".join(lines)
    print(report)
    if args.out:
        args.out.write_text(report)


if __name__ == "__main__":
    main()
