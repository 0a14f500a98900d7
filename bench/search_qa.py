"""tool.search_qa benchmark: corpus and index build time, memory, and search calls per second with latency.

Run with `.venv/bin/python bench/search_qa.py` (about 30 s; `--seconds S` per timed stage, `--no-http` to skip
the server, `--no-write` to print only). In one process, one core, it measures:

- building the corpus (`build_corpus`, 2,440 articles) and the BM25 index, each the median of 5 fresh builds,
  and the memory they hold (tracemalloc's count of the Python objects allocated for them, and the process's
  resident set before and after);
- the `search` tool as a session runs it (`SearchQA.call`: BM25 over the corpus, snippets, the observation text)
  and `open`, as calls per second and p50/p99 latency per call, over a query mix drawn from the bundled tasks:
  the names a solver searches for (each link of each question's chain) and whole questions;
- BM25 alone (`SearchIndex.search`, top 5) on the same queries;
- session steps whose message calls `search` (a Hermes `<tool_call>`): in process (`proctor.open_session`,
  the blocking API) and over real HTTP (`POST /v1/sessions/{id}/step`), steps per second and p50/p99 per step;
  a session is closed and a new one opened every 18 steps (the default limit is 20 turns);
- the memory one open search session holds: the resident set grown by opening 2,000 sessions, per session;
- `POST /compat/search_r1/retrieve` over real HTTP (a server started by `bench/common.py`): one query per
  request, sequentially, and batches of 64 queries, as queries per second and p50/p99 per request;
- what policies earn on 200 test tasks per level: the gold transcript (each link searched by name and
  opened: the questions are answerable with the tools), a shallow policy that searches the whole question
  once, opens every result and answers the first name of the asked kind (or year) it read, and one answer
  (the most common gold) for every question.

The section is printed and appended to bench/RESULTS.md unless `--no-write`.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import gc
import json
import os
import platform
import random
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import append_results, free_port, git_commit, start_server  # noqa: E402

import proctor  # noqa: E402
from proctor.environments.tools.search_qa.corpus import build_corpus  # noqa: E402
from proctor.environments.tools.search_qa.environment import (  # noqa: E402
    SEARCH_QA,
    gold_transcript,
    shallow_answer,
)
from proctor.environments.tools.search_qa.index import SearchIndex  # noqa: E402


def rss_mb() -> float:
    """The process's resident set size in MiB (Linux /proc)."""
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def queries() -> list[str]:
    """The query mix: every link a solver searches for, and the whole question, for 300 bundled tasks."""
    found: list[str] = []
    for level in ("easy", "medium", "hard"):
        for task in SEARCH_QA.make_tasks("train", 0, 100, level):
            found.extend(task.metadata["path"])
            found.append(task.reference["question"])
    random.Random(0).shuffle(found)
    return found


def timed(label: str, seconds: float, run) -> dict[str, float]:  # noqa: ANN001
    """Call run(i) repeatedly for `seconds`; calls per second and p50/p99 latency in ms."""
    latencies: list[float] = []
    started = time.perf_counter()
    i = 0
    while time.perf_counter() - started < seconds:
        t0 = time.perf_counter()
        run(i)
        latencies.append(time.perf_counter() - t0)
        i += 1
    total = time.perf_counter() - started
    return {
        "label": label,  # type: ignore[dict-item]
        "calls": i,
        "rate": i / total,
        "p50": percentile(latencies, 0.5) * 1000,
        "p99": percentile(latencies, 0.99) * 1000,
    }


def builds() -> tuple[float, float, float, float]:
    """Median corpus and index build times (s), the Python memory they hold (MiB) and the RSS growth (MiB)."""
    corpus_times, index_times = [], []
    for _ in range(5):
        t0 = time.perf_counter()
        built = build_corpus(0)
        corpus_times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        SearchIndex(built)
        index_times.append(time.perf_counter() - t0)
    gc.collect()
    before_rss = rss_mb()
    tracemalloc.start()
    held = SearchIndex(build_corpus(0))
    current, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    gc.collect()
    grown = rss_mb() - before_rss
    del held
    return statistics.median(corpus_times), statistics.median(index_times), current / 2**20, grown


