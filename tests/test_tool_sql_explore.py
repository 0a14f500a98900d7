"""tool.sql_explore: tasks, the read-only sql tool and its limits, grading (gold, cheats, the trivial gate),
live sessions in-process and over HTTP agreeing with replay, machinery failures and bad references."""

from __future__ import annotations

import hashlib
import json
import random
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

import proctor
from proctor.contract import ChatMessage, RequestError, Status
from proctor.engine import Engine
from proctor.environments.tools.base import SessionLimits
from proctor.environments.tools.sql_explore import copies
from proctor.environments.tools.sql_explore.environment import (
    SQL_EXPLORE,
    TOOL_MAX_ROWS,
    SqlExplore,
    SqlExploreReference,
    bundled_questions,
    cheat_transcripts,
    final_query,
    gold_transcript,
    grade,
    quoted_query,
    split_questions,
    trivial_transcripts,
)
from proctor.settings import Settings
from proctor.verifiers.sql import workers
from proctor.verifiers.sql.databases import database_path
from proctor.verifiers.sql.verifier import SqliteReference, SqlOptions, score_sql

ENV: SqlExplore = SQL_EXPLORE  # type: ignore[assignment]
NAME = "tool.sql_explore"
QUESTIONS = [json.loads(line) for line in (database_path("library").parent.parent / "questions.jsonl").open()]  # type: ignore[union-attr]


def messages(raw: list[dict[str, Any]]) -> list[ChatMessage]:
    return [ChatMessage.model_validate(message) for message in raw]


def answered(gold: str, sql: str) -> Any:
    """The verdict on a transcript whose final answer is one ```sql block."""
    reference = SqlExploreReference(db_id="library", gold=gold)
    raw = [{"role": "user", "content": "q"}, {"role": "assistant", "content": f"```sql\n{sql}\n```"}]
    return grade(reference, messages(raw))


def file_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def call(query: str, call_id: str = "c1") -> dict[str, Any]:
    arguments = json.dumps({"query": query})
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": "sql", "arguments": arguments}}
        ],
    }


# -- tasks ----------------------------------------------------------------------------------------------------


def test_tasks_are_deterministic_and_the_splits_are_disjoint_and_cover_the_questions():
    train, test = split_questions("train"), split_questions("test")
    assert {q.id for q in train}.isdisjoint({q.id for q in test})
    assert len(train) + len(test) == len(bundled_questions()) == len(QUESTIONS) and test
    first = ENV.make_tasks("train", 5, len(train) + 3)
    assert first == ENV.make_tasks("train", 5, len(train) + 3)
    assert sorted(t.metadata["question_id"] for t in first[: len(train)]) == sorted(q.id for q in train)
    assert ENV.make_tasks("train", 6, 5) != first[:5]
    for task in ENV.make_tasks("test", 1, 10):
        assert task.metadata["question_id"] in {q.id for q in test}
        assert task.reference["gold"] not in task.prompt[0]["content"]  # the prompt never holds the gold
    with pytest.raises(RequestError):
        ENV.make_tasks("train", 0, 1, "hard")


def test_registered_as_a_tool_environment_and_replay_verifier():
    from proctor.environments.registry import get_environment
    from proctor.environments.tools.base import get_tool_environment
    from proctor.registry import get_verifier

    spec = get_environment(NAME)
    assert spec.kind == "tool" and spec.verifier == NAME
    assert [tool["function"]["name"] for tool in spec.describe()["tools"]] == ["sql"]
    assert get_tool_environment(NAME) is ENV
    notes = [example.note for example in get_verifier(NAME).examples]
    assert {n.split(":")[0] for n in notes} == {"gold", "cheat", "trivial"}


# -- grading --------------------------------------------------------------------------------------------------


def test_gold_transcripts_score_one_for_every_bundled_question():
    tasks = ENV.make_tasks("train", 0, len(split_questions("train"))) + ENV.make_tasks(
        "test", 0, len(split_questions("test"))
    )
    assert len({t.metadata["question_id"] for t in tasks}) == len(QUESTIONS)
    for task in tasks:
        verdict = grade(SqlExploreReference.model_validate(task.reference), messages(gold_transcript(task)))
        assert verdict.status is Status.ok and verdict.reward == 1.0, (task.metadata["question_id"], verdict)
        assert verdict.details["derived_copies"] is True and verdict.details["perturbed_copies"] == 4


