"""Compiled programs against the bare floor: the `code` verifier's stdio verdict, compile included, side by side.

Run with `.venv/bin/python bench/code_floor.py` (`--rounds N`, `--tests N`, `--languages c cpp`). Each round, for
each language, makes 5 distinct programs (5 kinds of task, a constant that changes every round, so nothing is
reused between programs or rounds) with their stdio tests, and judges them one at a time in three ways,
program by program, one way after another in an order that turns with each program (so a burst of load from
other work falls on all three alike):

- bare: what a user would write in a plain script, unsandboxed: write the source, `gcc`/`g++` with the flags the
  sandbox uses, then one `subprocess.run` of the binary per test on its stdin, output compared by whitespace
  tokens (the `tokens` comparator's rule);
- Proctor in process: `Engine.score` (result cache off, the verifier in a pool worker, as the service runs it);
- Proctor through a running service: `POST /v1/score` on a real uvicorn server (cache off), one request at a
  time on a keep-alive connection.

It prints the medians over rounds of each way's time for the 5 programs, the ratios to bare, the load average,
and a per-stage profile of one program (medians over rounds and programs): bare compile / run / compare, and the
sandboxed path's stages (taking the warm jail, compiling in it, keeping the compiled files, the tests in batches,
the server's own time per test, comparing, closing), with what the engine, the pool and HTTP add found by
difference. `--write` appends the section to bench/RESULTS.md; by default it is only printed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from common import append_results, free_port, git_commit, start_server  # bench/ is on sys.path

PROGRAMS = 5
C_FLAGS = ["-O2", "-std=gnu17", "-pipe"]
CPP_FLAGS = ["-O2", "-std=c++17", "-pipe"]

# Five kinds of task; K is the round's constant. Input: n, then n integers.
C_KINDS = {
    "weighted sum": (
        '#include <stdio.h>\nint main(void){long n,x,s=0;if(scanf("%ld",&n)!=1)return 1;'
        'for(long i=0;i<n;i++){scanf("%ld",&x);s+=x*K;}printf("%ld\\n",s);return 0;}',
        lambda xs, k: f"{sum(x * k for x in xs)}",
    ),
    "max plus": (
        '#include <stdio.h>\nint main(void){long n,x,m=-1000000000;scanf("%ld",&n);'
        'for(long i=0;i<n;i++){scanf("%ld",&x);if(x>m)m=x;}printf("%ld\\n",m+K);return 0;}',
        lambda xs, k: f"{max(xs) + k}",
    ),
    "sorted": (
        "#include <stdio.h>\n#include <stdlib.h>\nstatic int c(const void*a,const void*b){long x=*(const long*)a,"
        'y=*(const long*)b;return (x>y)-(x<y);}\nint main(void){long n,a[1000];scanf("%ld",&n);'
        'for(long i=0;i<n;i++)scanf("%ld",&a[i]);qsort(a,n,sizeof a[0],c);'
        'for(long i=0;i<n;i++)printf("%ld ",a[i]+K);printf("\\n");return 0;}',
        lambda xs, k: " ".join(str(x + k) for x in sorted(xs)),
    ),
    "multiples": (
        '#include <stdio.h>\nint main(void){long n,x,c=0;scanf("%ld",&n);'
        'for(long i=0;i<n;i++){scanf("%ld",&x);if(x%K==0)c++;}printf("%ld\\n",c);return 0;}',
        lambda xs, k: f"{sum(1 for x in xs if x % k == 0)}",
    ),
    "prefix sums": (
        '#include <stdio.h>\nint main(void){long n,x,s=0;scanf("%ld",&n);'
        'for(long i=0;i<n;i++){scanf("%ld",&x);s+=x;printf("%ld\\n",s*K);}return 0;}',
        lambda xs, k: "\n".join(str(sum(xs[: i + 1]) * k) for i in range(len(xs))),
    ),
}
CPP_KINDS = {
    "weighted sum": (
        "#include <iostream>\nint main(){long n,x,s=0;std::cin>>n;for(long i=0;i<n;i++){std::cin>>x;s+=x*K;}"
        "std::cout<<s<<'\\n';}",
        C_KINDS["weighted sum"][1],
    ),
    "max plus": (
        "#include <iostream>\n#include <algorithm>\nint main(){long n,x,m=-1000000000;std::cin>>n;"
        "for(long i=0;i<n;i++){std::cin>>x;m=std::max(m,x);}std::cout<<m+K<<'\\n';}",
        C_KINDS["max plus"][1],
    ),
    "sorted": (
        "#include <iostream>\n#include <vector>\n#include <algorithm>\nint main(){long n;std::cin>>n;"
        "std::vector<long> a(n);for(auto&v:a)std::cin>>v;std::sort(a.begin(),a.end());"
        "for(long v:a)std::cout<<v+K<<' ';std::cout<<'\\n';}",
        C_KINDS["sorted"][1],
    ),
    "multiples": (
        "#include <iostream>\nint main(){long n,x,c=0;std::cin>>n;for(long i=0;i<n;i++){std::cin>>x;"
        "if(x%K==0)c++;}std::cout<<c<<'\\n';}",
        C_KINDS["multiples"][1],
    ),
    "prefix sums": (
        "#include <iostream>\nint main(){long n,x,s=0;std::cin>>n;for(long i=0;i<n;i++){std::cin>>x;s+=x;"
        "std::cout<<s*K<<'\\n';}}",
        C_KINDS["prefix sums"][1],
    ),
}
KINDS = {"c": C_KINDS, "cpp": CPP_KINDS}


def make_programs(language: str, round_index: int, tests: int) -> list[dict[str, Any]]:
    """PROGRAMS distinct programs of `language` for one round: source, stdio cases, kind."""
    rng = random.Random(f"{language}-{round_index}")
    programs = []
    for position, (kind, (template, answer)) in enumerate(KINDS[language].items()):
        k = 2 + round_index * PROGRAMS + position  # a new constant every program and round
        cases = []
        for _ in range(tests):
            xs = [rng.randint(-1000, 1000) for _ in range(rng.randint(1, 40))]
            stdin = f"{len(xs)}\n{' '.join(map(str, xs))}\n"
            cases.append({"stdin": stdin, "stdout": answer(xs, k) + "\n"})
        source = template.replace("K", f"({k}L)")
        programs.append({"kind": kind, "source": source, "cases": cases})
    return programs


def request(language: str, program: dict[str, Any]) -> dict[str, Any]:
    """The /v1/score request for one program."""
    fence = "c" if language == "c" else "cpp"
    return {
        "verifier": "code",
        "response": f"Here it is.\n\n```{fence}\n{program['source']}\n```\n",
        "reference": {"language": language, "tests": {"format": "stdio", "cases": program["cases"]}},
    }


# -- bare -----------------------------------------------------------------------------------------------


def bare(language: str, program: dict[str, Any], stages: dict[str, list[float]] | None = None) -> bool:
    """Compile and run every test unsandboxed, as a plain script would; whether all passed."""
    folder = Path(tempfile.mkdtemp(prefix="floor-"))
    try:
        began = time.perf_counter()
        source = folder / ("main.c" if language == "c" else "main.cpp")
        source.write_text(program["source"])
        compiler = ["/usr/bin/gcc", *C_FLAGS] if language == "c" else ["/usr/bin/g++", *CPP_FLAGS]
        extra = ["-lm"] if language == "c" else []
        subprocess.run([*compiler, "-o", str(folder / "main"), str(source), *extra], check=True)
        compiled = time.perf_counter()
        outputs = [
            subprocess.run(
                [str(folder / "main")], input=case["stdin"].encode(), capture_output=True, timeout=10
            )
            for case in program["cases"]
        ]
        ran = time.perf_counter()
        passed = all(
            out.returncode == 0 and out.stdout.decode().split() == case["stdout"].split()
            for out, case in zip(outputs, program["cases"], strict=True)
        )
        compared = time.perf_counter()
        if stages is not None:
            stages.setdefault("bare: compile", []).append(compiled - began)
            stages.setdefault("bare: run the tests (subprocess.run each)", []).append(ran - compiled)
            stages.setdefault("bare: compare", []).append(compared - ran)
        return passed
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# -- the sandboxed path, stage by stage -----------------------------------------------------------------


def staged(language: str, program: dict[str, Any], backend: Any, stages: dict[str, list[float]]) -> bool:
    """The stdio verdict's sandboxed steps timed one by one (what the verifier does, without the engine)."""
    from proctor.sandboxes.job import RunLimits
    from proctor.sandboxes.languages import BASE_ENV, OUT_DIR, get_language
    from proctor.sandboxes.program import MAX_ARTIFACT_BYTES, Build, WarmExecRunner
    from proctor.verifiers.code.compare import compare_output

    lang = get_language(language)
    limits = RunLimits(cpu_s=2.0, memory_mb=1024)
    build = Build(lang, program["source"], [], lang.compile_limits, backend)
    runner = WarmExecRunner(build, limits)
    from proctor.sandboxes.warm import WarmPython

    t0 = time.perf_counter()
    runner.server = server = WarmPython("", limits=limits, backend=backend, files=[build.source_file()])
    assert server.start().ok
    t1 = time.perf_counter()
    command = lang.compile_command(program["source"], build.compile_limits, pack=False)
    assert command is not None
    compiled = server.execute(command.argv, BASE_ENV, "", command.limits, "compile", trusted=True)
    assert compiled.verdict.value == "ok", compiled
    t2 = time.perf_counter()
    build.files = [build.source_file(), *server.kept_files(OUT_DIR, MAX_ARTIFACT_BYTES)]
    t3 = time.perf_counter()
    stdins = [case["stdin"] for case in program["cases"]]
    results = []
    for start in range(0, len(stdins), 25):
        chunk = stdins[start : start + 25]
        results += runner.run_batch(chunk, [limits] * len(chunk), first=start, stop_on_failure=True)
    t4 = time.perf_counter()
    passed = all(
        r.verdict.value == "ok" and compare_output("tokens", r.stdout, case["stdout"], None) is None
        for r, case in zip(results, program["cases"], strict=True)
    )
    t5 = time.perf_counter()
    runner.close()
    t6 = time.perf_counter()
    inside = sum(r.wall_s for r in results)
    stages.setdefault("sandbox: take a warm jail (server started ahead)", []).append(t1 - t0)
    stages.setdefault("sandbox: compile in the jail", []).append(t2 - t1)
    stages.setdefault("sandbox: keep the compiled files (host read)", []).append(t3 - t2)
    stages.setdefault("sandbox: run the tests (batches of 25)", []).append(t4 - t3)
    stages.setdefault("  of which: the test processes, spawn to reap (server's clock)", []).append(inside)
    stages.setdefault("  of which: host and server exchange, judging replies", []).append(t4 - t3 - inside)
    stages.setdefault("sandbox: compare", []).append(t5 - t4)
    stages.setdefault("sandbox: close the jail", []).append(t6 - t5)
    return passed and len(results) == len(program["cases"])


