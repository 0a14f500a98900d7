"""Escape attempts against the nsjail sandbox and the warm-start server, each asserting the attack fails."""

from __future__ import annotations

import json
import os
import socket
import textwrap
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from proctor.sandboxes.backends.nsjail import NsjailBackend
from proctor.sandboxes.job import Command, CommandResult, File, Job, RunLimits, RunVerdict
from proctor.sandboxes.warm import WarmPython
from tests.sandbox_helpers import processes_with as host_processes_with

TOKEN = f"secret-{uuid.uuid4().hex}"


@pytest.fixture(scope="module")
def jail() -> Iterator[NsjailBackend]:
    """A real nsjail backend, started while the service's environment holds a secret token."""
    old = os.environ.get("PROCTOR_TOKEN")
    os.environ["PROCTOR_TOKEN"] = TOKEN
    try:
        backend = NsjailBackend(warm=1)
        ok, why = backend.available()
        if not ok:
            pytest.skip(f"nsjail does not work here: {why}")
        yield backend
        backend.runner.slots.close()
    finally:
        if old is None:
            os.environ.pop("PROCTOR_TOKEN", None)
        else:
            os.environ["PROCTOR_TOKEN"] = old


def py(backend: NsjailBackend, code: str, **limits: object) -> CommandResult:
    """Run `python3 main.py` in the jail and return its result."""
    job = Job(
        files=[File(path="main.py", content=textwrap.dedent(code))],
        commands=[Command(argv=["/usr/bin/python3", "main.py"], limits=RunLimits(**limits))],
    )
    return backend.run(job).commands[0]


def probe(backend: NsjailBackend, code: str) -> dict:
    """Run a probe that prints one JSON object, and return it."""
    result = py(backend, code)
    assert result.verdict is RunVerdict.ok, (result.detail, result.stderr)
    return json.loads(result.stdout)


def test_host_files_and_secrets_are_invisible(jail: NsjailBackend) -> None:
    marker = f"proctor-escape-{uuid.uuid4().hex}"
    host_files = [Path("/tmp") / marker, Path("/dev/shm") / marker]
    for path in host_files:
        path.write_text("host secret")
    try:
        seen = probe(
            jail,
            f"""
            import json, os
            out = {{}}
            for p in ["/work", "/root", "/home", "/var", "/run", "/sys", "/mnt", "/opt", "/srv",
                      "/tmp/{marker}", "/dev/shm/{marker}", "/usr/../work"]:
                out[p] = os.path.exists(p)
            out["tmp"] = os.listdir("/tmp") + os.listdir("/dev/shm")
            out["etc"] = sorted(os.listdir("/etc"))
            out["environ"] = [open(f"/proc/{{p}}/environ", "rb").read().decode("latin1")
                              for p in os.listdir("/proc") if p.isdigit()]
            out["slots"] = [r for top in ("/box", "/tmp", "/dev", "/etc") for r, _, _ in os.walk(top) if "proctor" in r]
            status = open("/proc/self/status").read()
            out["caps"] = [l for l in status.splitlines() if l.startswith(("CapEff", "CapPrm", "CapBnd"))]
            out["uid"] = [os.getuid(), os.geteuid(), os.getgid()]
            print(json.dumps(out))
            """,
        )
    finally:
        for path in host_files:
            path.unlink()
    assert not any(v for k, v in seen.items() if k.startswith("/")), seen
    assert seen["tmp"] == []
    assert not {"shadow", "gshadow", "sudoers", "ssh", "environment"} & set(seen["etc"])
    assert all(TOKEN not in env and "PROCTOR_" not in env for env in seen["environ"])
    assert seen["slots"] == []
    assert seen["uid"] == [99999, 99999, 99999]
    assert all(line.split()[1].strip("0") == "" for line in seen["caps"] if not line.startswith("CapBnd"))


def test_writes_outside_the_box_fail(jail: NsjailBackend) -> None:
    seen = probe(
        jail,
        """
        import json, os
        out = {}
        for p in ["/x", "/etc/passwd", "/etc/x", "/usr/x", "/usr/bin/python3", "/proc/sys/kernel/hostname",
                  "/proc/1/mem", "/dev/x", "/lib/x", "/bin/x"]:
            try:
                with open(p, "ab") as handle:
                    handle.write(b"x")
                out[p] = "WROTE"
            except OSError as exc:
                out[p] = exc.strerror
        for call, args in [("mkdir", ["/newdir"]), ("symlink", ["/box", "/etc/lnk"]), ("chmod", ["/usr", 0o777])]:
            try:
                getattr(os, call)(*args)
                out[call] = "DONE"
            except OSError as exc:
                out[call] = exc.strerror
        print(json.dumps(out))
        """,
    )
    assert "WROTE" not in seen.values() and "DONE" not in seen.values(), seen


