"""The docker backend: each command of a job runs in its own locked-down container, through the docker SDK.

Design. A job gets one docker volume, mounted at /sandbox; its `work` directory is the working directory
(a new directory, so it belongs to the sandbox user whatever the image holds). Each command gets a fresh
container on that volume, so what `compile` writes is there for `run`, and each command's limits (memory,
processes) are that container's settings. One container per command rather than `exec` in one long-lived
container: a container is what docker can kill as a whole (there is no call to kill an exec), and its memory
limit and OOM state then belong to one command. A tmpfs of docker's cannot carry files from one container to
the next (docker unmounts it with the container), hence the volume; the fsize rlimit bounds each file in it.
The job's files are copied in with `put_archive` before the first start, `fetch` files are read back with
`get_archive` from the last container, and every container, the volume and the parent cgroups are removed
afterwards, whatever happened.

Bounded files. With a daemon on this machine (same host name) and the right to mount, the job's storage is
instead a tmpfs of our own (storage.py: PROCTOR_SANDBOX_MAX_DISK_MB bytes, PROCTOR_SANDBOX_MAX_FILES files),
bound at /sandbox, its `tmp` directory bound at /tmp; the job's files are written and fetched there directly.
A command after which it is full is output_limit. With a remote daemon the volume is unbounded (docker has no
size option for it); /tmp, a tmpfs of docker's, is still bounded in bytes and files.

Each container: network_mode none, read-only root filesystem, a private /tmp tmpfs, a non-root user
(65534:65534 by default), cap_drop ALL, no-new-privileges, pids_limit, mem_limit with memswap_limit equal to it
(so swap cannot stretch the limit), rlimits nofile, fsize, core 0 and cpu (a per-process second line), no
logging driver (output is read from the attach stream, never stored by docker), no proxy settings and no host
environment (only the image's ENV and the job's env).

Time. The limit is CPU time of the container's whole process tree. With a daemon on this machine using the
cgroupfs driver, each container is placed under a parent cgroup of our own (`/proctor-docker/<id>`), polled
while it runs and still readable after the container is gone (the kernel charges a child's CPU time and OOM
kills to its ancestors), so the CPU time and peak memory reported are exact. Otherwise (systemd cgroup driver,
a daemon on another machine) the stats API is polled. The container is killed when its CPU time passes the
limit; the wall-clock backstop only catches sleepers, and (as in the other backends) time the program spent
waiting for a CPU on a loaded machine does not count against it. Memory limits are told apart from time
limits by docker's OOMKilled state and the parent cgroup's OOM-kill counter. The verdict itself comes from the
shared `runner.judge`, so every backend classifies the same measurements the same way.

Output. stdout and stderr are read from the attach socket while the container runs (docker's multiplexed
frames) into the same capped buffers as the other backends: stdout beyond its cap stops the container
(output_limit); stderr beyond its cap is read and dropped.

A daemon that cannot be reached, a missing image or any other docker failure is a `sandbox_error` result with
the reason in `detail`, never an exception.
"""

from __future__ import annotations

import base64
import contextlib
import io
import logging
import os
import select
import socket
import tarfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import docker
import docker.errors
import requests

from ..cgroups import JobCgroup
from ..job import Command, CommandResult, Job, Maxima, Result, RunLimits, RunVerdict
from ..output import Stream
from ..storage import Storage, full, release_path
from .runner import (
    Measurement,
    Workdir,
    clamp_job,
    cpu_rlimit,
    hard_wall_s,
    judge,
    longest_cpu_wait_s,
    private_dir,
    sandbox_error,
)

log = logging.getLogger(__name__)

