"""`POST /run_code`: SandboxFusion's run-code API on Proctor's sandboxes, so SandboxFusion clients work unchanged.

Checked against bytedance/SandboxFusion at 469de08 (`sandbox/server/sandbox_api.py`: RunCodeRequest,
RunCodeResponse, parse_run_status; `sandbox/runners/types.py`: CommandRunResult, CommandRunStatus;
`sandbox/runners/base.py`: run_commands) and volcengine/verl at b178a3c
(`verl/utils/reward_score/sandbox_fusion/utils.py`: call_sandbox_api, _process_single_case).

Request (SandboxFusion's field names; unknown fields are ignored, as there):
`code`, `language`, `stdin` (string or null), `compile_timeout` and `run_timeout` (seconds, default 10),
`memory_limit_MB` (default -1: no limit given, which here means 1024 MB, verl's default, or the operator's
maximum if lower; it limits the run, while compiling keeps the language's own compile limits), `files`
({relative path: base64 content or null,
which is skipped}), `fetch_files` ([relative path]; missing files are left out, as there). Languages:
SandboxFusion's python, cpp, nodejs, go, java and rust, and Proctor's names and aliases (c, javascript ...;
sandboxes/languages.py); any other name, SandboxFusion's php or bash included, is a 422 naming `language`.
A compiled language compiles and runs in one job (one working directory); the run is skipped when compiling
fails, so `run_result` is null then, as in SandboxFusion.

Response: `status` "Success" (every command exited 0) | "Failed" (a compile error, a non-zero exit, a limit) |
"SandboxError" (the machinery failed: never a verdict on the program), `message` (empty on Success; on Failed,
Proctor's verdict such as "run: memory_limit: ..." or "compile: compile_error: ..."; on SandboxError, what
failed), `compile_result` (null for
interpreted languages) and `run_result` (null when compiling failed), each {`status` "Finished" |
"TimeLimitExceeded" | "Error", `execution_time` (wall seconds), `return_code` (exit code, or minus the signal
number; null after a time limit), `stdout`, `stderr`}, `executor_pod_name` ($MY_POD_NAME as in SandboxFusion,
else null) and `files` ({fetched path: base64}).

verl sends {compile_timeout, run_timeout, code, stdin, memory_limit_MB, language, files: {}, fetch_files: []}
and reads `status`, then `compile_result`/`run_result` `status` and `return_code`: "SandboxError" is an error
(-1, not a wrong answer); "Failed" with compile status "Error"/"TimeLimitExceeded" or a non-zero compile return
code is a compile error (-4); run "TimeLimitExceeded" a timeout (-3); run "Error" or a non-zero return code a
runtime error (-2); "Success" with run "Finished" compares stdout to the expected output. SandboxFusion turns
any command status "Error" into "SandboxError", so Proctor uses "Error" only for machinery failures; memory and
output limits are "Finished" with the killing signal's negative return code. verl sends no Authorization
header, so point it at a service without PROCTOR_TOKEN (loopback).

Back-pressure (this route only): verl 0.9.1's call_sandbox_api retries a 504 (3 attempts, sleeping 1 s then 2 s)
and nothing else; any other status, a 429 included, is an API error (-1), a failed test case. So when the sandbox
queue (PROCTOR_SANDBOX_WORKERS running + PROCTOR_SANDBOX_QUEUE queued) is full, a /run_code job waits, first come
first served, for a place. PROCTOR_RUN_CODE_QUEUE_WAIT_S (8 s) bounds the whole time before the job starts
(waiting for a place, then in the queue): a job not started by then is never run and is answered 504 with
Retry-After, so a request spends at most that wait plus its own job's limits in the service. verl's retry sends
the same body, so a retry (matched by the body's SHA-256) keeps its first attempt's place in line: its three
attempts' waits add up. Jobs not started yet are bounded in number (4096 waiting for a place) and in size
(sandboxes.pool.MAX_WAITING_BYTES, 256 MiB of code, stdin and files); past either, 504 at once; a single
request larger than that bound is a 413. Every other route keeps 429 when full. Sizing: docs/sandboxes.md.

Operator maxima: `run_timeout` and `compile_timeout` above PROCTOR_SANDBOX_MAX_CPU_S, or `memory_limit_MB` above
PROCTOR_SANDBOX_MAX_MEMORY_MB, are a 422 naming the field (a default the request left out is lowered to the
maximum instead). The job's files (the code, `files`, whatever the
program writes) are bounded by PROCTOR_SANDBOX_MAX_FILES and PROCTOR_SANDBOX_MAX_DISK_MB on nsjail and docker;
past them the run's verdict is output_limit (status "Failed", return code -9). The `local` backend cannot bound
them.

A run that fails because its runtime stopped at the heap the sandbox gave it (java.lang.OutOfMemoryError,
Node's "JavaScript heap out of memory", Go's "runtime: out of memory", Rust's "memory allocation of N bytes
failed", C++'s std::bad_alloc, Python's MemoryError) is memory_limit in `message`, as an OOM kill is.

Timeouts: SandboxFusion's `run_timeout` and `compile_timeout` are wall-clock limits. Proctor limits CPU time
of the whole process tree instead, so a loaded machine does not turn correct programs into time-outs: each
becomes the command's `cpu_s`, and the wall-clock backstop is the sandbox default (2 x cpu_s + 1 s), which only
catches sleeping or blocked programs.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from enum import Enum

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, Field, field_validator
from starlette.responses import Response

from proctor.api.errors import ErrorResponse, error_response
from proctor.api.rendering import json_response
from proctor.api.responses import error_responses, server_validated
from proctor.api.state import SandboxUnavailable, ServiceState, get_state
from proctor.capacity import PoolClosed, PoolFull
from proctor.contract import RequestError
from proctor.sandboxes import pool as sandbox_pool
from proctor.sandboxes.job import (
    CommandResult,
    File,
    Job,
    Maxima,
    Result,
    RunLimits,
    RunVerdict,
    over_maximum,
)
from proctor.sandboxes.languages import LANGUAGES, get_language

router = APIRouter(tags=["compatibility"])

DEFAULT_MEMORY_MB = 1024  # verl's sandbox_fusion.memory_limit_mb default; used when memory_limit_MB <= 0
MAX_TIMEOUT_S = 600.0
SIGKILL = 9

# What SandboxFusion calls the languages Proctor runs (verl sends these names); Proctor's own names and
# aliases (c, javascript, py, js, c++ ...) work too.
SANDBOXFUSION_NAMES = ("python", "cpp", "nodejs", "go", "java", "rust")


class RunCodeRequest(BaseModel):
    """SandboxFusion's RunCodeRequest."""

    model_config = ConfigDict(extra="ignore")

    code: str = Field(description="The program's source.")
    language: str = Field(
        description=f"SandboxFusion's {', '.join(SANDBOXFUSION_NAMES)}, or Proctor's {', '.join(LANGUAGES)}."
    )
    stdin: str | None = Field(None, description="Standard input for the run.")
    compile_timeout: float = Field(
        10, gt=0, le=MAX_TIMEOUT_S, description="CPU seconds for compiling (SandboxFusion: wall seconds)."
    )
    run_timeout: float = Field(
        10, gt=0, le=MAX_TIMEOUT_S, description="CPU seconds for the run (SandboxFusion: wall seconds)."
    )
    memory_limit_MB: int = Field(  # noqa: N815 - SandboxFusion's field name
        -1, le=65536, description=f"Memory of the whole process tree; <= 0 means {DEFAULT_MEMORY_MB} MB."
    )
    files: dict[str, str | None] = Field(
        default_factory=dict, description="Files to place in the working directory: relative path -> base64."
    )
    fetch_files: list[str] = Field(
        default_factory=list, description="Files to read back after the run (base64 in the response)."
    )

    @field_validator("memory_limit_MB")
    @classmethod
    def _memory(cls, value: int) -> int:
        if 0 < value < 16:
            raise ValueError("must be at least 16 MB (or <= 0 for the default)")
        return value


