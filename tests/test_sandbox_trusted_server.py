"""The warm server is trusted (pid 1 of a warm jail, it runs no candidate code), but its tests run as its uid:
nothing a test does to it may turn the program's failure into a masked `sandbox_error`.

Two layers, each tested alone as well as together: the seccomp policy refuses (EPERM) every call that changes
another process's limits, priority or scheduling (prlimit --pid 1 ...); and a server that breaks after candidate
code ran in its jail (its own OSError, a failed fork, its death) makes that test a `runtime_error`, never a
machinery failure. A real machinery failure (no jail at all) stays `sandbox_error`. Also here: a warm jail's
tmpfs filled to the brim is `output_limit`, as for a job's command, even when the program swallows ENOSPC.
"""

from __future__ import annotations

import json
import textwrap
import uuid
from collections.abc import Iterator

import pytest

from proctor.contract import Status
from proctor.sandboxes import warm_server
from proctor.sandboxes.backends.nsjail import OTHER_PROCESSES, SECCOMP_POLICY, NsjailBackend
from proctor.sandboxes.job import Command, File, Job, Maxima, RunLimits, RunVerdict
from proctor.sandboxes.warm import WarmPython
from proctor.verifiers.code import verifier

SPEC = verifier.SPEC
PARENT = f"proctor-test-{uuid.uuid4().hex[:8]}"
STDIO = {
    "format": "stdio",
    "cases": [{"stdin": "1 2\n", "stdout": "3\n"}, {"stdin": "2 2\n", "stdout": "4\n"}],
}
CALL = {
    "format": "call",
    "entry_point": "add",
    "cases": [{"args": [1, 2], "expected": 3}, {"args": [2, 2], "expected": 4}],
}
C_HEADER = "#define _GNU_SOURCE\n#include <sys/resource.h>\n#include <stdio.h>\n"
C_HACK = (
    "static void hack(void) { struct rlimit r = {3, 3}; prlimit(1, RLIMIT_NOFILE, &r, NULL);"
    " for (volatile long i = 0; i < 50000000; i++); }\n"
)
# Right on the first test (so a second runs), wrong on the second: the limit must bite the server in between.
PY_FIRST_RIGHT = "a, b = map(int, input().split())\nprint(a + b if a == 1 else 0)\n"


def score(language: str, code: str, tests: dict):
    response = f"```{language}\n{code}\n```"
    return SPEC.score(
        response, SPEC.parse_reference({"language": language, "tests": tests}), SPEC.parse_options({})
    )


ATTACKS = {
    "python-nofile": (
        "python",
        "import resource\nresource.prlimit(1, resource.RLIMIT_NOFILE, (3, 3))\nfor i in range(2000000): pass\nprint(0)",
        STDIO,
    ),
    "python-nproc": (
        "python",
        "import resource\ntry:\n    resource.prlimit(1, resource.RLIMIT_NPROC, (0, 0))\nexcept OSError:\n    pass\n"
        + PY_FIRST_RIGHT,
        STDIO,
    ),
    "c-stdio": ("c", C_HEADER + C_HACK + 'int main(void) { hack(); printf("0\\n"); }', STDIO),
    "c-call": ("c", C_HEADER + C_HACK + "int add(int a, int b) { hack(); return 0; }", CALL),
    "javascript-stdio": (
        "javascript",
        'require("child_process").execSync("prlimit --pid 1 --nofile=3:3");'
        " let s = 0; for (let i = 0; i < 50000000; i++) s += i; console.log(0);",
        STDIO,
    ),
    "go-call": (
        "go",
        'package main\nimport "syscall"\nimport "unsafe"\n'
        "func add(a int, b int) int { r := [2]uint64{3, 3};"
        " syscall.RawSyscall6(302, 1, 7, uintptr(unsafe.Pointer(&r[0])), 0, 0, 0);"
        " s := 0; for i := 0; i < 100000000; i++ { s += i }; return s * 0 }",
        CALL,
    ),
}


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_limiting_the_warm_server_is_the_programs_failure(attack: str, backend) -> None:
    if backend.name != "nsjail":
        pytest.skip("the warm server runs in the nsjail backend")
    language, code, tests = ATTACKS[attack]
    result = score(language, code, tests)
    assert result.status is Status.ok, (result.status, result.details)
    assert (result.reward, result.correct) == (0.0, False), result.details
    assert result.reason != "sandbox_error", result.details


