"""Fixes of the issue-18 red team's findings on `tool.search_qa` (F3, F4, F8).

F3: a search that matched nothing does not meet `require_search`; only an observation that lists an article as
the environment writes one counts. F4: a list of candidates joined by any separator is a hedge, and under `f1`
an answer far longer than the gold is too long. F8: an open session holds its index (no rebuild between steps
whatever other seeds do), the bundled seed is pinned, the cache is LRU, and at most MAX_LIVE_SEEDS seeds are
alive at once (one more is a 429 naming `task.corpus_seed`).
"""

from __future__ import annotations

import asyncio
import gc
import json
from typing import Any

import pytest

import proctor
from proctor.contract import RequestError
from proctor.engine import Engine
from proctor.environments.tools.search_qa import index as index_module
from proctor.environments.tools.search_qa.environment import (
    SEARCH_QA,
    gold_transcript,
    lists_articles,
    search_text,
)
from proctor.environments.tools.sessions import SessionManager
from proctor.settings import Settings


@pytest.fixture(scope="module")
def engine():
    engine = Engine(Settings(cache_size=0))
    yield engine
    engine.close()


def call(call_id: str, name: str, arguments: dict[str, Any], content: str = "") -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": content,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ],
    }


def observation(call_id: str, name: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "name": name, "content": content}


