"""End-of-turn tokens are cut once, in the engine, before any verifier reads a response (every route but /run_code).

The rule (docs/service/end-of-turn.md): a token that cannot be ordinary text cuts the response where it first
occurs (a run-on next turn is not the answer); a markup-like token (`</s>`, `<eos>`) is cut only at the end;
then the trailing run of tokens goes. `options.end_tokens` and `PROCTOR_END_TOKENS` choose the list, an empty
one turns cutting off, and what was cut is in `details.end_of_turn`.
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest

from proctor.contract import ChatMessage, RequestError, Status, Verdict
from proctor.end_of_turn import END_OF_TURN_TOKENS, cut_end_of_turn, is_markup, parse_end_tokens
from proctor.engine import Engine, cut_response, prepare
from proctor.registry import BaseOptions, VerifierSpec, register_verifier
from proctor.settings import Settings
from proctor.verifiers.reading import cut_end_of_turn as reader_cut
from proctor.verifiers.reading import strip_end_of_turn

OPENRLHF = "/compat/openrlhf/get_reward"
SLIME = "/compat/slime"
HARD_TOKENS = [token for token in END_OF_TURN_TOKENS if not is_markup(token)]
MARKUP_TOKENS = [token for token in END_OF_TURN_TOKENS if is_markup(token)]
SEEN: list[Any] = []


def _echo(response: Any, reference: Any, options: BaseOptions) -> Verdict:
    """Records what the verifier was given; reward 1 when it equals the reference."""
    SEEN.append(response)
    return Verdict.right() if response == reference else Verdict.wrong("different")


register_verifier(
    VerifierSpec(name="test.eot_echo", version="1", score=_echo, reference=Any, execution="inline")
)
register_verifier(
    VerifierSpec(
        name="test.eot_messages",
        version="1",
        score=_echo,
        reference=Any,
        execution="inline",
        accepts_messages=True,
    )
)


@pytest.fixture
def engine() -> Engine:
    return Engine(Settings(cache_size=1000, end_tokens=None))


def score(engine: Engine, response: Any, reference: Any, verifier: str = "text.match", **options: Any):
    return engine.score(
        {"verifier": verifier, "response": response, "reference": reference, "options": options}
    )


# -- the rule ---------------------------------------------------------------------------------------------


def test_the_builtin_list_names_the_issue_tokens_and_only_tags_are_markup() -> None:
    for token in ("<|im_end|>", "<|eot_id|>", "<|endoftext|>", "</s>", "<end_of_turn>", "<|end|>"):
        assert token in END_OF_TURN_TOKENS
    assert MARKUP_TOKENS == ["</s>", "<eos>"]
    assert reader_cut is cut_end_of_turn  # the neutral reader's name for the engine's rule


@pytest.mark.parametrize("token", END_OF_TURN_TOKENS)
def test_each_trailing_token_is_cut_and_the_answer_scores(engine: Engine, token: str) -> None:
    result = score(engine, f"The answer is 42{token}", "42")
    assert (result.status, result.reward) == (Status.ok, 1.0), result.details
    assert result.details["end_of_turn"] == {"token": token, "cut_chars": len(token)}
    math = score(engine, f"#### 42{token}\n", "42", verifier="math")
    assert math.reward == 1.0, math.details


@pytest.mark.parametrize("token", HARD_TOKENS)
def test_a_run_on_next_turn_after_any_special_token_is_not_the_answer(engine: Engine, token: str) -> None:
    response = f"The answer is 41{token}<|im_start|>user\nNo, 42"
    result = score(engine, response, "42")
    assert (result.status, result.reward, result.correct) == (Status.ok, 0.0, False)
    assert result.details["extracted"] == "41"
    assert result.details["end_of_turn"] == {"token": token, "cut_chars": len(response) - 16}


def test_the_issue_run_on_example_scores_zero(engine: Engine) -> None:
    result = score(engine, "The answer is 41<|im_end|><|im_start|>user\nNo, 42", "42")
    assert (result.reward, result.details["extracted"]) == (0.0, "41")


@pytest.mark.parametrize(
    ("text", "kept", "token"),
    [
        ("42<|im_end|>", "42", "<|im_end|>"),
        ("42 <|im_end|>\n", "42 ", "<|im_end|>"),  # blanks before the first cut token stay
        ("42</s> <|im_end|>  ", "42", "</s>"),  # the trailing run, blanks between tokens included
        ("42</s><|im_end|><|im_start|>user 7", "42", "</s>"),
        ("a <s>old</s> b", "a <s>old</s> b", None),  # markup in the middle is ordinary text
        ("<s>old</s>", "<s>old", "</s>"),  # ... and is cut at the end (documented)
        ("x <eos> y", "x <eos> y", None),
        ("<|im_end|>42", "", "<|im_end|>"),  # an empty turn, then another: no answer
        ("答案是 42<｜end▁of▁sentence｜>", "答案是 42", "<｜end▁of▁sentence｜>"),
        ("plain", "plain", None),
        ("", "", None),
    ],
)
def test_cut_end_of_turn(text: str, kept: str, token: str | None) -> None:
    cut = cut_end_of_turn(text)
    assert (cut.text, cut.token, cut.cut_chars) == (kept, token, len(text) - len(kept))


def test_the_trailing_strip_alone_leaves_the_middle_alone() -> None:
    assert strip_end_of_turn("<|im_end|> in the middle") == "<|im_end|> in the middle"
    assert cut_end_of_turn("<|im_end|> in the middle").text == ""


def test_cutting_is_linear() -> None:
    started = time.perf_counter()
    assert cut_end_of_turn("ok" + "<|im_end|>" * 200_000).text == "ok"
    assert cut_end_of_turn("ok" + "</s> " * 200_000).text == "ok"
    assert cut_end_of_turn("x" * 5_000_000 + "</s>").text == "x" * 5_000_000
    assert time.perf_counter() - started < 5


def test_many_markup_tokens_on_a_long_response_cost_one_pass() -> None:
    """The red team's 8 MB `<x>` run with 64 markup-like tokens: one trie match, not tokens x length."""
    tokens = tuple(f"<x{i}>" for i in range(63)) + ("<x>",)
    response = "42" + "<x>" * 2_670_000
    started = time.process_time()
    cut = cut_end_of_turn(response, tokens)
    spent = time.process_time() - started
    assert (cut.text, cut.token, cut.cut_chars) == ("42", "<x>", len(response) - 2)
    assert spent < 2, spent  # about 0.1 s; the per-token loop took 15 s
    assert cut_end_of_turn("ok" + "</s> " * 800_000).text == "ok"


