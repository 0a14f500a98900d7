"""Fixes for red team 18's session findings: F5 (locks outliving sessions), F6 (idempotency keys reused with
another request), F7 (message and transcript sizes), F9 (non-object batch items) and F10 (bools as integers).

Nothing here runs a tool in a sandbox: steps call a tool that does not exist (an `error` observation) or
answer.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from proctor.contract import RequestError
from proctor.engine import Engine
from proctor.environments.tools.sessions import (
    CreateSession,
    GeneratedTaskRef,
    MemorySessionStore,
    SessionManager,
    SessionOptions,
    StepRequest,
    json_size,
    owner_of,
)
from proctor.settings import Settings

USER_TASK = {"prompt": "What is 2**20 + 3?", "reference": "1048579"}
MATH = {"environment": "tool.math_python", "task": USER_TASK}


@pytest.fixture(scope="module")
def engine():
    engine = Engine(Settings(cache_size=0))
    yield engine
    engine.close()


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def unknown_call(call_id: str = "c1", content: str = "") -> dict[str, Any]:
    """An assistant message calling a tool that does not exist: an error observation, nothing runs."""
    return {
        "role": "assistant",
        "content": content,
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": "nope", "arguments": json.dumps({})}}
        ],
    }


def answer(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


# -- F5: a session's lock lives only while a request for it does --------------------------------------------


def test_no_lock_outlives_a_request(engine: Engine):
    async def probe() -> list[int]:
        sessions = SessionManager(engine=engine)
        left: list[int] = []
        for index in range(50):
            with pytest.raises(RequestError) as error:
                await sessions.step(f"ses_unknown_{index}", answer("x"))
            assert error.value.status == 404
            with pytest.raises(RequestError):
                await sessions.finish(f"ses_unknown_f{index}", answer("x"))
            await sessions.delete(f"ses_unknown_d{index}")
        left.append(len(sessions._locks))
        mine = (await sessions.create(MATH, owner_of("alice")))["session_id"]
        with pytest.raises(RequestError) as other:  # another caller's session is unknown to them
            await sessions.step(mine, unknown_call(), owner=owner_of("mallory"))
        assert other.value.status == 404
        left.append(len(sessions._locks))
        await sessions.step(mine, unknown_call(), 1, owner_of("alice"))
        left.append(len(sessions._locks))
        await sessions.delete(mine, owner_of("alice"))
        left.append(len(sessions._locks))
        await sessions.close()
        return left

    assert run(probe()) == [0, 0, 0, 0]


def test_expired_and_dropped_sessions_leave_no_lock(engine: Engine):
    now = [1000.0]

    async def probe() -> tuple[int, int, int]:
        sessions = SessionManager(engine=engine, clock=lambda: now[0], retention_s=5.0)
        sid = (await sessions.create(MATH))["session_id"]
        await sessions.step(sid, unknown_call())
        now[0] += 10_000
        expired = await sessions.sweep()
        with pytest.raises(RequestError) as gone:
            await sessions.step(sid, unknown_call("c2"))
        assert gone.value.status == 410
        locks_after_expiry = len(sessions._locks)
        now[0] += 10
        dropped = await sessions.sweep()
        with pytest.raises(RequestError) as unknown:
            await sessions.get(sid)
        assert unknown.value.status == 404
        await sessions.close()
        return expired + dropped, locks_after_expiry, len(sessions._locks)

    assert run(probe()) == (2, 0, 0)


def test_steps_of_one_session_still_run_one_at_a_time(engine: Engine):
    async def probe() -> tuple[list[int], int]:
        sessions = SessionManager(engine=engine)
        sid = (await sessions.create(MATH))["session_id"]
        results = await asyncio.gather(
            *(sessions.step(sid, unknown_call(f"c{n}"), None) for n in range(4)), return_exceptions=True
        )
        steps = sorted(r["step"] for r in results if isinstance(r, dict))
        left = len(sessions._locks)
        await sessions.close()
        return steps, left

    assert run(probe()) == ([1, 2, 3, 4], 0)


# -- F6: an idempotency key names one create request --------------------------------------------------------


def test_idempotency_key_is_bound_to_its_request(engine: Engine):
    async def probe() -> None:
        sessions = SessionManager(engine=engine)
        first = await sessions.create({**MATH, "id": "rollout-7"})
        again = await sessions.create({**MATH, "options": {}, "id": "rollout-7"})  # defaults spelled out
        assert again["session_id"] == first["session_id"]
        assert (await sessions.create(CreateSession(**MATH, id="rollout-7")))["session_id"] == first[
            "session_id"
        ]
        for other in (
            {"environment": "tool.search_qa", "task": {"seed": 0}},
            {**MATH, "task": {**USER_TASK, "reference": "7"}},
            {**MATH, "options": {"max_turns": 2}},
        ):
            with pytest.raises(RequestError) as error:
                await sessions.create({**other, "id": "rollout-7"})
            assert (error.value.status, error.value.field) == (409, "id")
        # another caller's key is another key
        theirs = await sessions.create(
            {**MATH, "task": {**USER_TASK, "reference": "7"}, "id": "rollout-7"}, "b"
        )
        assert theirs["session_id"] != first["session_id"]
        # a key freed by delete names a new request
        await sessions.delete(first["session_id"])
        fresh = await sessions.create({**MATH, "options": {"max_turns": 2}, "id": "rollout-7"})
        assert fresh["session_id"] != first["session_id"] and fresh["limits"]["max_turns"] == 2
        await sessions.close()

    run(probe())


# -- F7: message and transcript sizes ---------------------------------------------------------------------


def test_an_oversized_message_is_refused_before_it_is_stored(engine: Engine):
    async def probe() -> None:
        sessions = SessionManager(engine=engine, max_message_bytes=10_000)
        sid = (await sessions.create(MATH))["session_id"]
        for attempt in (
            sessions.step(sid, unknown_call(content="x" * 20_000)),
            sessions.finish(sid, answer("x" * 20_000)),
        ):
            with pytest.raises(RequestError) as error:
                await attempt
            assert (error.value.status, error.value.field) == (413, "message")
        record = await sessions.get(sid)
        assert record["steps"] == [] and not record["done"] and len(record["transcript"]) == 1
        assert (await sessions.step(sid, unknown_call(content="x" * 5_000)))["step"] == 1
        await sessions.close()

    run(probe())


def test_the_default_limits_refuse_the_red_team_message(engine: Engine):
    async def probe() -> int:
        sessions = SessionManager(engine=engine)
        sid = (await sessions.create(MATH))["session_id"]
        with pytest.raises(RequestError) as error:
            await sessions.step(sid, unknown_call(content="x" * 4_000_000))
        await sessions.close()
        return error.value.status

    assert run(probe()) == 413


def test_a_session_past_its_transcript_budget_refuses_steps_and_still_finishes(engine: Engine):
    async def probe() -> None:
        sessions = SessionManager(engine=engine, max_message_bytes=4_000, max_transcript_bytes=10_000)
        sid = (await sessions.create(MATH))["session_id"]
        taken = 0
        with pytest.raises(RequestError) as error:
            for n in range(1, 20):
                await sessions.step(sid, unknown_call(f"c{n}", content="y" * 3_000), n)
                taken = n
        assert (error.value.status, error.value.field) == (413, "message")
        assert "finish" in error.value.message
        assert 1 <= taken < 4
        record = await sessions.get(sid)
        assert len(record["steps"]) == taken and not record["done"]
        assert sum(json_size(m) for m in record["transcript"]) <= 10_000
        # a step already taken still replays; finishing with a message past the budget is refused, without one
        # it scores the transcript as it stands
        assert (await sessions.step(sid, unknown_call("c1", content="y" * 3_000), 1))["step"] == 1
        with pytest.raises(RequestError):
            await sessions.finish(sid, answer("z" * 3_900))
        score = await sessions.finish(sid)
        assert score["status"] == "ok" and (await sessions.get(sid))["end_reason"] == "no_tool_call"
        await sessions.close()

    run(probe())


def test_a_task_past_the_transcript_budget_is_refused(engine: Engine):
    async def probe() -> None:
        sessions = SessionManager(engine=engine, max_transcript_bytes=5_000)
        with pytest.raises(RequestError) as error:
            await sessions.create({**MATH, "task": {"prompt": "p" * 6_000, "reference": "1"}})
        assert error.value.status == 413 and error.value.field is not None
        assert error.value.field.startswith("task")
        assert await sessions.open_count() == 0
        await sessions.close()

    run(probe())


def test_an_expired_tombstone_keeps_no_transcript(engine: Engine):
    now = [1000.0]

    async def probe() -> None:
        store = MemorySessionStore()
        sessions = SessionManager(store, engine=engine, clock=lambda: now[0])
        sid = (await sessions.create(MATH))["session_id"]
        await sessions.step(sid, unknown_call(content="x" * 5_000))
        now[0] += 10_000
        await sessions.sweep()
        tomb = await store.get(sid)
        assert tomb is not None and tomb.expired
        assert tomb.transcript == [] and tomb.steps == [] and tomb.actions == [] and tomb.size_bytes == 0
        await sessions.close()

    run(probe())


def test_the_store_keeps_finished_records_within_a_byte_budget(engine: Engine):
    async def probe() -> None:
        store = MemorySessionStore(max_closed_bytes=30_000)
        sessions = SessionManager(store, engine=engine)
        ids = []
        for _ in range(6):
            sid = (await sessions.create(MATH))["session_id"]
            await sessions.step(sid, unknown_call(content="x" * 9_000))
            await sessions.finish(sid)
            ids.append(sid)
        kept = [sid for sid in ids if await store.get(sid) is not None]
        assert kept == ids[-len(kept) :] and 1 <= len(kept) <= 3  # the oldest went first
        assert store._closed_bytes == sum(r.size_bytes for r in store._closed.values()) <= 30_000
        await sessions.delete(kept[-1])
        assert store._closed_bytes == sum(r.size_bytes for r in store._closed.values())
        await sessions.close()

    run(probe())


# -- F10: bools are not integers --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "data"),
    [
        (StepRequest, {"message": answer("x"), "step": True}),
        (StepRequest, {"message": answer("x"), "step": False}),
        (GeneratedTaskRef, {"seed": True}),
        (GeneratedTaskRef, {"seed": 0, "index": True}),
        (SessionOptions, {"max_turns": True}),
    ],
)
def test_bools_are_refused_where_integers_are_taken(model: Any, data: dict[str, Any]):
    with pytest.raises(ValidationError):
        model.model_validate(data)


def test_integers_still_read_as_before():
    assert StepRequest.model_validate({"message": answer("x"), "step": 2.0}).step == 2
    assert StepRequest.model_validate({"message": answer("x")}).step is None
    assert GeneratedTaskRef.model_validate({"seed": 3, "index": 1}).index == 1
    assert SessionOptions.model_validate({"max_turns": 4}).max_turns == 4
    with pytest.raises(ValidationError):
        StepRequest.model_validate({"message": answer("x"), "step": 0})
    with pytest.raises(ValidationError):
        SessionOptions.model_validate({"max_turns": 257})
    schema = StepRequest.model_json_schema()["properties"]["step"]["anyOf"][0]
    assert (schema["minimum"], schema["maximum"]) == (1, 100_000)


def test_a_bool_seed_or_index_is_a_422_naming_it(engine: Engine):
    async def probe() -> list[tuple[int, str | None]]:
        sessions = SessionManager(engine=engine)
        answers = []
        for task in ({"seed": True}, {"seed": 0, "index": False}):
            with pytest.raises(RequestError) as error:
                await sessions.create({"environment": "tool.math_python", "task": task})
            answers.append((error.value.status, error.value.field))
        await sessions.close()
        return answers

    assert run(probe()) == [(422, "task.seed"), (422, "task.index")]


# -- over HTTP: F9 (batch items), and the 409 / 413 / 422 answers -----------------------------------------


def test_batch_items_that_are_not_objects_fail_only_their_slots(live_server: str):
    opened = httpx.post(f"{live_server}/v1/sessions", json=MATH, timeout=60)
    assert opened.status_code == 201, opened.text
    sid = opened.json()["session_id"]
    good = {"session_id": sid, "message": unknown_call(), "step": 1}
    items = [good, 1, None, "x", [good], {"session_id": sid, "message": answer("y"), "step": True}]
    answered = httpx.post(f"{live_server}/v1/sessions/step/batch", json={"items": items}, timeout=60)
    assert answered.status_code == 200, answered.text
    results = answered.json()["results"]
    assert len(results) == len(items) and results[0]["step"] == 1
    for index, result in enumerate(results[1:], start=1):
        assert result["error"]["status"] == 422, result
        assert result["error"]["field"].startswith(f"items.{index}"), result
    assert results[5]["session_id"] == sid and results[5]["error"]["field"] == "items.5.step"
    still = httpx.post(f"{live_server}/v1/sessions/step/batch", json={"items": "nope"}, timeout=60)
    assert still.status_code == 422  # the body itself must still hold a list


def test_http_answers_for_keys_sizes_and_bools(live_server: str):
    key = {"id": "http-rollout-7"}
    first = httpx.post(f"{live_server}/v1/sessions", json={**MATH, **key}, timeout=60)
    again = httpx.post(f"{live_server}/v1/sessions", json={**MATH, **key}, timeout=60)
    assert first.status_code == again.status_code == 201
    assert first.json()["session_id"] == again.json()["session_id"]
    other = httpx.post(
        f"{live_server}/v1/sessions",
        json={"environment": "tool.search_qa", "task": {"seed": 0}, **key},
        timeout=60,
    )
    assert other.status_code == 409 and other.json()["error"]["field"] == "id", other.text

    sid = first.json()["session_id"]
    big = httpx.post(
        f"{live_server}/v1/sessions/{sid}/step",
        json={"message": unknown_call(content="x" * 2_000_000)},
        timeout=60,
    )
    assert big.status_code == 413 and big.json()["error"]["field"] == "message", big.text
    as_bool = httpx.post(
        f"{live_server}/v1/sessions/{sid}/step", json={"message": unknown_call(), "step": True}, timeout=60
    )
    assert as_bool.status_code == 422 and as_bool.json()["error"]["field"] == "step", as_bool.text
    seed = httpx.post(
        f"{live_server}/v1/sessions",
        json={"environment": "tool.math_python", "task": {"seed": True}},
        timeout=60,
    )
    assert seed.status_code == 422 and seed.json()["error"]["field"] == "task.seed", seed.text
    record = httpx.get(f"{live_server}/v1/sessions/{sid}", timeout=60).json()
    assert record["steps"] == [] and "request_fingerprint" not in record and "size_bytes" not in record
