"""What the routes share: settings, the engine, admission control and metrics, held on `app.state.proctor`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fastapi import Request

from proctor.api.admission import Admission
from proctor.api.metrics import Metrics
from proctor.engine import Engine
from proctor.settings import Settings


@dataclass
class ServiceState:
    """One app's service objects; `engine` is set by the lifespan before the first request."""

    settings: Settings
    admission: Admission
    metrics: Metrics
    engine: Engine | None = None
    verifiers: list[dict[str, Any]] = field(default_factory=list)

    def require_engine(self) -> Engine:
        """The engine; only missing if the app is served without running its lifespan."""
        if self.engine is None:
            raise RuntimeError("the app's lifespan has not run: serve it with uvicorn (lifespan on)")
        return self.engine

    def refresh_gauges(self) -> None:
        """Copy admission and pool state into the metric gauges."""
        engine = self.engine
        pool = engine.pool.stats() if engine is not None and engine.pool_started else None
        self.metrics.refresh(self.admission.stats(), pool)


def get_state(request: Request) -> ServiceState:
    """The service state of the app serving this request (a FastAPI dependency)."""
    return request.app.state.proctor
