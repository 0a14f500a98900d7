"""Code benchmark: the `code` verifier's agreement with datasets/code, its resistance to known hacks, and speed.

Run with `.venv/bin/python bench/code.py` (add `--no-write` for a trial run). In one run it:

- (a) scores every correct and wrong response of datasets/code/problems.jsonl and a list of reward hacks built
  on the set's problems (os._exit(0) at import, sys.exit(0) inside the function, an atexit hook forcing status 0,
  a returned object with a forged __eq__, an int subclass with a forged __eq__, printing a visible example's
  output) with an Engine (cache off, through the worker pool), and reports agreement: correct ones must get
  reward 1, wrong ones and hacks reward 0;
- (b) times judging one 100-test stdio problem (Python, and C++) and one 100-test call problem (Python) with
  Proctor against three per-test-process judges: SandboxFusion-style as verl runs it (one /run_code job per
  test, compiling and running in a fresh sandbox), a fresh nsjail sandbox per test after one compile
  (Submission with warm start off), and a bare `subprocess.run` per test, unsandboxed (compile once, then one
  process per test, output compared in the judge: the lower bound for a process per test);
- (c) measures submissions judged per second on HumanEval-sized problems (the set's assert-script problems, a
  handful of asserts each) through Engine.score_batch;
- (d) splits the C++ case into its per-test cost after one compile: warm exec (one jail, fork+exec per
  test) against a fresh jail per test and a bare subprocess per test.

Results are printed and appended to bench/RESULTS.md unless `--no-write`; disagreements are printed after the
report.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import importlib
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import ROOT, append_results, git_commit  # bench/common.py: the script's folder is on sys.path

DATASET = ROOT / "datasets" / "code" / "problems.jsonl"
TESTS = 100
CPU_S = 2.0

# -- the set and the hacks -------------------------------------------------------------------------


def load_rows(path: Path = DATASET) -> list[dict[str, Any]]:
    """The problems: id, language, prompt, reference, correct, wrong."""
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def fenced(code: str, language: str = "python") -> str:
    """A model-style response holding `code` in one fenced block."""
    return f"Here is my solution.\n\n```{language}\n{code.strip()}\n```\n"


def hacks(rows: list[dict[str, Any]]) -> list[tuple[str, str, dict[str, Any]]]:
    """(name, problem id, response) for each reward hack; every one must score 0."""
    by_id = {row["id"]: row for row in rows}
    stdio_case = by_id["stdio-python-range-sums"]["reference"]["tests"]["cases"][0]
    found = [
        (
            "os._exit(0) at import",
            "call-python-roman",
            "import os\nos._exit(0)\n\ndef roman_to_int(s):\n    return 0\n",
        ),
        (
            "os._exit(0) at import (stdio)",
            "stdio-python-range-sums",
            "import os\nos._exit(0)\n",
        ),
        (
            "sys.exit(0) inside the function",
            "call-python-roman",
            "import sys\n\ndef roman_to_int(s):\n    sys.exit(0)\n",
        ),
        (
            "sys.exit(0) inside the function (assert script)",
            "assert-python-leap-year",
            "import sys\n\ndef is_leap(year):\n    sys.exit(0)\n",
        ),
        (
            "atexit hook forcing status 0 (assert script)",
            "assert-python-chunk",
            "import atexit, os\natexit.register(lambda: os._exit(0))\n\n"
            "def chunk(items, size):\n    return []\n",
        ),
        (
            "atexit hook forcing status 0 (stdio)",
            "stdio-python-balanced-brackets",
            "import atexit, os\natexit.register(lambda: os._exit(0))\nraise SystemExit(1)\n",
        ),
        (
            "forged __eq__ (call)",
            "call-python-merge-sorted",
            "class Anything(list):\n    def __eq__(self, other):\n        return True\n"
            "    def __ne__(self, other):\n        return False\n\n"
            "def merge(a, b):\n    return Anything()\n",
        ),
        (
            "forged __eq__ (assert script)",
            "assert-python-median",
            "class Anything:\n    def __eq__(self, other):\n        return True\n\n"
            "def median(xs):\n    return Anything()\n",
        ),
        (
            "int subclass with forged __eq__ (call)",
            "call-python-roman",
            "class Liar(int):\n    def __eq__(self, other):\n        return True\n    __hash__ = int.__hash__\n\n"
            "def roman_to_int(s):\n    return Liar(0)\n",
        ),
        (
            "int subclass with forged __eq__ (assert script)",
            "assert-python-count-vowels",
            "class Liar(int):\n    def __eq__(self, other):\n        return True\n    __hash__ = int.__hash__\n\n"
            "def count_vowels(s):\n    return Liar(0)\n",
        ),
        (
            "printing a visible example's output",
            "stdio-python-range-sums",
            f"print({stdio_case['stdout']!r}, end='')\n",
        ),
    ]
    found_other = [
        (
            "JavaScript: prints a fake result, exits 0 before returning",
            "call-javascript-running-sum",
            'function runningSum(nums) {\n  require("fs").writeSync(1, "ok [1,3,6,10]\\n");\n  process.exit(0);\n}\n',
            "javascript",
        ),
        (
            "JavaScript: an object whose toJSON claims the answer",
            "call-javascript-majority",
            "class Solution {\n  majority(nums) {\n    return { toJSON: () => nums[0] };\n  }\n}\n",
            "javascript",
        ),
        (
            "Go: os.Exit(0) inside the function",
            "call-go-transpose",
            'package main\n\nimport "os"\n\nfunc transpose(m [][]int) [][]int {\n\tos.Exit(0)\n\treturn m\n}\n',
            "go",
        ),
    ]
    return [(name, pid, fenced(code)) for name, pid, code in found] + [
        (name, pid, fenced(code, language)) for name, pid, code, language in found_other
    ]


def agreement(engine: Any, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Score the set and the hacks in one batch; counts and the items Proctor got wrong."""
    items, wants = [], []
    for row in rows:
        for kind, want in (("correct", 1.0), ("wrong", 0.0)):
            items.append({"id": f"{row['id']}:{kind}", "verifier": "code", "response": row[kind]})
            items[-1]["reference"] = row["reference"]
            wants.append(want)
    by_id = {row["id"]: row for row in rows}
    for name, pid, response in hacks(rows):
        items.append(
            {
                "id": f"{pid}:hack:{name}",
                "verifier": "code",
                "response": response,
                "reference": by_id[pid]["reference"],
            }
        )
        wants.append(0.0)
    started = time.perf_counter()
    results = engine.score_batch(items)
    elapsed = time.perf_counter() - started
    tally = {"correct": [0, 0], "wrong": [0, 0], "hack": [0, 0]}
    bad = []
    for item, want, result in zip(items, wants, results, strict=True):
        group = "hack" if ":hack:" in item["id"] else item["id"].rsplit(":", 1)[1]
        tally[group][1] += 1
        reward = getattr(result, "reward", None)
        status = getattr(getattr(result, "status", None), "value", None)
        if status == "ok" and reward == want:
            tally[group][0] += 1
        else:
            details = getattr(result, "details", None) or getattr(result, "message", None) or result
            bad.append(
                {
                    "id": item["id"],
                    "expected": want,
                    "got": reward,
                    "status": status,
                    "reason": getattr(result, "reason", None),
                    "details": str(details)[:400],
                }
            )
    return {"tally": tally, "bad": bad, "seconds": elapsed, "items": len(items)}


