"""The docker backend against a real engine: a private `dockerd` started here, an image made by `docker import`.

The daemon gets its own data root, exec root, unix socket and config under a temporary directory, and no
bridge, iptables rules or IP forwarding, so it touches nothing of the machine's networking. The image is
built once per session by scripts/sandbox-image.sh from this machine's own Python. After every test, no
container, volume or parent cgroup of ours may be left.
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import docker
import pytest

from proctor.sandboxes.backends.docker import CGROUP_PARENT, CGROUP_ROOT, DockerBackend
from proctor.sandboxes.job import Command, File, Job, Result, RunLimits, RunVerdict

REPO_ROOT = Path(__file__).resolve().parent.parent
IMAGE = "proctor-sandbox:test"
READY_TIMEOUT_S = 60.0
CAP_SYS_ADMIN = 21


def _can_mount() -> bool:
    """Whether this process holds CAP_SYS_ADMIN, without which dockerd cannot mount anything."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> CAP_SYS_ADMIN & 1)
    return False


class Dockerd:
    """A private docker daemon: its own directories and socket, no networking set up on the host."""

    def __init__(self, binary: str, storage: list[str]) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="proctor-dockerd-"))
        self.url = f"unix://{self.base / 'docker.sock'}"
        self.log_path = self.base / "dockerd.log"
        (self.base / "daemon.json").write_text("{}")
        env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(self.base)}
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [
                    binary,
                    f"--data-root={self.base / 'data'}",
                    f"--exec-root={self.base / 'exec'}",
                    f"--pidfile={self.base / 'dockerd.pid'}",
                    f"--config-file={self.base / 'daemon.json'}",
                    f"--host={self.url}",
                    "--bridge=none",
                    "--iptables=false",
                    "--ip6tables=false",
                    "--ip-forward=false",
                    "--ip-masq=false",
                    *storage,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,  # its containerd and shims stay in this process group
            )

    def log_tail(self) -> str:
        """The end of the daemon's log."""
        return self.log_path.read_text(errors="replace")[-3000:]

    def wait_ready(self) -> bool:
        """True once the daemon answers a ping; False if it exits or stays silent."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline and self.process.poll() is None:
            try:
                client = docker.DockerClient(base_url=self.url, version="auto", timeout=5)
                try:
                    if client.ping():
                        return True
                finally:
                    client.close()
            except docker.errors.DockerException:
                pass
            time.sleep(0.2)
        return False

    def stop(self) -> None:
        """SIGTERM (dockerd stops its containerd), SIGKILL what is left of its group, unmount, delete."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
        for mount in sorted((m for m in mounts if m.startswith(str(self.base))), key=len, reverse=True):
            subprocess.run(["umount", "-l", mount], check=False, capture_output=True)
        shutil.rmtree(self.base, ignore_errors=True)


