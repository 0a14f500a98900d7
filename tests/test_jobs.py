"""Batch jobs through the real service (`python -m proctor.api` under uvicorn) on real SQLite and PostgreSQL:
uploads (JSONL, Parquet) and input_path jobs give what `proctor rescore` gives; input_path escapes are refused;
cancel; a service killed with SIGKILL mid-job and started again resumes; of two services on one PostgreSQL,
killing the one running the job leaves the other to finish it; a PostgreSQL restart mid-job loses nothing;
the audit log records what the service answered and never fails a score. The runner's lease and fencing are
also tested in-process.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine, func, insert, select, text

from proctor import io
from proctor.db.connect import create_db_engine, migrate
from proctor.db.models import AuditScore, Job, JobResult
from proctor.environments.tools.sessions import owner_of
from proctor.jobs import JobRunner, JobSpec, _LeaseLost, create_job, job_view, new_owner_id, owner_is_dead
from proctor.rescore import EngineScorer, RescoreConfig, rescore
from tests.conftest import REPO_ROOT, ServerProcess, free_port, server_env
from tests.test_db_migrations import PostgresServer

TOKEN = "jobs-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
JOB_TIMEOUT_S = 240.0


# -- helpers --------------------------------------------------------------------------------------------


def launch(tmp_path: Path, **settings: Any) -> ServerProcess:
    """Start a service (test plugins loaded, four pool workers, files under tmp_path) and wait until it answers."""
    settings.setdefault("PROCTOR_DATA_DIR", str(tmp_path / "data"))  # never the user's data directory
    port = free_port()
    env = server_env(port, PROCTOR_POOL_WORKERS=4, **settings)
    server = ServerProcess(env, tmp_path / f"server-{port}.log")
    try:
        server.wait_ready(timeout_s=90)
    except BaseException:
        server.stop()
        raise
    return server


def kill9(server: ServerProcess) -> None:
    """SIGKILL the service process (no shutdown code runs) and reap it."""
    server.process.kill()
    server.process.wait(timeout=30)
    server.stop()


def mixed_rows() -> list[dict[str, Any]]:
    """Rows of several verifiers, a verifier failure, and rows that cannot be scored at all."""
    return [
        {"id": 0, "verifier": "text.match", "response": "Paris", "reference": "Paris"},
        {"id": 1, "verifier": "text.match", "response": "Lyon", "reference": "Paris"},
        {"id": 2, "verifier": "math", "response": "so \\boxed{\\frac{1}{2}}", "reference": "0.5"},
        {"id": 3, "verifier": "math", "response": "\\boxed{3}", "reference": "2"},
        {"id": 4, "response": "no verifier field", "reference": "x"},
        {"id": 5, "verifier": "test.misbehave", "response": "raise", "reference": "a"},
        {"id": 6, "verifier": "test.misbehave", "response": "same", "reference": "same"},
        {"id": 7, "verifier": "text.match", "reference": "no response"},
        {"id": 8, "verifier": "no.such.verifier", "response": "a", "reference": "a"},
        {"id": 9, "verifier": "math", "answer": "\\boxed{7}", "reference": "7"},
    ]


def slow_rows(fast: int = 3000, sleeps: int = 4) -> list[dict[str, Any]]:
    """Quick pool rows (exact matches in test.misbehave), then a few that hit the 1 s pool deadline, so the job
    is still running a while after its first rows are written, on any machine."""
    rows: list[dict[str, Any]] = [{"id": i, "response": f"v{i}", "reference": f"v{i}"} for i in range(fast)]
    rows += [{"id": fast + i, "response": "sleep", "reference": f"r{i}"} for i in range(sleeps)]
    return rows


def expected_slow(row: dict[str, Any]) -> tuple[str, float]:
    return ("timeout", 0.0) if row["response"] == "sleep" else ("ok", 1.0)


def comparable(row: dict[str, Any]) -> dict[str, Any]:
    """A result row without what differs between two runs of the same item (time taken, cache hit, and the list
    of known verifiers a 404 names, which depends on the plugins each process has loaded)."""
    score = {k: v for k, v in row["score"].items() if k not in ("elapsed_ms", "cached")}
    if "error" in score:
        message = score["error"]["message"].split("; known verifiers:")[0]
        score = {**score, "error": {**score["error"], "message": message}}
    return {**row, "score": score}


def upload(client: httpx.Client, path: Path, **fields: str) -> httpx.Response:
    with path.open("rb") as handle:
        return client.post("/v1/jobs", files={"file": (path.name, handle)}, data=fields)


def wait_job(
    client: httpx.Client,
    job_id: str,
    until: Callable[[dict[str, Any]], bool],
    timeout_s: float = JOB_TIMEOUT_S,
) -> dict[str, Any]:
    """Poll the job until `until(status)`; a 503 or a refused connection (a restart) is polled through."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            answer = client.get(f"/v1/jobs/{job_id}")
        except httpx.TransportError as exc:
            last = exc
        else:
            if answer.status_code == 200:
                last = answer.json()
                if until(last):
                    return last
            elif answer.status_code != 503:
                pytest.fail(f"GET /v1/jobs/{job_id}: {answer.status_code} {answer.text}")
        time.sleep(0.2)
    pytest.fail(f"job {job_id} did not get there in {timeout_s:.0f} s; last: {last}")


