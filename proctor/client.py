"""HTTP clients for a Proctor service: `Client` (sync) and `AsyncClient` (async), with the same methods.

Both keep one connection pool alive, retry what a retry can fix (429 honouring Retry-After, 5xx, connection
errors and time-outs) with exponential backoff and jitter, and raise at once on any other 4xx::

    from proctor.client import Client

    with Client("http://127.0.0.1:8000") as client:
        score = client.score("text.match", "The answer is \\boxed{42}", reference="42")
        results = client.score_batch([{"verifier": "text.match", "response": r, "reference": "42"} for r in rs])

`score_batch` splits a long batch into requests under the server's limits (read once from `/healthz`) and
returns one `Score` or `ItemError` per item, in order. Scoring is deterministic, so re-sending a request
after a lost response is safe.

`open_session(environment, task)` opens a tool session on the service (`/v1/sessions`) and returns a handle with
the in-process API's methods (`.messages`, `.tools`, `.step(message)`, `.finish(message=None)`, `.record()`,
`.close()`). Retries are safe there too: the session is opened with an idempotency key and every step carries
its number, so a retried request returns the stored answer instead of running the tools again.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import random
import threading
import time
import uuid
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import httpx

from proctor.contract import ErrorBody, ItemError, Score, ScoreRequest
from proctor.http_retry import backoff_delay, parse_retry_after, retryable

DEFAULT_URL = "http://127.0.0.1:8000"
# Fallbacks for a server whose /healthz does not state its limits: the service's own defaults.
DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024
DEFAULT_MAX_BATCH_ITEMS = 10_000
# Chunks are filled to this share of the body limit, so a server that counts bytes a little differently
# (or adds framing) never sees a chunk right at its limit.
BODY_HEADROOM = 0.9
MAX_BACKOFF_S = 30.0
MAX_RETRY_AFTER_S = 300.0

_BATCH_OPEN = b'{"items":['
_BATCH_CLOSE = b"]}"


class ProctorError(Exception):
    """Base class of every error the Proctor client raises."""


class ProctorRequestError(ProctorError):
    """The service rejected the request (a 4xx other than 429); retrying the same request cannot help."""

    def __init__(self, status: int, message: str, field: str | None = None):
        where = f" (field: {field})" if field else ""
        super().__init__(f"HTTP {status}: {message}{where}")
        self.status = status
        self.message = message
        self.field = field


class ProctorMisdirected(ProctorRequestError):
    """421 (replicas sharing Redis): another replica holds the session's state; `replica_url` names it when that
    replica advertises an address (PROCTOR_ADVERTISE_URL)."""

    def __init__(self, status: int, message: str, field: str | None, replica_url: str | None):
        super().__init__(status, message, field)
        self.replica_url = replica_url


class ProctorServerError(ProctorError):
    """A retryable answer from the service (429 or 5xx); the cause of ProctorUnavailable when retries run out."""

    def __init__(self, status: int, message: str, retry_after: float | None = None):
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message
        self.retry_after = retry_after


class ProctorUnavailable(ProctorError):
    """The service could not be reached or kept failing after every retry; `last_error` is the last cause."""

    def __init__(self, url: str, attempts: int, last_error: BaseException):
        super().__init__(f"Proctor at {url} unavailable after {attempts} attempt(s): {last_error}")
        self.url = url
        self.attempts = attempts
        self.last_error = last_error


@dataclass(frozen=True)
class Limits:
    """The server's request limits, as `/healthz` states them."""

    max_body_bytes: int
    max_batch_items: int


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def _request_dict(item: ScoreRequest | dict[str, Any]) -> dict[str, Any]:
    if isinstance(item, ScoreRequest):
        return item.model_dump(mode="json")
    return item


def _item_id(item: Any) -> str | int | None:
    value = item.get("id") if isinstance(item, dict) else None
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return None
    return value


def _local_error(item: Any, status: int, message: str, field: str | None = None) -> ItemError:
    return ItemError(id=_item_id(item), error=ErrorBody(status=status, message=message, field=field))


