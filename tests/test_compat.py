"""Compatibility routes over real HTTP: OpenRLHF's remote reward and slime's remote RM, with each on_failure policy."""

from __future__ import annotations

import json
import math
from collections.abc import Callable

import httpx
import pytest

OPENRLHF = "/compat/openrlhf/get_reward"
SLIME = "/compat/slime"
STATUS_KEYS = {
    "proctor_status_ok",
    "proctor_status_timeout",
    "proctor_status_sandbox_error",
    "proctor_status_verifier_error",
    "proctor_status_judge_error",
    "proctor_failed",
}
# test.misbehave sleeps on "sleep" and is killed at its deadline: a machinery failure, never a verdict.
SLEEPER_LABEL = json.dumps({"verifier": "test.misbehave", "reference": "x", "options": {"deadline_s": 0.5}})


def post(base: str, path: str, body: object, **params: str) -> httpx.Response:
    """POST JSON with query parameters."""
    return httpx.post(f"{base}{path}", json=body, params=params, timeout=60)


def error_of(response: httpx.Response, status: int) -> dict:
    """The error body of a response that must have this status."""
    assert response.status_code == status, response.text
    return response.json()["error"]


# -- OpenRLHF -------------------------------------------------------------------------------------------


def test_openrlhf_plain_and_json_labels(live_server: str) -> None:
    prompts = [
        "<|user|>What is 6*7?<|assistant|>",
        "<|user|>Say hi<|assistant|>",
        "<|user|>2+2?<|assistant|>",
    ]
    responses = ["Answer: 42", "hello", "Answer: 5"]
    labels = [
        "42",  # plain gold answer: the default verifier (text.match)
        json.dumps({"verifier": "test.misbehave", "reference": "hello"}),
        "4",
    ]
    body = {
        "query": [p + r for p, r in zip(prompts, responses, strict=True)],
        "prompts": prompts,
        "labels": labels,
    }
    response = post(live_server, OPENRLHF, body)
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["rewards"] == [1.0, 1.0, 0.0]
    assert result["scores"] == [1.0, 1.0, 0.0]
    logs = result["extra_logs"]
    assert set(logs) == STATUS_KEYS
    assert logs["proctor_status_ok"] == [1.0, 1.0, 1.0]
    assert logs["proctor_failed"] == [0.0, 0.0, 0.0]


def test_openrlhf_prompt_prefix_is_removed_only_when_present(live_server: str) -> None:
    # test.misbehave rewards an exact match, so the first item scores 1 only if "PROMPT " was stripped.
    label = json.dumps({"verifier": "test.misbehave", "reference": "tail"})
    body = {"query": ["PROMPT tail", "tail"], "prompts": ["PROMPT ", "OTHER "], "labels": [label, label]}
    # A query holding no part of its prompt is a failure (reason prompt_mismatch), never scored whole.
    result = post(live_server, OPENRLHF, body, on_failure="value", failure_value="-1").json()
    assert result["rewards"] == [1.0, -1.0], result
    error = error_of(post(live_server, OPENRLHF, body), 503)  # the default policy, raise
    assert "prompt_mismatch" in json.dumps(error), error


def test_openrlhf_empty_batch(live_server: str) -> None:
    result = post(live_server, OPENRLHF, {"query": [], "prompts": [], "labels": []}).json()
    assert result["rewards"] == [] and result["scores"] == []
    assert all(values == [] for values in result["extra_logs"].values())


def test_openrlhf_default_policy_raises_rather_than_training_on_a_failure(live_server: str) -> None:
    body = {"query": ["sleep"], "prompts": [""], "labels": [SLEEPER_LABEL]}
    response = post(live_server, OPENRLHF, body)  # server default: on_failure=raise
    assert "timeout" in error_of(response, 503)["message"]
    valued = post(live_server, OPENRLHF, body, on_failure="value").json()  # failure_value defaults to 0.0
    assert valued["rewards"] == [0.0] and valued["scores"] == [0.0]
    assert valued["extra_logs"]["proctor_status_timeout"] == [1.0]
    assert valued["extra_logs"]["proctor_failed"] == [1.0]


