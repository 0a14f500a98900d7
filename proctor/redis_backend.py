"""Redis that replicas share: one client behind a circuit breaker, with the primitives the shared parts use.

What lives here, each used only when `PROCTOR_REDIS_URL` is set:

- `SharedRedis`: the client, its availability (a breaker that stops calling a Redis that went away and probes
  it again with exponential backoff), a heartbeat naming this replica and its address, and the primitives:
  values with a TTL, locks (SET NX PX with a random token, renewed while held, released only by their
  holder), and a token bucket (an atomic Lua script on Redis's own clock).
- `connect(url)`: one `SharedRedis` per URL per process, so the engine, the session store and the rate limit
  of one service process share a connection pool and one view of whether Redis is up.
- `LocalBuckets`: the same token bucket in this process, for a service without Redis or while it is down.

Every call that touches Redis goes through `SharedRedis.call`, which never raises: a Redis that is down or
slow answers the caller's default (a cache miss, "no lock to be had", "allowed"), counts an error and opens
the breaker, so a request is never failed because Redis is down. The modules that use it (`proctor.cache`,
`proctor.engine`, `proctor.environments.tools.sessions`, `proctor.api.limits`) decide what degraded means.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import secrets
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:  # the redis library is imported by the first SharedRedis, only in a service that uses Redis
    import redis

log = logging.getLogger(__name__)

T = TypeVar("T")

PREFIX = "proctor:"
"""Every key Proctor writes starts with this, so a Redis shared with other programs stays readable."""
CONNECT_TIMEOUT_S = 0.5
"""Connecting to Redis; past it the call fails and the breaker opens (a request never waits longer)."""
OP_TIMEOUT_S = 1.0
"""One Redis command's reply; Redis answers in well under a millisecond when it is healthy."""
BACKOFF_FIRST_S = 0.25
BACKOFF_MAX_S = 5.0
HEARTBEAT_S = 2.0
"""How often a replica refreshes its heartbeat (which also probes a Redis the breaker marked down)."""
HEARTBEAT_TTL_S = 10.0
"""A replica whose heartbeat is older than this is gone: the sessions it held cannot be reached."""

_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
# A token bucket on Redis's clock (replicas' clocks may differ): ARGV rate per second, burst, cost.
# Returns {allowed (0/1), milliseconds until `cost` tokens are there}. Fractional tokens are kept as strings.
_BUCKET = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local state = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(state[1])
local at = tonumber(state[2])
if tokens == nil or at == nil then
  tokens = burst
  at = now
end
if now > at then
  tokens = math.min(burst, tokens + (now - at) * rate / 1000)
end
local allowed = 0
local wait = 0
if tokens >= cost then
  tokens = tokens - cost
  allowed = 1
else
  wait = math.ceil((cost - tokens) * 1000 / rate)
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(math.max(now, at)))
redis.call('PEXPIRE', KEYS[1], math.ceil(burst * 1000 / rate) + 1000)
return {allowed, wait}
"""


DOWN: Any = object()
"""What `SharedRedis.call` returns, when passed as its default, for a call that did not reach Redis."""


class RedisObserver(Protocol):
    """Who hears about Redis: the service's metrics (`proctor.api.metrics.Metrics`) implement this."""

    def redis_state(self, up: bool) -> None:
        """Redis became reachable (True) or unreachable (False)."""
        ...

    def redis_error(self, op: str) -> None:
        """One Redis operation failed (the caller went on without Redis)."""
        ...

    def shared_cache(self, result: str) -> None:
        """One look-up in the shared result cache: `hit`, `miss`, or `rejected` (an entry whose MAC failed, or
        that no replica would write: dropped)."""
        ...

    def single_flight(self, outcome: str) -> None:
        """How an expensive item was run: `owner`, `waited`, `took_over`, `timed_out`, `degraded`."""
        ...


class Lease:
    """A held lock as `SharedRedis.renewing` yields it: `lost` turns True once it can no longer be trusted."""

    __slots__ = ("name", "token", "lost")

    def __init__(self, name: str, token: str):
        self.name = name
        self.token = token
        self.lost = False


