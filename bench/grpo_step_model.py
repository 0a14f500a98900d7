"""GRPO step model: what judging one training step costs on a 64-core host, from costs measured on this machine.

Run with `.venv/bin/python bench/grpo_step_model.py` (about 1-2 minutes on 2 shared cores). It measures, for each
judge, CPU-seconds and wall time per problem, per submission and per test, then prints a model of one GRPO step
at realistic scale. `--save FILE` keeps the measurements as JSON; `--inputs FILE` models from such a file without
measuring again (change `--prompts`, `--samples`, `--tests`, `--cores`, `--efficiency` freely).

Judges measured (the same programs, the same tests, distinct submissions as in a GRPO group):

- code, C++ and Python stdio problems (bench/code.py's sum-of-squares program and test generator):
  - Proctor: the `code` verifier scoring one item in this process through its sandbox (nsjail): per submission
    the compile and the jail set-up, per test one run (a fork+exec of the binary, a fork of the warm Python);
  - process per test, SandboxFusion-style: bench/code.py's `sandboxfusion_style_judge`, one /run_code job per
    test, each compiling (C++) and running in a fresh nsjail, as verl's SandboxFusion integration does;
  - bare floor: bench/code.py's `bare_judge`, `g++ -O2` once per submission, then one unsandboxed
    `subprocess.run` per test (no isolation at all);
- Verilog, the problems of datasets/verilog (each design a correct or wrong implementation):
  - Proctor: the `verilog` verifier's testbench check in this process (the reference measured once per problem
    and cached, then one sandboxed verdict per design);
  - bare floor: VerilogEval's flow (bench/verilog.py's `verilogeval`: tb + reference + design compiled together
    by iverilog, vvp, the `Mismatches:` line decides), unsandboxed.

How a cost is measured. Each judge runs in a fresh Python process: one warm-up submission, then `--rounds`
rounds (default 3) of two segments: K submissions of T1 tests and K of T2 tests (Verilog: the first designs of
Q problems not seen before, then k more designs of each). A segment's CPU-seconds are those of the judge
process's whole tree between two snapshots: the process's own and reaped children's times plus, for every
descendant alive or zombie (warm jails, nsjail, compilers, simulators), its utime, stime, cutime and cstime from
/proc, so work done in long-lived warm slots counts as it happens (`tree_cpu_s`). Each round's two segments fix
the cost per submission (per problem) and per test (per design) (`fit_code`, `fit_verilog`); the model takes the
median over rounds. Wall times are medians of the per-submission times. Every verdict must be the right one, or
the report says so. This script is a child subreaper and idle while a judge runs, so a process orphaned out of
the judge's tree (a daemonised helper) is adopted by it and still counted by the snapshots.

Assumptions of the model (printed with the table):

- CPU time is what scales: judging a step is CPU-bound, independent work, so its wall time on a host is its
  CPU-seconds divided by the cores given to judging times a parallel efficiency (default 0.75: cores lost to the
  kernel's namespace, mount and cgroup set-up under contention, memory bandwidth, the service itself). Wall times
  measured on 2 shared cores include waiting for a CPU and are shown for latency only.
- No step is faster than its longest chain: Proctor and the floor are taken to run a submission's tests one
  after another, a process-per-test judge to spread them over cores, so the chain is the submission (or one
  test) plus the problem's one-time cost. At 8,192 submissions on 64 cores the chain never decides.
- Memory: one judge in flight per core, each at most the largest single process measured (the compiler for C++,
  iverilog for Verilog), unless `--memory-per-slot-mb` says otherwise.
- Every sample is a distinct program (no cache hits), all are judged (no early stop), code problems have no
  per-problem cost (stdio tests), and a Verilog problem's reference is measured once per step.

What a 2-core measurement can say: the CPU cost of each step of each judge, on this kernel and these CPUs, and
their ratios, which hold on any host with similar cores. What it cannot: how the kernel's namespace and cgroup
set-up, fork and mount locks, and memory bandwidth behave with 64 jails at once (the efficiency flag stands in),
per-core speed of another machine, the service's HTTP and pool-worker hops (scored in-process here), and the
noise of a shared machine: wall times wait for a CPU, and CPU-seconds themselves grow somewhat when other work
shares the caches, and a judge that polls spends more while it waits (read the load average in the report).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import datetime as dt
import importlib.util
import json
import math
import os
import platform
import resource
import signal
import statistics
import subprocess
import sys
import time
import uuid
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent

# -- the model: pure functions -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Costs:
    """One judge's measured costs in seconds: CPU (what scales) and wall (latency on the measuring machine)."""

    judge: str
    cpu_per_problem: float
    cpu_per_submission: float
    cpu_per_test: float
    wall_per_problem: float
    wall_per_submission: float
    wall_per_test: float
    peak_mb: float  # largest single process seen (RSS)
    tests_in_parallel: bool = False  # a process-per-test judge can spread one submission's tests over cores
    right: bool = True  # every verdict in the measurement was the right one
    note: str = ""