def tool_rates(seconds: float, mix: list[str]) -> list[dict[str, float]]:
    """The search and open tools through SearchQA.call, and BM25 alone."""
    task = SEARCH_QA.make_tasks("train", 0, 1, "medium")[0]
    loop = asyncio.new_event_loop()
    state = loop.run_until_complete(SEARCH_QA.start(task, SEARCH_QA.limits()))
    index = SearchIndex(build_corpus(0))
    ids = [f"d{i:05d}" for i in range(len(index.documents))]

    def search(i: int) -> None:
        loop.run_until_complete(SEARCH_QA.call(state, "search", {"query": mix[i % len(mix)]}))

    def open_doc(i: int) -> None:
        loop.run_until_complete(SEARCH_QA.call(state, "open", {"doc_id": ids[i * 7919 % len(ids)]}))

    rows = [
        timed("`search` tool (`SearchQA.call`, top 5 with snippets)", seconds, search),
        timed("`open` tool (`SearchQA.call`)", seconds / 2, open_doc),
        timed(
            "BM25 alone (`SearchIndex.search`, top 5)", seconds, lambda i: index.search(mix[i % len(mix)], 5)
        ),
    ]
    loop.close()
    return rows


TASK = {"seed": 0, "index": 0, "split": "train", "level": "medium"}
STEPS_PER_SESSION = 18


def search_message(query: str) -> dict[str, str]:
    call = json.dumps({"name": "search", "arguments": {"query": query}})
    return {"role": "assistant", "content": f"<tool_call>{call}</tool_call>"}


def session_rates(seconds: float, mix: list[str]) -> tuple[dict[str, float], float]:
    """In-process session steps that call search; and the resident memory of one open session (KiB)."""
    holder: dict[str, object] = {}

    def step(i: int) -> None:
        if i % STEPS_PER_SESSION == 0:
            if "session" in holder:
                holder["session"].close()  # type: ignore[attr-defined]
            holder["session"] = proctor.open_session("tool.search_qa", TASK)
        result = holder["session"].step(search_message(mix[i % len(mix)]))  # type: ignore[attr-defined]
        assert result["observations"] and not result["done"], result

    row = timed("session step calling `search`, in process (`proctor.open_session`)", seconds, step)
    holder["session"].close()  # type: ignore[attr-defined]
    gc.collect()
    before = rss_mb()
    sessions = [proctor.open_session("tool.search_qa", TASK) for _ in range(2_000)]
    per_session_kib = (rss_mb() - before) * 1024 / len(sessions)
    for session in sessions:
        session.close()
    return row, per_session_kib


def http_session_rate(client: httpx.Client, base: str, seconds: float, mix: list[str]) -> dict[str, float]:
    """Session steps that call search over real HTTP."""
    holder: dict[str, str] = {}

    def step(i: int) -> None:
        if i % STEPS_PER_SESSION == 0:
            if "id" in holder:
                client.delete(f"{base}/v1/sessions/{holder['id']}")
            created = client.post(f"{base}/v1/sessions", json={"environment": "tool.search_qa", "task": TASK})
            created.raise_for_status()
            holder["id"] = created.json()["session_id"]
        body = {"message": search_message(mix[i % len(mix)]), "step": i % STEPS_PER_SESSION + 1}
        client.post(f"{base}/v1/sessions/{holder['id']}/step", json=body).raise_for_status()

    return timed("session step calling `search`, over HTTP (`/v1/sessions/{id}/step`)", seconds, step)


def http_rates(seconds: float, mix: list[str]) -> list[dict[str, float]]:
    """A real server: session steps, and POST /compat/search_r1/retrieve with single queries and batches of 64."""
    port = free_port()
    env = {key: value for key, value in os.environ.items() if not key.startswith("PROCTOR_")}
    env.update(PROCTOR_LOG_LEVEL="warning", PROCTOR_POOL_WORKERS="1")
    server = start_server(port, env)
    url = f"http://127.0.0.1:{port}/compat/search_r1/retrieve"
    try:
        with httpx.Client(timeout=60) as client:
            client.post(url, json={"queries": ["warm up"], "topk": 3}).raise_for_status()

            def one(i: int) -> None:
                body = {"queries": [mix[i % len(mix)]], "topk": 3, "return_scores": True}
                client.post(url, json=body).raise_for_status()

            def batch(i: int) -> None:
                start = i * 64 % len(mix)
                body = {"queries": (mix + mix)[start : start + 64], "topk": 3, "return_scores": True}
                client.post(url, json=body).raise_for_status()

            session = http_session_rate(client, f"http://127.0.0.1:{port}", seconds, mix)
            single = timed("`/compat/search_r1/retrieve`, 1 query per request", seconds, one)
            batched = timed("`/compat/search_r1/retrieve`, 64 queries per request", seconds, batch)
            batched["rate"] *= 64  # queries per second; latencies stay per request
            batched["label"] += " (rate: queries/s)"  # type: ignore[operator]
            return [session, single, batched]
    finally:
        server.terminate()
        server.wait(timeout=30)


