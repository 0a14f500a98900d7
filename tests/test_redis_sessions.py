"""Tool sessions in Redis shared by replicas: records anywhere, state with the replica that opened it, routing.

Each "replica" here is a SessionManager with its own RedisSessionStore and its own connection (its own replica
id and heartbeat) on one private redis-server; the last test runs two real service processes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from proctor.capacity import PoolFull
from proctor.contract import RequestError
from proctor.engine import Engine
from proctor.environments.tools.orders.environment import ORDERS
from proctor.environments.tools.orders.environment import gold_transcript as gold_transcript_orders
from proctor.environments.tools.search_qa.environment import SEARCH_QA, SearchQA, gold_transcript
from proctor.environments.tools.sessions import (
    RedisSessionStore,
    SessionConflict,
    SessionElsewhere,
    SessionManager,
)
from proctor.redis_backend import SharedRedis
from proctor.settings import Settings
from tests.conftest import free_port
from tests.redis_helpers import RedisServer, private_redis

TASK_REF = {"seed": 4, "index": 0, "split": "train", "level": "hard"}


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A private redis-server (killed after the test)."""
    yield from private_redis(tmp_path)


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    engine = Engine(Settings(pool_workers=1))
    yield engine
    engine.close()


class Replica:
    """A session manager with its own connection to the shared Redis (one replica's view)."""

    def __init__(self, url: str, engine: Engine, name: str, **store_args: Any):
        self.shared = SharedRedis(url, replica_url=f"http://{name}.example:8000", heartbeat_s=0.2)
        self.shared.start_heartbeat()
        assert self.shared.beat()
        self.store = RedisSessionStore(self.shared, **store_args)
        self.sessions = SessionManager(self.store, engine=engine)

    async def close(self) -> None:
        await self.sessions.close()
        self.shared.close()


@pytest.fixture
def replicas(redis_server: RedisServer, engine: Engine) -> Iterator[list[Replica]]:
    made = [Replica(redis_server.url, engine, name) for name in ("a", "b")]
    yield made
    for replica in made:
        replica.shared.close()


@pytest.fixture
def process_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """tool.search_qa standing in for an environment whose state lives in the process that opened the session
    (a persistent interpreter): the in-process replicas then treat its sessions so."""
    monkeypatch.setattr(SearchQA, "rebuildable_state", False)


def gold_steps() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    task = SEARCH_QA.make_tasks("train", 4, 1, "hard")[0]
    gold = gold_transcript(task)
    assistant = [m for m in gold if m["role"] == "assistant"]
    tools = [m for m in gold[len(task.prompt) :] if m["role"] == "tool"]
    return assistant, tools


async def test_the_store_keeps_records_keys_and_bounds_in_redis(redis_server: RedisServer, engine: Engine):
    a = Replica(redis_server.url, engine, "a", max_open=2)
    try:
        first = await a.sessions.create({"environment": "tool.search_qa", "task": TASK_REF, "id": "k1"})
        again = await a.sessions.create({"environment": "tool.search_qa", "task": TASK_REF, "id": "k1"})
        assert again["session_id"] == first["session_id"]  # the idempotency key lives in Redis
        with pytest.raises(RequestError) as reused:
            await a.sessions.create(
                {"environment": "tool.search_qa", "task": {**TASK_REF, "index": 1}, "id": "k1"}
            )
        assert reused.value.status == 409
        record = await a.store.get(first["session_id"])
        assert record is not None and record.replica == a.shared.replica_id
        assert record.replica_url == "http://a.example:8000"
        client = redis_server.client()
        ttl_ms = client.pttl(a.shared.key("session:" + first["session_id"]))
        assert 0 < ttl_ms <= (record.expires_at - time.time() + a.store.grace_s) * 1000 + 1000
        await a.sessions.create({"environment": "tool.search_qa", "task": TASK_REF})
        assert await a.store.open_count() == 2
        with pytest.raises(PoolFull):  # the bound holds across replicas: it counts the open set in Redis
            await a.sessions.create({"environment": "tool.search_qa", "task": TASK_REF})
        await a.sessions.delete(first["session_id"])
        assert await a.store.get(first["session_id"]) is None
        assert client.get(a.store._id_key(None, "k1")) is None  # pyright: ignore[reportPrivateUsage]
        assert await a.store.open_count() == 1
    finally:
        await a.close()


