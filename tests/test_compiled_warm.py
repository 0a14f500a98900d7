"""Compiled programs in a warm jail: compiled where they run, tests sent in batches, each test as fresh.

A compiled submission takes a jail whose trusted server was started ahead of time (`ReadyServers`), compiles
there (the host's own step) and keeps the binary where it was built; its tests go to the server in batches, each
a process of its own (posix_spawn). What these tests hold the path to:

- a batch gives each test the verdict a request of its own gives it (an OOM kill no reply can be matched to makes
  the host ask again one test at a time);
- what a test leaves behind (files, folders, a filled disk, System V shared memory, a daemon) is gone before the
  next test in the same jail, so the next has the files, disk, inodes, memory and processes of a fresh jail, and
  the limits still bite; a test that changes the jail's own files gets the next test a fresh jail with the
  compiled program in it;
- a spawned program starts as a forked one did: no inherited fd, no ignored or blocked signal, oom_score_adj
  1000, its own session;
- the warm jail runs any argv per test (the generic API a simulator can use).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from proctor.contract import Status
from proctor.sandboxes.backends.nsjail import NsjailBackend
from proctor.sandboxes.job import Backend, File, Maxima, RunLimits, RunVerdict
from proctor.sandboxes.languages import BASE_ENV
from proctor.sandboxes.program import Submission
from proctor.sandboxes.warm import BatchTest, WarmPython, ready_servers
from proctor.verifiers.code import verifier

LIMITS = RunLimits(cpu_s=1.0, memory_mb=256)
PARENT = f"proctor-test-{uuid.uuid4().hex[:8]}"

PROGRAM = r"""
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/resource.h>
#include <sys/shm.h>
#include <sys/wait.h>
#include <unistd.h>

static int count(const char *folder) {
    DIR *d = opendir(folder);
    int n = 0;
    struct dirent *e;
    if (!d) return -1;
    while ((e = readdir(d))) if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

static int others(void) {  /* processes besides this one and the jail's init */
    DIR *d = opendir("/proc");
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        int pid = atoi(e->d_name);
        if (pid > 1 && pid != getpid()) n++;
    }
    closedir(d);
    return n;
}

static int segments(void) {
    FILE *f = fopen("/proc/sysvipc/shm", "r");
    char line[512];
    int n = -1;
    if (!f) return -2;
    while (fgets(line, sizeof line, f)) n++;
    fclose(f);
    return n;
}

static int write_mb(const char *path, int mb) {
    static char block[1 << 20];
    memset(block, 7, sizeof block);
    int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    if (fd < 0) return 0;
    for (int i = 0; i < mb; i++) if (write(fd, block, sizeof block) != sizeof block) { close(fd); return 0; }
    close(fd);
    return 1;
}

static char *touch(long mb) {
    char *p = malloc(mb << 20);
    if (!p) return 0;
    memset(p, 1, mb << 20);
    return p;
}

