"""Content-addressed result cache: the key is a hash of (verifier@version, reference, response, options)."""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from typing import Any, Protocol

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


class LRUCache:
    """A thread-safe in-process LRU of scores."""

    def __init__(self, max_entries: int):
        self.max_entries = max_entries
        self._entries: OrderedDict[str, Score] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> Score | None:
        """The cached score for key, or None; a hit becomes the most recently used."""
        with self._lock:
            score = self._entries.get(key)
            if score is None:
                return None
            self._entries.move_to_end(key)
            return score

    def put(self, key: str, score: Score) -> None:
        """Store a score, evicting the least recently used entry past the size limit."""
        if self.max_entries <= 0:
            return
        with self._lock:
            self._entries[key] = score
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


class NullCache:
    """A cache that keeps nothing (cache_size = 0)."""

    def get(self, key: str) -> Score | None:
        """Always a miss."""
        return None

    def put(self, key: str, score: Score) -> None:
        """Keeps nothing."""
