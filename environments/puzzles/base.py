"""What every puzzle family is: a config with difficulty levels, a seeded generator and a rule checker.

A family module subclasses `PuzzleFamily` and calls `register_family(TheFamily)` at its bottom; that
registers the environment `puzzle.<name>` and the verifier `puzzle.<name>` (with gold and cheat examples
made from the family's own items). Every module beside this one is a complete example;
`environments/puzzles/sudoku.py` is a short one.
"""

from __future__ import annotations

import random
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict

from proctor.contract import Verdict
from proctor.environments.puzzles.answer import MAX_ANSWER_CHARS, Checked, extract, no_answer, to_verdict
from proctor.environments.puzzles.seeding import canonical, content_split, item_rng, puzzle_id
from proctor.environments.registry import (
    EnvConfig,
    EnvironmentSpec,
    GenerationError,
    Task,
    register_environment,
)
from proctor.registry import BaseOptions, Example, VerifierSpec
from proctor.verifiers.reading import clip

PREFIX = "puzzle."
LEVELS = ("easy", "medium", "hard")
"""Every family defines at least these difficulty levels (puzzle.mix relies on them); more are allowed."""
MAX_ATTEMPTS = 1_000
"""Generation attempts per item before giving up (an attempt is rejected when its puzzle is in the other split)."""

ANSWER_INSTRUCTION = "Put your final answer inside <answer></answer> tags."


class PuzzleConfig(EnvConfig):
    """Base of every family's config (frozen, extra keys forbidden)."""


class PuzzleReference(BaseModel):
    """Base of every family's reference: extra keys forbidden; bound every list and number (it is request input)."""

    model_config = ConfigDict(extra="forbid")


class PuzzleOptions(BaseOptions):
    """Puzzle verifiers take no options beyond the common ones."""


ConfigT = TypeVar("ConfigT", bound=PuzzleConfig)
ReferenceT = TypeVar("ReferenceT", bound=PuzzleReference)


@dataclass(frozen=True)
class Puzzle(Generic[ReferenceT]):
    """One generated puzzle: the question text, the reference, a gold answer string and the difficulty measure."""

    question: str
    reference: ReferenceT
    gold: str
    measure: dict[str, Any] = field(default_factory=dict)


