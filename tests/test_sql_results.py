"""Result size is the candidate's own cost: a huge result (many rows, wide rows, one huge value, blobs,
non-ASCII text) is status ok, reason too_large (or time_limit when producing and encoding it costs more than
the CPU limit), reward 0, and comes back fast; never a masked `timeout` from a stalled reply pipe.

The hole these pin: a 60 MB result used to stall on the host's quadratic reading of the worker's reply (each
64 KB pipe chunk re-copied and re-scanned the whole buffer) while the worker sat blocked on the full pipe
with 0.4 CPU s used, so the wall-clock backstop fired and the verdict was status timeout (masked by trainers).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from proctor.contract import Status
from proctor.registry import get_verifier
from proctor.verifiers.sql import verifier, workers
from tests.sql_helpers import library_databases

GOLD = "SELECT count(*) FROM book"


def rows(n: int, select: str) -> str:
    return f"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c LIMIT {n}) SELECT {select} FROM c"


@pytest.fixture(autouse=True)
def databases(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    yield from library_databases(tmp_path, monkeypatch)
    workers.shared_pool().close()


def score(response: str, gold: str = GOLD, **options):
    spec = get_verifier("sql")
    reference = spec.parse_reference({"db_id": "library", "gold": gold})
    started = time.monotonic()
    verdict = spec.score(response, reference, spec.parse_options(options))
    return verdict, time.monotonic() - started


def test_the_red_team_query_is_too_large_not_a_masked_timeout():
    query = rows(99999, "printf('%.*c', 600, 'a')")
    verdict, took = score(f"```sql\n{query}\n```")
    assert (verdict.status, verdict.reason, verdict.reward) == (Status.ok, "too_large", 0.0), verdict
    assert took < workers.wall_backstop(2.0), took


@pytest.mark.parametrize(
    "select, n",
    [
        pytest.param("printf('%.*c', 300, 'a')", 99999, id="many-rows-300-bytes"),
        pytest.param("printf('%.*c', 9000000, 'a')", 3, id="huge-printf-values"),
        pytest.param("CAST(printf('%.*c', 6000000, 'a') AS BLOB)", 2, id="blobs-count-in-hex"),
        pytest.param("printf('%.*c', 200, char(128512))", 99999, id="non-ascii-counts-its-utf8"),
        pytest.param(", ".join(["x"] * 60), 99999, id="wide-rows-cell-cap"),
        pytest.param("x", 100_001, id="too-many-rows"),
    ],
)
def test_huge_results_are_the_candidates_too_large(select: str, n: int):
    verdict, took = score(rows(n, select))
    assert (verdict.status, verdict.reason, verdict.reward) == (Status.ok, "too_large", 0.0), verdict
    assert took < workers.wall_backstop(2.0), took


def test_encoding_the_rows_is_cpu_time_of_the_query():
    verdict, _ = score(rows(99999, ", ".join(["x * 1.5"] * 30)), timeout_s=0.2)
    assert (verdict.status, verdict.reason, verdict.reward) == (Status.ok, "time_limit", 0.0), verdict


def test_a_result_just_under_the_cap_comes_back_whole_and_fast():
    width = verifier.MAX_BYTES // 100_000 - 20
    verdict, took = score(rows(99999, f"printf('%.*c', {width}, 'a')"))
    assert (verdict.status, verdict.reason, verdict.reward) == (Status.ok, "rows", 0.0), verdict
    assert took < workers.wall_backstop(2.0), took
    same = rows(99999, f"printf('%.*c', {width}, 'a')")
    assert score(same, gold=same)[0].reward == 1.0


def test_a_gold_over_the_caps_is_a_verifier_error_not_a_timeout():
    verdict, _ = score("SELECT 1", gold=rows(99999, "printf('%.*c', 600, 'a')"))
    assert (verdict.status, verdict.reason) == (Status.verifier_error, "gold_failed"), verdict
    assert "too_large" in verdict.details["error"]


def test_the_host_reads_a_big_reply_in_linear_time(monkeypatch: pytest.MonkeyPatch):
    """The reader appends to a bytearray and searches only new chunks: 64 MB in 64 KB chunks is quick."""
    import os

    payload = b'{"ok": true, "rows": "' + b"a" * (64 << 20) + b'"}\n'
    read_fd, write_fd = os.pipe()
    fake = workers.Worker.__new__(workers.Worker)
    fake.buffer = bytearray()

    class Proc:
        class stdout:  # noqa: N801
            @staticmethod
            def fileno() -> int:
                return read_fd

    fake.proc = Proc
    chunks = [payload[i : i + 65536] for i in range(0, len(payload), 65536)]
    monkeypatch.setattr(workers.select, "select", lambda r, w, x, t: (r, [], []))
    monkeypatch.setattr(workers.os, "read", lambda fd, n: chunks.pop(0) if chunks else b"")
    started = time.monotonic()
    reply = fake._read_line(time.monotonic() + 60, len(payload) + 10)
    assert reply is not None and len(reply["rows"]) == 64 << 20
    assert time.monotonic() - started < 3.0
    os.close(read_fd), os.close(write_fd)