# -- each layer alone -----------------------------------------------------------------------------------


class UnfilteredBackend(NsjailBackend):
    """The nsjail backend without the seccomp rules about other processes: the warm server's own defence."""

    seccomp_policy = SECCOMP_POLICY.replace(OTHER_PROCESSES, "")


@pytest.fixture(scope="module")
def unfiltered() -> Iterator[NsjailBackend]:
    backend = UnfilteredBackend(cgroup_parent=PARENT, warm=1)
    ok, why = backend.available()
    if not ok:
        pytest.skip(f"nsjail does not work here: {why}")
    yield backend
    backend.close()


def test_the_rules_are_there_to_remove() -> None:
    assert OTHER_PROCESSES in SECCOMP_POLICY


LIMIT_SERVER = (
    "import resource, sys\nresource.prlimit(1, resource.{which}, ({value}, {value}))\nprint('done')\n"
)


@pytest.mark.parametrize(("which", "value"), [("RLIMIT_NOFILE", 3), ("RLIMIT_NPROC", 0)])
def test_a_server_broken_by_a_test_judges_the_test_and_is_replaced(
    unfiltered: NsjailBackend, which: str, value: int
) -> None:
    source = "import sys\nexec(compile(sys.stdin.read(), 'test', 'exec'))\n"
    with WarmPython(source, limits=RunLimits(cpu_s=2), backend=unfiltered) as warm:
        assert warm.start().ok
        attack = warm.run(LIMIT_SERVER.format(which=which, value=value) + "for i in range(2000000): pass\n")
        after = warm.run("print('fine')")
        results = [attack, after]
        if after.verdict is not RunVerdict.ok:  # the limit bit the server only in the next test
            results.append(warm.run("print('fine')"))
    broken = [r for r in results if r.verdict is not RunVerdict.ok]
    assert broken, "the limit never bit the server"
    for result in broken:
        assert result.verdict is RunVerdict.runtime_error, (result.verdict, result.detail)
    assert results[-1].verdict is RunVerdict.ok and results[-1].stdout == "fine\n", results[-1]
    assert warm.starts == 2  # the broken server was replaced


def test_the_policy_refuses_changing_another_process(jail_probe: dict) -> None:
    refused = {name: value for name, value in jail_probe.items() if value == "EPERM"}
    assert set(refused) == {
        "prlimit 1",
        "prlimit 1+2^32",
        "setpriority 1",
        "setpriority user",
        "setpriority which 2^32",
        "sched_setaffinity 1",
        "sched_setscheduler 1",
        "sched_setparam 1",
        "sched_setattr 1",
        "ioprio_set 1",
        "ioprio_set user",
    }, jail_probe
    # A process's own limits, priority and scheduling stay its own to change (glibc's setrlimit is
    # prlimit64(0, ...)), and reading another's limits is harmless.
    assert jail_probe["prlimit self"] == [100, 100]
    assert {
        jail_probe[k] for k in ("setrlimit", "getrlimit 1", "nice", "setpriority 0", "ioprio_set self")
    } == {"ok"}
    assert {jail_probe[k] for k in ("sched_setaffinity 0", "sched_setscheduler 0")} == {"ok"}


