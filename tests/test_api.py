"""The HTTP service over real HTTP: scoring, batches, errors, limits, admission control, auth, metrics."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import httpx
import pytest

from tests.conftest import REPO_ROOT, free_port, server_env

SLEEP = {"verifier": "test.misbehave", "response": "sleep", "reference": "x"}


def post(base: str, path: str, body: object, **kwargs: object) -> httpx.Response:
    """POST JSON with a generous timeout (the machine is shared)."""
    return httpx.post(f"{base}{path}", json=body, timeout=60, **kwargs)


def assert_error(response: httpx.Response, status: int, field: str | None = None) -> dict:
    """Check the one error shape and return its body."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}
    assert body["error"]["status"] == status
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    assert body["error"]["field"] == field, body
    return body["error"]


def metric_value(text: str, name: str, **labels: str) -> float | None:
    """The value of one sample in Prometheus text, matching all the given labels (None if absent)."""
    for line in text.splitlines():
        if not line.startswith(name + "{") and line.split(" ")[0] != name:
            continue
        sample, _, value = line.rpartition(" ")
        if all(f'{key}="{val}"' in sample for key, val in labels.items()):
            return float(value)
    return None


def wait_for(predicate: Callable[[], bool], timeout_s: float = 15.0) -> None:
    """Poll until predicate() holds; fail after timeout_s (hang detection, not a timing assertion)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    pytest.fail(f"condition not reached within {timeout_s} s")


@pytest.fixture
def background() -> Iterator[ThreadPoolExecutor]:
    """A thread pool for requests that must stay in flight while the test talks to the server."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        yield pool


# -- scoring -----------------------------------------------------------------------------------------


def test_healthz_reports_version_verifiers_and_limits(live_server: str) -> None:
    import proctor

    body = httpx.get(f"{live_server}/healthz", timeout=30).json()
    assert body["status"] == "ok"
    assert body["version"] == proctor.__version__
    assert body["verifiers"] >= 2  # text verifiers + test.misbehave
    assert body["limits"] == {"max_body_bytes": 32 * 1024 * 1024, "max_batch_items": 10_000}
    post(live_server, "/v1/score", {"verifier": "test.misbehave", "response": "x", "reference": "x"})
    pool = httpx.get(f"{live_server}/healthz", timeout=30).json()["pool"]  # started by the pool item
    assert pool["workers"] == 2 and pool["submitted"] >= 1


def test_score_right_wrong_and_empty_response(live_server: str) -> None:
    right = post(
        live_server,
        "/v1/score",
        {"verifier": "text.match", "response": "Answer: 42", "reference": "42", "id": "a"},
    )
    assert right.status_code == 200, right.text
    score = right.json()
    assert score["id"] == "a"
    assert score["status"] == "ok" and score["reward"] == 1.0 and score["correct"] is True
    assert score["verifier"].startswith("text.match@")

    wrong = post(
        live_server,
        "/v1/score",
        {"verifier": "text.match", "response": "Answer: 41", "reference": "42", "id": 2},
    )
    assert wrong.status_code == 200
    assert wrong.json()["id"] == 2
    assert (
        wrong.json()["status"] == "ok" and wrong.json()["reward"] == 0.0 and wrong.json()["correct"] is False
    )
    assert wrong.json()["reason"]

    empty = post(live_server, "/v1/score", {"verifier": "text.match", "response": "", "reference": "42"})
    assert empty.status_code == 200, empty.text
    assert empty.json()["status"] == "ok" and empty.json()["reward"] == 0.0


def test_pool_verifier_scores_over_http(live_server: str) -> None:
    response = post(
        live_server, "/v1/score", {"verifier": "test.misbehave", "response": "same", "reference": "same"}
    )
    assert response.status_code == 200
    assert response.json()["status"] == "ok" and response.json()["reward"] == 1.0


def test_chat_transcript_response_is_accepted(live_server: str) -> None:
    messages = [{"role": "user", "content": "What is 6*7?"}, {"role": "assistant", "content": "Answer: 42"}]
    response = post(
        live_server, "/v1/score", {"verifier": "text.match", "response": messages, "reference": "42"}
    )
    assert response.status_code == 200, response.text
    assert response.json()["reward"] == 1.0


