"""Puzzle benchmark: Proctor's puzzle families against reasoning-gym, and the speed of every registered family.

Run with `.venv/bin/python bench/puzzles.py` (about 4 minutes on a loaded 2-core machine; `--quick` for a
short trial with fewer items and shorter timings, `--no-write` to print only, `--only a,b` for some pairs).
In one process, one core:

- (a) for every Proctor family with a reasoning-gym counterpart (PAIRS; three are the same skill asked
  differently: arithmetic_chain / gsm_symbolic, matrix / manipulate_matrix, sat / propositional_logic,
  constrained_sorting / number_sorting): items generated per second at each side's default difficulty
  (Proctor: `tasks()` with hashed per-item seeds, the content split and the generators' proofs;
  reasoning-gym: `create_dataset(name, seed, size)` indexed item by item) and gold answers verified per
  second (Proctor: the rule checker alone and the full scoring contract `proctor.score` in process, result
  cache off; reasoning-gym: `score_answer`), with ratios Proctor / reasoning-gym;
- (b) whether seed s+1 repeats seed s shifted by one item (reasoning-gym seeds item i with Random(seed + i));
- (c) the mean reward of trivial answers side by side: empty, a copy of the question, a random answer of the
  right shape, another item's gold answer, the gold with one character appended (`-41` for `-4`), the most
  common gold given to every item, ten answers at once, a 2,000-character answer, and each pair's own cheats;
- (d) for all registered families: the rule checker's rate on gold answers (target >= 10,000/s on one
  core), the rate through `proctor.score` beside it, and the generation rate at every level, with every
  generator slower than SLOW_RATE listed.

Rates are medians of RUNS timed runs, each repeated to last at least MIN_SECONDS. The section is printed and
appended to bench/RESULTS.md unless `--no-write`.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import io
import json
import os
import platform
import random
import re
import statistics
import time
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

os.environ["PROCTOR_CACHE_SIZE"] = "0"  # time the scoring, not the result cache
warnings.filterwarnings("ignore")

import reasoning_gym  # noqa: E402
from common import append_results, git_commit  # noqa: E402  (bench/common.py: the script's folder is on sys.path)

import proctor  # noqa: E402
from proctor.environments.puzzles.base import PuzzleFamily, all_families, get_family  # noqa: E402
from proctor.environments.puzzles.cube_rotation import FACES  # noqa: E402
from proctor.environments.registry import Task, get_environment  # noqa: E402

SLOW_RATE = 100.0
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
LEVEL_ORDER = {"easy": 0, "medium": 1, "hard": 2}


@dataclass
class Settings:
    """How long to measure: the full run or `--quick`."""

    items: int = 100
    runs: int = 3
    min_seconds: float = 0.1
    speed_items: int = 50


SETTINGS = Settings()
Item = dict[str, Any]
Cheat = tuple[Callable[[Task], str] | None, Callable[[Item], str] | None]


# -- shared timing helpers ------------------------------------------------------------------------


def median_rates(work: Callable[[], int]) -> tuple[float, float]:
    """Items per wall second and per CPU second of this process: medians of RUNS timed runs of `work`.

    `work` returns how many items it did; each run repeats it for at least MIN_SECONDS. The CPU rate is what
    one core delivers on a machine shared with other jobs (pool workers of other processes are not counted).
    """
    wall, cpu = [], []
    for _ in range(SETTINGS.runs):
        done, start, start_cpu = 0, time.perf_counter(), time.process_time()
        while True:
            done += work()
            elapsed = time.perf_counter() - start
            if elapsed >= SETTINGS.min_seconds:
                break
        wall.append(done / elapsed)
        cpu.append(done / max(time.process_time() - start_cpu, 1e-9))
    return statistics.median(wall), statistics.median(cpu)


def median_rate(work: Callable[[], int]) -> float:
    """Items per wall second, the median of RUNS timed runs of `work`."""
    return median_rates(work)[0]


def generation_rate(make: Callable[[int, int], int], budget_s: float = 0.25, cap: int = 200) -> float:
    """Generation rate of `make(seed, count)`: a batch sized from one timed item, at least 3 items, new seeds."""
    start = time.perf_counter()
    make(10_000, 1)
    count = max(3, min(cap, int(budget_s / max(time.perf_counter() - start, 1e-6))))
    seeds = iter(range(20_000, 30_000))
    return median_rate(lambda: make(next(seeds), count))


def verify_rate(
    verify: Callable[[str, Any], Any], answers: list[str], targets: list[Any]
) -> tuple[float, float]:
    """Rates (per wall second, per CPU second) of `verify(answer, target)` over the given pairs."""

    def work() -> int:
        for answer, target in zip(answers, targets, strict=True):
            verify(answer, target)
        return len(answers)

    return median_rates(work)


# -- the two sides ---------------------------------------------------------------------------------


def proctor_tasks(family: str, level: str | None, count: int, seed: int = 0) -> list[Task]:
    """Proctor's first `count` train tasks of a family at a level (None: the default)."""
    return get_environment(f"puzzle.{family}").tasks("train", seed, count, level)


