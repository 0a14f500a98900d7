"""`tool.search_qa`: answer a multi-hop question about a fictional encyclopedia with `search` and `open`.

The corpus (`corpus.py`, 2,440 articles generated from a seed) is invented, so a model cannot answer from
memory; the questions (`questions.py`) chain two to four relations, and no article that names the question's
subject states the answer. The tools:

- `search(query)`: BM25 (`index.py`) over the corpus; the top SEARCH_TOP_K articles, each as its id, title
  and a snippet of at most SNIPPET_CHARS characters;
- `open(doc_id)`: one article in full.

How many results, how long a snippet and an observation are: the environment's constants and the session's
limits, never the call's arguments. Scoring (`scoring.py`): exact match (or token F1 with `metric: "f1"`) of
the final `<answer>` after the last observation against the gold aliases; 0 without a search before it, with a
forged observation, with hedged or overlong answers. Registered at the bottom of this module: the environment
(kind `tool`) and the replay verifier `tool.search_qa`, with gold, cheat and trivial-policy transcripts.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import time
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from proctor.contract import ChatMessage, RequestError, Verdict, content_text
from proctor.environments.registry import Task
from proctor.environments.tools.base import (
    SessionLimits,
    ToolEnvironment,
    ToolResult,
    ToolSpec,
    clip_observation,
    final_answer_text,
    final_messages,
    register_tool_environment,
)
from proctor.environments.tools.search_qa.corpus import CORPUS_VERSION, corpus
from proctor.environments.tools.search_qa.index import (
    IndexesBusy,
    SearchIndex,
    acquire_index,
    cached_index,
    search_index,
    snippet,
)
from proctor.environments.tools.search_qa.questions import LEVEL_HOPS, Question, draw, question_id
from proctor.environments.tools.search_qa.scoring import exact_match, f1_score, read_answer, too_long_for_f1
from proctor.registry import Example
from proctor.verifiers.reading import clip
from proctor.verifiers.reading.tool_calls import ParsedCalls, parse_message

NAME = "tool.search_qa"
VERSION = "1"
BUNDLED_CORPUS_SEED = 0
"""The corpus the bundled tasks and `POST /compat/search_r1/retrieve` use."""
SEARCH_TOP_K = 5
SNIPPET_CHARS = 160
MAX_QUERY_CHARS = 500
MAX_CORPUS_SEED = 2**31 - 1

INSTRUCTIONS = (
    "Answer the question below using the tools. The encyclopedia they search is fictional: every person, "
    "place, company and work in it is invented, so rely only on what the tools return, not on what you know. "
    "`search(query)` returns the best-matching articles with their ids and a snippet; `open(doc_id)` returns one "
    "article in full. When you know the answer, reply without a tool call and put only the answer (a name or a "
    "year) inside <answer></answer>."
)


class SearchQAReference(BaseModel):
    """What a search_qa transcript is graded against: the gold aliases and the corpus the tools searched."""

    model_config = ConfigDict(extra="forbid")

    question: str = Field(default="", max_length=4_000, description="The question (for the record).")
    answers: list[str] = Field(
        min_length=1, max_length=64, description="Gold answer and its aliases; any of them is correct."
    )
    metric: Literal["em", "f1"] = Field(
        default="em", description="em: reward 1 for an exact match (normalised); f1: the best token F1."
    )
    require_search: bool = Field(
        default=True, description="An answer given before any search call got results scores 0."
    )
    corpus_seed: int = Field(
        default=BUNDLED_CORPUS_SEED, ge=0, le=MAX_CORPUS_SEED, description="The corpus the tools search."
    )

    @field_validator("answers")
    @classmethod
    def _usable(cls, value: list[str]) -> list[str]:
        if any(not answer.strip() or len(answer) > 200 for answer in value):
            raise ValueError("each answer must be 1 to 200 characters and not blank")
        return value


@dataclass
class SearchState:
    """One session: which corpus its tools search, and its index (held for the whole session, so no other
    session's seeds can make the process drop and rebuild it between steps; `close` lets it go)."""

    corpus_seed: int
    max_observation_chars: int
    index: SearchIndex | None = None


SEARCH_TOOL = ToolSpec(
    name="search",
    description=(
        f"Search the encyclopedia. Returns the {SEARCH_TOP_K} best-matching articles: id, title and a snippet."
    ),
    parameters={
        "type": "object",
        "properties": {"query": {"type": "string", "description": "Words to look for."}},
        "required": ["query"],
        "additionalProperties": False,
    },
)
OPEN_TOOL = ToolSpec(
    name="open",
    description="Open one article of the encyclopedia in full, by the id a search returned (e.g. d00042).",
    parameters={
        "type": "object",
        "properties": {"doc_id": {"type": "string", "description": "The article's id, e.g. d00042."}},
        "required": ["doc_id"],
        "additionalProperties": False,
    },
)


def search_text(seed: int, query: str, index: SearchIndex | None = None) -> tuple[str, str]:
    """The `search` observation for a query, and its status (`error` for an empty query)."""
    query = query[:MAX_QUERY_CHARS]
    if not query.strip():
        return "Error: the query is empty.", "error"
    hits = (index or search_index(seed)).search(query, SEARCH_TOP_K)
    if not hits:
        return "No article matches the query.", "ok"
    lines = [
        f"[{hit.document.id}] {hit.document.title}\n{snippet(hit.document, query, SNIPPET_CHARS)}"
        for hit in hits
    ]
    return "\n\n".join(lines), "ok"


def open_text(seed: int, doc_id: str, index: SearchIndex | None = None) -> tuple[str, str]:
    """The `open` observation for a document id, and its status (`error` for an unknown id)."""
    document = (index.corpus if index is not None else corpus(seed)).doc_by_id.get(doc_id.strip())
    if document is None:
        return f"Error: there is no article {clip(doc_id, 40)!r}; ids look like d00042.", "error"
    return f"[{document.id}] {document.title}\n{document.text}", "ok"


def _parsed(message: ChatMessage) -> ParsedCalls:
    """The tool calls an assistant message makes, read as a session reads them (any dialect, our schemas)."""
    raw = [call.model_dump(exclude_none=True) for call in message.tool_calls or []]
    schemas = {tool.name: tool.parameters for tool in (SEARCH_TOOL, OPEN_TOOL)}
    return parse_message(raw, content_text(message.content), "auto", schemas)


async def _ready(seed: int) -> SearchIndex:
    """The corpus and index of `seed` for a session to hold, built on a thread when no index of it is alive in
    this process (about 0.15 s), so the event loop that runs the sessions never stalls. A 429 naming
    `task.corpus_seed` when open sessions already hold `index.MAX_LIVE_SEEDS` other seeds."""
    try:
        return cached_index(seed) or await asyncio.to_thread(acquire_index, seed)
    except IndexesBusy as exc:
        raise RequestError(429, f"{NAME}: task.corpus_seed {seed}: {exc}", "task.corpus_seed") from None


def _calls(message: ChatMessage) -> list[str]:
    """The names of the tools an assistant message calls (any dialect)."""
    return [call.name for call in _parsed(message).calls]


_RESULT_HEADER = re.compile(r"\[d\d{5}\] \S")
"""How `search_text` opens an observation that lists articles: `[d01912] Title`, then the snippet."""


def lists_articles(observation: str) -> bool:
    """Whether a `search` observation lists at least one article, as `search_text` writes one: it opens with
    an article's `[dNNNNN] Title` line. An error (`Error: ...`) and `No article matches the query.` do not."""
    return _RESULT_HEADER.match(observation) is not None


def search_answered(transcript: list[ChatMessage]) -> bool:
    """Whether a `search` call got results: a tool observation answering it (by its `name`, or its call id)
    that lists at least one article as the environment writes one (`lists_articles`; not an error, not a search
    that matched nothing). Only tool observations are read, which a session writes itself, never the model."""
    pending: set[str] | None = None
    for message in transcript:
        if message.role == "assistant":
            calls = [call for call in _parsed(message).calls if call.name == "search"]
            pending = {call.id or "" for call in calls} if calls else None
        elif message.role == "tool" and pending is not None:
            unnamed = message.name is None and message.tool_call_id is None
            answers = message.name == "search" or message.tool_call_id in pending or unnamed
            if answers and lists_articles(content_text(message.content)):
                return True
    return False


def grade(reference: SearchQAReference, transcript: list[ChatMessage]) -> Verdict:
    """The verdict on a transcript (see `scoring.py` for every way it scores 0)."""
    finals = final_messages(transcript)

    def zero(reason: str, details: dict[str, Any] | None = None) -> Verdict:
        return Verdict(
            reward=0.0,
            correct=False,
            reason=reason,
            components={"format": 0.0, "em": 0.0, "f1": 0.0},
            details=details or {},
        )

    if not finals:
        return zero("no_answer")
    if any(_parsed(message).calls or _parsed(message).errors for message in finals):
        return zero("answer_with_tool_call")  # a call (even one that cannot be read) is not an answer
    reading = read_answer(final_answer_text(transcript), reference.answers)
    if reading.answer is None:
        return zero(reading.reason or "no_answer", reading.details)
    if reference.require_search and not search_answered(transcript):
        return zero("no_search", {"extracted": clip(reading.answer)})
    em = exact_match(reading.answer, reference.answers)
    if not em and reference.metric == "f1":
        overlong = too_long_for_f1(reading.answer, reference.answers)
        if overlong is not None:  # names strung together would keep part of the F1
            return zero("answer_too_long", {"extracted": clip(reading.answer), **overlong})
    f1 = 1.0 if em else f1_score(reading.answer, reference.answers)
    reward = (1.0 if em else 0.0) if reference.metric == "em" else f1
    return Verdict(
        reward=reward,
        correct=em,
        reason=None if em else "wrong_answer",
        components={"format": 1.0, "em": 1.0 if em else 0.0, "f1": round(f1, 6)},
        details={"extracted": clip(reading.answer), "metric": reference.metric},
    )


class SearchQA(ToolEnvironment):
    """Multi-hop questions over a fictional encyclopedia, answered with BM25 search and open."""

    name = NAME
    version = VERSION
    rebuildable_state = True  # the tools only read the seeded corpus
    description = (
        "Multi-hop questions (2-4 relations) over a seeded fictional encyclopedia of 2,440 articles; tools "
        "search (BM25) and open; exact match or F1 of the final answer against gold aliases."
    )
    levels = tuple(LEVEL_HOPS)
    default_level = "medium"
    reference_model = SearchQAReference

    def limits(self) -> SessionLimits:
        """Enough turns for four hops with a search and an open each, and some slack."""
        return SessionLimits(
            max_turns=20, max_tool_calls=32, max_observation_chars=4_000, max_total_observation_chars=100_000
        )

    def tools(self) -> list[ToolSpec]:
        """search and open."""
        return [SEARCH_TOOL, OPEN_TOOL]

    def make_tasks(self, split: str, seed: int, count: int, level: str | None = None) -> list[Task]:
        """Tasks 0..count-1 of (split, seed, level); level easy/medium/hard is 2/3/4 hops."""
        label = level or self.default_level or "medium"
        if label not in LEVEL_HOPS:
            raise RequestError(422, f"unknown level {label!r}; levels: {', '.join(LEVEL_HOPS)}", "difficulty")
        source = corpus(BUNDLED_CORPUS_SEED)
        hops = LEVEL_HOPS[label]
        tasks = []
        for index in range(count):
            question, attempt, key = draw(source, NAME, VERSION, split, seed, hops, index)
            tasks.append(self._task(question, key, split, seed, index, attempt, label))
        return tasks

    def _task(
        self, question: Question, key: str, split: str, seed: int, index: int, attempt: int, level: str
    ) -> Task:
        reference = SearchQAReference(question=question.text, answers=list(question.answers))
        source = corpus(BUNDLED_CORPUS_SEED)
        return Task(
            prompt=[{"role": "user", "content": f"{INSTRUCTIONS}\n\nQuestion: {question.text}"}],
            reference=reference.model_dump(mode="json"),
            verifier=NAME,
            metadata={
                "gold_answer": question.answers[0],
                "difficulty": level,
                "hops": question.hops,
                "answer_kind": question.answer_kind,
                "path": [source.entity(entity_id).name for entity_id in question.path],
                "relations": list(question.relations),
                "corpus": {"seed": BUNDLED_CORPUS_SEED, "version": CORPUS_VERSION},
                "environment": NAME,
                "version": VERSION,
                "split": split,
                "seed": seed,
                "index": index,
                "attempt": attempt,
                "question_id": question_id(key),
            },
        )

    async def start(self, task: Task, limits: SessionLimits) -> SearchState:
        """Nothing to open but the corpus and its index (built once per process, on a thread)."""
        reference = SearchQAReference.model_validate(task.reference)
        index = await _ready(reference.corpus_seed)
        return SearchState(reference.corpus_seed, limits.max_observation_chars, index)

    async def call(self, state: SearchState, name: str, arguments: dict[str, Any]) -> ToolResult:
        """search or open; a bad argument is an error observation."""
        index = state.index or await _ready(state.corpus_seed)  # the session's own (None only after close)
        started = time.perf_counter()
        cpu = time.thread_time()  # this thread only: other sessions running meanwhile are not billed here
        if name == "search":
            query = arguments.get("query")
            content, status = (
                search_text(state.corpus_seed, query, index)
                if isinstance(query, str)
                else ("Error: query must be a string.", "error")
            )
        elif name == "open":
            doc_id = arguments.get("doc_id")
            content, status = (
                open_text(state.corpus_seed, doc_id, index)
                if isinstance(doc_id, str)
                else ("Error: doc_id must be a string.", "error")
            )
        else:
            content, status = f"Error: unknown tool {name!r}; the tools are search and open.", "error"
        content, truncated = clip_observation(content, state.max_observation_chars)
        return ToolResult(
            content=content,
            status="ok" if status == "ok" else "error",
            elapsed_ms=(time.perf_counter() - started) * 1000,
            truncated=truncated,
            cpu_ms=(time.thread_time() - cpu) * 1000,
        )

    async def close(self, state: SearchState) -> None:
        """Let go of the session's index: its seed's slot frees once no other session or the cache holds it."""
        state.index = None

    async def score(self, reference: Any, transcript: list[ChatMessage]) -> Verdict:
        """Exact match / F1 of the final answer; see `grade`."""
        parsed = (
            reference
            if isinstance(reference, SearchQAReference)
            else SearchQAReference.model_validate(reference)
        )
        return grade(parsed, transcript)


# -- gold, cheat and trivial-policy transcripts -------------------------------------------------------------


def _assistant_call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ],
    }