def finished(view: dict[str, Any]) -> bool:
    return view["status"] in ("done", "failed", "cancelled")


def result_rows(client: httpx.Client, job_id: str) -> list[dict[str, Any]]:
    answer = client.get(f"/v1/jobs/{job_id}/results")
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("application/x-ndjson")
    return [json.loads(line) for line in answer.text.splitlines()]


def stored_results(db: Engine, job_id: str) -> tuple[int, int]:
    """(rows, distinct row indices) stored for a job."""
    with db.connect() as connection:
        return tuple(
            connection.execute(
                select(func.count(), func.count(func.distinct(JobResult.row_index))).where(
                    JobResult.job_id == job_id
                )
            ).one()
        )


def rescore_rows(tmp_path: Path, path: Path, monkeypatch: pytest.MonkeyPatch, **config: Any) -> list[dict]:
    """What `proctor rescore` writes for the same file (in this process, with the same plugins)."""
    monkeypatch.setenv("PROCTOR_PLUGINS", "tests.plugins.slow")
    output = tmp_path / f"rescored-{path.stem}.jsonl"
    rescore(RescoreConfig(input=path, output=output, workers=2, force=True, progress=False, **config))
    return io.read_rows(output)


def scored_by(server_url: str) -> int:
    """Scores this service produced, from its /metrics."""
    text_ = httpx.get(f"{server_url}/metrics", headers=AUTH, timeout=30).text
    return int(sum(float(v) for v in re.findall(r"^proctor_scores_total\{[^}]*\} (\S+)$", text_, re.M)))


# -- one service for the API tests ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A service with auth, the audit log, a data dir and an input dir; its client, URL and database."""
    base = tmp_path_factory.mktemp("jobs-service")
    inputs = base / "inputs"
    inputs.mkdir()
    server = launch(
        base,
        PROCTOR_TOKEN=TOKEN,
        PROCTOR_AUDIT_LOG="true",
        PROCTOR_DATA_DIR=str(base / "data"),
        PROCTOR_JOBS_INPUT_DIR=str(inputs),
    )
    db = create_db_engine(f"sqlite:///{base / 'data' / 'proctor.db'}")
    client = httpx.Client(base_url=server.base_url, headers=AUTH, timeout=60)
    try:
        yield {"client": client, "url": server.base_url, "inputs": inputs, "base": base, "db": db}
    finally:
        client.close()
        db.dispose()
        server.stop()


def test_an_uploaded_jsonl_job_gives_what_rescore_gives(service, tmp_path: Path, monkeypatch):
    client: httpx.Client = service["client"]
    path = tmp_path / "mixed.jsonl"
    io.write_jsonl(path, mixed_rows())
    created = upload(client, path)
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["status"] in ("queued", "running", "done") and body["total"] == 10
    view = wait_job(client, body["job_id"], finished)
    assert view["status"] == "done" and view["done"] == 10
    assert view["counts"] == {"ok": 5, "rejected": 4, "verifier_error": 1}
    got = result_rows(client, body["job_id"])
    assert [comparable(row) for row in got] == [
        comparable(row) for row in rescore_rows(tmp_path, path, monkeypatch)
    ]
    assert got[5]["score"]["status"] == "verifier_error"  # a machinery failure, never reward 0 as a verdict
    assert got[4]["score"]["error"]["field"] == "verifier"


