"""The audit log: every score the service answers, written to the database by a background thread.

`record` never blocks and never raises: it puts the score on a bounded queue. A writer thread inserts the
queue in batches; when the database is down it keeps the batch, logs the outage once, counts each failed
attempt and retries with backoff, while new records wait in the queue; only when the queue is full are
records dropped, and counted. A score is therefore never slowed or failed by its audit record.
"""

from __future__ import annotations

import datetime as dt
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

from sqlalchemy import Engine, insert

from proctor.contract import Score
from proctor.db.models import AuditScore

log = logging.getLogger(__name__)

Observer = Callable[[str, int], None]
"""Called with (outcome, count): `written` records, `dropped` records, `write_error` failed attempts."""

BATCH = 500
CAPACITY = 50_000
RETRY_MIN_S = 0.5
RETRY_MAX_S = 10.0


def split_verifier(qualified: str) -> tuple[str, str]:
    """`name@version` (a Score's verifier field) as (name, version); version '' when there is none."""
    name, at, version = qualified.rpartition("@")
    return (name, version) if at else (qualified, "")


class AuditLog:
    """A bounded queue of audit records and the thread that writes them."""

    def __init__(
        self,
        engine: Engine,
        *,
        capacity: int = CAPACITY,
        batch: int = BATCH,
        observer: Observer | None = None,
    ):
        self.engine = engine
        self.batch = batch
        self.observer = observer or (lambda outcome, count: None)
        self._queue: queue.Queue[dict[str, Any]] = queue.Queue(maxsize=capacity)
        self._closing = threading.Event()
        self._failing = False
        self._thread = threading.Thread(target=self._run, name="proctor-audit", daemon=True)
        self._thread.start()

    def record(self, score: Score, key_hash: str | None = None) -> None:
        """Queue one score for the log; drops it (counted) when the queue is full. Never raises."""
        try:
            name, version = split_verifier(score.verifier)
            row = {
                "at": dt.datetime.now(dt.timezone.utc),
                "verifier": name,
                "version": version,
                "status": score.status.value,
                "reward": score.reward,
                "cached": score.cached,
                "key_hash": key_hash,
                "request_id": None if score.id is None else str(score.id)[:200],
            }
            self._queue.put_nowait(row)
        except queue.Full:
            self._observe("dropped", 1)
        except Exception:  # an audit bug must not fail the score it records
            log.exception("could not queue an audit record")
            self._observe("dropped", 1)

    def _observe(self, outcome: str, count: int) -> None:
        try:
            self.observer(outcome, count)
        except Exception:
            log.exception("audit observer failed")

    def pending(self) -> int:
        """Records queued and not yet written."""
        return self._queue.qsize()

    def _take(self, first_wait_s: float) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        try:
            rows.append(self._queue.get(timeout=first_wait_s))
        except queue.Empty:
            return rows
        while len(rows) < self.batch:
            try:
                rows.append(self._queue.get_nowait())
            except queue.Empty:
                break
        return rows

    def _write(self, rows: list[dict[str, Any]]) -> bool:
        try:
            with self.engine.begin() as connection:
                connection.execute(insert(AuditScore), rows)
        except Exception as exc:  # the database is down or refused the write: keep the rows, try again
            self._observe("write_error", 1)
            if not self._failing:
                log.error("audit log: cannot write to the database (%s); scores are still served", exc)
                self._failing = True
            return False
        if self._failing:
            log.warning("audit log: the database is writable again")
            self._failing = False
        self._observe("written", len(rows))
        return True

    def _run(self) -> None:
        rows: list[dict[str, Any]] = []
        delay = RETRY_MIN_S
        while True:
            if not rows:
                if self._closing.is_set() and self._queue.empty():
                    return
                rows = self._take(0.2)
                if not rows:
                    continue
            if self._write(rows):
                rows, delay = [], RETRY_MIN_S
                continue
            if self._closing.is_set():  # shutting down with the database away: count what is lost, stop
                self._observe("dropped", len(rows) + self._queue.qsize())
                return
            self._closing.wait(delay)
            delay = min(delay * 2, RETRY_MAX_S)

    def close(self, timeout_s: float = 5.0) -> None:
        """Write what is queued (one more try if the database is down), then stop the thread."""
        self._closing.set()
        self._thread.join(timeout_s)
