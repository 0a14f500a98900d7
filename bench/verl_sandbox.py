"""verl's SandboxFusion client against one Proctor server's `/run_code` at verl's real concurrency.

Run with `.venv/bin/python bench/verl_sandbox.py` (add `--no-write` to print only; `make setup` installs the
verl wheel it reads, without verl's dependencies). It starts one server with default settings on a free loopback
port and scores 512 Python completions, each with 2 test cases (1024 requests), through verl's own
`verl.utils.reward_score.sandbox_fusion.compute_score` (loaded from the installed wheel's files: importing
`verl` itself needs ray). As verl's reward loop runs it: 8 reward workers (`reward.num_workers`), each with its
own semaphore of 64 (`sandbox_fusion.max_concurrent`), so up to 512 requests are in flight at once. Half the
completions are right (every test passes: reward 1.0) and half wrong (a wrong answer on every test, or a
runtime error: reward 0.0). Reported: misjudged items (a right one below 1.0 or a wrong one above 0.0), lost
test cases (verl's API error, -1), latency of one completion's scoring as verl sees it (p50/p99, retries
included: per test case, timed inside verl's semaphore, and per completion), throughput, and how many 504s
the server sent (verl retried them).
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata
import importlib.util
import json
import logging
import os
import platform
import statistics
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType

import httpx
from common import (  # bench/common.py: the script's folder is on sys.path
    append_results,
    free_port,
    git_commit,
    start_server,
)

from proctor.settings import Settings

VERL_VERSION = "0.9.1"  # the Makefile's VERL_VERSION
REWARD_WORKERS = 8  # verl's reward.num_workers default
MAX_CONCURRENT = 64  # verl's sandbox_fusion.max_concurrent default
DEADLINE_S = 540.0  # the whole run's bound
QUEUE_WAIT_S = Settings.model_fields["run_code_queue_wait_s"].default  # the server runs with the defaults

# (right, wrong, runtime error) programs for three problems; each problem's two tests.
PROBLEMS = [
    (
        "a, b = map(int, input().split())\nprint(a + b)\n",
        "a, b = map(int, input().split())\nprint(a - b)\n",
        {"inputs": ["1 2\n", "40 2\n"], "outputs": ["3\n", "42\n"]},
    ),
    (
        "n = int(input())\nprint(sum(range(1, n + 1)))\n",
        "n = int(input())\nprint(sum(range(1, n)))\n",
        {"inputs": ["10\n", "100\n"], "outputs": ["55\n", "5050\n"]},
    ),
    (
        "s = input().strip()\nprint(s[::-1])\n",
        "s = input().strip()\nprint(s[0] + missing)\n",  # NameError: a runtime error on every test
        {"inputs": ["abc\n", "proctor\n"], "outputs": ["cba\n", "rotcorp\n"]},
    ),
]


def load_verl_sandbox_fusion() -> ModuleType:
    """verl's `verl.utils.reward_score.sandbox_fusion` package, loaded from the installed wheel's files."""
    installed = importlib.metadata.version("verl")  # PackageNotFoundError: run `make setup`
    if installed != VERL_VERSION:
        raise SystemExit(f"verl {installed} is installed; this benchmark reads verl {VERL_VERSION}")
    spec = importlib.util.find_spec("verl")  # the top-level package, without running its __init__ (ray)
    assert spec is not None and spec.submodule_search_locations
    folder = Path(spec.submodule_search_locations[0]) / "utils" / "reward_score" / "sandbox_fusion"
    name = "verl_sandbox_fusion"
    package = importlib.util.spec_from_file_location(
        name, folder / "__init__.py", submodule_search_locations=[str(folder)]
    )
    assert package is not None and package.loader is not None
    module = importlib.util.module_from_spec(package)
    sys.modules[name] = module
    package.loader.exec_module(module)
    return module


class TimedSemaphore(threading.Semaphore):
    """verl's per-worker semaphore, timing each `with` block: verl holds it around one call_sandbox_api, so each
    block is one test case's requests as verl sees them, retries and their sleeps included."""

    def __init__(self, value: int, durations: list[float]):
        super().__init__(value)
        self.durations = durations
        self.local = threading.local()

    def __enter__(self) -> bool:
        acquired = super().__enter__()
        self.local.started = time.monotonic()
        return acquired

    def __exit__(self, *exc: object) -> None:
        self.durations.append(time.monotonic() - self.local.started)  # list.append is atomic
        super().__exit__(*exc)


