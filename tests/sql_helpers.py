"""Helpers shared by the SQL verifier's tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from proctor.settings import get_settings

REPO = Path(__file__).resolve().parent.parent
SOURCE = REPO / "datasets" / "sql" / "library" / "library.sqlite"


def library_databases(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private databases folder holding a copy of the library database (and a private cache), for a fixture
    to `yield from`: the settings are read afresh while it is in use and after."""
    folder = tmp_path / "dbs"
    (folder / "library").mkdir(parents=True)
    (folder / "library" / "library.sqlite").write_bytes(SOURCE.read_bytes())
    monkeypatch.setenv("PROCTOR_SQL_DATABASES", str(folder))
    monkeypatch.setenv("PROCTOR_SQL_CACHE_DIR", str(tmp_path / "cache"))
    get_settings.cache_clear()
    yield folder
    get_settings.cache_clear()
