"""The /v1/environments routes: list task makers (puzzles, demos) and make tasks from one of them."""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

from proctor.api.rendering import json_response
from proctor.api.responses import error_responses
from proctor.api.state import ServiceState, get_state
from proctor.environments.registry import MAX_SEED, Task, all_environments, get_environment

router = APIRouter(prefix="/v1", tags=["environments"])

MAX_HTTP_TASKS = 1_000
"""Tasks per request over HTTP (the CLI and in-process calls allow more); page with seed/count."""


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
    seed: int = Field(default=0, ge=0, le=MAX_SEED)
    count: int = Field(default=1, ge=1, le=MAX_HTTP_TASKS)
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
    """One environment's description; 404 listing the known ones if it is unknown."""
    return json_response(get_environment(name).describe())


@router.post(
    "/environments/{name}/tasks",
    response_model=TasksResponse,
    responses=error_responses(400, 401, 404, 413, 422, 429),
    summary="Make tasks",
)
async def make_tasks(name: str, body: TasksRequest, state: ServiceState = Depends(get_state)) -> Response:
    """Make `count` tasks of a split; each has a prompt, a reference for its verifier and metadata."""
    spec = get_environment(name)
    spec.resolve(body.difficulty, body.config)  # 422 naming the field before taking a slot
    async with state.admission.slot():
        # Generation is CPU-bound (a sudoku is milliseconds): off the event loop.
        tasks = await asyncio.to_thread(
            spec.tasks, body.split, body.seed, body.count, body.difficulty, body.config
        )
    return json_response({"environment": spec.name, "version": spec.version, "tasks": tasks})