def test_openrlhf_policies_on_a_failed_item(live_server: str) -> None:
    body = {
        "query": ["P:Answer: 3", "P:sleep"],
        "prompts": ["P:", "P:"],
        "labels": ["3", SLEEPER_LABEL],
    }
    valued = post(live_server, OPENRLHF, body, on_failure="value", failure_value="0.25").json()
    assert valued["rewards"] == [1.0, 0.25] and valued["scores"] == [1.0, 0.25]

    # none: the failed item's score is NaN, which fails OpenRLHF's dynamic-filtering range check.
    excluded = post(live_server, OPENRLHF, body, on_failure="none", failure_value="0.5")
    assert excluded.status_code == 200
    assert "NaN" in excluded.text
    result = excluded.json()  # Python's json (and OpenRLHF's aiohttp) read NaN
    assert result["rewards"] == [1.0, 0.5]
    assert result["scores"][0] == 1.0 and math.isnan(result["scores"][1])
    assert result["extra_logs"]["proctor_failed"] == [0.0, 1.0]

    raised = error_of(post(live_server, OPENRLHF, body, on_failure="raise"), 503)
    assert "item 1" in raised["message"] and "timeout" in raised["message"]


def test_openrlhf_bad_requests_name_the_field(live_server: str) -> None:
    mismatch = {"query": ["a", "b"], "prompts": ["", ""], "labels": ["a"]}
    assert error_of(post(live_server, OPENRLHF, mismatch), 422)["field"] == "labels"
    prompts_short = {"query": ["a", "b"], "prompts": [""], "labels": ["a", "b"]}
    assert error_of(post(live_server, OPENRLHF, prompts_short), 422)["field"] == "prompts"

    bad_reference = json.dumps({"verifier": "test.misbehave", "reference": 5})
    body = {"query": ["x", "y"], "prompts": ["", ""], "labels": ["x", bad_reference]}
    assert error_of(post(live_server, OPENRLHF, body), 422)["field"] == "labels.1.reference"

    unknown = json.dumps({"verifier": "no.such", "reference": "x"})
    error = error_of(post(live_server, OPENRLHF, {"query": ["x"], "prompts": [""], "labels": [unknown]}), 404)
    assert error["field"] == "labels.0.verifier" and "text.match" in error["message"]

    policy = error_of(
        post(live_server, OPENRLHF, {"query": [], "prompts": [], "labels": []}, on_failure="skip"), 422
    )
    assert policy["field"] == "on_failure"
    missing = error_of(post(live_server, OPENRLHF, {"query": ["x"], "prompts": [""]}), 422)
    assert missing["field"] == "labels"


def test_json_label_without_verifier_is_a_plain_answer(live_server: str) -> None:
    label = json.dumps({"answer": 1})
    body = {"query": [label], "prompts": [""], "labels": [label]}
    result = post(live_server, OPENRLHF, body).json()
    assert result["extra_logs"]["proctor_status_ok"] == [1.0]
    assert result["rewards"] == [1.0]


def test_deeply_nested_label_is_a_plain_answer_not_a_500(live_server: str) -> None:
    # json.loads raises RecursionError (not ValueError) on deep nesting; that must not become a 5xx.
    # 4,000 levels: past json.loads's recursion limit, and within text.match's 10,000 characters for one gold.
    deep = '{"verifier": "text.match", "reference": ' + "[" * 4_000 + "]" * 4_000 + "}"
    response = post(live_server, OPENRLHF, {"query": ["x"], "prompts": [""], "labels": [deep]})
    assert response.status_code == 200, response.text
    assert response.json()["extra_logs"]["proctor_status_ok"] == [1.0]
    slime = post(live_server, SLIME, {"response": "x", "label": deep})
    assert slime.status_code == 200 and slime.json() == 0.0, slime.text


def test_label_reference_nested_past_200_levels_is_a_422(live_server: str) -> None:
    # A label object with a 255-deep reference used to be a 500 for the whole OpenRLHF batch.
    argument: object = 1
    for _ in range(255):
        argument = [argument]
    cases = [{"args": [argument], "expected": 1}]
    reference = {"language": "python", "tests": {"format": "call", "entry_point": "f", "cases": cases}}
    label = {"verifier": "code", "reference": reference}
    for labels in ([label], [json.dumps(label)]):
        body = {"query": ["a", "b"], "prompts": ["", ""], "labels": ["a", *labels]}
        error = error_of(post(live_server, OPENRLHF, body), 422)
        assert error["field"] == "labels.1.reference" and "200 levels" in error["message"]
    slime = error_of(post(live_server, SLIME, {"response": "x", "label": label}), 422)
    assert slime["field"] == "label.reference"


def test_openrlhf_label_with_bad_structured_fields_names_them(live_server: str) -> None:
    # A label object that names its verifier is taken as such even when a value is malformed: a 422 naming
    # the field, never a silent fallback to scoring the whole label as a plain answer.
    for bad, field in (
        ({"verifier": 5, "reference": "x"}, "labels.0.verifier"),
        ({"verifier": "test.misbehave", "reference": "x", "options": [1]}, "labels.0.options"),
    ):
        body = {"query": ["x"], "prompts": [""], "labels": [json.dumps(bad)]}
        assert error_of(post(live_server, OPENRLHF, body), 422)["field"] == field