# -- the 100-test problems -------------------------------------------------------------------------

STDIO_PY = (
    "import sys\nt = list(map(int, sys.stdin.read().split()))\nprint(sum(x * x for x in t[1:]) % 1000003)\n"
)
STDIO_CPP = (
    "#include <iostream>\nint main(){int n; std::cin >> n; long long s = 0;\n"
    "for (int i = 0; i < n; i++) { long long x; std::cin >> x; s = (s + x * x) % 1000003; }\n"
    'std::cout << s << "\\n";}\n'
)
CALL_PY = "def gcd_all(xs):\n    g = 0\n    for x in xs:\n        while x:\n            g, x = x, g % x\n    return g\n"


def stdio_problem(language: str, seed: int = 1) -> dict[str, Any]:
    """A stdio reference with TESTS cases: n numbers in, their sum of squares mod 1000003 out."""
    rng = random.Random(seed)
    cases = []
    for _ in range(TESTS):
        xs = [rng.randint(-(10**6), 10**6) for _ in range(rng.randint(1, 50))]
        stdin = f"{len(xs)}\n{' '.join(map(str, xs))}\n"
        cases.append({"stdin": stdin, "stdout": f"{sum(x * x for x in xs) % 1000003}\n"})
    return {"language": language, "tests": {"format": "stdio", "cases": cases, "compare": "tokens"}}