def server_env() -> dict[str, str]:
    """Default settings: nothing PROCTOR_* from outside but the log level."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PROCTOR_")}
    return {**env, "PROCTOR_LOG_LEVEL": "warning"}


def metric(text: str, name: str, **labels: str) -> float:
    """One Prometheus sample's value (0 when absent)."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=512, help="completions, 2 test cases each")
    parser.add_argument("--no-write", action="store_true", help="print only; leave bench/RESULTS.md alone")
    args = parser.parse_args()
    verl = load_verl_sandbox_fusion()
    logging.basicConfig(level=logging.WARNING)
    # verl logs one warning per 504 it retries; they are counted in the report instead.
    logging.getLogger("verl_sandbox_fusion").setLevel(logging.ERROR)
    port = free_port()
    server = start_server(port, server_env())
    url = f"http://127.0.0.1:{port}/run_code"
    case_latencies: list[float] = []
    semaphores = [TimedSemaphore(MAX_CONCURRENT, case_latencies) for _ in range(REWARD_WORKERS)]
    items = []
    for i in range(args.samples):
        right, wrong, tests = PROBLEMS[i % len(PROBLEMS)]
        correct = (i // len(PROBLEMS)) % 2 == 0
        items.append((i, correct, f"```python\n{right if correct else wrong}```", json.dumps(tests)))
    most_in_server = [0]  # jobs running + queued + waiting for a place, polled from /healthz
    done = threading.Event()

    def poll() -> None:
        while not done.wait(0.2):
            try:
                pool = (
                    httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).json()["sandbox"]["pool"] or {}
                )
            except httpx.HTTPError:
                continue
            held = pool.get("running", 0) + pool.get("queued", 0) + pool.get("waiting_for_place", 0)
            most_in_server[0] = max(most_in_server[0], held)

    def score(item: tuple[int, bool, str, str]) -> tuple[int, bool, float, list, float]:
        index, correct, completion, tests = item
        started = time.monotonic()
        value, metadata = verl.compute_score(
            url, semaphores[index % REWARD_WORKERS], 1024, completion, tests, continuous=True
        )
        elapsed = time.monotonic() - started
        return index, correct, value, metadata, elapsed

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    try:
        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=REWARD_WORKERS * MAX_CONCURRENT) as threads:
            futures = [threads.submit(score, item) for item in items]
            results = [
                future.result(timeout=max(1.0, DEADLINE_S - (time.monotonic() - started)))
                for future in futures
            ]
        wall = time.monotonic() - started
        done.set()
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text
        health = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=30).json()
    finally:
        server.terminate()
        server.wait(30)

    pool = health["sandbox"]["pool"]
    misjudged = [
        (i, correct, value) for i, correct, value, _, _ in results if value != (1.0 if correct else 0.0)
    ]
    statuses = Counter(case.get("status") for *_, metadata, _ in results for case in metadata)
    lost = statuses.get("api_error", 0) + statuses.get("sandbox_error", 0)
    latencies = [elapsed for *_, elapsed in results]
    requests_ok = metric(text, "proctor_http_requests_total", route="/run_code", status="200")
    answered_504 = metric(text, "proctor_http_requests_total", route="/run_code", status="504")
    cases = sum(len(metadata) for *_, metadata, _ in results)
    right = sum(1 for _, correct, value, _, _ in results if correct and value == 1.0)
    wrong = sum(1 for _, correct, value, _, _ in results if not correct and value == 0.0)
    report = f"""## verl's SandboxFusion client against /run_code at 512 in flight ({dt.date.today()}, commit {git_commit()})

verl {VERL_VERSION}'s own `sandbox_fusion.compute_score` (its `call_sandbox_api`: 3 attempts, only 504 retried, after
1 s then 2 s; request time-out compile + run + 10 s = 30 s), {REWARD_WORKERS} reward workers x {MAX_CONCURRENT}
(`sandbox_fusion.max_concurrent`) = 512 requests in flight (most held in the server at once: {most_in_server[0]}), against one server with
default settings ({pool["workers"]} sandbox workers, queue {pool["queue"]}, `PROCTOR_RUN_CODE_QUEUE_WAIT_S` {QUEUE_WAIT_S:g}) on
{platform.machine()}, {os.cpu_count()} cores, nsjail. {len(results)} Python completions x 2 tests = {cases} test cases,
half right, half wrong (wrong answer or runtime error). Reproduce with `python bench/verl_sandbox.py`.

| measure | value |
|---|---:|
| right completions scored 1.0 | {right} / {sum(1 for it in items if it[1])} |
| wrong completions scored 0.0 | {wrong} / {sum(1 for it in items if not it[1])} |
| misjudged completions | {len(misjudged)} |
| test cases lost (verl API or sandbox error, -1) | {lost} |
| /run_code answered 200 | {requests_ok:.0f} |
| /run_code answered 504 (retried by verl) | {answered_504:.0f} |
| one test case's call_sandbox_api (its requests, 504 retries and sleeps included), p50 | {statistics.median(case_latencies):.2f} s |
| same, p99 (verl gives up at 3 x {QUEUE_WAIT_S:g} s wait + 3 s of sleeps = {3 * QUEUE_WAIT_S + 3:g} s) | {percentile(case_latencies, 0.99):.2f} s |
| same, max | {max(case_latencies):.2f} s |
| one completion's compute_score (2 test cases, waits for verl's semaphore included), p50 | {statistics.median(latencies):.2f} s |
| same, p99 | {percentile(latencies, 0.99):.2f} s |
| throughput | {requests_ok / wall:.1f} programs/s ({len(results) / wall:.1f} completions/s) |
| wall | {wall:.1f} s |

Test-case statuses in verl's metadata: {", ".join(f"{k} {v}" for k, v in sorted(statuses.items()))}.
"""
    print(report)
    if not args.no_write:
        append_results(report)
    if misjudged or lost:
        raise SystemExit(f"{len(misjudged)} misjudged, {lost} test cases lost")


if __name__ == "__main__":
    main()
