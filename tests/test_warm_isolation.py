"""A reused (warm) jail keeps no state a test can hand to the next, and a batch keeps every test's CPU limit.

Red team rt21 (issue 21's warm jails), each closed as a class and tested with real nsjail:

- CPU a program burns in auto-reaped workers (SIGCHLD ignored) is in no process's rusage and gone before the
  server's next /proc sample; inside a batch it passed a 1 s limit at ~2 s. The host now compares the jail
  cgroup's CPU over a batch with the replies' sum and, on a mismatch, runs the tests one request each, where
  the cgroup decides (`_hidden_cpu`);
- a test used the jail's pre-existing folders and IPC namespace as a cache for the next: user xattrs on /tmp,
  /box, /box/out (setxattr family, setxattrat too), POSIX message queues, folder times (utimensat), inode
  flags (FS_IOC_SETFLAGS). The jail's seccomp policy refuses the first two; the server's clean-up puts times
  and flags back and counts a changed xattr list as tampering (a fresh jail for the next test).

Each test runs [read, store, read] in one batch (and the store alone where it matters): the second read must
see what the first saw, i.e. what a fresh jail shows.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from proctor.sandboxes.backends.nsjail import CROSS_TEST_STATE, SECCOMP_POLICY, NsjailBackend
from proctor.sandboxes.job import Maxima, RunLimits, RunVerdict
from proctor.sandboxes.program import Submission

LIMITS = RunLimits(cpu_s=0.5, memory_mb=256)
PARENT = f"proctor-test-{uuid.uuid4().hex[:8]}"

CHANNELS = r"""
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <mqueue.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

static const char *DIRS[] = {"/tmp", "/box", "/box/out"};
struct xattr_args { unsigned long long value; unsigned int size; unsigned int flags; };

