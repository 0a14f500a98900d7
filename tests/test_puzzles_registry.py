"""The rules every puzzle family follows, checked over the registry (a new family is covered automatically).

Per family, at its default difficulty: gold answers score 1; trivial policies (empty, copy of the question,
a random answer of the right shape, many answers at once, the longest allowed answer) each earn <= 0.05 on
average over 200 items; generation is byte-identical across processes and PYTHONHASHSEED values and matches
a pinned golden hash; train and test never share a puzzle; the default level has thousands of distinct items.

Golden hashes live in tests/data/puzzle_golden_hashes.json. After bumping a family's version (or adding a
family), regenerate them with:

    PROCTOR_UPDATE_GOLDEN=1 .venv/bin/pytest tests/test_puzzles_registry.py -q -k golden
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest

import proctor
from proctor.environments.puzzles.base import LEVELS, PuzzleFamily, PuzzleOptions, all_families
from proctor.environments.puzzles.seeding import content_split, digest, puzzle_id
from proctor.environments.registry import Task, get_environment

GATE_ITEMS = 200
TEST_SPLIT_ITEMS = 100
GOLDEN_ITEMS = 20
MAX_TRIVIAL_REWARD = 0.05
MAX_DUPLICATES = 2
"""At most 2 repeated puzzles among 200 draws: by the birthday bound the effective space is >~ 10,000."""
GOLDEN_FILE = Path(__file__).parent / "data" / "puzzle_golden_hashes.json"
UPDATE_GOLDEN = os.environ.get("PROCTOR_UPDATE_GOLDEN") == "1"

FAMILIES = {family.name: family for family in all_families()}
NAMES = sorted(FAMILIES)
METADATA_KEYS = {
    "gold_answer",
    "difficulty",
    "measure",
    "family",
    "environment",
    "version",
    "split",
    "seed",
    "index",
    "puzzle_id",
}

_OPTIONS = PuzzleOptions()


@cache
def _tasks(name: str, split: str, count: int, seed: int = 0, difficulty: str | None = None) -> list[Task]:
    return get_environment(f"puzzle.{name}").tasks(split=split, seed=seed, count=count, difficulty=difficulty)


def _reward(family: PuzzleFamily[Any, Any], response: str, task: Task) -> float:
    reference = family.Reference.model_validate(task.reference)
    return family.score(response, reference, _OPTIONS).reward


def _question(task: Task) -> str:
    return task.prompt[-1]["content"]


def _golden_hash(name: str) -> str:
    return digest([task.model_dump(mode="json") for task in _tasks(name, "train", GOLDEN_ITEMS)])


def test_there_are_families():
    assert "n_queens" in FAMILIES


@pytest.mark.parametrize("name", NAMES)
def test_gold_answers_score_one(name: str):
    family = FAMILIES[name]
    for task in _tasks(name, "train", GATE_ITEMS):
        gold = task.metadata["gold_answer"]
        assert isinstance(gold, str) and gold
        assert _reward(family, f"<answer>{gold}</answer>", task) == 1.0, (task.metadata, gold)
    for task in _tasks(name, "train", GATE_ITEMS)[:3]:  # and through the full scoring contract
        score = proctor.score(
            task.verifier, f"<answer>{task.metadata['gold_answer']}</answer>", task.reference
        )
        assert score.status == proctor.Status.ok and score.reward == 1.0, score
        assert score.components == {"format": 1.0, "answer": 1.0}


def _policies(family: PuzzleFamily[Any, Any], task: Task, rng: random.Random) -> dict[str, str]:
    reference = family.Reference.model_validate(task.reference)
    randoms = [family.random_answer(rng, reference) for _ in range(10)]
    longest = randoms[0]
    while len(longest) < family.max_answer_chars:
        longest += "\n" + family.random_answer(rng, reference)
    return {
        "empty": "<answer></answer>",
        "no_tags": "I do not know.",
        "question": _question(task),
        "question_in_tags": f"<answer>{_question(task)}</answer>",
        "random": f"<answer>{randoms[0]}</answer>",
        "many_lines": "<answer>" + "\n".join(randoms) + "</answer>",
        "many_commas": "<answer>" + ", ".join(randoms) + "</answer>",
        "many_or": "<answer>" + " or ".join(randoms) + "</answer>",
        "many_tags": "".join(f"<answer>{answer}</answer>" for answer in randoms),
        "longest": f"<answer>{longest[: family.max_answer_chars]}</answer>",
    }


@pytest.mark.parametrize("name", NAMES)
def test_trivial_policies_earn_nothing(name: str):
    family = FAMILIES[name]
    rng = random.Random(f"trivial:{name}")
    totals: dict[str, float] = {}
    tasks = _tasks(name, "train", GATE_ITEMS)
    for task in tasks:
        for policy, response in _policies(family, task, rng).items():
            totals[policy] = totals.get(policy, 0.0) + _reward(family, response, task)
    means = {policy: total / len(tasks) for policy, total in totals.items()}
    assert all(mean <= MAX_TRIVIAL_REWARD for mean in means.values()), means


@pytest.mark.parametrize("name", NAMES)
def test_train_and_test_never_share_a_puzzle(name: str):
    family = FAMILIES[name]
    train = _tasks(name, "train", GATE_ITEMS)
    test = _tasks(name, "test", TEST_SPLIT_ITEMS)
    for split, tasks in (("train", train), ("test", test)):
        for task in tasks:
            key = family.key(family.Reference.model_validate(task.reference))
            assert content_split(key) == split
            assert task.metadata["split"] == split and task.metadata["puzzle_id"] == puzzle_id(key)
    assert not {t.metadata["puzzle_id"] for t in train} & {t.metadata["puzzle_id"] for t in test}


@pytest.mark.parametrize("name", NAMES)
def test_default_level_has_thousands_of_distinct_puzzles(name: str):
    ids = [task.metadata["puzzle_id"] for task in _tasks(name, "train", GATE_ITEMS)]
    duplicates = len(ids) - len(set(ids))
    assert duplicates <= MAX_DUPLICATES, f"{duplicates} repeated puzzles among {len(ids)}"


@pytest.mark.parametrize("name", NAMES)
def test_levels_and_metadata(name: str):
    family = FAMILIES[name]
    assert set(LEVELS) <= set(family.levels)
    for level in family.levels:
        for task in _tasks(name, "train", 3, seed=7, difficulty=level):
            assert set(task.metadata) >= METADATA_KEYS, task.metadata.keys()
            assert task.metadata["difficulty"] == level and isinstance(task.metadata["measure"], dict)
            assert task.verifier == f"puzzle.{name}" and task.prompt[-1]["role"] == "user"
            assert _reward(family, f"<answer>{task.metadata['gold_answer']}</answer>", task) == 1.0
            json.dumps(task.model_dump(mode="json"))  # tasks are plain JSON


@pytest.mark.parametrize("name", NAMES)
def test_seeds_and_indexes_give_independent_items(name: str):
    # Seed s+1 is not seed s shifted by one item (the reasoning-gym Random(seed + i) leak).
    a = [t.metadata["puzzle_id"] for t in _tasks(name, "train", 20, seed=1)]
    b = [t.metadata["puzzle_id"] for t in _tasks(name, "train", 21, seed=0)]
    assert a != b[1:]
    assert a == [t.metadata["puzzle_id"] for t in _tasks(name, "train", 20, seed=1)]


_HASH_SCRIPT = f"""
import json
from proctor.environments.puzzles.base import all_families
from proctor.environments.puzzles.seeding import digest
from proctor.environments.registry import get_environment
out = {{}}
for family in all_families():
    env = get_environment(family.env_name)
    out[family.name] = [
        digest([t.model_dump(mode="json") for t in env.tasks(split="train", seed=0, count={GOLDEN_ITEMS})]),
        digest([t.model_dump(mode="json") for t in env.tasks(split="test", seed=5, count=3, difficulty="hard")]),
    ]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def subprocess_hashes() -> list[dict[str, list[str]]]:
    runs = []
    for hash_seed in ("0", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        done = subprocess.run(
            [sys.executable, "-c", _HASH_SCRIPT], env=env, capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append(json.loads(done.stdout))
    return runs


@pytest.mark.parametrize("name", NAMES)
def test_generation_is_identical_across_processes(name: str, subprocess_hashes):
    first, second = subprocess_hashes
    assert first[name] == second[name]
    assert first[name][0] == _golden_hash(name)


def _golden_file() -> dict[str, dict[str, str]]:
    return json.loads(GOLDEN_FILE.read_text()) if GOLDEN_FILE.exists() else {}


@pytest.mark.parametrize("name", NAMES)
def test_golden_hash(name: str):
    family = FAMILIES[name]
    pinned = _golden_file()
    actual = {"version": family.version, "sha256": _golden_hash(name)}
    if UPDATE_GOLDEN:
        if pinned.get(name) != actual:
            pinned[name] = actual
            GOLDEN_FILE.parent.mkdir(exist_ok=True)
            GOLDEN_FILE.write_text(json.dumps(pinned, indent=2, sort_keys=True) + "\n")
        return
    assert name in pinned, (
        f"no golden hash for {name}; run PROCTOR_UPDATE_GOLDEN=1 pytest {__file__} -k golden"
    )
    assert pinned[name]["version"] == family.version, "version bumped: regenerate the golden hash"
    assert pinned[name]["sha256"] == actual["sha256"], (
        f"{name} output changed without a version bump (bump `version`, then regenerate the golden hash)"
    )
