"""The nsjail backend, run for real: isolation, limits and verdicts, each abuse case within seconds of its limit."""

from __future__ import annotations

import base64
import json
import logging
import os
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from proctor.sandboxes.backends import get_backend
from proctor.sandboxes.backends.nsjail import NsjailBackend
from proctor.sandboxes.cgroups import DEFAULT_ROOT, V1_CONTROLLERS, Cgroups
from proctor.sandboxes.job import Command, CommandResult, File, Job, Maxima, Result, RunLimits, RunVerdict
from tests.sandbox_helpers import processes_with, setsid_daemon_program

REPO_ROOT = Path(__file__).resolve().parent.parent
# Verdicts must come within seconds of the limits on a quiet machine; under outside load CPU limits take
# longer in wall time (by design), so wall-clock bounds here only catch hangs, and CPU bounds show promptness.
HANG_S = 30
PARENT = f"proctor-test-{uuid.uuid4().hex[:8]}"


def _parent_dirs() -> list[Path]:
    cgroups = Cgroups(DEFAULT_ROOT, PARENT)
    if cgroups.version == 2:
        return [DEFAULT_ROOT / PARENT]
    return [DEFAULT_ROOT / controller / PARENT for controller in V1_CONTROLLERS]


@pytest.fixture(scope="module")
def jail() -> Iterator[NsjailBackend]:
    """One backend for the module, in its own cgroup parent so leftovers can be checked at the end."""

    def ours() -> set[Path]:
        return {
            p
            for p in Path("/dev/shm").glob(f"proctor-*-{os.getpid()}-*")
            if not p.name.startswith("proctor-etc")
        }

    # Other modules' backends (the shared default one) keep warm slots in this process too: not ours to check.
    before = ours()
    backend = NsjailBackend(cgroup_parent=PARENT)
    ok, why = backend.available()
    if not ok:
        pytest.skip(f"nsjail does not work here: {why}")
    yield backend
    backend.runner.slots.close()
    assert sorted(ours() - before) == [], "job or slot directories were left behind"
    leftovers = [
        child for parent in _parent_dirs() if parent.is_dir() for child in parent.iterdir() if child.is_dir()
    ]
    for parent in _parent_dirs():
        if parent.is_dir():
            parent.rmdir()
    assert leftovers == [], "per-command cgroups were left behind"


def python_job(code: str, stdin: str = "", files: list[File] | None = None, **limits: object) -> Job:
    """One `python3 main.py` command with the given limits."""
    return Job(
        files=[File(path="main.py", content=textwrap.dedent(code)), *(files or [])],
        commands=[Command(argv=["python3", "main.py"], stdin=stdin, limits=RunLimits(**limits))],
    )


def run(backend: NsjailBackend, job: Job) -> tuple[CommandResult, float, Result]:
    """Run and time a job; returns the first command's result, the seconds it took, and the whole result."""
    start = time.monotonic()
    result = backend.run(job)
    return result.commands[0], time.monotonic() - start, result


