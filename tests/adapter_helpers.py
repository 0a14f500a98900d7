"""Helpers shared by the trainer adapters' tests."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import proctor.engine
from proctor.engine import Engine
from proctor.settings import Settings

REPO = str(Path(__file__).resolve().parents[1])


def misbehaving_engine() -> Iterator[Engine]:
    """A fresh process-wide engine whose pool workers know test.misbehave, for a fixture to `yield from`."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PROCTOR_PLUGINS", "tests.plugins.slow")
        if REPO not in sys.path:
            patch.syspath_prepend(REPO)
        import tests.plugins.slow  # noqa: F401  registers test.misbehave in this process

        engine = Engine(Settings(pool_workers=2, pool_memory_mb=1024))
        patch.setattr(proctor.engine, "_default_engine", engine)
        yield engine
        engine.close()