# -- the run --------------------------------------------------------------------------------------------


def server_env() -> dict[str, str]:
    """The environment with the result cache off and quiet logs."""
    return {
        **os.environ,
        "PROCTOR_CACHE_SIZE": "0",
        "PROCTOR_LOG_LEVEL": "warning",
        "PROCTOR_AUDIT_LOG": "false",
    }


def load() -> str:
    """The 1-, 5- and 15-minute load averages."""
    return " / ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--tests", type=int, default=60)
    parser.add_argument("--languages", nargs="+", default=["c", "cpp"], choices=["c", "cpp"])
    parser.add_argument("--write", action="store_true", help="append the section to bench/RESULTS.md")
    args = parser.parse_args()

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from proctor.engine import Engine
    from proctor.sandboxes.backends import resolve_backend
    from proctor.settings import Settings

    os.environ.update({k: v for k, v in server_env().items() if k.startswith("PROCTOR_")})
    load_before = load()
    engine = Engine(Settings(cache_size=0))
    backend = resolve_backend(None)
    port = free_port()
    server = start_server(port, server_env())
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120)
    times: dict[tuple[str, str], list[float]] = {}
    stages: dict[str, list[float]] = {}
    wrong: list[str] = []
    try:
        for language in args.languages:  # warm-up: pool workers, warm jails, the compiler's files in cache
            warm = make_programs(language, 999, 3)[0]
            engine.score(request(language, warm))
            client.post("/v1/score", json=request(language, warm)).raise_for_status()
            bare(language, warm)
        for round_index in range(args.rounds):
            for language in args.languages:
                programs = make_programs(language, round_index, args.tests)
                spent = {"bare": 0.0, "in-process": 0.0, "service": 0.0}
                # Program by program, the three ways one after another, in an order that turns each time:
                # a burst of load from others falls on all three alike.
                for position, program in enumerate(programs):
                    ways = ["bare", "in-process", "service"]
                    shift = (round_index + position) % 3
                    for way in ways[shift:] + ways[:shift]:
                        began = time.perf_counter()
                        if way == "bare":
                            ok = bare(language, program, stages if language == "c" else None)
                            reason = ""
                        elif way == "in-process":
                            score = engine.score(request(language, program))
                            ok = score.status == "ok" and score.reward == 1.0
                            reason = score.reason
                        else:
                            body = client.post("/v1/score", json=request(language, program)).json()
                            ok = body.get("status") == "ok" and body.get("reward") == 1.0
                            reason = str(body.get("reason"))
                        spent[way] += time.perf_counter() - began
                        if not ok:
                            wrong.append(f"{way} {language} {program['kind']}: {reason}")
                for way, seconds in spent.items():
                    times.setdefault((language, way), []).append(seconds)
                if language == "c":
                    for program in programs:
                        if not staged(language, program, backend, stages):
                            wrong.append(f"staged {language} {program['kind']}")
    finally:
        client.close()
        server.terminate()
        server.wait(timeout=30)
        engine.close()
    load_after = load()
    report = render(args, times, stages, wrong, load_before, load_after)
    print(report)
    if args.write:
        append_results(report)


