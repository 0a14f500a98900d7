"""Sandbox benchmark: per-execution cost, warm-start per-test cost, executions per second, false time limits.

Run with `.venv/bin/python bench/sandbox.py` (add `--no-write` to print only). In one run, on this machine:
1. Per-execution cost of the same tiny program (`python3 -c pass`, and a C hello compiled once on the host)
   started as a bare subprocess and through each backend that works here (target: nsjail <= 1.5x bare).
2. Per-test cost of a 100-test Python problem: a fresh interpreter per test (`Submission.run_many` with
   warm=False, tests batched into jobs) versus the warm-start mode (one sandbox holds the imported candidate
   and forks per test) (target: warm >= 5x faster).
3. Executions per second through the sandbox pool (`SandboxPool`, sized as the service sizes it).
4. The false time-limit rate with the machine loaded 8x by outside CPU burners (16 burner processes on 2
   cores): correct programs that each use about a quarter of their CPU limit, through the pool (target 0).
Every phase is bounded; burner processes are killed whatever happens (finally, atexit, SIGTERM/SIGINT).
"""

from __future__ import annotations

import argparse
import atexit
import base64
import datetime as dt
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import wait
from pathlib import Path

from common import append_results, git_commit  # bench/common.py: the script's folder is on sys.path

from proctor.sandboxes.backends import BACKENDS, get_backend
from proctor.sandboxes.job import Backend, Command, File, Job, RunLimits, RunVerdict
from proctor.sandboxes.pool import SandboxPool
from proctor.sandboxes.program import Submission
from proctor.settings import get_settings

PYTHON = "/usr/bin/python3"
C_HELLO = '#include <stdio.h>\nint main(void) { puts("hello"); return 0; }\n'
# A 100-test problem: read n, print the sum of the squares up to n.
PROBLEM = "n = int(input())\nprint(sum(i * i for i in range(n + 1)))\n"
PHASE_TIMEOUT_S = 600.0


# -- outside CPU burners ----------------------------------------------------------------------------------

_burners: list[subprocess.Popen[bytes]] = []


def start_burners(count: int) -> None:
    """Start `count` plain CPU-burning processes outside any sandbox, each in its own session."""
    for _ in range(count):
        _burners.append(
            subprocess.Popen(
                [PYTHON, "-c", "while True: pass"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        )


def kill_burners() -> None:
    """Kill every burner this script started (safe to call more than once)."""
    while _burners:
        process = _burners.pop()
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)


def _on_signal(number: int, frame: object) -> None:
    kill_burners()
    raise SystemExit(128 + number)


# -- measurements -----------------------------------------------------------------------------------------


def per_run_ms(run: Callable[[], object], repeat: int) -> tuple[float, float]:
    """(median, mean) milliseconds of `repeat` sequential calls, after one warm-up call."""
    run()
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples), statistics.fmean(samples)


def bare(argv: list[str], cwd: Path) -> Callable[[], object]:
    """A bare subprocess run of argv, as plain as it gets (no shell, output captured)."""

    def run() -> None:
        done = subprocess.run(argv, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True)
        if done.returncode != 0:
            raise RuntimeError(f"bare {argv} exited {done.returncode}")

    return run


def through(backend: Backend, job: Job) -> Callable[[], object]:
    """One run of `job` on `backend`; a non-ok verdict stops the benchmark (it would measure a failure)."""

    def run() -> None:
        result = backend.run(job)
        if result.verdict is not RunVerdict.ok:
            raise RuntimeError(f"{backend.name}: {result.verdict.value}: {result.commands[-1].detail}")

    return run


def compile_hello(directory: Path) -> Path:
    """The C hello compiled once on the host with gcc."""
    source = directory / "hello.c"
    source.write_text(C_HELLO)
    binary = directory / "hello"
    subprocess.run(["/usr/bin/gcc", "-O2", "-o", str(binary), str(source)], check=True)
    return binary