static void burn(long ms) {
  struct timespec a, b;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
  volatile unsigned long x = 0;
  for (;;) {
    for (int i = 0; i < 100000; i++) x += i;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
    if ((b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000 >= ms) break;
  }
}

int main(void) {
  char m[16] = "";
  long n = 0;
  if (scanf("%15s %ld", m, &n) < 1) return 1;
  if (!strcmp(m, "xput")) {  /* user xattrs on every pre-existing folder, by every call that sets one */
    for (int i = 0; i < 3; i++) {
      int a = setxattr(DIRS[i], "user.a", "v", 2, 0);
      int b = lsetxattr(DIRS[i], "user.b", "v", 2, 0);
      int fd = open(DIRS[i], O_RDONLY | O_DIRECTORY);
      int c = fsetxattr(fd, "user.c", "v", 2, 0);
      close(fd);
      struct xattr_args args = {(unsigned long long)(unsigned long)"v", 2, 0};
      long d = syscall(463, AT_FDCWD, DIRS[i], 0, "user.d", &args, sizeof args);
      printf("%s %d %d %d %ld\n", DIRS[i], a, b, c, d);
    }
  } else if (!strcmp(m, "xget")) {
    for (int i = 0; i < 3; i++) {
      char names[256] = "";
      ssize_t len = listxattr(DIRS[i], names, sizeof names);
      printf("%s %zd", DIRS[i], len);
      for (ssize_t at = 0; at < len; at += strlen(names + at) + 1) printf(" %s", names + at);
      printf("\n");
    }
  } else if (!strcmp(m, "mqput")) {
    mqd_t q = mq_open("/rt21", O_CREAT | O_WRONLY, 0600, NULL);
    int sent = q == (mqd_t)-1 ? -1 : mq_send(q, "secret", 7, 0);
    printf("mq_open %s sent %d\n", q == (mqd_t)-1 ? strerror(errno) : "ok", sent);
  } else if (!strcmp(m, "mqget")) {
    mqd_t q = mq_open("/rt21", O_RDONLY | O_NONBLOCK);
    char got[16384] = "";
    if (q != (mqd_t)-1) mq_receive(q, got, sizeof got, NULL);
    printf("got [%s]\n", got);
  } else if (!strcmp(m, "tput")) {
    struct timespec ts[2] = {{n, 12345}, {2 * n, 67890}};
    for (int i = 0; i < 3; i++) printf("%d ", utimensat(AT_FDCWD, DIRS[i], ts, 0));
    printf("\n");
  } else if (!strcmp(m, "tget")) {
    for (int i = 0; i < 3; i++) {
      struct stat s;
      stat(DIRS[i], &s);
      printf("%s %ld.%09ld %ld.%09ld\n", DIRS[i], s.st_atim.tv_sec, s.st_atim.tv_nsec, s.st_mtim.tv_sec,
             s.st_mtim.tv_nsec);
    }
  } else if (!strcmp(m, "fput") || !strcmp(m, "fget")) {
    for (int i = 0; i < 3; i++) {
      int fd = open(DIRS[i], O_RDONLY | O_DIRECTORY), flags = 0, got = ioctl(fd, FS_IOC_GETFLAGS, &flags);
      if (!strcmp(m, "fput")) {
        flags |= FS_NODUMP_FL | FS_NOATIME_FL;
        printf("%s set %d\n", DIRS[i], ioctl(fd, FS_IOC_SETFLAGS, &flags));
      } else {
        printf("%s %d %#x\n", DIRS[i], got, flags);
      }
      close(fd);
    }
  } else if (!strcmp(m, "hide")) {  /* n ms of CPU in 4 ms workers, 2 at a time, auto-reaped */
    signal(SIGCHLD, SIG_IGN);
    for (long r = 0; r < n / 8; r++) {
      for (int w = 0; w < 2; w++)
        if (fork() == 0) {
          burn(4);
          _exit(0);
        }
      while (wait(NULL) > 0) {
      }
    }
    printf("%ld\n", n);
  } else if (!strcmp(m, "k9")) {
    kill(getpid(), SIGKILL);
  } else if (!strcmp(m, "flood")) {  /* n KiB of control bytes (6 bytes each once escaped in JSON) */
    char block[1024];
    memset(block, 1, sizeof block);
    for (long i = 0; i < n; i++) fwrite(block, 1, sizeof block, stdout);
  } else {
    printf("%s\n", m);
  }
  return 0;
}
"""

HIDE_PYTHON = """import os, signal, sys, time
words = sys.stdin.read().split()
if words[0] == "hide":
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    for _ in range(int(words[1]) // 60):
        for _ in range(2):
            if os.fork() == 0:
                end = time.thread_time() + 0.03
                while time.thread_time() < end:
                    pass
                os._exit(0)
        try:
            while True:
                os.wait()
        except ChildProcessError:
            pass
elif words[0] == "xput":
    for path in ("/tmp", "/box"):
        try:
            os.setxattr(path, "user.p", b"v")
            print(path, "set")
        except OSError as exc:
            print(path, exc.errno)
elif words[0] == "xget":
    print(*(os.listxattr(path) for path in ("/tmp", "/box")))
print(words[-1])
"""


def backend_with(policy: str) -> Iterator[NsjailBackend]:
    """An nsjail backend with its own warm slots and cgroup parent, under the seccomp `policy`."""
    backend = NsjailBackend(
        cgroup_parent=f"{PARENT}-{uuid.uuid4().hex[:4]}",
        warm=1,
        maxima=Maxima(memory_mb=1024, cpu_s=5.0, files=400, disk_mb=8),
    )
    backend.seccomp_policy = policy
    ok, why = backend.available()
    if not ok:
        pytest.skip(why)
    if backend.storage is None or backend.runner.cgroups is None:
        pytest.skip("needs bounded job files and cgroups")
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def small() -> Iterator[NsjailBackend]:
    """The jail policy every backend uses."""
    yield from backend_with(SECCOMP_POLICY)


@pytest.fixture(scope="module")
def xattrs_allowed() -> Iterator[NsjailBackend]:
    """The policy without its cross-test rules: what the server's own clean-up catches without them."""
    assert CROSS_TEST_STATE in SECCOMP_POLICY
    yield from backend_with(SECCOMP_POLICY.replace(CROSS_TEST_STATE, ""))


def batch(backend: NsjailBackend, stdins: list[str], language: str = "c", source: str = CHANNELS) -> list:
    """`stdins` as one warm batch of one submission (each test a process of its own in the same jail)."""
    with Submission(language, source, limits=LIMITS, backend=backend) as program:
        assert program.warm and program.compile().ok
        results = program.run_many(stdins)
        assert program.runner.server._jail is not None  # type: ignore[attr-defined]
    assert [r.verdict for r in results] == [RunVerdict.ok] * len(stdins), [
        (r.verdict, r.detail) for r in results
    ]
    return results


@pytest.mark.parametrize("language", ["c", "python"])
def test_cpu_in_auto_reaped_workers_counts_against_the_test_in_a_batch(
    small: NsjailBackend, language: str
) -> None:
    """~1.8x the CPU limit in workers no rusage holds: time_limit, as the jail cgroup says for a test alone."""
    source = CHANNELS if language == "c" else HIDE_PYTHON
    with Submission(language, source, limits=LIMITS, backend=small) as program:
        assert program.warm and program.compile().ok
        results = program.run_many(["echo 1", "hide 900", "echo 2"])
    assert [r.verdict for r in results] == [RunVerdict.ok, RunVerdict.time_limit, RunVerdict.ok], [
        (r.verdict, r.cpu_s, r.detail) for r in results
    ]


def test_a_batch_that_hides_no_cpu_is_judged_in_one_request(small: NsjailBackend) -> None:
    """The cgroup check leaves honest batches alone: 25 tests, one request (the server's own CPU fits)."""
    with Submission("c", CHANNELS, limits=LIMITS, backend=small) as program:
        assert program.compile().ok
        server = program.runner.server  # type: ignore[attr-defined]
        before = server._jail.requests
        results = program.run_many([f"echo{i}" for i in range(25)])
        assert [r.stdout for r in results] == [f"echo{i}\n" for i in range(25)]
        assert server._jail.requests == before + 1


def test_user_xattrs_on_the_jails_folders_are_refused(small: NsjailBackend) -> None:
    first, stored, second = batch(small, ["xget", "xput", "xget"])
    assert stored.stdout == "".join(f"{d} -1 -1 -1 -1\n" for d in ("/tmp", "/box", "/box/out")), stored.stdout
    assert second.stdout == first.stdout, (first.stdout, second.stdout)
    _, python_stored, python_second = batch(small, ["xget 0", "xput 1", "xget 2"], "python", HIDE_PYTHON)
    assert python_stored.stdout == "/tmp 1\n/box 1\n1\n"  # EPERM
    assert python_second.stdout == "[] []\n2\n"


def test_a_changed_xattr_list_retires_the_jail_where_the_policy_allows_setting_one(
    xattrs_allowed: NsjailBackend,
) -> None:
    """Defence in depth, for a kernel call the policy does not name yet: the clean-up sees the change."""
    first, stored, second = batch(xattrs_allowed, ["xget", "xput", "xget"])
    assert stored.stdout.startswith("/tmp 0 0 0"), stored.stdout
    assert second.stdout == first.stdout, (first.stdout, second.stdout)


def test_posix_message_queues_are_refused(small: NsjailBackend) -> None:
    _, stored, second = batch(small, ["mqget", "mqput", "mqget"])
    assert stored.stdout.startswith("mq_open Operation not permitted"), stored.stdout
    assert second.stdout == "got []\n"


def test_folder_times_are_put_back_after_each_test(small: NsjailBackend) -> None:
    first, stored, second = batch(small, ["tget", "tput 777", "tget"])
    assert stored.stdout == "0 0 0 \n", stored.stdout  # the owner may set them: the clean-up puts them back
    assert second.stdout == first.stdout, (first.stdout, second.stdout)
    assert " 777.000012345 " not in second.stdout  # what the store set


def test_folder_inode_flags_are_put_back_after_each_test(small: NsjailBackend) -> None:
    first, stored, second = batch(small, ["fget", "fput", "fget"])
    assert "/tmp set 0" in stored.stdout, stored.stdout  # tmpfs lets its owner set them
    assert second.stdout == first.stdout, (first.stdout, second.stdout)


def test_a_self_sigkill_in_a_batch_is_the_runtime_error_it_is_alone(small: NsjailBackend) -> None:
    """No OOM kill in the cgroup's counter: the server's memory guess for a SIGKILL is not taken."""
    with Submission("c", CHANNELS, limits=LIMITS, backend=small) as program:
        assert program.compile().ok
        together = program.run_many(["echo", "k9", "echo"])
        alone = program.run("k9")
    assert [r.verdict for r in together] == [RunVerdict.ok, RunVerdict.runtime_error, RunVerdict.ok]
    assert (together[1].verdict, together[1].detail) == (alone.verdict, alone.detail)


def test_a_batch_ends_once_its_output_is_a_few_mib_and_the_rest_go_in_the_next(small: NsjailBackend) -> None:
    """25 tests of 1 MiB of control bytes each: never one reply of 25 MiB (~150 MB of JSON) in the service."""
    with Submission("c", CHANNELS, limits=LIMITS, backend=small) as program:
        assert program.compile().ok
        jail = program.runner.server._jail  # type: ignore[attr-defined]
        before = jail.requests
        results = program.run_many(["flood 1024"] * 25)
        assert program.runner.server._jail is jail  # type: ignore[attr-defined]
        requests = jail.requests - before
    assert [len(r.stdout) for r in results] == [1024 * 1024] * 25
    assert all(r.stdout == "\x01" * (1024 * 1024) for r in results)
    # at most BATCH_OUTPUT_CHARS (2 MiB) and one test's output per batch: three tests a request
    assert requests >= 25 // 3, requests
