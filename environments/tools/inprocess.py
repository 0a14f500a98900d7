"""Sessions in this process: `proctor.open_session(...)` (blocking) and `proctor.open_session_async(...)`.

The same contract as the HTTP routes, without a server: `.messages` and `.tools` to start the policy with,
`.step(message)` for each assistant message (the step's observations, `done`, `end_reason` and, at the end,
the `score`), `.finish(message=None)` for the final `Score`, `.record()` for the transcript and action log,
`.close()` (also on leaving a `with` block). The blocking API runs its sessions on the engine's background
event loop; the async one on the caller's loop, one session manager per loop.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

from proctor.contract import ChatMessage, Score
from proctor.engine import run_sync
from proctor.environments.tools.sessions import SessionManager

_sync_manager: SessionManager | None = None
_async_managers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, SessionManager] = (
    weakref.WeakKeyDictionary()
)


def _message(message: dict[str, Any] | ChatMessage) -> dict[str, Any]:
    return message.model_dump(exclude_none=True) if isinstance(message, ChatMessage) else message


def _request(environment: str, task: dict[str, Any], options: dict[str, Any] | None, id: str | None) -> dict:
    request: dict[str, Any] = {"environment": environment, "task": task, "options": options or {}}
    if id is not None:
        request["id"] = id
    return request


class _Opened:
    def __init__(self, opened: dict[str, Any]):
        self.session_id: str = opened["session_id"]
        self.environment: str = opened["environment"]
        self.messages: list[dict[str, Any]] = opened["messages"]
        self.tools: list[dict[str, Any]] = opened["tools"]
        self.limits: dict[str, Any] = opened["limits"]
        self.expires_at: float = opened["expires_at"]


class Session(_Opened):
    """A blocking session handle; see the module docstring."""

    def __init__(self, manager: SessionManager, opened: dict[str, Any]):
        super().__init__(opened)
        self._manager = manager

    def step(self, message: dict[str, Any] | ChatMessage, step: int | None = None) -> dict[str, Any]:
        """Take one assistant message; the result as `POST /v1/sessions/{id}/step` answers it."""
        return run_sync(self._manager.step(self.session_id, _message(message), step))

    def finish(self, message: dict[str, Any] | ChatMessage | None = None) -> Score:
        """End the episode (with an optional final message) and return its Score."""
        raw = None if message is None else _message(message)
        return Score.model_validate(run_sync(self._manager.finish(self.session_id, raw)))

    def record(self) -> dict[str, Any]:
        """The session's record: transcript, action log, usage, end reason and score."""
        return run_sync(self._manager.get(self.session_id))

    def close(self) -> None:
        """Close the session and free what it holds; idempotent."""
        run_sync(self._manager.delete(self.session_id))

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncSession(_Opened):
    """The async twin of Session: the same methods, awaited."""

    def __init__(self, manager: SessionManager, opened: dict[str, Any]):
        super().__init__(opened)
        self._manager = manager

    async def step(self, message: dict[str, Any] | ChatMessage, step: int | None = None) -> dict[str, Any]:
        """Take one assistant message."""
        return await self._manager.step(self.session_id, _message(message), step)

    async def finish(self, message: dict[str, Any] | ChatMessage | None = None) -> Score:
        """End the episode and return its Score."""
        raw = None if message is None else _message(message)
        return Score.model_validate(await self._manager.finish(self.session_id, raw))

    async def record(self) -> dict[str, Any]:
        """The session's record."""
        return await self._manager.get(self.session_id)

    async def close(self) -> None:
        """Close the session; idempotent."""
        await self._manager.delete(self.session_id)

    async def __aenter__(self) -> AsyncSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def sync_manager() -> SessionManager:
    """The manager of blocking sessions (on the engine's background loop)."""
    global _sync_manager
    if _sync_manager is None:
        _sync_manager = SessionManager()
    return _sync_manager


def async_manager() -> SessionManager:
    """The manager of the running loop's async sessions."""
    loop = asyncio.get_running_loop()
    manager = _async_managers.get(loop)
    if manager is None:
        manager = _async_managers[loop] = SessionManager()
    return manager


def open_session(
    environment: str, task: dict[str, Any], *, options: dict[str, Any] | None = None, id: str | None = None
) -> Session:
    """Open a session in this process (RequestError 404/422 as over HTTP)."""
    manager = sync_manager()
    return Session(manager, run_sync(manager.create(_request(environment, task, options, id))))


async def open_session_async(
    environment: str, task: dict[str, Any], *, options: dict[str, Any] | None = None, id: str | None = None
) -> AsyncSession:
    """Open a session on the running event loop."""
    manager = async_manager()
    return AsyncSession(manager, await manager.create(_request(environment, task, options, id)))
