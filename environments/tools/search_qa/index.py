"""BM25 over a corpus (rank-bm25's `BM25Okapi`), with snippets: what the `search` tool and the Search-R1
retriever route run.

Tokens are runs of ASCII letters and digits, lower-cased, less a short list of English stop words; the same
tokeniser reads documents and queries, and a query's repeated words count once. rank-bm25 computes the model
(term frequencies, document lengths, idf with its floor for words in more than half the documents, k1 = 1.5,
b = 0.75); its `get_scores` walks every document in Python for each query word (about 0.3 ms a word here), so
the index turns the same formula into one posting list per word (the documents holding it and their term
weights) once, and a query adds up its words' lists with numpy: the same scores (a test compares them with
`get_scores`) for a fraction of the time. Ties in score keep corpus order (a stable sort), so a query always
returns the same documents in the same order. A query is cut to MAX_QUERY_CHARS and MAX_QUERY_TOKENS before it
is scored, so its cost is bounded whatever the caller sends.

Indexes are built once per process and kept while anything holds them: the bundled seed's always
(PINNED_SEEDS), the CACHED_INDEXES most recently used others, and every index an open session holds (its state
keeps a reference, `acquire_index`), so sessions on many seeds never make one another's index be dropped and
rebuilt between steps. At most MAX_LIVE_SEEDS distinct seeds are alive at once: a session on one more seed is
refused (`IndexesBusy`, a 429 naming `task.corpus_seed`) rather than evicting an index still searched.
"""

from __future__ import annotations

import re
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
from rank_bm25 import BM25Okapi

from proctor.environments.tools.search_qa.corpus import Corpus, Document, corpus

MAX_QUERY_CHARS = 1_000
"""Longer queries are cut to this many characters before tokenising (a query is a few words)."""
MAX_QUERY_TOKENS = 64
"""At most this many distinct query tokens are scored (each costs one pass over the corpus)."""
MAX_TOP_K = 100

STOP_WORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "did",
        "do",
        "does",
        "for",
        "from",
        "had",
        "has",
        "have",
        "he",
        "her",
        "his",
        "in",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "she",
        "that",
        "the",
        "their",
        "them",
        "they",
        "this",
        "to",
        "was",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "whom",
        "whose",
        "why",
        "with",
    ]
)
_TOKEN = re.compile(r"[a-z0-9]+")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def tokenize(text: str) -> list[str]:
    """Lower-cased runs of letters and digits, stop words dropped."""
    return [token for token in _TOKEN.findall(text.lower()) if token not in STOP_WORDS]


@dataclass(frozen=True)
class Hit:
    """One search result: the document, its BM25 score and its rank (1-based)."""

    document: Document
    score: float
    rank: int


class SearchIndex:
    """BM25 over one corpus's documents (title and text)."""

    def __init__(self, source: Corpus):
        self.corpus = source
        self.documents = source.documents
        self.bm25 = BM25Okapi([tokenize(f"{d.title} {d.text}") for d in self.documents])
        self._postings = _postings(self.bm25)

    def search(self, query: str, k: int) -> list[Hit]:
        """The k best documents for `query` (fewer when fewer documents share a word with it)."""
        k = max(1, min(k, MAX_TOP_K))
        tokens = list(dict.fromkeys(tokenize(query[:MAX_QUERY_CHARS])))[:MAX_QUERY_TOKENS]
        if not tokens:
            return []
        scores = np.zeros(len(self.documents))
        for token in tokens:
            posting = self._postings.get(token)
            if posting is not None:
                scores[posting[0]] += posting[1]
        order = np.argsort(-scores, kind="stable")[:k]
        return [
            Hit(self.documents[int(i)], float(scores[int(i)]), rank)
            for rank, i in enumerate(order, start=1)
            if scores[int(i)] > 0.0
        ]


def _postings(bm25: BM25Okapi) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """For each word: the documents holding it and its BM25 weight in each (rank-bm25's `get_scores` term)."""
    k1, b, avgdl = bm25.k1, bm25.b, bm25.avgdl
    documents: dict[str, list[int]] = {}
    weights: dict[str, list[float]] = {}
    for index, (frequencies, length) in enumerate(zip(bm25.doc_freqs, bm25.doc_len, strict=True)):
        norm = k1 * (1 - b + b * length / avgdl)
        for word, frequency in frequencies.items():
            documents.setdefault(word, []).append(index)
            weights.setdefault(word, []).append(bm25.idf[word] * frequency * (k1 + 1) / (frequency + norm))
    return {
        word: (np.array(documents[word], dtype=np.int64), np.array(weights[word], dtype=np.float64))
        for word in documents
    }


