"""Where databases, gold caches and perturbed copies live, and how a query runs against one of them.

The database folder (PROCTOR_SQL_DATABASES, else the bundled datasets/sql) is only ever read. Everything
Proctor writes (gold results, perturbed copies) goes under the cache folder (PROCTOR_SQL_CACHE_DIR, else
~/.cache/proctor/sql), which must not be the database folder or inside it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proctor.cache import LRUCache
from proctor.io import dataset_roots
from proctor.settings import get_settings
from proctor.verifiers.sql.compare import GoldResult, Result, decode_row
from proctor.verifiers.sql.workers import Mounts, WallClockOverrun, WorkerError, shared_pool

DB_ID = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
MEMORY_CACHE = 1024


class ConfigError(Exception):
    """The SQL settings are unusable (cache inside the database folder, bad JSON): a machinery failure."""


@dataclass
class Failure:
    """A query that did not produce a result: code (runtime_error, time_limit, too_large...) and message."""

    code: str
    message: str


def database_root() -> Path:
    """The configured database folder (resolved)."""
    configured = get_settings().sql_databases
    if configured:
        return Path(configured).expanduser().resolve()
    roots = [root / "sql" for root in dataset_roots()]
    return next(
        (root for root in roots if root.is_dir()), roots[0] if roots else Path("datasets/sql")
    ).resolve()


def cache_root() -> Path:
    """The configured cache folder, created on first use; refuses to live inside the database folder."""
    configured = get_settings().sql_cache_dir
    if configured:
        root = Path(configured).expanduser()
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        root = base / "proctor" / "sql"
    root = root.resolve()
    databases = database_root()
    if root == databases or databases in root.parents:
        raise ConfigError(f"PROCTOR_SQL_CACHE_DIR {root} is inside the database folder {databases}")
    for sub in ("gold", "perturbed"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    return root


def database_path(db_id: str) -> Path | None:
    """The SQLite file of db_id in Spider layout, or None when there is none."""
    if not DB_ID.match(db_id) or db_id in (".", ".."):
        return None
    path = database_root() / db_id / f"{db_id}.sqlite"
    return path if path.is_file() else None


def suite_databases(db_id: str) -> list[Path]:
    """The other SQLite files in db_id's folder (Spider test-suite layout: '.sqlite' in the name), sorted."""
    main = database_path(db_id)
    if main is None:
        return []
    return sorted(p for p in main.parent.iterdir() if ".sqlite" in p.name and p.is_file() and p != main)


def known_databases() -> list[str]:
    """db_ids present in the database folder."""
    root = database_root()
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / f"{p.name}.sqlite").is_file())


_hashes: dict[tuple[str, int, int], str] = {}
_hash_lock = threading.Lock()


