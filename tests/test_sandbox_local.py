"""The local backend (development only) and the cgroup layer it shares with nsjail, run for real."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from proctor.sandboxes.backends import BACKENDS, default_backend_name, get_backend
from proctor.sandboxes.backends import local as local_module
from proctor.sandboxes.backends.local import LocalBackend
from proctor.sandboxes.backends.runner import sweep_private_dirs, work_base
from proctor.sandboxes.cgroups import DEFAULT_ROOT, V1_CONTROLLERS, CgroupError, Cgroups, JobCgroup
from proctor.sandboxes.job import Command, CommandResult, File, Job, RunLimits, RunVerdict
from tests.sandbox_helpers import processes_with, setsid_daemon_program

# Verdicts must come within seconds of the limits on a quiet machine; under outside load CPU limits take
# longer in wall time (by design), so wall-clock bounds here only catch hangs, and CPU bounds show promptness.
HANG_S = 30
PARENT = f"proctor-test-{uuid.uuid4().hex[:8]}"


def _parent_dirs() -> list[Path]:
    if Cgroups(DEFAULT_ROOT, PARENT).version == 2:
        return [DEFAULT_ROOT / PARENT]
    return [DEFAULT_ROOT / controller / PARENT for controller in V1_CONTROLLERS]


@pytest.fixture(scope="module")
def local() -> Iterator[LocalBackend]:
    """One backend for the module, in its own cgroup parent so leftovers can be checked at the end."""
    backend = LocalBackend(cgroup_parent=PARENT)
    yield backend
    backend.runner.slots.close()
    leftovers = [
        child for parent in _parent_dirs() if parent.is_dir() for child in parent.iterdir() if child.is_dir()
    ]
    for parent in _parent_dirs():
        if parent.is_dir():
            parent.rmdir()
    assert leftovers == [], "per-command cgroups were left behind"


@pytest.fixture(scope="module")
def cgroups_here(local: LocalBackend) -> None:
    if local.runner.cgroups is None:
        pytest.skip(f"cgroups unusable here: {local.cgroup_reason}")


def python_job(code: str, stdin: str = "", **limits: object) -> Job:
    """One `python3 main.py` command with the given limits."""
    return Job(
        files=[File(path="main.py", content=textwrap.dedent(code))],
        commands=[Command(argv=["python3", "main.py"], stdin=stdin, limits=RunLimits(**limits))],
    )


def run(backend: LocalBackend, job: Job) -> tuple[CommandResult, float]:
    """Run and time a job; returns the first command's result and the seconds it took."""
    start = time.monotonic()
    result = backend.run(job)
    assert result.backend == backend.name
    return result.commands[0], time.monotonic() - start


def test_backends_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    assert set(BACKENDS) == {"nsjail", "docker", "local"}
    monkeypatch.setenv("PROCTOR_SANDBOX_BACKEND", "local")
    assert default_backend_name() == "local"
    assert get_backend().name == "local"
    assert get_backend("local") is get_backend("local")
    with pytest.raises(ValueError, match="unknown sandbox backend"):
        get_backend("chroot")


