"""Multi-turn rollouts through Proctor tool sessions, for `proctor train` with a `tool.*` task.

One episode per sample: open a session on the sample's task, then until the session is done: generate an
assistant turn (at most `max_new_tokens` tokens), step the session with its text, and append the observation
tokens to the sequence. The policy's tokens have loss mask 1; the observation tokens (the chat template's
rendering of the tool messages and of the next assistant header) have mask 0: they are context the policy did
not choose. The reward is the session's final score; a session whose machinery failed (a non-ok status, an
error opening or stepping it) marks its sample invalid, so it is masked out of the update, never scored 0. A
turn the session refuses as too large (413) is the policy's doing, not the machinery's: the session is finished
as it stands and that score is the reward. Every session opened is closed, also when a step raises.

All episodes of a step advance together: one `generate` call per turn over every episode still running, and
the session calls of a turn run on a thread pool (they are I/O: HTTP requests to a Proctor service, or calls
onto the in-process session loop).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import torch

from proctor.trainer.config import ConfigError, TrainConfig

if TYPE_CHECKING:
    from proctor.trainer.generation import Prompt, Sample

log = logging.getLogger(__name__)

SESSION_THREADS = 16
"""Session requests in flight at once."""


class SessionHandle(Protocol):
    """What the trainer needs of a session: `proctor.open_session`'s Session and the client's RemoteSession."""

    messages: list[dict[str, Any]]

    def step(self, message: dict[str, Any]) -> dict[str, Any]: ...

    def finish(self, message: dict[str, Any] | None = None) -> Any: ...

    def close(self) -> None: ...


OpenSession = Callable[[str, dict[str, Any], dict[str, Any]], SessionHandle]
"""(environment, task, options) -> an open session."""


@dataclass
class Episode:
    """One sample's episode while it runs: its sequence so far, its loss mask and its session."""

    prompt: Prompt
    prompt_ids: list[int]
    messages: list[dict[str, Any]]
    completion_ids: list[int] = field(default_factory=list)
    completion_mask: list[int] = field(default_factory=list)
    session: SessionHandle | None = None
    done: bool = False
    valid: bool = True
    reward: float = 0.0
    correct: bool | None = None
    components: dict[str, float] = field(default_factory=dict)
    end_reason: str | None = None
    turns: int = 0
    tool_calls: int = 0
    truncated: bool = False  # any of the policy's turns was cut at max_new_tokens
    turn_lengths: list[int] = field(default_factory=list)  # tokens of each of the policy's turns
    error: str | None = None


TURN_MARK = "PROCTOR-TURN-MARK-7f3a"
"""Stands in for the policy's text when the chat template's close of its turn is located (see observation_ids)."""


def observation_ids(
    tokenizer: Any, history: list[dict[str, Any]], observations: list[dict[str, Any]], ended_with: str | None
) -> list[int]:
    """Token ids that follow the policy's last turn: the template's close of that turn (beyond `ended_with`,
    the end-of-turn token the policy wrote, if any), the observation messages and the next assistant header.

    Rendered as the difference between the chat template's text of the conversation with and without the
    observations, so any chat template works that renders a conversation as a prefix of its continuation. The
    last turn's text is rendered as a fixed mark, never as what the policy wrote: a text that also occurs in the
    close (">" in "<|end|>") or that the template rewrites (strips) must not move where the close starts.
    """
    marked = [*history[:-1], {**history[-1], "content": TURN_MARK}]
    before = tokenizer.apply_chat_template(marked, tokenize=False)
    after = tokenizer.apply_chat_template(marked + observations, add_generation_prompt=True, tokenize=False)
    if not after.startswith(before):
        raise ConfigError("the chat template does not render a conversation as a prefix of its continuation")
    if before.count(TURN_MARK) != 1:
        raise ConfigError("the chat template does not render the assistant's text as it was written")
    closing = before[before.index(TURN_MARK) + len(TURN_MARK) :]
    if ended_with and closing.startswith(ended_with):
        closing = closing[len(ended_with) :]  # the policy wrote it already
    return tokenizer(closing + after[len(before) :], add_special_tokens=False)["input_ids"]


def _parallel(function: Callable[[Episode], None], episodes: Sequence[Episode]) -> None:
    if not episodes:
        return
    with ThreadPoolExecutor(max_workers=min(SESSION_THREADS, len(episodes))) as pool:
        list(pool.map(function, episodes))


def _fail(episode: Episode, error: str) -> None:
    episode.done, episode.valid, episode.reward, episode.error = True, False, 0.0, error[:500]
    episode.end_reason = episode.end_reason or "trainer_error"


def _take_score(episode: Episode, score: dict[str, Any], end_reason: str | None) -> None:
    """The session's final score: a reward when its status is ok, else the sample is masked."""
    episode.done = True
    episode.end_reason = end_reason or episode.end_reason
    if score.get("status") != "ok":
        episode.valid, episode.reward = False, 0.0
        episode.error = str(score.get("reason") or score.get("status"))
        return
    episode.reward = float(score["reward"])
    episode.correct = score.get("correct")
    episode.components = {k: float(v) for k, v in (score.get("components") or {}).items()}


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


@torch.no_grad()
def generate_turn(
    model: Any, tokenizer: Any, contexts: list[list[int]], config: TrainConfig
) -> list[list[int]]:
    """One sampled assistant turn per context (up to and including the end-of-sequence token)."""
    from proctor.trainer.generation import sample_continuations

    turns, _ = sample_continuations(model, tokenizer, contexts, config)
    return turns