class RunStatus(str, Enum):
    """SandboxFusion's RunStatus."""

    Success = "Success"
    Failed = "Failed"
    SandboxError = "SandboxError"


class CommandRunStatus(str, Enum):
    """SandboxFusion's CommandRunStatus."""

    Finished = "Finished"
    Error = "Error"
    TimeLimitExceeded = "TimeLimitExceeded"


class CommandRunResult(BaseModel):
    """SandboxFusion's CommandRunResult."""

    status: CommandRunStatus
    execution_time: float | None = None
    return_code: int | None = None
    stdout: str | None = None
    stderr: str | None = None


class RunCodeResponse(BaseModel):
    """SandboxFusion's RunCodeResponse."""

    status: RunStatus
    message: str
    compile_result: CommandRunResult | None = None
    run_result: CommandRunResult | None = None
    executor_pod_name: str | None = None
    files: dict[str, str] = Field(default_factory=dict)


@router.post(
    "/run_code",
    response_model=RunCodeResponse,
    responses={
        **error_responses(401, 413, 422, 503),
        504: {
            "model": ErrorResponse,
            "description": "The job did not start within PROCTOR_RUN_CODE_QUEUE_WAIT_S (the sandbox queue stayed "
            "busy), or too many jobs, or too many bytes of code and input, are waiting already; it was not run. "
            "Retry after the Retry-After header (verl retries 504 by itself).",
        },
    },
    summary="Run a program (SandboxFusion-compatible)",
    openapi_extra=server_validated(
        language=f"One of SandboxFusion's {', '.join(SANDBOXFUSION_NAMES)} or Proctor's {', '.join(LANGUAGES)} "
        "(and their aliases).",
        compile_timeout="At most the operator's PROCTOR_SANDBOX_MAX_CPU_S.",
        run_timeout="At most the operator's PROCTOR_SANDBOX_MAX_CPU_S.",
        memory_limit_MB="At most the operator's PROCTOR_SANDBOX_MAX_MEMORY_MB.",
        files="Relative paths inside the working directory, base64 contents.",
        fetch_files="Relative paths inside the working directory.",
    ),
)
async def run_code(body: RunCodeRequest, state: ServiceState = Depends(get_state)) -> Response:
    """Compile and run one program in a sandbox; SandboxError means the machinery failed, not the program."""
    job = build_job(body, Maxima.from_settings(state.settings))
    size = sandbox_pool.job_size(job)
    if size > sandbox_pool.MAX_WAITING_BYTES:  # could never wait for a place: no retry would help
        return error_response(
            413,
            f"code, stdin and files hold {size} bytes; a /run_code job may hold at most "
            f"{sandbox_pool.MAX_WAITING_BYTES}",
            "code",
        )
    try:
        pool = await state.sandbox()
    except SandboxUnavailable as exc:
        return json_response(sandbox_error(str(exc)))
    try:
        # The request's fingerprint lets verl's retry of a 504 (the same body) keep its first attempt's place in line.
        retry_key = hashlib.sha256(body.model_dump_json().encode()).hexdigest()
        result = await pool.run(job, wait_s=state.settings.run_code_queue_wait_s, retry_key=retry_key)
    except PoolFull as exc:
        # 504, not 429: verl retries a 504 (and nothing else); any other status is a failed test case in verl.
        state.metrics.observe_rejection("sandbox_wait")
        headers = {"Retry-After": str(state.settings.retry_after_s)}
        return error_response(504, str(exc), None, headers)
    except PoolClosed as exc:
        # The service is shutting down and the job never ran: 504 too, so verl's retry reaches the restarted
        # service or another replica instead of counting a failed test case (a 503 here would be one).
        headers = {"Retry-After": str(state.settings.retry_after_s)}
        return error_response(504, f"the service is shutting down; the job never ran: {exc}", None, headers)
    return json_response(to_response(result))


