"""How close the `verilog` testbench verdict comes to its floor: VerilogEval's flow on the bare machine, measured
side by side with Proctor in-process and through a running service, on distinct designs.

Run with `.venv/bin/python bench/verilog_floor.py` (`--rounds`, `--problems`, `--designs`). It prints:

- (a) one testbench verdict at a time, each design distinct (a `localparam` numbered per design and round, so
  no cache can answer): VerilogEval's flow (tb + reference + candidate in one iverilog compile on the bare
  machine, vvp, the first `Mismatches:` line decides), Proctor in-process (`SPEC.score`), and Proctor through
  a running service (`python -m proctor.api`, one `/v1/score` request at a time, result cache off). The three
  judges take turns on each design, so a change of load on the shared machine falls on all three; medians and
  ratios per round, and the median of the rounds;
- (b) verdicts per second with `--threads` in flight, Proctor in-process against the bare flow;
- (c) the 80-verdict batch (10 problems x 8 distinct designs, one at a time) through the service and bare;
- (d) a profile of one testbench verdict and one formal verdict: the tool runs with their CPU and wall time
  as the sandbox measured them, and the rest of the verdict's wall time (Python, the sandbox's set-up);
- (e) before and after: the same distinct designs in-process with the warm jails and the fold switched off
  (a fresh jail per tool run, the full gate), with them on, and bare, in turn.

Every Proctor verdict is checked against the expected reward (1 for a correct design, 0 for a wrong one); a
disagreement stops the benchmark. The 1-minute load average is printed before and after.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from common import (
    ROOT,
    free_port,
    git_commit,
    start_server,
)  # bench/common.py: the script's folder is on sys.path
from verilog import verilogeval  # bench/verilog.py: VerilogEval's bare flow, the peer

DATASET = ROOT / "datasets" / "verilog" / "problems.jsonl"
ENDMODULE = re.compile(r"endmodule\s*$")
WARM_UP_PER_WORKER = 3  # requests per problem and pool worker before timing (workers get them in turn)


def load_rows(count: int) -> list[dict[str, Any]]:
    """The first `count` problems of datasets/verilog with a testbench, half combinational, half sequential."""
    rows = [json.loads(line) for line in DATASET.read_text().splitlines() if line.strip()]
    rows = [row for row in rows if row["reference"].get("testbench")]
    comb = [row for row in rows if row["kind"] == "combinational"]
    seq = [row for row in rows if row["kind"] != "combinational"]
    picked = [row for pair in zip(comb, seq, strict=False) for row in pair]
    return picked[:count]


def variant(source: str, number: int) -> str:
    """The design with a numbered localparam in its last module: a distinct text (and netlist) per number."""
    return ENDMODULE.sub(
        f"  localparam integer PROCTOR_BENCH_VARIANT = {number};\nendmodule\n", source.rstrip()
    )


def designs(row: dict[str, Any], count: int, round_: int) -> list[tuple[str, float]]:
    """`count` distinct designs for one problem and round, alternately correct (reward 1) and wrong (0)."""
    out = []
    for k in range(count):
        base, want = (row["correct"], 1.0) if k % 2 == 0 else (row["wrong"], 0.0)
        out.append((variant(base, 1000 * round_ + k), want))
    return out


def bare(source: str, reference: dict[str, Any]) -> float:
    """VerilogEval's flow on the bare machine (bench/verilog.py's peer): one iverilog compile of tb + reference +
    candidate, vvp, and the first `Mismatches:` line of the output decides."""
    return verilogeval(source, reference)


def inprocess(
    source: str, reference: dict[str, Any], checks: tuple[str, ...] = ("testbench",)
) -> float | None:
    """Proctor's reward in this process (None when the status is not ok)."""
    from proctor.verifiers.verilog.verifier import SPEC

    verdict = SPEC.score(
        f"```verilog\n{source}```",
        SPEC.parse_reference(reference),
        SPEC.parse_options({"checks": list(checks)}),
    )
    return verdict.reward if verdict.status.value == "ok" else None


def via_service(client: httpx.Client, source: str, reference: dict[str, Any]) -> float | None:
    """Proctor's reward through the running service (None when the status is not ok)."""
    body = {
        "verifier": "verilog",
        "response": f"```verilog\n{source}```",
        "reference": reference,
        "options": {"checks": ["testbench"]},
    }
    reply = client.post("/v1/score", json=body, timeout=120)
    reply.raise_for_status()
    data = reply.json()
    return data["reward"] if data["status"] == "ok" else None


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """Seconds taken by fn() and its value."""
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def side_by_side(
    rows: list[dict[str, Any]], count: int, round_: int, client: httpx.Client
) -> dict[str, list[float]]:
    """One round of (a): every design judged by the three, in turn; seconds per verdict for each."""
    times: dict[str, list[float]] = {"bare": [], "inprocess": [], "service": []}
    for row in rows:
        reference = row["reference"]
        for source, want in designs(row, count, round_):
            for name, judge in (
                ("bare", lambda s=source, r=reference: bare(s, r)),
                ("inprocess", lambda s=source, r=reference: inprocess(s, r)),
                ("service", lambda s=source, r=reference: via_service(client, s, r)),
            ):
                seconds, reward = timed(judge)
                if reward != want:
                    raise SystemExit(f"{name} gave {reward} for a design of {row['id']} that deserves {want}")
                times[name].append(seconds)
    return times


