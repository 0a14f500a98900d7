"""Multi-turn sessions over tool environments: the store, the limits, the step loop and the final score.

The trainer owns the loop; a session owns the environment. `SessionManager` opens a session on a task, takes
one assistant message per step, runs the tool calls it makes through the environment, returns the
observations, and ends the episode with an explicit end reason (`proctor.environments.tools.base.EndReason`).
When it ends for a policy reason the transcript is scored by the environment's replay verifier through the
engine, exactly as `POST /v1/score {verifier: "tool.<env>", response: transcript, reference}` would score it.

Guarantees:

- Session ids carry 192 random bits (`secrets`); when the caller has an identity (a bearer token) the session
  is bound to a hash of it, and any other caller is told the session does not exist (404).
- Steps are numbered from 1. Repeating step n returns its stored result without running anything again (409
  when the message differs); n + 1 runs; any other number is 409. A step after the episode ended is 409 and
  carries the final score.
- Limits come from the environment (`SessionLimits`), lowered by the session's options, never from a tool
  call's arguments. The service bounds sizes too: one assistant message is at most `max_message_bytes` of
  JSON (413 naming `message`), and a session's transcript at most `max_transcript_bytes` (a step whose message
  would pass it is a 413 naming `message` and runs nothing; the session stays open, so `finish` still scores
  it); a task larger than the transcript budget is a 413 naming `task`. A tool call that cannot be read,
  names an unknown tool or has arguments that do not fit its schema is an `error` observation counting toward
  `max_tool_errors`; it never ends the episode silently.
- A session unused for its time-to-live (or past its deadline) expires: its environment state is closed and
  the record stays as a tombstone answering 410 for `retention_s`. A finished session's record stays for
  `retention_s` too (GET returns it with its transcript), then 404. A tombstone keeps no transcript, and the
  store keeps finished records within a count and a byte budget (the oldest are dropped first).
- An idempotency key (`id`) names one create request: the same request again returns the same session, a
  different request with the same key is a 409 naming `id`.
- Per-session locks live only while a request for that session is running or waiting: an unknown id, a
  deleted or an expired session leaves nothing behind.
- The store (`SessionStore`) holds plain records; environment state (an interpreter) stays in this process.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Annotated, Any, Protocol

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from proctor.capacity import PoolFull
from proctor.contract import (
    ChatMessage,
    JsonInt,
    RequestError,
    Score,
    Status,
    _not_a_bool,  # pyright: ignore[reportPrivateUsage]
    check_nesting,
    content_text,
    request_error_from,
)
from proctor.engine import Engine
from proctor.environments.registry import MAX_JSON_SEED, SPLITS, Task
from proctor.environments.tools.base import (
    POLICY_END_REASONS,
    SessionLimits,
    ToolEnvironment,
    ToolMachineryError,
    ToolResult,
    ToolSpec,
    argument_problem,
    clip_observation,
    get_tool_environment,
)
from proctor.verifiers.reading.tool_calls import DialectChoice, ParsedCalls, parse_message

if TYPE_CHECKING:  # the redis library is imported only by a service configured to use it
    from proctor.redis_backend import Lease, SharedRedis

log = logging.getLogger(__name__)

SESSION_ID_BYTES = 24
"""Random bytes in a session id (192 bits), from `secrets`."""
SESSION_PREFIX = "ses_"
MAX_BATCH_STEPS = 256
"""Steps in one `POST /v1/sessions/step/batch` request."""
MAX_MESSAGE_BYTES = 1_000_000
"""Default size of one assistant message (as compact JSON, UTF-8); larger is a 413 naming `message`."""
MAX_TRANSCRIPT_BYTES = 4_000_000
"""Default size of one session's transcript (prompt, assistant messages and observations, as compact JSON)."""
MAX_CLOSED_BYTES = 512_000_000
"""Default transcript bytes the in-memory store keeps for finished sessions; the oldest are dropped first."""


# -- request and record models ------------------------------------------------------------------------------

# Bounded JsonInts that may be null: the bounds sit inside the bool check, or the OpenAPI schema would carry
# pydantic's `ge`/`le` keys instead of JSON Schema's `minimum`/`maximum` for them.
_TurnCap = Annotated[Annotated[int, Field(ge=1, le=256)], BeforeValidator(_not_a_bool)]
_StepNumber = Annotated[Annotated[int, Field(ge=1, le=100_000)], BeforeValidator(_not_a_bool)]


class SessionOptions(BaseModel):
    """What a caller may set per session: lower the turn cap, bound its life, choose the call dialect."""

    model_config = ConfigDict(extra="forbid")

    max_turns: _TurnCap | None = Field(
        default=None, description="Assistant messages per session (at most the environment's)."
    )
    deadline_s: float | None = Field(
        default=None,
        gt=0,
        le=86_400,
        description="The session expires this long after it opened, used or not.",
    )
    dialect: DialectChoice = Field(default="auto", description="How tool calls are read from messages.")


class GeneratedTaskRef(BaseModel):
    """A bundled task, named by how it is generated."""

    model_config = ConfigDict(extra="forbid")

    seed: JsonInt = Field(ge=0, le=MAX_JSON_SEED)
    index: JsonInt = Field(default=0, ge=0, le=9_999)
    split: str = "train"
    level: str | None = None


class CreateSession(BaseModel):
    """`POST /v1/sessions`: which environment, which task, options, and an optional idempotency key."""

    model_config = ConfigDict(extra="forbid")

    environment: str = Field(min_length=1, max_length=200)
    task: dict[str, Any] = Field(
        description="{seed, index?, split?, level?} (a bundled task), a task object as "
        "POST /v1/environments/{name}/tasks returns it, or {prompt, reference} (your own task)."
    )
    options: SessionOptions = Field(default_factory=SessionOptions)
    id: str | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        description="Idempotency key: creating again with the same id and the same request returns the same "
        "session; the same id with a different request is a 409.",
    )


class StepRequest(BaseModel):
    """`POST /v1/sessions/{id}/step`: one assistant message and, for safe retries, its step number."""

    model_config = ConfigDict(extra="forbid")

    message: dict[str, Any] = Field(description="The assistant message, in OpenAI's chat format.")
    step: _StepNumber | None = Field(default=None, description="1 for the first step, then n + 1.")


class FinishRequest(BaseModel):
    """`POST /v1/sessions/{id}/finish`: end the episode, with an optional final assistant message."""

    model_config = ConfigDict(extra="forbid")

    message: dict[str, Any] | None = None


class BatchStepItem(StepRequest):
    """One step of a batch: the session it belongs to, then as StepRequest."""

    session_id: str = Field(min_length=1, max_length=256)


class Usage(BaseModel):
    """What a session has used so far."""

    turns: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    tool_cpu_s: float = 0.0
    tool_wall_s: float = 0.0
    observation_chars: int = 0


