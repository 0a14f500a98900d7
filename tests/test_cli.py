"""The `proctor` command line: score, verifiers, serve, and its error handling (real subprocesses)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from proctor.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]
ENV = {key: value for key, value in os.environ.items() if not key.startswith("PROCTOR_")}
ENV.update(PYTHONPATH=str(ROOT), PROCTOR_PLUGINS="tests.plugins.slow")


def run_cli(
    *args: str, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "proctor", *args],
        cwd=ROOT,
        env=env or ENV,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def one_error_line(result: subprocess.CompletedProcess) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("proctor: ")
    assert "Traceback" not in result.stderr
    return lines[0]


def test_score_prints_the_score_as_json():
    result = run_cli("score", "--verifier", "text.match", "--response", "Answer: 42", "--reference", "42")
    assert result.returncode == 0, result.stderr
    score = json.loads(result.stdout)
    assert score["verifier"].startswith("text.match@")
    assert (score["status"], score["reward"], score["correct"]) == ("ok", 1.0, True)

    wrong = run_cli("score", "--verifier", "text.match", "--response", "Answer: 41", "--reference", '"42"')
    assert json.loads(wrong.stdout)["reward"] == 0.0


def test_score_runs_pool_verifiers_and_passes_options_and_stdin():
    result = run_cli(
        "score", "--verifier", "test.misbehave", "--response", "-", "--reference", "same",
        "--options", '{"deadline_s": 30}', "--id", "q1", stdin="same",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    score = json.loads(result.stdout)
    assert (score["id"], score["reward"], score["status"]) == ("q1", 1.0, "ok")

    timeout = run_cli("score", "--verifier", "test.misbehave", "--response", "spin", "--reference", "x")
    assert timeout.returncode == 0  # a machinery failure is reported in the Score, not as a failed command
    assert json.loads(timeout.stdout)["status"] == "timeout"


def test_score_bad_requests_are_one_line_and_exit_2():
    unknown = run_cli("score", "--verifier", "x", "--response", "a", "--reference", "a")
    assert unknown.returncode == 2
    assert one_error_line(unknown).startswith("proctor: unknown verifier 'x'; known verifiers: ")
    assert "text.match" in unknown.stderr and unknown.stdout == ""

    options = run_cli(
        "score", "--verifier", "text.match", "--response", "a", "--reference", "a", "--options", "{"
    )
    assert options.returncode == 2 and "--options" in one_error_line(options)

    field = run_cli(
        "score", "--verifier", "test.misbehave", "--response", "a", "--reference", '{"a": 1}'
    )  # a JSON object where the verifier wants text
    assert field.returncode == 2 and "reference" in one_error_line(field)

    bad_option = run_cli(
        "score", "--verifier", "text.match", "--response", "a", "--reference", "a", "--options", '{"nope": 1}'
    )
    assert bad_option.returncode == 2 and "options.nope" in one_error_line(bad_option)

    usage = run_cli("score", "--response", "a")
    assert usage.returncode == 2 and "Traceback" not in usage.stderr


def test_score_rejects_deeply_nested_reference_and_options_in_one_line():
    for depth in (255, 50_000):  # 100 kB: one argument may hold at most 128 kB
        deep = "[" * depth + "]" * depth
        reference = run_cli("score", "--verifier", "text.match", "--response", "a", "--reference", deep)
        assert reference.returncode == 2 and "reference" in one_error_line(reference)
        options = run_cli(
            "score", "--verifier", "text.match", "--response", "a", "--reference", "a", "--options",
            '{"x": ' + deep + "}",
        )  # fmt: skip
        assert options.returncode == 2 and "options" in one_error_line(options)


def test_verifiers_table_and_json():
    table = run_cli("verifiers")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["NAME", "VERSION", "EXECUTION", "DESCRIPTION"]
    names = [line.split()[0] for line in lines[1:]]
    assert names == sorted(names) and {"text.match", "text.choice", "test.misbehave"} <= set(names)
    misbehave = next(line for line in lines if line.startswith("test.misbehave "))
    assert misbehave.split()[1:3] == ["1", "pool"]

    listed = run_cli("verifiers", "--json")
    assert listed.returncode == 0, listed.stderr
    entries = {entry["name"]: entry for entry in json.loads(listed.stdout)}
    assert set(entries) == set(names)
    assert entries["test.misbehave"]["reference_schema"] == {"type": "string"}
    assert "properties" in entries["text.match"]["options_schema"]


def test_main_returns_exit_codes_without_raising(capsys):
    assert main(["rescore"]) == 2  # argparse: INPUT and -o are required
    assert main(["--help"]) == 0
    assert main(["rescore", "in.jsonl", "-o", "out.jsonl", "--resume", "--force"]) == 2
    capsys.readouterr()
    args = build_parser().parse_args(["rescore", "i.jsonl", "-o", "o.parquet", "--k", "8,1,8"])
    assert args.k == (1, 8)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_serve_starts_the_service_with_flags_over_environment(tmp_path):
    port = free_port()
    env = {**ENV, "PROCTOR_PORT": "1", "PROCTOR_LOG_LEVEL": "warning", "PROCTOR_POOL_WORKERS": "1"}
    log = (tmp_path / "serve.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "proctor", "serve", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, (tmp_path / "serve.log").read_text()
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline, "the service did not come up within 30 s"
                time.sleep(0.1)
        assert health.status_code == 200
        scored = httpx.post(
            f"http://127.0.0.1:{port}/v1/score",
            json={"verifier": "text.match", "response": "Answer: 7", "reference": "7"},
            timeout=10,
        )
        assert scored.json()["reward"] == 1.0
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--host", "0.0.0.0"], "PROCTOR_TOKEN"),
        (["--port", "70000"], "port"),
        (["--workers", "0"], "workers"),
    ],
)
def test_serve_refuses_bad_configurations_in_one_line(args, needle):
    result = run_cli("serve", *args)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert needle in result.stderr.strip().splitlines()[-1]
