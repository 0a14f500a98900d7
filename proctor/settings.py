"""Every setting Proctor reads, from `PROCTOR_*` environment variables (this class is their one documentation)."""

from __future__ import annotations

import os
from functools import lru_cache
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from proctor.end_of_turn import parse_end_tokens
from proctor.policy import FailurePolicy


def _half_host_memory_mb() -> int:
    """Half of this machine's physical memory, in MiB: the default ceiling for one sandboxed job."""
    try:
        return max(64, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (2 * 1024 * 1024))
    except (AttributeError, ValueError, OSError):  # not POSIX
        return 4096


def _default_pool_workers() -> int:
    """One worker per core this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


class Settings(BaseSettings):
    """Service, pool, cache and compatibility settings; each field is read from PROCTOR_<FIELD>."""

    model_config = SettingsConfigDict(env_prefix="PROCTOR_", extra="ignore")

    # Network
    host: str = Field(
        "127.0.0.1", description="Address to bind. Anything but loopback requires PROCTOR_TOKEN."
    )
    port: int = Field(8000, ge=0, le=65535, description="Port to bind.")
    token: str | None = Field(None, description="Bearer token clients must send (required off loopback).")
    workers: int = Field(
        1,
        ge=1,
        le=64,
        description="uvicorn worker processes; the per-host settings (admission, pool, sandboxes, their queues) "
        "are split among them.",
    )
    log_level: str = Field("info", description="uvicorn / logging level.")

    plugins: str = Field(
        "",
        description="Comma-separated modules to import at start-up (and in pool workers) to register verifiers.",
    )

    # Request limits and admission control
    max_body_bytes: int = Field(32 * 1024 * 1024, ge=1024, description="Larger request bodies get 413.")
    max_batch_items: int = Field(10_000, ge=1, description="Items allowed in one /v1/score/batch call.")
    max_concurrency: int = Field(
        64,
        ge=1,
        description="Requests of the pool admission lane running at once per host: pool verifiers (code, "
        "math, ...), sandboxes, async judges, sessions, graders, task generation.",
    )
    max_queue: int = Field(
        256, ge=0, description="Pool-lane requests allowed to wait, per host; beyond this, 429."
    )
    max_inline_concurrency: int = Field(
        256,
        ge=1,
        description="Requests of the inline admission lane running at once per host: items an inline verifier "
        "scores on the event loop (text.match within inline_max_chars), which never wait behind the pool lane "
        "(PROCTOR_MAX_CONCURRENCY).",
    )
    max_inline_queue: int = Field(
        1024, ge=0, description="Inline-lane requests allowed to wait, per host; beyond this, 429."
    )
    retry_after_s: int = Field(1, ge=1, description="Retry-After seconds sent with 429.")

    # Killable worker pool for CPU-bound verifiers
    pool_workers: int = Field(
        default_factory=_default_pool_workers, ge=1, description="Worker processes, per host."
    )
    pool_memory_mb: int = Field(2048, ge=64, description="Address-space cap of each worker process.")
    pool_queue: int = Field(4096, ge=1, description="Items allowed to wait for a pool worker, per host.")
    inline_max_chars: int = Field(
        100_000,
        ge=0,
        description="Inline verifiers score larger items (response, reference and options together) in the pool, "
        "under a deadline; requests that large are also validated off the event loop.",
    )
    pool_max_tasks: int = Field(10_000, ge=1, description="Items a worker scores before it is recycled.")

    # Sandboxes for untrusted programs
    sandbox_backend: Literal["nsjail", "docker", "local"] = Field(
        "nsjail",
        description="Where untrusted programs run; local does not isolate and is for development only.",
    )
    sandbox_workers: int = Field(
        default_factory=_default_pool_workers, ge=1, description="Sandbox jobs running at once, per host."
    )
    sandbox_queue: int = Field(
        64,
        ge=0,
        description="Sandbox jobs allowed to wait, per host; beyond this, 429 (verl sends up to 64 at once).",
    )
    run_code_queue_wait_s: float = Field(
        8.0,
        ge=0,
        le=60,
        description="/run_code only: the longest a job may wait before it starts (in line for a place, then in "
        "the sandbox queue); a job not started by then never runs and is answered 504 with Retry-After (verl "
        "retries 504 and nothing else); below verl's 10 s API time-out; 0: 504 at once when the pool is full.",
    )

    # Operator maxima: any limit a request asks for above these is a 422 naming the field.
    sandbox_max_memory_mb: int = Field(
        default_factory=_half_host_memory_mb,
        ge=32,
        description="Largest memory limit one sandboxed program may ask for (default: half the host's memory).",
    )
    sandbox_max_cpu_s: float = Field(
        60.0, gt=0, description="Largest CPU-time limit one sandboxed program may ask for, in seconds."
    )
    sandbox_max_files: int = Field(
        10_000,
        ge=16,
        description="Files and folders one sandboxed job may create; past this the program's verdict is "
        "output_limit (nsjail and docker; the local backend cannot bound it).",
    )
    sandbox_max_disk_mb: int = Field(
        256,
        ge=1,
        description="Bytes (MiB) of files one sandboxed job may write; past this the program's verdict is "
        "output_limit (nsjail and docker; the local backend cannot bound it).",
    )

    # SQL verifier
    sql_databases: str = Field(
        "",
        description="Folder of SQLite databases in Spider layout (<dir>/<db_id>/<db_id>.sqlite); empty means the "
        "bundled datasets/sql folder. Proctor never writes to it.",
    )
    sql_postgres: str = Field(
        "",
        description='PostgreSQL connections the `sql` verifier may name, as JSON {"dsn_name": "postgresql://..."}; '
        "use a read-only role.",
    )
    sql_cache_dir: str = Field(
        "",
        description="Where gold results and perturbed database copies are kept; empty means a folder under the "
        "user's cache directory (never the database folder).",
    )

    # LLM judge (judge.* verifiers, score_model / label_model graders)
    judge_base_url: str = Field(
        "", description="OpenAI-compatible endpoint of the judge model, e.g. http://127.0.0.1:8001/v1."
    )
    judge_model: str = Field("", description="Judge model name sent with each request.")
    judge_api_key: str | None = Field(
        None, description="Bearer key for the judge endpoint, when it needs one."
    )
    judge_allowed_urls: str = Field(
        "",
        description="Comma-separated base URLs a request may name as its judge `base_url` (exact match after "
        "normalising a trailing slash); empty: requests may not choose a judge URL. A configured "
        "PROCTOR_JUDGE_API_KEY is sent only to PROCTOR_JUDGE_BASE_URL, never to a request's URL.",
    )
    judge_concurrency: int = Field(16, ge=1, description="Judge calls in flight at once per process.")
    judge_timeout_s: float = Field(60.0, gt=0, description="Time limit of one judge call.")
    judge_retry_budget_s: float = Field(
        60.0,
        ge=0,
        description="Total time retries of one judge call (429, 5xx, dropped connections) may take.",
    )

    # Embeddings (text.similarity metric=cosine, text_similarity graders)
    embeddings_base_url: str = Field(
        "",
        description="OpenAI-compatible embeddings endpoint, e.g. http://127.0.0.1:8002/v1; empty: the local "
        "all-MiniLM-L6-v2 model (extra `proctor[train]`).",
    )
    embeddings_model: str = Field("", description="Embeddings model name sent with each request.")
    embeddings_api_key: str | None = Field(None, description="Bearer key for the embeddings endpoint.")
    embeddings_allowed_urls: str = Field(
        "",
        description="Comma-separated base URLs a request may name as its embeddings `base_url`; empty: requests "
        "may not choose one. PROCTOR_EMBEDDINGS_API_KEY is sent only to PROCTOR_EMBEDDINGS_BASE_URL.",
    )

    # Reading responses
    end_tokens: str | None = Field(
        None,
        description="End-of-turn tokens cut from every response before a verifier reads it (not /run_code), "
        "comma-separated or a JSON list; unset: the built-in list; empty: cut nothing. A request's "
        "options.end_tokens overrides it.",
    )

    # Result cache
    cache_size: int = Field(
        100_000, ge=0, description="Entries in the in-process LRU result cache; 0 disables it."
    )

    # Scale-out: what replicas share (each part is used only when configured)
    redis_url: str = Field(
        "",
        description="Redis that replicas share (redis://host:6379/0): the result cache, single-flight of expensive "
        "items, tool sessions and per-token rate limits; empty: each process keeps its own.",
    )
    redis_cache_ttl_s: int = Field(
        7 * 24 * 3600, ge=1, description="How long a score stays in the shared Redis cache, in seconds."
    )
    redis_cache_url: str = Field(
        "",
        description="A separate Redis (or database index) for the shared result cache only, e.g. an allkeys-lru "
        "instance with maxmemory, while sessions and locks stay on PROCTOR_REDIS_URL's non-evicting one; empty: "
        "PROCTOR_REDIS_URL. Needs PROCTOR_REDIS_URL.",
    )
    cache_secret: str | None = Field(
        None,
        description="Secret the replicas share to sign (HMAC-SHA256) the scores they put in the shared cache; "
        "entries that fail the check are dropped. Unset: derived from PROCTOR_TOKEN; with neither, entries are "
        "unsigned and anyone who can write to Redis can plant a score (warned at start-up).",
    )
    advertise_url: str = Field(
        "",
        description="Where this replica answers, as other replicas and clients can reach it "
        "(http://10.0.0.5:8000): a session step for a session whose state (an interpreter) this replica holds, "
        "sent to another replica, is answered 421 naming it. Needs PROCTOR_REDIS_URL; empty: not advertised.",
    )
    rate_limit_per_s: float = Field(
        0.0,
        ge=0,
        description="Scoring requests per second one token (or one client address, without auth) may send, "
        "shared across replicas through Redis; 0: no limit. Past it: 429 with Retry-After.",
    )
    rate_limit_burst: int = Field(
        100, ge=1, description="Requests a token may send at once before rate_limit_per_s applies."
    )
    data_dir: str = Field(
        "",
        description="Where the service keeps its files (the default SQLite database for jobs and the audit "
        "log, job uploads); empty: a folder under the user's data directory (~/.local/share/proctor).",
    )
    database_url: str = Field(
        "",
        description="SQLAlchemy URL of the database for batch jobs and the audit log "
        "(postgresql+psycopg://user:pass@host/db for replicas); empty: a SQLite file in data_dir.",
    )
    audit_log: bool = Field(
        False, description="Record every score (with its verifier version) in the database."
    )
    jobs_input_dir: str = Field(
        "",
        description="Folder whose files POST /v1/jobs may name as input_path; empty: jobs take uploads only, so "
        "no caller can make the service read its other files.",
    )
    jobs_max_rows: int = Field(
        1_000_000,
        ge=1,
        description="Rows one batch job may hold (an upload or input_path file); more: 413 naming this setting.",
    )
    jobs_max_bytes: int = Field(
        1 << 30,
        ge=1024,
        description="Bytes one batch job's rows may take once stored (each row's JSON text, counted as it is "
        "written); more: 413 naming this setting, and nothing of the job is kept. Bounds what a small "
        "compressed Parquet file may expand to.",
    )
    jobs_max_active: int = Field(
        8,
        ge=1,
        description="Batch jobs one caller (bearer token) may have not yet finished (being stored, queued or "
        "running), counted in the database across replicas; one more: 429 naming this setting. With auth "
        "off, jobs have no owner and this caps all of them together.",
    )
    jobs_max_stored_bytes: int = Field(
        8 << 30,
        ge=1024,
        description="Bytes of rows (as for PROCTOR_JOBS_MAX_BYTES) that one caller's kept jobs may hold in all, "
        "finished ones included until PROCTOR_JOBS_RETENTION_S deletes them, counted in the database across "
        "replicas; a job that would pass it: 413 naming this setting, and nothing of it is kept. With auth "
        "off, a cap on all jobs together.",
    )
    jobs_retention_s: float = Field(
        7 * 24 * 3600.0,
        ge=0,
        description="How long a finished (done, failed or cancelled) job and its rows and results are kept, "
        "in seconds; a sweep on every replica deletes older ones. 0: keep them forever.",
    )

    # Compatibility routes (OpenRLHF, slime)
    default_verifier: str = Field(
        "text.match", description="Verifier for plain-string labels on compat routes."
    )
    on_failure: FailurePolicy = Field(
        "raise",
        description="Compat routes: what a machinery failure returns (raise | none | value). The default, raise, "
        "answers 503 so the trainer retries and then stops loudly, never training on a failure as a reward.",
    )
    failure_value: float = Field(
        0.0,
        allow_inf_nan=False,  # NaN or inf would reach slime and OpenRLHF as a reward JSON cannot carry
        description="The reward a failure returns under on_failure=value (a finite number).",
    )

    @field_validator("end_tokens")
    @classmethod
    def _end_tokens_parse(cls, value: str | None) -> str | None:
        parse_end_tokens(value)  # a bad list fails at start-up, not at the first request
        return value

    @property
    def end_token_list(self) -> tuple[str, ...]:
        """`end_tokens` as a tuple: the built-in list when unset, empty when set to nothing."""
        return parse_end_tokens(self.end_tokens)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read once from the environment."""
    return Settings()


def within_max_cpu_s(value: float, unit: str = "CPU seconds") -> float:
    """`value` (an option's time limit, for its validator) if it is within the operator's
    PROCTOR_SANDBOX_MAX_CPU_S; else a ValueError saying the maximum in `unit`."""
    most = get_settings().sandbox_max_cpu_s
    if value > most:
        raise ValueError(f"at most {most:g} {unit} (the operator's PROCTOR_SANDBOX_MAX_CPU_S)")
    return value


def within_max_memory_mb(value: int) -> int:
    """`value` (an option's memory limit, for its validator) if it is within the operator's
    PROCTOR_SANDBOX_MAX_MEMORY_MB; else a ValueError saying the maximum."""
    most = get_settings().sandbox_max_memory_mb
    if value > most:
        raise ValueError(f"at most {most} MB (the operator's PROCTOR_SANDBOX_MAX_MEMORY_MB)")
    return value
