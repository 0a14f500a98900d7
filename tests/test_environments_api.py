"""Environments over real HTTP (uvicorn on a free port), in process, and through the `proctor tasks` CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from proctor.contract import RequestError
from proctor.environments.registry import get_environment


def test_list_environments_over_http(live_server: str):
    listed = httpx.get(f"{live_server}/v1/environments", timeout=30).json()
    names = {env["name"] for env in listed}
    assert {"puzzle.sudoku", "puzzle.countdown", "puzzle.mix"} <= names
    sudoku = next(env for env in listed if env["name"] == "puzzle.sudoku")
    assert sudoku["verifier"] == "puzzle.sudoku" and sudoku["version"]
    assert {"easy", "medium", "hard"} <= set(sudoku["difficulty_levels"])
    assert "sizes" in sudoku["config_schema"]["properties"]
    one = httpx.get(f"{live_server}/v1/environments/puzzle.sudoku", timeout=30).json()
    assert one["name"] == "puzzle.sudoku"
    missing = httpx.get(f"{live_server}/v1/environments/puzzle.nope", timeout=30)
    assert missing.status_code == 404 and "puzzle.sudoku" in missing.json()["error"]["message"]


def test_make_tasks_and_score_them_over_http(live_server: str):
    body = {"split": "test", "seed": 3, "count": 4, "difficulty": "easy"}
    made = httpx.post(f"{live_server}/v1/environments/puzzle.sudoku/tasks", json=body, timeout=60)
    assert made.status_code == 200, made.text
    tasks = made.json()["tasks"]
    assert len(tasks) == 4 and all(t["metadata"]["split"] == "test" for t in tasks)
    # Byte-identical to in-process generation.
    local = get_environment("puzzle.sudoku").tasks("test", 3, 4, "easy")
    assert tasks == [task.model_dump(mode="json") for task in local]
    for task in tasks:
        gold = task["metadata"]["gold_answer"]
        request = {
            "verifier": task["verifier"],
            "response": f"<answer>{gold}</answer>",
            "reference": task["reference"],
        }
        score = httpx.post(f"{live_server}/v1/score", json=request, timeout=30).json()
        assert score["reward"] == 1.0 and score["status"] == "ok", score
        request["response"] = "<answer>" + gold.replace("1", "2", 1) + "</answer>"
        assert httpx.post(f"{live_server}/v1/score", json=request, timeout=30).json()["reward"] == 0.0


def test_mix_over_http_names_each_tasks_verifier(live_server: str):
    body = {
        "count": 12,
        "seed": 1,
        "config": {"weights": {"sudoku": 1, "countdown": 2}, "difficulty": "easy"},
    }
    made = httpx.post(f"{live_server}/v1/environments/puzzle.mix/tasks", json=body, timeout=60)
    assert made.status_code == 200, made.text
    verifiers = {task["verifier"] for task in made.json()["tasks"]}
    assert verifiers == {"puzzle.sudoku", "puzzle.countdown"}


@pytest.mark.parametrize(
    ("name", "body", "status", "field"),
    [
        ("puzzle.nope", {}, 404, "name"),
        ("puzzle.sudoku", {"difficulty": "impossible"}, 422, "difficulty"),
        ("puzzle.sudoku", {"config": {"sizes": [5]}}, 422, "config.sizes.0"),
        ("puzzle.sudoku", {"config": {"colour": 3}}, 422, "config.colour"),
        ("puzzle.sudoku", {"count": 0}, 422, "count"),
        ("puzzle.sudoku", {"count": 100_000}, 422, "count"),
        ("puzzle.sudoku", {"split": "validation"}, 422, "split"),
        ("puzzle.sudoku", {"seed": -1}, 422, "seed"),
        ("puzzle.sudoku", {"seed": 2**53}, 422, "seed"),  # past what a double holds exactly
        ("puzzle.sudoku", {"seed": 9223372036854776000}, 422, "seed"),
        ("puzzle.sudoku", {"extra": 1}, 422, "extra"),
        ("puzzle.mix", {"config": {"weights": {"nope": 1}}}, 422, "config.weights"),
        ("puzzle.mix", {"config": {"weights": {"sudoku": 0}}}, 422, "config.weights"),
    ],
)
def test_bad_task_requests_name_the_field(live_server: str, name: str, body: dict, status: int, field: str):
    answer = httpx.post(f"{live_server}/v1/environments/{name}/tasks", json=body, timeout=30)
    assert answer.status_code == status, answer.text
    assert answer.json()["error"]["field"] == field


def test_in_process_errors_are_request_errors():
    with pytest.raises(RequestError) as caught:
        get_environment("puzzle.kenken").tasks(count=1, config={"min_size": 99})
    assert caught.value.status == 422 and caught.value.field == "config.min_size"


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "proctor", *args], capture_output=True, text=True, timeout=120, cwd=cwd
    )


def test_cli_writes_tasks_jsonl(tmp_path: Path):
    out = tmp_path / "tasks.jsonl"
    done = _cli("tasks", "puzzle.countdown", "--count", "5", "--seed", "9", "--split", "test",
                "--difficulty", "hard", "-o", str(out), cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    local = get_environment("puzzle.countdown").tasks("test", 9, 5, "hard")
    assert rows == [task.model_dump(mode="json") for task in local]
    assert all(row["metadata"]["difficulty"] == "hard" for row in rows)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["tasks", "puzzle.nope"], "unknown environment"),
        (["tasks", "puzzle.sudoku", "--count", "many"], "--count must be an integer"),
        (["tasks", "puzzle.sudoku", "--count", "0"], "--count must be in"),
        (["tasks", "puzzle.sudoku", "--seed", "-3"], "--seed must be in"),
        (["tasks", "puzzle.sudoku", "--split", "dev"], "--split must be train or test"),
        (["tasks", "puzzle.sudoku", "--difficulty", "insane"], "unknown difficulty"),
        (["tasks", "puzzle.sudoku", "--config", "{bad"], "--config is not valid JSON"),
        (["tasks", "puzzle.sudoku", "--config", '{"sizes": [7]}'], "config.sizes"),
        (["tasks", "puzzle.sudoku", "-o", "/nonexistent/dir/x.jsonl"], "cannot write"),
    ],
)
def test_cli_bad_input_is_one_line(tmp_path: Path, args: list[str], needle: str):
    done = _cli(*args, cwd=tmp_path)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("proctor: ") and needle in lines[0], done.stderr


def test_config_overrides_the_level_and_is_labelled_custom():
    env = get_environment("puzzle.sudoku")
    tasks = env.tasks("train", 0, 3, difficulty="easy", config={"sizes": [6]})
    assert all(t.metadata["difficulty"] == "custom" for t in tasks)
    assert all(t.metadata["config"]["sizes"] == [6] and len(t.reference["grid"]) == 6 for t in tasks)
    assert tasks[0].metadata["config"]["min_givens_fraction"] == env.levels["easy"]["min_givens_fraction"]
    default = env.tasks("train", 0, 1)[0]
    assert default.metadata["difficulty"] == env.default_level == "medium"


def test_mix_is_deterministic_split_clean_and_weighted():
    env = get_environment("puzzle.mix")
    first = env.tasks("test", 5, 60)
    assert [t.model_dump() for t in first] == [t.model_dump() for t in env.tasks("test", 5, 60)]
    assert len({t.verifier for t in first}) >= 10  # default weights: every family
    assert all(t.metadata["split"] == "test" for t in first)
    train_ids = {t.metadata["puzzle_id"] for t in env.tasks("train", 5, 60)}
    assert not train_ids & {t.metadata["puzzle_id"] for t in first}
    only = env.tasks("train", 1, 20, config={"weights": {"puzzle.nonogram": 1, "maze": 0}})
    assert {t.verifier for t in only} == {"puzzle.nonogram"}


# -- deadline ----------------------------------------------------------------------------------------


async def test_slow_generation_hits_its_deadline_without_blocking_other_requests(monkeypatch):
    import asyncio
    import threading
    import time

    from proctor.api import environments as environments_api
    from proctor.api.app import create_app
    from proctor.settings import Settings

    # 1,000 hard cryptarithms take about a minute; with a 1 s deadline the request must end at once.
    monkeypatch.setattr(environments_api, "TASKS_DEADLINE_S", 1.0)
    app = create_app(Settings(pool_workers=1))
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://t") as client,
    ):
        started = time.monotonic()
        slow = asyncio.ensure_future(
            client.post(
                "/v1/environments/puzzle.cryptarithm/tasks", json={"count": 1000, "difficulty": "hard"}
            )
        )
        await asyncio.sleep(0.2)
        health = await client.get("/healthz")  # the event loop is free while the generator runs
        assert health.status_code == 200 and not slow.done()
        response = await slow
        assert response.status_code == 422, response.text
        error = response.json()["error"]
        assert "longer than 1 s" in error["message"] and error["field"] == "count"
        assert time.monotonic() - started < 10
        deadline = time.monotonic() + 10  # the generating thread is stopped, not left running
        while any(t.name == "proctor-tasks" for t in threading.enumerate()) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert not any(t.name == "proctor-tasks" for t in threading.enumerate())
        fine = await client.post("/v1/environments/puzzle.sudoku/tasks", json={"count": 2})
        assert fine.status_code == 200 and len(fine.json()["tasks"]) == 2


@pytest.mark.parametrize("body", [{"seed": False}, {"seed": True}, {"count": True}, {"seed": 1.5}])
def test_task_seed_and_count_are_integers_not_booleans(live_server: str, body: dict):
    response = httpx.post(f"{live_server}/v1/environments/puzzle.sudoku/tasks", json=body, timeout=60)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["field"] == next(iter(body))
    # JSON Schema's "integer" includes 2.0, so the schema-valid spelling is accepted.
    two = httpx.post(f"{live_server}/v1/environments/puzzle.sudoku/tasks", json={"count": 2.0}, timeout=60)
    assert two.status_code == 200 and len(two.json()["tasks"]) == 2
