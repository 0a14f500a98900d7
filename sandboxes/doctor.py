"""Which sandbox backends and language toolchains work on this machine (`proctor doctor`, `/healthz` detail).

A toolchain "works" when its binaries are where the sandbox looks for them (Debian's /usr/bin, never a home
directory) and a hello-world program reading stdin compiles and runs in the default backend. So a missing
compiler shows up here as one clear line instead of a sandbox_error on every request.
"""

from __future__ import annotations

import logging
import os
import subprocess
import threading
import time
from typing import Any

from proctor.sandboxes.job import Backend, RunLimits, RunVerdict
from proctor.sandboxes.languages import LANGUAGES, Language
from proctor.sandboxes.program import Submission

log = logging.getLogger(__name__)

HELLO_INPUT = "proctor\n"
HELLO_OUTPUT = "hello proctor"
HELLO: dict[str, str] = {
    "python": "print('hello', input().strip())\n",
    "c": '#include <stdio.h>\nint main(void){char s[64];if(scanf("%63s",s)!=1)return 1;printf("hello %s\\n",s);return 0;}\n',
    "cpp": '#include <iostream>\n#include <string>\nint main(){std::string s;std::cin>>s;std::cout<<"hello "<<s<<"\\n";}\n',
    "java": 'import java.util.Scanner;\npublic class Main{public static void main(String[] a){System.out.println("hello "+new Scanner(System.in).next());}}\n',
    "javascript": 'const s=require("fs").readFileSync(0,"utf8").trim();console.log("hello "+s);\n',
    "go": 'package main\nimport "fmt"\nfunc main(){var s string;fmt.Scan(&s);fmt.Println("hello "+s)}\n',
    "rust": 'use std::io::Read;\nfn main(){let mut s=String::new();std::io::stdin().read_to_string(&mut s).unwrap();println!("hello {}",s.trim());}\n',
}
HELLO_LIMITS = RunLimits(cpu_s=5.0, memory_mb=512)
VERSION_TIMEOUT_S = 10.0
DEFAULT_BUDGET_S = 120.0
REQUIRED_LANGUAGE = "python"

_cache: dict[tuple[Any, ...], tuple[float, dict[str, Any]]] = {}
_cache_lock = threading.Lock()


