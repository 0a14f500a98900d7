"""Redis going away and coming back under traffic, and the per-token rate limits (in Redis, and per process).

Every request gets an answer while Redis is down (never an error because of Redis), /healthz and /metrics say
so, and the replicas use Redis again once it returns.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from proctor.api.limits import RateLimiter, caller_key
from proctor.redis_backend import LocalBuckets, SharedRedis
from tests.conftest import ServerProcess, free_port, server_env
from tests.redis_helpers import RedisServer, metric_value, metrics_text, private_redis, wait_until


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A private redis-server (killed after the test)."""
    yield from private_redis(tmp_path)


def text_item(index: int) -> dict[str, Any]:
    return {"verifier": "text.match", "response": f"Answer: {index}", "reference": str(index), "id": index}


def test_replicas_keep_answering_through_a_redis_restart(redis_server: RedisServer, start_server):
    first, second = (start_server(PROCTOR_REDIS_URL=redis_server.url) for _ in range(2))
    answers: list[tuple[int, str | None]] = []
    stop = threading.Event()

    def traffic(url: str, start: int) -> None:
        with httpx.Client(timeout=60) as client:
            index = start
            while not stop.is_set():
                reply = client.post(f"{url}/v1/score", json=text_item(index))
                answers.append((reply.status_code, reply.json().get("status")))
                index += 1

    threads = [
        threading.Thread(target=traffic, args=(url, n * 1_000_000)) for n, url in enumerate((first, second))
    ]
    for thread in threads:
        thread.start()
    try:
        assert wait_until(lambda: len(answers) >= 20)
        redis_server.stop()
        assert wait_until(lambda: httpx.get(f"{first}/healthz", timeout=30).json()["redis"] == "unavailable")
        down_from = len(answers)
        assert wait_until(lambda: len(answers) >= down_from + 20)  # traffic goes on while Redis is down
        down = metrics_text(first)
        assert metric_value(down, "proctor_redis_up") == 0
        assert metric_value(down, "proctor_redis_errors_total") >= 1
        redis_server.start()
        for url in (first, second):  # the heartbeat's probe brings it back, with or without traffic
            assert wait_until(lambda url=url: httpx.get(f"{url}/healthz", timeout=30).json()["redis"] == "ok")
        assert metric_value(metrics_text(first), "proctor_redis_up") == 1
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=120)
    assert answers and all(answer == (200, "ok") for answer in answers), set(answers)
    # Redis is shared again: what one replica scores now is a hit on the other.
    fresh = {"verifier": "text.match", "response": "Answer: after", "reference": "after"}
    assert not httpx.post(f"{first}/v1/score", json=fresh, timeout=60).json()["cached"]
    assert httpx.post(f"{second}/v1/score", json=fresh, timeout=60).json()["cached"]


def test_the_rate_limit_is_shared_by_replicas(redis_server: RedisServer, start_server):
    # 0.01 tokens a second: no refill worth a request within the test, however slow the machine.
    env = {
        "PROCTOR_REDIS_URL": redis_server.url,
        "PROCTOR_RATE_LIMIT_PER_S": 0.01,
        "PROCTOR_RATE_LIMIT_BURST": 3,
    }
    first, second = (start_server(**env) for _ in range(2))
    replies = [
        httpx.post(f"{url}/v1/score", json=text_item(n), timeout=60)
        for n, url in enumerate([first, second] * 3)
    ]
    assert [reply.status_code for reply in replies] == [200, 200, 200, 429, 429, 429]
    refused = replies[3]
    assert int(refused.headers["retry-after"]) >= 1
    assert refused.json()["error"]["status"] == 429 and "rate limit" in refused.json()["error"]["message"]
    assert httpx.get(f"{first}/healthz", timeout=30).status_code == 200  # health checks are never limited
    limited = sum(
        metric_value(metrics_text(url), "proctor_rate_limited_total", bucket="redis")
        for url in (first, second)
    )
    assert limited == 3


def test_without_redis_the_same_limit_holds_per_process(start_server):
    url = start_server(PROCTOR_RATE_LIMIT_PER_S=0.01, PROCTOR_RATE_LIMIT_BURST=2)
    # Without auth, a fresh Authorization header per request names no fresh bucket: the address is the caller.
    codes = [
        httpx.post(
            f"{url}/v1/score", json=text_item(n), headers={"Authorization": f"Bearer {n}"}, timeout=60
        ).status_code
        for n in range(4)
    ]
    assert codes == [200, 200, 429, 429]
    assert metric_value(metrics_text(url), "proctor_rate_limited_total", bucket="local") == 2
    assert httpx.get(f"{url}/healthz", timeout=30).json()["redis"] == "off"


