"""The service with a judge: judge verifiers over /v1/score and the OpenAI-graders routes, through real uvicorn
with PROCTOR_JUDGE_BASE_URL pointing at the scripted stand-in judge."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from proctor.verifiers.openai_grader import SampleNotJson, image_url_problem, render, string_check
from tests.conftest import ServerProcess, free_port, server_env
from tests.judge_server import (
    Drop,
    Error,
    JudgeServer,
    Raw,
    Refusal,
    Reply,
    keyword_rubric_judge,
    user_text,
)

RUBRIC = {"items": [{"criterion": "Names paris", "points": 2}, {"criterion": "Mentions france"}]}


@pytest.fixture(scope="module")
def judge() -> Iterator[JudgeServer]:
    with JudgeServer(keyword_rubric_judge) as server:
        yield server


@pytest.fixture(scope="module")
def listed() -> Iterator[JudgeServer]:
    """A judge on PROCTOR_JUDGE_ALLOWED_URLS: requests may name it, and it must never see the operator's key."""
    with JudgeServer(lambda messages: '{"result": 1}') as server:
        yield server


@pytest.fixture(scope="module")
def service(
    judge: JudgeServer, listed: JudgeServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    env = server_env(
        free_port(),
        PROCTOR_JUDGE_BASE_URL=judge.base_url,
        PROCTOR_JUDGE_API_KEY="operator-secret",
        PROCTOR_JUDGE_ALLOWED_URLS=listed.base_url,
        PROCTOR_JUDGE_MODEL="stand-in",
        PROCTOR_JUDGE_TIMEOUT_S="1",
        PROCTOR_JUDGE_RETRY_BUDGET_S="0.5",
        PROCTOR_POOL_WORKERS="1",
    )
    server = ServerProcess(env, Path(tmp_path_factory.mktemp("graders")) / "server.log")
    try:
        server.wait_ready()
        yield server.base_url
    finally:
        server.stop()


@pytest.fixture
def http(service: str, judge: JudgeServer) -> Iterator[httpx.Client]:
    judge.responder = keyword_rubric_judge
    judge.reset_script()
    with httpx.Client(base_url=service, timeout=30) as client:
        yield client


def run(http: httpx.Client, grader: dict, sample: str, item: dict | None = None) -> httpx.Response:
    return http.post("/v1/graders/run", json={"grader": grader, "model_sample": sample, "item": item or {}})


# -- judge verifiers through the service ----------------------------------------------------------------------


def test_judge_verifiers_are_listed(http):
    names = {entry["name"] for entry in http.get("/v1/verifiers").json()}
    assert {
        "judge.rubric",
        "judge.principles",
        "judge.equivalence",
        "judge.pairwise",
        "multi",
        "text.similarity",
    } <= names


def test_rubric_over_http_uses_the_configured_judge(http, judge):
    body = http.post(
        "/v1/score",
        json={"verifier": "judge.rubric", "response": "Paris, not in France", "reference": RUBRIC},
    )
    score = body.json()
    assert body.status_code == 200 and score["status"] == "ok" and score["reward"] == 1.0
    assert score["details"]["judge_model"] == "stand-in" and judge.requests[-1]["model"] == "stand-in"


@pytest.mark.parametrize("action", [Error(500), Drop()])
def test_a_judge_outage_over_http_is_judge_error(http, judge, action):
    judge.script(*[action] * 40)
    score = http.post(
        "/v1/score", json={"verifier": "judge.rubric", "response": f"Paris {action}", "reference": RUBRIC}
    ).json()
    assert (
        score["status"] == "judge_error" and score["correct"] is None and score["reason"].startswith("judge_")
    )


def test_batch_mixes_judge_and_rule_verifiers(http, judge):
    before = judge.calls
    items = [
        {
            "id": i,
            "verifier": "judge.rubric",
            "response": ["Paris", "Paris, France"][i % 2] + " batch",
            "reference": RUBRIC,
        }
        for i in range(8)
    ] + [{"id": "m", "verifier": "text.match", "response": "\\boxed{4}", "reference": "4"}]
    results = http.post("/v1/score/batch", json={"items": items}).json()["results"]
    assert [r["id"] for r in results] == [*range(8), "m"]
    assert [r["reward"] for r in results] == pytest.approx([2 / 3, 1.0] * 4 + [1.0])
    assert judge.calls - before == 2  # two distinct responses: one judge call each


# -- graders: pure parts ----------------------------------------------------------------------------------------


def test_string_check_operations():
    assert string_check("eq", "Paris", "Paris") and not string_check("eq", "paris", "Paris")
    assert string_check("ne", "Lyon", "Paris")
    assert string_check("like", "in Paris today", "Paris") and not string_check("like", "in paris", "Paris")
    assert string_check("ilike", "in PARIS today", "paris")


def test_templates():
    item = {"answer": {"city": "Paris", "alts": ["Paname"]}, "n": 3}
    assert render("{{ item.answer.city }}/{{item.answer.alts[0]}}/{{item.n}}", item, "s") == "Paris/Paname/3"
    assert render("{{sample.output_text}}|{{sample.output_json.a}}", {}, '{"a": [1]}') == '{"a": [1]}|[1]'


# -- graders over HTTP ----------------------------------------------------------------------------------------------


def test_string_check_with_templates(http):
    grader = {
        "type": "string_check",
        "name": "city",
        "input": "{{sample.output_text}}",
        "reference": "{{item.city}}",
        "operation": "ilike",
    }
    body = run(http, grader, "It is PARIS.", {"city": "Paris"}).json()
    assert (
        body["reward"] == 1.0
        and body["metadata"]["type"] == "string_check"
        and body["metadata"]["name"] == "city"
    )
    assert set(body["metadata"]["errors"]) >= {
        "formula_parse_error",
        "model_grader_server_error",
        "invalid_variable_error",
    }
    assert not any(value for value in body["metadata"]["errors"].values())
    assert run(http, {**grader, "operation": "eq"}, "It is PARIS.", {"city": "Paris"}).json()["reward"] == 0.0


@pytest.mark.parametrize("metric", ["fuzzy_match", "bleu", "gleu", "rouge_1", "rouge_l"])
def test_text_similarity(http, metric):
    grader = {
        "type": "text_similarity",
        "name": "sim",
        "input": "{{sample.output_text}}",
        "reference": "{{item.ref}}",
        "evaluation_metric": metric,
        "pass_threshold": 0.5,
    }
    same = run(http, grader, "the cat sat on the mat", {"ref": "the cat sat on the mat"}).json()
    near = run(http, grader, "the cat sat on a mat", {"ref": "the cat sat on the mat"}).json()
    assert same["reward"] == pytest.approx(1.0) and same["metadata"]["scores"]["passed"] is True
    assert 0.0 < near["reward"] < 1.0


def test_score_model_grader(http, judge):
    judge.responder = lambda messages: json.dumps({"result": 0.8, "steps": []})
    grader = {
        "type": "score_model",
        "name": "judge",
        "model": "gpt-4o-2024-08-06",
        "input": [
            {"role": "developer", "content": "Grade 0-1."},
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "Ref: {{item.ref}}\nAnswer: {{sample.output_text}}"}
                ],
            },
        ],
        "range": [0, 1],
        "sampling_params": {"temperature": 0.2, "seed": 7},
    }
    body = run(http, grader, "Paris", {"ref": "Paris"}).json()
    assert body["reward"] == 0.8 and body["metadata"]["sampled_model_name"] == "stand-in"
    sent = judge.requests[-1]
    assert "Ref: Paris\nAnswer: Paris" in user_text(sent["messages"])
    assert sent["messages"][0]["role"] == "system" and sent["temperature"] == 0.2 and sent["seed"] == 7
    assert body["model_grader_token_usage_per_model"]["stand-in"]["total_tokens"] > 0