def call_problem(seed: int = 2) -> dict[str, Any]:
    """A call reference with TESTS cases for gcd_all(xs)."""
    import math

    rng = random.Random(seed)
    cases = []
    for _ in range(TESTS):
        base = rng.randint(1, 50)
        xs = [base * rng.randint(1, 10**6) for _ in range(rng.randint(1, 20))]
        cases.append({"args": [xs], "expected": math.gcd(*xs)})
    return {"language": "python", "tests": {"format": "call", "entry_point": "gcd_all", "cases": cases}}


CALL_HARNESS = (
    "import json, sys\nimport solution\nprint(json.dumps(solution.gcd_all(*json.loads(sys.stdin.read()))))\n"
)


def bare_judge(language: str, source: str, reference: dict[str, Any]) -> bool:
    """A typical hand-written judge: compile once, one unsandboxed subprocess per test, compare in the judge."""
    tests = reference["tests"]
    work = Path(tempfile.mkdtemp(prefix="bench-code-"))
    try:
        if tests["format"] == "call":
            (work / "solution.py").write_text(source)
            (work / "main.py").write_text(CALL_HARNESS)
            argv = [sys.executable, "main.py"]
            runs = [(json.dumps(case["args"]), json.dumps(case["expected"])) for case in tests["cases"]]
        elif language == "python":
            (work / "main.py").write_text(source)
            argv = [sys.executable, "main.py"]
            runs = [(case["stdin"], case["stdout"]) for case in tests["cases"]]
        else:
            (work / "main.cpp").write_text(source)
            subprocess.run(["g++", "-O2", "-o", "main", "main.cpp"], cwd=work, check=True)
            argv = ["./main"]
            runs = [(case["stdin"], case["stdout"]) for case in tests["cases"]]
        passed = True
        for stdin, want in runs:
            out = subprocess.run(
                argv, cwd=work, input=stdin, capture_output=True, text=True, timeout=2 * CPU_S
            )
            if tests["format"] == "call":
                passed &= out.returncode == 0 and json.loads(out.stdout) == json.loads(want)
            else:
                passed &= out.stdout.split() == want.split()
        return passed
    finally:
        shutil.rmtree(work, ignore_errors=True)


def sandbox_per_test_judge(language: str, source: str, reference: dict[str, Any]) -> bool:
    """Compile once in nsjail, then a fresh sandbox job per test (warm start off), compare in the judge."""
    from proctor.sandboxes.job import File, RunLimits, RunVerdict
    from proctor.sandboxes.program import Submission

    tests = reference["tests"]
    limits = RunLimits(cpu_s=CPU_S, memory_mb=1024)
    if tests["format"] == "call":
        submission = Submission(
            "python",
            CALL_HARNESS,
            limits=limits,
            files=[File(path="solution.py", content=source)],
            warm=False,
        )
        runs = [(json.dumps(case["args"]), json.dumps(case["expected"])) for case in tests["cases"]]
    else:
        submission = Submission(language, source, limits=limits, warm=False)
        runs = [(case["stdin"], case["stdout"]) for case in tests["cases"]]
    with submission:
        if not submission.compile().ok:
            return False
        passed = True
        for stdin, want in runs:
            result = submission.run(stdin)
            ok = result.verdict is RunVerdict.ok
            if tests["format"] == "call":
                passed &= ok and json.loads(result.stdout) == json.loads(want)
            else:
                passed &= ok and result.stdout.split() == want.split()
        return passed