@pytest.mark.parametrize(
    ("text", "tokens", "kept"),
    [
        ("a</s>", ("s>", "</s>"), "a</"),  # at one position the token listed first is cut
        ("a</s>", ("</s>", "s>"), "a"),
        ("a</s>s>", ("s>", "</s>"), "a</"),
        ("ab \n", ("b \n",), "ab \n"),  # a token ending in a blank never follows the skipped blanks
        ("x<a> <b>\t<a> ", ("<a>", "<b>"), "x"),
        ("<a>", ("<a>", "<a>"), ""),
        ("ab", (), "ab"),
    ],
)
def test_the_trailing_run_takes_the_first_listed_token_at_each_step(
    text: str, tokens: tuple[str, ...], kept: str
) -> None:
    assert strip_end_of_turn(text, tokens) == kept


# -- options.end_tokens and PROCTOR_END_TOKENS ---------------------------------------------------------------


def test_an_empty_option_list_turns_cutting_off(engine: Engine) -> None:
    result = score(engine, "The answer is 42<|im_end|>", "42", end_tokens=[])
    assert result.reward == 0.0 and "end_of_turn" not in result.details
    run_on = score(engine, "41<|im_end|>\nAnswer: 42", "42", end_tokens=[])
    assert run_on.reward == 1.0  # nothing cut: the verifier reads the whole text


def test_a_custom_option_list_replaces_the_builtin_one(engine: Engine) -> None:
    custom = score(engine, "The answer is 42[[STOP]]", "42", end_tokens=["[[STOP]]"])
    assert custom.reward == 1.0 and custom.details["end_of_turn"]["token"] == "[[STOP]]"
    builtin = score(engine, "The answer is 42<|im_end|>", "42", end_tokens=["[[STOP]]"])
    assert builtin.reward == 0.0


