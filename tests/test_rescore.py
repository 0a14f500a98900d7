"""`proctor rescore`: real runs of the command (subprocesses), resume after SIGKILL, summaries, file I/O."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from proctor import io
from proctor.contract import Score
from proctor.rescore import RescoreConfig, Summary, build_request, get_field

ROOT = Path(__file__).resolve().parents[1]
ENV = {key: value for key, value in os.environ.items() if not key.startswith("PROCTOR_")}
ENV.update(PYTHONPATH=str(ROOT), PROCTOR_PLUGINS="tests.plugins.slow")


def run_cli(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "proctor", *args],
        cwd=cwd,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def one_error_line(result: subprocess.CompletedProcess) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("proctor: ")
    assert "Traceback" not in result.stderr
    return lines[0]


def patient(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Give rows that must score `ok` a long deadline: test.misbehave's default 1 s is meant for its sleepers,
    and a busy shared test machine can hold a worker that long even for a trivial item."""
    return [row if row.get("response") == "sleep" else {**row, "options": {"deadline_s": 30}} for row in rows]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def without_score(row: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in row.items() if key != "score"}


MIXED_ROWS = patient(
    [
        {"id": "a", "response": "x", "reference": "x"},
        {"id": "b", "response": "y", "reference": "x"},
        {
            "id": "c",
            "response": "z",
            "reference": "z",
            "verifier": "nope",
        },  # unknown verifier: keeps its slot
        {"id": "d", "response": "Answer: 42", "reference": "42", "verifier": "text.match"},
        {"id": "e", "reference": "x"},  # no response field
        {
            "id": "f",
            "response": "q",
            "reference": {"not": "a string"},
        },  # invalid reference for test.misbehave
        {"id": "g", "response": "raise", "reference": "x"},  # the verifier fails: a status, not a rejection
        {"id": "h", "response": "w", "reference": "w", "extra": [1, {"nested": True}]},
    ]
)


def dense(row: dict[str, Any]) -> dict[str, Any]:
    """The row without null values: a Parquet column holds every key, with nulls where a row lacked it."""
    return {key: value for key, value in row.items() if value is not None}


def check_mixed(rows: list[dict[str, Any]], nulls_for_missing: bool = False) -> None:
    assert [row["id"] for row in rows] == [row["id"] for row in MIXED_ROWS]
    for got, sent in zip(rows, MIXED_ROWS, strict=True):
        if nulls_for_missing:
            assert dense(without_score(got)) == sent
        else:
            assert without_score(got) == sent
    by_id = {row["id"]: row["score"] for row in rows}
    assert by_id["a"]["status"] == "ok" and by_id["a"]["reward"] == 1.0
    assert by_id["a"]["verifier"] == "test.misbehave@1" and by_id["a"]["id"] == "a"
    assert by_id["b"]["reward"] == 0.0 and by_id["b"]["reason"] == "mismatch"
    assert by_id["c"] == {
        "id": "c",
        "error": {"status": 404, "message": by_id["c"]["error"]["message"], "field": "verifier"},
    }
    assert "nope" in by_id["c"]["error"]["message"]
    assert by_id["d"]["verifier"].startswith("text.match@") and by_id["d"]["reward"] == 1.0
    assert by_id["e"]["error"]["status"] == 422 and by_id["e"]["error"]["field"] == "response"
    assert by_id["f"]["error"]["status"] == 422 and by_id["f"]["error"]["field"].startswith("reference")
    assert by_id["g"]["status"] == "verifier_error" and by_id["g"]["correct"] is None
    assert by_id["h"]["reward"] == 1.0
    for score in by_id.values():
        if "error" not in score:
            Score.model_validate(score)


