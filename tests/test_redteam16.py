"""Red team 16: end-of-turn cutting, OpenRLHF/slime labels, OpenAI graders, /run_code back-pressure.

Each test here reproduces a way a policy (or a broken judge) could be paid for a wrong answer, or a machinery
failure could be scored as reward 0, found while attacking those features.
"""

from __future__ import annotations

import json

import pytest

from tests.judge_server import Raw
from tests.test_graders import http, judge, listed, run, score_it, service  # noqa: F401 - pytest fixtures

# -- OpenAI graders: a judge cut off inside its reasoning is a machinery failure, not a refusal ---------------


@pytest.mark.parametrize(
    "grader",
    [
        score_it("Score the reasoning cut"),
        {
            "type": "label_model",
            "name": "l",
            "input": [{"role": "user", "content": "Label the reasoning cut"}],
            "labels": ["good", "bad"],
            "passing_labels": ["good"],
        },
    ],
)
def test_a_judge_cut_off_with_no_content_is_503_not_a_refusal_graded_0(http, judge, grader):  # noqa: F811
    # A reasoning judge (vLLM --reasoning-parser) that runs out of max_tokens while thinking answers
    # content null, finish_reason "length": no verdict, and not the sample's fault.
    judge.script(
        Raw(
            {
                "choices": [
                    {
                        "message": {"role": "assistant", "content": None, "reasoning_content": "Hmm, let me"},
                        "finish_reason": "length",
                    }
                ]
            }
        )
    )
    response = run(http, grader, "x")
    assert response.status_code == 503, response.text
    errors = response.json()["metadata"]["errors"]
    assert errors["model_grader_server_error"] and not errors["model_grader_refusal_error"]
    assert "judge_truncated" in errors["model_grader_server_error_details"]


REASONING_CUT = {
    "choices": [
        {
            "message": {"role": "assistant", "content": None, "reasoning_content": "Hmm, let me"},
            "finish_reason": "length",
        }
    ]
}


@pytest.mark.parametrize("verifier", ["judge.rubric", "judge.equivalence"])
def test_a_judge_verifier_cut_off_with_no_content_is_judge_error(http, judge, verifier):  # noqa: F811
    judge.script(*[Raw(REASONING_CUT)] * 4)
    reference = (
        {"items": [{"criterion": "Names paris"}]} if verifier == "judge.rubric" else {"answer": "Paris"}
    )
    score = http.post(
        # judge.equivalence asks only about an extracted final answer (and math first, which says no to a word)
        "/v1/score",
        json={
            "verifier": verifier,
            "response": f"Cut {verifier}: \\boxed{{the capital of France}}",
            "reference": reference,
        },
    ).json()
    assert score["status"] == "judge_error" and score["reason"] == "judge_truncated", json.dumps(score)


# -- OpenAI graders: a string_check whose reference the item leaves empty or null passes wrong samples -------

LIKE = {
    "type": "string_check",
    "name": "s",
    "operation": "like",
    "input": "{{sample.output_text}}",
    "reference": "{{item.answer}}",
}


@pytest.mark.parametrize("operation", ["eq", "like", "ilike"])
@pytest.mark.parametrize(
    ("answer", "sample"),
    [("", "any wrong answer"), ("", "<|im_end|>"), (None, "null"), (None, "the answer is null")],
)
def test_a_string_check_reference_the_item_leaves_empty_or_null_is_422_not_a_pass(operation, answer, sample):
    # `like ""` holds for every sample, `eq ""` for the empty one (a bare end-of-turn token is cut to ""),
    # and a null item value renders as the text "null", which a policy learns to write.
    from fastapi.testclient import TestClient

    from proctor.api.app import create_app

    grader = {**LIKE, "operation": operation}
    with TestClient(create_app()) as client:
        for path in ("/v1/graders/run", "/v1/fine_tuning/alpha/graders/run"):
            response = client.post(
                path, json={"grader": grader, "model_sample": sample, "item": {"answer": answer}}
            )
            assert response.status_code == 422, response.text
            assert response.json()["error"]["field"] in {"item", "grader.reference"}
        score = client.post(
            "/v1/score",
            json={
                "verifier": "openai.grader",
                "response": sample,
                "reference": {"grader": grader, "item": {"answer": answer}},
            },
        )
        assert score.status_code == 422 or score.json()["reward"] == 0.0, score.text
        if score.status_code != 422:
            assert score.json()["status"] != "ok", score.text