def test_get_backend_default_is_nsjail(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PROCTOR_SANDBOX_BACKEND", raising=False)
    assert get_backend().name == "nsjail"
    assert get_backend("nsjail") is get_backend()


def test_ok_program_reads_stdin_and_sees_only_its_environment(jail: NsjailBackend) -> None:
    code = """
        import json, os, sys
        print(json.dumps({"line": sys.stdin.readline().strip(), "env": sorted(os.environ), "uid": os.getuid(),
                          "gid": os.getgid(), "cwd": os.getcwd(), "uid_map": open("/proc/self/uid_map").read().split(),
                          "pid": os.getpid(), "greeting": os.environ.get("GREETING")}))
    """
    job = python_job(code, stdin="hello sandbox\n")
    job.env = {"GREETING": "hi"}
    command, _, result = run(jail, job)
    assert result.backend == "nsjail"
    assert command.verdict is RunVerdict.ok, command
    seen = json.loads(command.stdout)
    assert seen["line"] == "hello sandbox"
    assert seen["env"] == ["GREETING", "HOME", "LANG", "PATH", "PWD", "TMPDIR"]
    assert seen["greeting"] == "hi"
    assert (seen["uid"], seen["gid"]) == (99999, 99999)
    assert seen["uid_map"] == ["99999", "99999", "1"]  # unprivileged outside the jail too
    assert seen["pid"] == 1  # its own pid namespace
    assert seen["cwd"] == "/box"
    assert command.exit_code == 0 and command.signal is None
    assert command.cpu_s > 0 and command.wall_s > 0
    assert command.peak_memory_mb is not None and command.peak_memory_mb > 1


def test_compile_then_run_share_the_working_directory_and_fetch(jail: NsjailBackend) -> None:
    source = '#include <stdio.h>\nint main(){int a,b; if(scanf("%d %d",&a,&b)!=2) return 2;'
    source += (
        ' FILE*f=fopen("out.txt","w"); fprintf(f,"%d",a*b); fclose(f); printf("%d\\n",a+b); return 0;}\n'
    )
    job = Job(
        files=[File(path="src/main.c", content=source)],
        commands=[
            Command(
                name="compile", argv=["gcc", "-O2", "-o", "prog", "src/main.c"], limits=RunLimits(cpu_s=10)
            ),
            Command(name="run", argv=["./prog"], stdin="6 7\n"),
        ],
        fetch=["out.txt", "missing.txt", "../etc/passwd"],
    )
    result = jail.run(job)
    assert [c.verdict for c in result.commands] == [RunVerdict.ok, RunVerdict.ok], result
    assert result.commands[1].stdout == "13\n"
    assert result.files == {"out.txt": base64.b64encode(b"42").decode()}


def test_each_command_gets_its_own_jail(jail: NsjailBackend) -> None:
    first = "import os\nopen('ns', 'w').write(os.readlink('/proc/self/ns/pid'))\n"
    second = "import os\nprint(open('ns').read() != os.readlink('/proc/self/ns/pid'))\n"
    job = Job(
        files=[File(path="a.py", content=first), File(path="b.py", content=second)],
        commands=[Command(argv=["python3", "a.py"]), Command(argv=["python3", "b.py"])],
    )
    result = jail.run(job)
    assert result.verdict is RunVerdict.ok, result
    assert result.commands[1].stdout == "True\n"


def test_arguments_arrive_intact(jail: NsjailBackend) -> None:
    words = ["a b", "it's", 'say "hi"', "line1\nline2", "$HOME", "`id`", "#go", "", "\\n", "é"]
    job = Job(commands=[Command(argv=["python3", "-c", "import sys\nprint(repr(sys.argv[1:]))", *words])])
    job.env = {"TRICKY": "x'; echo pwned; '\n#go", "NL": "zz", "IFS": "x", "s": "1", "l": "2"}
    command = jail.run(job).commands[0]
    assert command.verdict is RunVerdict.ok, command
    assert command.stdout == repr(words) + "\n"


def test_failing_command_stops_the_job_unless_keep_going(jail: NsjailBackend) -> None:
    commands = [Command(argv=["sh", "-c", "exit 3"], name="first"), Command(argv=["true"], name="second")]
    stopped = jail.run(Job(commands=commands))
    assert [c.name for c in stopped.commands] == ["first"]
    assert stopped.verdict is RunVerdict.runtime_error
    assert stopped.commands[0].exit_code == 3
    going = jail.run(Job(commands=commands, keep_going=True))
    assert [c.verdict for c in going.commands] == [RunVerdict.runtime_error, RunVerdict.ok]


def test_crash_by_signal_is_a_runtime_error(jail: NsjailBackend) -> None:
    command, _, _ = run(jail, python_job("import ctypes\nctypes.string_at(0)\n"))
    assert command.verdict is RunVerdict.runtime_error
    assert command.signal == 11
    assert "SIGSEGV" in command.detail


def test_cpu_spin_is_a_time_limit_at_its_cpu_limit(jail: NsjailBackend) -> None:
    command, took, _ = run(jail, python_job("while True:\n    pass\n", cpu_s=1))
    assert command.verdict is RunVerdict.time_limit
    assert "CPU time" in command.detail
    assert 1.0 <= command.cpu_s < 1.5
    assert took < HANG_S


def test_sixty_four_spinners_are_stopped_at_the_tree_limit(jail: NsjailBackend) -> None:
    code = """
        import os
        for _ in range(64):
            if os.fork() == 0:
                while True:
                    pass
        os.wait()
    """
    command, took, _ = run(jail, python_job(code, cpu_s=1, processes=80))
    assert command.verdict is RunVerdict.time_limit
    assert 1.0 <= command.cpu_s < 2.0  # the tree's CPU, not 64 times the limit
    assert took < HANG_S


def test_sleeping_forever_hits_the_wall_clock_backstop(jail: NsjailBackend) -> None:
    command, took, _ = run(jail, python_job("import time\ntime.sleep(1000)\n", cpu_s=0.5))
    assert command.verdict is RunVerdict.time_limit
    assert "wall-clock backstop" in command.detail
    assert command.cpu_s < 0.5
    assert 2.0 <= took < HANG_S  # backstop 2 x 0.5 + 1 s


def test_memory_bomb_is_a_memory_limit(jail: NsjailBackend) -> None:
    code = "chunks = []\nwhile True:\n    chunks.append(b'x' * (16 << 20))\n"
    command, took, _ = run(jail, python_job(code, memory_mb=128))
    assert command.verdict is RunVerdict.memory_limit
    assert command.peak_memory_mb is not None and command.peak_memory_mb >= 100
    assert took < HANG_S


def test_fork_bomb_is_contained(jail: NsjailBackend) -> None:
    marker = f"bomb-{uuid.uuid4().hex}"
    code = f"""
        import os
        MARK = "{marker}"
        while True:
            try:
                os.fork()
            except OSError:
                pass
    """
    command, took, _ = run(jail, python_job(code, cpu_s=1, processes=32))
    assert command.verdict in (RunVerdict.time_limit, RunVerdict.runtime_error), command
    assert command.cpu_s < 2
    assert "refused" in command.detail  # the pids limit said no
    assert took < HANG_S
    assert processes_with(marker) == []


def test_setsid_double_forked_daemon_dies_with_the_job(jail: NsjailBackend) -> None:
    marker = f"1000.{uuid.uuid4().int % 10**9}"
    code = setsid_daemon_program(marker)
    command, took, _ = run(jail, python_job(code))
    assert command.verdict is RunVerdict.ok, command
    assert command.stdout == "up\n"
    assert took < HANG_S
    assert processes_with(marker) == []


def test_no_network(jail: NsjailBackend) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    port = listener.getsockname()[1]
    code = f"""
        import socket
        print(sorted(name for _, name in socket.if_nameindex()))
        for address in [("127.0.0.1", {port}), ("1.1.1.1", 53), ("8.8.8.8", 443)]:
            try:
                socket.create_connection(address, timeout=1).close()
                print("connected", address)
            except OSError as exc:
                print("failed", type(exc).__name__)
    """
    try:
        command, _, _ = run(jail, python_job(code))
        with pytest.raises(BlockingIOError):
            listener.accept()
    finally:
        listener.close()
    assert command.verdict is RunVerdict.ok, command
    lines = command.stdout.splitlines()
    assert lines[0] == "['lo']"
    assert len(lines) == 4 and all(line.startswith("failed") for line in lines[1:]), lines


def test_host_secrets_are_invisible_and_writes_outside_the_box_fail(jail: NsjailBackend) -> None:
    token = uuid.uuid4().hex
    secrets = [Path("/root") / f".proctor-secret-{token}", REPO_ROOT / f".proctor-secret-{token}"]
    host_tmp = Path("/tmp") / f"proctor-written-{token}"
    for path in secrets:
        path.write_text("secret")
    code = f"""
        import os
        for path in {[str(p) for p in secrets]!r} + ["/etc/shadow", "/root", "/work", "/home", "/var"]:
            print("visible" if os.path.exists(path) else "missing", path)
        print("root", sorted(os.listdir("/")))
        print("etc", sorted(os.listdir("/etc")))
        for path in ["/etc/x", "/usr/x", "/x", "/box/../x", "/proc/x", "/dev/x", "/lib/x"]:
            try:
                open(path, "w").write("x")
                print("wrote", path)
            except OSError as exc:
                print("refused", path, type(exc).__name__)
        open("/box/fine", "w").write("ok")
        open("/tmp/{host_tmp.name}", "w").write("private tmpfs")
        print("box and tmp writable")
    """
    try:
        command, _, _ = run(jail, python_job(code))
    finally:
        for path in secrets:
            path.unlink()
    assert command.verdict is RunVerdict.ok, command
    lines = command.stdout.splitlines()
    assert [line for line in lines if line.startswith("visible")] == []
    assert "root ['bin', 'box', 'dev', 'etc', 'lib', 'lib64', 'proc', 'sbin', 'tmp', 'usr']" in lines
    assert not any(name in line for line in lines if line.startswith("etc") for name in ("shadow", "sudoers"))
    assert [line for line in lines if line.startswith("wrote")] == []
    assert lines[-1] == "box and tmp writable"
    assert not host_tmp.exists()


def test_seccomp_refuses_ptrace_and_new_namespaces(jail: NsjailBackend) -> None:
    code = """
        import ctypes, os, threading
        libc = ctypes.CDLL(None, use_errno=True)
        print("ptrace", libc.ptrace(0, 0, 0, 0), ctypes.get_errno())
        print("clone", libc.syscall(56, 0x10000000 | 17, 0, 0, 0, 0), ctypes.get_errno())  # CLONE_NEWUSER
        print("unshare", libc.unshare(0x20000), ctypes.get_errno())  # CLONE_NEWNS
        thread = threading.Thread(target=print, args=("threads work",))
        thread.start()
        thread.join()
        print("fork works" if os.fork() or os._exit(0) else "")
    """
    command, _, _ = run(jail, python_job(code))
    assert command.verdict is RunVerdict.ok, command
    assert command.stdout.splitlines() == [
        "ptrace -1 1",
        "clone -1 1",
        "unshare -1 1",
        "threads work",
        "fork works",
    ]


def test_hundred_megabytes_of_output_is_stopped(jail: NsjailBackend) -> None:
    code = "import sys\nchunk = 'x' * (1 << 20)\nfor _ in range(100):\n    sys.stdout.write(chunk)\nsys.stdout.flush()\n"
    code += "print('finished', file=sys.stderr)\n"
    command, took, _ = run(jail, python_job(code))
    assert "finished" not in command.stderr  # stopped at the cap, not after writing everything
    assert command.verdict is RunVerdict.output_limit
    assert command.stdout_truncated
    assert len(command.stdout) == RunLimits().output_bytes
    assert took < HANG_S


def test_150_kb_of_output_finishes(jail: NsjailBackend) -> None:
    code = (
        "import sys\nfor i in range(3000):\n    print(str(i).rjust(49, '.'))\n    print(i, file=sys.stderr)\n"
    )
    command, _, _ = run(jail, python_job(code))
    assert command.verdict is RunVerdict.ok
    assert len(command.stdout) == 150_000
    assert not command.stdout_truncated
    assert command.stdout.splitlines()[-1].endswith("2999")


def test_stderr_flood_then_correct_answer_passes(jail: NsjailBackend) -> None:
    code = "import sys\nsys.stderr.write('e' * (20 << 20))\nprint(int(input()) * 2)\n"
    command, took, _ = run(jail, python_job(code, stdin="21\n"))
    assert command.verdict is RunVerdict.ok
    assert command.stdout == "42\n"
    assert command.stderr_truncated and len(command.stderr) == RunLimits().stderr_bytes
    assert took < HANG_S


def test_huge_file_is_refused_at_the_file_size_limit(jail: NsjailBackend) -> None:
    # The program is its pid namespace's init, which the kernel spares SIGXFSZ: the write fails with EFBIG.
    code = "open('big.bin', 'wb').write(b'0' * (5 << 20))\n"
    job = python_job(code, file_size_mb=1)
    job.fetch = ["big.bin"]
    command, _, result = run(jail, job)
    assert command.verdict is RunVerdict.runtime_error
    assert "File too large" in command.stderr
    assert len(base64.b64decode(result.files["big.bin"])) <= 1 << 20
    code = "import subprocess\nprint(subprocess.run(['head', '-c', '5000000', '/dev/zero'], stdout=open('b', 'wb')).returncode)\n"
    command, _, _ = run(jail, python_job(code, file_size_mb=1))
    # A child killed by SIGXFSZ; the program saw it and chose to go on.
    assert command.verdict is RunVerdict.ok
    assert command.stdout == "-25\n"


def test_many_open_files_are_capped(jail: NsjailBackend) -> None:
    code = """
        handles = []
        try:
            while len(handles) < 5000:
                handles.append(open("/dev/null"))
        except OSError as exc:
            print(len(handles), type(exc).__name__)
    """
    command, _, _ = run(jail, python_job(code, open_files=64))
    assert command.verdict is RunVerdict.ok
    count, error = command.stdout.split()
    assert int(count) < 64 and error == "OSError"


def test_missing_program_is_a_sandbox_error(jail: NsjailBackend) -> None:
    result = jail.run(Job(commands=[Command(argv=["no-such-compiler", "x.c"])]))
    assert result.verdict is RunVerdict.sandbox_error
    assert "not found" in result.commands[0].detail


def test_broken_nsjail_is_a_sandbox_error() -> None:
    broken = NsjailBackend(binary="/bin/false", warm=0)
    result = broken.run(Job(commands=[Command(argv=["true"])]))
    assert result.verdict is RunVerdict.sandbox_error
    assert "did not start" in result.commands[0].detail
    ok, why = broken.available()
    assert not ok and "trivial jail failed" in why
    missing = NsjailBackend(binary="/nonexistent/nsjail", warm=0)
    assert missing.available()[0] is False
    assert missing.run(Job(commands=[Command(argv=["true"])])).verdict is RunVerdict.sandbox_error


def test_a_jail_that_cannot_be_built_is_a_sandbox_error_with_nsjails_words() -> None:
    backend = NsjailBackend(warm=0)
    backend.system = [*backend.system, "-R", "/nonexistent-proctor-mount"]
    result = backend.run(python_job("print('never')"))
    assert result.verdict is RunVerdict.sandbox_error
    assert "nonexistent-proctor-mount" in result.commands[0].detail
    assert "mount" in result.commands[0].detail.lower()


def test_correct_program_passes_while_the_machine_is_loaded(jail: NsjailBackend) -> None:
    from concurrent.futures import ThreadPoolExecutor

    burner = "import time\nend = time.time() + 30\nwhile time.time() < end:\n    pass\n"
    # Each burner in its own session: with autogroup scheduling, burners sharing one session would count as one.
    count = max(16, 8 * (os.cpu_count() or 2))
    burners = [subprocess.Popen([sys.executable, "-c", burner], start_new_session=True) for _ in range(count)]
    code = "import time\nstart = time.process_time()\nwhile time.process_time() - start < 0.5:\n    pass\nprint('done')\n"
    try:
        time.sleep(0.5)
        # A quarter of its limit, and (starved far past its 3 s wall backstop) half of a 1 s limit.
        with ThreadPoolExecutor(2) as pool:
            quarter, half = pool.map(lambda cpu: run(jail, python_job(code, cpu_s=cpu))[0], [2, 1])
    finally:
        for proc in burners:
            proc.kill()
        for proc in burners:
            proc.wait()
    for command in (quarter, half):
        assert command.verdict is RunVerdict.ok, command
        assert command.stdout == "done\n"
        assert command.cpu_s < 1


def test_without_cgroups_it_falls_back_to_rlimits(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        backend = NsjailBackend(cgroup_root=tmp_path, warm=0)
    assert "falling back to rlimits" in caplog.text
    ok, why = backend.available()
    assert ok and "rlimits only" in why
    spin, took, _ = run(backend, python_job("while True:\n    pass\n", cpu_s=1))
    assert spin.verdict is RunVerdict.time_limit
    assert took < HANG_S
    bomb, took, _ = run(
        backend, python_job("chunks = []\nwhile True:\n    chunks.append(b'x' * (16 << 20))\n", memory_mb=128)
    )
    assert bomb.verdict is RunVerdict.memory_limit
    assert took < HANG_S
    assert list(tmp_path.iterdir()) == []


def test_concurrent_jobs(jail: NsjailBackend) -> None:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda n: jail.run(python_job(f"print({n} * {n})")), range(8)))
    assert [r.commands[0].stdout for r in results] == [f"{n * n}\n" for n in range(8)]
    assert os.listdir("/proc")  # still alive


