"""Content-addressed result cache: the key is a hash of (verifier@version, reference, response, options)."""

from __future__ import annotations

import hashlib
import hmac
import importlib.util
import json
import logging
import os
import re
import sys
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from proctor.contract import Score, Status

if TYPE_CHECKING:  # the redis library is imported only by a service configured to use it
    from proctor.redis_backend import SharedRedis
    from proctor.settings import Settings

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


SCORING_SETTINGS = (
    "judge_base_url",
    "judge_model",
    "embeddings_base_url",
    "embeddings_model",
    "sandbox_backend",
    "sandbox_max_memory_mb",
    "sandbox_max_cpu_s",
    "sandbox_max_files",
    "sandbox_max_disk_mb",
    "sql_databases",
    "sql_postgres",
)
"""Server settings a verdict can depend on; with proctor's version and the plugin list they name the shared
cache's namespace, so a replica configured (or built) differently never serves another's scores."""


PACKAGE_ROOT = os.path.dirname(os.path.abspath(__file__))
"""The installed proctor package, whose files name the code part of the namespace (`code_fingerprint`)."""

_SKIPPED_DIRS = frozenset({"__pycache__", ".git", ".mypy_cache", ".pytest_cache", ".ruff_cache"})
_SKIPPED_SUFFIXES = (".pyc", ".pyo", ".swp", "~")


def fingerprinted_files(root: str) -> list[str]:
    """The files under `root` that name its code: sorted relative paths, linked folders followed
    (proctor/verifiers -> ../verifiers), caches and byte code left out."""
    found: list[str] = []
    seen: set[tuple[int, int]] = set()
    for folder, dirs, files in os.walk(root, followlinks=True):
        here = os.stat(folder)
        if (here.st_dev, here.st_ino) in seen:  # a link back up the tree: walk each folder once
            dirs[:] = []
            continue
        seen.add((here.st_dev, here.st_ino))
        dirs[:] = [name for name in dirs if name not in _SKIPPED_DIRS and not name.startswith(".")]
        for name in files:
            if name.startswith(".") or name.endswith(_SKIPPED_SUFFIXES):
                continue
            path = os.path.join(folder, name)
            if os.path.isfile(path):
                found.append(os.path.relpath(path, root).replace(os.sep, "/"))
    return sorted(found)


def tree_fingerprint(root: str) -> str:
    """A hash of the relative paths and contents of `root`'s files (`fingerprinted_files`): any change to a
    module or a data file a verifier reads (a fixed reward hack) changes it, whatever the version says."""
    digest = hashlib.blake2b(digest_size=16)
    for relative in fingerprinted_files(root):
        try:
            with open(os.path.join(root, relative), "rb") as handle:
                data = handle.read()
        except OSError:  # removed or unreadable since the walk: it names no code this process runs
            continue
        digest.update(relative.encode("utf-8", "surrogateescape") + b"\0")
        digest.update(len(data).to_bytes(8, "big"))
        digest.update(data)
    return digest.hexdigest()


_fingerprints: dict[str, str] = {}
_fingerprints_lock = threading.Lock()


def code_fingerprint(root: str | None = None) -> str:
    """`tree_fingerprint` of the proctor package (or `root`), computed once per process and root."""
    root = root or PACKAGE_ROOT
    with _fingerprints_lock:  # engines built on several threads at once hash the tree once
        found = _fingerprints.get(root)
        if found is None:
            found = _fingerprints[root] = tree_fingerprint(root)
        return found


def _plugin_fingerprint(module: str) -> str:
    """The code of a plugin outside the package: its module file, or its package's folder."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return "missing"
    locations = list(spec.submodule_search_locations or [])
    if locations:
        return ",".join(code_fingerprint(os.path.abspath(location)) for location in locations)
    if spec.origin and os.path.isfile(spec.origin):
        with open(spec.origin, "rb") as handle:
            return hashlib.blake2b(handle.read(), digest_size=16).hexdigest()
    return "unknown"


def scoring_namespace(settings: Settings) -> str:
    """A short hash of proctor's code and version, the scoring-relevant settings and the plugins (their code
    too): the shared key's prefix.

    Hashes the package's files once per process (`code_fingerprint`), so call it only where a shared cache
    or single-flight is configured."""
    # The package is loaded before any of its modules; read its version without importing it from here
    # (proctor/__init__ pulls in the environments, which this layer must not depend on).
    version = getattr(sys.modules.get("proctor"), "__version__", "unknown")
    plugins = sorted(name.strip() for name in settings.plugins.split(",") if name.strip())
    inside = "proctor."  # the package's own modules are in its fingerprint already
    payload = json.dumps(
        {
            "version": version,
            # Verifiers change verdicts without bumping VERSION: the code itself names the namespace, so a
            # replica upgraded past a reward hack never serves the scores the hack was paid under.
            "code": code_fingerprint(PACKAGE_ROOT),
            "plugins": plugins,
            "plugin_code": {
                name: _plugin_fingerprint(name) for name in plugins if not name.startswith(inside)
            },
            **{name: _without_passwords(getattr(settings, name)) for name in SCORING_SETTINGS},
        },
        sort_keys=True,
        default=str,
    )
    return hashlib.blake2b(payload.encode(), digest_size=6).hexdigest()


_PASSWORD = re.compile(r"(://[^:/@\s\"]*):[^@\s\"]*@")


def _without_passwords(value: Any) -> Any:
    """A setting with the passwords of the URLs in it removed: the namespace is readable in Redis's key names,
    and a short hash over a known configuration would confirm a guessed password."""
    return _PASSWORD.sub(r"\1@", value) if isinstance(value, str) else value


_SECRET_LABEL = b"proctor shared result cache v1"
UNSIGNED = b"-"
"""The MAC field of an entry written without a secret (a replica holding a secret refuses it)."""


def cache_secret(settings: Settings) -> bytes | None:
    """The key that signs shared entries: derived from PROCTOR_CACHE_SECRET, else PROCTOR_TOKEN, else None.

    Derived (an HMAC of a fixed label) so an entry's MAC says nothing usable about the token itself."""
    material = settings.cache_secret or settings.token
    if not material:
        return None
    return hmac.new(material.encode("utf-8"), _SECRET_LABEL, hashlib.sha256).digest()


