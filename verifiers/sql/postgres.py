"""Run a query on a configured PostgreSQL connection: read-only transaction, statement_timeout, capped fetching.

Connections come from PROCTOR_SQL_POSTGRES (name -> DSN) and should use a role that can only read. Each query
runs in its own READ ONLY transaction, through a server-side cursor (DECLARE ... CURSOR FOR accepts only a
query, and one), with `statement_timeout` set for that transaction, and is rolled back afterwards; rows are
fetched in chunks up to the row and byte caps. One connection per name per process, reopened after an error.

Time limit: `statement_timeout` is wall-clock time measured by the server, not CPU time as for SQLite, code
and Verilog. PostgreSQL has no per-statement CPU limit, and the backend process's CPU time is not visible to
a client with a read-only role, so on a busy server a query can get a time_limit it would not get on an idle
one. Give the PostgreSQL references a server that is not oversubscribed, or a generous `timeout_s`.
"""

from __future__ import annotations

import contextlib
import datetime
import decimal
import json
import threading
import uuid
from typing import Any

from proctor.verifiers.sql.compare import Result
from proctor.verifiers.sql.databases import Failure
from proctor.verifiers.sql.workers import WorkerError

FETCH_CHUNK = 1000  # rows per FETCH at most
FIRST_CHUNK = 16  # rows of the first FETCH; later ones are sized by the budget left and the widest row seen
CONNECT_TIMEOUT_S = 5

_connections: dict[str, Any] = {}
_locks: dict[str, threading.Lock] = {}
_guard = threading.Lock()


def plain(value: Any) -> Any:
    """A PostgreSQL value as a plain value comparable with SQLite's: numerics as float, dates as ISO text."""
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return value
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, memoryview):
        return bytes(value)
    if isinstance(value, (datetime.date, datetime.time, datetime.datetime)):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, default=str)
    return str(value)


def _connection(name: str, dsn: str) -> Any:
    import psycopg

    conn = _connections.get(name)
    if conn is None or conn.closed:
        try:
            conn = psycopg.connect(dsn, connect_timeout=CONNECT_TIMEOUT_S, autocommit=False)
        except psycopg.Error as exc:
            raise WorkerError(f"cannot connect to PostgreSQL {name!r}: {str(exc).strip()[:300]}") from None
        conn.read_only = True
        _connections[name] = conn
    return conn


def value_bytes(value: Any) -> int:
    """A converted value's size as the SQLite worker counts it: its JSON encoding, roughly (text in UTF-8,
    blobs in hex as the gold cache stores them, numbers and NULL as 8 bytes plus the separator)."""
    if isinstance(value, str):
        return len(value.encode("utf-8", "replace")) + 3
    if isinstance(value, bytes):
        return 2 * len(value) + 10
    return 8


def run_postgres(
    name: str,
    dsn: str,
    sql: str,
    timeout_s: float,
    max_rows: int,
    max_bytes: int,
    max_cells: int = 4_000_000,
) -> Result | Failure:
    """Run one query on the named server; raises WorkerError when the server cannot be reached.

    Rows come through a server-side cursor in FETCHes sized by what is left of the byte budget and the
    widest row seen so far (FIRST_CHUNK rows first, FETCH_CHUNK at most), so the rows held here pass the byte
    cap by at most one FETCH of rows as wide as those already seen; each FETCH is a statement, bounded by
    statement_timeout."""
    import psycopg
    from psycopg import errors

    with _guard:
        lock = _locks.setdefault(name, threading.Lock())
    with lock:
        conn = _connection(name, dsn)
        try:
            with conn.transaction():
                conn.execute("SET TRANSACTION READ ONLY")
                conn.execute(f"SET LOCAL statement_timeout = {max(1, int(timeout_s * 1000))}")
                conn.execute("SET LOCAL idle_in_transaction_session_timeout = 60000")
                with conn.cursor(name="proctor_query") as cursor:
                    cursor.execute(sql.rstrip().rstrip(";"))
                    columns = [column.name for column in cursor.description or []]
                    rows: list[tuple] = []
                    size = sum(len(column.encode("utf-8", "replace")) + 3 for column in columns)
                    cells, width, widest, chunk_rows = 0, max(1, len(columns)), 1, FIRST_CHUNK
                    while True:
                        chunk = cursor.fetchmany(chunk_rows)
                        if not chunk:
                            break
                        for row in chunk:
                            converted = tuple(plain(value) for value in row)
                            row_bytes = sum(value_bytes(v) for v in converted) + 3
                            widest = max(widest, row_bytes)
                            size += row_bytes
                            cells += width
                            rows.append(converted)
                            if size > max_bytes:
                                raise _Stop(f"more than {max_bytes} bytes of results (JSON-encoded)")
                            if len(rows) > max_rows:
                                raise _Stop(f"more than {max_rows} rows")
                            if cells > max_cells:
                                raise _Stop(f"more than {max_cells} result cells (rows x columns)")
                        chunk_rows = max(1, min(FETCH_CHUNK, (max_bytes - size) // widest + 1))
                raise _Done(Result(columns, rows))
        except _Done as done:
            return done.result
        except _Stop as exc:
            return Failure("too_large", str(exc))
        except errors.QueryCanceled:
            return Failure("time_limit", f"statement_timeout of {timeout_s} s")
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            with contextlib.suppress(Exception):
                conn.close()
            _connections.pop(name, None)
            raise WorkerError(f"PostgreSQL {name!r} failed: {str(exc).strip()[:300]}") from None
        except psycopg.Error as exc:
            return Failure("runtime_error", str(exc).strip()[:500])


class _Stop(Exception):
    pass


class _Done(Exception):
    """Leaves the transaction block by exception, so it rolls back even after a successful read."""

    def __init__(self, result: Result):
        super().__init__("done")
        self.result = result


def close_all() -> None:
    """Close every open connection."""
    for conn in list(_connections.values()):
        with contextlib.suppress(Exception):
            conn.close()
    _connections.clear()
