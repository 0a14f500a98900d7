"""Puzzle benchmark: P1's families against reasoning-gym, and the speed of every registered puzzle family.

Run with `.venv/bin/python bench/puzzles.py` (add `--no-write` for a trial run). In one run, one process:

- (a) for each family both have (sudoku, knights_knaves, countdown, countdown at its `24` level vs
  puzzle24, zebra/zebra_puzzles, futoshiki, n_queens, graph_coloring/graph_color, shortest_path):
  items generated per second at the default difficulty (Proctor: `tasks()` with hashed per-item seeds, the
  content split and the uniqueness proofs; reasoning-gym: `create_dataset(name, seed, size)` indexed item by
  item) and gold answers verified per second (Proctor: the rule checker alone and the full scoring contract
  `proctor.score` in process, result cache off; reasoning-gym: `score_answer`); ratios are Proctor / peer;
- (b) whether seed s+1 repeats seed s shifted by one item (reasoning-gym seeds item i with Random(seed + i));
- (c) the mean reward of trivial answers over ITEMS items side by side: empty, a copy of the question,
  another item's gold answer (a random answer of the right shape for both), ten such answers at once, and
  a 2,000-character answer; reasoning-gym's partial credit shows here;
- (d) for every registered puzzle family (P2's and P3's too): the rule checker's rate on gold answers (target
  >= 10,000/s on one core), the rate through `proctor.score`, and the generation rate at each level, slow
  generators (< 100 items/s) flagged.

Rates are medians of 3 timed runs on one core. Results are printed and appended to bench/RESULTS.md unless
`--no-write`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

os.environ["PROCTOR_CACHE_SIZE"] = "0"  # time the scoring, not the result cache
warnings.filterwarnings("ignore")

import reasoning_gym  # noqa: E402
from common import append_results, git_commit  # noqa: E402  (bench/common.py: the script's folder is on sys.path)

import proctor  # noqa: E402
from proctor.environments.puzzles.base import PuzzleFamily, PuzzleOptions, all_families, get_family  # noqa: E402
from proctor.environments.registry import Task, get_environment  # noqa: E402

ITEMS = 100
RUNS = 3
MIN_SECONDS = 0.3
SLOW_RATE = 100.0
_OPTIONS = PuzzleOptions()

# (label, Proctor family, Proctor level or None for the default, reasoning-gym dataset)
PAIRS = [
    ("sudoku", "sudoku", None, "sudoku"),
    ("knights_knaves", "knights_knaves", None, "knights_knaves"),
    ("countdown", "countdown", None, "countdown"),
    ("24 game", "countdown", "24", "puzzle24"),
    ("zebra", "zebra", None, "zebra_puzzles"),
    ("futoshiki", "futoshiki", None, "futoshiki"),
    ("n_queens", "n_queens", None, "n_queens"),
    ("graph_coloring", "graph_coloring", None, "graph_color"),
    ("shortest_path", "shortest_path", None, "shortest_path"),
]


def median_rate(work: Callable[[], int]) -> float:
    """Items per second: the median of RUNS timed calls of `work`, each repeated to last MIN_SECONDS."""
    rates = []
    for _ in range(RUNS):
        done, start = 0, time.perf_counter()
        while True:
            done += work()
            elapsed = time.perf_counter() - start
            if elapsed >= MIN_SECONDS:
                break
        rates.append(done / elapsed)
    return statistics.median(rates)


def sized(make_one: Callable[[int], Any], budget_s: float = 0.5, cap: int = 400) -> int:
    """How many items fit in about `budget_s`, judged from timing a first item (at least 3)."""
    start = time.perf_counter()
    make_one(0)
    each = max(time.perf_counter() - start, 1e-6)
    return max(3, min(cap, int(budget_s / each)))


# -- the two sides ------------------------------------------------------------------------------------


def proctor_tasks(family: str, level: str | None, count: int, seed: int = 0) -> list[Task]:
    """Proctor's first `count` train tasks of a family at a level."""
    return get_environment(f"puzzle.{family}").tasks("train", seed, count, level)


def rg_items(name: str, count: int, seed: int = 0) -> list[dict[str, Any]]:
    """reasoning-gym's first `count` items of a dataset."""
    dataset = reasoning_gym.create_dataset(name, seed=seed, size=count)
    return [dataset[i] for i in range(count)]


def rg_gold(item: dict[str, Any]) -> str:
    """The peer's gold answer (graph_color stores a possible colouring instead)."""
    if item["answer"] is not None:
        return str(item["answer"])
    return json.dumps({str(k): v for k, v in item["metadata"]["possible_answer"].items()})


def trivial_answers(question: str, others: list[str]) -> dict[str, str]:
    """The trivial policies, as bare answers: each side wraps them as its answer format wants."""
    longest = "\n".join(others)
    while len(longest) < 2000:
        longest += "\n" + longest
    return {
        "empty": "",
        "copy of the question": question,
        "another item's answer": others[0],
        "ten answers at once": "\n".join(others[:10]),
        "2,000-char answer": longest[:2000],
    }


