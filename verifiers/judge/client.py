"""The judge client: chat completions against any OpenAI-compatible endpoint (vLLM, SGLang, OpenAI).

- Bounded concurrency (PROCTOR_JUDGE_CONCURRENCY calls in flight per event loop) and a time limit per call
  (PROCTOR_JUDGE_TIMEOUT_S).
- Retries on 429, 5xx, time-outs and dropped connections, with exponential backoff and jitter, honouring
  Retry-After; no retry is started that would end past the retry budget (PROCTOR_JUDGE_RETRY_BUDGET_S), so
  a call takes at most about timeout + budget. What still fails raises `JudgeError`, which the verifiers turn
  into `status: judge_error`, never a reward of 0.
- Every reply is cached by a hash of (endpoint, model, messages, sampling settings, sample index), and
  identical calls in flight at the same time share one request, so the 16 samples of a GRPO group that give
  the same answer pay for one judge call.

One `httpx.AsyncClient` per event loop: the service's loop, and the engine's background loop for
synchronous callers.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Any

import httpx

from proctor.cache import LRUCache
from proctor.endpoints import check_request_url, key_for
from proctor.http_retry import log_body, parse_retry_after, retry_delay, retryable
from proctor.settings import get_settings

CACHE_ENTRIES = 100_000

log = logging.getLogger("proctor.judge")


class JudgeError(Exception):
    """A judge call that failed (no reply to grade): `reason` is a short machine code for the Score."""

    def __init__(self, reason: str, message: str, attempts: int = 0):
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.attempts = attempts


@dataclass(frozen=True)
class JudgeConfig:
    """Where and how to call the judge: the settings, overridden per request by the verifier's options."""

    base_url: str
    model: str
    api_key: str | None = None
    timeout_s: float = 60.0
    retry_budget_s: float = 60.0
    concurrency: int = 16

    @property
    def url(self) -> str:
        """The chat-completions URL."""
        return self.base_url.rstrip("/") + "/chat/completions"


def check_judge_url(value: str) -> str:
    """A request's judge URL in canonical form if it may use it (the configured judge, or one on
    PROCTOR_JUDGE_ALLOWED_URLS), else ValueError: a 422 naming the option, before any connection is made."""
    settings = get_settings()
    return check_request_url(
        value, settings.judge_base_url, settings.judge_allowed_urls, "PROCTOR_JUDGE_ALLOWED_URLS"
    )


def judge_config(
    base_url: str | None = None, model: str | None = None, api_key: str | None = None
) -> JudgeConfig:
    """The configured judge, with per-request overrides; raises JudgeError when no endpoint is configured.

    A request's `base_url` must be the configured one or on PROCTOR_JUDGE_ALLOWED_URLS (the options' validators
    make that a 422; this is the last line), and the configured key goes only to the configured URL.
    """
    settings = get_settings()
    if base_url:
        try:
            base_url = check_judge_url(base_url)
        except ValueError as exc:
            raise JudgeError("judge_url_not_allowed", f"base_url {exc}") from None
    config = JudgeConfig(
        base_url=base_url or settings.judge_base_url,
        model=model or settings.judge_model,
        api_key=key_for(base_url, settings.judge_base_url, settings.judge_api_key, api_key),
        timeout_s=settings.judge_timeout_s,
        retry_budget_s=settings.judge_retry_budget_s,
        concurrency=settings.judge_concurrency,
    )
    if not config.base_url:
        raise JudgeError(
            "judge_not_configured", "no judge endpoint: set PROCTOR_JUDGE_BASE_URL or options.base_url"
        )
    return config


@dataclass(frozen=True)
class Sampling:
    """Sampling settings sent with each judge call (and part of its cache key)."""

    temperature: float = 0.0
    max_tokens: int = 1024
    top_p: float | None = None
    seed: int | None = None

    def payload(self) -> dict[str, Any]:
        """The request fields these settings add."""
        body: dict[str, Any] = {"temperature": self.temperature, "max_tokens": self.max_tokens}
        if self.top_p is not None:
            body["top_p"] = self.top_p
        if self.seed is not None:
            body["seed"] = self.seed
        return body