@pytest.mark.parametrize(
    ("action", "flag"),
    [
        (Reply("about 0.8 I think"), "model_grader_parse_error"),
        (Refusal(), "model_grader_refusal_error"),
        (Reply('{"result": 7}'), "model_grader_parse_error"),
    ],
)
def test_model_grader_replies_without_a_score(http, judge, action, flag):
    judge.script(action)
    grader = {
        "type": "score_model",
        "name": "g",
        "input": [{"role": "user", "content": f"Score {flag} {action}"}],
    }
    response = run(http, grader, "x")
    assert response.status_code == 200
    assert response.json()["reward"] == 0.0 and response.json()["metadata"]["errors"][flag] is True


def test_model_grader_outage_is_503_not_a_grade(http, judge):
    judge.script(*[Error(500)] * 40)
    grader = {"type": "score_model", "name": "g", "input": [{"role": "user", "content": "Score the outage"}]}
    response = run(http, grader, "x")
    assert response.status_code == 503 and response.headers["retry-after"]
    body = response.json()
    assert body["metadata"]["errors"]["model_grader_server_error"] is True
    assert "judge_http_500" in body["metadata"]["errors"]["model_grader_server_error_details"]


def test_a_malformed_judge_reply_is_503_not_a_500(http, judge):
    judge.script(Raw({"choices": [{"index": 0, "message": "0.9"}]}))
    grader = {"type": "score_model", "name": "g", "input": [{"role": "user", "content": "Score malformed"}]}
    response = run(http, grader, "x")
    assert response.status_code == 503
    assert "judge_bad_reply" in response.json()["metadata"]["errors"]["model_grader_server_error_details"]


