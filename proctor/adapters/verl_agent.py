"""verl multi-turn adapters backed by Proctor sessions: an agent loop, a BaseTool, a tool-config generator and an
interaction (checked against verl 0.9.1's `verl/experimental/agent_loop/agent_loop.py`, `tools/base_tool.py`,
`tools/tool_registry.py`; the interaction against upstream `verl/interactions/base.py`, absent from the 0.9.1
wheel).

1. `ProctorAgentLoop`, registered in verl's agent-loop registry as `proctor_agent` (set
   `actor_rollout_ref.rollout.agent.default_agent_loop=proctor_agent`, or the dataset's `agent_name` column, and
   import this module through `actor_rollout_ref.rollout.agent.agent_loop_config_path` or a worker import).
   One Proctor session per rollout, opened from the dataset row's `extra_info["proctor"]` =
   `{environment, task, options?}`; the prompt is the session's messages and tools rendered with the
   tokenizer's chat template; each generated turn is sent as an assistant message (Proctor reads its tool
   calls); observations are appended as tokens with `response_mask` 0. The final `reward_score` is the
   session's reward. A machinery failure (non-ok status) is masked: every `response_mask` entry is 0 (no token
   of the rollout is trained on), `reward_score` is 0.0 only because verl's reward tensor needs a number, and
   `extra_fields["proctor_failed"]` is 1. The session is deleted at the end of the rollout, whatever happened.
2. `ProctorTool`, a `BaseTool` for users who keep verl's own `tool_agent` loop. verl creates and releases a
   tool instance on every call, so the tool keys the Proctor session on the rollout's `request_id` (from
   `agent_data`), and state survives across turns. The task comes from `tools_kwargs[<tool>]["create_kwargs"]
   ["proctor"]`. Limits (time-outs included) are the environment's and the session's, never the call's
   arguments. `execute` returns tool reward 0.0 always (no tool reveals correctness); the episode's score comes
   from `finish_request(request_id, final_text)`, which also closes the session, or from replaying the
   transcript through `/v1/score`.
3. `tool_config(environment, ...)` writes verl's tool YAML (`tools: [{class_name, config: {type: native, ...},
   tool_schema}]`) from the environment's schemas (`GET /v1/environments/{name}`).
4. `ProctorInteraction`, a verl `BaseInteraction` that plays an environment's scripted user (e.g. `tool.orders`):
   each assistant message steps the rollout's session and the user's reply comes back from the observations.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import threading
import weakref
from collections.abc import Mapping, Sequence
from typing import Any
from uuid import uuid4

import yaml
from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register
from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

from proctor.adapters._sessions import (
    UNAVAILABLE,
    Episode,
    close_quietly,
    environment_tools,
    failure_text,
    open_episode,
    render_prompt,
    render_with_tokenizer,
    reward,
    status_of,
    task_spec,
)

log = logging.getLogger("proctor.adapters.verl_agent")
AGENT_NAME = "proctor_agent"

try:  # upstream verl has it; the 0.9.1 wheel does not ship verl/interactions
    from verl.interactions.base import BaseInteraction  # pyright: ignore[reportMissingImports]
except ImportError:

    class BaseInteraction:  # the upstream interface, verbatim in its signatures
        """verl's interaction interface (`verl/interactions/base.py`), for verl builds that lack it."""

        def __init__(self, config: dict[str, Any]):
            self.config = config
            self.name: str = config.get("name", "interaction_agent")

        async def start_interaction(self, instance_id: str | None = None, **kwargs: Any) -> str:
            """A new interaction instance id."""
            return instance_id if instance_id is not None else str(uuid4())

        async def generate_response(
            self, instance_id: str, messages: list[dict[str, Any]], **kwargs: Any
        ) -> tuple[bool, str, float, dict[str, Any]]:
            """(should_terminate_sequence, response_content, current_turn_score, additional_data)."""
            raise NotImplementedError

        async def calculate_score(self) -> float:
            """The turn-level score."""
            return 0.0

        async def finalize_interaction(self) -> None:
            """Free the instance."""


