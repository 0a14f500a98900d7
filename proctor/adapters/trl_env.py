"""TRL's `environment_factory` backed by Proctor sessions, and the reward function that finishes them.

Checked against trl 1.16.0 (`trl/trainer/grpo_trainer.py`, with transformers >= 5.2, which TRL requires for
`environment_factory`):

    from proctor.adapters.trl_env import environment_factory, session_reward

    Env = environment_factory("tool.search_qa", server_url="http://127.0.0.1:8000")
    trainer = GRPOTrainer(model=..., train_dataset=dataset, environment_factory=Env, reward_funcs=[session_reward()])

- TRL probes one instance and lists the class's public functions (`inspect.getmembers(type(env),
  inspect.isfunction)`): every tool of the environment is one such method, generated from its JSON Schema with a
  signature, type hints and a Google docstring, so `transformers.utils.get_json_schema` (what renders TRL's tool
  prompt) reads back the environment's own schema. TRL calls a tool as `method(**arguments)` and appends what
  it returns as the tool message; the method sends the call to the session and returns its observation.
- `reset(**row)` (called by TRL with the dataset row before each rollout; instances are pooled and reused)
  closes the instance's previous session and opens a new one from the row's `proctor` column
  (`{environment, task, options?}`); it returns None, so the prompt is the dataset's (build it from the tasks
  the service makes, `POST /v1/environments/{name}/tasks`, so the two agree).
- `session_reward()` is a reward function TRL calls with `environments=` (one per completion): it finishes each
  session with the completion's last assistant text, closes it, and returns the reward, or None for a
  machinery failure (TRL >= 1.6 leaves a completion whose every reward is None out of the group baseline with
  zero advantage; earlier versions sum it to 0, see proctor/adapters/trl.py).
Sessions are synchronous (TRL calls `reset` and sync tools directly): through the service when a URL is given
(or $PROCTOR_URL), else in this process.
"""

from __future__ import annotations

import inspect
import json
import keyword
import logging
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any
from uuid import uuid4

from proctor.adapters._common import CLIENTS, completion_text, server_url_from_env
from proctor.adapters._sessions import environment_tools, reward, status_of, task_spec
from proctor.contract import Score

log = logging.getLogger("proctor.adapters.trl_env")

_JSON_TO_PYTHON: dict[str, type] = {
    "string": str,
    "integer": int,
    "number": float,
    "boolean": bool,
    "array": list,
    "object": dict,
}


