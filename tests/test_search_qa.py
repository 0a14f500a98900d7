"""tool.search_qa: the seeded corpus, BM25 search, multi-hop questions, the tools, scoring and the trivial gate."""

from __future__ import annotations

import hashlib
import random
import re
import time
from pathlib import Path
from typing import Any

import pytest

from proctor.contract import ChatMessage, Status
from proctor.engine import Engine
from proctor.environments.tools.base import SessionLimits, ToolResult
from proctor.environments.tools.search_qa.corpus import COUNTS, build_corpus, corpus, normalise
from proctor.environments.tools.search_qa.environment import (
    SEARCH_QA,
    SEARCH_TOP_K,
    SearchQA,
    SearchQAReference,
    cheat_transcripts,
    gold_transcript,
    grade,
    shallow_answer,
    trivial_transcripts,
)
from proctor.environments.tools.search_qa.index import MAX_QUERY_CHARS, search_index, tokenize
from proctor.environments.tools.search_qa.questions import LEVEL_HOPS, leaks
from proctor.environments.tools.search_qa.scoring import (
    MAX_ANSWER_WORDS,
    exact_match,
    f1_score,
    normalise_answer,
    read_answer,
)
from proctor.settings import Settings

ENV: SearchQA = SEARCH_QA  # type: ignore[assignment]


def messages(raw: list[dict[str, Any]]) -> list[ChatMessage]:
    return [ChatMessage.model_validate(message) for message in raw]


async def score(task_reference: dict[str, Any], raw: list[dict[str, Any]]):
    return await ENV.score(task_reference, messages(raw))


def corpus_digest(seed: int) -> str:
    built = build_corpus(seed)
    return hashlib.sha256("\n".join(d.id + d.title + d.text for d in built.documents).encode()).hexdigest()


# -- corpus -----------------------------------------------------------------------------------------------


def test_corpus_is_large_deterministic_fast_and_seeded():
    started = time.perf_counter()
    built = build_corpus(0)
    assert time.perf_counter() - started < 2.0
    assert len(built.documents) == sum(COUNTS.values()) >= 2_000
    assert corpus_digest(0) == corpus_digest(0)
    assert corpus_digest(0) != corpus_digest(1)
    assert corpus(0) is corpus(0)
    assert len({d.id for d in built.documents}) == len(built.documents)
    assert {e.kind for e in built.entities} == set(COUNTS)


def test_every_name_and_alias_belongs_to_one_entity():
    built = corpus(0)
    seen: dict[str, str] = {}
    for entity in built.entities:
        for alias in entity.aliases:
            key = normalise(alias)
            assert seen.setdefault(key, entity.id) == entity.id, (alias, seen[key], entity.id)


def test_articles_state_only_their_own_relations():
    built = corpus(0)
    for entity, document in zip(built.entities, built.documents, strict=True):
        assert document.entity == entity.id and document.title == entity.name
        for target in entity.relations.values():
            assert built.entity(target).name in document.text
    # A company's article never lists its works, a city never its people: reverse relations are not stated.
    work = next(e for e in built.entities if e.kind == "work")
    company_doc = built.documents[[e.id for e in built.entities].index(work.relations["company"])]
    assert work.name not in company_doc.text


# -- search -----------------------------------------------------------------------------------------------


def test_search_finds_each_article_by_its_name():
    index = search_index(0)
    rng = random.Random(5)
    sample = rng.sample(list(index.documents), 300)
    for document in sample:
        hits = index.search(document.title, SEARCH_TOP_K)
        assert document.id in [hit.document.id for hit in hits], document.title
        assert [hit.rank for hit in hits] == list(range(1, len(hits) + 1))
        assert all(a.score >= b.score for a, b in zip(hits, hits[1:], strict=False))


def test_search_scores_are_rank_bm25s():
    # The posting lists are rank-bm25's get_scores formula computed ahead: same scores, same order.
    index = search_index(0)
    rng = random.Random(2)
    words = [w for d in rng.sample(list(index.documents), 50) for w in tokenize(d.text)]
    for _ in range(100):
        query = " ".join(rng.sample(words, rng.randint(1, 8)))
        expected = index.bm25.get_scores(list(dict.fromkeys(tokenize(query))))
        hits = index.search(query, 10)
        positions = {d.id: i for i, d in enumerate(index.documents)}
        for hit in hits:
            assert hit.score == pytest.approx(expected[positions[hit.document.id]], abs=1e-9)
        best = sorted(range(len(expected)), key=lambda i: (-expected[i], i))[: len(hits)]
        assert [positions[hit.document.id] for hit in hits] == best
        assert len(hits) == min(10, sum(1 for value in expected if value > 0))


