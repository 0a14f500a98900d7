"""What the judge verifiers share: their options, asking the judge k times, and the evidence in `details`."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import Field, field_validator

from proctor.contract import Status, Verdict, content_text
from proctor.registry import BaseOptions
from proctor.verifiers.judge.client import (
    JudgeConfig,
    JudgeError,
    Reply,
    Sampling,
    check_judge_url,
    complete,
    judge_config,
)
from proctor.verifiers.judge.parse import Unparseable

T = TypeVar("T")

DEADLINE_S = 300.0
"""Default deadline of a judge verifier: room for the judge's time limit plus its retry budget, twice over."""

REPLY_EXCERPT = 500


class JudgeOptions(BaseOptions):
    """Which judge to ask and how to sample it (defaults: PROCTOR_JUDGE_* settings, greedy, one sample)."""

    base_url: str | None = Field(
        default=None,
        description="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8001/v1 (default: PROCTOR_JUDGE_BASE_URL); "
        "only the configured one or one on PROCTOR_JUDGE_ALLOWED_URLS.",
    )
    model: str | None = Field(default=None, description="Judge model name (default: PROCTOR_JUDGE_MODEL).")
    api_key: str | None = Field(
        default=None,
        description="Bearer key for the endpoint (default: PROCTOR_JUDGE_API_KEY, sent only to the configured URL).",
    )
    samples: int = Field(
        default=1, ge=1, le=16, description="Judge samples per question; their verdicts are averaged."
    )
    temperature: float = Field(default=0.0, ge=0.0, le=2.0, description="Judge sampling temperature.")
    top_p: float | None = Field(default=None, gt=0.0, le=1.0, description="Judge nucleus sampling.")
    max_tokens: int = Field(default=1024, ge=16, le=32_768, description="Judge reply length limit.")
    seed: int | None = Field(
        default=None, description="Sampling seed sent to the judge, when it honours one."
    )

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        return value if value is None else check_judge_url(value)

    def config(self) -> JudgeConfig:
        """The judge endpoint for this request (raises JudgeError when none is configured)."""
        return judge_config(self.base_url, self.model, self.api_key)

    def sampling(self) -> Sampling:
        """The sampling settings for this request."""
        return Sampling(self.temperature, self.max_tokens, self.top_p, self.seed)


@dataclass
class Ledger:
    """What the judge calls of one score cost and where they came from, for `details`."""

    model: str = ""
    calls: int = 0
    cached: int = 0
    prompt_hashes: list[str] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)
    replies: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def add(self, reply: Reply) -> None:
        """Account for one reply."""
        self.model = reply.model
        self.calls += 1
        self.cached += int(reply.cached)
        if reply.prompt_hash not in self.prompt_hashes:
            self.prompt_hashes.append(reply.prompt_hash)
        if not reply.cached:  # tokens a cached reply did not spend again
            for name, value in reply.usage.items():
                self.usage[name] = self.usage.get(name, 0) + value
        self.replies.append(
            (reply.text if reply.text is not None else f"[refusal] {reply.refusal}")[:REPLY_EXCERPT]
        )

    def details(self) -> dict[str, Any]:
        """The judge evidence for a Score's details."""
        out: dict[str, Any] = {
            "judge_model": self.model,
            "judge_calls": self.calls,
            "judge_cached": self.cached,
            "prompt_hashes": self.prompt_hashes,
            "token_usage": self.usage,
        }
        if self.replies:
            out["judge_replies"] = self.replies
        if self.problems:
            out["judge_problems"] = self.problems
        return out


async def ask(
    options: JudgeOptions,
    messages: list[dict[str, Any]],
    parse: Callable[[str], T],
    ledger: Ledger,
    config: JudgeConfig | None = None,
) -> list[T | None]:
    """Ask the judge `options.samples` times; each parsed verdict, or None for a refusal or an unparseable reply.

    A failed call, or a reply cut off at max_tokens, raises JudgeError (a machinery failure); a reply that says
    nothing parseable is None, which the verifiers count as a wrong verdict.
    """
    config = config or options.config()
    sampling = options.sampling()
    replies = await asyncio.gather(
        *(complete(config, messages, sampling, sample) for sample in range(options.samples))
    )
    verdicts: list[T | None] = []
    for reply in replies:
        ledger.add(reply)
        # Truncation first: a reasoning judge cut off while thinking has no content at all, which is not a refusal.
        if reply.truncated:
            # A cut-off reply may end in a verdict it was about to revise, or in half a number: it is no verdict,
            # and not the response's fault either (a reward of 0 would punish it for the judge's length limit).
            raise JudgeError(
                "judge_truncated",
                f"the judge's reply was cut off at max_tokens={options.max_tokens} (finish_reason length) "
                "before it gave a verdict; raise options.max_tokens",
                reply.attempts,
            )
        if reply.text is None:
            ledger.problems.append(f"refusal: {(reply.refusal or '')[:200]}")
            verdicts.append(None)
            continue
        try:
            verdicts.append(parse(reply.text))
        except Unparseable as exc:
            ledger.problems.append(f"unparseable: {exc}")
            verdicts.append(None)
    return verdicts


def transcript(response: str | list[dict[str, Any]], prompt: str | None) -> tuple[str | None, str]:
    """(task prompt, graded text) from a response string or a chat transcript.

    For a transcript the graded text is the last assistant message and, unless the reference gives a prompt,
    the task is the last user message before it (what the judge needs to know what was asked).
    """
    if isinstance(response, str):
        return prompt, response
    last = max((i for i, m in enumerate(response) if m.get("role") == "assistant"), default=None)
    if last is None:
        return prompt, ""
    text = content_text(response[last].get("content"))
    if prompt is None:
        users = [m for m in response[:last] if m.get("role") == "user"]
        prompt = content_text(users[-1].get("content")) if users else None
    return prompt, text


def judge_failure(error: JudgeError, ledger: Ledger, **details: Any) -> Verdict:
    """A judge call failed: status judge_error (the trainer masks it), never a reward of 0."""
    return Verdict.failure(
        Status.judge_error,
        error.reason,
        error=error.message,
        attempts=error.attempts,
        **details,
        **ledger.details(),
    )


def unparsed_reason(ledger: Ledger) -> str:
    """judge_refusal when every failed sample was a refusal, else judge_unparseable."""
    if ledger.problems and all(problem.startswith("refusal") for problem in ledger.problems):
        return "judge_refusal"
    return "judge_unparseable"