def test_a_literal_empty_reference_and_a_present_answer_still_grade():
    from fastapi.testclient import TestClient

    from proctor.api.app import create_app

    with TestClient(create_app()) as client:
        ne = {**LIKE, "operation": "ne", "reference": ""}  # a literal "": "the sample is not empty"
        body = client.post("/v1/graders/run", json={"grader": ne, "model_sample": "x", "item": {}}).json()
        assert body["reward"] == 1.0
        body = client.post(
            "/v1/graders/run", json={"grader": LIKE, "model_sample": "it is 42", "item": {"answer": 42}}
        ).json()
        assert body["reward"] == 1.0
        body = client.post(
            "/v1/graders/run", json={"grader": LIKE, "model_sample": "it is 41", "item": {"answer": "42"}}
        ).json()
        assert body["reward"] == 0.0


# -- a lone surrogate in the sample: graded, never a sandbox_error that masks the sample ----------------------

EXACT = {
    "type": "python",
    "name": "p",
    "source": "def grade(s, i):\n    return 1.0 if s['output_text'].strip() == i['answer'] else 0.0\n",
}


def test_a_python_grader_grades_a_sample_with_a_lone_surrogate(backend):
    # Through /v1/score (openai.grader), the sample is graded; the graders routes refuse it (422, below).
    import json

    from fastapi.testclient import TestClient

    from proctor.api.app import create_app

    with TestClient(create_app()) as client:
        for sample, reward in (("42", 1.0), ("\ud800 41", 0.0), ("42\ud800", 0.0)):
            request = {
                "verifier": "openai.grader",
                "response": sample,
                "reference": {"grader": EXACT, "item": {"answer": "42"}},
            }
            body = json.dumps(request)
            response = client.post("/v1/score", content=body, headers={"content-type": "application/json"})
            assert response.status_code == 200, response.text
            assert response.json()["status"] == "ok" and response.json()["reward"] == reward, response.text


@pytest.mark.parametrize(
    ("grader", "body", "field"),
    [
        (EXACT, {"model_sample": "\ud800 41", "item": {"answer": "42"}}, "model_sample"),
        (score_it("Score {{sample.output_text}}"), {"model_sample": "Paris \ud800"}, "model_sample"),
        (score_it("Score {{item.q}}"), {"model_sample": "Paris", "item": {"q": "\udfff"}}, "item"),
    ],
)
def test_the_graders_routes_refuse_a_lone_surrogate_with_422_not_500(grader, body, field):
    import json

    from fastapi.testclient import TestClient

    from proctor.api.app import create_app

    with TestClient(create_app(), raise_server_exceptions=False) as client:
        for path in ("/v1/graders/run", "/v1/fine_tuning/alpha/graders/run"):
            payload = json.dumps({"grader": grader, **body})
            response = client.post(path, content=payload, headers={"content-type": "application/json"})
            assert response.status_code == 422, response.text
            assert response.json()["error"]["field"] == field


def test_a_code_response_with_a_lone_surrogate_is_scored_not_a_sandbox_error(backend):
    from proctor.engine import Engine

    reference = {
        "language": "python",
        "tests": {"format": "stdio", "cases": [{"stdin": "21\n", "stdout": "42\n"}]},
    }
    score = Engine().score(
        {
            "verifier": "code",
            "response": "```python\n# \ud800\nprint(int(input()) * 3)\n```",
            "reference": reference,
        }
    )
    assert score.status.value == "ok" and score.reward == 0.0, score


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"code": "# \ud800\nprint(1)"}, "code"),
        ({"code": "print(input())", "stdin": "\udc80"}, "stdin"),
        ({"code": "print(1)", "files": {"a\ud800.txt": "eA=="}}, "files.a\ud800.txt"),
        ({"code": "print(1)", "fetch_files": ["\ud800"]}, "fetch_files.0"),
    ],
)
def test_run_code_with_a_lone_surrogate_is_422_not_a_500_or_sandbox_error(body, field):
    import json

    from fastapi.testclient import TestClient

    from proctor.api.app import create_app

    with TestClient(create_app(), raise_server_exceptions=False) as client:
        payload = json.dumps({"language": "python", **body})
        response = client.post("/run_code", content=payload, headers={"content-type": "application/json"})
        assert response.status_code == 422, response.text
        assert response.json()["error"]["field"] == field


# -- a large JSON sample is parsed once per run, not once per template variable -------------------------------