# -- slime ----------------------------------------------------------------------------------------------


def test_slime_returns_the_bare_reward(live_server: str) -> None:
    right = post(live_server, SLIME, {"prompt": "6*7?", "response": "Answer: 42", "label": "42"})
    assert right.status_code == 200 and right.json() == 1.0
    wrong = post(live_server, SLIME, {"prompt": "6*7?", "response": "Answer: 41", "label": "42"})
    assert wrong.json() == 0.0
    structured = json.dumps({"verifier": "test.misbehave", "reference": "hi"})
    assert post(live_server, SLIME, {"prompt": "say hi", "response": "hi", "label": structured}).json() == 1.0
    as_object = {"verifier": "test.misbehave", "reference": "hi"}
    assert post(live_server, SLIME, {"response": "hi", "label": as_object}).json() == 1.0
    chat_prompt = [{"role": "user", "content": "6*7?"}]
    assert (
        post(live_server, SLIME, {"prompt": chat_prompt, "response": "Answer: 42", "label": "42"}).json()
        == 1.0
    )


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"on_failure": "value", "failure_value": "-1"}, -1.0),
        ({"on_failure": "none"}, None),
        ({"on_failure": "value"}, 0.0),
    ],
)
def test_slime_policies_on_failure(live_server: str, params: dict[str, str], expected: float | None) -> None:
    response = post(
        live_server, SLIME, {"prompt": "p", "response": "sleep", "label": SLEEPER_LABEL}, **params
    )
    assert response.status_code == 200, response.text
    assert response.json() == expected


def test_slime_raise_policy_is_503(live_server: str) -> None:
    response = post(
        live_server, SLIME, {"prompt": "p", "response": "sleep", "label": SLEEPER_LABEL}, on_failure="raise"
    )
    assert "timeout" in error_of(response, 503)["message"]


def test_slime_bad_label_names_the_field(live_server: str) -> None:
    bad = json.dumps({"verifier": "test.misbehave", "reference": "x", "options": {"bogus": 1}})
    error = error_of(post(live_server, SLIME, {"response": "x", "label": bad}), 422)
    assert error["field"] == "label.options.bogus"
    incomplete = error_of(
        post(live_server, SLIME, {"response": "x", "label": {"verifier": "text.match"}}), 422
    )
    assert incomplete["field"] == "label"
    assert error_of(post(live_server, SLIME, {"response": "x"}), 422)["field"] == "label"


def test_compat_failure_policy_defaults_come_from_settings(start_server: Callable[..., str]) -> None:
    base = start_server(PROCTOR_ON_FAILURE="none")
    assert post(base, SLIME, {"response": "sleep", "label": SLEEPER_LABEL}).json() is None
    assert post(base, SLIME, {"response": "sleep", "label": SLEEPER_LABEL}, on_failure="value").json() == 0.0


# -- issue 16: OpenRLHF's real payloads (labels of any JSON type, left-truncated queries) --------------------

QWEN_PROMPT = (
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "<|im_start|>user\nNatalia sold clips to 48 of her friends in April, and then she sold half as many clips "
    "in May. How many clips did Natalia sell altogether in April and May? (Not 41.)<|im_end|>\n"
    "<|im_start|>assistant\n"
)


def openrlhf_request(query: str, prompt: str, label: object) -> bytes:
    """The body OpenRLHF 0.11.2 sends for one sample, byte for byte.

    `SingleTurnAgentExecutor._fetch_rewards_via_http` (openrlhf/utils/agent.py) posts
    `{"query": [...], "prompts": [...], "labels": [...]}` with aiohttp's `json=`, i.e. `json.dumps` with its
    defaults, one sample per request; the label is the dataset's value as loaded (an int for GSM8K). OpenRLHF's
    own client needs aiohttp and, through `openrlhf.utils`, torch, transformers and pylatexenc, which this
    environment does not install for it, so the tests replay its exact request instead. (Checked by hand once:
    the wheel's own `_fetch_rewards_via_http`, loaded from `openrlhf-0.11.2` with `--no-deps`, stub package
    `__init__`s and aiohttp, got these same rewards from a live server for int, float, list and
    left-truncated cases.)
    """
    return json.dumps({"query": [query], "prompts": [prompt], "labels": [label]}).encode()