@pytest.fixture(scope="session")
def daemon_url() -> Iterator[str]:
    """A running private dockerd with the sandbox image imported; its socket URL."""
    binary = shutil.which("dockerd") or shutil.which("dockerd", path="/usr/sbin:/usr/bin")
    if binary is None:
        pytest.skip("dockerd is not installed (Debian package docker.io)")
    if os.geteuid() != 0:
        pytest.skip("dockerd needs root here (no rootless docker set up)")
    if not _can_mount():
        pytest.skip("no CAP_SYS_ADMIN: dockerd cannot mount its layers in this environment")
    failures = []
    # The default storage driver (overlay2) first; vfs needs no overlay support from the kernel.
    for storage in ([], ["--storage-driver=vfs"]):
        daemon = Dockerd(binary, storage)
        if daemon.wait_ready():
            break
        failures.append(f"dockerd {' '.join(storage) or '(default storage)'}:\n{daemon.log_tail()}")
        daemon.stop()
    else:
        pytest.fail("dockerd did not start:\n" + "\n".join(failures))
    try:
        cli = shutil.which("docker", path="/usr/bin") or "docker"
        built = subprocess.run(
            [str(REPO_ROOT / "scripts" / "sandbox-image.sh"), IMAGE],
            env={**os.environ, "DOCKER_HOST": daemon.url, "DOCKER": cli},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert built.returncode == 0, f"sandbox-image.sh failed:\n{built.stdout}\n{built.stderr}"
        yield daemon.url
    finally:
        daemon.stop()


def _our_cgroups() -> list[Path]:
    return [
        child
        for controller in ("cpuacct", "memory", "pids")
        if (CGROUP_ROOT / controller / CGROUP_PARENT).is_dir()
        for child in (CGROUP_ROOT / controller / CGROUP_PARENT).iterdir()
        if child.is_dir()
    ]


@pytest.fixture
def backend(daemon_url: str) -> Iterator[DockerBackend]:
    """The backend on the private daemon; afterwards nothing of ours may be left behind."""
    yield DockerBackend(image=IMAGE, base_url=daemon_url)
    client = docker.DockerClient(base_url=daemon_url, version="auto")
    try:
        assert client.containers.list(all=True) == []
        assert client.volumes.list() == []
    finally:
        client.close()
    assert _our_cgroups() == []


def python(code: str, stdin: str = "", **limits: float) -> Command:
    """A command running Python code with the given limits."""
    return Command(argv=["python3", "-c", code], stdin=stdin, limits=RunLimits(**limits))


def run_one(backend: DockerBackend, command: Command) -> Result:
    """Run a one-command job; the result must be that command's."""
    result = backend.run(Job(commands=[command]))
    assert result.backend == "docker"
    assert len(result.commands) == 1, result
    return result


def test_available(backend: DockerBackend) -> None:
    ok, reason = backend.available()
    assert ok, reason
    assert IMAGE in reason


def test_python_runs_ok_locked_down(backend: DockerBackend) -> None:
    code = (
        "import os, socket\n"
        "print('hello', os.getuid(), os.getgid(), os.getcwd())\n"
        "try:\n    open('/etc/owned', 'w')\nexcept OSError as exc:\n    print('root fs', exc.errno)\n"
        "print('caps', [l.split()[1] for l in open('/proc/self/status') if l.startswith('CapEff')][0])\n"
        "print('env', sorted(k for k in os.environ if k.startswith('PROCTOR')), os.environ.get('ANSWER'))\n"
        f"print('secrets', os.path.exists('/root'), os.path.exists({str(REPO_ROOT)!r}))\n"
    )
    result = backend.run(Job(commands=[python(code)], env={"ANSWER": "42"}))
    run = result.commands[0]
    assert run.verdict is RunVerdict.ok, run
    assert run.stdout.splitlines() == [
        "hello 65534 65534 /sandbox/work",
        "root fs 30",  # EROFS
        "caps 0000000000000000",
        "env [] 42",
        "secrets False False",
    ]
    assert run.exit_code == 0 and run.signal is None
    assert run.cpu_s > 0 and run.peak_memory_mb is not None and run.peak_memory_mb > 0


def test_stdin_reaches_the_program(backend: DockerBackend) -> None:
    data = "".join(f"{n}\n" for n in range(100_000))  # ~590 KB: more than any pipe or socket buffer
    run = run_one(
        backend, python("import sys; print(sum(map(int, sys.stdin.read().split())))", data)
    ).commands[0]
    assert run.verdict is RunVerdict.ok, run
    assert run.stdout == f"{sum(range(100_000))}\n"


def test_runtime_error(backend: DockerBackend) -> None:
    run = run_one(backend, python("print('before'); 1 / 0")).commands[0]
    assert run.verdict is RunVerdict.runtime_error
    assert run.exit_code == 1
    assert run.stdout == "before\n"
    assert "ZeroDivisionError" in run.stderr


def test_missing_program_is_a_runtime_error(backend: DockerBackend) -> None:
    run = run_one(backend, Command(argv=["no-such-program"])).commands[0]
    assert run.verdict is RunVerdict.runtime_error
    assert run.exit_code == 127
    assert "no-such-program" in run.detail


def test_cpu_spin_of_the_whole_tree_is_stopped_at_its_limit(backend: DockerBackend) -> None:
    spin = "import os\nfor _ in range(3):\n    if os.fork() == 0:\n        break\nwhile True:\n    pass\n"
    run = run_one(backend, python(spin, cpu_s=1.0)).commands[0]
    assert run.verdict is RunVerdict.time_limit, run
    assert "CPU time" in run.detail
    # Four spinners share one limit: stopped near 1 s of CPU in total, not at 4 s.
    assert 1.0 <= run.cpu_s < 2.0, run.cpu_s
    assert run.signal == signal.SIGKILL


def test_memory_bomb_is_a_memory_limit(backend: DockerBackend) -> None:
    bomb = "chunks = []\nwhile True:\n    chunks.append(bytearray(8 * 1024 * 1024))\n"
    run = run_one(backend, python(bomb, memory_mb=64, cpu_s=5.0)).commands[0]
    assert run.verdict is RunVerdict.memory_limit, run
    assert run.peak_memory_mb is not None and run.peak_memory_mb >= 60


def test_sleeping_forever_hits_the_wall_backstop(backend: DockerBackend) -> None:
    run = run_one(backend, python("import time; time.sleep(3600)", cpu_s=0.5)).commands[0]
    assert run.verdict is RunVerdict.time_limit, run
    assert "wall-clock" in run.detail
    assert run.cpu_s < 0.5
    assert run.wall_s < 10  # the backstop is 2 s; this only catches a hang


def test_150_kb_of_output_finishes(backend: DockerBackend) -> None:
    run = run_one(backend, python("import sys; sys.stdout.write('x' * 150_000)")).commands[0]
    assert run.verdict is RunVerdict.ok, run
    assert run.stdout == "x" * 150_000
    assert not run.stdout_truncated


def test_10_mb_of_output_past_a_1_mb_cap_is_an_output_limit(backend: DockerBackend) -> None:
    flood = "import sys\nfor _ in range(10):\n    sys.stdout.write('y' * 1024 * 1024)\n"
    run = run_one(backend, python(flood, output_bytes=1024 * 1024)).commands[0]
    assert run.verdict is RunVerdict.output_limit, run
    assert run.stdout == "y" * 1024 * 1024
    assert run.stdout_truncated


def test_stderr_flood_is_dropped_and_the_answer_passes(backend: DockerBackend) -> None:
    code = "import sys\nsys.stderr.write('e' * 5_000_000)\nsys.stderr.flush()\nprint(42)\n"
    run = run_one(backend, python(code)).commands[0]
    assert run.verdict is RunVerdict.ok, run
    assert run.stdout == "42\n"
    assert run.stderr_truncated and len(run.stderr) == RunLimits().stderr_bytes


def test_network_is_unreachable(backend: DockerBackend) -> None:
    code = (
        "import socket\n"
        "for host in ('1.1.1.1', '10.0.0.1'):\n"
        "    try:\n"
        "        socket.create_connection((host, 53), timeout=2)\n"
        "        print(host, 'connected')\n"
        "    except OSError as exc:\n"
        "        print(host, 'failed', exc.errno)\n"
        "print(sorted(line.split(':')[0].strip() for line in open('/proc/net/dev').readlines()[2:]))\n"
    )
    run = run_one(backend, python(code)).commands[0]
    assert run.verdict is RunVerdict.ok, run
    assert run.stdout.splitlines() == ["1.1.1.1 failed 101", "10.0.0.1 failed 101", "['lo']"]  # ENETUNREACH


def test_process_limit_stops_a_fork_bomb(backend: DockerBackend) -> None:
    code = (
        "import os, time\n"
        "count = 0\n"
        "try:\n"
        "    while True:\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(60)\n"
        "            os._exit(0)\n"
        "        count += 1\n"
        "except OSError:\n"
        "    print('refused after', count)\n"
    )
    run = run_one(backend, python(code, processes=16)).commands[0]
    assert run.verdict is RunVerdict.ok, run
    assert run.stdout.startswith("refused after ")
    assert int(run.stdout.split()[-1]) < 16


def test_files_go_in_and_fetched_files_come_out(backend: DockerBackend) -> None:
    blob = bytes(range(256)) * 4
    job = Job(
        files=[
            File(path="data/input.txt", content="3 4\n"),
            File(path="blob.bin", content=base64.b64encode(blob).decode(), base64=True),
            File(path="tool.sh", content="#!/bin/sh\necho tool ran\n", executable=True),
        ],
        commands=[
            Command(
                name="compile",
                argv=[
                    "sh",
                    "-c",
                    "./tool.sh > out/log.txt 2>&1 || { mkdir out && ./tool.sh > out/log.txt; }",
                ],
            ),
            python(
                "a, b = map(int, open('data/input.txt').read().split())\n"
                "open('out/sum.txt', 'w').write(str(a + b))\n"
                "open('copy.bin', 'wb').write(open('blob.bin', 'rb').read())\n"
                "print(open('out/log.txt').read().strip())\n"
            ),
        ],
        fetch=["out/sum.txt", "copy.bin", "missing.txt", "out"],
    )
    result = backend.run(job)
    assert [c.verdict for c in result.commands] == [RunVerdict.ok, RunVerdict.ok], result
    assert result.commands[1].stdout == "tool ran\n"
    assert base64.b64decode(result.files["out/sum.txt"]) == b"7"
    assert base64.b64decode(result.files["copy.bin"]) == blob
    assert set(result.files) == {"out/sum.txt", "copy.bin"}  # missing files and directories are left out


def test_a_failed_command_stops_the_job_unless_keep_going(backend: DockerBackend) -> None:
    commands = [python("raise SystemExit(3)"), python("print('second')")]
    stopped = backend.run(Job(commands=commands))
    assert [c.verdict for c in stopped.commands] == [RunVerdict.runtime_error]
    assert stopped.commands[0].exit_code == 3
    kept = backend.run(Job(commands=commands, keep_going=True))
    assert [c.verdict for c in kept.commands] == [RunVerdict.runtime_error, RunVerdict.ok]
    assert kept.verdict is RunVerdict.runtime_error


def test_a_missing_image_is_a_sandbox_error(backend: DockerBackend, daemon_url: str) -> None:
    missing = DockerBackend(image="proctor-sandbox:does-not-exist", base_url=daemon_url)
    run = run_one(missing, python("print(1)")).commands[0]
    assert run.verdict is RunVerdict.sandbox_error
    assert "proctor-sandbox:does-not-exist" in run.detail and "sandbox-image.sh" in run.detail
    ok, reason = missing.available()
    assert not ok and "does-not-exist" in reason


def test_an_unreachable_daemon_is_a_sandbox_error(tmp_path: Path) -> None:
    nowhere = DockerBackend(image=IMAGE, base_url=f"unix://{tmp_path / 'no-daemon.sock'}")
    result = nowhere.run(Job(commands=[python("print(1)"), python("print(2)")]))
    assert [c.verdict for c in result.commands] == [RunVerdict.sandbox_error]
    assert "unreachable" in result.commands[0].detail
    ok, reason = nowhere.available()
    assert not ok and "unreachable" in reason


def test_without_local_cgroups_the_stats_api_enforces_the_limits(daemon_url: str, tmp_path: Path) -> None:
    # A cgroup tree this process cannot see stands for a daemon on another machine or one using systemd.
    remote = DockerBackend(image=IMAGE, base_url=daemon_url, cgroup_root=tmp_path)
    spin = "import os\nif os.fork():\n    pass\nwhile True:\n    pass\n"
    run = run_one(remote, python(spin, cpu_s=1.0)).commands[0]
    assert run.verdict is RunVerdict.time_limit, run
    assert "CPU time" in run.detail and 1.0 <= run.cpu_s < 2.5, run
    bomb = "chunks = []\nwhile True:\n    chunks.append(bytearray(8 * 1024 * 1024))\n"
    run = run_one(remote, python(bomb, memory_mb=64, cpu_s=5.0)).commands[0]
    assert run.verdict is RunVerdict.memory_limit, run
    client = docker.DockerClient(base_url=daemon_url, version="auto")
    try:
        assert client.containers.list(all=True) == [] and client.volumes.list() == []
    finally:
        client.close()
    assert _our_cgroups() == []


def test_concurrent_jobs_do_not_mix(backend: DockerBackend) -> None:
    jobs = [
        Job(commands=[python(f"import sys; print({n} * int(sys.stdin.read()))", stdin="7")]) for n in range(6)
    ]
    with ThreadPoolExecutor(max_workers=3) as pool:
        results = list(pool.map(backend.run, jobs))
    assert [r.commands[0].stdout for r in results] == [f"{7 * n}\n" for n in range(6)]
    assert all(r.verdict is RunVerdict.ok for r in results)


def test_job_files_are_bounded_in_count_and_bytes(daemon_url: str) -> None:
    from proctor.sandboxes.backends.runner import work_base
    from proctor.sandboxes.job import Maxima

    backend = DockerBackend(
        image=IMAGE, base_url=daemon_url, maxima=Maxima(memory_mb=512, cpu_s=5, files=300, disk_mb=4)
    )
    many = "import os\nfor i in range(100_000):\n    open(os.path.join(FOLDER, f'f{i}'), 'w').close()\n"
    for folder in (".", "/tmp"):
        result = run_one(backend, python(many.replace("FOLDER", repr(folder))))
        assert result.commands[0].verdict is RunVerdict.output_limit, result
        assert "300 files" in result.commands[0].detail
    big = "try:\n    open('big', 'wb').write(b'x' * (64 << 20))\nexcept OSError:\n    print('swallowed')\n"
    result = run_one(backend, python(big))
    assert result.commands[0].verdict is RunVerdict.output_limit and "4 MB" in result.commands[0].detail, (
        result
    )
    # Within the bounds, a job's files still carry from one container to the next and come back.
    job = Job(
        files=[File(path="a/make.py", content="open('out.txt', 'w').write('x' * 10)")],
        commands=[Command(argv=["python3", "a/make.py"]), Command(argv=["cat", "out.txt"])],
        fetch=["out.txt"],
    )
    result = backend.run(job)
    assert [c.verdict for c in result.commands] == [RunVerdict.ok, RunVerdict.ok], result
    assert result.commands[1].stdout == "x" * 10 and base64.b64decode(result.files["out.txt"]) == b"x" * 10
    assert list(work_base().glob(f"proctor-docker-{os.getpid()}-*")) == []
    client = docker.DockerClient(base_url=daemon_url, version="auto")
    try:
        assert client.containers.list(all=True) == [] and client.volumes.list() == []
    finally:
        client.close()


def test_a_runtimes_out_of_memory_words_make_a_memory_limit(backend: DockerBackend) -> None:
    code = (
        "import sys\nprint('Traceback (most recent call last):\\nMemoryError', file=sys.stderr)\nsys.exit(1)"
    )
    command = python(code).model_copy(update={"oom_markers": ("\nMemoryError",)})
    assert run_one(backend, command).commands[0].verdict is RunVerdict.memory_limit
    assert run_one(backend, python(code)).commands[0].verdict is RunVerdict.runtime_error