def test_a_parquet_upload_with_a_default_verifier_and_other_fields(service, tmp_path: Path, monkeypatch):
    client: httpx.Client = service["client"]
    rows = [{"q": i, "answer": f"\\boxed{{{i}}}", "gold": str(i if i % 3 else i + 1)} for i in range(12)]
    path = tmp_path / "rows.parquet"
    io.write_rows(path, rows)
    created = upload(client, path, verifier="math", response_field="answer", reference_field="gold")
    assert created.status_code == 201, created.text
    view = wait_job(client, created.json()["job_id"], finished)
    assert view["status"] == "done" and view["counts"] == {"ok": 12}
    got = result_rows(client, view["job_id"])
    expected = rescore_rows(
        tmp_path, path, monkeypatch, verifier="math", response_field="answer", reference_field="gold"
    )
    assert [comparable(row) for row in got] == [comparable(row) for row in expected]
    assert [row["score"]["reward"] for row in got] == [0.0 if i % 3 == 0 else 1.0 for i in range(12)]


def test_input_path_jobs_read_only_inside_the_input_dir(service, tmp_path: Path):
    client: httpx.Client = service["client"]
    inputs: Path = service["inputs"]
    (inputs / "sub").mkdir(exist_ok=True)
    io.write_jsonl(inputs / "sub" / "ok.jsonl", mixed_rows()[:4])
    secret = tmp_path / "secret.jsonl"
    io.write_jsonl(secret, [{"verifier": "text.match", "response": "s", "reference": "s"}])
    (inputs / "link.jsonl").symlink_to(secret)
    (inputs / "outside").symlink_to(tmp_path, target_is_directory=True)

    for accepted in ("sub/ok.jsonl", str(inputs / "sub" / "ok.jsonl"), "sub/../sub/ok.jsonl"):
        created = client.post("/v1/jobs", json={"input_path": accepted})
        assert created.status_code == 201, (accepted, created.text)
        view = wait_job(client, created.json()["job_id"], finished)
        assert view["status"] == "done" and view["total"] == 4

    escapes = [
        "../" + os.path.relpath(secret, inputs),
        str(secret),
        "link.jsonl",
        "outside/secret.jsonl",
        "/etc/passwd",
        ".",
        "sub",
        "sub/missing.jsonl",
        "sub/ok.jsonl\x00.jsonl",
    ]
    for path in escapes:
        refused = client.post("/v1/jobs", json={"input_path": path})
        assert refused.status_code == 422, (path, refused.text)
        assert refused.json()["error"]["field"] == "input_path", (path, refused.text)
    (inputs / "notes.txt").write_text("x")
    assert client.post("/v1/jobs", json={"input_path": "notes.txt"}).json()["error"]["field"] == "input_path"


