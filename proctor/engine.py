"""The engine: validate a request, consult the cache, run the verifier inline or in the pool, build the Score.

The same engine serves the in-process API (`proctor.score`), the HTTP service and the CLI, so all three
give the same score for the same request.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import datetime
import decimal
import enum
import fractions
import inspect
import logging
import re
import secrets
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from pydantic import BaseModel, ValidationError

from proctor.cache import (
    CacheSigner,
    LRUCache,
    NullCache,
    ResultCache,
    TieredCache,
    cache_key,
    cache_secret,
    open_score,
    scoring_namespace,
)
from proctor.capacity import PoolClosed
from proctor.contract import (
    MAX_NESTING,
    ChatMessage,
    ErrorBody,
    ItemError,
    RequestError,
    Score,
    ScoreRequest,
    Status,
    Verdict,
    check_nesting,
    content_text,
    request_error_from,
)
from proctor.end_of_turn import Cut, cut_end_of_turn
from proctor.registry import BaseOptions, VerifierSpec, get_verifier, load_plugins
from proctor.settings import Settings, get_settings
from proctor.worker_pool import WorkerPool

if TYPE_CHECKING:
    from proctor.redis_backend import SharedRedis

log = logging.getLogger(__name__)

FLIGHT_LEASE_MS = 15_000
"""The single-flight lock's lease; its holder renews it every third of that while the item runs, so a replica
that dies holding it blocks the others for at most this long."""
FLIGHT_EXTRA_WAIT_S = 10.0
"""A waiter waits at most the item's deadline plus this for the holder's result, then runs the item itself."""
FLIGHT_RESULT_TTL_MS = 10_000
"""How long a holder's result that is not `ok` (a timeout, a machinery failure) stays for the duplicates that
waited on it; never cached beyond that, so a failure never sticks."""
FLIGHT_POLL_MAX_S = 0.25
FLIGHT_POLLS_PER_S = 1000
"""Redis polls per second all of a process's waiters make together at most: with many waiters each polls less
often (never less often than FLIGHT_POLL_MAX_S would, until there are more than 250 of them)."""


@dataclass
class Prepared:
    """A validated request, ready to score."""

    spec: VerifierSpec
    id: Any
    response: Any
    reference: Any
    options: BaseOptions
    key: str
    started: float
    end_tokens: tuple[str, ...] = ()
    """The end-of-turn tokens the response was cut at (nested requests inherit them)."""
    end_of_turn: dict[str, Any] | None = None
    """What was cut from the response, as `details.end_of_turn` reports it; None when nothing was."""
    _sized: tuple[int, int] | None = field(default=None, repr=False, compare=False)
    """(limit, count) of the last `input_size` call: the engine asks once for the lane and once to score."""

    @property
    def size(self) -> int:
        """Characters of response text (the whole input, reference included, is `input_size`)."""
        if isinstance(self.response, str):
            return len(self.response)
        return sum(len(str(message.get("content") or "")) for message in self.response)

    def input_size(self, limit: int) -> int:
        """`bounded_size` of the response, reference and options as the verifier reads them; past `limit` it
        stops counting and returns a number over it, so a huge reference is never walked in full."""
        if self._sized is None or (self._sized[1] > self._sized[0] and limit > self._sized[0]):
            # Recount only when an earlier count stopped short of this limit (another engine's bound).
            self._sized = (limit, bounded_size((self.response, self.reference, self.options), limit))
        return self._sized[1]

    @property
    def deadline_s(self) -> float:
        """The item's hard deadline: the request's option, else the verifier's default."""
        return self.options.deadline_s or self.spec.deadline_s


NODE_CHARS = 2
"""What `measure` counts for every value beyond a string's characters (a JSON scalar and its separator)."""
CONTAINER_CHARS = 16
"""What it counts for each list, object or model beyond that: each costs validation, the cache key's JSON and
this walk far more than a character does, and the weight keeps the walk short (at most limit / 16 of them)."""

PARSED_SLACK_CHARS = 4_096
"""How much larger than the raw request a prepared item may measure and still run inline (see runs_inline)."""

_SCALARS = (int, float, bool, type(None))
_PRINTABLE = (
    datetime.date,
    datetime.time,
    datetime.timedelta,
    decimal.Decimal,
    fractions.Fraction,
    uuid.UUID,
    complex,
    enum.Enum,
    type,
)
"""Values a verifier may parse a reference into that have no __dict__ to walk: counted as their text."""