def _settings(config: Mapping[str, Any] | None) -> dict[str, Any]:
    source = dict(config or {})
    return {
        "server_url": source.get("server_url") or os.environ.get("PROCTOR_URL") or None,
        "token": source.get("token") or os.environ.get("PROCTOR_TOKEN") or None,
        "in_process": bool(source.get("in_process", False)),
    }


# -- 1. the agent loop ---------------------------------------------------------------------------------------


@register(AGENT_NAME)
class ProctorAgentLoop(AgentLoopBase):
    """verl agent loop: one Proctor session per rollout; see the module docstring."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.response_length = int(self.rollout_config.response_length)
        multi_turn = getattr(self.rollout_config, "multi_turn", None)
        self.proctor = _settings(getattr(multi_turn, "proctor", None) if multi_turn is not None else None)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        """Roll one episode out against its Proctor session."""
        extra = kwargs.get("extra_info") or {}
        environment, task, options = task_spec(extra.get("proctor"))
        episode = await open_episode(environment, task, options, **self.proctor)
        try:
            return await self._rollout(episode, sampling_params)
        finally:
            await close_quietly(episode)

    async def _rollout(self, episode: Episode, sampling_params: dict[str, Any]) -> AgentLoopOutput:
        tokenizer = self.tokenizer
        history: list[dict[str, Any]] = list(episode.messages)
        prompt_text = render_prompt(tokenizer, history, episode.tools)
        prompt_ids: list[int] = tokenizer.encode(prompt_text, add_special_tokens=False)
        response_ids: list[int] = []
        response_mask: list[int] = []
        logprobs: list[float] = []
        turns = 0
        failure: str | None = None
        request_id = uuid4().hex
        while len(response_ids) < self.response_length:
            output = await self.server_manager.generate(
                request_id=request_id, prompt_ids=prompt_ids + response_ids, sampling_params=sampling_params
            )
            tokens = list(output.token_ids)[: self.response_length - len(response_ids)]
            response_ids += tokens
            response_mask += [1] * len(tokens)
            given = list(output.log_probs or [])
            logprobs += (given + [0.0] * len(tokens))[: len(tokens)]
            turns += 1
            text, generated_end = _turn_text(tokenizer, tokens)
            try:
                outcome = await episode.step(text)
            except Exception as exc:  # noqa: BLE001 - machinery (the session was lost, the service is down)
                failure = failure_text(exc)
                break
            history.append({"role": "assistant", "content": text})
            if outcome.done:
                break
            rendered = render_with_tokenizer(
                tokenizer, history, outcome.observations, episode.tools, generated_end=generated_end
            )
            history.extend(outcome.observations)
            observed = tokenizer.encode(rendered, add_special_tokens=False)
            room = self.response_length - len(response_ids)
            response_ids += observed[:room]
            response_mask += [0] * len(observed[:room])
            logprobs += [0.0] * len(observed[:room])
        score = episode.score
        if score is None and failure is None:
            try:
                score = await episode.finish()
            except Exception as exc:  # noqa: BLE001 - machinery: masked below, not a failed training step
                failure = failure_text(exc)
        trained = None if failure is not None else reward(score)
        status = UNAVAILABLE if failure is not None else status_of(score)
        if trained is None:
            log.warning(
                "proctor session %s ended %s%s; rollout masked",
                episode.session_id,
                status,
                f" ({failure})" if failure else "",
            )
            response_mask = [0] * len(response_mask)
        output = AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=response_ids,
            response_mask=response_mask,
            response_logprobs=logprobs if any(logprobs) else None,
            reward_score=0.0 if trained is None else trained,
            num_turns=1 + 2 * turns,
            metrics={},
            extra_fields={
                "proctor_failed": 0 if trained is not None else 1,
                "proctor_status": status,
                "proctor_end_reason": failure
                or episode.end_reason
                or (score.reason if score else None)
                or "",
                "proctor_session_id": episode.session_id,
                "proctor_messages": [*episode.messages, *episode.transcript],
                "turn_scores": [],
                "tool_rewards": [],
            },
        )
        return output


def _turn_text(tokenizer: Any, tokens: list[int]) -> tuple[str, str]:
    """The turn as the policy wrote it, and the end-of-turn text that stopped it ("" for a stop string or a
    length cut): special tokens kept (Qwen's `<tool_call>` may be one), only the closing end of turn dropped."""
    ends = {tokenizer.eos_token_id, tokenizer.pad_token_id} - {None}
    cut = len(tokens)
    while cut and tokens[cut - 1] in ends:
        cut -= 1
    text = tokenizer.decode(tokens[:cut], skip_special_tokens=False)
    return text, tokenizer.decode(tokens[cut:], skip_special_tokens=False) if cut < len(tokens) else ""


# -- 2. the BaseTool keyed on the rollout's request id --------------------------------------------------------

TOOL_UNAVAILABLE = "The tool is unavailable."  # all the policy learns of a machinery failure
_episodes: dict[str, Episode] = {}
_episode_requests: dict[str, str] = {}  # rollout key -> verl's request id (for finish_request by request id)
_episode_locks: dict[str, asyncio.Lock] = {}
_registry_lock = threading.Lock()
_KEY = "proctor_rollout_key"


def rollout_key(agent_data: Any) -> str:
    """The key of the rollout's Proctor session: a fresh id kept on `agent_data` (its `extra_fields`, else an
    attribute). Not verl's request id: with `rollout.full_determinism` verl names every request `det-<priority>`,
    and rollouts sharing a session would step one another's tools."""
    fields = getattr(agent_data, "extra_fields", None)
    if isinstance(fields, dict):
        key = fields.get(_KEY)
        if not isinstance(key, str):
            key = fields[_KEY] = uuid4().hex
        return key
    key = getattr(agent_data, _KEY, None)
    if not isinstance(key, str):
        key = uuid4().hex
        setattr(agent_data, _KEY, key)
    return key


def _release_with(agent_data: Any, key: str) -> None:
    # verl has no end-of-rollout hook for tools: when the rollout's AgentData is collected without
    # finish_request, its entry is dropped and the session deleted (else the dict grows for the worker's life)
    with contextlib.suppress(TypeError):  # no weak references: finish_request or the session's TTL frees it
        weakref.finalize(agent_data, _abandon, key, asyncio.get_running_loop())


def _abandon(key: str, loop: asyncio.AbstractEventLoop) -> None:
    # runs inside the garbage collector, on any thread, perhaps while this thread holds _registry_lock: only
    # hand the work to the rollout's event loop
    with contextlib.suppress(RuntimeError):  # the loop is closed: the session expires on its time-to-live
        loop.call_soon_threadsafe(_drop, key)


def _drop(key: str) -> None:
    with _registry_lock:
        episode = _episodes.pop(key, None)
        _episode_requests.pop(key, None)
        _episode_locks.pop(key, None)
    if episode is not None and not episode.closed:
        log.warning("proctor session %s abandoned without finish_request; deleted", episode.session_id)
        task = asyncio.get_running_loop().create_task(close_quietly(episode))
        _closing.add(task)  # the loop keeps only a weak reference to a task
        task.add_done_callback(_closing.discard)


_closing: set[asyncio.Task[None]] = set()


def _lock_for(key: str) -> asyncio.Lock:
    with _registry_lock:
        lock = _episode_locks.get(key)
        if lock is None:
            lock = _episode_locks[key] = asyncio.Lock()
        return lock


def open_requests() -> list[str]:
    """The request ids whose Proctor session this process holds, one entry per session (for leak checks)."""
    with _registry_lock:
        return sorted(_episode_requests[key] for key in _episodes)


class ProctorTool(BaseTool):
    """One environment tool inside verl's own tool loop; the session is keyed on the rollout's request id."""

    def __init__(self, config: dict[str, Any], tool_schema: OpenAIFunctionToolSchema | None):
        super().__init__(config, tool_schema)  # pyright: ignore[reportArgumentType]
        self.environment = str(config.get("environment") or "")
        if not self.environment:
            raise ValueError("ProctorTool's config needs environment: tool.<name>")
        self.proctor = _settings(config)

    async def _episode(self, agent_data: Any) -> Episode:
        key = rollout_key(agent_data)
        async with _lock_for(key):
            episode = _episodes.get(key)
            if episode is None:
                kwargs = (getattr(agent_data, "tools_kwargs", None) or {}).get(self.name) or {}
                source = (kwargs.get("create_kwargs") or {}).get("proctor")
                environment, task, options = task_spec(source)
                if environment != self.environment:
                    raise ValueError(f"tools_kwargs names {environment!r}, this tool is {self.environment!r}")
                episode = await open_episode(environment, task, options, **self.proctor)
                with _registry_lock:
                    _episodes[key] = episode
                    _episode_requests[key] = str(getattr(agent_data, "request_id", key))
                _release_with(agent_data, key)
            return episode

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict]:
        """Run the call in the rollout's session: an assistant message holding this one call."""
        agent_data = kwargs.get("agent_data")
        if agent_data is None:
            raise ValueError("ProctorTool needs verl's agent_data (verl >= 0.6 passes it to execute)")
        episode = await self._episode(agent_data)
        # verl runs a turn's calls concurrently (asyncio.gather); the session's steps are numbered, so they
        # run one at a time (two steps numbered alike would collide: 409, or one replaying the other's result)
        async with _lock_for(rollout_key(agent_data)):
            return await self._step(episode, parameters)

    async def _step(self, episode: Episode, parameters: dict[str, Any]) -> tuple[ToolResponse, float, dict]:
        if episode.failure is not None:
            return ToolResponse(text=TOOL_UNAVAILABLE), 0.0, {"proctor_status": UNAVAILABLE}
        if episode.done:
            return (
                ToolResponse(text="The episode has ended."),
                0.0,
                {"proctor_status": status_of(episode.score)},
            )
        call_id = f"call_{uuid4().hex[:12]}"
        message = {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": self.name, "arguments": json.dumps(parameters)},
                }
            ],
        }
        try:
            result = await episode.session.step(message)
            episode.transcript.append(message)
            observations = list(result.get("observations") or [])
            episode.transcript.extend(observations)
            if result.get("done"):
                episode.end_reason = result.get("end_reason")
                episode.score = await episode.finish()
        except Exception as exc:  # noqa: BLE001 - machinery: verl would show its text (naming the session)
            episode.failure = failure_text(exc)
            log.warning("proctor session %s failed a step: %s", episode.session_id, episode.failure)
            return ToolResponse(text=TOOL_UNAVAILABLE), 0.0, {"proctor_status": UNAVAILABLE}
        text = "\n".join(str(m.get("content") or "") for m in observations if m.get("role") == "tool")
        metrics = {"proctor_status": status_of(episode.score) if episode.done else "running"}
        return ToolResponse(text=text), 0.0, metrics

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        """Always 0.0: no tool reveals whether the answer is right."""
        return 0.0

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        """Nothing: verl releases after every call; the session lives until `finish_request` or its TTL."""


