"""Red team of the multi-turn agent adapters (verl, OpenRLHF, TRL, slime): each test is one confirmed finding.

1. Turn boundaries (verl agent loop; the tokenizer renderer OpenRLHF's `hf:` and slime use): the text appended
   after the policy's turn was the template's diff after the whole assistant turn, so the template's closing of
   that turn was lost: the newline after `<|im_end|>` (a ChatML template) always, and `<|im_end|>` itself when
   the generation stopped on a stop string rather than the end-of-turn token. The rollout's tokens then differ
   from the conversation rendered at once, which is what the model sees at inference.
2. verl's `ProctorTool` keyed sessions on `agent_data.request_id`; with `rollout.full_determinism` verl 0.9.1
   names every request `det-<priority>`, so concurrent rollouts (n > 1 samples) stepped one shared session.
3. TRL turns any exception of a tool into an observation (`{"error": str(e)}`, trl 1.16.0 grpo_trainer.py
   1987-1990): a machinery failure in a step (a session lost or expired on the service) was shown to the policy,
   its text naming the session id, and the reward function then raised (or paid a later verdict) instead of
   masking the rollout with None.
4. TRL: a completion that ends on a tool message (TRL's tool-iteration or length limit) was finished with the
   text of the assistant turn *before* the last observation, so words written before the tools answered were
   graded as the final answer (replay of the conversation through /v1/score disagrees).
5. TRL: the tool methods dropped arguments the model wrote (unknown names, nulls) before the session saw them:
   the transcript was rewritten and an invalid call was laundered into a valid one.
6. OpenRLHF: `reset` on an instance that already held a session opened a new one and leaked the first.
7. verl's tool YAML: verl's `OpenAIFunctionPropertySchema` keeps only type, description and enum, so an array
   parameter's `items` (tool.orders' `exchange_items`) vanished from the schema verl shows the model.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from tests import agent_adapter_helpers as h

h.stub_verl_dependencies()

from verl.experimental.agent_loop import agent_loop as verl_loop  # noqa: E402

from proctor.adapters import openrlhf_agent, trl_env, verl_agent  # noqa: E402
from proctor.adapters._sessions import render_with_tokenizer  # noqa: E402

ECHO = "tool.test_echo"
IM_START, IM_END = "<|im_start|>", "<|im_end|>"
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A live Proctor with the test environments."""
    yield from h.server_fixture(tmp_path_factory)


def chatml_tokenizer(text: str) -> Any:
    """The character tokenizer with a ChatML template whose end of turn is `<|im_end|>` then a newline."""
    import string

    from proctor.trainer.tokenizer import build_char_tokenizer

    tokenizer = build_char_tokenizer(string.printable + text, tokens=[IM_START, IM_END])
    tokenizer.chat_template = CHATML
    tokenizer.eos_token = IM_END
    return tokenizer


class Config(dict):
    """A DictConfig as verl's code reads it."""

    def __init__(self, data: dict[str, Any]):
        super().__init__({k: Config(v) if isinstance(v, dict) else v for k, v in data.items()})

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


class Server:
    """verl's server_manager replaying a script; `stop_token` False: the turn ended on a stop string."""

    def __init__(self, tokenizer: Any, turns: list[str], stop_token: bool):
        self.tokenizer, self.turns, self.stop_token = tokenizer, list(turns), stop_token

    async def generate(
        self, *, request_id: str, prompt_ids: list[int], sampling_params: dict, **_: Any
    ) -> Any:
        text = self.turns.pop(0) if self.turns else "I give up."
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        if self.stop_token:
            ids.append(self.tokenizer.eos_token_id)
        return SimpleNamespace(token_ids=ids, log_probs=None, num_preempted=None, extra_fields={})