def openrlhf_post(base: str, query: str, prompt: str, label: object) -> httpx.Response:
    """POST as OpenRLHF does (aiohttp: JSON body, then raise_for_status and json())."""
    return httpx.post(
        f"{base}{OPENRLHF}",
        content=openrlhf_request(query, prompt, label),
        headers={"Content-Type": "application/json"},
        timeout=60,
    )


@pytest.mark.parametrize(
    ("label", "response", "expected"),
    [
        (72, "She sold 48 + 24 = 72 clips.\nThe answer is 72", 1.0),  # GSM8K's answers are ints
        (72, "The answer is 71", 0.0),
        (72.0, "The answer is 72", 1.0),  # an integral float is the int's string
        (0.5, "The answer is 0.5", 1.0),
        ([71, "72"], "The answer is 72", 1.0),  # a list: several golds, any may match
        ({"answer": "72", "op": "contains"}, "the answer: 72 clips", 1.0),  # the default verifier's object
    ],
)
def test_openrlhf_labels_of_any_json_type(
    live_server: str, label: object, response: str, expected: float
) -> None:
    answer = openrlhf_post(live_server, QWEN_PROMPT + response, QWEN_PROMPT, label)
    assert answer.status_code == 200, answer.text  # before: a 422 for every non-string label
    result = answer.json()
    assert result["rewards"] == [expected] and result["scores"] == [expected]
    assert result["extra_logs"]["proctor_status_ok"] == [1.0]


@pytest.mark.parametrize("label", [None, True, [], {"verifier": "text.match"}])
def test_openrlhf_label_that_is_no_reference_is_a_422_naming_it(live_server: str, label: object) -> None:
    body = {"query": ["a", "b"], "prompts": ["", ""], "labels": ["a", label]}
    error = error_of(post(live_server, OPENRLHF, body), 422)
    assert error["field"].startswith("labels.1"), error


def left_truncated(prompt: str, response: str, keep: int) -> str:
    """OpenRLHF's query when it kept only the prompt's last tokens: a cut token decodes to U+FFFD."""
    return "\ufffd" + prompt[len(prompt) - keep :] + response


def test_openrlhf_left_truncated_query_scores_the_response_only(live_server: str) -> None:
    # The prompt holds "41"; before, the whole query was scored when it did not start with the prompt.
    label = json.dumps({"verifier": "test.misbehave", "reference": "The answer is 72."})
    query = left_truncated(QWEN_PROMPT, "The answer is 72.", keep=120)
    assert not query.startswith(QWEN_PROMPT)
    result = openrlhf_post(live_server, query, QWEN_PROMPT, label).json()
    assert result["rewards"] == [1.0], result  # test.misbehave: exactly the response, nothing of the prompt
    truncated = left_truncated(QWEN_PROMPT, "The answer is 72", keep=60)
    plain = openrlhf_post(
        live_server, truncated, QWEN_PROMPT, 72
    ).json()  # the default verifier, a numeric label
    assert plain["rewards"] == [1.0]


RED_TEAM_PROMPT = "Q: capital of France? Hint the answer is Paris. A:"
PARIS = json.dumps({"verifier": "text.match", "reference": {"answer": "Paris", "op": "contains"}})


def test_openrlhf_left_truncated_plain_prompt_scores_the_response_not_the_hint(live_server: str) -> None:
    # The red team's case: no assistant header in the prompt, so the whole query (and its "Paris") was scored.
    wrong = openrlhf_post(live_server, RED_TEAM_PROMPT[5:] + " London", RED_TEAM_PROMPT, PARIS).json()
    assert wrong["rewards"] == [0.0], wrong
    right = openrlhf_post(live_server, RED_TEAM_PROMPT[5:] + " Paris", RED_TEAM_PROMPT, PARIS).json()
    assert right["rewards"] == [1.0], right


@pytest.mark.parametrize("bos", ["<s>", "<|begin_of_text|>"])
def test_openrlhf_bos_prefixed_query_scores_the_response(live_server: str, bos: str) -> None:
    prompt = "Question: 6*7? Not 41, and not 43.\nAnswer:"
    for query in (bos + prompt + " 41", bos + prompt[12:] + " 41"):
        result = openrlhf_post(live_server, query, prompt, 42).json()
        assert result["rewards"] == [0.0], (query, result)
        assert result["extra_logs"]["proctor_status_ok"] == [1.0]
    assert openrlhf_post(live_server, bos + prompt + " 42", prompt, 42).json()["rewards"] == [1.0]


