"""Test-only verifier for `rescore --engine ray`: kills the process scoring it, once, to play a dying Ray worker."""

from __future__ import annotations

import os
import signal

from proctor.contract import Verdict
from proctor.registry import VerifierSpec, register_verifier


def _die_once(response: str, reference: str, options: object) -> Verdict:
    # `reference` names a marker file: the first item that creates it records this pid and kills this process
    # (inline, so the process is the Ray worker itself); once it exists, the item scores like any other.
    if response == "die":
        try:
            fd = os.open(reference, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return Verdict.right(pid=os.getpid())
        os.write(fd, str(os.getpid()).encode())
        os.fsync(fd)
        os.close(fd)
        os.kill(os.getpid(), signal.SIGKILL)
    return Verdict.right(pid=os.getpid()) if response == "ok" else Verdict.wrong("mismatch")


register_verifier(
    VerifierSpec(
        name="test.die_once",
        version="1",
        score=_die_once,
        reference=str,
        description="Test-only: SIGKILLs the process that scores it, the first time only (a marker file).",
        execution="inline",
    )
)
