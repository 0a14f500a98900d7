"""Regression tests for defects found reviewing the puzzle environments (one test per defect)."""

from __future__ import annotations

import random
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

import proctor
from proctor.contract import RequestError
from proctor.environments.registry import get_environment

# A config no generator run can satisfy, found out quickly: two numbers in 1..2 never make 999,983.
UNREACHABLE_24 = {"mode": "24", "count": 2, "max_small": 2, "target": 999_983}


def test_unsatisfiable_config_is_a_422_naming_config_in_process():
    with pytest.raises(RequestError) as caught:
        get_environment("puzzle.countdown").tasks(count=1, config=UNREACHABLE_24)
    assert caught.value.status == 422 and caught.value.field == "config"
    assert "puzzle.countdown" in caught.value.message


def test_unsatisfiable_config_is_a_422_over_http(live_server: str):
    url = f"{live_server}/v1/environments/puzzle.countdown/tasks"
    answer = httpx.post(url, json={"config": UNREACHABLE_24}, timeout=60)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["field"] == "config"
    assert "cannot make tasks" in answer.json()["error"]["message"]


def test_unsatisfiable_config_is_exit_2_in_the_cli(tmp_path: Path):
    done = subprocess.run(
        [sys.executable, "-m", "proctor", "tasks", "puzzle.countdown", "--config",
         '{"mode": "24", "count": 2, "max_small": 2, "target": 999983}'],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot make tasks" in lines[0], done.stderr


def test_countdown_24_mode_refuses_sets_too_big_to_solve_exhaustively():
    # Five or more numbers made each 24-mode attempt an exhaustive search of minutes: a request could pin
    # a worker indefinitely. Now the config is refused up front.
    with pytest.raises(RequestError) as caught:
        get_environment("puzzle.countdown").tasks(count=1, config={"mode": "24", "count": 5})
    assert caught.value.status == 422 and caught.value.field.startswith("config")
    get_environment("puzzle.countdown").tasks(count=1, config={"mode": "countdown", "count": 8})


def _random_maximal_schedule(rng: random.Random, intervals: list[list[int]]) -> list[int]:
    # Written here, not imported: the policy must not share code with the generator it is testing.
    order = list(range(len(intervals)))
    rng.shuffle(order)
    chosen: list[int] = []
    for i in order:
        if all(intervals[i][1] <= intervals[j][0] or intervals[j][1] <= intervals[i][0] for j in chosen):
            chosen.append(i)
    return chosen


def test_activity_scheduling_random_maximal_schedules_earn_nothing():
    # v1 (unweighted default level): a random maximal schedule, no optimising at all, was optimal 45% of
    # the time, while the gate's random answer (any k activities) always overlapped and measured nothing.
    rng = random.Random(4)
    tasks = get_environment("puzzle.activity_scheduling").tasks(count=200)
    total = 0.0
    for task in tasks:
        chosen = _random_maximal_schedule(rng, task.reference["intervals"])
        response = "<answer>" + ", ".join(str(i + 1) for i in chosen) + "</answer>"
        total += proctor.score("puzzle.activity_scheduling", response, task.reference).reward
    assert total / len(tasks) <= 0.05


def _random_walk_path(rng: random.Random, reference: dict) -> str:
    neighbours: dict[int, set[int]] = {}
    for a, b, _ in reference["edges"]:
        neighbours.setdefault(a, set()).add(b)
        neighbours.setdefault(b, set()).add(a)
    path = [reference["start"]]
    for _ in range(20):  # retry stuck walks: the policy wanders until it happens to arrive
        path, seen = [reference["start"]], {reference["start"]}
        while path[-1] != reference["goal"]:
            options = sorted(neighbours[path[-1]] - seen)
            if not options:
                break
            path.append(rng.choice(options))
            seen.add(path[-1])
        if path[-1] == reference["goal"]:
            break
    return " -> ".join(map(str, path))


def test_shortest_path_random_walks_earn_nothing():
    # v1: a random self-avoiding walk from start to goal, reading no weights, was shortest 9% of the time at
    # the default level, and the gate's random answer (random nodes) never even followed edges.
    rng = random.Random(5)
    tasks = get_environment("puzzle.shortest_path").tasks(count=200)
    total = 0.0
    for task in tasks:
        response = f"<answer>{_random_walk_path(rng, task.reference)}</answer>"
        total += proctor.score("puzzle.shortest_path", response, task.reference).reward
    assert total / len(tasks) <= 0.05


def test_shortest_path_unmeetable_config_fails_instead_of_looping():
    # v1 looped forever drawing endpoints when every pair is adjacent (a complete graph of unit weights).
    config = {"min_nodes": 4, "max_nodes": 4, "extra_edges": 5, "max_weight": 1}
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(get_environment("puzzle.shortest_path").tasks, count=1, config=config)
        with pytest.raises(RequestError) as caught:
            future.result(timeout=120)
    assert caught.value.status == 422 and caught.value.field == "config"


def _random_walk_moves(rng: random.Random, grid: list[str]) -> str:
    steps = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}
    start = next((r, c) for r, row in enumerate(grid) for c, char in enumerate(row) if char == "S")
    moves = ""
    for _ in range(20):  # retry stuck walks: the policy wanders until it happens to arrive
        (row, column), seen, moves = start, {start}, ""
        while grid[row][column] != "G":
            options = [
                (move, (row + dr, column + dc))
                for move, (dr, dc) in steps.items()
                if 0 <= row + dr < len(grid) and 0 <= column + dc < len(grid[0])
                and grid[row + dr][column + dc] != "#" and (row + dr, column + dc) not in seen
            ]  # fmt: skip
            if not options:
                break
            move, (row, column) = rng.choice(options)
            seen.add((row, column))
            moves += move
        if grid[row][column] == "G":
            break
    return moves


def test_maze_random_walks_earn_nothing():
    # v1: a random self-avoiding walk from S that reaches G was a shortest path 18% of the time at the default
    # level (48% on easy); the gate's random answer (random letters) mostly hit walls and measured nothing.
    rng = random.Random(6)
    tasks = get_environment("puzzle.maze").tasks(count=200)
    total = 0.0
    for task in tasks:
        response = f"<answer>{_random_walk_moves(rng, task.reference['grid'])}</answer>"
        total += proctor.score("puzzle.maze", response, task.reference).reward
    assert total / len(tasks) <= 0.05


def test_maze_reference_with_a_wrong_shortest_distance_is_refused():
    # v1 trusted the request's `shortest`: claiming 5 for a 3-step maze made a 5-step detour score 1.
    reference = {"grid": ["S..", "...", "..G"], "shortest": 6}
    with pytest.raises(RequestError) as caught:
        proctor.score("puzzle.maze", "<answer>RDRDLR</answer>", reference)
    assert caught.value.status == 422 and "shortest" in caught.value.message
    assert proctor.score("puzzle.maze", "<answer>RRDD</answer>", {**reference, "shortest": 4}).reward == 1.0