def hello_job(binary: Path) -> Job:
    """The compiled hello as a job: the binary travels into the sandbox as an executable file."""
    content = base64.b64encode(binary.read_bytes()).decode()
    return Job(
        files=[File(path="hello", content=content, base64=True, executable=True)],
        commands=[Command(argv=["./hello"])],
    )


def python_pass_job() -> Job:
    """`python3 -c pass` as a job."""
    return Job(commands=[Command(argv=[PYTHON, "-c", "pass"])])


def working_backends() -> tuple[dict[str, Backend], dict[str, str]]:
    """The backends that work here, and why the others do not."""
    works, missing = {}, {}
    for name in BACKENDS:
        try:
            backend = get_backend(name)
            ok, reason = backend.available()
        except Exception as exc:  # an optional backend that cannot even load is reported, not fatal
            ok, reason = False, f"{type(exc).__name__}: {exc}"
        if ok:
            works[name] = backend
        else:
            missing[name] = reason
    return works, missing


def bench_exec_cost(backends: dict[str, Backend], repeat: int, tmp: Path) -> list[dict]:
    """Per-execution cost of python3 -c pass and a C hello: bare, then each backend."""
    binary = compile_hello(tmp)
    rows = []
    for program, argv, job in (
        ("python3 -c pass", [PYTHON, "-c", "pass"], python_pass_job()),
        ("C hello (compiled once)", [str(binary)], hello_job(binary)),
    ):
        base_median, base_mean = per_run_ms(bare(argv, tmp), repeat)
        rows.append({"program": program, "how": "bare subprocess", "median": base_median, "mean": base_mean})
        for name, backend in backends.items():
            median, mean = per_run_ms(through(backend, job), repeat)
            rows.append(
                {
                    "program": program,
                    "how": name,
                    "median": median,
                    "mean": mean,
                    "ratio": median / base_median,
                }
            )
    return rows


def bench_per_test(backend: Backend, tests: int) -> dict:
    """Per-test ms of a 100-test Python problem: fresh interpreter per test vs the warm-start mode."""
    stdins = [f"{n}\n" for n in range(tests)]
    expected = [f"{sum(i * i for i in range(n + 1))}\n" for n in range(tests)]
    limits = RunLimits(cpu_s=2.0, memory_mb=256)
    with Submission("python", PROBLEM, limits=limits, backend=backend, warm=False) as submission:
        started = time.perf_counter()
        cold = submission.run_many(stdins, limits)
        cold_ms = (time.perf_counter() - started) * 1000 / tests
    cold_right = sum(
        r.verdict is RunVerdict.ok and r.stdout == e for r, e in zip(cold, expected, strict=False)
    )
    warm_ms, warm_tests_ms, warm_right = run_warm(backend, stdins, expected, limits)
    return {
        "tests": tests,
        "cold_ms": cold_ms,
        "cold_right": cold_right,
        "warm_ms": warm_ms,
        "warm_tests_ms": warm_tests_ms,
        "warm_right": warm_right,
        "speedup": cold_ms / warm_ms,
    }


def run_warm(
    backend: Backend, stdins: list[str], expected: list[str], limits: RunLimits
) -> tuple[float, float, int]:
    """Warm-start mode on the same tests: per-test ms with the server's start spread over the tests, per-test
    ms of the tests alone, and right answers."""
    from proctor.sandboxes.warm import WarmPython  # the languages helper's warm-start mode

    started = time.perf_counter()
    with WarmPython(PROBLEM, backend=backend, limits=limits) as warm:
        outcome = warm.start()
        if not outcome.ok:
            raise RuntimeError(f"warm start failed: {outcome.status}: {outcome.message}")
        loaded = time.perf_counter()
        results = [warm.run(stdin) for stdin in stdins]
        finished = time.perf_counter()
    right = sum(r.verdict is RunVerdict.ok and r.stdout == e for r, e in zip(results, expected, strict=False))
    return (finished - started) * 1000 / len(stdins), (finished - loaded) * 1000 / len(stdins), right