int main(void) {
    char mode[32] = "";
    long a = 0, b = 0;
    if (scanf("%31s %ld %ld", mode, &a, &b) < 1) return 2;
    if (!strcmp(mode, "add")) printf("%ld\n", a + b);
    else if (!strcmp(mode, "state")) printf("%d %d %d %d\n", count("."), count("/tmp"), segments(), others());
    else if (!strcmp(mode, "litter")) {
        /* files and folders in both places, 6 MB of data, 64 MB of shared memory, a daemon */
        int ok = write_mb("big", 3) && write_mb("/tmp/big", 3);
        mkdir("dir", 0755);
        for (int i = 0; i < 100; i++) {
            char p[64];
            sprintf(p, i % 2 ? "/tmp/f%d" : "dir/f%d", i);
            close(open(p, O_CREAT | O_WRONLY, 0644));
        }
        chmod("dir", 0);
        int id = shmget(IPC_PRIVATE, 64 << 20, IPC_CREAT | 0600);
        char *s = id >= 0 ? shmat(id, 0, 0) : (char *)-1;
        if (s != (char *)-1) { memset(s, 1, 64 << 20); shmdt(s); }
        if (fork() == 0) { setsid(); if (fork() == 0) { sleep(60); _exit(0); } _exit(0); }
        wait(0);
        printf("%d %d\n", ok, id >= 0);
    }
    else if (!strcmp(mode, "disk")) printf("%d\n", write_mb("disk", (int)a));
    else if (!strcmp(mode, "memory")) printf("%d\n", touch(a) != 0);
    else if (!strcmp(mode, "childoom")) {  /* a child is killed for memory; the parent answers anyway */
        if (fork() == 0) { touch(a); _exit(0); }
        wait(0);
        printf("%ld\n", b);
    }
    else if (!strcmp(mode, "tamper")) { FILE *f = fopen("main.c", "a"); fputs("/* x */\n", f); fclose(f); puts("1"); }
    else if (!strcmp(mode, "nice")) printf("%d\n", getpriority(PRIO_PROCESS, 0));
    else if (!strcmp(mode, "nap")) { usleep(a * 1000); puts("1"); }
    else if (!strcmp(mode, "crash")) abort();
    else if (!strcmp(mode, "spin")) for (;;) {}
    else if (!strcmp(mode, "fsize")) printf("%d\n", write_mb("huge", (int)a));
    else if (!strcmp(mode, "fresh")) {  /* what a spawned program starts with */
        char line[256], ign[64] = "", blk[64] = "";
        FILE *f = fopen("/proc/self/status", "r");
        while (fgets(line, sizeof line, f)) {
            sscanf(line, "SigIgn: %63s", ign);
            sscanf(line, "SigBlk: %63s", blk);
        }
        fclose(f);
        int adj = 0;
        f = fopen("/proc/self/oom_score_adj", "r");
        fscanf(f, "%d", &adj);
        fclose(f);
        printf("fds=%d ign=%s blk=%s adj=%d leader=%d\n", count("/proc/self/fd"), ign, blk, adj, getsid(0) == getpid());
    }
    return 0;
}
"""


@pytest.fixture(scope="module")
def small() -> Iterator[NsjailBackend]:
    """An nsjail backend with a small disk (8 MB, 400 files) and its own warm slots."""
    backend = NsjailBackend(
        cgroup_parent=PARENT, warm=1, maxima=Maxima(memory_mb=1024, cpu_s=5.0, files=400, disk_mb=8)
    )
    ok, why = backend.available()
    if not ok:
        pytest.skip(why)
    if backend.storage is None or backend.runner.cgroups is None:
        pytest.skip("needs bounded job files and cgroups")
    yield backend
    backend.close()


def wait_ready(backend: Backend) -> None:
    """Until a server started ahead of time is waiting (the pool starts its thread on first use)."""
    pool = ready_servers(backend)
    assert pool is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with pool.state.cond:
            if pool.state.jails:
                return
        if pool.state.thread is None:
            jail = pool.take()  # starts the refill thread
            if jail is not None:
                jail.close()
        time.sleep(0.05)
    raise AssertionError("no ready server within 30 s")


def test_a_submission_takes_a_ready_server_compiles_in_it_and_batches_its_tests(small: NsjailBackend) -> None:
    wait_ready(small)
    pool = ready_servers(small)
    assert pool is not None
    with pool.state.cond:
        waiting = pool.state.jails[0]
    with Submission("c", PROGRAM, limits=LIMITS, backend=small) as program:
        assert program.warm and program.compile().ok
        server = program.runner.server  # type: ignore[attr-defined]
        jail = server._jail
        assert jail is waiting  # the ready one, not a jail started for it
        box = jail.host_dir()
        assert (box / "out" / "main").is_file() and not (box / "out.tar").exists()  # built in place
        stdins = [f"add {i} {i * i}" for i in range(60)]
        results = program.run_many(stdins)
        assert [r.stdout for r in results] == [f"{i + i * i}\n" for i in range(60)]
        assert program.compile_runs == 1
        assert jail.requests == 3  # 60 tests in batches of 25: three requests, not sixty
        assert server._jail is jail


def nice_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as handle:
        return int(handle.read().rsplit(b")", 1)[1].split()[16])


def test_a_ready_server_waits_at_the_lowest_priority_and_serves_at_the_jails(small: NsjailBackend) -> None:
    """Started in the background at nice 19 (it takes only CPU time the requests leave); once taken, its
    tests run at the priority every jail's programs get."""
    wait_ready(small)
    pool = ready_servers(small)
    assert pool is not None
    with pool.state.cond:
        waiting = pool.state.jails[0]
    assert nice_of(waiting.slot.waiting_pid) == 19
    with Submission("c", PROGRAM, limits=LIMITS, backend=small) as program:
        assert program.compile().ok
        assert program.runner.server._jail is waiting  # type: ignore[attr-defined]
        assert program.run("nice").stdout == f"{small.nice}\n"


