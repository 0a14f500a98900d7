"""The verl, TRL and OpenRLHF adapters end to end: against the real service and in-process, every failure policy."""

from __future__ import annotations

import inspect
import json
import math
import os
from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from proctor.adapters import openrlhf, trl, verl
from proctor.adapters.labels import PromptMismatch
from proctor.client import ProctorRequestError
from proctor.engine import Engine
from proctor.policy import ScoringFailed
from tests.adapter_helpers import misbehaving_engine

MISBEHAVE = "test.misbehave"
VERL_KEYS = {"score", "acc", "failed", "status", "reason"}


@pytest.fixture(autouse=True)
def clean_config(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No adapter setting leaks in from the environment or from another test."""
    for key in [k for k in os.environ if k.startswith("PROCTOR_") and k != "PROCTOR_PLUGINS"]:
        monkeypatch.delenv(key)
    verl.reset_config()
    yield
    verl.reset_config()


@pytest.fixture(scope="module")
def in_process() -> Iterator[Engine]:
    """A fresh process-wide engine whose pool workers know test.misbehave."""
    yield from misbehaving_engine()


def batch_calls(url: str) -> float:
    """How many POST /v1/score/batch requests the server has answered, from its Prometheus metrics."""
    total = 0.0
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        if line.startswith("proctor_http_requests_total{") and 'route="/v1/score/batch"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


# -- verl --------------------------------------------------------------------------------------------------


def test_verl_compute_score_over_http(live_server: str) -> None:
    verl.configure(server_url=live_server, verifiers={"misc": MISBEHAVE})
    right = verl.compute_score("misc", "42", "42", {"index": 0})
    wrong = verl.compute_score("misc", "41", "42")
    assert right == {"score": 1.0, "acc": 1.0, "failed": 0.0, "status": "ok", "reason": ""}
    assert wrong == {"score": 0.0, "acc": 0.0, "failed": 0.0, "status": "ok", "reason": "mismatch"}


def test_verl_verifier_comes_from_extra_info_then_mapping_then_default(live_server: str) -> None:
    verl.configure(server_url=live_server, verifiers={"misc": "no.such.verifier"})
    # extra_info wins over the mapping
    assert verl.compute_score("misc", "a", "a", {"verifier": MISBEHAVE})["score"] == 1.0
    with pytest.raises(ValueError, match="'other'.*misc"):
        verl.compute_score("other", "a", "a")
    verl.configure(default_verifier=MISBEHAVE)
    assert verl.compute_score("other", "a", "a")["score"] == 1.0
    # an unknown verifier is a configuration error under every policy
    verl.configure(on_failure="value")
    with pytest.raises(ProctorRequestError) as caught:
        verl.compute_score("misc", "a", "a")
    assert (caught.value.status, caught.value.field) == (404, "verifier")


def test_verl_options_reach_the_verifier(live_server: str) -> None:
    verl.configure(
        server_url=live_server,
        verifiers={"strict": {"verifier": MISBEHAVE, "options": {"no_such_option": 1}}},
    )
    with pytest.raises(ProctorRequestError) as caught:
        verl.compute_score("strict", "a", "a")
    assert caught.value.status == 422 and caught.value.field.startswith("options")
    verl.configure(on_failure="value", failure_value=0.25)
    rejected = verl.compute_score("strict", "a", "a")
    assert rejected == {"score": 0.25, "acc": 0.25, "failed": 1.0, "status": "rejected", "reason": "http_422"}
    # extra_info options are merged last
    with pytest.raises(ProctorRequestError):
        verl.compute_score(
            "misc", "a", "a", {"verifier": MISBEHAVE, "options": {"bogus": True}}, on_failure="raise"
        )


@pytest.mark.parametrize("where", ["http", "in_process"])
def test_verl_failure_policies(where: str, live_server: str, in_process: Engine) -> None:
    target = {"in_process": True} if where == "in_process" else {"server_url": live_server}
    verl.configure(verifiers={"misc": MISBEHAVE}, **target)
    with pytest.raises(ScoringFailed) as crashed:
        verl.compute_score("misc", "crash", "x")  # the default policy is raise
    assert crashed.value.score.status.value == "verifier_error"
    verl.configure(on_failure="value", failure_value=-1.0)
    timed_out = verl.compute_score("misc", "sleep", "x")
    assert timed_out == {
        "score": -1.0,
        "acc": -1.0,
        "failed": 1.0,
        "status": "timeout",
        "reason": "deadline_exceeded",
    }
    assert verl.compute_score("misc", "a", "a")["score"] == 1.0  # true verdicts are untouched by the policy
    with pytest.raises(ValueError, match="none"):
        verl.configure(on_failure="none")


def test_verl_reward_kwargs_configure_a_call(live_server: str) -> None:
    # verl passes custom_reward_function.reward_kwargs, and its own keywords, to compute_score
    result = verl.compute_score(
        "anything",
        "crash",
        "x",
        None,
        server_url=live_server,
        verifier=MISBEHAVE,
        on_failure="value",
        failure_value=0.5,
        reward_router_address=None,
    )
    assert result["score"] == 0.5 and result["status"] == "verifier_error"
    assert verl.current_config().server_url is None  # a call's keywords change nothing for the next call


def test_verl_configuration_from_environment(live_server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROCTOR_URL", live_server)
    monkeypatch.setenv("PROCTOR_VERL_VERIFIERS", json.dumps({"misc": MISBEHAVE}))
    monkeypatch.setenv("PROCTOR_ON_FAILURE", "value")
    monkeypatch.setenv("PROCTOR_FAILURE_VALUE", "0.125")
    verl.reset_config()
    assert verl.compute_score("misc", "crash", "x")["score"] == 0.125
    monkeypatch.setenv("PROCTOR_ON_FAILURE", "none")
    verl.reset_config()
    with pytest.raises(ValueError, match="cannot work in verl"):
        verl.compute_score("misc", "a", "a")
    monkeypatch.setenv("PROCTOR_ON_FAILURE", "value")
    monkeypatch.setenv("PROCTOR_VERL_VERIFIERS", "{not json")
    verl.reset_config()
    with pytest.raises(ValueError, match="PROCTOR_VERL_VERIFIERS"):
        verl.compute_score("misc", "a", "a")


def test_verl_batch_is_one_call_in_order(live_server: str) -> None:
    verl.configure(
        server_url=live_server, verifiers={"misc": MISBEHAVE}, on_failure="value", failure_value=0.0
    )
    before = batch_calls(live_server)
    results = verl.compute_score_batch(
        data_sources=np.array(["misc"] * 5, dtype=object),
        solution_strs=["a", "b", "crash", "c", "c"],
        ground_truths=["a", "a", "x", np.str_("c"), "d"],
        extra_infos=[{"index": np.int64(i)} for i in range(5)],
    )
    assert batch_calls(live_server) - before == 1
    assert [r["score"] for r in results] == [1.0, 0.0, 0.0, 1.0, 0.0]
    assert [r["failed"] for r in results] == [0.0, 0.0, 1.0, 0.0, 0.0]
    assert all(set(r) == VERL_KEYS for r in results)  # verl needs the same keys on every item


async def test_verl_async_compute_score(live_server: str) -> None:
    assert inspect.iscoroutinefunction(verl.compute_score_async)
    verl.configure(server_url=live_server, verifiers={"misc": MISBEHAVE}, return_dict=False)
    assert await verl.compute_score_async("misc", "z", np.str_("z"), {}) == 1.0
    assert await verl.compute_score_async("misc", "z", "y") == 0.0


def test_verl_in_process_with_numpy_inputs(in_process: Engine) -> None:
    verl.configure(in_process=True, default_verifier=MISBEHAVE)
    extra = {"verifier": np.str_(MISBEHAVE), "index": np.int64(3), "tags": np.array(["a", "b"])}
    assert verl.compute_score("src", "q", np.str_("q"), extra)["score"] == 1.0
    results = verl.compute_score_batch(["src", "src"], ["q", "r"], ["q", "q"], None)
    assert [r["score"] for r in results] == [1.0, 0.0]


def test_verl_rejects_bad_settings() -> None:
    with pytest.raises(ValueError, match="on_failure"):
        verl.configure(on_failure="ignore")
    with pytest.raises(TypeError, match="no_such_setting"):
        verl.configure(no_such_setting=1)


def test_verl_configure_overrides_an_environment_policy_it_cannot_use(
    live_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROCTOR_ON_FAILURE", "none")  # e.g. set for the service's compatibility routes
    verl.reset_config()
    verl.configure(server_url=live_server, verifier=MISBEHAVE, on_failure="value", failure_value=0.75)
    assert verl.compute_score("any", "crash", "x")["score"] == 0.75
    with pytest.raises(ScoringFailed):
        verl.compute_score("any", "crash", "x", on_failure="raise")  # a call's keyword wins
    assert verl.current_config().on_failure == "value"


# -- TRL ---------------------------------------------------------------------------------------------------

COMPLETIONS = ["a", "sleep", "b", "crash"]
ANSWERS = ["a", "x", "a", "x"]


async def test_trl_reward_function_is_async_named_and_one_call(live_server: str) -> None:
    reward = trl.reward_function(MISBEHAVE, server_url=live_server)
    assert inspect.iscoroutinefunction(reward)
    assert reward.__name__ == "proctor_test_misbehave"
    metrics: list[tuple[str, float]] = []
    before = batch_calls(live_server)
    rewards = await reward(
        prompts=["p"] * 6,
        completions=["1", "2", "3", "1", "2", "3"],
        completion_ids=[[1]] * 6,
        answer=["1", "1", "3", "0", "2", "2"],
        trainer_state=None,
        log_metric=lambda name, value: metrics.append((name, value)),
    )
    assert batch_calls(live_server) - before == 1
    assert rewards == [1.0, 0.0, 1.0, 0.0, 1.0, 0.0]
    assert metrics == [("proctor/proctor_test_misbehave/failed", 0.0)]
    assert trl.reward_function(MISBEHAVE, name="accuracy").__name__ == "accuracy"


async def test_trl_conversational_completions(live_server: str) -> None:
    reward = trl.reward_function(MISBEHAVE, server_url=live_server, reference_column="solution")
    completions = [
        [{"role": "assistant", "content": "yes"}],
        [{"role": "assistant", "content": [{"type": "text", "text": "y"}, {"type": "text", "text": "es"}]}],
        [{"role": "assistant", "content": "no"}, {"role": "tool", "content": "yes"}],
    ]
    prompts = [[{"role": "user", "content": "?"}]] * 3
    assert await reward(prompts, completions, solution=["yes"] * 3) == [1.0, 1.0, 0.0]


@pytest.mark.parametrize(
    ("policy", "expected"),
    [("none", [1.0, None, 0.0, None]), ("value", [1.0, -0.5, 0.0, -0.5])],
)
async def test_trl_failure_policies(live_server: str, policy: str, expected: list) -> None:
    reward = trl.reward_function(MISBEHAVE, server_url=live_server, on_failure=policy, failure_value=-0.5)
    metrics: list[tuple[str, float]] = []
    rewards = await reward(
        ["p"] * 4, COMPLETIONS, answer=ANSWERS, log_metric=lambda n, v: metrics.append((n, v))
    )
    assert rewards == expected
    assert metrics == [("proctor/proctor_test_misbehave/failed", 0.5)]


async def test_trl_raise_policy_stops(live_server: str) -> None:
    reward = trl.reward_function(MISBEHAVE, server_url=live_server, on_failure="raise")
    with pytest.raises(ScoringFailed) as caught:
        await reward(["p"] * 2, ["a", "crash"], answer=["a", "x"])
    assert caught.value.score.status.value == "verifier_error"


def test_trl_sync_variant(live_server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROCTOR_URL", live_server)  # no server_url: the environment names the service
    reward = trl.reward_function_sync(MISBEHAVE, on_failure="none")
    assert not inspect.iscoroutinefunction(reward) and reward.__name__ == "proctor_test_misbehave"
    before = batch_calls(live_server)
    assert reward(["p"] * 3, ["a", "crash", "b"], answer=["a", "x", "a"]) == [1.0, None, 0.0]
    assert batch_calls(live_server) - before == 1


async def test_trl_in_process(in_process: Engine) -> None:
    reward = trl.reward_function(MISBEHAVE, in_process=True, on_failure="none")
    assert await reward(["p"] * 4, COMPLETIONS, answer=ANSWERS) == [1.0, None, 0.0, None]
    sync = trl.reward_function_sync(MISBEHAVE, in_process=True, on_failure="value", failure_value=0.0)
    assert sync(["p"] * 2, ["crash", "a"], answer=["x", "a"]) == [0.0, 1.0]


async def test_trl_errors_are_loud(live_server: str) -> None:
    reward = trl.reward_function(MISBEHAVE, server_url=live_server)
    with pytest.raises(KeyError, match="'answer'.*solution"):
        await reward(["p"], ["a"], solution=["a"])
    with pytest.raises(ValueError, match="on_failure"):
        trl.reward_function(MISBEHAVE, on_failure="skip")
    unknown = trl.reward_function("no.such.verifier", server_url=live_server, on_failure="none")
    with pytest.raises(ProctorRequestError) as caught:
        await unknown(["p"], ["a"], answer=["a"])
    assert caught.value.status == 404


# -- OpenRLHF ----------------------------------------------------------------------------------------------


def test_openrlhf_labels_round_trip() -> None:
    text = openrlhf.label(MISBEHAVE, "gold", {"deadline_s": 2})
    assert openrlhf.parse_label(text, "text.match") == (MISBEHAVE, "gold", {"deadline_s": 2})
    assert openrlhf.parse_label("42", "text.match") == ("text.match", "42", {})
    assert openrlhf.parse_label({"verifier": "v", "reference": [1]}, "text.match") == ("v", [1], {})
    assert openrlhf.parse_label('{"answer": 1}', "text.match") == ("text.match", '{"answer": 1}', {})
    assert openrlhf.strip_prompt("Q: 1+1? A: 2", "Q: 1+1? ") == "A: 2"


@pytest.mark.parametrize("where", ["http", "in_process"])
def test_openrlhf_reward_func(
    where: str, live_server: str, in_process: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    if where == "http":
        monkeypatch.setenv("PROCTOR_URL", live_server)
    monkeypatch.setenv("PROCTOR_DEFAULT_VERIFIER", MISBEHAVE)
    prompts = ["<user>q1</user>", "<user>q2</user>", "<user>q3</user>"]
    responses = ["a", "crash", "b"]
    labels = [openrlhf.label(MISBEHAVE, "a"), openrlhf.label(MISBEHAVE, "x"), "a"]
    queries = [p + r for p, r in zip(prompts, responses, strict=True)]
    out = openrlhf.reward_func(queries, prompts, labels, on_failure="value")
    assert out["rewards"] == out["scores"] == [1.0, 0.0, 0.0]
    logs = out["extra_logs"]
    assert logs["proctor_failed"] == logs["proctor_status_verifier_error"] == [0.0, 1.0, 0.0]
    assert logs["proctor_status_ok"] == [1.0, 0.0, 1.0] and logs["proctor_rejected"] == [0.0] * 3
    masked = openrlhf.reward_func(queries, prompts, labels, on_failure="none", failure_value=-1.0)
    assert masked["rewards"] == [1.0, -1.0, 0.0]
    assert masked["scores"][0::2] == [1.0, 0.0] and math.isnan(masked["scores"][1])
    with pytest.raises(ScoringFailed):
        openrlhf.reward_func(queries, prompts, labels)  # the default, as for the service's route
    monkeypatch.setenv("PROCTOR_ON_FAILURE", "value")
    monkeypatch.setenv("PROCTOR_FAILURE_VALUE", "0.5")
    assert openrlhf.reward_func(queries, prompts, labels)["rewards"] == [1.0, 0.5, 0.0]


def test_openrlhf_malformed_label_object_is_rejected_not_scored_as_plain_text(in_process: Engine) -> None:
    # Before: a non-string verifier or non-dict options made the whole label a plain gold answer for the
    # default verifier, i.e. an ok 0 for a dataset bug. Now the item is rejected, as the service's route does.
    labels = [
        json.dumps({"verifier": 5, "reference": "a"}),
        json.dumps({"verifier": MISBEHAVE, "reference": "a", "options": [1]}),
        openrlhf.label(MISBEHAVE, "a"),
    ]
    out = openrlhf.reward_func(["a"] * 3, [""] * 3, labels, on_failure="value", failure_value=0.25)
    assert out["rewards"] == [0.25, 0.25, 1.0]
    assert out["extra_logs"]["proctor_rejected"] == [1.0, 1.0, 0.0]
    with pytest.raises(ProctorRequestError) as caught:
        openrlhf.reward_func(["a"], [""], labels[1:2], on_failure="raise")
    assert caught.value.field == "options"
    deep = '{"verifier": "x", "reference": ' + "[" * 100_000 + "]" * 100_000 + "}"
    assert openrlhf.parse_label(deep, MISBEHAVE) == (MISBEHAVE, deep, {})  # unparsable: a plain answer


@pytest.mark.parametrize("policy", ["value", "none"])
def test_openrlhf_reward_func_and_route_agree(
    policy: str, live_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROCTOR_URL", live_server)
    prompts = ["<u>1</u>", "<u>2</u>", "<u>3</u>", "other"]
    queries = [prompts[0] + "a", prompts[1] + "crash", prompts[2] + "Answer: 7", "no prefix"]
    labels = [openrlhf.label(MISBEHAVE, "a"), openrlhf.label(MISBEHAVE, "x"), "7", "yes"]
    params = {"on_failure": policy, "failure_value": "0.5"}
    route = httpx.post(
        f"{live_server}/compat/openrlhf/get_reward",
        json={"query": queries, "prompts": prompts, "labels": labels},
        params=params,
        timeout=60,
    ).json()
    func = openrlhf.reward_func(queries, prompts, labels, on_failure=policy, failure_value=0.5)
    # the last query holds no part of its prompt: a failure on both paths (it was scored whole before)
    assert route["rewards"] == func["rewards"] == [1.0, 0.5, 1.0, 0.5]
    nan_to_none = [[None if math.isnan(v) else v for v in out["scores"]] for out in (route, func)]
    failure = None if policy == "none" else 0.5
    assert nan_to_none[0] == nan_to_none[1] == [1.0, failure, 1.0, failure]
    assert func["extra_logs"].pop("proctor_rejected") == [0.0] * 4  # the route answers 4xx instead
    assert route["extra_logs"] == func["extra_logs"]


# -- with a real verifier ----------------------------------------------------------------------------------


async def test_trl_and_verl_with_text_match(live_server: str) -> None:
    reward = trl.reward_function("text.match", server_url=live_server)
    completions = ["Work... so the answer is \\boxed{42}.", "<answer>41</answer>", ""]
    assert await reward(["q"] * 3, completions, answer=["42", "42", "42"]) == [1.0, 0.0, 0.0]
    verl.configure(server_url=live_server, verifiers={"openai/gsm8k": "text.match"})
    result = verl.compute_score("openai/gsm8k", "The answer is \\boxed{18}", "18", {"split": "train"})
    assert result["score"] == 1.0 and result["status"] == "ok"


# -- issue 16: labels of any JSON type, and the response of a left-truncated OpenRLHF query -------------------


def test_bare_labels_of_each_json_type() -> None:
    from proctor.adapters.labels import BadLabel, bare_reference, canonical_number

    assert [canonical_number(n) for n in (42, -3, 42.0, 0.5, 1e-7, 10**20, 1e20)] == [
        "42",
        "-3",
        "42",
        "0.5",
        "1e-07",
        "100000000000000000000",
        "100000000000000000000",
    ]
    assert bare_reference("42") == "42"
    assert bare_reference(72) == "72"
    assert bare_reference([71, "72", 0.5]) == {"answer": ["71", "72", "0.5"]}
    assert bare_reference({"answer": "x", "op": "contains"}) == {"answer": "x", "op": "contains"}
    for bad in (None, True, math.nan, math.inf, {"verifier": "text.match"}, {"reference": "x"}, object()):
        with pytest.raises(BadLabel):
            bare_reference(bad)
    assert openrlhf.parse_label(72, "math") == ("math", "72", {})
    # a label object given as a JSON string is refused the same way when it has only one of the two keys
    from proctor.adapters.labels import label_request

    for half in ('{"verifier": "math"}', ' {"reference": "42"}'):
        with pytest.raises(BadLabel):
            label_request(half, "42", "text.match")
    assert label_request('{"answer": "42"}', "42", "text.match")[0]["reference"] == '{"answer": "42"}'


def test_openrlhf_reward_func_takes_numeric_labels_and_rejects_missing_ones(in_process: Engine) -> None:
    prompt = "<|im_start|>user\n6*7?<|im_end|>\n<|im_start|>assistant\n"
    queries = [prompt + "The answer is 42", prompt + "The answer is 42", prompt + "x"]
    out = openrlhf.reward_func(
        queries, [prompt] * 3, [42, 42.0, None], on_failure="value", failure_value=-1.0
    )
    assert out["rewards"] == [1.0, 1.0, -1.0]
    assert out["extra_logs"]["proctor_rejected"] == [0.0, 0.0, 1.0]
    with pytest.raises(ProctorRequestError) as caught:
        openrlhf.reward_func(queries[2:], [prompt], [None], on_failure="raise")
    assert caught.value.field == "labels.0"


CHATML = (
    "<|im_start|>system\nBe brief.<|im_end|>\n"
    "<|im_start|>user\n1+1?<|im_end|>\n<|im_start|>assistant\n2<|im_end|>\n"
    "<|im_start|>user\n6*7? Not 41.<|im_end|>\n<|im_start|>assistant\n"
)


@pytest.mark.parametrize(
    ("prompt", "header"),
    [
        (CHATML, "<|im_start|>assistant\n"),
        (
            "<|start_header_id|>user<|end_header_id|>\n\nq<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
            "<|start_header_id|>assistant<|end_header_id|>\n\n",
        ),
        ("<start_of_turn>user\nq<end_of_turn>\n<start_of_turn>model\n", "<start_of_turn>model\n"),
        ("<｜User｜>q<｜Assistant｜><think>\n", "<｜Assistant｜><think>\n"),
        ("[INST] q [/INST]", "[/INST]"),
        ("Question: q\nAnswer:", None),
    ],
)
def test_final_assistant_header(prompt: str, header: str | None) -> None:
    from proctor.adapters.labels import final_assistant_header

    assert final_assistant_header(prompt) == header


def test_strip_prompt_rule() -> None:
    from proctor.adapters.labels import strip_prompt

    # 1. the query starts with the prompt
    assert strip_prompt(CHATML + "42", CHATML) == "42"
    # 2. left truncation: after the final assistant header, wherever the cut fell (even mid-token)
    for keep in (len(CHATML) - 1, len(CHATML) - 30, 40, len("<|im_start|>assistant\n")):
        assert strip_prompt("\ufffd" + CHATML[-keep:] + "42", CHATML) == "42", keep
    # ... passing over the header where the model wrote it itself (a run-on turn)
    run_on = "42<|im_end|>\n<|im_start|>assistant\n41"
    assert strip_prompt("\ufffd\ufffd" + CHATML[-60:] + run_on, CHATML) == run_on
    # ... and the last occurrence when no occurrence follows the prompt's own text (decoding changed it)
    changed = CHATML[-60:].replace("Not 41", "not 41")
    assert strip_prompt(changed + "42", CHATML) == "42"
    # 3. nothing locates the response (no assistant header in the prompt, or none left in the query): the
    # item fails; the whole query, prompt text included, is never scored
    for query, prompt in (("tail of a question? 42", "Question: a question?"), ("istant\n42", CHATML)):
        with pytest.raises(PromptMismatch):
            strip_prompt(query, prompt)
    assert strip_prompt("anything", "") == "anything"


RED_TEAM_PROMPT = "Q: capital of France? Hint the answer is Paris. A:"
PLAIN_PROMPT = (
    "Question: Natalia sold 48 clips in April and half as many in May. How many in all? Not 41.\nAnswer:"
)


@pytest.mark.parametrize(
    ("query", "prompt", "response"),
    [
        # the red team's case: left-truncated, no assistant header in the prompt (the whole query held "Paris")
        (RED_TEAM_PROMPT[5:] + " London", RED_TEAM_PROMPT, " London"),
        ("\ufffd" + RED_TEAM_PROMPT[9:] + " London", RED_TEAM_PROMPT, " London"),
        # a BOS token added at decode, before the whole prompt or a left-truncated one
        ("<s>" + RED_TEAM_PROMPT + " London", RED_TEAM_PROMPT, " London"),
        ("<|begin_of_text|>" + PLAIN_PROMPT + " 72", PLAIN_PROMPT, " 72"),
        ("<|begin_of_text|>" + PLAIN_PROMPT[30:] + " 72", PLAIN_PROMPT, " 72"),
        ("<|begin_of_text|>\ufffd" + PLAIN_PROMPT[31:] + " 72", PLAIN_PROMPT, " 72"),
        # a plain `Answer:` template, truncated anywhere that keeps its last 16 characters
        *(
            (PLAIN_PROMPT[-keep:] + " 72", PLAIN_PROMPT, " 72")
            for keep in (16, 17, 40, len(PLAIN_PROMPT) - 1)
        ),
        # a response that repeats the prompt's last words is kept whole
        (PLAIN_PROMPT[20:] + " Answer: 72", PLAIN_PROMPT, " Answer: 72"),
        # some other text before the whole prompt: after its first occurrence
        ("<<SYS>>x<</SYS>>" * 3 + PLAIN_PROMPT + " 72 " + PLAIN_PROMPT, PLAIN_PROMPT, " 72 " + PLAIN_PROMPT),
    ],
)
def test_strip_prompt_finds_the_end_of_a_left_truncated_or_bos_prefixed_prompt(
    query: str, prompt: str, response: str
) -> None:
    from proctor.adapters.labels import strip_prompt

    assert strip_prompt(query, prompt) == response


@pytest.mark.parametrize(
    "query",
    [
        "The capital is London, not Paris.",  # another template: no part of the prompt at its start
        "Q: capital of Spain? A: London",  # a different prompt
        "xx" * 20 + RED_TEAM_PROMPT[5:] + " London",  # more than a BOS token and a cut character before it
        RED_TEAM_PROMPT[-10:] + " London",  # fewer than 16 characters of the prompt left: not told apart
    ],
)
def test_strip_prompt_fails_closed_when_nothing_locates_the_response(query: str) -> None:
    from proctor.adapters.labels import PromptMismatch, strip_prompt

    with pytest.raises(PromptMismatch, match="chat template"):
        strip_prompt(query, RED_TEAM_PROMPT)


def test_strip_prompt_on_repetitive_text_is_bounded() -> None:
    import time

    from proctor.adapters.labels import strip_prompt

    prompt = "ab" * 200_000
    started = time.process_time()
    assert strip_prompt(prompt[7:] + "X", prompt) == "X"
    with pytest.raises(PromptMismatch):
        strip_prompt("zz" * 20 + prompt[1:] + "X", prompt)
    assert time.process_time() - started < 2


def test_strip_prompt_work_is_bounded_whatever_the_query_repeats(monkeypatch: pytest.MonkeyPatch) -> None:
    # The red team's body: rule 4 sliced the query once per occurrence of the header (17.6 s for 4 MB, on the
    # event loop). Every rule now checks at most PROMPT_TRIES occurrences, each compared in place.
    import contextlib
    import time

    from proctor.adapters import labels

    calls = 0
    real = labels._ends_with

    def counted(*args: object) -> bool:
        nonlocal calls
        calls += 1
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(labels, "_ends_with", counted)
    periodic = "ab" * 2_000_000
    cases = [
        ("Q" * 20 + " Assistant:" + "Assistant:" * 400_000, "Z" * 20 + " Assistant:"),
        (periodic[7:] + "ab" * 1_000_000 + "X", periodic),
        ("zz" * 20 + periodic[1:] + "X", periodic),
        ("x" * 20 + "Final answer: 1234" * 250_000, "y" * 4_000_000 + "Final answer: 1234"),
        ("<|im_start|>assistant\n" * 200_000, "q<|im_end|>\n<|im_start|>assistant\n"),
    ]
    started = time.process_time()
    for query, prompt in cases:
        calls = 0
        with contextlib.suppress(PromptMismatch):
            labels.strip_prompt(query, prompt)
        assert calls <= 2 * labels.PROMPT_TRIES, (prompt[:30], calls)
    assert time.process_time() - started < 2  # generous: linear scans of ~4 MB strings


RUN_ON_PROMPT = "Solve the problem below.\n" + "context line\n" * 200 + "Final answer:"


def test_strip_prompt_a_response_cannot_hide_a_left_truncated_prompt() -> None:
    # The red team's case: the response repeated the prompt's last 16 characters more than PROMPT_TRIES times,
    # which pushed the prompt's own occurrence out of those checked from the end: prompt_mismatch (masked).
    from proctor.adapters.labels import PROMPT_TRIES, strip_prompt

    tail = RUN_ON_PROMPT[-16:]
    for copies in (0, 70, 10 * PROMPT_TRIES):
        response = (" " + tail) * copies + " 50"
        assert strip_prompt(RUN_ON_PROMPT[1500:] + response, RUN_ON_PROMPT) == response, copies
        assert strip_prompt("\ufffd" + RUN_ON_PROMPT[-40:] + response, RUN_ON_PROMPT) == response, copies


LLAMA_PROMPT = (
    "<|start_header_id|>user<|end_header_id|>\n\nWhat is 6*7? Not 41.<|eot_id|>"
    "<|start_header_id|>assistant<|end_header_id|>\n\n"
)


def property_responses(prompt: str, seed: int) -> list[str]:
    """Responses that copy what could be taken for the prompt's end: its tail, all of it, headers, BOS tokens."""
    import random

    tail = prompt[-16:]
    pieces = [
        " 42",
        tail,
        " " + tail,
        prompt,
        prompt[5:],
        prompt[-40:],
        prompt[-17:],
        prompt[-15:],
        prompt[-1:],
        "<|im_start|>assistant\n",
        "<|start_header_id|>assistant<|end_header_id|>\n\n",
        "Assistant:",
        "Answer:",
        "<s>",
        "<|begin_of_text|>",
        "\ufffd",
        "\n",
    ]
    rng = random.Random(seed)
    fixed = ["", " 42", (" " + tail) * 70 + " 50", tail * 100, prompt + " 42", prompt * 3]
    return fixed + ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 8))) for _ in range(40)]


