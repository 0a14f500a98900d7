"""`proctor rescore --engine ray`: the rescore job's chunks scored as Ray tasks on a cluster.

The driver (this process) does everything the local engine does (reading, resume, summary, writing in input
order with fsync, pass@k) through `proctor.rescore._run`; only `score_batch` differs: each chunk becomes one
Ray task that scores it with an Engine living in the Ray worker, and returns the Scores. Tasks never write
output, so a task that Ray retries after its worker died cannot duplicate a row: the driver writes each
chunk once, when its (one) result arrives.

Ray is an optional extra: this module imports it only when a RayScorer is made.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import socket
import sys
import tempfile
import threading
from collections.abc import Iterable, Iterator
from typing import Any
from urllib.parse import urlsplit

from proctor.contract import ItemError, Score
from proctor.rescore import RescoreConfig, RescoreError

INSTALL_HINT = "pip install 'proctor[ray]'"
# How long the start-up probe task may wait for a worker: a cluster with no free CPU (or a worker that
# cannot import proctor) must fail the run, not hang it.
PROBE_TIMEOUT_S = 300.0
# A system failure (the worker process or its node died) is retried this many times; an exception raised
# by the task itself is a bug and is not.
TASK_RETRIES = 3
MAX_IN_FLIGHT = 256

# The Engine of this Ray worker process, made by the first task that lands here and reused by later ones (Ray
# reuses worker processes), so its worker pool and result cache are paid for once per worker.
_worker_engine: Any = None
_worker_engine_lock = threading.Lock()


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RescoreError(f"--engine ray needs Ray, which is not installed: {INSTALL_HINT}", 2) from None
    return ray


def _engine_here(pool_workers: int) -> Any:
    """This worker's Engine, sized to the CPUs a task reserves."""
    global _worker_engine
    with _worker_engine_lock:
        if _worker_engine is None:
            from proctor.engine import Engine
            from proctor.settings import Settings

            _worker_engine = Engine(Settings(pool_workers=pool_workers))
        return _worker_engine


def score_shard(items: list[dict[str, Any]], pool_workers: int) -> list[Score | ItemError]:
    """The body of one Ray task: score a chunk of requests in order, in the worker it runs in."""
    return _engine_here(pool_workers).score_batch(items)


def probe(verifier: str | None) -> dict[str, Any]:
    """The body of the start-up task: what this worker runs, to compare with the driver."""
    import proctor

    return {"proctor": proctor.__version__, "verifier": _qualified(verifier), "pid": os.getpid()}


def _qualified(verifier: str | None) -> str | None:
    from proctor.contract import RequestError
    from proctor.registry import get_verifier

    if not verifier:
        return None
    try:
        return get_verifier(verifier).qualified_name
    except RequestError:
        return None


# What the tasks get of this process's environment. Ray stores a job's runtime_env in its control store, and
# the dashboard and the state API (`ray list jobs --detail`, `ray list tasks --detail`) show it to anyone who
# can reach them (a real cluster's dashboard has no authentication by default), so only settings that change
# how a row is scored go there, never a credential.
SCORING_SETTINGS = frozenset(
    "PROCTOR_" + name
    for name in (
        "PLUGINS",
        "LOG_LEVEL",
        "POOL_MEMORY_MB",
        "POOL_QUEUE",
        "POOL_MAX_TASKS",
        "INLINE_MAX_CHARS",
        "CACHE_SIZE",
        "END_TOKENS",
        "DEFAULT_VERIFIER",
        "SANDBOX_BACKEND",
        "SANDBOX_WORKERS",
        "SANDBOX_QUEUE",
        "SANDBOX_MAX_MEMORY_MB",
        "SANDBOX_MAX_CPU_S",
        "SANDBOX_MAX_FILES",
        "SANDBOX_MAX_DISK_MB",
        "SANDBOX_IMAGE",
        "SQL_DATABASES",
        "SQL_CACHE_DIR",
        "JUDGE_BASE_URL",
        "JUDGE_MODEL",
        "JUDGE_ALLOWED_URLS",
        "JUDGE_CONCURRENCY",
        "JUDGE_TIMEOUT_S",
        "JUDGE_RETRY_BUDGET_S",
        "EMBEDDINGS_BASE_URL",
        "EMBEDDINGS_MODEL",
        "EMBEDDINGS_ALLOWED_URLS",
    )
)
"""The PROCTOR_* variables sent to the tasks as they are: scoring settings without secrets in them."""