DEFAULT_IMAGE = "proctor-sandbox:latest"
DEFAULT_SOCKET = "unix:///var/run/docker.sock"
SANDBOX_USER = "65534:65534"
VOLUME_MOUNT = "/sandbox"
WORKDIR = "/sandbox/work"
CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_PARENT = "proctor-docker"
LABEL = "proctor.sandbox"
POLL_S = 0.01
STATS_POLL_S = 0.1
EXIT_DRAIN_S = 2.0
KILL_WAIT_S = 30.0
MIB = 1024 * 1024
STDOUT, STDERR = 1, 2
# How the runtime says that the command's program is not in the image.
NOT_FOUND = ("executable file not found", "no such file or directory", "permission denied")
# What the SDK raises when the daemon or the transport fails.
DOCKER_FAILURES = (docker.errors.DockerException, requests.RequestException, OSError)


class SandboxError(Exception):
    """The docker machinery failed; the message becomes the result's detail."""


def describe(exc: BaseException) -> str:
    """One line naming a docker failure, without the SDK's long wrapped messages."""
    if isinstance(exc, docker.errors.APIError) and exc.explanation:
        return str(exc.explanation).strip().splitlines()[0]
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__


class DockerBackend:
    """Runs jobs in containers on a docker daemon; see the module docstring for the isolation it applies."""

    name = "docker"

    def __init__(
        self,
        image: str | None = None,
        base_url: str | None = None,
        user: str = SANDBOX_USER,
        cgroup_root: Path | str = CGROUP_ROOT,
        api_timeout_s: float = 60.0,
        maxima: Maxima | None = None,
    ) -> None:
        self.image = image or os.environ.get("PROCTOR_SANDBOX_IMAGE") or DEFAULT_IMAGE
        self.base_url = base_url or os.environ.get("PROCTOR_DOCKER_HOST") or os.environ.get("DOCKER_HOST")
        uid, _, gid = user.partition(":")
        gid = gid or uid
        if not (uid.isdigit() and gid.isdigit()):
            raise ValueError("user must be numeric: 'uid' or 'uid:gid'")
        self.user = f"{uid}:{gid}"
        self.owner = (int(uid), int(gid))
        self.cgroup_root = Path(cgroup_root)
        self.api_timeout_s = api_timeout_s
        self._api_version: str | None = None
        self._daemon: dict[str, str] | None = None
        self.maxima = maxima or Maxima.from_settings()
        self.storage = Storage(self.maxima.disk_mb, self.maxima.files)
        self._storage_usable: tuple[bool, str] | None = None

    def bounded_storage(self, client: docker.DockerClient) -> Storage | None:
        """The job's own tmpfs budget, where the daemon shares this machine and we may mount; else None."""
        if self._storage_usable is None:
            if not self.daemon(client)["local"]:
                self._storage_usable = (False, "the docker daemon is on another machine")
            else:
                self._storage_usable = self.storage.usable()
            if not self._storage_usable[0]:
                log.warning("docker sandbox: job files are not bounded (%s)", self._storage_usable[1])
        return self.storage if self._storage_usable[0] else None

    @property
    def where(self) -> str:
        """The daemon's address, for messages."""
        return self.base_url or DEFAULT_SOCKET

    def client(self) -> docker.DockerClient:
        """A fresh client (one per job, so concurrent jobs never share a connection); SandboxError if unreachable."""
        try:
            client = docker.DockerClient(
                base_url=self.where, version=self._api_version or "auto", timeout=self.api_timeout_s
            )
        except DOCKER_FAILURES as exc:
            raise SandboxError(f"docker daemon at {self.where} is unreachable: {describe(exc)}") from exc
        self._api_version = client.api.api_version
        return client

    def daemon(self, client: docker.DockerClient) -> dict[str, str]:
        """The daemon's version and cgroup setup (asked once)."""
        if self._daemon is None:
            info = client.info()
            version = str(info.get("CgroupVersion") or "1")
            marker = "cgroup.controllers" if version == "2" else "cpuacct/cpuacct.usage"
            # Parent cgroups of our own only where we can read and remove them: the daemon runs on this
            # machine (same host name, same cgroup tree) and lays cgroups out by path (cgroupfs driver).
            local = info.get("Name") == socket.gethostname() and (self.cgroup_root / marker).exists()
            self._daemon = {
                "version": str(info.get("ServerVersion", "?")),
                "cgroups": "parent" if local and info.get("CgroupDriver") == "cgroupfs" else "stats",
                "cgroup_version": version,
                "local": "1" if info.get("Name") == socket.gethostname() else "",
            }
        return self._daemon

    def available(self) -> tuple[bool, str]:
        """Whether the daemon answers and has the image."""
        try:
            client = self.client()
        except SandboxError as exc:
            return False, str(exc)
        try:
            version = self.daemon(client)["version"]
            client.images.get(self.image)
        except docker.errors.ImageNotFound:
            return False, missing_image(self.image)
        except DOCKER_FAILURES as exc:
            return False, f"docker daemon at {self.where} failed: {describe(exc)}"
        finally:
            client.close()
        return True, f"docker {version} at {self.where}, image {self.image}"

    def run(self, job: Job) -> Result:
        """Run the job's commands in order, each in a fresh container on the job's volume."""
        job = clamp_job(job, self.maxima)
        try:
            client = self.client()
        except SandboxError as exc:
            return Result(backend=self.name, commands=[sandbox_error(job.commands[0].name, str(exc))])
        results: list[CommandResult] = []
        files: dict[str, str] = {}
        run = _JobRun(self, client, job)
        try:
            for index, command in enumerate(job.commands):
                try:
                    result = run.command(command, first=index == 0)
                except SandboxError as exc:
                    result = sandbox_error(command.name, str(exc))
                except DOCKER_FAILURES as exc:
                    result = sandbox_error(command.name, f"docker failed: {describe(exc)}")
                results.append(result)
                if result.verdict is RunVerdict.sandbox_error:
                    break  # the machinery is broken: later commands would fail the same way
                if result.verdict is not RunVerdict.ok and not job.keep_going:
                    break
            if job.fetch and run.containers and results[-1].verdict is not RunVerdict.sandbox_error:
                try:
                    files = run.fetch(job.fetch)
                except (SandboxError, *DOCKER_FAILURES) as exc:
                    results.append(sandbox_error("fetch", f"fetching files failed: {describe(exc)}"))
        finally:
            run.cleanup()
            client.close()
        return Result(backend=self.name, commands=results, files=files)