async def finish_request(rollout: Any, final_text: str | None = None) -> float | None:
    """End the rollout's session with its final assistant text, close it, and return the reward (None when the
    machinery failed, or no session was opened for this rollout). `rollout` is verl's `agent_data`, or a
    request id held by exactly one session (a request id two rollouts share is a ValueError: pass agent_data)."""
    with _registry_lock:
        if isinstance(rollout, str):
            keys = [
                key for key, request in _episode_requests.items() if request == rollout and key in _episodes
            ]
            if len(keys) > 1:
                raise ValueError(f"{len(keys)} rollouts share request id {rollout!r}; pass their agent_data")
            key = keys[0] if keys else rollout
        else:
            key = rollout_key(rollout)
        episode = _episodes.pop(key, None)
        _episode_requests.pop(key, None)
        _episode_locks.pop(key, None)
    if episode is None:
        return None
    try:
        if episode.failure is not None:
            return None
        try:
            return reward(await episode.finish(final_text))
        except Exception as exc:  # noqa: BLE001 - machinery: masked (None), not a crashed reward step
            log.warning("proctor session %s failed to finish: %s", episode.session_id, failure_text(exc))
            return None
    finally:
        await close_quietly(episode)


# -- 3. verl's tool YAML from an environment's schemas ----------------------------------------------------------