def content_hash(path: Path) -> str:
    """sha256 of a database file, memoized by (path, size, mtime)."""
    info = path.stat()
    key = (str(path), info.st_size, info.st_mtime_ns)
    with _hash_lock:
        found = _hashes.get(key)
    if found is None:
        digest = hashlib.sha256()
        with path.open("rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
        found = digest.hexdigest()
        with _hash_lock:
            _hashes[key] = found
    return found


def stage_root() -> Path:
    """The folder the jailed workers see (read-only at /mnt/0): links to, or copies of, the database files.

    The jail runs as an unprivileged uid that cannot walk into folders such as /root or pytest's private
    temporary folders, so each database file is exposed here, under the system temp folder, by a hard link
    (same file system and world-readable) or else a read-only copy, named by its content hash.
    """
    root = Path(tempfile.gettempdir()) / f"proctor-sql-stage-{os.getuid()}"
    root.mkdir(mode=0o711, exist_ok=True)
    info = root.stat()
    if info.st_uid != os.getuid() or info.st_mode & 0o022:
        raise ConfigError(f"{root} is not a private folder of this user; remove it")
    root.chmod(0o711)
    return root


_staged: dict[tuple[str, str], Path] = {}
_stage_lock = threading.Lock()


def staged(path: Path, name: str) -> Path:
    """The stage folder's entry for a database file (created on first use): name must be content-addressed."""
    key = (str(path), name)
    with _stage_lock:
        found = _staged.get(key)
    if found is not None and found.is_file():
        return found
    target = stage_root() / name
    if not target.is_file():
        tmp = target.with_name(f".{name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.unlink(missing_ok=True)
        try:
            if not path.stat().st_mode & stat.S_IROTH:
                raise OSError("not world-readable: copy it")
            os.link(path, tmp)
        except OSError:
            shutil.copyfile(path, tmp)
            tmp.chmod(0o444)
        tmp.replace(target)
    with _stage_lock:
        _staged[key] = target
    return target


def run_sqlite(
    path: Path, sql: str, timeout_s: float, max_rows: int, max_bytes: int, max_cells: int = 4_000_000
) -> Result | Failure:
    """Run one query on a staged SQLite file in a sandboxed worker; raises WorkerError when the sandbox fails."""
    mounts = Mounts((str(stage_root()),))
    backend = "local" if get_settings().sandbox_backend == "local" else "nsjail"
    reply = shared_pool().run(
        mounts,
        backend,
        path,
        {
            "sql": sql,
            "timeout_s": timeout_s,
            "max_rows": max_rows,
            "max_bytes": max_bytes,
            "max_cells": max_cells,
        },
    )
    if reply.get("ok"):
        return Result(list(reply["columns"]), [decode_row(row) for row in reply["rows"]])
    if reply.get("error") in ("open_error", "bad_request"):
        raise WorkerError(reply.get("message", "worker could not open the database"))
    if reply.get("error") == "wall_limit":  # the machine, not the query: a timeout, never a time_limit
        raise WallClockOverrun(str(reply.get("message", "the query passed the wall-clock backstop")))
    return Failure(str(reply.get("error")), str(reply.get("message", "")))


class GoldCache:
    """Gold results by (database content hash, gold query, comparator shape): in memory and on disk."""

    def __init__(self) -> None:
        self.memory: LRUCache[GoldResult] = LRUCache(MEMORY_CACHE)
        self.lock = threading.Lock()  # guards the counters
        self.hits = 0
        self.misses = 0

    @staticmethod
    def key(db_hash: str, gold: str, variant: str) -> str:
        """The cache key of one gold result."""
        return hashlib.sha256(json.dumps([db_hash, gold, variant]).encode()).hexdigest()

    def get(self, key: str) -> GoldResult | None:
        """A cached gold result, from memory or disk."""
        found = self.memory.get(key)
        if found is None:
            path = cache_root() / "gold" / f"{key}.json"
            try:
                found = GoldResult.from_json(json.loads(path.read_text()))
            except (OSError, ValueError, KeyError, TypeError):
                self._count(hit=False)
                return None
            self.memory.put(key, found)
        self._count(hit=True)
        return found

    def put(self, key: str, gold: GoldResult, persist: bool = True) -> None:
        """Store a gold result in memory and, when persist (immutable SQLite files), atomically on disk."""
        self.memory.put(key, gold)
        if not persist:
            return
        folder = cache_root() / "gold"
        tmp = folder / f".{key}.{os.getpid()}.{threading.get_ident()}.tmp"
        try:
            tmp.write_text(json.dumps(gold.to_json()))
            tmp.replace(folder / f"{key}.json")
        except (OSError, TypeError, ValueError):
            tmp.unlink(missing_ok=True)  # a value JSON cannot hold: memory only

    def _count(self, hit: bool) -> None:
        with self.lock:
            if hit:
                self.hits += 1
            else:
                self.misses += 1

    def clear_memory(self) -> None:
        """Forget the in-memory entries (the disk cache stays)."""
        self.memory.clear()


gold_cache = GoldCache()


def postgres_dsns() -> dict[str, str]:
    """PROCTOR_SQL_POSTGRES parsed: dsn_name -> connection string."""
    raw = get_settings().sql_postgres.strip()
    if not raw:
        return {}
    try:
        parsed: Any = json.loads(raw)
    except ValueError as exc:
        raise ConfigError(f"PROCTOR_SQL_POSTGRES is not JSON: {exc}") from None
    if not isinstance(parsed, dict) or not all(isinstance(v, str) for v in parsed.values()):
        raise ConfigError('PROCTOR_SQL_POSTGRES must be a JSON object {"name": "postgresql://..."}')
    return parsed