# -- operator maxima: a job's files, CPU and memory (issue 14) --------------------------------------------


@pytest.fixture(scope="module")
def small_jail() -> Iterator[NsjailBackend]:
    """A backend whose operator maxima are small: 300 files, 4 MB of files, 2 CPU seconds, 256 MB."""
    backend = NsjailBackend(
        cgroup_parent=PARENT, warm=1, maxima=Maxima(memory_mb=256, cpu_s=2.0, files=300, disk_mb=4)
    )
    if backend.storage is None:
        pytest.skip(f"cannot bound job files here: {backend.storage_reason}")
    yield backend
    backend.close()


@pytest.mark.parametrize("folder", [".", "/tmp", "/dev/shm"])
def test_a_file_count_bomb_is_an_output_limit_and_never_reaches_the_host(
    small_jail: NsjailBackend, folder: str
) -> None:
    host_free = os.statvfs("/dev/shm").f_favail
    code = f"""
        import os
        for i in range(100_000):
            open(os.path.join({folder!r}, f"f{{i}}"), "w").close()
    """
    command, elapsed, _ = run(small_jail, python_job(code))
    assert command.verdict is RunVerdict.output_limit, command
    assert "300 files" in command.detail
    assert host_free - os.statvfs("/dev/shm").f_favail < 1000  # the host's inodes were never at stake
    assert elapsed < HANG_S


