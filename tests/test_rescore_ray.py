"""`proctor rescore --engine ray`: the same rows as the local engine, resume, a killed Ray worker, bad addresses.

Real Ray: a head started here with `ray start --head` (token authentication on, as Ray 2.x does by default)
for the --address runs, and the local instance the command starts itself when no address is given.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from proctor.rescore import RescoreError
from proctor.rescore_ray import check_reachable, proctor_environment
from tests.conftest import free_port

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
RAY = Path(sys.executable).with_name("ray")
TOKEN = secrets.token_hex(32)
ENV = {key: value for key, value in os.environ.items() if not key.startswith(("PROCTOR_", "RAY_"))}
ENV.update(
    PYTHONPATH=str(ROOT),
    PROCTOR_PLUGINS="tests.plugins.slow,tests.plugins.ray_faults",
    RAY_AUTH_MODE="token",
    RAY_AUTH_TOKEN=TOKEN,
    RAY_USAGE_STATS_ENABLED="0",
)
RUN_TIMEOUT_S = 300


def run_cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "proctor", *args],
        cwd=cwd,
        env=env or ENV,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )


def one_error_line(result: subprocess.CompletedProcess) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("proctor: ")
    return lines[0]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def without_timing(text: str) -> str:
    """The output file's bytes with each score's elapsed_ms blanked: the one field two runs may differ in."""
    return re.sub(r'"elapsed_ms": [0-9.e+-]+', '"elapsed_ms": null', text)


def mixed_rows() -> list[dict[str, Any]]:
    """Every kind of row once, no two rows the same item (so no run gets a cache hit the other does not)."""
    rows: list[dict[str, Any]] = []
    for i in range(48):
        prompt = f"p{i // 6}"
        if i % 4 == 0:  # inline, right or wrong
            row = {"response": f"Answer: {i}", "reference": str(i + i % 8), "verifier": "text.match"}
        elif i % 4 == 1:  # the pool, right or wrong
            row = {"response": f"r{i}", "reference": f"r{i}" if i % 3 else "other"}
        elif i % 4 == 2:
            row = {"response": f"Answer: {i}", "reference": str(i), "verifier": "text.match"}
        else:
            row = {"response": f"s{i}", "reference": f"s{i}"}
        rows.append({"id": f"r{i}", "prompt": prompt, "old": i % 2, **row})
    rows[5] = {"id": "r5", "prompt": "p0", "old": 1, "response": "raise", "reference": "x"}  # verifier_error
    rows[9] = {"id": "r9", "prompt": "p1", "old": 0, "response": "x", "reference": "x", "verifier": "nope"}
    rows[13] = {"id": "r13", "prompt": "p2", "old": 1, "reference": "x"}  # no response: rejected
    rows[17] = {"id": "r17", "prompt": "p2", "old": 0, "response": "q", "reference": {"not": "a string"}}
    for row in rows:  # a busy test machine may hold a pool worker past test.misbehave's 1 s default deadline
        if row.get("verifier") is None:
            row["options"] = {"deadline_s": 60}
    return rows


@pytest.fixture(scope="module")
def ray_head() -> Iterator[str]:
    """A Ray head (`ray start --head`) with 2 CPUs, in its own process group; yields its address."""
    temp_dir = tempfile.mkdtemp(prefix="prh", dir="/tmp")  # Ray's socket paths must stay short
    port = free_port()
    args = [
        str(RAY),
        "start",
        "--head",
        f"--port={port}",
        "--num-cpus=2",
        "--include-dashboard=false",
        f"--dashboard-port={free_port()}",
        f"--dashboard-agent-listen-port={free_port()}",
        f"--temp-dir={temp_dir}",
        "--disable-usage-stats",
    ]
    starter = subprocess.Popen(
        args, env=ENV, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        output, _ = starter.communicate(timeout=240)
        assert starter.returncode == 0, output
        yield f"127.0.0.1:{port}"
    finally:
        _kill_group(starter.pid)
        shutil.rmtree(temp_dir, ignore_errors=True)


def _kill_group(pgid: int) -> None:
    """Stop every process of the head's session: TERM, then KILL what is left after a grace period."""
    for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.2)


SUMMARY_FLAGS = ("--group-field", "prompt", "--k", "1,2,4", "--compare-field", "old")


