"""Proctor's TRL environment_factory (proctor/adapters/trl_env.py) under trl 1.16.0's contract.

Runs for real: `transformers.utils.get_json_schema` (what renders TRL's tool prompt) on every generated tool
method, and a live Proctor server. TRL's GRPOTrainer needs a model to construct, so its calls are replayed
exactly as trl 1.16.0's `trl/trainer/grpo_trainer.py` makes them: `factory()` then
`inspect.getmembers(type(instance), predicate=inspect.isfunction)` for `reset` and the tools (lines 690-706),
`environment.reset(**x)` with the dataset row (line 2389), `sync_tool_dict[name](**function["arguments"])`
keyed on `tool.__name__` (lines 1982, 2379-2381), and each reward function called with `environments=`
(line 1598).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from transformers.utils import get_json_schema

from proctor.adapters import trl_env
from proctor.client import Client
from tests import agent_adapter_helpers as h


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A live Proctor with the test environments."""
    yield from h.server_fixture(tmp_path_factory)


def tools_of(instance: Any) -> dict[str, Any]:
    """TRL's tool dict for one rollout: public functions of the class, bound, keyed on __name__."""
    members = inspect.getmembers(type(instance), predicate=inspect.isfunction)
    methods = [
        getattr(instance, name)
        for name, _ in members
        if name not in ("reset", "get_reward") and not name.startswith("_")
    ]
    assert "reset" in [name for name, _ in members]
    return {method.__name__: method for method in methods}


def calls_of(text: str) -> list[dict[str, Any]]:
    return [json.loads(part.split("</tool_call>", 1)[0]) for part in text.split("<tool_call>")[1:]]


def run_rollout(env_cls: type, task: dict[str, Any], environment: str, turns: list[str]) -> tuple[Any, Any]:
    """One rollout as TRL runs it: reset with the row, each tool call by name, the final completion."""
    env = env_cls()
    env.reset(prompt="(the dataset prompt)", proctor={"environment": environment, "task": task})
    tools = tools_of(env)
    completion: list[dict[str, Any]] = []
    for text in turns[:-1]:
        for call in calls_of(text):
            result = tools[call["name"]](**call["arguments"])
            completion += [{"role": "assistant", "content": text}, {"role": "tool", "content": result}]
    completion.append({"role": "assistant", "content": turns[-1]})
    return env, completion


def test_tool_methods_read_back_by_get_json_schema(server: str) -> None:
    """transformers' schema reader accepts every generated method and reads back the environment's schema."""
    env_cls = trl_env.environment_factory(h.SEARCH, server_url=server)
    listed = httpx.get(f"{server}/v1/environments/{h.SEARCH}", timeout=30).json()["tools"]
    env = env_cls()
    tools = tools_of(env)
    assert sorted(tools) == sorted(t["function"]["name"] for t in listed)
    for spec in listed:
        function = spec["function"]
        read = get_json_schema(tools[function["name"]])
        assert read["type"] == "function"
        schema = read["function"]
        assert schema["name"] == function["name"]
        assert schema["parameters"]["required"] == function["parameters"]["required"]
        for arg, prop in function["parameters"]["properties"].items():
            assert schema["parameters"]["properties"][arg]["type"] == prop["type"]


def test_optional_and_typed_arguments() -> None:
    """Optional arguments are optional in the signature; JSON types map to Python hints."""
    spec = {
        "name": "lookup",
        "description": "Look up.",
        "parameters": {
            "type": "object",
            "properties": {
                "n": {"type": "integer", "description": "How many."},
                "mode": {"type": "string", "description": "Mode.", "enum": ["a", "b"]},
            },
            "required": ["n"],
        },
    }
    env_cls = trl_env.environment_factory("tool.x", tools=[spec])
    schema = get_json_schema(env_cls().lookup)["function"]
    assert schema["parameters"]["required"] == ["n"]
    assert schema["parameters"]["properties"]["n"]["type"] == "integer"
    assert schema["parameters"]["properties"]["mode"]["enum"] == ["a", "b"]
    with pytest.raises(ValueError, match="Python"):
        trl_env.environment_factory("tool.x", tools=[{**spec, "name": "class"}])
    for taken in ("reset", "get_reward", "session_id"):  # never shadow what TRL or the adapter calls
        with pytest.raises(ValueError, match="taken"):
            trl_env.environment_factory("tool.x", tools=[{**spec, "name": taken}])


