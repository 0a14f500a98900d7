"""What replicas may trust in the Redis they share (issue 20 red team, findings 2, 3, 4 and 15; the locks of
finding 9 are in tests/test_redis_locks.py).

Against private redis-servers: shared scores are signed (HMAC-SHA256 over key and value) and a planted, copied
or tampered entry is dropped and counted; the cache may live in a Redis of its own; the shared key is
namespaced by version and scoring settings; a failing expensive item run by one engine is returned to the
duplicates waiting on it (in its batch and on another engine) instead of being run again, and waiters leave
the batch's window to runnable items. Last, the compose file gives each Redis what it holds: a password,
persistence for sessions, eviction for the cache.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import proctor
import proctor.cache as cache_module
import proctor.engine as engine_module
from proctor.api.metrics import Metrics
from proctor.api.server import check_sandbox
from proctor.cache import (
    SCORING_SETTINGS,
    CacheSigner,
    LRUCache,
    TieredCache,
    cache_secret,
    scoring_namespace,
)
from proctor.contract import Score, Status
from proctor.engine import Engine
from proctor.redis_backend import SharedRedis, disconnect
from proctor.settings import Settings
from proctor.worker_pool import WorkerPool
from tests.conftest import free_port, server_env
from tests.redis_helpers import RedisServer, metric_value, private_redis

REPO = Path(__file__).resolve().parents[1]
SECRET = "replicas-share-this"
TASK_REF = {"seed": 4, "index": 0, "split": "train", "level": "hard"}


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A private redis-server (killed after the test)."""
    yield from private_redis(tmp_path)