async def test_process_bound_state_is_reached_through_its_replica(
    replicas: list[Replica], process_bound: None
):
    a, b = replicas
    assistant, _ = gold_steps()
    opened = await a.sessions.create({"environment": "tool.search_qa", "task": TASK_REF})
    sid = opened["session_id"]
    seen = await b.sessions.get(sid)  # any replica reads the record
    assert seen["transcript"] == opened["messages"] and "replica" not in seen
    for attempt in (
        b.sessions.step(sid, assistant[0], step=1),
        b.sessions.finish(sid),
        b.sessions.delete(sid),
    ):
        with pytest.raises(SessionElsewhere) as routed:
            await attempt
        assert routed.value.status == 421 and routed.value.replica_url == "http://a.example:8000"
    step = await a.sessions.step(sid, assistant[0], step=1)  # the owner steps it
    assert step["step"] == 1 and not step["done"]
    assert (await b.sessions.get(sid))["steps"][0] == step  # and every replica sees the step at once


async def test_rebuildable_sessions_step_on_any_replica_exactly_as_on_one(
    replicas: list[Replica], monkeypatch: pytest.MonkeyPatch
):
    assert SearchQA.rebuildable_state
    a, b = replicas
    assistant, tools = gold_steps()
    opened = await a.sessions.create({"environment": "tool.search_qa", "task": TASK_REF})
    sid = opened["session_id"]
    expected = iter(tools)
    result: dict[str, Any] = {}
    for number, message in enumerate(assistant, start=1):
        replica = (a, b)[number % 2]  # alternate: b takes the odd steps
        result = await replica.sessions.step(sid, message, step=number)
        for observation in result["observations"]:
            assert observation["content"] == next(expected)["content"]
        assert sid not in b.sessions._states  # pyright: ignore[reportPrivateUsage] - rebuilt per step, then closed
    assert result["done"] and result["end_reason"] == "answer" and result["score"]["reward"] == 1.0
    # The session ended on some replica; a's own state is freed at its next sweep if it ended elsewhere.
    await a.sessions.sweep()
    assert sid not in a.sessions._states  # pyright: ignore[reportPrivateUsage]
    record = await b.sessions.get(sid)
    assert len(record["steps"]) == len(assistant)


async def test_one_step_runs_once_when_two_replicas_get_it_at_once(
    replicas: list[Replica], monkeypatch: pytest.MonkeyPatch
):
    assert SearchQA.rebuildable_state
    calls: list[str] = []
    original = SearchQA.call

    async def counted(self: SearchQA, state: Any, name: str, arguments: dict[str, Any]) -> Any:
        calls.append(name)
        await asyncio.sleep(0.2)  # a slow tool: the other replica's step arrives while this one runs
        return await original(self, state, name, arguments)

    monkeypatch.setattr(SearchQA, "call", counted)
    a, b = replicas
    assistant, _ = gold_steps()
    sid = (await a.sessions.create({"environment": "tool.search_qa", "task": TASK_REF}))["session_id"]
    first, second = await asyncio.gather(
        a.sessions.step(sid, assistant[0], step=1), b.sessions.step(sid, assistant[0], step=1)
    )
    assert first == second  # the later one is the idempotent repeat of the earlier
    assert len(calls) == 1  # the tool ran once: the Redis lock held the other replica back
    record = await a.sessions.get(sid)
    assert len(record["steps"]) == 1 and record["usage"]["tool_calls"] == 1
    with pytest.raises(SessionConflict):  # and the lock kept the step numbering exact
        await b.sessions.step(sid, assistant[1], step=3)


async def test_a_gone_replica_ends_its_sessions_as_machinery_failures(
    replicas: list[Replica], process_bound: None
):
    a, b = replicas
    assistant, _ = gold_steps()
    stepped = (await a.sessions.create({"environment": "tool.search_qa", "task": TASK_REF}))["session_id"]
    finished = (await a.sessions.create({"environment": "tool.search_qa", "task": TASK_REF}))["session_id"]
    a.shared.close()  # the replica goes away: its heartbeat key is gone with it
    with pytest.raises(SessionConflict) as ended:
        await b.sessions.step(stepped, assistant[0], step=1)
    assert ended.value.end_reason == "sandbox_error"
    assert ended.value.score is not None and ended.value.score["status"] == "sandbox_error"
    record = await b.sessions.get(stepped)
    assert record["status"] == "sandbox_error" and record["score"]["status"] == "sandbox_error"
    score = await b.sessions.finish(finished)  # finishing needs no state: it is scored where it is asked
    assert score["status"] == "ok" and score["reward"] == 0.0


