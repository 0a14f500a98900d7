"""Tool sessions over HTTP: steps per second and step latency for the `python` tool, and sessions held open.

Run with `.venv/bin/python bench/sessions.py` (add `--no-write` to print only). It starts one server with default
settings on a free loopback port (the sandbox is the configured backend, nsjail by default) and drives
`tool.math_python` (stateless: a fresh sandboxed process per call) and `tool.math_python_persistent` (one jailed
interpreter per session, started by the first call) sessions through `/v1/sessions` with an async httpx client,
as a trainer's rollout workers would: at each concurrency, SESSIONS sessions, each CALLS steps that run a small
Python program and a final answer step, graded by the math verifier. Reported per environment and concurrency:
steps per second (all steps), and p50/p99 latency of the first tool step, the later tool steps and the answer
step, as the client sees them. Then it opens HELD sessions without closing them and reports the server's resident memory before
and after (bytes per open session), and that the store's bound answers 429 past it.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import time
from pathlib import Path

import httpx
from common import append_results, free_port, git_commit, start_server  # bench/: on sys.path

SESSIONS = 64
CALLS = 3
CONCURRENCY = (1, 8, 32)
ENVIRONMENTS = ("tool.math_python", "tool.math_python_persistent")
HELD = 5_000
TASK = {"prompt": "What is the sum of the squares of 1..100?", "reference": "338350"}
CODE = "print(sum(i * i for i in range(1, 101)))"


def call(code: str, index: int) -> dict:
    arguments = json.dumps({"code": code})
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": f"c{index}", "type": "function", "function": {"name": "python", "arguments": arguments}}
        ],
    }


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def one_session(
    client: httpx.AsyncClient,
    environment: str,
    tool_ms: list[float],
    first_ms: list[float],
    answer_ms: list[float],
) -> float:
    made = await client.post("/v1/sessions", json={"environment": environment, "task": TASK})
    made.raise_for_status()
    sid = made.json()["session_id"]
    for index in range(CALLS):
        started = time.perf_counter()
        step = await client.post(
            f"/v1/sessions/{sid}/step", json={"message": call(CODE, index), "step": index + 1}
        )
        (first_ms if index == 0 else tool_ms).append((time.perf_counter() - started) * 1000)
        step.raise_for_status()
        assert step.json()["observations"][0]["content"] == "338350", step.text
    started = time.perf_counter()
    final = await client.post(
        f"/v1/sessions/{sid}/step",
        json={"message": {"role": "assistant", "content": "\\boxed{338350}"}, "step": CALLS + 1},
    )
    answer_ms.append((time.perf_counter() - started) * 1000)
    final.raise_for_status()
    await client.delete(f"/v1/sessions/{sid}")
    return final.json()["score"]["reward"]


async def run_level(base: str, environment: str, concurrency: int) -> dict:
    tool_ms: list[float] = []
    first_ms: list[float] = []
    answer_ms: list[float] = []
    gate = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency + 4, max_keepalive_connections=concurrency + 4)
    async with httpx.AsyncClient(base_url=base, timeout=120, limits=limits) as client:

        async def guarded() -> float:
            async with gate:
                return await one_session(client, environment, tool_ms, first_ms, answer_ms)

        started = time.perf_counter()
        rewards = await asyncio.gather(*(guarded() for _ in range(SESSIONS)))
        seconds = time.perf_counter() - started
    steps = len(tool_ms) + len(first_ms) + len(answer_ms)
    return {
        "environment": environment,
        "concurrency": concurrency,
        "first_p50": percentile(first_ms, 0.5),
        "first_p99": percentile(first_ms, 0.99),
        "steps": steps,
        "seconds": seconds,
        "steps_per_s": steps / seconds,
        "tool_p50": percentile(tool_ms, 0.5),
        "tool_p99": percentile(tool_ms, 0.99),
        "answer_p50": percentile(answer_ms, 0.5),
        "answer_p99": percentile(answer_ms, 0.99),
        "rewards_ok": sum(1 for r in rewards if r == 1.0),
    }


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def hold(base: str, pid: int) -> dict:
    before = rss_mb(pid)
    async with httpx.AsyncClient(base_url=base, timeout=60) as client:
        gate = asyncio.Semaphore(32)

        async def create(index: int) -> int:
            async with gate:
                body = {"environment": "tool.math_python", "task": {"seed": index, "split": "train"}}
                return (await client.post("/v1/sessions", json=body)).status_code

        started = time.perf_counter()
        statuses = await asyncio.gather(*(create(i) for i in range(HELD)))
        seconds = time.perf_counter() - started
    after = rss_mb(pid)
    return {
        "held": sum(1 for s in statuses if s == 201),
        "seconds": seconds,
        "rss_before": before,
        "rss_after": after,
        "kib_per_session": (after - before) * 1024 / max(1, HELD),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-write", action="store_true", help="print the report without appending it")
    args = parser.parse_args()
    env = {key: value for key, value in os.environ.items() if not key.startswith("PROCTOR_")}
    env["PROCTOR_LOG_LEVEL"] = "warning"
    port = free_port()
    server = start_server(port, env)
    base = f"http://127.0.0.1:{port}"
    try:
        for environment in ENVIRONMENTS:  # warm-up: the math verifier's worker pool, the sandbox slots
            asyncio.run(run_level(base, environment, 4))
        levels = [
            asyncio.run(run_level(base, environment, concurrency))
            for environment in ENVIRONMENTS
            for concurrency in CONCURRENCY
        ]
        held = asyncio.run(hold(base, server.pid))
    finally:
        server.terminate()
        server.wait(timeout=30)
    rows = "\n".join(
        f"| `{r['environment']}` | {r['concurrency']} | {r['steps']} | {r['steps_per_s']:.1f} "
        f"| {r['first_p50']:.0f} | {r['first_p99']:.0f} | {r['tool_p50']:.0f} | {r['tool_p99']:.0f} "
        f"| {r['answer_p50']:.0f} | {r['answer_p99']:.0f} | {r['rewards_ok']}/{SESSIONS} |"
        for r in levels
    )
    report = f"""## Tool sessions: `tool.math_python` and `tool.math_python_persistent` over HTTP ({dt.date.today()}, commit {git_commit()})

