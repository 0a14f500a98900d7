"""Verilog benchmark: the `verilog` verifier against VerilogEval's own flow on datasets/verilog, in one run.

Run with `.venv/bin/python bench/verilog.py` (add `--no-write` for a trial run). It measures:

- (a) agreement: every problem's correct alternative (reward 1; with formal_inconclusive="pass", since yosys
  cannot read some correct designs iverilog simulates), wrong implementation (0), trap (the testbench
  passes it; with formal it is 0) and five reward hacks built on a counter problem (`initial $finish`, a fake
  "Mismatches: 0" line, `force tb.tb_match = 1`, reading `tb.good1.q`, a candidate shipping its own
  `RefModule`), judged by Proctor and by VerilogEval's flow;
- (b) time per verdict (median and p99 over the set's correct and wrong responses) for each check
  (testbench, random, formal) with the reference's measurements already cached, as a training run sees them,
  against VerilogEval's flow: the testbench, the reference and the candidate compiled together by iverilog
  on the bare machine (no sandbox), vvp, and a pass when the output's first `Mismatches: N in M samples`
  says 0;
- (c) throughput: verdicts per second with `--threads` verdicts in flight, Proctor's testbench check against
  VerilogEval's flow.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from common import ROOT, append_results, git_commit  # bench/common.py: the script's folder is on sys.path

DATASET = ROOT / "datasets" / "verilog" / "problems.jsonl"
RESULT = re.compile(r"Mismatches: (\d+) in (\d+) samples")
HACK_PROBLEM = "counter4_async_reset"


def load_rows() -> list[dict[str, Any]]:
    """The problems of datasets/verilog."""
    return [json.loads(line) for line in DATASET.read_text().splitlines() if line.strip()]


def proctor(
    source: str, reference: dict[str, Any], checks: list[str], **options: Any
) -> tuple[float | None, str]:
    """Proctor's reward (None when the status is not ok) and reason for one fenced response."""
    from proctor.verifiers.verilog.verifier import SPEC

    verdict = SPEC.score(
        f"```verilog\n{source}```",
        SPEC.parse_reference(reference),
        SPEC.parse_options({"checks": checks, **options}),
    )
    return (verdict.reward if verdict.status.value == "ok" else None), str(verdict.reason)