def build_job(body: RunCodeRequest, maxima: Maxima | None = None) -> Job:
    """One sandbox job for a request: compile (if the language compiles) then run, in one working directory.

    422 naming the field for an unknown language, a bad file, or a limit above the operator's `maxima` (default:
    this process's settings).
    """
    maxima = maxima or Maxima.from_settings()
    _check_text(body)
    for field, value, maximum, unit in (
        ("compile_timeout", body.compile_timeout, maxima.cpu_s, "CPU seconds"),
        ("run_timeout", body.run_timeout, maxima.cpu_s, "CPU seconds"),
        ("memory_limit_MB", body.memory_limit_MB, maxima.memory_mb, "MB"),
    ):
        message = over_maximum(field, value, maximum, unit)
        if message is not None and field in body.model_fields_set:
            raise RequestError(422, message, field)
    # A default the request did not choose (10 s, 1024 MB) is lowered to the maximum rather than refused.
    compile_timeout = min(body.compile_timeout, maxima.cpu_s)
    run_timeout = min(body.run_timeout, maxima.cpu_s)
    try:
        language = get_language(body.language)
    except KeyError:
        names = ", ".join(sorted({*SANDBOXFUSION_NAMES, *LANGUAGES}))
        raise RequestError(
            422, f"language {body.language!r} is not supported; use one of: {names}", "language"
        ) from None
    source_name = language.file_name(body.code)
    files = _request_files(body.files, reserved=source_name)
    memory_mb = body.memory_limit_MB if body.memory_limit_MB > 0 else min(DEFAULT_MEMORY_MB, maxima.memory_mb)
    commands = []
    if language.compiled:
        # compile_timeout is the compiler's CPU time; its memory stays the language's compile limit.
        base = language.compile_limits
        wall_s = max(base.wall_backstop_s, 2 * compile_timeout + 1)
        limits = base.model_copy(update={"cpu_s": compile_timeout, "wall_s": wall_s})
        compile_command = language.compile_command(body.code, limits)
        assert compile_command is not None  # language.compiled
        commands.append(compile_command)
    run_limits = RunLimits(cpu_s=run_timeout, memory_mb=memory_mb)
    commands.append(language.run_command(body.code, body.stdin or "", run_limits, name="run"))
    return Job(
        files=[*files, File(path=source_name, content=body.code)],
        commands=commands,
        env=language.env(memory_mb),
        fetch=_fetch_paths(body.fetch_files),
    )


