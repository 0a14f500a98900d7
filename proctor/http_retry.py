"""Retrying outbound HTTP calls: which statuses to retry, how long to wait (Retry-After, else jittered
exponential backoff), and what to log about a failed reply. The judge client, the embeddings call and the
Proctor client all use these, so a Retry-After header means the same thing everywhere."""

from __future__ import annotations

import email.utils
import logging
import math
import random
import time
from datetime import datetime, timezone

import httpx

BACKOFF_BASE_S = 0.25
BACKOFF_CAP_S = 8.0
ERROR_EXCERPT = 300  # characters of a failed reply's body written to the log (never into a Score)

log = logging.getLogger("proctor.http")


def retryable(status_code: int) -> bool:
    """Whether an HTTP error status may succeed when asked again: 429 and 5xx (not 400, 401, 404 ...)."""
    return status_code == 429 or status_code >= 500


def parse_retry_after(value: str | None, cap: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or an HTTP date, read as UTC when it names no
    zone), never negative and at most `cap`; None when absent or invalid."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        seconds = (when - datetime.now(timezone.utc)).total_seconds()
    if math.isnan(seconds):
        return None
    seconds = max(seconds, 0.0)
    return seconds if cap is None else min(seconds, cap)


def backoff_delay(attempt: int, base: float = BACKOFF_BASE_S, cap: float = BACKOFF_CAP_S) -> float:
    """Exponential backoff with jitter before retry `attempt` (1 first): between half and all of
    base * 2^(attempt-1), capped; the jitter keeps many callers from retrying in step."""
    ceiling = min(cap, base * 2 ** (attempt - 1))
    return ceiling * random.uniform(0.5, 1.0)


def retry_delay(
    attempt: int,
    retry_after: float | None,
    give_up_at: float,
    base: float = BACKOFF_BASE_S,
    cap: float = BACKOFF_CAP_S,
) -> float | None:
    """Seconds to wait before the next attempt (Retry-After, else backoff); None when it would end past
    give_up_at (a time.monotonic() value)."""
    delay = backoff_delay(attempt, base, cap) if retry_after is None else retry_after
    return None if time.monotonic() + delay > give_up_at else delay


def log_body(url: str, response: httpx.Response, logger: logging.Logger = log) -> None:
    """Write the start of a failed reply's body to the operator's log (it never goes into a Score)."""
    try:
        excerpt = response.text[:ERROR_EXCERPT]
    except Exception:  # noqa: BLE001 - an undecodable body is still a failure to log
        excerpt = "<undecodable body>"
    logger.warning("%s answered HTTP %s: %r", url, response.status_code, excerpt)
