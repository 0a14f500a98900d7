"""proctor.client against the real service: uvicorn on a free port, real HTTP, test.misbehave for guaranteed behaviour."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator

import httpx
import pytest

from proctor.client import (
    AsyncClient,
    Client,
    Limits,
    ProctorRequestError,
    ProctorServerError,
    ProctorUnavailable,
    check_response,
    plan_batch,
)
from proctor.contract import ItemError, Score, ScoreRequest, Status
from tests.conftest import ServerProcess, free_port, server_env

MISBEHAVE = "test.misbehave"


@pytest.fixture(scope="module")
def small_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server with tiny limits (3 items, 2 KiB bodies) and a bearer token, shared by this module."""
    env = server_env(
        free_port(), PROCTOR_MAX_BATCH_ITEMS=3, PROCTOR_MAX_BODY_BYTES=2048, PROCTOR_TOKEN="s3cret"
    )
    server = ServerProcess(env, tmp_path_factory.mktemp("small-server") / "server.log")
    server.wait_ready()
    yield server.base_url
    server.stop()


class Recorder(httpx.HTTPTransport):
    """A real HTTP transport that also notes each request's path, body size, outcome and time."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[tuple[str, int, int | str, float]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        size = len(request.content)
        try:
            response = super().handle_request(request)
        except httpx.TransportError as exc:
            self.log.append((request.url.path, size, type(exc).__name__, time.monotonic()))
            raise
        self.log.append((request.url.path, size, response.status_code, time.monotonic()))
        return response

    def statuses(self, path: str) -> list[int | str]:
        return [status for p, _, status, _ in self.log if p == path]


def item(response: str, reference: str, id: object = None) -> dict:
    return {"verifier": MISBEHAVE, "response": response, "reference": reference, "id": id}


# -- single scores and errors ----------------------------------------------------------------------------


def test_score_and_score_request(live_server: str) -> None:
    with Client(live_server) as client:
        right = client.score(MISBEHAVE, "42", reference="42", id="a")
        wrong = client.score_request(ScoreRequest(verifier=MISBEHAVE, response="41", reference="42", id=7))
    assert (right.status, right.reward, right.correct, right.id) == (Status.ok, 1.0, True, "a")
    assert right.verifier == "test.misbehave@1"
    assert (wrong.status, wrong.reward, wrong.reason, wrong.id) == (Status.ok, 0.0, "mismatch", 7)


def test_machinery_failure_is_a_status_not_an_error(live_server: str) -> None:
    with Client(live_server) as client:
        crashed = client.score(MISBEHAVE, "crash", reference="x")
    assert crashed.status is Status.verifier_error
    assert crashed.correct is None


def test_unknown_verifier_raises_naming_the_field(live_server: str) -> None:
    recorder = Recorder()
    with Client(live_server, transport=recorder) as client, pytest.raises(ProctorRequestError) as caught:
        client.score("no.such.verifier", "x", reference="x")
    assert caught.value.status == 404
    assert caught.value.field == "verifier"
    assert MISBEHAVE in caught.value.message
    assert recorder.statuses("/v1/score") == [404]  # a 4xx is final: no retry


def test_invalid_field_raises_422_with_its_path(live_server: str) -> None:
    with Client(live_server) as client:
        with pytest.raises(ProctorRequestError) as bad_reference:
            client.score(MISBEHAVE, "x", reference={"not": "a string"})
        with pytest.raises(ProctorRequestError) as bad_option:
            client.score(MISBEHAVE, "x", reference="x", options={"no_such_option": 1})
    assert (bad_reference.value.status, bad_reference.value.field) == (422, "reference")
    assert bad_option.value.status == 422
    assert bad_option.value.field is not None and bad_option.value.field.startswith("options")


def test_health_and_verifiers(live_server: str) -> None:
    with Client(live_server) as client:
        health = client.health()
        names = {verifier["name"] for verifier in client.verifiers()}
    assert health["status"] == "ok"
    assert set(health["limits"]) >= {"max_body_bytes", "max_batch_items"}
    assert MISBEHAVE in names


def test_connections_are_kept_alive(live_server: str) -> None:
    with Client(live_server) as client:
        client.score(MISBEHAVE, "a", reference="a")
        pool = client._http._transport._pool  # httpx's connection pool: one connection serves every call
        for _ in range(5):
            client.score(MISBEHAVE, "a", reference="a")
        assert len(pool.connections) == 1


# -- batches -----------------------------------------------------------------------------------------------


def test_batch_in_order_with_bad_items_in_their_slots(live_server: str) -> None:
    items = [item(str(i % 3), "1", id=i) for i in range(7)]
    items.insert(3, {"verifier": "nope", "response": "x", "id": "unknown"})
    items.insert(5, {"verifier": MISBEHAVE, "response": "x", "reference": 5, "id": "badref"})
    with Client(live_server) as client:
        results = client.score_batch(items)
    assert [r.id for r in results] == [0, 1, 2, "unknown", 3, "badref", 4, 5, 6]
    assert isinstance(results[3], ItemError) and results[3].error.status == 404
    assert isinstance(results[5], ItemError) and results[5].error.field == "reference"
    scores = [r for r in results if isinstance(r, Score)]
    assert [s.reward for s in scores] == [1.0 if i % 3 == 1 else 0.0 for i in range(7)]
    assert client.score_batch([]) == []


def test_batch_is_split_under_the_servers_limits(small_url: str) -> None:
    recorder = Recorder()
    items = [item(f"r{i % 4}", "r1", id=i) for i in range(20)]
    items.insert(11, item("x" * 3000, "x", id="huge"))
    with Client(small_url, token="s3cret", transport=recorder) as client:
        results = client.score_batch(items)
        assert client.limits() == Limits(max_body_bytes=2048, max_batch_items=3)  # read from /healthz
    assert [r.id for r in results] == [*range(11), "huge", *range(11, 20)]
    huge = results[11]
    assert isinstance(huge, ItemError) and huge.error.status == 413
    for i, result in enumerate(r for r in results if isinstance(r, Score)):
        assert result.status is Status.ok
        assert result.reward == (1.0 if i % 4 == 1 else 0.0)
    batches = [(size, status) for path, size, status, _ in recorder.log if path == "/v1/score/batch"]
    assert len(batches) >= 7  # 20 items, at most 3 per call
    assert all(status == 200 and size <= 2048 for size, status in batches)
    assert recorder.statuses("/healthz") == [200]  # limits are read once


def test_batch_limits_given_too_high_are_halved_on_413(small_url: str) -> None:
    recorder = Recorder()
    items = [item(f"r{i % 2}", "r0", id=i) for i in range(10)]
    with Client(
        small_url, token="s3cret", max_batch_items=100, max_body_bytes=1 << 20, transport=recorder
    ) as client:
        results = client.score_batch(items)
    assert [r.id for r in results] == list(range(10))
    assert [r.reward for r in results] == [1.0 if i % 2 == 0 else 0.0 for i in range(10)]
    statuses = recorder.statuses("/v1/score/batch")
    assert statuses[0] == 413 and statuses.count(200) >= 4
    assert recorder.statuses("/healthz") == []  # limits given: never asked


def test_plan_batch_splits_by_size_and_count() -> None:
    items = [item("a" * 300, "a", id=i) for i in range(10)]
    plan = plan_batch(items, Limits(max_body_bytes=1024, max_batch_items=4))
    sizes = [len(b'{"items":[]}') + sum(len(e) for _, e in chunk) + len(chunk) - 1 for chunk in plan.chunks]
    assert [index for chunk in plan.chunks for index, _ in chunk] == list(range(10))
    assert all(size <= 1024 * 0.9 for size in sizes)
    assert all(len(chunk) <= 4 for chunk in plan.chunks)
    assert all(json.loads(b'{"items":[' + b",".join(e for _, e in c) + b"]}") for c in plan.chunks)


def test_token_from_argument_and_environment(small_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PROCTOR_TOKEN", raising=False)
    with Client(small_url) as anonymous, pytest.raises(ProctorRequestError) as caught:
        anonymous.score(MISBEHAVE, "a", reference="a")
    assert caught.value.status == 401
    monkeypatch.setenv("PROCTOR_TOKEN", "s3cret")
    monkeypatch.setenv("PROCTOR_URL", small_url)
    with Client() as from_env:
        assert from_env.base_url == small_url
        assert from_env.score(MISBEHAVE, "a", reference="a").reward == 1.0


# -- retries -----------------------------------------------------------------------------------------------


def test_429_is_retried_after_retry_after(start_server: Callable[..., str]) -> None:
    busy_url = start_server(
        PROCTOR_MAX_CONCURRENCY=1, PROCTOR_MAX_QUEUE=0, PROCTOR_POOL_WORKERS=1, PROCTOR_RETRY_AFTER_S=1
    )
    sleepers = {"items": [item("sleep", "x", id=i) for i in range(3)]}

    def hold() -> None:
        # The only slot goes to three sleepers, each killed at test.misbehave's 1 s deadline, one by one.
        while httpx.post(f"{busy_url}/v1/score/batch", json=sleepers, timeout=60).status_code == 429:
            pass

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    deadline = time.monotonic() + 10
    while httpx.post(f"{busy_url}/v1/score", json=item("probe", "probe"), timeout=10).status_code != 429:
        assert time.monotonic() < deadline, "the server never became busy"
    recorder = Recorder()
    with Client(busy_url, transport=recorder, max_retries=20, backoff=0.05) as client:
        score = client.score(MISBEHAVE, "a", reference="a")
    holder.join(timeout=30)
    assert score.status is Status.ok and score.reward == 1.0
    log = [(status, at) for path, _, status, at in recorder.log if path == "/v1/score"]
    assert log[0][0] == 429 and log[-1][0] == 200
    waits = [
        later[1] - earlier[1] for earlier, later in zip(log[:-1], log[1:], strict=True) if earlier[0] == 429
    ]
    assert all(wait >= 1.0 for wait in waits)  # Retry-After: 1, not the 0.05 s backoff


def test_connection_refused_is_retried_until_the_server_comes_up(start_server: Callable[..., str]) -> None:
    port = free_port()
    starter = threading.Timer(1.0, start_server, kwargs={"PROCTOR_PORT": port})
    starter.start()
    recorder = Recorder()
    try:
        with Client(f"http://127.0.0.1:{port}", transport=recorder, max_retries=12, backoff=0.5) as client:
            score = client.score(MISBEHAVE, "a", reference="a")
    finally:
        starter.join()
    statuses = recorder.statuses("/v1/score")
    assert score.reward == 1.0
    assert statuses[0] == "ConnectError" and statuses[-1] == 200


def test_unavailable_after_retries_run_out() -> None:
    recorder = Recorder()
    url = f"http://127.0.0.1:{free_port()}"
    with (
        Client(url, transport=recorder, max_retries=2, backoff=0.01) as client,
        pytest.raises(ProctorUnavailable) as caught,
    ):
        client.score(MISBEHAVE, "a", reference="a")
    assert caught.value.attempts == 3
    assert isinstance(caught.value.last_error, httpx.ConnectError)
    assert recorder.statuses("/v1/score") == ["ConnectError"] * 3


def test_read_timeouts_are_retried(live_server: str) -> None:
    recorder = Recorder()
    with (
        Client(live_server, timeout=0.2, transport=recorder, max_retries=1, backoff=0.01) as client,
        pytest.raises(ProctorUnavailable) as caught,
    ):
        client.score(MISBEHAVE, "sleep", reference="x")  # the service needs its 1 s deadline to answer
    assert isinstance(caught.value.last_error, httpx.ReadTimeout)
    assert recorder.statuses("/v1/score") == ["ReadTimeout", "ReadTimeout"]


def test_bad_base_url_is_refused() -> None:
    with pytest.raises(ValueError, match="http"):
        Client("localhost:8000")


def test_server_error_carries_retry_after() -> None:
    response = httpx.Response(
        429, headers={"Retry-After": "2"}, json={"error": {"status": 429, "message": "busy"}}
    )
    with pytest.raises(ProctorServerError) as caught:
        check_response(response)
    assert (caught.value.status, caught.value.retry_after, caught.value.message) == (429, 2.0, "busy")


# -- the async client ------------------------------------------------------------------------------------


async def test_async_client_scores_and_splits(small_url: str) -> None:
    items = [item(f"r{i % 3}", "r2", id=i) for i in range(8)] + [item("y" * 3000, "y", id="huge")]
    async with AsyncClient(small_url, token="s3cret") as client:
        single = await client.score(MISBEHAVE, "b", reference="b", id="one")
        results = await client.score_batch(items)
        limits = await client.limits()
        with pytest.raises(ProctorRequestError) as caught:
            await client.score("nope", "x")
        verifiers = await client.verifiers()
    assert (single.reward, single.id) == (1.0, "one")
    assert limits.max_batch_items == 3
    assert [r.id for r in results] == [*range(8), "huge"]
    assert [r.reward for r in results[:8]] == [1.0 if i % 3 == 2 else 0.0 for i in range(8)]
    assert isinstance(results[8], ItemError) and results[8].error.status == 413
    assert (caught.value.status, caught.value.field) == (404, "verifier")
    assert MISBEHAVE in {v["name"] for v in verifiers}


async def test_async_client_unavailable() -> None:
    async with AsyncClient(f"http://127.0.0.1:{free_port()}", max_retries=1, backoff=0.01) as client:
        with pytest.raises(ProctorUnavailable) as caught:
            await client.health()
    assert caught.value.attempts == 2