def _unencodable(text: str) -> bool:
    """Whether a text holds a lone surrogate (a JSON body may send `"\\ud800"`): no UTF-8 file, program or
    stdin can hold it."""
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _check_text(body: RunCodeRequest) -> None:
    """422 naming the field for a lone surrogate in the code, stdin or a path: the job could not be written,
    which would otherwise be a SandboxError (a machinery failure) or a 500, never the request's own fault."""
    fields = [("code", body.code), ("stdin", body.stdin or "")]
    fields += [(f"files.{path}", path) for path in body.files]
    fields += [(f"fetch_files.{i}", path) for i, path in enumerate(body.fetch_files)]
    for field, text in fields:
        if _unencodable(text):
            raise RequestError(
                422,
                f"invalid {field}: holds a lone surrogate (U+D800 to U+DFFF), which UTF-8 cannot encode",
                field,
            )


def _request_files(files: dict[str, str | None], reserved: str) -> list[File]:
    """SandboxFusion's `files` as job files: null contents are skipped, as there; the source's path is Proctor's."""
    out = []
    for path, content in files.items():
        if content is None:
            continue
        field = f"files.{path}"
        try:
            base64.b64decode(content, validate=True)
        except (binascii.Error, ValueError):
            raise RequestError(422, f"invalid {field}: not base64", field) from None
        try:
            file = File(path=path, content=content, base64=True)
        except ValueError:
            raise RequestError(
                422, f"invalid {field}: the path must be relative, inside the working directory", field
            ) from None
        if file.path == reserved:
            raise RequestError(422, f"invalid {field}: {path} is where the code goes", field)
        out.append(file)
    return out