def test_openrlhf_query_without_its_prompt_fails_under_on_failure(live_server: str) -> None:
    body = {
        "query": ["The capital is London, not Paris.", RED_TEAM_PROMPT + " Paris"],
        "prompts": [RED_TEAM_PROMPT] * 2,
        "labels": [PARIS] * 2,
    }
    valued = post(live_server, OPENRLHF, body, on_failure="value", failure_value="-1").json()
    assert valued["rewards"] == valued["scores"] == [-1.0, 1.0], valued
    assert valued["extra_logs"]["proctor_failed"] == [1.0, 0.0]
    assert valued["extra_logs"]["proctor_status_verifier_error"] == [1.0, 0.0]
    masked = post(live_server, OPENRLHF, body, on_failure="none").json()
    assert masked["scores"][0] != masked["scores"][0] and masked["scores"][1] == 1.0  # NaN
    error = error_of(post(live_server, OPENRLHF, body, on_failure="raise"), 503)
    assert "prompt_mismatch" in json.dumps(error), error
    # a bad label on such an item is still the label's 4xx
    bad = {**body, "labels": [json.dumps({"verifier": "no.such", "reference": "x"}), PARIS]}
    assert post(live_server, OPENRLHF, bad, on_failure="value").status_code == 404


def test_openrlhf_left_truncation_with_earlier_assistant_turns(live_server: str) -> None:
    few_shot = (
        "<|im_start|>user\n1+1?<|im_end|>\n<|im_start|>assistant\n2<|im_end|>\n"
        "<|im_start|>user\n2+3?<|im_end|>\n<|im_start|>assistant\n5<|im_end|>\n"
    )
    prompt = few_shot + "<|im_start|>user\n6*7?<|im_end|>\n<|im_start|>assistant\n"
    label = json.dumps({"verifier": "test.misbehave", "reference": "42"})
    # Earlier assistant turns of the prompt survive the cut: the response still starts after the final one.
    query = left_truncated(prompt, "42", keep=len(prompt) - 10)
    assert openrlhf_post(live_server, query, prompt, label).json()["rewards"] == [1.0]
    # (A response that writes the header itself: tests/test_adapters.py, at the level of strip_prompt, since
    # the service also cuts a run-on turn at its end-of-turn token.)


async def test_openrlhf_large_body_is_read_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    # The red team's 4 MB body stalled every other request for 17.6 s: strip_prompt ran on the event loop
    # and rule 4 sliced the query once per header. Past inline_max_chars it runs on a thread, in bounded work.
    import threading
    import time

    from proctor.api import compat
    from proctor.api.app import create_app
    from proctor.settings import Settings

    threads: list[str] = []
    real_strip = compat.strip_prompt

    def recording_strip(query: str, prompt: str) -> str:
        threads.append(threading.current_thread().name)
        return real_strip(query, prompt)

    monkeypatch.setattr(compat, "strip_prompt", recording_strip)
    app = create_app(Settings(pool_workers=1, cache_size=0, inline_max_chars=100_000))
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://t", timeout=60) as client,
    ):
        small = {"query": ["Q: 2+2? A: 4"], "prompts": ["Q: 2+2? A:"], "labels": ["4"]}
        assert (await client.post(OPENRLHF, json=small)).json()["rewards"] == [1.0]
        large = {
            "query": ["Q" * 20 + " Assistant:" + "Assistant:" * 400_000],
            "prompts": ["Z" * 20 + " Assistant:"],
            "labels": ["4"],
        }
        started = time.process_time()
        answer = await client.post(OPENRLHF, json=large)
        assert answer.status_code == 200, answer.text
        assert time.process_time() - started < 5  # generous: was 17.6 s
    loop_thread = threading.main_thread().name
    assert threads[0] == loop_thread and threads[1] != loop_thread, threads


def test_openrlhf_response_repeating_the_prompt_end_is_scored_not_masked(live_server: str) -> None:
    # A left-truncated prompt whose response repeats the prompt's last 16 characters 70 times: that pushed
    # the prompt's own end out of the occurrences checked, and the item failed (masked under on_failure=none)
    # instead of scoring its wrong answer 0.
    prompt = "Solve the problem below.\n" + "context line\n" * 200 + "Final answer:"
    response = (" " + prompt[-16:]) * 70 + " 50"
    body = {"query": [prompt[1500:] + response], "prompts": [prompt], "labels": ["42"]}
    result = post(live_server, OPENRLHF, body, on_failure="none").json()
    assert result["rewards"] == result["scores"] == [0.0], result
    assert result["extra_logs"]["proctor_status_ok"] == [1.0]
