"""Perturbed copies of a SQLite database, for the anti-coincidence check (`perturbations: K`).

Copy k of a database is built once, by trusted code here (no model text runs), from a seed derived from the
database's content hash and k, and stored under the cache folder as perturbed/<hash>/<k>.sqlite:
- integer primary keys are renumbered by a random permutation, and every foreign key that references them
  is rewritten the same way (so joins still join, but scan order and ids change); tables without one have
  their rows reinserted in random order;
- about a fifth of the rows of every table are removed, and rows whose foreign keys pointed at removed rows
  are removed too (repeated until nothing dangles);
- the values of non-key columns are shuffled among the rows of their table, half of the columns in odd copies
  and the other half in even ones (domains, types and NOT NULL stay, UNIQUE columns are left alone).
A query equivalent to the gold under the schema's constraints gives the gold's result on every copy; one that
matched by coincidence (a constant, a hard-coded id) rarely does.
"""

from __future__ import annotations

import os
import random
import sqlite3
import threading
from pathlib import Path

REMOVE_FRACTION = 0.2
_lock = threading.Lock()


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def perturbed_copy(source: Path, db_hash: str, k: int, folder: Path) -> Path:
    """The path of perturbed copy k of source, building it first if it is not there yet."""
    target = folder / db_hash / f"{k}.sqlite"
    if target.is_file():
        return target
    with _lock:
        if target.is_file():
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        target.parent.chmod(0o755)
        tmp = target.with_name(f".{k}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.unlink(missing_ok=True)
        src = sqlite3.connect(f"file:{source}?mode=ro&immutable=1", uri=True)
        dst = sqlite3.connect(tmp)
        try:
            src.backup(dst)
            perturb(dst, random.Random(f"{db_hash}:{k}"), k)
            dst.commit()
            dst.execute("VACUUM")
        finally:
            src.close()
            dst.close()
        tmp.chmod(0o644)
        tmp.replace(target)
    return target


def _tables(conn: sqlite3.Connection) -> list[str]:
    rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
    return [name for (name,) in rows]


def _columns(conn: sqlite3.Connection, table: str) -> list[tuple[str, str, int]]:
    """(name, declared type, primary-key position) of each column."""
    return [(row[1], row[2], row[5]) for row in conn.execute(f"PRAGMA table_info({_quote(table)})")]


def _foreign_keys(conn: sqlite3.Connection, table: str) -> list[tuple[str, str, str | None]]:
    """(column, referenced table, referenced column or None for its primary key) of each foreign key."""
    return [(row[3], row[2], row[4]) for row in conn.execute(f"PRAGMA foreign_key_list({_quote(table)})")]


def _unique_columns(conn: sqlite3.Connection, table: str) -> set[str]:
    unique = set()
    for index in conn.execute(f"PRAGMA index_list({_quote(table)})"):
        if index[2]:
            unique.update(row[2] for row in conn.execute(f"PRAGMA index_info({_quote(index[1])})"))
    return unique


def perturb(conn: sqlite3.Connection, rng: random.Random, k: int = 1) -> None:
    """Apply the three perturbations (see the module docstring) to an open, writable copy."""
    conn.execute("PRAGMA foreign_keys = OFF")
    tables = _tables(conn)
    info = {table: _columns(conn, table) for table in tables}
    fks = {table: _foreign_keys(conn, table) for table in tables}
    single_pk = {}
    for table in tables:
        pks = [(name, kind) for name, kind, pos in info[table] if pos]
        if len(pks) == 1 and "INT" in (pks[0][1] or "").upper():
            single_pk[table] = pks[0][0]
    _renumber(conn, tables, single_pk, fks, rng)
    _remove(conn, tables, single_pk, fks, rng)
    for table in tables:
        if table not in single_pk:
            _shuffle_rows(conn, table, rng)
    for table in tables:
        keys = {name for name, _, pos in info[table] if pos} | {col for col, _, _ in fks[table]}
        keys |= _unique_columns(conn, table)
        for index, (name, _, _) in enumerate(info[table]):
            # Alternate columns between copies, so any two consecutive copies shuffle every column once.
            if name not in keys and (index + k) % 2 == 0:
                _shuffle_column(conn, table, name, rng)


def _renumber(conn, tables, single_pk, fks, rng) -> None:
    for table, pk in single_pk.items():
        ids = [
            row[0]
            for row in conn.execute(
                f"SELECT {_quote(pk)} FROM {_quote(table)} WHERE {_quote(pk)} IS NOT NULL"
            )
        ]
        if not ids:
            continue
        # New ids from a wider range so the old and new sets overlap only by chance.
        fresh = rng.sample(range(1, max(ids) * 3 + 10), len(ids))
        mapping = dict(zip(ids, fresh, strict=True))
        conn.execute("CREATE TEMP TABLE map (old INTEGER PRIMARY KEY, new INTEGER)")
        conn.executemany("INSERT INTO map VALUES (?, ?)", mapping.items())
        # Through negative values first, so renumbering never collides with an id not yet moved.
        conn.execute(
            f"UPDATE {_quote(table)} SET {_quote(pk)} = -(SELECT new FROM map WHERE old = {_quote(pk)})"
        )
        conn.execute(f"UPDATE {_quote(table)} SET {_quote(pk)} = -{_quote(pk)}")
        for other in tables:
            for column, referenced, ref_column in fks[other]:
                if referenced == table and ref_column in (None, pk):
                    conn.execute(
                        f"UPDATE {_quote(other)} SET {_quote(column)} = "
                        f"coalesce((SELECT new FROM map WHERE old = {_quote(column)}), {_quote(column)})"
                    )
        conn.execute("DROP TABLE temp.map")


def _remove(conn, tables, single_pk, fks, rng) -> None:
    for table in tables:
        rowids = [row[0] for row in conn.execute(f"SELECT rowid FROM {_quote(table)}")]
        doomed = [rowid for rowid in rowids if rng.random() < REMOVE_FRACTION]
        conn.executemany(f"DELETE FROM {_quote(table)} WHERE rowid = ?", [(rowid,) for rowid in doomed])
    changed = True
    while changed:
        changed = False
        for table in tables:
            for column, referenced, ref_column in fks[table]:
                target = ref_column or single_pk.get(referenced)
                if target is None or referenced not in tables:
                    continue
                cursor = conn.execute(
                    f"DELETE FROM {_quote(table)} WHERE {_quote(column)} IS NOT NULL AND {_quote(column)} NOT IN "
                    f"(SELECT {_quote(target)} FROM {_quote(referenced)} WHERE {_quote(target)} IS NOT NULL)"
                )
                changed = changed or cursor.rowcount > 0


def _shuffle_rows(conn, table, rng) -> None:
    """Reinsert the rows of a table without an integer key in random order, so scan order changes."""
    conn.execute("SAVEPOINT shuffle_rows")
    try:
        rows = conn.execute(f"SELECT * FROM {_quote(table)}").fetchall()
        rng.shuffle(rows)
        conn.execute(f"DELETE FROM {_quote(table)}")
        if rows:
            marks = ", ".join("?" * len(rows[0]))
            conn.executemany(f"INSERT INTO {_quote(table)} VALUES ({marks})", rows)
    except sqlite3.Error:  # generated columns and the like: leave the table's order alone
        conn.execute("ROLLBACK TO shuffle_rows")
    conn.execute("RELEASE shuffle_rows")


def _shuffle_column(conn, table, column, rng) -> None:
    rows = conn.execute(f"SELECT rowid, {_quote(column)} FROM {_quote(table)}").fetchall()
    values = [value for _, value in rows]
    rng.shuffle(values)
    conn.executemany(
        f"UPDATE {_quote(table)} SET {_quote(column)} = ? WHERE rowid = ?",
        [(value, rowid) for (rowid, _), value in zip(rows, values, strict=True)],
    )