def proctor_reward(task: Task, answer: str) -> float:
    """The reward of `<answer>answer</answer>` through the full scoring contract."""
    return proctor.score(task.verifier, f"<answer>{answer}</answer>", task.reference).reward


def rg_items(name: str, count: int, seed: int = 0) -> list[Item]:
    """reasoning-gym's first `count` items of a dataset at its default config."""
    dataset = reasoning_gym.create_dataset(name, seed=seed, size=count)
    return [dataset[i] for i in range(count)]


def rg_gold(item: Item) -> str:
    """The peer's gold answer (graph_color and propositional_logic store an example answer instead)."""
    if item["answer"] is not None:
        return str(item["answer"])
    metadata = item["metadata"]
    if "possible_answer" in metadata:
        return json.dumps({str(k): v for k, v in metadata["possible_answer"].items()})
    return str(metadata["example_answer"])


def rg_reward(dataset: Any, answer: str, item: Item) -> float:
    """The peer's score; a scorer crashing on odd input earns nothing."""
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # tower_of_hanoi prints every invalid move
            return float(dataset.score_answer(answer, item))
    except Exception:
        return 0.0


def near_miss(gold: str) -> str:
    """The gold answer with one more character: a 1 after a number (a 0 could keep the value: 00, 2.50), else X."""
    return gold + ("1" if gold[-1:].isdigit() else "X")


def rg_random(peer: str, item: Item, rng: random.Random) -> str | None:
    """A random answer in the peer's answer shape, where the benchmark knows the shape (None otherwise)."""
    meta, gold = item["metadata"], rg_gold(item)
    if peer == "maze":  # the peer asks for the path length
        return str(rng.randint(5, 10))
    if peer == "cryptarithm":
        letters = sorted(meta["letter_to_digit"])
        digits = rng.sample(range(10), len(letters))
        return ",".join(f"{letter}={digit}" for letter, digit in zip(letters, digits, strict=False))
    if peer == "tower_of_hanoi":
        moves = []
        for _ in range(len(gold.splitlines())):
            a, b = rng.sample(range(1, meta["num_pegs"] + 1), 2)
            moves.append(f"Move disk {rng.randint(1, meta['num_disks'])} from Peg {a} to Peg {b}")
        return "\n".join(moves)
    if peer == "game_of_life":
        width, height = meta["grid_size_x"], meta["grid_size_y"]
        return json.dumps([[rng.randint(0, 1) for _ in range(width)] for _ in range(height)])
    if peer == "list_functions":
        return str([rng.randint(0, 99) for _ in gold.split(",")])
    if peer == "color_cube_rotation":
        return rng.choice(re.findall(r"- an? (\w+) \w+ side", item["question"]))
    if peer == "self_reference":
        return str(rng.randint(0, 7))
    if peer == "calendar_arithmetic":
        if gold in WEEKDAYS:
            return rng.choice(WEEKDAYS)
        if gold in ("Yes", "No"):
            return rng.choice(("Yes", "No"))
        return str(rng.randint(0, 2 * int(gold) + 1))
    if peer == "base_conversion":
        digits = "0123456789abcdefghijklmnopqrstuvwxyz"[: meta["target_base"]]
        return "".join(rng.choice(digits) for _ in gold)
    if peer == "caesar_cipher":
        return " ".join("".join(chr(65 + rng.randrange(26)) for _ in word) for word in gold.split(" "))
    if peer == "gsm_symbolic":
        return str(rng.randint(0, 2 * abs(int(float(gold))) + 10))
    if peer == "manipulate_matrix":
        return "\n".join(" ".join(str(rng.randint(0, 9)) for _ in row.split()) for row in gold.split("\n"))
    if peer == "propositional_logic":
        return rng.choice(meta["variables"])
    return None


