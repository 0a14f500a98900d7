"""Input-sized work of the async verifiers stays off the event loop, and template rendering is bounded.

`openai.grader` templates may repeat a variable, so a small body could render gigabytes: the rendered size is
counted from the parts before any string is built (a 422 naming the field when the spec and item alone pass
the bound, reward 0 with `sample_parse_error` when the sample's text does). `multi` prepares its components,
and the judge client hashes and encodes a prompt, on a thread once the input is past `inline_max_chars`.
Where work ran is asserted by whether an event loop runs in that thread, never by timing.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

import proctor.engine as engine_module
import proctor.verifiers.openai_grader as grader_module
from proctor.contract import RequestError, Status
from proctor.engine import Engine, prepare
from proctor.settings import Settings
from proctor.verifiers.judge import client as judge_client
from proctor.verifiers.openai_grader import MAX_RENDERED_CHARS, parse_grader, run_grader

LIMIT = 2_000  # inline_max_chars of these tests' engine: a few KB is "large"


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    engine = Engine(Settings(cache_size=1000, pool_workers=1, inline_max_chars=LIMIT))
    yield engine
    engine.close()


def _on_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _check(input_template: str, reference_template: str) -> dict[str, Any]:
    return {
        "type": "string_check",
        "name": "s",
        "operation": "eq",
        "input": input_template,
        "reference": reference_template,
    }


def _grader_request(response: str, grader: dict[str, Any], item: dict[str, Any]) -> dict[str, Any]:
    return {"verifier": "openai.grader", "response": response, "reference": {"grader": grader, "item": item}}


# -- openai.grader: the rendered size is bounded ---------------------------------------------------------------


def test_an_item_that_renders_past_the_bound_is_a_422_naming_the_template():
    # The red team's body: 0.24 MB that rendered 781 MB. Refused at validation, before anything is built.
    item = {"a": "x" * 200 * 1024}
    request = _grader_request("x", _check("{{item.a}}" * 4000, "{{item.a}}"), item)
    with pytest.raises(RequestError) as raised:
        prepare(request)
    assert raised.value.status == 422
    assert raised.value.field == "reference.grader.input"
    assert str(MAX_RENDERED_CHARS) in raised.value.message


def test_the_bound_is_over_all_templates_of_a_spec_together():
    # Each sub-grader alone renders under the bound; the 16 together pass it.
    share = MAX_RENDERED_CHARS // 15
    item = {"a": "y" * share}
    spec = {
        "type": "multi",
        "graders": {f"g{i}": _check("{{item.a}}", "{{item.a}}") for i in range(8)},
        "calculate_output": "g0",
    }
    with pytest.raises(RequestError) as raised:
        prepare(_grader_request("x", spec, item))
    assert raised.value.status == 422
    assert raised.value.field is not None and raised.value.field.startswith("reference.grader.graders.g")
    # A reference the item renders once, short of the bound, still validates.
    prepare(_grader_request("x", _check("{{item.a}}", "{{item.a}}"), item))


def test_a_model_grader_with_many_messages_is_bounded_too():
    item = {"a": "z" * (MAX_RENDERED_CHARS // 100)}
    spec = {
        "type": "score_model",
        "name": "m",
        "input": [{"role": "user", "content": "{{item.a}}"} for _ in range(120)],
    }
    with pytest.raises(RequestError) as raised:
        prepare(_grader_request("x", spec, item))
    assert raised.value.status == 422
    assert raised.value.field is not None and raised.value.field.startswith("reference.grader.input.")


def test_a_sample_that_renders_past_the_bound_is_graded_zero(engine):
    # The spec repeats the sample 100 times: a 2-character answer passes, a 400 KB one renders 40 MB.
    spec = _check("{{sample.output_text}}" * 100, "{{item.r}}")
    item = {"r": "ab" * 100}
    right = engine.score(_grader_request("ab", spec, item))
    assert right.status is Status.ok and right.reward == 1.0
    long = engine.score(_grader_request("ab" * 200_000, spec, item))
    assert long.status is Status.ok and long.reward == 0.0
    errors = long.details["openai"]["metadata"]["errors"]
    assert errors["sample_parse_error"] is True
    assert str(MAX_RENDERED_CHARS) in long.details["openai"]["metadata"]["scores"]["sample_parse_error"]


def test_a_sample_past_the_bound_zeroes_the_whole_spec_not_one_check(engine):
    # `good * (1 - banned)`: were only `banned` (the check that renders past the bound) graded 0, a long sample
    # would be paid for knocking out the check that penalises it.
    spec = {
        "type": "multi",
        "graders": {
            "good": {**_check("{{sample.output_text}}", "yes"), "operation": "like"},
            "banned": {**_check("{{sample.output_text}}" * 100, "forbidden"), "operation": "like"},
        },
        "calculate_output": "good * (1 - banned)",
    }
    short = engine.score(_grader_request("yes", spec, {}))
    assert short.status is Status.ok and short.reward == 1.0
    caught = engine.score(_grader_request("yes forbidden", spec, {}))
    assert caught.status is Status.ok and caught.reward == 0.0
    long = engine.score(_grader_request("yes forbidden " + "pad " * 100_000, spec, {}))
    assert long.status is Status.ok and long.reward == 0.0
    assert long.details["openai"]["metadata"]["errors"]["sample_parse_error"] is True


def test_run_grader_refuses_an_item_amplification_that_skipped_validation(engine):
    # /v1/graders/run validates with parse_grader and check_templates only: the run's own count still says 422.
    spec = parse_grader(_check("{{item.a}}" * 100, "x"))
    item = {"a": "q" * (MAX_RENDERED_CHARS // 50)}
    with pytest.raises(RequestError) as raised:
        asyncio.run(run_grader(spec, item, "x", engine, None))
    assert raised.value.status == 422 and raised.value.field == "item"


def test_rendering_for_a_large_sample_runs_off_the_loop(engine, monkeypatch):
    where: list[bool] = []
    real = grader_module.render

    def recording(template: str, item: Any, sample: str) -> str:
        where.append(_on_loop())
        return real(template, item, sample)

    monkeypatch.setattr(grader_module, "render", recording)
    spec = _check("{{sample.output_text}}", "{{item.r}}")
    small = engine.score(_grader_request("Paris", spec, {"r": "Paris"}))
    assert small.reward == 1.0 and where == [True, True]
    where.clear()
    answer = "Paris " * (LIMIT // 3) + "Paris"
    large = engine.score(_grader_request(answer, spec, {"r": answer}))
    assert large.status is Status.ok and large.reward == 1.0
    assert where == [False, False]
    # Small sample and item, but a repeated variable renders past inline_max_chars: a thread too.
    where.clear()
    word = "w" * (LIMIT // 4)
    spec = {**_check("{{item.a}}" * 8, "{{item.b}}"), "operation": "ne"}
    repeated = engine.score(_grader_request("x", spec, {"a": word, "b": "z"}))
    assert repeated.status is Status.ok and repeated.reward == 1.0
    assert where == [False, False]


# -- multi: components are prepared off the loop for a large item --------------------------------------------


def _multi(response: str) -> dict[str, Any]:
    return {
        "verifier": "multi",
        "response": response,
        "reference": {
            "components": {
                "has": {"verifier": "text.match", "reference": {"answer": "needle", "op": "contains"}},
                "lacks": {"verifier": "text.match", "reference": {"answer": "<END>", "op": "contains"}},
            }
        },
        "options": {"end_tokens": ["<END>"]},
    }


def test_a_large_multi_item_prepares_its_components_off_the_loop(engine, monkeypatch):
    seen: list[tuple[bool, tuple[str, ...] | None]] = []
    real = engine_module.prepare

    def recording(request: Any, **kwargs: Any) -> Any:
        if isinstance(request, dict) and request.get("verifier") == "text.match":
            seen.append((_on_loop(), engine_module._outer_end_tokens.get()))
        return real(request, **kwargs)

    monkeypatch.setattr(engine_module, "prepare", recording)
    small = engine.score(_multi("a needle<END>"))
    assert small.status is Status.ok and small.reward == 0.5  # the end token was cut: `lacks` finds none
    assert seen == [(True, ("<END>",))] * 2
    seen.clear()
    large = engine.score(_multi("hay " * LIMIT + "needle<END>"))
    assert large.status is Status.ok and large.reward == 0.5
    assert large.details["components"]["has"]["reward"] == 1.0
    assert large.details["components"]["lacks"]["reward"] == 0.0
    # Both prepared on a thread, and the item's end tokens went along (contextvars carried across).
    assert seen == [(False, ("<END>",))] * 2


# -- the judge client: a large prompt is hashed and encoded off the loop --------------------------------------


def test_a_large_judge_prompt_is_hashed_and_sent_off_the_loop(monkeypatch):
    monkeypatch.setenv("PROCTOR_INLINE_MAX_CHARS", str(LIMIT))
    from proctor.settings import get_settings

    get_settings.cache_clear()
    judge_client.reset()
    hashed: list[bool] = []
    real_hash = judge_client.prompt_hash

    def recording(*args: Any) -> str:
        hashed.append(_on_loop())
        return real_hash(*args)

    monkeypatch.setattr(judge_client, "prompt_hash", recording)
    bodies: list[dict[str, Any]] = []

    def reply(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(200, json={"choices": [{"message": {"content": "7"}, "finish_reason": "stop"}]})

    config = judge_client.JudgeConfig(
        base_url="http://judge.test/v1",
        model="m",
        api_key=None,
        timeout_s=5.0,
        concurrency=2,
        retry_budget_s=1.0,
    )

    async def ask(text: str) -> judge_client.Reply:
        state = judge_client._state(2)
        state.client = httpx.AsyncClient(transport=httpx.MockTransport(reply))
        return await judge_client.complete(
            config, [{"role": "user", "content": text}], judge_client.Sampling()
        )

    try:
        small = asyncio.run(ask("short"))
        big_text = "long \ud800 " * LIMIT
        big = asyncio.run(ask(big_text))
    finally:
        get_settings.cache_clear()
        judge_client.reset()
    assert small.text == "7" and big.text == "7"
    assert hashed == [True, False]
    assert [body["messages"][0]["content"] for body in bodies] == ["short", big_text]