def throughput(rows: list[dict[str, Any]], count: int, round_: int, threads: int) -> dict[str, float]:
    """(b): verdicts per second with `threads` in flight, Proctor in-process and the bare flow, on distinct
    designs (a fresh round number for each judge, so nothing is cached)."""
    out = {}
    for offset, (name, judge) in enumerate((("inprocess", inprocess), ("bare", bare))):
        items = [(s, row["reference"]) for row in rows for s, _ in designs(row, count, round_ * 10 + offset)]
        with ThreadPoolExecutor(threads) as pool:
            seconds, _ = timed(lambda j=judge, i=items: list(pool.map(lambda item: j(*item), i)))
        out[name] = len(items) / seconds
    return out


def profile(rows: list[dict[str, Any]]) -> list[tuple[str, list[tuple[str, float, float]], float]]:
    """(d): one testbench and one formal verdict of a correct design (reference already measured), with every
    tool run the sandbox made: (name, CPU s, wall s), and the verdict's wall time."""
    from proctor.sandboxes.job import Result
    from proctor.verifiers.verilog import verifier

    row = next(r for r in rows if r["kind"] != "combinational")
    out = []
    for checks in (("testbench",), ("formal",)):
        inprocess(variant(row["correct"], 99), row["reference"], checks)  # the reference's own runs, cached
        runs: list[tuple[str, float, float]] = []
        original = verifier.run_job

        def recording(*args: Any, _runs: list = runs, _original: Any = original, **kwargs: Any) -> Result:
            result = _original(*args, **kwargs)
            _runs.extend((c.name, c.cpu_s, c.wall_s) for c in result.commands)
            return result

        verifier.run_job = recording
        try:
            seconds, _ = timed(
                lambda c=checks: inprocess(variant(row["correct"], 98 + len(c)), row["reference"], c)
            )
        finally:
            verifier.run_job = original
        out.append(("+".join(checks), runs, seconds))
    return out


def pool_workers() -> int:
    """How many pool workers the service starts here (PROCTOR_POOL_WORKERS, else its default)."""
    from proctor.settings import Settings

    return Settings().pool_workers


@contextlib.contextmanager
def speedups_off() -> Iterator[None]:
    """The verifier as it was before the warm jails and the fold: a fresh jail per tool run, the gate's
    `iverilog -E` and lone elaboration for every candidate (the tokenizer's cache stays on)."""
    from proctor.verifiers.verilog import fastgate, jails, verifier

    saved = (verifier.folded_testbench, jails.warm_usable, fastgate.plain_source)
    verifier.folded_testbench = lambda *args, **kwargs: None
    jails.warm_usable = lambda backend: False
    fastgate.plain_source = lambda source: False
    try:
        yield
    finally:
        verifier.folded_testbench, jails.warm_usable, fastgate.plain_source = saved


def before_after(rows: list[dict[str, Any]], count: int, round_: int) -> dict[str, list[float]]:
    """(e): the same distinct designs judged in-process with the speed-ups off and on, and bare, in turn."""
    times: dict[str, list[float]] = {"bare": [], "before": [], "after": []}
    for row in rows:
        earlier = designs(row, count, round_ + 50)  # the same designs numbered apart, so nothing is cached
        for (source, want), (old, _) in zip(designs(row, count, round_), earlier, strict=True):
            reference = row["reference"]
            with speedups_off():
                seconds, reward = timed(lambda s=old, r=reference: inprocess(s, r))
            assert reward == want
            times["before"].append(seconds)
            seconds, reward = timed(lambda s=source, r=reference: inprocess(s, r))
            assert reward == want
            times["after"].append(seconds)
            times["bare"].append(timed(lambda s=source, r=reference: bare(s, r))[0])
    return times


def ratio(a: float, b: float) -> str:
    """a / b as `N.NNx`."""
    return f"{a / b:.2f}x"


