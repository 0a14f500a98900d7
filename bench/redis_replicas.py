"""Replicas sharing Redis: the cache hit rate of a second replica re-scoring what the first scored, and what a
shared-cache hit costs.

Run with `.venv/bin/python bench/redis_replicas.py [--out FILE]`. It starts a private `redis-server` (no
persistence) on a free loopback port and two service processes sharing it, then:

1. replica A scores a mixed dataset (text.match inline, math in the worker pool) through /v1/score/batch;
2. replica B scores the same dataset: the share of `cached: true` scores is the second replica's hit rate;
3. one /v1/score at a time on B: items A scored that B has never seen (a shared-cache hit: local miss, one
   Redis GET), the same items again (a local hit), and items nobody scored (scored on B), p50/p99 each;
4. in process: TieredCache.get straight from Redis against the local LRU, without HTTP.

Every score of phase 2 must equal phase 1's (the script fails otherwise). Prints a markdown section, and
writes it to --out when given.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from common import free_port, git_commit, start_server  # bench/common.py: the script's folder is on sys.path
from service import make_items

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from proctor.cache import LRUCache, TieredCache  # noqa: E402 - after the repository joins sys.path
from proctor.contract import Score, Status  # noqa: E402
from proctor.redis_backend import SharedRedis  # noqa: E402


def math_items(n: int, start: int) -> list[dict]:
    """Math items in the worker pool: boxed answers, half of them right."""
    items = []
    for i in range(n):
        gold = f"\\frac{{{i + 1}}}{{{i + 2}}}"
        answer = gold if i % 2 == 0 else f"\\frac{{{i + 2}}}{{{i + 1}}}"
        items.append(
            {"id": start + i, "verifier": "math", "response": f"So \\boxed{{{answer}}}", "reference": gold}
        )
    return items


def batch(client: httpx.Client, base: str, items: list[dict], chunk: int = 250) -> tuple[list[dict], float]:
    started = time.perf_counter()
    results: list[dict] = []
    for offset in range(0, len(items), chunk):
        reply = client.post(f"{base}/v1/score/batch", json={"items": items[offset : offset + chunk]})
        reply.raise_for_status()
        results.extend(reply.json()["results"])
    return results, time.perf_counter() - started


def one_by_one(client: httpx.Client, base: str, items: list[dict]) -> tuple[list[float], int]:
    """Milliseconds per /v1/score, sequential on one connection, and how many answered cached."""
    latencies: list[float] = []
    cached = 0
    for item in items:
        started = time.perf_counter()
        reply = client.post(f"{base}/v1/score", json=item)
        latencies.append((time.perf_counter() - started) * 1000)
        reply.raise_for_status()
        cached += bool(reply.json()["cached"])
    return latencies, cached


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def start_redis(folder: str) -> tuple[subprocess.Popen, str]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("bench: redis-server is not installed")
    port = free_port()
    process = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            folder,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    url = f"redis://127.0.0.1:{port}/0"
    probe = SharedRedis(url)
    deadline = time.monotonic() + 20
    while not probe.ping():
        if time.monotonic() > deadline:
            raise SystemExit("bench: redis-server did not start")
        time.sleep(0.1)
    probe.close()
    return process, url


def in_process(url: str, n: int) -> dict[str, float]:
    """p50/p99 microseconds of TieredCache.get from Redis (local miss) and from the local LRU."""
    writer = TieredCache(LRUCache(n), SharedRedis(url), ttl_s=600)
    reader = TieredCache(LRUCache(n), SharedRedis(url), ttl_s=600)
    score = Score(verifier="math@1", status=Status.ok, reward=1.0, correct=True, reason="equivalent")
    for i in range(n):
        writer.put(f"k{i}", score)
    shared, local = [], []
    for i in range(n):
        started = time.perf_counter()
        assert reader.get(f"k{i}") is not None
        shared.append((time.perf_counter() - started) * 1e6)
    for i in range(n):
        started = time.perf_counter()
        assert reader.get(f"k{i}") is not None
        local.append((time.perf_counter() - started) * 1e6)
    writer.shared.close()
    reader.shared.close()
    return {
        "shared_p50": pct(shared, 0.5),
        "shared_p99": pct(shared, 0.99),
        "local_p50": pct(local, 0.5),
        "local_p99": pct(local, 0.99),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=2000, help="text.match items (math adds a tenth)")
    parser.add_argument("--single", type=int, default=300, help="items per one-at-a-time phase")
    parser.add_argument("--out", help="also write the markdown section here")
    args = parser.parse_args()

    dataset = make_items(args.items, seed=7) + math_items(args.items // 10, start=args.items)
    probes = make_items(args.single * 2, seed=8)
    shared_items, fresh_items = probes[: args.single], probes[args.single :]
    for item in fresh_items:  # distinct from everything A scores
        item["response"] += " (fresh)"

    folder = tempfile.mkdtemp(prefix="proctor-redis-bench-")
    redis_process, url = start_redis(folder)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("PROCTOR_")},
        "PROCTOR_REDIS_URL": url,
        "PROCTOR_LOG_LEVEL": "warning",
        "PROCTOR_POOL_WORKERS": "1",
    }
    ports = [free_port(), free_port()]
    servers = [start_server(port, env) for port in ports]
    first, second = (f"http://127.0.0.1:{port}" for port in ports)
    try:
        with httpx.Client(timeout=300) as client:
            scored, first_s = batch(client, first, dataset)
            rescored, second_s = batch(client, second, dataset)
            if [(s["status"], s["reward"]) for s in scored] != [(s["status"], s["reward"]) for s in rescored]:
                raise SystemExit("bench: the second replica's scores differ from the first's")
            hits = sum(bool(s["cached"]) for s in rescored)
            ok = sum(s["status"] == "ok" for s in scored)
            batch(client, first, shared_items)  # A scores them; B has never seen them
            shared_ms, shared_cached = one_by_one(client, second, shared_items)
            local_ms, local_cached = one_by_one(client, second, shared_items)
            fresh_ms, fresh_cached = one_by_one(client, second, fresh_items)
        micro = in_process(url, 2000)
    finally:
        for server in servers:
            server.terminate()
            server.wait(timeout=30)
        redis_process.kill()
        redis_process.wait()
        shutil.rmtree(folder, ignore_errors=True)

    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"## Replicas sharing Redis: cache hit rate and hit latency ({when}, commit {git_commit()})",
        "",
        f"`bench/redis_replicas.py` on {platform.machine()} with {os.cpu_count()} CPUs (shared with other jobs), "
        "a private redis-server 7 on loopback, two service processes (1 pool worker each).",
        "",
        f"- Second replica re-scoring the first's {len(dataset)} items ({args.items} text.match, "
        f"{args.items // 10} math; {ok} ok): **{hits}/{len(dataset)} cached = {hits / len(dataset):.1%}** "
        f"(every ok score; non-ok scores are never shared), same rewards. Batch time: first "
        f"{first_s:.2f} s, second {second_s:.2f} s.",
        "",
        "| one /v1/score at a time on replica B | cached | p50 ms | p99 ms |",
        "|---|---|---|---|",
        f"| shared-cache hit (A scored it; local miss, one Redis GET) | {shared_cached}/{len(shared_items)} "
        f"| {statistics.median(shared_ms):.2f} | {pct(shared_ms, 0.99):.2f} |",
        f"| local hit (the same items again) | {local_cached}/{len(shared_items)} "
        f"| {statistics.median(local_ms):.2f} | {pct(local_ms, 0.99):.2f} |",
        f"| miss (scored on B, text.match) | {fresh_cached}/{len(fresh_items)} "
        f"| {statistics.median(fresh_ms):.2f} | {pct(fresh_ms, 0.99):.2f} |",
        "",
        f"- In process, TieredCache.get of a Score: from Redis p50 {micro['shared_p50']:.0f} µs, p99 "
        f"{micro['shared_p99']:.0f} µs; from the local LRU p50 {micro['local_p50']:.1f} µs, p99 "
        f"{micro['local_p99']:.1f} µs.",
        "",
    ]
    report = "\n".join(lines)
    print(report)
    if args.out:
        Path(args.out).write_text(report)


if __name__ == "__main__":
    main()