def _observation(call_id: str, name: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "name": name, "content": content}


def shallow_answer(task: Task) -> str:
    """The baseline the trivial-policy gate measures: search the whole question once, open every result, and
    answer the first name of the asked kind (or the first year) read that the question does not hold: what
    retrieval without following the chain earns (tests/test_search_qa.py, bench/search_qa.py)."""
    source = corpus(BUNDLED_CORPUS_SEED)
    seen, _ = search_text(BUNDLED_CORPUS_SEED, task.reference["question"])
    seen += "\n".join(source.doc_by_id[doc_id].text for doc_id in re.findall(r"\[(d\d{5})\]", seen))
    if task.metadata["answer_kind"] == "year":
        years = re.findall(r"\b1[6-9]\d\d\b|\b20\d\d\b", seen)
        return years[0] if years else "1900"
    question = task.reference["question"]
    for entity in source.entities:
        if (
            entity.kind == task.metadata["answer_kind"]
            and entity.name in seen
            and entity.name not in question
        ):
            return entity.name
    return ""


def gold_transcript(task: Task) -> list[dict[str, Any]]:
    """A transcript that solves the task with the tools alone: search each entity of the chain by name, open
    its article, and answer; the observations are what the tools return. Raises when an article is not found
    by its name or does not name the next entity (the chain must be followable)."""
    source = corpus(BUNDLED_CORPUS_SEED)
    path: list[str] = task.metadata["path"]
    messages: list[dict[str, Any]] = list(task.prompt)
    for step, name in enumerate(path[:-1] if task.metadata["answer_kind"] != "year" else path):
        found, _ = search_text(BUNDLED_CORPUS_SEED, name)
        messages += [
            _assistant_call(f"s{step}", "search", {"query": name}),
            _observation(f"s{step}", "search", found),
        ]
        document = next((d for d in source.documents if d.title == name), None)
        if document is None or f"[{document.id}]" not in found:
            raise LookupError(f"searching {name!r} does not return its article")
        opened, _ = open_text(BUNDLED_CORPUS_SEED, document.id)
        messages += [
            _assistant_call(f"o{step}", "open", {"doc_id": document.id}),
            _observation(f"o{step}", "open", opened),
        ]
        following = path[step + 1] if step + 1 < len(path) else task.metadata["gold_answer"]
        if following not in opened:
            raise LookupError(f"the article of {name!r} does not name {following!r}")
    messages.append({"role": "assistant", "content": f"<answer>{task.metadata['gold_answer']}</answer>"})
    return messages