class SessionRecord(BaseModel):
    """Everything a session is, as the store keeps it; `public()` is what `GET /v1/sessions/{id}` returns."""

    model_config = ConfigDict(extra="forbid")

    session_id: str
    environment: str
    version: str
    owner: str | None = None
    replica: str | None = None
    """The replica holding the session's environment state (a shared store sets it; None in one process)."""
    replica_url: str | None = None
    """Where that replica answers (PROCTOR_ADVERTISE_URL), named when another replica routes a request there."""
    client_id: str | None = None
    request_fingerprint: str | None = None
    size_bytes: int = 0
    task: Task
    tools: list[dict[str, Any]]
    limits: SessionLimits
    dialect: DialectChoice = "auto"
    created_at: float
    updated_at: float
    expires_at: float
    deadline_at: float | None = None
    transcript: list[dict[str, Any]]
    actions: list[dict[str, Any]] = Field(default_factory=list)
    steps: list[dict[str, Any]] = Field(default_factory=list)
    step_messages: list[str] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    done: bool = False
    end_reason: str | None = None
    status: str | None = None
    score: dict[str, Any] | None = None
    revision: int = Field(0, exclude=True)
    """How many times a shared store has written the record: its compare-and-set version (0 in one process).
    Kept beside the record (`session-rev:<id>`), not in its JSON, so a replica of the previous version, which
    forbids unknown fields, still reads records during a rolling upgrade."""

    @property
    def expired(self) -> bool:
        """Whether the session was abandoned (a tombstone that answers 410)."""
        return self.end_reason == "expired"

    def public(self) -> dict[str, Any]:
        """The record without the owner's hash and the internal fingerprints and accounting."""
        return self.model_dump(
            mode="json",
            exclude={
                "owner",
                "replica",
                "replica_url",
                "client_id",
                "request_fingerprint",
                "size_bytes",
                "step_messages",
            },
        )


# -- the store -------------------------------------------------------------------------------------------


class SessionStore(Protocol):
    """Where session records live: in this process (`MemorySessionStore`) or shared (`RedisSessionStore`).

    `add` raises PoolFull when the store holds as many open sessions as it may. Records are returned as
    objects the caller may change; a change counts once `put` stores it.
    """

    async def add(self, record: SessionRecord) -> None:
        """Store a new open session; PoolFull when full."""
        ...

    async def get(self, session_id: str) -> SessionRecord | None:
        """The record, or None."""
        ...

    async def put(self, record: SessionRecord) -> None:
        """Store a changed record (open, finished or expired)."""
        ...

    async def remove(self, session_id: str) -> SessionRecord | None:
        """Drop a record; returns it, or None when there was none."""
        ...

    async def find(self, owner: str | None, client_id: str) -> str | None:
        """The session created by `owner` with idempotency key `client_id`, if it is still stored."""
        ...

    async def due(self, now: float) -> list[str]:
        """Ids of records whose `expires_at` has passed."""
        ...

    async def open_count(self) -> int:
        """Open (not finished, not expired) sessions."""
        ...


class MemorySessionStore:
    """Records in one process: at most `max_open` open sessions, and at most `max_closed` finished or expired
    ones holding at most `max_closed_bytes` of transcript together (the oldest closed records are dropped
    first)."""

    def __init__(
        self, max_open: int = 10_000, max_closed: int = 20_000, max_closed_bytes: int = MAX_CLOSED_BYTES
    ):
        self.max_open = max_open
        self.max_closed = max_closed
        self.max_closed_bytes = max_closed_bytes
        self._open: dict[str, SessionRecord] = {}
        self._closed: OrderedDict[str, SessionRecord] = OrderedDict()
        self._closed_sizes: dict[str, int] = {}  # each closed record's size when it was stored
        self._closed_bytes = 0
        self._keys: dict[tuple[str | None, str], str] = {}

    async def add(self, record: SessionRecord) -> None:
        if len(self._open) >= self.max_open:
            raise PoolFull(f"{len(self._open)} sessions are open, the most this service holds; retry later")
        self._open[record.session_id] = record
        if record.client_id is not None:
            self._keys[(record.owner, record.client_id)] = record.session_id

    async def get(self, session_id: str) -> SessionRecord | None:
        return self._open.get(session_id) or self._closed.get(session_id)

    async def put(self, record: SessionRecord) -> None:
        sid = record.session_id
        if not record.done:
            self._open[sid] = record
            return
        self._open.pop(sid, None)
        self._closed_bytes -= self._closed_sizes.pop(sid, 0)
        self._closed.pop(sid, None)
        self._closed[sid] = record
        self._closed_sizes[sid] = record.size_bytes
        self._closed_bytes += record.size_bytes
        while self._closed and (
            len(self._closed) > self.max_closed or self._closed_bytes > self.max_closed_bytes
        ):
            dropped_id, dropped = self._closed.popitem(last=False)
            self._closed_bytes -= self._closed_sizes.pop(dropped_id, 0)
            self._forget_key(dropped)

    async def remove(self, session_id: str) -> SessionRecord | None:
        record = self._open.pop(session_id, None)
        if record is None:
            record = self._closed.pop(session_id, None)
            self._closed_bytes -= self._closed_sizes.pop(session_id, 0)
        if record is not None:
            self._forget_key(record)
        return record

    async def find(self, owner: str | None, client_id: str) -> str | None:
        return self._keys.get((owner, client_id))

    async def due(self, now: float) -> list[str]:
        return [sid for sid, r in (*self._open.items(), *self._closed.items()) if r.expires_at <= now]

    async def open_count(self) -> int:
        return len(self._open)

    def _forget_key(self, record: SessionRecord) -> None:
        key = (record.owner, record.client_id) if record.client_id is not None else None
        if key is not None and self._keys.get(key) == record.session_id:  # not a newer session's key
            del self._keys[key]