def toolchain_version(language: Language) -> str:
    """The first line the toolchain prints for its version (run on the host, no sandbox needed)."""
    try:
        done = subprocess.run(
            list(language.version_argv),
            capture_output=True,
            text=True,
            timeout=VERSION_TIMEOUT_S,
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({type(exc).__name__})"
    lines = [line.strip() for line in (done.stdout + "\n" + done.stderr).splitlines() if line.strip()]
    return lines[0] if lines else f"unknown (exit {done.returncode})"


def check_backend(name: str) -> dict[str, Any]:
    """Whether backend `name` can run jobs here, and why not."""
    from proctor.sandboxes.backends import get_backend

    started = time.monotonic()
    quiet = logging.getLogger(f"proctor.sandboxes.backends.{name}")
    level = quiet.level
    # The local backend warns once that it does not isolate; here that is the finding, not news.
    quiet.setLevel(logging.ERROR)
    try:
        ok, detail = get_backend(name).available()
    except Exception as exc:  # noqa: BLE001 - a backend that cannot even start is a finding, not a crash
        ok, detail = False, f"{type(exc).__name__}: {exc}"
    finally:
        quiet.setLevel(level)
    return {"name": name, "ok": bool(ok), "detail": detail, "seconds": round(time.monotonic() - started, 3)}


def check_language(
    language: Language, backend: Backend | None = None, run: bool = True, budget_s: float | None = None
) -> dict[str, Any]:
    """Whether a language works: binaries found, their version, and a hello world compiled and run in `backend`."""
    started = time.monotonic()
    missing = [path for path in language.binaries if not os.access(path, os.X_OK)]
    report: dict[str, Any] = {
        "name": language.name,
        "found": not missing,
        "binaries": list(language.binaries),
        "packages": list(language.packages),
        "version": None,
        "hello": "skipped",
        "ok": False,
        "detail": "",
        "seconds": 0.0,
    }
    if missing:
        report["hello"] = "not run"
        report["detail"] = (
            f"{', '.join(missing)} not found; install the Debian package(s) {' '.join(language.packages)}"
        )
        return report
    report["version"] = toolchain_version(language)
    if not run:
        report["ok"] = True
        report["detail"] = "found (hello world not run)"
        return report
    if budget_s is not None and budget_s <= 0:
        report["detail"] = "hello world not run: the time budget is spent"
        return report
    report["hello"], report["detail"] = _hello(language, backend)
    report["ok"] = report["hello"] == "ok"
    report["seconds"] = round(time.monotonic() - started, 3)
    return report


def _hello(language: Language, backend: Backend | None) -> tuple[str, str]:
    """Compile and run the language's hello world; ("ok", "") or the failure and why."""
    try:
        with Submission(language, HELLO[language.name], limits=HELLO_LIMITS, backend=backend) as program:
            compiled = program.compile()
            if not compiled.ok:
                return compiled.status, compiled.message.strip()[:500] or compiled.status
            result = program.run(HELLO_INPUT)
    except Exception as exc:  # noqa: BLE001 - the finding is that the toolchain does not work here
        return "error", f"{type(exc).__name__}: {exc}"
    if result.verdict is not RunVerdict.ok:
        why = result.detail or result.stderr.strip()[:300]
        return result.verdict.value, f"hello world ended with {result.verdict.value}: {why}"
    if result.stdout.strip() != HELLO_OUTPUT:
        return "wrong_output", f"hello world printed {result.stdout[:100]!r}"
    return "ok", ""


def doctor_report(
    *,
    backend: str | None = None,
    run_programs: bool = True,
    budget_s: float = DEFAULT_BUDGET_S,
    max_age_s: float = 0.0,
) -> dict[str, Any]:
    """Backends and toolchains that work here, as plain data; `ok` when the default backend and Python work.

    `max_age_s` > 0 returns a cached report younger than that (for /healthz, which must stay cheap).
    """
    from proctor.sandboxes.backends import BACKENDS, default_backend_name

    default = backend or default_backend_name()
    key = (default, run_programs, budget_s)
    if max_age_s > 0:
        with _cache_lock:
            cached = _cache.get(key)
        if cached is not None and time.monotonic() - cached[0] < max_age_s:
            return cached[1]
    started = time.monotonic()
    backends = [check_backend(name) for name in BACKENDS]
    if default not in BACKENDS:
        backends.append({"name": default, "ok": False, "detail": "unknown backend", "seconds": 0.0})
    default_ok = next(b["ok"] for b in backends if b["name"] == default)
    runner = None
    if default_ok:
        from proctor.sandboxes.backends import get_backend

        runner = get_backend(default)
    languages = []
    for language in LANGUAGES.values():
        left = budget_s - (time.monotonic() - started)
        languages.append(check_language(language, runner, run=run_programs and default_ok, budget_s=left))
    problems = []
    for item in backends:
        if item["name"] == default and not item["ok"]:
            problems.append(f"default sandbox backend {default!r} does not work: {item['detail']}")
    for item in languages:
        if not item["ok"] and (default_ok or not item["found"]):
            problems.append(f"{item['name']}: {item['detail']}")
    python_ok = next(item["ok"] for item in languages if item["name"] == REQUIRED_LANGUAGE)
    report = {
        "ok": bool(default_ok and python_ok),
        "default_backend": default,
        "backends": backends,
        "languages": languages,
        "problems": problems,
        "seconds": round(time.monotonic() - started, 3),
    }
    with _cache_lock:
        _cache[key] = (time.monotonic(), report)
    return report


def render(report: dict[str, Any]) -> str:
    """The report as a few aligned lines for a terminal."""
    lines = ["backends"]
    for item in report["backends"]:
        mark = "ok" if item["ok"] else "no"
        default = "  (default)" if item["name"] == report["default_backend"] else ""
        lines.append(f"  {item['name']:<8} {mark:<3} {item['detail']}{default}")
    lines.append(f"languages (hello world in {report['default_backend']})")
    for item in report["languages"]:
        mark = "ok" if item["ok"] else "no"
        version = item["version"] or "-"
        seconds = f"{item['seconds']:.2f} s" if item["seconds"] else ""
        detail = "" if item["ok"] and item["hello"] == "ok" else f"  {item['detail']}"
        lines.append(f"  {item['name']:<11}{mark:<3} {version:<45} {seconds}{detail}".rstrip())
    lines.append(f"{'ok' if report['ok'] else 'NOT OK'} ({report['seconds']:.1f} s)")
    return "\n".join(lines)
