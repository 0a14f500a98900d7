"""Proctor's own client behind several replicas: a session step answered 421 (another replica holds the
session's state) is sent once to the replica the answer names, and the session stays pinned there."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest

from proctor.client import AsyncClient, Client, ProctorMisdirected, RemoteSession, may_follow
from proctor.environments.tools.orders.environment import ORDERS, gold_transcript
from tests.conftest import _launch, free_port  # pyright: ignore[reportPrivateUsage]
from tests.redis_helpers import RedisServer


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """Two replicas sharing one private redis-server, each advertising its own address (one pair per module:
    each test opens its own sessions)."""
    directory = tmp_path_factory.mktemp("replicas")
    redis_server = RedisServer(directory)
    redis_server.start()
    servers = []
    try:
        for _ in range(2):
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            overrides = {
                "PROCTOR_PORT": port,
                "PROCTOR_REDIS_URL": redis_server.url,
                "PROCTOR_ADVERTISE_URL": url,
            }
            servers.append(_launch(directory, overrides))
        yield servers[0].base_url, servers[1].base_url
    finally:
        for server in servers:
            server.stop()
        redis_server.stop()


def orders_episode() -> tuple[dict, list[dict]]:
    """A tool.orders task (its shop lives in the replica that opened the session) and its gold assistant turns."""
    assert not ORDERS.rebuildable_state
    task = ORDERS.make_tasks("train", 0, 1)[0]
    turns = [message for message in gold_transcript(task) if message["role"] == "assistant"]
    return task.model_dump(mode="json"), turns


def test_a_session_opened_on_one_replica_is_played_through_another(replicas: tuple[str, str]):
    a, b = replicas
    task, turns = orders_episode()
    with Client(a) as opener, Client(b) as elsewhere:
        opened = opener.open_session("tool.orders", task)
        # The load balancer sends the next calls to b: the client follows b's 421 to a and stays there.
        session = type(opened)(elsewhere, {**_opened_fields(opened)})
        for turn in turns:
            result = session.step(turn)
        assert session.replica_url == a
        assert result["done"] and result["score"]["reward"] == 1.0
        assert session.record()["score"]["reward"] == 1.0
        session.close()


def test_without_following_the_421_names_the_owner(replicas: tuple[str, str]):
    a, b = replicas
    task, turns = orders_episode()
    with Client(a) as opener, Client(b, follow_replicas=False) as elsewhere:
        opened = opener.open_session("tool.orders", task)
        session = type(opened)(elsewhere, _opened_fields(opened))
        with pytest.raises(ProctorMisdirected) as routed:
            session.step(turns[0])
        assert routed.value.status == 421 and routed.value.replica_url == a
        assert session.steps == 0 and session.replica_url is None
        opened.step(turns[0])  # nothing happened on b: step 1 is still free on a
        opened.close()


def test_the_async_client_follows_too(replicas: tuple[str, str]):
    a, b = replicas
    task, turns = orders_episode()

    async def play() -> float:
        async with AsyncClient(a) as opener, AsyncClient(b) as elsewhere:
            opened = await opener.open_session("tool.orders", task)
            session = type(opened)(elsewhere, _opened_fields(opened))
            for turn in turns:
                result = await session.step(turn)
            assert session.replica_url == a
            record = await session.record()
            await session.close()
            assert record["score"] == result["score"]
            return result["score"]["reward"]

    assert asyncio.run(play()) == 1.0


def _opened_fields(session) -> dict:
    """What POST /v1/sessions answered, as a session object keeps it."""
    return {
        "session_id": session.session_id,
        "environment": session.environment,
        "messages": session.messages,
        "tools": session.tools,
        "limits": session.limits,
        "expires_at": session.expires_at,
    }


@pytest.mark.parametrize(
    ("base", "target", "follow", "expected"),
    [
        ("http://lb.example:8000", "http://10.0.0.5:8000", True, True),  # a private replica address
        ("http://127.0.0.1:8000", "http://127.0.0.1:8001", True, True),
        ("http://lb.example:8000", "http://lb.example:9000", True, True),  # the same host
        ("http://lb.example:8000", "http://[fd00::5]:8000", True, True),
        ("http://lb.example:8000", "http://attacker.example.net", True, False),  # a name that is not ours
        ("http://lb.example:8000", "http://8.8.8.8:8000", True, False),  # a public address
        ("https://lb.example", "http://10.0.0.5:8000", True, False),  # never from https to http
        ("https://lb.example", "https://10.0.0.5:8000", True, True),
        ("http://lb.example:8000", "ftp://10.0.0.5", True, False),
        ("http://lb.example:8000", "http://10.0.0.5:8000", False, False),
        ("http://lb.example:8000", "http://replica-2.internal:8000", ["replica-2.internal"], True),
        ("http://lb.example:8000", "http://replica-2.internal:8000", ["replica-2.internal:9000"], False),
        ("http://lb.example:8000", "http://10.0.0.5:8000", ["replica-2.internal"], False),
    ],
)
def test_which_replicas_a_421_may_send_the_token_to(base: str, target: str, follow, expected: bool):
    assert may_follow(base, target, follow) is expected


def test_a_421_naming_a_foreign_host_is_not_followed_and_the_token_stays_home():
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url.host))
        body = {
            "error": {"status": 421, "message": "held by another replica", "field": "session_id"},
            "replica": "x",
            "replica_url": "http://attacker.example.net",
        }
        return httpx.Response(421, json=body)

    opened = {
        "session_id": "ses_1",
        "environment": "e",
        "messages": [],
        "tools": [],
        "limits": {},
        "expires_at": 0,
    }
    with Client("http://lb.example:8000", token="TOPSECRET", transport=httpx.MockTransport(answer)) as client:
        session = RemoteSession(client, opened)
        with pytest.raises(ProctorMisdirected) as routed:
            session.step({"role": "assistant", "content": "hi"})
    assert routed.value.replica_url == "http://attacker.example.net"
    assert seen == ["lb.example"] and session.replica_url is None