def verdicts(results: list) -> list[tuple[RunVerdict, str]]:
    return [(r.verdict, r.stdout) for r in results]


def test_a_batch_gives_each_test_the_verdict_of_a_request_of_its_own(small: NsjailBackend) -> None:
    stdins = ["add 1 2", "crash", "add 3 4", "spin", "memory 600", "childoom 600 7", "fsize 70", "add 5 6"]
    with Submission("c", PROGRAM, limits=LIMITS, backend=small) as batched:
        assert batched.compile().ok
        together = batched.run_many(stdins)
    with Submission("c", PROGRAM, limits=LIMITS, backend=small) as alone:
        assert alone.compile().ok
        one_by_one = [alone.run(stdin) for stdin in stdins]
    assert verdicts(together) == verdicts(one_by_one), (together, one_by_one)
    assert [r.verdict for r in together] == [
        RunVerdict.ok,
        RunVerdict.runtime_error,
        RunVerdict.ok,
        RunVerdict.time_limit,
        RunVerdict.memory_limit,
        RunVerdict.memory_limit,  # the child's OOM kill counts against the test, as in a job of its own
        RunVerdict.output_limit,  # a file past RLIMIT_FSIZE (64 MB): SIGXFSZ, as a job's command
        RunVerdict.ok,
    ], [(r.verdict, r.detail) for r in together]


def test_a_batch_stops_at_the_first_failure_when_asked(small: NsjailBackend) -> None:
    """And at a test that sat idle longer than its CPU limit (the code verifier counts those as it counts
    time limits): what follows goes in the next batch, and each result carries its own wait for a CPU."""
    with Submission("c", PROGRAM, limits=LIMITS, backend=small) as program:
        assert program.compile().ok
        server = program.runner.server  # type: ignore[attr-defined]
        failed = program.run_many(["add 1 1", "crash", "add 2 2"], stop_on_failure=True)
        napped = program.run_batch(["add 1 1", "nap 1300", "add 2 2"], [LIMITS] * 3, stop_on_failure=True)
        requests = server._jail.requests
        every = program.run_batch(["add 1 1", "nap 1300", "add 2 2"], [LIMITS] * 3)
        assert server._jail.requests == requests + 1  # without stop_on_failure: one batch, no stop
    assert [r.verdict for r in failed] == [RunVerdict.ok, RunVerdict.runtime_error]
    assert [r.stdout for r in napped] == ["2\n", "1\n"]
    assert napped[1].wall_s - napped[1].cpu_wait_s > LIMITS.cpu_s
    assert [r.stdout for r in every] == ["2\n", "1\n", "4\n"]


