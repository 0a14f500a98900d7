"""The environment registry: named task makers (`puzzle.*`, `demo.*`) with a config model and difficulty levels.

An environment turns `(split, seed, count, difficulty | config)` into tasks: a chat `prompt`, the
`reference` its verifier needs (scoring is stateless: everything the checker needs is in the reference) and
`metadata` (gold answer, difficulty, the generator's measure of it, split, seed, index ...). Registering an
environment also registers the verifier that scores its tasks, under the same name.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from proctor.contract import RequestError, request_error_from
from proctor.registry import VerifierSpec, builtin_module, load_verifiers, register_verifier

Split = Literal["train", "test"]
SPLITS: tuple[str, ...] = ("train", "test")
MAX_TASKS_PER_CALL = 10_000
MAX_SEED = 2**63 - 1
"""The largest seed in process and on the command line (the trainer derives 63-bit seeds)."""
MAX_JSON_SEED = 2**53 - 1
"""The largest seed over HTTP: the largest integer a JSON number keeps exactly in every client (a double)."""
CUSTOM_DIFFICULTY = "custom"


class GenerationError(RuntimeError):
    """A generator could not make a task for this config within its bounded attempts (a 422, not a 500)."""


class EnvConfig(BaseModel):
    """Base of every environment's config model: unknown keys are an error, so a typo is never ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Task(BaseModel):
    """One task: what the policy sees (`prompt`), what its verifier needs (`reference`) and what it is."""

    model_config = ConfigDict(extra="forbid")

    prompt: list[dict[str, str]] = Field(description="Chat messages to send to the policy.")
    reference: Any = Field(description="The reference to score the response with (stateless scoring).")
    verifier: str = Field(description="The verifier to score this task with, e.g. 'puzzle.sudoku'.")
    metadata: dict[str, Any] = Field(
        default_factory=dict,
        description="gold_answer, difficulty, measure, environment, version, split, seed, index ...",
    )


MakeFn = Callable[[Any, str, int, int, str], list[Task]]
"""(config, split, seed, count, difficulty_label) -> tasks; config is an instance of the spec's config model."""


@dataclass(frozen=True)
class EnvironmentSpec:
    """Everything the API, the CLI and the trainer need to make tasks from one environment."""

    name: str
    version: str
    config: type[EnvConfig]
    make: MakeFn
    levels: dict[str, dict[str, Any]] = field(default_factory=dict)
    default_level: str | None = None
    description: str = ""
    verifier: str | None = None
    kind: str = "task"
    extra: dict[str, Any] = field(default_factory=dict)

    def resolve(self, difficulty: str | None = None, config: dict[str, Any] | None = None) -> tuple[Any, str]:
        """The config to generate with and its difficulty label; raises RequestError(422) naming the field.

        A difficulty level gives the base values, `config` overrides them; with neither, the default level.
        """
        if difficulty is not None and difficulty not in self.levels:
            known = ", ".join(self.levels) or "none"
            raise RequestError(
                422, f"unknown difficulty {difficulty!r} for {self.name}; levels: {known}", "difficulty"
            )
        level = difficulty if difficulty is not None else self.default_level
        values = dict(self.levels.get(level, {})) if level is not None else {}
        if config:
            values.update(config)
        try:
            parsed = self.config.model_validate(values)
        except ValidationError as exc:
            raise request_error_from(exc, "config") from None
        label = level if (not config and level is not None) else CUSTOM_DIFFICULTY
        return parsed, label

    def tasks(
        self,
        split: str = "train",
        seed: int = 0,
        count: int = 1,
        difficulty: str | None = None,
        config: dict[str, Any] | None = None,
    ) -> list[Task]:
        """Make `count` tasks; the same arguments always give byte-identical tasks."""
        if split not in SPLITS:
            raise RequestError(422, f"split must be one of {', '.join(SPLITS)}, not {split!r}", "split")
        if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed <= MAX_SEED:
            raise RequestError(422, f"seed must be an integer in [0, {MAX_SEED}]", "seed")
        if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= MAX_TASKS_PER_CALL:
            raise RequestError(422, f"count must be an integer in [1, {MAX_TASKS_PER_CALL}]", "count")
        parsed, label = self.resolve(difficulty, config)
        try:
            return self.make(parsed, split, seed, count, label)
        except GenerationError as exc:
            raise RequestError(
                422, f"{self.name}: cannot make tasks for this config: {exc}", "config"
            ) from None

    def describe(self) -> dict[str, Any]:
        """Name, version, verifier, levels and the config's JSON schema, as listed by GET /v1/environments."""
        return {
            "name": self.name,
            "version": self.version,
            "kind": self.kind,
            "description": self.description,
            "verifier": self.verifier,
            "difficulty_levels": list(self.levels),
            "default_difficulty": self.default_level,
            "levels": self.levels,
            "config_schema": self.config.model_json_schema(),
            **self.extra,
        }


_environments: dict[str, EnvironmentSpec] = {}
_lock = threading.RLock()


def register_environment(spec: EnvironmentSpec, verifier: VerifierSpec | None = None) -> EnvironmentSpec:
    """Add an environment (and the verifier that scores its tasks) to the registries.

    The verifier is registered under its own name (by convention the environment's); an environment without
    one (like `puzzle.mix`) names in each task the verifier of the environment the task came from.
    """
    if spec.default_level is not None and spec.default_level not in spec.levels:
        raise ValueError(f"{spec.name}: default level {spec.default_level!r} is not one of its levels")
    for level, values in spec.levels.items():
        spec.config.model_validate(values)  # a bad level fails at import time, not at the first request
        if not level:
            raise ValueError(f"{spec.name}: empty level name")
    with _lock:
        existing = _environments.get(spec.name)
        if existing is not None and existing.make is not spec.make:
            raise ValueError(f"environment {spec.name!r} is already registered as version {existing.version}")
        if verifier is not None:
            register_verifier(verifier)
        _environments[spec.name] = spec
    return spec


def get_environment(name: str) -> EnvironmentSpec:
    """Look an environment up by name; unknown names raise RequestError(404) listing the known ones.

    As for verifiers, a built-in name (`puzzle.*`, `demo.*`) imports only the module that registers it
    (`proctor.registry.builtin_module`); any other name loads everything (plugins, entry points) first.
    """
    spec = _environments.get(name)
    if spec is None and (module := builtin_module(name)) is not None:
        importlib.import_module(module)
        spec = _environments.get(name)
    if spec is None:
        load_verifiers()
        spec = _environments.get(name)
    if spec is None:
        known = ", ".join(sorted(_environments)) or "none"
        raise RequestError(404, f"unknown environment {name!r}; known environments: {known}", field="name")
    return spec


def all_environments() -> list[EnvironmentSpec]:
    """Every registered environment, sorted by name."""
    load_verifiers()
    return [_environments[name] for name in sorted(_environments)]
