"""Bounded storage for sandboxed jobs: one size- and inode-limited tmpfs per sandbox, mounted on the host.

Why. Job and slot directories live under /dev/shm (runner.work_base), one filesystem shared with the whole
host: without a bound of its own, one job could fill its bytes or its inodes (250,000 files take 3 CPU
seconds) for every process on the machine. A tmpfs mounted at the sandbox's directory with `size=` and
`nr_inodes=` gives each sandbox its own budget (PROCTOR_SANDBOX_MAX_DISK_MB, PROCTOR_SANDBOX_MAX_FILES); a
program that passes it gets ENOSPC, and the sandbox, finding the filesystem full after the run, makes that the
program's verdict `output_limit`. Its pages are still charged to the writer's memory cgroup.

Mounting needs CAP_SYS_ADMIN in the host's mount namespace (the service runs as root for nsjail and cgroups
anyway); where it is refused, `Storage.usable()` says why and the backend logs a warning and runs unbounded.
Mounts left by a process that died are detached by `release_path` when its directories are swept.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import logging
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

MNT_DETACH = 2
MS_NOSUID = 2
MS_NODEV = 4
# Inodes a sandbox's tmpfs needs besides the job's own files: its root, box/ and tmp/.
OWN_INODES = 3

_libc: ctypes.CDLL | None = None


def _c() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    return _libc


def mount_tmpfs(
    path: Path, size_mb: int, inodes: int, owner: tuple[int, int] | None, mode: int = 0o700
) -> None:
    """Mount a tmpfs of `size_mb` MiB and `inodes` inodes at `path` (nosuid, nodev); OSError when refused."""
    options = f"size={size_mb}m,nr_inodes={inodes},mode={mode:o}"
    if owner is not None:
        options += f",uid={owner[0]},gid={owner[1]}"
    if _c().mount(b"tmpfs", os.fsencode(path), b"tmpfs", MS_NOSUID | MS_NODEV, options.encode()) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"mounting a tmpfs at {path}: {os.strerror(code)}")


def unmount(path: Path) -> bool:
    """Detach the mount at `path` (lazily: a process still inside cannot keep it); False if none was there."""
    if _c().umount2(os.fsencode(path), MNT_DETACH) == 0:
        return True
    code = ctypes.get_errno()
    if code not in (errno.EINVAL, errno.ENOENT):
        log.warning("could not unmount %s: %s", path, os.strerror(code))
    return False


def mounts_under(path: Path) -> list[Path]:
    """Mount points at or below `path` in this mount namespace, deepest first."""
    prefix = str(path).rstrip("/")
    found = []
    try:
        with open("/proc/self/mountinfo") as handle:
            for line in handle:
                point = line.split()[4].replace("\\040", " ")
                if point == prefix or point.startswith(prefix + "/"):
                    found.append(Path(point))
    except OSError:
        return []
    return sorted(found, key=lambda p: len(str(p)), reverse=True)


def release_path(path: Path) -> None:
    """Detach every mount at or below `path`, then delete it (a directory tree or a file)."""
    for point in mounts_under(path):
        unmount(point)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink()


def full(path: Path) -> str:
    """Why the filesystem at `path` is full ("" when it is not): no byte or no inode left."""
    try:
        stats = os.statvfs(path)
    except OSError:
        return ""
    if stats.f_bavail == 0:
        return "bytes"
    if stats.f_favail == 0:
        return "files"
    return ""


class StorageFull(Exception):
    """The job's files do not fit its storage: the program's verdict is output_limit."""


@dataclass(frozen=True)
class Storage:
    """The per-sandbox budget: MiB of file data and number of files (directories and links count as files)."""

    disk_mb: int
    files: int

    @property
    def inodes(self) -> int:
        """nr_inodes for a sandbox's tmpfs."""
        return self.files + OWN_INODES

    def describe(self, what: str) -> str:
        """The output_limit detail for a full filesystem (`what`: "bytes" or "files")."""
        if what == "files":
            return f"the job's files passed the sandbox's limit of {self.files} files"
        return f"the job's files passed the sandbox's limit of {self.disk_mb} MB"

    def mount(self, path: Path, owner: tuple[int, int] | None, mode: int = 0o700) -> None:
        """Mount this budget's tmpfs at `path`."""
        mount_tmpfs(path, self.disk_mb, self.inodes, owner, mode)

    def usable(self) -> tuple[bool, str]:
        """Whether this process may mount a tmpfs (checked by mounting and unmounting one)."""
        probe = Path(tempfile.mkdtemp(prefix="proctor-mount-probe-"))
        try:
            mount_tmpfs(probe, 1, 16, None)
        except OSError as exc:
            return False, f"cannot mount a tmpfs: {exc.strerror or exc}"
        finally:
            unmount(probe)
            with contextlib.suppress(OSError):
                probe.rmdir()
        return True, f"{self.disk_mb} MB and {self.files} files per sandbox (tmpfs)"


def copy_tree(source: Path, target: Path) -> None:
    """Copy the entries of `source` into `target` as they are (links stay links, hard links and holes are
    kept, owners and modes too), with `cp -a`; StorageFull when the target's filesystem fills up.

    Used where source and target are different filesystems (a sandbox's tmpfs and the job's directory), so
    rename cannot move them; cp handles what a program may leave there (deep trees, FIFOs, sparse files).
    """
    if not any(os.scandir(source)):
        return
    done = subprocess.run(
        ["cp", "-a", "--sparse=always", "--", f"{source}/.", f"{target}/"],
        capture_output=True,
        env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"},
        check=False,
    )
    if done.returncode != 0:
        message = done.stderr.decode(errors="replace").strip()
        if "No space left on device" in message or "Disk quota exceeded" in message:
            raise StorageFull(message.splitlines()[-1][:500])
        raise OSError(f"copying the job's files failed: {message[:1000]}")


def clear(directory: Path) -> None:
    """Delete every entry of `directory` (never following links)."""
    for entry in os.scandir(directory):
        path = Path(entry.path)
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                path.unlink()
