"""Proctor: rewards you can trust for RL on language models, behind one scoring contract.

In-process use::

    import proctor
    score = proctor.score("text.match", response="The answer is \\boxed{42}", reference="42")
    assert score.reward == 1.0
"""

from __future__ import annotations

from typing import Any

from proctor.contract import (
    BatchRequest,
    BatchResponse,
    ChatMessage,
    ErrorBody,
    ItemError,
    RequestError,
    Score,
    ScoreRequest,
    Status,
    Verdict,
)
from proctor.registry import (
    BaseOptions,
    Example,
    VerifierSpec,
    all_verifiers,
    get_verifier,
    register_verifier,
)

__version__ = "0.1.0"

__all__ = [
    "BaseOptions",
    "BatchRequest",
    "BatchResponse",
    "ChatMessage",
    "ErrorBody",
    "Example",
    "ItemError",
    "RequestError",
    "Score",
    "ScoreRequest",
    "Status",
    "Verdict",
    "VerifierSpec",
    "all_verifiers",
    "get_verifier",
    "open_session",
    "open_session_async",
    "register_verifier",
    "score",
    "score_batch",
]


def score(
    verifier: str,
    response: str | list[dict[str, Any]],
    reference: Any = None,
    options: dict[str, Any] | None = None,
    id: str | int | None = None,
) -> Score:
    """Score one response in this process; raises RequestError (404/422) for a bad request."""
    from proctor.engine import default_engine

    request = {
        "verifier": verifier,
        "response": response,
        "reference": reference,
        "options": options or {},
        "id": id,
    }
    return default_engine().score(request)


def score_batch(items: list[ScoreRequest | dict[str, Any]]) -> list[Score | ItemError]:
    """Score many requests in this process, in order; a bad item yields an ItemError in its slot."""
    from proctor.engine import default_engine

    return default_engine().score_batch(items)


def open_session(
    environment: str, task: dict[str, Any], *, options: dict[str, Any] | None = None, id: str | None = None
) -> Any:
    """Open a multi-turn tool session in this process: `.messages`, `.tools`, `.step(message)`,
    `.finish(message=None)`, `.record()`, `.close()` (see `proctor.environments.tools.inprocess`)."""
    from proctor.environments.tools.inprocess import open_session as _open

    return _open(environment, task, options=options, id=id)


async def open_session_async(
    environment: str, task: dict[str, Any], *, options: dict[str, Any] | None = None, id: str | None = None
) -> Any:
    """The async twin of `open_session`: the same methods, awaited."""
    from proctor.environments.tools.inprocess import open_session_async as _open

    return await _open(environment, task, options=options, id=id)