def verl_rollout(url: str, turns: list[str], stop_token: bool) -> tuple[Any, Any]:
    tokenizer = chatml_tokenizer("".join(turns))
    target = verl_loop._agent_loop_registry[verl_agent.AGENT_NAME]["_target_"]
    module, _, name = target.rpartition(".")
    cls = getattr(sys.modules[module], name)
    config = Config(
        {
            "actor_rollout_ref": {
                "rollout": {"response_length": 60_000, "multi_turn": {"proctor": {"server_url": url}}}
            }
        }
    )
    loop = cls(
        trainer_config=verl_loop.DictConfigWrap(config),
        server_manager=Server(tokenizer, turns, stop_token),
        tokenizer=tokenizer,
        processor=None,
        dataset_cls=None,
        data_config=verl_loop.DictConfigWrap(Config({})),
    )
    extra = {"proctor": {"environment": ECHO, "task": {"seed": 0, "index": 0}}}
    return asyncio.run(loop.run({}, raw_prompt=[], extra_info=extra)), tokenizer


# -- 1. turn boundaries --------------------------------------------------------------------------------------


@pytest.mark.parametrize("stop_token", [True, False], ids=["ended-on-eos", "ended-on-stop-string"])
def test_verl_rollout_tokens_are_the_conversation_rendered_at_once(server: str, stop_token: bool) -> None:
    """prompt + response tokens equal the chat template over the whole conversation (up to the last turn's own
    closing), so no boundary token is missing or doubled; observation tokens are exactly the mask-0 ones."""
    turns = h.echo_script("w0-0")
    output, tokenizer = verl_rollout(server, turns, stop_token)
    assert output.extra_fields["proctor_status"] == "ok" and output.reward_score == 1.0
    messages = output.extra_fields["proctor_messages"]
    whole = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
    expected = tokenizer.encode(whole, add_special_tokens=False)
    got = list(output.prompt_ids) + list(output.response_ids)
    assert got == expected[: len(got)], tokenizer.decode(got, skip_special_tokens=False)
    closing = tokenizer.encode(IM_END + "\n", add_special_tokens=False)
    left = expected[len(got) :]
    assert closing[len(closing) - len(left) :] == left  # only the last turn's closing is not generated
    # the policy's tokens (mask 1) are exactly what it generated: each turn's text (+ its stop token)
    trained = [t for t, m in zip(output.response_ids, output.response_mask, strict=True) if m == 1]
    generated = [tokenizer.encode(t, add_special_tokens=False) for t in turns]
    end = [tokenizer.eos_token_id] if stop_token else []
    assert trained == [token for ids in generated for token in [*ids, *end]]


@pytest.mark.parametrize("generated_end", [IM_END, ""], ids=["ended-on-eos", "ended-on-stop-string"])
def test_render_with_tokenizer_keeps_the_turns_closing(generated_end: str) -> None:
    """The shared renderer (OpenRLHF `hf:`, slime) adds what the template closes the turn with, less what the
    policy's tokens already hold."""
    tokenizer = chatml_tokenizer("")
    history = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    observations = [{"role": "tool", "content": "r"}]
    text = render_with_tokenizer(tokenizer, history, observations, None, generated_end=generated_end)
    whole = tokenizer.apply_chat_template(
        [*history, *observations], tokenize=False, add_generation_prompt=True
    )
    prompt = tokenizer.apply_chat_template(history[:1], tokenize=False, add_generation_prompt=True)
    assert prompt + "a" + generated_end + text == whole


# -- 2. verl ProctorTool: one session per rollout even when request ids repeat -----------------------------


def test_proctor_tool_sessions_do_not_collide_on_deterministic_request_ids(server: str) -> None:
    """Two concurrent rollouts whose request id is verl's `det-0` each get their own session and reward."""
    from verl.tools.schemas import OpenAIFunctionToolSchema

    spec = {
        "type": "function",
        "function": {
            "name": "echo",
            "description": "Echo the text.",
            "parameters": {
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "required": ["text"],
            },
        },
    }
    tool = verl_agent.ProctorTool(
        {"type": "native", "environment": ECHO, "server_url": server},
        OpenAIFunctionToolSchema.model_validate(spec),
    )
    rollouts = []
    for index in range(2):
        proctor = {"environment": ECHO, "task": {"seed": 0, "index": index}}
        rollouts.append(
            SimpleNamespace(
                request_id="det-0",
                tools_kwargs={"echo": {"create_kwargs": {"proctor": proctor}}},
                extra_fields={},
            )
        )

    async def drive() -> list[float | None]:
        for index, agent_data in enumerate(rollouts):
            response, _, _ = await tool.execute("i", {"text": f"w0-{index}"}, agent_data=agent_data)
            assert response.text == f"w0-{index}"
        assert len(verl_agent.open_requests()) == 2
        return [
            await verl_agent.finish_request(agent_data, f"w0-{index}")
            for index, agent_data in enumerate(rollouts)
        ]

    assert asyncio.run(drive()) == [1.0, 1.0]
    assert verl_agent.open_requests() == []