# -- the pairs -------------------------------------------------------------------------------------


def _gol_dead_ours(task: Task) -> str:
    return "\n".join("0" * len(row) for row in task.reference["board"])


def _gol_dead_peer(item: Item) -> str:
    width, height = item["metadata"]["grid_size_x"], item["metadata"]["grid_size_y"]
    return json.dumps([[0] * width for _ in range(height)])


def _cube_colours(item: Item) -> str:
    return re.findall(r"- an? (\w+) \w+ side", item["question"])[0]


@dataclass(frozen=True)
class Pair:
    """A Proctor family (at a level, None for the default) and its reasoning-gym counterpart."""

    label: str
    family: str
    level: str | None
    peer: str
    cheats: dict[str, Cheat] = field(default_factory=dict)


PAIRS = [
    Pair("sudoku", "sudoku", None, "sudoku"),
    Pair("sudoku easy (4x4, 6x6) / mini_sudoku", "sudoku", "easy", "mini_sudoku"),
    Pair("knights_knaves", "knights_knaves", None, "knights_knaves"),
    Pair("countdown", "countdown", None, "countdown"),
    Pair("countdown level 24 / puzzle24", "countdown", "24", "puzzle24"),
    Pair("zebra / zebra_puzzles", "zebra", None, "zebra_puzzles"),
    Pair("futoshiki", "futoshiki", None, "futoshiki"),
    Pair("n_queens", "n_queens", None, "n_queens"),
    Pair("graph_coloring / graph_color", "graph_coloring", None, "graph_color"),
    Pair("shortest_path", "shortest_path", None, "shortest_path"),
    Pair("maze", "maze", None, "maze"),
    Pair("cryptarithm", "cryptarithm", None, "cryptarithm"),
    Pair("hanoi / tower_of_hanoi", "hanoi", None, "tower_of_hanoi"),
    Pair(
        "game_of_life",
        "game_of_life",
        None,
        "game_of_life",
        {
            "all-dead board": (_gol_dead_ours, _gol_dead_peer),
            "start board copied": (
                lambda t: "\n".join(t.reference["board"]),
                lambda item: item["question"].split("\n\n", 1)[1].rstrip(".").replace("\n", ""),
            ),
        },
    ),
    Pair(
        "list_functions",
        "list_functions",
        None,
        "list_functions",
        {
            "test input copied": (
                lambda t: str(t.reference["test_input"]),
                lambda item: item["question"].split("Input: ")[-1].split("\n")[0],
            )
        },
    ),
    Pair(
        "cube_rotation / color_cube_rotation",
        "cube_rotation",
        None,
        "color_cube_rotation",
        {
            "start colours copied": (
                lambda t: ", ".join(f"{f}: {c}" for f, c in zip(FACES, t.reference["colours"], strict=True)),
                _cube_colours,
            )
        },
    ),
    Pair("self_reference", "self_reference", None, "self_reference"),
    Pair("calendar_arithmetic", "calendar_arithmetic", None, "calendar_arithmetic"),
    Pair("base_conversion", "base_conversion", None, "base_conversion"),
    Pair(
        "cipher / caesar_cipher",
        "cipher",
        None,
        "caesar_cipher",
        {"given text copied": (lambda t: t.reference["text"], lambda item: item["metadata"]["cipher_text"])},
    ),
    Pair("arithmetic_chain / gsm_symbolic (same skill)", "arithmetic_chain", None, "gsm_symbolic"),
    Pair(
        "matrix / manipulate_matrix (same skill)",
        "matrix",
        None,
        "manipulate_matrix",
        {
            "input matrix copied": (
                lambda t: str(t.reference["a"] or t.reference["matrices"][0]),
                lambda item: "\n".join(" ".join(map(str, r)) for r in item["metadata"]["matrix"]),
            )
        },
    ),
    Pair(
        "sat / propositional_logic (same skill)",
        "sat",
        None,
        "propositional_logic",
        {
            "UNSAT for all": (lambda t: "UNSAT", None),
            "tautology (P ∨ ¬P)": (
                None,
                lambda item: f"({item['metadata']['variables'][0]} ∨ ¬{item['metadata']['variables'][0]})",
            ),
        },
    ),
    Pair("constrained_sorting / number_sorting (same skill)", "constrained_sorting", None, "number_sorting"),
]