class RedisSessionStore:
    """Records in Redis, shared by replicas (`PROCTOR_REDIS_URL`); new sessions stay in this process while
    Redis is down.

    Each record is one JSON value (`session:<id>`) whose Redis TTL outlives its `expires_at` (open records by
    `grace_s`, so a tombstone can still be written; closed ones vanish when their retention ends), an
    idempotency key (`session-key:<owner>:<id>`) beside it, and the open sessions in a sorted set by expiry.
    `add` stamps the record with this replica (`replica`, `replica_url`): its environment state lives here.
    `lock` is a Redis lock per session, so two replicas never run steps of one session at once. Every write is
    a compare-and-set (`_WRITE`): it lands only when the record's `revision` in Redis is still the one this
    record was read at and, under `lock`, while the lock is still this request's; else the request fails with
    503 and nothing is stored, so a step whose lock lapsed (a stalled replica) can never overwrite another's.

    Degraded: with Redis down, `add` keeps the new session in a `MemorySessionStore` (only this replica can
    reach it); records already in Redis answer 503 (retry later) until Redis is back.
    """

    def __init__(
        self,
        shared: SharedRedis,
        *,
        max_open: int = 10_000,
        local: MemorySessionStore | None = None,
        grace_s: float = 3600.0,
        lock_lease_ms: int = 30_000,
        lock_wait_s: float = 60.0,
    ):
        self.shared = shared
        self.max_open = max_open
        self.local = local if local is not None else MemorySessionStore(max_open=max_open)
        self.grace_s = grace_s
        self.lock_lease_ms = lock_lease_ms
        self.lock_wait_s = lock_wait_s
        self._open_key = shared.key("sessions:open")
        self._cas = shared.client.register_script(_WRITE)
        self._leases: dict[str, Lease] = {}
        """The session locks this store holds now (by session id), checked before each write under them."""

    @property
    def replica_id(self) -> str:
        """This replica's id, stamped on the sessions it opens."""
        return self.shared.replica_id

    def replica_alive(self, replica: str) -> bool | None:
        """Whether another replica's heartbeat is current (None: Redis cannot tell now)."""
        return self.shared.replica_alive(replica)

    def _record_key(self, session_id: str) -> str:
        return self.shared.key("session:" + session_id)

    def _id_key(self, owner: str | None, client_id: str) -> str:
        digest = hashlib.sha256(f"{owner or '-'}\0{client_id}".encode()).hexdigest()
        return self.shared.key("session-key:" + digest)

    def _is_local(self, session_id: str) -> bool:
        return session_id in self.local._open or session_id in self.local._closed  # pyright: ignore[reportPrivateUsage]

    @staticmethod
    def _unavailable() -> RequestError:
        return RequestError(503, "the session store (Redis) is unavailable; retry shortly", "session_id")

    def _ttl_ms(self, record: SessionRecord) -> int:
        left = record.expires_at - time.time()
        if not record.done:
            left += self.grace_s
        return max(1, int(left * 1000))

    def _rev_key(self, session_id: str) -> str:
        return self.shared.key("session-rev:" + session_id)

    def _write(self, record: SessionRecord) -> bool:
        """Store the record, its idempotency key and its place in the open set, in one compare-and-set; False
        when Redis could not take it. Raises 503 (nothing written) when the record was changed since it was
        read, or the session's lock this store holds was lost meanwhile."""
        sid = record.session_id
        lease = self._leases.get(sid)
        if lease is not None and lease.lost:  # known lost before the write: abort without touching Redis
            raise self._lost(sid)
        expected = record.revision
        data = record.model_dump_json()  # without the revision, which lives in its own key
        ttl = self._ttl_ms(record)
        lock_key = self.shared.key("session-lock:" + sid)
        keys = [self._record_key(sid), self._rev_key(sid), lock_key, self._open_key]
        if record.client_id is not None:
            keys.append(self._id_key(record.owner, record.client_id))
        token = lease.token if lease is not None else ""
        args = [data, ttl, expected, token, sid, int(record.done), repr(record.expires_at)]
        result = self.shared.call("session_put", lambda r: self._cas(keys=keys, args=args), None)
        if result is None:
            return False
        if int(result) == _STALE:
            raise RequestError(
                503,
                f"session {sid!r} was changed by another request meanwhile; nothing was stored, retry the step",
                "session_id",
            )
        if int(result) == _LOCK_LOST:
            raise self._lost(sid)
        record.revision = expected + 1
        return True

    @staticmethod
    def _lost(session_id: str) -> RequestError:
        return RequestError(
            503,
            f"this replica lost session {session_id!r}'s lock while stepping it; nothing was stored, retry",
            "session_id",
        )

    async def add(self, record: SessionRecord) -> None:
        """Store a new open session here in Redis (in this process while Redis is down); PoolFull when full."""
        record.replica = self.shared.replica_id
        record.replica_url = self.shared.replica_url
        if self.shared.available:
            now = time.time()
            count = self.shared.call(
                "session_count", lambda r: r.zcount(self._open_key, f"({now}", "+inf"), None
            )
            if isinstance(count, int):
                if count >= self.max_open:
                    raise PoolFull(f"{count} sessions are open, the most these replicas hold; retry later")
                if await asyncio.to_thread(self._write, record):
                    return
        await self.local.add(record)  # Redis went away: the session lives in this process

    async def get(self, session_id: str) -> SessionRecord | None:
        """The record, from this process or Redis; 503 while Redis cannot be read."""
        if self._is_local(session_id):
            return await self.local.get(session_id)

        def read() -> SessionRecord | None:
            keys = [self._record_key(session_id), self._rev_key(session_id)]
            values = self.shared.call("session_get", lambda r: r.mget(keys), DOWN_MARK)
            if values is DOWN_MARK:
                raise self._unavailable()
            raw, revision = values
            if raw is None:
                return None
            # Parsed on the thread too: a transcript of megabytes would stall the event loop.
            record = SessionRecord.model_validate_json(raw)
            record.revision = int(revision or 0)  # the version this read saw, for the write's compare-and-set
            return record

        return await asyncio.to_thread(read)

    async def put(self, record: SessionRecord) -> None:
        """Store a changed record where it lives; 503 when Redis cannot take it."""
        if self._is_local(record.session_id):
            await self.local.put(record)
            return
        if not await asyncio.to_thread(self._write, record):
            raise self._unavailable()

    async def remove(self, session_id: str) -> SessionRecord | None:
        """Drop a record (and its idempotency key); 503 when Redis cannot be reached."""
        if self._is_local(session_id):
            return await self.local.remove(session_id)
        record = await self.get(session_id)
        if record is None:
            return None

        def delete(r: Any) -> bool:
            pipe = r.pipeline(transaction=True)
            pipe.delete(self._record_key(session_id), self._rev_key(session_id))
            pipe.zrem(self._open_key, session_id)
            if record.client_id is not None:
                # Only this session's key: a newer session may have taken the idempotency key since.
                key = self._id_key(record.owner, record.client_id)
                pipe.eval(_DELETE_IF, 1, key, session_id)
            pipe.execute()
            return True

        if not await asyncio.to_thread(self.shared.call, "session_remove", delete, False):
            raise self._unavailable()
        return record

    async def find(self, owner: str | None, client_id: str) -> str | None:
        """The session created with this idempotency key (None also while Redis is down)."""
        found = await self.local.find(owner, client_id)
        if found is not None:
            return found
        key = self._id_key(owner, client_id)
        raw = await asyncio.to_thread(self.shared.call, "session_find", lambda r: r.get(key), None)
        return raw.decode() if isinstance(raw, bytes) else None

    async def due(self, now: float) -> list[str]:
        """Open sessions past their expiry that this replica may expire: its own, and those of replicas that
        are gone (a live replica expires its own, since it holds their state); then this process's."""
        ids = await asyncio.to_thread(
            self.shared.call,
            "session_due",
            lambda r: r.zrangebyscore(self._open_key, "-inf", now, start=0, num=500),
            [],
        )
        found: list[str] = []
        for raw_id in ids:
            session_id = raw_id.decode() if isinstance(raw_id, bytes) else str(raw_id)
            try:
                record = await self.get(session_id)
            except RequestError:
                break  # Redis went away meanwhile: the next sweep tries again
            if record is None or record.done:  # its record is gone or closed: drop it from the open set
                self.shared.call("session_due", lambda r, sid=session_id: r.zrem(self._open_key, sid), 0)
                continue
            mine = record.replica in (None, self.shared.replica_id)
            if mine or self.shared.replica_alive(record.replica or "") is False:
                found.append(session_id)
        return found + await self.local.due(now)

    async def open_count(self) -> int:
        """Open sessions here and in Redis (those in Redis counted while it answers)."""
        now = time.time()
        count = await asyncio.to_thread(
            self.shared.call, "session_count", lambda r: r.zcount(self._open_key, f"({now}", "+inf"), 0
        )
        return int(count) + await self.local.open_count()

    async def release_elsewhere(self, record: SessionRecord) -> None:
        """Tell the replica that opened a session, ended here, to free the state it holds for it."""
        if record.replica in (None, self.shared.replica_id):
            return
        key = self.shared.key("release:" + (record.replica or ""))
        value = f"{record.session_id} {record.environment}"

        def push(r: Any) -> bool:
            pipe = r.pipeline(transaction=True)
            pipe.rpush(key, value)
            pipe.expire(key, int(self.grace_s))
            pipe.execute()
            return True

        await asyncio.to_thread(self.shared.call, "session_release", push, False)

    async def released(self) -> list[tuple[str, str]]:
        """(session id, environment) of this replica's sessions that ended on other replicas since last asked."""
        key = self.shared.key("release:" + self.shared.replica_id)

        def pop(r: Any) -> list[Any]:
            pipe = r.pipeline(transaction=True)
            pipe.lrange(key, 0, -1)
            pipe.delete(key)
            return pipe.execute()[0]

        raw = await asyncio.to_thread(self.shared.call, "session_release", pop, [])
        pairs = [item.decode().split(" ", 1) for item in raw if isinstance(item, bytes)]
        return [(pair[0], pair[1]) for pair in pairs if len(pair) == 2]

    @contextlib.asynccontextmanager
    async def lock(self, session_id: str) -> AsyncIterator[None]:
        """Hold the session's Redis lock (renewed while held), so no other replica steps it meanwhile; 503
        when Redis is down or the lock stays taken past `lock_wait_s`."""
        if self._is_local(session_id):
            yield
            return
        name = "session-lock:" + session_id
        token = secrets.token_hex(16)
        give_up = time.monotonic() + self.lock_wait_s
        delay = 0.005
        while True:
            taken = await asyncio.to_thread(self.shared.try_lock, name, token, self.lock_lease_ms)
            if taken is None:
                raise self._unavailable()
            if taken:
                break
            if time.monotonic() >= give_up:
                raise RequestError(
                    503,
                    f"session {session_id!r} is busy with another request on another replica",
                    "session_id",
                )
            await asyncio.sleep(delay)
            delay = min(delay * 1.5, 0.1)
        async with self.shared.renewing(name, token, self.lock_lease_ms) as lease:
            self._leases[session_id] = lease
            try:
                yield
            finally:
                if self._leases.get(session_id) is lease:
                    del self._leases[session_id]


