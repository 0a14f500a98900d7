"""Locks replicas hold in the Redis they share, and session writes under them (issue 20 red team, finding 9).

Against a private redis-server: lock renewals run on threads of their own, so a saturated default executor
cannot make a holder lose its lease, and they go through an open circuit breaker; a session record is written
by compare-and-set on its revision, so a stale write stores nothing, and a step whose session lock was lost
(the renewer heard so, or Redis says the lock is another's) is aborted before its write.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from proctor.contract import RequestError
from proctor.engine import Engine
from proctor.environments.tools.search_qa.environment import SEARCH_QA, gold_transcript
from proctor.environments.tools.sessions import RedisSessionStore, SessionManager
from proctor.redis_backend import SharedRedis
from proctor.settings import Settings
from tests.redis_helpers import RedisServer, private_redis

TASK_REF = {"seed": 4, "index": 0, "split": "train", "level": "hard"}


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A private redis-server (killed after the test)."""
    yield from private_redis(tmp_path)


# -- lock renewals (finding 9) -------------------------------------------------------------------------------


async def test_renewals_go_on_while_the_default_executor_is_saturated(redis_server: RedisServer):
    shared = SharedRedis(redis_server.url)
    loop = asyncio.get_running_loop()
    blocked = threading.Event()
    try:
        assert shared.try_lock("renewed", "me", 1000)
        async with shared.renewing("renewed", "me", 1000) as lease:
            # Every thread of the default executor (at most 32) stuck for 3 leases, as scoring chunks, prepare
            # and session store calls can keep it: the renewals must not wait behind them.
            stuck = [loop.run_in_executor(None, blocked.wait, 30) for _ in range(32)]
            await asyncio.sleep(3.0)
            assert not lease.lost
            assert redis_server.client().get(shared.key("renewed")) == b"me"
            blocked.set()
            await asyncio.gather(*stuck)
        assert not redis_server.client().exists(shared.key("renewed"))  # released by its holder
    finally:
        blocked.set()
        shared.close()


def test_a_renewal_passes_the_open_breaker_and_says_when_the_lock_is_gone(redis_server: RedisServer):
    shared = SharedRedis(redis_server.url)
    try:
        assert shared.try_lock("held", "me", 5000)
        shared._failed("session_get", OSError("one failed call"))  # pyright: ignore[reportPrivateUsage]
        assert not shared.available
        assert shared.renew_lock("held", "me", 5000) is True  # the breaker does not cost the holder its lease
        assert shared.available
        redis_server.client().set(shared.key("held"), "someone-else")
        assert shared.renew_lock("held", "me", 5000) is False
        redis_server.stop()
        assert shared.renew_lock("held", "me", 5000) is None  # no answer: not known lost yet
    finally:
        shared.close()


# -- session writes: compare-and-set (finding 9) ------------------------------------------------------------


@pytest.fixture
def session_engine() -> Iterator[Engine]:
    engine = Engine(Settings(pool_workers=1))
    yield engine
    engine.close()


async def test_a_stale_session_write_stores_nothing(redis_server: RedisServer, session_engine: Engine):
    first, second = SharedRedis(redis_server.url), SharedRedis(redis_server.url)
    a, b = RedisSessionStore(first), RedisSessionStore(second)
    sessions = SessionManager(a, engine=session_engine)
    try:
        opened = await sessions.create({"environment": "tool.search_qa", "task": TASK_REF})
        sid = opened["session_id"]
        mine, theirs = await a.get(sid), await b.get(sid)
        assert mine is not None and theirs is not None and mine.revision == theirs.revision >= 1
        read_at = mine.revision
        theirs.usage.tool_calls = 7
        await b.put(theirs)
        assert theirs.revision == read_at + 1
        mine.usage.tool_calls = 1
        with pytest.raises(RequestError) as stale:
            await a.put(mine)
        assert stale.value.status == 503 and "changed by another request" in stale.value.message
        stored = await a.get(sid)
        assert stored is not None and stored.usage.tool_calls == 7 and stored.revision == read_at + 1
        assert "revision" not in stored.public()
        await sessions.delete(sid)
        theirs.usage.tool_calls = 8
        with pytest.raises(RequestError):  # removed: a stale writer cannot bring it back
            await b.put(theirs)
        assert await a.get(sid) is None
    finally:
        await sessions.close()
        first.close()
        second.close()


async def test_a_step_whose_session_lock_was_lost_is_aborted_before_it_is_stored(
    redis_server: RedisServer, session_engine: Engine, monkeypatch: pytest.MonkeyPatch
):
    """The replica stepping a session stalls past its lease and another takes the lock: the step's write is
    refused (503), nothing of it is stored, and the other holder's lock is left alone."""
    shared = SharedRedis(redis_server.url)
    store = RedisSessionStore(shared, lock_lease_ms=600)
    sessions = SessionManager(store, engine=session_engine)
    client = redis_server.client()
    try:
        task = SEARCH_QA.make_tasks("train", 4, 1, "hard")[0]
        opened = await sessions.create({"environment": "tool.search_qa", "task": TASK_REF})
        sid = opened["session_id"]
        before = await store.get(sid)
        assert before is not None
        read_at = before.revision
        assistant = [m for m in gold_transcript(task) if m["role"] == "assistant"]
        lock_key = shared.key("session-lock:" + sid)
        original = SessionManager._run_step  # pyright: ignore[reportPrivateUsage]

        async def stalled(self: SessionManager, *args: Any, **kwargs: Any) -> Any:
            result = await original(self, *args, **kwargs)
            client.set(lock_key, "another-replica", px=60_000)  # our lease ran out and it was taken
            lease = store._leases[sid]  # pyright: ignore[reportPrivateUsage]
            for _ in range(200):  # until our renewer hears it is gone (a liveness bound)
                if lease.lost:
                    break
                await asyncio.sleep(0.05)
            assert lease.lost
            # Even were the lock ours again in Redis, the step knows it lost it meanwhile: it must not write.
            client.set(lock_key, lease.token, px=60_000)
            return result

        monkeypatch.setattr(SessionManager, "_run_step", stalled)
        with pytest.raises(RequestError) as lost:
            await sessions.step(sid, assistant[0], step=1)
        assert lost.value.status == 503 and "lost" in lost.value.message
        record = await store.get(sid)
        assert record is not None and record.steps == [] and record.revision == read_at

        # The fence in Redis itself: a write under a lock that is now another's stores nothing either.
        async def taken(self: SessionManager, *args: Any, **kwargs: Any) -> Any:
            result = await original(self, *args, **kwargs)
            client.set(lock_key, "another-replica", px=60_000)
            return result

        monkeypatch.setattr(SessionManager, "_run_step", taken)
        with pytest.raises(RequestError) as fenced:
            await sessions.step(sid, assistant[0], step=1)
        assert fenced.value.status == 503 and "lost" in fenced.value.message
        assert client.get(lock_key) == b"another-replica"  # not ours to release
        record = await store.get(sid)
        assert record is not None and record.steps == [] and record.revision == read_at

        client.delete(lock_key)
        monkeypatch.setattr(SessionManager, "_run_step", original)
        done = await sessions.step(sid, assistant[0], step=1)  # with the lock held throughout, it lands
        assert done["step"] == 1
        record = await store.get(sid)
        assert record is not None and len(record.steps) == 1 and record.revision > read_at
    finally:
        await sessions.close()
        shared.close()