def test_bad_job_requests_are_clear_4xx_naming_the_field(service, tmp_path: Path):
    client: httpx.Client = service["client"]
    good = tmp_path / "good.jsonl"
    io.write_jsonl(good, mixed_rows()[:2])
    bad_line = tmp_path / "bad.jsonl"
    bad_line.write_text('{"response": "a"}\n{not json\n')
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    wrong_kind = tmp_path / "rows.csv"
    wrong_kind.write_text("a,b\n")

    def error(answer: httpx.Response, status: int) -> dict[str, Any]:
        assert answer.status_code == status, answer.text
        return answer.json()["error"]

    assert error(upload(client, good, verifier="no.such"), 404)["field"] == "verifier"
    found = error(upload(client, bad_line), 422)
    assert found["field"] == "file" and "line 2" in found["message"]
    assert error(upload(client, empty), 422)["field"] == "file"
    assert error(upload(client, wrong_kind), 422)["field"] == "file"
    assert error(upload(client, good, response_field=""), 422)["field"] == "response_field"
    no_file = client.post("/v1/jobs", files={"verifier": (None, "math")})  # multipart, text fields only
    assert error(no_file, 422)["field"] == "file"
    text_file = client.post("/v1/jobs", files={"file": (None, '{"response": "a"}')})  # a text field, no file
    assert error(text_file, 422)["field"] == "file"
    stray = client.post("/v1/jobs", files={"file": ("good.jsonl", good.read_bytes()), "other": (None, "y")})
    assert error(stray, 422)["field"] == "other"
    assert (
        error(client.post("/v1/jobs", content=b"x", headers={"content-type": "text/plain"}), 415)["field"]
        == "Content-Type"
    )
    assert (
        error(client.post("/v1/jobs", json={"input_path": "a.jsonl", "verifer": "x"}), 422)["field"]
        == "verifer"
    )
    assert error(client.post("/v1/jobs", json={}), 422)["field"] == "input_path"
    for route in ("/v1/jobs/0123", "/v1/jobs/0123/results"):
        assert error(client.get(route), 404)["field"] == "job_id"
    assert error(client.delete("/v1/jobs/0123"), 404)["field"] == "job_id"
    # Auth is on: without the token nothing is answered.
    created = upload(client, good).json()
    assert httpx.get(f"{service['url']}/v1/jobs/{created['job_id']}").status_code == 401


def test_cancel_stops_a_job_and_keeps_what_it_scored(service, tmp_path: Path):
    client: httpx.Client = service["client"]
    path = tmp_path / "slow.jsonl"
    rows = slow_rows()
    io.write_jsonl(path, rows)
    job_id = upload(client, path, verifier="test.misbehave").json()["job_id"]
    wait_job(client, job_id, lambda view: view["done"] >= 300)
    answer = client.get(f"/v1/jobs/{job_id}/results")
    assert answer.status_code == 409 and answer.json()["error"]["field"] == "job_id"  # still running

    cancelled = client.delete(f"/v1/jobs/{job_id}")
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["status"] == "cancelled"
    done = cancelled.json()["done"]
    time.sleep(4)  # the runner's next write is refused: nothing more is recorded
    view = client.get(f"/v1/jobs/{job_id}").json()
    assert view["status"] == "cancelled" and view["done"] == done < len(rows)
    assert stored_results(service["db"], job_id) == (done, done)
    got = result_rows(client, job_id)
    assert [row["id"] for row in got] == list(range(done))
    assert [(row["score"]["status"], row["score"]["reward"]) for row in got] == [
        expected_slow(row) for row in rows[:done]
    ]
    assert client.delete(f"/v1/jobs/{job_id}").json()["status"] == "cancelled"  # again: no change

    small = tmp_path / "small.jsonl"
    io.write_jsonl(small, mixed_rows()[:2])
    finished_id = upload(client, small).json()["job_id"]
    wait_job(client, finished_id, finished)
    assert client.delete(f"/v1/jobs/{finished_id}").status_code == 409


def test_the_audit_log_records_what_the_service_answered(service, tmp_path: Path):
    client: httpx.Client = service["client"]
    job_file = tmp_path / "audited.jsonl"
    io.write_jsonl(job_file, [{"id": "audit-4", "verifier": "text.match", "response": "b", "reference": "b"}])
    job_id = upload(client, job_file).json()["job_id"]
    wait_job(client, job_id, finished)
    one = client.post("/v1/score", json={"verifier": "text.match", "response": "a", "reference": "audit-1"})
    assert one.status_code == 200
    batch = client.post(
        "/v1/score/batch",
        json={
            "items": [
                {"verifier": "math", "response": "\\boxed{2}", "reference": "2", "id": "audit-2"},
                {"verifier": "test.misbehave", "response": "raise", "reference": "x", "id": "audit-3"},
            ]
        },
    )
    assert batch.status_code == 200
    db: Engine = service["db"]

    def records() -> list[Any]:
        with db.connect() as connection:
            return connection.execute(
                select(AuditScore)
                .where(AuditScore.request_id.in_(["audit-2", "audit-3", "audit-4"]))
                .order_by(AuditScore.id)
            ).all()

    deadline = time.monotonic() + 30
    while len(records()) < 3 and time.monotonic() < deadline:
        time.sleep(0.2)
    got = records()
    assert [(r.request_id, r.verifier, r.version, r.status, r.reward) for r in got] == [
        ("audit-4", "text.match", "1.0.0", "ok", 1.0),  # a job's row, scored by the runner
        ("audit-2", "math", "1.0.0", "ok", 1.0),
        ("audit-3", "test.misbehave", "1", "verifier_error", 0.0),
    ]
    assert all(r.key_hash == owner_of(TOKEN) for r in got)  # the caller's; the job owner's for the job row
    metrics = httpx.get(f"{service['url']}/metrics", headers=AUTH).text
    written = re.search(r'^proctor_audit_records_total\{outcome="written"\} (\S+)$', metrics, re.M)
    assert written is not None and float(written.group(1)) >= 4


