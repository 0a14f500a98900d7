"""The FastAPI application: routes, middleware, error handlers, and the lifespan of the engine and sandbox pool."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

import proctor
from proctor.api import compat, environments, graders, jobs, ops, routes, run_code, sessions
from proctor.api.admission import Admission
from proctor.api.auth import BearerAuthMiddleware
from proctor.api.errors import install_error_handlers
from proctor.api.limits import BodyLimitMiddleware, RateLimiter, RateLimitMiddleware
from proctor.api.metrics import Metrics, RequestMetricsMiddleware
from proctor.api.state import ServiceState
from proctor.contract import RequestError
from proctor.engine import Engine
from proctor.redis_backend import connect
from proctor.registry import all_verifiers, get_verifier, load_verifiers
from proctor.settings import Settings, get_settings

log = logging.getLogger(__name__)

GAUGE_REFRESH_S = 1.0


def create_app(settings: Settings | None = None, engine: Engine | None = None) -> FastAPI:
    """Build the service; the engine is created at start-up unless given, and a created one is closed at shutdown."""
    settings = settings or get_settings()
    state = ServiceState(
        settings=settings,
        admission=Admission.from_settings(settings),
        metrics=Metrics(),
        engine=engine,
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        load_verifiers(settings.plugins)  # a broken plugin fails start-up, not the first request
        state.verifiers = [spec.describe() for spec in all_verifiers()]
        _check_default_verifier(settings.default_verifier)
        owned = state.engine is None
        if owned:
            state.engine = Engine(settings)
        refresher = asyncio.create_task(_refresh_gauges(state)) if state.metrics.multiprocess else None
        try:
            yield
        finally:
            if refresher is not None:
                refresher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await refresher
            if owned and state.engine is not None:
                await asyncio.to_thread(state.engine.close)
                state.engine = None
            await sessions.shutdown(app)  # closes what open sessions hold (interpreters)
            await asyncio.to_thread(state.close_sandbox)  # started on first use, if ever
            state.metrics.close()

    app = FastAPI(
        title="Proctor",
        version=proctor.__version__,
        description="Rewards you can trust for RL on language models, behind one scoring contract.",
        lifespan=lifespan,
    )
    app.state.proctor = state
    shared = (
        connect(settings.redis_url, replica_url=settings.advertise_url or None)
        if settings.redis_url
        else None
    )
    if shared is not None:  # the engine, the session store and the rate limit share this one connection
        shared.observer = state.metrics
        state.metrics.watch_redis(shared.available)
    install_error_handlers(app, settings.retry_after_s, state.metrics.observe_rejection)
    app.include_router(routes.router)
    app.include_router(compat.router)
    app.include_router(run_code.router)
    app.include_router(ops.router)
    app.include_router(graders.router)
    app.include_router(environments.router)
    sessions.install(app, state)
    jobs.install(app, state)

    # add_middleware wraps what is already there, so the last added runs first:
    # metrics (sees every answer) -> auth (rejects before any body is read) -> body limit -> app.
    app.add_middleware(BodyLimitMiddleware, max_body_bytes=settings.max_body_bytes)
    if settings.rate_limit_per_s > 0:  # inside auth: only callers that passed the token check spend tokens
        limiter = RateLimiter(settings.rate_limit_per_s, settings.rate_limit_burst, shared)
        app.add_middleware(
            RateLimitMiddleware,
            limiter=limiter,
            on_limited=state.metrics.observe_rate_limited,
            by_token=bool(settings.token),
        )
    if settings.token:
        app.add_middleware(BearerAuthMiddleware, token=settings.token)
    app.add_middleware(RequestMetricsMiddleware, metrics=state.metrics)
    return app


def _check_default_verifier(name: str) -> None:
    try:
        get_verifier(name)
    except RequestError:
        log.warning(
            "PROCTOR_DEFAULT_VERIFIER=%r is not a registered verifier; plain compat labels will fail", name
        )


async def _refresh_gauges(state: ServiceState) -> None:
    """Keep this worker's share of the pool, admission and sandbox gauges current for whichever worker is scraped."""
    while True:
        try:
            state.refresh_gauges()
        except Exception:  # a failed refresh must not stop every later one
            log.exception("could not refresh the pool, admission and sandbox gauges")
        await asyncio.sleep(GAUGE_REFRESH_S)
