"""Test-only verifiers that misbehave on purpose: they sleep, nap, spin, crash, raise or eat memory in the pool."""

from __future__ import annotations

import os
import time

from proctor.contract import Verdict
from proctor.registry import VerifierSpec, register_verifier


def _misbehave(response: str, reference: str, options: object) -> Verdict:
    if response == "sleep":
        time.sleep(60)
    elif response == "spin":
        while True:
            pass
    elif response == "crash":
        os._exit(3)
    elif response == "raise":
        raise ValueError("verifier bug")
    elif response == "memory":
        blob = bytearray(8 * 1024**3)  # beyond any worker cap used in tests
        return Verdict.right(size=len(blob))
    elif response == "pid":
        return Verdict.right(pid=os.getpid())
    elif (
        response == "nap"
    ):  # a short, countable piece of work: the fault tests kill workers in the middle of it
        log = os.environ.get("TEST_MISBEHAVE_RUN_LOG")
        if log:
            with open(log, "a") as runs:
                runs.write(f"{reference} {os.getpid()}\n")
        time.sleep(0.3)
        return Verdict.right(pid=os.getpid())
    return Verdict.right() if response == reference else Verdict.wrong("mismatch")


register_verifier(
    VerifierSpec(
        name="test.misbehave",
        version="1",
        score=_misbehave,
        reference=str,
        description="Test-only: sleeps, naps, spins, crashes, raises or allocates on request.",
        execution="pool",
        deadline_s=1.0,
    )
)
