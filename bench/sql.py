"""Benchmark the `sql` verifier: verdicts per second against a process per query, and gold cache cold vs warm.

Workload: every gold, correct-but-different and wrong query of datasets/sql/questions.jsonl (the bundled
`library` database), each scored against its question's gold.

- Proctor, in process: `get_verifier("sql").score` (sandboxed long-lived SQLite workers), gold cache warm.
- Proctor, engine: `Engine.score_batch` through the pool (2 workers), result cache off, gold cache warm.
- Peers, process per query: what a user would otherwise write for isolation: one `python -c` (this
  interpreter) or one `sqlite3 -readonly -json` CLI process per query that opens the database read-only and
  prints the rows as JSON, compared with the gold rows (gold computed once and cached, as a fair peer would)
  as a sorted bag.
- Gold cache: the same workload in process with an empty gold cache (memory and disk) versus warm.

Reports medians of --repeats runs and appends a section to bench/RESULTS.md (--no-append to skip).
Run: `.venv/bin/python bench/sql.py`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, append_results, git_commit  # bench/common.py: the script's folder is on sys.path

QUESTIONS = ROOT / "datasets" / "sql" / "questions.jsonl"
DATABASE = ROOT / "datasets" / "sql" / "library" / "library.sqlite"
PEER = (
    "import json, sqlite3, sys\n"
    "conn = sqlite3.connect('file:' + sys.argv[1] + '?mode=ro', uri=True)\n"
    "try:\n"
    "    print(json.dumps(conn.execute(sys.argv[2]).fetchall()))\n"
    "except sqlite3.Error as exc:\n"
    "    print(json.dumps({'error': str(exc)}))\n"
)


def workload() -> list[tuple[str, str, float]]:
    """(prediction, gold, expected reward) for every labelled query."""
    items = []
    for line in QUESTIONS.read_text().splitlines():
        q = json.loads(line)
        items += [(sql, q["gold"], 1.0) for sql in [q["gold"], *q["correct"]]]
        items += [(w["sql"], q["gold"], 1.0 if w.get("coincidental") else 0.0) for w in q["wrong"]]
    return items


def run_in_process(items: list[tuple[str, str, float]]) -> tuple[float, int]:
    """Seconds to score every item with the verifier in this process, and how many agreed with the label."""
    from proctor.registry import get_verifier

    spec = get_verifier("sql")
    options = spec.parse_options({})
    agree = 0
    started = time.perf_counter()
    for sql, gold, expect in items:
        verdict = spec.score(sql, spec.parse_reference({"db_id": "library", "gold": gold}), options)
        agree += verdict.reward == expect
    return time.perf_counter() - started, agree


HEAVY_GOLD = "SELECT count(*) FROM loan AS a, loan AS b WHERE a.fine < b.fine"
HEAVY_PRED = "SELECT count(*) FROM loan AS a JOIN loan AS b ON b.fine > a.fine"


def heavy_gold_ms(repeats: int) -> tuple[float, float]:
    """Median ms per verdict for one prediction against an expensive gold: cache cold, then warm."""
    from proctor.registry import get_verifier
    from proctor.verifiers.sql.databases import cache_root, gold_cache

    spec = get_verifier("sql")
    reference = spec.parse_reference({"db_id": "library", "gold": HEAVY_GOLD})
    options = spec.parse_options({})
    cold, warm = [], []
    for _ in range(repeats):
        gold_cache.clear_memory()
        shutil.rmtree(cache_root() / "gold", ignore_errors=True)
        for runs in (cold, warm):
            started = time.perf_counter()
            assert spec.score(HEAVY_PRED, reference, options).reward == 1.0
            runs.append((time.perf_counter() - started) * 1000)
    return statistics.median(cold), statistics.median(warm)


def run_engine(engine, items: list[tuple[str, str, float]]) -> tuple[float, int]:
    """Seconds to score every item through Engine.score_batch (pool), and agreements."""
    requests = [
        {"verifier": "sql", "response": sql, "reference": {"db_id": "library", "gold": gold}}
        for sql, gold, _ in items
    ]
    started = time.perf_counter()
    scores = engine.score_batch(requests)
    elapsed = time.perf_counter() - started
    return elapsed, sum(s.reward == expect for s, (_, _, expect) in zip(scores, items, strict=True))


def _bag(rows: object) -> list | None:
    return None if isinstance(rows, dict) else sorted(json.dumps(row) for row in rows)


def _peer_rows(kind: str, sql: str) -> object:
    if kind == "python":
        argv = [sys.executable, "-c", PEER, str(DATABASE), sql]
    else:
        argv = ["sqlite3", "-readonly", "-json", str(DATABASE), sql]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if out.returncode != 0 or (kind == "sqlite3" and out.stderr):
        return {"error": out.stderr}
    if kind == "python":
        return json.loads(out.stdout)
    return [list(row.values()) for row in json.loads(out.stdout or "[]")]


def run_peer(items: list[tuple[str, str, float]], kind: str) -> tuple[float, int]:
    """Seconds for one process per prediction (gold rows cached), and agreements."""
    gold_rows: dict[str, object] = {}
    agree = 0
    started = time.perf_counter()
    for sql, gold, expect in items:
        if gold not in gold_rows:
            gold_rows[gold] = _bag(_peer_rows(kind, gold))
        rows = _peer_rows(kind, sql)
        match = not isinstance(rows, dict) and _bag(rows) == gold_rows[gold]
        agree += match == (expect == 1.0)
    return time.perf_counter() - started, agree


def main() -> None:
    """Run the benchmark and print (and append) the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-append", action="store_true")
    args = parser.parse_args()

    cache = Path(tempfile.mkdtemp(prefix="proctor-bench-sql-"))
    os.environ["PROCTOR_SQL_CACHE_DIR"] = str(cache)
    os.environ.pop("PROCTOR_SQL_DATABASES", None)
    from proctor.engine import Engine
    from proctor.settings import Settings, get_settings
    from proctor.verifiers.sql.databases import gold_cache

    get_settings.cache_clear()
    items = workload()
    n = len(items)
    load_before = os.getloadavg()[0]

    cold, warm, peer, cli, engine_runs = [], [], [], [], []
    agreements = {}
    for _ in range(args.repeats):
        gold_cache.clear_memory()
        shutil.rmtree(cache / "gold", ignore_errors=True)
        seconds, agreements["cold"] = run_in_process(items)
        cold.append(seconds)
        seconds, agreements["warm"] = run_in_process(items)
        warm.append(seconds)
    heavy_cold, heavy_warm = heavy_gold_ms(args.repeats)
    engine = Engine(Settings(cache_size=0, pool_workers=2))
    try:
        run_engine(engine, items[:4])  # start the pool workers and their jailed SQLite workers
        for _ in range(args.repeats):
            seconds, agreements["engine"] = run_engine(engine, items)
            engine_runs.append(seconds)
    finally:
        engine.close()
    for _ in range(args.repeats):
        seconds, agreements["peer"] = run_peer(items, "python")
        peer.append(seconds)
        seconds, agreements["cli"] = run_peer(items, "sqlite3")
        cli.append(seconds)
    load_after = os.getloadavg()[0]
    shutil.rmtree(cache, ignore_errors=True)

    def rate(runs: list[float]) -> float:
        return n / statistics.median(runs)

    rows = [
        ("Proctor `sql`, in process, gold cache warm", warm, agreements["warm"]),
        ("Proctor `sql`, in process, gold cache cold", cold, agreements["cold"]),
        ("Proctor engine `score_batch` (2 pool workers), gold cache warm", engine_runs, agreements["engine"]),
        ("peer: one `python -c` process per query (gold cached)", peer, agreements["peer"]),
        ("peer: one `sqlite3 -readonly -json` process per query (gold cached)", cli, agreements["cli"]),
    ]
    table = [
        "| runner | verdicts/s | median s for all | agree with labels |",
        "|---|---:|---:|---:|",
    ]
    for label, runs, agree in rows:
        table.append(f"| {label} | {rate(runs):.0f} | {statistics.median(runs):.2f} | {agree}/{n} |")
    report = "\n".join(
        [
            f"## sql: verdicts per second and the gold cache ({date.today()}, commit {git_commit()})",
            "",
            f"Machine: {os.cpu_count()} cores, Python {platform.python_version()}, 1-min load average "
            f"{load_before:.1f} before and {load_after:.1f} after; sandbox nsjail (jailed long-lived SQLite "
            f"workers). Workload: {n} labelled queries of datasets/sql (bundled `library` database); medians of "
            f"{args.repeats} runs. Reproduce: `.venv/bin/python bench/sql.py`.",
            "",
            *table,
            "",
            f"Speed-up over a `python -c` process per query: **{rate(warm) / rate(peer):.1f}x** in process, "
            f"{rate(engine_runs) / rate(peer):.1f}x through the engine's pool; over a `sqlite3` CLI process per "
            f"query: **{rate(warm) / rate(cli):.1f}x**. Gold cache warm vs cold on this workload (cheap golds): "
            f"**{rate(warm) / rate(cold):.1f}x**; one verdict against an expensive gold (`{HEAVY_GOLD}`): "
            f"{heavy_cold:.0f} ms cold, {heavy_warm:.1f} ms warm (**{heavy_cold / heavy_warm:.0f}x**). The peers' "
            "agreement is lower because they compare sorted bags only (no typed tolerance, no order rules).",
            "",
        ]
    )
    print(report)
    if not args.no_append:
        append_results(report)


if __name__ == "__main__":
    main()