def tool_config(
    environment: str,
    *,
    server_url: str | None = None,
    token: str | None = None,
    tools: Sequence[Mapping[str, Any]] | None = None,
) -> str:
    """verl's tool config YAML (for `actor_rollout_ref.rollout.multi_turn.tool_config_path`), one ProctorTool per
    tool of the environment."""
    specs = list(tools) if tools is not None else environment_tools(environment, server_url, token)
    config: dict[str, Any] = {"type": "native", "environment": environment}
    if server_url:
        config["server_url"] = server_url
    entries = [
        {
            "class_name": f"{ProctorTool.__module__}.{ProctorTool.__qualname__}",
            "config": dict(config),
            "tool_schema": verl_schema(spec),
        }
        for spec in specs
    ]
    return yaml.safe_dump({"tools": entries}, sort_keys=False)


_VERL_PROPERTY_KEYS = frozenset({"type", "description", "enum"})
_VERL_PARAMETERS_KEYS = frozenset({"type", "properties", "required"})


_ANY_JSON = ["string", "number", "integer", "boolean", "array", "object", "null"]


def _json_types(values: Any) -> list[str]:
    if not isinstance(values, list) or not values:
        return list(_ANY_JSON)
    names = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object"}
    found = {"null" if value is None else names.get(type(value), "string") for value in values}
    return [name for name in _ANY_JSON if name in found]