NEVER_SENT = frozenset(
    "PROCTOR_" + name
    for name in ("TOKEN", "DATABASE_URL", "REDIS_URL", "REDIS_CACHE_URL", "CACHE_SECRET", "AUDIT_LOG")
)
"""Variables --forward-env refuses: the service's token and shared state, which scoring never needs (a task
given the Redis URL would even join the production Redis as a replica)."""

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def proctor_environment(forward: Iterable[str] = ()) -> dict[str, str]:
    """The scoring settings of this process (SCORING_SETTINGS, those set), plus each variable named in
    `forward` (`--forward-env`, for the keys a judge needs); RescoreError for a name that is unset, malformed
    or in NEVER_SENT."""
    forward = list(forward)
    env = {key: value for key, value in os.environ.items() if key in SCORING_SETTINGS}
    for key, value in env.items():
        if key not in forward and _holds_password(value):
            raise RescoreError(
                f"{key} holds a URL with a password, which Ray would show in its dashboard: set it on the "
                f"cluster's nodes instead, or send it knowingly with --forward-env {key}",
                2,
            )
    for name in forward:
        if not _NAME.fullmatch(name):
            raise RescoreError(f"--forward-env {name!r}: not an environment variable name", 2)
        if name in NEVER_SENT:
            raise RescoreError(f"--forward-env {name}: never sent to Ray tasks (scoring does not use it)", 2)
        if name not in os.environ:
            raise RescoreError(f"--forward-env {name}: it is not set here", 2)
        env[name] = os.environ[name]
    return env


def _holds_password(value: str) -> bool:
    """Whether a setting (one URL, or a comma-separated list of them) carries user:password@ credentials."""
    for piece in value.split(","):
        try:
            if urlsplit(piece.strip()).password:
                return True
        except ValueError:  # not a URL at all: nothing to leak through it
            continue
    return False


def check_reachable(address: str, timeout: float = 10.0) -> None:
    """Fail in seconds unless something that answers like a Ray head (gRPC) listens at HOST:PORT or ray://HOST:PORT.

    Ray itself retries an address where nothing (or something else) answers for minutes, printing warnings;
    a typo in --address should cost seconds and one line. Addresses Ray resolves itself ("auto") are left to it.
    """
    parts = urlsplit(address if "://" in address else f"tcp://{address}")
    try:
        host, port = parts.hostname, parts.port
    except ValueError:
        raise RescoreError(f"--address {address!r}: the port is not a number", 2) from None
    if not host or port is None:
        return
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except OSError as exc:
        reason = exc.strerror or f"no connection within {timeout:.0f} s"
        raise RescoreError(f"cannot reach the Ray cluster at {address}: {reason}", 1) from None
    with sock:
        if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
            return  # a TLS head answers nothing to plain HTTP/2; Ray's own handshake will tell
        try:
            sock.sendall(_HTTP2_PREFACE)
            head = _read_exactly(sock, 9)
        except OSError:  # reset, or silence until the timeout
            head = b""
    if len(head) < 9 or head[3] != _SETTINGS_FRAME:
        raise RescoreError(
            f"cannot reach the Ray cluster at {address}: what listens there is not a Ray head (no gRPC answer)",
            1,
        )


# An HTTP/2 client's connection preface and an empty SETTINGS frame: a gRPC server (Ray's GCS, Ray Client)
# answers with its own SETTINGS frame first (RFC 9113, 3.4).
_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
_SETTINGS_FRAME = 4


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    return data


