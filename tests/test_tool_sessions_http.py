"""Tool sessions over real HTTP (uvicorn on a free port): routes, idempotent steps, 409/410/404/422, replay
through /v1/score, the batch route, the environment listing, auth and the session metrics."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.usefixtures("backend")  # the python tool needs the configured sandbox

TASK = {"prompt": "What is 12345 * 6789?", "reference": "83810205"}


def call(code: str, call_id: str = "c1") -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": "python", "arguments": json.dumps({"code": code})},
            }
        ],
    }


def answer(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def open_session(base: str, **body: Any) -> dict[str, Any]:
    made = httpx.post(
        f"{base}/v1/sessions", json={"environment": "tool.math_python", "task": TASK, **body}, timeout=30
    )
    assert made.status_code == 201, made.text
    return made.json()


def metric(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and all(f'{k}="{v}"' in line for k, v in labels.items()):
            head = line.split(" ")[0]
            if head == name or head.startswith(name + "{"):
                total += float(line.rsplit(" ", 1)[1])
    return total


def test_a_session_over_http_steps_answers_and_replays(live_server: str):
    base = live_server
    before = httpx.get(f"{base}/metrics", timeout=30).text
    opened = open_session(base)
    sid = opened["session_id"]
    assert opened["tools"][0]["function"]["parameters"]["required"] == ["code"]
    assert opened["limits"]["max_turns"] >= 2 and opened["expires_at"] > time.time()
    first = httpx.post(
        f"{base}/v1/sessions/{sid}/step", json={"message": call("print(12345 * 6789)"), "step": 1}, timeout=60
    )
    assert first.status_code == 200, first.text
    assert first.json()["observations"][0]["content"] == "83810205" and first.json()["done"] is False
    repeat = httpx.post(
        f"{base}/v1/sessions/{sid}/step", json={"message": call("print(12345 * 6789)"), "step": 1}, timeout=60
    )
    assert repeat.json() == first.json()
    skipped = httpx.post(
        f"{base}/v1/sessions/{sid}/step", json={"message": answer("x"), "step": 5}, timeout=60
    )
    assert skipped.status_code == 409 and skipped.json()["error"]["field"] == "step"
    last = httpx.post(
        f"{base}/v1/sessions/{sid}/step",
        json={"message": answer("It is \\boxed{83810205}."), "step": 2},
        timeout=60,
    )
    done = last.json()
    assert done["done"] and done["end_reason"] == "answer" and done["score"]["reward"] == 1.0
    after = httpx.post(
        f"{base}/v1/sessions/{sid}/step", json={"message": answer("\\boxed{1}"), "step": 3}, timeout=60
    )
    assert (
        after.status_code == 409
        and after.json()["score"] == done["score"]
        and after.json()["end_reason"] == "answer"
    )
    finished = httpx.post(f"{base}/v1/sessions/{sid}/finish", json={}, timeout=60)
    assert finished.status_code == 200 and finished.json() == done["score"]

    record = httpx.get(f"{base}/v1/sessions/{sid}", timeout=30).json()
    assert record["transcript"][1] == call("print(12345 * 6789)")
    assert len(record["actions"]) == 1  # the repeated step ran nothing
    replay = httpx.post(
        f"{base}/v1/score",
        json={
            "verifier": "tool.math_python",
            "response": record["transcript"],
            "reference": record["task"]["reference"],
        },
        timeout=60,
    ).json()
    for key in ("verifier", "status", "reward", "correct", "reason", "components", "details"):
        assert replay[key] == done["score"][key], key

    metrics = httpx.get(f"{base}/metrics", timeout=30).text
    created = "proctor_sessions_created_total"
    assert (
        metric(metrics, created, environment="tool.math_python")
        == metric(before, created, environment="tool.math_python") + 1
    )
    ended = "proctor_sessions_ended_total"
    assert metric(metrics, ended, end_reason="answer") == metric(before, ended, end_reason="answer") + 1
    steps = "proctor_session_step_duration_seconds_count"
    assert metric(metrics, steps) == metric(before, steps) + 2
    tools = "proctor_session_tool_duration_seconds_count"
    assert (
        metric(metrics, tools, tool="python", status="ok")
        == metric(before, tools, tool="python", status="ok") + 1
    )
    assert "proctor_sessions_open" in metrics

    assert httpx.delete(f"{base}/v1/sessions/{sid}", timeout=30).status_code == 204
    assert httpx.delete(f"{base}/v1/sessions/{sid}", timeout=30).status_code == 204
    assert httpx.get(f"{base}/v1/sessions/{sid}", timeout=30).status_code == 404


def test_errors_over_http(live_server: str):
    base = live_server
    unknown_env = httpx.post(
        f"{base}/v1/sessions", json={"environment": "tool.nope", "task": TASK}, timeout=30
    )
    assert unknown_env.status_code == 404 and unknown_env.json()["error"]["field"] == "environment"
    bad_level = httpx.post(
        f"{base}/v1/sessions",
        json={"environment": "tool.math_python", "task": {"seed": 1, "level": "x"}},
        timeout=30,
    )
    assert bad_level.status_code == 422 and bad_level.json()["error"]["field"] == "task.level"
    unknown = httpx.post(f"{base}/v1/sessions/ses_nope/step", json={"message": answer("1")}, timeout=30)
    assert unknown.status_code == 404
    sid = open_session(base)["session_id"]
    wrong_role = httpx.post(
        f"{base}/v1/sessions/{sid}/step", json={"message": {"role": "user", "content": "x"}}, timeout=30
    )
    assert wrong_role.status_code == 422 and wrong_role.json()["error"]["field"] == "message.role"
    short = open_session(base, options={"deadline_s": 1})
    time.sleep(2.2)
    gone = httpx.post(
        f"{base}/v1/sessions/{short['session_id']}/step", json={"message": answer("1")}, timeout=30
    )
    assert gone.status_code == 410
    assert httpx.get(f"{base}/v1/sessions/{short['session_id']}", timeout=30).status_code == 410


def test_bundled_task_and_environment_listing(live_server: str):
    base = live_server
    listed = {env["name"]: env for env in httpx.get(f"{base}/v1/environments", timeout=30).json()}
    tool = listed["tool.math_python"]
    assert tool["kind"] == "tool" and tool["verifier"] == "tool.math_python"
    assert tool["tools"][0]["function"]["name"] == "python"
    assert tool["tools"][0]["function"]["parameters"]["properties"]["code"]["type"] == "string"
    tasks = httpx.post(
        f"{base}/v1/environments/tool.math_python/tasks", json={"seed": 4, "count": 2}, timeout=30
    ).json()
    task = tasks["tasks"][1]
    by_object = open_session(base, task=task)
    by_seed = open_session(base, task={"seed": 4, "index": 1})
    assert by_object["messages"] == by_seed["messages"] == task["prompt"]
    gold = task["metadata"]["gold_answer"]
    done = httpx.post(
        f"{base}/v1/sessions/{by_seed['session_id']}/finish",
        json={"message": answer(f"\\boxed{{{gold}}}")},
        timeout=60,
    ).json()
    assert done["reward"] == 1.0


def test_batch_steps_answer_in_order_and_a_bad_item_fails_only_its_slot(live_server: str):
    base = live_server
    a, b = open_session(base)["session_id"], open_session(base)["session_id"]
    items = [
        {"session_id": a, "message": call("print(1)"), "step": 1},
        {"session_id": b, "message": call("print(2)"), "step": 1},
        {"session_id": a, "message": answer("\\boxed{83810205}"), "step": 2},
        {"session_id": "ses_nope", "message": answer("1")},
        {"session_id": b, "message": answer("1"), "step": 7},
        {"message": answer("1")},
    ]
    results = httpx.post(f"{base}/v1/sessions/step/batch", json={"items": items}, timeout=60).json()[
        "results"
    ]
    assert results[0]["observations"][0]["content"] == "1"
    assert results[1]["observations"][0]["content"] == "2"
    assert results[2]["done"] and results[2]["score"]["reward"] == 1.0
    assert results[3]["error"]["status"] == 404
    assert results[4]["error"]["status"] == 409
    assert results[5]["error"]["status"] == 422 and results[5]["error"]["field"] == "items.5.session_id"


def test_sessions_need_the_token_when_auth_is_on(start_server):
    base = start_server(PROCTOR_TOKEN="s3cret")
    body = {"environment": "tool.math_python", "task": TASK}
    assert httpx.post(f"{base}/v1/sessions", json=body, timeout=30).status_code == 401
    auth = {"Authorization": "Bearer s3cret"}
    made = httpx.post(f"{base}/v1/sessions", json=body, headers=auth, timeout=30)
    assert made.status_code == 201
    sid = made.json()["session_id"]
    assert httpx.get(f"{base}/v1/sessions/{sid}", timeout=30).status_code == 401
    record = httpx.get(f"{base}/v1/sessions/{sid}", headers=auth, timeout=30).json()
    assert "owner" not in record and record["session_id"] == sid


def test_steps_take_admission_slots_and_a_full_service_answers_429(start_server):
    import threading

    base = start_server(PROCTOR_MAX_CONCURRENCY=1, PROCTOR_MAX_QUEUE=0)
    busy, waiting = open_session(base)["session_id"], open_session(base)["session_id"]
    slow: dict[str, Any] = {}

    def sleep_in_the_tool() -> None:
        slow["answer"] = httpx.post(
            f"{base}/v1/sessions/{busy}/step",
            json={"message": call("import time\ntime.sleep(3)\nprint('up')")},
            timeout=60,
        )

    thread = threading.Thread(target=sleep_in_the_tool)
    thread.start()
    try:
        time.sleep(1.0)  # the slow step holds the only slot
        refused = httpx.post(
            f"{base}/v1/sessions/{waiting}/step", json={"message": call("print(1)")}, timeout=30
        )
        assert refused.status_code == 429 and refused.headers["Retry-After"]
    finally:
        thread.join()
    assert slow["answer"].json()["observations"][0]["content"] == "up"
    # Refused before it ran: the same step number is still the next one.
    again = httpx.post(
        f"{base}/v1/sessions/{waiting}/step", json={"message": call("print(1)"), "step": 1}, timeout=30
    )
    assert again.status_code == 200 and again.json()["step"] == 1


class LosesOneAnswer(httpx.HTTPTransport):
    """Sends every request, but loses the answer of the first step (as a dropped connection would)."""

    def __init__(self) -> None:
        super().__init__()
        self.lost = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        if request.url.path.endswith("/step") and not self.lost:
            response.read()
            self.lost += 1
            raise httpx.ReadError("connection dropped", request=request)
        return response


def test_the_http_client_retries_steps_without_running_tools_twice(live_server: str):
    from proctor.client import AsyncClient, Client

    transport = LosesOneAnswer()
    with Client(live_server, transport=transport, backoff=0.01) as client:
        with client.open_session("tool.math_python", TASK) as session:
            assert session.tools[0]["function"]["name"] == "python"
            first = session.step(call("import random\nprint(random.random())"))
            assert transport.lost == 1 and first["step"] == 1
            record = session.record()
            assert (
                len(record["actions"]) == 1
            )  # the lost answer's step ran once; the retry got its stored result
            assert record["steps"][0]["observations"] == first["observations"]
            assert session.step(answer("\\boxed{83810205}"))["score"]["reward"] == 1.0
            assert session.finish().reward == 1.0
        assert httpx.get(f"{live_server}/v1/sessions/{session.session_id}", timeout=30).status_code == 404

    async def remote() -> float:
        async with AsyncClient(live_server) as client:
            session = await client.open_session("tool.math_python", TASK)
            async with session:
                await session.step(call("print(12345 * 6789)"))
                return (await session.finish(answer("\\boxed{83810205}"))).reward

    import asyncio

    assert asyncio.run(remote()) == 1.0