def test_label_model_grader(http, judge):
    judge.responder = lambda messages: '{"result": "correct"}'
    grader = {
        "type": "label_model",
        "name": "lbl",
        "model": "x",
        "input": [{"role": "user", "content": "Label {{sample.output_text}}"}],
        "labels": ["correct", "incorrect"],
        "passing_labels": ["correct"],
    }
    body = run(http, grader, "Paris").json()
    assert body["reward"] == 1.0 and body["metadata"]["scores"]["label"] == "correct"
    judge.responder = lambda messages: "incorrect"
    assert run(http, {**grader, "name": "lbl2"}, "Lyon").json()["reward"] == 0.0


def test_multi_grader_with_calculate_output(http, judge):
    judge.responder = lambda messages: '{"result": 0.5}'
    grader = {
        "type": "multi",
        "name": "combo",
        "graders": {
            "name": {
                "type": "string_check",
                "name": "n",
                "input": "{{sample.output_json.name}}",
                "reference": "{{item.name}}",
                "operation": "eq",
            },
            "args": {
                "type": "text_similarity",
                "name": "a",
                "input": "{{sample.output_json.args}}",
                "reference": "{{item.args}}",
                "evaluation_metric": "fuzzy_match",
            },
            "model": {
                "type": "score_model",
                "name": "m",
                "input": [{"role": "user", "content": "{{sample.output_text}}"}],
            },
        },
        "calculate_output": "0.5 * name + 0.25 * args + 0.25 * model ^ 1",
    }
    sample = json.dumps({"name": "get_weather", "args": {"city": "Paris"}})
    body = run(http, grader, sample, {"name": "get_weather", "args": {"city": "Paris"}}).json()
    assert body["sub_rewards"] == {"name": 1.0, "args": 1.0, "model": 0.5}
    assert body["reward"] == pytest.approx(0.5 + 0.25 + 0.125) and body["metadata"]["type"] == "multi"
    not_json = run(http, grader, "plain text", {"name": "get_weather", "args": {}}).json()
    assert (
        not_json["metadata"]["errors"]["sample_parse_error"] is True
        and not_json["sub_rewards"]["name"] == 0.0
    )


def _multi_over_a(calculate_output: str) -> dict:
    """A multi grader of one string_check named `a`, combined by `calculate_output`."""
    check = {"type": "string_check", "name": "a", "input": "x", "reference": "x", "operation": "eq"}
    return {"type": "multi", "name": "m", "graders": {"a": check}, "calculate_output": calculate_output}