@pytest.mark.parametrize("task", h.SEARCH_TASKS[:2], ids=["task0", "task1"])
def test_gold_rewards_equal_replay_and_sessions_close(server: str, task: dict[str, Any]) -> None:
    before = h.open_sessions(server)
    env_cls = trl_env.environment_factory(h.SEARCH, server_url=server)
    env, completion = run_rollout(env_cls, task, h.SEARCH, h.search_script(task))
    session_id = env.session_id
    rewards = trl_env.session_reward()(prompts=[None], completions=[completion], environments=[env])
    assert rewards == [1.0]
    replayed = h.replay(server, h.SEARCH, env.transcript, h.reference_of(server, h.SEARCH, task))
    assert replayed["reward"] == 1.0 and replayed["status"] == "ok"
    assert h.session_gone(server, session_id) and h.open_sessions(server) == before


def test_wrong_answer_is_zero(server: str) -> None:
    task = h.SEARCH_TASKS[0]
    env_cls = trl_env.environment_factory(h.SEARCH, server_url=server)
    env, completion = run_rollout(
        env_cls, task, h.SEARCH, [*h.search_script(task)[:-1], "<answer>Nobody</answer>"]
    )
    assert trl_env.session_reward()(completions=[completion], environments=[env]) == [0.0]


def test_machinery_failure_is_none_and_closed(server: str) -> None:
    """A crashed tool ends the session sandbox_error: the reward is None (TRL masks it), the session is gone."""
    before = h.open_sessions(server)
    env_cls = trl_env.environment_factory("tool.test_echo", server_url=server)
    env, completion = run_rollout(
        env_cls, {"seed": 0, "index": 0}, "tool.test_echo", h.echo_script("w0-0", True)
    )
    assert env.score is not None and env.score.status.value == "sandbox_error"
    session_id = env.session_id
    metrics: dict[str, float] = {}
    rewards = trl_env.session_reward()(
        completions=[completion], environments=[env], log_metric=lambda k, v: metrics.update({k: v})
    )
    assert rewards == [None] and metrics == {"proctor/proctor_session/failed": 1.0}
    assert h.session_gone(server, session_id) and h.open_sessions(server) == before


def test_pooled_instance_reset_closes_previous_session(server: str) -> None:
    """TRL reuses instances across batches: reset closes the unfinished previous session (no leak)."""
    before = h.open_sessions(server)
    env = trl_env.environment_factory("tool.test_echo", server_url=server)()
    env.reset(proctor={"environment": "tool.test_echo", "task": {"seed": 0, "index": 0}})
    first = env.session_id
    assert h.open_sessions(server) == before + 1
    env.reset(proctor={"environment": "tool.test_echo", "task": {"seed": 0, "index": 1}})
    assert first != env.session_id and h.session_gone(server, first)
    assert trl_env.session_reward()(completions=["w0-1"], environments=[env]) == [
        0.0
    ]  # answered without an echo: a wrong answer, a verdict
    assert h.open_sessions(server) == before


def test_step_retry_is_idempotent(server: str) -> None:
    """A retried step (same number, e.g. after a lost response) returns the stored result and runs nothing twice."""
    with Client(server) as client:
        session = client.open_session("tool.test_echo", {"seed": 0, "index": 0})
        message = {
            "role": "assistant",
            "content": '<tool_call>{"name": "echo", "arguments": {"text": "x"}}</tool_call>',
        }
        body = json.dumps({"message": message, "step": 1}).encode()
        first = client._call("POST", f"/v1/sessions/{session.session_id}/step", body)
        again = client._call("POST", f"/v1/sessions/{session.session_id}/step", body)
        assert first == again
        record = session.record()
        assert sum(1 for m in record["transcript"] if m["role"] == "tool") == 1
        session.close()


def test_in_process_sessions_without_a_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """With no server URL the sessions run in the trainer's process (proctor.open_session), same reward."""
    monkeypatch.delenv("PROCTOR_URL", raising=False)
    task = h.SEARCH_TASKS[0]
    env_cls = trl_env.environment_factory(h.SEARCH)  # schemas from this process's registry
    env, completion = run_rollout(env_cls, task, h.SEARCH, h.search_script(task))
    assert trl_env.session_reward()(completions=[completion], environments=[env]) == [1.0]
    assert env.session_id is None  # closed
