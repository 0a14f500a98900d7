"""The /v1/environments routes: list task makers (puzzles, demos) and make tasks from one of them."""

from __future__ import annotations

import asyncio
import ctypes
import threading
from collections.abc import Callable
from typing import Any, Literal, TypeVar

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

from proctor.api.admission import POOL
from proctor.api.rendering import json_response
from proctor.api.responses import error_responses, server_validated
from proctor.api.state import ServiceState, get_state
from proctor.contract import JsonInt, RequestError
from proctor.environments.registry import MAX_JSON_SEED, Task, all_environments, get_environment
from proctor.registry import Example, get_verifier

router = APIRouter(prefix="/v1", tags=["environments"])

MAX_HTTP_TASKS = 1_000
"""Tasks per request over HTTP (the CLI and in-process calls allow more); page with seed/count."""

TASKS_DEADLINE_S = 120.0
"""How long one tasks request may generate. 1,000 hard tasks of the slowest family take about a minute on one
shared core; a config that makes generation slower than this gets a 422 instead of holding a thread."""

T = TypeVar("T")


class GenerationCancelled(BaseException):
    """Raised inside a generation thread that passed its deadline (delivered asynchronously).

    A BaseException, like KeyboardInterrupt, so a generator's own `except Exception` cannot swallow it.
    """


async def run_with_deadline(function: Callable[[], T], deadline_s: float) -> T:
    """Run a CPU-bound function on a thread of its own; past the deadline, stop it and raise TimeoutError.

    The event loop only awaits, so other requests are served meanwhile. Python cannot kill a thread, so the
    thread is stopped by raising GenerationCancelled in it (`PyThreadState_SetAsyncExc`), which Python code
    (every generator here) meets at its next bytecode; a long C call would finish first. A thread of its own,
    rather than the shared executor, so that exception can only land in this generation.
    """
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()
    lock = threading.Lock()
    running = True

    def settle(error: BaseException | None, value: Any = None) -> None:
        if done.done():
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(value)

    def work() -> None:
        nonlocal running
        try:
            try:
                value, error = function(), None
            except BaseException as exc:  # handed to the awaiting request, like asyncio.to_thread would
                value, error = None, exc
            with lock:
                running = False
            loop.call_soon_threadsafe(settle, error, value)
        except GenerationCancelled:  # landed after the function returned: the deadline already answered
            pass

    thread = threading.Thread(target=work, name="proctor-tasks", daemon=True)
    thread.start()
    try:
        return await asyncio.wait_for(asyncio.shield(done), deadline_s)
    except (TimeoutError, asyncio.CancelledError):  # past the deadline, or the client went away
        done.cancel()
        with lock:
            if running:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(
                    ctypes.c_ulong(thread.ident or 0), ctypes.py_object(GenerationCancelled)
                )
        raise


class EnvironmentInfo(BaseModel):
    """A registered environment: name, version, its verifier, difficulty levels and config schema."""

    model_config = ConfigDict(extra="allow")

    name: str
    version: str
    kind: str
    description: str
    verifier: str | None = Field(
        description="The verifier scoring its tasks; null for puzzle.mix (per task)."
    )
    difficulty_levels: list[str]
    default_difficulty: str | None
    levels: dict[str, dict[str, Any]] = Field(description="Difficulty level -> the config values it sets.")
    config_schema: dict[str, Any]


class TasksRequest(BaseModel):
    """Which tasks to make: the same request always gives byte-identical tasks."""

    model_config = ConfigDict(extra="forbid")

    split: Literal["train", "test"] = "train"
    seed: JsonInt = Field(default=0, ge=0, le=MAX_JSON_SEED)
    count: JsonInt = Field(default=1, ge=1, le=MAX_HTTP_TASKS)
    difficulty: str | None = Field(
        default=None, description="A level name; default: the environment's default."
    )
    config: dict[str, Any] | None = Field(
        default=None, description="Config values (override the difficulty level's); see config_schema."
    )