@dataclass
class _Plan:
    """How one batch is sent: slots already decided locally, and chunks of (index, encoded item) to send."""

    slots: list[Score | ItemError | None]
    chunks: list[list[tuple[int, bytes]]]


def plan_batch(items: list[ScoreRequest | dict[str, Any]], limits: Limits) -> _Plan:
    """Encode items and group them into chunks under both limits; an item too big to send alone gets a 413 slot."""
    slots: list[Score | ItemError | None] = [None] * len(items)
    chunks: list[list[tuple[int, bytes]]] = []
    frame = len(_BATCH_OPEN) + len(_BATCH_CLOSE)
    budget = int(limits.max_body_bytes * BODY_HEADROOM)
    current: list[tuple[int, bytes]] = []
    size = frame
    for index, item in enumerate(items):
        raw = _request_dict(item)
        try:
            encoded = _dumps(raw)
        except (TypeError, ValueError) as exc:
            slots[index] = _local_error(raw, 422, f"item is not JSON-serializable: {exc}")
            continue
        if frame + len(encoded) > limits.max_body_bytes:
            slots[index] = _local_error(
                raw,
                413,
                f"item is {len(encoded)} bytes; the server accepts bodies up to {limits.max_body_bytes} bytes",
            )
            continue
        extra = len(encoded) + (1 if current else 0)
        if current and (size + extra > budget or len(current) >= limits.max_batch_items):
            chunks.append(current)
            current, size, extra = [], frame, len(encoded)
        current.append((index, encoded))
        size += extra
    if current:
        chunks.append(current)
    return _Plan(slots, chunks)


def _chunk_body(chunk: list[tuple[int, bytes]]) -> bytes:
    return _BATCH_OPEN + b",".join(encoded for _, encoded in chunk) + _BATCH_CLOSE


def _parse_result(result: dict[str, Any]) -> Score | ItemError:
    if "error" in result:
        return ItemError.model_validate(result)
    return Score.model_validate(result)


def _parse_limits(health: dict[str, Any], body: int | None, items: int | None) -> Limits:
    stated = health.get("limits") if isinstance(health, dict) else None
    stated = stated if isinstance(stated, dict) else {}
    return Limits(
        max_body_bytes=body or int(stated.get("max_body_bytes") or DEFAULT_MAX_BODY_BYTES),
        max_batch_items=items or int(stated.get("max_batch_items") or DEFAULT_MAX_BATCH_ITEMS),
    )


def _error_message(response: httpx.Response) -> tuple[str, str | None]:
    try:
        body = response.json()
    except ValueError:
        return (response.text.strip()[:500] or response.reason_phrase), None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        error = body["error"]
        return str(error.get("message", response.reason_phrase)), error.get("field")
    if isinstance(body, dict) and "detail" in body:
        return str(body["detail"])[:500], None
    return str(body)[:500], None


def _retry_after(response: httpx.Response) -> float | None:
    return parse_retry_after(response.headers.get("retry-after"), cap=MAX_RETRY_AFTER_S)


def _replica_url(response: httpx.Response) -> str | None:
    """The owning replica's base URL from a 421's body, when it is an http(s) URL."""
    try:
        url = response.json().get("replica_url")
    except (ValueError, AttributeError):
        return None
    if isinstance(url, str) and url.startswith(("http://", "https://")) and "\n" not in url:
        return url.rstrip("/")
    return None


def may_follow(base_url: str, replica_url: str, follow: bool | Collection[str]) -> bool:
    """Whether a 421 naming `replica_url` may be followed with this client's token.

    Never from https to http. With `follow=True`, only to base_url's own host or to an address literal that is
    loopback or private (how replicas inside one cluster advertise themselves); with a collection, only to the
    hosts (`host` or `host:port`) it names. The token goes where the call is followed, so a poisoned session
    record must not be able to name any host it likes.
    """
    if follow is False:
        return False
    base, target = httpx.URL(base_url), httpx.URL(replica_url)
    if target.scheme not in ("http", "https") or (base.scheme == "https" and target.scheme != "https"):
        return False
    if follow is not True:
        allowed = {entry.lower() for entry in follow}
        return target.host in allowed or f"{target.host}:{target.port}" in allowed
    if target.host == base.host:
        return True
    try:
        address = ipaddress.ip_address(target.host)
    except ValueError:
        return False
    return address.is_loopback or address.is_private