def echo_tool(server: str) -> Any:
    """A ProctorTool for tool.test_echo's echo, as verl's loader builds it."""
    from verl.tools.schemas import OpenAIFunctionToolSchema

    spec = {
        "type": "function",
        "function": {
            "name": "echo",
            "description": "Echo the text.",
            "parameters": {
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "required": ["text"],
            },
        },
    }
    config = {"type": "native", "environment": ECHO, "server_url": server}
    return verl_agent.ProctorTool(config, OpenAIFunctionToolSchema.model_validate(spec))


async def verl_call_tool(tool: Any, parameters: dict[str, Any], agent_data: Any) -> str:
    """verl 0.9.1's ToolAgentLoop._call_tool: an exception of execute becomes the tool's text (lines 490-492)."""
    try:
        response, _, _ = await tool.execute("instance", parameters, agent_data=agent_data)
        return str(response.text)
    except Exception as exc:  # noqa: BLE001 - exactly what verl does
        return f"Error executing tool '{tool.name}': {exc}"


def test_proctor_tool_machinery_failure_is_masked_and_hides_the_session(server: str) -> None:
    """The session is lost on the service mid-rollout: verl's tool loop shows the policy nothing naming it, and
    finish_request answers None (masked) rather than raising or paying a verdict."""
    tool = echo_tool(server)
    proctor = {"environment": ECHO, "task": {"seed": 0, "index": 0}}
    agent_data = SimpleNamespace(
        request_id="r-lost", tools_kwargs={"echo": {"create_kwargs": {"proctor": proctor}}}, extra_fields={}
    )

    async def drive() -> tuple[str, str, float | None]:
        assert await verl_call_tool(tool, {"text": "w0-0"}, agent_data) == "w0-0"
        [session_id] = [e.session_id for e in verl_agent._episodes.values()]  # pyright: ignore[reportPrivateUsage]
        async with httpx.AsyncClient() as http:
            await http.delete(f"{server}/v1/sessions/{session_id}")
        shown = await verl_call_tool(tool, {"text": "w0-0"}, agent_data)
        return session_id, shown, await verl_agent.finish_request(agent_data, "w0-0")

    session_id, shown, got = asyncio.run(drive())
    assert session_id not in shown
    assert got is None
    assert verl_agent.open_requests() == []


def test_interaction_machinery_failure_terminates_masked(server: str) -> None:
    """The session is lost mid-conversation: the interaction ends the rollout flagged failed (mask it), with no
    error text as the user's reply, instead of raising out of verl's loop."""
    interaction = verl_agent.ProctorInteraction({"name": "proctor", "server_url": server})

    async def drive() -> tuple[tuple[bool, str, float, dict[str, Any]], bool, str]:
        proctor = {"environment": "tool.test_user", "task": {"seed": 0, "index": 0}}
        instance = await interaction.start_interaction("i-1", proctor=proctor)
        session_id = interaction._episodes[instance].session_id  # pyright: ignore[reportPrivateUsage]
        async with httpx.AsyncClient() as http:
            await http.delete(f"{server}/v1/sessions/{session_id}")
        result = await interaction.generate_response(instance, [{"role": "assistant", "content": "hello"}])
        failed = interaction.failed(instance)
        await interaction.finalize_interaction(instance)
        return result, failed, session_id

    (terminate, reply, score, extra), failed, session_id = asyncio.run(drive())
    assert terminate is True and reply == "" and score == 0.0
    assert failed and extra["proctor_failed"] is True
    assert session_id not in json.dumps(extra)


