"""The jailed SQLite worker: reads JSON-lines requests on stdin, runs each query read-only, answers on stdout.

Standard library only, because it runs under the system Python inside an nsjail jail (or, with the `local`
sandbox backend, as a plain subprocess). One request per line:

    {"db": "/db/x/x.sqlite", "sql": "SELECT ...", "timeout_s": 2.0, "wall_s": 8.0, "max_rows": 100000,
     "max_bytes": 16777216, "max_cells": 4000000}

One reply per line: {"ok": true, "columns": [...], "rows": [[...], ...], "ms": ..., "cpu_ms": ...} or
{"ok": false, "error": CODE, "message": "..."} with CODE one of runtime_error, time_limit, wall_limit,
too_large, not_allowed. Blobs travel as {"$b": hex}; floats keep their type (json writes 1.0, not 1), NaN and
infinities as json's NaN/Infinity.

`timeout_s` is CPU time: the progress handler stops the query when this process's CPU time
(`time.process_time`) has grown by more than it (`time_limit`). `wall_s` is only a backstop for a machine so
busy that the query does not get its CPU: stopped there, the reply is `wall_limit`, not the query's fault.

Every connection is opened `mode=ro&immutable=1` (SQLite never writes or locks the file), with `query_only`,
an in-memory temp store, no attached databases, tight length limits, and an authorizer that allows only
reading tables, SELECT, recursive CTEs and an allow-list of deterministic functions. A progress handler stops
a query at its CPU-time limit (or the wall backstop), also while rows are being fetched; each row is JSON-encoded
as it is fetched (that CPU time counts too, checked every CHECK_ROWS rows), and fetching stops at the row, cell
and byte caps, the bytes being those of the encoded reply (UTF-8; blobs in hex), so the reply the host reads is
bounded by max_bytes and costs the worker no more than the query's CPU time to produce.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import time
from typing import Any

ALLOWED_FUNCTIONS = frozenset(
    [
        "abs",
        "avg",
        "count",
        "sum",
        "total",
        "min",
        "max",
        "group_concat",
        "string_agg",
        "length",
        "octet_length",
        "lower",
        "upper",
        "substr",
        "substring",
        "trim",
        "ltrim",
        "rtrim",
        "replace",
        "round",
        "coalesce",
        "ifnull",
        "nullif",
        "iif",
        "if",
        "instr",
        "typeof",
        "like",
        "glob",
        "regexp",
        "likelihood",
        "likely",
        "unlikely",
        "date",
        "time",
        "datetime",
        "julianday",
        "strftime",
        "unixepoch",
        "timediff",
        "printf",
        "format",
        "hex",
        "unhex",
        "quote",
        "char",
        "unicode",
        "sign",
        "ceil",
        "ceiling",
        "floor",
        "trunc",
        "exp",
        "ln",
        "log",
        "log2",
        "log10",
        "pow",
        "power",
        "sqrt",
        "mod",
        "pi",
        "sin",
        "cos",
        "tan",
        "asin",
        "acos",
        "atan",
        "atan2",
        "sinh",
        "cosh",
        "tanh",
        "asinh",
        "acosh",
        "atanh",
        "degrees",
        "radians",
        "concat",
        "concat_ws",
        "row_number",
        "rank",
        "dense_rank",
        "percent_rank",
        "cume_dist",
        "ntile",
        "lag",
        "lead",
        "first_value",
        "last_value",
        "nth_value",
        "json",
        "json_array",
        "json_array_length",
        "json_extract",
        "json_insert",
        "json_object",
        "json_patch",
        "json_remove",
        "json_replace",
        "json_set",
        "json_type",
        "json_valid",
        "json_quote",
        "json_group_array",
        "json_group_object",
        "json_each",
        "json_tree",
    ]
)
# Connection limits: no attached databases, strings and blobs at most 10 MB (so zeroblob/printf/replace
# cannot build a 1 GB value), bounded statement size, expression depth and compound selects.
LIMITS = {
    "SQLITE_LIMIT_ATTACHED": 0,
    "SQLITE_LIMIT_LENGTH": 10_000_000,
    "SQLITE_LIMIT_SQL_LENGTH": 100_000,
    "SQLITE_LIMIT_COLUMN": 1000,
    "SQLITE_LIMIT_EXPR_DEPTH": 200,
    "SQLITE_LIMIT_COMPOUND_SELECT": 100,
    "SQLITE_LIMIT_FUNCTION_ARG": 64,
    "SQLITE_LIMIT_LIKE_PATTERN_LENGTH": 1000,
    "SQLITE_LIMIT_VARIABLE_NUMBER": 1,
    "SQLITE_LIMIT_TRIGGER_DEPTH": 1,
}
PROGRESS_STEPS = 2000
MAX_CONNECTIONS = 16

CLOCK_FUNCTIONS: dict[str, tuple[int, ...]] = {
    "date": (0,),
    "time": (0,),
    "datetime": (0,),
    "julianday": (0,),
    "unixepoch": (0,),
    "strftime": (1,),
    "timediff": (0, 1),
}
"""The date functions and which arguments are time values. Each one reads the clock when a time value is 'now' or
missing, which would make a query's result, and so its score, depend on when it ran (a replay would disagree with
the live grade); the worker's replacements refuse that and hand every other call to SQLite's own function."""


class Stop(Exception):
    """A query ended by a cap; carries the error code."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