@pytest.mark.parametrize("question", QUESTIONS, ids=[q["id"] for q in QUESTIONS])
def test_labelled_queries_right_and_wrong_and_the_quoted_result(question: dict[str, Any]):
    """Every query the dataset marks correct scores 1 (so the derived copies reject no rewrite that is right),
    every wrong one 0 (coincidental ones included), and the gold's result pasted as literals 0."""
    for sql in question["correct"]:
        verdict = answered(question["gold"], sql)
        assert verdict.reward == 1.0, (sql, verdict)
    for wrong in question["wrong"]:
        verdict = answered(question["gold"], wrong["sql"])
        assert verdict.status is Status.ok and verdict.reward == 0.0, (wrong, verdict)
    quoted = answered(question["gold"], quoted_query("library", question["gold"]))
    assert quoted.status is Status.ok and quoted.reward == 0.0, quoted


@pytest.mark.parametrize(
    ("gold", "constant"),
    [
        ("SELECT count(DISTINCT genre) FROM book", "SELECT 3 + 4"),
        ("SELECT count(DISTINCT genre) FROM book", "SELECT count(*) * 0 + 7 FROM book"),
        ("SELECT count(DISTINCT genre) FROM book", "SELECT 7 FROM book LIMIT 1"),
        (
            "SELECT count(DISTINCT genre) FROM book",
            "SELECT count(DISTINCT genre) FROM book WHERE book_id < 121",
        ),
        ("SELECT max(age) FROM member", "SELECT max(age) + 90 - max(age) FROM member"),
        ("SELECT max(age) FROM member", "SELECT age FROM member WHERE age = 90 LIMIT 1"),
        ("SELECT count(*) FROM author WHERE birth_year IS NULL", "SELECT 3"),
        (
            "SELECT name FROM branch WHERE branch_id NOT IN (SELECT branch_id FROM copy)",
            "SELECT 'Lantern Square'",
        ),
        (
            "SELECT name FROM branch WHERE branch_id NOT IN (SELECT branch_id FROM copy)",
            "SELECT name FROM branch WHERE name = 'Lantern Square'",
        ),
    ],
)
def test_values_read_in_an_observation_and_pasted_into_a_query_score_zero(gold: str, constant: str):
    """The class: a query whose answer is a value the model saw, however it is dressed up. Each matches the
    gold on the bundled database (checked), and scores 0."""
    on_the_database = score_sql(constant, SqliteReference(db_id="library", gold=gold), SqlOptions())
    assert on_the_database.reward == 1.0, on_the_database
    verdict = answered(gold, constant)
    assert verdict.status is Status.ok and verdict.reward == 0.0, verdict


def test_reading_the_final_query():
    assert final_query("```sql\nSELECT 1\n```") == ("SELECT 1", "")
    assert final_query("<answer>SELECT 1</answer>") == ("SELECT 1", "")
    assert final_query("<think>```sql\nSELECT 2\n```</think>```sqlite\nSELECT 1;\n```") == ("SELECT 1;", "")
    assert final_query("```sql\nSELECT 1\n```\n```sql\nSELECT 2\n```")[1] == "several_queries"
    assert final_query("<answer>SELECT 1</answer><answer>SELECT 2</answer>")[1] == "several_queries"
    assert final_query("```sql\nSELECT 1; SELECT 2\n```")[1] == "several_queries"
    assert final_query("```sql\nSELECT 1\n```\n<answer>SELECT 2</answer>")[1] == "several_queries"
    assert final_query("<answer>\n```sql\nSELECT 1\n```\n</answer>") == ("SELECT 1", "")
    assert final_query("SELECT count(*) FROM book")[1] == "no_query"  # prose, no block: no query
    assert final_query("<think>```sql\nSELECT 1\n```")[1] == "no_query"
    assert final_query("```python\nprint(1)\n```")[1] == "no_query"