def test_nothing_persists_between_jobs(jail: NsjailBackend) -> None:
    marker = f"escape{uuid.uuid4().hex}"
    first = py(
        jail,
        f"""
        import os
        for d in ("/box", "/tmp", "/dev/shm"):
            open(f"{{d}}/{marker}", "w").write("left")
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.execv("/bin/sh", ["/bin/sh", "-c", "sleep 30; : {marker}"])
            os._exit(0)
        print("done")
        """,
    )
    assert first.verdict is RunVerdict.ok
    assert host_processes_with(marker) == []
    second = probe(
        jail,
        f"""
        import json, os
        print(json.dumps({{d: os.path.exists(f"{{d}}/{marker}") for d in ("/box", "/tmp", "/dev/shm")}}))
        """,
    )
    assert not any(second.values()), second
    # Other sandboxes' directories come and go meanwhile: os.walk skips those that vanish.
    assert not [root for root, _, names in os.walk("/dev/shm") if marker in names]


def test_no_network_not_even_the_hosts_loopback(jail: NsjailBackend) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.2)
    abstract = socket.socket(socket.AF_UNIX)
    name = f"proctor-escape-{uuid.uuid4().hex}"
    abstract.bind("\0" + name)
    abstract.listen()
    port = listener.getsockname()[1]
    try:
        seen = probe(
            jail,
            f"""
            import json, socket
            out = {{}}
            for key, family, address in [("tcp_host", socket.AF_INET, ("127.0.0.1", {port})),
                                         ("tcp_out", socket.AF_INET, ("1.1.1.1", 53)),
                                         ("tcp6_out", socket.AF_INET6, ("2606:4700:4700::1111", 53)),
                                         ("abstract", socket.AF_UNIX, "\\0{name}")]:
                try:
                    s = socket.socket(family)
                    s.settimeout(1)
                    s.connect(address)
                    out[key] = "CONNECTED"
                except OSError as exc:
                    out[key] = str(exc)
            try:
                u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                u.sendto(b"x", ("8.8.8.8", 53))
                out["udp"] = "SENT"
            except OSError as exc:
                out["udp"] = str(exc)
            out["ifaces"] = [n for _, n in socket.if_nameindex()]
            print(json.dumps(out))
            """,
        )
        with pytest.raises(TimeoutError):
            listener.accept()
    finally:
        listener.close()
        abstract.close()
    assert "CONNECTED" not in seen.values() and seen["udp"] != "SENT", seen
    assert seen["ifaces"] == ["lo"]


def test_a_forged_nsjail_status_line_does_not_change_the_verdict(jail: NsjailBackend) -> None:
    result = py(
        jail,
        """
        import os, sys
        line = "[I][2024-01-01T00:00:00+0000] pid=1 ([STANDALONE MODE]) exited with status: 0\\n"
        for fd in range(0, 64):
            try:
                os.write(fd, line.encode())
            except OSError:
                pass
        sys.stdout.flush()
        os._exit(3)
        """,
    )
    assert result.verdict is RunVerdict.runtime_error
    assert result.exit_code == 3


def test_fetch_does_not_follow_links_out_of_the_box(jail: NsjailBackend) -> None:
    job = Job(
        files=[
            File(
                path="main.py",
                content=textwrap.dedent(
                    """
                    import os
                    os.symlink("/etc/hostname", "abs")
                    os.symlink("../../../../../../etc/hostname", "rel")
                    os.symlink("/etc", "dir")
                    os.mkfifo("fifo")
                    open("real", "w").write("mine")
                    """
                ),
            )
        ],
        commands=[Command(argv=["/usr/bin/python3", "main.py"])],
        fetch=["abs", "rel", "dir/hostname", "dir", "fifo", "real"],
    )
    result = jail.run(job)
    assert result.verdict is RunVerdict.ok, result.commands[0].stderr
    assert set(result.files) == {"real"}


def test_filling_the_box_and_tmp_is_charged_to_the_memory_limit(jail: NsjailBackend) -> None:
    before = os.statvfs("/dev/shm").f_bavail
    result = py(
        jail,
        """
        import os
        chunk = b"x" * (1 << 20)
        for i in range(400):
            with open(f"/box/f{i}" if i % 2 else f"/tmp/f{i}", "wb") as handle:
                for _ in range(10):
                    handle.write(chunk)
        print("wrote 4000 MB")
        """,
        memory_mb=64,
        file_size_mb=16,
    )
    assert result.verdict is not RunVerdict.ok
    assert "wrote" not in result.stdout
    after = os.statvfs("/dev/shm")
    assert (before - after.f_bavail) * after.f_frsize < 64 << 20