def verl_schema(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A tool spec as verl's `OpenAIFunctionToolSchema` keeps it: that model holds only type, description and
    enum per property (pydantic drops the rest, e.g. an array's `items`), so every other keyword is written
    into the property's description as JSON, and the model still reads the whole schema."""
    function = dict(spec.get("function", spec))
    parameters = dict(function.get("parameters") or {"type": "object", "properties": {}})
    properties: dict[str, Any] = {}
    for name, schema in dict(parameters.get("properties") or {}).items():
        schema = dict(schema or {})
        kept = {key: value for key, value in schema.items() if key in _VERL_PROPERTY_KEYS}
        if "type" not in kept:  # verl requires one; untyped is any JSON value (or the enum's values' types)
            kept["type"] = _json_types(schema.get("enum"))
        dropped = {key: value for key, value in schema.items() if key not in _VERL_PROPERTY_KEYS}
        if dropped:
            note = f"JSON Schema: {json.dumps(dropped)}"
            kept["description"] = f"{kept['description']} ({note})" if kept.get("description") else note
        properties[name] = kept
    extra = {key: value for key, value in parameters.items() if key not in _VERL_PARAMETERS_KEYS}
    description = str(function.get("description") or function["name"])
    if extra:
        description += f" (parameters JSON Schema: {json.dumps(extra)})"
    out = {
        "name": function["name"],
        "description": description,
        "parameters": {
            "type": parameters.get("type", "object"),
            "properties": properties,
            "required": list(parameters.get("required") or []),
        },
    }
    if "strict" in function:
        out["strict"] = function["strict"]
    return {"type": "function", "function": out}


# -- 4. the interaction: an environment's scripted user ----------------------------------------------------------


class ProctorInteraction(BaseInteraction):
    """verl interaction that steps the rollout's Proctor session and returns the environment user's reply.

    Config (verl's interaction YAML): `name`, `environment`, `server_url?`. `start_interaction(instance_id,
    proctor={environment, task, options?})` opens the session (verl passes `interaction_kwargs` from the row).
    """

    def __init__(self, config: dict[str, Any]):
        super().__init__(config)
        self.proctor = _settings(config)
        self._episodes: dict[str, Episode] = {}
        self._starting: set[str] = set()

    async def start_interaction(self, instance_id: str | None = None, **kwargs: Any) -> str:
        """Open the instance's session from `proctor` (or the whole kwargs as {environment, task})."""
        instance = instance_id if instance_id is not None else uuid4().hex
        if instance in self._episodes or instance in self._starting:
            # verl names instances by request id, `det-<priority>` for every rollout under full_determinism:
            # sharing would leak the first session and step two conversations in one
            raise ValueError(
                f"interaction instance {instance!r} is already open (two rollouts with one request id: "
                "turn off rollout.full_determinism, or finalize the instance first)"
            )
        source = kwargs.get("proctor", kwargs)
        environment, task, options = task_spec(source)
        self._starting.add(instance)  # reserved across the await: two concurrent starts cannot both pass
        try:
            self._episodes[instance] = await open_episode(environment, task, options, **self.proctor)
        finally:
            self._starting.discard(instance)
        return instance

    async def generate_response(
        self, instance_id: str, messages: list[dict[str, Any]], **kwargs: Any
    ) -> tuple[bool, str, float, dict[str, Any]]:
        """Send the last assistant message; the user's reply, or terminate with the episode's reward."""
        episode = self._episodes[instance_id]
        last = next((m for m in reversed(messages) if m.get("role") == "assistant"), None)
        text = str((last or {}).get("content") or "")
        try:
            outcome = await episode.step(text)
            replies = [m for m in outcome.observations if m.get("role") == "user"]
            extra = {"proctor_status": status_of(outcome.score), "end_reason": outcome.end_reason}
            score = (episode.score or await episode.finish()) if outcome.done or not replies else None
        except Exception as exc:  # noqa: BLE001 - machinery: end the rollout masked, never show its text
            episode.failure = failure_text(exc)
            log.warning("proctor session %s failed: %s", episode.session_id, episode.failure)
            return True, "", 0.0, {"proctor_failed": True, "proctor_status": UNAVAILABLE}
        if score is not None:
            trained = reward(score)
            extra.update(proctor_failed=trained is None, proctor_status=status_of(score))
            return True, "", 0.0 if trained is None else trained, extra
        return False, "\n".join(str(m.get("content") or "") for m in replies), 0.0, extra

    async def calculate_score(self, instance_id: str | None = None, **kwargs: Any) -> float:  # pyright: ignore[reportIncompatibleMethodOverride]
        """The finished episode's reward (0.0 while it runs or when the machinery failed; see `failed`)."""
        episode = self._episodes.get(instance_id or "")
        failed = episode is None or episode.failure is not None
        trained = None if failed else reward(episode.score)
        return 0.0 if trained is None else trained

    def failed(self, instance_id: str) -> bool:
        """Whether the instance's episode ended in a machinery failure (mask it)."""
        episode = self._episodes.get(instance_id)
        if episode is None:
            return False
        return episode.failure is not None or (episode.done and reward(episode.score) is None)

    async def finalize_interaction(self, instance_id: str | None = None, **kwargs: Any) -> None:  # pyright: ignore[reportIncompatibleMethodOverride]
        """Close the instance's session."""
        episode = self._episodes.pop(instance_id or "", None)
        if episode is not None:
            await close_quietly(episode)