def compare_pair(label: str, family_name: str, level: str | None, peer: str) -> dict[str, Any]:
    """Speed, seed-shift and trivial-policy numbers for one family pair."""
    family = get_family(family_name)
    n_ours = sized(lambda i: proctor_tasks(family_name, level, 1, seed=1000 + i))
    n_peer = sized(lambda i: rg_items(peer, 1, seed=1000 + i))
    ours_gen = median_rate(lambda: len(proctor_tasks(family_name, level, n_ours, seed=7)))
    peer_gen = median_rate(lambda: len(rg_items(peer, n_peer, seed=7)))

    tasks = proctor_tasks(family_name, level, ITEMS)
    items = rg_items(peer, ITEMS)
    parsed = [family.Reference.model_validate(task.reference) for task in tasks]
    golds = [task.metadata["gold_answer"] for task in tasks]
    dataset = reasoning_gym.create_dataset(peer, seed=0, size=ITEMS)
    peer_golds = [rg_gold(item) for item in items]

    def check_ours() -> int:
        for gold, reference in zip(golds, parsed, strict=True):
            family.check(gold, reference)
        return len(golds)

    def score_ours() -> int:
        for gold, task in zip(golds, tasks, strict=True):
            proctor.score(task.verifier, f"<answer>{gold}</answer>", task.reference)
        return len(golds)

    def score_peer() -> int:
        for gold, item in zip(peer_golds, items, strict=True):
            dataset.score_answer(gold, item)
        return len(items)

    checker, contract, peer_verify = median_rate(check_ours), median_rate(score_ours), median_rate(score_peer)
    ours_gold = statistics.mean(
        proctor.score(t.verifier, f"<answer>{g}</answer>", t.reference).reward
        for t, g in zip(tasks, golds, strict=True)
    )
    peer_gold = statistics.mean(
        dataset.score_answer(g, item) for g, item in zip(peer_golds, items, strict=True)
    )

    # Seed s+1 against seed s shifted by one item.
    shifted_ours = [t.metadata["puzzle_id"] for t in proctor_tasks(family_name, level, 11, seed=0)][1:]
    next_ours = [t.metadata["puzzle_id"] for t in proctor_tasks(family_name, level, 10, seed=1)]
    shifted_peer = [item["question"] for item in rg_items(peer, 11, seed=0)][1:]
    next_peer = [item["question"] for item in rg_items(peer, 10, seed=1)]
    leak_ours = sum(a == b for a, b in zip(shifted_ours, next_ours, strict=True)) / 10
    leak_peer = sum(a == b for a, b in zip(shifted_peer, next_peer, strict=True)) / 10

    rng = random.Random(f"bench:{label}")
    ours_policy: dict[str, list[float]] = {}
    peer_policy: dict[str, list[float]] = {}
    for index, (task, item) in enumerate(zip(tasks, items, strict=True)):
        other_ours = [golds[(index + 1 + k) % ITEMS] for k in range(10)]
        other_peer = [peer_golds[(index + 1 + k) % ITEMS] for k in range(10)]
        question = task.prompt[-1]["content"]
        for policy, answer in trivial_answers(question, other_ours).items():
            reward = proctor.score(task.verifier, f"<answer>{answer}</answer>", task.reference).reward
            ours_policy.setdefault(policy, []).append(reward)
        random_answer = family.random_answer(rng, parsed[index])
        reward = proctor.score(task.verifier, f"<answer>{random_answer}</answer>", task.reference).reward
        ours_policy.setdefault("family's random answer", []).append(reward)
        for policy, answer in trivial_answers(item["question"], other_peer).items():
            try:
                reward = float(dataset.score_answer(answer, item))
            except Exception:  # a peer scorer crashing on odd input earns nothing
                reward = 0.0
            peer_policy.setdefault(policy, []).append(reward)
    return {
        "label": label,
        "peer": peer,
        "gen": (ours_gen, peer_gen),
        "verify": (checker, contract, peer_verify),
        "gold": (ours_gold, peer_gold),
        "leak": (leak_ours, leak_peer),
        "policies": {
            policy: (
                statistics.mean(ours_policy[policy]),
                statistics.mean(peer_policy[policy]) if policy in peer_policy else None,
            )
            for policy in ours_policy
        },
    }


def family_speed(family: PuzzleFamily[Any, Any]) -> dict[str, Any]:
    """Rule-checker and contract rates on gold answers, and generation rate per level."""
    tasks = proctor_tasks(family.name, None, 50, seed=3)
    parsed = [family.Reference.model_validate(task.reference) for task in tasks]
    golds = [task.metadata["gold_answer"] for task in tasks]

    def check() -> int:
        for gold, reference in zip(golds, parsed, strict=True):
            family.check(gold, reference)
        return len(golds)

    def contract() -> int:
        for gold, task in zip(golds, tasks, strict=True):
            proctor.score(task.verifier, f"<answer>{gold}</answer>", task.reference)
        return len(golds)

    levels = {}
    for level in sorted(family.levels):
        count = sized(
            lambda i, level=level: proctor_tasks(family.name, level, 1, seed=2000 + i), budget_s=0.3, cap=200
        )
        levels[level] = median_rate(
            lambda level=level, count=count: len(proctor_tasks(family.name, level, count, seed=11))
        )
    return {
        "name": family.name,
        "check": median_rate(check),
        "contract": median_rate(contract),
        "levels": levels,
    }


