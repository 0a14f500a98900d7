"""The SQLite worker's limits: CPU time (not wall-clock) decides a query's time_limit, a wall-clock backstop
on an oversubscribed machine is status timeout (never a reward of 0), the jail is built by the nsjail backend
and runs in the worker's own cgroup (memory, pids, CPU accounting), and time limits above the operator's
maximum are 422s naming the field."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from proctor.contract import RequestError, Status
from proctor.registry import get_verifier
from proctor.settings import get_settings
from proctor.verifiers.sql import workers
from proctor.verifiers.sql.databases import content_hash, database_path, staged
from proctor.verifiers.sql.workers import Mounts, SqliteWorkers
from tests.sql_helpers import library_databases


def counting(n: int) -> str:
    """A query whose CPU time grows with n (about 0.2 microseconds a row here) and whose answer is n."""
    return f"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < {n}) SELECT count(*) FROM c"


@pytest.fixture
def databases(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    yield from library_databases(tmp_path, monkeypatch)


@pytest.fixture
def jailed(databases: Path) -> Iterator[tuple[SqliteWorkers, Mounts, Path]]:
    """A private pool of nsjail workers and the staged library database."""
    path = database_path("library")
    assert path is not None
    target = staged(path, f"{content_hash(path)}-0.sqlite")
    pool = SqliteWorkers()
    try:
        yield pool, Mounts((str(target.parent),)), target
    finally:
        pool.close()


def ask(
    pool: SqliteWorkers, mounts: Mounts, target: Path, sql: str, timeout_s: float, **extra: float
) -> dict:
    request = {"sql": sql, "timeout_s": timeout_s, "max_rows": 10, "max_bytes": 1 << 20, **extra}
    return pool.run(mounts, "nsjail", target, request)


def test_the_worker_runs_in_its_own_cgroup_in_a_jail_the_nsjail_backend_built(jailed):
    pool, mounts, target = jailed
    argv = workers.nsjail_argv("/bin/nsjail", mounts)
    assert argv[argv.index("--") + 1 :] == [workers.JAIL_PYTHON, "-I", "-S", workers.JAIL_WORKER]
    assert f"{mounts.folders[0]}:/mnt/0" in argv and "--disable_proc" in argv
    assert argv[argv.index("--seccomp_string") + 1].startswith(workers.NO_FORK)
    assert argv[argv.index("--rlimit_fsize") + 1] == "0"
    assert ask(pool, mounts, target, "SELECT count(*) FROM book", 2.0)["rows"] == [[120]]
    worker = pool.idle[0]
    group = worker.group
    assert group is not None, "cgroups are usable here (the nsjail sandbox tests need them too)"
    inside = {Path(f"/proc/{pid}/cmdline").read_text().split("\0")[0] for pid in group.pids()}
    assert workers.JAIL_PYTHON in inside and any(name.endswith("nsjail") for name in inside)
    memory = group.dirs.get("memory", group.dirs.get("unified"))
    limit_file = memory / ("memory.limit_in_bytes" if group.version == 1 else "memory.max")
    assert int(limit_file.read_text()) == workers.CGROUP_MEMORY_MB << 20
    pids = group.dirs.get("pids", group.dirs.get("unified"))
    assert int((pids / "pids.max").read_text()) == workers.CGROUP_PROCESSES
    cpu_before = worker.cpu_s()
    reply = ask(pool, mounts, target, counting(1_000_000), 5.0)
    assert reply["rows"] == [[1_000_000]] and worker.cpu_s() - cpu_before >= reply["cpu_ms"] / 1000 * 0.9
    pool.close()
    assert not any(directory.exists() for directory in group.dirs.values())  # removed with the worker


@pytest.mark.slow
def test_an_oversubscribed_cpu_is_not_the_querys_time_limit(jailed):
    # The worker shares one CPU with four busy loops: a query of about 0.3 CPU s takes well over its 1 s
    # limit in wall-clock time. Before, the progress handler's deadline was wall-clock: a
    # time_limit and a reward of 0 for a query that is fast enough.
    pool, mounts, target = jailed
    unloaded = ask(pool, mounts, target, counting(100_000), 5.0)
    n = int(100_000 * 300 / max(unloaded["cpu_ms"], 1.0))
    cpu = sorted(os.sched_getaffinity(0))[0]
    # each in its own session, as the jailed worker is: with autogroup scheduling, sessions share a CPU fairly
    hogs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True) for _ in range(4)
    ]
    try:
        for pid in [*(hog.pid for hog in hogs), *pool.idle[0].group.pids()]:
            os.sched_setaffinity(pid, {cpu})
        time.sleep(0.3)  # the busy loops are running
        started = time.monotonic()
        # a generous backstop so that other work on this machine cannot make the test flaky
        reply = ask(pool, mounts, target, counting(n), 1.0, wall_s=60.0)
        elapsed = time.monotonic() - started
        assert reply.get("ok"), reply
        assert reply["cpu_ms"] < 1000 < elapsed * 1000, (reply["cpu_ms"], elapsed)
        slow = ask(pool, mounts, target, counting(n), 0.1, wall_s=60.0)  # CPU time past its limit still is
        assert (slow["ok"], slow["error"]) == (False, "time_limit"), slow
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def test_the_wall_clock_backstop_is_a_timeout_status_never_a_zero(
    databases: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(workers, "WALL_FACTOR", 0.0)
    monkeypatch.setattr(workers, "WALL_EXTRA_S", 0.05)  # every query of more than 50 ms passes the backstop
    spec = get_verifier("sql")
    reference = spec.parse_reference({"db_id": "library", "gold": "SELECT count(*) FROM book"})
    verdict = spec.score(
        f"```sql\n{counting(3_000_000)}\n```", reference, spec.parse_options({"timeout_s": 5})
    )
    assert (verdict.status, verdict.reason, verdict.correct) == (Status.timeout, "wall_clock_backstop", None)
    assert "oversubscribed" in verdict.details["error"]


@pytest.mark.parametrize("field", ["timeout_s", "gold_timeout_s"])
def test_time_limits_above_the_operators_maximum_are_422(monkeypatch: pytest.MonkeyPatch, field: str):
    monkeypatch.setenv("PROCTOR_SANDBOX_MAX_CPU_S", "5")
    get_settings.cache_clear()
    try:
        spec = get_verifier("sql")
        with pytest.raises(RequestError) as caught:
            spec.parse_options({field: 6})
        assert (caught.value.status, caught.value.field) == (422, f"options.{field}")
        assert spec.parse_options({field: 5}).model_dump()[field] == 5
    finally:
        get_settings.cache_clear()