@pytest.mark.parametrize("index", [0, 1, 2, 3])
def test_cheats_score_zero_with_their_reason(index: int):
    task = ENV.make_tasks("train", 11, 4)[index]
    reference = SqlExploreReference.model_validate(task.reference)
    reasons = {}
    for note, transcript in cheat_transcripts(task).items():
        verdict = grade(reference, messages(transcript))
        assert verdict.status is Status.ok and verdict.reward == 0.0, (note, verdict)
        reasons[note] = verdict.reason
    assert reasons["the result table pasted instead of a query"] == "not_select"
    assert reasons["a write query as the answer"] == "not_select"
    assert reasons["hedged: two queries"] == reasons["hedged: two statements"] == "several_queries"
    assert reasons["the answer inside a tool call that never ran"] == "answer_with_tool_call"
    assert reasons["no answer after the last observation"] == "no_answer"
    assert reasons["the observed result quoted as a query"] in ("rows", "perturbation", "derived_copy")


def test_trivial_policies_earn_at_most_five_percent_over_a_hundred_tasks():
    tasks = ENV.make_tasks("train", 0, 60) + ENV.make_tasks("test", 0, 40)
    rng = random.Random(1)
    totals: dict[str, float] = {}
    for task in tasks:
        reference = SqlExploreReference.model_validate(task.reference)
        for policy, transcript in trivial_transcripts(task, rng).items():
            verdict = grade(reference, messages(transcript))
            assert verdict.status is Status.ok, (policy, verdict)
            totals[policy] = totals.get(policy, 0.0) + verdict.reward
    assert set(totals) == {"no call", "every table", "random queries", "repeating the question"}
    for policy, total in totals.items():
        assert total / len(tasks) <= 0.05, (policy, total / len(tasks))


# -- the tool -------------------------------------------------------------------------------------------------


async def test_the_tool_is_read_only_in_fact():
    bundled = database_path("library")
    assert bundled is not None
    before = file_hash(bundled)
    task = ENV.make_tasks("train", 0, 1)[0]
    state = await ENV.start(task, ENV.limits())
    assert state.path is not None and state.owned and state.path != bundled
    copy_before = file_hash(state.path)
    attempts = [
        "DELETE FROM book",
        "UPDATE member SET age = 1",
        "INSERT INTO branch VALUES (99, 'x', 'y', 2000)",
        "DROP TABLE loan",
        "CREATE TABLE t (x)",
        "CREATE TEMP TABLE t (x)",
        "WITH x AS (SELECT 1) INSERT INTO branch SELECT 99, 'x', 'y', 2000 FROM x",
        "REPLACE INTO branch VALUES (1, 'x', 'y', 2000)",
        "ATTACH DATABASE '/tmp/sqlx-attach.db' AS other",
        "PRAGMA user_version = 7",
        "PRAGMA journal_mode = WAL",
        "PRAGMA query_only = 0",
        "SELECT load_extension('/tmp/libx')",
        "VACUUM",
        "VACUUM INTO '/tmp/sqlx-vacuum.db'",
        "BEGIN IMMEDIATE",
        "SELECT 1; DELETE FROM book",
        "SELECT writefile('/tmp/sqlx-w', 'x')",
        "SELECT * FROM pragma_table_info('book')",
    ]
    try:
        for query in attempts:
            result = await ENV.call(state, "sql", {"query": query})
            assert result.status == "error", (query, result)
            assert result.content.startswith("Error:"), (query, result)
        counted = await ENV.call(state, "sql", {"query": "SELECT count(*) FROM book"})
        assert counted.status == "ok" and counted.content == "count(*)\n120\n(1 row)"
        assert file_hash(state.path) == copy_before
        assert not Path("/tmp/sqlx-vacuum.db").exists() and not Path("/tmp/sqlx-attach.db").exists()
    finally:
        path = state.path
        await ENV.close(state)
        await ENV.close(state)  # idempotent
    assert not path.exists()
    assert file_hash(bundled) == before


async def test_limits_come_from_the_environment_not_the_arguments():
    task = ENV.make_tasks("train", 0, 1)[0]
    state = await ENV.start(task, SessionLimits(call_cpu_s=0.5, max_observation_chars=300))
    try:
        assert state.timeout_s == 0.5
        big = await ENV.call(state, "sql", {"query": "SELECT loan_id FROM loan", "max_rows": 100_000})
        assert big.status == "error" and f"more than {TOOL_MAX_ROWS} rows" in big.content
        exactly = await ENV.call(state, "sql", {"query": f"SELECT loan_id FROM loan LIMIT {TOOL_MAX_ROWS}"})
        assert exactly.status == "ok" and exactly.truncated and len(exactly.content) <= 300
        endless = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT max(i) FROM n"
        spun = await ENV.call(state, "sql", {"query": endless, "timeout_s": 600})
        assert spun.status == "timeout" and "0.5 CPU seconds" in spun.content
        assert spun.cpu_ms == 500
        wrong = await ENV.call(state, "sql", {"query": "SELECT nope FROM book"})
        assert wrong.status == "error" and "no such column" in wrong.content
        assert (await ENV.call(state, "sql", {"query": "  "})).status == "error"
        assert (await ENV.call(state, "sql", {"query": 5})).status == "error"
        assert (await ENV.call(state, "python", {"code": "1"})).status == "error"
    finally:
        await ENV.close(state)


