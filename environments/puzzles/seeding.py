"""Seeds and splits that are the same in every process: sha256 of canonical JSON, never hash() or set order.

An item's random stream comes from sha256(family, version, config, split, seed, index, attempt), so
neighbouring seeds share nothing (unlike `Random(seed + i)`) and a config change gives a new stream. An
item's split is decided by a hash of the puzzle itself (its content key): the generator draws attempts
until the puzzle's content hash falls in the asked split, so train and test can never hold the same puzzle,
however small the family's space of puzzles is.
"""

from __future__ import annotations

import hashlib
import json
import random
from typing import Any

TEST_BUCKETS = 1
SPLIT_BUCKETS = 4
"""A puzzle is in `test` when sha256(key) mod SPLIT_BUCKETS < TEST_BUCKETS (a quarter of the space)."""


def canonical(value: Any) -> str:
    """Canonical JSON (sorted keys, no spaces, ASCII): the same bytes in every process and Python build."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def digest(value: Any) -> str:
    """Hex sha256 of a value's canonical JSON."""
    return hashlib.sha256(canonical(value).encode("ascii")).hexdigest()


def item_seed(
    family: str, version: str, config: dict[str, Any], split: str, seed: int, index: int, attempt: int = 0
) -> int:
    """The 128-bit seed of one generation attempt, a hash of everything that names the item."""
    key = {
        "family": family,
        "version": version,
        "config": config,
        "split": split,
        "seed": seed,
        "index": index,
        "attempt": attempt,
    }
    return int(digest(key)[:32], 16)


def item_rng(
    family: str, version: str, config: dict[str, Any], split: str, seed: int, index: int, attempt: int = 0
) -> random.Random:
    """A random.Random seeded by `item_seed` (int seeding is deterministic across processes)."""
    return random.Random(item_seed(family, version, config, split, seed, index, attempt))


def content_split(key: str) -> str:
    """The split a puzzle belongs to, from the hash of its content key."""
    bucket = int(hashlib.sha256(("split:" + key).encode("utf-8")).hexdigest()[:16], 16) % SPLIT_BUCKETS
    return "test" if bucket < TEST_BUCKETS else "train"


def puzzle_id(key: str) -> str:
    """A short stable id of a puzzle's content (first 16 hex digits of sha256 of its key)."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]