def test_an_unreachable_audit_database_never_fails_a_score(tmp_path: Path):
    dead = f"postgresql://nobody@127.0.0.1:{free_port()}/proctor?connect_timeout=2"
    server = launch(tmp_path, PROCTOR_AUDIT_LOG="true", PROCTOR_DATABASE_URL=dead)
    try:
        for index in range(5):
            answer = httpx.post(
                f"{server.base_url}/v1/score",
                json={"verifier": "text.match", "response": "a", "reference": f"a{index}"},
                timeout=30,
            )
            assert answer.status_code == 200 and answer.json()["status"] == "ok"
        deadline = time.monotonic() + 60
        errors = 0.0
        while time.monotonic() < deadline and errors < 1:
            metrics = httpx.get(f"{server.base_url}/metrics", timeout=30).text
            found = re.search(r'^proctor_audit_records_total\{outcome="write_error"\} (\S+)$', metrics, re.M)
            errors = float(found.group(1)) if found else 0.0
            time.sleep(0.5)
        assert errors >= 1
        jobs = httpx.get(f"{server.base_url}/v1/jobs/abc", timeout=60)
        assert jobs.status_code == 503 and "database" in jobs.json()["error"]["message"]
    finally:
        server.stop()


# -- faults: restarts, dead replicas, database restarts -------------------------------------------------


def _check_complete(client: httpx.Client, db: Engine, job_id: str, rows: list[dict[str, Any]]) -> None:
    """Every row has exactly one result, in input order, and each is the right one."""
    assert stored_results(db, job_id) == (len(rows), len(rows))
    got = result_rows(client, job_id)
    assert [row["id"] for row in got] == [row["id"] for row in rows]
    assert [(row["score"]["status"], row["score"]["reward"]) for row in got] == [
        expected_slow(row) for row in rows
    ]


def test_a_service_stopped_or_killed_mid_job_resumes_after_a_restart(tmp_path: Path):
    """SIGTERM hands the job back (queued, only right rows written); SIGKILL leaves it to the next process,
    which takes it at once (the owner's pid is gone); the third process finishes it: every row once."""
    data = tmp_path / "data"
    # Rows 400 to 1500: every 100th takes a 1 s pool deadline, so the rest of the job outlasts any start-up.
    rows = [
        {"id": i, "response": "sleep" if 400 <= i <= 1500 and i % 100 == 0 else f"v{i}", "reference": f"v{i}"}
        for i in range(2000)
    ]
    path = tmp_path / "slow.jsonl"
    io.write_jsonl(path, rows)
    db = create_db_engine(f"sqlite:///{data / 'proctor.db'}")
    try:
        first = launch(tmp_path, PROCTOR_DATA_DIR=str(data))
        try:
            with httpx.Client(base_url=first.base_url, timeout=60) as client:
                job_id = upload(client, path, verifier="test.misbehave").json()["job_id"]
                wait_job(client, job_id, lambda view: view["done"] >= 300)
        finally:
            first.stop()  # SIGTERM: a graceful shutdown
        with db.connect() as connection:
            job = connection.execute(select(Job).where(Job.id == job_id)).one()
            written = connection.execute(
                select(JobResult.row_index, JobResult.status).where(JobResult.job_id == job_id)
            ).all()
        assert (job.status, job.lease_owner, job.claims) == ("queued", None, 1)
        assert 300 <= job.done == len(written) < len(rows)
        assert all(
            status == expected_slow(rows[index])[0] for index, status in written
        )  # no shutdown failures

        second = launch(tmp_path, PROCTOR_DATA_DIR=str(data))
        try:
            with httpx.Client(base_url=second.base_url, timeout=60) as client:
                view = wait_job(client, job_id, lambda view: view["done"] >= job.done + 100)
                assert view["status"] == "running"
        finally:
            kill9(second)
        with db.connect() as connection:
            done_before = connection.execute(select(Job.done).where(Job.id == job_id)).scalar_one()
        assert done_before < len(rows)  # killed mid-job

        third = launch(tmp_path, PROCTOR_DATA_DIR=str(data))
        try:
            with httpx.Client(base_url=third.base_url, timeout=60) as client:
                view = wait_job(client, job_id, finished)
                assert view["status"] == "done" and view["done"] == len(rows)
                _check_complete(client, db, job_id, rows)
            assert scored_by(third.base_url) <= len(rows) - done_before  # it resumed after the written rows
        finally:
            third.stop()
        with db.connect() as connection:
            assert connection.execute(select(Job.claims).where(Job.id == job_id)).scalar_one() == 3
    finally:
        db.dispose()


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    server = PostgresServer()
    try:
        yield server
    finally:
        server.close()