def test_the_bucket_script_is_atomic_under_concurrent_takers(redis_server: RedisServer):
    shared = SharedRedis(redis_server.url)
    try:
        results: list[tuple[bool, float] | None] = []
        lock = threading.Lock()

        def take() -> None:
            for _ in range(10):
                taken = shared.take("atomic", 0.001, 25)
                with lock:
                    results.append(taken)

        threads = [threading.Thread(target=take) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert None not in results
        allowed = [taken for taken in results if taken is not None and taken[0]]
        assert len(allowed) == 25  # of 80 takers, exactly the burst
        refused = [taken for taken in results if taken is not None and not taken[0]]
        assert all(wait > 0 for _, wait in refused)
    finally:
        shared.close()


def test_buckets_are_per_token_or_address_and_fall_back_to_this_process(redis_server: RedisServer):
    base: dict[str, Any] = {"type": "http", "path": "/v1/score", "client": ("10.0.0.1", 5000)}
    one = {**base, "headers": [(b"authorization", b"Bearer one")]}
    two = {**base, "headers": [(b"authorization", b"Bearer two")]}
    assert caller_key(one, True) != caller_key(two, True)
    assert "Bearer" not in caller_key(one, True)
    # Every spelling the token check accepts is the same caller: no fresh bucket for "bearer  one ".
    for spelling in (b"bearer one", b"BEARER one", b"Bearer  one", b"Bearer one ", b"bEaReR \tone"):
        respelled = {**base, "headers": [(b"authorization", spelling)]}
        assert caller_key(respelled, True) == caller_key(one, True), spelling
    assert caller_key({**base, "headers": []}, True) == "addr:10.0.0.1"
    # Without auth a header is unchecked: every request from one address shares its bucket, whatever it sends.
    assert caller_key(one, False) == caller_key(two, False) == "addr:10.0.0.1"
    limiter = RateLimiter(0.001, 1, SharedRedis(redis_server.url))
    try:
        assert limiter.take("token:one") == (True, 0.0, "redis")
        allowed, wait, bucket = limiter.take("token:one")
        assert (allowed, bucket) == (False, "redis") and wait > 0
        assert limiter.take("token:two")[:1] == (True,)  # another caller's bucket is full
        redis_server.stop()
        assert limiter.take("token:one") == (True, 0.0, "local")  # down: this process's own bucket
        assert limiter.take("token:one")[:3:2] == (False, "local")
    finally:
        assert limiter.shared is not None
        limiter.shared.close()


@pytest.mark.parametrize("rate", [2.0, 1000.0])
def test_local_buckets_refill_at_the_rate(rate: float):
    buckets = LocalBuckets()
    assert buckets.take("k", rate, 1) == (True, 0.0)
    allowed, wait = buckets.take("k", rate, 1)
    assert not allowed and 0 < wait <= 1 / rate + 0.001


SLOW_SUM = "import sys, time\ntime.sleep(3)\na, b = map(int, sys.stdin.read().split())\nprint(a + b)"


def test_a_replica_killed_holding_an_item_never_blocks_the_others(
    redis_server: RedisServer, start_server, backend, tmp_path: Path
):
    overrides = {
        "PROCTOR_REDIS_URL": redis_server.url,
        "PROCTOR_PLUGINS": "tests.plugins.slow,proctor.verifiers.code",
    }
    doomed = ServerProcess(server_env(free_port(), **overrides), tmp_path / "doomed.log")
    try:
        doomed.wait_ready()
        survivor = start_server(**overrides)
        item = {
            "verifier": "code",
            "response": f"```python\n# killed holder\n{SLOW_SUM}\n```",
            "reference": {
                "language": "python",
                "tests": {"format": "stdio", "cases": [{"stdin": "1 2\n", "stdout": "3\n"}]},
            },
        }

        def doomed_request() -> None:
            with contextlib.suppress(httpx.HTTPError):  # its replica dies under it
                httpx.post(f"{doomed.base_url}/v1/score", json=item, timeout=120)

        sender = threading.Thread(target=doomed_request)
        sender.start()
        client = redis_server.client()
        assert wait_until(lambda: bool(client.keys("proctor:flight:*")), timeout_s=60)
        doomed.process.kill()  # SIGKILL: no release, no heartbeat; its pool workers die with it
        doomed.process.wait(timeout=30)
        sender.join(timeout=120)
        assert client.keys("proctor:flight:*")  # the dead holder's lock is still there
        reply = httpx.post(f"{survivor}/v1/score", json=item, timeout=180)
        assert reply.status_code == 200 and reply.json()["status"] == "ok" and reply.json()["reward"] == 1.0
        metrics = metrics_text(survivor)
        # It waited out the dead holder's lease and took over (or, on a machine slow enough for the lease to
        # lapse first, found the lock free): either way it ran the item once and answered.
        ran = [
            metric_value(metrics, "proctor_single_flight_total", outcome=o) for o in ("took_over", "owner")
        ]
        assert sum(ran) == 1
        assert metric_value(metrics, "proctor_pool", field="submitted") == 1
    finally:
        doomed.stop()
