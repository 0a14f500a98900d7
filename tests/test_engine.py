"""The engine and the in-process API: validation, caching, batches and failure statuses."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

import proctor
from proctor.cache import LRUCache, cache_key
from proctor.contract import (
    MAX_NESTING,
    ItemError,
    RequestError,
    Score,
    ScoreRequest,
    Status,
    Verdict,
    nested_deeper_than,
)
from proctor.engine import Engine
from proctor.registry import BaseOptions, VerifierSpec, register_verifier
from proctor.settings import Settings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class _Ref(BaseModel):
    model_config = ConfigDict(extra="forbid")
    gold: str


class _Opts(BaseOptions):
    shout: bool = False


CALLS: list[str] = []


def _inline(response: str, reference: _Ref, options: _Opts) -> Verdict:
    CALLS.append(response)
    if response == "boom":
        raise RuntimeError("inline verifier bug")
    answer = response.upper() if options.shout else response
    return Verdict.right(seen=answer) if answer == reference.gold else Verdict.wrong("mismatch", seen=answer)


register_verifier(
    VerifierSpec(
        name="test.inline",
        version="2",
        score=_inline,
        reference=_Ref,
        options=_Opts,
        execution="inline",
        description="Test-only inline verifier.",
    )
)


class _AnyOpts(BaseOptions):
    data: Any = None


register_verifier(
    VerifierSpec(
        name="test.anything",
        version="1",
        score=lambda response, reference, options: Verdict.right(),
        reference=Any,
        options=_AnyOpts,
        execution="inline",
        description="Test-only inline verifier that takes any reference and any options.data.",
    )
)


@pytest.fixture(scope="module")
def engine():
    old = os.environ.get("PROCTOR_PLUGINS")
    os.environ["PROCTOR_PLUGINS"] = "tests.plugins.slow"  # pool workers inherit it and load test.misbehave
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    e = Engine(Settings(pool_workers=2, pool_memory_mb=1024, cache_size=100))
    yield e
    e.close()
    if old is None:
        os.environ.pop("PROCTOR_PLUGINS", None)
    else:
        os.environ["PROCTOR_PLUGINS"] = old


def req(response, gold="ok", verifier="test.inline", **extra):
    return {"verifier": verifier, "response": response, "reference": {"gold": gold}, **extra}


def test_score_shape_and_qualified_name(engine):
    score = engine.score(req("ok", id="a1"))
    assert isinstance(score, Score)
    assert (score.id, score.verifier, score.status, score.reward, score.correct) == (
        "a1",
        "test.inline@2",
        Status.ok,
        1.0,
        True,
    )
    assert score.details == {"seen": "ok"} and not score.cached and score.elapsed_ms >= 0
    wrong = engine.score(req("no"))
    assert (wrong.reward, wrong.correct, wrong.reason) == (0.0, False, "mismatch")


def test_empty_response_is_scored_not_rejected(engine):
    score = engine.score(req(""))
    assert score.status is Status.ok and score.reward == 0.0


def test_chat_messages_grade_the_last_assistant_message(engine):
    messages = [
        {"role": "user", "content": "say ok"},
        {"role": "assistant", "content": "no"},
        {"role": "user", "content": "again"},
        {"role": "assistant", "content": [{"type": "text", "text": "o"}, {"type": "text", "text": "k"}]},
    ]
    assert engine.score(req(messages)).reward == 1.0


def test_unknown_verifier_is_404_naming_known_ones(engine):
    with pytest.raises(RequestError) as info:
        engine.score(req("ok", verifier="nope"))
    assert info.value.status == 404 and info.value.field == "verifier"
    assert "test.inline" in info.value.message


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (
            {"verifier": "test.inline", "response": "x", "reference": {"gold": "x", "extra": 1}},
            "reference.extra",
        ),
        ({"verifier": "test.inline", "response": "x", "reference": {}}, "reference.gold"),
        (
            {
                "verifier": "test.inline",
                "response": "x",
                "reference": {"gold": "x"},
                "options": {"shout": "loud"},
            },
            "options.shout",
        ),
        (
            {
                "verifier": "test.inline",
                "response": "x",
                "reference": {"gold": "x"},
                "options": {"deadline_s": -1},
            },
            "options.deadline_s",
        ),
        ({"verifier": "test.inline", "reference": {"gold": "x"}}, "response"),
        ({"verifier": "test.inline", "response": 5, "reference": {"gold": "x"}}, "response"),
        (
            {"verifier": "test.inline", "response": [{"role": "robot"}], "reference": {"gold": "x"}},
            "response.0.role",
        ),
    ],
)
def test_invalid_fields_are_422_naming_the_field(engine, request_, field):
    with pytest.raises(RequestError) as info:
        engine.score(request_)
    assert info.value.status == 422
    assert info.value.field == field
    assert field in info.value.message


def test_inline_verifier_exception_is_verifier_error_not_zero(engine):
    score = engine.score(req("boom"))
    assert (score.status, score.reason, score.correct) == (Status.verifier_error, "verifier_exception", None)
    assert "inline verifier bug" in score.details["error"]


def test_cache_hits_only_for_ok_and_ignore_id_not_deadline(engine):
    CALLS.clear()
    first = engine.score(req("cached?", gold="cached?", id=1, options={"deadline_s": 3}))
    second = engine.score(req("cached?", gold="cached?", id=2, options={"deadline_s": 3}))
    assert not first.cached and second.cached and second.id == 2
    assert CALLS == ["cached?"]
    # A deadline can be a verifier's time budget (the code verifier's), so a score under one deadline never
    # answers a request with another: a tight deadline's time_limit must not poison the cache for everyone.
    other_deadline = engine.score(req("cached?", gold="cached?", id=3))
    assert not other_deadline.cached and CALLS == ["cached?", "cached?"]
    assert second.model_dump(exclude={"id", "cached", "elapsed_ms"}) == first.model_dump(
        exclude={"id", "cached", "elapsed_ms"}
    )
    engine.score(req("boom"))
    engine.score(req("boom"))
    assert CALLS.count("boom") == 2, "failures are never cached"
    other_options = engine.score(req("cached?", gold="cached?", options={"shout": True}))
    assert not other_options.cached


def test_pool_timeout_is_not_cached(engine):
    first = engine.score(
        {"verifier": "test.misbehave", "response": "sleep", "reference": "ok", "options": {"deadline_s": 0.3}}
    )
    again = engine.score(
        {"verifier": "test.misbehave", "response": "sleep", "reference": "ok", "options": {"deadline_s": 0.3}}
    )
    assert first.status is Status.timeout and again.status is Status.timeout and not again.cached
    assert first.reward == 0.0 and first.correct is None


def test_batch_keeps_order_and_isolates_bad_items(engine):
    items = [
        req("ok", id=0),
        {"verifier": "nope", "response": "x", "id": 1},
        {"verifier": "test.misbehave", "response": "pid", "reference": "ok", "id": 2},
        req("x", gold="y", id=3),
        {"verifier": "test.inline", "response": "x", "reference": {"bad": 1}, "id": 4},
        {"verifier": "test.misbehave", "response": "ok", "reference": "ok", "id": 5},
        "not an object",
    ]
    results = engine.score_batch(items)
    assert [getattr(r, "id", None) for r in results] == [0, 1, 2, 3, 4, 5, None]
    assert isinstance(results[1], ItemError) and results[1].error.status == 404
    assert isinstance(results[4], ItemError) and results[4].error.field == "reference.gold"
    assert isinstance(results[6], ItemError) and results[6].error.status == 422
    assert [r.reward for r in results if isinstance(r, Score)] == [1.0, 1.0, 0.0, 1.0]


async def test_async_batch_matches_sync(engine):
    items = [req(str(i), gold=str(i % 3), id=i) for i in range(50)]
    items += [
        {"verifier": "test.misbehave", "response": str(i % 2), "reference": "1", "id": 100 + i}
        for i in range(10)
    ]
    sync = engine.score_batch(items)
    asynchronous = await engine.score_batch_async(items)
    strip = {"elapsed_ms", "cached"}
    assert [r.model_dump(exclude=strip) for r in sync] == [r.model_dump(exclude=strip) for r in asynchronous]


def test_public_in_process_api():
    score = proctor.score("test.inline", "ok", {"gold": "ok"})
    assert score.reward == 1.0 and score.verifier == "test.inline@2"
    batch = proctor.score_batch([req("ok"), {"verifier": "zzz", "response": ""}])
    assert isinstance(batch[0], Score) and isinstance(batch[1], ItemError)


def test_cache_key_is_order_insensitive_and_lru_evicts():
    assert cache_key("v@1", {"a": 1, "b": 2}, "r", {}) == cache_key("v@1", {"b": 2, "a": 1}, "r", {})
    assert cache_key("v@1", "x", "r", {}) != cache_key("v@2", "x", "r", {})
    lru = LRUCache(2)
    s = Score(verifier="v@1", status=Status.ok, reward=1.0)
    lru.put("a", s)
    lru.put("b", s)
    assert lru.get("a") is s
    lru.put("c", s)
    assert lru.get("b") is None and lru.get("a") is s and lru.get("c") is s


def test_large_responses_of_inline_verifiers_go_to_the_pool(engine):
    small = engine.score({"verifier": "text.match", "response": "Answer: 42", "reference": "42"})
    submitted = engine.pool.stats()["submitted"]
    big_response = "filler " * 30_000 + "\nAnswer: 42"
    assert len(big_response) > engine.settings.inline_max_chars
    big = engine.score({"verifier": "text.match", "response": big_response, "reference": "42"})
    assert small.reward == big.reward == 1.0 and big.status is Status.ok
    assert engine.pool.stats()["submitted"] == submitted + 1


def _not_a_verdict(response: str, reference: str, options: BaseOptions) -> float:
    return 1.0  # what a verl-style compute_score author might return


register_verifier(
    VerifierSpec(
        name="test.float",
        version="1",
        score=_not_a_verdict,
        reference=str,
        execution="inline",  # type: ignore[arg-type]
    )
)


def test_a_verifier_returning_a_bare_number_is_a_verifier_error_not_a_crash(engine):
    score = engine.score({"verifier": "test.float", "response": "x", "reference": "x"})
    assert (score.status, score.reason, score.reward) == (Status.verifier_error, "bad_verdict", 0.0)
    batch = engine.score_batch([{"verifier": "test.float", "response": "x", "reference": "x"}, req("ok")])
    assert batch[0].status is Status.verifier_error and batch[1].reward == 1.0


def test_cached_scores_are_copies(engine):
    first = engine.score(req("copy me", gold="copy me"))
    hit = engine.score(req("copy me", gold="copy me"))
    hit.details["seen"] = "tampered"
    assert engine.score(req("copy me", gold="copy me")).details["seen"] == "copy me" == first.details["seen"]


def test_option_keys_keep_their_spelling_in_field_names(engine):
    for key in ("Bogus", "max-tokens"):
        with pytest.raises(RequestError) as info:
            engine.score(req("x", options={key: 1}))
        assert info.value.field == f"options.{key}"


def test_plugins_named_in_settings_reach_the_pool_workers(tmp_path):
    """A service built from Settings in code (no PROCTOR_PLUGINS in the environment) still finds its plugins."""
    script = tmp_path / "plugins_in_code.py"
    script.write_text(
        f"import sys; sys.path.insert(0, {ROOT!r})\n"
        "from proctor.engine import Engine\n"
        "from proctor.settings import Settings\n"
        "engine = Engine(Settings(plugins='tests.plugins.slow', pool_workers=1))\n"
        "score = engine.score({'verifier': 'test.misbehave', 'response': 'pid', 'reference': 'x'})\n"
        "print(score.status.value, score.details['pid'] > 0)\n"
        "engine.close()\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PROCTOR_PLUGINS"}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["ok", "True"]


# -- deeply nested data ------------------------------------------------------------------------------


def nest(depth: int, leaf: Any = 1) -> Any:
    """A value of `depth` nested lists around leaf (nest(1) == [1])."""
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def deep_requests(depth: int) -> dict[str, dict[str, Any]]:
    """One request per field, each nesting `depth` levels deep in that field (the field's value is level 1)."""
    return {
        "reference": {"verifier": "test.anything", "response": "x", "reference": nest(depth)},
        "options": {"verifier": "test.anything", "response": "x", "options": {"data": nest(depth - 1)}},
        "response": {
            "verifier": "test.anything",
            "response": [{"role": "assistant", "content": "x", "extra": nest(depth - 2)}],
        },
    }


def test_data_nested_up_to_the_limit_is_scored(engine):
    assert MAX_NESTING == 200
    for request in deep_requests(MAX_NESTING).values():
        score = engine.score(request)
        assert (score.status, score.reward) == (Status.ok, 1.0)


@pytest.mark.parametrize("depth", [MAX_NESTING + 1, 220, 254, 255, 1_000, 100_000])
def test_data_nested_past_the_limit_is_422_naming_the_field(engine, depth):
    # Before the limit, 220-254 levels failed inside pydantic's serializer and 255+ as "circular reference".
    for field, request in deep_requests(depth).items():
        with pytest.raises(RequestError) as info:
            engine.score(request)
        assert (info.value.status, info.value.field) == (422, field)
        assert f"more than {MAX_NESTING} levels" in info.value.message


def test_a_parsed_request_is_checked_like_a_raw_one(engine):
    # The HTTP route hands prepare a ScoreRequest: its chat messages' extra fields were not walked (a 300-deep
    # one was prepared, a 2,000-deep one raised RecursionError from the cache key).
    for depth in (MAX_NESTING + 1, 2_000):
        for field, request in deep_requests(depth).items():
            with pytest.raises(RequestError) as info:
                engine.score(ScoreRequest.model_validate(request))
            assert (info.value.status, info.value.field) == (422, field)
    for request in deep_requests(MAX_NESTING).values():
        assert engine.score(ScoreRequest.model_validate(request)).status == Status.ok


def test_deep_item_fails_only_its_batch_slot(engine):
    deep = {**deep_requests(255)["reference"], "id": "deep"}
    results = engine.score_batch([req("ok", id=0), deep, req("ok", id=2)])
    assert isinstance(results[1], ItemError)
    assert (results[1].id, results[1].error.status, results[1].error.field) == ("deep", 422, "reference")
    assert [r.reward for r in (results[0], results[2])] == [1.0, 1.0]


def test_in_process_score_checks_nesting_too():
    with pytest.raises(RequestError) as info:
        proctor.score("test.anything", "x", nest(300))
    assert (info.value.status, info.value.field) == (422, "reference")
    with pytest.raises(RequestError) as info:
        proctor.score("test.anything", "x", None, {"data": {"a": nest(300)}})
    assert (info.value.status, info.value.field) == (422, "options")


def test_nesting_check_is_iterative_linear_and_ends_on_shared_or_cyclic_data():
    started = time.perf_counter()
    assert nested_deeper_than(nest(1_000_000), MAX_NESTING)  # far past any recursion limit
    wide = [[[i] for i in range(200_000)]]
    assert not nested_deeper_than(wide, MAX_NESTING)
    shared: Any = [1]
    for _ in range(100):  # 2**100 paths through 100 shared lists
        shared = [shared, shared]
    assert not nested_deeper_than(shared, MAX_NESTING)
    cycle: list[Any] = []
    cycle.append(cycle)
    assert nested_deeper_than(cycle, MAX_NESTING)
    assert not nested_deeper_than(nest(MAX_NESTING), MAX_NESTING)
    assert nested_deeper_than({"a": nest(MAX_NESTING)}, MAX_NESTING)
    assert time.perf_counter() - started < 10  # generous: the machine is shared


@pytest.mark.parametrize("bad_id", [False, True, 1.5])
def test_request_id_is_a_string_or_an_integer(engine, bad_id):
    with pytest.raises(RequestError) as info:
        engine.score(req("ok", id=bad_id))
    assert (info.value.status, info.value.field) == (422, "id")
    assert engine.score(req("ok", id=2.0)).id == 2  # JSON Schema's "integer" includes 2.0