@pytest.mark.parametrize("batched", [True, False], ids=["batch", "one-request-each"])
def test_what_a_test_leaves_behind_is_gone_before_the_next(small: NsjailBackend, batched: bool) -> None:
    """Files, a locked folder, 6 of 8 MB of disk, 100 inodes, 64 MB of System V shared memory and a daemon:
    the next test in the same jail finds none of it, can use the whole disk and memory again, and the limits
    still bite."""
    stdins = [
        "state",
        "litter",
        "state",
        "disk 6",  # 6 MB of the 8 MB disk: fits only if the litter's 6 MB is gone
        "memory 200",  # 200 of 256 MB: fits only if the 64 MB segment is gone
        "disk 9",  # over the disk: still output_limit
        "memory 400",  # over the memory limit: still memory_limit
        "state",
    ]
    with Submission("c", PROGRAM, limits=LIMITS, backend=small) as program:
        assert program.compile().ok
        results = program.run_many(stdins) if batched else [program.run(stdin) for stdin in stdins]
        jail = program.runner.server._jail  # type: ignore[attr-defined]
    first = results[0].stdout
    assert results[1].stdout == "1 1\n", results[1]
    assert results[2].stdout == first and results[7].stdout == first, (first, results[2], results[7])
    assert first.split()[2:] == ["0", "0"]  # no segment, no other process
    assert [r.verdict for r in results[3:7]] == [
        RunVerdict.ok,
        RunVerdict.ok,
        RunVerdict.output_limit,
        RunVerdict.memory_limit,
    ], [(r.verdict, r.detail) for r in results]
    assert results[3].stdout == "1\n" and results[4].stdout == "1\n"
    assert jail is not None  # nothing there made the host replace the jail (the disk filled only at "disk 9")


def test_a_test_that_changes_the_jails_files_gets_the_next_a_fresh_jail(small: NsjailBackend) -> None:
    with Submission("c", PROGRAM, limits=LIMITS, backend=small) as program:
        assert program.compile().ok
        server = program.runner.server  # type: ignore[attr-defined]
        first = server._jail
        results = program.run_many(["tamper", "add 2 3", "state"])
        assert server._jail is not first  # replaced after the tamper
        box = server._jail.host_dir()
        assert not (box / "main.c").read_text().endswith("/* x */\n")
    assert [r.verdict for r in results] == [RunVerdict.ok] * 3
    assert results[1].stdout == "5\n"  # the compiled program was written into the new jail
    assert program.compile_runs == 1


def test_a_spawned_program_starts_like_a_fresh_process(small: NsjailBackend) -> None:
    with Submission("c", PROGRAM, limits=LIMITS, backend=small) as program:
        assert program.compile().ok
        fresh = program.run("fresh").stdout.split()
    # fds 0, 1, 2 and the one reading /proc/self/fd; no signal blocked, none of the standard ones ignored
    # (posix_spawn leaves glibc's two internal ones, 32 and 33, ignored: glibc installs its own handlers for
    # them before it uses them); its own session. oom_score_adj is the server's where the jail's /proc is
    # read-only (nsjail's), as it was for a forked test.
    assert fresh[0] == "fds=4" and fresh[2] == "blk=0000000000000000" and fresh[4] == "leader=1", fresh
    assert int(fresh[1].split("=")[1], 16) & 0x7FFFFFFF == 0, fresh


def test_a_compile_error_in_the_jail_is_a_compile_error(small: NsjailBackend) -> None:
    with Submission(
        "c", "int main(void) { return undefined_name; }", limits=LIMITS, backend=small
    ) as program:
        outcome = program.compile()
    assert outcome.status == "compile_error" and "undefined_name" in outcome.message, outcome


def test_a_warm_jail_runs_any_argv_per_test(small: NsjailBackend) -> None:
    """The generic API (a simulator's, say): an exec server with files, then argv per test, alone or batched."""
    with WarmPython("", limits=LIMITS, backend=small) as jail:
        assert jail.start().ok
        alone = jail.execute(["/usr/bin/wc", "-c"], BASE_ENV, "hello")
        tests = [BatchTest(stdin=f"{'x' * i}", argv=("/usr/bin/wc", "-c"), env=BASE_ENV) for i in range(5)]
        batch = jail.run_batch(tests)
    assert alone.stdout.strip() == "5"
    assert [r.stdout.strip() for r in batch] == ["0", "1", "2", "3", "4"]


