"""The search corpus: a fictional encyclopedia generated from a seed, so no model can have memorised it.

Six kinds of entity (countries, cities, people, universities, companies, works) get invented names from a
syllable generator and random relations (a city lies in a country; a person was born in a city, studied at a
university and may have had a mentor; a university and a company each have a founder, a seat and a founding
year, and a company may be the successor of an older one; a work has a creator, a company that put it out and
a year). Each entity has one short article that states its own relations only, never the reverse ones (a
company's article does not list its works), so a chain of relations has to be followed article by article.

Every word of a name belongs to one entity (the generic words `Press`, `College`, ... aside), so a name or
alias identifies its entity and a gold answer cannot be matched by another entity's name. Generation uses only
a `random.Random` seeded from the seed's sha256 (no `hash()`, no set order) and takes about 0.1 s for the
default size, so the corpus is rebuilt in each process rather than stored (`corpus(seed)` keeps the latest
few in memory).
"""

from __future__ import annotations

import hashlib
import random
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

CORPUS_VERSION = "1"
"""Bump when generation changes: the same seed then gives another corpus (tasks name the version they need)."""

COUNTS: dict[str, int] = {
    "country": 40,
    "city": 360,
    "person": 1100,
    "university": 90,
    "company": 250,
    "work": 600,
}
"""Entities of each kind in a corpus (one article each): 2,440 articles."""

_ONSETS = (
    "b", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "tr", "th", "sh",
    "st", "gr", "c", "",
)  # fmt: skip
_VOWELS = ("a", "e", "i", "o", "u", "a", "e", "o", "ai", "ei", "ou", "ia")
_CODAS = ("", "", "", "", "", "n", "r", "l", "s", "m", "nd", "rn")
_CITY_ENDINGS = (
    "mora",
    "vale",
    "holm",
    "dun",
    "strand",
    "ford",
    "wick",
    "burg",
    "stead",
    "mere",
    "gate",
    "port",
)
_COUNTRY_ENDINGS = ("ia", "and", "ova", "esh", "ar", "enne")
_GENERIC = ("Press", "Pictures", "Records", "College", "Institute", "Academy", "Republic", "of", "the")
_TITLE_ADJECTIVES = (
    "Glass", "Silent", "Amber", "Hollow", "Crimson", "Distant", "Broken", "Iron", "Quiet", "Burning", "Salt",
    "Winter", "Northern", "Paper", "Velvet", "Ashen", "Golden", "Drowned", "Lantern", "Second", "Last", "Wild",
    "Bitter", "Copper", "Patient", "Restless", "Hidden", "Painted", "Sleeping", "Narrow",
)  # fmt: skip
_TITLE_NOUNS = (
    "Orchard", "Harbour", "Mirror", "Garden", "Tide", "Lighthouse", "Citadel", "Ledger", "Meridian", "River",
    "Archive", "Bridge", "Season", "Compass", "Cathedral", "Forest", "Machine", "Island", "Letter", "Frontier",
    "Hour", "Kingdom", "Winter", "Signal", "Weather", "Voyage", "Circus", "Telescope", "Quarry", "Crossing",
)  # fmt: skip
_OCCUPATIONS = (
    "novelist", "film director", "composer", "engineer", "economist", "botanist", "architect", "chemist",
    "historian", "cartographer", "painter", "astronomer", "diplomat", "philosopher", "sculptor", "linguist",
)  # fmt: skip
_CREATORS = {"novel": "novelist", "film": "film director", "album": "composer"}
_COMPANY_KINDS = {"novel": "publishing house", "film": "film studio", "album": "record label"}
_COMPANY_SUFFIX = {"publishing house": "Press", "film studio": "Pictures", "record label": "Records"}
_UNIVERSITY_SUFFIX = ("College", "Institute", "Academy")
_INDUSTRIES = (
    "textiles",
    "shipbuilding",
    "glassmaking",
    "printing",
    "mining",
    "brewing",
    "clockmaking",
    "salt",
)
_FEATURES = (
    "a river port",
    "a hill fortress",
    "a covered market",
    "a salt marsh",
    "twin bridges",
    "an old canal",
)
_WORK_KINDS = ("novel", "film", "album")

_TOKEN = re.compile(r"[a-z0-9]+")


@dataclass(frozen=True)
class Entity:
    """One invented entity: its id, kind, name, aliases, attributes and relations (to other entity ids)."""

    id: str
    kind: str
    name: str
    aliases: tuple[str, ...]
    attributes: dict[str, int | str] = field(default_factory=dict)
    relations: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Document:
    """One article: its id (`d0042`), title (the entity's name), text and the entity it is about."""

    id: str
    title: str
    text: str
    entity: str

    @property
    def contents(self) -> str:
        """Title and text on two lines, as Search-R1's corpora store a passage (`contents`)."""
        return f"{self.title}\n{self.text}"


