"""What the multi-turn (agent) adapters share: one Proctor session per rollout, text turns in and out, masking.

Every agent adapter (verl, OpenRLHF, TRL, slime) runs the same episode: open a session on a task, send each
assistant turn the policy wrote (as text: Proctor reads the tool calls in it, in any dialect it knows), hand
the observations back to the trainer rendered as text, and at the end read the session's `Score`. A score
whose status is not `ok` is a machinery failure (`sandbox_error`, `verifier_error`, `timeout`, `expired`):
`Episode.reward` answers None for it, and each adapter masks that in its trainer's own way, never as reward 0.

Sessions live on the Proctor service when a URL is given (or $PROCTOR_URL), else in this process
(`proctor.open_session_async`). Either way `Episode.close` deletes the session; it is idempotent.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from proctor.adapters._common import CLIENTS, plain, server_url_from_env
from proctor.contract import Score, Status

TemplateName = Literal["chatml", "qwen", "llama3"]
BUILTIN_TEMPLATES: tuple[str, ...] = ("chatml", "qwen", "llama3")


def task_spec(source: Any) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """(environment, task, options) from a dataset row's Proctor column: `{environment, task, options?}`.

    The column is a mapping (or a JSON string of one, as parquet files often keep it).
    """
    value = plain(source)
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise ValueError("the proctor column is a string but not JSON of {environment, task}") from None
    if not isinstance(value, Mapping) or not isinstance(value.get("environment"), str):
        raise ValueError(
            "the proctor column must be {environment: 'tool.<name>', task: {...}, options?: {...}}"
        )
    task = value.get("task")
    if not isinstance(task, Mapping):
        raise ValueError(
            "the proctor column's task must be an object ({seed, index, ...} or {prompt, reference})"
        )
    options = value.get("options") or {}
    return str(value["environment"]), dict(task), dict(options)


def assistant(text: str) -> dict[str, Any]:
    """An assistant message holding exactly what the policy wrote (Proctor never rewrites it)."""
    return {"role": "assistant", "content": text}


@dataclass
class StepOutcome:
    """What one assistant turn produced: the observations (tool results, the user's reply), done, the score."""

    observations: list[dict[str, Any]]
    done: bool
    end_reason: str | None
    score: Score | None


@dataclass
class Episode:
    """One open session, stepped with the policy's text turns. Build it with `open_episode`."""

    session: Any
    server_url: str | None
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    score: Score | None = None
    end_reason: str | None = None
    transcript: list[dict[str, Any]] = field(default_factory=list)
    closed: bool = False
    failure: str | None = None  # a session call raised (machinery): the episode is masked, whatever it scored

    @property
    def session_id(self) -> str:
        """The session's id on the service (or in this process)."""
        return str(self.session.session_id)

    @property
    def done(self) -> bool:
        """Whether the episode has ended (a score is known)."""
        return self.score is not None

    async def step(self, text: str) -> StepOutcome:
        """Send one assistant turn; returns its observations, and the score once the episode ended."""
        message = assistant(text)
        result = await self.session.step(message)
        self.transcript.append(message)
        observations = list(result.get("observations") or [])
        self.transcript.extend(observations)
        score = result.get("score")
        if result.get("done"):
            self.end_reason = result.get("end_reason")
            self.score = Score.model_validate(score) if score is not None else await self._final()
        return StepOutcome(observations, bool(result.get("done")), self.end_reason, self.score)

    async def finish(self, text: str | None = None) -> Score:
        """End the episode (with a last assistant turn when given) and return its Score; idempotent."""
        if self.score is None:
            if text is not None:
                self.transcript.append(assistant(text))
            self.score = await self.session.finish(None if text is None else assistant(text))
        return self.score

    async def _final(self) -> Score:
        return await self.session.finish(None)

    async def close(self) -> None:
        """Delete the session (frees its interpreter or database); idempotent."""
        if not self.closed:
            self.closed = True
            await self.session.close()


async def open_episode(
    environment: str,
    task: Mapping[str, Any],
    options: Mapping[str, Any] | None = None,
    *,
    server_url: str | None = None,
    token: str | None = None,
    in_process: bool = False,
) -> Episode:
    """Open one session on the service (server_url, else $PROCTOR_URL) or, without one, in this process."""
    url = None if in_process else server_url_from_env(server_url)
    if url is None:
        import proctor

        session = await proctor.open_session_async(environment, dict(task), options=dict(options or {}))
    else:
        client = CLIENTS.asynchronous(url, token or os.environ.get("PROCTOR_TOKEN") or None)
        session = await client.open_session(environment, dict(task), options=dict(options or {}))
    return Episode(session, url, list(session.messages), list(session.tools))


async def close_quietly(episode: Episode) -> None:
    """Delete the episode's session, shielded from the rollout's cancellation; a failed delete is logged, never
    raised over the rollout's result (the session then expires on its time-to-live)."""
    try:
        await asyncio.shield(episode.close())
    except Exception:  # noqa: BLE001 - logged; the result is already known
        logging.getLogger("proctor.adapters").warning(
            "could not delete proctor session %s", episode.session_id, exc_info=True
        )


def failure_text(exc: BaseException) -> str:
    """A machinery failure raised by a session call (the service lost the session, could not be reached), for
    logs and the trainer's metadata; never shown to the policy."""
    return f"{type(exc).__name__}: {exc}"


UNAVAILABLE = "unavailable"  # the status reported for a rollout whose session call raised (masked)


def reward(score: Score | None) -> float | None:
    """The trained reward of a finished episode: its reward when the verdict is ok, None for a machinery
    failure (or an episode that never ended), which every adapter masks rather than training on 0."""
    if score is None or score.status is not Status.ok:
        return None
    return float(score.reward)


def status_of(score: Score | None) -> str:
    """The score's status for logs (`unfinished` when there is none)."""
    return "unfinished" if score is None else score.status.value


def environment_tools(
    environment: str, server_url: str | None = None, token: str | None = None
) -> list[dict]:
    """The environment's tools in OpenAI's shape, from `GET /v1/environments/{name}` (or this process's registry)."""
    url = server_url_from_env(server_url)
    if url is None:
        from proctor.environments.tools.base import get_tool_environment

        return [tool.openai() for tool in get_tool_environment(environment).tools()]
    described = CLIENTS.sync(url, token)._call("GET", f"/v1/environments/{environment}")
    tools = described.get("tools") if isinstance(described, Mapping) else None
    if not tools:
        raise ValueError(f"{environment!r} lists no tools: it is not a tool environment")
    return list(tools)


# -- rendering observations as text ------------------------------------------------------------------------


def _content(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    return ""


def render_builtin(name: str, observations: Sequence[Mapping[str, Any]], close_turn: bool = True) -> str:
    """Observations in a named built-in template, closing the assistant turn before them and opening the next.

    chatml: `<|im_end|>\\n<|im_start|>tool\\n...`; qwen: tool results inside `<tool_response>` in a user turn
    (Qwen2.5 / Qwen3); llama3: `ipython` turns. The text begins where the policy's turn ends: with the
    end-of-turn token when `close_turn`, without it when the generated tokens already hold it.
    """
    if name not in BUILTIN_TEMPLATES:
        raise ValueError(f"unknown chat template {name!r}; built in: {', '.join(BUILTIN_TEMPLATES)}")
    if name == "llama3":
        parts = ["<|eot_id|>" if close_turn else ""]
        for message in observations:
            role = "ipython" if message.get("role") == "tool" else str(message.get("role", "user"))
            parts.append(f"<|start_header_id|>{role}<|end_header_id|>\n\n{_content(message)}<|eot_id|>")
        parts.append("<|start_header_id|>assistant<|end_header_id|>\n\n")
        return "".join(parts)
    parts = ["<|im_end|>\n" if close_turn else "\n"]
    if name == "qwen":
        tools = [m for m in observations if m.get("role") == "tool"]
        if tools:
            body = "\n".join(f"<tool_response>\n{_content(m)}\n</tool_response>" for m in tools)
            parts.append(f"<|im_start|>user\n{body}<|im_end|>\n")
        for message in observations:
            if message.get("role") != "tool":
                parts.append(f"<|im_start|>{message.get('role', 'user')}\n{_content(message)}<|im_end|>\n")
    else:
        for message in observations:
            parts.append(f"<|im_start|>{message.get('role', 'tool')}\n{_content(message)}<|im_end|>\n")
    parts.append("<|im_start|>assistant\n")
    return "".join(parts)


def render_with_tokenizer(
    tokenizer: Any,
    history: Sequence[Mapping[str, Any]],
    observations: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None = None,
    *,
    generated_end: str,
) -> str:
    """The text that follows the policy's generated turn, in the tokenizer's own chat template: the template's
    closing of that assistant turn (less `generated_end`, the end-of-turn text the generated tokens already
    hold, "" when generation stopped on a stop string), then the observations and the next assistant header.
    So the rollout's tokens are what the model would see from the whole conversation rendered at once."""
    kwargs: dict[str, Any] = {"tokenize": False}
    if tools:
        kwargs["tools"] = list(tools)
    before = tokenizer.apply_chat_template(list(history), add_generation_prompt=False, **kwargs)
    after = tokenizer.apply_chat_template([*history, *observations], add_generation_prompt=True, **kwargs)
    if not after.startswith(before):
        raise ValueError("the chat template does not render the conversation as a prefix of its continuation")
    return _turn_closing(tokenizer, history, kwargs, generated_end) + after[len(before) :]


_SENTINEL = "\u2063PROCTOR-END-OF-CONTENT\u2063"


def _turn_closing(
    tokenizer: Any, history: Sequence[Mapping[str, Any]], kwargs: dict[str, Any], generated_end: str
) -> str:
    # What the template writes after the last assistant turn's content (ChatML: `<|im_end|>\n`), read by
    # rendering that turn with a sentinel as its content; the generated end-of-turn text is not repeated.
    if not history or history[-1].get("role") != "assistant":
        raise ValueError("the history must end with the policy's assistant turn")
    marked = [*history[:-1], {**history[-1], "content": _SENTINEL}]
    text = tokenizer.apply_chat_template(marked, add_generation_prompt=False, **kwargs)
    at = text.rfind(_SENTINEL)
    if at < 0:
        raise ValueError("the chat template does not write the assistant turn's content verbatim")
    closing = text[at + len(_SENTINEL) :]
    if generated_end and closing.startswith(generated_end):
        closing = closing[len(generated_end) :]
    # else the policy stopped on another end token (e.g. <|endoftext|>): it stays, and the turn is still closed
    return closing


def render_prompt(tokenizer: Any, messages: Sequence[Mapping[str, Any]], tools: Sequence[Any] | None) -> str:
    """The prompt text: the tokenizer's chat template over the session's first messages and its tools."""
    kwargs: dict[str, Any] = {"tokenize": False, "add_generation_prompt": True}
    if tools:
        kwargs["tools"] = list(tools)
    return tokenizer.apply_chat_template(list(messages), **kwargs)