class Size(NamedTuple):
    """What `measure` counted: `total` as a JSON size estimate, `structure` the part not string characters."""

    total: int
    structure: int
    """Values and containers: what a walk over the value costs, whatever the strings' lengths."""


def measure(value: Any, limit: int) -> Size:
    """About how many characters of JSON `value` is (a string its length, every value NODE_CHARS more, every
    container CONTAINER_CHARS more), counted without recursion and only until the total passes `limit`: then
    a total over `limit` comes back, so a huge structure is never walked in full.

    Sizes the work of an item before it is prepared or scored on the event loop: validation, the cache key
    (JSON and a hash over the whole reference) and an inline verifier all grow with the reference and options
    as well as the response, and a reference is bounded only by the body limit unless its verifier caps it."""
    text = 0
    structure = NODE_CHARS
    stack: list[Any] = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            text += len(node)
            continue
        if isinstance(node, _SCALARS):
            continue
        if isinstance(node, (list, tuple)):
            children: Any = node
        elif isinstance(node, dict):
            children = [*node.keys(), *node.values()] if len(node) <= limit else None
        elif isinstance(node, (set, frozenset)):
            children = list(node) if len(node) <= limit else None
        elif isinstance(node, BaseModel):
            extra = node.__pydantic_extra__
            children = [*node.__dict__.values(), *([extra] if extra else [])]  # the fields, as validated
        elif isinstance(node, (bytes, bytearray)):
            text += len(node)
            continue
        elif isinstance(node, _PRINTABLE):
            text += len(str(node))
            continue
        elif hasattr(node, "__dict__"):  # a dataclass or another plain object a verifier parsed into
            children = list(vars(node).values())
        else:  # nothing says how big it is: it is not trusted to be cheap
            return Size(limit + 1, structure)
        if children is None:
            return Size(limit + 1, structure)
        # Every child counts NODE_CHARS before any is looked at, so a list of a million numbers is over the
        # limit at once; then only strings (their length) and containers (a visit of their own) add more.
        structure += CONTAINER_CHARS + NODE_CHARS * len(children)
        if text + structure > limit:
            return Size(text + structure, structure)
        for child in children:
            kind = type(child)
            if kind is str:
                text += len(child)
            elif kind not in _SCALARS:
                stack.append(child)
        if text + structure > limit:
            return Size(text + structure, structure)
    return Size(text + structure, structure)


def bounded_size(value: Any, limit: int) -> int:
    """`measure(value, limit).total`: the JSON size estimate, counted in full up to `limit` and no further."""
    return measure(value, limit).total


def request_size(request: ScoreRequest | dict[str, Any], limit: int) -> Size:
    """`measure` of a raw request's response, reference and options (the parts a verifier reads)."""
    if isinstance(request, ScoreRequest):
        parts: Any = (request.response, request.reference, request.options)
    elif isinstance(request, dict):
        parts = (request.get("response"), request.get("reference"), request.get("options"))
    else:
        return Size(limit + 1, 0)
    return measure(parts, limit)


def parse_request(request: ScoreRequest | dict[str, Any]) -> ScoreRequest:
    """Validate a raw request dict; raises RequestError(422) naming the field."""
    if isinstance(request, ScoreRequest):
        return request
    if not isinstance(request, dict):
        raise RequestError(422, "a score request must be a JSON object", field=None)
    try:
        return ScoreRequest.model_validate(request)
    except ValidationError as exc:
        raise request_error_from(exc) from None


def check_request_nesting(request: ScoreRequest | dict[str, Any]) -> None:
    """422 naming the field when a reference, options or chat response nests deeper than MAX_NESTING.

    Runs before any pydantic validation: pydantic and the JSON encoders behind the cache key are recursive,
    and fail on deep data with errors that would become a 500 or a masked verifier_error.
    """
    if isinstance(request, ScoreRequest):
        response: Any = request.response
        if isinstance(response, list):  # parsed messages: walk their content and extra fields as sent
            response = [{**(message.model_extra or {}), "content": message.content} for message in response]
        values = {"reference": request.reference, "options": request.options, "response": response}
    elif isinstance(request, dict):
        values = {name: request.get(name) for name in ("reference", "options", "response")}
    else:
        return
    for name, value in values.items():
        check_nesting(value, name, MAX_NESTING)