def test_jsonl_to_jsonl_keeps_every_row_in_order(tmp_path):
    write_jsonl(tmp_path / "in.jsonl", MIXED_ROWS)
    result = run_cli("rescore", "in.jsonl", "-o", "out.jsonl", "--verifier", "test.misbehave", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    check_mixed(read_jsonl(tmp_path / "out.jsonl"))
    assert "rows          8  (scored 5, rejected 3)" in result.stdout
    assert "verifier_error 1" in result.stdout


def test_jsonl_to_parquet_and_parquet_to_jsonl(tmp_path):
    write_jsonl(tmp_path / "in.jsonl", MIXED_ROWS)
    first = run_cli("rescore", "in.jsonl", "-o", "out.parquet", "--verifier", "test.misbehave", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert not (tmp_path / "out.parquet.partial.jsonl").exists()
    import pyarrow.parquet as pq

    table = pq.read_table(tmp_path / "out.parquet")
    assert table.num_rows == len(MIXED_ROWS)
    assert table.column("score").type.get_field_index("reward") >= 0  # a queryable struct, not a blob
    check_mixed(io.read_rows(tmp_path / "out.parquet"), nulls_for_missing=True)

    # Parquet in: the Parquet output itself, rescored with its old score as the comparison.
    second = run_cli(
        "rescore", "out.parquet", "-o", "again.jsonl", "--verifier", "test.misbehave", "--compare-field", "score",
        cwd=tmp_path,
    )  # fmt: skip
    assert second.returncode == 0, second.stderr
    check_mixed(read_jsonl(tmp_path / "again.jsonl"), nulls_for_missing=True)
    assert "0 changed" in second.stdout


def test_parquet_input_written_by_another_tool(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table(
        {
            "uid": pa.array([10, 11, 12], pa.int64()),
            "completion": ["p", "q", "r"],
            "gold": ["p", "x", "r"],
            "meta": [{"src": "a"}, {"src": "b"}, {"src": None}],
            "options": [{"deadline_s": 30.0}] * 3,
        }
    )
    pq.write_table(table, tmp_path / "in.parquet")
    result = run_cli(
        "rescore", "in.parquet", "-o", "out.jsonl", "--verifier", "test.misbehave",
        "--response-field", "completion", "--reference-field", "gold", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    rows = read_jsonl(tmp_path / "out.jsonl")
    assert [without_score(row) for row in rows] == table.to_pylist()
    assert [row["score"]["reward"] for row in rows] == [1.0, 0.0, 1.0]


def test_field_remapping_with_dotted_paths(tmp_path):
    rows = patient(
        [
            {"sample": {"text": "k"}, "label": "k"},
            {"sample": {"text": "k"}, "label": "m"},
            {"sample": {}, "label": "m"},
        ]
    )
    write_jsonl(tmp_path / "in.jsonl", rows)
    result = run_cli(
        "rescore", "in.jsonl", "-o", "out.jsonl", "--verifier", "test.misbehave",
        "--response-field", "sample.text", "--reference-field", "label", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    scores = [row["score"] for row in read_jsonl(tmp_path / "out.jsonl")]
    assert [s.get("reward") for s in scores[:2]] == [1.0, 0.0]
    assert scores[2]["error"]["field"] == "sample.text"


def test_summary_pass_at_k_and_flips_against_a_hand_computed_case(tmp_path):
    rows = [
        {"prompt": "A", "response": "x", "reference": "x", "old": 0},  # 0 -> 1
        {"prompt": "A", "response": "y", "reference": "x", "old": 1},  # 1 -> 0
        {"prompt": "A", "response": "y", "reference": "x", "old": 0},  # unchanged
        {"prompt": "A", "response": "y", "reference": "x", "old": True},  # 1 -> 0
        {
            "prompt": "B",
            "response": "z",
            "reference": "z",
            "old": {"status": "ok", "reward": 1.0},
        },  # unchanged
        {"prompt": "B", "response": "z2", "reference": "z2", "old": 0.5},  # other change, upwards
        {"prompt": "C", "response": "w", "reference": "v"},  # no old value
        {"prompt": "C", "response": "w2", "reference": "v", "old": {"status": "timeout", "reward": 0.0}},
        {
            "prompt": "C",
            "response": "raise",
            "reference": "v",
            "old": 1,
        },  # no verdict: out of n, not compared
        {"response": "q", "reference": "q", "old": 1},  # no group
    ]
    write_jsonl(tmp_path / "in.jsonl", patient(rows))
    result = run_cli(
        "rescore", "in.jsonl", "-o", "out.jsonl", "--verifier", "test.misbehave", "--group-field", "prompt",
        "--k", "1,2,4,8", "--compare-field", "old", "--summary-json", "summary.json", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["rows"] == 10 and summary["rejected"] == 0 and summary["ok_rows"] == 9
    assert summary["mean_reward"] == pytest.approx(4 / 9)
    assert summary["status"] == {"ok": 9, "verifier_error": 1}
    assert summary["reason"] == {"mismatch": 5, "verifier_exception": 1}
    passk = summary["pass_at_k"]
    # A: n=4, c=1; B: n=2, c=2; C: n=2, c=0 (its failed sample is left out)
    assert (passk["groups"], passk["samples"], passk["without_verdict"], passk["without_group"]) == (
        3,
        8,
        1,
        1,
    )
    assert passk["k"]["1"] == {"mean": pytest.approx((0.25 + 1 + 0) / 3), "groups": 3}
    assert passk["k"]["2"] == {"mean": pytest.approx((0.5 + 1 + 0) / 3), "groups": 3}  # A: 1 - C(3,2)/C(4,2)
    assert passk["k"]["4"] == {"mean": pytest.approx(1.0), "groups": 1}
    assert passk["k"]["8"] == {"mean": None, "groups": 0}
    compare = summary["compare"]
    assert compare == {
        "field": "old",
        "compared": 7,
        "changed": 4,
        "0->1": 1,
        "1->0": 2,
        "other_up": 1,
        "other_down": 0,
        "no_old_value": 2,
        "no_new_verdict": 1,
    }
    assert "pass@1       0.4167  (3 groups with >= 1 samples)" in result.stdout
    assert "4 changed (0->1: 1, 1->0: 2" in result.stdout


# -- resume ---------------------------------------------------------------------------------------------

SLEEPERS = (1100, 2300)  # each holds the single worker for its 1 s deadline, so the run cannot end early


def resume_rows(count: int = 3000) -> list[dict[str, Any]]:
    rows = []
    for i in range(count):
        response = "sleep" if i in SLEEPERS else f"a{i}"
        rows.append({"id": f"r{i}", "response": response, "reference": f"a{i}" if i % 3 else "b"})
    return patient(rows)


def kill_midway(args: list[str], watch: Path, cwd: Path) -> None:
    """Start a rescore run and SIGKILL it once `watch` holds some rows, before the run can finish."""
    process = subprocess.Popen(
        [sys.executable, "-m", "proctor", *args],
        cwd=cwd,
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    try:
        while not (watch.exists() and watch.stat().st_size > 0):
            assert process.poll() is None, "the run ended before it could be killed"
            assert time.monotonic() < deadline, "no output appeared within 60 s"
            time.sleep(0.005)
        process.send_signal(signal.SIGKILL)
    finally:
        process.kill()
        process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL


def check_resumed(rows: list[dict[str, Any]], sent: list[dict[str, Any]]) -> None:
    assert [row["id"] for row in rows] == [row["id"] for row in sent]  # every row once, in order
    for i, (got, want) in enumerate(zip(rows, sent, strict=True)):
        assert dense(without_score(got)) == want  # dense: Parquet holds a sleeper's missing options as null
        score = got["score"]
        if i in SLEEPERS:
            assert score["status"] == "timeout"
        else:
            assert score["status"] == "ok", score
            assert score["reward"] == (1.0 if i % 3 else 0.0), (i, score)


def test_resume_after_sigkill_jsonl(tmp_path):
    sent = resume_rows()
    write_jsonl(tmp_path / "in.jsonl", sent)
    args = ["rescore", "in.jsonl", "-o", "out.jsonl", "--verifier", "test.misbehave", "--workers", "1",
            "--batch-size", "100"]  # fmt: skip
    kill_midway(args, tmp_path / "out.jsonl", tmp_path)
    text = (tmp_path / "out.jsonl").read_bytes()
    complete = text.count(b"\n")
    assert 0 < complete < len(sent)

    again = run_cli(*args, cwd=tmp_path)
    assert again.returncode == 2 and "--resume" in one_error_line(again)  # never silently overwritten

    resumed = run_cli(*args, "--resume", "--summary-json", "s.json", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming after {complete} of {len(sent)} rows" in resumed.stderr
    check_resumed(read_jsonl(tmp_path / "out.jsonl"), sent)
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["rows"] == len(sent) and summary["resumed_rows"] == complete
    assert summary["status"] == {"ok": len(sent) - 2, "timeout": 2}


def test_resume_after_sigkill_parquet(tmp_path):
    sent = resume_rows()
    write_jsonl(tmp_path / "in.jsonl", sent)
    args = ["rescore", "in.jsonl", "-o", "out.parquet", "--verifier", "test.misbehave", "--workers", "1",
            "--batch-size", "100"]  # fmt: skip
    partial = tmp_path / "out.parquet.partial.jsonl"
    kill_midway(args, partial, tmp_path)
    assert not (tmp_path / "out.parquet").exists()
    assert 0 < partial.read_bytes().count(b"\n") < len(sent)

    resumed = run_cli(*args, "--resume", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert not partial.exists()
    check_resumed(io.read_rows(tmp_path / "out.parquet"), sent)

    # Resuming a finished run changes nothing and reports on it again.
    before = (tmp_path / "out.parquet").read_bytes()
    again = run_cli(*args, "--resume", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert f"rows          {len(sent)}" in again.stdout
    assert (tmp_path / "out.parquet").read_bytes() == before


def test_resume_cuts_a_torn_last_line(tmp_path):
    sent = patient(
        [{"id": i, "response": f"s{i}", "reference": f"s{i}" if i % 2 else "n"} for i in range(40)]
    )
    write_jsonl(tmp_path / "in.jsonl", sent)
    args = ["rescore", "in.jsonl", "-o", "out.jsonl", "--verifier", "test.misbehave"]
    assert run_cli(*args, cwd=tmp_path).returncode == 0
    lines = (tmp_path / "out.jsonl").read_text().splitlines(keepends=True)
    torn = (
        "".join(lines[:13]) + lines[13][: len(lines[13]) // 2]
    )  # as a kill in the middle of a write leaves it
    (tmp_path / "out.jsonl").write_text(torn)

    resumed = run_cli(*args, "--resume", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming after 13 of 40 rows" in resumed.stderr
    rows = read_jsonl(tmp_path / "out.jsonl")
    assert [without_score(row) for row in rows] == sent
    assert [row["score"]["reward"] for row in rows] == [float(i % 2) for i in range(40)]


def test_resume_refuses_an_output_of_another_input(tmp_path):
    write_jsonl(tmp_path / "in.jsonl", [{"id": i, "response": "a", "reference": "a"} for i in range(5)])
    write_jsonl(
        tmp_path / "other.jsonl", [{"id": i + 100, "response": "a", "reference": "a"} for i in range(3)]
    )
    assert (
        run_cli(
            "rescore", "other.jsonl", "-o", "out.jsonl", "--verifier", "test.misbehave", cwd=tmp_path
        ).returncode
        == 0
    )
    result = run_cli(
        "rescore", "in.jsonl", "-o", "out.jsonl", "--verifier", "test.misbehave", "--resume", cwd=tmp_path
    )
    assert result.returncode == 1
    assert "does not match" in one_error_line(result)
    forced = run_cli(
        "rescore", "in.jsonl", "-o", "out.jsonl", "--verifier", "test.misbehave", "--force", cwd=tmp_path
    )
    assert forced.returncode == 0, forced.stderr
    assert [row["id"] for row in read_jsonl(tmp_path / "out.jsonl")] == list(range(5))


def comparable(score: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in score.items() if key not in ("elapsed_ms", "cached")}


def test_server_path_gives_the_in_process_results(tmp_path, live_server):
    write_jsonl(tmp_path / "in.jsonl", MIXED_ROWS)
    local = run_cli("rescore", "in.jsonl", "-o", "local.jsonl", "--verifier", "test.misbehave", cwd=tmp_path)
    assert local.returncode == 0, local.stderr
    remote = run_cli(
        "rescore", "in.jsonl", "-o", "remote.parquet", "--verifier", "test.misbehave", "--server", live_server,
        "--batch-size", "3", cwd=tmp_path,
    )  # fmt: skip
    assert remote.returncode == 0, remote.stderr
    local_rows = read_jsonl(tmp_path / "local.jsonl")
    remote_rows = io.read_rows(tmp_path / "remote.parquet")
    check_mixed(remote_rows, nulls_for_missing=True)
    assert [comparable(row["score"]) for row in remote_rows] == [
        comparable(row["score"]) for row in local_rows
    ]

    unknown = run_cli(
        "rescore", "in.jsonl", "-o", "x.jsonl", "--verifier", "nope", "--server", live_server, cwd=tmp_path
    )
    assert unknown.returncode == 2
    assert one_error_line(unknown).startswith("proctor: unknown verifier 'nope'; known verifiers: ")


# -- failures of the run itself -------------------------------------------------------------------------


def test_failures_are_one_line_and_non_zero(tmp_path):
    write_jsonl(tmp_path / "in.jsonl", [{"response": "a", "reference": "a"}])
    (tmp_path / "bad.jsonl").write_text('{"response": "a", "reference": "a"}\n\n{"response": oops}\n')

    missing = run_cli(
        "rescore", "nothere.jsonl", "-o", "o.jsonl", "--verifier", "test.misbehave", cwd=tmp_path
    )
    assert missing.returncode == 1 and "nothere.jsonl" in one_error_line(missing)

    malformed = run_cli("rescore", "bad.jsonl", "-o", "o.jsonl", "--verifier", "test.misbehave", cwd=tmp_path)
    assert malformed.returncode == 1 and "line 3" in one_error_line(malformed)
    assert not (tmp_path / "o.jsonl").exists()  # nothing is written before the input has been read whole

    unknown = run_cli("rescore", "in.jsonl", "-o", "o.jsonl", "--verifier", "nope", cwd=tmp_path)
    assert unknown.returncode == 2
    assert one_error_line(unknown).startswith("proctor: unknown verifier 'nope'; known verifiers: ")

    extension = run_cli("rescore", "in.jsonl", "-o", "o.csv", "--verifier", "test.misbehave", cwd=tmp_path)
    assert extension.returncode == 2 and "o.csv" in one_error_line(extension)

    flags = run_cli("rescore", "in.jsonl", "-o", "o.jsonl", "--k", "0,8", cwd=tmp_path)
    assert flags.returncode == 2 and "Traceback" not in flags.stderr

    unreachable = run_cli(
        "rescore", "in.jsonl", "-o", "o.jsonl", "--server", "http://127.0.0.1:9", "--verifier", "test.misbehave",
        cwd=tmp_path,
    )  # fmt: skip
    assert unreachable.returncode == 1 and "cannot reach" in one_error_line(unreachable)


# -- pure parts -----------------------------------------------------------------------------------------


def test_build_request_maps_fields_and_defaults():
    config = RescoreConfig(
        Path("i.jsonl"), Path("o.jsonl"), verifier="text.match", response_field="completion"
    )
    request = build_request(
        {"id": 7, "completion": "c", "reference": "r", "options": {"deadline_s": 2}}, config
    )
    assert request == {
        "verifier": "text.match",
        "response": "c",
        "reference": "r",
        "id": 7,
        "options": {"deadline_s": 2},
    }
    assert build_request({"verifier": "text.choice", "completion": "c"}, config)["verifier"] == "text.choice"
    missing = build_request({"id": "x", "response": "c"}, config)
    assert missing.id == "x" and missing.error.field == "completion"
    no_verifier = build_request({"completion": "c"}, RescoreConfig(Path("i.jsonl"), Path("o.jsonl")))
    assert no_verifier.error.field == "verifier" and "--verifier" in no_verifier.error.message
    assert get_field({"a": {"b": 3}}, "a.b") == 3
    assert get_field({"a.b": 4, "a": {"b": 3}}, "a.b") == 4


def test_summary_counts_rejections_by_error():
    summary = Summary()
    error = {"id": None, "error": {"status": 404, "message": "unknown verifier 'x'", "field": "verifier"}}
    summary.add({}, error)
    summary.add({}, error)
    summary.add({}, {"status": "timeout", "reward": 0.0, "reason": "deadline_exceeded"})
    assert summary.rejected == 2 and summary.ok_rows == 0 and summary.mean_reward is None
    assert summary.errors == {"404 verifier: unknown verifier 'x'": 2}
    assert "rows          3  (scored 1, rejected 2)" in summary.render()


def test_parquet_round_trip_keeps_mixed_columns(tmp_path):
    rows = [
        {"id": 1, "reference": "42", "tags": ["a"], "meta": {"k": 1}},
        {"id": "two", "reference": {"tests": [1, 2]}, "tags": [], "meta": {"j": "x"}},
        {"id": 3, "reference": None, "tags": None},
    ]
    io.write_parquet(tmp_path / "rows.parquet", rows)
    back = io.read_rows(tmp_path / "rows.parquet")
    assert [dense(row) for row in back] == [dense(row) for row in rows]


def test_truncate_partial_line(tmp_path):
    path = tmp_path / "f.jsonl"
    path.write_bytes(b'{"a": 1}\n{"a": 2}\n{"a"')
    assert io.truncate_partial_line(path) == 4
    assert path.read_bytes() == b'{"a": 1}\n{"a": 2}\n'
    assert io.truncate_partial_line(path) == 0
    path.write_bytes(b'{"a"')
    io.truncate_partial_line(path)
    assert path.read_bytes() == b""


def test_bundled_dataset_lookup():
    roots = io.dataset_roots()
    assert [root.resolve() for root in roots] == [ROOT / "datasets"]  # proctor/datasets links to datasets/
    with pytest.raises(FileNotFoundError, match="no/such.jsonl"):
        io.bundled_dataset("no/such.jsonl")
    with pytest.raises(ValueError):
        io.bundled_dataset("../pyproject.toml")
    bundled = sorted(p for p in (ROOT / "datasets").rglob("*") if p.is_file())
    for path in bundled:
        assert io.bundled_dataset(str(path.relative_to(ROOT / "datasets"))).resolve() == path


def test_a_row_too_deep_for_the_json_reader_is_one_line_naming_the_line(tmp_path):
    rows = '{"response": "a", "reference": "a"}\n{"response": ' + "[" * 100_000 + "]" * 100_000 + "}\n"
    (tmp_path / "in.jsonl").write_text(rows)
    result = run_cli("rescore", "in.jsonl", "-o", "out.jsonl", "--verifier", "text.match", cwd=tmp_path)
    assert result.returncode != 0
    assert "line 2" in one_error_line(result) and "nested too deeply" in one_error_line(result)


def test_iter_jsonl_names_a_row_too_deep_to_read(tmp_path):
    path = tmp_path / "deep.jsonl"
    path.write_text('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    with pytest.raises(io.DataError, match="line 1 is nested too deeply"):
        list(io.iter_jsonl(path))