def test_of_two_services_on_postgresql_the_survivor_finishes_a_killed_ones_job(tmp_path: Path, postgres):
    url = postgres.new_database()
    rows = slow_rows()
    path = tmp_path / "slow.jsonl"
    io.write_jsonl(path, rows)
    servers = [launch(tmp_path, PROCTOR_DATABASE_URL=url) for _ in range(2)]
    db = create_db_engine(url)
    try:
        with httpx.Client(base_url=servers[0].base_url, timeout=60) as client:
            job_id = upload(client, path, verifier="test.misbehave").json()["job_id"]
            wait_job(client, job_id, lambda view: view["done"] >= 300)
        with db.connect() as connection:
            owner = connection.execute(select(Job.lease_owner).where(Job.id == job_id)).scalar_one()
        running = next(s for s in servers if str(s.process.pid) == owner.split("|")[3])
        survivor = next(s for s in servers if s is not running)
        kill9(running)
        with httpx.Client(base_url=survivor.base_url, timeout=60) as client:
            view = wait_job(client, job_id, finished)
            assert view["status"] == "done" and view["done"] == len(rows)
            _check_complete(client, db, job_id, rows)
    finally:
        for server in servers:
            server.stop()
        db.dispose()


def test_a_postgresql_restart_mid_job_loses_and_repeats_nothing(tmp_path: Path, postgres):
    url = postgres.new_database()
    rows = slow_rows()
    path = tmp_path / "slow.jsonl"
    io.write_jsonl(path, rows)
    server = launch(tmp_path, PROCTOR_DATABASE_URL=url)
    db = create_db_engine(url)
    try:
        with httpx.Client(base_url=server.base_url, timeout=60) as client:
            job_id = upload(client, path, verifier="test.misbehave").json()["job_id"]
            wait_job(client, job_id, lambda view: view["done"] >= 300)
            postgres.stop("fast")
            try:
                assert client.get(f"/v1/jobs/{job_id}").status_code == 503  # the routes say so
                deadline = time.monotonic() + 120
                while "jobs: the database is unreachable" not in server.output():  # the runner's write failed
                    assert time.monotonic() < deadline, server.output()
                    time.sleep(0.2)
            finally:
                postgres.start()  # the runner kept its scores, and retries until this answers
            view = wait_job(client, job_id, finished)
            assert view["status"] == "done" and view["done"] == len(rows)
            _check_complete(client, db, job_id, rows)
    finally:
        server.stop()
        db.dispose()


# -- the runner in this process: leases and fencing -----------------------------------------------------


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Engine]:
    engine = create_db_engine(f"sqlite:///{tmp_path / 'jobs.db'}")
    migrate(engine)
    yield engine
    engine.dispose()