def test_ray_rows_and_summary_match_the_local_engine(tmp_path, ray_head):
    write_jsonl(tmp_path / "in.jsonl", mixed_rows())
    common = ("--verifier", "test.misbehave", "--batch-size", "5", *SUMMARY_FLAGS)
    local = run_cli(
        "rescore", "in.jsonl", "-o", "local.jsonl", *common, "--summary-json", "local.json", cwd=tmp_path
    )
    assert local.returncode == 0, local.stderr
    ray = run_cli(
        "rescore", "in.jsonl", "-o", "ray.jsonl", *common, "--summary-json", "ray.json",
        "--engine", "ray", "--address", ray_head, cwd=tmp_path,
    )  # fmt: skip
    assert ray.returncode == 0, ray.stderr
    assert ray.stderr == ""
    assert without_timing((tmp_path / "ray.jsonl").read_text()) == without_timing(
        (tmp_path / "local.jsonl").read_text()
    )
    assert json.loads((tmp_path / "ray.json").read_text()) == json.loads(
        (tmp_path / "local.json").read_text()
    )
    assert ray.stdout.replace("ray.jsonl", "X") == local.stdout.replace("local.jsonl", "X")
    # The comparison is not vacuous: every kind of outcome is in there.
    scores = [row["score"] for row in read_jsonl(tmp_path / "ray.jsonl")]
    assert len(scores) == 48
    statuses = {score.get("status") or score["error"]["status"] for score in scores}
    assert statuses == {"ok", "verifier_error", 404, 422}
    assert {score.get("reward") for score in scores} >= {0.0, 1.0}
    assert "pass@2" in ray.stdout and "compare" in ray.stdout