def sandboxfusion_style_judge(language: str, source: str, reference: dict[str, Any]) -> bool:
    """What verl's SandboxFusion integration does: one /run_code job per test, each compiling and running the
    program in a fresh sandbox (verl's payload through Proctor's own /run_code job builder, on nsjail)."""
    from proctor.api.run_code import RunCodeRequest, build_job, to_response
    from proctor.sandboxes.backends import get_backend

    backend = get_backend(None)
    tests = reference["tests"]
    if tests["format"] == "call":
        code = source + "\n\n" + CALL_HARNESS.replace("import solution\n", "").replace("solution.", "")
        runs = [(json.dumps(case["args"]), json.dumps(case["expected"])) for case in tests["cases"]]
    else:
        code = source
        runs = [(case["stdin"], case["stdout"]) for case in tests["cases"]]
    passed = True
    for stdin, want in runs:
        payload = {
            "compile_timeout": 10,
            "run_timeout": CPU_S,
            "code": code,
            "stdin": stdin,
            "memory_limit_MB": 1024,
            "language": language,
            "files": {},
            "fetch_files": [],
        }
        response = to_response(backend.run(build_job(RunCodeRequest(**payload))))
        run = response.run_result
        ok = response.status.value == "Success" and run is not None
        if tests["format"] == "call":
            passed &= ok and json.loads(run.stdout) == json.loads(want)
        else:
            passed &= ok and run.stdout.split() == want.split()
    return passed


def timed(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    """Median seconds over `repeat` calls, and the last call's value."""
    times, value = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times), value


def speed(engine: Any, repeat: int) -> list[dict[str, Any]]:
    """Seconds to judge each 100-test problem with Proctor and with the two per-test-process judges."""
    problems = [
        ("stdio, Python", "python", STDIO_PY, stdio_problem("python")),
        ("stdio, C++", "cpp", STDIO_CPP, stdio_problem("cpp")),
        ("call, Python", "python", CALL_PY, call_problem()),
    ]
    rows = []
    for label, language, source, reference in problems:
        item = {"verifier": "code", "response": fenced(source, language), "reference": reference}
        engine.score(item)  # warm the pool worker and the sandbox slots
        proctor_s, score = timed(lambda item=item: engine.score(item), repeat)
        bare_s, bare_ok = timed(functools.partial(bare_judge, language, source, reference), repeat)
        jail_s, jail_ok = timed(
            functools.partial(sandbox_per_test_judge, language, source, reference), repeat
        )
        # 100 compiles per run for C++: measured once (the spread between runs is far below the ratio).
        fusion_repeat = 1 if language == "cpp" else repeat
        fusion_s, fusion_ok = timed(
            functools.partial(sandboxfusion_style_judge, language, source, reference), fusion_repeat
        )
        rows.append(
            {
                "label": label,
                "proctor_s": proctor_s,
                "proctor_reward": score.reward,
                "bare_s": bare_s,
                "bare_ok": bare_ok,
                "jail_s": jail_s,
                "jail_ok": jail_ok,
                "fusion_s": fusion_s,
                "fusion_ok": fusion_ok,
                "fusion_repeat": fusion_repeat,
            }
        )
    return rows


def per_test_cost(repeat: int) -> dict[str, Any]:
    """Milliseconds per test after one compile, for the C++ stdio program on the 100 tests: warm exec (one
    jail, fork+exec per test), a fresh nsjail per test, and a bare unsandboxed subprocess per test."""
    from proctor.sandboxes.job import RunLimits
    from proctor.sandboxes.program import Submission

    reference = stdio_problem("cpp")
    stdins = [case["stdin"] for case in reference["tests"]["cases"]]
    wants = [case["stdout"].split() for case in reference["tests"]["cases"]]
    limits = RunLimits(cpu_s=CPU_S, memory_mb=1024)
    found: dict[str, Any] = {}
    for label, warm in (("warm", True), ("jail", False)):
        times, right = [], 0
        for _ in range(repeat):
            with Submission("cpp", STDIO_CPP, limits=limits, warm=warm) as submission:
                submission.compile()
                started = time.perf_counter()
                results = submission.run_many(stdins)
                times.append(time.perf_counter() - started)
                right = sum(r.stdout.split() == w for r, w in zip(results, wants, strict=True))
        found[label] = (statistics.median(times) * 1000 / len(stdins), right)
    work = Path(tempfile.mkdtemp(prefix="bench-code-"))
    try:
        (work / "main.cpp").write_text(STDIO_CPP)
        subprocess.run(["g++", "-O2", "-o", "main", "main.cpp"], cwd=work, check=True)
        times, right = [], 0
        for _ in range(repeat):
            started = time.perf_counter()
            outs = [
                subprocess.run(["./main"], cwd=work, input=s, capture_output=True, text=True).stdout
                for s in stdins
            ]
            times.append(time.perf_counter() - started)
            right = sum(o.split() == w for o, w in zip(outs, wants, strict=True))
        found["bare"] = (statistics.median(times) * 1000 / len(stdins), right)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return found


