"""Red team of `tool.sql_explore`: each test is one attack a policy or a hostile client would try.

Confirmed and fixed here: a query hidden in a nested fence inside the answer block (the sql verifier re-read
the block and graded the inner query, not the one written); a message of unclosed <answer> tags (quadratic
regex: the grade stalled into a masked timeout); a constant that detects the fixed derived copies (closed by
a third, thinned copy); the too-large observation that named the wrong cap; the policy's own CPU-heavy
queries, run all at once, oversubscribing the machine into a masked `timeout` (worker queries bounded to one
per core, a wall-clock stop retried with a longer backstop); session copies filling the disk (a byte budget,
past it the shared read-only stage) and copies a dead process left behind (swept). Refuted (they pass): the
write paths, pragmas, non-allow-listed functions, memory bombs, closing on every end reason. The clock functions
are refused by the sql worker (verifiers/sql/sqlite_worker.py CLOCK_FUNCTIONS).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import proctor
from proctor.contract import ChatMessage, Status
from proctor.environments.tools.base import ToolMachineryError
from proctor.environments.tools.sql_explore import copies
from proctor.environments.tools.sql_explore import environment as sqlx
from proctor.environments.tools.sql_explore.environment import (
    SQL_EXPLORE,
    SqlExplore,
    SqlExploreReference,
    final_query,
    grade,
)
from proctor.verifiers.sql import workers
from proctor.verifiers.sql.databases import database_path, stage_root

ENV: SqlExplore = SQL_EXPLORE  # type: ignore[assignment]
NAME = "tool.sql_explore"
COUNT_GOLD = "SELECT count(*) FROM book"
GENRES_GOLD = "SELECT count(DISTINCT genre) FROM book"


def verdict_on(gold: str, text: str, **reference: Any) -> Any:
    """The verdict on a transcript whose final assistant message is `text`."""
    ref = SqlExploreReference(db_id="library", gold=gold, **reference)
    raw = [{"role": "user", "content": "q"}, {"role": "assistant", "content": text}]
    return grade(ref, [ChatMessage.model_validate(m) for m in raw])


def call(query: str, call_id: str = "c1") -> dict[str, Any]:
    arguments = json.dumps({"query": query})
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": "sql", "arguments": arguments}}
        ],
    }


def session_copies() -> set[Path]:
    return set(stage_root().glob("sqlx-*.sqlite"))


# -- the graded query is the one written -----------------------------------------------------------------------

NESTED = [
    # A longer fence holds a comment with a ```sql block in it: the block as written returns a string per book.
    "````sql\nSELECT 'not a count' AS x /*\n```sql\nSELECT count(*) FROM book\n```\n*/\n````",
    "````sql\nSELECT count(*) FROM book WHERE 0 /*\n```sql\nSELECT count(*) FROM book\n```\n*/\n````",
    "~~~sql\nSELECT 'x' AS y /*\n```\nSELECT count(*) FROM book\n```\n*/\n~~~",
]


@pytest.mark.parametrize("text", NESTED)
@pytest.mark.parametrize("derived", [True, False])
def test_a_block_hidden_inside_the_answer_is_never_what_gets_graded(text: str, derived: bool):
    # Before the fix the sql verifier re-extracted the inner block and graded it: reward 1 without the
    # derived copies for a query that, as written, does not count anything.
    verdict = verdict_on(COUNT_GOLD, text, derived_copies=derived)
    assert verdict.status is Status.ok and verdict.reward == 0.0, verdict
    assert verdict.reason == "several_queries", verdict


def test_the_query_graded_is_exactly_the_one_read():
    query, why = final_query("````sql\nSELECT count(*) FROM book -- a comment with ``` in it\n````")
    assert why == "" and query == "SELECT count(*) FROM book -- a comment with ``` in it"
    verdict = verdict_on(COUNT_GOLD, f"````sql\n{query}\n````")
    assert verdict.reward == 1.0 and verdict.details["sql"] == query, verdict


@pytest.mark.parametrize(
    "text",
    [
        "<answer>a</answer> x <ANSWER>b<answer>c</Answer> y <answer>d",
        "no tags",
        "<answer></answer><answer>\n</answer>",
        "</answer><answer>x</answer>",
    ],
)
def test_answer_tags_are_read_as_the_non_greedy_regex_reads_them(text: str):
    assert sqlx.answer_tags(text) == re.findall(r"<answer>(.*?)</answer>", text, re.S | re.I)


@pytest.mark.parametrize(
    ("text", "reward"),
    [
        (
            "<answer>" * 125_000,
            0.0,
        ),  # 1 MB, a session's largest message: the regex retried from every open tag
        (f"```sql\n{COUNT_GOLD}\n```\n" + "<answer>" * 125_000, 1.0),  # the block is still the answer
        (
            "```sql\nSELECT 1 /* " + "<answer>" * 125_000 + " */\n```",
            0.0,
        ),  # the verifier's regex on the block
    ],
)
def test_a_message_of_unclosed_answer_tags_is_read_in_one_pass(text: str, reward: float):
    # Before the fix each of these took the grading thread hours of CPU (quadratic), ending the episode as a
    # masked timeout instead of its verdict. Finishing at all is the check; the verdict is an ordinary one.
    verdict = verdict_on(COUNT_GOLD, text)
    assert verdict.status is Status.ok and verdict.reward == reward, verdict


def test_a_database_with_triggers_still_gets_its_derived_copies(tmp_path: Path):
    # A user's database may hold triggers: one that aborts a delete (or an insert or update) made building the
    # thinned copy raise, so every grade on that database was verifier_error; one that writes elsewhere would
    # have changed tables the copy's rules never meant to touch. Reading needs no trigger: the copies drop them.
    import sqlite3

    source = tmp_path / "shop.sqlite"
    conn = sqlite3.connect(source)
    conn.executescript(
        """
        CREATE TABLE item (item_id INTEGER PRIMARY KEY, kind TEXT NOT NULL, price REAL NOT NULL);
        CREATE TABLE audit (n INTEGER);
        INSERT INTO audit VALUES (0);
        CREATE TRIGGER no_delete BEFORE DELETE ON item BEGIN SELECT RAISE(ABORT, 'never delete'); END;
        CREATE TRIGGER count_updates AFTER UPDATE ON item BEGIN UPDATE audit SET n = n + 1; END;
        """
    )
    conn.executemany(
        "INSERT INTO item (kind, price) VALUES (?, ?)", [(("a", "b", "c")[i % 3], i + 0.5) for i in range(30)]
    )
    conn.commit()
    conn.close()
    scaled, doubled, thinned = copies.derived_copies(source, copies.DERIVED)
    # audit.n is 0: scaled makes it 1 (2v + 1), doubled adds a row of 1, an update trigger would add 30 or 60.
    for path, kinds, items, audit in ((scaled, 3, 30, 1), (doubled, 6, 60, 1), (thinned, 2, 20, 0)):
        copy = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            query = "SELECT count(DISTINCT kind), count(*), (SELECT max(n) FROM audit) FROM item"
            assert copy.execute(query).fetchone() == (kinds, items, audit), path.name
        finally:
            copy.close()


# -- observations say which cap was hit -----------------------------------------------------------------------


async def test_a_too_large_result_names_the_cap_it_hit():
    state = await ENV.start(ENV.make_tasks("train", 0, 1)[0], ENV.limits())
    try:
        wide = "SELECT printf('%.*c', 200000, 'x') AS a, printf('%.*c', 200000, 'y') AS b"
        result = await ENV.call(state, "sql", {"query": wide})
        assert result.status == "error", result
        assert "rows" not in result.content and "bytes" in result.content, result.content
        many = await ENV.call(state, "sql", {"query": "SELECT loan_id FROM loan"})
        assert many.status == "error" and "more than 100 rows" in many.content, many.content
    finally:
        await ENV.close(state)


# -- the policy cannot turn its own zero into a masked machinery failure ----------------------------------------


async def test_concurrent_queries_are_bounded_so_policies_cannot_oversubscribe_the_machine(monkeypatch):
    # Each rollout's endless query gets its CPU seconds only if the queries do not all run at once: past the
    # machine's cores they stall into the wall-clock backstop, which is a masked `timeout`, not the 0 it is.
    slots = 2
    monkeypatch.setattr(sqlx, "_QUERY_SLOTS", threading.BoundedSemaphore(slots))
    real_run = workers.SqliteWorkers.run
    lock = threading.Lock()
    running, peak = [0], [0]

    def counting_run(self: Any, *args: Any, **kwargs: Any) -> Any:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        try:
            time.sleep(0.05)  # long enough that unbounded calls overlap (not a timing assertion)
            return real_run(self, *args, **kwargs)
        finally:
            with lock:
                running[0] -= 1

    monkeypatch.setattr(workers.SqliteWorkers, "run", counting_run)
    loop = asyncio.get_running_loop()
    executor = ThreadPoolExecutor(32)
    loop.set_default_executor(executor)
    state = await ENV.start(ENV.make_tasks("train", 0, 1)[0], ENV.limits())
    try:
        results = await asyncio.gather(
            *[ENV.call(state, "sql", {"query": "SELECT count(*) FROM loan"}) for _ in range(4 * slots)]
        )
        assert all(r.status == "ok" for r in results)
        reference = SqlExploreReference(db_id="library", gold=COUNT_GOLD, perturbations=1)
        raw = [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": f"```sql\n{COUNT_GOLD}\n```"},
        ]
        transcript = [ChatMessage.model_validate(m) for m in raw]
        verdicts = await asyncio.gather(*[ENV.score(reference, transcript) for _ in range(2 * slots)])
        assert all(v.reward == 1.0 for v in verdicts)
    finally:
        await ENV.close(state)
    assert 1 <= peak[0] <= slots, peak[0]


async def test_a_wall_clock_stop_is_retried_with_a_longer_backstop_before_it_is_machinery(monkeypatch):
    real_run = workers.SqliteWorkers.run
    seen: list[dict[str, Any]] = []

    def busy_once(self: Any, mounts: Any, backend: str, database: Path, request: dict[str, Any]) -> Any:
        seen.append(request)
        if len(seen) == 1:  # what the worker answers when an oversubscribed machine gave it no CPU
            return {"ok": False, "error": "wall_limit", "message": "wall-clock backstop"}
        return real_run(self, mounts, backend, database, request)

    monkeypatch.setattr(workers.SqliteWorkers, "run", busy_once)
    state = await ENV.start(ENV.make_tasks("train", 0, 1)[0], ENV.limits())
    try:
        result = await ENV.call(state, "sql", {"query": "SELECT count(*) FROM book"})
        assert result.status == "ok" and "120" in result.content, result
        assert len(seen) == 2
        assert float(seen[1]["wall_s"]) > workers.wall_backstop(state.timeout_s)

        def always_busy(self: Any, *args: Any, **kwargs: Any) -> Any:
            return {"ok": False, "error": "wall_limit", "message": "wall-clock backstop"}

        monkeypatch.setattr(workers.SqliteWorkers, "run", always_busy)
        with pytest.raises(ToolMachineryError) as caught:
            await ENV.call(state, "sql", {"query": "SELECT count(*) FROM book"})
        assert caught.value.status == "timeout"  # still never a verdict when the machine stays busy
    finally:
        await ENV.close(state)


def test_a_grade_stopped_at_the_wall_clock_backstop_is_tried_once_more(monkeypatch):
    real = sqlx.score_sql
    calls: list[str] = []

    def busy_once(sql: str, reference: Any, options: Any) -> Any:
        calls.append(sql)
        if len(calls) == 1:
            return sqlx.Verdict.failure(Status.timeout, "wall_clock_backstop", error="machine busy")
        return real(sql, reference, options)

    monkeypatch.setattr(sqlx, "score_sql", busy_once)
    verdict = verdict_on(COUNT_GOLD, f"```sql\n{COUNT_GOLD}\n```")
    assert verdict.status is Status.ok and verdict.reward == 1.0 and len(calls) == 2, verdict

    def always_busy(sql: str, reference: Any, options: Any) -> Any:
        return sqlx.Verdict.failure(Status.timeout, "wall_clock_backstop", error="machine busy")

    monkeypatch.setattr(sqlx, "score_sql", always_busy)
    assert verdict_on(COUNT_GOLD, f"```sql\n{COUNT_GOLD}\n```").status is Status.timeout


# -- disk: session copies have a budget, and a dead process's copies are swept -------------------------------


async def test_session_copies_have_a_byte_budget_past_which_sessions_share_the_read_only_stage(monkeypatch):
    bundled = database_path("library")
    assert bundled is not None
    size = bundled.stat().st_size
    monkeypatch.setattr(copies, "SESSION_COPIES_MAX_BYTES", 2 * size)
    monkeypatch.setattr(copies, "_copied_bytes", 0)
    task = ENV.make_tasks("train", 0, 1)[0]
    states = [await ENV.start(task, ENV.limits()) for _ in range(3)]
    try:
        assert [s.owned for s in states] == [True, True, False]
        assert states[2].path is not None and not states[2].path.name.startswith("sqlx-")
        shared = await ENV.call(states[2], "sql", {"query": "SELECT count(*) FROM book"})
        assert shared.status == "ok" and "120" in shared.content
        denied = await ENV.call(states[2], "sql", {"query": "DELETE FROM book"})
        assert denied.status == "error"
    finally:
        for state in states:
            await ENV.close(state)
    assert copies._copied_bytes == 0  # noqa: SLF001 - every closed copy gave its bytes back
    again = await ENV.start(task, ENV.limits())
    try:
        assert again.owned
    finally:
        await ENV.close(again)


async def test_copies_a_dead_process_left_behind_are_swept(monkeypatch):
    monkeypatch.setattr(copies, "_last_sweep", 0.0)
    stale = stage_root() / f"sqlx-{'0' * 32}.sqlite"
    fresh = stage_root() / f"sqlx-{'1' * 32}.sqlite"
    for path in (stale, fresh):
        path.write_bytes(b"x")
    old = time.time() - copies.STALE_COPY_S - 60
    os.utime(stale, (old, old))
    try:
        state = await ENV.start(ENV.make_tasks("train", 0, 1)[0], ENV.limits())
        await ENV.close(state)
        assert not stale.exists() and fresh.exists()
    finally:
        stale.unlink(missing_ok=True)
        fresh.unlink(missing_ok=True)


# -- refuted: these already hold, kept as regression tests --------------------------------------------------------


async def test_write_paths_pragmas_and_unlisted_functions_are_refused():
    state = await ENV.start(ENV.make_tasks("train", 0, 1)[0], ENV.limits())
    assert state.path is not None
    before = state.path.read_bytes()
    attempts = [
        "SELECT CURRENT_TIMESTAMP",
        "SELECT random()",
        "SELECT randomblob(8)",
        "SELECT sqlite_version()",
        "SELECT sqlite_source_id()",
        "SELECT readfile('/etc/passwd')",
        "SELECT * FROM pragma_database_list",
        "SELECT * FROM pragma_compile_options",
        "SELECT * FROM sqlite_dbpage",
        "SELECT * FROM dbstat",
        "SELECT zeroblob(100000000)",
        "SELECT changes()",
        "SELECT last_insert_rowid()",
        "INSERT INTO book SELECT * FROM book RETURNING book_id",
        "UPDATE book SET title = 'x' RETURNING title",
        "ANALYZE",
        "REINDEX",
        "SAVEPOINT a",
        "DETACH main",
        "CREATE VIEW v AS SELECT 1",
        "CREATE TRIGGER t AFTER INSERT ON book BEGIN SELECT 1; END",
        "CREATE VIRTUAL TABLE f USING fts5(x)",
        "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT group_concat("
        "printf('%.*c', 9000, 'x')) FROM r",
    ]
    try:
        for query in attempts:
            result = await ENV.call(state, "sql", {"query": query})
            assert result.status in ("error", "timeout"), (query, result)
        assert (await ENV.call(state, "sql", {"query": "SELECT count(*) FROM book"})).content.endswith(
            "(1 row)"
        )
        assert state.path.read_bytes() == before
    finally:
        await ENV.close(state)


@pytest.mark.parametrize(
    ("options", "steps"),
    [
        ({"max_turns": 1}, [call("SELECT 1")]),
        ({}, [call("SELECT 1"), {"role": "assistant", "content": "```sql\nSELECT 1\n```"}]),
        ({}, [call("SELECT 1")]),  # finished without an answer
    ],
)
def test_the_session_copy_is_deleted_on_every_end_reason(
    options: dict[str, Any], steps: list[dict[str, Any]]
):
    before = session_copies()
    task = ENV.make_tasks("train", 0, 1)[0].model_dump(mode="json")
    with proctor.open_session(NAME, task, options=options or None) as session:
        assert len(session_copies() - before) == 1
        for step in steps:
            result = session.step(step)
            if result["done"]:
                break
        else:
            session.finish()
    assert session_copies() - before == set()


async def test_the_session_copy_is_deleted_when_the_session_expires_or_is_deleted():
    from proctor.engine import Engine
    from proctor.environments.tools.sessions import SessionManager
    from proctor.settings import Settings

    now = [1000.0]
    engine = Engine(Settings(cache_size=0))
    sessions = SessionManager(engine=engine, clock=lambda: now[0], retention_s=5.0, sweep_interval_s=3600)
    task = ENV.make_tasks("train", 0, 1)[0].model_dump(mode="json")
    before = session_copies()
    try:
        expiring = (await sessions.create({"environment": NAME, "task": task}))["session_id"]
        await sessions.step(expiring, call("SELECT count(*) FROM book"))
        deleted = (await sessions.create({"environment": NAME, "task": task}))["session_id"]
        assert len(session_copies() - before) == 2
        await sessions.delete(deleted)
        assert len(session_copies() - before) == 1
        now[0] += 100_000
        assert await sessions.sweep() >= 1
        assert session_copies() - before == set()
    finally:
        await sessions.close()
        engine.close()


# -- open --------------------------------------------------------------------------------------------------------


async def test_the_clock_cannot_be_read():
    state = await ENV.start(ENV.make_tasks("train", 0, 1)[0], ENV.limits())
    try:
        for query in (
            "SELECT date('now')",
            "SELECT julianday()",
            "SELECT unixepoch()",
            "SELECT date('n' || 'ow')",
            "SELECT datetime(' NOW ', '+1 day')",
            "SELECT strftime('%Y')",
            "SELECT strftime('%Y', 'now')",
            "SELECT timediff('2024-01-01', 'now')",
            "SELECT time(x'6e6f77')",
        ):
            result = await ENV.call(state, "sql", {"query": query})
            assert result.status == "error", (query, result)
        # Dates that do not read the clock are SQLite's own functions, unchanged.
        for query, shown in (
            ("SELECT date('2024-01-31', '+1 day')", "2024-02-01"),
            ("SELECT strftime('%Y', '2019-05-06')", "2019"),
            ("SELECT julianday('2000-01-01') - julianday('1999-12-31')", "1.0"),
            ("SELECT date(NULL)", "NULL"),
        ):
            result = await ENV.call(state, "sql", {"query": query})
            assert result.status == "ok" and shown in result.content, (query, result)
    finally:
        await ENV.close(state)


# -- a constant that asks which database it runs on -------------------------------------------------------------

DETECTORS = [
    # "How many distinct genres": 7 survives the perturbed copies, and `doubled` has exactly twice the rows
    # and twice the genres, so a constant keyed on any table's size was paid before the thinned copy.
    f"SELECT CASE WHEN (SELECT count(*) FROM {table}) > {size} THEN 14 ELSE 7 END"
    for table, size in (("book", 120), ("branch", 6), ("member", 200), ("loan", 1500))
] + [
    "SELECT CASE WHEN EXISTS (SELECT 1 FROM book WHERE genre LIKE '%#2') THEN 14 ELSE 7 END",
    "SELECT CASE WHEN (SELECT count(*) FROM book) > 120 THEN 7 * (SELECT count(*) FROM book) / 120 ELSE 7 END",
]


@pytest.mark.parametrize("hack", DETECTORS)
def test_a_constant_that_detects_the_derived_copies_is_not_paid(hack: str):
    verdict = verdict_on(GENRES_GOLD, f"```sql\n{hack}\n```")
    assert verdict.status is Status.ok and verdict.reward == 0.0, verdict
    assert verdict.reason in ("derived_copy", "perturbation"), verdict
    assert verdict_on(GENRES_GOLD, f"```sql\n{GENRES_GOLD}\n```").reward == 1.0


def test_the_thinned_copy_keeps_the_constraints_and_moves_distinct_counts():
    import sqlite3

    bundled = database_path("library")
    assert bundled is not None
    before = bundled.read_bytes()
    (thinned,) = copies.derived_copies(bundled, ("thinned",))
    original = sqlite3.connect(f"file:{bundled}?mode=ro&immutable=1", uri=True)
    conn = sqlite3.connect(f"file:{thinned}?mode=ro", uri=True)
    try:
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        query = "SELECT count(DISTINCT genre), count(*) FROM book"
        (genres, books), (old_genres, old_books) = (
            conn.execute(query).fetchone(),
            original.execute(query).fetchone(),
        )
        assert genres == old_genres - 1 and 0 < books < old_books
        assert conn.execute("SELECT count(*) FROM loan").fetchone()[0] > 0
    finally:
        conn.close()
        original.close()
    assert bundled.read_bytes() == before