def test_every_verifier_accepts_the_option_and_a_bad_list_is_a_422(engine: Engine) -> None:
    with pytest.raises(RequestError) as caught:
        score(engine, "42", "42", end_tokens=[""])
    assert (caught.value.status, caught.value.field) == (422, "options.end_tokens.0")
    with pytest.raises(RequestError):
        score(engine, "42", "42", end_tokens="<|im_end|>")
    with pytest.raises(RequestError) as caught:
        score(engine, "42", "42", end_tokens=["<x>"] * 65)
    assert (caught.value.status, caught.value.field) == (422, "options.end_tokens")
    with pytest.raises(RequestError) as caught:
        score(engine, "42", "42", end_tokens=["<" + "x" * 63 + ">"])
    assert (caught.value.status, caught.value.field) == (422, "options.end_tokens.0")
    assert score(engine, "42" + "x" * 64, "42", end_tokens=["x" * 64] * 64).reward == 1.0
    ok = score(engine, "#### 42", "42", verifier="math", end_tokens=[], deadline_s=5)
    assert (ok.status, ok.reward) == (Status.ok, 1.0)


def test_the_setting_reads_a_comma_list_or_json_and_empty_turns_it_off(monkeypatch) -> None:
    assert parse_end_tokens(None) == END_OF_TURN_TOKENS
    assert parse_end_tokens("") == ()
    assert parse_end_tokens(" <|a|> , <|b|>,") == ("<|a|>", "<|b|>")
    assert parse_end_tokens('["<|a|>", "x,y"]') == ("<|a|>", "x,y")
    with pytest.raises(ValueError):
        parse_end_tokens('["<|a|>", 3]')
    monkeypatch.setenv("PROCTOR_END_TOKENS", "<|stop|>, [[STOP]]")
    assert Settings().end_token_list == ("<|stop|>", "[[STOP]]")
    monkeypatch.setenv("PROCTOR_END_TOKENS", "[[STOP]]")  # a value starting with [ is JSON
    with pytest.raises(ValueError):
        Settings()
    monkeypatch.setenv("PROCTOR_END_TOKENS", "")
    off = Engine(Settings(cache_size=0))
    assert (
        off.score({"verifier": "text.match", "response": "Answer: 42<|im_end|>", "reference": "42"}).reward
        == 0.0
    )


def test_an_engine_uses_its_own_settings_list() -> None:
    custom = Engine(Settings(cache_size=0, end_tokens='["[[STOP]]"]'))
    assert score(custom, "Answer: 42[[STOP]]", "42").reward == 1.0
    assert score(custom, "Answer: 42<|im_end|>", "42").reward == 0.0
    [batch] = custom.score_batch(
        [{"verifier": "text.match", "response": "Answer: 42[[STOP]]", "reference": "42"}]
    )
    assert batch.reward == 1.0


# -- the cache -----------------------------------------------------------------------------------------------


def test_requests_that_differ_only_in_their_tokens_never_share_a_score(engine: Engine) -> None:
    on = score(engine, "Answer: 42<|im_end|>", "42")
    off = score(engine, "Answer: 42<|im_end|>", "42", end_tokens=[])
    assert (on.reward, on.cached, off.reward, off.cached) == (1.0, False, 0.0, False)
    plain = score(engine, "Answer: 42", "42", end_tokens=[])
    assert not plain.cached  # same text the verifier reads, other tokens: its own entry
    keys = {
        prepare({"verifier": "text.match", "response": "Answer: 42", "reference": "42", "options": o}).key
        for o in ({}, {"end_tokens": []}, {"end_tokens": ["<|im_end|>"]})
    }
    assert len(keys) == 3


def test_a_cached_score_carries_this_request_s_cut_not_the_first_one_s(engine: Engine) -> None:
    first = score(engine, "Answer: 42<|im_end|>", "42")
    second = score(engine, "Answer: 42<|eot_id|>\n", "42")
    third = score(engine, "Answer: 42", "42")
    assert (first.cached, second.cached, third.cached) == (False, True, True)
    assert first.details["end_of_turn"] == {"token": "<|im_end|>", "cut_chars": 10}
    assert second.details["end_of_turn"] == {"token": "<|eot_id|>", "cut_chars": 11}
    assert "end_of_turn" not in third.details


# -- chat transcripts and nested requests -----------------------------------------------------------------


def test_a_chat_response_s_assistant_text_is_cut(engine: Engine) -> None:
    transcript = [
        {"role": "user", "content": "6*7?"},
        {"role": "assistant", "content": "The answer is 42<|im_end|><|im_start|>user\nsure?"},
    ]
    result = score(engine, transcript, "42")
    assert result.reward == 1.0 and result.details["end_of_turn"]["token"] == "<|im_end|>"


