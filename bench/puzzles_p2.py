"""Puzzle benchmark for six families that Proctor and reasoning-gym both have (helper P2's families).

Run with `.venv/bin/python bench/puzzles_p2.py` (add `--no-write` for a trial run). For each pair
(maze, cryptarithm, hanoi/tower_of_hanoi, game_of_life, list_functions, cube_rotation/color_cube_rotation),
in one run:

- items generated per second at the default difficulty (Proctor: `tasks()`, with its per-item hashed seeds,
  content split and uniqueness proofs; reasoning-gym: iterating `create_dataset(name, size=N)`);
- gold answers verified per second (Proctor: the family's rule checker alone, and the full scoring contract
  `proctor.score` in process with the result cache off; reasoning-gym: `score_answer`);
- the mean reward of trivial answers over 200 items: empty, a copy of the question, a random answer of the
  right shape, and each family's cheapest cheat (an all-dead board, the test input copied, one of the cube's
  colours ...).

Rates are medians of 3 runs; the ratio is Proctor / reasoning-gym. Results are printed and appended to
bench/RESULTS.md unless `--no-write`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import re
import statistics
import time
from collections.abc import Callable
from typing import Any

os.environ["PROCTOR_CACHE_SIZE"] = "0"  # time the scoring, not the result cache

import reasoning_gym  # noqa: E402
from common import append_results, git_commit  # noqa: E402  (bench/common.py: the script's folder is on sys.path)

import proctor  # noqa: E402
from proctor.environments.puzzles import cube_rotation  # noqa: E402
from proctor.environments.puzzles.base import PuzzleOptions, get_family  # noqa: E402
from proctor.environments.registry import Task, get_environment  # noqa: E402

ITEMS = 200
RUNS = 3
_OPTIONS = PuzzleOptions()


def median_rate(work: Callable[[], int]) -> float:
    """Items per second, the median of RUNS timed calls of `work` (which returns how many items it did)."""
    rates = []
    for _ in range(RUNS):
        start = time.perf_counter()
        done = work()
        rates.append(done / (time.perf_counter() - start))
    return statistics.median(rates)


# -- Proctor side ---------------------------------------------------------------------------------


def ours_tasks(name: str, seed: int = 1) -> list[Task]:
    """ITEMS default-level train tasks."""
    return get_environment(f"puzzle.{name}").tasks("train", seed, ITEMS)


def ours_reward(name: str, answer: str, task: Task) -> float:
    """The reward of `<answer>answer</answer>` (or of the raw text when answer is None)."""
    family = get_family(name)
    return family.score(
        f"<answer>{answer}</answer>", family.Reference.model_validate(task.reference), _OPTIONS
    ).reward


def ours_rates(name: str) -> tuple[float, float, float]:
    """(generated/s, rule checks/s, proctor.score/s)."""
    family = get_family(name)
    seeds = iter(range(100, 200))
    generated = median_rate(lambda: len(get_environment(f"puzzle.{name}").tasks("train", next(seeds), ITEMS)))
    tasks = ours_tasks(name)
    references = [family.Reference.model_validate(t.reference) for t in tasks]
    golds = [t.metadata["gold_answer"] for t in tasks]

    def check() -> int:
        for gold, reference in zip(golds, references, strict=True):
            if not family.check(gold, reference).correct:
                raise AssertionError(f"{name}: gold rejected")
        return len(golds)

    def score() -> int:
        for task in tasks:
            result = proctor.score(
                task.verifier, f"<answer>{task.metadata['gold_answer']}</answer>", task.reference
            )
            if result.reward != 1.0:
                raise AssertionError(f"{name}: gold scored {result}")
        return len(tasks)

    score()  # warm: pool workers (tic-tac-toe style families) and caches are started outside the timing
    return generated, median_rate(check), median_rate(score)


def ours_trivial(name: str) -> dict[str, float]:
    """Mean rewards of the trivial answers on Proctor's family."""
    family = get_family(name)
    rng = random.Random(0)
    tasks = ours_tasks(name, seed=7)
    policies: dict[str, Callable[[Task], str]] = {
        "empty": lambda t: "",
        "copy of the question": lambda t: t.prompt[-1]["content"],
        "random, right shape": lambda t: family.random_answer(
            rng, family.Reference.model_validate(t.reference)
        ),
    }
    if name == "game_of_life":
        policies["all-dead board"] = lambda t: "\n".join("0" * len(r) for r in t.reference["board"])
        policies["start board copied"] = lambda t: "\n".join(t.reference["board"])
    if name == "list_functions":
        policies["test input copied"] = lambda t: str(t.reference["test_input"])
    if name == "cube_rotation":
        policies["start colours copied"] = lambda t: ", ".join(
            f"{face}: {colour}"
            for face, colour in zip(cube_rotation.FACES, t.reference["colours"], strict=True)
        )
    if name == "maze":
        policies["a number (RG's answer shape)"] = lambda t: str(rng.randint(5, 10))
    return {
        policy: statistics.fmean(ours_reward(name, make(t), t) for t in tasks)
        for policy, make in policies.items()
    }


# -- reasoning-gym side ---------------------------------------------------------------------------


def rg_items(name: str, seed: int = 1) -> list[dict[str, Any]]:
    """ITEMS items of a reasoning-gym dataset at its default config."""
    dataset = reasoning_gym.create_dataset(name, size=ITEMS, seed=seed)
    return [dataset[i] for i in range(ITEMS)]


def rg_rates(name: str) -> tuple[float, float]:
    """(generated/s, score_answer/s) on gold answers."""
    seeds = iter(range(100, 200))
    generated = median_rate(lambda: len(rg_items(name, next(seeds))))
    dataset = reasoning_gym.create_dataset(name, size=ITEMS, seed=1)
    items = [dataset[i] for i in range(ITEMS)]

    def score() -> int:
        for item in items:
            dataset.score_answer(item["answer"], item)
        return len(items)

    return generated, median_rate(score)