def bench_throughput(backend: Backend, workers: int, jobs: int) -> dict:
    """Executions per second of `python3 -c pass` jobs pushed through a SandboxPool of `workers`."""
    with SandboxPool(backend, workers, jobs) as pool:
        started = time.perf_counter()
        futures = [pool.submit(python_pass_job()) for _ in range(jobs)]
        done, pending = wait(futures, timeout=PHASE_TIMEOUT_S)
        elapsed = time.perf_counter() - started
    verdicts = Counter(f.result().verdict.value for f in done)
    return {
        "jobs": jobs,
        "workers": workers,
        "seconds": elapsed,
        "rate": len(done) / elapsed,
        "verdicts": verdicts,
    }


def quarter_cpu_program(cpu_s: float) -> str:
    """A correct program that spends cpu_s of its own CPU time, then prints the answer."""
    return (
        "import time\n"
        f"end = time.process_time() + {cpu_s}\n"
        "x = 0\n"
        "while time.process_time() < end:\n"
        "    x += 1\n"
        "print('ok')\n"
    )


def bench_false_time_limits(
    backend: Backend, workers: int, programs: int, burners: int, cpu_limit_s: float
) -> dict:
    """Correct programs using a quarter of their CPU limit, run while `burners` processes load the machine."""
    job = Job(
        commands=[
            Command(
                argv=[PYTHON, "-c", quarter_cpu_program(cpu_limit_s / 4)],
                limits=RunLimits(cpu_s=cpu_limit_s, memory_mb=256),
            )
        ]
    )
    load_before = os.getloadavg()[0]
    start_burners(burners)
    try:
        time.sleep(2.0)  # let the burners reach full speed before the first program starts
        with SandboxPool(backend, workers, programs) as pool:
            started = time.perf_counter()
            futures = [pool.submit(job) for _ in range(programs)]
            done, pending = wait(futures, timeout=PHASE_TIMEOUT_S)
            elapsed = time.perf_counter() - started
        load_during = os.getloadavg()[0]
    finally:
        kill_burners()
    results = [f.result() for f in done]
    commands = [r.commands[0] for r in results]
    verdicts = Counter(r.verdict.value for r in results)
    right = sum(c.verdict is RunVerdict.ok and c.stdout == "ok\n" for c in commands)
    return {
        "programs": programs,
        "burners": burners,
        "cpu_limit_s": cpu_limit_s,
        "finished": len(done),
        "right": right,
        "false_time_limits": verdicts.get("time_limit", 0),
        "verdicts": verdicts,
        "median_wall_s": statistics.median(c.wall_s for c in commands) if commands else 0.0,
        "max_wall_s": max((c.wall_s for c in commands), default=0.0),
        "median_cpu_s": statistics.median(c.cpu_s for c in commands) if commands else 0.0,
        "seconds": elapsed,
        "load_before": load_before,
        "load_during": load_during,
    }


# -- report -----------------------------------------------------------------------------------------------


