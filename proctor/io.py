"""Reading and writing rows of JSONL and Parquet files, and finding the bundled datasets.

Rows are plain dicts. Parquet cannot hold every JSON value natively (a column whose values mix types, or
dicts with differing keys), so such a column is stored as JSON text and named in the file's metadata;
a Score column is stored as one fixed struct so that tools like pandas or DuckDB can query
`score.reward` and `score.status`. Reading a file written here gives back the rows that were written.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, Literal

Format = Literal["jsonl", "parquet"]

JSONL_SUFFIXES = (".jsonl", ".ndjson")
PARQUET_SUFFIXES = (".parquet", ".pq")

_META_JSON_COLUMNS = b"proctor.json_columns"
_META_SCORE_COLUMNS = b"proctor.score_columns"
_SCORE_FIELDS = ("id", "verifier", "status", "reward", "correct", "reason", "components", "details")
_SCORE_FIELDS_TAIL = ("elapsed_ms", "cached")


class DataError(Exception):
    """A data file that cannot be read: missing, unreadable, malformed (the message names file and line)."""


def file_format(path: str | os.PathLike[str]) -> Format:
    """The format a path's extension names; raises ValueError for anything but JSONL or Parquet."""
    suffix = Path(path).suffix.lower()
    if suffix in JSONL_SUFFIXES:
        return "jsonl"
    if suffix in PARQUET_SUFFIXES:
        return "parquet"
    known = ", ".join(JSONL_SUFFIXES + PARQUET_SUFFIXES)
    raise ValueError(f"cannot tell the format of {str(path)!r} from its extension (use one of {known})")


# -- JSON ----------------------------------------------------------------------------------------------


def _json_default(value: Any) -> Any:
    # Parquet files from other tools carry types JSON lacks; give each a faithful, stable text form.
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return base64.b64encode(raw).decode("ascii")
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def dumps_row(row: Any) -> str:
    """One row as a single line of JSON (non-JSON values from Parquet become strings or numbers)."""
    return json.dumps(row, ensure_ascii=False, default=_json_default)


def to_jsonable(value: Any) -> Any:
    """The value as it reads back after a trip through JSON."""
    return json.loads(dumps_row(value))


# -- JSONL ---------------------------------------------------------------------------------------------


JSON_SPACE = " \t\r\n"
"""The characters JSON counts as blank space: a JSONL line of nothing else is skipped."""


def iter_jsonl(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """Yield each JSON object of a JSONL file (blank lines are skipped); DataError names a bad line.

    Lines end at `\\n` only (a `\\r` before it is blank space, so CRLF files read as expected): a bare `\\r`
    does not end a row, as in JSONL, and as the jobs' pre-scan counts rows before a file is stored."""
    try:
        # noqa below: closed by the generator's finally
        handle = open(path, encoding="utf-8", newline="\n")  # noqa: SIM115
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        for number, line in enumerate(handle, start=1):
            if not line.strip(JSON_SPACE):  # JSON's own blanks only, as the jobs' pre-scan counts them
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                if "\r" in line.rstrip():
                    raise DataError(
                        f"{path}: line {number} holds a bare carriage return (\\r); JSONL rows end with \\n"
                    ) from None
                raise DataError(f"{path}: line {number} is not valid JSON ({exc.msg})") from None
            except RecursionError:
                raise DataError(f"{path}: line {number} is nested too deeply to read") from None
            if not isinstance(row, dict):
                raise DataError(f"{path}: line {number} is a JSON {type(row).__name__}, not an object")
            yield row
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text ({exc.reason})") from None
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc.strerror or exc}") from None
    finally:
        handle.close()