@dataclass(frozen=True)
class Corpus:
    """Every entity and its article; `documents[i]` is the article of `entities[i]`."""

    seed: int
    version: str
    entities: tuple[Entity, ...]
    documents: tuple[Document, ...]
    by_id: dict[str, Entity]
    doc_by_id: dict[str, Document]
    normalised_texts: tuple[str, ...]
    """Each document's title and text normalised (`normalise`), padded with a space at each end."""

    def entity(self, entity_id: str) -> Entity:
        """An entity by id."""
        return self.by_id[entity_id]

    def documents_mentioning(self, phrase: str) -> list[int]:
        """Indexes of the documents whose title or text holds `phrase` as whole words (after normalising)."""
        needle = f" {normalise(phrase)} "
        return [i for i, text in enumerate(self.normalised_texts) if needle in text]


def normalise(text: str) -> str:
    """Lower case, words of letters and digits joined by one space (the form names are compared in)."""
    return " ".join(_TOKEN.findall(text.lower()))


class _Names:
    """Invented words, each used once in a corpus (so every name identifies its entity)."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.used: set[str] = {word.lower() for word in _GENERIC}
        self.used.update(word.lower() for word in _TITLE_ADJECTIVES + _TITLE_NOUNS)

    def _syllable(self) -> str:
        rng = self.rng
        return rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS)

    def word(self, syllables: tuple[int, int] = (2, 3), ending: str = "") -> str:
        """A fresh capitalised word of 2-3 syllables (plus an ending), never used before in this corpus."""
        while True:
            count = self.rng.randint(*syllables)
            word = "".join(self._syllable() for _ in range(count))
            if ending:
                word = (word.rstrip("aeiouy") if ending[0] in "aeiou" else word) + ending
            if not 4 <= len(word) <= 12 or word in self.used or not re.search(r"[aeiouy]", word):
                continue
            self.used.add(word)
            return word.capitalize()


def _seed_rng(seed: int) -> random.Random:
    digest = hashlib.sha256(f"proctor.search_qa.corpus:{CORPUS_VERSION}:{seed}".encode()).hexdigest()
    return random.Random(int(digest[:32], 16))


def _make_entities(rng: random.Random) -> list[Entity]:
    names = _Names(rng)
    entities: list[Entity] = []

    countries = []
    for index in range(COUNTS["country"]):
        name = names.word((1, 2), rng.choice(_COUNTRY_ENDINGS))
        country = Entity(
            f"cou{index:04d}",
            "country",
            name,
            (name, f"Republic of {name}"),
            {"founded": rng.randint(1650, 1920), "river": names.word((2, 2))},
        )
        countries.append(country)
    entities.extend(countries)

    cities = []
    for index in range(COUNTS["city"]):
        name = names.word((1, 2), rng.choice(_CITY_ENDINGS))
        cities.append(
            Entity(
                f"cit{index:04d}",
                "city",
                name,
                (name,),
                {
                    "population": rng.randint(8, 2400) * 1000,
                    "industry": rng.choice(_INDUSTRIES),
                    "feature": rng.choice(_FEATURES),
                },
                {"country": rng.choice(countries).id},
            )
        )
    entities.extend(cities)

    # People first without universities (those need founders), then universities, then each person's links.
    people_base = []
    for index in range(COUNTS["person"]):
        given, family = names.word((2, 2)), names.word((2, 3))
        people_base.append(
            (
                f"per{index:04d}",
                f"{given} {family}",
                (f"{given} {family}", family),
                {"born": rng.randint(1780, 1960), "occupation": rng.choice(_OCCUPATIONS)},
                {"birthplace": rng.choice(cities).id},
            )
        )
    universities = []
    for index in range(COUNTS["university"]):
        root = names.word((2, 3))
        name = f"{root} {rng.choice(_UNIVERSITY_SUFFIX)}"
        founder = rng.choice(people_base)
        universities.append(
            Entity(
                f"uni{index:04d}",
                "university",
                name,
                (name, root),
                {
                    "founded": int(founder[3]["born"]) + rng.randint(25, 60),
                    "students": rng.randint(2, 40) * 500,
                },
                {"city": rng.choice(cities).id, "founder": founder[0]},
            )
        )
    people = []
    born = {base[0]: int(base[3]["born"]) for base in people_base}
    for person_id, name, aliases, attributes, relations in people_base:
        relations = dict(relations)
        relations["alma_mater"] = rng.choice(universities).id
        elders = [other for other in rng.sample(people_base, 6) if born[other[0]] < born[person_id] - 10]
        if elders and rng.random() < 0.6:
            relations["mentor"] = elders[0][0]
        people.append(Entity(person_id, "person", name, aliases, attributes, relations))
    entities.extend(people)
    entities.extend(universities)

    companies: list[Entity] = []
    for index in range(COUNTS["company"]):
        kind = rng.choice(list(_COMPANY_KINDS.values()))
        root = names.word((2, 3))
        name = f"{root} {_COMPANY_SUFFIX[kind]}"
        founder = rng.choice(people)
        relations = {"city": rng.choice(cities).id, "founder": founder.id}
        older = [c for c in companies if c.attributes["kind"] == kind]
        if older and rng.random() < 0.35:
            relations["predecessor"] = rng.choice(older).id
        founded = int(founder.attributes["born"]) + rng.randint(22, 65)
        companies.append(
            Entity(
                f"com{index:04d}",
                "company",
                name,
                (name, root),
                {"kind": kind, "founded": founded},
                relations,
            )
        )
    entities.extend(companies)

    titles: set[str] = set()
    by_kind = {
        kind: [c for c in companies if c.attributes["kind"] == company]
        for kind, company in _COMPANY_KINDS.items()
    }
    for index in range(COUNTS["work"]):
        kind = rng.choice(_WORK_KINDS)
        while True:
            title = f"The {rng.choice(_TITLE_ADJECTIVES)} {rng.choice(_TITLE_NOUNS)} of {names.word((2, 2))}"
            if title not in titles:
                titles.add(title)
                break
        company = rng.choice(by_kind[kind])
        creator = rng.choice(people)
        year = max(int(company.attributes["founded"]), int(creator.attributes["born"]) + 20) + rng.randint(
            1, 30
        )
        entities.append(
            Entity(
                f"wor{index:04d}",
                "work",
                title,
                (title,),
                {"kind": kind, "year": year, "length": rng.randint(90, 640)},
                {"creator": creator.id, "company": company.id},
            )
        )
    return entities


def _a(noun: str) -> str:
    return ("an " if noun[0] in "aeiou" else "a ") + noun


def _article(entity: Entity, by_id: dict[str, Entity]) -> str:
    """The entity's article: its attributes and its own relations, in plain sentences."""
    a, r = entity.attributes, entity.relations

    def name(key: str) -> str:
        return by_id[r[key]].name

    if entity.kind == "country":
        return (
            f"{entity.name}, officially the Republic of {entity.name}, is a country. It became a republic in "
            f"{a['founded']}. Its longest river is the {a['river']}."
        )
    if entity.kind == "city":
        return (
            f"{entity.name} is a city in {name('country')} with a population of about {a['population']:,}. "
            f"It is known for {a['industry']} and for {a['feature']}."
        )
    if entity.kind == "person":
        text = (
            f"{entity.name} (born {a['born']}) is {_a(str(a['occupation']))} born in the city of {name('birthplace')}. "
            f"{entity.name.split()[1]} studied at {name('alma_mater')}."
        )
        if "mentor" in r:
            text += f" {entity.name.split()[1]} was a student of {name('mentor')}."
        return text
    if entity.kind == "university":
        return (
            f"{entity.name} is a university in the city of {name('city')}. It was founded in {a['founded']} by "
            f"{name('founder')} and has about {a['students']:,} students."
        )
    if entity.kind == "company":
        text = (
            f"{entity.name} is {_a(str(a['kind']))} headquartered in the city of {name('city')}. It was founded in "
            f"{a['founded']} by {name('founder')}."
        )
        if "predecessor" in r:
            text += f" It is the successor of {name('predecessor')}, whose catalogue it took over."
        return text
    creator_role = {"novel": "written by", "film": "directed by", "album": "recorded by"}[str(a["kind"])]
    company_role = {"novel": "published by", "film": "produced by", "album": "released by"}[str(a["kind"])]
    unit = {"novel": "pages", "film": "minutes", "album": "minutes"}[str(a["kind"])]
    length = int(a["length"]) // {"novel": 1, "film": 4, "album": 8}[str(a["kind"])]
    return (
        f"{entity.name} is {_a(str(a['kind']))} {creator_role} {name('creator')}, {company_role} {name('company')} "
        f"in {a['year']}. It runs to {length} {unit}."
    )


