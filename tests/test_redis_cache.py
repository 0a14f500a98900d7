"""The result cache replicas share in Redis, and single-flight of expensive items across replicas.

In process: the two-level cache over a private redis-server, and the engine's single-flight against a lock
another "replica" holds (planted in Redis). Over HTTP: two service processes sharing that Redis.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import proctor.engine as engine_module
from proctor.cache import LRUCache, TieredCache
from proctor.contract import Score, Status
from proctor.engine import Engine
from proctor.redis_backend import SharedRedis, disconnect
from proctor.settings import Settings
from tests.redis_helpers import RedisServer, metric_value, metrics_text, private_redis


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


def score(status: Status = Status.ok, reward: float = 1.0) -> Score:
    return Score(
        id="request-7",
        verifier="text.match@1",
        status=status,
        reward=reward if status is Status.ok else 0.0,
        correct=True if status is Status.ok else None,
        reason="match",
        elapsed_ms=3.5,
    )


@pytest.fixture
def two_caches(redis_server: RedisServer) -> Iterator[tuple[TieredCache, TieredCache]]:
    first = TieredCache(LRUCache(100), SharedRedis(redis_server.url), ttl_s=60)
    second = TieredCache(LRUCache(100), SharedRedis(redis_server.url), ttl_s=60)
    yield first, second
    first.shared.close()
    second.shared.close()


def test_a_score_one_replica_stores_is_a_hit_on_another(two_caches: tuple[TieredCache, TieredCache]):
    first, second = two_caches
    recorder = Recorder()
    second.shared.observer = recorder
    assert second.get("k") is None
    first.put("k", score())
    hit = second.get("k")
    assert hit is not None and hit.reward == 1.0 and hit.status is Status.ok
    assert hit.id is None  # the stored copy carries no request's id
    assert recorder.of("cache") == ["miss", "hit"]
    assert second.local.get("k") is not None  # now kept locally: the next look-up does not ask Redis
    second.get("k")
    assert recorder.of("cache") == ["miss", "hit"]
    ttl_ms = first.shared.client.pttl(first.shared.key(first.shared_key("k")))
    assert 0 < ttl_ms <= 60_000


def test_only_ok_scores_are_shared(two_caches: tuple[TieredCache, TieredCache], redis_server: RedisServer):
    first, second = two_caches
    for status in (Status.verifier_error, Status.timeout, Status.sandbox_error):
        first.put(f"bad-{status.value}", score(status))
        assert second.get(f"bad-{status.value}") is None
        assert first.local.get(f"bad-{status.value}") is None
    client = redis_server.client()
    assert not client.keys(first.shared.key("score:*bad-*"))
    # An entry Proctor never writes (a non-ok score, or bytes it cannot read) is a miss, never a reward.
    client.set(first.shared.key(first.shared_key("foreign")), score(Status.timeout).model_dump_json())
    client.set(first.shared.key(first.shared_key("garbage")), b"\x00not json")
    assert second.get("foreign") is None and second.get("garbage") is None


def test_without_redis_the_local_cache_serves_alone(redis_server: RedisServer):
    cache = TieredCache(LRUCache(100), SharedRedis(redis_server.url), ttl_s=60)
    recorder = Recorder()
    cache.shared.observer = recorder
    try:
        redis_server.stop()
        cache.put("k", score())  # nothing raised
        assert cache.get("k") is not None  # the local level answers
        assert cache.get("other") is None
        assert not cache.shared.available and cache.shared.status() == "unavailable"
        assert recorder.of("state") == [False] and recorder.of("error")
        errors = len(recorder.of("error"))
        cache.get("still-down")  # the breaker is open: no new attempt (and no wait) until its backoff passes
        assert len(recorder.of("error")) == errors
        redis_server.start()
        assert cache.shared.ping() and cache.shared.available
        assert recorder.of("state") == [False, True]
        cache.put("again", score())
        assert redis_server.client().exists(cache.shared.key(cache.shared_key("again")))
    finally:
        cache.shared.close()


@pytest.fixture
def redis_engine(redis_server: RedisServer) -> Iterator[Engine]:
    settings = Settings(redis_url=redis_server.url, plugins="tests.plugins.slow", pool_workers=1)
    engine = Engine(settings)
    assert engine.shared is not None
    yield engine
    engine.close()
    disconnect(redis_server.url)


def pooled(response: str = "same") -> dict[str, Any]:
    """A pool item (test.misbehave: deadline 1 s, right when response equals reference)."""
    return {"verifier": "test.misbehave", "response": response, "reference": "same"}


async def test_a_waiter_takes_over_when_the_holder_dies_without_a_result(
    redis_engine: Engine,
    redis_server: RedisServer,
):
    shared = redis_engine.shared
    assert shared is not None
    recorder = Recorder()
    shared.observer = recorder
    item = redis_engine.prepare(pooled())
    # Another replica took the lock and died: nobody renews it, and it lapses after its lease.
    assert redis_server.client().set(shared.key(redis_engine.flight_name(item.key)), "dead-holder", px=1500)
    result = await redis_engine.score_async(item)
    assert result.status is Status.ok and result.reward == 1.0 and not result.cached
    assert recorder.of("flight") == ["took_over"]
    assert redis_engine.pool.stats()["submitted"] == 1
    assert not redis_server.client().exists(
        shared.key(redis_engine.flight_name(item.key))
    )  # released after its run


async def test_a_waiter_never_waits_past_the_deadline_for_a_stuck_holder(
    redis_engine: Engine,
    redis_server: RedisServer,
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.setattr(engine_module, "FLIGHT_EXTRA_WAIT_S", 0.5)
    shared = redis_engine.shared
    assert shared is not None
    recorder = Recorder()
    shared.observer = recorder
    item = redis_engine.prepare(pooled())
    # A holder that keeps its lock and never delivers (its lease is far away): bounded by deadline + 0.5 s.
    assert redis_server.client().set(
        shared.key(redis_engine.flight_name(item.key)), "stuck-holder", px=600_000
    )
    result = await redis_engine.score_async(item)
    assert result.status is Status.ok and recorder.of("flight") == ["timed_out"]
    # The stuck holder's lock is not ours to release.
    assert redis_server.client().get(shared.key(redis_engine.flight_name(item.key))) == b"stuck-holder"


async def test_a_waiter_gets_the_holders_score_and_runs_nothing(
    redis_engine: Engine,
    redis_server: RedisServer,
):
    import asyncio

    shared = redis_engine.shared
    assert shared is not None
    recorder = Recorder()
    shared.observer = recorder
    item = redis_engine.prepare(pooled())
    lock = shared.key(redis_engine.flight_name(item.key))
    assert redis_server.client().set(lock, "live-holder", px=600_000)

    async def holder_delivers() -> None:
        await asyncio.sleep(0.3)
        other = TieredCache(
            LRUCache(10),
            SharedRedis(redis_server.url),
            ttl_s=60,
            signer=redis_engine.signer,
            namespace=redis_engine.namespace,
        )
        other.put(item.key, score())  # the holder writes through, then releases its lock
        other.shared.close()
        redis_server.client().delete(lock)

    delivered = asyncio.ensure_future(holder_delivers())
    result = await redis_engine.score_async(item)
    await delivered
    assert result.status is Status.ok and result.cached and result.reason == "match"
    assert recorder.of("flight") == ["waited"]
    assert not redis_engine.pool_started  # nothing ran here


async def test_a_failed_run_is_never_shared_and_frees_the_lock(
    redis_engine: Engine,
    redis_server: RedisServer,
):
    item = redis_engine.prepare(pooled("raise"))  # the verifier raises in the pool: verifier_error
    result = await redis_engine.score_async(item)
    assert result.status is Status.verifier_error
    client = redis_server.client()
    assert client.get(redis_engine.shared.key(redis_engine.cache.shared_key(item.key))) is None  # type: ignore[union-attr]
    assert not client.exists(redis_engine.shared.key(redis_engine.flight_name(item.key)))  # type: ignore[union-attr]


async def test_with_redis_down_expensive_items_run_here(redis_engine: Engine, redis_server: RedisServer):
    shared = redis_engine.shared
    assert shared is not None
    recorder = Recorder()
    shared.observer = recorder
    redis_server.stop()
    result = await redis_engine.score_async(redis_engine.prepare(pooled()))
    assert result.status is Status.ok and result.reward == 1.0
    assert recorder.of("flight") == ["degraded"]


SLOW_SUM = "import sys, time\ntime.sleep(1.5)\na, b = map(int, sys.stdin.read().split())\nprint(a + b)"


def code_item(tag: str) -> dict[str, Any]:
    cases = [{"stdin": "1 2\n", "stdout": "3\n"}, {"stdin": "40 2\n", "stdout": "42\n"}]
    program = f"# {tag}\n{SLOW_SUM}"
    return {
        "verifier": "code",
        "response": f"```python\n{program}\n```",
        "reference": {"language": "python", "tests": {"format": "stdio", "cases": cases}},
    }


def test_two_replicas_share_scores_and_run_an_expensive_item_once(
    redis_server: RedisServer,
    start_server,
    backend,
):
    env = {
        "PROCTOR_REDIS_URL": redis_server.url,
        "PROCTOR_PLUGINS": "tests.plugins.slow,proctor.verifiers.code",
    }
    first, second = start_server(**env), start_server(**env)
    assert httpx.get(f"{first}/healthz", timeout=30).json()["redis"] == "ok"

    text = {"verifier": "text.match", "response": "Answer: 42", "reference": "42", "id": "a"}
    scored = httpx.post(f"{first}/v1/score", json=text, timeout=60).json()
    assert scored["status"] == "ok" and not scored["cached"]
    again = httpx.post(f"{second}/v1/score", json={**text, "id": "b"}, timeout=60).json()
    assert again["cached"] and again["id"] == "b" and again["reward"] == scored["reward"]

    item = code_item("once")
    with concurrent.futures.ThreadPoolExecutor(2) as threads:
        replies = list(
            threads.map(lambda url: httpx.post(f"{url}/v1/score", json=item, timeout=120), (first, second))
        )
    bodies = [reply.json() for reply in replies]
    assert [reply.status_code for reply in replies] == [200, 200], bodies
    assert all(body["status"] == "ok" and body["reward"] == 1.0 for body in bodies), bodies
    metrics = [metrics_text(url) for url in (first, second)]
    submitted = sum(metric_value(text, "proctor_pool", field="submitted") for text in metrics)
    assert submitted == 1, metrics  # one sandbox run for the two replicas
    owners = sum(metric_value(text, "proctor_single_flight_total", outcome="owner") for text in metrics)
    assert owners == 1  # the other waited for its score (or, arriving after it landed, hit the cache)
    assert sorted(body["cached"] for body in bodies) == [False, True]


async def test_a_batch_runs_each_expensive_item_once(redis_engine: Engine, redis_server: RedisServer):
    shared = redis_engine.shared
    assert shared is not None
    recorder = Recorder()
    shared.observer = recorder
    twice = [{**pooled(), "id": 1}, {**pooled(), "id": 2}, {**pooled("other"), "id": 3}]
    results = await redis_engine.score_batch_async(twice)
    assert [(r.id, r.status, r.reward) for r in results if isinstance(r, Score)] == [
        (1, Status.ok, 1.0),
        (2, Status.ok, 1.0),
        (3, Status.ok, 0.0),
    ]
    assert redis_engine.pool.stats()["submitted"] == 2  # the repeated item ran once
    assert sorted(recorder.of("flight")) == ["owner", "owner", "waited"]