class PuzzleFamily(ABC, Generic[ConfigT, ReferenceT]):
    """Subclass, set the class attributes, implement generate/check/random_answer, then register_family()."""

    name: ClassVar[str]
    """Family name; the environment and verifier are `puzzle.<name>`."""
    version: ClassVar[str] = "1"
    """Bump when generation or checking changes (and regenerate the golden hashes)."""
    description: ClassVar[str] = ""
    Config: ClassVar[type[PuzzleConfig]]
    Reference: ClassVar[type[PuzzleReference]]
    levels: ClassVar[dict[str, dict[str, Any]]]
    """Difficulty level -> config values; must include easy, medium and hard."""
    default_level: ClassVar[str] = "medium"
    max_answer_chars: ClassVar[int] = MAX_ANSWER_CHARS
    execution: ClassVar[Literal["inline", "pool"]] = "inline"
    partial_credit: ClassVar[bool] = False

    @abstractmethod
    def generate(self, rng: random.Random, config: ConfigT) -> Puzzle[ReferenceT]:
        """Draw one puzzle using only `rng` (no global random, no set iteration order, no hash())."""

    @abstractmethod
    def check(self, answer: str, reference: ReferenceT) -> Checked:
        """Judge an extracted answer by the puzzle's rules (never only against a stored solution)."""

    @abstractmethod
    def random_answer(self, rng: random.Random, reference: ReferenceT) -> str:
        """A random answer of the right shape (the trivial-policy gate checks these score <= 0.05)."""

    def key(self, reference: ReferenceT) -> str:
        """The puzzle's content, as a string: equal puzzles must give equal keys (it decides the split)."""
        return canonical(reference.model_dump(mode="json"))

    def extra_examples(self) -> list[Example]:
        """Hand-written gold/cheat examples beyond the generated ones (optional)."""
        return []

    # -- machinery shared by every family (not overridden) ------------------------------------------

    @property
    def env_name(self) -> str:
        """`puzzle.<name>`: the environment and the verifier."""
        return PREFIX + self.name

    def score(self, response: str, reference: ReferenceT, options: PuzzleOptions) -> Verdict:
        """The verifier: extract the answer, bound its length, check it by the rules."""
        answer = extract(response)
        if answer is None:
            return no_answer("no_answer", {})
        if len(answer) > self.max_answer_chars:
            return no_answer("answer_too_long", {"extracted": clip(answer), "chars": len(answer)})
        return to_verdict(self.check(answer, reference), answer)

    def draw(self, config: ConfigT, split: str, seed: int, index: int) -> tuple[Puzzle[ReferenceT], int, str]:
        """Item `index` of (split, seed): rejection-sample until the puzzle's content hash is in `split`."""
        config_values = config.model_dump(mode="json")
        for attempt in range(MAX_ATTEMPTS):
            rng = item_rng(self.name, self.version, config_values, split, seed, index, attempt)
            try:
                puzzle = self.generate(rng, config)
            except RecursionError:
                raise
            except RuntimeError as exc:  # a generator's "no puzzle for this config after N tries"
                raise GenerationError(f"{self.env_name}: {exc}") from exc
            key = self.key(puzzle.reference)
            if content_split(key) == split:
                return puzzle, attempt, key
        raise GenerationError(
            f"{self.env_name}: no {split} puzzle in {MAX_ATTEMPTS} attempts (config {config})"
        )

    def task(self, config: ConfigT, split: str, seed: int, index: int, difficulty: str) -> Task:
        """One task, with the prompt, the JSON reference and the metadata every family carries."""
        puzzle, attempt, key = self.draw(config, split, seed, index)
        return Task(
            prompt=[{"role": "user", "content": f"{puzzle.question}\n\n{ANSWER_INSTRUCTION}"}],
            reference=puzzle.reference.model_dump(mode="json"),
            verifier=self.env_name,
            metadata={
                "gold_answer": puzzle.gold,
                "difficulty": difficulty,
                "measure": puzzle.measure,
                "family": self.name,
                "environment": self.env_name,
                "version": self.version,
                "config": config.model_dump(mode="json"),
                "split": split,
                "seed": seed,
                "index": index,
                "attempt": attempt,
                "puzzle_id": puzzle_id(key),
            },
        )

    def make(self, config: ConfigT, split: str, seed: int, count: int, difficulty: str) -> list[Task]:
        """Tasks 0..count-1 of (split, seed)."""
        return [self.task(config, split, seed, index, difficulty) for index in range(count)]

    def examples(self) -> tuple[Example, ...]:
        """Gold and cheat examples for the registry gate, made from the family's own first items."""
        config = self.Config.model_validate(self.levels[self.default_level])
        examples: list[Example] = []
        for index in range(2):
            puzzle, _, _ = self.draw(config, "train", 0, index)
            reference = puzzle.reference.model_dump(mode="json")
            examples.append(Example(f"<answer>{puzzle.gold}</answer>", reference, 1.0, note="gold"))
            examples.append(
                Example(f"<think>x</think>\\boxed{{{puzzle.gold}}}", reference, 1.0, note="boxed gold")
            )
            examples.append(Example("", reference, 0.0, note="empty response"))
            examples.append(Example(puzzle.question, reference, 0.0, note="copy of the question"))
            examples.append(
                Example(f"<think><answer>{puzzle.gold}</answer>", reference, 0.0, note="in think")
            )
            examples.append(
                Example(f"<answer>{puzzle.question}</answer>", reference, 0.0, note="question as answer")
            )
        return tuple(examples) + tuple(self.extra_examples())


_families: dict[str, PuzzleFamily[Any, Any]] = {}
_lock = threading.RLock()


def register_family(family_class: type[PuzzleFamily[Any, Any]]) -> PuzzleFamily[Any, Any]:
    """Register a family: the environment and the verifier `puzzle.<name>`. Call at the bottom of its module."""
    family = family_class()
    missing = [level for level in LEVELS if level not in family.levels]
    if missing:
        raise ValueError(f"{family.env_name}: missing difficulty levels {missing}")
    verifier = VerifierSpec(
        name=family.env_name,
        version=family.version,
        score=family.score,
        reference=family.Reference,
        options=PuzzleOptions,
        description=family.description,
        examples=family.examples(),
        execution=family.execution,
    )
    environment = EnvironmentSpec(
        name=family.env_name,
        version=family.version,
        config=family.Config,
        make=family.make,
        levels=dict(family.levels),
        default_level=family.default_level,
        description=family.description,
        verifier=family.env_name,
        kind="puzzle",
        extra={"family": family.name, "partial_credit": family.partial_credit},
    )
    with _lock:
        if family.name in _families:
            raise ValueError(f"puzzle family {family.name!r} is already registered")
        register_environment(environment, verifier)
        _families[family.name] = family
    return family


def all_families() -> list[PuzzleFamily[Any, Any]]:
    """Every registered puzzle family, sorted by name (importing proctor.environments.puzzles registers them)."""
    import proctor.environments.puzzles  # noqa: F401

    return [_families[name] for name in sorted(_families)]


def get_family(name: str) -> PuzzleFamily[Any, Any]:
    """A family by name (`sudoku` or `puzzle.sudoku`); KeyError when unknown."""
    import proctor.environments.puzzles  # noqa: F401

    return _families[name.removeprefix(PREFIX)]