@pytest.mark.parametrize(
    ("grader", "field", "words"),
    [
        (
            {
                "type": "text_similarity",
                "name": "s",
                "input": "a",
                "reference": "b",
                "evaluation_metric": "sbleu",
            },
            "grader",
            "meteor",
        ),
        ({"type": "python", "name": "p", "source": "def nope(s, i): return 1"}, "grader.source", "grade("),
        ({"type": "python", "name": "p", "source": "def grade(s, i) return 1"}, "grader.source", "not valid"),
        (
            {
                "type": "string_check",
                "name": "s",
                "input": "{{env.HOME}}",
                "reference": "x",
                "operation": "eq",
            },
            "grader.input",
            "namespace",
        ),
        (_multi_over_a("a + __import__('os')"), "grader", "calculate_output"),
        (_multi_over_a("a / (a - 1)"), "grader", "calculate_output"),
        (_multi_over_a("1 / a"), "grader", "divides by a, which can be 0"),  # refused up front
        # Red team: fine at the probe points (a = 0, 1/2, 1), no value at a = 0.3: interval arithmetic refuses it.
        (_multi_over_a("1 / (a - 0.3)"), "grader", "'1 / (a - 0.3)'"),
        (_multi_over_a("(a - 0.3) ** 0.5"), "grader", "negative number to a fractional power"),
        (_multi_over_a("log(a)"), "grader", "sub-rewards' ranges"),
        (
            {"type": "string_check", "name": "s", "input": "x", "reference": "x", "operation": "regex"},
            "grader.operation",
            "eq",
        ),
        (
            {
                "type": "label_model",
                "name": "l",
                "input": [{"role": "user", "content": "x"}],
                "labels": ["a"],
                "passing_labels": ["b"],
            },
            "grader",
            "passing_labels",
        ),
    ],
)
def test_validate_rejects_bad_specs_naming_the_field(http, grader, field, words):
    for route, body in (
        ("/v1/graders/validate", {"grader": grader}),
        ("/v1/graders/run", {"grader": grader, "model_sample": "x"}),
    ):
        response = http.post(route, json=body)
        assert response.status_code == 422, (route, response.text)
        error = response.json()["error"]
        assert error["field"].startswith(field) and words in error["message"], error


def test_validate_accepts_and_echoes_a_good_spec(http):
    grader = {
        "type": "multi",
        "name": "m",
        "calculate_output": "max(a, 0)",
        "graders": {
            "a": {
                "type": "string_check",
                "name": "a",
                "input": "{{sample.output_text}}",
                "reference": "{{item.x}}",
                "operation": "like",
            }
        },
    }
    response = http.post("/v1/graders/validate", json={"grader": grader})
    assert response.status_code == 200 and response.json()["grader"]["graders"]["a"]["operation"] == "like"


def test_missing_item_variable_is_422(http):
    grader = {
        "type": "string_check",
        "name": "s",
        "input": "{{item.missing}}",
        "reference": "x",
        "operation": "eq",
    }
    response = run(http, grader, "x", {"present": 1})
    assert response.status_code == 422 and "missing" in response.json()["error"]["message"]