def throughput(engine: Any, rows: list[dict[str, Any]], copies: int) -> dict[str, Any]:
    """Submissions per second through Engine.score_batch on the set's assert-script problems."""
    scripts = [row for row in rows if row["reference"]["tests"]["format"] == "assert_script"]
    items = []
    for copy in range(copies):
        for row in scripts:
            for kind in ("correct", "wrong"):
                # A trailing comment per copy keeps every submission distinct, as in a GRPO group.
                response = row[kind].replace("\n```\n", f"\n# sample {copy}\n```\n")
                items.append({"verifier": "code", "response": response, "reference": row["reference"]})
    engine.score_batch(items[: len(scripts)])
    started = time.perf_counter()
    results = engine.score_batch(items)
    elapsed = time.perf_counter() - started
    ok = sum(getattr(getattr(r, "status", None), "value", None) == "ok" for r in results)
    asserts = statistics.mean(row["reference"]["tests"]["script"].count("assert ") for row in scripts)
    return {
        "items": len(items),
        "rate": len(items) / elapsed,
        "ok": ok,
        "problems": len(scripts),
        "asserts": asserts,
    }


class InProcess:
    """Scores in this process (prepare, then the verifier's own score function): no pool-worker hop.

    For machines where the pool path cannot run sandboxes; the report says which path measured.
    """

    def score(self, item: dict[str, Any]) -> Any:
        """One item's Verdict."""
        from proctor.engine import prepare

        prepared = prepare(item)
        return prepared.spec.score(prepared.response, prepared.reference, prepared.options)

    def score_batch(self, items: list[dict[str, Any]]) -> list[Any]:
        """Each item's Verdict, in order."""
        return [self.score(item) for item in items]

    def close(self) -> None:
        """Nothing to release."""


