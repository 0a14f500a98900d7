"""The pool's worker process: `python -m proctor.worker FD` scores items sent over the socket FD.

It receives one setup message ({sys_path, memory_mb, plugins}), answers ("ready", None) once its verifiers are loaded, then (verifier, (response, reference, options))
tuples, and answers each with ("verdict", Verdict), ("memory", message) or ("error", message).
"""

from __future__ import annotations

import contextlib
import signal
import sys
from multiprocessing.connection import Connection
from typing import Any

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this worker when its parent goes, so no orphan keeps computing."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the worker still exits on EOF from the socket
        pass


def cap_memory(memory_mb: int) -> None:
    """Cap this process's address space, so a runaway verifier fails with MemoryError instead of the host."""
    if memory_mb <= 0:
        return
    import resource

    limit = memory_mb * 1024 * 1024
    with contextlib.suppress(ValueError, OSError):
        # The soft limit only: a verifier that runs sandboxes (code) starts nsjail from here, and nsjail lifts
        # RLIMIT_AS for the jailed program (the JVM, Go and Node need that); a hard cap would make it fail.
        resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))


def serve(conn: Connection) -> None:
    """Score items from conn until it closes."""
    setup = conn.recv()
    sys.path[:] = list(dict.fromkeys([*setup["sys_path"], *sys.path]))
    from proctor.registry import get_verifier, load_verifiers

    load_verifiers(
        extra_plugins=setup.get("plugins", "")
    )  # before the memory cap: imports are the service's cost, not the item's
    cap_memory(setup["memory_mb"])
    conn.send(("ready", None))  # the parent starts an item's deadline only after this
    while True:
        try:
            name, (response, reference, options) = conn.recv()
        except (EOFError, OSError):
            return
        try:
            message: tuple[str, Any] = ("verdict", get_verifier(name).score(response, reference, options))
        except MemoryError:
            message = ("memory", f"worker exceeded its {setup['memory_mb']} MB memory cap")
        except Exception as exc:  # any verifier bug is reported, never turned into a reward
            message = ("error", f"{type(exc).__name__}: {exc}")
        try:
            conn.send(message)
        except (BrokenPipeError, OSError):
            return


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main() -> None:
    """Entry point: serve on the socket whose descriptor is argv[1]."""
    die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    # SIGTERM (a service manager stopping the whole group) exits through the interpreter, so exit handlers
    # give back what this worker's sandboxes hold on the host (directories, mounts, cgroups).
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    serve(Connection(int(sys.argv[1])))


if __name__ == "__main__":
    main()