# -- 3-5. TRL ---------------------------------------------------------------------------------------------------


def trl_tool_call(env: Any, name: str, arguments: dict[str, Any]) -> Any:
    """trl 1.16.0's call of a sync tool: an exception becomes `{"error": str(e)}`, shown to the policy."""
    try:
        return getattr(env, name)(**arguments)
    except Exception as exc:  # noqa: BLE001 - exactly what TRL does
        return {"error": str(exc)}


def test_trl_machinery_failure_in_a_tool_call_is_masked_and_hides_the_session(server: str) -> None:
    """The session vanishes on the service (lost or expired) mid-rollout: the policy is told nothing naming it,
    and the reward is None (masked), not an exception and not a verdict."""
    env = trl_env.environment_factory(ECHO, server_url=server)()
    env.reset(proctor={"environment": ECHO, "task": {"seed": 0, "index": 0}})
    session_id = env.session_id
    assert session_id is not None
    assert httpx.delete(f"{server}/v1/sessions/{session_id}", timeout=10).status_code == 204
    shown = trl_tool_call(env, "echo", {"text": "w0-0"})
    assert session_id not in json.dumps(shown)
    completion = [
        {"role": "assistant", "content": "", "tool_calls": []},
        {"role": "tool", "content": json.dumps(shown)},
        {"role": "assistant", "content": "w0-0"},
    ]
    assert trl_env.session_reward()(completions=[completion], environments=[env]) == [None]


def test_trl_completion_ending_on_a_tool_message_grades_no_earlier_text(server: str) -> None:
    """TRL stopped after a tool result: the text written before that observation is not the final answer; the
    reward equals replaying the conversation through /v1/score."""
    env = trl_env.environment_factory(ECHO, server_url=server)()
    env.reset(proctor={"environment": ECHO, "task": {"seed": 0, "index": 0}})
    result = trl_tool_call(env, "echo", {"text": "w0-0"})
    call = {"id": "c1", "type": "function", "function": {"name": "echo", "arguments": {"text": "w0-0"}}}
    completion = [
        {"role": "assistant", "content": "w0-0", "tool_calls": [call]},
        {"role": "tool", "content": result},
    ]
    transcript = list(env.transcript)
    [got] = trl_env.session_reward()(completions=[completion], environments=[env])
    reference = h.reference_of(server, ECHO, {"seed": 0, "index": 0})
    replayed = h.replay(server, ECHO, transcript, reference)
    assert replayed["status"] == "ok" and replayed["reward"] == 0.0
    assert got == replayed["reward"]


def test_trl_tool_arguments_reach_the_session_as_written(server: str) -> None:
    """Arguments the model wrote (an unknown name, a null) are sent to the session unchanged."""
    env = trl_env.environment_factory(ECHO, server_url=server)()
    env.reset(proctor={"environment": ECHO, "task": {"seed": 0, "index": 0}})
    written = {"text": "w0-0", "timeout_s": 999, "note": None}
    trl_tool_call(env, "echo", written)
    sent = next(m for m in reversed(env.transcript) if m.get("tool_calls"))
    assert json.loads(sent["tool_calls"][0]["function"]["arguments"]) == written
    env._close()  # pyright: ignore[reportPrivateUsage]


# -- 6. OpenRLHF --------------------------------------------------------------------------------------------