def test_search_is_deterministic_and_bounded():
    index = search_index(0)
    first = [(h.document.id, h.score) for h in index.search("press founded city", 10)]
    assert first == [(h.document.id, h.score) for h in index.search("press founded city", 10)]
    assert index.search("", 5) == [] and index.search("the of and", 5) == []
    assert index.search("zzzzqqq", 5) == []
    started = time.perf_counter()
    index.search("word " * 1_000_000, 5)  # cut to MAX_QUERY_CHARS before tokenising
    assert time.perf_counter() - started < 0.5
    assert len(tokenize("x" * MAX_QUERY_CHARS)) == 1


# -- questions ---------------------------------------------------------------------------------------------


def test_tasks_are_deterministic_and_splits_are_disjoint():
    first = ENV.make_tasks("train", 3, 5, "medium")
    assert [t.model_dump() for t in first] == [
        t.model_dump() for t in ENV.make_tasks("train", 3, 5, "medium")
    ]
    assert first != ENV.make_tasks("train", 4, 5, "medium")
    train = {t.metadata["question_id"] for level in LEVEL_HOPS for t in ENV.make_tasks("train", 0, 60, level)}
    test = {t.metadata["question_id"] for level in LEVEL_HOPS for t in ENV.make_tasks("test", 0, 60, level)}
    assert train and test and not train & test


@pytest.mark.parametrize("level", list(LEVEL_HOPS))
def test_questions_need_every_hop_and_never_state_the_answer_beside_the_subject(level: str):
    built = corpus(0)
    for task in ENV.make_tasks("train", 11, 40, level):
        metadata = task.metadata
        assert metadata["hops"] == LEVEL_HOPS[level] == len(metadata["relations"])
        question = task.reference["question"]
        anchor = next(e for e in built.entities if e.name == metadata["path"][0])
        assert anchor.name in question
        for answer in task.reference["answers"]:
            assert normalise(answer) not in normalise(question)
        # Independently of the generator's own check: no article naming the subject names the answer.
        for text in built.normalised_texts:
            if any(f" {normalise(alias)} " in text for alias in anchor.aliases):
                assert all(f" {normalise(a)} " not in text for a in task.reference["answers"]), question
        assert not leaks(built, anchor, tuple(task.reference["answers"]))


@pytest.mark.parametrize("level", list(LEVEL_HOPS))
async def test_gold_transcripts_made_with_the_tools_score_one(level: str):
    # gold_transcript follows the chain with search and open only, and fails if an article is not found by
    # its name or does not name the next link: every question can be answered through the tools.
    for task in ENV.make_tasks("test", 2, 25, level):
        verdict = await score(task.reference, gold_transcript(task))
        assert verdict.reward == 1.0 and verdict.correct, (task.reference, verdict)


# -- the tools ---------------------------------------------------------------------------------------------


async def test_search_and_open_tools():
    task = ENV.make_tasks("train", 0, 1, "easy")[0]
    state = await ENV.start(task, ENV.limits())
    name = task.metadata["path"][0]
    result = await ENV.call(state, "search", {"query": name})
    assert isinstance(result, ToolResult) and result.status == "ok" and not result.truncated
    assert result.content.count("\n\n") == SEARCH_TOP_K - 1
    doc_id = result.content[1:7]
    opened = await ENV.call(state, "open", {"doc_id": doc_id})
    assert opened.status == "ok" and name in opened.content
    assert (await ENV.call(state, "open", {"doc_id": "d99999"})).status == "error"
    assert (await ENV.call(state, "open", {"doc_id": 5})).status == "error"
    assert (await ENV.call(state, "search", {"query": ["x"]})).status == "error"
    assert (await ENV.call(state, "search", {"query": "  "})).status == "error"
    assert (await ENV.call(state, "launch", {})).status == "error"
    await ENV.close(state)