def main() -> None:
    """Run the benchmark and print the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=10)
    parser.add_argument("--designs", type=int, default=8, help="distinct designs per problem and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=4)
    args = parser.parse_args()

    rows = load_rows(args.problems)
    for row in rows:  # the reference's own runs are measured once per problem, before any timing
        inprocess(variant(row["correct"], -1), row["reference"])
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROCTOR_")}
    env.update(PROCTOR_CACHE_SIZE="0", PROCTOR_LOG_LEVEL="warning", PYTHONPATH=str(ROOT))
    server = start_server(port, env)
    load_before = os.getloadavg()[0]
    rounds: list[dict[str, list[float]]] = []
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}") as client:
            for number in range(
                2, 2 + WARM_UP_PER_WORKER * pool_workers()
            ):  # each worker measures the references too
                for row in rows:
                    via_service(client, variant(row["correct"], -number), row["reference"])
            for round_ in range(args.rounds):
                rounds.append(side_by_side(rows, args.designs, round_ + 1, client))
    finally:
        server.terminate()
        server.wait(timeout=30)
    rates = throughput(rows, args.designs, args.rounds + 1, args.threads)
    load_after = os.getloadavg()[0]

    n = len(rows) * args.designs
    lines = [
        f"## verilog: the testbench verdict against its floor (commit {git_commit()})",
        "",
        f"Machine: {os.cpu_count()} cores, 1-min load average {load_before:.1f} before and {load_after:.1f} after "
        f"(a shared machine). {len(rows)} problems x {args.designs} distinct designs = {n} verdicts per round, "
        f"{args.rounds} rounds; the three judges take turns on each design. "
        "Reproduce: `.venv/bin/python bench/verilog_floor.py`.",
        "",
        "**(a) One verdict at a time** (median ms per verdict; `total` is the round's sum in s):",
        "",
        "| round | bare VerilogEval flow | Proctor in-process | ratio | Proctor via service | ratio | "
        "total bare / in-process / service s |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    medians = {key: [] for key in ("bare", "inprocess", "service")}
    totals = {key: [] for key in ("bare", "inprocess", "service")}
    for index, times in enumerate(rounds, 1):
        m = {key: statistics.median(values) for key, values in times.items()}
        t = {key: sum(values) for key, values in times.items()}
        for key in m:
            medians[key].append(m[key])
            totals[key].append(t[key])
        lines.append(
            f"| {index} | {1000 * m['bare']:.1f} | {1000 * m['inprocess']:.1f} | "
            f"{ratio(m['inprocess'], m['bare'])} | {1000 * m['service']:.1f} | {ratio(m['service'], m['bare'])} | "
            f"{t['bare']:.2f} / {t['inprocess']:.2f} / {t['service']:.2f} |"
        )
    mm = {key: statistics.median(values) for key, values in medians.items()}
    mt = {key: statistics.median(values) for key, values in totals.items()}
    lines += [
        f"| median of rounds | {1000 * mm['bare']:.1f} | {1000 * mm['inprocess']:.1f} | "
        f"{ratio(mm['inprocess'], mm['bare'])} | {1000 * mm['service']:.1f} | {ratio(mm['service'], mm['bare'])} | "
        f"{mt['bare']:.2f} / {mt['inprocess']:.2f} / {mt['service']:.2f} |",
        "",
        f"**(b) {args.threads} in flight** ({n} distinct designs each): Proctor in-process "
        f"**{rates['inprocess']:.1f} verdicts/s**, bare flow {rates['bare']:.1f} verdicts/s "
        f"({ratio(rates['bare'], rates['inprocess'])} slower).",
        "",
        f"**(c) {n} verdicts one at a time via the service**: {mt['service']:.2f} s against {mt['bare']:.2f} s bare "
        f"({ratio(mt['service'], mt['bare'])}; median of the rounds' totals).",
        "",
        "**(d) Profile** of one verdict (a correct sequential design, reference measured): each tool run as the "
        "sandbox measured it; `rest` is the verdict's wall time outside the tool runs (Python, the jail's "
        "set-up, the exchanges with it).",
        "",
        "| check | tool runs (CPU ms / wall ms) | tools wall ms | verdict wall ms | rest ms |",
        "|---|---|---:|---:|---:|",
    ]
    print("\n".join(lines))  # what is measured so far, before the profile
    sys.stdout.flush()
    lines = []
    profiles = profile(rows)
    compared = before_after(rows, args.designs, args.rounds + 3)
    for name, runs, seconds in profiles:
        tools = sum(wall for _, _, wall in runs)
        listed = ", ".join(f"{run} {1000 * cpu:.1f} / {1000 * wall:.1f}" for run, cpu, wall in runs)
        lines.append(
            f"| {name} | {listed} | {1000 * tools:.1f} | {1000 * seconds:.1f} | {1000 * (seconds - tools):.1f} |"
        )
    b = {key: statistics.median(values) for key, values in compared.items()}
    lines += [
        "",
        f"**(e) Before and after** ({len(compared['after'])} distinct designs, in-process, in turn with the bare "
        "flow; `before`: a fresh jail per tool run and the full gate for every candidate): median "
        f"{1000 * b['before']:.1f} ms before ({ratio(b['before'], b['bare'])} the bare flow), "
        f"{1000 * b['after']:.1f} ms after ({ratio(b['after'], b['bare'])}), bare {1000 * b['bare']:.1f} ms.",
    ]
    print("\n".join(lines))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
