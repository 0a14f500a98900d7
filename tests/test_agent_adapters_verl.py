"""Proctor's verl agent adapters (proctor/adapters/verl_agent.py) run inside verl 0.9.1's own code.

What runs is verl's: `AgentLoopBase.__init__`, the agent-loop registry (`register`, `_agent_loop_registry`),
`AgentLoopOutput` and its `as_dict` (what `AgentLoopWorker` turns each rollout into), `BaseTool`, the tool
schema models and `initialize_tools_from_config` (verl/tools/tool_registry.py), against a live Proctor server.
What stands in (tests/agent_adapter_helpers.py): the Makefile installs verl with `--no-deps`, so ray, hydra,
omegaconf, tensordict, codetiming, orjson and cachetools are empty modules; `OmegaConf.load` / `to_container`
(which verl's tool loader calls) are given by `yaml.safe_load` and a dict with attribute access; the LLM server
(`server_manager.generate`) replays the scripted policy; the tokenizer is trainer/tokenizer.py's. verl 0.9.1
ships no `verl/interactions`; `ProctorInteraction` is driven with upstream `verl/interactions/base.py`'s calls
(start_interaction(instance_id, **interaction_kwargs), generate_response(instance_id, messages),
finalize_interaction).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from tests import agent_adapter_helpers as h

h.stub_verl_dependencies()

from verl.experimental.agent_loop import agent_loop as verl_loop  # noqa: E402
from verl.tools import tool_registry  # noqa: E402

from proctor.adapters import verl_agent  # noqa: E402


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A live Proctor with the test environments."""
    yield from h.server_fixture(tmp_path_factory)


class Config(dict):
    """A DictConfig as verl's code reads it: `config.a.b` and `config.get("a")`."""

    def __init__(self, data: dict[str, Any]):
        super().__init__({k: _wrap(v) for k, v in data.items()})

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def _wrap(value: Any) -> Any:
    if isinstance(value, dict):
        return Config(value)
    if isinstance(value, list):
        return [_wrap(item) for item in value]
    return value


class ScriptedServer:
    """verl's `server_manager`: each generate call answers the script's next turn, as token ids."""

    def __init__(self, tokenizer: Any, turns: list[str]):
        self.tokenizer = tokenizer
        self.turns = list(turns)
        self.calls: list[dict[str, Any]] = []

    async def generate(
        self, *, request_id: str, prompt_ids: list[int], sampling_params: dict, **_: Any
    ) -> Any:
        self.calls.append({"request_id": request_id, "prompt_ids": list(prompt_ids)})
        text = self.turns.pop(0) if self.turns else "I give up."
        ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.eos_token_id]
        return SimpleNamespace(token_ids=ids, log_probs=None, num_preempted=None, extra_fields={})


def make_loop(url: str, tokenizer: Any, turns: list[str], response_length: int = 60_000) -> Any:
    """Build the registered agent loop the way AgentLoopWorker does (hydra instantiates `_target_`)."""
    target = verl_loop._agent_loop_registry[verl_agent.AGENT_NAME]["_target_"]
    module, _, name = target.rpartition(".")
    cls = getattr(sys.modules[module], name)
    config = Config(
        {
            "actor_rollout_ref": {
                "rollout": {
                    "response_length": response_length,
                    "multi_turn": {"proctor": {"server_url": url}},
                }
            }
        }
    )
    return cls(
        trainer_config=verl_loop.DictConfigWrap(config),
        server_manager=ScriptedServer(tokenizer, turns),
        tokenizer=tokenizer,
        processor=None,
        dataset_cls=None,
        data_config=verl_loop.DictConfigWrap(Config({})),
    )


def rollout(url: str, environment: str, task: dict[str, Any], turns: list[str], **kw: Any) -> Any:
    """One rollout through the agent loop; returns verl's AgentLoopOutput."""
    tokenizer = h.tokenizer("".join(turns))
    loop = make_loop(url, tokenizer, turns, **kw)
    extra = {"proctor": {"environment": environment, "task": task}}
    return asyncio.run(loop.run({"temperature": 1.0}, raw_prompt=[], extra_info=extra)), tokenizer


def test_registered_in_verls_registry() -> None:
    """The loop is in verl's registry under proctor_agent, as the class hydra would instantiate."""
    entry = verl_loop._agent_loop_registry[verl_agent.AGENT_NAME]
    assert entry == {"_target_": "proctor.adapters.verl_agent.ProctorAgentLoop"}
    assert issubclass(verl_agent.ProctorAgentLoop, verl_loop.AgentLoopBase)


