"""An OpenRLHF agent instance backed by Proctor sessions, for `--agent.agent_func_path` (checked against
openrlhf 0.11.2, `openrlhf/utils/agent.py`: `AgentInstanceBase` and `MultiTurnAgentExecutor.execute`).

A file holding `from proctor.adapters.openrlhf_agent import AgentInstance` (OpenRLHF imports the file and takes
its `AgentInstance`) runs every prompt as one Proctor session:

- `reset({"observation": prompt, "label": label})`: the label (`--data.label_key`) is `{environment, task,
  options?}` (or its JSON string); the session opens on that task. The observation stays the prompt OpenRLHF
  rendered; build the dataset's prompts from the tasks the service makes so both agree.
- `step({"observation_text", "action_text", "label", "sampling_params"})`: the action text is sent as one
  assistant message; the observations come back rendered with the chat template named by $PROCTOR_CHAT_TEMPLATE
  (`qwen` by default; `chatml`, `llama3`, or `hf:<tokenizer path>` for a transformers tokenizer's own
  template), as `environment_feedback`, ending with the next assistant header. vLLM's token ids for the action
  end with the end-of-turn token, so the feedback does not repeat it ($PROCTOR_CLOSE_TURN=1 when your stop
  strings leave it out). OpenRLHF masks feedback tokens out of the loss (`action_ranges`).
- When the episode ends: `done`, `rewards` the session's reward, `scores` the same. A machinery failure (a
  non-ok status) is `scores` NaN, `rewards` $PROCTOR_FAILURE_VALUE (0.0) and `extra_logs.proctor_failed` 1:
  with `--algo.dynamic_filtering_enable` OpenRLHF drops the whole group (a NaN mean never lies in the range),
  which is the only masking OpenRLHF has; without it the sample trains on the failure value. The session is
  deleted when the episode ends. OpenRLHF has no end-of-rollout hook: a rollout cut by `max_length` before the
  episode ends leaves its session to expire on its time-to-live (set `options.ttl_s` in the label to bound it).
"""

from __future__ import annotations

import math
import os
from typing import Any

import torch

from proctor.adapters._sessions import (
    BUILTIN_TEMPLATES,
    Episode,
    close_quietly,
    failure_text,
    open_episode,
    render_builtin,
    render_with_tokenizer,
    reward,
    status_of,
    task_spec,
)

try:
    from openrlhf.utils.agent import AgentInstanceBase  # pyright: ignore[reportMissingImports]
except ImportError:  # OpenRLHF not installed here (tests replay its executor); the same interface

    class AgentInstanceBase:  # type: ignore[no-redef]
        """openrlhf.utils.agent.AgentInstanceBase's interface."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

        async def reset(self, states: dict, **kwargs: Any) -> dict:
            """The initial states."""
            return states

        async def step(self, state_dict: dict, **kwargs: Any) -> dict:
            """One environment step."""
            raise NotImplementedError


class Renderer:
    """Observations as text in a named chat template (`qwen`, `chatml`, `llama3`, `hf:<tokenizer path>`)."""

    def __init__(self, name: str, close_turn: bool = False) -> None:
        self.name = name
        self.close_turn = close_turn
        self.tokenizer: Any = None
        if name.startswith("hf:"):
            from transformers import AutoTokenizer

            self.tokenizer = AutoTokenizer.from_pretrained(name[3:])
        elif name not in BUILTIN_TEMPLATES:
            raise ValueError(
                f"unknown chat template {name!r}; use {', '.join(BUILTIN_TEMPLATES)} or hf:<path>"
            )

    def render(
        self, history: list[dict[str, Any]], observations: list[dict[str, Any]], tools: list[Any]
    ) -> str:
        """The text that follows the policy's turn: the observations and the next assistant header."""
        if self.tokenizer is None:
            return render_builtin(self.name, observations, close_turn=self.close_turn)
        # vLLM's action tokens already end with the end-of-turn token unless $PROCTOR_CLOSE_TURN says not
        generated_end = "" if self.close_turn else (self.tokenizer.eos_token or "")
        return render_with_tokenizer(
            self.tokenizer, history, observations, tools, generated_end=generated_end
        )


_renderers: dict[tuple[str, bool], Renderer] = {}


def renderer() -> Renderer:
    """The renderer $PROCTOR_CHAT_TEMPLATE and $PROCTOR_CLOSE_TURN name (one per process)."""
    name = os.environ.get("PROCTOR_CHAT_TEMPLATE") or "qwen"
    close = os.environ.get("PROCTOR_CLOSE_TURN", "").lower() in ("1", "true", "yes")
    key = (name, close)
    if key not in _renderers:
        _renderers[key] = Renderer(name, close)
    return _renderers[key]


class AgentInstance(AgentInstanceBase):
    """One prompt's Proctor session for OpenRLHF's MultiTurnAgentExecutor; see the module docstring."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.episode: Episode | None = None
        self.history: list[dict[str, Any]] = []
        self.renderer = renderer()
        self.failure_value = float(os.environ.get("PROCTOR_FAILURE_VALUE") or 0.0)

    async def reset(self, states: dict, **kwargs: Any) -> dict:
        """Open the session on the label's task; the observation stays OpenRLHF's prompt."""
        environment, task, options = task_spec(states.get("label"))
        if self.episode is not None:  # a reused instance: its last session is not left to its TTL
            previous, self.episode = self.episode, None
            await _close(previous)
        self.episode = await open_episode(environment, task, options)
        self.history = list(self.episode.messages)
        return {"observation": states["observation"]}

    async def step(self, state_dict: dict, **kwargs: Any) -> dict:
        """Send the action as an assistant message; the observations as feedback, or the final reward."""
        episode = self.episode
        if episode is None:
            raise RuntimeError("step() before reset()")
        text = str(state_dict.get("action_text") or "")
        try:
            outcome = await episode.step(text)
            self.history.append({"role": "assistant", "content": text})
            if not outcome.done:
                feedback = self.renderer.render(self.history, outcome.observations, episode.tools)
                self.history.extend(outcome.observations)
                return {
                    "rewards": torch.tensor(0.0),
                    "scores": torch.tensor(0.0),
                    "environment_feedback": feedback,
                    "done": False,
                    "sampling_params": state_dict.get("sampling_params"),
                    "extra_logs": {"proctor_turns": torch.tensor(float(len(self.history)))},
                }
            score = episode.score or await episode.finish()
            failure = None
        except Exception as exc:  # noqa: BLE001 - machinery (session lost, service down): masked, not raised
            score, failure = None, failure_text(exc)
        except BaseException:
            await _close(episode)
            raise
        await _close(episode)
        trained = None if failure is not None else reward(score)
        failed = trained is None
        return {
            "rewards": torch.tensor(self.failure_value if failed else trained),
            "scores": torch.tensor(math.nan if failed else trained),
            "environment_feedback": "",
            "done": True,
            "sampling_params": state_dict.get("sampling_params"),
            "extra_logs": {
                "proctor_failed": torch.tensor(1.0 if failed else 0.0),
                "proctor_status_ok": torch.tensor(1.0 if not failed and status_of(score) == "ok" else 0.0),
            },
        }


async def _close(episode: Episode) -> None:
    # the reward is already known; a failed delete must not lose it (the session then expires on its TTL)
    await close_quietly(episode)