def _fetch_paths(paths: list[str]) -> list[str]:
    """fetch_files, each checked to stay inside the working directory."""
    for i, path in enumerate(paths):
        try:
            File(path=path)
        except ValueError:
            field = f"fetch_files.{i}"
            raise RequestError(422, f"invalid {field}: the path must be relative", field) from None
    return paths


def to_response(result: Result) -> RunCodeResponse:
    """SandboxFusion's response for a sandbox result, its top-level status decided as parse_run_status does."""
    converted = [(command, _command_result(command)) for command in result.commands]
    results = {command.name: converted_result for command, converted_result in converted}
    error = next((c for c, r in converted if r.status is CommandRunStatus.Error), None)
    failed = next(
        (c for c, r in converted if c.verdict is not RunVerdict.ok or r.return_code != 0),
        None,
    )
    if error is not None:
        status, message = RunStatus.SandboxError, f"{error.name}: {error.detail or 'sandbox error'}"
    elif failed is not None:
        status, message = RunStatus.Failed, _describe(failed)
    elif "run" not in results:
        # Every command that ran was ok, yet the run itself is missing: the machinery's fault, not the program's.
        status, message = RunStatus.SandboxError, "the sandbox returned no run result"
    else:
        status, message = RunStatus.Success, ""
    return RunCodeResponse(
        status=status,
        message=message,
        compile_result=results.get("compile"),
        run_result=results.get("run"),
        executor_pod_name=os.environ.get("MY_POD_NAME"),
        files=result.files,
    )


def sandbox_error(message: str) -> RunCodeResponse:
    """A SandboxError response: the machinery failed before the program could run."""
    return RunCodeResponse(
        status=RunStatus.SandboxError, message=message, executor_pod_name=os.environ.get("MY_POD_NAME")
    )


def _command_result(command: CommandResult) -> CommandRunResult:
    """One command in SandboxFusion's terms."""
    if command.verdict is RunVerdict.sandbox_error:
        status, return_code = CommandRunStatus.Error, None
    elif command.verdict is RunVerdict.time_limit:
        status, return_code = CommandRunStatus.TimeLimitExceeded, None  # as SandboxFusion reports a timeout
    else:
        status, return_code = CommandRunStatus.Finished, _return_code(command)
    return CommandRunResult(
        status=status,
        execution_time=round(command.wall_s, 6),
        return_code=return_code,
        stdout=command.stdout,
        stderr=command.stderr,
    )


def _return_code(command: CommandResult) -> int:
    """The exit code, or minus the signal as asyncio reports it; a program stopped at a limit never reads as 0."""
    if command.signal is not None:
        return -command.signal
    code = command.exit_code if command.exit_code is not None else -SIGKILL
    if code == 0 and command.verdict is not RunVerdict.ok:
        return -SIGKILL  # stopped by the sandbox (memory or output limit) after the tree exited cleanly
    return code


def _describe(command: CommandResult) -> str:
    """Proctor's verdict for a failed command, e.g. 'run: memory_limit: memory limit 128 MB (OOM kill)'."""
    verdict = command.verdict.value
    if command.name == "compile" and command.verdict is RunVerdict.runtime_error:
        verdict = "compile_error"  # the compiler rejected the program
    detail = f": {command.detail}" if command.detail else ""
    truncated = " (stdout truncated)" if command.stdout_truncated else ""
    return f"{command.name}: {verdict}{detail}{truncated}"