def authorize(action: int, arg1: str | None, arg2: str | None, _db: str | None, _trigger: str | None) -> int:
    """SQLite authorizer: reading, SELECT, recursive CTEs and allow-listed functions; nothing else."""
    if action in (sqlite3.SQLITE_READ, sqlite3.SQLITE_SELECT, getattr(sqlite3, "SQLITE_RECURSIVE", 33)):
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in ALLOWED_FUNCTIONS:
        return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


_builtin_dates = sqlite3.connect(":memory:", isolation_level=None)
"""A plain connection whose built-in date functions the clock-free replacements call."""


def clock_free(name: str, positions: tuple[int, ...]) -> Any:
    """SQLite's `name` date function, refusing a call that reads the clock ('now' or a missing time value)."""
    call_sql = {arity: f"SELECT {name}({', '.join('?' * arity)})" for arity in range(65)}

    def replacement(*args: object) -> object:
        for position in positions:
            value = args[position] if position < len(args) else "now"
            if isinstance(value, bytes):
                value = value.decode("utf-8", "replace")
            if isinstance(value, str) and value.strip().lower() == "now":
                raise ValueError(
                    f"{name}() reads the clock ('now' or no time value); the grade must not depend on it"
                )
        return _builtin_dates.execute(call_sql[len(args)], args).fetchone()[0]

    return replacement


class Databases:
    """Open read-only connections, one per database file, kept for reuse."""

    def __init__(self) -> None:
        self.connections: dict[str, sqlite3.Connection] = {}
        self.cpu_deadline = 0.0  # time.process_time()
        self.wall_deadline = 0.0  # time.monotonic()
        self.stopped = ""  # "cpu" or "wall" once the progress handler has interrupted the query

    def get(self, path: str) -> sqlite3.Connection:
        """A hardened connection to the database at path (opened once)."""
        conn = self.connections.get(path)
        if conn is None:
            if len(self.connections) >= MAX_CONNECTIONS:
                self.connections.pop(next(iter(self.connections))).close()
            conn = self.connections[path] = self.open(path)
        return conn

    def open(self, path: str) -> sqlite3.Connection:
        """Open path read-only and immutable, then lock the connection down before any query runs."""
        quoted = path.replace("%", "%25").replace("?", "%3f").replace("#", "%23")
        conn = sqlite3.connect(f"file:{quoted}?mode=ro&immutable=1", uri=True, isolation_level=None)
        conn.execute("PRAGMA query_only = 1")
        conn.execute("PRAGMA temp_store = MEMORY")
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # fails here if the file is no database
        for name, value in LIMITS.items():
            if hasattr(sqlite3, name) and hasattr(conn, "setlimit"):  # Python >= 3.11
                conn.setlimit(getattr(sqlite3, name), value)
        for name, positions in CLOCK_FUNCTIONS.items():
            conn.create_function(name, -1, clock_free(name, positions), deterministic=True)
        conn.set_authorizer(authorize)
        conn.set_progress_handler(self.progress, PROGRESS_STEPS)
        conn.text_factory = lambda raw: raw.decode("utf-8", "replace")
        return conn

    def progress(self) -> int:
        """Non-zero interrupts the running statement: its CPU time is spent, or the wall backstop passed."""
        if time.process_time() > self.cpu_deadline:
            self.stopped = "cpu"
            return 1
        if time.monotonic() > self.wall_deadline:
            self.stopped = "wall"
            return 1
        return 0


def cell(value: object) -> object:
    """A SQLite value as JSON: blobs as {"$b": hex}."""
    if isinstance(value, bytes):
        return {"$b": value.hex()}
    return value


ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
CHECK_ROWS = 64  # rows encoded between two checks of the CPU clock


def encode(value: object) -> bytes:
    """JSON bytes of value exactly as they travel to the host (UTF-8, so a non-ASCII character costs its
    UTF-8 size, not a 6- or 12-byte escape)."""
    return ENCODE(value).encode("utf-8", "replace")