class ForwardingObserver:
    """Passes a second client's events (the cache's own Redis) to the main client's observer, as it is now.

    Its up/down changes are left out: `proctor_redis_up` is the main Redis's (sessions, locks); a cache
    instance that is down shows as `proctor_redis_errors_total{op="cache_get"}` and shared-cache misses."""

    def __init__(self, main: SharedRedis):
        self.main = main

    def redis_state(self, up: bool) -> None:
        pass

    def redis_error(self, op: str) -> None:
        self.main.observer.redis_error(op)

    def shared_cache(self, result: str) -> None:
        self.main.observer.shared_cache(result)

    def single_flight(self, outcome: str) -> None:
        self.main.observer.single_flight(outcome)


class _NoObserver:
    def redis_state(self, up: bool) -> None:
        pass

    def redis_error(self, op: str) -> None:
        pass

    def shared_cache(self, result: str) -> None:
        pass

    def single_flight(self, outcome: str) -> None:
        pass


def new_replica_id() -> str:
    """This process's replica id: host, pid and random bits (a restarted replica is a new one)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


class SharedRedis:
    """A Redis client that never raises to its callers, with a breaker, a heartbeat and the shared primitives."""

    def __init__(
        self,
        url: str,
        *,
        replica_id: str | None = None,
        replica_url: str | None = None,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
        op_timeout_s: float = OP_TIMEOUT_S,
        heartbeat_s: float = HEARTBEAT_S,
    ):
        self.url = url
        self.replica_id = replica_id or new_replica_id()
        self.replica_url = replica_url
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        self._failures: tuple[type[BaseException], ...] = (redis.exceptions.RedisError, OSError)
        self.client: redis.Redis = redis.Redis.from_url(
            url,
            socket_connect_timeout=connect_timeout_s,
            socket_timeout=op_timeout_s,
            retry=Retry(NoBackoff(), 0),  # fail fast: the breaker, not the client, decides when to try again
            decode_responses=False,
        )
        self.observer: RedisObserver = _NoObserver()
        self.errors = 0
        self._up = True
        self._backoff = BACKOFF_FIRST_S
        self._retry_at = 0.0
        self._state_lock = threading.Lock()
        self._renew = self.client.register_script(_RENEW)
        self._release = self.client.register_script(_RELEASE)
        self._bucket = self.client.register_script(_BUCKET)
        self.heartbeat_s = heartbeat_s
        # Lock renewals only: two threads, so one Redis call stuck up to its timeout never holds up the rest.
        self._renewals = ThreadPoolExecutor(max_workers=2, thread_name_prefix="proctor-redis-renew")
        self._stop = threading.Event()
        self._heart: threading.Thread | None = None

    # -- availability ----------------------------------------------------------------------------------

    @property
    def available(self) -> bool:
        """Whether the last call reached Redis (False from a failure until a later call succeeds)."""
        return self._up

    def _may_call(self) -> bool:
        """Closed breaker: yes. Open: only one caller, once its backoff has passed (a probe)."""
        if self._up:
            return True
        with self._state_lock:
            now = time.monotonic()
            if now < self._retry_at:
                return False
            self._retry_at = now + self._backoff  # this caller probes; the others keep skipping meanwhile
            return True

    def _succeeded(self) -> None:
        if self._up:
            return
        with self._state_lock:
            was_up, self._up = self._up, True
            self._backoff = BACKOFF_FIRST_S
        if not was_up:
            log.warning("redis at %s is reachable again", _safe_url(self.url))
            self.observer.redis_state(True)

    def _failed(self, op: str, exc: BaseException) -> None:
        self.errors += 1
        self.observer.redis_error(op)
        with self._state_lock:
            was_up, self._up = self._up, False
            if not was_up:
                self._backoff = min(BACKOFF_MAX_S, self._backoff * 2)
            self._retry_at = time.monotonic() + self._backoff
        if was_up:
            log.warning(
                "redis at %s is unreachable (%s: %s); serving without it until it returns",
                _safe_url(self.url),
                type(exc).__name__,
                exc,
            )
            self.observer.redis_state(False)

    def call(self, op: str, fn: Callable[[redis.Redis], T], default: T) -> T:
        """`fn(client)`, or `default` when Redis is down or the call fails (counted; the breaker opens)."""
        if not self._may_call():
            return default
        try:
            value = fn(self.client)
        except self._failures as exc:
            self._failed(op, exc)
            return default
        self._succeeded()
        return value

    def ping(self) -> bool:
        """Whether Redis answers now (a probe that ignores the breaker)."""
        try:
            self.client.ping()
        except self._failures as exc:
            if self._up:
                self._failed("ping", exc)
            return False
        self._succeeded()
        return True

    # -- values ----------------------------------------------------------------------------------------

    @staticmethod
    def key(name: str) -> str:
        """The full Redis key of `name` (under PREFIX), for callers that run their own commands via `call`."""
        return PREFIX + name

    def get(self, key: str, op: str = "get") -> bytes | None:
        """The value at PREFIX + key, or None (missing, or Redis down)."""
        value = self.call(op, lambda r: r.get(PREFIX + key), None)
        return value if isinstance(value, bytes) else None

    def set(self, key: str, value: str | bytes, ttl_ms: int, op: str = "set") -> bool:
        """Store a value with a TTL; False when Redis could not take it."""
        ttl = max(1, int(ttl_ms))
        return bool(self.call(op, lambda r: r.set(PREFIX + key, value, px=ttl), False))

    # -- locks -----------------------------------------------------------------------------------------

    def try_lock(self, name: str, token: str, lease_ms: int) -> bool | None:
        """Take the lock `name` for `lease_ms`: True taken, False held by someone else, None Redis down."""
        result = self.call("lock", lambda r: r.set(PREFIX + name, token, nx=True, px=lease_ms), DOWN)
        if result is DOWN:
            return None
        return bool(result)

    def renew_lock(self, name: str, token: str, lease_ms: int) -> bool | None:
        """Extend a lock this token holds: True renewed, False lost (expired, maybe taken by another), None
        when Redis did not answer. It bypasses the breaker, as `ping` does: one failed call elsewhere must not
        cost a holder its lease."""
        try:
            renewed = self._renew(keys=[PREFIX + name], args=[token, lease_ms])
        except self._failures as exc:
            if self._up:  # as ping: an open breaker keeps its own backoff
                self._failed("lock_renew", exc)
            return None
        self._succeeded()
        return bool(renewed)

    def unlock(self, name: str, token: str) -> None:
        """Release a lock if this token still holds it (never another holder's)."""
        self.call("lock", lambda r: self._release(keys=[PREFIX + name], args=[token]), 0)

    @contextlib.asynccontextmanager
    async def renewing(self, name: str, token: str, lease_ms: int) -> AsyncIterator[Lease]:
        """Keep renewing a held lock (every third of its lease) while the block runs, then release it.

        Renewals run on this client's own small executor, never the default one that scoring, `prepare` and
        the session store share: a burst of work there must not delay a renewal past the lease. The yielded
        `Lease` turns `lost` when Redis says the lock is no longer this token's, or no renewal got through for
        a whole lease; a holder that must not act without the lock (a session step) checks it before writing.
        """
        lease = Lease(name, token)
        loop = asyncio.get_running_loop()

        async def renew() -> None:
            confirmed = time.monotonic()
            while True:
                await asyncio.sleep(lease_ms / 3000)
                # A RuntimeError: the client was closed under us (shutdown); no renewal, as if Redis were down.
                try:
                    renewed = await loop.run_in_executor(
                        self._renewals, self.renew_lock, name, token, lease_ms
                    )
                except RuntimeError:
                    renewed = None
                if renewed:
                    confirmed = time.monotonic()
                    continue
                if renewed is False or time.monotonic() - confirmed >= lease_ms / 1000:
                    lease.lost = True
                    log.warning("lost the lock %s while holding it (Redis down, or the lease ran out)", name)
                    return

        task = loop.create_task(renew())
        try:
            yield lease
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            self.unlock(name, token)

    # -- token buckets ---------------------------------------------------------------------------------

    def take(self, key: str, rate_per_s: float, burst: int, cost: int = 1) -> tuple[bool, float] | None:
        """Take `cost` tokens from the bucket `key`: (allowed, seconds until they would be there); None when
        Redis is down (the caller falls back to its local bucket)."""
        result = self.call(
            "rate_limit",
            lambda r: self._bucket(keys=[PREFIX + "rate:" + key], args=[repr(rate_per_s), burst, cost]),
            None,
        )
        if not isinstance(result, list) or len(result) != 2:
            return None
        return bool(int(result[0])), int(result[1]) / 1000

    # -- replicas --------------------------------------------------------------------------------------

    def beat(self) -> bool:
        """Say this replica is alive (and where it answers) for HEARTBEAT_TTL_S."""
        value = self.replica_url or ""
        return self.set("replica:" + self.replica_id, value, int(HEARTBEAT_TTL_S * 1000), op="heartbeat")

    def replica_alive(self, replica_id: str) -> bool | None:
        """Whether a replica's heartbeat is current: None when Redis is down."""
        if replica_id == self.replica_id:
            return True
        result = self.call("heartbeat", lambda r: r.exists(PREFIX + "replica:" + replica_id), DOWN)
        if result is DOWN:
            return None
        return bool(result)

    def start_heartbeat(self) -> None:
        """Beat every `heartbeat_s` on a daemon thread (it also brings a recovered Redis back into use)."""
        with self._state_lock:
            if self._heart is not None and self._heart.is_alive():
                return
            self._stop.clear()
            self._heart = threading.Thread(
                target=self._beat_forever, name="proctor-redis-heartbeat", daemon=True
            )
            self._heart.start()

    def _beat_forever(self) -> None:
        while not self._stop.is_set():
            # With the breaker open, ping probes past it, so an idle replica notices that Redis is back.
            if self._up or self.ping():
                self.beat()
            self._stop.wait(self.heartbeat_s)

    def close(self) -> None:
        """Stop the heartbeat, drop this replica's heartbeat key and close the connections."""
        self._stop.set()
        heart = self._heart
        if heart is not None:
            heart.join(timeout=self.heartbeat_s + 1)
        self.call("heartbeat", lambda r: r.delete(PREFIX + "replica:" + self.replica_id), 0)
        self._renewals.shutdown(wait=False, cancel_futures=True)
        with contextlib.suppress(*self._failures):
            self.client.close()

    def status(self) -> str:
        """`ok` or `unavailable`, as `/healthz` reports it."""
        return "ok" if self._up else "unavailable"


_connections: dict[str, SharedRedis] = {}
_connections_lock = threading.Lock()


def connect(url: str, *, replica_url: str | None = None) -> SharedRedis:
    """The process's `SharedRedis` for `url` (made, and its heartbeat started, on first use)."""
    with _connections_lock:
        shared = _connections.get(url)
        if shared is None:
            shared = _connections[url] = SharedRedis(url, replica_url=replica_url)
            shared.ping()  # an unreachable Redis at start-up is reported at once, and probed again later
            shared.start_heartbeat()
        elif replica_url and not shared.replica_url:
            shared.replica_url = replica_url
        return shared


def disconnect(url: str) -> None:
    """Close and forget the process's `SharedRedis` for `url` (tests; a service keeps it for its life)."""
    with _connections_lock:
        shared = _connections.pop(url, None)
    if shared is not None:
        shared.close()


def _safe_url(url: str) -> str:
    """The URL without a password, for logs."""
    if "@" not in url:
        return url
    scheme, _, rest = url.partition("://")
    return f"{scheme}://***@{rest.rsplit('@', 1)[1]}"


class LocalBuckets:
    """Token buckets in this process (no Redis, or Redis down): the same rule as the Lua script."""

    def __init__(self, max_keys: int = 100_000):
        self.max_keys = max_keys
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, key: str, rate_per_s: float, burst: int, cost: int = 1) -> tuple[bool, float]:
        """(allowed, seconds until `cost` tokens are there)."""
        now = time.monotonic()
        with self._lock:
            tokens, at = self._buckets.pop(key, (float(burst), now))
            tokens = min(float(burst), tokens + max(0.0, now - at) * rate_per_s)
            if tokens >= cost:
                tokens -= cost
                allowed, wait = True, 0.0
            else:
                allowed, wait = False, math.ceil((cost - tokens) * 1000 / rate_per_s) / 1000
            self._buckets[key] = (tokens, now)
            while len(self._buckets) > self.max_keys:  # the oldest bucket is the one most likely full again
                self._buckets.popitem(last=False)
            return allowed, wait