@pytest.mark.parametrize("task", h.SEARCH_TASKS[:2], ids=["task0", "task1"])
def test_gold_rollout_rewards_equal_replay(server: str, task: dict[str, Any]) -> None:
    """The gold policy earns the session's reward, which equals /v1/score of the same transcript; observation
    tokens are masked out; the session is deleted afterwards."""
    before = h.open_sessions(server)
    turns = h.search_script(task)
    output, tokenizer = rollout(server, h.SEARCH, task, turns)
    assert output.reward_score == 1.0
    fields = output.extra_fields
    assert fields["proctor_failed"] == 0 and fields["proctor_status"] == "ok"
    replayed = h.replay(server, h.SEARCH, fields["proctor_messages"], h.reference_of(server, h.SEARCH, task))
    assert replayed["reward"] == output.reward_score and replayed["status"] == "ok"
    # the mask: 1 exactly on what the policy generated, 0 on every observation token
    generated = sum(len(tokenizer.encode(t, add_special_tokens=False)) + 1 for t in turns)
    assert sum(output.response_mask) == generated
    assert 0 in output.response_mask and len(output.response_mask) == len(output.response_ids)
    masked = [t for t, m in zip(output.response_ids, output.response_mask, strict=True) if m == 0]
    assert "search" in tokenizer.decode(masked) or "[d" in tokenizer.decode(masked)
    data = output.as_dict()  # verl's own conversion to tensors
    assert float(data["rm_scores"][-1]) == 1.0 and int(data["response_mask"].sum()) == generated
    assert h.session_gone(server, fields["proctor_session_id"])
    assert h.open_sessions(server) == before


def test_wrong_answer_is_reward_zero_not_masked(server: str) -> None:
    """A wrong final answer is a verdict: reward 0, mask kept."""
    task = h.SEARCH_TASKS[0]
    turns = [*h.search_script(task)[:-1], "<answer>Atlantis</answer>"]
    output, _ = rollout(server, h.SEARCH, task, turns)
    assert output.reward_score == 0.0
    assert output.extra_fields["proctor_failed"] == 0 and sum(output.response_mask) > 0


def test_machinery_failure_is_masked(server: str) -> None:
    """A sandbox_error session: every token masked out, proctor_failed 1, status kept; session deleted."""
    before = h.open_sessions(server)
    output, _ = rollout(server, "tool.test_echo", {"seed": 0, "index": 0}, h.echo_script("w0-0", crash=True))
    fields = output.extra_fields
    assert fields["proctor_failed"] == 1 and fields["proctor_status"] == "sandbox_error"
    assert sum(output.response_mask) == 0 and len(output.response_mask) > 0
    assert h.session_gone(server, fields["proctor_session_id"])
    assert h.open_sessions(server) == before


def test_response_length_cut_ends_episode_as_verdict(server: str) -> None:
    """Running out of response_length finishes the session (a verdict, not a failure) and closes it."""
    task = h.SEARCH_TASKS[0]
    output, _ = rollout(server, h.SEARCH, task, h.search_script(task), response_length=200)
    assert len(output.response_ids) == 200 and output.extra_fields["proctor_status"] == "ok"
    assert output.reward_score == 0.0
    assert h.session_gone(server, output.extra_fields["proctor_session_id"])


def write_tool_yaml(server: str, tmp_path: Path, environment: str) -> Path:
    path = tmp_path / "tools.yaml"
    path.write_text(verl_agent.tool_config(environment, server_url=server))
    return path


class _OmegaConf:
    """OmegaConf.load / to_container as verl's loader uses them, over PyYAML (omegaconf is not installable)."""

    @staticmethod
    def load(path: str) -> Any:
        return Config(yaml.safe_load(Path(path).read_text()))

    @staticmethod
    def to_container(value: Any, resolve: bool = True) -> Any:
        return json.loads(json.dumps(value))


def load_tools(monkeypatch: pytest.MonkeyPatch, path: Path) -> list[Any]:
    monkeypatch.setattr(tool_registry, "OmegaConf", _OmegaConf)
    return tool_registry.initialize_tools_from_config(str(path))