def test_local_warns_that_it_does_not_isolate(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(local_module, "_warned", False)
    with caplog.at_level(logging.WARNING):
        backend = LocalBackend(warm=0)
        LocalBackend(warm=0)
    assert caplog.text.count("does not isolate") == 1
    ok, why = backend.available()
    assert ok and "no isolation" in why


def test_ok_program_with_stdin_and_only_its_environment(local: LocalBackend) -> None:
    code = "import os, sys\nprint(sys.stdin.read().upper(), sorted(os.environ))\n"
    job = python_job(code, stdin="abc")
    job.env = {"EXTRA": "1"}
    command, _ = run(local, job)
    assert command.verdict is RunVerdict.ok
    assert command.stdout == "ABC ['EXTRA', 'HOME', 'LANG', 'PATH', 'PWD', 'TMPDIR']\n"
    assert command.cpu_s > 0 and command.exit_code == 0


def test_compile_then_run_in_one_directory(local: LocalBackend) -> None:
    job = Job(
        files=[File(path="main.c", content='#include <stdio.h>\nint main(){puts("built");return 0;}\n')],
        commands=[
            Command(name="compile", argv=["gcc", "-o", "prog", "main.c"], limits=RunLimits(cpu_s=10)),
            Command(name="run", argv=["./prog"]),
        ],
        fetch=["prog"],
    )
    result = local.run(job)
    assert [c.verdict for c in result.commands] == [RunVerdict.ok, RunVerdict.ok]
    assert result.commands[1].stdout == "built\n"
    assert "prog" in result.files


def test_invalid_environment_name_is_a_sandbox_error(local: LocalBackend) -> None:
    job = python_job("print(1)")
    job.env = {"NOT A NAME": "x"}
    command, _ = run(local, job)
    assert command.verdict is RunVerdict.sandbox_error
    assert "environment variable" in command.detail


def test_missing_program_is_a_sandbox_error(local: LocalBackend) -> None:
    command, _ = run(local, Job(commands=[Command(argv=["no-such-tool"])]))
    assert command.verdict is RunVerdict.sandbox_error


def test_cpu_spin_and_sleep(local: LocalBackend, cgroups_here: None) -> None:
    spin, took = run(local, python_job("while True:\n    pass\n", cpu_s=0.5))
    assert spin.verdict is RunVerdict.time_limit and 0.5 <= spin.cpu_s < 1.0
    assert took < HANG_S
    nap, took = run(local, python_job("import time\ntime.sleep(100)\n", cpu_s=0.25))
    assert nap.verdict is RunVerdict.time_limit and "backstop" in nap.detail
    assert took < HANG_S


def test_spinners_stopped_at_tree_limit(local: LocalBackend, cgroups_here: None) -> None:
    code = "import os\nfor _ in range(64):\n    if os.fork() == 0:\n        while True:\n            pass\nos.wait()\n"
    command, took = run(local, python_job(code, cpu_s=0.5, processes=80))
    assert command.verdict is RunVerdict.time_limit
    assert 0.5 <= command.cpu_s < 1.5
    assert took < HANG_S


def test_memory_bomb(local: LocalBackend, cgroups_here: None) -> None:
    command, took = run(
        local, python_job("x = []\nwhile True:\n    x.append(b'x' * (16 << 20))\n", memory_mb=96)
    )
    assert command.verdict is RunVerdict.memory_limit
    assert took < HANG_S


def test_output_limits(local: LocalBackend) -> None:
    flood = "import sys\nchunk = 'x' * (1 << 20)\nfor _ in range(100):\n    sys.stdout.write(chunk)\nsys.stdout.flush()\n"
    command, took = run(
        local, python_job(flood + "print('finished', file=sys.stderr)\n", output_bytes=1 << 20)
    )
    assert "finished" not in command.stderr
    assert command.verdict is RunVerdict.output_limit and len(command.stdout) == 1 << 20
    assert took < HANG_S
    command, _ = run(local, python_job("print('y' * 150_000, end='')\n"))
    assert command.verdict is RunVerdict.ok and len(command.stdout) == 150_000
    command, _ = run(local, python_job("import sys\nsys.stderr.write('e' * (8 << 20))\nprint(7)\n"))
    assert command.verdict is RunVerdict.ok and command.stdout == "7\n" and command.stderr_truncated


def test_file_size_limit_kill_is_an_output_limit(local: LocalBackend) -> None:
    code = "import signal\nsignal.signal(signal.SIGXFSZ, signal.SIG_DFL)\nopen('big', 'wb').write(b'0' * (4 << 20))\n"
    command, _ = run(local, python_job(code, file_size_mb=1))
    assert command.verdict is RunVerdict.output_limit
    assert command.signal == signal.SIGXFSZ


def test_daemon_dies_with_the_job(local: LocalBackend, cgroups_here: None) -> None:
    marker = f"1000.{uuid.uuid4().int % 10**9}"
    code = setsid_daemon_program(marker)
    command, took = run(local, python_job(code))
    assert command.verdict is RunVerdict.ok and command.stdout == "up\n"
    assert took < HANG_S
    assert processes_with(marker) == []


def test_fallback_to_rlimits_without_cgroups(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        backend = LocalBackend(cgroup_root=tmp_path, warm=0)
    assert "falling back to rlimits" in caplog.text
    assert "rlimits only" in backend.available()[1]
    spin, took = run(backend, python_job("while True:\n    pass\n", cpu_s=0.5))
    assert spin.verdict is RunVerdict.time_limit and spin.cpu_s >= 0.5
    assert took < HANG_S
    bomb, took = run(
        backend, python_job("x = []\nwhile True:\n    x.append(b'x' * (16 << 20))\n", memory_mb=96)
    )
    assert bomb.verdict is RunVerdict.memory_limit
    assert took < HANG_S
    # Without a cgroup the process group is killed when the main process ends: a plain child dies too.
    marker = f"1000.{uuid.uuid4().int % 10**9}"
    code = f"import subprocess\nsubprocess.Popen(['sleep', '{marker}'])\nprint('left a child')\n"
    child, _ = run(backend, python_job(code))
    assert child.verdict is RunVerdict.ok
    assert processes_with(marker) == []
    assert list(tmp_path.iterdir()) == []


def test_cgroups_report_why_they_are_unusable(tmp_path: Path) -> None:
    ok, why = Cgroups(tmp_path).usable()
    assert not ok and "not mounted" in why
    with pytest.raises(CgroupError):
        Cgroups(tmp_path).create(64, 8)
    unified = DEFAULT_ROOT / "unified"
    if (unified / "cgroup.controllers").exists() and "memory" not in (
        unified / "cgroup.controllers"
    ).read_text():
        ok, why = Cgroups(unified).usable()
        assert not ok and "lacks controllers" in why


def test_cgroup_measures_a_whole_tree_and_cleans_up(cgroups_here: None) -> None:
    cgroups = Cgroups(DEFAULT_ROOT, PARENT)
    group = cgroups.create(memory_mb=64, processes=16)
    try:
        code = "import os\nfor _ in range(3):\n    os.fork()\nsum(range(3_000_000))\n"
        argv = ["/bin/sh", "-c", 'read x && exec "$@"', "sh", sys.executable, "-c", code]
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE)
        for procs in group.procs_files:
            procs.write_text(str(proc.pid))
        assert group.pids() == [proc.pid]
        proc.communicate(b"\n", timeout=30)
        group.kill()
        assert group.cpu_s() > 0
        assert (group.peak_memory_mb() or 0) > 0
        assert group.oom_kills() == 0
    finally:
        group.remove()
    assert not any(directory.exists() for directory in group.dirs.values())


def test_kill_empties_the_cgroup(cgroups_here: None) -> None:
    cgroups = Cgroups(DEFAULT_ROOT, PARENT)
    group = cgroups.create(memory_mb=64, processes=16)
    proc = subprocess.Popen(["/bin/sh", "-c", "read x; sleep 100 & sleep 100 & wait"], stdin=subprocess.PIPE)
    try:
        for procs in group.procs_files:
            procs.write_text(str(proc.pid))
        assert proc.stdin is not None
        proc.stdin.write(b"\n")
        proc.stdin.flush()
        deadline = time.monotonic() + 10
        while len(group.pids()) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(group.pids()) == 3
        assert group.kill()
        assert group.pids() == []
    finally:
        group.remove()
        proc.wait(timeout=10)


def test_sweep_removes_only_empty_stale_cgroups(cgroups_here: None) -> None:
    cgroups = Cgroups(DEFAULT_ROOT, PARENT)
    stale = cgroups.create(memory_mb=64, processes=4)
    busy = cgroups.create(memory_mb=64, processes=4)
    proc = subprocess.Popen(["/bin/sh", "-c", "read x"], stdin=subprocess.PIPE)
    try:
        for procs in busy.procs_files:
            procs.write_text(str(proc.pid))
        # cgroupfs stamps a directory's times when its inode is first looked up, which may come after the
        # sweep read the clock; backdating both makes their age certain, so only emptiness decides.
        hour_ago = time.time() - 3600
        for directory in [*stale.dirs.values(), *busy.dirs.values()]:
            os.utime(directory, (hour_ago, hour_ago))
        cgroups.sweep(min_age_s=60)
        assert not any(directory.exists() for directory in stale.dirs.values())
        assert all(directory.exists() for directory in busy.dirs.values())
    finally:
        proc.communicate(b"\n", timeout=10)
        busy.remove()


def test_arguments_and_environment_arrive_intact(local: LocalBackend) -> None:
    words = ["a b", "it's", 'say "hi"', "line1\nline2", "$HOME", "`id`", "#go", "", "é"]
    code = "import os, sys\nprint(repr(sys.argv[1:]), repr(os.environ['TRICKY']))"
    job = Job(
        commands=[Command(argv=["python3", "-c", code, *words])],
        env={"TRICKY": "x'; echo no; '\n#go", "NL": "zz", "IFS": "x"},
    )
    command, _ = run(local, job)
    assert command.verdict is RunVerdict.ok, command
    assert command.stdout == f"{words!r} {job.env['TRICKY']!r}\n"


def test_sweep_removes_directories_of_dead_processes() -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = work_base() / f"proctor-job-{dead.pid}-{uuid.uuid4().hex}"
    alive = work_base() / f"proctor-job-{os.getppid()}-{uuid.uuid4().hex}"
    for directory in (stale, alive):
        (directory / "box").mkdir(parents=True)
    try:
        sweep_private_dirs()
        assert not stale.exists()
        assert alive.exists()
    finally:
        for directory in (stale, alive):
            if directory.exists():
                (directory / "box").rmdir()
                directory.rmdir()


def test_v2_cpu_accounting_and_kill_where_a_unified_hierarchy_is_mounted() -> None:
    # This machine is cgroup v1 with an empty v2 hierarchy beside it: enough for v2's CPU and kill paths.
    unified = DEFAULT_ROOT / "unified"
    if not (unified / "cgroup.controllers").exists():
        pytest.skip("no cgroup v2 hierarchy mounted at /sys/fs/cgroup/unified")
    directory = unified / f"proctor-test-{uuid.uuid4().hex[:8]}"
    directory.mkdir()
    group = JobCgroup(2, {"unified": directory})
    code = "import os, time\nos.fork()\nsum(range(10**7))\ntime.sleep(100)\n"
    proc = subprocess.Popen(
        ["/bin/sh", "-c", 'read x && exec "$@"', "sh", sys.executable, "-c", code], stdin=subprocess.PIPE
    )
    try:
        (directory / "cgroup.procs").write_text(str(proc.pid))
        group.start_accounting()
        assert proc.stdin is not None
        proc.stdin.write(b"\n")
        proc.stdin.flush()
        deadline = time.monotonic() + 20
        while (group.cpu_s() < 0.2 or len(group.pids()) < 2) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert group.cpu_s() >= 0.2 and len(group.pids()) == 2
        assert group.kill()
        assert group.pids() == []
    finally:
        proc.kill()
        proc.wait(timeout=10)
        group.remove()
    assert not directory.exists()


def test_a_job_cgroup_with_no_hierarchy_reads_as_empty_and_removes_cleanly() -> None:
    """Read-only cgroups (an unprivileged container): the job has no hierarchy, and the backends fall back to
    rlimits instead of failing on the empty list of `cgroup.procs` files."""
    job = JobCgroup(1, {})
    assert job.procs_files == [] and job.pids() == [] and job.threads() == []
    job.remove()
