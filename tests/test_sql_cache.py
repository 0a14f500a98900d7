"""Gold results are computed once and cached (memory and disk, keyed by content hash); perturbed copies are
built once under the cache folder, keep the schema's keys consistent, and differ from the original."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest

from proctor.registry import get_verifier
from proctor.settings import get_settings
from proctor.verifiers.sql import databases
from proctor.verifiers.sql.databases import content_hash, gold_cache

REPO = Path(__file__).resolve().parent.parent
SOURCE = REPO / "datasets" / "sql" / "library" / "library.sqlite"
GOLD = "SELECT genre, count(*) FROM book GROUP BY genre"


@pytest.fixture
def folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    dbs, cache = tmp_path / "dbs", tmp_path / "cache"
    (dbs / "library").mkdir(parents=True)
    (dbs / "library" / "library.sqlite").write_bytes(SOURCE.read_bytes())
    monkeypatch.setenv("PROCTOR_SQL_DATABASES", str(dbs))
    monkeypatch.setenv("PROCTOR_SQL_CACHE_DIR", str(cache))
    get_settings.cache_clear()
    yield dbs, cache
    get_settings.cache_clear()


def score(response: str, gold: str = GOLD, **options):
    spec = get_verifier("sql")
    reference = spec.parse_reference({"db_id": "library", "gold": gold})
    return spec.score(response, reference, spec.parse_options(options))


def test_gold_is_computed_once_then_served_from_memory_and_disk(folders):
    dbs, cache = folders
    gold_cache.clear_memory()
    misses = gold_cache.misses
    assert score(GOLD).reward == 1.0
    assert gold_cache.misses == misses + 1
    files = list((cache / "gold").glob("*.json"))
    assert len(files) == 1
    hits = gold_cache.hits
    assert score("SELECT genre, count(book_id) FROM book GROUP BY genre").reward == 1.0
    assert (gold_cache.misses, gold_cache.hits) == (misses + 1, hits + 1)
    gold_cache.clear_memory()  # a new process: the disk entry answers
    assert score(GOLD).reward == 1.0
    assert gold_cache.misses == misses + 1
    # The cache key follows the content: a changed database is a new entry, never a stale answer.
    conn = sqlite3.connect(dbs / "library" / "library.sqlite")
    conn.execute("DELETE FROM book WHERE genre = 'travel'")
    conn.commit()
    conn.close()
    assert score("SELECT 'travel', 10").reward == 0.0
    assert len(list((cache / "gold").glob("*.json"))) == 2
    assert not any(path.suffix == ".json" for path in dbs.rglob("*"))


def test_perturbed_copies_are_built_once_consistent_and_different(folders):
    dbs, cache = folders
    before = hashlib.sha256((dbs / "library" / "library.sqlite").read_bytes()).hexdigest()
    assert score(GOLD, perturbations=2).reward == 1.0
    db_hash = content_hash(dbs / "library" / "library.sqlite")
    copies = sorted((cache / "perturbed" / db_hash).glob("*.sqlite"))
    assert [path.name for path in copies] == ["1.sqlite", "2.sqlite"]
    stamps = [path.stat().st_mtime_ns for path in copies]
    assert score(GOLD, perturbations=2).reward == 1.0
    assert [path.stat().st_mtime_ns for path in copies] == stamps  # reused, not rebuilt
    original = sqlite3.connect(SOURCE)
    for path in copies:
        conn = sqlite3.connect(path)
        for table in ("book", "loan", "member"):
            (count,) = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
            (full,) = original.execute(f"SELECT count(*) FROM {table}").fetchone()
            assert 0 < count < full, table
        # Foreign keys still resolve after renumbering and removal.
        assert conn.execute(
            "SELECT count(*) FROM loan WHERE member_id NOT IN (SELECT member_id FROM member)"
        ).fetchone() == (0,)
        assert conn.execute(
            "SELECT count(*) FROM copy WHERE book_id NOT IN (SELECT book_id FROM book)"
        ).fetchone() == (0,)
        ids = [row[0] for row in conn.execute("SELECT book_id FROM book ORDER BY book_id LIMIT 20")]
        assert ids != list(range(1, 21))
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        conn.close()
    original.close()
    assert hashlib.sha256((dbs / "library" / "library.sqlite").read_bytes()).hexdigest() == before
    assert databases.cache_root() == cache.resolve()


def test_concurrent_scoring_from_threads_uses_several_workers(folders):
    from concurrent.futures import ThreadPoolExecutor

    queries = [
        ("SELECT genre, count(book_id) FROM book GROUP BY genre", 1.0),
        ("SELECT genre FROM book", 0.0),
    ] * 20
    with ThreadPoolExecutor(max_workers=4) as pool:
        rewards = list(pool.map(lambda item: score(item[0]).reward, queries))
    assert rewards == [expect for _, expect in queries]