POLICIES = (
    "empty",
    "copy of the question",
    "random, right shape",
    "another item's answer",
    "gold + one character",
    "most common gold for all",
    "ten answers at once",
    "2,000-char answer",
)


def generic_answers(question: str, gold: str, others: list[str], common: str) -> dict[str, str]:
    """The trivial policies every family faces, as bare answers (each side wraps them its own way)."""
    longest = "\n".join(others)
    while len(longest) < 2000:
        longest += "\n" + longest
    return {
        "empty": "",
        "copy of the question": question,
        "another item's answer": others[0],
        "gold + one character": near_miss(gold),
        "most common gold for all": common,
        "ten answers at once": "\n".join(others[:10]),
        "2,000-char answer": longest[:2000],
    }


# -- measurements ----------------------------------------------------------------------------------


@dataclass
class FamilySpeed:
    """One family's verification rates on gold answers (at one level) and generation rates per level."""

    name: str
    check: float
    check_cpu: float
    contract: float
    levels: dict[str, float] = field(default_factory=dict)


def verification_speed(family: PuzzleFamily[Any, Any], level: str | None) -> tuple[float, float, float]:
    """(rule checker /s, rule checker /CPU-s, proctor.score /s) on gold answers at a level."""
    tasks = proctor_tasks(family.name, level, SETTINGS.speed_items, seed=3)
    golds = [task.metadata["gold_answer"] for task in tasks]
    parsed = [family.Reference.model_validate(task.reference) for task in tasks]
    if proctor_reward(tasks[0], golds[0]) != 1.0:  # also starts pool workers outside the timing
        raise AssertionError(f"{family.name}: gold answer scored below 1")
    check, check_cpu = verify_rate(family.check, golds, parsed)
    contract = verify_rate(lambda gold, task: proctor_reward(task, gold), golds, tasks)[0]
    return check, check_cpu, contract


def family_speed(family: PuzzleFamily[Any, Any]) -> FamilySpeed:
    """Checker and contract rates at the default level, and the generation rate at every level."""
    check, check_cpu, contract = verification_speed(family, None)
    levels = {
        level: generation_rate(
            lambda seed, count, level=level: len(proctor_tasks(family.name, level, count, seed))
        )
        for level in family.levels
    }
    return FamilySpeed(family.name, check, check_cpu, contract, levels)