_STALE = -1
_LOCK_LOST = -2
# Compare-and-set of a session record. KEYS: record, revision, lock, open set[, idempotency key]. ARGV: the
# record's JSON, TTL ms, the revision it was read at, the lock token ("" when written without the lock), the
# session id, done (0/1), expires_at. Returns the new revision, or _STALE or _LOCK_LOST with nothing written.
_WRITE = """
local revision = tonumber(redis.call('GET', KEYS[2]) or '0')
if revision ~= tonumber(ARGV[3]) then return -1 end
if ARGV[4] ~= '' and redis.call('GET', KEYS[3]) ~= ARGV[4] then return -2 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('SET', KEYS[2], revision + 1, 'PX', ARGV[2])
if KEYS[5] then redis.call('SET', KEYS[5], ARGV[5], 'PX', ARGV[2]) end
if ARGV[6] == '1' then
  redis.call('ZREM', KEYS[4], ARGV[5])
else
  redis.call('ZADD', KEYS[4], ARGV[7], ARGV[5])
end
return revision + 1
"""
DOWN_MARK: Any = object()
"""The default handed to `SharedRedis.call` to tell "Redis did not answer" from "no such record"."""
_DELETE_IF = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"


# -- observers (metrics) -----------------------------------------------------------------------------------


class SessionObserver(Protocol):
    """Hooks for metrics; every method is called on the event loop and must not block."""

    def created(self, environment: str) -> None: ...
    def ended(self, environment: str, end_reason: str, status: str) -> None: ...
    def step(self, environment: str, seconds: float) -> None: ...
    def tool(self, environment: str, tool: str, status: str, seconds: float) -> None: ...


class SessionCounters:
    """Plain counters (the in-process API's, and a check for tests)."""

    def __init__(self) -> None:
        self.created_total = 0
        self.steps_total = 0
        self.tool_calls_total = 0
        self.tool_seconds_total = 0.0
        self.ended_by: dict[str, int] = {}

    def created(self, environment: str) -> None:
        self.created_total += 1

    def ended(self, environment: str, end_reason: str, status: str) -> None:
        self.ended_by[end_reason] = self.ended_by.get(end_reason, 0) + 1

    def step(self, environment: str, seconds: float) -> None:
        self.steps_total += 1

    def tool(self, environment: str, tool: str, status: str, seconds: float) -> None:
        self.tool_calls_total += 1
        self.tool_seconds_total += seconds


# -- errors -----------------------------------------------------------------------------------------------


class SessionConflict(RequestError):
    """A 409: a step out of order, a step number reused with another message, or a step after the end (then
    `score` and `end_reason` are the session's final ones)."""

    def __init__(self, message: str, score: dict[str, Any] | None = None, end_reason: str | None = None):
        super().__init__(409, message, "step")
        self.score = score
        self.end_reason = end_reason


class SessionElsewhere(RequestError):
    """A 421: the session's state (a persistent interpreter) lives in another replica, which is alive; its
    requests go there (`replica_url`, PROCTOR_ADVERTISE_URL of that replica)."""

    def __init__(self, session_id: str, replica: str, replica_url: str | None):
        where = replica_url or "an address it does not advertise (set PROCTOR_ADVERTISE_URL)"
        super().__init__(
            421,
            f"session {session_id!r} is held by replica {replica} at {where}: send its requests there",
            "session_id",
        )
        self.session_id = session_id
        self.replica = replica
        self.replica_url = replica_url


def owner_of(token: str | None) -> str | None:
    """The owner key a session is bound to: a hash of the caller's bearer token (None when auth is off)."""
    if not token:
        return None
    return hashlib.sha256(b"proctor-session-owner:" + token.encode("utf-8")).hexdigest()


def new_session_id() -> str:
    """A fresh unguessable session id."""
    return SESSION_PREFIX + secrets.token_urlsafe(SESSION_ID_BYTES)