def test_unknown_verifier_is_404_naming_the_known_ones(live_server: str) -> None:
    error = assert_error(
        post(live_server, "/v1/score", {"verifier": "no.such", "response": "x"}), 404, "verifier"
    )
    assert "no.such" in error["message"]
    assert "text.match" in error["message"] and "test.misbehave" in error["message"]


def test_invalid_reference_and_options_are_422_naming_the_field(live_server: str) -> None:
    bad_reference = {"verifier": "test.misbehave", "response": "x", "reference": {"not": "a string"}}
    assert_error(post(live_server, "/v1/score", bad_reference), 422, "reference")
    bad_option = {
        "verifier": "test.misbehave",
        "response": "x",
        "reference": "x",
        "options": {"deadline_s": -1},
    }
    assert_error(post(live_server, "/v1/score", bad_option), 422, "options.deadline_s")
    unknown_option = {
        "verifier": "test.misbehave",
        "response": "x",
        "reference": "x",
        "options": {"bogus": 1},
    }
    assert_error(post(live_server, "/v1/score", unknown_option), 422, "options.bogus")


def test_missing_and_mistyped_fields_are_422(live_server: str) -> None:
    error = assert_error(post(live_server, "/v1/score", {"response": "x"}), 422, "verifier")
    assert "missing" in error["message"]
    assert_error(post(live_server, "/v1/score", {"verifier": "text.match"}), 422, "response")
    assert_error(post(live_server, "/v1/score", {"verifier": "text.match", "response": 5}), 422, "response")
    extra = {"verifier": "text.match", "response": "x", "surprise": 1}
    assert_error(post(live_server, "/v1/score", extra), 422, "surprise")


def test_invalid_json_and_non_json_bodies_are_422(live_server: str) -> None:
    broken = httpx.post(
        f"{live_server}/v1/score",
        content=b'{"verifier": ',
        headers={"content-type": "application/json"},
        timeout=30,
    )
    assert "JSON" in assert_error(broken, 422)["message"]
    empty = httpx.post(f"{live_server}/v1/score", headers={"content-type": "application/json"}, timeout=30)
    assert "required" in assert_error(empty, 422)["message"]
    form = httpx.post(
        f"{live_server}/v1/score", content=b"verifier=x", headers={"content-type": "text/plain"}, timeout=30
    )
    assert "application/json" in assert_error(form, 422)["message"]


def test_lone_surrogates_never_break_the_response(live_server: str) -> None:
    body = b'{"verifier": "text.match", "response": "\\ud800 Answer: 42", "reference": "42", "id": "\\udc00"}'
    response = httpx.post(
        f"{live_server}/v1/score", content=body, headers={"content-type": "application/json"}, timeout=30
    )
    assert response.status_code == 200, response.text
    assert response.json()["id"] == "\udc00"
    odd_name = b'{"verifier": "\\ud800", "response": "x"}'
    response = httpx.post(
        f"{live_server}/v1/score", content=odd_name, headers={"content-type": "application/json"}, timeout=30
    )
    assert_error(response, 422, "verifier")


def test_unknown_route_and_method_use_the_error_shape(live_server: str) -> None:
    assert_error(httpx.get(f"{live_server}/v1/nothing", timeout=30), 404)
    assert_error(httpx.get(f"{live_server}/v1/score", timeout=30), 405)


def deep_call_reference(depth: int) -> dict:
    """A code `call` case whose argument nests `depth` lists (the reference itself adds 5 levels)."""
    argument: object = 1
    for _ in range(depth):
        argument = [argument]
    case = {"args": [argument], "expected": 1}
    return {"language": "python", "tests": {"format": "call", "entry_point": "f", "cases": [case]}}


DEEP_CODE = "```python\ndef f(x):\n    return 1\n```"


def test_reference_and_options_nested_past_200_levels_are_422(live_server: str) -> None:
    # 255 levels used to crash request preparation (HTTP 500); 220-254 became a masked verifier_error.
    for depth in (196, 230, 255, 900):
        body = {"verifier": "code", "response": DEEP_CODE, "reference": deep_call_reference(depth)}
        error = assert_error(post(live_server, "/v1/score", body), 422, "reference")
        assert "more than 200 levels" in error["message"]
    options = {
        "verifier": "text.match",
        "response": "x",
        "reference": "x",
        "options": {"a": deep_call_reference(250)},
    }
    assert_error(post(live_server, "/v1/score", options), 422, "options")