def test_the_code_verifier_scores_compiled_programs_through_the_warm_path() -> None:
    cases = [{"stdin": f"add {i} 1", "stdout": f"{i + 1}\n"} for i in range(30)]
    reference = verifier.SPEC.parse_reference(
        {"language": "c", "tests": {"format": "stdio", "cases": cases}, "limits": {"memory_mb": 256}}
    )
    options = verifier.SPEC.parse_options({"reward": "fraction"})
    right = verifier.SPEC.score(f"```c\n{PROGRAM}\n```", reference, options)
    assert right.status is Status.ok and right.reward == 1.0, right.details
    wrong = PROGRAM.replace('printf("%ld\\n", a + b)', 'printf("%ld\\n", a + b + (a == 7))')
    partly = verifier.SPEC.score(f"```c\n{wrong}\n```", reference, options)
    assert partly.status is Status.ok and partly.reward == pytest.approx(29 / 30), partly.details


def test_rlimits_only_come_down_so_a_request_for_more_gets_a_fresh_jail(small: NsjailBackend) -> None:
    """The host may not raise a hard rlimit it lowered (no CAP_SYS_RESOURCE needed): tests asking for more than a
    ready jail starts with get a jail started with it, and a later request for more than an earlier one gets a
    fresh jail; each one's limit is the one it asked for."""
    wide = LIMITS.model_copy(update={"open_files": 4096})
    with Submission("c", PROGRAM, limits=wide, backend=small) as program:
        assert program.compile().ok
        assert program.run("add 1 2").stdout == "3\n"
    ulimit = ["/bin/sh", "-c", "ulimit -n"]
    with WarmPython("", limits=LIMITS, backend=small) as jail:
        assert jail.start().ok
        low = jail.execute(ulimit, BASE_ENV, limits=LIMITS.model_copy(update={"open_files": 100}))
        first = jail._jail
        high = jail.execute(ulimit, BASE_ENV, limits=LIMITS.model_copy(update={"open_files": 2000}))
        assert jail._jail is not first
    assert (low.stdout, high.stdout) == ("100\n", "2000\n"), (low, high)


@pytest.mark.parametrize(
    "change",
    [
        "os.chmod('out/main', 0o700)",  # the program's own file
        "os.utime('main.c', ns=(1, 1)) if open('main.c', 'a').write('x') else None",  # written, mtime put back
        "os.chmod('/tmp', 0o700)",  # a root's mode
    ],
)
def test_a_test_that_changes_what_was_there_gets_the_next_a_fresh_jail(
    small: NsjailBackend, change: str
) -> None:
    """Python here for brevity: the same server and checks serve every language."""
    source = f"import os, sys\nif sys.stdin.read() == 'change':\n    {change}\nprint(os.stat('/tmp').st_mode & 0o7777)\n"
    files = [File(path="out/main", content="x", executable=True), File(path="main.c", content="int main;")]
    with WarmPython(source, limits=LIMITS, backend=small, files=files) as jail:
        assert jail.start().ok
        first = jail._jail
        changed = jail.run("change")
        after = jail.run("look")
        assert jail._jail is not first and jail._jail is not None
    assert changed.verdict is RunVerdict.ok and after.stdout == "1023\n", (changed, after)


def test_a_batch_keeps_to_its_wall_budget(small: NsjailBackend) -> None:
    """The code verifier's budget: each test's backstop is cut to what is left, and no test starts once it is
    spent, so a batch of sleepers cannot run past it (the first always runs)."""
    with Submission("c", PROGRAM, limits=LIMITS, backend=small) as program:
        assert program.compile().ok
        results = program.run_batch(["nap 400"] * 6, [LIMITS] * 6, wall_budget_s=1.0)
        tiny = program.run_batch(["add 1 2", "add 3 4"], [LIMITS] * 2, wall_budget_s=0.0)
    assert 1 < len(results) < 6 and results[0].verdict is RunVerdict.ok, results
    assert sum(r.wall_s - r.cpu_wait_s for r in results) < 1.0 + 0.2, results
    assert [r.stdout for r in tiny] == ["3\n"]  # the first test runs, with the least backstop