def _fingerprint(message: dict[str, Any]) -> str:
    text = json.dumps(message, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def json_size(value: Any) -> int:
    """Bytes of `value` as compact UTF-8 JSON (what a transcript entry costs to hold and to send)."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
    return len(text.encode("utf-8", errors="surrogatepass"))


class _SessionLock:
    """A session's lock and how many requests hold it or wait for it (the entry goes when none do)."""

    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.users = 0


# -- the manager ------------------------------------------------------------------------------------------


class SessionManager:
    """Opens, steps, finishes and expires sessions; one per event loop (its locks belong to that loop).

    `max_message_bytes` bounds one assistant message and `max_transcript_bytes` a session's transcript (both
    as compact UTF-8 JSON); see the module docstring for what passing them answers.
    """

    def __init__(
        self,
        store: SessionStore | None = None,
        *,
        engine: Engine | Callable[[], Engine] | None = None,
        observer: SessionObserver | None = None,
        retention_s: float = 600.0,
        sweep_interval_s: float = 1.0,
        clock: Callable[[], float] = time.time,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        max_transcript_bytes: int = MAX_TRANSCRIPT_BYTES,
    ):
        self.store: SessionStore = store if store is not None else MemorySessionStore()
        self._engine = engine
        self.observer: SessionObserver = observer if observer is not None else SessionCounters()
        self.retention_s = retention_s
        self.sweep_interval_s = sweep_interval_s
        self.clock = clock
        self.max_message_bytes = max_message_bytes
        self.max_transcript_bytes = max_transcript_bytes
        self._states: dict[str, Any] = {}
        self._locks: dict[str, _SessionLock] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self._last_sweep = float("-inf")

    @property
    def engine(self) -> Engine:
        """The engine that scores finished sessions."""
        if isinstance(self._engine, Engine):
            return self._engine
        if self._engine is not None:
            return self._engine()
        from proctor.engine import default_engine

        return default_engine()

    # -- create ------------------------------------------------------------------------------------------

    async def create(
        self, request: CreateSession | dict[str, Any], owner: str | None = None
    ) -> dict[str, Any]:
        """Open a session; returns `{session_id, messages, tools, limits, expires_at}` (RequestError 404/422,
        PoolFull when the store is full)."""
        if not isinstance(request, CreateSession):
            check_nesting(request, "task")
            try:
                request = CreateSession.model_validate(request)
            except ValidationError as exc:
                raise request_error_from(exc) from None
        await self._maybe_sweep()
        request_fingerprint = _fingerprint(request.model_dump(mode="json", exclude={"id"}))
        if request.id is not None:
            existing_id = await self.store.find(owner, request.id)
            if existing_id is not None:
                existing = await self.store.get(existing_id)
                if existing is not None and not existing.expired:
                    if existing.request_fingerprint != request_fingerprint:
                        raise RequestError(
                            409,
                            f"invalid id: the idempotency key {request.id!r} was used with another create "
                            "request; use a new id for a new session",
                            "id",
                        )
                    return self._opened(existing)
        task_bytes = json_size(request.task)
        if task_bytes > self.max_transcript_bytes:
            raise RequestError(
                413,
                f"task is {task_bytes} bytes as JSON; a session's transcript may hold "
                f"{self.max_transcript_bytes}",
                "task",
            )
        env = get_tool_environment(request.environment)
        task = self._task(env, request.task)
        limits = env.limits()
        if request.options.max_turns is not None:
            limits = limits.model_copy(update={"max_turns": min(limits.max_turns, request.options.max_turns)})
        now = self.clock()
        deadline = now + request.options.deadline_s if request.options.deadline_s is not None else None
        record = SessionRecord(
            session_id=new_session_id(),
            environment=env.name,
            version=env.version,
            owner=owner,
            client_id=request.id,
            request_fingerprint=request_fingerprint,
            task=task,
            tools=[tool.openai() for tool in env.tools()],
            limits=limits,
            dialect=request.options.dialect,
            created_at=now,
            updated_at=now,
            expires_at=self._expiry(now, limits.ttl_s, deadline),
            deadline_at=deadline,
            transcript=[dict(message) for message in task.prompt],
        )
        record.size_bytes = sum(json_size(message) for message in record.transcript)
        if record.size_bytes > self.max_transcript_bytes:
            raise RequestError(
                413,
                f"task.prompt is {record.size_bytes} bytes as JSON; a session's transcript may hold "
                f"{self.max_transcript_bytes}",
                "task.prompt",
            )
        await self.store.add(record)  # PoolFull before any environment state exists
        try:
            self._states[record.session_id] = await env.start(task, limits)
        except ToolMachineryError as exc:
            await self.store.remove(record.session_id)
            raise RequestError(503, f"{env.name}: the environment could not start: {exc}") from None
        except BaseException:
            await self.store.remove(record.session_id)
            raise
        self.observer.created(env.name)
        self._ensure_sweeper()
        return self._opened(record)

    def _opened(self, record: SessionRecord) -> dict[str, Any]:
        return {
            "session_id": record.session_id,
            "environment": record.environment,
            "messages": [dict(m) for m in record.task.prompt],
            "tools": record.tools,
            "limits": record.limits.model_dump(mode="json"),
            "expires_at": record.expires_at,
        }

    def _task(self, env: ToolEnvironment, raw: dict[str, Any]) -> Task:
        keys = set(raw)
        if "prompt" in keys and "reference" in keys and keys <= {"prompt", "reference"}:
            prompt = raw["prompt"]
            if not isinstance(prompt, (str, list)) or (isinstance(prompt, str) and not prompt.strip()):
                raise RequestError(
                    422, "invalid task.prompt: a non-empty string or chat messages", "task.prompt"
                )
            if isinstance(prompt, list):
                try:
                    messages = [ChatMessage.model_validate(m) for m in prompt]
                except ValidationError as exc:
                    raise request_error_from(exc, "task.prompt") from None
                if not all(isinstance(m.content, str) for m in messages):
                    raise RequestError(
                        422, "invalid task.prompt: message content must be text", "task.prompt"
                    )
                prompt = [{"role": m.role, "content": str(m.content)} for m in messages]
            return env.user_task(prompt, raw["reference"])
        if "prompt" in keys:
            try:
                task = Task.model_validate(raw)
            except ValidationError as exc:
                raise request_error_from(exc, "task") from None
            if task.verifier != env.name:
                raise RequestError(
                    422,
                    f"invalid task.verifier: this task is for {task.verifier!r}, not {env.name}",
                    "task.verifier",
                )
            env.user_task(task.prompt, task.reference)  # the reference must be one this environment grades
            return task
        try:
            ref = GeneratedTaskRef.model_validate(raw)
        except ValidationError as exc:
            raise request_error_from(exc, "task") from None
        if ref.split not in SPLITS:
            raise RequestError(422, f"invalid task.split: one of {', '.join(SPLITS)}", "task.split")
        if ref.level is not None and ref.level not in env.levels:
            known = ", ".join(env.levels) or "none"
            raise RequestError(422, f"invalid task.level: {ref.level!r}; levels: {known}", "task.level")
        return env.make_tasks(ref.split, ref.seed, ref.index + 1, ref.level)[ref.index]

    # -- look-ups ----------------------------------------------------------------------------------------

    async def _record(self, session_id: str, owner: str | None) -> SessionRecord:
        record = await self.store.get(session_id)
        if record is None or (record.owner is not None and record.owner != owner):
            raise RequestError(404, f"unknown session {session_id!r}", "session_id")
        if not record.done and record.expires_at <= self.clock():
            if await self._held_elsewhere(record):  # its holder expires it (and frees its state)
                raise RequestError(
                    410, f"session {session_id!r} expired (unused past its time-to-live)", "session_id"
                )
            await self._expire(record)
        if record.expired:
            raise RequestError(
                410, f"session {session_id!r} expired (unused past its time-to-live)", "session_id"
            )
        return record

    @contextlib.asynccontextmanager
    async def _locked(self, session_id: str) -> AsyncIterator[None]:
        """Hold the session's lock; the lock's entry lives only while some request holds or awaits it."""
        entry = self._locks.get(session_id)
        if entry is None:
            entry = self._locks[session_id] = _SessionLock()
        entry.users += 1
        try:
            async with entry.lock:
                shared_lock = getattr(self.store, "lock", None)  # a shared store locks across replicas too
                if shared_lock is None:
                    yield
                else:
                    async with shared_lock(session_id):
                        yield
        finally:
            entry.users -= 1
            if entry.users == 0 and self._locks.get(session_id) is entry:
                del self._locks[session_id]

    def _busy(self, session_id: str) -> bool:
        """Whether a request holds or awaits the session's lock."""
        return session_id in self._locks

    # -- replicas (a shared store) -----------------------------------------------------------------------

    def _foreign(self, record: SessionRecord) -> bool:
        """Whether an open record's environment state was opened by another replica (never with one process)."""
        mine = getattr(self.store, "replica_id", None)
        return (
            not record.done
            and record.replica is not None
            and mine is not None
            and record.replica != mine
            and record.session_id not in self._states
        )

    async def _held_elsewhere(self, record: SessionRecord) -> bool:
        """Whether another live replica holds state this replica cannot rebuild (so it must act there)."""
        if not self._foreign(record):
            return False
        if get_tool_environment(record.environment).rebuildable_state:
            return False
        return self._replica_alive(record) is not False

    def _replica_alive(self, record: SessionRecord) -> bool | None:
        alive = getattr(self.store, "replica_alive", None)
        return alive(record.replica) if alive is not None and record.replica is not None else None

    async def _reach(self, record: SessionRecord, action: str) -> bool:
        """Make an open session's state reachable here before `action` (step, finish, delete).

        A session opened by another replica: an environment with `rebuildable_state` (its `start` rebuilds all
        its calls need) gets fresh state here for a step, closed after it (returns True); otherwise, while its
        replica lives, a 421 names that replica. When the replica is gone with its state (an interpreter), a
        step ends the session with `sandbox_error` (a machinery failure, masked) and answers 409 with that
        final score; finish and delete go on here (they need no state).
        """
        if not self._foreign(record):
            return False
        env = get_tool_environment(record.environment)
        if env.rebuildable_state:
            if action != "step":
                return False
            try:
                self._states[record.session_id] = await env.start(record.task, record.limits)
            except ToolMachineryError as exc:
                raise RequestError(503, f"{env.name}: the environment could not start: {exc}") from None
            return True
        alive = self._replica_alive(record)
        if alive is not False:
            raise SessionElsewhere(record.session_id, record.replica or "?", record.replica_url)
        if action == "step":
            error = f"replica {record.replica} holding this session's state is gone"
            await self._fail(record, Status.sandbox_error, Status.sandbox_error.value, error)
            await self._touch(record)
            raise SessionConflict(
                f"session {record.session_id!r} has ended ({record.end_reason}): {error}",
                record.score,
                record.end_reason,
            )
        return False

    def _message_size(self, message: dict[str, Any], field: str) -> int:
        size = json_size(message)
        if size > self.max_message_bytes:
            raise RequestError(
                413,
                f"{field} is {size} bytes as JSON; the limit is {self.max_message_bytes}",
                field,
            )
        return size

    def _check_budget(self, record: SessionRecord, size: int, field: str) -> None:
        if record.size_bytes + size > self.max_transcript_bytes:
            raise RequestError(
                413,
                f"{field} ({size} bytes) would take the session's transcript to "
                f"{record.size_bytes + size} bytes; a session may hold {self.max_transcript_bytes} "
                "(finish the session without a message to score it as it stands)",
                field,
            )

    async def get(self, session_id: str, owner: str | None = None) -> dict[str, Any]:
        """The record with its exact transcript and action log (404 unknown, 410 expired)."""
        return (await self._record(session_id, owner)).public()

    async def delete(self, session_id: str, owner: str | None = None) -> None:
        """Close and forget a session; idempotent (an unknown or another owner's id is a no-op)."""
        record = await self.store.get(session_id)
        if record is None or (record.owner is not None and record.owner != owner):
            return
        async with self._locked(session_id):
            record = await self.store.get(session_id)
            if record is None:
                return
            await self._reach(record, "delete")
            if not record.done:
                record.done, record.end_reason, record.status = True, "closed", None
                self.observer.ended(record.environment, "closed", "closed")
            await self._release(record)
            await self.store.remove(session_id)

    # -- step --------------------------------------------------------------------------------------------

    async def step(
        self, session_id: str, message: dict[str, Any], step: int | None = None, owner: str | None = None
    ) -> dict[str, Any]:
        """Take one assistant message; returns `{step, observations, tool_results, done, end_reason, usage,
        score?}` (404, 410, 409, 422 as the module docstring says)."""
        await self._maybe_sweep()
        check_nesting(message, "message")
        size = self._message_size(message, "message")
        if await self.store.get(session_id) is None:  # no lock for an id that names nothing
            raise RequestError(404, f"unknown session {session_id!r}", "session_id")
        async with self._locked(session_id):
            record = await self._record(session_id, owner)
            taken = len(record.steps)
            fingerprint = _fingerprint(message)
            if step is not None and 1 <= step <= taken:
                if record.step_messages[step - 1] != fingerprint:
                    raise SessionConflict(f"step {step} was already taken with another message")
                return record.steps[step - 1]
            if record.done:
                raise SessionConflict(
                    f"session {session_id!r} has ended ({record.end_reason})", record.score, record.end_reason
                )
            if step is not None and step != taken + 1:
                raise SessionConflict(f"step {step} is out of order: the next step is {taken + 1}")
            parsed_message = _assistant_message(message, "message")
            self._check_budget(record, size, "message")
            borrowed = await self._reach(record, "step")
            started = time.perf_counter()
            backup = record.model_copy(deep=True)
            try:
                result = await self._run_step(record, message, parsed_message)
            except BaseException:  # a failed step leaves the session as it was: retrying step n is safe
                await self.store.put(backup)
                raise
            finally:
                if borrowed:  # state rebuilt for this step only: the replica that opened it keeps its own
                    await self._release(record)
            result = {"step": taken + 1, **result}
            record.steps.append(result)
            record.step_messages.append(fingerprint)
            await self._touch(record)
            self.observer.step(record.environment, time.perf_counter() - started)
            return result

    async def finish(
        self, session_id: str, message: dict[str, Any] | None = None, owner: str | None = None
    ) -> dict[str, Any]:
        """End the episode (scoring it) and return the final Score; a finished session returns its score again.

        With a message without tool calls, it is the final answer (`answer`). Otherwise (no message, or one
        that calls tools, whose calls are not run) the episode ends as `no_tool_call` and the transcript is
        scored as it stands.
        """
        size = 0
        if message is not None:
            check_nesting(message, "message")
            size = self._message_size(message, "message")
        if await self.store.get(session_id) is None:  # no lock for an id that names nothing
            raise RequestError(404, f"unknown session {session_id!r}", "session_id")
        async with self._locked(session_id):
            record = await self._record(session_id, owner)
            if record.done:
                if record.score is None:
                    raise SessionConflict(f"session {session_id!r} has ended ({record.end_reason})")
                return record.score
            await self._reach(record, "finish")
            end_reason = "no_tool_call"
            if message is not None:
                parsed = _assistant_message(message, "message")
                self._check_budget(record, size, "message")
                record.transcript.append(dict(message))
                record.size_bytes += size
                record.usage.turns += 1
                calls = self._calls(record, parsed)
                if not calls.calls and not calls.errors:
                    end_reason = "answer"
            await self._end(record, end_reason)
            await self._touch(record)
            assert record.score is not None
            return record.score

    def _calls(self, record: SessionRecord, message: ChatMessage) -> ParsedCalls:
        schemas = {tool["function"]["name"]: tool["function"]["parameters"] for tool in record.tools}
        text = content_text(message.content)
        raw_calls = [call.model_dump(exclude_none=True) for call in message.tool_calls or []]
        return parse_message(raw_calls, text, record.dialect, schemas)

    async def _run_step(
        self, record: SessionRecord, raw: dict[str, Any], message: ChatMessage
    ) -> dict[str, Any]:
        env = get_tool_environment(record.environment)
        limits = record.limits
        usage = record.usage
        number = len(record.steps) + 1
        record.transcript.append(dict(raw))
        record.size_bytes += json_size(raw)
        usage.turns += 1
        parsed = self._calls(record, message)
        observations: list[dict[str, Any]] = []
        results: list[dict[str, Any]] = []
        if not parsed.calls and not parsed.errors:
            reply = env.reply(self._states.get(record.session_id), message)
            if reply is None:
                await self._end(record, "answer")
                return self._step_result(record, observations, results)
            observations.append(reply)
        elif usage.turns >= limits.max_turns:
            await self._end(record, "max_turns")  # the calls of the last allowed turn are not run
            return self._step_result(record, observations, results)
        elif usage.tool_calls + len(parsed.calls) > limits.max_tool_calls:
            await self._end(record, "max_tool_calls")
            return self._step_result(record, observations, results)
        tools = {tool.name: tool for tool in env.tools()}
        for index, error in enumerate(parsed.errors):
            call_id = f"call_{number}_e{index}"
            content = f"Error: the tool call could not be read ({error.code}): {error.message}"
            self._error(record, observations, results, call_id, None, content, "parse_error")
        for index, call in enumerate(parsed.calls):
            call_id = call.id or f"call_{number}_{index}"
            if index >= limits.max_calls_per_turn:
                content = (
                    f"Error: at most {limits.max_calls_per_turn} tool calls per message; this one was not run"
                )
                self._error(record, observations, results, call_id, call.name, content, "too_many_calls")
                continue
            spec = tools.get(call.name)
            if spec is None:
                content = f"Error: unknown tool {call.name!r}; the tools are {', '.join(tools)}"
                self._error(record, observations, results, call_id, call.name, content, "unknown_tool")
                continue
            problem = argument_problem(spec, call.arguments)
            if problem is not None:
                content = f"Error: invalid arguments for {call.name}: {problem}"
                self._error(record, observations, results, call_id, call.name, content, "invalid_arguments")
                continue
            outcome = await self._call(record, env, spec, call_id, call.arguments)
            if outcome is None:  # the machinery failed: the session has ended with a non-ok status
                return self._step_result(record, observations, results)
            result, observation = outcome
            observations.append(observation)
            results.append(result)
        for observation in observations:
            record.transcript.append(observation)
            record.size_bytes += json_size(observation)
        if record.done:
            return self._step_result(record, observations, results)
        if usage.tool_errors >= limits.max_tool_errors:
            await self._end(record, "max_tool_errors")
        elif usage.tool_cpu_s > limits.tool_cpu_s:
            await self._end(record, "tool_budget")
        elif usage.observation_chars > limits.max_total_observation_chars:
            await self._end(record, "observation_limit")
        elif env.terminal(self._states.get(record.session_id)):
            await self._end(record, "env_terminal")
        elif usage.turns >= limits.max_turns:
            await self._end(record, "max_turns")
        return self._step_result(record, observations, results)

    def _error(
        self,
        record: SessionRecord,
        observations: list[dict[str, Any]],
        results: list[dict[str, Any]],
        call_id: str,
        name: str | None,
        content: str,
        code: str,
    ) -> None:
        content, truncated = clip_observation(content, record.limits.max_observation_chars)
        record.usage.tool_errors += 1
        record.usage.observation_chars += len(content)
        observation: dict[str, Any] = {"role": "tool", "tool_call_id": call_id, "content": content}
        if name is not None:
            observation["name"] = name
        observations.append(observation)
        result = {
            "call_id": call_id,
            "name": name,
            "status": "error",
            "error": code,
            "elapsed_ms": 0.0,
            "truncated": truncated,
        }
        results.append(result)
        record.actions.append({"step": len(record.steps) + 1, **result, "arguments": None})

    async def _call(
        self,
        record: SessionRecord,
        env: ToolEnvironment,
        spec: ToolSpec,
        call_id: str,
        arguments: dict[str, Any],
    ) -> tuple[dict[str, Any], dict[str, Any]] | None:
        record.usage.tool_calls += 1
        started = time.perf_counter()
        failure: tuple[Status, str] | None = None
        try:
            outcome = await env.call(self._states.get(record.session_id), spec.name, arguments)
            if not isinstance(outcome, ToolResult):
                failure = (
                    Status.verifier_error,
                    f"{env.name}.call returned {type(outcome).__name__}, not a ToolResult",
                )
        except ToolMachineryError as exc:
            failure = (Status(exc.status), str(exc))
        except Exception as exc:  # an environment's bug is a machinery failure, never the model's verdict
            log.exception("%s: call raised", env.name)
            failure = (Status.verifier_error, f"{type(exc).__name__}: {exc}")
        seconds = time.perf_counter() - started
        if failure is not None:
            status, error = failure
            self.observer.tool(record.environment, spec.name, status.value, seconds)
            record.actions.append(
                {
                    "step": len(record.steps) + 1,
                    "call_id": call_id,
                    "name": spec.name,
                    "arguments": arguments,
                    "status": status.value,
                    "error": error[:2000],
                    "elapsed_ms": seconds * 1000,
                }
            )
            await self._fail(record, status, status.value, error)
            return None
        assert isinstance(outcome, ToolResult)
        content, clipped = clip_observation(outcome.content, record.limits.max_observation_chars)
        truncated = outcome.truncated or clipped
        record.usage.tool_cpu_s += outcome.cpu_ms / 1000
        record.usage.tool_wall_s += seconds
        record.usage.observation_chars += len(content)
        self.observer.tool(record.environment, spec.name, outcome.status, seconds)
        result = {
            "call_id": call_id,
            "name": spec.name,
            "status": outcome.status,
            "elapsed_ms": round(outcome.elapsed_ms or seconds * 1000, 3),
            "truncated": truncated,
        }
        record.actions.append(
            {"step": len(record.steps) + 1, **result, "arguments": arguments, "cpu_ms": outcome.cpu_ms}
        )
        observation = {"role": "tool", "tool_call_id": call_id, "name": spec.name, "content": content}
        return result, observation

    def _step_result(
        self, record: SessionRecord, observations: list[dict[str, Any]], results: list[dict[str, Any]]
    ) -> dict[str, Any]:
        result: dict[str, Any] = {
            "observations": observations,
            "tool_results": results,
            "done": record.done,
            "end_reason": record.end_reason,
            "usage": record.usage.model_dump(mode="json"),
        }
        if record.done:
            result["score"] = record.score
        return result

    # -- ending ------------------------------------------------------------------------------------------

    async def _end(self, record: SessionRecord, end_reason: str) -> None:
        """End for a policy reason: score the transcript through the engine (the replay verifier)."""
        assert end_reason in POLICY_END_REASONS
        record.done, record.end_reason = True, end_reason
        score = await self.score_transcript(record.environment, record.transcript, record.task.reference)
        record.score = score.model_dump(mode="json")
        record.status = score.status.value
        await self._release(record)
        self.observer.ended(record.environment, end_reason, record.status)

    async def score_transcript(
        self, environment: str, transcript: list[dict[str, Any]], reference: Any
    ) -> Score:
        """Score a transcript exactly as `POST /v1/score` with verifier `environment` does."""
        engine = self.engine
        item = engine.prepare({"verifier": environment, "response": transcript, "reference": reference})
        return await engine.score_nested(item)

    async def _fail(self, record: SessionRecord, status: Status, end_reason: str, error: str) -> None:
        """End because the machinery failed: a non-ok Score (masked), never a reward of 0 with status ok."""
        env = get_tool_environment(record.environment)
        record.done, record.end_reason, record.status = True, end_reason, status.value
        score = Score(
            verifier=f"{env.name}@{env.version}",
            status=status,
            reward=0.0,
            correct=None,
            reason=end_reason,
            details={"end_reason": end_reason, "error": error[:2000]},
        )
        record.score = score.model_dump(mode="json")
        await self._release(record)
        self.observer.ended(record.environment, end_reason, status.value)

    async def _release(self, record: SessionRecord) -> None:
        state = self._states.pop(record.session_id, None)
        if record.done and record.replica is not None:
            tell = getattr(self.store, "release_elsewhere", None)
            if tell is not None:  # ended here: the replica that opened it frees the state it holds
                await tell(record)
        if state is None:
            return
        env = get_tool_environment(record.environment)
        try:
            await env.close(state)
        except Exception:  # close must not raise; a broken one must not keep the session open
            log.exception("%s: close raised", record.environment)

    async def _touch(self, record: SessionRecord) -> None:
        now = self.clock()
        record.updated_at = now
        if record.done:
            record.expires_at = now + self.retention_s
        else:
            record.expires_at = self._expiry(now, record.limits.ttl_s, record.deadline_at)
        await self.store.put(record)

    @staticmethod
    def _expiry(now: float, ttl_s: float, deadline: float | None) -> float:
        expiry = now + ttl_s
        return min(expiry, deadline) if deadline is not None else expiry

    async def _expire(self, record: SessionRecord) -> None:
        record.done, record.end_reason, record.status = True, "expired", None
        await self._release(record)
        # a tombstone only answers 410: it keeps no transcript, steps or action log
        record.transcript, record.steps, record.actions, record.step_messages = [], [], [], []
        record.size_bytes = 0
        record.expires_at = self.clock() + self.retention_s  # the tombstone answers 410 this long
        await self.store.put(record)
        self.observer.ended(record.environment, "expired", "expired")

    # -- sweeping ----------------------------------------------------------------------------------------

    async def sweep(self) -> int:
        """Expire open sessions past their time-to-live and drop records past their retention; returns how
        many records were expired or dropped."""
        now = self.clock()
        self._last_sweep = now
        handled = 0
        released = getattr(self.store, "released", None)
        for session_id, environment in await released() if released is not None else []:
            state = self._states.pop(session_id, None)  # the session ended on another replica
            if state is not None:
                try:
                    await get_tool_environment(environment).close(state)
                except Exception:  # close must not raise; a broken one must not stop the sweep
                    log.exception("%s: close raised", environment)
        for session_id in await self.store.due(now):
            if self._busy(session_id):  # a step is running: it will refresh the expiry
                continue
            async with self._locked(session_id):
                record = await self.store.get(session_id)
                if record is None or record.expires_at > self.clock():
                    continue
                if not record.done:
                    await self._expire(record)
                else:
                    await self.store.remove(session_id)
                handled += 1
        return handled

    async def _maybe_sweep(self) -> None:
        if self.clock() - self._last_sweep >= self.sweep_interval_s:
            await self.sweep()

    def _ensure_sweeper(self) -> None:
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep_forever())

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(self.sweep_interval_s)
            try:
                await self.sweep()
            except Exception:  # one failed sweep must not stop the later ones
                log.exception("session sweep failed")

    async def close(self) -> None:
        """Stop sweeping and close every open session's environment state (service shutdown)."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        for session_id in list(self._states):
            try:
                record = await self.store.get(session_id)
            except RequestError:  # a shared store that is down: the state is dropped with the process
                record = None
            if record is not None:
                await self._release(record)
            else:
                self._states.pop(session_id, None)

    async def open_count(self) -> int:
        """Open sessions in the store."""
        return await self.store.open_count()


def _assistant_message(message: dict[str, Any], field: str) -> ChatMessage:
    try:
        parsed = ChatMessage.model_validate(message)
    except ValidationError as exc:
        raise request_error_from(exc, field) from None
    if parsed.role != "assistant":
        raise RequestError(
            422,
            f"invalid {field}.role: a step takes an assistant message, not {parsed.role!r}",
            f"{field}.role",
        )
    return parsed