def test_a_killed_ray_worker_is_retried_and_no_row_is_written_twice(tmp_path, ray_head):
    marker = tmp_path / "died"
    rows = [
        {"id": i, "response": "ok" if i % 3 else "no", "reference": "-", "verifier": "test.die_once"}
        for i in range(40)
    ]
    rows[22] = {"id": 22, "response": "die", "reference": str(marker), "verifier": "test.die_once"}
    write_jsonl(tmp_path / "in.jsonl", rows)
    result = run_cli(
        "rescore", "in.jsonl", "-o", "out.jsonl", "--engine", "ray", "--address", ray_head,
        "--batch-size", "4", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    # The worker scoring row 22 killed itself: the marker holds its pid, and that process is gone.
    killed = int(marker.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(killed, 0)
    out = read_jsonl(tmp_path / "out.jsonl")
    assert [row["id"] for row in out] == list(range(40))  # every row exactly once, in input order
    assert [{k: v for k, v in row.items() if k != "score"} for row in out] == rows
    retried = out[22]["score"]
    assert retried["status"] == "ok" and retried["reward"] == 1.0
    assert retried["details"]["pid"] != killed  # scored again, by another worker
    assert [row["score"]["reward"] for row in out] == [1.0 if i % 3 or i == 22 else 0.0 for i in range(40)]
    assert "rows          40  (scored 40, rejected 0)" in result.stdout


def test_resume_continues_a_cut_ray_run_without_losing_or_repeating_rows(tmp_path, ray_head):
    rows = mixed_rows()
    write_jsonl(tmp_path / "in.jsonl", rows)
    flags = ("--verifier", "test.misbehave", "--engine", "ray", "--address", ray_head, "--batch-size", "7")
    full = run_cli("rescore", "in.jsonl", "-o", "full.jsonl", *flags, *SUMMARY_FLAGS, cwd=tmp_path)
    assert full.returncode == 0, full.stderr
    # What a run killed mid-write leaves: whole rows, then part of the next line.
    lines = (tmp_path / "full.jsonl").read_text().splitlines(keepends=True)
    (tmp_path / "cut.jsonl").write_text("".join(lines[:11]) + lines[11][:40])
    again = run_cli("rescore", "in.jsonl", "-o", "cut.jsonl", *flags, cwd=tmp_path)
    assert again.returncode == 2
    assert "--resume" in one_error_line(again)
    # No --address this time: the command starts (and stops) a local Ray instance of its own.
    own = ("--verifier", "test.misbehave", "--engine", "ray", "--workers", "2", "--batch-size", "7")
    resumed = run_cli("rescore", "in.jsonl", "-o", "cut.jsonl", *own, *SUMMARY_FLAGS, "--resume", cwd=tmp_path)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stderr.strip() == f"proctor: resuming after 11 of {len(rows)} rows"
    assert without_timing((tmp_path / "cut.jsonl").read_text()) == without_timing(
        (tmp_path / "full.jsonl").read_text()
    )
    assert "[11 from the earlier run]" in resumed.stdout
    assert resumed.stdout.replace("  [11 from the earlier run]", "").replace("cut.jsonl", "X") == (
        full.stdout.replace("full.jsonl", "X")
    )


def test_an_unknown_verifier_is_refused_by_the_ray_engine(tmp_path, ray_head):
    write_jsonl(tmp_path / "in.jsonl", [{"response": "x", "reference": "x"}])
    result = run_cli(
        "rescore", "in.jsonl", "-o", "out.jsonl", "--engine", "ray", "--address", ray_head,
        "--verifier", "no.such", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 2
    assert "unknown verifier 'no.such'" in one_error_line(result)
    assert not (tmp_path / "out.jsonl").exists()


def test_an_unreachable_address_fails_at_once_and_never_runs_locally(tmp_path):
    write_jsonl(tmp_path / "in.jsonl", [{"response": "Answer: 1", "reference": "1"}])
    port = free_port()
    result = run_cli(
        "rescore", "in.jsonl", "-o", "out.jsonl", "--verifier", "text.match", "--engine", "ray",
        "--address", f"127.0.0.1:{port}", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 1
    assert (
        one_error_line(result)
        == f"proctor: cannot reach the Ray cluster at 127.0.0.1:{port}: Connection refused"
    )
    assert not (tmp_path / "out.jsonl").exists()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--engine", "ray", "--server", "http://127.0.0.1:9"), "--server and --engine ray exclude each other"),
        (("--address", "127.0.0.1:9"), "--address is the Ray cluster of --engine ray"),
        (("--engine", "ray", "--address", "127.0.0.1:9", "--workers", "2"), "--workers sets the CPUs"),
        (("--engine", "spark",), "invalid choice: 'spark'"),
        (("--forward-env", "PATH"), "--forward-env sends variables to the tasks of --engine ray"),
    ],
)  # fmt: skip
def test_engine_flags_that_contradict_each_other_are_usage_errors(tmp_path, flags, message):
    write_jsonl(tmp_path / "in.jsonl", [{"response": "x", "reference": "x"}])
    result = run_cli(
        "rescore", "in.jsonl", "-o", "out.jsonl", "--verifier", "text.match", *flags, cwd=tmp_path
    )
    assert result.returncode == 2
    assert message in result.stderr
    assert not (tmp_path / "out.jsonl").exists()


def test_without_ray_the_engine_names_the_extra_to_install(tmp_path):
    write_jsonl(tmp_path / "in.jsonl", [{"response": "x", "reference": "x"}])
    code = (
        "import sys; sys.modules['ray'] = None\n"  # what `import ray` meets where Ray is not installed
        "from proctor.cli import main\n"
        "raise SystemExit(main(sys.argv[1:]))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, "rescore", "in.jsonl", "-o", "out.jsonl", "--verifier", "text.match",
         "--engine", "ray"],
        cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
    )  # fmt: skip
    assert result.returncode == 2
    assert "pip install 'proctor[ray]'" in one_error_line(result)
    assert not (tmp_path / "out.jsonl").exists()


def test_importing_proctor_does_not_import_ray():
    code = (
        "import sys, proctor, proctor.cli, proctor.rescore, proctor.rescore_ray\nprint('ray' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], env=ENV, capture_output=True, text=True, timeout=RUN_TIMEOUT_S
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_an_address_where_something_else_listens_is_not_taken_for_a_ray_head():
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def answer_like_a_web_server() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(1024)
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

    thread = threading.Thread(target=answer_like_a_web_server, daemon=True)
    thread.start()
    with server, pytest.raises(RescoreError) as caught:
        check_reachable(f"127.0.0.1:{port}")
    assert "is not a Ray head" in str(caught.value) and caught.value.code == 1
    thread.join(timeout=10)


SECRETS = {
    "PROCTOR_TOKEN": "service-token",
    "PROCTOR_JUDGE_API_KEY": "sk-judge-secret",
    "PROCTOR_EMBEDDINGS_API_KEY": "sk-emb-secret",
    "PROCTOR_DATABASE_URL": "postgresql+psycopg://proctor:pg-secret@db/proctor",
    "PROCTOR_REDIS_URL": "redis://:redis-secret@redis:6379/0",
    "PROCTOR_REDIS_CACHE_URL": "redis://:redis-secret@cache:6379/0",
    "PROCTOR_CACHE_SECRET": "cache-secret",
    "PROCTOR_SQL_POSTGRES": '{"prod": "postgresql://reader:sql-secret@db/x"}',
    "PROCTOR_AUDIT_LOG": "true",
    "PROCTOR_SOMETHING_NEW": "unknown-secret",
}


def test_the_tasks_get_scoring_settings_and_no_credential(monkeypatch):
    for key, value in SECRETS.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("PROCTOR_PLUGINS", "tests.plugins.slow")
    monkeypatch.setenv("PROCTOR_JUDGE_BASE_URL", "http://judge:8001/v1")
    monkeypatch.setenv("PROCTOR_SANDBOX_MAX_CPU_S", "5")
    monkeypatch.setenv("NOT_PROCTOR", "1")
    env = proctor_environment()
    assert env == {
        "PROCTOR_PLUGINS": "tests.plugins.slow",
        "PROCTOR_JUDGE_BASE_URL": "http://judge:8001/v1",
        "PROCTOR_SANDBOX_MAX_CPU_S": "5",
    }
    assert not any(secret in value for value in env.values() for secret in ("secret", "service-token"))


def test_forward_env_sends_the_named_keys_and_refuses_shared_state(monkeypatch):
    for key, value in SECRETS.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")
    env = proctor_environment(["PROCTOR_JUDGE_API_KEY", "OPENAI_API_KEY"])
    assert env == {"PROCTOR_JUDGE_API_KEY": "sk-judge-secret", "OPENAI_API_KEY": "sk-openai"}
    for name in ("PROCTOR_TOKEN", "PROCTOR_DATABASE_URL", "PROCTOR_REDIS_URL", "PROCTOR_REDIS_CACHE_URL",
                 "PROCTOR_CACHE_SECRET", "PROCTOR_AUDIT_LOG"):  # fmt: skip
        with pytest.raises(RescoreError, match="never sent") as caught:
            proctor_environment([name])
        assert caught.value.code == 2
    with pytest.raises(RescoreError, match="not set here"):
        proctor_environment(["PROCTOR_NOT_SET_ANYWHERE"])
    with pytest.raises(RescoreError, match="not an environment variable name"):
        proctor_environment(["A=B"])
    # An allowlisted URL with a password in it is a credential too: refused unless forwarded knowingly.
    monkeypatch.setenv("PROCTOR_JUDGE_BASE_URL", "http://user:judge-pass@judge:8001/v1")
    with pytest.raises(RescoreError, match="PROCTOR_JUDGE_BASE_URL holds a URL with a password"):
        proctor_environment()
    sent = proctor_environment(["PROCTOR_JUDGE_BASE_URL"])
    assert sent == {"PROCTOR_JUDGE_BASE_URL": "http://user:judge-pass@judge:8001/v1"}
    monkeypatch.setenv("PROCTOR_JUDGE_BASE_URL", "http://judge:8001/v1,http://user@other/v1")  # no password
    assert proctor_environment()["PROCTOR_JUDGE_BASE_URL"].startswith("http://judge")


def test_the_runtime_env_of_a_ray_run_holds_no_secret(tmp_path, monkeypatch):
    """What the cluster keeps (and its dashboard shows): the runtime_env handed to ray.init, read from a run."""
    pytest.importorskip("ray")
    import ray

    from proctor.rescore import RescoreConfig
    from proctor.rescore_ray import ray_scorer

    for key, value in SECRETS.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("PROCTOR_JUDGE_MODEL", "judge-model")
    seen: dict[str, Any] = {}

    def recording_init(*args: Any, **kwargs: Any) -> None:
        seen.update(kwargs)
        raise RuntimeError("stop here: only the options are under test")

    monkeypatch.setattr(ray, "init", recording_init)
    config = RescoreConfig(
        input=tmp_path / "in.jsonl", output=tmp_path / "out.jsonl", engine="ray", workers=1
    )
    with pytest.raises(RescoreError, match="stop here"):
        ray_scorer(config, ["PROCTOR_JUDGE_API_KEY"])
    assert seen["runtime_env"] == {
        "env_vars": {"PROCTOR_JUDGE_MODEL": "judge-model", "PROCTOR_JUDGE_API_KEY": "sk-judge-secret"}
    }