@contextlib.contextmanager
def _stderr_into(sink: Any) -> Iterator[None]:
    """Send what is written to file descriptor 2 (Ray's C++ core logs there) into `sink` for a while."""
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(sink.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def _auth_hint(log: str) -> str:
    if "InvalidAuthToken" in log or "Authentication" in log:
        return (
            " (the cluster refused this machine's token: set RAY_AUTH_MODE=token and the cluster's token in "
            "RAY_AUTH_TOKEN or ~/.ray/auth_token)"
        )
    return ""


def ray_scorer(config: RescoreConfig, forward_env: Iterable[str] = ()) -> RayScorer:
    """The scorer of `proctor rescore --engine ray`: Ray tasks on the cluster at --address (a local one when
    omitted), with the variables named in `forward_env` sent to them too; RescoreError for flags that
    contradict it."""
    if config.server:
        raise RescoreError("--server and --engine ray exclude each other: the Ray tasks score in-process", 2)
    return RayScorer(config.address, config.workers, forward_env)


class RayScorer:
    """Scores chunks as Ray tasks on the cluster at `address`, or on a local Ray instance started for the run."""

    def __init__(self, address: str | None, workers: int | None, forward_env: Iterable[str] = ()):
        env_vars = proctor_environment(forward_env)  # a bad --forward-env fails before Ray starts
        if address is not None and workers is not None:
            raise RescoreError(
                "--workers sets the CPUs of the local Ray instance; with --address the cluster's resources "
                "decide how many tasks run at once",
                2,
            )
        if address is not None and not address.strip():
            raise RescoreError("--address must not be empty", 2)
        self.ray = ray = _import_ray()
        self.address = address
        self._refs: set[Any] = set()
        self._refs_lock = threading.Lock()
        options: dict[str, Any] = {
            "include_dashboard": False,
            "log_to_driver": False,  # a verifier's prints must not land in the summary on stdout
            "logging_level": logging.ERROR,
            "runtime_env": {"env_vars": env_vars},
        }
        if address is None:
            try:
                ray.init(address="local", num_cpus=workers or os.cpu_count() or 1, **options)
            except Exception as exc:  # the run cannot go on without its instance
                raise RescoreError(f"cannot start a local Ray instance: {_describe(exc)}", 1) from None
        else:
            check_reachable(address)
            # Joining starts no process, so Ray's connection warnings can be held back (they would break the
            # one-line error) and read for the reason when joining fails.
            with tempfile.TemporaryFile("w+") as log:
                try:
                    with _stderr_into(log):
                        ray.init(address=address, **options)
                except Exception as exc:
                    log.seek(0)
                    hint = _auth_hint(log.read() + str(exc))
                    raise RescoreError(
                        f"cannot join the Ray cluster at {address}: {_describe(exc)}{hint}", 1
                    ) from None
        cpus = int(ray.cluster_resources().get("CPU", 0))
        # Enough chunks in flight to keep every CPU busy while the driver writes the oldest one.
        self.concurrency = max(2, min(2 * cpus, MAX_IN_FLIGHT))
        self._score = ray.remote(num_cpus=1, max_retries=TASK_RETRIES, retry_exceptions=False)(score_shard)
        self._probe = ray.remote(num_cpus=1, max_retries=TASK_RETRIES)(probe)

    def check(self, verifier: str | None) -> None:
        """Fail unless a worker of the cluster runs this proctor version and knows the default verifier alike."""
        import proctor
        from proctor.contract import RequestError
        from proctor.registry import get_verifier

        here = None
        if verifier:
            try:
                here = get_verifier(verifier).qualified_name
            except RequestError as exc:  # the local engine's own message and exit status
                raise RescoreError(exc.message, 2) from None
        try:
            there = self.ray.get(self._probe.remote(verifier), timeout=PROBE_TIMEOUT_S)
        except self.ray.exceptions.GetTimeoutError:
            raise RescoreError(
                f"no Ray worker ran the start-up task within {PROBE_TIMEOUT_S:.0f} s; does the cluster have a "
                "free CPU?",
                1,
            ) from None
        except Exception as exc:
            raise RescoreError(f"the Ray workers cannot score: {_describe(exc)}", 1) from None
        if there["proctor"] != proctor.__version__:
            raise RescoreError(
                f"the Ray workers run proctor {there['proctor']}, this machine {proctor.__version__}; "
                "install the same version on every node",
                1,
            )
        if there["verifier"] != here:
            raise RescoreError(
                f"the Ray workers have verifier {there['verifier'] or 'none'} for {verifier!r}, this machine "
                f"{here}; give every node the same plugins (PROCTOR_PLUGINS) and versions",
                1,
            )

    def score_batch(self, items: list[dict[str, Any]]) -> list[Score | ItemError]:
        """Score one chunk as one Ray task and wait for it (the driver runs several of these at once)."""
        ray = self.ray
        ref = self._score.remote(items, 1)
        with self._refs_lock:
            self._refs.add(ref)
        try:
            return ray.get(ref)
        except ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None)  # the task's own exception, without the remote traceback
            raise RescoreError(f"a Ray task failed: {_describe(cause or exc)}", 1) from None
        except Exception as exc:  # the worker died more often than it is retried, the cluster went away, ...
            raise RescoreError(f"a Ray task failed: {_describe(exc)}", 1) from None
        finally:
            with self._refs_lock:
                self._refs.discard(ref)

    def close(self) -> None:
        """Cancel tasks still running (an interrupted run) and leave the cluster (stopping a local instance)."""
        with self._refs_lock:
            refs = list(self._refs)
        for ref in refs:
            with contextlib.suppress(Exception):  # already finished or gone: nothing to cancel
                self.ray.cancel(ref, force=True)
        self.ray.shutdown()


def _describe(exc: BaseException) -> str:
    # A remote failure's text is a traceback: its last line names the error.
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[-1]}" if lines else type(exc).__name__
