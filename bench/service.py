"""Service benchmark: the same text.match items in-process and over HTTP, and /v1/score latency under load.

Run with `make bench` (or `.venv/bin/python bench/service.py`). It starts a real uvicorn server on a free
loopback port, scores the same items in-process (Engine.score_batch) and through POST /v1/score/batch, checks
both give identical rewards, then measures /v1/score latency at 1, 16 and 64 concurrent clients. The result
cache is off on both sides so every item is really scored. Results are printed and appended to
bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import platform
import random
import statistics
import time

import httpx
from common import (  # bench/common.py: the script's folder is on sys.path
    append_results,
    free_port,
    git_commit,
    start_server,
)


def make_items(n: int, seed: int = 0) -> list[dict]:
    """n text.match requests in the formats models produce: boxed, Answer: lines, think blocks, regex, contains."""
    rng = random.Random(seed)
    items = []
    for i in range(n):
        gold = str(rng.randint(0, 10_000))
        answer = gold if rng.random() < 0.5 else str(int(gold) + rng.randint(1, 9))
        filler = " ".join(
            rng.choice(["so", "then", "we", "add", "the", "terms", "carefully"])
            for _ in range(rng.randint(20, 120))
        )
        kind = i % 4
        if kind == 0:
            response, reference = f"<think>{filler}</think> The result is \\boxed{{{answer}}}.", gold
        elif kind == 1:
            response, reference = f"{filler}\nAnswer: {answer}", {"answer": gold, "op": "eq"}
        elif kind == 2:
            response, reference = (
                f"{filler}\nFinal answer: {answer} units",
                {"answer": r"\d+ units", "op": "regex"},
            )
        else:
            response, reference = f"{filler} so the total is {answer}", {"answer": gold, "op": "contains"}
        items.append({"id": i, "verifier": "text.match", "response": response, "reference": reference})
    return items


def server_env() -> dict[str, str]:
    """The environment plus the cache off, quiet logs and room for 256 requests at once."""
    return {
        **os.environ,
        "PROCTOR_CACHE_SIZE": "0",
        "PROCTOR_LOG_LEVEL": "warning",
        "PROCTOR_MAX_CONCURRENCY": "256",
    }


def bench_in_process(items: list[dict]) -> tuple[float, list[float]]:
    """Items per second scoring the whole list with Engine.score_batch, and the rewards."""
    from proctor.engine import Engine
    from proctor.settings import Settings

    engine = Engine(Settings(cache_size=0))
    engine.score_batch(items[:200])  # warm imports and regex compilation paths
    started = time.perf_counter()
    results = engine.score_batch(items)
    elapsed = time.perf_counter() - started
    engine.close()
    return len(items) / elapsed, [r.reward for r in results]


def bench_http_batch(base: str, items: list[dict], chunk: int) -> tuple[float, list[float], int]:
    """Items per second through POST /v1/score/batch in chunks, the rewards, and the error count."""
    rewards: list[float] = []
    errors = 0
    with httpx.Client(base_url=base, timeout=120) as client:
        client.post("/v1/score/batch", json={"items": items[:200]}).raise_for_status()
        started = time.perf_counter()
        for start in range(0, len(items), chunk):
            response = client.post("/v1/score/batch", json={"items": items[start : start + chunk]})
            response.raise_for_status()
            for result in response.json()["results"]:
                if "error" in result or result["status"] != "ok":
                    errors += 1
                rewards.append(result.get("reward", -1.0))
        elapsed = time.perf_counter() - started
    return len(items) / elapsed, rewards, errors


async def _post_keepalive(host: str, port: int, bodies: list[bytes], latencies: list[float]) -> int:
    """POST each body to /v1/score over one keep-alive HTTP/1.1 connection; returns the count of non-ok answers.

    A minimal client on asyncio streams rather than httpx.AsyncClient: httpx's connection pool costs more CPU
    per request than the service does at 16+ connections, so it would measure itself, not the service.
    """
    reader, writer = await asyncio.open_connection(host, port)
    errors = 0
    try:
        for body in bodies:
            started = time.perf_counter()
            writer.write(
                b"POST /v1/score HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
            )
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.split(b"\r\n")
            length = next(
                int(line.split(b":")[1]) for line in lines if line.lower().startswith(b"content-length:")
            )
            payload = await reader.readexactly(length)
            latencies.append((time.perf_counter() - started) * 1000)
            if b" 200 " not in lines[0] or b'"status":"ok"' not in payload.replace(b" ", b""):
                errors += 1
    finally:
        writer.close()
    return errors


async def latency_at(port: int, items: list[dict], concurrency: int, requests: int) -> dict:
    """p50/p99 latency (ms) of single /v1/score calls with `concurrency` keep-alive clients in flight."""
    import json

    bodies = [json.dumps(item).encode() for item in items]
    per_client = max(1, requests // concurrency)
    latencies: list[float] = []
    started = time.perf_counter()
    errors = await asyncio.gather(
        *(
            _post_keepalive(
                "127.0.0.1",
                port,
                [bodies[(c * per_client + i) % len(bodies)] for i in range(per_client)],
                latencies,
            )
            for c in range(concurrency)
        )
    )
    elapsed = time.perf_counter() - started
    latencies.sort()
    return {
        "concurrency": concurrency,
        "requests": len(latencies),
        "p50_ms": statistics.median(latencies),
        "p99_ms": latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
        "rps": len(latencies) / elapsed,
        "errors": sum(errors),
    }


def main() -> None:
    """Run the benchmark and append its results to bench/RESULTS.md."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--chunk", type=int, default=1000, help="items per /v1/score/batch call")
    parser.add_argument("--latency-requests", type=int, default=3200)
    parser.add_argument("--no-write", action="store_true", help="print only, do not append to RESULTS.md")
    args = parser.parse_args()

    items = make_items(args.items)
    load_before = os.getloadavg()[0]
    in_rate, in_rewards = bench_in_process(items)
    port = free_port()
    server = start_server(port, server_env())
    base = f"http://127.0.0.1:{port}"
    try:
        http_rate, http_rewards, http_errors = bench_http_batch(base, items, args.chunk)
        latency = [asyncio.run(latency_at(port, items, c, args.latency_requests)) for c in (1, 16, 64)]
    finally:
        server.terminate()
        server.wait(timeout=30)

    load_after = os.getloadavg()[0]
    agree = sum(a == b for a, b in zip(in_rewards, http_rewards, strict=True))
    ratio = http_rate / in_rate
    lines = [
        f"## service: text.match in-process vs HTTP ({dt.date.today().isoformat()}, commit {git_commit()})",
        "",
        f"Machine: {os.cpu_count()} cores, Python {platform.python_version()}, 1-min load average "
        f"{load_before:.1f} before and {load_after:.1f} after; client and server share the machine. "
        f"{args.items:,} items, cache off, HTTP batches of {args.chunk}; latency from keep-alive HTTP/1.1 clients "
        "on asyncio streams (httpx's async pool was the bottleneck at 16+ connections). Reproduce: `make bench`.",
        "",
        "| path | items/s | errors |",
        "|---|---:|---:|",
        f"| in-process `Engine.score_batch` | {in_rate:,.0f} | 0 |",
        f"| HTTP `POST /v1/score/batch` | {http_rate:,.0f} | {http_errors} |",
        "",
        f"HTTP batch / in-process ratio: **{ratio:.2f}** (target ≥ 0.5). Rewards identical on {agree:,}/{len(items):,} items.",
        "",
        "| `/v1/score` concurrency | requests | p50 ms | p99 ms | req/s | errors |",
        "|---:|---:|---:|---:|---:|---:|",
        *[
            f"| {r['concurrency']} | {r['requests']} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['rps']:,.0f} | {r['errors']} |"
            for r in latency
        ],
        "",
    ]
    report = "\n".join(lines)
    print(report)
    if not args.no_write:
        append_results(report)


if __name__ == "__main__":
    main()
