"""Faults under traffic through a running service: a pool worker killed in the middle of a batch, and a sandbox
killed under a running program.

Every item gets an answer in its place (a score, or a status that names the machinery failure, never an `ok`
reward of 0), no item runs twice, the audit log holds one record per answered item, and the service keeps
serving afterwards.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, select

from proctor.db.models import AuditScore

BATCH = 16


def descendants(pid: int) -> list[int]:
    """Every process below `pid`, read from /proc (children first, then theirs)."""
    found: list[int] = []
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        try:
            tasks = Path(f"/proc/{parent}/task").iterdir()
            children = [
                int(child)
                for task in tasks
                for child in (task / "children").read_text().split()
                if (task / "children").exists()
            ]
        except OSError:
            continue
        found.extend(children)
        frontier.extend(children)
    return found


def command_line(pid: int) -> str:
    """A process's argv joined by spaces ("" once it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def server_pid(url: str) -> int:
    """The pid of the test server listening at `url` (the fixture's child whose environment names its port)."""
    port = url.rsplit(":", 1)[1]
    for pid in descendants(os.getpid()):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"PROCTOR_PORT={port}".encode() in environ and "proctor.api" in command_line(pid):
            return pid
    raise AssertionError(f"no server process for {url}")


def wait_for(condition: Any, timeout_s: float = 60.0) -> Any:
    """Poll until condition() is truthy; returns its value (fails the test on time-out)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.02)
    pytest.fail("condition not met in time")


def audit_records(database: Path, ids: list[str]) -> list[Any]:
    """The audit log's rows for these request ids."""
    engine = create_engine(f"sqlite:///{database}")
    try:
        with engine.connect() as connection:
            return connection.execute(select(AuditScore).where(AuditScore.request_id.in_(ids))).all()
    finally:
        engine.dispose()


def post_batch(url: str, items: list[dict[str, Any]], into: list[httpx.Response]) -> threading.Thread:
    """POST /v1/score/batch from a thread; the response lands in `into`."""

    def send() -> None:
        with httpx.Client(timeout=300) as client:
            into.append(client.post(f"{url}/v1/score/batch", json={"items": items}))

    thread = threading.Thread(target=send)
    thread.start()
    return thread


def test_a_pool_worker_killed_mid_batch_costs_one_masked_item_and_nothing_else(start_server, tmp_path: Path):
    run_log = tmp_path / "runs.log"
    data = tmp_path / "data"
    url = start_server(
        PROCTOR_AUDIT_LOG="true", PROCTOR_DATA_DIR=str(data), TEST_MISBEHAVE_RUN_LOG=str(run_log)
    )
    items = [
        {"verifier": "test.misbehave", "response": "nap", "reference": f"item-{n}", "id": f"item-{n}"}
        for n in range(BATCH)
    ]
    replies: list[httpx.Response] = []
    thread = post_batch(url, items, replies)

    def a_worker_in_the_middle_of_an_item() -> int | None:
        # The run log names the worker that started each item; kill one whose item has not finished yet.
        lines = run_log.read_text().split("\n")[:-1] if run_log.exists() else []
        if len(lines) < 3:
            return None
        return int(lines[-1].split()[1])

    victim = wait_for(a_worker_in_the_middle_of_an_item)
    victim_item = run_log.read_text().split("\n")[-2].split()[0]
    assert "proctor.worker" in command_line(victim)
    os.kill(victim, signal.SIGKILL)
    thread.join(timeout=300)
    assert replies and replies[0].status_code == 200
    results = replies[0].json()["results"]

    assert [result["id"] for result in results] == [item["id"] for item in items]  # each in its place, once
    by_id = {result["id"]: result for result in results}
    for result in results:
        # A worker's death is never a wrong answer: the item it ran is a masked machinery failure.
        assert (result["status"], result["reward"]) == ("ok", 1.0) or result["status"] != "ok", result
    assert by_id[victim_item]["status"] == "verifier_error", by_id[victim_item]
    assert sum(result["status"] != "ok" for result in results) == 1
    runs = Counter(line.split()[0] for line in run_log.read_text().split("\n")[:-1])
    assert runs == Counter({item["id"]: 1 for item in items})  # nothing ran twice, nothing was skipped

    # The pool replaced the worker: the next batch is served whole.
    again = httpx.post(
        f"{url}/v1/score/batch",
        json={
            "items": [
                {**item, "reference": f"{item['reference']}-again", "id": f"again-{n}"}
                for n, item in enumerate(items[:4])
            ]
        },
        timeout=120,
    )
    assert [result["status"] for result in again.json()["results"]] == ["ok"] * 4

    # One audit record per answered item, the failure included.
    ids = [item["id"] for item in items]
    records = wait_for(
        lambda: (found := audit_records(data / "proctor.db", ids)) and len(found) >= BATCH and found
    )
    assert Counter(record.request_id for record in records) == Counter(ids)
    assert {record.request_id: record.status for record in records}[victim_item] == "verifier_error"


CPU_SECOND = "import sys\ntotal = 0\nfor n in range(12_000_000):\n    total += n\nprint(sum(map(int, sys.stdin.read().split())))\n"


def test_a_sandbox_killed_under_a_running_program_is_a_sandbox_error_for_that_item_only(start_server):
    url = start_server(PROCTOR_POOL_WORKERS="2", PROCTOR_SANDBOX_WORKERS="2")
    tests = [{"stdin": "1 2\n", "stdout": "3\n"}]
    items = [
        {
            "verifier": "code",
            # Distinct programs (a comment) so no item is answered from the cache of another.
            "response": f"```python\n# program {n}\n{CPU_SECOND}```",
            "reference": {"language": "python", "tests": {"format": "stdio", "cases": tests}},
            "id": f"program-{n}",
        }
        for n in range(6)
    ]
    replies: list[httpx.Response] = []
    thread = post_batch(url, items, replies)
    server = server_pid(url)

    def a_jail_running_a_program() -> int | None:
        # A jail (nsjail's own process) with the submitted program, or the warm server running it, inside.
        for pid in descendants(server):
            argv0 = command_line(pid).split(" ", 1)[0]
            if Path(argv0).name == "nsjail" and any(
                "main.py" in command_line(inner) for inner in descendants(pid)
            ):
                return pid
        return None

    jail = wait_for(a_jail_running_a_program, timeout_s=120)
    os.kill(jail, signal.SIGKILL)
    thread.join(timeout=300)
    assert replies and replies[0].status_code == 200
    results = replies[0].json()["results"]
    assert [result["id"] for result in results] == [item["id"] for item in items]
    statuses = Counter(result["status"] for result in results)
    for result in results:
        assert (result["status"], result["reward"]) == ("ok", 1.0) or result["status"] != "ok", result
    # The killed jail's program is a machinery failure; every other program passed.
    assert statuses == Counter({"ok": len(items) - 1, "sandbox_error": 1})
    followup = httpx.post(
        f"{url}/v1/score", json={**items[0], "response": items[0]["response"] + "\n"}, timeout=120
    )
    assert (followup.json()["status"], followup.json()["reward"]) == ("ok", 1.0)