def missing_image(image: str) -> str:
    """The detail for an image the daemon does not have (never pulled: sandboxes have no registry)."""
    return f"image {image!r} is not on the docker daemon (build it with scripts/sandbox-image.sh)"


class _JobRun:
    """The docker objects of one job (its volume, containers and parent cgroups); removes them all."""

    def __init__(self, backend: DockerBackend, client: docker.DockerClient, job: Job) -> None:
        self.backend = backend
        self.client = client
        self.api = client.api
        self.job = job
        self.token = uuid.uuid4().hex[:16]
        self.volume: str | None = None
        self.containers: list[str] = []
        self.cgroup_parents: list[str] = []
        self.storage = backend.bounded_storage(client)
        self.host: Path | None = None  # our tmpfs, bound at /sandbox, when the storage is bounded

    def command(self, command: Command, first: bool) -> CommandResult:
        """Run one command in a fresh container and judge how it ended."""
        if self.storage is not None:
            if self.host is None:
                self._make_host_storage()
        elif self.volume is None:
            self.volume = self.api.create_volume(name=f"proctor-{self.token}", labels={LABEL: "1"})["Name"]
        parent = self._cgroup_parent()
        container = self._create(command, parent)
        if first and self.host is None:
            self._put_files(container)
        full_check = None
        if self.host is not None and self.storage is not None:
            host, storage = self.host, self.storage
            full_check = lambda: storage.describe(what) if (what := full(host)) else ""  # noqa: E731
        execution = _Execution(
            self.api, container, command, lambda: self._cgroups(parent, container), full_check
        )
        return execution.run()

    def _make_host_storage(self) -> None:
        """Our own tmpfs for the job (work/ with the job's files, tmp/), owned by the sandbox user."""
        assert self.storage is not None
        host = private_dir("docker")
        host.mkdir(mode=0o755)
        self.host = host
        self.storage.mount(host, self.backend.owner, mode=0o755)
        work = Workdir(host, host / PurePosixPath(WORKDIR).relative_to(VOLUME_MOUNT).as_posix(), host / "tmp")
        for directory, mode in ((work.box, 0o755), (work.tmp, 0o1777)):
            directory.mkdir()
            directory.chmod(mode)
            os.chown(directory, *self.backend.owner)
        for item in self.job.files:
            target = work.box / item.path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(item.data())
            target.chmod(0o755 if item.executable else 0o644)
        for path in work.box.rglob("*"):
            os.lchown(path, *self.backend.owner)

    def _cgroup_parent(self) -> str | None:
        """A fresh parent cgroup for the next container, when the daemon lays out cgroups by path."""
        if self.backend.daemon(self.client)["cgroups"] != "parent":
            return None
        parent = f"/{CGROUP_PARENT}/{self.token}-{len(self.containers)}"
        self.cgroup_parents.append(parent)
        return parent

    def _cgroups(self, parent: str | None, container: str) -> tuple[JobCgroup, JobCgroup] | None:
        """The container's parent and own cgroups, when this machine can see them (the daemon is local)."""
        if parent is None:
            return None
        root = self.backend.cgroup_root
        relative = parent.lstrip("/")
        if self.backend.daemon(self.client)["cgroup_version"] == "2":
            unified = root / relative
            if not (unified / container).is_dir():
                return None
            return JobCgroup(2, {"unified": unified}), JobCgroup(2, {"unified": unified / container})
        dirs = {name: root / name / relative for name in ("cpuacct", "memory", "pids")}
        if not all((directory / container).is_dir() for directory in dirs.values()):
            return None
        own = {name: directory / container for name, directory in dirs.items()}
        return JobCgroup(1, dirs), JobCgroup(1, own)

    def _create(self, command: Command, parent: str | None) -> str:
        limits = command.limits
        memory = limits.memory_mb * MIB
        file_size = limits.file_size_mb * MIB
        cpu_soft, cpu_hard = cpu_rlimit(limits, cgroup=True)
        host_config = self.api.create_host_config(
            network_mode="none",
            read_only=True,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            pids_limit=limits.processes,
            mem_limit=memory,
            memswap_limit=memory,
            ulimits=[
                docker.types.Ulimit(name="nofile", soft=limits.open_files, hard=limits.open_files),
                docker.types.Ulimit(name="fsize", soft=file_size, hard=file_size),
                docker.types.Ulimit(name="core", soft=0, hard=0),
                docker.types.Ulimit(name="cpu", soft=cpu_soft, hard=cpu_hard),
            ],
            # tmpfs pages are charged to the container's memory cgroup, so the size is bounded twice.
            tmpfs=None if self.host is not None else {"/tmp": f"rw,nosuid,nodev,{self._tmp_options(limits)}"},
            binds=(
                {
                    str(self.host): {"bind": VOLUME_MOUNT, "mode": "rw"},
                    str(self.host / "tmp"): {"bind": "/tmp", "mode": "rw"},
                }
                if self.host is not None
                else {self.volume: {"bind": VOLUME_MOUNT, "mode": "rw"}}
            ),
            log_config=docker.types.LogConfig(type="none"),
            cgroup_parent=parent,
        )
        try:
            created = self.api.create_container(
                self.backend.image,
                command=command.argv,
                user=self.backend.user,
                working_dir=WORKDIR,
                environment=dict(self.job.env),
                hostname="sandbox",
                stdin_open=True,  # with detach=False this also makes stdin close when we close our side
                network_disabled=True,
                labels={LABEL: "1"},
                host_config=host_config,
                use_config_proxy=False,
            )
        except docker.errors.ImageNotFound as exc:
            raise SandboxError(missing_image(self.backend.image)) from exc
        self.containers.append(created["Id"])
        return created["Id"]

    def _tmp_options(self, limits: RunLimits) -> str:
        """Options of docker's own /tmp tmpfs (remote daemons): no larger than memory or the disk maximum."""
        maxima = self.backend.maxima
        return f"size={min(limits.memory_mb, maxima.disk_mb)}m,nr_inodes={maxima.files},mode=1777"

    def _put_files(self, container: str) -> None:
        """Create the working directory with the job's files in it, owned by the sandbox user."""
        # A new directory inside the volume takes the archive's owner; the volume's own root would not.
        top = PurePosixPath(WORKDIR).relative_to(VOLUME_MOUNT).as_posix()
        directories = {top}
        entries: list[tuple[str, bytes, bool]] = []
        for item in self.job.files:
            path = item.path.replace("\\", "/").strip("/")
            parts = path.split("/")
            directories.update(f"{top}/" + "/".join(parts[:depth]) for depth in range(1, len(parts)))
            entries.append((f"{top}/{path}", item.data(), item.executable))
        buffer = io.BytesIO()
        now = int(time.time())
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            for name in sorted(directories, key=lambda d: (d.count("/"), d)):
                archive.addfile(self._member(name, tarfile.DIRTYPE, 0o755, now))
            for name, data, executable in entries:
                member = self._member(name, tarfile.REGTYPE, 0o755 if executable else 0o644, now)
                member.size = len(data)
                archive.addfile(member, io.BytesIO(data))
        if not self.api.put_archive(container, VOLUME_MOUNT, buffer.getvalue()):
            raise SandboxError("copying the job's files into the container failed")

    def _member(self, name: str, kind: bytes, mode: int, mtime: int) -> tarfile.TarInfo:
        member = tarfile.TarInfo(name)
        member.type, member.mode, member.mtime = kind, mode, mtime
        member.uid, member.gid = self.backend.owner
        return member

    def fetch(self, paths: list[str]) -> dict[str, str]:
        """The named regular files of the working directory (base64); missing ones are left out."""
        limit = max(c.limits.file_size_mb for c in self.job.commands) * MIB + 64 * 1024
        if self.host is not None:
            box = self.host / PurePosixPath(WORKDIR).relative_to(VOLUME_MOUNT).as_posix()
            return Workdir(self.host, box, self.host / "tmp").fetch(paths, limit)
        files: dict[str, str] = {}
        for path in paths:
            relative = path.replace("\\", "/").strip("/")
            if not relative or ".." in relative.split("/"):
                continue
            try:
                chunks, _ = self.api.get_archive(self.containers[-1], f"{WORKDIR}/{relative}")
            except docker.errors.NotFound:
                continue
            data = bytearray()
            for chunk in chunks:
                data += chunk
                if len(data) > limit + 1024 * 1024:
                    raise SandboxError(f"{relative!r} is larger than the file size limit")
            with tarfile.open(fileobj=io.BytesIO(bytes(data))) as archive:
                member = archive.next()
                extracted = archive.extractfile(member) if member is not None and member.isfile() else None
                if extracted is not None:
                    files[path] = base64.b64encode(extracted.read()).decode()
        return files

    def cleanup(self) -> None:
        """Remove every container, then their parent cgroups and the volume; failures are logged, never raised."""
        for container in self.containers:
            try:
                self.api.remove_container(container, force=True)
            except docker.errors.NotFound:
                pass
            except DOCKER_FAILURES as exc:
                log.warning("could not remove sandbox container %s: %s", container[:12], describe(exc))
        for parent in self.cgroup_parents:
            remove_cgroup(self.backend.cgroup_root, parent.lstrip("/"))
        if self.volume is not None:
            try:
                self.api.remove_volume(self.volume, force=True)
            except docker.errors.NotFound:
                pass
            except DOCKER_FAILURES as exc:
                log.warning("could not remove sandbox volume %s: %s", self.volume, describe(exc))
        if self.host is not None:
            release_path(self.host)