class Recorder:
    """A RedisObserver that remembers what it heard."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def redis_state(self, up: bool) -> None:
        self.events.append(("state", up))

    def redis_error(self, op: str) -> None:
        self.events.append(("error", op))

    def shared_cache(self, result: str) -> None:
        self.events.append(("cache", result))

    def single_flight(self, outcome: str) -> None:
        self.events.append(("flight", outcome))

    def of(self, kind: str) -> list[Any]:
        return [value for event, value in self.events if event == kind]


def ok_score(reward: float = 1.0) -> Score:
    return Score(verifier="text.match@1", status=Status.ok, reward=reward, correct=reward == 1.0, reason="x")


def tiered(url: str, secret: str | None, namespace: str = "ns") -> TieredCache:
    settings = Settings(cache_secret=secret)
    return TieredCache(
        LRUCache(100),
        SharedRedis(url),
        ttl_s=60,
        signer=CacheSigner(cache_secret(settings)),
        namespace=namespace,
    )


# -- signed entries (finding 2) ------------------------------------------------------------------------------


def test_only_entries_signed_with_the_shared_secret_are_served(redis_server: RedisServer):
    writer, reader = tiered(redis_server.url, SECRET), tiered(redis_server.url, SECRET)
    stranger = tiered(redis_server.url, "another-secret")
    recorder = Recorder()
    reader.shared.observer = recorder
    client = redis_server.client()
    try:
        writer.put("right", ok_score(1.0))
        got = reader.get("right")
        assert got is not None and got.reward == 1.0  # same secret: shared
        assert stranger.get("right") is None  # another secret: dropped

        full = writer.shared.key(writer.shared_key("right"))
        genuine = client.get(full)
        assert genuine is not None
        # The whole class of forgery: planted without a MAC, a genuine entry copied under another item's key,
        # a genuine entry with its reward changed, a MAC with nothing after it.
        planted = ok_score(1.0).model_dump_json().encode()
        client.set(writer.shared.key(writer.shared_key("planted")), planted)
        client.set(writer.shared.key(writer.shared_key("copied")), genuine)
        mac, _, body = genuine.partition(b"\n")
        tampered = mac + b"\n" + body.replace(b'"reward":1.0', b'"reward":0.9')
        assert tampered != genuine
        client.set(writer.shared.key(writer.shared_key("tampered")), tampered)
        client.set(writer.shared.key(writer.shared_key("bare")), mac)
        for name in ("planted", "copied", "tampered", "bare"):
            assert reader.get(name) is None, name
            assert reader.local.get(name) is None, name
        assert recorder.of("cache") == ["hit"] + ["rejected", "miss"] * 4
    finally:
        for cache in (writer, reader, stranger):
            cache.shared.close()


def test_the_secret_falls_back_to_the_token_and_without_either_entries_are_unsigned():
    from_token = cache_secret(Settings(token="t0ken"))
    assert from_token is not None and b"t0ken" not in from_token  # derived, never the token itself
    assert cache_secret(Settings(token="t0ken", cache_secret="s")) == cache_secret(Settings(cache_secret="s"))
    assert cache_secret(Settings(token="t0ken", cache_secret="s")) != from_token
    assert cache_secret(Settings()) is None
    unsigned = CacheSigner(None)
    assert not unsigned.signs
    sealed = unsigned.seal("proctor:score:k", '{"a":1}')
    assert sealed.startswith(b"-\n") and unsigned.open("proctor:score:k", sealed) == b'{"a":1}'
    assert CacheSigner(from_token).open("proctor:score:k", sealed) is None  # a signing replica refuses it


def test_an_engine_drops_a_planted_reward_counts_it_and_warns_when_unsigned(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
):
    """End to end: a wrong answer with a planted `ok` 1.0 under its exact key is scored, not served."""
    metrics = Metrics()
    engine = Engine(Settings(redis_url=redis_server.url, cache_secret=SECRET))
    try:
        assert engine.shared is not None and isinstance(engine.cache, TieredCache)
        engine.shared.observer = metrics
        item = engine.prepare({"verifier": "text.match", "response": "Answer: 5", "reference": "4"})
        name = engine.cache.shared_key(item.key)
        forged = CacheSigner(None).seal(engine.shared.key(name), ok_score(1.0).model_dump_json())
        redis_server.client().set(engine.shared.key(name), forged)
        result = engine.score_prepared(item)
        assert result.status is Status.ok and result.reward == 0.0 and not result.cached
        text = metrics.render()[0].decode()
        assert metric_value(text, "proctor_shared_cache_total", result="rejected") == 1
    finally:
        engine.close()
        disconnect(redis_server.url)

    engine_module._warned_unsigned = False
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="proctor.engine"):
        unsigned = Engine(Settings(redis_url=redis_server.url))
        Engine(Settings(redis_url=redis_server.url)).close()
    try:
        warnings = [r for r in caplog.records if "cache is unsigned" in r.getMessage()]
        assert len(warnings) == 1  # once per process
        assert isinstance(unsigned.cache, TieredCache) and not unsigned.cache.signer.signs
    finally:
        unsigned.close()
        disconnect(redis_server.url)


def test_the_cache_can_live_in_a_redis_of_its_own(tmp_path: Path):
    """PROCTOR_REDIS_CACHE_URL: scores go to the cache instance, locks stay on PROCTOR_REDIS_URL, and the
    cache instance's events reach the service's metrics."""
    sessions_dir, cache_dir = tmp_path / "sessions", tmp_path / "cache"
    sessions_dir.mkdir()
    cache_dir.mkdir()
    main_servers, cache_servers = private_redis(sessions_dir), private_redis(cache_dir)
    main, cache = next(main_servers), next(cache_servers)
    settings = Settings(redis_url=main.url, redis_cache_url=cache.url, cache_secret=SECRET, pool_workers=1)
    engine = Engine(settings)
    try:
        assert engine.shared is not None and isinstance(engine.cache, TieredCache)
        assert engine.cache.shared is not engine.shared and engine.cache.shared.url == cache.url
        recorder = Recorder()
        engine.shared.observer = recorder
        item = engine.prepare({"verifier": "text.match", "response": "Answer: 4", "reference": "4"})
        assert engine.score_prepared(item).reward == 1.0
        name = engine.cache.shared_key(item.key)
        assert cache.client().exists(engine.shared.key(name))
        assert not main.client().exists(engine.shared.key(name))
        assert recorder.of("cache") == ["miss"]  # counted through the main client's observer
        cache.client().set(engine.shared.key(name), b"-\n" + ok_score(0.0).model_dump_json().encode())
        engine.cache.local.clear()  # type: ignore[attr-defined]
        assert engine.score_prepared(item).reward == 1.0
        assert recorder.of("cache") == ["miss", "rejected", "miss"]
    finally:
        engine.close()
        disconnect(main.url)
        disconnect(cache.url)
        for servers in (main_servers, cache_servers):
            with contextlib.suppress(StopIteration):
                next(servers)


# -- the namespace (finding 3) ---------------------------------------------------------------------------


def test_version_plugins_and_every_scoring_setting_change_the_namespace(monkeypatch: pytest.MonkeyPatch):
    base = Settings(plugins="tests.plugins.slow,proctor.verifiers.code")
    namespace = scoring_namespace(base)
    assert scoring_namespace(Settings(plugins=" proctor.verifiers.code , tests.plugins.slow")) == namespace
    assert scoring_namespace(base.model_copy(update={"port": 9999, "cache_size": 5})) == namespace
    changed = {
        "judge_base_url": "http://judge:8001/v1",
        "judge_model": "judge-2",
        "embeddings_base_url": "http://emb:8002/v1",
        "embeddings_model": "emb-2",
        "sandbox_backend": "docker",
        "sandbox_max_memory_mb": 77,
        "sandbox_max_cpu_s": 3.5,
        "sandbox_max_files": 99,
        "sandbox_max_disk_mb": 9,
        "sql_databases": "/elsewhere",
        "sql_postgres": '{"x": "postgresql://h/db"}',
    }
    assert set(changed) == set(SCORING_SETTINGS)
    seen = {namespace}
    for field, value in changed.items():
        other = scoring_namespace(base.model_copy(update={field: value}))
        assert other not in seen, field
        seen.add(other)
    assert scoring_namespace(base.model_copy(update={"plugins": "tests.plugins.slow"})) not in seen
    # A password is no part of it (the namespace shows in Redis's key names): a rotated one changes nothing.
    dsn = '{"x": "postgresql://ro:%s@h/db"}'
    with_password = scoring_namespace(base.model_copy(update={"sql_postgres": dsn % "hunter2"}))
    assert with_password == scoring_namespace(base.model_copy(update={"sql_postgres": dsn % "rotated"}))
    monkeypatch.setattr(proctor, "__version__", "99.0.0")
    assert scoring_namespace(base) not in seen


def fake_package(root: Path, verifier_source: str) -> Path:
    """A package laid out as proctor is: its own modules, and a folder linked in from the top level."""
    (root / "verifiers").mkdir(parents=True)
    (root / "verifiers" / "judge.py").write_text(verifier_source)
    (root / "verifiers" / "answers.jsonl").write_text('{"a": 1}\n')
    package = root / "proctor"
    package.mkdir()
    (package / "__init__.py").write_text('__version__ = "0.1.0"\n')
    (package / "verifiers").symlink_to("../verifiers")
    return package


def test_a_changed_source_file_under_the_same_version_changes_the_namespace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Verifiers change verdicts without bumping VERSION: the package's files name the namespace, linked
    folders and the data files in them included, byte code and caches not."""
    fixed = fake_package(tmp_path / "fixed", "def score(r):\n    return r == 'right'\n")
    hackable = fake_package(tmp_path / "hackable", "def score(r):\n    return 'right' in r\n")
    assert cache_module.fingerprinted_files(str(fixed)) == [
        "__init__.py",
        "verifiers/answers.jsonl",
        "verifiers/judge.py",
    ]
    settings = Settings(plugins="tests.plugins.slow")
    namespaces = {}
    for name, package in (("fixed", fixed), ("hackable", hackable)):
        monkeypatch.setattr(cache_module, "PACKAGE_ROOT", str(package))
        namespaces[name] = scoring_namespace(settings)
    assert namespaces["fixed"] != namespaces["hackable"]
    (fixed / "__pycache__").mkdir()
    (fixed / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0" * 16)
    (fixed.parent / "verifiers" / "__pycache__").mkdir()
    (fixed.parent / "verifiers" / "__pycache__" / "judge.pyc").write_bytes(b"\1")
    assert cache_module.tree_fingerprint(str(fixed)) == cache_module.code_fingerprint(str(fixed))
    (fixed.parent / "verifiers" / "answers.jsonl").write_text('{"a": 2}\n')  # a data file a verifier reads
    assert cache_module.tree_fingerprint(str(fixed)) != cache_module.code_fingerprint(str(fixed))
    # The real package: the linked folders are followed, to the verifiers' modules and the datasets.
    files = cache_module.fingerprinted_files(str(Path(proctor.__file__).parent))
    assert "cache.py" in files and "verifiers/verilog/verifier.py" in files and "api/server.py" in files
    assert any(name.startswith("datasets/") and name.endswith(".jsonl") for name in files)
    assert not any("__pycache__" in name or name.endswith(".pyc") for name in files)


def test_a_judge_model_change_or_an_upgrade_serves_no_stale_score(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    request = {"verifier": "text.match", "response": "Answer: 4", "reference": "4"}

    def score_once(**overrides: Any) -> Score:
        engine = Engine(Settings(redis_url=redis_server.url, cache_secret=SECRET, **overrides))
        try:
            return engine.score(request)
        finally:
            engine.close()

    try:
        assert not score_once(judge_model="m1").cached
        assert score_once(judge_model="m1").cached  # same configuration: shared (and nothing local carried)
        assert not score_once(judge_model="m2").cached
        # New code under the old version (a verifier fixed without a VERSION bump): nothing stale is served.
        with monkeypatch.context() as patched:
            patched.setattr(cache_module, "PACKAGE_ROOT", str(fake_package(tmp_path, "fixed = True\n")))
            assert not score_once(judge_model="m1").cached
            assert score_once(judge_model="m1").cached
        monkeypatch.setattr(proctor, "__version__", "99.0.0")
        assert not score_once(judge_model="m1").cached
    finally:
        disconnect(redis_server.url)


# -- single-flight of failing duplicates (finding 4) -------------------------------------------------------


@pytest.fixture(scope="module")
def pool() -> Iterator[WorkerPool]:
    """One worker pool for this module's engines (each engine would start its own, seconds each on CI)."""
    made = WorkerPool(1, plugins="tests.plugins.slow")
    yield made
    made.close()


def engine_on(url: str, pool: WorkerPool, **settings: Any) -> Engine:
    """An engine ("a replica") scoring through `pool`; the caller never closes it (that would close the pool)."""
    return Engine(Settings(redis_url=url, plugins="tests.plugins.slow", **settings), pool=pool)


def submitted(pool: WorkerPool) -> int:
    return pool.stats()["submitted"]


def sleeper() -> dict[str, Any]:
    """test.misbehave sleeps 60 s against its 1 s deadline: the pool kills it, a non-ok `timeout`."""
    return {"verifier": "test.misbehave", "response": "sleep", "reference": "x"}


async def test_a_failing_item_runs_once_for_every_duplicate_on_two_engines(
    redis_server: RedisServer, pool: WorkerPool
):
    """Two engines ("replicas", each with its own Redis connection) on one redis-server each score a batch of 4
    identical timing-out items: one run in all, and each duplicate returns the holder's failure (masked: a
    timeout, never a reward)."""
    first = engine_on(redis_server.url, pool, cache_secret=SECRET)
    second = engine_on(redis_server.url.replace("127.0.0.1", "localhost"), pool, cache_secret=SECRET)
    runs = submitted(pool)
    try:
        assert first.shared is not None and second.shared is not None and first.shared is not second.shared
        heard = Recorder(), Recorder()
        first.shared.observer, second.shared.observer = heard
        batch = [{**sleeper(), "id": n} for n in range(4)]
        results = await asyncio.gather(first.score_batch_async(batch), second.score_batch_async(batch))
        scores = [score for result in results for score in result]
        assert all(isinstance(s, Score) and s.status is Status.timeout for s in scores), scores
        assert [s.id for s in results[0]] == [0, 1, 2, 3] and [s.id for s in results[1]] == [0, 1, 2, 3]  # type: ignore[union-attr]
        assert submitted(pool) - runs == 1
        outcomes = sorted(heard[0].of("flight") + heard[1].of("flight"))
        assert outcomes == ["owner"] + ["waited"] * 7
        assert sum(1 for s in scores if isinstance(s, Score) and s.cached) == 7
        key = first.prepare(sleeper()).key
        assert not redis_server.client().exists(first.shared.key(first.cache.shared_key(key)))  # type: ignore[attr-defined]
    finally:
        disconnect(redis_server.url)
        disconnect(redis_server.url.replace("127.0.0.1", "localhost"))


async def test_a_request_after_a_failed_flight_runs_it_anew_and_a_forged_failure_is_no_reward(
    redis_server: RedisServer, pool: WorkerPool
):
    engine = engine_on(redis_server.url, pool, cache_secret=SECRET)
    runs = submitted(pool)
    try:
        shared = engine.shared
        assert shared is not None
        item = engine.prepare({"verifier": "test.misbehave", "response": "raise", "reference": "x"})
        assert (await engine.score_async(item)).status is Status.verifier_error
        result_key = shared.key(engine.flight_result_name(item.key))
        assert redis_server.client().exists(result_key)  # left for waiters, for a few seconds only
        assert 0 < redis_server.client().pttl(result_key) <= engine_module.FLIGHT_RESULT_TTL_MS
        again = await engine.score_async(engine.prepare({**sleeper(), "response": "raise"}))
        assert again.status is Status.verifier_error and not again.cached  # it did not wait: it ran again
        assert submitted(pool) - runs == 2
        # An `ok` 1.0 planted as this flight's result, unsigned, signed with another secret, or a genuine one
        # copied from another item's flight, is never taken: the waiter runs the item.
        wrong = engine.prepare({**sleeper(), "response": "wrong"})
        name = shared.key(engine.flight_result_name(wrong.key))
        elsewhere = shared.key(engine.flight_result_name(item.key))
        forgeries = [
            CacheSigner(None).seal(name, ok_score(1.0).model_dump_json()),
            CacheSigner(cache_secret(Settings(cache_secret="another"))).seal(
                name, ok_score(1.0).model_dump_json()
            ),
            engine.signer.seal(elsewhere, ok_score(1.0).model_dump_json()),
        ]
        for number, forged in enumerate(forgeries, start=3):
            redis_server.client().set(name, forged)
            redis_server.client().set(shared.key(engine.flight_name(wrong.key)), "dead-holder", px=300)
            scored = await engine.score_async(wrong)
            assert scored.status is Status.ok and scored.reward == 0.0 and not scored.cached
            assert submitted(pool) - runs == number
            engine.cache.local.clear()  # type: ignore[attr-defined]
            redis_server.client().delete(shared.key(engine.cache.shared_key(wrong.key)))  # type: ignore[attr-defined]
    finally:
        disconnect(redis_server.url)


async def test_with_the_cache_redis_down_an_ok_item_still_runs_once_for_every_duplicate(
    tmp_path: Path, pool: WorkerPool
):
    """The lock Redis is up, the cache Redis (PROCTOR_REDIS_CACHE_URL) stopped: the holder's `ok` score cannot
    be cached in Redis, so it is left sealed under the flight result. Two engines with 4 identical items each:
    one run in all, duplicates on the holder's engine read its local cache, the other engine's the flight
    result; a duplicate that came later runs it anew (an ok flight result is only for the flight's waiters)."""
    locks_dir, cache_dir = tmp_path / "locks", tmp_path / "cache"
    locks_dir.mkdir()
    cache_dir.mkdir()
    lock_servers, cache_servers = private_redis(locks_dir), private_redis(cache_dir)
    locks, cache = next(lock_servers), next(cache_servers)
    cache.stop()  # a closed port from here on
    other_url = locks.url.replace("127.0.0.1", "localhost")
    first = engine_on(locks.url, pool, redis_cache_url=cache.url, cache_secret=SECRET)
    second = engine_on(other_url, pool, redis_cache_url=cache.url, cache_secret=SECRET)
    runs = submitted(pool)
    try:
        assert first.shared is not None and second.shared is not None and first.shared is not second.shared
        heard = Recorder(), Recorder()
        first.shared.observer, second.shared.observer = heard
        nap = {"verifier": "test.misbehave", "response": "nap", "reference": "cache-down"}
        batch = [{**nap, "id": n} for n in range(4)]
        results = await asyncio.gather(first.score_batch_async(batch), second.score_batch_async(batch))
        scores = [score for result in results for score in result]
        assert all(isinstance(s, Score) and s.status is Status.ok and s.reward == 1.0 for s in scores), scores
        assert submitted(pool) - runs == 1
        assert sorted(heard[0].of("flight") + heard[1].of("flight")) == ["owner"] + ["waited"] * 7
        assert sum(1 for s in scores if isinstance(s, Score) and s.cached) == 7
        pids = {s.details["pid"] for s in scores if isinstance(s, Score)}
        assert len(pids) == 1  # every answer is the one run's
        item = first.prepare(nap)
        name = first.shared.key(first.flight_result_name(item.key))
        raw = locks.client().get(name)
        assert raw is not None and first.signer.open(name, raw) is not None  # sealed, and short-lived
        assert 0 < locks.client().pttl(name) <= engine_module.FLIGHT_RESULT_TTL_MS
        for engine in (first, second):  # both keep it locally for later duplicates
            assert isinstance(engine.cache, TieredCache) and engine.cache.local.get(item.key) is not None
        # A later request that did not wait on that flight runs the item (it was never in a shared cache).
        third = engine_on(locks.url, pool, redis_cache_url=cache.url, cache_secret=SECRET)
        again = await third.score_async(third.prepare(nap))
        assert again.status is Status.ok and not again.cached
        assert submitted(pool) - runs == 2
    finally:
        for url in (locks.url, other_url, cache.url):
            disconnect(url)
        for servers in (lock_servers, cache_servers):
            with contextlib.suppress(StopIteration):
                next(servers)


async def test_waiters_leave_the_batch_window_to_items_that_can_run(
    redis_server: RedisServer, pool: WorkerPool, monkeypatch: pytest.MonkeyPatch
):
    """Six items held by a stuck replica (more than the window of 4) and one free item: the free one runs while
    the six still wait; then the holder delivers and the six run nothing."""
    monkeypatch.setattr(engine_module, "FLIGHT_EXTRA_WAIT_S", 600.0)  # the waiters never give up here
    engine = engine_on(redis_server.url, pool, cache_secret=SECRET)
    runs = submitted(pool)
    client = redis_server.client()
    try:
        shared = engine.shared
        assert shared is not None and isinstance(engine.cache, TieredCache)
        held = [{"verifier": "test.misbehave", "response": f"held-{n}", "reference": "x"} for n in range(6)]
        free = {"verifier": "test.misbehave", "response": "x", "reference": "x"}
        items = [engine.prepare(request) for request in held]
        for item in items:
            assert client.set(shared.key(engine.flight_name(item.key)), "stuck", px=600_000)
        batch = asyncio.ensure_future(engine.score_batch_async([*held, free]))
        for _ in range(600):  # a liveness bound, not a timing assertion
            if submitted(pool) > runs:
                break
            await asyncio.sleep(0.05)
        # The free item reached the pool while all six held ones still wait (with a window of 4).
        assert submitted(pool) - runs == 1 and not batch.done()
        other = TieredCache(
            LRUCache(10), SharedRedis(redis_server.url), 60, signer=engine.signer, namespace=engine.namespace
        )
        for item in items:  # the stuck replica delivers, as a holder does, then lets go
            other.put(item.key, ok_score(0.0))
            client.delete(shared.key(engine.flight_name(item.key)))
        other.shared.close()
        results = await asyncio.wait_for(batch, 60)
        assert [r.reward for r in results] == [0.0] * 6 + [1.0]  # type: ignore[union-attr]
        assert submitted(pool) - runs == 1
    finally:
        disconnect(redis_server.url)


# -- unjailed programs beside a shared Redis (rt20b finding 7) ------------------------------------------------


def test_the_service_refuses_local_sandboxes_when_it_shares_redis():
    """A `local` program runs as the service's user and can read its parent's environment: the token, the cache
    secret and the Redis password. With Redis configured, the service does not start: one readable line."""
    check_sandbox(Settings(sandbox_backend="local"))  # a single process: nothing to plant scores in
    check_sandbox(Settings(sandbox_backend="nsjail", redis_url="redis://127.0.0.1:1/0"))
    env = server_env(
        free_port(), PROCTOR_SANDBOX_BACKEND="local", PROCTOR_REDIS_URL="redis://:pw@127.0.0.1:1/0"
    )
    done = subprocess.run(
        [sys.executable, "-m", "proctor.api"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [
        "proctor: refusing PROCTOR_SANDBOX_BACKEND=local with PROCTOR_REDIS_URL "
        "(unjailed programs could read the Redis password and cache secret; use nsjail or docker)"
    ]


# -- the compose file (findings 2 and 15) ----------------------------------------------------------------------


def test_compose_gives_each_redis_a_password_and_only_the_cache_eviction():
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.skip("docker-compose is not installed (Debian package docker-compose)")
    env = {
        "PATH": "/usr/bin:/bin",
        "PROCTOR_TOKEN": "t" * 32,
        "PROCTOR_CACHE_SECRET": "c" * 32,
        "POSTGRES_PASSWORD": "pg",
        "REDIS_PASSWORD": "redis-pw-7q",
    }
    done = subprocess.run(
        [binary, "-f", str(REPO / "docker" / "compose.yaml"), "config"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    services = yaml.safe_load(done.stdout)["services"]
    proctor_env = services["proctor"]["environment"]
    assert proctor_env["PROCTOR_REDIS_URL"] == "redis://:redis-pw-7q@redis:6379/0"
    assert proctor_env["PROCTOR_REDIS_CACHE_URL"] == "redis://:redis-pw-7q@redis-cache:6379/0"
    for name in ("redis", "redis-cache"):
        service = services[name]
        script = " ".join(service["command"])
        # The password comes from the environment, never the command line.
        assert "requirepass" in script and "redis-pw-7q" not in script, name
        assert service["environment"]["REDISCLI_AUTH"] == "redis-pw-7q"
        assert "redis-cli ping" in " ".join(service["healthcheck"]["test"])
        assert not service.get("ports"), name
    sessions = " ".join(services["redis"]["command"])
    assert "--appendonly yes" in sessions and "allkeys" not in sessions and "--maxmemory " not in sessions
    assert any(":/data" in volume for volume in services["redis"]["volumes"])
    cache = " ".join(services["redis-cache"]["command"])
    assert "--maxmemory-policy allkeys-lru" in cache and "--maxmemory " in cache
    assert "--appendonly no" in cache
    no_password = subprocess.run(
        [binary, "-f", str(REPO / "docker" / "compose.yaml"), "config"],
        env={key: value for key, value in env.items() if key != "REDIS_PASSWORD"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert no_password.returncode != 0 and "REDIS_PASSWORD" in no_password.stderr