@pytest.fixture
def scorer() -> Iterator[EngineScorer]:
    made = EngineScorer(workers=1)
    yield made
    made.close()


def _text_rows(count: int) -> list[dict[str, Any]]:
    return [
        {"id": i, "verifier": "text.match", "response": f"a{i}", "reference": f"a{i % 2}"}
        for i in range(count)
    ]


def test_an_expired_lease_is_taken_over_and_the_old_holder_can_write_nothing(
    db: Engine, scorer: EngineScorer
):
    job = create_job(db, _text_rows(30), JobSpec(), field="file")
    first = JobRunner(db, scorer, lease_s=1.5, chunk_rows=10, window=5)
    second = JobRunner(db, scorer, lease_s=1.5, chunk_rows=10, window=5)
    held = first.claim()
    assert held is not None and held.id == job["job_id"]
    assert second.claim() is None  # the holder is alive (this process) and its lease is fresh
    time.sleep(2.0)
    taken = second.claim()
    assert taken is not None and taken.claims == 2
    # The old holder comes back with a chunk it scored: its write is refused, nothing is recorded.
    row = {"job_id": held.id, "row_index": 0, "status": "ok", "reward": 1.0, "score": "{}"}
    with pytest.raises(_LeaseLost):
        first._write(held, [row])
    assert stored_results(db, held.id) == (0, 0)
    second.run_claim(taken)
    view = job_view(db, held.id, None)
    assert view is not None and view["status"] == "done" and view["done"] == 30
    assert view["counts"] == {"ok": 30}
    with db.connect() as connection:
        rewards = connection.execute(
            select(JobResult.row_index, JobResult.reward).where(JobResult.job_id == held.id)
        ).all()
    assert sorted(rewards) == [(i, 1.0 if i in (0, 1) else 0.0) for i in range(30)]


def test_rows_already_stored_are_never_scored_or_written_again(db: Engine, scorer: EngineScorer):
    job = create_job(db, _text_rows(12), JobSpec(), field="file")
    job_id = job["job_id"]
    with db.begin() as connection:  # a chunk written by a runner that then died
        connection.execute(
            insert(JobResult),
            [
                {
                    "job_id": job_id,
                    "row_index": i,
                    "status": "ok",
                    "reward": 0.25,
                    "score": '{"marker": true}',
                }
                for i in (0, 1, 2, 7)
            ],
        )
        connection.execute(text("UPDATE proctor_jobs SET done = 4 WHERE id = :id"), {"id": job_id})
    runner = JobRunner(db, scorer, chunk_rows=5, window=2)
    claim = runner.claim()
    assert claim is not None
    runner.run_claim(claim)
    view = job_view(db, job_id, None)
    assert view is not None and view["status"] == "done" and view["done"] == 12
    with db.connect() as connection:
        markers = connection.execute(
            select(JobResult.row_index).where(JobResult.job_id == job_id, JobResult.reward == 0.25)
        ).scalars()
        assert sorted(markers) == [0, 1, 2, 7]
    assert stored_results(db, job_id) == (12, 12)


def test_a_job_is_visible_only_to_its_owner(db: Engine):
    job = create_job(db, _text_rows(2), JobSpec(owner=owner_of("alice")), field="file")
    assert job_view(db, job["job_id"], owner_of("alice")) is not None
    assert job_view(db, job["job_id"], owner_of("mallory")) is None
    assert job_view(db, job["job_id"], None) is None
    public = create_job(db, _text_rows(2), JobSpec(), field="file")
    assert job_view(db, public["job_id"], owner_of("anyone")) is not None


def test_a_dead_local_owner_is_recognised_and_others_are_not():
    mine = new_owner_id()
    assert not owner_is_dead(mine)
    child = subprocess.run(
        [sys.executable, "-c", "from proctor.jobs import new_owner_id; print(new_owner_id())"],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert owner_is_dead(child.stdout.strip())  # that process has exited
    other_host = "|".join(["elsewhere", *mine.split("|")[1:]])
    assert not owner_is_dead(other_host)  # cannot be judged from here: its lease must expire
    assert not owner_is_dead("garbage") and not owner_is_dead(None)