def snippet(document: Document, query: str, chars: int) -> str:
    """The document's sentences that share the most words with the query, in document order, cut to `chars`."""
    wanted = set(tokenize(query[:MAX_QUERY_CHARS]))
    sentences = _SENTENCE.split(document.text)
    ranked = sorted(range(len(sentences)), key=lambda i: (-len(wanted & set(tokenize(sentences[i]))), i))
    chosen: list[int] = []
    used = 0
    for i in ranked:
        if used + len(sentences[i]) + 1 > chars and chosen:
            break
        chosen.append(i)
        used += len(sentences[i]) + 1
    text = " ".join(sentences[i] for i in sorted(chosen))
    return text if len(text) <= chars else text[: max(0, chars - 3)].rstrip() + "..."


PINNED_SEEDS = frozenset({0})
"""Seeds whose index is never dropped: the bundled corpus (bundled tasks, the Search-R1 route)."""
CACHED_INDEXES = 4
"""Indexes of other seeds kept after their last user is gone, least recently used dropped first."""
MAX_LIVE_SEEDS = 16
"""At most this many distinct seeds have an index alive at once (held by an open session, cached or being
built; the pinned ones included): about 10 MB each. A session on one more seed is refused (`IndexesBusy`)
rather than evicting an index a session still searches."""


class IndexesBusy(RuntimeError):
    """Every one of the MAX_LIVE_SEEDS slots is held by an open session: a new seed would have to wait."""


_indexes: OrderedDict[int, SearchIndex] = OrderedDict()
"""The cache: pinned seeds and the CACHED_INDEXES most recently used others (strong references)."""
_live: weakref.WeakValueDictionary[int, SearchIndex] = weakref.WeakValueDictionary()
"""Every index still referenced anywhere (the cache, a session's state): an entry goes when its last holder
lets go, so a session that ends frees its seed's slot without any bookkeeping."""
_building: dict[int, int] = {}
"""Seeds whose index a thread is building (how many threads), counted against MAX_LIVE_SEEDS."""
_lock = threading.Lock()


def _find(seed: int) -> SearchIndex | None:
    """The live index of `seed`, back in the cache as its most recent entry; None when none is alive. Under
    `_lock`."""
    found = _indexes.get(seed)
    if found is None:
        found = _live.get(seed)
        if found is None:
            return None
        _indexes[seed] = found
    _indexes.move_to_end(seed)
    _trim()
    return found


def _trim() -> None:
    """Drop the least recently used unpinned cache entries beyond CACHED_INDEXES (an index a session holds
    stays alive in `_live`). Under `_lock`."""
    unpinned = [seed for seed in _indexes if seed not in PINNED_SEEDS]
    for seed in unpinned[: max(0, len(unpinned) - CACHED_INDEXES)]:
        del _indexes[seed]


def _live_seeds() -> set[int]:
    """The seeds that hold a slot: an index alive or being built. Under `_lock`."""
    return set(_live.keys()) | set(_building)


def _make_room() -> bool:
    """Free a slot for a new seed by dropping cached indexes no session holds, least recently used first;
    whether there is one now. Under `_lock`."""
    for seed in [seed for seed in _indexes if seed not in PINNED_SEEDS]:
        if len(_live_seeds()) < MAX_LIVE_SEEDS:
            break
        del _indexes[seed]  # the index dies here unless a session still holds it
    return len(_live_seeds()) < MAX_LIVE_SEEDS


def cached_index(seed: int) -> SearchIndex | None:
    """The index of `seed` when it is alive in this process, else None (never builds)."""
    with _lock:
        return _find(seed)


def _build(seed: int, limited: bool) -> SearchIndex:
    with _lock:
        found = _find(seed)
        if found is not None:
            return found
        if limited and seed not in PINNED_SEEDS and seed not in _building and not _make_room():
            raise IndexesBusy(
                f"open sessions already search {MAX_LIVE_SEEDS} different corpora, the most one process keeps; "
                "retry once some of those sessions have ended, or use a corpus_seed already in use"
            )
        _building[seed] = _building.get(seed, 0) + 1
    try:
        built = SearchIndex(corpus(seed))
    finally:
        with _lock:
            _building[seed] -= 1
            if not _building[seed]:
                del _building[seed]
    with _lock:
        found = _find(seed)
        if found is not None:
            return found
        _indexes[seed] = _live[seed] = built
        _trim()
        return built


def search_index(seed: int = 0) -> SearchIndex:
    """The BM25 index of the corpus of `seed`, built once per process (about 0.15 s with the corpus) and kept
    while anything holds it: the pinned seeds always, the CACHED_INDEXES most recently used others, and any a
    session holds. Built outside the lock, so a search on a built index never waits for another seed's build
    (two threads may build the same seed at once; the first one stored is kept)."""
    return _build(seed, limited=False)


def acquire_index(seed: int) -> SearchIndex:
    """The index of `seed` for a session to hold (its state keeps the reference, so the index lives as long as
    the session, whatever the cache drops). Builds it when no index of `seed` is alive; raises `IndexesBusy`
    when that would make more than MAX_LIVE_SEEDS seeds alive at once."""
    return _build(seed, limited=True)
