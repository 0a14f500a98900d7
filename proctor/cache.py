"""Content-addressed result cache: the key is a hash of (verifier@version, reference, response, options)."""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from typing import Any, Generic, Protocol, TypeVar

from proctor.contract import Score


def cache_key(qualified_verifier: str, reference: Any, response: Any, options: dict[str, Any]) -> str:
    """A stable hex digest of everything that determines a score (ids and timings excluded)."""
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