def write_jsonl(path: str | os.PathLike[str], rows: Iterable[dict[str, Any]]) -> None:
    """Write rows as JSONL atomically (a temporary file renamed over the target)."""
    with _atomic(Path(path)) as tmp, open(tmp, "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(dumps_row(row) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


class JsonlAppender:
    """Appends rows to a JSONL file; each append is flushed and fsynced, so a kill loses at most that call."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self._handle: BinaryIO = open(self.path, "ab")  # noqa: SIM115 - closed by close()

    def append(self, rows: Iterable[dict[str, Any]]) -> None:
        """Write the rows in one call and make them durable before returning."""
        data = "".join(dumps_row(row) + "\n" for row in rows).encode("utf-8")
        self._handle.write(data)
        self._handle.flush()
        os.fsync(self._handle.fileno())

    def close(self) -> None:
        """Close the file."""
        self._handle.close()

    def __enter__(self) -> JsonlAppender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def truncate_partial_line(path: str | os.PathLike[str]) -> int:
    """Cut a trailing line that has no newline (a write interrupted by a kill); returns the bytes removed."""
    with open(path, "r+b") as handle:
        size = handle.seek(0, os.SEEK_END)
        end = size
        block = 1 << 16
        while end > 0:
            start = max(0, end - block)
            handle.seek(start)
            chunk = handle.read(end - start)
            newline = chunk.rfind(b"\n")
            if newline >= 0:
                keep = start + newline + 1
                break
            end = start
        else:
            keep = 0
        if keep < size:
            handle.truncate(keep)
            handle.flush()
            os.fsync(handle.fileno())
        return size - keep


# -- Parquet -------------------------------------------------------------------------------------------


def _score_type() -> Any:
    import pyarrow as pa

    return pa.struct(
        [
            ("id", pa.string()),  # JSON text: an id may be a string or an integer
            ("verifier", pa.string()),
            ("status", pa.string()),
            ("reward", pa.float64()),
            ("correct", pa.bool_()),
            ("reason", pa.string()),
            ("components", pa.map_(pa.string(), pa.float64())),
            ("details", pa.string()),  # JSON text: evidence differs from verifier to verifier
            ("elapsed_ms", pa.float64()),
            ("cached", pa.bool_()),
            ("error", pa.struct([("status", pa.int32()), ("message", pa.string()), ("field", pa.string())])),
        ]
    )


def _encode_score(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError(f"a score column holds JSON objects, not {type(value).__name__}")
    encoded: dict[str, Any] = {"id": None if value.get("id") is None else json.dumps(value["id"])}
    if "error" in value:
        encoded["error"] = value["error"]
        return encoded
    encoded.update(
        verifier=value.get("verifier"),
        status=value.get("status"),
        reward=value.get("reward"),
        correct=value.get("correct"),
        reason=value.get("reason"),
        components=list((value.get("components") or {}).items()),
        details=dumps_row(value.get("details") or {}),
        elapsed_ms=value.get("elapsed_ms"),
        cached=value.get("cached"),
    )
    return encoded


def _decode_score(value: dict[str, Any] | None) -> dict[str, Any] | None:
    if value is None:
        return None
    score_id = None if value["id"] is None else json.loads(value["id"])
    if value.get("error") is not None:
        return {"id": score_id, "error": dict(value["error"])}
    decoded: dict[str, Any] = {"id": score_id}
    for name in _SCORE_FIELDS[1:]:
        decoded[name] = value[name]
    decoded["components"] = dict(value["components"] or [])
    decoded["details"] = json.loads(value["details"]) if value["details"] is not None else {}
    for name in _SCORE_FIELDS_TAIL:
        decoded[name] = value[name]
    return decoded


def _column(values: list[Any]) -> tuple[Any, bool]:
    """A native Arrow array when it reads back unchanged, else JSON text (second item True)."""
    import pyarrow as pa

    try:
        array = pa.array(values)
        if array.to_pylist() == values:
            return array, False
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        pass
    return pa.array([None if v is None else dumps_row(v) for v in values], type=pa.string()), True


def rows_to_table(rows: list[dict[str, Any]], score_columns: Iterable[str] = ()) -> Any:
    """An Arrow table for the rows; columns in first-seen order, a missing key becomes null."""
    import pyarrow as pa

    names: dict[str, None] = {}
    for row in rows:
        for name in row:
            names.setdefault(name, None)
    score_set = set(score_columns)
    arrays, json_columns, scores = [], [], []
    for name in names:
        values = [row.get(name) for row in rows]
        if name in score_set:
            arrays.append(pa.array([_encode_score(v) for v in values], type=_score_type()))
            scores.append(name)
            continue
        array, as_json = _column(values)
        arrays.append(array)
        if as_json:
            json_columns.append(name)
    metadata = {
        _META_JSON_COLUMNS: json.dumps(json_columns).encode(),
        _META_SCORE_COLUMNS: json.dumps(scores).encode(),
    }
    return pa.Table.from_arrays(arrays, names=list(names), metadata=metadata)


def write_parquet(
    path: str | os.PathLike[str], rows: list[dict[str, Any]], score_columns: Iterable[str] = ()
) -> None:
    """Write rows as Parquet atomically; `score_columns` hold Score / ItemError objects."""
    import pyarrow.parquet as pq

    table = rows_to_table(rows, score_columns)
    with _atomic(Path(path)) as tmp:
        pq.write_table(table, tmp)
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())


def _parquet_file(path: str | os.PathLike[str], read_dictionary: list[str] | None = None) -> Any:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(path, read_dictionary=read_dictionary)
    except OSError as exc:
        raise DataError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    except pa.ArrowException as exc:
        raise DataError(f"{path} is not a readable Parquet file ({exc})") from None


class DataTooLarge(DataError):
    """A data file that holds more than a reader was allowed to take (the message says which limit)."""


def parquet_shape(path: str | os.PathLike[str]) -> tuple[int, int, int]:
    """A Parquet file's row count, the size of its column data once decompressed, and its leaf values (each
    value, null or empty list of every column, nested ones included), from the footer alone: nothing is
    decompressed. Dictionary-encoded values count once however many rows repeat them, so the size is a lower
    bound of what the rows expand to, never an upper one; each leaf value takes at least a byte as JSON."""
    metadata = _parquet_file(path).metadata
    rows = size = leaves = 0
    for index in range(metadata.num_row_groups):
        group = metadata.row_group(index)
        rows += group.num_rows
        size += group.total_byte_size
        leaves += sum(group.column(column).num_values for column in range(group.num_columns))
    # The file's count and its groups' are written separately: a crafted footer may make them disagree.
    return max(int(metadata.num_rows), int(rows)), int(size), int(leaves)


# Rows of a bounded read are decoded in batches of at most this many bytes of text (or one row).
_DECODE_BYTES = 8 << 20


def _is_text(kind: Any) -> bool:
    import pyarrow as pa

    return any(
        test(kind)
        for test in (
            pa.types.is_string,
            pa.types.is_large_string,
            pa.types.is_binary,
            pa.types.is_large_binary,
        )
    )


def _holds_text(kind: Any) -> bool:
    """Whether a column of this Arrow type has strings or binary anywhere inside (lists, structs, maps)."""
    import pyarrow as pa

    if pa.types.is_dictionary(kind):
        return _holds_text(kind.value_type)
    if _is_text(kind):
        return True
    return any(_holds_text(kind.field(i).type) for i in range(kind.num_fields))


def _row_text(array: Any) -> Any:
    """Each row's bytes of string and binary values, nested ones summed, as an int64 array; dictionary-encoded
    values are measured in their dictionary, so nothing is expanded."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = array.type
    if pa.types.is_dictionary(kind) and _is_text(kind.value_type):
        lengths = pc.take(pc.binary_length(array.dictionary).cast(pa.int64()), array.indices)
        return pc.fill_null(lengths, 0)
    if _is_text(kind):
        return pc.fill_null(pc.binary_length(array).cast(pa.int64()), 0)
    if pa.types.is_struct(kind):
        sizes = pa.repeat(pa.scalar(0, pa.int64()), len(array))
        for field in array.flatten():
            sizes = pc.add(sizes, _row_text(field))
        return sizes
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        # A row's text is the sum over its elements: differences of a running total at the rows' ends.
        inner = _row_text(array.flatten())
        lengths = pc.fill_null(pc.list_value_length(array).cast(pa.int64()), 0)
        ends = pc.cumulative_sum(lengths)
        starts = pc.subtract(ends, lengths)
        running = pa.concat_arrays([pa.array([0], pa.int64()), pc.cumulative_sum(inner).cast(pa.int64())])
        return pc.subtract(pc.take(running, ends), pc.take(running, starts))
    return pa.repeat(pa.scalar(0, pa.int64()), len(array))  # numbers, booleans, ...


