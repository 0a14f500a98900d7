"""Database files of `tool.sql_explore`: each session's own copy, and the derived copies scoring replays on.

- A session copy: the database file copied, read-only (mode 0444), into the folder the sql verifier's jailed
  workers see (`databases.stage_root`), under a random name; `close` deletes it. The worker opens every file
  `mode=ro&immutable=1` with an authorizer that allows only reading, so the copy is never written either; it
  exists so that nothing a session does can reach the bundled file. A database larger than
  SESSION_COPY_MAX_BYTES is not copied: the session reads the verifier's own content-addressed read-only stage
  of it (the same guards apply). Copies share a byte budget per process (SESSION_COPIES_MAX_BYTES): past it,
  a session reads the shared stage too, so a client opening thousands of sessions cannot fill the disk. Each
  call touches its copy; a copy unused for STALE_COPY_S (longer than any session's idle time-to-live) was left
  by a process that died, and the next session copy sweeps it.
- Derived copies (built once per database content by trusted code here, no model text runs, cached under the
  sql cache folder): a query that only matched because the model pasted values it read in an observation
  (`SELECT 8`, `SELECT max(age) + 89 - max(age) FROM member`) is a constant of the original data; on these
  copies the gold's result moves and the constant does not. `scaled`: every numeric non-key column v becomes
  2v + 1 (monotone, so orderings, groups and thresholds in text stay meaningful, but every sum, extreme and
  average moves). `doubled`: every table gets a renamed duplicate of its rows (keys and numbers moved past
  their column's range, dates moved on DATE_SHIFT_YEARS years, other text suffixed, foreign keys moved with
  the keys they reference), so counts, distinct counts, extremes and listed values change while every key,
  uniqueness and foreign-key constraint still holds and no new ties appear. A column (or table) whose CHECK
  constraint refuses the new values is left as it was; the copies drop the database's triggers, which reading
  never needs and which would abort or widen these writes. `thinned`: in every table, the rows holding one value
  (chosen by a seed from the content hash) of each low-cardinality text column are removed, then the rows whose
  foreign keys dangle, so distinct counts fall by one and counts by amounts no rule predicts. Without it a
  constant that asks which copy it runs on (`CASE WHEN (SELECT count(*) FROM book) > 120 THEN 14 ELSE 7 END`)
  was paid for a distinct count, which the perturbed copies keep and `doubled` exactly doubles.
"""

from __future__ import annotations

import contextlib
import os
import random
import secrets
import shutil
import sqlite3
import threading
import time
from pathlib import Path

from proctor.verifiers.sql.databases import ConfigError, cache_root, content_hash, stage_root, staged

SESSION_COPY_MAX_BYTES = 8 * 1024 * 1024
SESSION_COPIES_MAX_BYTES = 512 * 1024 * 1024
"""Bytes of all live session copies of this process; past it sessions read the shared read-only stage."""
STALE_COPY_S = 2 * 86_400.0
"""A session copy unused this long (twice the longest idle time-to-live of a session) belongs to no session."""
SWEEP_EVERY_S = 600.0
DERIVED_VERSION = "3"
DERIVED = ("scaled", "doubled", "thinned")
_lock = threading.Lock()
_budget_lock = threading.Lock()
_copied_bytes = 0
_copy_sizes: dict[Path, int] = {}
_last_sweep = 0.0


def session_copy(source: Path) -> tuple[Path, bool]:
    """A read-only file for one session to query: (path, whether it is the session's own copy to delete)."""
    global _copied_bytes
    _sweep_stale()
    size = source.stat().st_size
    with _budget_lock:
        fits = size <= SESSION_COPY_MAX_BYTES and _copied_bytes + size <= SESSION_COPIES_MAX_BYTES
        if fits:
            _copied_bytes += size
    if not fits:
        return staged(source, f"{content_hash(source)}-0.sqlite"), False
    target = stage_root() / f"sqlx-{secrets.token_hex(16)}.sqlite"
    tmp = target.with_name(f".{target.name}.tmp")
    try:
        shutil.copyfile(source, tmp)
        tmp.chmod(0o444)
        tmp.replace(target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        with _budget_lock:
            _copied_bytes -= size
        raise
    with _budget_lock:
        _copy_sizes[target] = size
    return target, True


def release_copy(path: Path) -> None:
    """Delete a session's own copy and give its bytes back to the budget (idempotent, never raises)."""
    global _copied_bytes
    with _budget_lock:
        _copied_bytes -= _copy_sizes.pop(path, 0)
    with contextlib.suppress(OSError):
        path.unlink(missing_ok=True)


def touch_copy(path: Path) -> None:
    """Mark a session's copy as in use, so the stale sweep leaves it alone."""
    with contextlib.suppress(OSError):
        os.utime(path)


def _sweep_stale() -> None:
    """Delete session copies nobody used for STALE_COPY_S: left behind by a process that died (at most once
    per SWEEP_EVERY_S)."""
    global _last_sweep
    now = time.time()
    with _budget_lock:
        if now - _last_sweep < SWEEP_EVERY_S:
            return
        _last_sweep = now
    with contextlib.suppress(OSError, ConfigError):
        for path in stage_root().glob("sqlx-*.sqlite"):
            with contextlib.suppress(OSError):
                if now - path.stat().st_mtime > STALE_COPY_S:
                    path.unlink()


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _tables(conn: sqlite3.Connection) -> list[str]:
    rows = conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name"
    )
    return [row[0] for row in rows]