def remove_cgroup(root: Path, relative: str) -> None:
    """Remove a cgroup directory from every hierarchy the runtime made it in (v1 has one per controller)."""
    try:
        candidates = {root / relative} | {entry / relative for entry in root.iterdir() if entry.is_dir()}
    except OSError:
        return
    for directory in {path.resolve() for path in candidates if path.is_dir()}:
        for attempt in range(100):
            try:
                directory.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                if attempt == 99:
                    log.warning("could not remove cgroup %s", directory)
                time.sleep(0.01)


@dataclass
class Frames:
    """Splits docker's multiplexed attach stream (8-byte header: stream, 0, 0, 0, big-endian size) by stream."""

    streams: dict[int, Stream]
    pending: bytearray = field(default_factory=bytearray)

    def feed(self, chunk: bytes) -> None:
        """Hand every complete frame to its stream's capped buffer; keep a partial frame for later."""
        self.pending += chunk
        offset = 0
        while len(self.pending) - offset >= 8:
            size = int.from_bytes(self.pending[offset + 4 : offset + 8], "big")
            if len(self.pending) - offset - 8 < size:
                break
            stream = self.streams.get(self.pending[offset])
            if stream is not None:
                stream.feed(bytes(self.pending[offset + 8 : offset + 8 + size]))
            offset += 8 + size
        del self.pending[:offset]