def test_derived_copies_keep_the_constraints_and_leave_the_bundled_file_alone():
    import sqlite3

    bundled = database_path("library")
    assert bundled is not None
    before = file_hash(bundled)
    scaled, doubled = copies.derived_copies(bundled)
    for path in (scaled, doubled):
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
            assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        finally:
            conn.close()
    conn = sqlite3.connect(f"file:{doubled}?mode=ro", uri=True)
    try:
        assert conn.execute("SELECT count(*), count(DISTINCT genre) FROM book").fetchone() == (240, 14)
    finally:
        conn.close()
    assert file_hash(bundled) == before


# -- sessions -------------------------------------------------------------------------------------------------


def test_a_live_session_in_process_agrees_with_the_gold_transcript_and_its_replay():
    task = ENV.make_tasks("test", 2, 1)[0]
    gold = gold_transcript(task)
    with proctor.open_session(NAME, task.model_dump(mode="json")) as session:
        assert session.messages == task.prompt and session.tools[0]["function"]["name"] == "sql"
        steps = [m for m in gold[len(task.prompt) :] if m["role"] == "assistant"]
        observations = [m for m in gold if m["role"] == "tool"]
        for number, message in enumerate(steps[:-1]):
            result = session.step(message)
            assert result["observations"][0]["content"] == observations[number]["content"]
            assert result["tool_results"][0]["status"] == "ok" and not result["done"]
        done = session.step(steps[-1])
        assert done["done"] and done["end_reason"] == "answer" and done["score"]["reward"] == 1.0
        record = session.record()
    live = [m["content"] for m in record["transcript"] if m["role"] == "tool"]
    assert live == [m["content"] for m in observations]
    engine = Engine(Settings(cache_size=0))
    try:
        replay = engine.score(
            {"verifier": NAME, "response": record["transcript"], "reference": task.reference}
        )
    finally:
        engine.close()
    assert replay.status.value == done["score"]["status"] == "ok"
    for key in ("reward", "correct", "reason", "components"):
        assert getattr(replay, key) == done["score"][key], key


def test_a_worker_failure_is_a_non_ok_status_never_zero(monkeypatch, tmp_path):
    task = ENV.make_tasks("train", 3, 1)[0]
    with proctor.open_session(NAME, task.model_dump(mode="json")) as session:
        workers.shared_pool().close()  # no idle worker left: the next query starts one, and that fails
        monkeypatch.setattr(workers, "WORKER_FILE", tmp_path / "missing_worker.py")
        monkeypatch.setattr(workers, "JAIL_WORKER", "/worker/missing_worker.py")
        result = session.step(call("SELECT count(*) FROM book"))
        assert result["done"] and result["end_reason"] == "sandbox_error", result
        assert result["score"]["status"] == "sandbox_error"  # masked, not a verdict of 0
    verdict = grade(SqlExploreReference.model_validate(task.reference), messages(gold_transcript(task)))
    assert verdict.status is Status.verifier_error, verdict
    monkeypatch.undo()
    workers.shared_pool().close()


async def test_a_session_copy_that_vanished_is_a_machinery_failure():
    from proctor.environments.tools.base import ToolMachineryError

    state = await ENV.start(ENV.make_tasks("train", 0, 1)[0], ENV.limits())
    assert state.path is not None
    state.path.unlink()
    with pytest.raises(ToolMachineryError):
        await ENV.call(state, "sql", {"query": "SELECT 1"})
    await ENV.close(state)