class TasksResponse(BaseModel):
    """The tasks, in index order."""

    environment: str
    version: str
    tasks: list[Task]


@router.get("/environments", response_model=list[EnvironmentInfo], summary="List environments")
async def list_environments() -> Response:
    """Every environment (puzzle families, puzzle.mix, demo tasks) with levels and config schema."""
    return json_response([spec.describe() for spec in all_environments()])


@router.get(
    "/environments/{name}",
    response_model=EnvironmentInfo,
    responses=error_responses(401, 404),
    summary="Describe one environment",
)
async def describe_environment(name: str) -> Response:
    """One environment's description; 404 listing the known ones if it is unknown.

    A tool environment's description also lists its example transcripts (`examples`): each gold, cheat and
    trivial-policy transcript with its task and expected reward, and the `/v1/score` request that replays it.
    """
    spec = get_environment(name)
    described = spec.describe()
    if spec.kind == "tool" and spec.verifier is not None:
        described["examples"] = example_transcripts(get_verifier(spec.verifier).examples, spec.verifier)
    return json_response(described)


def example_transcripts(examples: tuple[Example, ...], verifier: str) -> list[dict[str, Any]]:
    """A tool environment's registered examples as listed by GET /v1/environments/{name}.

    `task.prompt` is the transcript's opening messages (up to the first assistant message), so each entry says
    what the policy was asked, what it did, what the reward must be, and how to replay it through /v1/score.
    """
    listed = []
    for example in examples:
        transcript = list(example.response) if isinstance(example.response, list) else [example.response]
        first_turn = next(
            (i for i, m in enumerate(transcript) if isinstance(m, dict) and m.get("role") == "assistant"),
            len(transcript),
        )
        prefix = example.note.partition(":")[0].strip()
        kind = "gold" if example.expect == 1.0 else prefix if prefix in ("cheat", "trivial") else "cheat"
        listed.append(
            {
                "name": example.note,
                "kind": kind,
                "expected_reward": example.expect,
                "task": {"prompt": transcript[:first_turn], "reference": example.reference},
                "transcript": transcript,
                "score_request": {
                    "verifier": verifier,
                    "response": example.response,
                    "reference": example.reference,
                    **({"options": example.options} if example.options else {}),
                },
            }
        )
    return listed


@router.post(
    "/environments/{name}/tasks",
    response_model=TasksResponse,
    responses=error_responses(400, 401, 404, 413, 422, 429),
    summary="Make tasks",
    openapi_extra=server_validated(
        difficulty="Environment-specific: one of the environment's difficulty_levels (GET /v1/environments/{name}).",
        config="Environment-specific: validated against the environment's config_schema; a config no task can be "
        "made for is a 422 too.",
        count=f"Generation has a deadline ({TASKS_DEADLINE_S:g} s): a request that passes it is a 422 naming count.",
    ),
)
async def make_tasks(name: str, body: TasksRequest, state: ServiceState = Depends(get_state)) -> Response:
    """Make `count` tasks of a split; each has a prompt, a reference for its verifier and metadata.

    Generation has a deadline (TASKS_DEADLINE_S); a request that would take longer is a 422.
    """
    spec = get_environment(name)
    spec.resolve(body.difficulty, body.config)  # 422 naming the field before taking a slot
    async with state.admission.slot(POOL):
        # Generation is CPU-bound (a sudoku is milliseconds): off the event loop, with a deadline.
        try:
            tasks = await run_with_deadline(
                lambda: spec.tasks(body.split, body.seed, body.count, body.difficulty, body.config),
                TASKS_DEADLINE_S,
            )
        except TimeoutError:
            raise RequestError(
                422,
                f"making {body.count} {spec.name} tasks took longer than {TASKS_DEADLINE_S:g} s, the limit; "
                "ask for fewer tasks (count) or a smaller config",
                "count",
            ) from None
    return json_response({"environment": spec.name, "version": spec.version, "tasks": tasks})