@dataclass(frozen=True)
class Scale:
    """One GRPO step and the host that judges it."""

    prompts: int = 512
    samples: int = 16
    tests: int = 50  # per submission; 0 for a Verilog step (the testbench is the test)
    cores: int = 64
    efficiency: float = 0.75  # fraction of the cores' time that does judging work at full load
    memory_per_slot_mb: float | None = None  # None: the judge's measured peak process

    def __post_init__(self) -> None:
        """Refuse a scale the model cannot mean."""
        if self.prompts < 1 or self.samples < 1 or self.tests < 0 or self.cores < 1:
            raise ValueError("prompts, samples and cores must be at least 1, tests at least 0")
        if not 0.0 < self.efficiency <= 1.0:
            raise ValueError("efficiency must be in (0, 1]")
        if self.memory_per_slot_mb is not None and not self.memory_per_slot_mb > 0:
            raise ValueError("memory per slot must be positive")


@dataclass(frozen=True)
class StepRow:
    """The model's figures for one judge at one scale."""

    judge: str
    cpu_s: float  # CPU-seconds for the whole step
    chain_s: float  # the longest chain of work that cannot be spread
    wall_s: float  # modelled wall time of judging the step
    memory_gb: float  # one judge in flight per core
    vs_floor: float  # wall_s over the floor's wall_s (1.0 for the floor itself)
    right: bool
    note: str = ""


def nonneg(value: float) -> float:
    """A fitted cost below zero is measurement noise around zero (a judge without that cost): 0."""
    return max(0.0, value)


def submission_cpu_s(costs: Costs, tests: int) -> float:
    """CPU-seconds to judge one submission of `tests` tests (its problem's one-time cost excluded)."""
    return nonneg(costs.cpu_per_submission) + tests * nonneg(costs.cpu_per_test)


def step_cpu_s(costs: Costs, scale: Scale) -> float:
    """CPU-seconds to judge one step: each problem's one-time cost, then every sample's submission."""
    return scale.prompts * (
        nonneg(costs.cpu_per_problem) + scale.samples * submission_cpu_s(costs, scale.tests)
    )


def chain_s(costs: Costs, scale: Scale) -> float:
    """The longest chain that cannot be spread over cores: a problem's one-time cost, then one submission
    (its tests one after another, or one test when the judge runs each test on its own)."""
    tests_in_chain = min(scale.tests, 1) if costs.tests_in_parallel else scale.tests
    return (
        nonneg(costs.wall_per_problem)
        + nonneg(costs.wall_per_submission)
        + tests_in_chain * nonneg(costs.wall_per_test)
    )


def step_wall_s(costs: Costs, scale: Scale) -> float:
    """Modelled wall time of judging a step: CPU over the cores' useful time, never below the longest chain."""
    return max(step_cpu_s(costs, scale) / (scale.cores * scale.efficiency), chain_s(costs, scale))


def cores_for(costs: Costs, scale: Scale, target_s: float) -> int:
    """Cores needed to judge the step within `target_s` at the scale's efficiency (the chain permitting)."""
    if target_s <= 0:
        raise ValueError("target_s must be positive")
    if chain_s(costs, scale) > target_s:
        raise ValueError("no number of cores judges this step that fast: its longest chain is longer")
    return max(1, math.ceil(step_cpu_s(costs, scale) / (target_s * scale.efficiency)))


def memory_gb(costs: Costs, scale: Scale) -> float:
    """Memory with one judge in flight per core, each at the slot size (measured peak unless the scale sets it)."""
    per_slot = scale.memory_per_slot_mb if scale.memory_per_slot_mb is not None else costs.peak_mb
    return scale.cores * per_slot / 1024


def model(judges: list[Costs], floor: str | None, scale: Scale) -> list[StepRow]:
    """One row per judge at `scale`, each compared with the judge named `floor` (NaN when there is none)."""
    by_name = {costs.judge: costs for costs in judges}
    if floor is not None and floor not in by_name:
        raise ValueError(f"floor {floor!r} is not among the judges")
    floor_wall = step_wall_s(by_name[floor], scale) if floor is not None else math.nan
    rows = []
    for costs in judges:
        wall = step_wall_s(costs, scale)
        rows.append(
            StepRow(
                judge=costs.judge,
                cpu_s=step_cpu_s(costs, scale),
                chain_s=chain_s(costs, scale),
                wall_s=wall,
                memory_gb=memory_gb(costs, scale),
                vs_floor=wall / floor_wall if floor_wall > 0 else math.nan,
                right=costs.right,
                note=costs.note,
            )
        )
    return rows