def _key_columns(conn: sqlite3.Connection, table: str) -> set[str]:
    """Primary-key and unique columns of table, and the columns other tables' foreign keys point at."""
    keys = {row[1] for row in conn.execute(f"PRAGMA table_info({_quote(table)})") if row[5]}
    for index in conn.execute(f"PRAGMA index_list({_quote(table)})").fetchall():
        if index[2]:  # unique
            keys |= {row[2] for row in conn.execute(f"PRAGMA index_info({_quote(index[1])})") if row[2]}
    for other in _tables(conn):
        for fk in conn.execute(f"PRAGMA foreign_key_list({_quote(other)})"):
            if fk[2] == table and fk[4]:  # None: it references the primary key, already a key
                keys.add(fk[4])
    return keys


def _foreign_columns(conn: sqlite3.Connection, table: str) -> set[str]:
    """The columns of table that are foreign keys."""
    return {row[3] for row in conn.execute(f"PRAGMA foreign_key_list({_quote(table)})")}


def _columns(conn: sqlite3.Connection, table: str) -> list[tuple[str, str]]:
    return [(row[1], (row[2] or "").upper()) for row in conn.execute(f"PRAGMA table_info({_quote(table)})")]


def _try(conn: sqlite3.Connection, statements: list[tuple[str, tuple]]) -> None:
    """Run the statements as one savepoint; a constraint that refuses them leaves the column as it was."""
    conn.execute("SAVEPOINT col")
    try:
        for sql, args in statements:
            conn.execute(sql, args)
    except sqlite3.DatabaseError:
        conn.execute("ROLLBACK TO col")
    conn.execute("RELEASE col")


def scale(conn: sqlite3.Connection) -> None:
    """Every numeric value of a non-key column v becomes 2v + 1."""
    for table in _tables(conn):
        keys = _key_columns(conn, table) | _foreign_columns(conn, table)
        for name, declared in _columns(conn, table):
            if name in keys or not any(t in declared for t in ("INT", "REAL", "FLOA", "DOUB", "NUM", "DEC")):
                continue
            column = _quote(name)
            sql = (
                f"UPDATE {_quote(table)} SET {column} = {column} * 2 + 1 "
                f"WHERE typeof({column}) IN ('integer', 'real')"
            )
            _try(conn, [(sql, ())])


DUPLICATE_SUFFIX = "#2"
DATE_SHIFT_YEARS = 1000


def _parent_of(conn: sqlite3.Connection, table: str) -> dict[str, tuple[str, str]]:
    """Foreign-key columns of table -> (parent table, parent column; the parent's primary key when unnamed)."""
    found = {}
    for fk in conn.execute(f"PRAGMA foreign_key_list({_quote(table)})"):
        parent, column = fk[2], fk[4]
        if not column:
            pks = [row[1] for row in conn.execute(f"PRAGMA table_info({_quote(parent)})") if row[5]]
            column = pks[0] if pks else "rowid"
        found[fk[3]] = (parent, column)
    return found


def _offset(conn: sqlite3.Connection, table: str, column: str) -> int:
    """max - min + 1 of a column's numbers (1 without any): adding it moves every number past the old range."""
    low, high = conn.execute(
        f"SELECT min({_quote(column)}), max({_quote(column)}) FROM {_quote(table)} "
        f"WHERE typeof({_quote(column)}) IN ('integer', 'real')"
    ).fetchone()
    return 1 if low is None else int(high - low) + 1