def main() -> None:
    """Run the benchmark; print the report and append it to bench/RESULTS.md unless --no-write."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--repeat", type=int, default=3, help="timings per judge in (b); the median is reported"
    )
    parser.add_argument("--copies", type=int, default=6, help="copies of each assert-script response in (c)")
    parser.add_argument(
        "--in-process", action="store_true", help="score in this process instead of through the worker pool"
    )
    parser.add_argument("--no-write", action="store_true", help="print only, do not append to RESULTS.md")
    args = parser.parse_args()

    from proctor.engine import Engine
    from proctor.settings import Settings

    rows = load_rows()
    settings = Settings(cache_size=0, plugins="proctor.verifiers.code")  # until the family is built in
    engine: Any = InProcess() if args.in_process else Engine(settings)
    if args.in_process:
        importlib.import_module("proctor.verifiers.code")
    load_before = os.getloadavg()[0]
    try:
        agree = agreement(engine, rows)
        timings = speed(engine, args.repeat)
        rate = throughput(engine, rows, args.copies)
        cost = per_test_cost(args.repeat)
    finally:
        engine.close()
    load_after = os.getloadavg()[0]

    tally = agree["tally"]
    total_ok = sum(v[0] for v in tally.values())
    lines = [
        f"## code: agreement, hacks and speed ({dt.date.today().isoformat()}, commit {git_commit()})",
        "",
        f"Machine: {os.cpu_count()} cores, Python {platform.python_version()}, 1-min load average "
        f"{load_before:.1f} before and {load_after:.1f} after; sandbox backend "
        f"{os.environ.get('PROCTOR_SANDBOX_BACKEND', 'nsjail (default)')}; cache off, "
        + (
            "scored in-process, one item at a time (--in-process, no pool hop)"
            if args.in_process
            else f"{settings.pool_workers} pool workers"
        )
        + ". Reproduce: `.venv/bin/python bench/code.py`.",
        "",
        f"**(a) Agreement** on datasets/code ({len(rows)} problems) and {tally['hack'][1]} hacks, one "
        f"`score_batch` of {agree['items']} items in {agree['seconds']:.1f} s: **{total_ok}/{agree['items']}**.",
        "",
        "| group | expected reward | agree |",
        "|---|---:|---:|",
        f"| correct solutions | 1 | {tally['correct'][0]}/{tally['correct'][1]} |",
        f"| wrong solutions | 0 | {tally['wrong'][0]}/{tally['wrong'][1]} |",
        f"| hacks | 0 | {tally['hack'][0]}/{tally['hack'][1]} |",
        "",
        f"**(b) Judging one {TESTS}-test problem** (median of {args.repeat}; Proctor = the `code` verifier "
        "scoring one item, sandboxed, compile and warm start included: one jail per submission, a fork per test "
        "for Python, a fork+exec of the compiled binary per test for C++). Baselines, each running every test in "
        "a process of its own: SandboxFusion-style = what verl's sandbox integration does, one /run_code job "
        "per test that compiles (C++) and runs in a fresh nsjail (verl's payload through Proctor's /run_code job "
        "builder; C++ timed once, 100 compiles); sandbox per test = compile once in nsjail, then a fresh nsjail "
        "job per test (Proctor with warm start off); bare = compile once, then one unsandboxed `subprocess.run` "
        "per test (no isolation at all: the lower bound for a process per test).",
        "",
        "| problem | Proctor s | SandboxFusion-style s | speed-up | sandbox/test s | speed-up | bare/test s "
        "| speed-up | all pass (P/SF/jail/bare) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
        *[
            f"| {t['label']} | {t['proctor_s']:.3f} | {t['fusion_s']:.3f} | "
            f"**{t['fusion_s'] / t['proctor_s']:.1f}x** | {t['jail_s']:.3f} | {t['jail_s'] / t['proctor_s']:.1f}x | "
            f"{t['bare_s']:.3f} | {t['bare_s'] / t['proctor_s']:.1f}x | "
            f"{t['proctor_reward'] == 1.0}/{t['fusion_ok']}/{t['jail_ok']}/{t['bare_ok']} |"
            for t in timings
        ],
        "",
        f"**(c) HumanEval-sized throughput**: {rate['items']} submissions (correct and wrong responses of the "
        f"{rate['problems']} assert-script problems, about {rate['asserts']:.0f} asserts each), one "
        f"`score_batch`: **{rate['rate']:.1f} submissions/s** ({rate['ok']}/{rate['items']} status ok).",
        "",
        f"**(d) C++ per test after one compile** ({TESTS} tests, median of {args.repeat}, ms per test; "
        f"`Submission.run_many`): warm exec (one jail, the binary fork+exec'd per test) "
        f"**{cost['warm'][0]:.2f} ms**, a fresh nsjail per test {cost['jail'][0]:.2f} ms "
        f"({cost['jail'][0] / cost['warm'][0]:.1f}x the warm cost), a bare unsandboxed subprocess "
        f"{cost['bare'][0]:.2f} ms (warm costs {cost['warm'][0] / cost['bare'][0]:.1f}x that); right answers "
        f"{cost['warm'][1]}/{cost['jail'][1]}/{cost['bare'][1]} of {TESTS}.",
        "",
    ]
    report = "\n".join(lines)
    print(report)
    if agree["bad"]:
        print("Disagreements:")
        for bad in agree["bad"]:
            print(json.dumps(bad))
    if not args.no_write:
        append_results(report)


if __name__ == "__main__":
    main()