def test_a_bad_judge_base_url_is_422_naming_it(http):
    grader = {"type": "score_model", "name": "g", "input": [{"role": "user", "content": "Score it"}]}
    body = {"grader": grader, "model_sample": "x", "judge": {"base_url": "ftp://judge.example/v1"}}
    response = http.post("/v1/graders/run", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["field"].endswith("judge.base_url")


def test_a_judge_outage_inside_a_multi_grader_is_503_not_a_partial_grade(http, judge):
    judge.script(*[Error(500)] * 40)
    grader = {
        "type": "multi",
        "name": "combo",
        "graders": {
            "exact": {
                "type": "string_check",
                "input": "{{sample.output_text}}",
                "reference": "x",
                "operation": "eq",
            },
            "model": {"type": "score_model", "input": [{"role": "user", "content": "Score multi outage"}]},
        },
        "calculate_output": "0.5 * exact + 0.5 * model",
    }
    response = run(http, grader, "x")
    assert response.status_code == 503
    body = response.json()
    assert body["sub_rewards"]["exact"] == 1.0 and body["metadata"]["errors"]["model_grader_server_error"]


# -- whose URL, whose key; cut-off replies; formulas over ranges (issue 14) -------------------------------------


def score_it(content: str = "Score it") -> dict:
    """A score_model grader; distinct content makes a distinct judge call (no cached reply)."""
    return {"type": "score_model", "name": "g", "input": [{"role": "user", "content": content}]}


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/v1",  # not listed: refused before any connection (a closed port answers like an open one)
        "JUDGE/chat/completions?",  # the configured judge, with the appended path pushed into a query
        "JUDGE#",
        "LISTED?x=1",
        "http://user@LISTED_HOST/v1",
    ],
)
def test_a_request_cannot_send_the_judge_call_elsewhere(http, judge, listed, url):
    url = (
        url.replace("LISTED_HOST", f"127.0.0.1:{listed.port}")
        .replace("LISTED", listed.base_url)
        .replace("JUDGE", judge.base_url)
    )
    before = (judge.calls, listed.calls)
    body = {"grader": score_it(), "model_sample": "x", "judge": {"base_url": url}}
    response = http.post("/v1/graders/run", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["field"].endswith("judge.base_url")
    scored = http.post(
        "/v1/score",
        json={
            "verifier": "judge.rubric",
            "response": "Paris",
            "reference": RUBRIC,
            "options": {"base_url": url},
        },
    )
    assert scored.status_code == 422 and scored.json()["error"]["field"] == "options.base_url"
    assert (judge.calls, listed.calls) == before


def test_the_operator_key_goes_only_to_the_configured_judge(http, judge, listed):
    run(http, score_it("Score with the default judge"), "x")
    assert judge.authorizations[-1] == "Bearer operator-secret"
    body = {
        "grader": score_it("Score with the listed judge"),
        "model_sample": "x",
        "judge": {"base_url": listed.base_url},
    }
    response = http.post("/v1/graders/run", json=body)
    assert response.status_code == 200 and response.json()["reward"] == 1.0
    assert listed.authorizations == [None]
    score = http.post(
        "/v1/score",
        json={
            "verifier": "judge.rubric",
            "response": "Paris",
            "reference": RUBRIC,
            "options": {"base_url": listed.base_url + "/"},
        },
    )
    assert score.status_code == 200 and listed.authorizations == [None, None]


def test_a_failed_reply_body_is_not_echoed(http, judge):
    judge.script(Error(400, message="REPLY-BODY-SECRET"))
    response = run(http, score_it("Score the echo"), "x")
    assert response.status_code == 503 and "REPLY-BODY-SECRET" not in response.text


def test_a_reply_cut_off_at_max_tokens_is_503_not_a_grade(http, judge):
    judge.script(Raw({"choices": [{"message": {"content": '{"result": 0'}, "finish_reason": "length"}]}))
    response = run(
        http, {**score_it("Score the cut"), "sampling_params": {"max_completions_tokens": 16}}, "x"
    )
    assert response.status_code == 503, response.text
    errors = response.json()["metadata"]["errors"]
    assert errors["model_grader_server_error"] and not errors["model_grader_parse_error"]
    assert "judge_truncated" in errors["model_grader_server_error_details"]
    assert "max_tokens=16" in errors["model_grader_server_error_details"]


# -- hostile nesting and formulas (red team) ------------------------------------------------------------------------

DEEP_SAMPLE = "[" * 100_000 + "]" * 100_000


def test_a_sample_too_deep_for_json_is_not_json():
    for sample in (DEEP_SAMPLE, "[" * 300 + "]" * 300, '{"a": ' + "1" * 5000 + "}"):
        with pytest.raises(SampleNotJson):
            render("{{sample.output_json.a}}", {}, sample)
    assert render("{{sample.output_json}}", {}, "[" * 150 + "]" * 150) == "[" * 150 + "]" * 150


@pytest.mark.parametrize(
    "grader",
    [
        {
            "type": "string_check",
            "name": "n",
            "operation": "eq",
            "input": "{{sample.output_json.a}}",
            "reference": "x",
        },
        {
            "type": "text_similarity",
            "name": "t",
            "input": "{{sample.output_json}}",
            "reference": "x",
            "evaluation_metric": "fuzzy_match",
        },
    ],
)
def test_a_deeply_nested_sample_scores_0_with_sample_parse_error_not_500(http, grader):
    response = run(http, grader, DEEP_SAMPLE)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["reward"] == 0.0 and body["metadata"]["errors"]["sample_parse_error"] is True


@pytest.mark.parametrize("field", ["item", "reference_answer", "grader"])
def test_request_fields_nested_past_the_contract_limit_are_422_naming_them(http, field):
    deep: object = "x"
    for _ in range(900):  # under the JSON parser's ~1,000 levels, far over the contract's 200
        deep = [deep]
    grader: dict = {
        "type": "string_check",
        "name": "n",
        "operation": "eq",
        "input": "{{item.a}}",
        "reference": "x",
    }
    body: dict = {"grader": grader, "model_sample": "x", "item": {"a": "x"}}
    if field == "grader":
        grader = {"type": "score_model", "name": "m", "input": [{"role": "user", "content": {"text": deep}}]}
        body["grader"] = grader
        validated = http.post("/v1/graders/validate", json={"grader": grader})
        assert validated.status_code == 422 and validated.json()["error"]["field"] == "grader", validated.text
    else:
        body[field] = deep
    response = http.post("/v1/graders/run", json=body)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"] == field and "200 levels" in error["message"]


def test_a_score_model_that_cannot_grade_gives_0_so_its_formula_is_checked_at_0(http):
    # A score_model's reward is 0 when the sample or the judge's reply cannot be graded, outside a range like
    # [1, 5]: a formula dividing by it would fail then, so it is refused when the spec is validated.
    model = {"type": "score_model", "name": "m", "input": [{"role": "user", "content": "x"}], "range": [1, 5]}
    grader = {"type": "multi", "name": "c", "graders": {"m": model}, "calculate_output": "1 / m"}
    response = http.post("/v1/graders/validate", json={"grader": grader})
    assert response.status_code == 422 and "m in [0, 5]" in response.json()["error"]["message"], response.text


def test_a_formula_failing_after_validation_is_a_server_failure_not_a_grade_or_422():
    import asyncio

    from proctor.verifiers.openai_grader import MultiGrader, StringCheckGrader, run_grader

    check = StringCheckGrader(type="string_check", name="a", input="x", reference="x", operation="eq")
    grader = MultiGrader.model_construct(
        type="multi", name="m", graders={"a": check}, calculate_output="1 / (a - 1)"
    )
    from proctor.engine import Engine

    engine = Engine()  # run_grader takes an engine (text_similarity scores through it)
    try:
        outcome = asyncio.run(run_grader(grader, {}, "x", engine, None))
    finally:
        engine.close()
    assert outcome.server_failure and "calculate_output" in outcome.server_failure
    assert outcome.errors["formula_parse_error"] is True


# -- a python grader that exec()s the sample cannot hand the sample the harness's nonce ---------------------------

EXEC_GRADER = (
    "def grade(s, i):\n"
    "    ns = {}\n"
    "    exec(s['output_text'], ns)\n"
    "    return 1.0 if ns['add'](2, 3) == 5 else 0.0\n"
)
WRONG_ADD = "def add(a, b):\n    return a - b\n"


@pytest.mark.parametrize(
    "attack",
    [
        # the red team's sample: the nonce and result path were globals of __main__
        'import sys, json, os\nm = sys.modules["__main__"]\n'
        'json.dump({"nonce": m.nonce, "value": 1.0}, open(m.result_path, "w"))\nos._exit(0)\n',
        # a forged result file, with and without a guessed MAC
        'import json, os\nfor name in (".proctor_grade.json",):\n'
        '    json.dump({"value": 1.0, "mac": "0" * 64, "nonce": ""}, open(name, "w"))\nos._exit(0)\n',
        # kill the trusted parent
        "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n",
        # read the nonce through the parent's stdin (it is non-dumpable: /proc/<ppid>/fd is closed to it)
        'import os, json\nnonce = open(f"/proc/{os.getppid()}/fd/0").read()\n'
        'json.dump({"nonce": nonce, "value": 1.0}, open(".proctor_grade.json", "w"))\nos._exit(0)\n',
        # read stdin directly (the child closed it before the grader ran)
        "import os, json\nnonce = os.read(0, 100).decode()\n"
        'json.dump({"nonce": nonce, "value": 1.0}, open(".proctor_grade.json", "w"))\nos._exit(0)\n',
    ],
)
def test_a_sample_a_python_grader_execs_cannot_forge_its_grade(http, backend, attack):
    grader = {"type": "python", "name": "p", "source": EXEC_GRADER}
    score = http.post(
        "/v1/score",
        json={"verifier": "openai.grader", "response": WRONG_ADD + attack, "reference": {"grader": grader}},
    ).json()
    assert score["status"] == "ok" and score["reward"] == 0.0, score


def test_a_python_grader_that_execs_an_honest_sample_grades_it(http, backend):
    grader = {"type": "python", "name": "p", "source": EXEC_GRADER}
    right = "def add(a, b):\n    print('adding', a, b)\n    return a + b\n"
    assert run(http, grader, right).json()["reward"] == 1.0
    assert run(http, grader, WRONG_ADD).json()["reward"] == 0.0
    chatty = "def grade(s, i):\n    print('noise ' * 100)\n    import sys; print('x', file=sys.stderr)\n    return 0.3\n"
    body = run(http, {"type": "python", "name": "p", "source": chatty}, "x").json()
    assert (
        body["reward"] == pytest.approx(0.3)
        and body["metadata"]["errors"]["python_grader_runtime_error"] is False
    )


# -- image URLs: only a plain public DNS name, however a URL parser would read the host --------------------------

# The red team's loopback spellings (WHATWG parsers decode '%2e', the ideographic full stop, full-width letters,
# and map these IPv6 forms to IPv4), then the strict rule's edges.
LOOPBACK_IMAGE_URLS = [
    "https://127%2E0%2E0%2E1/cat.png",
    "https://127%2e1/cat.png",
    "https://2130706433%2e/cat.png",
    "https://127\u30020\u30020\u30021/cat.png",
    "https://localhost%2e/cat.png",
    "https://\uff4c\uff4f\uff43\uff41\uff4c\uff48\uff4f\uff53\uff54/cat.png",
    "https://%6c%6f%63%61%6c%68%6f%73%74/cat.png",
    "https://[64:ff9b::7f00:1]/cat.png",
    "https://[::127.0.0.1]/cat.png",
    "https://[2002:7f00:1::]/cat.png",
    "https://\u3000/cat.png",
]
EDGE_IMAGE_URLS = [
    "https://8.8.8.8/cat.png",  # no IP literal at all, public or not
    "https://[2606:4700::1111]/cat.png",
    "https://0x7f.1/cat.png",
    "https://example.com./cat.png",  # trailing dot
    "https://example/cat.png",  # one label
    "https://localhost/cat.png",
    "https://LOCALHOST:443/cat.png",
    "https://a.localhost/cat.png",
    "https://printer.local/cat.png",
    "https://metadata.google.internal/cat.png",
    "https://example.123/cat.png",  # last label not alphabetic
    "https://example.c0m/cat.png",
    "https://-example.com/cat.png",
    "https://example-.com/cat.png",
    "https://ex_ample.com/cat.png",
    "https://exa%6dple.com/cat.png",
    "https://b\u00fccher.de/cat.png",
    "https://" + "a" * 64 + ".com/cat.png",  # a label over 63
    "https://" + ".".join(["a" * 63] * 4) + ".com/",  # over 253
    "https://example..com/cat.png",
    "https://example.com:8443/cat.png",
    "https://example.com:/cat.png",
    "https://example.com:0443x/cat.png",
    "https://user@example.com/cat.png",
    "https:///cat.png",
    "https://",
]
GOOD_IMAGE_URLS = [
    "https://example.com/cat.png",
    "https://EXAMPLE.com:443/cat.png?size=2#x",
    "https://cdn-1.images.example.co.uk/a/b.png",
    "https://" + "a" * 63 + ".com/cat.png",
    "https://x.io",
    "https://example.com/%2e%2e/caf\u00e9.png",  # the path is the fetcher's business, not the host
]


def test_image_urls_name_only_a_plain_public_dns_host():
    for url in LOOPBACK_IMAGE_URLS + EDGE_IMAGE_URLS:
        assert image_url_problem(url) is not None, url
    for url in GOOD_IMAGE_URLS:
        assert image_url_problem(url) is None, url


def _image_grader(image_url: str) -> dict:
    part = {"type": "input_image", "image_url": image_url}
    content = [{"type": "input_text", "text": "Caption: {{sample.output_text}}"}, part]
    return {
        "type": "score_model",
        "name": "look",
        "model": "gpt-4o",
        "input": [{"role": "developer", "content": "Grade."}, {"role": "user", "content": content}],
    }


@pytest.mark.parametrize("url", LOOPBACK_IMAGE_URLS)
def test_a_loopback_image_url_is_refused_from_the_spec_the_item_and_the_sample(http, judge, url):
    before = judge.calls
    literal = http.post("/v1/graders/validate", json={"grader": _image_grader(url)})
    assert literal.status_code == 422, literal.text[:300]
    from_item = run(http, _image_grader("{{item.image}}"), "a cat", {"image": url})
    assert from_item.status_code == 422 and from_item.json()["error"]["field"] == "item"
    body = run(http, _image_grader("{{sample.output_text}}"), url).json()
    assert body["reward"] == 0.0 and body["metadata"]["errors"]["sample_parse_error"] is True
    assert "image_url" in body["metadata"]["scores"]["sample_image_error"]
    assert judge.calls == before