PROBE = """
import ctypes, errno, json, os, resource
libc = ctypes.CDLL(None, use_errno=True)
out = {}
def t(name, f):
    try:
        r = f()
        out[name] = "ok" if r is None else r
    except OSError as e:
        out[name] = errno.errorcode.get(e.errno, e.errno)
def c(name, *args):
    r = libc.syscall(*args)
    out[name] = "ok" if r == 0 else errno.errorcode.get(ctypes.get_errno(), r)
if os.fork() == 0:  # the program is pid 1 here: pid 2 stands for "another process"
    import time
    time.sleep(3)
    os._exit(0)
t("prlimit self", lambda: (resource.prlimit(0, resource.RLIMIT_NOFILE, (100, 100)),
                           list(resource.getrlimit(resource.RLIMIT_NOFILE)))[1])
t("setrlimit", lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (90, 90)))
t("getrlimit 1", lambda: resource.prlimit(1, resource.RLIMIT_NOFILE) and None)
t("prlimit 1", lambda: resource.prlimit(1, resource.RLIMIT_NOFILE, (3, 3)))
c("prlimit 1+2^32", 302, (1 << 32) + 1, 7, ctypes.byref((ctypes.c_uint64 * 2)(3, 3)), 0)
t("nice", lambda: os.nice(1) and None)
t("setpriority 0", lambda: os.setpriority(os.PRIO_PROCESS, 0, 2))
t("setpriority 1", lambda: os.setpriority(os.PRIO_PROCESS, 1, 19))
t("setpriority user", lambda: os.setpriority(os.PRIO_USER, 0, 19))
c("setpriority which 2^32", 141, 1 << 32, 1, 19)
t("sched_setaffinity 0", lambda: os.sched_setaffinity(0, os.sched_getaffinity(0)))
t("sched_setaffinity 1", lambda: os.sched_setaffinity(1, {min(os.sched_getaffinity(0))}))
t("sched_setscheduler 1", lambda: os.sched_setscheduler(1, os.SCHED_IDLE, os.sched_param(0)))
t("sched_setscheduler 0", lambda: os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0)))
t("sched_setparam 1", lambda: os.sched_setparam(1, os.sched_param(0)))
c("sched_setattr 1", 314, 1, ctypes.byref((ctypes.c_uint32 * 14)(56, 5)), 0)
c("ioprio_set 1", 251, 1, 1, 3 << 13)
c("ioprio_set self", 251, 1, 0, (2 << 13) | 7)
c("ioprio_set user", 251, 3, 0, 3 << 13)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def jail_probe(backend) -> dict:
    if backend.name != "nsjail":
        pytest.skip("the policy is the nsjail backend's")
    job = Job(
        files=[File(path="main.py", content=PROBE)],
        commands=[Command(argv=["/usr/bin/python3", "main.py"], limits=RunLimits(cpu_s=2))],
    )
    result = backend.run(job).commands[0]
    assert result.verdict is RunVerdict.ok, (result.detail, result.stderr)
    return json.loads(result.stdout)


def test_signals_and_proc_writes_do_not_reach_the_server(backend) -> None:
    if backend.name != "nsjail":
        pytest.skip("the warm server is init in the nsjail backend")
    source = textwrap.dedent(
        """
        import ctypes, json, os, signal
        out = {}
        for sig in (signal.SIGSTOP, signal.SIGTERM, signal.SIGKILL, signal.SIGUSR1, signal.SIGCHLD):
            try:
                os.kill(1, sig)
                out[sig.name] = "sent"
            except OSError as e:
                out[sig.name] = e.strerror
        for name, data in (("oom_score_adj", "1000"), ("comm", "x"), ("timerslack_ns", "999999999"),
                           ("mem", "x"), ("sched", "0"), ("clear_refs", "1")):
            try:
                with open(f"/proc/1/{name}", "w") as handle:
                    handle.write(data)
                out[name] = "WRITTEN"
            except OSError as e:
                out[name] = e.strerror
        try:
            pidfd = os.pidfd_open(1)
            libc = ctypes.CDLL(None, use_errno=True)
            out["pidfd_getfd"] = "TAKEN" if libc.syscall(438, pidfd, 3, 0) >= 0 else "refused"
        except OSError as e:
            out["pidfd_getfd"] = e.strerror
        print(json.dumps(out))
        raise SystemExit(3)
        """
    )
    with WarmPython(source, mode="stdio", limits=RunLimits(cpu_s=2), backend=backend) as warm:
        assert warm.start().ok
        first, second = warm.run(""), warm.run("")
    for result in (first, second):
        assert result.verdict is RunVerdict.runtime_error, (result.verdict, result.detail)  # exit status 3
        seen = json.loads(result.stdout)
        assert "WRITTEN" not in seen.values() and "TAKEN" not in seen.values(), seen
    assert warm.starts == 1  # the server shrugged it all off


# -- machinery failures stay machinery failures ---------------------------------------------------------


def test_a_server_failure_before_any_candidate_code_is_a_sandbox_error(monkeypatch) -> None:
    monkeypatch.setattr(warm_server, "CANDIDATE_RAN", [False])
    assert warm_server.server_failure({}, "trace")["verdict"] == "sandbox_error"
    monkeypatch.setattr(warm_server, "CANDIDATE_RAN", [True])
    failed = warm_server.server_failure({}, "trace")
    assert (failed["verdict"], failed["server_failed"]) == ("runtime_error", True)


def test_a_jail_that_cannot_start_is_a_sandbox_error() -> None:
    broken = NsjailBackend(binary="/bin/false", cgroup_parent=PARENT, warm=0)
    try:
        with WarmPython("print(3)", limits=RunLimits(cpu_s=1), backend=broken) as warm:
            assert warm.start().status == "sandbox_error"
            assert warm.run("").verdict is RunVerdict.sandbox_error
    finally:
        broken.close()


# -- a full tmpfs in the warm path ----------------------------------------------------------------------


FILL_C = r"""
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
static void fill(void) {
    static char b[1 << 20];
    memset(b, 1, sizeof b);
    for (int f = 0; f < 10; f++) {
        char p[64];
        sprintf(p, "%s/f%d", f % 2 ? "/tmp" : ".", f);
        int fd = open(p, O_CREAT | O_WRONLY, 0644);
        if (fd < 0) break;
        for (int i = 0; i < 100; i++) if (write(fd, b, sizeof b) <= 0) break;
        close(fd);
    }
}
"""


@pytest.mark.parametrize("tests", ["stdio", "call"])
def test_filling_the_warm_jails_disk_is_an_output_limit(tests: str, backend) -> None:
    if backend.name != "nsjail" or getattr(backend, "storage", None) is None:
        pytest.skip("bounded job files are the nsjail backend's, where it may mount")
    if tests == "stdio":
        code = FILL_C + 'int main(void) { int a, b; fill(); scanf("%d %d", &a, &b); printf("%d\\n", a + b); }'
        result = score("c", code, STDIO)
    else:
        result = score("c", FILL_C + "int add(int a, int b) { fill(); return a + b; }", CALL)
    assert result.status is Status.ok, result.details
    assert (result.reward, result.reason) == (0.0, "output_limit"), result.details


@pytest.fixture(scope="module")
def small_disk() -> Iterator[NsjailBackend]:
    backend = NsjailBackend(
        cgroup_parent=PARENT, warm=1, maxima=Maxima(memory_mb=256, cpu_s=1.0, files=300, disk_mb=4)
    )
    if backend.storage is None:
        pytest.skip(f"cannot bound job files here: {backend.storage_reason}")
    yield backend
    backend.close()


def test_a_full_warm_jail_is_an_output_limit_and_the_next_test_gets_a_fresh_one(small_disk) -> None:
    source = "import sys\nexec(compile(sys.stdin.read(), 'test', 'exec'))\n"
    fill = (
        "for folder in ('.', '/tmp'):\n"
        "    try:\n"
        "        open(folder + '/big', 'wb').write(b'1' * (8 << 20))\n"
        "    except OSError:\n"
        "        pass\n"
        "print('swallowed')\n"
    )
    files = "import os\nfor i in range(1000):\n    try:\n        open(f'f{i}', 'w').close()\n    except OSError:\n        break\n"
    with WarmPython(source, limits=RunLimits(cpu_s=1), backend=small_disk) as warm:
        full = warm.run(fill)
        after = warm.run("import os\nprint(sorted(os.listdir('.')), os.listdir('/tmp'))")
        inodes = warm.run(files)
    assert full.verdict is RunVerdict.output_limit and "4 MB" in full.detail, full
    assert after.verdict is RunVerdict.ok and "big" not in after.stdout, after
    assert inodes.verdict is RunVerdict.output_limit and "300 files" in inodes.detail, inodes


def test_warm_limits_are_clamped_to_the_operators_maxima(small_disk) -> None:
    with WarmPython("while True: pass", limits=RunLimits(cpu_s=30), backend=small_disk) as warm:
        result = warm.run("")
    assert result.verdict is RunVerdict.time_limit, result
    assert result.cpu_s < 5, result