def trivial_transcripts(task: Task, rng: random.Random) -> dict[str, list[dict[str, Any]]]:
    """The trivial policies the gate holds to at most 0.05: no call, calling every tool, random arguments,
    repeating the question."""
    question = task.reference["question"]
    prompt = list(task.prompt)
    words = question.replace("?", "").split()
    random_query = " ".join(rng.sample(words, min(3, len(words))))
    random_doc = f"d{rng.randrange(len(corpus(BUNDLED_CORPUS_SEED).documents)):05d}"
    every_tool = [
        _assistant_call("a", "search", {"query": question}),
        _observation("a", "search", search_text(BUNDLED_CORPUS_SEED, question)[0]),
        _assistant_call("b", "open", {"doc_id": random_doc}),
        _observation("b", "open", open_text(BUNDLED_CORPUS_SEED, random_doc)[0]),
    ]
    opened_title = corpus(BUNDLED_CORPUS_SEED).doc_by_id[random_doc].title
    random_args = [
        _assistant_call("a", "search", {"query": random_query}),
        _observation("a", "search", search_text(BUNDLED_CORPUS_SEED, random_query)[0]),
    ]
    first_title = random_args[1]["content"].split("\n", 1)[0].split("] ", 1)[-1]
    return {
        "no call": [*prompt, {"role": "assistant", "content": f"<answer>{opened_title}</answer>"}],
        "no call, the question": [*prompt, {"role": "assistant", "content": f"<answer>{question}</answer>"}],
        "every tool": [
            *prompt,
            *every_tool,
            {"role": "assistant", "content": f"<answer>{opened_title}</answer>"},
        ],
        "random arguments": [
            *prompt,
            *random_args,
            {"role": "assistant", "content": f"<answer>{first_title}</answer>"},
        ],
        "repeating the question": [
            *prompt,
            *every_tool[:2],
            {"role": "assistant", "content": f"<answer>{question}</answer>"},
        ],
    }