def test_a_fork_bomb_stays_within_the_pids_limit(jail: NsjailBackend) -> None:
    marker = f"bomb{uuid.uuid4().hex}"
    result = py(
        jail,
        f"""
        import os, time
        made = 0
        for _ in range(200):
            try:
                if os.fork() == 0:
                    os.execv("/bin/sh", ["/bin/sh", "-c", "sleep 30; : {marker}"])
                made += 1
            except OSError:
                break
        print(made)
        """,
        processes=8,
    )
    assert result.verdict is RunVerdict.ok
    assert int(result.stdout) <= 8
    assert host_processes_with(marker) == []


def test_cpu_in_forked_children_counts_against_the_limit(jail: NsjailBackend) -> None:
    result = py(
        jail,
        """
        import os
        for _ in range(4):
            if os.fork() == 0:
                os.setsid()
                while True:
                    pass
        while True:
            pass
        """,
        cpu_s=0.5,
    )
    assert result.verdict is RunVerdict.time_limit
    assert 0.5 <= result.cpu_s < 3


# -- warm mode ------------------------------------------------------------------------------------------


def test_warm_child_cannot_reach_the_protocol_or_the_servers_memory(jail: NsjailBackend) -> None:
    source = textwrap.dedent(
        """
        import json, os
        forged = json.dumps({"verdict": "ok", "stdout": "FORGED", "id": 1}).encode()
        frame = len(forged).to_bytes(4, "big") + forged
        out = {}
        try:
            fds = os.listdir("/proc/1/fd")
        except OSError:  # the server is not dumpable: its fd table is out of the child's reach
            fds = []
        for fd in fds:
            try:
                w = os.open(f"/proc/1/fd/{fd}", os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                continue
            try:
                os.write(w, frame)
                out[fd] = os.readlink(f"/proc/1/fd/{fd}")
            except OSError:
                pass
            os.close(w)
        for path in ("/proc/1/mem", "/proc/1/environ"):
            try:
                os.open(path, os.O_RDWR)
                out[path] = "OPEN"
            except OSError:
                pass
        print(json.dumps(out))
        raise SystemExit(3)
        """
    )
    with WarmPython(source, mode="stdio", limits=RunLimits(cpu_s=2), backend=jail) as warm:
        assert warm.start().ok
        first = warm.run("")
        second = warm.run("")
    for result in (first, second):
        assert result.verdict is RunVerdict.runtime_error, (result.verdict, result.detail)
        # Only the child's own stdout pipe may be reopened: never the
        # server's stdout/stderr or the protocol pipes (fds 1-4), which the host created.
        reopened = json.loads(result.stdout[result.stdout.rindex("{") :])
        assert not {"1", "2", "3", "4"} & set(reopened), reopened
        assert "OPEN" not in result.stdout
    assert warm.starts == 1


def test_warm_leftovers_do_not_survive_into_the_next_test(jail: NsjailBackend) -> None:
    source = textwrap.dedent(
        """
        import os, sys, time
        if sys.stdin.read() == "plant":
            if os.fork() == 0:
                os.setsid()
                if os.fork() == 0:
                    time.sleep(30)
                os._exit(0)
            print("planted")
        else:
            time.sleep(0.2)
            print(sorted(p for p in os.listdir("/proc") if p.isdigit() and p != str(os.getpid())))
        """
    )
    with WarmPython(source, mode="stdio", limits=RunLimits(cpu_s=2), backend=jail) as warm:
        assert warm.run("plant").stdout == "planted\n"
        assert warm.run("look").stdout == "['1']\n"


def test_warm_child_cannot_turn_its_failure_into_a_sandbox_error(jail: NsjailBackend) -> None:
    source = "import os, signal, time\nos.kill(1, signal.SIGINT)\ntime.sleep(0.2)\nprint('wrong')\nraise SystemExit(3)\n"
    with WarmPython(source, mode="stdio", limits=RunLimits(cpu_s=2), backend=jail) as warm:
        result = warm.run("")
    assert result.verdict is RunVerdict.runtime_error, (result.verdict, result.detail)


def test_concurrent_warm_sandboxes_do_not_see_each_other(jail: NsjailBackend) -> None:
    marker = uuid.uuid4().hex
    source = textwrap.dedent(
        f"""
        import glob, os, sys
        tag = sys.stdin.read()
        open(f"/box/{marker}-{{tag}}", "w").write(tag)
        open(f"/tmp/{marker}-{{tag}}", "w").write(tag)
        import time; time.sleep(0.3)
        print(sorted(os.path.basename(p) for p in glob.glob("/box/{marker}-*") + glob.glob("/tmp/{marker}-*")))
        """
    )
    results: dict[str, str] = {}

    def one(tag: str) -> None:
        with WarmPython(source, mode="stdio", limits=RunLimits(cpu_s=2), backend=jail) as warm:
            results[tag] = warm.run(tag).stdout

    threads = [threading.Thread(target=one, args=(tag,)) for tag in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    for tag in ("a", "b"):
        assert results[tag] == f"['{marker}-{tag}', '{marker}-{tag}']\n"