def check_response(response: httpx.Response) -> Any:
    """The JSON body of a success; raises ProctorRequestError (final) or ProctorServerError (retryable)."""
    if response.status_code < 400:
        return response.json() if response.content else None  # 204 (DELETE of a session) has no body
    message, field = _error_message(response)
    if response.status_code == 421:
        raise ProctorMisdirected(421, message, field, _replica_url(response))
    if retryable(response.status_code):
        raise ProctorServerError(response.status_code, message, _retry_after(response))
    raise ProctorRequestError(response.status_code, message, field)


class _Base:
    """Configuration and retry arithmetic shared by Client and AsyncClient."""

    def __init__(
        self,
        base_url: str | None,
        token: str | None,
        timeout: float,
        max_retries: int,
        backoff: float,
        max_batch_items: int | None,
        max_body_bytes: int | None,
    ):
        url = (base_url or os.environ.get("PROCTOR_URL") or DEFAULT_URL).rstrip("/")
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {url!r}")
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        self.base_url = url
        self.token = token if token is not None else os.environ.get("PROCTOR_TOKEN") or None
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self._max_batch_items = max_batch_items
        self._max_body_bytes = max_body_bytes
        self._limits: Limits | None = None
        if max_batch_items and max_body_bytes:
            self._limits = Limits(max_body_bytes, max_batch_items)

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": "proctor-client"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers

    def _delay(self, attempt: int, error: BaseException) -> float:
        """Seconds to wait before retry number attempt+1: Retry-After when given, else jittered backoff."""
        if isinstance(error, ProctorServerError) and error.retry_after is not None:
            return error.retry_after + random.uniform(0, min(self.backoff, 1.0))
        return backoff_delay(attempt + 1, self.backoff, MAX_BACKOFF_S)  # jittered: ranks never retry in step

    def _set_limits(self, health: dict[str, Any]) -> Limits:
        self._limits = _parse_limits(health, self._max_body_bytes, self._max_batch_items)
        return self._limits

    @staticmethod
    def _single_request(
        verifier: str, response: Any, reference: Any, options: dict[str, Any] | None, id: str | int | None
    ) -> dict[str, Any]:
        return {
            "verifier": verifier,
            "response": response,
            "reference": reference,
            "options": options or {},
            "id": id,
        }


_RETRYABLE = (httpx.TransportError, ProctorServerError)