class CacheSigner:
    """Seals values other replicas will read from Redis: `<hex HMAC-SHA256 of key and value>\n<value>`.

    The MAC covers the full Redis key too, so a genuine entry copied under another key (another response,
    another namespace) fails. Without a secret entries are written unsigned and every well-formed one is
    accepted: anyone who can write to Redis can then plant scores (the service warns at start-up).
    """

    def __init__(self, secret: bytes | None):
        self._secret = secret

    @property
    def signs(self) -> bool:
        """Whether entries are signed and checked (a secret is configured)."""
        return self._secret is not None

    def _mac(self, key: str, value: bytes) -> bytes:
        assert self._secret is not None
        digest = hmac.new(self._secret, key.encode("utf-8", "surrogatepass"), hashlib.sha256)
        digest.update(b"\0")
        digest.update(value)
        return digest.hexdigest().encode("ascii")

    def seal(self, key: str, value: str) -> bytes:
        """The bytes to store at `key` for `value`."""
        data = value.encode("utf-8")
        mac = UNSIGNED if self._secret is None else self._mac(key, data)
        return mac + b"\n" + data

    def open(self, key: str, raw: bytes) -> bytes | None:
        """The value sealed at `key`, or None when it is malformed or its MAC does not verify."""
        mac, sep, data = raw.partition(b"\n")
        if not sep:
            return None
        if self._secret is None:
            return data
        if not hmac.compare_digest(mac, self._mac(key, data)):
            return None
        return data


class TieredCache:
    """The in-process cache first, then the result cache replicas share in Redis (`PROCTOR_REDIS_URL`, or
    `PROCTOR_REDIS_CACHE_URL` for a separate, evicting instance).

    `put` writes through to Redis at once (the engine calls it before the response is sent), so another
    replica sees the score as soon as this one answers. Entries live `ttl_s` in Redis, under `namespace`
    (`scoring_namespace`), sealed by `signer`: an entry whose MAC fails, or that is not an `ok` score, is
    dropped and counted (`rejected`). When Redis is down, look-ups and writes go on with the local cache
    alone; nothing is raised.
    """

    def __init__(
        self,
        local: ResultCache,
        shared: SharedRedis,
        ttl_s: int,
        *,
        signer: CacheSigner | None = None,
        namespace: str = "",
    ):
        self.local = local
        self.shared = shared
        self.ttl_ms = ttl_s * 1000
        self.signer = signer if signer is not None else CacheSigner(None)
        self.namespace = namespace
        self.rejected = 0

    def shared_key(self, key: str) -> str:
        """The Redis key of a score (under the shared prefix and this cache's namespace)."""
        return f"score:{self.namespace}:{key}" if self.namespace else "score:" + key

    def _load(self, key: str) -> Score | None:
        """The verified `ok` score in Redis for key, or None (missing, Redis down, or rejected and counted)."""
        name = self.shared_key(key)
        raw = self.shared.get(name, op="cache_get")
        if raw is None:
            return None
        score = open_score(self.signer, self.shared.key(name), raw)
        if score is None or score.status is not Status.ok:  # never written by Proctor with this secret
            self.rejected += 1
            if self.rejected == 1 or self.rejected % 1000 == 0:
                log.warning(
                    "dropped %d shared cache entries that were unsigned, badly signed or not ok "
                    "(wrong PROCTOR_CACHE_SECRET on a replica, or a foreign writer in Redis); latest %s",
                    self.rejected,
                    key,
                )
            self.shared.observer.shared_cache("rejected")
            return None
        return score

    def get(self, key: str) -> Score | None:
        """The local entry, else the shared one (then kept locally too), else None."""
        score = self.local.get(key)
        if score is not None:
            return score
        score = self._load(key)
        if score is None:
            if self.shared.available:
                self.shared.observer.shared_cache("miss")
            return None
        self.shared.observer.shared_cache("hit")
        self.local.put(key, score)
        return score

    def peek(self, key: str) -> bool:
        """Whether Redis holds a verified score for key (kept locally when it does); single-flight's poll,
        which is not a look-up to count as a hit or a miss."""
        score = self._load(key)
        if score is None:
            return False
        self.local.put(key, score)
        return True

    def put(self, key: str, score: Score) -> None:
        """Keep an `ok` score locally and in Redis (a non-ok one is refused: an outage must never stick)."""
        if score.status is not Status.ok:
            return
        self.local.put(key, score)
        # The stored copy carries no request's id or timing: those belong to the request that made it.
        stored = score.model_copy(update={"id": None, "cached": False})
        name = self.shared_key(key)
        sealed = self.signer.seal(self.shared.key(name), stored.model_dump_json())
        self.shared.set(name, sealed, self.ttl_ms, op="cache_put")


def open_score(signer: CacheSigner, full_key: str, raw: bytes) -> Score | None:
    """The Score sealed at `full_key` (the Redis key, prefix included), or None when the MAC or JSON is bad."""
    data = signer.open(full_key, raw)
    if data is None:
        return None
    try:
        return Score.model_validate_json(data)
    except ValueError:  # written by an incompatible version: a miss, to be overwritten by this one
        return None