def _rg_random(name: str, item: dict[str, Any], rng: random.Random) -> str:
    meta = item["metadata"]
    if name == "maze":
        return "".join(rng.choice("UDLR") for _ in range(int(item["answer"])))
    if name == "cryptarithm":
        letters = sorted(meta["letter_to_digit"])
        return ",".join(
            f"{letter}={digit}"
            for letter, digit in zip(letters, rng.sample(range(10), len(letters)), strict=False)
        )
    if name == "tower_of_hanoi":
        moves = []
        for _ in range(
            len(item["answer"]) if isinstance(item["answer"], list) else 2 ** meta["num_disks"] - 1
        ):
            a, b = rng.sample(range(1, meta["num_pegs"] + 1), 2)
            moves.append(f"Move disk {rng.randint(1, meta['num_disks'])} from Peg {a} to Peg {b}")
        return "\n".join(moves)
    if name == "game_of_life":
        n = meta["grid_size_x"]
        return json.dumps([[rng.randint(0, 1) for _ in range(n)] for _ in range(meta["grid_size_y"])])
    if name == "list_functions":
        return str([rng.randint(0, 99) for _ in range(len(str(item["answer"]).split(",")))])
    if name == "color_cube_rotation":
        return rng.choice(re.findall(r"- an? (\w+) \w+ side", item["question"]))
    raise KeyError(name)


def rg_trivial(name: str) -> dict[str, float]:
    """Mean rewards of the trivial answers on reasoning-gym's dataset."""
    dataset = reasoning_gym.create_dataset(name, size=ITEMS, seed=7)
    items = [dataset[i] for i in range(ITEMS)]
    rng = random.Random(0)
    policies: dict[str, Callable[[dict[str, Any]], str]] = {
        "empty": lambda item: "",
        "copy of the question": lambda item: item["question"],
        "random, right shape": lambda item: _rg_random(name, item, rng),
    }
    if name == "game_of_life":
        n, m = dataset.config.grid_size_x, dataset.config.grid_size_y
        policies["all-dead board"] = lambda item: json.dumps([[0] * n for _ in range(m)])
        policies["start board copied"] = lambda item: (
            item["question"].split("\n\n", 1)[1].rstrip(".").replace("\n", "")
        )
    if name == "list_functions":
        policies["test input copied"] = lambda item: item["question"].split("Input: ")[-1].split("\n")[0]
    if name == "color_cube_rotation":
        policies["start colours copied"] = lambda item: re.findall(r"- an? (\w+) \w+ side", item["question"])[
            0
        ]
    if name == "maze":
        policies["a number (RG's answer shape)"] = lambda item: str(rng.randint(5, 10))
    return {
        policy: statistics.fmean(dataset.score_answer(make(i), i) for i in items)
        for policy, make in policies.items()
    }


PAIRS = [
    ("maze", "maze"),
    ("cryptarithm", "cryptarithm"),
    ("hanoi", "tower_of_hanoi"),
    ("game_of_life", "game_of_life"),
    ("list_functions", "list_functions"),
    ("cube_rotation", "color_cube_rotation"),
]


def main() -> None:
    """Measure, print, and append the report to bench/RESULTS.md."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--no-write", action="store_true", help="print only; do not append to bench/RESULTS.md"
    )
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    speed_rows, trivial_rows = [], []
    for ours, theirs in PAIRS:
        gen, check, full = ours_rates(ours)
        rg_gen, rg_check = rg_rates(theirs)
        speed_rows.append(
            f"| {ours} / {theirs} | {gen:,.0f} | {rg_gen:,.0f} | {gen / rg_gen:.2f}x | {check:,.0f} | {full:,.0f} "
            f"| {rg_check:,.0f} | {check / rg_check:.2f}x |"
        )
        mine, peer = ours_trivial(ours), rg_trivial(theirs)
        for policy in mine:
            trivial_rows.append(
                f"| {ours} / {theirs} | {policy} | {mine[policy]:.3f} | {peer.get(policy, float('nan')):.3f} |"
            )
        print(speed_rows[-1], flush=True)
    load_after = os.getloadavg()[0]
    today = dt.date.today().isoformat()
    report = "\n".join(
        [
            f"## puzzles (P2 families) vs reasoning-gym: speed and trivial answers ({today}, commit {git_commit()})",
            "",
            f"Machine: {os.cpu_count()} cores, Python {platform.python_version()}, 1-min load average "
            f"{load_before:.1f} before and {load_after:.1f} after. {ITEMS} items per family at the default "
            f"difficulty, rates are medians of {RUNS} runs. Reproduce: `.venv/bin/python bench/puzzles_p2.py`.",
            "",
            "| family (Proctor / reasoning-gym) | generated/s Proctor | generated/s RG | ratio | rule checks/s "
            "Proctor | `proctor.score`/s | `score_answer`/s RG | ratio (rule checks) |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
            *speed_rows,
            "",
            "Trivial answers, mean reward over 200 items (the issue's gate: at most 0.05):",
            "",
            "| family | policy | Proctor | reasoning-gym |",
            "|---|---|---:|---:|",
            *trivial_rows,
            "",
            "Proctor generation includes per-item hashed seeds, the content split (test items are rejection-sampled) "
            "and the generators' proofs (cryptarithm solution counting, list-function uniqueness over its whole "
            "program library); reasoning-gym's maze asks for the path length, its game of life pays per cell, its "
            "cube question asks for one face.",
            "",
        ]
    )
    print(report)
    if not args.no_write:
        append_results(report)


if __name__ == "__main__":
    main()