def build_corpus(seed: int) -> Corpus:
    """The corpus of `seed` (deterministic: the same seed gives the same bytes in every process)."""
    rng = _seed_rng(seed)
    entities = tuple(_make_entities(rng))
    by_id = {entity.id: entity for entity in entities}
    documents = tuple(
        Document(f"d{index:05d}", entity.name, _article(entity, by_id), entity.id)
        for index, entity in enumerate(entities)
    )
    return Corpus(
        seed=seed,
        version=CORPUS_VERSION,
        entities=entities,
        documents=documents,
        by_id=by_id,
        doc_by_id={document.id: document for document in documents},
        normalised_texts=tuple(f" {normalise(d.title + ' ' + d.text)} " for d in documents),
    )


_cache: OrderedDict[int, Corpus] = OrderedDict()
_lock = threading.Lock()
CACHED_CORPORA = 4
PINNED_CORPORA = frozenset({0})
"""Never dropped: the bundled corpus (every bundled task is drawn from it)."""


def corpus(seed: int = 0) -> Corpus:
    """The corpus of `seed`, built once per process (the pinned seeds and the CACHED_CORPORA most recently
    used others are kept; an index holds its own corpus, so an open session's corpus lives with its index)."""
    with _lock:
        found = _cache.get(seed)
        if found is not None:
            _cache.move_to_end(seed)
            return found
    built = build_corpus(seed)
    with _lock:
        found = _cache.get(seed)
        if found is not None:
            _cache.move_to_end(seed)
            return found
        _cache[seed] = built
        unpinned = [key for key in _cache if key not in PINNED_CORPORA]
        for key in unpinned[: max(0, len(unpinned) - CACHED_CORPORA)]:
            del _cache[key]
    return built