class Client(_Base):
    """Synchronous client for a Proctor service; thread-safe, keeps its connections alive."""

    def __init__(
        self,
        base_url: str | None = None,
        *,
        token: str | None = None,
        timeout: float = 300.0,
        max_retries: int = 5,
        backoff: float = 0.5,
        max_batch_items: int | None = None,
        max_body_bytes: int | None = None,
        transport: httpx.BaseTransport | None = None,
        follow_replicas: bool | Collection[str] = True,
    ):
        """Connect to base_url (default $PROCTOR_URL, else http://127.0.0.1:8000) with token (default $PROCTOR_TOKEN).

        follow_replicas: a session call answered 421 (another replica holds the session's state) is sent again,
        with the same token, to the replica the answer names, and the session stays pinned there: by default only
        to base_url's host or a private or loopback address, never from https to http; a collection of hosts
        (`host` or `host:port`) allows exactly those; False never follows (see `may_follow`)."""
        super().__init__(base_url, token, timeout, max_retries, backoff, max_batch_items, max_body_bytes)
        self.follow_replicas = follow_replicas
        self._http = httpx.Client(
            base_url=self.base_url, headers=self._headers(), timeout=timeout, transport=transport
        )
        self._limits_lock = threading.Lock()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def _call(self, method: str, path: str, body: bytes | None = None) -> Any:
        headers = {"Content-Type": "application/json"} if body is not None else None
        last: BaseException | None = None
        for attempt in range(self.max_retries + 1):
            try:
                return check_response(self._http.request(method, path, content=body, headers=headers))
            except _RETRYABLE as exc:
                last = exc
            if attempt < self.max_retries:
                time.sleep(self._delay(attempt, last))
        assert last is not None
        raise ProctorUnavailable(self.base_url, self.max_retries + 1, last) from last

    def health(self) -> dict[str, Any]:
        """The service's /healthz document (status, version, limits ...)."""
        return self._call("GET", "/healthz")

    def verifiers(self) -> list[dict[str, Any]]:
        """Every verifier the service knows: name, version, description and JSON schemas."""
        body = self._call("GET", "/v1/verifiers")
        return body["verifiers"] if isinstance(body, dict) and "verifiers" in body else body

    def limits(self) -> Limits:
        """The server's batch limits: those given to the constructor, else read once from /healthz."""
        if self._limits is None:
            with self._limits_lock:
                if self._limits is None:
                    self._set_limits(self.health())
        assert self._limits is not None
        return self._limits

    def score(
        self,
        verifier: str,
        response: str | list[dict[str, Any]],
        reference: Any = None,
        options: dict[str, Any] | None = None,
        id: str | int | None = None,
    ) -> Score:
        """Score one response; raises ProctorRequestError for a bad request (unknown verifier, invalid field)."""
        return self.score_request(self._single_request(verifier, response, reference, options, id))

    def open_session(
        self, environment: str, task: dict[str, Any], *, options: dict[str, Any] | None = None
    ) -> RemoteSession:
        """Open a tool session (`POST /v1/sessions`, with an idempotency key so a retry opens no second one)."""
        body = _session_request(environment, task, options)
        return RemoteSession(self, self._call("POST", "/v1/sessions", _dumps(body)))

    def score_request(self, request: ScoreRequest | dict[str, Any]) -> Score:
        """Score one ScoreRequest (or its dict form)."""
        return Score.model_validate(self._call("POST", "/v1/score", _dumps(_request_dict(request))))

    def score_batch(self, items: list[ScoreRequest | dict[str, Any]]) -> list[Score | ItemError]:
        """Score many requests, in order, in as few calls as the server's limits allow."""
        if not items:
            return []
        plan = plan_batch(items, self.limits())
        for chunk in plan.chunks:
            self._send_chunk(chunk, plan.slots, items)
        return plan.slots  # type: ignore[return-value]

    def _send_chunk(
        self, chunk: list[tuple[int, bytes]], slots: list[Any], items: list[ScoreRequest | dict[str, Any]]
    ) -> None:
        try:
            body = self._call("POST", "/v1/score/batch", _chunk_body(chunk))
        except ProctorRequestError as exc:
            if exc.status != 413:
                raise
            # The server measured the chunk as too large after all: halve it, down to single items.
            if len(chunk) == 1:
                index = chunk[0][0]
                slots[index] = _local_error(_request_dict(items[index]), 413, exc.message, exc.field)
                return
            middle = len(chunk) // 2
            self._send_chunk(chunk[:middle], slots, items)
            self._send_chunk(chunk[middle:], slots, items)
            return
        _fill(chunk, slots, body)