`bench/sessions.py`: one server with default settings (sandbox backend: {env.get("PROCTOR_SANDBOX_BACKEND", "nsjail")}), on
{os.cpu_count()} CPUs ({platform.machine()}, Python {platform.python_version()}). At each concurrency, {SESSIONS} sessions,
each {CALLS} tool steps (stateless: one fresh sandboxed process per call; persistent: one jailed interpreter per
session, started by its first call and killed when the session is deleted) and one answer step
(graded by the math verifier; every session gives the same answer, so after the first one the answer step is a
result-cache hit: it measures the session machinery, not the math verifier), closed afterwards. Latency is per
step, as the client sees it, in ms. At most PROCTOR_SANDBOX_WORKERS tool calls run at once per process; a
persistent session's answer step also kills its interpreter's jail before it answers.

| environment | concurrent sessions | steps | steps/s | first call p50 | first call p99 | later calls p50 | later calls p99 | answer p50 | answer p99 | rewarded 1 |
|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|
{rows}

Sessions held open at once: {held["held"]} of {HELD} opened in {held["seconds"]:.1f} s; the server's resident
memory went from {held["rss_before"]:.0f} MiB to {held["rss_after"]:.0f} MiB, about {held["kib_per_session"]:.1f} KiB
per open session (a stateless session holds its record only: the task, the transcript and the step log). The
store holds at most 10,000 open sessions per process (`MAX_OPEN_SESSIONS`); past that `POST /v1/sessions` is a 429
with Retry-After.
"""
    print(report)
    if not args.no_write:
        append_results(report)


if __name__ == "__main__":
    main()