def test_json_body_nested_past_the_parser_limit_is_422(live_server: str) -> None:
    for depth in (100_000, 5_000):
        body = (
            b'{"verifier": "text.match", "response": "x", "reference": ' + b"[" * depth + b"]" * depth + b"}"
        )
        for path in ("/v1/score", "/v1/score/batch", "/compat/slime", "/run_code", "/v1/graders/run"):
            response = httpx.post(
                f"{live_server}{path}", content=body, headers={"content-type": "application/json"}, timeout=30
            )
            assert "nested too deeply" in assert_error(response, 422)["message"], path
    not_utf8 = httpx.post(
        f"{live_server}/v1/score",
        content=b'{"verifier": "\xff"}',
        headers={"content-type": "application/json"},
        timeout=30,
    )
    assert "UTF-8" in assert_error(not_utf8, 422)["message"]


# -- batches -----------------------------------------------------------------------------------------


def test_batch_keeps_order_and_isolates_bad_items(live_server: str) -> None:
    items = [
        {"verifier": "text.match", "response": "Answer: 1", "reference": "1", "id": "good-1"},
        {"verifier": "no.such", "response": "x", "id": "unknown"},
        {"verifier": "test.misbehave", "response": "x", "reference": 7, "id": "bad-ref"},
        {"verifier": "text.match", "response": "Answer: 3", "reference": "4", "id": "wrong"},
        {"verifier": "test.misbehave", "response": "y", "reference": "y", "id": "pooled"},
    ]
    response = post(live_server, "/v1/score/batch", {"items": items})
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert [r["id"] for r in results] == ["good-1", "unknown", "bad-ref", "wrong", "pooled"]
    assert results[0]["status"] == "ok" and results[0]["reward"] == 1.0
    assert results[1]["error"]["status"] == 404 and results[1]["error"]["field"] == "verifier"
    assert results[2]["error"] == {**results[2]["error"], "status": 422, "field": "reference"}
    assert results[3]["status"] == "ok" and results[3]["reward"] == 0.0
    assert results[4]["status"] == "ok" and results[4]["reward"] == 1.0


def test_deeply_nested_item_fails_only_its_batch_slot(live_server: str) -> None:
    items = [
        {"verifier": "text.match", "response": "Answer: 1", "reference": "1", "id": 0},
        {"verifier": "code", "response": DEEP_CODE, "reference": deep_call_reference(255), "id": 1},
        {"verifier": "text.match", "response": "Answer: 2", "reference": "2", "id": 2},
    ]
    response = post(live_server, "/v1/score/batch", {"items": items})
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert results[1]["id"] == 1 and results[1]["error"]["status"] == 422
    assert results[1]["error"]["field"] == "reference"
    assert [results[0]["reward"], results[2]["reward"]] == [1.0, 1.0]


def test_large_batch_comes_back_in_order(live_server: str) -> None:
    items = [
        {
            "verifier": "text.match",
            "response": f"Answer: {i}",
            "reference": str(i if i % 3 else i + 1),
            "id": i,
        }
        for i in range(300)
    ]
    results = post(live_server, "/v1/score/batch", {"items": items}).json()["results"]
    assert [r["id"] for r in results] == list(range(300))
    assert [r["reward"] for r in results] == [0.0 if i % 3 == 0 else 1.0 for i in range(300)]


def test_batch_item_that_is_not_an_object_is_422_naming_it(live_server: str) -> None:
    body = {"items": [{"verifier": "text.match", "response": "x", "reference": "x"}, 5]}
    assert_error(post(live_server, "/v1/score/batch", body), 422, "items.1")