def _text_sizes(sizer: Any, group: int, columns: list[str]) -> Any:
    """Each row's bytes of text in one row group (None when it has no text column), its columns read with every
    string leaf as a dictionary (a value repeated by many rows is held once), so nothing is expanded to
    measure it."""
    import pyarrow as pa
    import pyarrow.compute as pc

    sizes = None
    for name in columns:
        column = sizer.read_row_group(group, columns=[name]).column(0)
        parts = [_row_text(chunk) for chunk in column.chunks]
        merged = pa.concat_arrays(parts) if parts else pa.array([], type=pa.int64())
        sizes = merged if sizes is None else pc.add(sizes, merged)  # columns of unequal length: ArrowInvalid
    return sizes


def _decode_row(row: dict[str, Any], json_columns: set[str], score_columns: set[str]) -> dict[str, Any]:
    for name in json_columns:
        if row.get(name) is not None:
            row[name] = json.loads(row[name])
    for name in score_columns:
        row[name] = _decode_score(row.get(name))
    return row


def iter_parquet(
    path: str | os.PathLike[str], batch_size: int = 1024, max_bytes: int | None = None
) -> Iterator[dict[str, Any]]:
    """Yield the rows of a Parquet file, decoding the columns this module stored as JSON or scores.

    With `max_bytes`, the read is bounded for files from strangers: before a row group is decoded, its string
    and binary columns are read as dictionaries to measure each row's text; a row group that would take the
    file past `max_bytes` raises DataTooLarge before it is expanded, and rows are decoded at most `batch_size`
    and about 8 MiB of text at a time. So a tiny file whose one compressed value is repeated by a million
    rows, at the top level or inside lists and structs, costs no more memory than its values once. (Numbers
    in lists are expanded as read: `parquet_shape` counts them, for a caller to bound beforehand.)
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    parquet = _parquet_file(path)
    metadata = parquet.schema_arrow.metadata or {}
    json_columns = set(json.loads(metadata.get(_META_JSON_COLUMNS, b"[]")))
    score_columns = set(json.loads(metadata.get(_META_SCORE_COLUMNS, b"[]")))
    try:
        if max_bytes is None:
            for batch in parquet.iter_batches(batch_size=batch_size):
                for row in batch.to_pylist():
                    yield _decode_row(row, json_columns, score_columns)
            return
        text = [field.name for field in parquet.schema_arrow if _holds_text(field.type)]
        leaves = parquet.schema  # every string leaf, nested ones by their dotted path, read as a dictionary
        strings = [
            leaves.column(i).path
            for i in range(len(leaves))
            if leaves.column(i).physical_type == "BYTE_ARRAY"
        ]
        sizer = _parquet_file(path, read_dictionary=strings)
        seen = 0
        for group in range(parquet.metadata.num_row_groups):
            sizes = _text_sizes(sizer, group, text)
            seen += 0 if sizes is None else pc.sum(sizes).as_py() or 0
            if seen > max_bytes:
                raise DataTooLarge(f"{path}: its rows hold more than {max_bytes} bytes of text")
            largest = 0 if sizes is None else pc.max(sizes).as_py() or 0
            per_batch = max(1, min(batch_size, _DECODE_BYTES // max(1, largest)))
            for batch in parquet.iter_batches(batch_size=per_batch, row_groups=[group]):
                for row in batch.to_pylist():
                    yield _decode_row(row, json_columns, score_columns)
    except pa.ArrowException as exc:
        raise DataError(f"{path}: cannot read Parquet data ({exc})") from None


# -- Either format -------------------------------------------------------------------------------------


def iter_rows(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """Yield the rows of a JSONL or Parquet file (by extension)."""
    if file_format(path) == "jsonl":
        return iter_jsonl(path)
    return iter_parquet(path)


def read_rows(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """All rows of a JSONL or Parquet file."""
    return list(iter_rows(path))


def count_rows(path: str | os.PathLike[str]) -> int:
    """How many rows the file holds; for JSONL every line is parsed, so a malformed one fails here, early."""
    if file_format(path) == "parquet":
        return _parquet_file(path).metadata.num_rows
    return sum(1 for _ in iter_jsonl(path))


def write_rows(
    path: str | os.PathLike[str], rows: list[dict[str, Any]], score_columns: Iterable[str] = ()
) -> None:
    """Write rows atomically as JSONL or Parquet (by extension)."""
    if file_format(path) == "jsonl":
        write_jsonl(path, rows)
    else:
        write_parquet(path, rows, score_columns)


class _atomic:
    """Yields a temporary path beside `target`; on success it replaces the target, on failure it is removed."""

    def __init__(self, target: Path):
        self.target = target
        self.tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")

    def __enter__(self) -> Path:
        return self.tmp

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is not None:
            self.tmp.unlink(missing_ok=True)
            return
        os.replace(self.tmp, self.target)
        _fsync_dir(self.target.parent)


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some filesystems refuse fsync on a directory; the rename is still atomic
        pass
    finally:
        os.close(fd)


# -- Bundled datasets ----------------------------------------------------------------------------------


def dataset_roots() -> list[Path]:
    """Where the bundled `datasets/` folder lives: `proctor/datasets` in the wheel, a link to it in a checkout."""
    # From this file, not importlib.resources.files("proctor"): that would import the package root (the engine).
    return [Path(__file__).parent / "datasets"]


def bundled_dataset(relative_path: str) -> Path:
    """The path of a file in the bundled `datasets/` folder; FileNotFoundError names where it looked."""
    relative = Path(relative_path)
    if relative.is_absolute() or ".." in relative.parts:
        raise ValueError(f"a bundled dataset path must be relative and inside datasets/: {relative_path!r}")
    roots = dataset_roots()
    for root in roots:
        candidate = root / relative
        if candidate.is_file():
            return candidate
    looked = ", ".join(str(root) for root in roots) or "nowhere"
    raise FileNotFoundError(f"bundled dataset {relative_path!r} not found (looked in {looked})")