def run_episodes(
    model: Any,
    tokenizer: Any,
    prompts: list[Prompt],
    config: TrainConfig,
    open_session: OpenSession,
    encode: Callable[[list[dict[str, Any]]], list[int]],
) -> list[Episode]:
    """Roll out `group_size` episodes per prompt (grouped: prompt 0's first) through tool sessions."""
    from proctor.trainer.generation import stop_token_ids

    stops = set(stop_token_ids(model, tokenizer))
    episodes = [
        Episode(prompt, [], list(prompt.messages)) for prompt in prompts for _ in range(config.group_size)
    ]

    def start(episode: Episode) -> None:
        task = episode.prompt.task
        assert task is not None and episode.prompt.environment is not None
        try:
            episode.session = open_session(episode.prompt.environment, task, {"max_turns": config.max_turns})
        except Exception as exc:  # the service or the session machinery failed: masked, never a 0
            # An unknown environment or a task it refuses fails every episode alike: a configuration error.
            if getattr(exc, "status", None) in (404, 422):
                raise ConfigError(f"{episode.prompt.environment}: {getattr(exc, 'message', exc)}") from None
            _fail(episode, _error_text(exc))

    def finish(episode: Episode, end_reason: str) -> None:
        assert episode.session is not None
        try:
            score = episode.session.finish()
            dumped = score.model_dump(mode="json") if hasattr(score, "model_dump") else dict(score)
            _take_score(episode, dumped, end_reason)
        except Exception as exc:
            _fail(episode, _error_text(exc))

    def step(episode: Episode, text: str) -> dict[str, Any] | None:
        assert episode.session is not None
        try:
            return episode.session.step({"role": "assistant", "content": text})
        except Exception as exc:
            if getattr(exc, "status", None) == 413:
                # The policy's own turn is too large for the session (a message or transcript budget): its
                # outcome, scored as the transcript stands (a refused step leaves the session open), not masked.
                finish(episode, "too_large")
                return None
            _fail(episode, _error_text(exc))
            return None

    try:
        _parallel(start, episodes)
        for episode in episodes:
            if episode.session is not None:
                episode.messages = list(episode.session.messages)
            episode.prompt_ids = encode(episode.messages)
        for _ in range(config.max_turns):
            running = [e for e in episodes if not e.done]
            if not running:
                break
            turns = generate_turn(
                model, tokenizer, [e.prompt_ids + e.completion_ids for e in running], config
            )
            texts = [tokenizer.decode(turn, skip_special_tokens=True) for turn in turns]
            for episode, turn in zip(running, turns, strict=True):
                episode.completion_ids += turn
                episode.completion_mask += [1] * len(turn)
                episode.turn_lengths.append(len(turn))
                # Cut at max_new_tokens: an earlier turn's cut counts too (the session ran its half-written text).
                episode.truncated = episode.truncated or turn[-1] not in stops
            with ThreadPoolExecutor(max_workers=min(SESSION_THREADS, len(running))) as pool:
                results = list(pool.map(step, running, texts))
            for episode, text, turn, result in zip(running, texts, turns, results, strict=True):
                if result is None or episode.done:
                    continue
                usage = result.get("usage") or {}
                episode.turns = int(usage.get("turns", episode.turns + 1))
                episode.tool_calls = int(usage.get("tool_calls", episode.tool_calls))
                episode.messages.append({"role": "assistant", "content": text})
                if result.get("done"):
                    _take_score(episode, result.get("score") or {}, result.get("end_reason"))
                    continue
                observations = list(result.get("observations") or [])
                ended_with = tokenizer.convert_ids_to_tokens(turn[-1]) if turn[-1] in stops else None
                tail = observation_ids(tokenizer, episode.messages, observations, ended_with)
                episode.messages += observations
                episode.completion_ids += tail
                episode.completion_mask += [0] * len(tail)
        # The session's own turn cap equals max_turns, so it has ended every episode by now; finish any other.
        leftover = [e for e in episodes if not e.done and e.session is not None]
        _parallel(lambda episode: finish(episode, "no_tool_call"), leftover)
    finally:
        _parallel(_close, [e for e in episodes if e.session is not None])
    return episodes


def _close(episode: Episode) -> None:
    """Close the episode's session; a failure to close is logged, never raised (the score is already in)."""
    assert episode.session is not None
    try:
        episode.session.close()
    except Exception as exc:
        log.warning("closing a tool session failed: %s", _error_text(exc))


def to_samples(episodes: list[Episode], tokenizer: Any) -> list[Sample]:
    """The episodes as the trainer's samples: observation tokens in the completion, with loss mask 0."""
    from proctor.trainer.generation import Sample

    samples = []
    for episode in episodes:
        sample = Sample(
            episode.prompt_ids,
            episode.completion_ids,
            episode.truncated,
            tokenizer.decode(episode.completion_ids, skip_special_tokens=False),
            reward=episode.reward,
            valid=episode.valid,
            correct=episode.correct,
            components=episode.components,
        )
        sample.completion_mask = episode.completion_mask
        sample.turns, sample.tool_calls = episode.turns, episode.tool_calls
        sample.turn_lengths = episode.turn_lengths
        sample.end_reason = episode.end_reason
        samples.append(sample)
    return samples


def episode_metrics(samples: Sequence[Sample]) -> dict[str, Any]:
    """Per-step tool metrics: mean turns and tool calls, end reasons (counts), masked samples."""
    if not samples:
        return {}
    reasons = Counter(s.end_reason or "none" for s in samples)
    return {
        "turns_mean": sum(s.turns for s in samples) / len(samples),
        "tool_calls_mean": sum(s.tool_calls for s in samples) / len(samples),
        "end_reasons": dict(sorted(reasons.items())),
        "masked_samples": sum(not s.valid for s in samples),
    }