async def test_limits_come_from_the_environment_not_the_arguments():
    task = ENV.make_tasks("train", 0, 1, "easy")[0]
    state = await ENV.start(task, ENV.limits())
    wide = await ENV.call(state, "search", {"query": "press", "k": 100, "top_k": 100, "max_chars": 10**6})
    assert wide.content.count("[d") == SEARCH_TOP_K
    small = await ENV.start(task, SessionLimits(max_observation_chars=200))
    clipped = await ENV.call(small, "search", {"query": "press founded"})
    assert clipped.truncated and len(clipped.content) <= 200
    assert ENV.tools()[0].parameters["additionalProperties"] is False


# -- scoring ------------------------------------------------------------------------------------------------


def test_normalisation_exact_match_and_f1():
    assert normalise_answer("  The  Republic of Vezova! ") == "republic of vezova"
    assert exact_match("vezova.", ["Vezova"]) and exact_match("**Vezova**", ["Vezova"])
    assert not exact_match("Vezova City", ["Vezova"])
    assert f1_score("Shulro Academy", ["Shulro Academy"]) == 1.0
    assert f1_score("Shulro", ["Shulro Academy"]) == pytest.approx(2 / 3)
    assert f1_score("nothing", ["Shulro Academy"]) == 0.0


def test_reading_the_answer():
    golds = ["Vezova", "Republic of Vezova"]
    assert read_answer("<answer>Vezova</answer>", golds).answer == "Vezova"
    assert read_answer("so \\boxed{Vezova}", golds).answer == "Vezova"
    assert read_answer("<think>x</think><answer> Vezova </answer>", golds).answer == "Vezova"
    assert read_answer("<think><answer>Vezova</answer>", golds).reason == "no_answer"
    assert read_answer("Vezova", golds).reason == "no_answer"
    assert read_answer("<answer>Vezova</answer><answer>vezova.</answer>", golds).answer == "vezova."
    assert read_answer("<answer>Vezova</answer><answer>Nomar</answer>", golds).reason == "hedged"
    for hedge in (
        "Vezova or Nomar",
        "Vezova/Nomar",
        "Vezova; Nomar",
        "Nomar | Vezova",
        "Nomar, Vezova",
        "Vezova and Nomar",
    ):
        assert read_answer(f"<answer>{hedge}</answer>", golds).reason == "hedged", hedge
    assert (
        read_answer("<answer>" + "word " * (MAX_ANSWER_WORDS + 1) + "</answer>", golds).reason
        == "answer_too_long"
    )
    for fake in (
        "<tool_response>Vezova</tool_response>",
        "<information>x</information>",
        "<result>x</result>",
    ):
        assert read_answer(f"{fake}<answer>Vezova</answer>", golds).reason == "fake_observation"
    # a gold alias that itself holds a separator is not a hedge
    assert read_answer("<answer>AC/DC</answer>", ["AC/DC"]).answer == "AC/DC"
    assert read_answer("<answer>paris, france</answer>", ["Paris, France"]).answer == "paris, france"


async def test_cheats_score_zero_with_their_reason():
    task = ENV.make_tasks("train", 7, 1, "medium")[0]
    expected = {
        "answering before any search": "no_answer",
        "answer without any search": "no_search",
        "a search that failed, then the answer": "no_search",
        "fake <tool_response>": "fake_observation",
        "fake <information>": "fake_observation",
        "several hedged answers": "hedged",
        "hedged in one answer": "hedged",
        "calling every tool with the answer": "answer_with_tool_call",
        "gold only inside think": "no_answer",
    }
    cheats = cheat_transcripts(task)
    assert set(cheats) == set(expected)
    for note, raw in cheats.items():
        verdict = await score(task.reference, raw)
        assert verdict.reward == 0.0 and verdict.reason == expected[note], (note, verdict)
        assert verdict.status.value == "ok"