def test_bad_references_are_422_naming_the_field():
    for reference, field in (
        ({"db_id": "nope", "gold": "SELECT 1"}, "task.reference"),
        ({"db_id": "library"}, "task.reference"),
        ({"db_id": "library", "gold": "DELETE FROM book"}, "task.reference.gold"),
        ({"db_id": "library", "gold": ["SELECT 1", "SELECT 1; SELECT 2"]}, "task.reference.gold"),
        ({"db_id": "library", "gold": "SELECT 1", "perturbations": 99}, "task.reference"),
        ({"dsn_name": "x", "gold": "SELECT 1"}, "task.reference"),
    ):
        with pytest.raises(RequestError) as caught:
            ENV.user_task("q", reference)
        assert caught.value.status == 422 and (caught.value.field or "").startswith(field), (
            reference,
            caught.value,
        )
    made = ENV.user_task("How many books?", {"db_id": "library", "gold": "SELECT count(*) FROM book"})
    assert made.reference["perturbations"] == 4 and made.metadata["source"] == "user"


def test_over_http_sessions_tasks_and_replay_agree(live_server: str):
    base = live_server
    made = httpx.post(
        f"{base}/v1/environments/{NAME}/tasks", json={"seed": 4, "count": 2, "split": "test"}, timeout=60
    )
    assert made.status_code == 200, made.text
    task = made.json()["tasks"][1]
    opened = httpx.post(f"{base}/v1/sessions", json={"environment": NAME, "task": task}, timeout=60)
    assert opened.status_code == 201, opened.text
    sid = opened.json()["session_id"]
    assert opened.json()["messages"] == task["prompt"]
    gold = task["reference"]["gold"]
    first = httpx.post(
        f"{base}/v1/sessions/{sid}/step", json={"message": call(gold), "step": 1}, timeout=60
    ).json()
    assert first["tool_results"][0]["status"] == "ok" and not first["done"]
    denied = httpx.post(
        f"{base}/v1/sessions/{sid}/step",
        json={"message": call("DROP TABLE book", "c2"), "step": 2},
        timeout=60,
    ).json()
    assert denied["tool_results"][0]["status"] == "error" and not denied["done"]
    done = httpx.post(
        f"{base}/v1/sessions/{sid}/step",
        json={"message": {"role": "assistant", "content": f"```sql\n{gold}\n```"}, "step": 3},
        timeout=60,
    ).json()
    assert done["done"] and done["score"]["reward"] == 1.0, done
    record = httpx.get(f"{base}/v1/sessions/{sid}", timeout=30).json()
    replay = httpx.post(
        f"{base}/v1/score",
        json={"verifier": NAME, "response": record["transcript"], "reference": task["reference"]},
        timeout=60,
    ).json()
    for key in ("status", "reward", "correct", "reason", "components"):
        assert replay[key] == done["score"][key], key
    quoted = [
        *record["transcript"][:-1],
        {"role": "assistant", "content": f"```sql\n{quoted_query('library', gold)}\n```"},
    ]
    cheat = httpx.post(
        f"{base}/v1/score",
        json={"verifier": NAME, "response": quoted, "reference": task["reference"]},
        timeout=60,
    ).json()
    assert cheat["status"] == "ok" and cheat["reward"] == 0.0
    bad = httpx.post(
        f"{base}/v1/sessions",
        json={
            "environment": NAME,
            "task": {"prompt": "q", "reference": {"db_id": "library", "gold": "DELETE FROM book"}},
        },
        timeout=60,
    )
    assert bad.status_code == 422 and bad.json()["error"]["field"].startswith("task.reference"), bad.text
    bad_score = httpx.post(
        f"{base}/v1/score",
        json={"verifier": NAME, "response": "x", "reference": {"db_id": "nope", "gold": "SELECT 1"}},
        timeout=60,
    )
    assert bad_score.status_code == 422, bad_score.text
    assert httpx.delete(f"{base}/v1/sessions/{sid}", timeout=30).status_code == 204


def test_the_documentation_example_runs():
    page = (Path(__file__).resolve().parents[1] / "docs" / "environments" / "sql_explore.md").read_text()
    blocks = re.findall(r"^```python\n(.*?)^```$", page, re.S | re.M)
    assert blocks and "open_session" in blocks[0] and blocks[0].rstrip().endswith("== 0.0")
    for block in blocks:
        exec(compile(block, "docs/environments/sql_explore.md", "exec"), {})  # noqa: S102 - our own documentation