class AsyncClient(_Base):
    """Asynchronous client for a Proctor service, with the same methods as Client (awaitable)."""

    def __init__(
        self,
        base_url: str | None = None,
        *,
        token: str | None = None,
        timeout: float = 300.0,
        max_retries: int = 5,
        backoff: float = 0.5,
        max_batch_items: int | None = None,
        max_body_bytes: int | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        follow_replicas: bool | Collection[str] = True,
    ):
        """Connect to base_url (default $PROCTOR_URL, else http://127.0.0.1:8000) with token (default $PROCTOR_TOKEN).

        follow_replicas: as for Client."""
        super().__init__(base_url, token, timeout, max_retries, backoff, max_batch_items, max_body_bytes)
        self.follow_replicas = follow_replicas
        self._http = httpx.AsyncClient(
            base_url=self.base_url, headers=self._headers(), timeout=timeout, transport=transport
        )

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def _call(self, method: str, path: str, body: bytes | None = None) -> Any:
        headers = {"Content-Type": "application/json"} if body is not None else None
        last: BaseException | None = None
        for attempt in range(self.max_retries + 1):
            try:
                return check_response(await self._http.request(method, path, content=body, headers=headers))
            except _RETRYABLE as exc:
                last = exc
            if attempt < self.max_retries:
                await asyncio.sleep(self._delay(attempt, last))
        assert last is not None
        raise ProctorUnavailable(self.base_url, self.max_retries + 1, last) from last

    async def health(self) -> dict[str, Any]:
        """The service's /healthz document (status, version, limits ...)."""
        return await self._call("GET", "/healthz")

    async def verifiers(self) -> list[dict[str, Any]]:
        """Every verifier the service knows: name, version, description and JSON schemas."""
        body = await self._call("GET", "/v1/verifiers")
        return body["verifiers"] if isinstance(body, dict) and "verifiers" in body else body

    async def limits(self) -> Limits:
        """The server's batch limits: those given to the constructor, else read once from /healthz."""
        if self._limits is None:
            self._set_limits(await self.health())  # a concurrent duplicate read is harmless
        assert self._limits is not None
        return self._limits

    async def score(
        self,
        verifier: str,
        response: str | list[dict[str, Any]],
        reference: Any = None,
        options: dict[str, Any] | None = None,
        id: str | int | None = None,
    ) -> Score:
        """Score one response; raises ProctorRequestError for a bad request (unknown verifier, invalid field)."""
        return await self.score_request(self._single_request(verifier, response, reference, options, id))

    async def score_request(self, request: ScoreRequest | dict[str, Any]) -> Score:
        """Score one ScoreRequest (or its dict form)."""
        return Score.model_validate(await self._call("POST", "/v1/score", _dumps(_request_dict(request))))

    async def open_session(
        self, environment: str, task: dict[str, Any], *, options: dict[str, Any] | None = None
    ) -> AsyncRemoteSession:
        """Open a tool session (`POST /v1/sessions`, with an idempotency key so a retry opens no second one)."""
        body = _session_request(environment, task, options)
        return AsyncRemoteSession(self, await self._call("POST", "/v1/sessions", _dumps(body)))

    async def score_batch(self, items: list[ScoreRequest | dict[str, Any]]) -> list[Score | ItemError]:
        """Score many requests, in order, in as few calls as the server's limits allow."""
        if not items:
            return []
        plan = plan_batch(items, await self.limits())
        for chunk in plan.chunks:
            await self._send_chunk(chunk, plan.slots, items)
        return plan.slots  # type: ignore[return-value]

    async def _send_chunk(
        self, chunk: list[tuple[int, bytes]], slots: list[Any], items: list[ScoreRequest | dict[str, Any]]
    ) -> None:
        try:
            body = await self._call("POST", "/v1/score/batch", _chunk_body(chunk))
        except ProctorRequestError as exc:
            if exc.status != 413:
                raise
            if len(chunk) == 1:
                index = chunk[0][0]
                slots[index] = _local_error(_request_dict(items[index]), 413, exc.message, exc.field)
                return
            middle = len(chunk) // 2
            await self._send_chunk(chunk[:middle], slots, items)
            await self._send_chunk(chunk[middle:], slots, items)
            return
        _fill(chunk, slots, body)


def _fill(chunk: list[tuple[int, bytes]], slots: list[Any], body: Any) -> None:
    results = body.get("results") if isinstance(body, dict) else None
    if not isinstance(results, list) or len(results) != len(chunk):
        got = len(results) if isinstance(results, list) else "no"
        raise ProctorError(f"the server answered a batch of {len(chunk)} items with {got} results")
    for (index, _), result in zip(chunk, results, strict=True):
        slots[index] = _parse_result(result)


def _session_request(
    environment: str, task: dict[str, Any], options: dict[str, Any] | None
) -> dict[str, Any]:
    return {"environment": environment, "task": task, "options": options or {}, "id": uuid.uuid4().hex}