def run(dbs: Databases, request: dict) -> dict | bytes:
    """Run one query; its reply as a dict (an error) or as the encoded JSON line of a result (no newline).

    Each row is encoded as it is fetched and the byte cap counts those encoded bytes (column names included),
    so the reply the host reads is at most max_bytes plus a small envelope; encoding is CPU time of the query
    (checked every CHECK_ROWS rows as well as by the progress handler)."""
    timeout_s = float(request.get("timeout_s", 2.0))
    wall_s = float(request.get("wall_s") or 3 * timeout_s + 2)
    max_rows = int(request.get("max_rows", 100_000))
    max_bytes = int(request.get("max_bytes", 16_000_000))
    max_cells = int(request.get("max_cells", 4_000_000))
    try:
        conn = dbs.get(request["db"])
    except sqlite3.Error as exc:
        return {"ok": False, "error": "open_error", "message": f"cannot open {request['db']}: {exc}"}
    started, cpu_started = time.monotonic(), time.process_time()
    dbs.cpu_deadline, dbs.wall_deadline, dbs.stopped = cpu_started + timeout_s, started + wall_s, ""
    pieces: list[bytes] = []
    try:
        cursor = conn.execute(request["sql"])
        if not cursor.description:  # empty, comment-only, or a statement that is not a query
            return {"ok": False, "error": "not_allowed", "message": "the statement returns no result columns"}
        columns = [d[0] for d in cursor.description]
        head = encode(columns)
        size = len(head)
        cells, width = 0, max(1, len(columns))
        for row in cursor:
            piece = encode([cell(v) for v in row])
            pieces.append(piece)
            size += len(piece) + 1
            cells += width
            if size > max_bytes:
                raise Stop("too_large", f"more than {max_bytes} bytes of results (JSON-encoded)")
            if len(pieces) > max_rows:
                raise Stop("too_large", f"more than {max_rows} rows")
            if cells > max_cells:
                raise Stop("too_large", f"more than {max_cells} result cells (rows x columns)")
            if len(pieces) % CHECK_ROWS == 0 or len(piece) > 65536:
                check(dbs)
        check(dbs)
        cursor.close()
    except Stop as exc:
        pieces.clear()
        if exc.code == "wall_limit":
            return wall_reply(wall_s, timeout_s, time.process_time() - cpu_started)
        return {"ok": False, "error": exc.code, "message": str(exc)}
    except sqlite3.DatabaseError as exc:
        pieces.clear()
        message = str(exc)
        if dbs.stopped == "wall":
            return wall_reply(wall_s, timeout_s, time.process_time() - cpu_started)
        if dbs.stopped == "cpu" or "interrupted" in message:
            return {
                "ok": False,
                "error": "time_limit",
                "message": f"query used more than {timeout_s:g} CPU s",
            }
        code = "not_allowed" if "not authorized" in message or "prohibited" in message else "runtime_error"
        return {"ok": False, "error": code, "message": message[:500]}
    except (sqlite3.Warning, sqlite3.ProgrammingError, ValueError, OverflowError) as exc:
        pieces.clear()
        return {"ok": False, "error": "runtime_error", "message": str(exc)[:500]}
    except MemoryError:
        pieces.clear()
        return {"ok": False, "error": "too_large", "message": "result exceeded the worker's memory"}
    timing = encode(
        {
            "ms": round((time.monotonic() - started) * 1000, 3),
            "cpu_ms": round((time.process_time() - cpu_started) * 1000, 3),
        }
    )
    return b"".join([b'{"ok":true,"columns":', head, b',"rows":[', b",".join(pieces), b"],", timing[1:]])


def check(dbs: Databases) -> None:
    """Stop the query (its fetching and encoding included) at its CPU time or the wall backstop."""
    if time.process_time() > dbs.cpu_deadline:
        raise Stop("time_limit", "query used more than its CPU time (fetching and encoding its rows)")
    if time.monotonic() > dbs.wall_deadline:
        raise Stop("wall_limit", "wall-clock backstop")


def wall_reply(wall_s: float, timeout_s: float, cpu: float) -> dict:
    """The reply of a query stopped at the wall-clock backstop: the machine's fault, not the query's."""
    return {
        "ok": False,
        "error": "wall_limit",
        "message": f"query stopped at the {wall_s:g} s wall-clock backstop after only {cpu:.2f} CPU s "
        f"(limit {timeout_s:g} CPU s): the machine is oversubscribed",
    }


def main() -> None:
    """Serve requests from stdin until it closes; replies are written as UTF-8 bytes."""
    dbs = Databases()
    out = sys.stdout.buffer
    out.write(encode({"ready": True, "sqlite": sqlite3.sqlite_version}) + b"\n")
    out.flush()
    for line in sys.stdin.buffer:
        try:
            reply = run(dbs, json.loads(line))
        except (KeyError, TypeError, ValueError) as exc:
            reply = {"ok": False, "error": "bad_request", "message": str(exc)}
        if not isinstance(reply, bytes):
            try:
                reply = encode(reply)
            except (TypeError, ValueError) as exc:
                reply = encode(
                    {"ok": False, "error": "runtime_error", "message": f"unencodable result: {exc}"}
                )
        out.write(reply + b"\n")
        out.flush()
        reply = b""


if __name__ == "__main__":
    main()