def test_timeout_item_is_a_status_while_other_requests_are_served(
    live_server: str, background: ThreadPoolExecutor
) -> None:
    slow: Future = background.submit(post, live_server, "/v1/score", {**SLEEP, "options": {"deadline_s": 4}})
    batch_with_sleeper: Future = background.submit(
        post,
        live_server,
        "/v1/score/batch",
        {
            "items": [
                {**SLEEP, "id": "s"},
                {"verifier": "text.match", "response": "Answer: 5", "reference": "5"},
            ]
        },
    )
    # While the sleepers hold pool workers, the service keeps answering.
    assert httpx.get(f"{live_server}/healthz", timeout=30).status_code == 200
    quick = post(
        live_server, "/v1/score", {"verifier": "text.match", "response": "Answer: 9", "reference": "9"}
    )
    assert quick.status_code == 200 and quick.json()["reward"] == 1.0
    assert not slow.done()

    timed_out = slow.result(timeout=60)
    assert timed_out.status_code == 200
    score = timed_out.json()
    assert score["status"] == "timeout" and score["reward"] == 0.0 and score["correct"] is None
    results = batch_with_sleeper.result(timeout=60).json()["results"]
    assert results[0]["status"] == "timeout"
    assert results[1]["status"] == "ok" and results[1]["reward"] == 1.0


# -- verifiers, docs, metrics -------------------------------------------------------------------------


def test_verifiers_list_names_versions_and_schemas(live_server: str) -> None:
    listed = httpx.get(f"{live_server}/v1/verifiers", timeout=30).json()
    by_name = {entry["name"]: entry for entry in listed}
    misbehave = by_name["test.misbehave"]
    assert misbehave["version"] == "1"
    assert misbehave["execution"] == "pool"
    assert misbehave["reference_schema"] == {"type": "string"}
    assert "deadline_s" in misbehave["options_schema"]["properties"]
    assert "text.match" in by_name

    one = httpx.get(f"{live_server}/v1/verifiers/test.misbehave", timeout=30)
    assert one.status_code == 200 and one.json() == misbehave
    error = assert_error(httpx.get(f"{live_server}/v1/verifiers/nope", timeout=30), 404, "name")
    assert "test.misbehave" in error["message"]


def test_openapi_schema_and_docs_are_served(live_server: str) -> None:
    schema = httpx.get(f"{live_server}/openapi.json", timeout=30).json()
    for path in (
        "/v1/score",
        "/v1/score/batch",
        "/v1/verifiers",
        "/v1/verifiers/{name}",
        "/healthz",
        "/metrics",
        "/compat/openrlhf/get_reward",
        "/compat/slime",
    ):
        assert path in schema["paths"], path
    score_responses = schema["paths"]["/v1/score"]["post"]["responses"]
    assert score_responses["422"]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorResponse")
    assert score_responses["200"]["content"]["application/json"]["schema"]["$ref"].endswith("/Score")
    assert httpx.get(f"{live_server}/docs", timeout=30).status_code == 200


def test_metrics_count_requests_scores_and_latency(live_server: str) -> None:
    before = httpx.get(f"{live_server}/metrics", timeout=30).text
    ok_before = metric_value(before, "proctor_scores_total", verifier="text.match", status="ok") or 0.0
    for i in range(3):
        post(
            live_server, "/v1/score", {"verifier": "text.match", "response": f"Answer: {i}", "reference": "1"}
        )
    assert_error(post(live_server, "/v1/score", {"verifier": "no.such", "response": "x"}), 404, "verifier")

    text = httpx.get(f"{live_server}/metrics", timeout=30).text
    assert metric_value(text, "proctor_scores_total", verifier="text.match", status="ok") == ok_before + 3
    assert (
        metric_value(text, "proctor_http_requests_total", route="/v1/score", method="POST", status="200") >= 3
    )
    assert (
        metric_value(text, "proctor_http_requests_total", route="/v1/score", method="POST", status="404") >= 1
    )
    assert metric_value(text, "proctor_http_request_duration_seconds_count", route="/v1/score") >= 4
    assert metric_value(text, "proctor_score_duration_seconds_count", verifier="text.match") >= 3
    assert metric_value(text, "proctor_admission", state="running") == 0.0
    assert metric_value(text, "proctor_pool", field="workers") in (0.0, 2.0)


# -- limits and admission control ----------------------------------------------------------------------