class _Meter:
    """CPU seconds, peak memory, OOM kills and CPU starvation of one container: cgroup files, else the stats API."""

    def __init__(self, api: Any, container: str) -> None:
        self.api = api
        self.container = container
        self.parent: JobCgroup | None = None
        self.own: JobCgroup | None = None
        self._cpu = 0.0
        self._peak: float | None = None
        self._next_stats = 0.0

    def attach(self, cgroups: tuple[JobCgroup, JobCgroup] | None) -> None:
        """Use these cgroups (the parent for totals, the container's own for its live threads)."""
        if cgroups is not None:
            self.parent, self.own = cgroups

    @property
    def interval(self) -> float:
        """How often polling is worth it: cgroup files are cheap, a stats call is not."""
        return POLL_S if self.parent is not None else STATS_POLL_S

    def cpu_s(self) -> float:
        """CPU seconds so far (with only the API: the last sample)."""
        if self.parent is not None:
            self._cpu = max(self._cpu, self.parent.cpu_s())
        elif time.monotonic() >= self._next_stats:
            self._next_stats = time.monotonic() + STATS_POLL_S
            self._sample_stats()
        return self._cpu

    def _sample_stats(self) -> None:
        try:
            stats = self.api.stats(self.container, stream=False, one_shot=True)
        except DOCKER_FAILURES:
            return  # it may have just exited; keep the last sample
        usage = (stats.get("cpu_stats") or {}).get("cpu_usage", {}).get("total_usage")
        if usage:
            self._cpu = max(self._cpu, usage / 1e9)
        memory = stats.get("memory_stats") or {}
        peak = memory.get("max_usage") or memory.get("usage")
        if peak:
            self._peak = max(self._peak or 0.0, peak / MIB)

    def peak_memory_mb(self) -> float | None:
        """Largest memory use seen, in MiB."""
        return self.parent.peak_memory_mb() if self.parent is not None else self._peak

    def oom_kills(self) -> int:
        """OOM kills the parent cgroup counted (0 with only the API)."""
        return self.parent.oom_kills() if self.parent is not None else 0

    def pids_refused(self) -> int:
        """Forks the pids limit refused (the container's own counter; 0 once it is gone or with only the API)."""
        return self.own.pids_refused() if self.own is not None else 0

    def starved_s(self) -> float:
        """Longest time a live thread of the container has waited for a CPU (0 when it cannot be seen)."""
        return longest_cpu_wait_s(self.own.threads()[:32]) if self.own is not None else 0.0