async def test_search_in_a_text_dialect_counts_and_require_search_can_be_lifted():
    task = ENV.make_tasks("train", 8, 1, "easy")[0]
    gold = task.metadata["gold_answer"]
    hermes = [
        *task.prompt,
        {
            "role": "assistant",
            "content": '<tool_call>{"name": "search", "arguments": {"query": "x"}}</tool_call>',
        },
        {"role": "tool", "content": "[d00001] ..."},
        {"role": "assistant", "content": f"<answer>{gold}</answer>"},
    ]
    assert (await score(task.reference, hermes)).reward == 1.0
    only_open = [
        *task.prompt,
        {
            "role": "assistant",
            "content": '<tool_call>{"name": "open", "arguments": {"doc_id": "d00001"}}</tool_call>',
        },
        {"role": "tool", "content": "[d00001] ..."},
        {"role": "assistant", "content": f"<answer>{gold}</answer>"},
    ]
    assert (await score(task.reference, only_open)).reason == "no_search"
    searched = hermes[:-1]
    for final in (f"<tool_call>{{bad json</tool_call><answer>{gold}</answer>", 'search(query="x")'):
        cut = await score(task.reference, [*searched, {"role": "assistant", "content": final}])
        assert cut.reward == 0.0 and cut.reason == "answer_with_tool_call", final
    lifted = {**task.reference, "require_search": False}
    assert (
        await score(lifted, [*task.prompt, {"role": "assistant", "content": f"<answer>{gold}</answer>"}])
    ).reward == 1.0


async def test_f1_metric_gives_partial_credit_but_never_for_hedges():
    reference = SearchQAReference(answers=["Shulro Academy"], metric="f1", require_search=False).model_dump()
    partial = await score(reference, [{"role": "assistant", "content": "<answer>Shulro</answer>"}])
    assert partial.reward == pytest.approx(2 / 3) and partial.correct is False
    hedge = await score(
        reference, [{"role": "assistant", "content": "<answer>Shulro Academy or Nomar</answer>"}]
    )
    assert hedge.reward == 0.0 and hedge.reason == "hedged"


# -- the trivial-policy gate -------------------------------------------------------------------------------


async def test_trivial_policies_earn_at_most_five_percent():
    rng = random.Random(1)
    totals: dict[str, list[float]] = {}
    for level in LEVEL_HOPS:
        for task in ENV.make_tasks("train", 21, 30, level):
            for policy, raw in trivial_transcripts(task, rng).items():
                totals.setdefault(policy, []).append((await score(task.reference, raw)).reward)
    assert set(totals) == {
        "no call",
        "no call, the question",
        "every tool",
        "random arguments",
        "repeating the question",
    }
    for policy, rewards in totals.items():
        assert sum(rewards) / len(rewards) <= 0.05, policy


async def test_one_answer_for_every_question_earns_at_most_five_percent():
    # The most common gold of 300 tasks per level, given (after a search) to each of them: no answer is a
    # safe bet for a policy that ignores the question.
    for level in LEVEL_HOPS:
        tasks = ENV.make_tasks("train", 0, 300, level)
        golds = [task.metadata["gold_answer"] for task in tasks]
        common = max(set(golds), key=lambda gold: (golds.count(gold), gold))
        rewards = []
        for task in tasks:
            raw = [
                *task.prompt,
                {
                    "role": "assistant",
                    "content": '<tool_call>{"name": "search", "arguments": {"query": "a"}}</tool_call>',
                },
                {"role": "tool", "name": "search", "content": "[d00001] ..."},
                {"role": "assistant", "content": f"<answer>{common}</answer>"},
            ]
            rewards.append((await score(task.reference, raw)).reward)
        assert sum(rewards) > 0 and sum(rewards) / len(rewards) <= 0.05, (level, common)


# -- registration and replay through the engine ------------------------------------------------------------


def test_registered_as_a_tool_environment_and_replay_verifier():
    from proctor.environments.registry import get_environment
    from proctor.environments.tools.base import get_tool_environment
    from proctor.registry import get_verifier

    spec = get_environment("tool.search_qa")
    assert spec.kind == "tool" and spec.verifier == "tool.search_qa"
    assert set(spec.levels) == set(LEVEL_HOPS)
    assert [tool["function"]["name"] for tool in spec.describe()["tools"]] == ["search", "open"]
    assert get_tool_environment("tool.search_qa") is ENV
    verifier = get_verifier("tool.search_qa")
    assert verifier.accepts_messages
    notes = [example.note for example in verifier.examples]
    assert any(n.startswith("gold") for n in notes) and any(n.startswith("cheat") for n in notes)
    assert any(n.startswith("trivial") for n in notes)