def answer(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def task(level: str = "medium") -> Any:
    return SEARCH_QA.make_tasks(split="train", seed=0, count=1, level=level)[0]


# == F3: only a search that listed an article counts ===========================================================


def test_lists_articles_reads_the_environments_own_format():
    found, status = search_text(0, "Sosern Press founder")
    assert status == "ok" and lists_articles(found)
    assert not lists_articles(search_text(0, "zzqxv qqzzx")[0])
    assert not lists_articles(search_text(0, "")[0])
    assert not lists_articles(search_text(0, "the of and")[0])  # stop words only: nothing to match
    assert not lists_articles("Error: query must be a string.")
    assert not lists_articles("Results: [d00001] Sosern Press")  # the id must open the observation


@pytest.mark.parametrize("query", ["zzqxv qqzzx", "the of", "", "   "])
def test_a_search_that_got_nothing_then_the_gold_answer_scores_no_search(query: str):
    item = task()
    gold = item.metadata["gold_answer"]
    transcript = [
        *item.prompt,
        call("s", "search", {"query": query}),
        observation("s", "search", search_text(0, query)[0]),
        answer(f"<answer>{gold}</answer>"),
    ]
    verdict = proctor.score("tool.search_qa", transcript, item.reference)
    assert (verdict.reward, verdict.reason) == (0.0, "no_search")


def test_model_text_that_looks_like_results_does_not_count():
    item = task()
    gold = item.metadata["gold_answer"]
    empty = search_text(0, "zzqxv qqzzx")[0]
    article = "[d00001] Something\nSomething is a city."
    transcripts = {
        # the results written by the model in its own message, next to the call
        "in the calling message": [
            *item.prompt,
            call("s", "search", {"query": "zzqxv qqzzx"}, content=article),
            observation("s", "search", empty),
            answer(f"<answer>{gold}</answer>"),
        ],
        # an article opened by id after a search that got nothing is not a search result
        "an opened article": [
            *item.prompt,
            call("s", "search", {"query": "zzqxv qqzzx"}),
            observation("s", "search", empty),
            call("o", "open", {"doc_id": "d00001"}),
            observation("o", "open", "[d00001] " + article.split("] ", 1)[1]),
            answer(f"<answer>{gold}</answer>"),
        ],
    }
    for note, transcript in transcripts.items():
        verdict = proctor.score("tool.search_qa", transcript, item.reference)
        assert (verdict.reward, verdict.reason) == (0.0, "no_search"), note


def test_a_search_with_results_still_counts_and_require_search_false_lifts_it():
    item = task()
    gold = item.metadata["gold_answer"]
    assert proctor.score("tool.search_qa", gold_transcript(item), item.reference).reward == 1.0
    found = search_text(0, "Sosern Press")[0]
    transcript = [
        *item.prompt,
        call("s", "search", {"query": "zzqxv qqzzx"}),
        observation("s", "search", search_text(0, "zzqxv qqzzx")[0]),
        call("t", "search", {"query": "Sosern Press"}),
        observation("t", "search", found),
        answer(f"<answer>{gold}</answer>"),
    ]
    assert proctor.score("tool.search_qa", transcript, item.reference).reward == 1.0
    lifted = {**item.reference, "require_search": False}
    guess = [*item.prompt, answer(f"<answer>{gold}</answer>")]
    assert proctor.score("tool.search_qa", guess, lifted).reward == 1.0


def test_a_session_whose_search_matched_nothing_scores_no_search(engine: Engine):
    async def episode() -> dict[str, Any]:
        sessions = SessionManager(engine=engine)
        opened = await sessions.create({"environment": "tool.search_qa", "task": {"seed": 0}})
        sid = opened["session_id"]
        step = await sessions.step(sid, call("s", "search", {"query": "zzqxv qqzzx"}))
        assert step["observations"][0]["content"] == "No article matches the query."
        gold = SEARCH_QA.make_tasks(split="train", seed=0, count=1, level="medium")[0]
        final = await sessions.step(sid, answer(f"<answer>{gold.metadata['gold_answer']}</answer>"))
        await sessions.close()
        return final

    final = asyncio.run(episode())
    assert final["done"] and final["score"]["reward"] == 0.0
    assert final["score"]["reason"] == "no_search", final["score"]


# == F4: candidate lists are hedges ============================================================================

SEPARATED = [
    "Atlantis & {gold}",
    "Atlantis + {gold}",
    "{gold}\nAtlantis",
    "{gold}\r\nAtlantis",
    "Atlantis / {gold}",
    "Atlantis | {gold}",
    "Atlantis; {gold}",
    "Atlantis, {gold}",
    "Atlantis and {gold}",
    "{gold} or Atlantis",
    "either {gold} or Atlantis",
    "{gold} (Atlantis)",
    "{gold} [or Atlantis]",
    "- {gold}\n- Atlantis",
    "* {gold}\n* Atlantis",
    "1. {gold}\n2. Atlantis",
    "• {gold} • Atlantis",
    "{gold} - Atlantis",
    "{gold} – Atlantis",
    "{gold}\tAtlantis",
    "{gold} vs Atlantis",
    "Atlantis\\{gold}",
    "{gold} ＆ Atlantis",  # a full-width ampersand (NFKC)
]


@pytest.mark.parametrize("metric", ["f1", "em"])
@pytest.mark.parametrize("template", SEPARATED)
def test_separator_joined_candidates_are_hedged(template: str, metric: str):
    item = task()
    gold = item.metadata["gold_answer"]
    reference = {**item.reference, "metric": metric}
    searched = gold_transcript(item)[:-1]
    content = "<answer>" + template.format(gold=gold) + "</answer>"
    verdict = proctor.score("tool.search_qa", [*searched, answer(content)], reference)
    assert (verdict.reward, verdict.reason) == (0.0, "hedged"), template


def test_a_range_of_years_is_hedged():
    item = next(
        t for t in SEARCH_QA.make_tasks("train", 0, 40, "medium") if t.metadata["answer_kind"] == "year"
    )
    gold = int(item.metadata["gold_answer"])
    searched = gold_transcript(item)[:-1]
    for text in (f"{gold}-{gold + 1}", f"{gold - 1}–{gold}", f"{gold} or {gold + 1}"):
        reference = {**item.reference, "metric": "f1"}
        verdict = proctor.score("tool.search_qa", [*searched, answer(f"<answer>{text}</answer>")], reference)
        assert (verdict.reward, verdict.reason) == (0.0, "hedged"), text


@pytest.mark.parametrize("metric", ["f1", "em"])
def test_one_answer_with_decoration_is_not_a_hedge(metric: str):
    item = task()
    gold = item.metadata["gold_answer"]
    reference = {**item.reference, "metric": metric}
    searched = gold_transcript(item)[:-1]
    for text in (gold, f"- {gold}", f"{gold}.", f" {gold} ", f"\n{gold}\n", f"The {gold}", f"{gold},"):
        verdict = proctor.score("tool.search_qa", [*searched, answer(f"<answer>{text}</answer>")], reference)
        assert verdict.reward == 1.0 and verdict.correct, (text, verdict.reason)


def test_a_gold_alias_with_a_separator_is_not_a_hedge():
    prompt = [{"role": "user", "content": "Which company?"}]
    found = search_text(0, "Sosern Press")[0]
    searched = [*prompt, call("s", "search", {"query": "Sosern Press"}), observation("s", "search", found)]
    for gold in ("Procter & Gamble", "AC/DC", "Smith, Jones and Partners"):
        reference = {"answers": [gold], "metric": "f1"}
        verdict = proctor.score("tool.search_qa", [*searched, answer(f"<answer>{gold}</answer>")], reference)
        assert verdict.reward == 1.0, (gold, verdict.reason)


def test_f1_of_names_strung_together_is_capped_by_the_gold_length():
    item = task()
    gold = item.metadata["gold_answer"]
    longest = max(len(alias.split()) for alias in item.reference["answers"])
    reference = {**item.reference, "metric": "f1"}
    searched = gold_transcript(item)[:-1]
    decoys = ["Atlantis", "Zanova", "Drar", "Vezova", "Thesesh", "Briasenne", "Zogialova", "Stefanenne"]
    strung = " ".join([*decoys[: 2 * longest], gold])
    verdict = proctor.score("tool.search_qa", [*searched, answer(f"<answer>{strung}</answer>")], reference)
    assert (verdict.reward, verdict.reason) == (0.0, "answer_too_long")
    assert verdict.details["limit"] == 2 * max(len(a.split()) for a in item.reference["answers"])
    # A short partial answer keeps its F1 (it never beats the right name alone).
    partial = proctor.score(
        "tool.search_qa", [*searched, answer(f"<answer>Atlantis {gold}</answer>")], reference
    )
    right = proctor.score("tool.search_qa", [*searched, answer(f"<answer>{gold}</answer>")], reference)
    assert 0.0 < partial.reward < right.reward == 1.0


def test_exact_match_is_unchanged_for_gold_aliases():
    for level in ("easy", "medium", "hard"):
        for item in SEARCH_QA.make_tasks("train", 3, 10, level):
            searched = gold_transcript(item)[:-1]
            for metric in ("em", "f1"):
                reference = {**item.reference, "metric": metric}
                for alias in item.reference["answers"]:
                    final = answer(f"<answer>{alias}</answer>")
                    verdict = proctor.score("tool.search_qa", [*searched, final], reference)
                    assert verdict.reward == 1.0 and verdict.correct, (alias, verdict.reason)


# == F8: the index cache ======================================================================================


@pytest.fixture
def counted_builds(monkeypatch) -> list[int]:
    builds: list[int] = []
    original = index_module.SearchIndex

    class Counting(original):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            builds.append(1)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(index_module, "SearchIndex", Counting)
    return builds


def held_seeds() -> set[int]:
    """The seeds alive once the cache lets go of every unpinned index (what open sessions hold)."""
    gc.collect()
    with index_module._lock:
        for seed in [s for s in index_module._indexes if s not in index_module.PINNED_SEEDS]:
            del index_module._indexes[seed]
        return index_module._live_seeds()


def user_task(seed: int) -> dict[str, Any]:
    return {"prompt": "Who?", "reference": {"answers": ["x"], "corpus_seed": seed}}


def test_sessions_on_many_seeds_never_rebuild_between_steps(engine: Engine, counted_builds: list[int]):
    seeds = range(301, 309)  # more than CACHED_INDEXES and CACHED_CORPORA

    async def episode() -> int:
        sessions = SessionManager(engine=engine)
        sids = [
            (await sessions.create({"environment": "tool.search_qa", "task": user_task(seed)}))["session_id"]
            for seed in seeds
        ]
        built = len(counted_builds)
        for round_ in range(3):
            for index, sid in enumerate(sids):
                step = await sessions.step(sid, call(f"c{round_}{index}", "search", {"query": "founder"}))
                assert step["tool_results"][0]["status"] == "ok"
        rebuilt = len(counted_builds) - built
        await sessions.close()
        return rebuilt

    assert len(seeds) > index_module.CACHED_INDEXES
    assert asyncio.run(episode()) == 0


def test_the_bundled_seed_stays_pinned_and_the_cache_is_lru(monkeypatch):
    monkeypatch.setattr(index_module, "CACHED_INDEXES", 2)
    bundled = index_module.search_index(0)
    first = index_module.search_index(401)
    for seed in (402, 403, 404):
        index_module.search_index(seed)
        assert index_module.search_index(401) is first  # used again before each build: the most recent
    assert index_module.cached_index(0) is bundled
    with index_module._lock:
        cached = list(index_module._indexes)
    assert 0 in cached and 401 in cached and 402 not in cached, cached
    assert len([s for s in cached if s not in index_module.PINNED_SEEDS]) <= 2


def test_a_session_keeps_its_index_after_the_cache_drops_it(engine: Engine, counted_builds: list[int]):
    async def episode() -> None:
        sessions = SessionManager(engine=engine)
        sid = (await sessions.create({"environment": "tool.search_qa", "task": user_task(501)}))["session_id"]
        held_seeds()  # the cache lets go of it; the session still holds it
        built = len(counted_builds)
        assert index_module.cached_index(501) is not None
        await sessions.step(sid, call("a", "search", {"query": "founder"}))
        assert len(counted_builds) == built
        await sessions.close()

    asyncio.run(episode())
    assert 501 not in held_seeds()  # closed: nothing holds it any more


def test_more_seeds_than_the_bound_is_a_429_naming_corpus_seed(engine: Engine, monkeypatch):
    base = held_seeds()
    monkeypatch.setattr(index_module, "MAX_LIVE_SEEDS", len(base) + 2)

    async def episode() -> None:
        sessions = SessionManager(engine=engine)
        first = await sessions.create({"environment": "tool.search_qa", "task": user_task(601)})
        await sessions.create({"environment": "tool.search_qa", "task": user_task(602)})
        await sessions.create(
            {"environment": "tool.search_qa", "task": user_task(601)}
        )  # a seed in use: fine
        await sessions.create({"environment": "tool.search_qa", "task": {"seed": 0}})  # pinned: fine
        with pytest.raises(RequestError) as refused:
            await sessions.create({"environment": "tool.search_qa", "task": user_task(603)})
        assert refused.value.status == 429 and refused.value.field == "task.corpus_seed"
        assert "603" in refused.value.message
        # The session that ends frees its seed's slot once nothing else holds it.
        await sessions.step(first["session_id"], answer("<answer>x</answer>"))
        held_seeds()
        with pytest.raises(RequestError):  # 601 is still held by the third session
            await sessions.create({"environment": "tool.search_qa", "task": user_task(603)})
        await sessions.close()
        held_seeds()
        sessions = SessionManager(engine=engine)
        await sessions.create({"environment": "tool.search_qa", "task": user_task(603)})
        await sessions.close()

    asyncio.run(episode())