def duration(seconds: float) -> str:
    """Seconds as a short human duration."""
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def ms(seconds: float, digits: int = 1) -> str:
    """Seconds as milliseconds; a fitted value below zero is shown as the 0 the model uses, with the fit."""
    if seconds < 0:
        return f"0 (fit {seconds * 1000:.{digits}f})"
    return f"{seconds * 1000:.{digits}f} ms"


def costs_table(judges: list[Costs], unit: str, inner: str) -> list[str]:
    """Markdown rows of the measured inputs: per problem, per `unit` and per `inner` (or no inner column)."""
    head = f"| judge | CPU / problem | CPU / {unit} |" + (f" CPU / {inner} |" if inner else "")
    head += f" wall / problem | wall / {unit} |" + (f" wall / {inner} |" if inner else "")
    head += " largest process | verdicts right |"
    columns = head.count("|") - 1
    lines = [head, "|---|" + "---:|" * (columns - 2) + "---|"]
    for c in judges:
        cells = [c.judge, ms(c.cpu_per_problem), ms(c.cpu_per_submission)]
        if inner:
            cells.append(ms(c.cpu_per_test, 2))
        cells += [ms(c.wall_per_problem), ms(c.wall_per_submission)]
        if inner:
            cells.append(ms(c.wall_per_test, 2))
        cells += [f"{c.peak_mb:.0f} MB" if c.peak_mb > 0 else "n/a", "yes" if c.right else "**NO**"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def step_table(rows: list[StepRow], scale: Scale, target_s: float, judges: list[Costs]) -> list[str]:
    """Markdown rows of the modelled step for each judge."""
    by_name = {c.judge: c for c in judges}
    lines = [
        f"| judge | CPU for the step | wall on {scale.cores} cores | at efficiency 1.0 to 0.5 | vs floor | "
        f"longest chain | cores to judge in {duration(target_s)} | memory, {scale.cores} in flight |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        try:
            need = f"{cores_for(by_name[row.judge], scale, target_s):,}"
        except ValueError:
            need = "none (chain too long)"
        best = step_wall_s(by_name[row.judge], replace(scale, efficiency=1.0))
        worst = step_wall_s(by_name[row.judge], replace(scale, efficiency=0.5))
        lines.append(
            f"| {row.judge} | {row.cpu_s / 3600:.2f} core-h | **{duration(row.wall_s)}** | "
            f"{duration(best)} to {duration(worst)} | "
            f"{'n/a' if math.isnan(row.vs_floor) else f'{row.vs_floor:.1f}x'} | {duration(row.chain_s)} | {need} | "
            f"{f'{row.memory_gb:.1f} GB' if row.memory_gb > 0 else 'n/a'} |"
        )
    return lines


def assumptions(scale: Scale, verilog_scale: Scale) -> list[str]:
    """The model's assumptions as Markdown bullets."""
    slot = (
        f"{scale.memory_per_slot_mb:.0f} MB per slot (set)"
        if scale.memory_per_slot_mb is not None
        else "one judge in flight per core, each the size of the largest single process measured in its tree "
        "(the compiler, the interpreter, iverilog or vvp); idle warm slots and the service itself not counted"
    )
    return [
        f"- Code step: {scale.prompts} prompts x {scale.samples} samples x {scale.tests} tests = "
        f"{scale.prompts * scale.samples:,} submissions, {scale.prompts * scale.samples * scale.tests:,} test runs. "
        f"Verilog step: {verilog_scale.prompts} problems x {verilog_scale.samples} designs = "
        f"{verilog_scale.prompts * verilog_scale.samples:,} verdicts, each problem's reference measured once.",
        f"- Host: {scale.cores} cores all given to judging, parallel efficiency {scale.efficiency:.2f}. CPU time is "
        "what scales: wall = CPU-seconds / (cores x efficiency), never below the longest chain (a problem's "
        "one-time cost plus one submission, its tests in sequence for Proctor and the floor, one test for a "
        "process-per-test judge).",
        f"- Memory: {slot}.",
        "- Every sample is a distinct program (no cache hits) and is judged in full; code problems have no "
        "per-problem cost (stdio tests); compile cost is per submission (per test for SandboxFusion-style, which "
        "compiles in every test's fresh sandbox).",
        "- Measured on the machine named above, scored in-process (no HTTP or pool-worker hop); 2 shared cores say "
        "what each judge costs in CPU and how the judges compare, not how 64 concurrent jails contend in the "
        "kernel (namespace, mount and cgroup set-up) or for memory bandwidth: the efficiency stands in for that.",
    ]


# -- saving and loading measurements ------------------------------------------------------------------------


def dump_inputs(measured: dict[str, Any]) -> str:
    """The measurements as JSON (costs as plain dicts)."""
    out = dict(measured)
    for key in ("code_cpp", "code_python", "verilog"):
        out[key] = [asdict(c) for c in measured[key]]
    return json.dumps(out, indent=2, sort_keys=True)


def load_inputs(text: str) -> dict[str, Any]:
    """Measurements saved by `dump_inputs`, costs rebuilt."""
    data = json.loads(text)
    for key in ("code_cpp", "code_python", "verilog"):
        data[key] = [Costs(**c) for c in data[key]]
    return data


# -- fitting: pure ---------------------------------------------------------------------------------------


def fit_code(cpu_t1: float, cpu_t2: float, k: int, t1: int, t2: int) -> tuple[float, float]:
    """(per submission, per test) from the CPU of K submissions of T1 tests and of K submissions of T2 tests."""
    if k < 1 or t2 <= t1:
        raise ValueError("need K >= 1 and T2 > T1")
    per_test = (cpu_t2 - cpu_t1) / (k * (t2 - t1))
    return cpu_t1 / k - per_test * t1, per_test


def fit_verilog(cpu_first: float, cpu_more: float, q: int, k: int) -> tuple[float, float]:
    """(per problem, per design) from the CPU of Q problems' first designs and of k more designs for each."""
    if q < 1 or k < 1:
        raise ValueError("need Q >= 1 and k >= 1")
    per_design = cpu_more / (q * k)
    return cpu_first / q - per_design, per_design


def medians(fits: list[tuple[float, float]]) -> tuple[float, float]:
    """The median of each member over rounds."""
    first, second = zip(*fits, strict=True)
    return statistics.median(first), statistics.median(second)


def stat_ticks(stat: str) -> int:
    """utime + stime + cutime + cstime, in clock ticks, from a /proc/<pid>/stat line: the process's own CPU and
    that of every descendant it has reaped (the command name may hold spaces and parentheses)."""
    fields = stat.rpartition(")")[2].split()
    # fields[0] is the state (field 3 of proc(5)); utime, stime, cutime, cstime are fields 14 to 17
    return sum(int(value) for value in fields[11:15])


# -- measuring: one process per judge, CPU of its whole process tree between snapshots ---------------------

PR_SET_CHILD_SUBREAPER = 36
JUDGE_TIMEOUT_S = 600  # a hung judge stops the run instead of holding the shared machine
SETTLE_S = 0.3  # after a segment, let the work it set off in the background (refilling warm slots) land in it

# code: K submissions of T1 tests, then of T2 tests, per round; Verilog: Q new problems' first designs, then k
# more designs of each, per round.
JUDGES: dict[str, dict[str, Any]] = {
    "cpp:proctor": {"family": "code", "language": "cpp", "t1": 2, "t2": 100, "k": 3},
    "cpp:sandboxfusion": {"family": "code", "language": "cpp", "t1": 1, "t2": 3, "k": 2},
    "cpp:bare": {"family": "code", "language": "cpp", "t1": 2, "t2": 100, "k": 3},
    "python:proctor": {"family": "code", "language": "python", "t1": 2, "t2": 50, "k": 5},
    "python:sandboxfusion": {"family": "code", "language": "python", "t1": 2, "t2": 20, "k": 3},
    "python:bare": {"family": "code", "language": "python", "t1": 2, "t2": 20, "k": 3},
    "verilog:proctor": {"family": "verilog", "q": 4, "k": 4},
    "verilog:bare": {"family": "verilog", "q": 4, "k": 4},
}
LABELS = {
    "proctor": "Proctor (nsjail, warm)",
    "sandboxfusion": "process per test, SandboxFusion-style (nsjail)",
    "bare": "bare floor (unsandboxed)",
    "verilog:proctor": "Proctor testbench check (nsjail)",
    "verilog:bare": "bare floor: VerilogEval's flow (unsandboxed)",
}


def bench_module(name: str) -> ModuleType:
    """bench/<name>.py loaded under a private name (bench/code.py would shadow the standard library's `code`)."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))  # the bench scripts import their shared `common` module
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def distinct(source: str, language: str, tag: str) -> str:
    """The program with an unused constant holding `tag`: every sample of a GRPO group is its own program, in
    its code and not only in a comment (a cache keyed on preprocessed or comment-stripped text misses too)."""
    body = source.rstrip()
    if language == "python":
        return f'{body}\nSAMPLE_TAG = "{tag}"\n'
    if language == "verilog":
        head, end, tail = body.rpartition("endmodule")
        if not end:
            raise ValueError("a Verilog design without endmodule")
        return f'{head}  localparam SAMPLE_TAG = "{tag}";\nendmodule{tail}\n'
    return f'{body}\nstatic const char SAMPLE_TAG[] = "{tag}";\n'


def tree_cpu_s() -> float:
    """CPU-seconds used so far by this process, every descendant, and every orphan the parent (this script's
    measuring process, a child subreaper that waits on us alone) adopted: alive, zombie or reaped. A reaped
    process is in its reaper's cutime/cstime, so summing the four times over the live tree counts each once."""
    me = os.getpid()
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
    ticks = 0
    pending = descendants_of(me) + [pid for pid in descendants_of(os.getppid()) if pid != me]
    seen: set[int] = set()
    while pending:
        pid = pending.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            ticks += stat_ticks(Path(f"/proc/{pid}/stat").read_text())
        except (OSError, ValueError):
            continue  # it ended and was reaped between the listing and the read: its time is with its reaper
        pending += descendants_of(pid)
    return total + ticks / os.sysconf("SC_CLK_TCK")


def descendants_of(pid: int) -> list[int]:
    """The direct children of every thread of `pid` (empty when it is gone)."""
    found: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return found
    for task in tasks:
        try:
            found += [int(p) for p in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


class Segment:
    """CPU of the whole process tree and wall time per item over one segment of work."""

    def __init__(self) -> None:
        """Take the first snapshot."""
        self.times: list[float] = []
        self.right = True
        self.errors: list[str] = []
        self.start_cpu = tree_cpu_s()

    def item(self, run: Any, *args: Any, want: Any = True) -> None:
        """Judge one item, timing it; a verdict other than `want` marks the segment wrong."""
        started = time.perf_counter()
        try:
            self.right &= run(*args) == want
        except Exception as error:  # noqa: BLE001 - e.g. the bare judge's own wall timeout on a loaded machine
            self.right = False
            self.errors.append(repr(error)[:300])
        self.times.append(time.perf_counter() - started)

    def close(self) -> dict[str, Any]:
        """Settle, take the last snapshot, and report."""
        time.sleep(SETTLE_S)
        cpu = tree_cpu_s() - self.start_cpu
        return {"cpu_s": cpu, "times": self.times, "right": self.right, "errors": self.errors}


def code_judge(judge: str, language: str) -> Any:
    """A function (source, reference) -> whether the judge passed the program on every test."""
    code = bench_module("code")
    kind = judge.split(":")[1]
    if kind == "sandboxfusion":
        return lambda source, reference: bool(code.sandboxfusion_style_judge(language, source, reference))
    if kind == "bare":
        return lambda source, reference: bool(code.bare_judge(language, source, reference))
    from proctor.engine import prepare

    importlib.import_module("proctor.verifiers.code")

    def proctor(source: str, reference: dict[str, Any]) -> bool:
        prepared = prepare(
            {"verifier": "code", "response": code.fenced(source, language), "reference": reference}
        )
        verdict = prepared.spec.score(prepared.response, prepared.reference, prepared.options)
        return verdict.status.value == "ok" and verdict.reward == 1.0

    return proctor


def code_rounds(judge: str, nonce: str, rounds: int) -> list[dict[str, Any]]:
    """In this process: a warm-up submission, then per round K submissions of T1 tests and K of T2 tests."""
    conf = JUDGES[judge]
    code = bench_module("code")
    language = conf["language"]
    program = code.STDIO_CPP if language == "cpp" else code.STDIO_PY
    full = code.stdio_problem(language)
    if len(full["tests"]["cases"]) < conf["t2"]:
        raise SystemExit(
            f"{judge}: T2 = {conf['t2']} tests, but the problem has {len(full['tests']['cases'])}"
        )

    def reference(tests: int) -> dict[str, Any]:
        return dict(full, tests=dict(full["tests"], cases=full["tests"]["cases"][:tests]))

    run = code_judge(judge, language)
    warm = Segment()
    warm.item(run, distinct(program, language, f"{nonce}-warm"), reference(conf["t1"]))
    out = []
    for r in range(rounds):
        found = {}
        for name in ("t1", "t2"):
            segment = Segment()
            for i in range(conf["k"]):
                segment.item(
                    run, distinct(program, language, f"{nonce}-{r}-{name}-{i}"), reference(conf[name])
                )
            found[name] = segment.close()
        found["t1"]["right"] &= warm.right
        out.append(found)
    return out


def verilog_rounds(judge: str, nonce: str, rounds: int) -> list[dict[str, Any]]:
    """In this process: a warm-up problem, then per round Q new problems' first designs, then k more designs of
    each; correct and wrong designs in equal shares in both segments (Q and k even)."""
    conf = JUDGES[judge]
    verilog = bench_module("verilog")
    rows = verilog.load_rows()
    q, k = conf["q"], conf["k"]
    if q % 2 or k % 2:
        raise SystemExit(
            "Q and k must be even: both segments then judge as many correct designs as wrong ones"
        )
    if 1 + rounds * q > len(rows):
        raise SystemExit(f"{rounds} rounds of {q} problems need more than the {len(rows)} problems there are")
    if judge.endswith(":bare"):

        def run(source: str, reference: dict[str, Any]) -> float | None:
            return verilog.verilogeval(source, reference)

    else:

        def run(source: str, reference: dict[str, Any]) -> float | None:
            return verilog.proctor(source, reference, ["testbench"])[0]

    def design(row: dict[str, Any], i: int, j: int) -> tuple[str, float]:
        # correct and wrong in turn, shifted by the problem's place, so the first designs and the later ones hold
        # the same mix and the per-problem cost is the problem's own, not the difference between the kinds
        source, want = (row["correct"], 1.0) if (i + j) % 2 == 0 else (row["wrong"], 0.0)
        return distinct(source, "verilog", f"{nonce}-{row['id']}-{i}"), want

    warm = Segment()
    source, want = design(rows[0], 0, 0)
    warm.item(run, source, rows[0]["reference"], want=want)
    out = []
    for r in range(rounds):
        problems = rows[1 + r * q : 1 + (r + 1) * q]
        first = Segment()
        for j, row in enumerate(problems):
            source, want = design(row, 0, j)
            first.item(run, source, row["reference"], want=want)
        first_found = first.close()  # before the next segment starts: its snapshot ends this one
        more = Segment()
        for j, row in enumerate(problems):
            for i in range(1, 1 + k):
                source, want = design(row, i, j)
                more.item(run, source, row["reference"], want=want)
        out.append({"first": first_found, "more": more.close()})
        out[-1]["first"]["right"] &= warm.right
    return out


def judge_main(judge: str, nonce: str, rounds: str) -> None:
    """The child process: every round of one judge, then close the sandbox backend; one JSON line on stdout."""
    family = JUDGES[judge]["family"]
    found = (code_rounds if family == "code" else verilog_rounds)(judge, nonce, int(rounds))
    out: dict[str, Any] = {"rounds": found}
    backends = sys.modules.get("proctor.sandboxes.backends")  # only a judge that used a sandbox loaded it
    if backends is not None:
        try:
            close = getattr(backends.get_backend(None), "close", None)
            if close is not None:
                close()  # the warm jails end now, so the peak below includes them
        except Exception as error:  # noqa: BLE001 - reported; the figures above are already taken
            out["close_error"] = repr(error)
    out["children_peak_mb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(json.dumps(out), flush=True)


def become_subreaper() -> None:
    """Orphans of the judge processes become our children: the judge's snapshots still see them, we reap them."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def reap_orphans(grace_s: float = 10.0) -> int:
    """Reap adopted orphans, killing by pid any still running after `grace_s`; how many there were."""
    deadline = time.monotonic() + grace_s
    adopted = 0
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return adopted
        if pid:
            adopted += 1
            continue
        if time.monotonic() > deadline:
            for child in descendants_of(os.getpid()):
                with contextlib.suppress(ProcessLookupError):  # it may end between the listing and the signal
                    os.kill(child, signal.SIGKILL)
            deadline = math.inf
        time.sleep(0.05)


class JudgeFailed(RuntimeError):
    """A judge's process failed or hung: its row is left out and the report names it."""


def run_judge(judge: str, nonce: str, rounds: int) -> dict[str, Any]:
    """One judge's rounds in a fresh process; its JSON, plus the whole process's CPU and any adopted orphans."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        done = subprocess.run(
            [sys.executable, __file__, "--judge", judge, nonce, str(rounds)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=JUDGE_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as error:
        reap_orphans(0.0)
        raise JudgeFailed(f"judge {judge} ran past {JUDGE_TIMEOUT_S} s") from error
    orphans = reap_orphans()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise JudgeFailed(f"judge {judge} failed:\n{done.stderr[-2000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    out["process_cpu_s"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    out["orphans"] = orphans  # adopted while the judge ran (its snapshots counted them), reaped here
    return out


def measure_code(judge: str, nonce: str, rounds: int) -> tuple[Costs, dict[str, Any]]:
    """Costs of one code judge: CPU fitted per round and its median, wall from the per-submission medians."""
    conf = JUDGES[judge]
    t1, t2, k = conf["t1"], conf["t2"], conf["k"]
    raw = run_judge(judge, nonce, rounds)
    found = raw["rounds"]
    per_sub, per_test = medians([fit_code(r["t1"]["cpu_s"], r["t2"]["cpu_s"], k, t1, t2) for r in found])
    m1 = statistics.median(t for r in found for t in r["t1"]["times"])
    m2 = statistics.median(t for r in found for t in r["t2"]["times"])
    wall_test = (m2 - m1) / (t2 - t1)
    kind = judge.split(":")[1]
    costs = Costs(
        judge=LABELS[kind],
        cpu_per_problem=0.0,
        cpu_per_submission=per_sub,
        cpu_per_test=per_test,
        wall_per_problem=0.0,
        wall_per_submission=m1 - wall_test * t1,
        wall_per_test=wall_test,
        peak_mb=raw["children_peak_mb"],
        tests_in_parallel=kind == "sandboxfusion",
        right=all(seg["right"] for r in found for seg in r.values()),
        note=f"{rounds} rounds of K={k} submissions of {t1} and {t2} tests",
    )
    return costs, raw


def measure_verilog(judge: str, nonce: str, rounds: int) -> tuple[Costs, dict[str, Any]]:
    """Costs of one Verilog judge: CPU fitted per round and its median, wall from first and later verdicts."""
    conf = JUDGES[judge]
    q, k = conf["q"], conf["k"]
    raw = run_judge(judge, nonce, rounds)
    found = raw["rounds"]
    per_problem, per_design = medians(
        [fit_verilog(r["first"]["cpu_s"], r["more"]["cpu_s"], q, k) for r in found]
    )
    first = statistics.median(t for r in found for t in r["first"]["times"])
    later = statistics.median(t for r in found for t in r["more"]["times"])
    costs = Costs(
        judge=LABELS[judge],
        cpu_per_problem=per_problem,
        cpu_per_submission=per_design,
        cpu_per_test=0.0,
        wall_per_problem=first - later,
        wall_per_submission=later,
        wall_per_test=0.0,
        peak_mb=raw["children_peak_mb"],
        right=all(seg["right"] for r in found for seg in r.values()),
        note=f"{rounds} rounds of Q={q} problems, 1 + {k} designs each",
    )
    return costs, raw


def measure(only: set[str] | None = None, rounds: int = 3) -> dict[str, Any]:
    """Every judge's costs on this machine, with the machine's description and load."""
    become_subreaper()
    nonce = uuid.uuid4().hex[:12]  # no cache of an earlier run can answer for these programs
    load_before = os.getloadavg()
    started = time.perf_counter()
    out: dict[str, Any] = {"code_cpp": [], "code_python": [], "verilog": [], "raw": {}, "failed": []}
    for judge in JUDGES:
        if only and judge not in only:
            continue
        print(f"measuring {judge} ...", file=sys.stderr, flush=True)
        family = JUDGES[judge]["family"]
        try:
            costs, raw = (measure_code if family == "code" else measure_verilog)(judge, nonce, rounds)
        except JudgeFailed as error:
            print(error, file=sys.stderr, flush=True)
            out["failed"].append(judge)
            continue
        key = "verilog" if family == "verilog" else f"code_{JUDGES[judge]['language']}"
        out[key].append(costs)
        out["raw"][judge] = raw
    load_after = os.getloadavg()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True)
    out["machine"] = {
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "cpu": cpu_model(),
        "load_before": list(load_before),
        "load_after": list(load_after),
        "measured_s": time.perf_counter() - started,
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": (commit.stdout.strip() or "unknown") + (" (dirty tree)" if dirty.stdout.strip() else ""),
        # the judges' own code, uncommitted: the figures measure the working tree, not the commit
        "dirty_judge_files": sorted(
            line[3:]
            for line in dirty.stdout.splitlines()
            if line[3:].startswith(("sandboxes/", "verifiers/code/", "verifiers/verilog/"))
        ),
        "backend": os.environ.get("PROCTOR_SANDBOX_BACKEND", "nsjail (default)"),
        "rounds": rounds,
    }
    return out


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo, or 'unknown'."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


# -- the report ---------------------------------------------------------------------------------------------


def report(measured: dict[str, Any], scale: Scale, verilog_scale: Scale, target_s: float) -> str:
    """The Markdown report: inputs measured, then the modelled step for code (C++, Python) and Verilog."""
    m = measured["machine"]
    lines = [
        f"## GRPO step model: judging one step on a {scale.cores}-core host ({m['date']}, commit {m['commit']})",
        "",
        f"Measured on {m['cores']} cores ({m['cpu']}), Python {m['python']}, sandbox backend {m['backend']}; "
        f"1/5/15-min load average {'/'.join(f'{x:.1f}' for x in m['load_before'])} before and "
        f"{'/'.join(f'{x:.1f}' for x in m['load_after'])} after ({m['measured_s']:.0f} s of measuring, "
        f"{m.get('rounds', 1)} rounds per judge, medians). "
        + (
            f"Uncommitted judge code measured: {', '.join(m['dirty_judge_files'])}. "
            if m.get("dirty_judge_files")
            else ""
        )
        + "CPU-seconds: the judge process's whole tree between snapshots, fitted per round; wall: medians per "
        "submission on this "
        "shared machine. Reproduce: `.venv/bin/python bench/grpo_step_model.py --save m.json`, then "
        "`--inputs m.json` with other `--prompts/--samples/--tests/--cores/--efficiency`.",
        "",
        "Assumptions:",
        "",
        *assumptions(scale, verilog_scale),
        "",
    ]
    for key, title in (("code_cpp", "C++ stdio"), ("code_python", "Python stdio")):
        judges = measured[key]
        if not judges:
            continue
        floor = LABELS["bare"] if any(c.judge == LABELS["bare"] for c in judges) else None
        lines += [
            f"**Code, {title}: measured inputs** (per submission includes the compile and the jail set-up):",
            "",
            *costs_table(judges, "submission", "test"),
            "",
            f"**Code, {title}: one step** ({scale.prompts} x {scale.samples} x {scale.tests} tests):",
            "",
            *step_table(model(judges, floor, scale), scale, target_s, judges),
            "",
        ]
        bare = next((c for c in judges if c.judge == LABELS["bare"]), None)
        if bare is not None and key == "code_cpp":
            proctor = next((c for c in judges if c.judge == LABELS["proctor"]), None)
            above = (
                f" Proctor's per-submission cost above it (jail set-up, compile in the jail, the verifier): "
                f"{ms(proctor.cpu_per_submission - bare.cpu_per_submission)}; per test "
                f"{ms(proctor.cpu_per_test - bare.cpu_per_test, 2)} above the floor's run."
                if proctor is not None
                else ""
            )
            lines += [
                f"The compile per submission (`g++ -O2`, the floor's per-submission cost) is "
                f"{ms(bare.cpu_per_submission)} CPU; every sandboxed judge pays it too, SandboxFusion-style once "
                f"per test.{above}",
                "",
            ]
        if bare is not None and key == "code_python":
            lines += [
                "The Python floor starts a fresh interpreter per test (bench/code.py's bare judge), so a judge "
                "that forks a warm interpreter per test, as Proctor does, can cost less than this floor.",
                "",
            ]
    if measured["verilog"]:
        judges = measured["verilog"]
        floor = LABELS["verilog:bare"] if any(c.judge == LABELS["verilog:bare"] for c in judges) else None
        lines += [
            "**Verilog: measured inputs** (per problem: the reference's one-time measurement; per design: one "
            "testbench verdict):",
            "",
            *costs_table(judges, "design", ""),
            "",
            f"**Verilog: one step** ({verilog_scale.prompts} problems x {verilog_scale.samples} designs):",
            "",
            *step_table(model(judges, floor, verilog_scale), verilog_scale, target_s, judges),
            "",
        ]
    wrong = [c.judge for key in ("code_cpp", "code_python", "verilog") for c in measured[key] if not c.right]
    if wrong:
        lines += [
            f"**Some verdicts were wrong or failed** (these rows measure a broken or overloaded judge; the raw "
            f"output saved with `--save` holds the errors): {', '.join(wrong)}.",
            "",
        ]
    if measured.get("failed"):
        lines += [f"**Judges that failed to run** (left out): {', '.join(measured['failed'])}.", ""]
    return "\n".join(lines)


def main() -> None:
    """Measure (or load) the costs, print the model; `--judge` is the internal child-process entry."""
    if len(sys.argv) == 5 and sys.argv[1] == "--judge":
        judge_main(*sys.argv[2:5])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--inputs", type=Path, help="model from measurements saved with --save; measure nothing"
    )
    parser.add_argument("--save", type=Path, help="write the measurements to this JSON file")
    parser.add_argument(
        "--rounds", type=int, default=3, help="rounds of segments per judge; fitted costs are their medians"
    )
    parser.add_argument("--only", nargs="*", choices=list(JUDGES), help="measure only these judges")
    parser.add_argument("--prompts", type=int, default=512, help="prompts per code step")
    parser.add_argument("--samples", type=int, default=16, help="samples per prompt")
    parser.add_argument("--tests", type=int, default=50, help="tests per code submission")
    parser.add_argument("--verilog-prompts", type=int, default=512, help="problems per Verilog step")
    parser.add_argument("--verilog-samples", type=int, default=16, help="designs per Verilog problem")
    parser.add_argument("--cores", type=int, default=64, help="cores given to judging on the modelled host")
    parser.add_argument("--efficiency", type=float, default=0.75, help="parallel efficiency at full load")
    parser.add_argument(
        "--memory-per-slot-mb", type=float, help="memory per judge in flight (default: measured)"
    )
    parser.add_argument("--target-s", type=float, default=60.0, help="step judging time for the cores column")
    args = parser.parse_args()
    try:  # before measuring: a bad flag must not cost two minutes of the shared machine first
        scale = Scale(
            args.prompts, args.samples, args.tests, args.cores, args.efficiency, args.memory_per_slot_mb
        )
        verilog_scale = Scale(
            args.verilog_prompts,
            args.verilog_samples,
            0,
            args.cores,
            args.efficiency,
            args.memory_per_slot_mb,
        )
    except ValueError as error:
        parser.error(str(error))
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if not args.target_s > 0:
        parser.error("--target-s must be positive")
    if args.inputs is not None:
        measured = load_inputs(args.inputs.read_text())
    else:
        measured = measure(set(args.only) if args.only else None, args.rounds)
        if args.save is not None:
            args.save.write_text(dump_inputs(measured) + "\n")
    print(report(measured, scale, verilog_scale, args.target_s))


if __name__ == "__main__":
    main()