def test_a_multi_grader_parses_the_sample_json_once(monkeypatch):
    import json

    from fastapi.testclient import TestClient

    from proctor.api.app import create_app
    from proctor.verifiers.judge import parse

    calls = []
    real = parse.bounded_json

    def counted(text, *args, **kwargs):
        calls.append(len(text))
        return real(text, *args, **kwargs)

    monkeypatch.setattr(parse, "bounded_json", counted)
    check = {
        "type": "string_check",
        "name": "s",
        "operation": "eq",
        "input": "{{sample.output_json.a}} {{sample.output_json.a}}",
        "reference": "{{item.a}} {{item.a}}",
    }
    grader = {
        "type": "multi",
        "name": "m",
        "graders": {f"g{i}": check for i in range(16)},
        "calculate_output": "g0",
    }
    with TestClient(create_app()) as client:
        body = {"grader": grader, "model_sample": json.dumps({"a": "x"}), "item": {"a": "x"}}
        assert client.post("/v1/graders/run", json=body).json()["reward"] == 1.0
        assert len(calls) == 1, calls
        calls.clear()
        body["model_sample"] = "not json"
        answer = client.post("/v1/graders/run", json=body).json()
        assert answer["reward"] == 0.0 and answer["metadata"]["errors"]["sample_parse_error"] is True
        assert len(calls) == 1, calls


# -- OpenRLHF: a left-truncated multi-turn query whose template renders the history differently ---------------

_SYSTEM = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
_USER_1 = "<|im_start|>user\nWhat is 6*7?<|im_end|>\n"
_USER_2 = "<|im_start|>user\nWhat is 6*8?<|im_end|>\n"
_HEADER = "<|im_start|>assistant\n"
# The prompts field keeps the earlier turn's reasoning; the query's template drops it from the history (as
# Qwen3's does), so the query is no suffix of the prompt past the cut.
_PROMPT = (
    _SYSTEM
    + _USER_1
    + _HEADER
    + "<think>\n6*7\n</think>\n\nThe answer is 42.<|im_end|>\n"
    + _USER_2
    + _HEADER
)
_QUERY = _SYSTEM + _USER_1 + _HEADER + "The answer is 42.<|im_end|>\n" + _USER_2 + _HEADER
_RESPONSE = "6*8 = 48, so the answer is 48.<|im_end|>"


def test_a_truncated_query_never_scores_an_earlier_turn_of_the_prompt():
    from proctor.adapters.labels import PromptMismatch, strip_prompt

    start = len(_SYSTEM + _USER_1)
    for cut in range(start - 40, start + 40):
        query = _QUERY[cut:] + _RESPONSE
        try:
            got = strip_prompt(query, _PROMPT)
        except PromptMismatch:
            continue  # failing closed is fine; scoring prompt text is not
        assert _RESPONSE.endswith(got), (cut, got[:60])


def test_the_openrlhf_route_scores_the_response_not_the_earlier_turn():
    from fastapi.testclient import TestClient

    from proctor.api.app import create_app

    query = _QUERY[len(_SYSTEM + _USER_1) - 10 :]
    with TestClient(create_app()) as client:
        for response, label, reward in (("48<|im_end|>", "48", 1.0), ("I don't know<|im_end|>", "42", 0.0)):
            body = {"query": [query + response], "prompts": [_PROMPT], "labels": [label]}
            answer = client.post("/compat/openrlhf/get_reward", json=body).json()
            assert answer["rewards"] == [reward], (response, answer)


def test_a_truncated_inst_query_never_scores_an_earlier_turn_of_the_prompt():
    # Rule 4 (a short final header, `[/INST]`): an earlier turn's header within CUT_SLACK characters of the
    # query's start qualified with no evidence at all.
    from proctor.adapters.labels import PromptMismatch, strip_prompt

    prompt = "[INST] You are helpful.\n\nWhat is 6*7? [/INST] <think>6*7</think> The answer is 42.</s>[INST] What is 6*8? [/INST]"
    query = "[INST] You are helpful.\n\nWhat is 6*7? [/INST] The answer is 42.</s>[INST] What is 6*8? [/INST]"
    for cut in range(len(query)):
        try:
            got = strip_prompt(query[cut:] + " 48", prompt)
        except PromptMismatch:
            continue
        assert " 48".endswith(got), (cut, got[:60])


def test_run_code_while_shutting_down_is_a_504_verl_retries(monkeypatch):
    """A job refused because the pool closed never ran: 504 with Retry-After (verl retries it), not a 503 that
    verl counts as a failed test case (issue 16 red team)."""
    from fastapi.testclient import TestClient

    from proctor.api.app import create_app
    from proctor.api.state import ServiceState
    from proctor.capacity import PoolClosed

    class ClosedPool:
        async def run(self, *args: object, **kwargs: object) -> object:
            raise PoolClosed("the sandbox pool is closed")

    async def closed_pool(self: ServiceState) -> ClosedPool:
        return ClosedPool()

    monkeypatch.setattr(ServiceState, "sandbox", closed_pool)
    with TestClient(create_app()) as client:
        response = client.post("/run_code", json={"code": "print(1)", "language": "python"})
    assert response.status_code == 504, response.text
    assert "shutting down" in response.json()["error"]["message"]
    assert response.headers["Retry-After"]