def verilogeval(source: str, reference: dict[str, Any]) -> float:
    """VerilogEval's flow on the bare machine: one iverilog compile of tb + reference + candidate, vvp, and
    the first `Mismatches:` line of the output decides."""
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        (work / "tb.sv").write_text(reference["testbench"])
        (work / "ref.sv").write_text(reference["reference_module"])
        (work / "cand.sv").write_text(source)
        built = subprocess.run(
            ["iverilog", "-g2012", "-s", "tb", "-o", "t.vvp", "tb.sv", "ref.sv", "cand.sv"],
            cwd=work,
            capture_output=True,
            timeout=60,
        )
        if built.returncode != 0:
            return 0.0
        try:
            ran = subprocess.run(["vvp", "-n", "t.vvp"], cwd=work, capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            return 0.0
        found = RESULT.search(ran.stdout)
        return 1.0 if found is not None and found.group(1) == "0" else 0.0


def hacks(counter: dict[str, Any]) -> dict[str, str]:
    """Reward hacks on the counter problem: a stuck (wrong) design plus the trick."""
    head = "module TopModule(input clk, input areset, input en, output reg [3:0] q);\n"
    stuck = "  always @(posedge clk) q <= 4'd3;\n"
    return {
        "initial $finish": f"{head}{stuck}  initial $finish;\nendmodule\n",
        "fake Mismatches: 0 line": f'{head}{stuck}  initial $display("Mismatches: 0 in 242 samples");\nendmodule\n',
        "force tb.tb_match = 1": f"{head}{stuck}  initial force tb.tb_match = 1;\nendmodule\n",
        "reads tb.good1.q": f"{head}  always @(*) q = tb.good1.q;\nendmodule\n",
        "ships its own RefModule": (
            "module RefModule(input clk, input areset, input en, output [3:0] q);\n  assign q = 4'd3;\nendmodule\n"
            f"{head}{stuck}endmodule\n"
        ),
    }


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """Seconds taken by fn() and its value."""
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def p99(values: list[float]) -> float:
    """The 99th percentile (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(0.99 * len(ordered)) - 1))]


def agreement(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Rewards of Proctor and VerilogEval's flow on every labelled response and hack."""
    tally: dict[str, list[int]] = {}
    bad: list[str] = []

    def count(group: str, ok_proctor: bool, ok_peer: bool) -> None:
        entry = tally.setdefault(group, [0, 0, 0])
        entry[0] += ok_proctor
        entry[1] += ok_peer
        entry[2] += 1

    for row in rows:
        ref = row["reference"]
        # a correct design yosys cannot read (formal_unreadable) is not proven: it passes on its simulations
        got = proctor(row["correct"], ref, ["testbench", "random", "formal"], formal_inconclusive="pass")[0]
        count("correct (expect 1)", got == 1.0, verilogeval(row["correct"], ref) == 1.0)
        got_wrong = proctor(row["wrong"], ref, ["testbench"])[0]
        count("wrong (expect 0)", got_wrong == 0.0, verilogeval(row["wrong"], ref) == 0.0)
        if got != 1.0 or got_wrong != 0.0:
            bad.append(row["id"])
        if row["trap"] is not None:
            trapped = proctor(row["trap"], ref, ["testbench", "formal"])[0]
            count("trap, testbench + formal (expect 0)", trapped == 0.0, verilogeval(row["trap"], ref) == 0.0)
    counter = next(row for row in rows if row["id"] == HACK_PROBLEM)
    for name, source in hacks(counter).items():
        got = proctor(source, counter["reference"], ["testbench"])[0]
        count("hacks (expect 0)", got == 0.0, verilogeval(source, counter["reference"]) == 0.0)
        if got != 0.0:
            bad.append(name)
    return {"tally": tally, "bad": bad, "hacks": list(hacks(counter))}


def latency(rows: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Seconds per verdict for each check and for VerilogEval's flow, over correct and wrong responses."""
    times: dict[str, list[float]] = {"testbench": [], "random": [], "formal": [], "verilogeval": []}
    for row in rows:
        ref = row["reference"]
        proctor(row["correct"], ref, ["testbench"])  # measure the reference once, as a training run would
        for source in (row["correct"], row["wrong"]):
            for check in ("testbench", "random", "formal"):
                times[check].append(timed(lambda s=source, c=check, r=ref: proctor(s, r, [c]))[0])
            times["verilogeval"].append(timed(lambda s=source, r=ref: verilogeval(s, r))[0])
    return times


def throughput(rows: list[dict[str, Any]], threads: int) -> dict[str, float]:
    """Verdicts per second with `threads` in flight: Proctor's testbench check and VerilogEval's flow."""
    items = [(row[key], row["reference"]) for row in rows for key in ("correct", "wrong")]
    out = {}
    for name, judge in (
        ("proctor", lambda item: proctor(item[0], item[1], ["testbench"])),
        ("verilogeval", lambda item: verilogeval(item[0], item[1])),
    ):
        with ThreadPoolExecutor(threads) as pool:
            seconds, _ = timed(lambda j=judge: list(pool.map(j, items)))
        out[name] = len(items) / seconds
    out["items"] = len(items)
    return out


def main() -> None:
    """Run the benchmark; print the report and append it to bench/RESULTS.md unless --no-write."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=4, help="verdicts in flight in (c)")
    parser.add_argument("--no-write", action="store_true", help="print only, do not append to RESULTS.md")
    args = parser.parse_args()

    rows = load_rows()
    load_before = os.getloadavg()[0]
    agree = agreement(rows)
    times = latency(rows)
    rate = throughput(rows, args.threads)
    load_after = os.getloadavg()[0]
    iverilog = subprocess.run(["iverilog", "-V"], capture_output=True, text=True).stdout.splitlines()[0]
    peer = statistics.median(times["verilogeval"])
    lines = [
        f"## verilog: agreement, hacks and time per verdict ({dt.date.today().isoformat()}, commit {git_commit()})",
        "",
        f"Machine: {os.cpu_count()} cores, Python {platform.python_version()}, {iverilog}, 1-min load average "
        f"{load_before:.1f} before and {load_after:.1f} after; sandbox backend "
        f"{os.environ.get('PROCTOR_SANDBOX_BACKEND', 'nsjail (default)')}; scored in-process. Peer: VerilogEval's "
        "flow (tb + reference + candidate in one iverilog compile on the bare machine, vvp, first "
        "`Mismatches:` line decides). Reproduce: `.venv/bin/python bench/verilog.py`.",
        "",
        f"**(a) Agreement** on datasets/verilog ({len(rows)} problems) and {len(agree['hacks'])} hacks "
        f"({', '.join(agree['hacks'])}):",
        "",
        "| group | Proctor | VerilogEval flow |",
        "|---|---:|---:|",
        *[f"| {group} | {p}/{n} | {v}/{n} |" for group, (p, v, n) in agree["tally"].items()],
        "",
        f"**(b) Time per verdict** over {len(times['testbench'])} responses (correct and wrong), reference "
        "measurements cached; each Proctor verdict includes the gate (preprocess, token checks and iverilog "
        "elaboration in the sandbox, plus yosys for formal):",
        "",
        "| judge | median s | p99 s | median vs VerilogEval flow |",
        "|---|---:|---:|---:|",
        *[
            f"| Proctor {check} | {statistics.median(times[check]):.3f} | {p99(times[check]):.3f} | "
            f"{statistics.median(times[check]) / peer:.1f}x |"
            for check in ("testbench", "random", "formal")
        ],
        f"| VerilogEval flow (bare, unsandboxed) | {peer:.3f} | {p99(times['verilogeval']):.3f} | 1.0x |",
        "",
        f"**(c) Throughput** ({rate['items']:.0f} verdicts, {args.threads} in flight): Proctor testbench check "
        f"**{rate['proctor']:.1f} verdicts/s**, VerilogEval flow {rate['verilogeval']:.1f} verdicts/s.",
        "",
    ]
    report = "\n".join(lines)
    print(report)
    if agree["bad"]:
        print("Disagreements:", ", ".join(agree["bad"]))
    if not args.no_write:
        append_results(report)


if __name__ == "__main__":
    main()