@pytest.mark.parametrize(
    ("prompt", "once"),
    [
        (PLAIN_PROMPT, True),
        (RUN_ON_PROMPT, True),
        (RED_TEAM_PROMPT, True),
        (LLAMA_PROMPT, False),
        (CHATML, False),
    ],
)
def test_strip_prompt_locates_any_response_after_a_left_truncated_prompt(prompt: str, once: bool) -> None:
    # query = [BOS, cut character] + prompt[k:] + response. When the prompt's last 16 characters occur once
    # in it, the response is located exactly, whatever it writes. When they recur (CHATML's two assistant
    # turns, Llama 3's two `<|end_header_id|>\n\n`), the prompt is still always found, and at worst the start of a response that continues the
    # prompt is read as prompt: the text scored is always the response or its end, never prompt text.
    from proctor.adapters.labels import strip_prompt

    assert once == (prompt.find(prompt[-16:]) == len(prompt) - 16)
    for keep in sorted(
        k for k in {16, 17, 20, 31, 40, 60, len(prompt) // 2, len(prompt)} if k <= len(prompt)
    ):
        for lead in ("", "\ufffd", "\ufffd\ufffd", "<s>", "<|begin_of_text|>\ufffd"):
            for response in property_responses(prompt, keep):
                query = lead + prompt[len(prompt) - keep :] + response
                found = strip_prompt(query, prompt)  # never PromptMismatch
                if once:
                    assert found == response, (keep, lead, response)
                else:
                    assert response.endswith(found), (keep, lead, response)


@pytest.mark.parametrize("where", ["http", "in_process"])
def test_openrlhf_reward_func_fails_a_query_whose_prompt_is_not_found(
    where: str, live_server: str, in_process: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    if where == "http":
        monkeypatch.setenv("PROCTOR_URL", live_server)
    label = openrlhf.label("text.match", {"answer": "Paris", "op": "contains"})
    queries = [
        RED_TEAM_PROMPT[5:] + " London",
        "The capital is London, not Paris.",
        RED_TEAM_PROMPT + " Paris",
    ]
    prompts = [RED_TEAM_PROMPT] * 3
    out = openrlhf.reward_func(queries, prompts, [label] * 3, on_failure="value", failure_value=-1.0)
    assert out["rewards"] == [0.0, -1.0, 1.0]  # before: 1.0, 1.0, 1.0 (the prompt's "Paris" was scored)
    assert out["extra_logs"]["proctor_status_verifier_error"] == [0.0, 1.0, 0.0]
    with pytest.raises(ScoringFailed) as caught:
        openrlhf.reward_func(queries, prompts, [label] * 3, on_failure="raise")
    assert caught.value.score.reason == "prompt_mismatch"