async def test_expiry_is_left_to_the_replica_holding_the_state(
    redis_server: RedisServer, engine: Engine, process_bound: None
):
    offset = [0.0]

    def clock() -> float:
        return time.time() + offset[0]

    a = Replica(redis_server.url, engine, "a")
    b = Replica(redis_server.url, engine, "b")
    a.sessions.clock = b.sessions.clock = clock
    try:
        opened = await a.sessions.create({"environment": "tool.search_qa", "task": TASK_REF})
        sid = opened["session_id"]
        offset[0] = opened["expires_at"] - time.time() + 1  # past its time-to-live
        assert await b.sessions.sweep() == 0  # a lives and holds its state: b leaves it alone
        with pytest.raises(RequestError) as gone:
            await b.sessions.get(sid)
        assert gone.value.status == 410
        assert sid in a.sessions._states  # pyright: ignore[reportPrivateUsage]
        assert await a.sessions.sweep() == 1
        assert sid not in a.sessions._states  # pyright: ignore[reportPrivateUsage] - freed by its holder
        with pytest.raises(RequestError) as tombstone:
            await b.sessions.get(sid)
        assert tombstone.value.status == 410
    finally:
        await a.close()
        await b.close()


async def test_with_redis_down_new_sessions_live_in_this_process(redis_server: RedisServer, engine: Engine):
    a = Replica(redis_server.url, engine, "a")
    try:
        assistant, _ = gold_steps()
        shared_sid = (await a.sessions.create({"environment": "tool.search_qa", "task": TASK_REF}))[
            "session_id"
        ]
        redis_server.stop()
        opened = await a.sessions.create({"environment": "tool.search_qa", "task": TASK_REF})
        local_sid = opened["session_id"]
        step = await a.sessions.step(local_sid, assistant[0], step=1)
        assert step["step"] == 1
        assert (await a.sessions.get(local_sid))["steps"] == [step]
        with pytest.raises(RequestError) as unavailable:  # a record only Redis holds: retry later, never 404
            await a.sessions.get(shared_sid)
        assert unavailable.value.status == 503
        redis_server.start()  # back, empty (no persistence): the local session still answers here
        assert (await a.sessions.get(local_sid))["steps"] == [step]
        assert a.shared.ping()
        again = await a.sessions.create({"environment": "tool.search_qa", "task": TASK_REF})
        assert redis_server.client().exists(a.shared.key("session:" + again["session_id"]))
    finally:
        await a.close()


def test_a_step_sent_to_another_replica_is_answered_421_naming_the_owner(
    redis_server: RedisServer,
    start_server,
):
    urls: list[str] = []
    for _ in range(2):
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        urls.append(
            start_server(PROCTOR_PORT=port, PROCTOR_REDIS_URL=redis_server.url, PROCTOR_ADVERTISE_URL=url)
        )
        assert urls[-1] == url
    a, b = urls
    # tool.orders keeps its shop's database in the replica that opened the session (its tools write to it).
    assert not ORDERS.rebuildable_state
    task = ORDERS.make_tasks("train", 0, 1)[0]
    first = next(m for m in gold_transcript_orders(task) if m["role"] == "assistant")
    assistant = [first]
    created = httpx.post(
        f"{a}/v1/sessions",
        json={"environment": "tool.orders", "task": task.model_dump(mode="json")},
        timeout=60,
    )
    assert created.status_code == 201, created.text
    sid = created.json()["session_id"]
    record = httpx.get(f"{b}/v1/sessions/{sid}", timeout=60)
    assert record.status_code == 200 and record.json()["session_id"] == sid
    routed = httpx.post(f"{b}/v1/sessions/{sid}/step", json={"message": assistant[0], "step": 1}, timeout=60)
    assert routed.status_code == 421, routed.text
    body = routed.json()
    assert body["error"]["field"] == "session_id" and body["replica"] and body["replica_url"] == a
    assert routed.headers["location"] == f"{a}/v1/sessions/{sid}/step"
    assert a in body["error"]["message"]
    stepped = httpx.post(f"{a}/v1/sessions/{sid}/step", json={"message": assistant[0], "step": 1}, timeout=60)
    assert stepped.status_code == 200, stepped.text
    again = httpx.get(f"{b}/v1/sessions/{sid}", timeout=60).json()
    assert again["steps"][0]["step"] == 1
