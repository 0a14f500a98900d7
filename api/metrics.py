"""Prometheus metrics: HTTP requests and latency by route, scores by verifier and status, pool, admission and
sandbox gauges, sandbox jobs by verdict.

Each app has its own CollectorRegistry. With several uvicorn workers `serve()` sets PROMETHEUS_MULTIPROC_DIR
before the workers start; prometheus_client then keeps values in per-process files and `/metrics`, answered by
any one worker, sums counters and histograms over all of them. Gauges use `livesum`: the pool, admission and
sandbox gauges are the sum over live workers, refreshed by each worker every second.

`proctor_host_budget` shows the settings sized per host (PROCTOR_MAX_CONCURRENCY, PROCTOR_POOL_WORKERS, ...) as
the operator gave them, and `proctor_worker_budget` each worker's share of them (one series per worker, by pid,
with several workers); `sum by (setting)` of the shares is what the host runs.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proctor.contract import Score
from proctor.sandboxes.job import Result, RunVerdict

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
_POOL_FIELDS = ("workers", "alive", "busy", "queued", "submitted", "timeouts", "crashes")
_SANDBOX_FIELDS = ("workers", "queue", "running", "queued")


def multiprocess_mode() -> bool:
    """Whether prometheus_client is collecting across worker processes."""
    return bool(os.environ.get(MULTIPROC_ENV))


class Metrics:
    """The service's metrics and their exposition."""

    def __init__(self) -> None:
        self.multiprocess = multiprocess_mode()
        # In multiprocess mode values live in files, so the metric objects belong to no registry.
        self.registry: CollectorRegistry | None = None if self.multiprocess else CollectorRegistry()
        reg = self.registry
        self.requests = Counter(
            "proctor_http_requests",
            "HTTP requests by route template, method and status code.",
            ["route", "method", "status"],
            registry=reg,
        )
        self.request_seconds = Histogram(
            "proctor_http_request_duration_seconds",
            "HTTP request latency by route template.",
            ["route"],
            buckets=_LATENCY_BUCKETS,
            registry=reg,
        )
        self.scores = Counter(
            "proctor_scores", "Scores produced, by verifier and status.", ["verifier", "status"], registry=reg
        )
        self.score_seconds = Histogram(
            "proctor_score_duration_seconds",
            "Time to score one item (cache hits included), by verifier.",
            ["verifier"],
            buckets=_LATENCY_BUCKETS,
            registry=reg,
        )
        self.rejected = Counter(
            "proctor_rejected",
            "Requests turned away busy, by reason (429: queue_full: admission queue; pool_full: verifier pool "
            "queue; sandbox_full: sandbox pool queue; 504: sandbox_wait: a /run_code job did not start within "
            "PROCTOR_RUN_CODE_QUEUE_WAIT_S, or the jobs waiting to start hold too many bytes).",
            ["reason"],
            registry=reg,
        )
        self.admission = Gauge(
            "proctor_admission",
            "Scoring requests running and waiting for a slot.",
            ["state"],
            multiprocess_mode="livesum",
            registry=reg,
        )
        self.pool = Gauge(
            "proctor_pool",
            "Verifier worker pool: workers, alive, busy, queued, and lifetime submitted/timeouts/crashes.",
            ["field"],
            multiprocess_mode="livesum",
            registry=reg,
        )
        self.sandbox = Gauge(
            "proctor_sandbox",
            "Sandbox pool: workers, queue bound, jobs running and jobs waiting (0 until the pool starts).",
            ["field"],
            multiprocess_mode="livesum",
            registry=reg,
        )
        self.sandbox_jobs = Counter(
            "proctor_sandbox_jobs",
            "Sandbox jobs finished, by verdict (sandbox_error: the machinery failed).",
            ["verdict"],
            registry=reg,
        )
        self.host_budget: Gauge | None = None  # made by show_budget: only a served app knows its share
        self.worker_budget: Gauge | None = None
        self.redis_up: Gauge | None = None  # made by watch_redis: only a service that uses Redis shows it
        self.redis_errors = Counter(
            "proctor_redis_errors",
            "Redis operations that failed (the request went on without Redis), by operation.",
            ["op"],
            registry=reg,
        )
        self.shared_cache_total = Counter(
            "proctor_shared_cache",
            "Look-ups in the Redis result cache replicas share (after a local miss), by result: hit, miss, "
            "rejected (an entry whose signature or status failed the check: dropped, and also counted a miss).",
            ["result"],
            registry=reg,
        )
        self.single_flight_total = Counter(
            "proctor_single_flight",
            "Expensive items by how they ran across replicas: owner (ran it), waited (got another replica's "
            "score), took_over (the holder went without a result), timed_out (waited past the deadline), "
            "degraded (Redis down).",
            ["outcome"],
            registry=reg,
        )
        self.rate_limited = Counter(
            "proctor_rate_limited",
            "Requests answered 429 by the per-token rate limit (PROCTOR_RATE_LIMIT_PER_S), by where the "
            "bucket was: redis, or local (no Redis, or Redis down).",
            ["bucket"],
            registry=reg,
        )
        for field in _POOL_FIELDS:
            self.pool.labels(field).set(0)
        for field in _SANDBOX_FIELDS:
            self.sandbox.labels(field).set(0)
        for verdict in RunVerdict:
            self.sandbox_jobs.labels(verdict.value)  # every verdict shows, at 0, before its first job
        for state in ("running", "queued"):
            self.admission.labels(state).set(0)

    def observe_request(self, route: str, method: str, status: int, seconds: float) -> None:
        """Count one HTTP request and its latency."""
        self.requests.labels(route, method, str(status)).inc()
        self.request_seconds.labels(route).observe(seconds)

    def observe_score(self, score: Score) -> None:
        """Count one score by verifier name (without version) and status."""
        name = score.verifier.split("@", 1)[0]
        self.scores.labels(name, score.status.value).inc()
        self.score_seconds.labels(name).observe(score.elapsed_ms / 1000.0)

    def observe_rejection(self, reason: str) -> None:
        """Count one request turned away busy (a 429, or /run_code's 504 after its wait)."""
        self.rejected.labels(reason).inc()

    def observe_sandbox_result(self, result: Result) -> None:
        """Count one finished sandbox job by its verdict (called from the sandbox pool's threads)."""
        self.sandbox_jobs.labels(result.verdict.value).inc()

    def show_budget(self, workers: int, host: Mapping[str, int], share: Mapping[str, int]) -> None:
        """Show the host's budget (the per-host settings and the number of uvicorn workers) and this worker's
        share of it (proctor.api.server splits it)."""
        if self.host_budget is None or self.worker_budget is None:
            self.host_budget = Gauge(
                "proctor_host_budget",
                "Settings sized per host, as the operator gave them (setting=workers: uvicorn workers).",
                ["setting"],
                multiprocess_mode="livemax",
                registry=self.registry,
            )
            self.worker_budget = Gauge(
                "proctor_worker_budget",
                "This uvicorn worker's share of each per-host setting (with several workers: one series per "
                "worker, by pid; their sum is what the host runs).",
                ["setting"],
                multiprocess_mode="liveall",
                registry=self.registry,
            )
        self.host_budget.labels("workers").set(workers)
        for name, value in host.items():
            self.host_budget.labels(name).set(value)
        for name, value in share.items():
            self.worker_budget.labels(name).set(value)

    # -- RedisObserver (proctor.redis_backend): called from any thread, never blocking --------------------

    def watch_redis(self, up: bool) -> None:
        """Show Redis's gauge and every label at 0 (a service configured with PROCTOR_REDIS_URL calls this)."""
        if self.redis_up is None:
            self.redis_up = Gauge(
                "proctor_redis_up",
                "1 when Redis (PROCTOR_REDIS_URL) answered this process's last call, 0 while it serves without "
                "it (local cache, memory sessions for new sessions, per-process rate limits).",
                multiprocess_mode="livemin",
                registry=self.registry,
            )
        self.redis_state(up)
        for result in ("hit", "miss", "rejected"):
            self.shared_cache_total.labels(result)
        for outcome in ("owner", "waited", "took_over", "timed_out", "degraded"):
            self.single_flight_total.labels(outcome)
        for bucket in ("redis", "local"):
            self.rate_limited.labels(bucket)

    def observe_rate_limited(self, bucket: str) -> None:
        """Count one request answered 429 by the rate limit (its bucket in redis or local)."""
        self.rate_limited.labels(bucket).inc()

    def redis_state(self, up: bool) -> None:
        """Redis became reachable (1) or unreachable (0)."""
        if self.redis_up is not None:
            self.redis_up.set(1 if up else 0)

    def redis_error(self, op: str) -> None:
        """Count one failed Redis operation."""
        self.redis_errors.labels(op).inc()

    def shared_cache(self, result: str) -> None:
        """Count one shared-cache look-up (hit or miss)."""
        self.shared_cache_total.labels(result).inc()

    def single_flight(self, outcome: str) -> None:
        """Count how one expensive item ran across replicas."""
        self.single_flight_total.labels(outcome).inc()

    def refresh(
        self,
        admission: dict[str, int],
        pool: dict[str, int] | None,
        sandbox: dict[str, Any] | None = None,
    ) -> None:
        """Copy the current admission, verifier pool and sandbox pool state into the gauges."""
        self.admission.labels("running").set(admission.get("running", 0))
        self.admission.labels("queued").set(admission.get("queued", 0))
        for field in _POOL_FIELDS:
            self.pool.labels(field).set((pool or {}).get(field, 0))
        for field in _SANDBOX_FIELDS:
            self.sandbox.labels(field).set((sandbox or {}).get(field, 0))

    def render(self) -> tuple[bytes, str]:
        """The Prometheus text exposition and its content type."""
        if self.multiprocess:
            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)
            return generate_latest(registry), CONTENT_TYPE_LATEST
        assert self.registry is not None
        return generate_latest(self.registry), CONTENT_TYPE_LATEST

    def close(self) -> None:
        """Drop this process's live gauges from the shared files when it stops."""
        if self.multiprocess:
            multiprocess.mark_process_dead(os.getpid())


class RequestMetricsMiddleware:
    """Pure ASGI middleware timing every HTTP request and counting it by route template and status."""

    def __init__(self, app: ASGIApp, metrics: Metrics):
        self.app = app
        self.metrics = metrics

    @staticmethod
    def route_of(scope: Scope) -> str:
        """The route template the router matched (bounded label values), or 'unmatched'."""
        route = scope.get("route")  # set by FastAPI's router on the shared scope when a route matches
        return str(getattr(route, "path_format", None) or getattr(route, "path", None) or "unmatched")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            method = scope.get("method", "")
            method = (
                method if method in _METHODS else "other"
            )  # clients choose methods; labels must stay bounded
            self.metrics.observe_request(self.route_of(scope), method, status, time.perf_counter() - started)
