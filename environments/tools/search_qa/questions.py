"""Multi-hop questions over the corpus: a chain of relations from an anchor entity, asked as one question.

A question is a walk: an anchor (a work, a person, a company ...), then `hops` relations, each from the entity
the previous one reached (the company that published the work, its founder, the city where the founder was
born). The last relation is what is asked, and the answer is the entity (or the year) it reaches. Every
relation is a function (one value), so the answer is unique. A walk never visits an entity twice.

A walk is kept only when no document that mentions the anchor states the answer (checked on the text of all
documents, as whole words, for every alias of the answer): the answer can only be reached by following the
chain through other articles. Items are seeded per (split, seed, index, attempt) from sha256, and an item's
split is decided by the hash of its content (corpus, anchor and relations), so train and test never share a
question; an attempt whose question falls in the other split is drawn again, as the puzzle families do.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from typing import Any

from proctor.environments.registry import GenerationError
from proctor.environments.tools.search_qa.corpus import Corpus, Entity, normalise

LEVEL_HOPS: dict[str, int] = {"easy": 2, "medium": 3, "hard": 4}
"""Difficulty levels: the number of relations between the anchor and the answer."""
MAX_ATTEMPTS = 2_000
SPLIT_BUCKETS = 4
TEST_BUCKETS = 1
"""A question is in `test` when sha256 of its content key falls in one bucket of four (the puzzles' rule)."""

# (kind, relation) -> the kind it reaches ("year" for an attribute). Attributes end a walk.
RELATIONS: dict[str, dict[str, str]] = {
    "work": {"creator": "person", "company": "company", "year": "year"},
    "person": {"birthplace": "city", "alma_mater": "university", "mentor": "person", "born": "year"},
    "university": {"city": "city", "founder": "person", "founded": "year"},
    "company": {"city": "city", "founder": "person", "predecessor": "company", "founded": "year"},
    "city": {"country": "country"},
    "country": {"founded": "year"},
}
_ANCHOR_KINDS = ("work", "work", "work", "person", "person", "company", "university")

_WORK_VERBS = {
    "novel": ("wrote", "published"),
    "film": ("directed", "produced"),
    "album": ("recorded", "released"),
}
_WORK_MAKERS = {"novel": "author", "film": "director", "album": "musician who recorded"}
_WORK_COMPANIES = {"novel": "publisher", "film": "studio that produced", "album": "label that released"}


def _work_kind(entity: Entity) -> str:
    return str(entity.attributes["kind"])


def noun_phrase(entity: Entity, relation: str, inner: str) -> str:
    """`inner` (a phrase naming `entity`) followed through `relation`, as a noun phrase."""
    kind = entity.kind
    if kind == "work":
        work = _work_kind(entity)
        if relation == "creator":
            maker = _WORK_MAKERS[work]
            return f"the {maker} {inner}" if maker.endswith("recorded") else f"the {maker} of {inner}"
        company = _WORK_COMPANIES[work]
        return f"the {company} {inner}" if " " in company else f"the {company} of {inner}"
    phrases = {
        ("person", "birthplace"): "the birthplace of {x}",
        ("person", "alma_mater"): "the university attended by {x}",
        ("person", "mentor"): "the mentor of {x}",
        ("university", "city"): "the home city of {x}",
        ("university", "founder"): "the founder of {x}",
        ("company", "city"): "the headquarters city of {x}",
        ("company", "founder"): "the founder of {x}",
        ("company", "predecessor"): "the predecessor of {x}",
        ("city", "country"): "the country of {x}",
    }
    return phrases[(kind, relation)].format(x=inner)


def question_text(entity: Entity, relation: str, inner: str) -> str:
    """The question that asks for `relation` of `entity` (named by the phrase `inner`)."""
    kind = entity.kind
    if kind == "work":
        made, put_out = _WORK_VERBS[_work_kind(entity)]
        if relation == "creator":
            return f"Who {made} {inner}?"
        if relation == "company":
            which = {"novel": "publishing house", "film": "film studio", "album": "record label"}[
                _work_kind(entity)
            ]
            return f"Which {which} {put_out} {inner}?"
        return f"In what year was {inner} {put_out}?"
    questions = {
        ("person", "birthplace"): "In which city was {x} born?",
        ("person", "alma_mater"): "At which university did {x} study?",
        ("person", "mentor"): "Who was the mentor of {x}?",
        ("person", "born"): "In what year was {x} born?",
        ("university", "city"): "In which city is {x} located?",
        ("university", "founder"): "Who founded {x}?",
        ("university", "founded"): "In what year was {x} founded?",
        ("company", "city"): "In which city is {x} headquartered?",
        ("company", "founder"): "Who founded {x}?",
        ("company", "predecessor"): "Which company did {x} succeed?",
        ("company", "founded"): "In what year was {x} founded?",
        ("city", "country"): "In which country does {x} lie?",
        ("country", "founded"): "In what year did {x} become a republic?",
    }
    return questions[(kind, relation)].format(x=inner)


def anchor_phrase(entity: Entity) -> str:
    """How a question names its anchor: a work by kind and quoted title, anything else by name."""
    if entity.kind == "work":
        return f'the {_work_kind(entity)} "{entity.name}"'
    return entity.name


@dataclass(frozen=True)
class Question:
    """One generated question: the text, the gold aliases, and the chain that leads to them."""

    text: str
    answers: tuple[str, ...]
    hops: int
    path: tuple[str, ...]
    """The entity ids visited, anchor first (the answer last when it is an entity)."""
    relations: tuple[str, ...]
    answer_kind: str

    def key(self, corpus: Corpus) -> str:
        """The question's content, as canonical JSON: it decides the split."""
        return _canonical(
            {
                "corpus": [corpus.seed, corpus.version],
                "path": list(self.path),
                "relations": list(self.relations),
            }
        )


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def content_split(key: str) -> str:
    """The split a question belongs to, from the hash of its content key."""
    bucket = int(hashlib.sha256(("split:" + key).encode("utf-8")).hexdigest()[:16], 16) % SPLIT_BUCKETS
    return "test" if bucket < TEST_BUCKETS else "train"


def question_id(key: str) -> str:
    """A short stable id of a question's content."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]


def item_rng(
    name: str, version: str, split: str, seed: int, hops: int, index: int, attempt: int
) -> random.Random:
    """The random stream of one generation attempt: sha256 of everything that names the item."""
    key = _canonical(
        {
            "env": name,
            "version": version,
            "split": split,
            "seed": seed,
            "hops": hops,
            "index": index,
            "attempt": attempt,
        }
    )
    return random.Random(int(hashlib.sha256(key.encode("ascii")).hexdigest()[:32], 16))


def answer_aliases(
    corpus: Corpus, entity: Entity, relation: str, target_kind: str
) -> tuple[str, tuple[str, ...]]:
    """The gold answer of `relation` from `entity` and its accepted aliases."""
    if target_kind == "year":
        year = str(entity.attributes[relation])
        return year, (year,)
    target = corpus.entity(entity.relations[relation])
    return target.name, target.aliases


def walk(rng: random.Random, corpus: Corpus, hops: int) -> Question | None:
    """One random walk of `hops` relations; None when it dead-ends or the answer leaks beside the anchor."""
    anchor_kind = rng.choice(_ANCHOR_KINDS)
    candidates = [e for e in corpus.entities if e.kind == anchor_kind]
    current = rng.choice(candidates)
    anchor = current
    path = [current.id]
    relations: list[str] = []
    phrase = anchor_phrase(current)
    for step in range(hops):
        last = step == hops - 1
        options = []
        for relation, target_kind in RELATIONS[current.kind].items():
            if target_kind == "year":
                if last:
                    options.append(relation)
            elif relation in current.relations and current.relations[relation] not in path:
                target = corpus.entity(current.relations[relation])
                if last or RELATIONS[target.kind]:
                    options.append(relation)
        if not options:
            return None
        relation = rng.choice(options)
        relations.append(relation)
        if last:
            target_kind = RELATIONS[current.kind][relation]
            gold, aliases = answer_aliases(corpus, current, relation, target_kind)
            text = question_text(current, relation, phrase)
            if target_kind != "year":
                path.append(current.relations[relation])
            answer_kind = target_kind
            break
        phrase = noun_phrase(current, relation, phrase)
        current = corpus.entity(current.relations[relation])
        path.append(current.id)
    else:  # pragma: no cover - hops >= 1 always breaks out
        return None
    if leaks(corpus, anchor, aliases):
        return None
    text = text[0].upper() + text[1:]
    return Question(
        text, (gold, *[a for a in aliases if a != gold]), hops, tuple(path), tuple(relations), answer_kind
    )


def leaks(corpus: Corpus, anchor: Entity, aliases: tuple[str, ...]) -> bool:
    """Whether some document that names the anchor also states an alias of the answer (whole words)."""
    mentioning = set()
    for name in anchor.aliases:
        mentioning.update(corpus.documents_mentioning(name))
    for alias in aliases:
        needle = f" {normalise(alias)} "
        if any(needle in corpus.normalised_texts[i] for i in mentioning):
            return True
    return False


def draw(
    corpus: Corpus, name: str, version: str, split: str, seed: int, hops: int, index: int
) -> tuple[Question, int, str]:
    """Item `index` of (split, seed, hops): walks until one is kept and its content hash is in `split`."""
    for attempt in range(MAX_ATTEMPTS):
        rng = item_rng(name, version, split, seed, hops, index, attempt)
        question = walk(rng, corpus, hops)
        if question is None:
            continue
        key = question.key(corpus)
        if content_split(key) == split:
            return question, attempt, key
    raise GenerationError(f"{name}: no {split} question with {hops} hops in {MAX_ATTEMPTS} attempts")