def test_tool_yaml_accepted_by_verls_loader(
    server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """verl's initialize_tools_from_config builds one ProctorTool per environment tool from the generated YAML,
    validating each schema with verl's OpenAIFunctionToolSchema."""
    tools = load_tools(monkeypatch, write_tool_yaml(server, tmp_path, h.SEARCH))
    assert [t.name for t in tools] == ["search", "open"]
    assert all(isinstance(t, verl_agent.ProctorTool) for t in tools)
    assert tools[0].tool_schema.function.parameters.required == ["query"]


def test_tool_state_survives_calls_keyed_on_request_id(
    server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """verl's tool loop creates and releases an instance per call; the session lives on, keyed on request_id,
    and the episode's reward comes from finish_request, which closes it."""
    tools = {t.name: t for t in load_tools(monkeypatch, write_tool_yaml(server, tmp_path, h.SEARCH))}
    task = h.SEARCH_TASKS[0]
    proctor = {"environment": h.SEARCH, "task": task}
    agent_data = SimpleNamespace(
        request_id="req-1", tools_kwargs={name: {"create_kwargs": {"proctor": proctor}} for name in tools}
    )
    turns = h.search_script(task)

    async def drive() -> float | None:
        for text in turns[:-1]:
            call = json.loads(text.split("<tool_call>", 1)[1].split("</tool_call>", 1)[0])
            tool = tools[call["name"]]
            # verl's _call_tool: create (fresh instance id), execute with agent_data, release
            instance_id, _ = await tool.create(create_kwargs={"proctor": proctor})
            response, tool_reward, _ = await tool.execute(
                instance_id, call["arguments"], agent_data=agent_data
            )
            await tool.release(instance_id)
            assert tool_reward == 0.0 and response.text
        assert verl_agent.open_requests() == ["req-1"]
        answer = turns[-1]
        return await verl_agent.finish_request("req-1", answer)

    assert asyncio.run(drive()) == 1.0
    assert verl_agent.open_requests() == []


def test_interaction_plays_scripted_user(server: str) -> None:
    """ProctorInteraction relays the environment's user: two replies, then the episode's reward."""
    interaction = verl_agent.ProctorInteraction({"name": "proctor", "server_url": server})
    proctor = {"environment": "tool.test_user", "task": {"seed": 0, "index": 1}}
    before = h.open_sessions(server)

    async def drive() -> list[tuple[bool, str, float]]:
        instance = await interaction.start_interaction(None, proctor=proctor)
        said = []
        messages: list[dict[str, Any]] = []
        for text in ["hello", "go on", "done-1"]:
            messages.append({"role": "assistant", "content": text})
            stop, reply, score, _ = await interaction.generate_response(instance, messages)
            said.append((stop, reply, score))
            messages.append({"role": "user", "content": reply})
        await interaction.finalize_interaction(instance)
        return said

    said = asyncio.run(drive())
    assert said == [(False, "first 1", 0.0), (False, "second 1", 0.0), (True, "", 1.0)]
    assert h.open_sessions(server) == before


def test_interaction_tool_orders(server: str) -> None:
    """tool.orders' scripted user through the interaction (skipped while that environment is not in the tree)."""
    import importlib.util

    if importlib.util.find_spec("proctor.environments.tools.orders") is None:
        pytest.skip("environments/tools/orders is not in the tree yet")
    import httpx

    described = httpx.get(f"{server}/v1/environments/tool.orders", timeout=30)
    if described.status_code != 200:
        pytest.skip("tool.orders is not registered on the server yet")
    interaction = verl_agent.ProctorInteraction({"name": "proctor", "server_url": server})

    async def drive() -> tuple[bool, str]:
        instance = await interaction.start_interaction(
            None, proctor={"environment": "tool.orders", "task": {"seed": 0, "index": 0}}
        )
        stop, reply, _, _ = await interaction.generate_response(
            instance, [{"role": "assistant", "content": "Hello, how can I help you today?"}]
        )
        await interaction.finalize_interaction(instance)
        return stop, reply

    stop, reply = asyncio.run(drive())
    assert not stop and reply  # the customer answers the greeting


def test_tool_call_tags_as_special_tokens_reach_the_session(server: str) -> None:
    """Qwen-style tokenizers make `<tool_call>` a special token: the turn's text keeps it, or no call would run."""
    task = h.SEARCH_TASKS[0]
    turns = h.search_script(task)
    tokenizer = h.tokenizer("".join(turns))
    tokenizer.add_special_tokens({"additional_special_tokens": ["<tool_call>", "</tool_call>"]})
    loop = make_loop(server, tokenizer, turns)
    extra = {"proctor": {"environment": h.SEARCH, "task": task}}
    output = asyncio.run(loop.run({"temperature": 1.0}, raw_prompt=[], extra_info=extra))
    assert output.reward_score == 1.0 and output.extra_fields["proctor_end_reason"] == "answer"