def render(
    args: argparse.Namespace,
    times: dict[tuple[str, str], list[float]],
    stages: dict[str, list[float]],
    wrong: list[str],
    load_before: str,
    load_after: str,
) -> str:
    """The RESULTS.md section."""
    lines = [
        f"## code floor: compiled stdio verdicts against the bare floor ({dt.date.today()}, commit {git_commit()})",
        "",
        f"Machine: {os.cpu_count()} cores, Python {platform.python_version()}, load average (1/5/15 min) "
        f"{load_before} before and {load_after} after; shared with other work, so every way runs side by "
        f"side in each round and the figures are medians over {args.rounds} rounds. Work per round and "
        f"language: {PROGRAMS} distinct programs (new ones every round) x {args.tests} stdio tests, compile "
        "included, one program at a time. Reproduce: `.venv/bin/python bench/code_floor.py`.",
        "",
        "| language | bare s | Proctor in process s | × bare | Proctor via service s | × bare |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for language in args.languages:
        base = statistics.median(times[(language, "bare")])
        inproc = statistics.median(times[(language, "in-process")])
        service = statistics.median(times[(language, "service")])
        lines.append(
            f"| {language} | {base:.3f} | {inproc:.3f} | {inproc / base:.2f}× | {service:.3f} | "
            f"**{service / base:.2f}×** |"
        )
    lines += [
        "",
        f"Per-stage profile of one C program with {args.tests} tests (ms, median over "
        f"{len(next(iter(stages.values()), []))} programs):",
        "",
        "| stage | ms |",
        "|---|---:|",
    ]
    for name, values in stages.items():
        lines.append(f"| {name} | {1e3 * statistics.median(values):.2f} |")
    if ("c", "in-process") in times:
        sandbox = sum(statistics.median(v) for k, v in stages.items() if k.startswith("sandbox:"))
        inproc = statistics.median(times[("c", "in-process")]) / PROGRAMS
        service = statistics.median(times[("c", "service")]) / PROGRAMS
        lines.append(
            f"| engine, pool worker and verifier around those stages (by difference) | "
            f"{1e3 * (inproc - sandbox):.2f} |"
        )
        lines.append(f"| HTTP and the service (service less in process) | {1e3 * (service - inproc):.2f} |")
    lines += ["", f"Wrong verdicts: {len(wrong)}" + (f" ({'; '.join(wrong[:5])})" if wrong else "") + "."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