class ProctorEnvironment:
    """Base of the generated environment classes: one Proctor session per rollout (see the module docstring)."""

    environment: str = ""
    server_url: str | None = None
    token: str | None = None
    in_process: bool = False

    def __init__(self) -> None:
        self._session: Any = None
        self.score: Score | None = None
        self.end_reason: str | None = None
        self.transcript: list[dict[str, Any]] = []
        self.failure: str | None = None

    def reset(self, **row: Any) -> None:
        """Start a rollout: close the previous session, open one on the row's `proctor` task."""
        self._close()
        environment, task, options = task_spec(row.get("proctor"))
        if environment != self.environment:
            raise ValueError(
                f"the row's task is for {environment!r}, this environment is {self.environment!r}"
            )
        url = None if self.in_process else server_url_from_env(self.server_url)
        if url is None:
            import proctor

            self._session = proctor.open_session(environment, task, options=options)
        else:
            client = CLIENTS.sync(url, self.token or os.environ.get("PROCTOR_TOKEN") or None)
            self._session = client.open_session(environment, task, options=options)
        self.score = None
        self.end_reason = None
        self.failure = None
        self.transcript = list(self._session.messages)
        return None

    @property
    def session_id(self) -> str | None:
        """The current session's id (None before the first reset)."""
        return None if self._session is None else str(self._session.session_id)

    def _call(self, name: str, arguments: dict[str, Any]) -> str:
        if self._session is None:
            raise RuntimeError("reset() was not called before a tool call")
        if self.failure is not None:
            return _UNAVAILABLE
        if self.score is not None:
            return "The episode has ended."
        message = {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": f"call_{uuid4().hex[:12]}",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments)},
                }
            ],
        }
        try:
            result = self._session.step(message)
        except Exception as exc:  # noqa: BLE001 - a machinery failure: masked at the end, never shown
            # TRL would show the exception's text to the policy (it names the session); the rollout is masked
            self.failure = f"{type(exc).__name__}: {exc}"
            log.warning("proctor session %s failed a step: %s", self.session_id, self.failure)
            return _UNAVAILABLE
        observations = list(result.get("observations") or [])
        self.transcript += [message, *observations]
        if result.get("done"):
            self.end_reason = result.get("end_reason")
            self.score = self._session.finish(None)
        return "\n".join(str(m.get("content") or "") for m in observations if m.get("role") == "tool")

    def _finish(self, final_text: str | None) -> float | None:
        """End the episode with the final assistant text, close the session, and return the reward (None:
        machinery failure, mask it). Private: TRL would offer any public function to the model as a tool."""
        if self._session is None:
            return None
        try:
            if self.failure is not None:
                return None
            if self.score is None:
                message = None if final_text is None else {"role": "assistant", "content": final_text}
                if message is not None:
                    self.transcript.append(message)
                try:
                    self.score = self._session.finish(message)
                except Exception as exc:  # noqa: BLE001 - machinery: masked (None), not a crash of the step
                    self.failure = f"{type(exc).__name__}: {exc}"
                    log.warning("proctor session %s failed to finish: %s", self.session_id, self.failure)
                    return None
            trained = reward(self.score)
            if trained is None:
                log.warning(
                    "proctor session %s ended %s; reward None", self.session_id, status_of(self.score)
                )
            return trained
        finally:
            self._close()

    def _close(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            try:
                session.close()
            except Exception:  # noqa: BLE001 - the reward is known; the session then expires on its TTL
                log.warning("could not delete proctor session %s", session.session_id, exc_info=True)


_UNAVAILABLE = "The tool is unavailable."


_RESERVED = frozenset(
    {name for name in dir(ProctorEnvironment) if not name.startswith("_")}
    | {"get_reward", "score", "end_reason", "transcript"}
)


def _docstring(spec: Mapping[str, Any]) -> str:
    parameters = spec.get("parameters") or {}
    properties: Mapping[str, Any] = parameters.get("properties") or {}
    lines = [str(spec.get("description") or spec["name"]).strip() or spec["name"]]
    if properties:
        lines += ["", "Args:"]
        for name, schema in properties.items():
            text = " ".join(str((schema or {}).get("description") or name).split())
            choices = (schema or {}).get("enum")
            if choices:
                text += f" (choices: {json.dumps(choices)})"
            lines.append(f"    {name}: {text}")
    return "\n".join(lines)


def tool_method(spec: Mapping[str, Any]) -> Any:
    """A method calling one tool, whose signature, hints and docstring state the tool's JSON Schema."""
    function = spec.get("function", spec)
    name = str(function["name"])
    if not name.isidentifier() or keyword.iskeyword(name) or name.startswith("_"):
        raise ValueError(f"tool name {name!r} cannot be a Python method name")
    if name in _RESERVED:
        raise ValueError(
            f"tool name {name!r} is taken by the environment class ({', '.join(sorted(_RESERVED))})"
        )
    parameters = function.get("parameters") or {}
    properties: Mapping[str, Any] = parameters.get("properties") or {}
    required = set(parameters.get("required") or [])
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {}
    for arg, schema in properties.items():
        if not arg.isidentifier() or keyword.iskeyword(arg):
            raise ValueError(f"argument {arg!r} of tool {name!r} cannot be a Python parameter name")
        kind = (schema or {}).get("type")
        hint: Any = _JSON_TO_PYTHON.get(kind, str) if isinstance(kind, str) else str
        if arg not in required:
            hint = hint | None
        annotations[arg] = hint
        default = inspect.Parameter.empty if arg in required else None
        params.append(
            inspect.Parameter(arg, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=hint)
        )
    annotations["return"] = str

    def method(self: ProctorEnvironment, **arguments: Any) -> str:
        # TRL passes exactly the arguments the model wrote (no defaults filled in): sent unchanged, so the
        # session judges an unknown or null argument as the model wrote it (transcripts are exact)
        return self._call(name, dict(arguments))

    method.__name__ = method.__qualname__ = name
    method.__doc__ = _docstring(function)
    method.__annotations__ = annotations
    method.__signature__ = inspect.Signature(params, return_annotation=str)  # type: ignore[attr-defined]
    return method


def environment_factory(
    environment: str,
    *,
    server_url: str | None = None,
    token: str | None = None,
    in_process: bool = False,
    tools: Sequence[Mapping[str, Any]] | None = None,
) -> type[ProctorEnvironment]:
    """A class for TRL's `environment_factory`: a method per tool of `environment` (schemas from the service's
    `GET /v1/environments/{name}`, or `tools` when given)."""
    specs = list(tools) if tools is not None else environment_tools(environment, server_url, token)
    methods = {}
    for spec in specs:
        method = tool_method(spec)
        methods[method.__name__] = method
    class_name = "Proctor_" + re.sub(r"\W", "_", environment)
    attributes: dict[str, Any] = {
        "environment": environment,
        "server_url": server_url,
        "token": token,
        "in_process": in_process,
        "__doc__": f"Proctor session on {environment} (tools: {', '.join(methods)}).",
        "__module__": __name__,
        **methods,
    }
    return type(class_name, (ProctorEnvironment,), attributes)


class SessionReward:
    """TRL reward function: finishes each rollout's session with its completion and returns the reward."""

    def __init__(self, name: str = "proctor_session") -> None:
        self.__name__ = name

    def __call__(
        self,
        prompts: list[Any] | None = None,
        completions: list[Any] | None = None,
        environments: list[Any] | None = None,
        **kwargs: Any,
    ) -> list[float | None]:
        if environments is None:
            raise ValueError(
                "session_reward needs TRL's environments= (pass environment_factory to GRPOTrainer)"
            )
        completions = list(completions or [None] * len(environments))
        rewards: list[float | None] = []
        for environment, completion in zip(environments, completions, strict=True):
            if not isinstance(environment, ProctorEnvironment):
                rewards.append(None)  # another environment's rollout: not this function's to score
                continue
            text = final_text(completion)
            rewards.append(environment._finish(text))  # pyright: ignore[reportPrivateUsage]
        log_metric = kwargs.get("log_metric")
        if callable(log_metric) and rewards:
            log_metric(f"proctor/{self.__name__}/failed", sum(r is None for r in rewards) / len(rewards))
        return rewards


def final_text(completion: Any) -> str | None:
    """The completion's final answer: the last message's text when it is an assistant turn without tool calls;
    None when the conversation ends on a tool result or a tool call (TRL's tool-iteration or length limit), so
    no text written before the last observation is graded as the answer."""
    if completion is None:
        return None
    if isinstance(completion, Sequence) and not isinstance(completion, str):
        last = completion[-1] if completion else None
        if (
            not isinstance(last, Mapping)
            or last.get("role", "assistant") != "assistant"
            or last.get("tool_calls")
        ):
            return None
    return completion_text(completion)


def session_reward(name: str = "proctor_session") -> SessionReward:
    """The reward function to pass in `reward_funcs` beside `environment_factory`."""
    return SessionReward(name)