_outer_end_tokens: contextvars.ContextVar[tuple[str, ...] | None] = contextvars.ContextVar(
    "proctor_end_tokens", default=None
)
"""The end tokens of the item whose async verifier is running, inherited by the requests it nests (multi)."""


def resolve_end_tokens(options: BaseOptions, default: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """The tokens to cut at: the request's `options.end_tokens`, else `default` (an engine's settings), else
    those of the request this one is nested in, else PROCTOR_END_TOKENS."""
    if options.end_tokens is not None:
        return tuple(options.end_tokens)
    if default is not None:
        return default
    inherited = _outer_end_tokens.get()
    return inherited if inherited is not None else get_settings().end_token_list


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def prepare(request: ScoreRequest | dict[str, Any], *, end_tokens: tuple[str, ...] | None = None) -> Prepared:
    """Look the verifier up, validate reference and options and read the response; raises RequestError (404, 422).

    The response is read once here for every route: end-of-turn tokens are cut (`cut_response`) at the
    request's `options.end_tokens`, else `end_tokens`, else the service's list. The cache key is over the
    text the verifier reads and the tokens it was cut at, so requests that differ only in their tokens never
    share a score; what was cut is added to each Score's details, never cached with it.
    """
    started = time.perf_counter()
    check_request_nesting(request)
    parsed = parse_request(request)
    spec = get_verifier(parsed.verifier)
    reference = spec.parse_reference(parsed.reference)
    options = spec.parse_options(parsed.options)
    tokens = resolve_end_tokens(options, end_tokens)
    response, record = cut_response(parsed.response, tokens, messages=spec.accepts_messages)
    if isinstance(response, str) and _LONE_SURROGATE.search(response):
        # JSON can carry "\ud800"; no tokenizer writes it and no UTF-8 file can hold it. It becomes U+FFFD, so a
        # program or answer holding one is graded as written rather than failing the machinery (a masked 503).
        response = _LONE_SURROGATE.sub("\ufffd", response)
    key = cache_key(
        spec.qualified_name,
        spec.reference_adapter.dump_python(reference, mode="json"),
        response,
        # deadline_s is part of the key: a verifier may spend its deadline as the program's time budget (code),
        # so a score under a tight deadline must not answer a request that allowed more (cache poisoning).
        {**options.model_dump(mode="json"), "end_tokens": list(tokens)},
    )
    return Prepared(spec, parsed.id, response, reference, options, key, started, tokens, record)


def cut_response(
    response: str | list[ChatMessage], tokens: tuple[str, ...], *, messages: bool = False
) -> tuple[Any, dict[str, Any] | None]:
    """The response a verifier reads, with end-of-turn tokens cut, and the record of what was cut.

    A verifier of one text gets the string, or the last assistant message's content, cut. A verifier that
    accepts messages gets the transcript with each assistant message's text cut (each text part of a list
    content on its own); other roles' messages are not the model's output and stay as they are.
    """
    if isinstance(response, str):
        cut = cut_end_of_turn(response, tokens)
        return cut.text, _record([cut])
    if not messages:
        for message in reversed(response):
            if message.role == "assistant":
                cut = cut_end_of_turn(content_text(message.content), tokens)
                return cut.text, _record([cut])
        return "", None
    dumped = [message.model_dump(exclude_none=True) for message in response]
    cuts: list[Cut] = []
    indexes: list[int] = []
    for index, message in enumerate(dumped):
        content = message.get("content")
        if message["role"] != "assistant" or not tokens or content is None:
            continue
        if isinstance(content, str):
            parts = [cut_end_of_turn(content, tokens)]
            message["content"] = parts[0].text
        else:
            parts = []
            for part in content:
                if part.get("type", "text") == "text" and isinstance(part.get("text"), str):
                    parts.append(cut_end_of_turn(part["text"], tokens))
                    part["text"] = parts[-1].text
        if any(part.token is not None for part in parts):
            cuts.extend(parts)
            indexes.append(index)
    record = _record(cuts)
    if record is not None:
        record["messages"] = indexes
    return dumped, record


def _record(cuts: list[Cut]) -> dict[str, Any] | None:
    made = [cut for cut in cuts if cut.token is not None]
    if not made:
        return None
    return {"token": made[0].token, "cut_chars": sum(cut.cut_chars for cut in made)}


def _run_inline(item: Prepared) -> Verdict:
    try:
        return item.spec.score(item.response, item.reference, item.options)
    except Exception as exc:  # a verifier bug is a machinery failure, never a reward of 0
        log.exception("verifier %s raised", item.spec.qualified_name)
        return Verdict.failure(
            Status.verifier_error, "verifier_exception", error=f"{type(exc).__name__}: {exc}"
        )


def is_async(spec: VerifierSpec) -> bool:
    """Whether a verifier is IO-bound: an `async def` score function (an LLM judge, an embeddings endpoint).

    Such verifiers are awaited on an event loop, many at once, instead of blocking a thread or a pool worker
    each while they wait on the network; they never go to the pool, whatever their execution says.
    """
    return inspect.iscoroutinefunction(spec.score)


_current_engine: contextvars.ContextVar[Engine | None] = contextvars.ContextVar(
    "proctor_engine", default=None
)


def current_engine() -> Engine:
    """The engine running the current async verifier (so `multi` scores its parts through it), else the default."""
    return _current_engine.get() or default_engine()


async def _run_async(engine: Engine, item: Prepared) -> Verdict:
    token = _current_engine.set(engine)
    tokens = _outer_end_tokens.set(item.end_tokens)
    try:
        coroutine = item.spec.score(item.response, item.reference, item.options)
        return await asyncio.wait_for(coroutine, item.deadline_s)
    except TimeoutError:
        return Verdict.failure(Status.timeout, "deadline", deadline_s=item.deadline_s)
    except Exception as exc:  # a verifier bug is a machinery failure, never a reward of 0
        log.exception("verifier %s raised", item.spec.qualified_name)
        return Verdict.failure(
            Status.verifier_error, "verifier_exception", error=f"{type(exc).__name__}: {exc}"
        )
    finally:
        _outer_end_tokens.reset(tokens)
        _current_engine.reset(token)


class _LoopThread:
    """One event loop on a daemon thread, where synchronous callers run async verifiers."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name="proctor-async", daemon=True).start()

    def run(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        """Run a coroutine on the loop and block until it is done."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()


_loop_thread: _LoopThread | None = None


def run_sync(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """Run a coroutine to completion from synchronous code, on the shared background event loop."""
    global _loop_thread
    if _loop_thread is None:
        with _default_lock:
            if _loop_thread is None:
                _loop_thread = _LoopThread()
    return _loop_thread.run(coroutine)


class Engine:
    """Scores requests with a result cache and a lazily started worker pool."""

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        cache: ResultCache | None = None,
        pool: WorkerPool | None = None,
    ):
        self.settings = settings or get_settings()
        # Plugins named in code, not only in the environment; built-ins load when first looked up.
        load_plugins(self.settings.plugins)
        self.shared: SharedRedis | None = None
        """Redis shared with other replicas (PROCTOR_REDIS_URL): single-flight locks (and, unless
        PROCTOR_REDIS_CACHE_URL names another, the second cache level)."""
        self.signer = CacheSigner(cache_secret(self.settings))
        """Seals what replicas read from each other (scores, single-flight failures): PROCTOR_CACHE_SECRET."""
        # Hashes the package's files (once per process): only a service sharing Redis needs it.
        self.namespace = scoring_namespace(self.settings) if self.settings.redis_url else ""
        """Code, version, plugins and scoring settings: replicas that differ in them share no scores or flights."""
        self._flight_waiters = 0
        self._flight_waiters_lock = threading.Lock()  # async verifiers nest items from another loop's thread
        if cache is None:
            cache = LRUCache(self.settings.cache_size) if self.settings.cache_size > 0 else NullCache()
            if self.settings.redis_url:
                # imports redis only when configured
                from proctor.redis_backend import ForwardingObserver, connect

                self.shared = connect(self.settings.redis_url)
                cache_url = self.settings.redis_cache_url or self.settings.redis_url
                cache_redis = self.shared if cache_url == self.settings.redis_url else connect(cache_url)
                if (
                    cache_redis is not self.shared
                ):  # its hits, misses and errors count in this service's metrics
                    cache_redis.observer = ForwardingObserver(self.shared)
                cache = TieredCache(
                    cache,
                    cache_redis,
                    self.settings.redis_cache_ttl_s,
                    signer=self.signer,
                    namespace=self.namespace,
                )
                if not self.signer.signs:
                    _warn_unsigned()
        self.cache = cache
        self._pool = pool
        self._pool_lock = threading.Lock()

    @property
    def pool(self) -> WorkerPool:
        """The worker pool, started on first use so inline-only callers never pay for it."""
        if self._pool is None:
            with self._pool_lock:
                if self._pool is None:
                    s = self.settings
                    self._pool = WorkerPool(
                        s.pool_workers,
                        memory_mb=s.pool_memory_mb,
                        queue_size=s.pool_queue,
                        max_tasks=s.pool_max_tasks,
                        plugins=s.plugins,
                    )
        return self._pool

    @property
    def pool_started(self) -> bool:
        """Whether the worker pool has been started."""
        return self._pool is not None

    def close(self) -> None:
        """Stop the worker pool, if it was started."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def prepare(self, request: ScoreRequest | dict[str, Any]) -> Prepared:
        """`prepare` with this engine's end tokens (PROCTOR_END_TOKENS) as the default; raises RequestError.

        For requests from outside. A verifier that nests requests (multi) calls the module's `prepare`, so its
        parts inherit the tokens of the item being scored."""
        return prepare(request, end_tokens=self.settings.end_token_list)

    async def prepare_async(self, request: ScoreRequest | dict[str, Any]) -> Prepared:
        """`prepare` for the event loop: a request past `inline_max_chars` in all (response, reference and
        options: `request_size`), or a chat transcript, is read (end-of-turn cut, the verifier's validation, the
        cache key over the whole reference) on a thread, so one big body never stalls the service."""
        response = request.response if isinstance(request, ScoreRequest) else request.get("response")
        limit = self.settings.inline_max_chars
        if isinstance(response, str) and request_size(request, limit).total <= limit:
            return self.prepare(request)
        return await asyncio.to_thread(self.prepare, request)

    def runs_inline(self, item: Prepared) -> bool:
        """Inline verifiers run in this process on small inputs; large ones go to the killable pool.

        Even a linear-time check takes seconds on a 10 MB response, which would stall every other request
        of the service's event loop, so past `inline_max_chars` the item gets a worker and a deadline. The
        size is the whole input (`Prepared.input_size`: a short response against 25 MB of golds is large) plus
        what the parsed reference declares its check costs beyond that (`inline_cost`, text.match's regex).
        """
        if is_async(item.spec) or item.spec.execution != "inline":
            return False
        # The prepared item holds what parsing added (option defaults, a shorthand reference's fields); the slack
        # keeps every request that the raw-request checks (prepare_async, the batch lane) found within the
        # limit inline here too, so an item of the inline lane never ends up waiting for the pool.
        limit = self.settings.inline_max_chars
        limit += min(limit, PARSED_SLACK_CHARS)
        # Work that a reference's size does not show (an RE2 program of 3,000 instructions from 18 characters of
        # pattern) is the reference's to declare: `inline_cost(response_chars)`, in characters' worth.
        declared = getattr(item.reference, "inline_cost", None)
        extra = max(0, declared(item.size)) if callable(declared) else 0
        return extra <= limit and item.input_size(limit - extra) <= limit - extra

    # -- building scores -------------------------------------------------------------------------

    def _cached(self, item: Prepared) -> Score | None:
        hit = self.cache.get(item.key)
        if hit is None:
            return None
        # A deep copy: callers own the Score they get, and must not be able to change the cached one.
        score = hit.model_copy(
            update={"id": item.id, "cached": True, "elapsed_ms": _ms_since(item.started)}, deep=True
        )
        return _with_cut(score, item)

    def _finish(self, item: Prepared, verdict: Verdict) -> Score:
        if not isinstance(verdict, Verdict):  # a verifier bug is a machinery failure, never a 500
            verdict = Verdict.failure(
                Status.verifier_error,
                "bad_verdict",
                error=f"{item.spec.qualified_name} returned {type(verdict).__name__}, not a Verdict",
            )
        score = Score(
            id=item.id,
            verifier=item.spec.qualified_name,
            status=verdict.status,
            reward=verdict.reward if verdict.status is Status.ok else 0.0,
            correct=verdict.correct if verdict.status is Status.ok else None,
            reason=verdict.reason,
            components=verdict.components,
            details=verdict.details,
            elapsed_ms=_ms_since(item.started),
        )
        if score.status is Status.ok:  # only true verdicts are cached, so an outage never sticks
            self.cache.put(item.key, score)
            if item.end_of_turn is not None:  # the cached Score keeps no item's own cut
                score = score.model_copy(deep=True)
        return _with_cut(score, item)

    def _submit(self, item: Prepared, *, block: bool) -> Future:
        payload = (item.response, item.reference, item.options)
        return self.pool.submit(item.spec.name, payload, item.deadline_s, block=block)

    @staticmethod
    def _verdict_of(future: Future) -> Verdict:
        try:
            return future.result()
        except PoolClosed as exc:
            return Verdict.failure(Status.verifier_error, "pool_closed", error=str(exc))

    # -- synchronous API ---------------------------------------------------------------------------

    def score(self, request: ScoreRequest | dict[str, Any]) -> Score:
        """Score one request; raises RequestError for an unknown verifier or invalid fields."""
        item = self.prepare(request)
        return self.score_prepared(item)

    def score_prepared(self, item: Prepared) -> Score:
        """Score an already validated request, blocking until its verdict."""
        cached = self._cached(item)
        if cached is not None:
            return cached
        if is_async(item.spec):
            return self._finish(item, run_sync(_run_async(self, item)))
        if self.runs_inline(item):
            return self._finish(item, _run_inline(item))
        return self._finish(item, self._verdict_of(self._submit(item, block=True)))

    def score_batch(self, requests: list[ScoreRequest | dict[str, Any]]) -> list[Score | ItemError]:
        """Score many requests in order; a bad item gets an ItemError in its slot, the rest still score."""
        results, deferred = self._score_chunk_inline(requests)
        waiting = [(index, item) for index, item in deferred if is_async(item.spec)]
        futures = [
            (index, item, self._submit(item, block=True))
            for index, item in deferred
            if not is_async(item.spec)
        ]
        if waiting:  # IO-bound items wait on the network together, while the pool works on the rest
            verdicts = run_sync(_gather_async(self, [item for _, item in waiting]))
            for (index, item), verdict in zip(waiting, verdicts, strict=True):
                results[index] = self._finish(item, verdict)
        for index, item, future in futures:
            results[index] = self._finish(item, self._verdict_of(future))
        return results  # type: ignore[return-value]

    async def score_nested(self, item: Prepared) -> Score:
        """Score a validated request from inside an async verifier (`multi`), waiting for a pool slot if need be."""
        return await self._score_awaited(item, wait_for_slot=True)

    # -- asynchronous API (the HTTP service) -------------------------------------------------------

    async def score_async(self, item: Prepared) -> Score:
        """Score a validated request without blocking the event loop; raises PoolFull when the pool is."""
        return await self._score_awaited(item, wait_for_slot=False)

    async def _score_awaited(self, item: Prepared, *, wait_for_slot: bool) -> Score:
        cached = self._cached(item)
        if cached is not None:
            return cached
        if is_async(item.spec):
            return self._finish(item, await _run_async(self, item))
        if self.runs_inline(item):
            return self._finish(item, _run_inline(item))

        async def run() -> Score:
            if (
                wait_for_slot
            ):  # a blocking submit waits on a thread, so the event loop keeps running meanwhile
                future = await asyncio.to_thread(self._submit, item, block=True)
            else:
                future = self._submit(item, block=False)
            return self._finish(item, await asyncio.wrap_future(future))

        return await self._single_flight(item, run)

    def flight_name(self, key: str) -> str:
        """The Redis name of the single-flight lock of the item whose cache key is `key`."""
        return f"flight:{self.namespace}:{key}"

    def flight_result_name(self, key: str) -> str:
        """Where a holder leaves, for the duplicates waiting on it, a result the shared cache does not hold."""
        return f"flight-result:{self.namespace}:{key}"

    def _landed(self, item: Prepared) -> Score | None:
        """The holder's `ok` score, once it is in this process's cache (a holder here) or the shared one
        (signed), as this item's cached Score."""
        cache = self.cache
        if isinstance(cache, TieredCache) and cache.local.get(item.key) is None and not cache.peek(item.key):
            return None
        return self._cached(item)

    def _flight_result(self, item: Prepared) -> Score | None:
        """The result a holder this item waited on left for it (sealed: a failure, or an `ok` score the shared
        cache could not take), as this item's Score."""
        shared = self.shared
        if shared is None:
            return None
        name = self.flight_result_name(item.key)
        raw = shared.get(name, op="flight_poll")
        if raw is None:
            return None
        score = open_score(self.signer, shared.key(name), raw)
        # The MAC covers the full key (namespace and item), so only this flight's holder can have sealed it.
        if score is None:  # unsigned, badly signed or unreadable: never written by a replica with our secret
            shared.observer.shared_cache("rejected")
            return None
        cache = self.cache
        if score.status is Status.ok and isinstance(cache, TieredCache):  # later duplicates here: a local hit
            cache.local.put(item.key, score.model_copy(deep=True))
        score = score.model_copy(
            update={"id": item.id, "cached": True, "elapsed_ms": _ms_since(item.started)}, deep=True
        )
        return _with_cut(score, item)

    def _publish_result(self, item: Prepared, score: Score) -> None:
        """Leave this flight's result for its waiters, for FLIGHT_RESULT_TTL_MS only: every failure, and an
        `ok` score when the shared cache (maybe a Redis of its own, PROCTOR_REDIS_CACHE_URL) did not take it."""
        shared = self.shared
        if shared is None:
            return
        stored = score.model_copy(update={"id": None, "cached": False}, deep=True)
        stored.details.pop("end_of_turn", None)  # this item's own cut, not the waiters'
        name = self.flight_result_name(item.key)
        sealed = self.signer.seal(shared.key(name), stored.model_dump_json())
        shared.set(name, sealed, FLIGHT_RESULT_TTL_MS, op="flight_result")

    def _shared_cache_took(self) -> bool:
        """Whether the `ok` score `_finish` just wrote through reached the shared cache: its Redis answered.

        No await comes between that write and this look, so no request on this loop changed the state; a call
        on another thread may, and then the waiters run the item themselves, as with no result at all."""
        cache = self.cache
        return not isinstance(cache, TieredCache) or cache.shared.available

    async def _single_flight(
        self,
        item: Prepared,
        run: Callable[[], Awaitable[Score]],
        *,
        window: asyncio.Semaphore | None = None,
    ) -> Score:
        """Run an expensive item once across the replicas sharing Redis: the lock's holder runs it and shares
        its result (an `ok` score through the shared cache, any other under a short-lived flight result); the
        others wait for that result and run nothing. A waiter runs the item itself when the lock goes without a
        result (the holder died or raised), when its wait passes the item's deadline plus FLIGHT_EXTRA_WAIT_S,
        or when Redis is down.

        `window`, when given, is held only to take the lock and run the item, never while waiting: a batch's
        items held by another replica must not starve its items that can run now."""
        shared = self.shared
        if shared is None:
            async with _held(window):
                return await run()
        name = self.flight_name(item.key)
        token = secrets.token_hex(16)
        give_up = time.monotonic() + item.deadline_s + FLIGHT_EXTRA_WAIT_S
        delay = 0.005
        waited = False
        while True:
            async with _held(window):
                taken = shared.try_lock(name, token, FLIGHT_LEASE_MS)
                if taken is None:  # Redis is down: run it here, as a single replica would
                    shared.observer.single_flight("degraded")
                    return await run()
                if taken:
                    # Another holder may have finished between our look-up and our lock: never run it twice.
                    # Its failure is taken only by a waiter: a request that came after it runs the item anew.
                    found = self._landed(item) or (self._flight_result(item) if waited else None)
                    if found is not None:
                        shared.unlock(name, token)
                        shared.observer.single_flight("waited")
                        return found
                    if not waited:  # an earlier flight's failure is not for this flight's waiters
                        shared.call(
                            "flight_result",
                            lambda r: r.delete(shared.key(self.flight_result_name(item.key))),
                            0,
                        )
                    shared.observer.single_flight("took_over" if waited else "owner")
                    async with shared.renewing(name, token, FLIGHT_LEASE_MS):
                        score = await run()
                        if score.status is not Status.ok or not self._shared_cache_took():
                            self._publish_result(item, score)
                        return score
            waited = True
            found = self._landed(item) or self._flight_result(item)
            if found is not None:
                shared.observer.single_flight("waited")
                return found
            if time.monotonic() >= give_up:
                log.warning(
                    "waited past the deadline for another replica's %s; running it here", item.spec.name
                )
                shared.observer.single_flight("timed_out")
                async with _held(window):
                    return await run()
            with self._flight_waiters_lock:
                self._flight_waiters += 1
            try:
                await asyncio.sleep(delay)
            finally:
                with self._flight_waiters_lock:
                    self._flight_waiters -= 1
            # Many waiters poll less often each, so their Redis round trips on the event loop stay bounded.
            delay = min(delay * 1.5, max(FLIGHT_POLL_MAX_S, self._flight_waiters / FLIGHT_POLLS_PER_S))

    async def score_batch_async(
        self, requests: list[dict[str, Any]], *, chunk: int = 512
    ) -> list[Score | ItemError]:
        """Score a batch in order; inline items run on a thread in chunks so the event loop stays responsive."""
        results: list[Score | ItemError | None] = [None] * len(requests)
        pooled: list[tuple[int, Prepared]] = []
        for start in range(0, len(requests), chunk):
            part = requests[start : start + chunk]
            done, deferred = await asyncio.to_thread(self._score_chunk_inline, part)
            for offset, value in enumerate(done):
                results[start + offset] = value
            pooled.extend((start + offset, item) for offset, item in deferred)
        waiting = [(index, item) for index, item in pooled if is_async(item.spec)]
        pooled = [(index, item) for index, item in pooled if not is_async(item.spec)]

        async def wait(index: int, item: Prepared) -> None:
            results[index] = self._finish(item, await _run_async(self, item))

        waiters = [asyncio.ensure_future(wait(index, item)) for index, item in waiting]
        if pooled:
            # Feed pool items with bounded outstanding work, so one huge batch cannot fill the pool's queue.
            window = asyncio.Semaphore(max(2, 4 * self.pool.workers))

            async def run(index: int, item: Prepared) -> None:
                async def pooled() -> Score:
                    future = await asyncio.to_thread(self._submit, item, block=True)
                    return self._finish(item, await asyncio.wrap_future(future))

                # Single-flight holds the window to run an item, not while it waits on another replica.
                results[index] = await self._single_flight(item, pooled, window=window)

            await asyncio.gather(*(run(index, item) for index, item in pooled))
        if waiters:
            await asyncio.gather(*waiters)
        return results  # type: ignore[return-value]

    def _score_chunk_inline(
        self, requests: list[ScoreRequest | dict[str, Any]]
    ) -> tuple[list[Score | ItemError | None], list[tuple[int, Prepared]]]:
        """Validate every request and score the cached and inline ones; pool items come back deferred."""
        done: list[Score | ItemError | None] = []
        deferred: list[tuple[int, Prepared]] = []
        for offset, request in enumerate(requests):
            try:
                item = self.prepare(request)
            except RequestError as exc:
                done.append(_item_error(request, exc))
                continue
            cached = self._cached(item)
            if cached is not None:
                done.append(cached)
            elif self.runs_inline(item):
                done.append(self._finish(item, _run_inline(item)))
            else:
                done.append(None)
                deferred.append((offset, item))
        return done, deferred


async def _gather_async(engine: Engine, items: list[Prepared]) -> list[Verdict]:
    return list(await asyncio.gather(*(_run_async(engine, item) for item in items)))


@contextlib.asynccontextmanager
async def _held(semaphore: asyncio.Semaphore | None) -> AsyncIterator[None]:
    """Hold `semaphore` for the block (nothing when None)."""
    if semaphore is None:
        yield
        return
    async with semaphore:
        yield


_warned_unsigned = False


def _warn_unsigned() -> None:
    """Say once per process that shared scores are not signed (no PROCTOR_CACHE_SECRET, no PROCTOR_TOKEN)."""
    global _warned_unsigned
    if not _warned_unsigned:
        _warned_unsigned = True
        log.warning(
            "the shared result cache is unsigned (set PROCTOR_CACHE_SECRET or PROCTOR_TOKEN): whoever can "
            "write to its Redis can plant scores every replica serves"
        )


def _with_cut(score: Score, item: Prepared) -> Score:
    """The score with what this item's response lost to end-of-turn cutting in `details.end_of_turn`."""
    if item.end_of_turn is not None:
        score.details["end_of_turn"] = dict(item.end_of_turn)
    return score


def _item_error(request: Any, exc: RequestError) -> ItemError:
    request_id = request.get("id") if isinstance(request, dict) else getattr(request, "id", None)
    if not isinstance(request_id, (str, int)) or isinstance(request_id, bool):
        request_id = None
    return ItemError(id=request_id, error=ErrorBody(status=exc.status, message=exc.message, field=exc.field))


def _ms_since(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)


_default_engine: Engine | None = None
_default_lock = threading.Lock()


def default_engine() -> Engine:
    """The process-wide engine behind `proctor.score` and `proctor.score_batch`."""
    global _default_engine
    if _default_engine is None:
        with _default_lock:
            if _default_engine is None:
                _default_engine = Engine()
    return _default_engine