def _message(message: Any) -> Any:
    return message.model_dump(exclude_none=True) if hasattr(message, "model_dump") else message


class _RemoteOpened:
    def __init__(self, opened: dict[str, Any]):
        self.session_id: str = opened["session_id"]
        self.environment: str = opened["environment"]
        self.messages: list[dict[str, Any]] = opened["messages"]
        self.tools: list[dict[str, Any]] = opened["tools"]
        self.limits: dict[str, Any] = opened["limits"]
        self.expires_at: float = opened["expires_at"]
        self.steps = 0
        self.replica_url: str | None = None
        """The replica this session was pinned to by a 421 (None: the client's own base URL)."""

    def _url(self, suffix: str = "") -> str:
        path = f"/v1/sessions/{self.session_id}{suffix}"
        return f"{self.replica_url}{path}" if self.replica_url else path

    def _pin(self, misdirected: ProctorMisdirected, base_url: str, follow: bool | Collection[str]) -> bool:
        """Pin the session to the replica a 421 names; False when it cannot or must not be followed."""
        target = misdirected.replica_url
        if target is None or target == self.replica_url or not may_follow(base_url, target, follow):
            return False
        self.replica_url = misdirected.replica_url
        return True


class RemoteSession(_RemoteOpened):
    """A session on the service, with the in-process session's methods; steps are numbered for safe retries."""

    def __init__(self, client: Client, opened: dict[str, Any]):
        super().__init__(opened)
        self._client = client

    def _call(self, method: str, suffix: str = "", body: bytes | None = None) -> Any:
        # A 421 means the replica that answered did nothing: sending the same call to the owner once is safe.
        try:
            return self._client._call(method, self._url(suffix), body)
        except ProctorMisdirected as misdirected:
            if not self._pin(misdirected, self._client.base_url, self._client.follow_replicas):
                raise
        return self._client._call(method, self._url(suffix), body)

    def step(self, message: Any) -> dict[str, Any]:
        """Take one assistant message; `{step, observations, tool_results, done, end_reason, usage, score?}`."""
        body = _dumps({"message": _message(message), "step": self.steps + 1})
        result = self._call("POST", "/step", body)
        self.steps += 1
        return result

    def finish(self, message: Any = None) -> Score:
        """End the episode (with an optional final message) and return its Score."""
        body = _dumps({"message": _message(message)} if message is not None else {})
        return Score.model_validate(self._call("POST", "/finish", body))

    def record(self) -> dict[str, Any]:
        """The session's record: transcript, action log, usage, end reason and score."""
        return self._call("GET")

    def close(self) -> None:
        """Close the session on the service; idempotent."""
        self._call("DELETE")

    def __enter__(self) -> RemoteSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncRemoteSession(_RemoteOpened):
    """The async twin of RemoteSession."""

    def __init__(self, client: AsyncClient, opened: dict[str, Any]):
        super().__init__(opened)
        self._client = client

    async def _call(self, method: str, suffix: str = "", body: bytes | None = None) -> Any:
        try:
            return await self._client._call(method, self._url(suffix), body)
        except ProctorMisdirected as misdirected:
            if not self._pin(misdirected, self._client.base_url, self._client.follow_replicas):
                raise
        return await self._client._call(method, self._url(suffix), body)

    async def step(self, message: Any) -> dict[str, Any]:
        """Take one assistant message."""
        body = _dumps({"message": _message(message), "step": self.steps + 1})
        result = await self._call("POST", "/step", body)
        self.steps += 1
        return result

    async def finish(self, message: Any = None) -> Score:
        """End the episode and return its Score."""
        body = _dumps({"message": _message(message)} if message is not None else {})
        return Score.model_validate(await self._call("POST", "/finish", body))

    async def record(self) -> dict[str, Any]:
        """The session's record."""
        return await self._call("GET")

    async def close(self) -> None:
        """Close the session on the service; idempotent."""
        await self._call("DELETE")

    async def __aenter__(self) -> AsyncRemoteSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