def test_a_messages_verifier_gets_every_assistant_message_cut_and_other_roles_untouched(
    engine: Engine,
) -> None:
    transcript = [
        {"role": "system", "content": "end turns with <|im_end|>"},
        {"role": "user", "content": "hi<|im_end|>"},
        {"role": "assistant", "content": "hello<|im_end|>"},
        {"role": "user", "content": "again"},
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "bye</s>"}, {"type": "text", "text": "!"}],
        },
    ]
    expected = [
        {"role": "system", "content": "end turns with <|im_end|>"},
        {"role": "user", "content": "hi<|im_end|>"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "again"},
        {"role": "assistant", "content": [{"type": "text", "text": "bye"}, {"type": "text", "text": "!"}]},
    ]
    result = score(engine, transcript, expected, verifier="test.eot_messages")
    assert result.reward == 1.0, SEEN[-1]
    assert result.details["end_of_turn"] == {"token": "<|im_end|>", "cut_chars": 14, "messages": [2, 4]}
    text, record = cut_response(
        [ChatMessage(role="user", content="a<|im_end|>")], END_OF_TURN_TOKENS, messages=True
    )
    assert (text, record) == ([{"role": "user", "content": "a<|im_end|>"}], None)


def test_multi_components_read_the_cut_text_and_inherit_an_empty_list(engine: Engine) -> None:
    reference = {"components": {"answer": {"verifier": "text.match", "reference": "42"}}}
    on = score(engine, "Answer: 42<|im_end|>", reference, verifier="multi")
    assert on.reward == 1.0 and on.details["end_of_turn"]["token"] == "<|im_end|>"
    off = score(engine, "Answer: 42<|im_end|>", reference, verifier="multi", end_tokens=[])
    assert off.reward == 0.0


def test_the_verifier_never_sees_the_token(engine: Engine) -> None:
    SEEN.clear()
    score(engine, "abc<|eot_id|><|start_header_id|>user", "abc", verifier="test.eot_echo")
    assert SEEN == ["abc"]


# -- code: programs keep their markup ------------------------------------------------------------------------


def _code_reference(stdout: str) -> dict:
    return {"language": "python", "tests": {"format": "stdio", "cases": [{"stdin": "", "stdout": stdout}]}}


def test_a_program_with_markup_tokens_in_a_string_is_untouched(backend, engine: Engine) -> None:
    program = "```python\nprint('<s>old</s> <eos>')\n```"
    for response in (program, program + "<|im_end|>", program + "\n</s>"):
        result = score(engine, response, _code_reference("<s>old</s> <eos>\n"), verifier="code")
        assert (result.status, result.reward) == (Status.ok, 1.0), (response, result.details)


def test_a_code_run_on_turn_is_not_the_program(backend, engine: Engine) -> None:
    response = "```python\nprint(1)\n```<|im_end|><|im_start|>user\nNo.<|im_end|>\n```python\nprint(2)\n```"
    result = score(engine, response, _code_reference("1\n"), verifier="code")
    assert (result.status, result.reward) == (Status.ok, 1.0), result.details


# -- over HTTP: the issue's examples through the compat routes, /run_code untouched ----------------------------


ISSUE_EXAMPLES = [
    ("The answer is 42<|im_end|>", "42"),
    ("#### 42<|im_end|>", json.dumps({"verifier": "math", "reference": "42"})),
    ("Answer: 2<|im_end|>", "2"),
]


def test_the_issue_examples_score_one_through_openrlhf(live_server: str) -> None:
    prompt = "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n"
    body = {
        "query": [prompt + response for response, _ in ISSUE_EXAMPLES]
        + [prompt + "41<|im_end|><|im_start|>user\n42"],
        "prompts": [prompt] * 4,
        "labels": [label for _, label in ISSUE_EXAMPLES] + ["42"],
    }
    answer = httpx.post(f"{live_server}{OPENRLHF}", json=body, timeout=60)
    assert answer.status_code == 200, answer.text
    assert answer.json()["rewards"] == [1.0, 1.0, 1.0, 0.0]


@pytest.mark.parametrize(("response", "label"), ISSUE_EXAMPLES)
def test_the_issue_examples_score_one_through_slime(live_server: str, response: str, label: str) -> None:
    answer = httpx.post(f"{live_server}{SLIME}", json={"response": response, "label": label}, timeout=60)
    assert answer.status_code == 200 and answer.json() == 1.0, answer.text


