"""Content-addressed result cache: the key is a hash of (verifier@version, reference, response, options)."""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from proctor.contract import Score, Status

if TYPE_CHECKING:  # the redis library is imported only by a service configured to use it
    from proctor.redis_backend import SharedRedis

log = logging.getLogger(__name__)


def cache_key(qualified_verifier: str, reference: Any, response: Any, options: dict[str, Any]) -> str:
    """A stable hex digest of everything that determines a score (the request's id excluded)."""
    payload = json.dumps(
        [qualified_verifier, reference, response, options],
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        default=str,
    )
    return hashlib.blake2b(payload.encode("utf-8", "surrogatepass"), digest_size=20).hexdigest()


class ResultCache(Protocol):
    """Where scores are kept by key; the in-process LRU today, Redis when several replicas share one."""

    def get(self, key: str) -> Score | None:
        """The cached score for key, or None."""
        ...

    def put(self, key: str, score: Score) -> None:
        """Remember a score; callers only store `ok` scores."""
        ...


V = TypeVar("V")


class LRUCache(Generic[V]):
    """A thread-safe in-process LRU (scores in the engine, judge replies in the judge client)."""

    def __init__(self, max_entries: int):
        self.max_entries = max_entries
        self._entries: OrderedDict[str, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> V | None:
        """The cached value for key, or None; a hit becomes the most recently used."""
        with self._lock:
            value = self._entries.get(key)
            if value is None:
                return None
            self._entries.move_to_end(key)
            return value

    def put(self, key: str, value: V) -> None:
        """Store a value, evicting the least recently used entry past the size limit."""
        if self.max_entries <= 0:
            return
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        """Forget everything."""
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


class NullCache:
    """A cache that keeps nothing (cache_size = 0)."""

    def get(self, key: str) -> Score | None:
        """Always a miss."""
        return None

    def put(self, key: str, score: Score) -> None:
        """Keeps nothing."""


class TieredCache:
    """The in-process cache first, then the result cache replicas share in Redis (`PROCTOR_REDIS_URL`).

    `put` writes through to Redis at once (the engine calls it before the response is sent), so another
    replica sees the score as soon as this one answers. Entries live `ttl_s` in Redis. When Redis is down,
    look-ups and writes go on with the local cache alone; nothing is raised.
    """

    def __init__(self, local: ResultCache, shared: SharedRedis, ttl_s: int):
        self.local = local
        self.shared = shared
        self.ttl_ms = ttl_s * 1000

    @staticmethod
    def shared_key(key: str) -> str:
        """The Redis key of a score (under the shared prefix)."""
        return "score:" + key

    def get(self, key: str) -> Score | None:
        """The local entry, else the shared one (then kept locally too), else None."""
        score = self.local.get(key)
        if score is not None:
            return score
        raw = self.shared.get(self.shared_key(key), op="cache_get")
        if raw is None:
            if self.shared.available:
                self.shared.observer.shared_cache("miss")
            return None
        try:
            score = Score.model_validate_json(raw)
        except ValueError:  # written by an incompatible version: a miss, to be overwritten by this one
            log.warning("unreadable shared cache entry %s; ignoring it", key)
            self.shared.observer.shared_cache("miss")
            return None
        if score.status is not Status.ok:  # never written by Proctor; a foreign writer's entry is not trusted
            self.shared.observer.shared_cache("miss")
            return None
        self.shared.observer.shared_cache("hit")
        self.local.put(key, score)
        return score

    def put(self, key: str, score: Score) -> None:
        """Keep an `ok` score locally and in Redis (a non-ok one is refused: an outage must never stick)."""
        if score.status is not Status.ok:
            return
        self.local.put(key, score)
        # The stored copy carries no request's id or timing: those belong to the request that made it.
        stored = score.model_copy(update={"id": None, "cached": False})
        self.shared.set(self.shared_key(key), stored.model_dump_json(), self.ttl_ms, op="cache_put")