def compare_pair(pair: Pair, speeds: dict[str, FamilySpeed]) -> dict[str, Any]:
    """Speed, seed-shift and trivial-policy numbers for one pair."""
    family = get_family(pair.family)
    level = pair.level or family.default_level
    ours_gen = speeds[pair.family].levels[level]
    if pair.level is None:
        checker, contract = speeds[pair.family].check, speeds[pair.family].contract
    else:
        checker, _, contract = verification_speed(family, pair.level)
    peer_gen = generation_rate(lambda seed, count: len(rg_items(pair.peer, count, seed)))

    count = SETTINGS.items
    tasks = proctor_tasks(pair.family, pair.level, count)
    items = rg_items(pair.peer, count)
    dataset = reasoning_gym.create_dataset(pair.peer, seed=0, size=count)
    golds = [task.metadata["gold_answer"] for task in tasks]
    peer_golds = [rg_gold(item) for item in items]
    peer_verify = verify_rate(lambda gold, item: dataset.score_answer(gold, item), peer_golds, items)[0]
    gold_reward = (
        statistics.mean(proctor_reward(t, g) for t, g in zip(tasks, golds, strict=True)),
        statistics.mean(rg_reward(dataset, g, i) for g, i in zip(peer_golds, items, strict=True)),
    )

    # Seed s+1 against seed s shifted by one item (items 1..10 of seed 0 are already here).
    next_ours = [t.metadata["puzzle_id"] for t in proctor_tasks(pair.family, pair.level, 10, seed=1)]
    next_peer = [item["question"] for item in rg_items(pair.peer, 10, seed=1)]
    shifted_ours = [t.metadata["puzzle_id"] for t in tasks[1:11]]
    shifted_peer = [item["question"] for item in items[1:11]]
    leak = (
        statistics.mean(a == b for a, b in zip(shifted_ours, next_ours, strict=True)),
        statistics.mean(a == b for a, b in zip(shifted_peer, next_peer, strict=True)),
    )

    rng = random.Random(f"bench:{pair.label}")
    common_ours = Counter(golds).most_common(1)[0][0]
    common_peer = Counter(peer_golds).most_common(1)[0][0]
    ours: dict[str, list[float]] = {}
    peer: dict[str, list[float]] = {}
    for index, (task, item) in enumerate(zip(tasks, items, strict=True)):
        others = [golds[(index + 1 + k) % count] for k in range(10)]
        answers = generic_answers(task.prompt[-1]["content"], golds[index], others, common_ours)
        answers["random, right shape"] = family.random_answer(
            rng, family.Reference.model_validate(task.reference)
        )
        answers |= {name: make(task) for name, (make, _) in pair.cheats.items() if make is not None}
        for policy, answer in answers.items():
            ours.setdefault(policy, []).append(proctor_reward(task, answer))

        others = [peer_golds[(index + 1 + k) % count] for k in range(10)]
        answers = generic_answers(item["question"], peer_golds[index], others, common_peer)
        random_answer = rg_random(pair.peer, item, rng)
        if random_answer is not None:
            answers["random, right shape"] = random_answer
        answers |= {name: make(item) for name, (_, make) in pair.cheats.items() if make is not None}
        for policy, answer in answers.items():
            peer.setdefault(policy, []).append(rg_reward(dataset, answer, item))
    return {
        "pair": pair,
        "gen": (ours_gen, peer_gen),
        "verify": (checker, contract, peer_verify),
        "gold": gold_reward,
        "leak": leak,
        "policies": {
            policy: (
                statistics.mean(ours[policy]) if policy in ours else None,
                statistics.mean(peer[policy]) if policy in peer else None,
            )
            for policy in [*POLICIES, *pair.cheats]
        },
    }


# -- report ----------------------------------------------------------------------------------------