def test_replay_through_the_engine_gives_the_same_score():
    task = ENV.make_tasks("train", 9, 1, "hard")[0]
    engine = Engine(Settings(cache_size=0))
    try:
        request = {
            "verifier": "tool.search_qa",
            "response": gold_transcript(task),
            "reference": task.reference,
        }
        result = engine.score(request)
        assert result.status is Status.ok and result.reward == 1.0
        assert result.components == {"format": 1.0, "em": 1.0, "f1": 1.0}
        bad = engine.score_batch([{**request, "reference": {"answers": []}}])[0]
        assert getattr(bad, "error", None) is not None and bad.error.status == 422
    finally:
        engine.close()
    assert (
        grade(SearchQAReference.model_validate(task.reference), messages(gold_transcript(task))).reward == 1.0
    )


def test_the_documentation_example_runs():
    page = (Path(__file__).resolve().parents[1] / "docs" / "environments" / "search.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", page, re.S)
    assert blocks
    for block in blocks:
        exec(compile(block, "docs/environments/search.md", "exec"), {})  # noqa: S102 - our own documentation


async def test_a_user_task_on_another_corpus_builds_it_off_the_event_loop(monkeypatch):
    """The corpus and index are built on a worker thread, never on the sessions' event loop (checked by the
    thread that builds, not by timing: no timing assertions in unit tests)."""
    import threading

    from proctor.environments.tools.search_qa import environment
    from proctor.environments.tools.search_qa.index import cached_index

    seed = 977
    assert cached_index(seed) is None
    builders: list[int] = []
    acquire = environment.acquire_index

    def recording(requested: int):
        builders.append(threading.get_ident())
        return acquire(requested)

    monkeypatch.setattr(environment, "acquire_index", recording)
    task = ENV.user_task("Who founded X?", {"answers": ["Somebody"], "corpus_seed": seed})
    state = await ENV.start(task, ENV.limits())
    assert builders and threading.get_ident() not in builders
    assert cached_index(seed) is not None
    other = build_corpus(seed).documents[3]
    found = await ENV.call(state, "search", {"query": other.title})
    assert f"[{other.id}] {other.title}" in found.content
    assert other.title not in {d.title for d in corpus(0).documents}


DIGEST_SCRIPT = """
import hashlib, json
from proctor.environments.tools.search_qa.corpus import build_corpus
from proctor.environments.tools.search_qa.environment import SEARCH_QA
digest = hashlib.sha256()
for document in build_corpus(0).documents:
    digest.update(f"{document.id}|{document.title}|{document.text}\\n".encode())
for level in ("easy", "medium", "hard"):
    for split in ("train", "test"):
        for task in SEARCH_QA.make_tasks(split, 0, 10, level):
            digest.update(json.dumps(task.model_dump(mode="json"), sort_keys=True).encode())
print(digest.hexdigest())
"""
GOLDEN_DIGEST = "d0355546b1c6f03ea7fd37e2d364e122ad1cfc327ada944beb44be52323f1a4b"


def test_generation_is_identical_across_processes_and_pinned():
    import os
    import subprocess
    import sys

    digests = set()
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        out = subprocess.run(
            [sys.executable, "-c", DIGEST_SCRIPT], capture_output=True, text=True, env=env, check=True
        )
        digests.add(out.stdout.strip())
    assert len(digests) == 1
    # Changing the corpus or the questions must bump CORPUS_VERSION or the environment's VERSION, then this pin.
    assert digests == {GOLDEN_DIGEST}


async def test_one_search_of_the_question_without_following_the_chain_earns_at_most_five_percent():
    for level in LEVEL_HOPS:
        rewards = []
        for task in ENV.make_tasks("test", 3, 60, level):
            raw = [
                *task.prompt,
                {
                    "role": "assistant",
                    "content": '<tool_call>{"name": "search", "arguments": {"query": "q"}}</tool_call>',
                },
                {"role": "tool", "name": "search", "content": "[d00001] ..."},
                {"role": "assistant", "content": f"<answer>{shallow_answer(task)}</answer>"},
            ]
            rewards.append((await score(task.reference, raw)).reward)
        assert sum(rewards) / len(rewards) <= 0.05, level
