"""Every tool environment, over real HTTP: `GET /v1/environments/{name}` lists its gold, cheat and trivial-policy
transcripts with their tasks and expected rewards, replaying each through `/v1/score` gives that reward, and
`POST /v1/environments/{name}/tasks` makes tasks a session accepts exactly as returned.

The test walks whatever tool environments are registered, so a new environment is covered the day it registers.
"""

from __future__ import annotations

import httpx
import pytest


def tool_environments(server: str) -> list[str]:
    """The names of the tool environments the service lists."""
    listed = httpx.get(f"{server}/v1/environments", timeout=60).json()
    return sorted(env["name"] for env in listed if env["kind"] == "tool")


def test_every_tool_environment_lists_replayable_examples(live_server: str) -> None:
    names = tool_environments(live_server)
    assert {"tool.math_python", "tool.search_qa"} <= set(names)
    for name in names:
        described = httpx.get(f"{live_server}/v1/environments/{name}", timeout=60).json()
        examples = described["examples"]
        kinds = {example["kind"] for example in examples}
        assert "gold" in kinds and "cheat" in kinds, (name, kinds)
        for example in examples:
            assert example["task"]["reference"] == example["score_request"]["reference"]
            assert example["task"]["prompt"] == example["transcript"][: len(example["task"]["prompt"])]
            assert all(m["role"] != "assistant" for m in example["task"]["prompt"])
            score = httpx.post(f"{live_server}/v1/score", json=example["score_request"], timeout=120).json()
            assert score["status"] == "ok", (name, example["name"], score)
            assert score["reward"] == example["expected_reward"], (name, example["name"], score)


def test_the_list_of_all_environments_stays_small(live_server: str) -> None:
    """Examples are listed per environment only: the list of all environments does not carry transcripts."""
    listed = httpx.get(f"{live_server}/v1/environments", timeout=60).json()
    assert all("examples" not in env for env in listed)


@pytest.mark.parametrize("name", ["tool.math_python", "tool.search_qa"])
def test_tasks_from_the_route_open_sessions_as_returned(live_server: str, name: str) -> None:
    made = httpx.post(
        f"{live_server}/v1/environments/{name}/tasks", json={"seed": 3, "count": 2}, timeout=120
    )
    assert made.status_code == 200, made.text
    again = httpx.post(
        f"{live_server}/v1/environments/{name}/tasks", json={"seed": 3, "count": 2}, timeout=120
    )
    assert again.json() == made.json()
    task = made.json()["tasks"][1]
    opened = httpx.post(f"{live_server}/v1/sessions", json={"environment": name, "task": task}, timeout=120)
    assert opened.status_code == 201, opened.text
    session = opened.json()
    assert session["messages"] == task["prompt"]
    assert httpx.delete(f"{live_server}/v1/sessions/{session['session_id']}", timeout=60).status_code == 204
