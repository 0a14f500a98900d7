"""`proctor doctor` and doctor_report(): which backends and toolchains work here (real checks, real runs)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from proctor.sandboxes.doctor import check_language, doctor_report, render
from proctor.sandboxes.languages import LANGUAGES, get_language

ROOT = Path(__file__).resolve().parents[1]
ENV = {key: value for key, value in os.environ.items() if not key.startswith("PROCTOR_")}
ENV["PYTHONPATH"] = str(ROOT)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "proctor", "doctor", *args],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def report() -> dict:
    return doctor_report(max_age_s=600)


def test_every_toolchain_runs_hello_world_in_the_default_backend(report: dict) -> None:
    assert report["ok"], report["problems"]
    assert report["default_backend"] == os.environ.get("PROCTOR_SANDBOX_BACKEND", "nsjail")
    nsjail = next(item for item in report["backends"] if item["name"] == "nsjail")
    assert nsjail["ok"], nsjail
    assert {item["name"] for item in report["backends"]} == {"nsjail", "docker", "local"}
    assert [item["name"] for item in report["languages"]] == list(LANGUAGES)
    for item in report["languages"]:
        assert (item["found"], item["hello"], item["ok"]) == (True, "ok", True), item
        assert item["version"] and not item["version"].startswith("unknown"), item
    assert report["problems"] == []


def test_versions_are_the_debian_toolchains(report: dict) -> None:
    versions = {item["name"]: item["version"] for item in report["languages"]}
    assert versions["python"].startswith("Python 3.")
    assert versions["java"].startswith("javac 17")
    assert versions["go"].startswith("go version go1.")
    assert versions["rust"].startswith("rustc 1.")


def test_the_report_is_cached_for_healthz(report: dict) -> None:
    assert doctor_report(max_age_s=600) is report


def test_a_missing_compiler_is_one_clear_line() -> None:
    go = dataclasses.replace(get_language("go"), binaries=("/usr/bin/proctor-no-such-go",))
    item = check_language(go)
    assert (item["found"], item["ok"], item["hello"]) == (False, False, "not run")
    assert item["detail"] == "/usr/bin/proctor-no-such-go not found; install the Debian package(s) golang-go"


def test_a_spent_budget_runs_nothing() -> None:
    item = check_language(get_language("c"), budget_s=0)
    assert (item["found"], item["ok"], item["hello"]) == (True, False, "skipped")
    assert "budget" in item["detail"]


def test_render_names_every_backend_and_language(report: dict) -> None:
    text = render(report)
    for name in ["nsjail", "docker", "local", *LANGUAGES]:
        assert f"  {name} " in text
    assert text.splitlines()[-1].startswith("ok")


def test_cli_json_exit_zero() -> None:
    result = run_cli("--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["ok"] and data["problems"] == []
    assert result.stderr == ""


def test_cli_broken_default_backend_exits_one_with_a_line() -> None:
    result = run_cli("--backend", "no-such-backend", "--no-run")
    assert result.returncode == 1
    assert result.stdout.splitlines()[-1].startswith("NOT OK")
    lines = result.stderr.strip().splitlines()
    assert lines == ["proctor: default sandbox backend 'no-such-backend' does not work: unknown backend"]