def _shifted(column: str, offset: int) -> str:
    """SQL for a value of the duplicated half: numbers moved past the column's range, dates moved
    DATE_SHIFT_YEARS years on, other text suffixed, NULL and blobs kept."""
    c = _quote(column)
    return (
        f"CASE WHEN typeof({c}) IN ('integer', 'real') THEN {c} + {offset} "
        f"WHEN typeof({c}) = 'text' AND {c} GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]*' "
        f"THEN (CAST(substr({c}, 1, 4) AS INTEGER) + {DATE_SHIFT_YEARS}) || substr({c}, 5) "
        f"WHEN typeof({c}) = 'text' THEN {c} || '{DUPLICATE_SUFFIX}' ELSE {c} END"
    )


def double(conn: sqlite3.Connection) -> None:
    """Add to every table a renamed duplicate of its rows: keys and numbers moved past their ranges, dates
    moved on, text suffixed, and each foreign key moved as the column it references, so the new half joins
    within itself. Counts, distinct counts, sums, extremes and listed values all change; a constant does not."""
    tables = _tables(conn)
    offsets = {(t, name): _offset(conn, t, name) for t in tables for name, _ in _columns(conn, t)}
    for table in tables:
        parents = _parent_of(conn, table)
        names = [name for name, _ in _columns(conn, table)]
        values = []
        for name in names:
            parent = parents.get(name)
            offset = offsets.get(parent, 1) if parent is not None else offsets[(table, name)]
            values.append(_shifted(name, offset))
        columns = ", ".join(_quote(name) for name in names)
        sql = f"INSERT INTO {_quote(table)} ({columns}) SELECT {', '.join(values)} FROM {_quote(table)}"
        _try(conn, [(sql, ())])


def thin(conn: sqlite3.Connection, rng: random.Random) -> None:
    """Remove, in every table, the rows holding one value (rng's choice) of each low-cardinality text column
    (2 to max(2, rows / 4) distinct texts, keys and foreign keys aside), then every row whose foreign key
    points at a removed row, until nothing dangles."""
    for table in _tables(conn):
        keys = _key_columns(conn, table) | _foreign_columns(conn, table)
        for name, _ in _columns(conn, table):
            if name in keys:
                continue
            column, quoted_table = _quote(name), _quote(table)
            (rows,) = conn.execute(f"SELECT count(*) FROM {quoted_table}").fetchone()
            values = [
                row[0]
                for row in conn.execute(
                    f"SELECT DISTINCT {column} FROM {quoted_table} WHERE typeof({column}) = 'text' "
                    f"ORDER BY {column}"
                )
            ]
            if 2 <= len(values) <= max(2, rows // 4):
                conn.execute(f"DELETE FROM {quoted_table} WHERE {column} = ?", (rng.choice(values),))
    while True:
        removed = 0
        for table in _tables(conn):
            for name, (parent, column) in _parent_of(conn, table).items():
                removed += conn.execute(
                    f"DELETE FROM {_quote(table)} WHERE {_quote(name)} IS NOT NULL AND {_quote(name)} NOT IN "
                    f"(SELECT {_quote(column)} FROM {_quote(parent)} WHERE {_quote(column)} IS NOT NULL)"
                ).rowcount
        if not removed:
            return


def derived_copies(source: Path, names: tuple[str, ...] = ("scaled", "doubled")) -> list[Path]:
    """The derived copies of a database named (of DERIVED; built on first use, then read from the cache
    folder). Grading uses all of DERIVED."""
    db_hash = content_hash(source)
    folder = cache_root() / "sql_explore" / f"{DERIVED_VERSION}-{db_hash}"
    paths = [folder / f"{name}.sqlite" for name in names]
    if all(path.is_file() for path in paths):
        return paths
    with _lock:
        folder.mkdir(parents=True, exist_ok=True)
        folder.chmod(0o755)
        for name, path in zip(names, paths, strict=True):
            if path.is_file():
                continue
            tmp = path.with_name(f".{name}.{os.getpid()}.{threading.get_ident()}.tmp")
            tmp.unlink(missing_ok=True)
            src = sqlite3.connect(f"file:{source}?mode=ro&immutable=1", uri=True)
            dst = sqlite3.connect(tmp, isolation_level=None)
            try:
                src.backup(dst)
                dst.execute("PRAGMA foreign_keys = OFF")
                # Reading needs no trigger, and one would abort or widen the copy's own writes.
                for (trigger,) in dst.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'trigger'"
                ).fetchall():
                    dst.execute(f"DROP TRIGGER {_quote(trigger)}")
                dst.execute("BEGIN")
                if name == "scaled":
                    scale(dst)
                elif name == "doubled":
                    double(dst)
                else:
                    thin(dst, random.Random(f"{db_hash}:{name}"))
                dst.execute("COMMIT")
                dst.execute("VACUUM")
            finally:
                src.close()
                dst.close()
            tmp.chmod(0o644)
            tmp.replace(path)
    return paths