def test_v1_score_reports_the_cut_and_honours_the_option(live_server: str) -> None:
    request = {
        "verifier": "text.match",
        "response": "Answer: 42<|im_end|><|im_start|>user\n41",
        "reference": "42",
    }
    cut = httpx.post(f"{live_server}/v1/score", json=request, timeout=60).json()
    cut_chars = len(request["response"]) - len("Answer: 42")
    assert cut["reward"] == 1.0
    assert cut["details"]["end_of_turn"] == {"token": "<|im_end|>", "cut_chars": cut_chars}
    off = httpx.post(
        f"{live_server}/v1/score", json={**request, "options": {"end_tokens": []}}, timeout=60
    ).json()
    assert off["reward"] == 0.0 and off["cached"] is False
    batch = httpx.post(f"{live_server}/v1/score/batch", json={"items": [request]}, timeout=60).json()
    assert batch["results"][0]["reward"] == 1.0


def test_proctor_end_tokens_sets_the_service_list(start_server) -> None:
    base = start_server(PROCTOR_END_TOKENS='["[[STOP]]"]')
    custom = httpx.post(f"{base}{SLIME}", json={"response": "Answer: 42[[STOP]]", "label": "42"}, timeout=60)
    builtin = httpx.post(
        f"{base}{SLIME}", json={"response": "Answer: 42<|im_end|>", "label": "42"}, timeout=60
    )
    assert (custom.json(), builtin.json()) == (1.0, 0.0)


def test_run_code_never_cuts_a_program(backend, live_server: str) -> None:
    code = "print('a<|im_end|>b</s>')\n# <|im_end|>"
    answer = httpx.post(f"{live_server}/run_code", json={"code": code, "language": "python"}, timeout=60)
    assert answer.status_code == 200, answer.text
    assert answer.json()["run_result"]["stdout"] == "a<|im_end|>b</s>\n"


async def test_settings_given_in_code_decide_the_tokens_on_every_route():
    """create_app(Settings(end_tokens=...)) is what /v1/score, batch and the compat routes cut at."""
    import httpx

    from proctor.api.app import create_app

    app = create_app(Settings(pool_workers=1, cache_size=0, end_tokens='["[[STOP]]"]'))
    transport = httpx.ASGITransport(app=app)
    item = {"verifier": "text.match", "response": "The answer is 42[[STOP]] no, 41", "reference": "42"}
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://t") as client,
    ):
        single = (await client.post("/v1/score", json=item)).json()
        batch = (await client.post("/v1/score/batch", json={"items": [item]})).json()
        slime = (
            await client.post("/compat/slime", json={"response": item["response"], "label": "42"})
        ).json()
        openrlhf = await client.post(
            "/compat/openrlhf/get_reward",
            json={"query": [item["response"]], "prompts": [""], "labels": ["42"]},
        )
    assert single["reward"] == 1.0 and single["details"]["end_of_turn"]["token"] == "[[STOP]]"
    assert batch["results"][0]["reward"] == 1.0
    assert slime == 1.0
    assert openrlhf.json()["rewards"] == [1.0], openrlhf.text


async def test_a_large_response_is_read_off_the_event_loop(monkeypatch):
    """The cut and extraction of a response past inline_max_chars run on a thread, never on the event loop."""
    import threading

    import httpx

    from proctor import engine as engine_module
    from proctor.api.app import create_app

    threads: list[str] = []
    real_prepare = engine_module.prepare

    def recording_prepare(*args, **kwargs):
        threads.append(threading.current_thread().name)
        return real_prepare(*args, **kwargs)

    monkeypatch.setattr(engine_module, "prepare", recording_prepare)  # Engine.prepare_async's choice
    app = create_app(Settings(pool_workers=1, cache_size=0, inline_max_chars=1000))
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://t") as client,
    ):
        small = {"verifier": "text.match", "response": "42<|im_end|>", "reference": "42"}
        large = {**small, "response": " " * 5000 + "The answer is 42<|im_end|>"}
        assert (await client.post("/v1/score", json=small)).json()["reward"] == 1.0
        assert (await client.post("/v1/score", json=large)).json()["reward"] == 1.0
    loop_thread = threading.main_thread().name
    assert threads[0] == loop_thread and threads[1] != loop_thread, threads