def test_openrlhf_reset_twice_closes_the_first_session(server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROCTOR_URL", server)
    monkeypatch.setenv("PROCTOR_CHAT_TEMPLATE", "chatml")
    agent = openrlhf_agent.AgentInstance()

    async def drive() -> tuple[str, str]:
        label = {"environment": ECHO, "task": {"seed": 0, "index": 0}}
        await agent.reset({"observation": "p", "label": label})
        assert agent.episode is not None
        first = agent.episode.session_id
        await agent.reset({"observation": "p", "label": label})
        assert agent.episode is not None
        second = agent.episode.session_id
        await agent.episode.close()
        return first, second

    first, second = asyncio.run(drive())
    assert first != second
    assert h.session_gone(server, first)


# -- 7. verl tool YAML ---------------------------------------------------------------------------------------


def test_verl_tool_yaml_keeps_what_verls_schema_model_drops(
    server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After verl's loader (OpenAIFunctionToolSchema, dumped as verl's tool loop dumps it), every property
    keeps its JSON Schema: an array's `items` is not silently lost."""
    from verl.tools.schemas import OpenAIFunctionToolSchema

    spec = {
        "type": "function",
        "function": {
            "name": "exchange_items",
            "description": "Exchange items.",
            "parameters": {
                "type": "object",
                "properties": {
                    "item_ids": {"type": "array", "items": {"type": "string"}},
                    "mode": {"type": "string", "enum": ["a", "b"], "description": "How."},
                },
                "required": ["item_ids", "mode"],
            },
        },
    }
    import yaml

    text = verl_agent.tool_config("tool.orders", server_url=server, tools=[spec])
    [entry] = yaml.safe_load(text)["tools"]
    loaded = OpenAIFunctionToolSchema.model_validate(entry["tool_schema"])
    shown = loaded.model_dump(exclude_unset=True, exclude_none=True)["function"]["parameters"]
    assert shown["required"] == ["item_ids", "mode"]
    assert shown["properties"]["mode"]["enum"] == ["a", "b"]
    assert shown["properties"]["mode"]["type"] == "string"
    item_ids = shown["properties"]["item_ids"]
    assert item_ids["type"] == "array"
    assert '"items": {"type": "string"}' in item_ids.get("description", "")


# -- 8. a failed step (machinery) masks the rollout instead of crashing the trainer's step --------------------


class LosingServer(Server):
    """verl's server_manager; before the second turn the service loses the session (deleted under it)."""

    def __init__(self, tokenizer: Any, turns: list[str], url: str, episodes: list[Any]):
        super().__init__(tokenizer, turns, stop_token=True)
        self.url, self.episodes, self.turn = url, episodes, 0

    async def generate(self, **kwargs: Any) -> Any:
        self.turn += 1
        if self.turn == 2:
            async with httpx.AsyncClient() as http:
                await http.delete(f"{self.url}/v1/sessions/{self.episodes[-1].session_id}")
        return await super().generate(**kwargs)


def test_verl_failed_step_is_a_masked_rollout(server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The session is lost on the service mid-rollout: verl gets a masked output (every mask 0, proctor_failed
    1), not an exception that fails the whole training step, and the episode is closed."""
    opened: list[Any] = []
    real = verl_agent.open_episode

    async def recording(*args: Any, **kwargs: Any) -> Any:
        opened.append(await real(*args, **kwargs))
        return opened[-1]

    monkeypatch.setattr(verl_agent, "open_episode", recording)
    turns = h.echo_script("w0-0")
    tokenizer = chatml_tokenizer("".join(turns))
    target = verl_loop._agent_loop_registry[verl_agent.AGENT_NAME]["_target_"]
    module, _, name = target.rpartition(".")
    config = Config(
        {
            "actor_rollout_ref": {
                "rollout": {"response_length": 60_000, "multi_turn": {"proctor": {"server_url": server}}}
            }
        }
    )
    loop = getattr(sys.modules[module], name)(
        trainer_config=verl_loop.DictConfigWrap(config),
        server_manager=LosingServer(tokenizer, turns, server, opened),
        tokenizer=tokenizer,
        processor=None,
        dataset_cls=None,
        data_config=verl_loop.DictConfigWrap(Config({})),
    )
    extra = {"proctor": {"environment": ECHO, "task": {"seed": 0, "index": 0}}}
    output = asyncio.run(loop.run({}, raw_prompt=[], extra_info=extra))
    assert output.extra_fields["proctor_failed"] == 1
    assert output.extra_fields["proctor_status"] != "ok"
    assert set(output.response_mask) == {0}
    assert opened[-1].closed


def test_openrlhf_failed_step_is_masked(server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The session is lost on the service: the step answers done with the failure (scores NaN,
    proctor_failed 1) as for any machinery failure, rather than raising out of OpenRLHF's executor."""
    monkeypatch.setenv("PROCTOR_URL", server)
    monkeypatch.setenv("PROCTOR_CHAT_TEMPLATE", "chatml")
    agent = openrlhf_agent.AgentInstance()

    async def drive() -> dict[str, Any]:
        label = {"environment": ECHO, "task": {"seed": 0, "index": 0}}
        await agent.reset({"observation": "p", "label": label})
        assert agent.episode is not None
        async with httpx.AsyncClient() as http:
            await http.delete(f"{server}/v1/sessions/{agent.episode.session_id}")
        call = json.dumps({"name": "echo", "arguments": {"text": "w0-0"}})
        return await agent.step({"action_text": f"<tool_call>{call}</tool_call>", "label": label})

    result = asyncio.run(drive())
    assert result["done"] is True
    assert result["extra_logs"]["proctor_failed"].item() == 1.0
    assert result["scores"].isnan().item()
    assert result["environment_feedback"] == ""


class _LosingTurns(list):
    """The router's script: before the second turn is served, the service loses the session."""

    def __init__(self, turns: list[str], url: str, episodes: list[Any]):
        super().__init__(turns)
        self.url, self.episodes, self.served = url, episodes, 0

    def pop(self, index: Any = -1) -> Any:
        self.served += 1
        if self.served == 2:
            httpx.delete(f"{self.url}/v1/sessions/{self.episodes[-1].session_id}", timeout=10)
        return super().pop(index)


def test_slime_failed_step_is_a_removed_sample(
    server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The session is lost on the service mid-rollout: slime gets a removed sample (remove_sample, the failure
    value, proctor_status not ok), not an exception out of generate_and_rm."""
    from proctor.adapters import slime_agent
    from tests.test_agent_adapters_slime import Router, Sample

    monkeypatch.setenv("PROCTOR_URL", server)
    monkeypatch.delenv("PROCTOR_CHAT_TEMPLATE", raising=False)
    opened: list[Any] = []
    real = slime_agent.open_episode

    async def recording(*args: Any, **kwargs: Any) -> Any:
        opened.append(await real(*args, **kwargs))
        return opened[-1]

    monkeypatch.setattr(slime_agent, "open_episode", recording)
    turns = h.echo_script("w0-0")
    tokenizer = h.tokenizer("".join(turns))
    tokenizer.save_pretrained(tmp_path)
    router = Router(tokenizer)
    try:
        router.turns = _LosingTurns(turns, server, opened)
        host, port = router.http.server_address[:2]
        args = SimpleNamespace(hf_checkpoint=str(tmp_path), sglang_router_ip=host, sglang_router_port=port)
        label = {"environment": ECHO, "task": {"seed": 0, "index": 0}}
        sample = Sample(prompt="p", label=label)
        out = asyncio.run(slime_agent.generate(args, sample, {"max_new_tokens": 10_000}))
    finally:
        router.stop()
    assert out.remove_sample is True
    assert out.metadata["proctor_status"] != "ok"
    assert out.reward == 0.0
    assert opened[-1].closed


def test_proctor_tool_parallel_calls_in_one_turn_each_run(server: str) -> None:
    """verl runs a turn's tool calls concurrently (asyncio.gather, tool_agent_loop.py 317-321): each call runs
    in the session and answers its own result (no step-number collision replays the first call's result)."""
    tool = echo_tool(server)
    proctor = {"environment": ECHO, "task": {"seed": 0, "index": 0}}
    agent_data = SimpleNamespace(
        request_id="r-par", tools_kwargs={"echo": {"create_kwargs": {"proctor": proctor}}}, extra_fields={}
    )
    texts = [f"call-{index}" for index in range(4)]

    async def drive() -> tuple[list[str], list[dict[str, Any]]]:
        shown = await asyncio.gather(*(verl_call_tool(tool, {"text": text}, agent_data) for text in texts))
        [episode] = list(verl_agent._episodes.values())  # pyright: ignore[reportPrivateUsage]
        record = list(episode.transcript)
        await verl_agent.finish_request(agent_data, "w0-0")
        return list(shown), record

    shown, record = asyncio.run(drive())
    assert shown == texts
    assert sorted(m["content"] for m in record if m.get("role") == "tool") == texts
    assert verl_agent.open_requests() == []


def test_proctor_tool_session_of_an_abandoned_rollout_is_released(server: str) -> None:
    """A rollout verl drops without finish_request (the user's reward never called it, the rollout raised):
    when verl's AgentData is collected, the adapter's entry goes too and the session is deleted, rather than
    held by a module-level dict for the life of the worker."""
    import gc

    from verl.experimental.agent_loop.tool_agent_loop import AgentData

    tool = echo_tool(server)
    proctor = {"environment": ECHO, "task": {"seed": 0, "index": 0}}

    async def drive() -> str:
        agent_data = AgentData(
            messages=[],
            image_data=[],
            video_data=[],
            audio_data=None,
            mm_processor_kwargs=None,
            metrics={},
            request_id="r-abandoned",
            tools_kwargs={"echo": {"create_kwargs": {"proctor": proctor}}},
        )
        assert await verl_call_tool(tool, {"text": "w0-0"}, agent_data) == "w0-0"
        [episode] = list(verl_agent._episodes.values())  # pyright: ignore[reportPrivateUsage]
        session_id = episode.session_id
        del agent_data, episode
        gc.collect()
        await asyncio.sleep(0)  # the release runs on the rollout's loop, not inside the collector
        assert verl_agent.open_requests() == []
        for _ in range(100):  # the delete runs as a task on this loop
            await asyncio.sleep(0.02)
            if h.session_gone(server, session_id):
                break
        return session_id

    assert h.session_gone(server, asyncio.run(drive()))


def test_interaction_refuses_a_second_rollout_on_an_open_instance_id(server: str) -> None:
    """verl names interaction instances by request id (`det-<priority>` for every rollout under
    full_determinism): a second start on an open id is refused, not given the first rollout's place (its session
    leaked, both stepping one conversation)."""
    interaction = verl_agent.ProctorInteraction({"name": "proctor", "server_url": server})
    proctor = {"environment": "tool.test_user", "task": {"seed": 0, "index": 0}}

    async def drive() -> str:
        await interaction.start_interaction("det-0", proctor=proctor)
        first = interaction._episodes["det-0"].session_id  # pyright: ignore[reportPrivateUsage]
        with pytest.raises(ValueError, match="det-0"):
            await interaction.start_interaction("det-0", proctor=proctor)
        assert interaction._episodes["det-0"].session_id == first  # pyright: ignore[reportPrivateUsage]
        await interaction.finalize_interaction("det-0")
        return first

    assert h.session_gone(server, asyncio.run(drive()))


def test_trl_model_time_limits_and_timeouts_are_the_environments(server: str) -> None:
    """tool.math_python through TRL's tool call: a `timeout` argument the model adds reaches the session and is
    refused there (it was dropped, and the call ran as a valid one); the model's own program running out of time
    is an observation, and the episode still ends in a verdict (status ok), never masked."""
    env = trl_env.environment_factory("tool.math_python", server_url=server)()
    env.reset(
        proctor={"environment": "tool.math_python", "task": {"prompt": "What is 2+2?", "reference": "4"}}
    )
    refused = trl_tool_call(env, "python", {"code": "print(4)", "timeout": 1000})
    assert "invalid arguments" in str(refused) and "timeout" in str(refused)
    timed_out = trl_tool_call(env, "python", {"code": "while True: pass"})
    assert "out of time" in str(timed_out)
    completion = [
        {"role": "assistant", "content": "", "tool_calls": []},
        {"role": "tool", "content": timed_out},
        {"role": "assistant", "content": "4"},
    ]
    assert trl_env.session_reward()(completions=[completion], environments=[env]) == [1.0]
    assert env.score is not None and env.score.status.value == "ok"