@dataclass(frozen=True)
class Reply:
    """One judge reply: its text (None when the judge refused), token usage, and where it came from."""

    text: str | None
    refusal: str | None
    usage: dict[str, int]
    model: str
    prompt_hash: str
    cached: bool = False
    attempts: int = 1
    truncated: bool = False  # finish_reason "length": the judge was cut off before it finished its verdict


@dataclass
class Stats:
    """Counters for benchmarks and /metrics-style reporting: calls sent, cache hits, in-flight joins."""

    sent: int = 0
    cache_hits: int = 0
    joined: int = 0
    retries: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, **counts: int) -> None:
        """Increase counters."""
        with self.lock:
            for name, value in counts.items():
                setattr(self, name, getattr(self, name) + value)


STATS = Stats()


def prompt_hash(config: JudgeConfig, messages: list[dict[str, Any]], sampling: Sampling, sample: int) -> str:
    """The cache key of one judge call: a hash of the endpoint, model, messages, sampling and sample index."""
    payload = json.dumps(
        [config.base_url.rstrip("/"), config.model, messages, sampling.payload(), sample],
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.blake2b(payload.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def message_chars(messages: list[dict[str, Any]]) -> int:
    """The characters of text (and image URLs) in chat messages: what hashing and sending them costs."""
    total = 0
    for message in messages:
        content = message.get("content")
        parts = [content] if isinstance(content, str) else content if isinstance(content, list) else []
        for part in parts:
            if isinstance(part, str):
                total += len(part)
            elif isinstance(part, dict):
                for value in part.values():
                    if isinstance(value, str):
                        total += len(value)
                    elif isinstance(value, dict):  # image_url: {"url": ..., "detail": ...}
                        total += sum(len(inner) for inner in value.values() if isinstance(inner, str))
    return total


def _large(messages: list[dict[str, Any]]) -> bool:
    """Past inline_max_chars, the prompt is hashed and encoded on a thread: a judged response may be as long as
    the body limit, and doing that work once per sample on the event loop would stall every other request."""
    return message_chars(messages) > get_settings().inline_max_chars


CACHE: LRUCache[Reply] = LRUCache(CACHE_ENTRIES)  # only successful calls are kept


@dataclass
class _LoopState:
    client: httpx.AsyncClient
    semaphore: asyncio.Semaphore
    inflight: dict[str, asyncio.Future] = field(default_factory=dict)


_states: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopState] = weakref.WeakKeyDictionary()


def _state(concurrency: int) -> _LoopState:
    loop = asyncio.get_running_loop()
    state = _states.get(loop)
    if state is None:
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        state = _states[loop] = _LoopState(httpx.AsyncClient(limits=limits), asyncio.Semaphore(concurrency))
    return state


def reset() -> None:
    """Forget cached replies and counters (tests and benchmarks start from a clean state)."""
    CACHE.clear()
    with STATS.lock:
        STATS.sent = STATS.cache_hits = STATS.joined = STATS.retries = 0


async def complete(
    config: JudgeConfig, messages: list[dict[str, Any]], sampling: Sampling, sample: int = 0
) -> Reply:
    """One judge reply for these messages, from the cache, a call already in flight, or a new call."""
    if _large(messages):
        key = await asyncio.to_thread(prompt_hash, config, messages, sampling, sample)
    else:
        key = prompt_hash(config, messages, sampling, sample)
    hit = CACHE.get(key)
    if hit is not None:
        STATS.add(cache_hits=1)
        return _as_cached(hit)
    state = _state(config.concurrency)
    while (pending := state.inflight.get(key)) is not None:
        try:
            reply = await asyncio.shield(pending)
        except asyncio.CancelledError:
            if pending.cancelled():
                continue  # the caller that owned the request was cancelled, not this one: ask again
            raise
        STATS.add(joined=1)
        return _as_cached(reply)
    future: asyncio.Future = asyncio.get_running_loop().create_future()
    state.inflight[key] = future
    try:
        # With a seed, sample i sends seed + i: the same seed k times would make the k samples one sample.
        sent = (
            sampling if sampling.seed is None else dataclasses.replace(sampling, seed=sampling.seed + sample)
        )
        reply = await _call(state, config, messages, sent, key)
    except asyncio.CancelledError:
        future.cancel()
        raise
    except Exception as exc:
        future.set_exception(exc)
        future.exception()  # mark retrieved: nobody may be waiting
        raise
    else:
        if not reply.truncated:  # a cut-off reply is a failure (judge_truncated): asked again, it may finish
            CACHE.put(key, reply)
        future.set_result(reply)
        return reply
    finally:
        state.inflight.pop(key, None)


def _as_cached(reply: Reply) -> Reply:
    return dataclasses.replace(reply, cached=True, attempts=0)


async def _call(
    state: _LoopState, config: JudgeConfig, messages: list[dict[str, Any]], sampling: Sampling, key: str
) -> Reply:
    body = {"model": config.model, "messages": messages, **sampling.payload()}
    headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
    content: bytes | None = None
    if _large(messages):  # encoded once, on a thread, and sent as it is with every retry
        content = await asyncio.to_thread(lambda: json.dumps(body).encode("ascii"))
        headers["Content-Type"] = "application/json"
    give_up_at = time.monotonic() + config.retry_budget_s
    attempt = 0
    while True:
        attempt += 1
        retry_after: float | None = None
        try:
            async with state.semaphore:
                STATS.add(sent=1)
                if content is None:
                    response = await state.client.post(
                        config.url, json=body, headers=headers, timeout=config.timeout_s
                    )
                else:
                    response = await state.client.post(
                        config.url, content=content, headers=headers, timeout=config.timeout_s
                    )
        except httpx.InvalidURL as exc:
            raise JudgeError("judge_bad_url", f"{config.url}: {exc}", attempt) from None
        except httpx.TimeoutException as exc:
            error = JudgeError("judge_timeout", f"no reply within {config.timeout_s:g} s: {exc!r}", attempt)
        except httpx.TransportError as exc:  # refused, reset, dropped mid-reply
            error = JudgeError("judge_unreachable", f"{type(exc).__name__}: {exc}", attempt)
        else:
            if response.status_code == 200:
                return _reply_of(response, config, key, attempt)
            # The body is not echoed: it is whatever the endpoint chose to send, and lands in a client's Score.
            log_body(config.url, response, log)
            error = JudgeError(
                f"judge_http_{response.status_code}", f"judge answered HTTP {response.status_code}", attempt
            )
            if not retryable(response.status_code):
                raise error
            retry_after = parse_retry_after(response.headers.get("retry-after"))
        delay = retry_delay(attempt, retry_after, give_up_at)
        if delay is None:
            error.message += f" (gave up after {attempt} attempt(s) within the retry budget)"
            raise error
        STATS.add(retries=1)
        await asyncio.sleep(delay)


def _reply_of(response: httpx.Response, config: JudgeConfig, key: str, attempts: int) -> Reply:
    try:
        data = response.json()
        message = data["choices"][0]["message"]
        if not isinstance(message, dict) or not isinstance(data["choices"][0], dict):
            raise TypeError("choices[0].message is not an object")
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        # A server that answers 200 with something else is broken: an outage, not a verdict (and not a 500).
        log_body(config.url, response, log)
        raise JudgeError(
            "judge_bad_reply", f"not a chat completion ({type(exc).__name__})", attempts
        ) from None
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    tokens = {
        name: int(usage[name])
        for name in ("prompt_tokens", "completion_tokens", "total_tokens")
        if isinstance(usage.get(name), int)
    }
    content = message.get("content")
    refusal = message.get("refusal")
    return Reply(
        text=content if isinstance(content, str) else None,
        refusal=refusal if isinstance(refusal, str) and refusal else None,
        usage=tokens,
        model=str(data.get("model") or config.model),
        prompt_hash=key,
        attempts=attempts,
        truncated=data["choices"][0].get("finish_reason") == "length",
    )