def policy_rewards() -> list[tuple[str, float, float, float]]:
    """(level, gold, shallow, constant) mean rewards over 200 test tasks per level."""
    searched = [
        {
            "role": "assistant",
            "content": '<tool_call>{"name": "search", "arguments": {"query": "q"}}</tool_call>',
        },
        {"role": "tool", "name": "search", "content": "[d00001] ..."},
    ]
    rows = []
    for level in ("easy", "medium", "hard"):
        tasks = SEARCH_QA.make_tasks("test", 0, 200, level)
        golds = [task.metadata["gold_answer"] for task in tasks]
        common = max(set(golds), key=lambda gold: (golds.count(gold), gold))
        totals = [0.0, 0.0, 0.0]
        for task in tasks:
            answers = [None, shallow_answer(task), common]
            for slot, answer in enumerate(answers):
                if answer is None:
                    transcript = gold_transcript(task)
                else:
                    transcript = [
                        *task.prompt,
                        *searched,
                        {"role": "assistant", "content": f"<answer>{answer}</answer>"},
                    ]
                totals[slot] += proctor.score("tool.search_qa", transcript, task.reference).reward
        rows.append((level, *(total / len(tasks) for total in totals)))
    return rows


def report(seconds: float, with_http: bool) -> str:
    mix = queries()
    corpus_s, index_s, python_mb, rss_growth = builds()
    rows = tool_rates(seconds, mix)
    session_row, per_session_kib = session_rates(seconds, mix)
    rows.append(session_row)
    if with_http:
        rows += http_rates(seconds, mix)
    lines = [
        f"## tool.search_qa: corpus, BM25 search and the Search-R1 route ({dt.date.today()}, commit {git_commit()})",
        "",
        f"{platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} CPUs, one process "
        f"and one core for the in-process rows; {len(mix)} queries from 300 bundled tasks (each chain link "
        "and each whole question), cycled.",
        "",
        f"- corpus build (`build_corpus`, 2,440 articles): {corpus_s * 1000:.0f} ms (median of 5)",
        f"- BM25 index build (`SearchIndex`, rank-bm25): {index_s * 1000:.0f} ms (median of 5)",
        f"- memory held by one corpus and its index: {python_mb:.1f} MiB of Python objects (tracemalloc), "
        f"resident set +{rss_growth:.1f} MiB",
        f"- memory of one open search session (in process, 2,000 open at once): {per_session_kib:.1f} KiB of "
        "resident set each (the corpus and index are shared)",
        "",
        "| what | calls | per second | p50 ms | p99 ms |",
        "|---|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['label']} | {row['calls']:,} | {row['rate']:,.0f} | {row['p50']:.2f} | {row['p99']:.2f} |"
        )
    lines += [
        "",
        "Mean reward on 200 test tasks per level (hops 2/3/4):",
        "",
        "| level | gold transcript (tools only) | one search of the question, every result opened | the most common gold for every question |",
        "|---|---:|---:|---:|",
    ]
    for level, gold, shallow, constant in policy_rewards():
        lines.append(f"| {level} | {gold:.3f} | {shallow:.3f} | {constant:.3f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    """Run, print, and append to bench/RESULTS.md unless --no-write."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds per timed stage (default 5)")
    parser.add_argument("--no-http", action="store_true", help="skip the server stage")
    parser.add_argument("--no-write", action="store_true", help="print only; do not append to RESULTS.md")
    args = parser.parse_args()
    text = report(args.seconds, not args.no_http)
    print(text)
    if not args.no_write:
        append_results(text)


if __name__ == "__main__":
    main()
