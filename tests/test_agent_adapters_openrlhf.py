"""Proctor's OpenRLHF agent instance (proctor/adapters/openrlhf_agent.py) driven as OpenRLHF drives it.

OpenRLHF is not installed here (its package imports deepspeed, vLLM and ray at import), so `execute` below
replays `MultiTurnAgentExecutor.execute` of openrlhf 0.11.2 (`openrlhf/utils/agent.py`, lines 37-186) call for
call, text-only: one instance per prompt (`agent_instance_cls()`), `reset({"observation": prompt, "label":
label})`, the prompt tokenized with `add_special_tokens=False`, then per turn `llm_engine.generate`, an action
range over the generated tokens, `step({"observation_text", "action_text", "label", "sampling_params"})`,
`rewards.item()`, `scores`, `environment_feedback` tokenized and appended, until `done` or no token budget.
The engine replays the scripted policy (its token ids end with the end-of-turn token, as vLLM's do). The
server is a live Proctor.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from proctor.adapters import openrlhf_agent
from tests import agent_adapter_helpers as h


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A live Proctor with the test environments."""
    yield from h.server_fixture(tmp_path_factory)


@pytest.fixture(autouse=True)
def proctor_env(server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROCTOR_URL", server)
    monkeypatch.setenv("PROCTOR_CHAT_TEMPLATE", "chatml")


class Engine:
    """vLLM's engine as the executor calls it: generate(prompt token ids, sampling_params, multi_modal_data)."""

    def __init__(self, tokenizer: Any, turns: list[str]):
        self.tokenizer, self.turns = tokenizer, list(turns)

    async def generate(
        self, prompt_ids: list[int], sampling_params: Any, multi_modal_data: Any = None
    ) -> Any:
        text = self.turns.pop(0) if self.turns else "I give up."
        ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.eos_token_id]
        out = SimpleNamespace(token_ids=ids, text=text, finish_reason="stop", logprobs=None)
        return SimpleNamespace(outputs=[out])


async def execute(prompt: str, label: Any, max_length: int, tokenizer: Any, engine: Engine) -> dict[str, Any]:
    """openrlhf 0.11.2 MultiTurnAgentExecutor.execute, text-only, as the module docstring says."""
    agent = openrlhf_agent.AgentInstance()
    reset = await agent.reset({"observation": prompt, "label": label})
    observation_text = reset["observation"]
    tokens = tokenizer(text=observation_text, add_special_tokens=False)["input_ids"]
    sampling_params = SimpleNamespace(max_tokens=None, logprobs=None)
    action_ranges, total_reward, final_scores, extra_logs = [], 0.0, 0, {}
    while True:
        sampling_params.max_tokens = max_length - len(tokens)
        if sampling_params.max_tokens <= 0:
            break
        output = (await engine.generate(tokens, sampling_params)).outputs[0]
        action_ranges.append((len(tokens), len(tokens) + len(output.token_ids)))
        states = {
            "observation_text": observation_text,
            "action_text": output.text,
            "label": label,
            "sampling_params": sampling_params,
        }
        result = await agent.step(states)
        total_reward += result["rewards"].item()
        final_scores = result.get("scores", total_reward)
        feedback = result["environment_feedback"]
        extra_logs = result.get("extra_logs", {})
        feedback_tokens = tokenizer(text=feedback, add_special_tokens=False)["input_ids"]
        observation_text = observation_text + output.text + feedback
        tokens = tokens + list(output.token_ids) + feedback_tokens
        if result["done"]:
            break
    return {
        "reward": total_reward,
        "scores": final_scores,
        "observation_tokens": tokens,
        "action_ranges": action_ranges,
        "extra_logs": extra_logs,
        "agent": agent,
    }


def run(label: dict[str, Any], turns: list[str], max_length: int = 100_000) -> tuple[dict[str, Any], Any]:
    tokenizer = h.tokenizer("".join(turns))
    result = asyncio.run(
        execute(
            "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n",
            label,
            max_length,
            tokenizer,
            Engine(tokenizer, turns),
        )
    )
    return result, tokenizer


@pytest.mark.parametrize("task", h.SEARCH_TASKS[:2], ids=["task0", "task1"])
def test_gold_reward_equals_replay_feedback_outside_actions(server: str, task: dict[str, Any]) -> None:
    before = h.open_sessions(server)
    turns = h.search_script(task)
    result, tokenizer = run({"environment": h.SEARCH, "task": task}, turns)
    assert result["reward"] == 1.0 and float(result["scores"]) == 1.0
    assert result["extra_logs"]["proctor_failed"].item() == 0.0
    tokens = result["observation_tokens"]
    actions = [tokenizer.decode(tokens[a:b], skip_special_tokens=True) for a, b in result["action_ranges"]]
    assert actions == turns  # the trained spans are exactly the policy's turns
    inside = {i for a, b in result["action_ranges"] for i in range(a, b)}
    feedback = tokenizer.decode([t for i, t in enumerate(tokens) if i not in inside])
    assert (
        "<|im_start|>tool" in feedback and "<|im_end|>\n<|im_start|>tool" not in feedback
    )  # no doubled end token
    episode = result["agent"].episode
    replayed = h.replay(
        server, h.SEARCH, [*episode.messages, *episode.transcript], h.reference_of(server, h.SEARCH, task)
    )
    assert replayed["reward"] == 1.0 and replayed["status"] == "ok"
    assert h.session_gone(server, episode.session_id) and h.open_sessions(server) == before


def test_machinery_failure_is_nan_score_and_flagged(server: str) -> None:
    before = h.open_sessions(server)
    result, _ = run(
        {"environment": "tool.test_echo", "task": {"seed": 0, "index": 0}}, h.echo_script("w0-0", True)
    )
    assert math.isnan(float(result["scores"])) and result["reward"] == 0.0
    assert result["extra_logs"]["proctor_failed"].item() == 1.0
    assert h.session_gone(server, result["agent"].episode.session_id) and h.open_sessions(server) == before


def test_wrong_answer_is_a_zero_verdict(server: str) -> None:
    result, _ = run({"environment": "tool.test_echo", "task": {"seed": 0, "index": 0}}, h.echo_script("w9-9"))
    assert float(result["scores"]) == 0.0 and result["extra_logs"]["proctor_failed"].item() == 0.0


def test_label_as_json_string_and_named_templates() -> None:
    """Parquet keeps the label as a JSON string; each built-in template closes and reopens the turn."""
    import json

    env, task, options = openrlhf_agent.task_spec(json.dumps({"environment": "tool.x", "task": {"seed": 1}}))
    assert (env, task, options) == ("tool.x", {"seed": 1}, {})
    observation = [{"role": "tool", "content": "R"}]
    assert openrlhf_agent.Renderer("qwen").render([], observation, []) == (
        "\n<|im_start|>user\n<tool_response>\nR\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )
    assert (
        openrlhf_agent.Renderer("llama3", close_turn=True)
        .render([], observation, [])
        .startswith("<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\nR<|eot_id|>")
    )
    with pytest.raises(ValueError, match="unknown chat template"):
        openrlhf_agent.Renderer("vicuna")


def test_tokenizer_template_renders_the_continuation(tmp_path: Any) -> None:
    """hf:<path>: the tokenizer's own template, the text it adds after the assistant turn, end token not doubled."""
    tokenizer = h.tokenizer()
    tokenizer.save_pretrained(tmp_path)
    renderer = openrlhf_agent.Renderer(f"hf:{tmp_path}")
    history = [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "A"}]
    assert renderer.render(history, [{"role": "tool", "content": "R"}], []) == "<|tool|>R<|end|><|assistant|>"