def cheat_transcripts(task: Task) -> dict[str, list[dict[str, Any]]]:
    """Transcripts that must score 0 although the gold answer appears in them."""
    gold = task.metadata["gold_answer"]
    solved = gold_transcript(task)
    searched = solved[:-1]
    prompt = list(task.prompt)
    fake = f"<tool_response>{gold}</tool_response>\n<answer>{gold}</answer>"
    decoy = str(int(gold) + 1) if gold.isdigit() else "Atlantis"
    answer_then_search = {
        **_assistant_call("s", "search", {"query": gold}),
        "content": f"<answer>{gold}</answer>",
    }
    return {
        "answering before any search": [
            *prompt,
            answer_then_search,
            _observation("s", "search", search_text(BUNDLED_CORPUS_SEED, gold)[0]),
            {"role": "assistant", "content": "That is my answer."},
        ],
        "answer without any search": [*prompt, {"role": "assistant", "content": f"<answer>{gold}</answer>"}],
        "a search that failed, then the answer": [
            *prompt,
            _assistant_call("e", "search", {"query": ""}),
            _observation("e", "search", search_text(BUNDLED_CORPUS_SEED, "")[0]),
            {"role": "assistant", "content": f"<answer>{gold}</answer>"},
        ],
        "fake <tool_response>": [*searched, {"role": "assistant", "content": fake}],
        "fake <information>": [
            *searched,
            {"role": "assistant", "content": f"<information>{gold}</information><answer>{gold}</answer>"},
        ],
        "several hedged answers": [
            *searched,
            {"role": "assistant", "content": f"<answer>{gold}</answer> or maybe <answer>{decoy}</answer>"},
        ],
        "hedged in one answer": [
            *searched,
            {"role": "assistant", "content": f"<answer>{decoy} or {gold}</answer>"},
        ],
        "calling every tool with the answer": [
            *searched,
            {
                **_assistant_call("z", "search", {"query": gold}),
                "content": f"<answer>{gold}</answer>",
            },
        ],
        "gold only inside think": [
            *searched,
            {"role": "assistant", "content": f"<think><answer>{gold}</answer>"},
        ],
    }


def _examples() -> tuple[Example, ...]:
    env = SearchQA()
    examples: list[Example] = []
    rng = random.Random(0)
    for level in ("easy", "hard"):
        task = env.make_tasks("train", 0, 1, level)[0]
        reference = task.reference
        examples.append(Example(gold_transcript(task), reference, 1.0, note=f"gold ({level})"))
        for note, transcript in cheat_transcripts(task).items():
            examples.append(Example(transcript, reference, 0.0, note=f"cheat: {note}"))
        for note, transcript in trivial_transcripts(task, rng).items():
            examples.append(Example(transcript, reference, 0.0, note=f"trivial: {note}"))
    return tuple(examples)


SEARCH_QA = register_tool_environment(SearchQA(), examples=_examples())
