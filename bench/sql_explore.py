"""tool.sql_explore: sql tool calls per second (straight to the environment and through in-process sessions),
grades per second, and the trivial-policy gate beside the gold transcripts.

    .venv/bin/python bench/sql_explore.py [--calls 400] [--steps 300] [--seeds 3] [--no-write]

Appends a dated section to bench/RESULTS.md (unless --no-write). There is no peer here: the point is what one
exploration step costs, and that no trivial policy is paid.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import append_results, git_commit  # noqa: E402

import proctor  # noqa: E402
from proctor.contract import ChatMessage  # noqa: E402
from proctor.environments.tools.sql_explore.environment import (  # noqa: E402
    SQL_EXPLORE,
    SqlExploreReference,
    gold_transcript,
    grade,
    trivial_transcripts,
)

QUERIES = [
    "SELECT count(*) FROM book",
    "SELECT genre, count(*) FROM book GROUP BY genre",
    "SELECT m.name, count(*) FROM member m JOIN loan l USING (member_id) GROUP BY m.member_id "
    "ORDER BY 2 DESC LIMIT 10",
    "SELECT title FROM book LIMIT 100",
]


async def direct_calls_per_second(count: int) -> float:
    """`sql` calls per second on one session's state (one warm worker), four mixed queries in turn."""
    state = await SQL_EXPLORE.start(SQL_EXPLORE.make_tasks("train", 0, 1)[0], SQL_EXPLORE.limits())
    try:
        await SQL_EXPLORE.call(state, "sql", {"query": "SELECT 1"})
        started = time.perf_counter()
        for index in range(count):
            result = await SQL_EXPLORE.call(state, "sql", {"query": QUERIES[index % len(QUERIES)]})
            assert result.status == "ok", result
        return count / (time.perf_counter() - started)
    finally:
        await SQL_EXPLORE.close(state)


def session_steps_per_second(count: int) -> float:
    """Steps per second through `proctor.open_session`, 15 calls per session, opening and closing included."""
    task = SQL_EXPLORE.make_tasks("train", 0, 1)[0].model_dump(mode="json")
    with proctor.open_session("tool.sql_explore", task):
        pass  # warm the workers and the copy
    steps = 0
    started = time.perf_counter()
    while steps < count:
        with proctor.open_session("tool.sql_explore", task) as session:
            for index in range(15):
                call = {"name": "sql", "arguments": json.dumps({"query": QUERIES[index % len(QUERIES)]})}
                message = {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{"id": f"c{index}", "type": "function", "function": call}],
                }
                result = session.step(message)
                assert result["tool_results"][0]["status"] == "ok", result
                steps += 1
    return steps / (time.perf_counter() - started)


def gate(seeds: int) -> tuple[int, dict[str, float], float, float]:
    """Mean reward of each trivial policy and of the golds over `seeds` × 100 tasks; grades per second."""
    tasks = [
        task
        for seed in range(seeds)
        for task in SQL_EXPLORE.make_tasks("train", seed, 60) + SQL_EXPLORE.make_tasks("test", seed, 40)
    ]
    rng = random.Random(7)
    totals: dict[str, float] = {}
    golds = 0.0
    grades = 0
    started = time.perf_counter()
    for task in tasks:
        reference = SqlExploreReference.model_validate(task.reference)
        for policy, transcript in trivial_transcripts(task, rng).items():
            verdict = grade(reference, [ChatMessage.model_validate(m) for m in transcript])
            totals[policy] = totals.get(policy, 0.0) + verdict.reward
            grades += 1
        golds += grade(reference, [ChatMessage.model_validate(m) for m in gold_transcript(task)]).reward
        grades += 1
    seconds = time.perf_counter() - started
    return len(tasks), {p: v / len(tasks) for p, v in totals.items()}, golds / len(tasks), grades / seconds


def main() -> None:
    """Measure, print the table and append it to bench/RESULTS.md."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    calls = asyncio.run(direct_calls_per_second(args.calls))
    steps = session_steps_per_second(args.steps)
    tasks, means, gold, grades = gate(args.seeds)
    gate_cells = " / ".join(f"{policy} {mean:.2f}" for policy, mean in means.items())
    report = "\n".join(
        [
            f"## tool.sql_explore: steps, grades and the trivial-policy gate ({time.strftime('%Y-%m-%d')}, "
            f"commit {git_commit()})",
            "",
            f"`.venv/bin/python bench/sql_explore.py --calls {args.calls} --steps {args.steps} --seeds {args.seeds}`"
            " (nsjail sql workers, this machine).",
            "",
            "| measure | value |",
            "|---|---:|",
            f"| `sql` calls per second, straight to the environment | {calls:,.0f} |",
            f"| steps per second through in-process sessions (15 calls each, open and close included) | {steps:,.0f} |",
            f"| grades per second (4 perturbed + 3 derived copies) | {grades:,.1f} |",
            f"| gold transcripts, mean reward over {tasks} tasks | {gold:.2f} |",
            f"| trivial policies, mean reward over the same tasks | {gate_cells} |",
            "",
        ]
    )
    print(report)
    if not args.no_write:
        append_results(report)


if __name__ == "__main__":
    main()