# -- a job set up on the host: put_files, execute(cwd=...), trusted batch steps --------------------------------

SH = "/bin/sh"


def sh_test(script: str, *, trusted: bool = False, cwd: str | None = "job") -> BatchTest:
    return BatchTest(argv=(SH, "-c", script), env=dict(BASE_ENV), limits=LIMITS, trusted=trusted, cwd=cwd)


def test_put_files_sets_a_job_up_in_a_cleared_box_and_runs_in_its_folder(small: NsjailBackend) -> None:
    with WarmPython("", limits=LIMITS, backend=small) as jail:
        assert jail.start().ok
        first = jail._jail
        inside = jail.put_files(
            [File(path="a.txt", content="one"), File(path="sub/b.txt", content="two")], "job"
        )
        assert inside == "/box/job"
        seen = jail.execute(
            [SH, "-c", "pwd; cat a.txt sub/b.txt; ls -A /box; ls -A /tmp"], BASE_ENV, cwd="job"
        )
        assert seen.verdict is RunVerdict.ok and seen.stdout == "/box/job\nonetwojob\n", seen
        # a trusted step leaves files in /box and /tmp; the next put_files (clear) removes them all
        made = jail.execute(
            [SH, "-c", "echo x > ../left; echo y > /tmp/t; echo z > kept"], BASE_ENV, trusted=True, cwd="job"
        )
        assert made.verdict is RunVerdict.ok
        jail.put_files([File(path="c.txt", content="three")], "job")
        again = jail.execute([SH, "-c", "ls -A; ls -A /box; ls -A /tmp"], BASE_ENV, cwd="job")
        assert again.stdout == "c.txt\njob\n", again
        # an untrusted run between two set-ups: the second set-up is the new state, not tampering
        jail.put_files([File(path="d.txt", content="four")], "job")
        after = jail.execute([SH, "-c", "cat d.txt; echo junk > junk"], BASE_ENV, cwd="job")
        last = jail.execute([SH, "-c", "ls -A"], BASE_ENV, cwd="job")
        assert after.stdout == "four" and last.stdout == "d.txt\n", (after, last)
        assert jail._jail is first  # one jail throughout: nothing read as tampering


@pytest.mark.parametrize("path", ["../x", "/etc/x", "a/../../x", "", "a//b", "./a", "a/.", "a\0b"])
def test_put_files_refuses_paths_outside_its_folder(small: NsjailBackend, path: str) -> None:
    with WarmPython("", limits=LIMITS, backend=small) as jail:
        assert jail.start().ok
        with pytest.raises(ValueError):
            jail.put_files([File(path=path, content="x")], "job")
        with pytest.raises(ValueError):
            jail.put_files([File(path="ok.txt", content="x")], path)
        with pytest.raises(ValueError):
            jail.execute([SH, "-c", "pwd"], BASE_ENV, cwd=path)


def test_put_files_refuses_files_beyond_the_jails_limits(small: NsjailBackend) -> None:
    one_mb = LIMITS.model_copy(update={"file_size_mb": 1})
    with WarmPython("", limits=one_mb, backend=small) as jail:
        assert jail.start().ok
        with pytest.raises(ValueError, match="file limit"):
            jail.put_files([File(path="big", content="x" * (2 << 20))], "job")
        many = [File(path=f"f{i}", content="") for i in range(400)]  # the backend holds 400 files
        with pytest.raises(ValueError, match="storage"):
            jail.put_files(many, "job")
        assert jail.put_files([File(path="fits", content="x" * 1000)], "job") == "/box/job"