def test_body_and_batch_limits(start_server: Callable[..., str]) -> None:
    base = start_server(PROCTOR_MAX_BODY_BYTES=2048, PROCTOR_MAX_BATCH_ITEMS=3)
    limits = httpx.get(f"{base}/healthz", timeout=30).json()["limits"]
    assert limits == {"max_body_bytes": 2048, "max_batch_items": 3}

    big = {"verifier": "text.match", "response": "x" * 10_000, "reference": "x"}
    assert "2048" in assert_error(post(base, "/v1/score", big), 413)["message"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: the server must count streamed bytes
        yield b'{"verifier": "text.match", "reference": "x", "response": "'
        for _ in range(10):
            yield b"y" * 500
        yield b'"}'

    streamed = httpx.post(
        f"{base}/v1/score", content=chunks(), headers={"content-type": "application/json"}, timeout=30
    )
    assert "content-length" not in streamed.request.headers
    assert_error(streamed, 413)

    small = post(base, "/v1/score", {"verifier": "text.match", "response": "Answer: x", "reference": "x"})
    assert small.status_code == 200, small.text

    item = {"verifier": "text.match", "response": "a", "reference": "a"}
    assert_error(post(base, "/v1/score/batch", {"items": [item] * 4}), 413, "items")
    assert post(base, "/v1/score/batch", {"items": [item] * 3}).status_code == 200


def test_full_queue_answers_429_with_retry_after(
    start_server: Callable[..., str], background: ThreadPoolExecutor
) -> None:
    base = start_server(PROCTOR_MAX_CONCURRENCY=1, PROCTOR_MAX_QUEUE=0, PROCTOR_RETRY_AFTER_S=7)
    busy: Future = background.submit(post, base, "/v1/score", {**SLEEP, "options": {"deadline_s": 4}})

    def running() -> bool:
        text = httpx.get(f"{base}/metrics", timeout=30).text
        return metric_value(text, "proctor_admission", state="running") == 1.0

    wait_for(running)
    # The pool lane is full; pool work is turned away (text.match has its own inline lane: tests/test_admission_lanes.py).
    rejected = post(base, "/v1/score", {**SLEEP, "response": "a", "reference": "a"})
    assert_error(rejected, 429)
    assert rejected.headers["retry-after"] == "7"
    batch = post(base, "/v1/score/batch", {"items": [{**SLEEP, "response": "a", "reference": "a"}]})
    assert_error(batch, 429)
    assert httpx.get(f"{base}/healthz", timeout=30).status_code == 200  # not admission-controlled
    # A bad request is still answered as such, without taking a slot.
    assert_error(post(base, "/v1/score", {"verifier": "no.such", "response": "x"}), 404, "verifier")

    assert busy.result(timeout=60).json()["status"] == "timeout"
    after = post(base, "/v1/score", {"verifier": "text.match", "response": "Answer: a", "reference": "a"})
    assert after.status_code == 200
    text = httpx.get(f"{base}/metrics", timeout=30).text
    assert metric_value(text, "proctor_rejected_total", reason="queue_full") == 2.0
    assert metric_value(text, "proctor_http_requests_total", route="/v1/score", status="429") == 1.0


def test_full_pool_queue_answers_429(
    start_server: Callable[..., str], background: ThreadPoolExecutor
) -> None:
    base = start_server(PROCTOR_POOL_WORKERS=1, PROCTOR_POOL_QUEUE=1, PROCTOR_RETRY_AFTER_S=3)

    def pool(field: str) -> int:
        stats = httpx.get(f"{base}/healthz", timeout=30).json()["pool"]
        return (stats or {}).get(field, 0)

    first: Future = background.submit(post, base, "/v1/score", {**SLEEP, "options": {"deadline_s": 4}})
    wait_for(lambda: pool("busy") == 1)
    second: Future = background.submit(post, base, "/v1/score", {**SLEEP, "id": 2})
    wait_for(lambda: pool("queued") == 1)
    third = post(base, "/v1/score", {**SLEEP, "id": 3})
    assert "queue is full" in assert_error(third, 429)["message"]
    assert third.headers["retry-after"] == "3"
    assert first.result(timeout=60).json()["status"] == "timeout"
    assert second.result(timeout=60).json()["status"] == "timeout"


# -- auth and binding ----------------------------------------------------------------------------------


def test_token_is_required_everywhere_but_healthz(start_server: Callable[..., str]) -> None:
    base = start_server(PROCTOR_TOKEN="s3cret")
    assert httpx.get(f"{base}/healthz", timeout=30).status_code == 200
    for path in ("/v1/verifiers", "/metrics", "/openapi.json"):
        missing = httpx.get(f"{base}{path}", timeout=30)
        assert_error(missing, 401, "Authorization")
        assert missing.headers["www-authenticate"].startswith("Bearer")
    wrong = httpx.get(f"{base}/v1/verifiers", headers={"Authorization": "Bearer nope"}, timeout=30)
    assert_error(wrong, 401, "Authorization")
    basic = httpx.get(f"{base}/v1/verifiers", headers={"Authorization": "Basic s3cret"}, timeout=30)
    assert_error(basic, 401, "Authorization")
    no_body_read = httpx.post(f"{base}/v1/score", content=b"not even json", timeout=30)
    assert_error(no_body_read, 401, "Authorization")

    auth = {"Authorization": "Bearer s3cret"}
    assert httpx.get(f"{base}/v1/verifiers", headers=auth, timeout=30).status_code == 200
    scored = post(
        base, "/v1/score", {"verifier": "text.match", "response": "Answer: 1", "reference": "1"}, headers=auth
    )
    assert scored.status_code == 200 and scored.json()["reward"] == 1.0


def test_healthz_detail_needs_the_token_when_one_is_set(start_server: Callable[..., str]) -> None:
    base = start_server(PROCTOR_TOKEN="s3cret")
    for params in ({}, {"detail": "false"}, {"detail": "0"}):
        plain = httpx.get(f"{base}/healthz", params=params, timeout=30)
        assert (
            plain.status_code == 200 and plain.json()["sandbox"]["doctor"] is None
        )  # open for load balancers
    for value in ("true", "1", "yes", "on", "True"):
        missing = httpx.get(f"{base}/healthz", params={"detail": value}, timeout=30)
        assert_error(missing, 401, "Authorization")
        assert missing.headers["www-authenticate"].startswith("Bearer")
    wrong = httpx.get(
        f"{base}/healthz", params={"detail": "true"}, headers={"Authorization": "Bearer nope"}, timeout=30
    )
    assert "invalid" in assert_error(wrong, 401, "Authorization")["message"]
    detailed = httpx.get(
        f"{base}/healthz", params={"detail": "true"}, headers={"Authorization": "Bearer s3cret"}, timeout=120
    )
    assert detailed.status_code == 200 and detailed.json()["sandbox"]["doctor"] is not None


def run_module(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run `python -m proctor.api` to completion (it must exit by itself)."""
    return subprocess.run(
        [sys.executable, "-m", "proctor.api"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_refuses_to_bind_all_interfaces_without_a_token() -> None:
    result = run_module(server_env(free_port(), PROCTOR_HOST="0.0.0.0"))
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert lines == [
        "proctor: refusing to bind 0.0.0.0 without PROCTOR_TOKEN (set PROCTOR_TOKEN, or bind 127.0.0.1)"
    ]


def test_bad_setting_is_one_readable_line() -> None:
    result = run_module(server_env(free_port(), PROCTOR_MAX_QUEUE="lots"))
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("proctor: invalid PROCTOR_MAX_QUEUE")


def test_broken_plugin_fails_start_up() -> None:
    result = run_module(server_env(free_port(), PROCTOR_PLUGINS="tests.plugins.no_such_plugin"))
    assert result.returncode != 0
    assert "No module named 'tests.plugins.no_such_plugin'" in result.stderr


# -- several uvicorn workers ------------------------------------------------------------------------------


def test_metrics_add_up_across_workers(start_server: Callable[..., str]) -> None:
    base = start_server(PROCTOR_WORKERS=2, PROCTOR_POOL_WORKERS=1)
    count = 8
    for i in range(count):
        # A fresh connection each time, so the kernel may hand it to either worker.
        body = {"verifier": "text.match", "response": f"Answer: {i}", "reference": str(i)}
        with httpx.Client(timeout=60) as client:
            assert client.post(f"{base}/v1/score", json=body).status_code == 200
    for _ in range(4):
        with httpx.Client(timeout=60) as client:
            text = client.get(f"{base}/metrics").text
        assert metric_value(text, "proctor_scores_total", verifier="text.match", status="ok") == count
        assert metric_value(text, "proctor_http_requests_total", route="/v1/score", status="200") == count
