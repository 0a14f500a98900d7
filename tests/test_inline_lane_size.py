"""The inline lane is sized by the whole item: response, reference and options (issue 20, red-team finding 6).

A short response against 25 MB of golds once took the inline lane, and was prepared (validation, the cache key's
JSON and hash over the whole reference) and scored on the event loop. Now such an item is prepared on a thread
and scored in the pool; what a reference's size does not show (an RE2 program) is declared by the reference;
and the inputs no answer needs (a 50,000-character gold or option text) are a 422 naming the field.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import httpx
import pytest

from proctor import engine as engine_module
from proctor.api.admission import INLINE, POOL, lane_of, lane_of_requests
from proctor.contract import RequestError
from proctor.engine import Engine, Prepared, measure, request_size
from proctor.settings import Settings
from proctor.verifiers.text.choice import MAX_OPTION_CHARS
from proctor.verifiers.text.match import MAX_GOLD_CHARS, MAX_GOLDS, MAX_GOLDS_TOTAL_CHARS

# PROCTOR_INLINE_MAX_CHARS (default 100,000) at half, so text.match's largest reference is past it.
LIMIT = 50_000
SMALL = {"verifier": "text.match", "response": "The answer is 42", "reference": "42"}


def golds(count: int, chars: int, *, last: str | None = None) -> list[str]:
    """`count` distinct golds of `chars` characters each (the last one `last` when given)."""
    made = [f"g{index}-" + "x" * (chars - len(f"g{index}-")) for index in range(count)]
    if last is not None:
        made[-1] = last
    return made


def big_reference(op: str = "contains", *, last: str | None = None) -> dict[str, Any]:
    """A short response against as many characters of golds as text.match takes (10 of 10,000)."""
    count = MAX_GOLDS_TOTAL_CHARS // MAX_GOLD_CHARS
    reference = {"op": op, "answer": golds(count, MAX_GOLD_CHARS, last=last)}
    return {"verifier": "text.match", "response": "Answer: Paris", "reference": reference}


@pytest.fixture(scope="module")
def engine():
    made = Engine(Settings(inline_max_chars=LIMIT, cache_size=0, pool_workers=1))
    yield made
    made.close()


def test_an_item_is_sized_by_its_reference_and_options_too(engine: Engine) -> None:
    assert lane_of(engine, engine.prepare(SMALL)) == INLINE
    assert lane_of_requests(engine, [SMALL, SMALL]) == INLINE
    big = big_reference()
    item = engine.prepare(big)
    assert len(item.response) < 100 and not engine.runs_inline(item)
    assert lane_of(engine, item) == POOL
    assert lane_of_requests(engine, [SMALL, big]) == POOL
    # 40,000 characters of golds and a short response are within the bound; 40,000 of each are not.
    under = {**SMALL, "reference": {"answer": golds(4, MAX_GOLD_CHARS)}}
    over = {**under, "response": "x" * 40_000}
    assert lane_of(engine, engine.prepare(over)) == POOL and lane_of_requests(engine, [over]) == POOL
    assert lane_of(engine, engine.prepare(under)) == INLINE and lane_of_requests(engine, [under]) == INLINE
    # Options count as well (a verifier's own options may hold anything; the raw request is sized as sent).
    fat_options = {**SMALL, "options": {"end_tokens": ["t" * 64] * 64}}
    assert request_size(fat_options, LIMIT).total > request_size(SMALL, LIMIT).total + 64 * 64


def test_the_count_stops_at_the_limit_without_walking_the_rest() -> None:
    class Untouchable(list):
        def __iter__(self):
            raise AssertionError("walked a list already known to be over the limit")

    # A million numbers are over the limit from the list's length alone.
    assert measure(Untouchable([0] * 1_000_000), LIMIT).total > LIMIT
    # Strings count their characters, every value and container more: a JSON-size estimate, never below it.
    value = {"a": [1, 2.5, None, True, "xyz"], "b": {"c": ""}}
    import json

    assert measure(value, LIMIT).total >= len(json.dumps(value, separators=(",", ":")))
    # Deep nesting is walked without recursion.
    deep: list[Any] = []
    for _ in range(100_000):
        deep = [deep]
    assert measure(deep, LIMIT).total > LIMIT
    # An object that says nothing about its size is not trusted to be small.
    assert measure([object.__new__(type("Opaque", (), {"__slots__": ()}))], LIMIT).total > LIMIT
    # The batch lane stops walking a batch of many mid-sized structures (it is chosen on the event loop).
    mid = {**SMALL, "reference": {"answer": ["a"] * 200}}
    assert request_size(mid, LIMIT).total < LIMIT
    engine = Engine(Settings(inline_max_chars=LIMIT, cache_size=0))
    assert lane_of_requests(engine, [mid] * 4) == INLINE
    assert lane_of_requests(engine, [mid] * 1000) == POOL


def test_a_regex_program_counts_by_its_size_not_its_characters(engine: Engine) -> None:
    # 18 characters of pattern, 3,008 RE2 instructions: searching 50,000 characters took 0.8 s on the loop.
    hostile = {
        "verifier": "text.match",
        "response": "Answer: " + "ab" * 25_000,
        "reference": {"op": "regex", "answer": "(a|b)*a(a|b){1000}"},
        "options": {"match": "search"},
    }
    assert not engine.runs_inline(engine.prepare(hostile))
    # One pattern of 256 copies is 256 programs: still far past the bound on a short answer.
    many = {
        **hostile,
        "response": "Answer: " + "ab" * 500,
        "reference": {"op": "regex", "answer": ["(a|b)*a(a|b){1000}"] * 256},
    }
    assert not engine.runs_inline(engine.prepare(many))
    # A usual pattern on a usual response stays inline.
    date = {
        "verifier": "text.match",
        "response": "Answer: 2024-05-01",
        "reference": {"op": "regex", "answer": r"\d{4}-\d{2}-\d{2}"},
    }
    item = engine.prepare(date)
    assert engine.runs_inline(item) and engine.score_prepared(item).reward == 1.0


def test_a_gold_or_an_option_longer_than_any_answer_needs_is_a_422_naming_it(engine: Engine) -> None:
    # The red team's request: 256 golds of 100,000 characters (25 MB) behind a short response.
    with pytest.raises(RequestError) as caught:
        engine.prepare({**SMALL, "reference": {"op": "contains", "answer": golds(MAX_GOLDS, 100_000)}})
    assert caught.value.status == 422 and caught.value.field == "reference.answer", caught.value
    assert "gold 0 is 100,000 characters" in caught.value.message
    # Many golds each within the bound, too long together.
    with pytest.raises(RequestError) as caught:
        engine.prepare({**SMALL, "reference": {"answer": golds(MAX_GOLDS, 400)}})
    assert caught.value.status == 422 and caught.value.field == "reference.answer", caught.value
    assert "102,400 characters together" in caught.value.message
    for op in ("eq", "ne", "contains", "regex"):
        fine = {**SMALL, "reference": {"op": op, "answer": ["42", "4" * MAX_GOLD_CHARS]}}
        engine.prepare(fine)
        too_long = {**SMALL, "reference": {"op": op, "answer": ["42", "4" * (MAX_GOLD_CHARS + 1)]}}
        with pytest.raises(RequestError) as caught:
            engine.prepare(too_long)
        assert caught.value.status == 422 and caught.value.field == "reference.answer", caught.value
        assert f"gold 1 is {MAX_GOLD_CHARS + 1:,} characters" in caught.value.message
    with pytest.raises(RequestError) as caught:
        engine.prepare({**SMALL, "reference": "4" * (MAX_GOLD_CHARS + 1)})
    assert caught.value.field == "reference.answer" and "gold 0" in caught.value.message
    options = ["Paris", "Lyon", "x" * (MAX_OPTION_CHARS + 1)]
    with pytest.raises(RequestError) as caught:
        engine.prepare(
            {"verifier": "text.choice", "response": "B", "reference": {"options": options, "answer": "A"}}
        )
    assert caught.value.status == 422 and caught.value.field == "reference.options.2", caught.value
    options[2] = "x" * MAX_OPTION_CHARS
    choice = {
        "verifier": "text.choice",
        "response": "Answer: A",
        "reference": {"options": options, "answer": "A"},
    }
    assert engine.score(choice).reward == 1.0


def test_a_big_reference_item_still_scores_right_in_the_pool(engine: Engine) -> None:
    submitted = engine.pool.stats()["submitted"]
    right = engine.score(big_reference(last="Paris"))
    wrong = engine.score(big_reference())
    assert (right.status.value, right.reward) == ("ok", 1.0), right
    assert (wrong.status.value, wrong.reward, wrong.reason) == ("ok", 0.0, "wrong_answer"), wrong
    assert engine.pool.stats()["submitted"] == submitted + 2  # both went to a worker, under a deadline
    # eq too, and in a batch: the big item goes to the pool, the small one is scored inline on the thread.
    results = engine.score_batch([big_reference("eq", last="paris"), SMALL])
    assert [result.reward for result in results] == [1.0, 1.0]  # type: ignore[union-attr]
    assert engine.pool.stats()["submitted"] == submitted + 3
    # A regex reference sent to the pool for its program's cost carries its patterns there and is graded.
    regex = {
        "verifier": "text.match",
        "response": "Answer: " + "ab" * 25_000,
        "reference": {"op": "regex", "answer": ["(a|b)*a(a|b){1000}", "(?:ab)+"]},
    }
    assert not engine.runs_inline(engine.prepare(regex))
    graded = engine.score(regex)
    assert (graded.status.value, graded.reward) == ("ok", 1.0), graded
    assert engine.pool.stats()["submitted"] == submitted + 4


async def test_a_big_reference_never_runs_on_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cheap request sent beside a big-reference one: the big one is prepared on a thread and scored in the
    pool, never on the loop. The loop's longest stall is measured with a ticker and printed, not asserted."""
    from proctor.api.app import create_app

    loop_thread = threading.get_ident()
    prepared_on: dict[int, list[bool]] = {}  # reference size -> on the loop, per prepare
    inline_on_loop: list[int] = []  # reference sizes of items scored inline on the loop
    pooled: list[int] = []  # reference sizes of items sent to the pool

    def size_of(reference: Any) -> int:
        return request_size({"reference": reference}, 1 << 62).total

    real_prepare = engine_module.prepare

    def recording_prepare(request: Any, **kwargs: Any) -> Prepared:
        reference = request.reference if hasattr(request, "reference") else request.get("reference")
        prepared_on.setdefault(size_of(reference), []).append(threading.get_ident() == loop_thread)
        return real_prepare(request, **kwargs)

    real_run_inline = engine_module._run_inline

    def recording_run_inline(item: Prepared) -> Any:
        if threading.get_ident() == loop_thread:
            inline_on_loop.append(size_of(item.reference.model_dump()))
        return real_run_inline(item)

    real_submit = Engine._submit

    def recording_submit(self: Engine, item: Prepared, *, block: bool) -> Any:
        pooled.append(size_of(item.reference.model_dump()))
        return real_submit(self, item, block=block)

    monkeypatch.setattr(engine_module, "prepare", recording_prepare)
    monkeypatch.setattr(engine_module, "_run_inline", recording_run_inline)
    monkeypatch.setattr(Engine, "_submit", recording_submit)

    stalls: list[float] = []
    stop = asyncio.Event()

    async def ticker() -> None:
        loop = asyncio.get_running_loop()
        last = loop.time()
        while not stop.is_set():
            await asyncio.sleep(0.001)
            now = loop.time()
            stalls.append(now - last)
            last = now

    app = create_app(Settings(pool_workers=1, cache_size=0, inline_max_chars=LIMIT))
    transport = httpx.ASGITransport(app=app)
    big = big_reference(last="Paris")
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://t", timeout=120) as client,
    ):
        # Warm the pool and the verifier once, so the run below measures scoring, not start-up.
        assert (await client.post("/v1/score", json=SMALL)).json()["reward"] == 1.0
        tick = asyncio.create_task(ticker())
        heavy, cheap, batch = await asyncio.gather(
            client.post("/v1/score", json=big),
            client.post("/v1/score", json=SMALL),
            client.post("/v1/score/batch", json={"items": [big, SMALL]}),
        )
        stop.set()
        await tick
    assert heavy.json()["reward"] == 1.0, heavy.text
    assert cheap.json()["reward"] == 1.0, cheap.text
    assert [result["reward"] for result in batch.json()["results"]] == [1.0, 1.0], batch.text

    big_size, small_size = size_of(big["reference"]), size_of(SMALL["reference"])
    assert big_size > LIMIT and len(big["response"]) < 100
    assert prepared_on[small_size][0] is True  # the cheap one still takes the on-loop fast path
    assert prepared_on[big_size] and not any(prepared_on[big_size]), prepared_on[big_size]
    assert not [size for size in inline_on_loop if size > LIMIT], inline_on_loop
    assert pooled.count(big_size) == 2, pooled  # /v1/score and the batch each sent it to a worker
    print(
        f"\nlongest event-loop stall beside a {big_size:,}-character reference: {max(stalls) * 1000:.1f} ms"
    )


def test_every_inline_verifiers_own_examples_still_run_inline() -> None:
    """The sizing must not push ordinary work off the inline lane: every example of every registered inline
    verifier (puzzles parse dates and enums, tool environments transcripts) stays inline at the default bound."""
    from proctor.engine import is_async
    from proctor.registry import all_verifiers

    engine = Engine(Settings(cache_size=0))
    checked = 0
    for spec in all_verifiers():
        if spec.execution != "inline" or is_async(spec):
            continue
        for example in spec.examples:
            request = {
                "verifier": spec.name,
                "response": example.response,
                "reference": example.reference,
                "options": example.options,
            }
            assert engine.runs_inline(engine.prepare(request)), (spec.name, example.note)
            assert lane_of_requests(engine, [request]) == INLINE, (spec.name, example.note)
            checked += 1
    assert checked > 100
