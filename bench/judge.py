"""Judge benchmark: judge calls saved by the reply cache on a GRPO-shaped workload, and judged items per second
at a given endpoint latency, against the naive judge loop a user would otherwise write.

Run with `.venv/bin/python bench/judge.py` (`--no-write` for a trial run, `--latency-ms 50`). The judge is the
tests' scripted stand-in (tests/judge_server.py: a real local OpenAI-compatible HTTP server, here adding a
fixed latency to every call), so what is measured is Proctor's client, cache and concurrency, not a model.

- (a) GRPO-shaped workload: P prompts x 16 samples, the 16 samples of a group drawn from a handful of distinct
  answers (skewed, as sampled answers are), scored with `judge.rubric` in one `Engine.score_batch` (result
  cache off, so only the judge client's cache and in-flight sharing save calls); then the same batch again
  (a re-score or a second epoch). Judge calls sent are counted at the endpoint, against one call per item.
- (b) Throughput: N distinct items (no duplicates: the cache cannot help) through `Engine.score_batch`
  against the naive peer: one sequential `httpx` chat call per item, no cache, parsed the same way.
  Median of 3 runs each.
- (c) The same N items through the HTTP service (`python -m proctor.api`, one `/v1/score/batch` request), to
  show the service awaits judge calls concurrently instead of holding a thread or a pool worker per item.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import random
import socket
import statistics
import subprocess
import sys
import time

from common import ROOT, append_results, git_commit  # bench/common.py: the script's folder is on sys.path

sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from tests.judge_server import JudgeServer, keyword_rubric_judge  # noqa: E402

RUBRIC = {
    "prompt": "Explain why the sky is blue.",
    "items": [
        {"criterion": "Mentions scattering", "points": 3},
        {"criterion": "Mentions wavelength", "points": 2},
        {"criterion": "Mentions sunlight", "points": 1},
        {"criterion": "Claims the ocean reflection", "points": -2},
    ],
}
ANSWERS = [
    "Rayleigh scattering of sunlight favours short wavelength light.",
    "Because of scattering.",
    "Sunlight is scattered; blue has a short wavelength.",
    "It reflects the ocean.",
    "The wavelength of sunlight and scattering in air.",
    "I don't know.",
]
GROUP = 16


def grpo_items(prompts: int, seed: int = 0) -> list[dict]:
    """prompts x 16 requests; each group's samples drawn (skewed) from a few distinct answers."""
    rng = random.Random(seed)
    items = []
    for prompt in range(prompts):
        reference = {**RUBRIC, "prompt": f"{RUBRIC['prompt']} (prompt {prompt})"}
        for _ in range(GROUP):
            answer = ANSWERS[min(int(rng.expovariate(0.8)), len(ANSWERS) - 1)]
            items.append({"verifier": "judge.rubric", "response": answer, "reference": reference})
    return items


def distinct_items(count: int) -> list[dict]:
    """count requests that all differ (no cache hits possible)."""
    return [
        {
            "verifier": "judge.rubric",
            "response": f"{ANSWERS[i % len(ANSWERS)]} (variant {i})",
            "reference": RUBRIC,
        }
        for i in range(count)
    ]


def naive(base_url: str, items: list[dict]) -> tuple[float, int]:
    """One sequential chat call per item with a plain httpx client, no cache: (seconds, ok replies)."""
    from proctor.verifiers.judge import parse, prompts

    started = time.perf_counter()
    ok = 0
    with httpx.Client(timeout=60) as client:
        for item in items:
            criteria = [(entry["criterion"], entry["points"]) for entry in item["reference"]["items"]]
            messages = prompts.rubric_explicit(item["reference"]["prompt"], item["response"], criteria)
            reply = client.post(
                f"{base_url}/chat/completions", json={"model": "stand-in", "messages": messages}
            )
            reply.raise_for_status()
            parse.item_verdicts(reply.json()["choices"][0]["message"]["content"], len(criteria))
            ok += 1
    return time.perf_counter() - started, ok