def _rate(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 else f"{value:.2f}"


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if a / b >= 0.01 else f"{a / b:.4f}"


def _reward(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def _slow(speeds: list[FamilySpeed]) -> list[tuple[str, str, float]]:
    return [
        (speed.name, level, rate)
        for speed in speeds
        for level, rate in speed.levels.items()
        if rate < SLOW_RATE
    ]


def highest_trivial(rows: list[dict[str, Any]], side: int) -> tuple[float, str, str]:
    """(reward, pair, policy) of one side's best-paid trivial answer, leaving out the most common gold."""
    return max(
        (value[side], row["pair"].label, policy)
        for row in rows
        for policy, value in row["policies"].items()
        if value[side] is not None and policy != "most common gold for all"
    )


def report(
    rows: list[dict[str, Any]], speeds: list[FamilySpeed], seconds: float, loads: tuple[float, float]
) -> str:
    """The markdown section for bench/RESULTS.md."""
    lines = [
        f"## puzzles: Proctor vs reasoning-gym {reasoning_gym.__version__}, and every family's speed "
        f"({dt.date.today().isoformat()}, commit {git_commit()})",
        "",
        f"One process, one core ({platform.machine()}, {os.cpu_count()} cores shared, Python "
        f"{platform.python_version()}, 1-min load average {loads[0]:.1f} before and {loads[1]:.1f} after); "
        f"the run took {seconds:.0f} s. Rates are medians of {SETTINGS.runs} runs of at least "
        f"{SETTINGS.min_seconds} s at each side's default difficulty; ratio = Proctor / reasoning-gym. Proctor "
        "generation includes hashed per-item seeds, the content split and the generators' proofs (uniqueness "
        "for sudoku, futoshiki, kenken, nonogram, zebra, knights_knaves, cryptarithm, list_functions; "
        "solvability for countdown). Reproduce: `.venv/bin/python bench/puzzles.py`.",
        "",
        "| pair (Proctor / reasoning-gym) | generated/s Proctor | generated/s RG | ratio | checked/s Proctor "
        "rule checker | scored/s Proctor `proctor.score` | verified/s RG `score_answer` | ratio checker / RG "
        "| ratio score / RG | gold reward P / RG | seed s+1 = seed s shifted, P / RG |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        (ours_gen, peer_gen), (checker, contract, peer_verify) = row["gen"], row["verify"]
        lines.append(
            f"| {row['pair'].label} | {_rate(ours_gen)} | {_rate(peer_gen)} | {_ratio(ours_gen, peer_gen)} "
            f"| {_rate(checker)} | {_rate(contract)} | {_rate(peer_verify)} | {_ratio(checker, peer_verify)} "
            f"| {_ratio(contract, peer_verify)} | {row['gold'][0]:.2f} / {row['gold'][1]:.2f} "
            f"| {row['leak'][0]:.0%} / {row['leak'][1]:.0%} |"
        )
    lines += [
        "",
        f"Trivial answers, mean reward over {SETTINGS.items} items per side, Proctor / reasoning-gym (the "
        "issue's gate: at most 0.05). 'Random, right shape' is the family's own random answer on Proctor's "
        "side and a random answer in the peer's format where the benchmark knows it (— otherwise); 'most common "
        f"gold for all' earns at least 1/{SETTINGS.items} by construction:",
        "",
        "| pair | " + " | ".join(POLICIES) + " |",
        "|---|" + "---:|" * len(POLICIES),
    ]
    for row in rows:
        cells = [f"{_reward(row['policies'][p][0])} / {_reward(row['policies'][p][1])}" for p in POLICIES]
        lines.append(f"| {row['pair'].label} | " + " | ".join(cells) + " |")
    cheats = [(row, name) for row in rows for name in row["pair"].cheats]
    if cheats:
        lines += [
            "",
            "Each pair's own cheats:",
            "",
            "| pair | cheat | Proctor | reasoning-gym |",
            "|---|---|---:|---:|",
        ]
        for row, name in cheats:
            ours, peer = row["policies"][name]
            lines.append(f"| {row['pair'].label} | {name} | {_reward(ours)} | {_reward(peer)} |")

    level_names = sorted(
        {level for speed in speeds for level in speed.levels}, key=lambda n: (LEVEL_ORDER.get(n, 3), n)
    )
    lines += [
        "",
        "Every registered puzzle family: gold answers checked per second by the rule checker alone, per wall "
        "second and per CPU second of the benchmark process (the target, >= 10,000/s on one core, is judged "
        "on the CPU rate because the machine is shared), through `proctor.score` (reference validation, "
        "extraction, Score; wall), and "
        f"items generated per second at each level (**bold**: slower than {SLOW_RATE:.0f}/s):",
        "",
        "| family | rule checker /s | rule checker /CPU-s | proctor.score /s | "
        + " | ".join(f"gen/s {n}" for n in level_names)
        + " |",
        "|---|---:|---:|---:|" + "---:|" * len(level_names),
    ]
    for speed in speeds:
        cells = []
        for level in level_names:
            rate = speed.levels.get(level)
            text = "—" if rate is None else _rate(rate)
            cells.append(f"**{text}**" if rate is not None and rate < SLOW_RATE else text)
        lines.append(
            f"| {speed.name} | {_rate(speed.check)} | {_rate(speed.check_cpu)} | {_rate(speed.contract)} | "
            + " | ".join(cells)
            + " |"
        )
    lines.append("")
    if speeds:
        slowest_check = min(speeds, key=lambda s: s.check_cpu)
        slowest_contract = min(speeds, key=lambda s: s.contract)
        below = [s.name for s in speeds if s.check_cpu < 10_000]
        lines.append(
            f"Rule checkers per CPU second: median {_rate(statistics.median(s.check_cpu for s in speeds))}/s, "
            f"slowest {slowest_check.name} {_rate(slowest_check.check_cpu)}/s; "
            + (f"below 10,000/s: {', '.join(below)}. " if below else "every one above the 10,000/s target. ")
            + f"Through proctor.score: median {_rate(statistics.median(s.contract for s in speeds))}/s, "
            f"slowest {slowest_contract.name} {_rate(slowest_contract.contract)}/s."
        )
        slow = _slow(speeds)
        lines.append(
            f"Slow generators (< {SLOW_RATE:.0f} items/s): "
            + (", ".join(f"{name} {level} {_rate(rate)}/s" for name, level, rate in slow) if slow else "none")
            + "."
        )
    if rows:
        ours, peer = highest_trivial(rows, 0), highest_trivial(rows, 1)
        lines.append(
            f"Highest trivial-answer reward apart from the most common gold: Proctor {ours[0]:.3f} ({ours[1]}, "
            f"{ours[2]}); reasoning-gym {peer[0]:.3f} ({peer[1]}, {peer[2]})."
        )
    lines.append("")
    return "\n".join(lines)


def main() -> None:
    """Run the benchmark, print it, and append it to bench/RESULTS.md unless --no-write."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-write", action="store_true", help="print only; do not append to RESULTS.md")
    parser.add_argument("--quick", action="store_true", help="a short trial: 30 items, 1 run per rate")
    parser.add_argument("--only", help="comma-separated Proctor family names to run (trial runs)")
    args = parser.parse_args()
    if args.quick:
        SETTINGS.items, SETTINGS.runs, SETTINGS.min_seconds, SETTINGS.speed_items = 30, 1, 0.05, 20
    wanted = set(args.only.split(",")) if args.only else None
    loads, start = os.getloadavg()[0], time.perf_counter()
    speeds = {}
    for family in all_families():
        if wanted is None or family.name in wanted:
            speeds[family.name] = family_speed(family)
            print(f"speed {family.name}", flush=True)
    rows = []
    for pair in PAIRS:
        if pair.family in speeds:
            rows.append(compare_pair(pair, speeds))
            print(f"pair {pair.label}", flush=True)
    text = report(rows, list(speeds.values()), time.perf_counter() - start, (loads, os.getloadavg()[0]))
    print(text)
    if not args.no_write:
        append_results(text)


if __name__ == "__main__":
    main()
