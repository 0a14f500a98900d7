"""Puzzle benchmark for the P3 families that have a reasoning-gym counterpart.

Run with `.venv/bin/python bench/puzzles_p3.py` (add `--no-write` for a trial run). Pairs (Proctor /
reasoning-gym): self_reference / self_reference, calendar_arithmetic / calendar_arithmetic, base_conversion /
base_conversion, cipher / caesar_cipher, arithmetic_chain / gsm_symbolic, matrix / manipulate_matrix,
sat / propositional_logic. The last three ask different questions of the same domain; they are compared
because they are what a user of either suite would train that skill on.

In one run, at each side's default difficulty:
- items generated per second (Proctor: `tasks()`, with hashed per-item seeds, the content split and the
  generators' proofs; reasoning-gym: `create_dataset(name, size=N)` and indexing every item);
- gold answers verified per second (Proctor: the family's rule checker, and the full `proctor.score`
  contract in process with the result cache off; reasoning-gym: `score_answer`);
- mean reward of cheap answers over 200 items: empty, a copy of the question, a random answer of the
  right shape, the gold answer with one character appended (a near miss: `-40` for `-4`), the most common
  gold answer given to every item, and one family-specific cheat where there is one.

Rates are medians of 3 runs; ratios are Proctor / reasoning-gym. Results are printed and appended to
bench/RESULTS.md unless `--no-write`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import random
import statistics
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

os.environ["PROCTOR_CACHE_SIZE"] = "0"  # time the scoring, not the result cache

import reasoning_gym  # noqa: E402
from common import append_results, git_commit  # noqa: E402  (bench/common.py: the script's folder is on sys.path)

import proctor  # noqa: E402
from proctor.environments.puzzles.base import PuzzleOptions, get_family  # noqa: E402
from proctor.environments.registry import Task, get_environment  # noqa: E402

ITEMS = 200
RUNS = 3
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
PAIRS = [
    ("self_reference", "self_reference"),
    ("calendar_arithmetic", "calendar_arithmetic"),
    ("base_conversion", "base_conversion"),
    ("cipher", "caesar_cipher"),
    ("arithmetic_chain", "gsm_symbolic"),
    ("matrix", "manipulate_matrix"),
    ("sat", "propositional_logic"),
]
_OPTIONS = PuzzleOptions()


def median_rate(work: Callable[[], int]) -> float:
    """Items per second: the median over RUNS timed calls of `work` (which returns how many items it did)."""
    rates = []
    for _ in range(RUNS):
        start = time.perf_counter()
        done = work()
        rates.append(done / (time.perf_counter() - start))
    return statistics.median(rates)


def near_miss(gold: str) -> str:
    """The gold answer with one more character: a digit after a number, else a letter."""
    return gold + ("0" if gold[-1:].isdigit() else "X")


# -- Proctor ------------------------------------------------------------------------------------


def ours_tasks(name: str, seed: int) -> list[Task]:
    """ITEMS default-level train tasks."""
    return get_environment(f"puzzle.{name}").tasks("train", seed, ITEMS)


def ours_rates(name: str) -> tuple[float, float, float]:
    """(generated/s, rule checks/s, proctor.score/s) on gold answers."""
    family = get_family(name)
    seeds = iter(range(100, 200))
    generated = median_rate(lambda: len(ours_tasks(name, next(seeds))))
    tasks = ours_tasks(name, 1)
    references = [family.Reference.model_validate(t.reference) for t in tasks]
    golds = [t.metadata["gold_answer"] for t in tasks]

    def check() -> int:
        for gold, reference in zip(golds, references, strict=True):
            if not family.check(gold, reference).correct:
                raise AssertionError(f"{name}: gold rejected")
        return len(golds)

    def score() -> int:
        for task, gold in zip(tasks, golds, strict=True):
            if proctor.score(task.verifier, f"<answer>{gold}</answer>", task.reference).reward != 1.0:
                raise AssertionError(f"{name}: gold scored below 1")
        return len(tasks)

    score()
    return generated, median_rate(check), median_rate(score)


def ours_trivial(name: str) -> dict[str, float]:
    """Mean rewards of the cheap answers on a Proctor family."""
    family = get_family(name)
    rng = random.Random(0)
    tasks = ours_tasks(name, 7)
    common = Counter(t.metadata["gold_answer"] for t in tasks).most_common(1)[0][0]
    policies: dict[str, Callable[[Task], str]] = {
        "empty": lambda t: "",
        "copy of the question": lambda t: t.prompt[-1]["content"],
        "random, right shape": lambda t: family.random_answer(
            rng, family.Reference.model_validate(t.reference)
        ),
        "gold + one character": lambda t: near_miss(t.metadata["gold_answer"]),
        "most common gold for all": lambda t: common,
    }
    if name == "sat":
        policies["UNSAT for all"] = lambda t: "UNSAT"
    if name == "cipher":
        policies["given text copied"] = lambda t: t.reference["text"]
    if name == "matrix":
        policies["input matrix copied"] = lambda t: str(t.reference["a"] or t.reference["matrices"][0])

    def reward(task: Task, answer: str) -> float:
        reference = family.Reference.model_validate(task.reference)
        return family.score(f"<answer>{answer}</answer>", reference, _OPTIONS).reward

    return {policy: statistics.fmean(reward(t, make(t)) for t in tasks) for policy, make in policies.items()}


# -- reasoning-gym -------------------------------------------------------------------------------


def rg_items(name: str, seed: int) -> list[dict[str, Any]]:
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
            dataset.score_answer(_rg_gold(item), item)
        return len(items)

    return generated, median_rate(score)


def _rg_gold(item: dict[str, Any]) -> str:
    answer = item["answer"]
    if answer is None:  # propositional_logic stores an example conclusion instead
        return item["metadata"]["example_answer"]
    return str(answer)


def _rg_random(name: str, item: dict[str, Any], rng: random.Random) -> str:
    gold = _rg_gold(item)
    if name == "self_reference":
        return str(rng.randint(0, 7))
    if name == "calendar_arithmetic":
        if gold in WEEKDAYS:
            return rng.choice(WEEKDAYS)
        if gold in ("Yes", "No"):
            return rng.choice(("Yes", "No"))
        return str(rng.randint(0, 2 * int(gold) + 1))
    if name == "base_conversion":
        digits = "0123456789abcdefghijklmnopqrstuvwxyz"[: item["metadata"]["target_base"]]
        return "".join(rng.choice(digits) for _ in gold)
    if name == "caesar_cipher":
        return " ".join("".join(chr(65 + rng.randrange(26)) for _ in word) for word in gold.split(" "))
    if name == "gsm_symbolic":
        return str(rng.randint(0, 2 * abs(int(float(gold))) + 10))
    if name == "manipulate_matrix":
        return "\n".join(" ".join(str(rng.randint(0, 9)) for _ in row.split()) for row in gold.split("\n"))
    if name == "propositional_logic":
        return rng.choice(item["metadata"]["variables"])
    raise KeyError(name)


def rg_trivial(name: str) -> dict[str, float]:
    """Mean rewards of the cheap answers on a reasoning-gym dataset."""
    dataset = reasoning_gym.create_dataset(name, size=ITEMS, seed=7)
    items = [dataset[i] for i in range(ITEMS)]
    rng = random.Random(0)
    common = Counter(_rg_gold(i) for i in items).most_common(1)[0][0]
    policies: dict[str, Callable[[dict[str, Any]], str]] = {
        "empty": lambda item: "",
        "copy of the question": lambda item: item["question"],
        "random, right shape": lambda item: _rg_random(name, item, rng),
        "gold + one character": lambda item: near_miss(_rg_gold(item)),
        "most common gold for all": lambda item: common,
    }
    if name == "propositional_logic":
        policies["tautology (P ∨ ¬P)"] = lambda item: (
            f"({item['metadata']['variables'][0]} ∨ ¬{item['metadata']['variables'][0]})"
        )
    if name == "caesar_cipher":
        policies["given text copied"] = lambda item: item["metadata"]["cipher_text"]
    if name == "manipulate_matrix":
        policies["input matrix copied"] = lambda item: "\n".join(
            " ".join(map(str, r)) for r in item["metadata"]["matrix"]
        )
    return {
        policy: statistics.fmean(float(dataset.score_answer(make(i), i)) for i in items)
        for policy, make in policies.items()
    }


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
        print(speed_rows[-1], flush=True)
        mine, peer = ours_trivial(ours), rg_trivial(theirs)
        for policy in sorted(set(mine) | set(peer), key=lambda p: (p not in mine or p not in peer, p)):
            ours_value = f"{mine[policy]:.3f}" if policy in mine else "-"
            peer_value = f"{peer[policy]:.3f}" if policy in peer else "-"
            trivial_rows.append(f"| {ours} / {theirs} | {policy} | {ours_value} | {peer_value} |")
    load_after = os.getloadavg()[0]
    report = "\n".join(
        [
            f"## puzzles (P3 families) vs reasoning-gym: speed and cheap answers ({dt.date.today().isoformat()}, "
            f"commit {git_commit()})",
            "",
            f"Machine: {os.cpu_count()} cores, Python {platform.python_version()}, 1-min load average "
            f"{load_before:.1f} before and {load_after:.1f} after. {ITEMS} items per family at the default "
            f"difficulty; rates are medians of {RUNS} runs. Reproduce: `.venv/bin/python bench/puzzles_p3.py`.",
            "",
            "| family (Proctor / reasoning-gym) | generated/s Proctor | generated/s RG | ratio | rule checks/s "
            "Proctor | `proctor.score`/s | `score_answer`/s RG | ratio (rule checks) |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
            *speed_rows,
            "",
            "Cheap answers, mean reward over 200 items (the issue's gate: at most 0.05):",
            "",
            "| family | policy | Proctor | reasoning-gym |",
            "|---|---|---:|---:|",
            *trivial_rows,
            "",
            "Proctor generation includes hashed per-item seeds, the content split and the proofs (exhaustive "
            "truth-table search for self_reference and SAT, the minesweeper uniqueness search is not in this "
            "table). reasoning-gym's self_reference asks for a count of solutions (mostly 2), its calendar "
            "questions are mostly a weekday or a small count, gsm_symbolic and propositional_logic pay partial "
            "credit; sat / propositional_logic, arithmetic_chain / gsm_symbolic and matrix / manipulate_matrix "
            "are different questions on the same skill.",
            "",
        ]
    )
    print(report)
    if not args.no_write:
        append_results(report)


if __name__ == "__main__":
    main()