def service_run(judge_url: str, items: list[dict]) -> float:
    """Seconds for one /v1/score/batch of the items through a freshly started service using the judge."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROCTOR_")}
    env.update(
        PROCTOR_PORT=str(port),
        PROCTOR_JUDGE_BASE_URL=judge_url,
        PROCTOR_JUDGE_MODEL="stand-in",
        PROCTOR_LOG_LEVEL="warning",
        PROCTOR_CACHE_SIZE="0",
        PYTHONPATH=str(ROOT),
    )
    server = subprocess.Popen(
        [sys.executable, "-m", "proctor.api"], env=env, cwd=ROOT, stdout=subprocess.DEVNULL
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        started = time.perf_counter()
        reply = httpx.post(f"{base}/v1/score/batch", json={"items": items}, timeout=300)
        seconds = time.perf_counter() - started
        statuses = {result["status"] for result in reply.json()["results"]}
        assert statuses == {"ok"}, statuses
        return seconds
    finally:
        server.terminate()
        server.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--prompts", type=int, default=16, help="GRPO groups of 16 samples")
    parser.add_argument("--items", type=int, default=128, help="distinct items for the throughput run")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()

    with JudgeServer(keyword_rubric_judge, latency_s=args.latency_ms / 1000) as server:
        os.environ.update(PROCTOR_JUDGE_BASE_URL=server.base_url, PROCTOR_JUDGE_MODEL="stand-in")
        from proctor.engine import Engine
        from proctor.settings import Settings, get_settings
        from proctor.verifiers.judge import client

        get_settings.cache_clear()
        settings = Settings(cache_size=0)
        engine = Engine(settings)
        load_before = os.getloadavg()[0]
        try:
            # (a) GRPO-shaped workload: calls sent vs one per item
            items = grpo_items(args.prompts)
            distinct = len({(i["response"], i["reference"]["prompt"]) for i in items})
            client.reset()
            before = server.calls
            started = time.perf_counter()
            first = engine.score_batch(items)
            first_s = time.perf_counter() - started
            first_calls = server.calls - before
            before = server.calls
            started = time.perf_counter()
            second = engine.score_batch(items)
            second_s = time.perf_counter() - started
            second_calls = server.calls - before
            statuses = {r.status.value for r in [*first, *second]}

            # (b) throughput on distinct items
            work = distinct_items(args.items)
            proctor_runs, naive_runs = [], []
            for run in range(3):
                client.reset()
                batch = [{**item, "response": f"{item['response']} run {run}"} for item in work]
                started = time.perf_counter()
                results = engine.score_batch(batch)
                proctor_runs.append(time.perf_counter() - started)
                assert all(r.status.value == "ok" for r in results), {r.reason for r in results}
                seconds, ok = naive(server.base_url, batch)
                assert ok == len(batch)
                naive_runs.append(seconds)
        finally:
            engine.close()
        service_s = service_run(
            server.base_url, [{**item, "response": f"{item['response']} service"} for item in work]
        )
        load_after = os.getloadavg()[0]

    proctor_s, naive_s = statistics.median(proctor_runs), statistics.median(naive_runs)
    rows = len(items)
    report = "\n".join(
        [
            f"## judge: cache savings and throughput ({dt.date.today().isoformat()}, commit {git_commit()})",
            "",
            f"Machine: {os.cpu_count()} cores, Python {platform.python_version()}, 1-min load average "
            f"{load_before:.1f} before and {load_after:.1f} after. Judge: the scripted stand-in "
            f"(tests/judge_server.py, real HTTP on 127.0.0.1) adding {args.latency_ms:g} ms to every call; "
            f"PROCTOR_JUDGE_CONCURRENCY={settings.judge_concurrency}; result cache off. "
            "Reproduce: `.venv/bin/python bench/judge.py`.",
            "",
            f"**(a) GRPO-shaped workload**: {args.prompts} prompts x {GROUP} samples = {rows} `judge.rubric` "
            f"items, {distinct} distinct (prompt, answer) pairs; statuses {sorted(statuses)}.",
            "",
            "| pass | judge calls sent | naive (one per item) | saved | wall s |",
            "|---|---:|---:|---:|---:|",
            f"| first scoring | {first_calls} | {rows} | **{1 - first_calls / rows:.0%}** | {first_s:.2f} |",
            f"| same batch again | {second_calls} | {rows} | **{1 - second_calls / rows:.0%}** | {second_s:.2f} |",
            "",
            f"**(b) Throughput** on {args.items} distinct items (no cache hits possible), median of 3: Proctor "
            f"(`Engine.score_batch`, async client, bounded concurrency) {proctor_s:.2f} s = "
            f"**{args.items / proctor_s:.1f} items/s**; naive sequential httpx loop {naive_s:.2f} s = "
            f"{args.items / naive_s:.1f} items/s; **{naive_s / proctor_s:.1f}x**.",
            "",
            f"**(c) Through the HTTP service**: the same {args.items} items in one `/v1/score/batch`: "
            f"{service_s:.2f} s = **{args.items / service_s:.1f} items/s** ({naive_s / service_s:.1f}x the naive loop).",
            "",
        ]
    )
    print(report)
    if not args.no_write:
        append_results(report)


if __name__ == "__main__":
    main()
