"""What every trainer adapter shares: where to score (HTTP or in-process), cached clients, and the failure policy."""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import threading
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

from proctor.client import AsyncClient, Client, ProctorRequestError
from proctor.contract import ItemError, Score, Status
from proctor.policy import FAILURE_POLICIES, FailurePolicy, reward_or_policy

log = logging.getLogger("proctor.adapters")

Result = Score | ItemError


def check_policy(policy: str) -> FailurePolicy:
    """Validate an on_failure policy name."""
    if policy not in FAILURE_POLICIES:
        raise ValueError(f"on_failure must be one of {', '.join(FAILURE_POLICIES)}; got {policy!r}")
    return policy  # type: ignore[return-value]


def server_url_from_env(server_url: str | None) -> str | None:
    """The explicit server URL, else $PROCTOR_URL, else None (score in-process)."""
    return server_url or os.environ.get("PROCTOR_URL") or None


def plain(value: Any) -> Any:
    """Turn numpy scalars and arrays (as trainers' dataframes hand them over) into JSON-ready Python values."""
    if isinstance(value, Mapping):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    if isinstance(value, str):
        return str(value)  # numpy's str_ is a str subclass; hand on the plain type
    if isinstance(value, (bytes, int, float, bool)) or value is None:
        return value
    tolist = getattr(value, "tolist", None)  # numpy arrays and numpy scalars both have it
    if callable(tolist):
        return plain(tolist())
    return value


def completion_text(completion: Any) -> str:
    """A completion as text: a string as is, or the last assistant message's content of a conversation."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Mapping):
        completion = [completion]
    if isinstance(completion, Sequence):
        for message in reversed(completion):
            if isinstance(message, Mapping) and message.get("role", "assistant") == "assistant":
                return _content_text(message.get("content"))
        return ""
    raise TypeError(
        f"a completion must be a string or a list of chat messages, got {type(completion).__name__}"
    )


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(
        str(part.get("text", ""))
        for part in content
        if isinstance(part, Mapping) and part.get("type", "text") == "text"
    )


def outcome(result: Result, policy: FailurePolicy, value: float) -> float | None:
    """The reward for one result: a true verdict's reward, or what the policy says for a failure or a rejection."""
    if isinstance(result, Score):
        return reward_or_policy(result, policy, value)
    # An unknown verifier is a configuration error: every item would take the failure path, so stop.
    if policy == "raise" or result.error.status == 404:
        raise ProctorRequestError(result.error.status, result.error.message, result.error.field)
    return None if policy == "none" else value


def failed(result: Result) -> bool:
    """Whether a result is anything but a true verdict."""
    return not (isinstance(result, Score) and result.status is Status.ok)


def warn_failures(where: str, results: Sequence[Result]) -> None:
    """Log one line per batch that had failed or rejected items, so a policy never hides them silently."""
    bad = [result for result in results if failed(result)]
    if not bad:
        return
    first = bad[0]
    why = (
        f"status={first.status.value} reason={first.reason}"
        if isinstance(first, Score)
        else f"rejected {first.error.status}: {first.error.message}"
    )
    log.warning("%s: %d of %d items were not scored (first: %s)", where, len(bad), len(results), why)


class Clients:
    """Clients kept alive across calls: one sync Client per (url, token), one AsyncClient per event loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sync: dict[tuple[str, str | None], Client] = {}
        # httpx's async pool belongs to the loop that opened it; trainers keep one loop alive, tests make many.
        self._async: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Any, AsyncClient]] = (
            weakref.WeakKeyDictionary()
        )

    def sync(self, url: str, token: str | None) -> Client:
        """The shared Client for url."""
        with self._lock:
            client = self._sync.get((url, token))
            if client is None:
                client = self._sync[(url, token)] = Client(url, token=token)
            return client

    def asynchronous(self, url: str, token: str | None) -> AsyncClient:
        """The AsyncClient for url on the running event loop."""
        loop = asyncio.get_running_loop()
        with self._lock:
            per_loop = self._async.setdefault(loop, {})
            client = per_loop.get((url, token))
            if client is None:
                client = per_loop[(url, token)] = AsyncClient(url, token=token)
            return client

    def close(self) -> None:
        """Close the sync clients (async ones close with their loop)."""
        with self._lock:
            for client in self._sync.values():
                client.close()
            self._sync.clear()


CLIENTS = Clients()
atexit.register(CLIENTS.close)


def score_many(requests: list[dict[str, Any]], server_url: str | None, token: str | None) -> list[Result]:
    """Score requests through the service at server_url, or in this process when it is None."""
    if server_url is None:
        import proctor

        return proctor.score_batch(requests)
    return CLIENTS.sync(server_url, token).score_batch(requests)


async def score_many_async(
    requests: list[dict[str, Any]], server_url: str | None, token: str | None
) -> list[Result]:
    """Like score_many, without blocking the event loop."""
    if server_url is None:
        import proctor

        return await asyncio.to_thread(proctor.score_batch, requests)
    return await CLIENTS.asynchronous(server_url, token).score_batch(requests)