def test_a_byte_bomb_is_an_output_limit_even_when_the_program_swallows_enospc(
    small_jail: NsjailBackend,
) -> None:
    code = """
        try:
            with open("big", "wb") as handle:
                for _ in range(64):
                    handle.write(b"x" * (1 << 20))
        except OSError:
            pass
        print("fine")
    """
    command, _, _ = run(small_jail, python_job(code))
    assert command.verdict is RunVerdict.output_limit, command
    assert "4 MB" in command.detail


def test_files_within_the_maxima_carry_from_compile_to_run_and_fetch(small_jail: NsjailBackend) -> None:
    make = "import os\nos.makedirs('d/e')\nfor i in range(100): open(f'd/e/{i}', 'w').write(str(i))\n"
    job = Job(
        files=[File(path="make.py", content=make)],
        commands=[
            Command(name="make", argv=["python3", "make.py"]),
            Command(argv=["python3", "-c", "import os; print(len(os.listdir('d/e')))"]),
        ],
        fetch=["d/e/99"],
    )
    result = small_jail.run(job)
    assert [c.verdict for c in result.commands] == [RunVerdict.ok, RunVerdict.ok], result
    assert result.commands[1].stdout == "100\n"
    assert base64.b64decode(result.files["d/e/99"]) == b"99"


def test_limits_above_the_maxima_are_clamped_to_them(small_jail: NsjailBackend) -> None:
    command, _, _ = run(small_jail, python_job("while True: pass", cpu_s=30, memory_mb=4096))
    assert command.verdict is RunVerdict.time_limit, command
    assert command.cpu_s < 5
    command, _, _ = run(small_jail, python_job("x = bytearray(400 << 20)\nprint(len(x))", memory_mb=4096))
    assert command.verdict is RunVerdict.memory_limit, command


def test_a_runtimes_own_out_of_memory_stop_is_a_memory_limit(jail: NsjailBackend) -> None:
    code = "print('Traceback (most recent call last):\\nMemoryError', file=__import__('sys').stderr); exit(1)"
    plain = python_job(code)
    marked = plain.model_copy(
        update={"commands": [plain.commands[0].model_copy(update={"oom_markers": ("\nMemoryError",)})]}
    )
    assert run(jail, plain)[0].verdict is RunVerdict.runtime_error
    assert run(jail, marked)[0].verdict is RunVerdict.memory_limit