# -- report -------------------------------------------------------------------------------------------


def _rate(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 else f"{value:.2f}"


def report(pairs: list[dict[str, Any]], speeds: list[dict[str, Any]]) -> str:
    """The markdown section for bench/RESULTS.md."""
    lines = [
        f"## puzzles (P1 families, all families' speed) vs reasoning-gym {reasoning_gym.__version__} "
        f"({dt.date.today().isoformat()}, commit {git_commit()})",
        "",
        f"One process, one core ({platform.processor() or platform.machine()}, Python {platform.python_version()}); "
        f"rates are medians of {RUNS} runs at the default difficulty; ratio = Proctor / reasoning-gym. "
        "Proctor generation includes hashed per-item seeds, the content split and uniqueness proofs "
        "(sudoku, futoshiki, kenken, nonogram, zebra, knights_knaves count solutions up to two).",
        "",
        "| family | reasoning-gym | generated/s Proctor | generated/s RG | ratio | checked/s Proctor rule checker "
        "| scored/s Proctor `proctor.score` | verified/s RG `score_answer` | ratio (score / RG) | gold reward P / RG "
        "| seed s+1 = seed s shifted, P / RG |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in pairs:
        ours_gen, peer_gen = row["gen"]
        checker, contract, peer_verify = row["verify"]
        lines.append(
            f"| {row['label']} | {row['peer']} | {_rate(ours_gen)} | {_rate(peer_gen)} | {ours_gen / peer_gen:.2f} "
            f"| {_rate(checker)} | {_rate(contract)} | {_rate(peer_verify)} | {contract / peer_verify:.2f} "
            f"| {row['gold'][0]:.2f} / {row['gold'][1]:.2f} | {row['leak'][0]:.0%} / {row['leak'][1]:.0%} |"
        )
    lines += [
        "",
        f"Trivial answers, mean reward over {ITEMS} items (the issue's gate: at most 0.05). 'Another item's "
        "answer' is a random answer of the right shape for both sides:",
        "",
        "| family | policy | Proctor | reasoning-gym |",
        "|---|---|---:|---:|",
    ]
    for row in pairs:
        for policy, (ours, peer) in row["policies"].items():
            peer_text = "—" if peer is None else f"{peer:.3f}"
            lines.append(f"| {row['label']} | {policy} | {ours:.3f} | {peer_text} |")
    level_names = sorted(
        {level for speed in speeds for level in speed["levels"]},
        key=lambda n: ({"easy": 0, "medium": 1, "hard": 2}.get(n, 3), n),
    )
    lines += [
        "",
        "Every registered puzzle family: gold answers checked per second by the rule checker alone (target "
        ">= 10,000/s on one core) and through `proctor.score` (reference validation, extraction, Score), and "
        f"items generated per second at each level (**bold**: slower than {SLOW_RATE:.0f}/s):",
        "",
        "| family | rule checker /s | proctor.score /s | "
        + " | ".join(f"gen/s {n}" for n in level_names)
        + " |",
        "|---|---:|---:|" + "---:|" * len(level_names),
    ]
    for speed in speeds:
        cells = []
        for level in level_names:
            rate = speed["levels"].get(level)
            text = "—" if rate is None else _rate(rate)
            cells.append(f"**{text}**" if rate is not None and rate < SLOW_RATE else text)
        lines.append(
            f"| {speed['name']} | {_rate(speed['check'])} | {_rate(speed['contract'])} | "
            + " | ".join(cells)
            + " |"
        )
    checks = sorted(speed["check"] for speed in speeds)
    contracts = sorted(speed["contract"] for speed in speeds)
    lines += [
        "",
        f"Rule checkers: median {_rate(statistics.median(checks))}/s, slowest {_rate(checks[0])}/s; "
        f"through proctor.score: median {_rate(statistics.median(contracts))}/s, slowest {_rate(contracts[0])}/s.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    """Run the benchmark, print it, append it to bench/RESULTS.md unless --no-write."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-write", action="store_true", help="print only; do not append to RESULTS.md")
    parser.add_argument("--only", help="comma-separated pair labels to run (trial runs)")
    args = parser.parse_args()
    wanted = set(args.only.split(",")) if args.only else None
    pairs = [compare_pair(*pair) for pair in PAIRS if wanted is None or pair[0] in wanted]
    speeds = [family_speed(family) for family in all_families() if wanted is None or family.name in wanted]
    text = report(pairs, speeds)
    print(text)
    if not args.no_write:
        append_results(text)


if __name__ == "__main__":
    main()
