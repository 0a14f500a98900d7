"""`puzzle.mix`: tasks drawn from several puzzle families by weight; each task names its family's verifier.

Item i picks its family from a hashed seed of (config, split, seed, i) and is that family's item i of the
same split and seed, so a mix is as deterministic and as split-clean as its families.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from proctor.contract import RequestError
from proctor.environments.puzzles.base import LEVELS, PREFIX, all_families, get_family
from proctor.environments.puzzles.seeding import item_rng
from proctor.environments.registry import EnvConfig, EnvironmentSpec, Task, register_environment

NAME = "puzzle.mix"
VERSION = "1"


class MixConfig(EnvConfig):
    """Which families, how often, and at which of their difficulty levels."""

    weights: dict[str, float] | None = Field(
        default=None,
        max_length=1000,
        description="Family name (e.g. 'sudoku' or 'puzzle.sudoku') -> weight >= 0; default: every family, equally.",
    )
    difficulty: Literal["easy", "medium", "hard"] = Field(
        default="medium", description="The level each family generates at."
    )


def resolve_weights(weights: dict[str, float] | None) -> list[tuple[str, float]]:
    """(family, weight) pairs sorted by name; raises RequestError(422) for unknown families or bad weights."""
    if weights is None:
        return [(family.name, 1.0) for family in all_families()]
    pairs: dict[str, float] = {}
    for name, weight in weights.items():
        try:
            family = get_family(name)
        except KeyError:
            known = ", ".join(family.name for family in all_families())
            raise RequestError(
                422, f"unknown puzzle family {name!r}; families: {known}", "config.weights"
            ) from None
        if not weight >= 0 or weight == float("inf"):
            raise RequestError(422, f"weight of {name!r} must be a finite number >= 0", "config.weights")
        pairs[family.name] = pairs.get(family.name, 0.0) + weight
    chosen = sorted((name, weight) for name, weight in pairs.items() if weight > 0)
    if not chosen:
        raise RequestError(422, "at least one family needs a positive weight", "config.weights")
    return chosen


def make_mix(config: MixConfig, split: str, seed: int, count: int, difficulty: str) -> list[Task]:
    """Tasks 0..count-1: each from a family picked by weight, at the config's difficulty level."""
    pairs = resolve_weights(config.weights)
    names = [name for name, _ in pairs]
    weights = [weight for _, weight in pairs]
    config_values: dict[str, Any] = config.model_dump(mode="json")
    tasks = []
    for index in range(count):
        rng = item_rng(NAME, VERSION, config_values, split, seed, index)
        family = get_family(rng.choices(names, weights=weights)[0])
        family_config = family.Config.model_validate(family.levels[config.difficulty])
        task = family.task(family_config, split, seed, index, config.difficulty)
        task.metadata["mix"] = {"environment": NAME, "version": VERSION, "difficulty": difficulty}
        tasks.append(task)
    return tasks


SPEC = register_environment(
    EnvironmentSpec(
        name=NAME,
        version=VERSION,
        config=MixConfig,
        make=make_mix,
        levels={level: {"difficulty": level} for level in LEVELS},
        default_level="medium",
        description="Puzzles drawn from weighted families; each task's `verifier` is its family's "
        f"({PREFIX}<family>).",
        verifier=None,
        kind="puzzle_mix",
    )
)