def test_put_files_and_cwd_never_follow_a_link(small: NsjailBackend, tmp_path) -> None:
    """Links a step left in the jail (to the jail's /tmp, or to a host path the host would reach) are never
    followed: writing through one is refused or replaces the link, and a run never starts outside /box."""
    target = tmp_path / "host.txt"
    target.write_text("host")
    with WarmPython("", limits=LIMITS, backend=small) as jail:
        assert jail.start().ok
        jail.put_files([File(path="a.txt", content="one")], "job")
        links = f"ln -s /tmp out; ln -s {target} host.txt; ln -s /tmp ../tmplink"
        assert jail.execute([SH, "-c", links], BASE_ENV, trusted=True, cwd="job").verdict is RunVerdict.ok
        with pytest.raises(OSError):
            jail.put_files([File(path="out/x", content="escaped")], "job", clear=False)
        with pytest.raises(OSError):
            jail.put_files([File(path="x", content="escaped")], "tmplink", clear=False)
        jail.put_files([File(path="host.txt", content="replaced")], "job", clear=False)
        assert target.read_text() == "host"  # the link was replaced, its target left alone
        inside = jail.execute([SH, "-c", "cat host.txt; ls -A /tmp"], BASE_ENV, cwd="job")
        assert inside.stdout == "replaced", inside
        for folder in ("job/out", "tmplink"):  # a folder that leads out of /box through a link
            ran = jail.execute([SH, "-c", "pwd"], BASE_ENV, trusted=True, cwd=folder)
            assert ran.verdict is not RunVerdict.ok and "/tmp" not in ran.stdout, ran
        missing = jail.execute([SH, "-c", "pwd"], BASE_ENV, trusted=True, cwd="nowhere")
        assert missing.verdict is not RunVerdict.ok and missing.stdout == "", missing


def test_a_trusted_batch_step_keeps_its_files_and_an_untrusted_ones_are_removed(small: NsjailBackend) -> None:
    with WarmPython("", limits=LIMITS, backend=small) as jail:
        assert jail.start().ok
        first = jail._jail
        jail.put_files([File(path="src.txt", content="7")], "job")
        results = jail.run_batch(
            [
                sh_test("cat src.txt > built.txt; echo scratch > /tmp/s", trusted=True),  # the compile
                sh_test("cat built.txt; echo junk > junk; echo t > /tmp/u"),  # the candidate's run
                sh_test("ls -A; ls -A /tmp"),  # what a further run finds
            ]
        )
        assert [r.verdict for r in results] == [RunVerdict.ok] * 3, results
        assert results[1].stdout == "7" and results[2].stdout == "built.txt\nsrc.txt\ns\n", results
        assert jail._jail is first and first.requests == 1  # one exchange, counted once as untrusted
        with pytest.raises(ValueError):
            BatchTest(stdin="", trusted=True).request()  # trusted and cwd are for compiled programs only
        with pytest.raises(ValueError):
            BatchTest(stdin="", cwd="job").request()


def test_a_batch_of_trusted_steps_counts_as_no_candidate_run(small: NsjailBackend) -> None:
    """Only an untrusted test is candidate code: a batch of trusted steps leaves the server's failures the
    machinery's, and a batch with an untrusted test makes them the candidate's from then on."""
    with WarmPython("", limits=LIMITS, backend=small) as jail:
        assert jail.start().ok
        jail.put_files([], "job")
        trusted = jail.run_batch([sh_test("true", trusted=True), sh_test("true", trusted=True)])
        assert [r.verdict for r in trusted] == [RunVerdict.ok] * 2
        assert jail._jail is not None and jail._jail.requests == 0
        mixed = jail.run_batch([sh_test("true", trusted=True), sh_test("true")])
        assert [r.verdict for r in mixed] == [RunVerdict.ok] * 2
        assert jail._jail is not None and jail._jail.requests == 1


def test_put_files_refuses_a_server_that_loaded_the_candidate(small: NsjailBackend) -> None:
    """In call mode the server is candidate code that lives between requests: it could swap a folder for a
    link while the host writes, so the host writes nothing into its jail."""
    with WarmPython("def f():\n    return 1\n", mode="call", limits=LIMITS, backend=small) as jail:
        assert jail.start().ok
        with pytest.raises(OSError, match="trusted"):
            jail.put_files([File(path="a.txt", content="x")], "job")