class _Execution:
    """One container from start to end: feeds stdin, reads capped output, polls CPU time, kills at a limit."""

    def __init__(
        self,
        api: Any,
        container: str,
        command: Command,
        cgroups: Callable[[], tuple[JobCgroup, JobCgroup] | None],
        storage_full: Callable[[], str] | None = None,
    ) -> None:
        self.api = api
        self.storage_full = storage_full
        self.container = container
        self.command = command
        self.limits: RunLimits = command.limits
        self.stdout = Stream(fd=-1, cap=self.limits.output_bytes)
        self.stderr = Stream(fd=-1, cap=self.limits.stderr_bytes)
        self.frames = Frames({STDOUT: self.stdout, STDERR: self.stderr})
        self.find_cgroups = cgroups
        self.meter = _Meter(api, container)
        self.exited = threading.Event()
        self.status: dict[str, Any] | None = None
        self.wait_error: BaseException | None = None
        self.kill_reason: RunVerdict | None = None
        self.kill_detail = ""
        self.pids_refused = 0

    def run(self) -> CommandResult:
        """Start the container, watch it to the end, and judge the outcome."""
        attached = self.api.attach_socket(
            self.container, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
        )
        sock = getattr(attached, "_sock", attached)  # the SDK hands back a SocketIO around the real socket
        if not isinstance(sock, socket.socket):
            attached.close()
            raise SandboxError("this docker transport gives no plain socket to attach to")
        sock.settimeout(None)
        try:
            # Attached before the start, so nothing the program prints can be missed.
            try:
                self.api.start(self.container)
            except docker.errors.APIError as exc:
                if not any(sign in str(exc) for sign in NOT_FOUND):
                    raise
                # As a shell would say: the job named a program the image does not have.
                result = CommandResult(
                    name=self.command.name, verdict=RunVerdict.runtime_error, exit_code=127
                )
                result.detail = f"cannot execute {self.command.argv[0]!r}: {describe(exc)}"
                return result
            started = time.monotonic()
            # The runtime creates the container's cgroups during the start, not at creation.
            self.meter.attach(self.find_cgroups())
            threading.Thread(target=self._wait, daemon=True).start()
            self._feed_stdin(sock)
            self._watch(sock, started)
            wall = time.monotonic() - started
        finally:
            # shutdown wakes a stdin feeder still blocked in sendall; close alone would not.
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
            attached.close()
        if self.wait_error is not None:
            raise SandboxError(f"waiting for the container failed: {describe(self.wait_error)}")
        return self._judge(self.api.inspect_container(self.container)["State"], wall)

    def _wait(self) -> None:
        try:
            self.status = self.api.wait(self.container, timeout=hard_wall_s(self.limits) + KILL_WAIT_S + 60)
        except BaseException as exc:  # noqa: BLE001 - reported by the watcher; a thread must not die silently
            self.wait_error = exc
        finally:
            self.exited.set()

    def _feed_stdin(self, sock: socket.socket) -> None:
        data = self.command.stdin.encode()
        if not data:
            _close_sending(sock)
            return

        def feed() -> None:
            with contextlib.suppress(OSError):  # the program ended without reading all of it
                sock.sendall(data)
            _close_sending(sock)

        # A thread, since a program that never reads its stdin must not block the watcher.
        threading.Thread(target=feed, daemon=True).start()

    def _watch(self, sock: socket.socket, started: float) -> None:
        """Read output and poll the limits until the container has exited and its output is all read."""
        eof = False
        exited_at: float | None = None
        next_starve_check = 0.0
        while True:
            if eof:
                self.exited.wait(self.meter.interval)
            elif select.select([sock], [], [], self.meter.interval)[0]:
                eof = self._read(sock)
            if self.exited.is_set():
                # The last output can still be on its way after the exit; EOF follows promptly.
                exited_at = exited_at or time.monotonic()
                if eof or time.monotonic() - exited_at > EXIT_DRAIN_S:
                    return
                continue
            self.pids_refused = max(self.pids_refused, self.meter.pids_refused())
            now = time.monotonic()
            elapsed = now - started
            if self.stdout.truncated:
                self._kill(sock, RunVerdict.output_limit, f"stdout passed {self.limits.output_bytes} bytes")
            elif self.meter.cpu_s() > self.limits.cpu_s:
                detail = f"CPU time of the process tree passed {self.limits.cpu_s:g} s"
                self._kill(sock, RunVerdict.time_limit, detail)
            elif elapsed > self.limits.wall_backstop_s and now >= next_starve_check:
                next_starve_check = now + 0.1
                self._check_wall(sock, elapsed)
            if self.kill_reason is not None:
                return

    def _check_wall(self, sock: socket.socket, elapsed: float) -> None:
        """The backstop, not counting time spent waiting for a CPU on a loaded machine."""
        starved = self.meter.starved_s()
        hard = hard_wall_s(self.limits)
        if elapsed >= hard:
            if starved > elapsed / 2:
                self._kill(
                    sock, RunVerdict.sandbox_error, f"machine overloaded: waited {starved:.1f} s for a CPU"
                )
            else:
                self._kill(sock, RunVerdict.time_limit, f"wall-clock hard cap {hard:g} s")
        elif elapsed - starved > self.limits.wall_backstop_s:
            detail = f"wall-clock backstop {self.limits.wall_backstop_s:g} s (sleeping or blocked)"
            self._kill(sock, RunVerdict.time_limit, detail)

    def _read(self, sock: socket.socket) -> bool:
        """Read what is there; True at EOF."""
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            return True
        if not chunk:
            return True
        self.frames.feed(chunk)
        return False

    def _kill(self, sock: socket.socket, reason: RunVerdict, detail: str) -> None:
        """SIGKILL the container (its whole pid namespace), reading the socket until it has exited."""
        self.kill_reason, self.kill_detail = reason, detail
        failure: list[BaseException] = []

        def kill() -> None:
            try:
                self.api.kill(self.container)
            except docker.errors.APIError as exc:
                if exc.status_code not in (404, 409) and "is not running" not in str(exc):
                    failure.append(exc)
            except BaseException as exc:  # noqa: BLE001 - reported below; a thread must not die silently
                failure.append(exc)

        # The daemon finishes a container only once its output is copied out, so keep reading meanwhile.
        killer = threading.Thread(target=kill, daemon=True)
        killer.start()
        end = time.monotonic() + KILL_WAIT_S
        eof = False
        while not self.exited.is_set() and time.monotonic() < end:
            if eof:
                self.exited.wait(POLL_S)
            elif select.select([sock], [], [], POLL_S)[0]:
                eof = self._read(sock)
        killer.join(max(0.0, end - time.monotonic()))
        if failure:
            raise SandboxError(f"killing the container failed: {describe(failure[0])}")
        if not self.exited.is_set():
            raise SandboxError(f"the container did not stop within {KILL_WAIT_S:g} s of being killed")

    def _judge(self, state: dict[str, Any], wall: float) -> CommandResult:
        if state.get("Error"):
            raise SandboxError(f"docker could not run the command: {state['Error']}")
        code = (self.status or {}).get("StatusCode", state.get("ExitCode"))
        signum: int | None = None
        # docker reports a death by signal as 128 + the signal, as a shell does (so a program's own
        # exit(137) reads as SIGKILL too; docker gives no way to tell them apart).
        if isinstance(code, int) and 128 < code <= 128 + 64:
            signum, code = code - 128, None
        peak = self.meter.peak_memory_mb()
        outcome = Measurement(
            returncode=code if signum is None else -signum,
            stdout=self.stdout,
            stderr=self.stderr,
            log="",
            kill_reason=self.kill_reason,
            kill_detail=self.kill_detail,
            cpu_s=round(self.meter.cpu_s(), 4),
            wall_s=round(wall, 4),
            peak_memory_mb=None if peak is None else round(peak, 2),
            oom_kills=max(self.meter.oom_kills(), 1 if state.get("OOMKilled") else 0),
            pids_refused=self.pids_refused,
            # docker enforces memory and pids through cgroups whether or not we can read them from here.
            cgroup=True,
            storage_full=self.storage_full() if self.storage_full is not None else "",
        )
        return judge(
            self.command.name, outcome, self.limits, code, signum, oom_markers=self.command.oom_markers
        )


def _close_sending(sock: socket.socket) -> None:
    """Close our sending side: docker then closes the program's stdin (the container is stdin-once)."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_WR)