def report(
    args: argparse.Namespace,
    missing: dict[str, str],
    costs: list[dict],
    per_test: dict | None,
    throughput: dict,
    load: dict,
) -> str:
    """The markdown section."""
    cores = len(os.sched_getaffinity(0))
    nsjail = ", ".join(f"{row['program']} {row['ratio']:.2f}×" for row in costs if row["how"] == "nsjail")
    lines = [
        f"## sandboxes: execution cost, warm start, throughput, false time limits "
        f"({dt.date.today().isoformat()}, commit {git_commit()})",
        "",
        f"Machine: {cores} cores, Python {platform.python_version()}, kernel {platform.release()}; "
        f"{args.repeat} sequential runs per row after one warm-up. Reproduce: `.venv/bin/python bench/sandbox.py`.",
    ]
    if missing:
        lines += ["", "Backends not measured: " + "; ".join(f"{k} ({v})" for k, v in missing.items()) + "."]
    lines += [
        "",
        "| program | run as | median ms | mean ms | × bare (median) |",
        "|---|---|---:|---:|---:|",
        *[
            f"| {r['program']} | {r['how']} | {r['median']:.2f} | {r['mean']:.2f} | "
            + (f"{r['ratio']:.2f}×" if "ratio" in r else "1.00×")
            + " |"
            for r in costs
        ],
        "",
        f"nsjail / bare (medians): **{nsjail}** (target ≤ 1.5×). Through a backend the C binary travels into "
        "the sandbox as a job file on every run, as a compiled submission's binary does.",
        "",
    ]
    if per_test is not None:
        lines += [
            f"{per_test['tests']}-test Python problem on nsjail, per test: fresh interpreter per test "
            f"(`Submission.run_many`, warm=False) {per_test['cold_ms']:.2f} ms ({per_test['cold_right']}/{per_test['tests']} right), "
            f"warm start {per_test['warm_ms']:.2f} ms with the server's start spread over the tests "
            f"({per_test['warm_tests_ms']:.2f} ms for the tests alone; {per_test['warm_right']}/{per_test['tests']} "
            f"right): **{per_test['speedup']:.1f}×** faster (target ≥ 5×).",
            "",
        ]
    else:
        lines += ["Warm-start mode not measured (sandboxes/warm.py missing).", ""]
    lines += [
        f"Throughput through `SandboxPool` on nsjail ({throughput['workers']} workers, `python3 -c pass`): "
        f"**{throughput['rate']:.0f} executions/s** ({throughput['jobs']} jobs in {throughput['seconds']:.1f} s; "
        f"verdicts {dict(throughput['verdicts'])}).",
        "",
        f"False time limits under load: {load['burners']} outside CPU burners on {cores} cores "
        f"(1-min load average {load['load_before']:.1f} before, {load['load_during']:.1f} during); "
        f"{load['programs']} correct programs, each using {load['cpu_limit_s'] / 4:.2f} s of CPU under a "
        f"{load['cpu_limit_s']:.1f} s CPU limit, through a {throughput['workers']}-worker pool: "
        f"**{load['false_time_limits']} false time limits** (target 0); {load['right']}/{load['programs']} right; "
        f"median CPU {load['median_cpu_s']:.2f} s, median wall {load['median_wall_s']:.2f} s, "
        f"max wall {load['max_wall_s']:.2f} s; verdicts {dict(load['verdicts'])}.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    """Run every phase once and print (and, without --no-write, append) the markdown section."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=100, help="sequential runs per cost row")
    parser.add_argument("--tests", type=int, default=100, help="tests in the warm-start problem")
    parser.add_argument("--jobs", type=int, default=300, help="jobs in the throughput phase")
    parser.add_argument("--programs", type=int, default=20, help="correct programs in the load phase")
    parser.add_argument("--burners", type=int, default=16, help="outside CPU burners in the load phase")
    parser.add_argument(
        "--cpu-limit", type=float, default=1.0, help="CPU limit (s) of each load-phase program"
    )
    parser.add_argument("--no-write", action="store_true", help="print only, do not append to RESULTS.md")
    args = parser.parse_args()

    atexit.register(kill_burners)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    backends, missing = working_backends()
    if "nsjail" not in backends:
        raise SystemExit(f"bench/sandbox.py: the nsjail backend does not work here: {missing.get('nsjail')}")
    nsjail = backends["nsjail"]
    workers = get_settings().sandbox_workers
    tmp = Path(tempfile.mkdtemp(prefix="proctor-bench-sandbox-"))
    try:
        costs = bench_exec_cost(backends, args.repeat, tmp)
        try:
            per_test = bench_per_test(nsjail, args.tests)
        except ImportError:
            per_test = None
        throughput = bench_throughput(nsjail, workers, args.jobs)
        load = bench_false_time_limits(nsjail, workers, args.programs, args.burners, args.cpu_limit)
    finally:
        kill_burners()
        shutil.rmtree(tmp, ignore_errors=True)
    text = report(args, missing, costs, per_test, throughput, load)
    print(text)
    if not args.no_write:
        append_results(text)


if __name__ == "__main__":
    sys.exit(main())
