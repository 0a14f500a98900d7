"""`tool.sql_explore`: answer a question about a SQLite database with one query, exploring it with `sql(query)`.

The model is told the question and the database's name, not its schema: it explores with the one tool,

- `sql(query)`: runs one statement on the session's own read-only copy of the database (`copies.py`) in the
  `sql` verifier's sandboxed workers (`verifiers/sql/workers.py`), and returns the result as text: a header
  of column names, at most TOOL_MAX_ROWS rows, then the row count. The row, cell and byte caps and the CPU
  time limit are this module's constants and the session's limits, never the call's arguments. Writes,
  ATTACH, PRAGMA, load_extension, transactions and several statements fail as `error` observations (the
  worker's authorizer refuses them; the file is opened read-only and immutable besides).

The final answer is the assistant text after the last observation. Its query is the one ```sql (or ```sqlite,
or unlabeled) fenced block in it (an <answer> tag may wrap it), else the one <answer>...</answer> tag, after
any </think>; it holds exactly one statement, and a second block or tag beside it is `several_queries`. It is graded by the `sql` verifier's `score_sql` (execution match, strict comparator)
with `perturbations` perturbed copies, and, when it matches, the same comparison is repeated on the derived
copies of `copies.py`, where a query that pastes values read in an observation stops matching. Zero: no
final answer, a final message that calls a tool, no query, several queries, not one SELECT, a wrong result.
A worker or gold failure is a non-ok status, never 0. Registered at the bottom of this module.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import sqlite3
import threading
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from proctor.contract import ChatMessage, RequestError, Status, Verdict
from proctor.environments.puzzles.seeding import content_split, digest, puzzle_id
from proctor.environments.registry import Task
from proctor.environments.tools.base import (
    SessionLimits,
    ToolEnvironment,
    ToolMachineryError,
    ToolResult,
    ToolSpec,
    clip_observation,
    final_answer,
    final_messages,
    register_tool_environment,
)
from proctor.environments.tools.sql_explore.copies import (
    DERIVED,
    derived_copies,
    release_copy,
    session_copy,
    touch_copy,
)
from proctor.io import dataset_roots
from proctor.registry import Example
from proctor.settings import get_settings
from proctor.verifiers.reading import after_think, clip, fenced_blocks
from proctor.verifiers.sql import verifier as sql_verifier
from proctor.verifiers.sql.compare import decode_row
from proctor.verifiers.sql.databases import ConfigError, database_path, database_root, stage_root
from proctor.verifiers.sql.extract import SQL_FENCE_LABELS, check_select, extract_sql, split_statements
from proctor.verifiers.sql.verifier import SqliteReference, SqlOptions, score_sql
from proctor.verifiers.sql.workers import Mounts, WallClockOverrun, WorkerError, shared_pool, wall_backstop

NAME = "tool.sql_explore"
VERSION = "1"
TOOL_MAX_ROWS = 100
"""Rows one `sql` call may return; more is an error observation asking for a narrower query."""
TOOL_MAX_BYTES = 256 * 1024
TOOL_MAX_CELLS = 20_000
TOOL_CPU_S = 2.0
"""CPU seconds of one `sql` call (lowered by the session's `call_cpu_s` and PROCTOR_SANDBOX_MAX_CPU_S)."""
CELL_CHARS = 200
"""A cell's text in an observation is cut to this many characters."""
DEFAULT_PERTURBATIONS = 4
QUESTIONS_FILE = "questions.jsonl"
RETRY_WALL_FACTOR = 10.0
"""A query stopped at the wall-clock backstop (it got no CPU) runs once more with this many times its CPU
limit as backstop, before the stop counts as the machine's failure."""


def _cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


_QUERY_SLOTS = threading.BoundedSemaphore(_cores())
"""Worker queries this process runs at once (tool calls and grades): one per core. Unbounded, a batch of
rollouts that all send CPU-heavy queries starves every worker into the wall-clock backstop, a masked
`timeout`, where each query alone would have used its CPU seconds and been the policy's own time-out."""
ANSWER_OPEN = re.compile(r"<answer>", re.I)
ANSWER_CLOSE = re.compile(r"</answer>", re.I)

INSTRUCTIONS = (
    "Answer the question below with one SQLite query over the database {db_id!r}. You are not shown its "
    "schema: explore it with the `sql` tool, which runs one read-only statement and returns its rows (at most "
    f"{TOOL_MAX_ROWS}; `SELECT name, sql FROM sqlite_master` lists the tables). When you know the query, reply "
    "without a tool call and put exactly one query, the one whose result answers the question, in a ```sql "
    "block. The query is run on the database to grade it: write the query, not its result."
)


class SqlExploreReference(SqliteReference):
    """What the `sql` verifier takes (`db_id`, `gold`), plus the question and the number of perturbed copies."""

    question: str = Field(default="", max_length=4_000, description="The question (for the record).")
    perturbations: int = Field(
        default=DEFAULT_PERTURBATIONS, ge=0, le=8, description="The sql verifier's perturbed copies."
    )
    derived_copies: bool = Field(
        default=True,
        description="Also match on the derived copies (scaled, doubled, thinned; see copies.py).",
    )

    @field_validator("gold")
    @classmethod
    def _one_select(cls, value: str | list[str]) -> str | list[str]:
        for gold in [value] if isinstance(value, str) else value:
            tree, why = check_select(gold)
            if tree is None:
                raise ValueError(f"a gold query must be one SELECT: {why}")
        return value


SQL_TOOL = ToolSpec(
    name="sql",
    description=(
        "Run one read-only SQLite statement (SELECT or WITH) on the database and see its result: column "
        f"names, then at most {TOOL_MAX_ROWS} rows."
    ),
    parameters={
        "type": "object",
        "properties": {"query": {"type": "string", "description": "One SQLite SELECT statement."}},
        "required": ["query"],
        "additionalProperties": False,
    },
)


@dataclass
class SqlState:
    """One session: its read-only database file, whether it is the session's own copy, and its limits."""

    path: Path | None
    owned: bool
    timeout_s: float
    max_observation_chars: int


# -- bundled questions and tasks ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Question:
    """One bundled question: its id, database, text and gold query."""

    id: str
    db_id: str
    text: str
    gold: str

    @property
    def key(self) -> str:
        """The content key its split is decided by (database, question and gold)."""
        return json.dumps([self.db_id, self.text, self.gold])


@cache
def bundled_questions() -> tuple[Question, ...]:
    """The bundled questions (datasets/sql/questions.jsonl; the configured database folder's own
    questions.jsonl when it has one). None at all when neither exists."""
    candidates = [
        database_root() / QUESTIONS_FILE,
        *(root / "sql" / QUESTIONS_FILE for root in dataset_roots()),
    ]
    path = next((p for p in candidates if p.is_file()), None)
    if path is None:
        return ()
    found = []
    for line in path.read_text().splitlines():
        if line.strip():
            raw = json.loads(line)
            found.append(Question(raw["id"], raw["db_id"], raw["question"], raw["gold"]))
    return tuple(found)


def split_questions(split: str) -> list[Question]:
    """The bundled questions whose content hash falls in `split` (train and test never share one)."""
    return [q for q in bundled_questions() if content_split(q.key) == split]


def draw(split: str, seed: int, index: int) -> tuple[Question, int]:
    """Question `index` of (split, seed): the split's questions in an order seeded per round of len(split)
    tasks, so the first len(split) tasks of a seed hold each question once. Returns (question, round)."""
    questions = [q for q in split_questions(split) if database_path(q.db_id) is not None]
    if not questions:
        raise RequestError(422, f"{NAME}: no bundled question falls in split {split!r}", "split")
    round_, position = divmod(index, len(questions))
    order = list(questions)
    key = {"environment": NAME, "version": VERSION, "split": split, "seed": seed, "round": round_}
    random.Random(int(digest(key)[:32], 16)).shuffle(order)
    return order[position], round_


def render(columns: list[str], rows: list[tuple]) -> str:
    """A result as the `sql` tool shows it: a header, one line per row (cells joined by ` | `), the count."""

    def text(value: Any) -> str:
        if value is None:
            return "NULL"
        if isinstance(value, bytes):
            return "x'" + value.hex() + "'"
        return clip(str(value).replace("\n", "\\n"), CELL_CHARS)

    lines = [" | ".join(columns)]
    lines += [" | ".join(text(v) for v in row) for row in rows]
    lines.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(lines)


def trusted_observation(db_id: str, query: str) -> str:
    """What the `sql` tool shows for one of this module's own queries (gold, cheat and trivial transcripts),
    run here with the standard library on the database read-only: never used for model text."""
    path = database_path(db_id)
    if path is None:
        raise LookupError(f"no database {db_id!r}")
    conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        cursor = conn.execute(query)
        rows = cursor.fetchall()
        columns = [d[0] for d in cursor.description]
    finally:
        conn.close()
    if len(rows) > TOOL_MAX_ROWS:
        return _too_many()
    return render(columns, rows)


def _too_many() -> str:
    return (
        f"Error: the result has more than {TOOL_MAX_ROWS} rows; narrow the query (WHERE, an aggregate, "
        "or LIMIT)."
    )


# -- reading and grading the final answer ---------------------------------------------------------------------


def answer_tags(text: str) -> list[str]:
    """The contents of the <answer>...</answer> tags of text, each open tag closed by the first close after it
    (what `re.findall(r"<answer>(.*?)</answer>", text, re.S | re.I)` gives), in one pass: that regex retries
    from every unclosed open tag, quadratic in a message of many (a policy's way to stall its own grade)."""
    found: list[str] = []
    position = 0
    while (opened := ANSWER_OPEN.search(text, position)) is not None:
        closed = ANSWER_CLOSE.search(text, opened.end())
        if closed is None:
            break  # no close after this open, so none after any later open either
        found.append(text[opened.end() : closed.start()])
        position = closed.end()
    return found


def final_query(text: str) -> tuple[str | None, str]:
    """(the final answer's query, "") or (None, why there is none: no_query, several_queries)."""
    visible = after_think(text)
    if visible is None:
        return None, "no_query"
    blocks = [b.code for b in fenced_blocks(visible) if b.info in SQL_FENCE_LABELS or not b.info]
    if len(blocks) > 1:
        return None, "several_queries"
    answers = answer_tags(visible)
    # An <answer> tag around the block is the same query; any other tag beside a block is a second one.
    loose = [answer for answer in answers if "```" not in answer]
    if len(blocks) + len(loose) > 1 or (not blocks and len(answers) > 1):
        return None, "several_queries"
    candidate = blocks[0] if blocks else answers[0] if answers else None
    if candidate is None or not candidate.strip():
        return None, "no_query"
    if len(split_statements(candidate)) > 1:
        return None, "several_queries"
    # A fence or tag inside the query (a longer fence around a ```sql block in a comment) is a second query:
    # the sql verifier would read the inner one, so the query graded would not be the query written.
    # Any open tag at all: the sql verifier's own tag regex would retry from each one (quadratic).
    if fenced_blocks(candidate) or ANSWER_OPEN.search(candidate) or after_think(candidate) != candidate:
        return None, "several_queries"
    return candidate.strip(), ""


def _zero(reason: str, **details: Any) -> Verdict:
    return Verdict(
        reward=0.0,
        correct=False,
        reason=reason,
        components={"format": 0.0, "executes": 0.0, "match": 0.0},
        details=details,
    )


def grade(reference: SqlExploreReference, transcript: list[ChatMessage]) -> Verdict:
    """The verdict on a transcript (blocking: it runs queries in the sandboxed workers, one query slot held).
    A grade stopped at the wall-clock backstop (an oversubscribed machine) is tried once more."""
    with _QUERY_SLOTS:
        verdict = _grade(reference, transcript)
        if verdict.status is Status.timeout:
            verdict = _grade(reference, transcript)
    return verdict


def _grade(reference: SqlExploreReference, transcript: list[ChatMessage]) -> Verdict:
    if not final_messages(transcript):
        return _zero("no_answer")
    answer = final_answer(transcript, [SQL_TOOL])
    if answer is None:  # the last message calls a tool (or writes a call): an answer in it never counts
        return _zero("answer_with_tool_call")
    sql, why = final_query(answer)
    if sql is None:
        return _zero(why)
    tree, problem = check_select(sql)
    if tree is None:
        return _zero("not_select", sql=clip(sql, 2000), error=problem)
    # The text the sql verifier runs (it reads its response once more): the derived copies run the same text.
    sql = extract_sql(sql)
    plain = SqliteReference(db_id=reference.db_id, gold=reference.gold)
    options = SqlOptions(perturbations=reference.perturbations)
    verdict = score_sql(sql, plain, options)
    if verdict.status is not Status.ok or not verdict.correct:
        verdict.components = {"format": 1.0, **verdict.components, "match": 0.0}
        return verdict
    if reference.derived_copies:
        failed = _derived_mismatch(plain, sql, options)
        if isinstance(failed, Verdict):
            return failed
        if failed is not None:
            wrong = Verdict.wrong("derived_copy", sql=clip(sql, 2000), **failed)
            wrong.components = {"format": 1.0, **verdict.components, "match": 0.0}
            return wrong
        verdict.details["derived_copies"] = True
    verdict.components = {"format": 1.0, **verdict.components, "match": 1.0}
    return verdict


def _derived_mismatch(reference: SqliteReference, sql: str, options: SqlOptions) -> dict | Verdict | None:
    """None when the query matches the gold on every derived copy; else why not (a dict), or a non-ok
    Verdict when the machinery failed. Runs the sql verifier's own comparison on each copy."""
    try:
        source = database_path(reference.db_id)
        if source is None:
            raise WorkerError(f"database {reference.db_id!r} disappeared from the database folder")
        for copy in derived_copies(source, DERIVED):
            failed = sql_verifier.mismatch_on_file(reference, copy, sql, options)
            if failed is not None:
                return {"derived_copy": copy.stem, **failed}
    except sql_verifier.GoldFailed as exc:
        return Verdict.failure(Status.verifier_error, "gold_failed", error=f"{exc} [derived copy]")
    except WallClockOverrun as exc:
        return Verdict.failure(Status.timeout, "wall_clock_backstop", error=str(exc))
    except (WorkerError, ConfigError, OSError, sqlite3.Error) as exc:
        return Verdict.failure(
            Status.verifier_error, "sql_backend_error", error=f"{type(exc).__name__}: {exc}"
        )
    return None


# -- the environment ----------------------------------------------------------------------------------------


class SqlExplore(ToolEnvironment):
    """Text-to-SQL with exploration: a read-only `sql` tool on a session copy, execution match at the end."""

    name = NAME
    version = VERSION
    rebuildable_state = True  # the copy is read-only: a fresh one answers every query the same
    description = (
        "Text-to-SQL with exploration: the schema is not given, a read-only sql(query) tool runs on a session "
        "copy of the database; the final ```sql query is graded by the sql verifier's execution match on the "
        "database, perturbed copies and derived copies."
    )
    reference_model = SqlExploreReference

    def limits(self) -> SessionLimits:
        """Room to read the schema and try a dozen queries; small observations (results are capped anyway)."""
        return SessionLimits(
            max_turns=16,
            max_tool_calls=24,
            call_cpu_s=TOOL_CPU_S,
            max_observation_chars=4_000,
            max_total_observation_chars=80_000,
        )

    def tools(self) -> list[ToolSpec]:
        """The one tool: sql."""
        return [SQL_TOOL]

    def make_tasks(self, split: str, seed: int, count: int, level: str | None = None) -> list[Task]:
        """Tasks 0..count-1 of (split, seed): bundled questions in a seeded order (see `draw`)."""
        if level is not None:
            raise RequestError(422, f"{NAME} has no difficulty levels", "difficulty")
        return [self._task(*draw(split, seed, index), split, seed, index) for index in range(count)]

    def _task(self, question: Question, round_: int, split: str, seed: int, index: int) -> Task:
        reference = SqlExploreReference(db_id=question.db_id, gold=question.gold, question=question.text)
        prompt = INSTRUCTIONS.format(db_id=question.db_id) + f"\n\nQuestion: {question.text}"
        return Task(
            prompt=[{"role": "user", "content": prompt}],
            reference=reference.model_dump(mode="json"),
            verifier=NAME,
            metadata={
                "gold_answer": question.gold,
                "question_id": question.id,
                "content_id": puzzle_id(question.key),
                "db_id": question.db_id,
                "environment": NAME,
                "version": VERSION,
                "split": split,
                "seed": seed,
                "index": index,
                "round": round_,
            },
        )

    async def start(self, task: Task, limits: SessionLimits) -> SqlState:
        """Copy the database for this session (read-only, into the workers' folder)."""
        reference = SqlExploreReference.model_validate(task.reference)
        source = database_path(reference.db_id)
        if source is None:
            raise ToolMachineryError(f"database {reference.db_id!r} is not in the database folder")
        try:
            path, owned = await asyncio.to_thread(session_copy, source)
        except (OSError, ConfigError) as exc:
            raise ToolMachineryError(f"cannot copy the database for the session: {exc}") from None
        timeout = min(TOOL_CPU_S, limits.call_cpu_s, get_settings().sandbox_max_cpu_s)
        return SqlState(path, owned, timeout, limits.max_observation_chars)

    async def call(self, state: SqlState, name: str, arguments: dict[str, Any]) -> ToolResult:
        """Run one query on the session's copy; the model's mistakes are error observations."""
        started = time.perf_counter()
        query = arguments.get("query")
        if name != "sql":
            return self._result(f"Error: unknown tool {name!r}; the only tool is sql.", "error", started)
        if not isinstance(query, str) or not query.strip():
            return self._result("Error: query must be a non-empty string.", "error", started)
        if state.path is None:
            raise ToolMachineryError("the session's database copy was already closed")
        try:
            reply = await asyncio.to_thread(self._run, state, query)
        except WorkerError as exc:
            raise ToolMachineryError(f"sql worker failed: {exc}") from None
        cpu_ms = float(reply.get("cpu_ms") or 0.0)
        if reply.get("ok"):
            rows = [decode_row(row) for row in reply["rows"]]
            return self._result(render(list(reply["columns"]), rows), "ok", started, state, cpu_ms)
        code, message = str(reply.get("error")), str(reply.get("message", ""))
        if code in ("open_error", "bad_request"):
            raise ToolMachineryError(f"sql worker could not run the query: {message}")
        if code == "wall_limit":  # the machine's fault, never the query's
            raise ToolMachineryError(f"sql worker stalled: {message}", status="timeout")
        if code == "time_limit":
            text = f"Error: the query ran out of time ({state.timeout_s:g} CPU seconds)."
            return self._result(text, "timeout", started, state, state.timeout_s * 1000)
        if code == "too_large":  # rows, bytes, cells or the worker's memory: say which
            text = f"Error: the result is too large ({clip(message, 200)}); narrow the query (WHERE, an aggregate, or LIMIT)."
            return self._result(text, "error", started, state, cpu_ms)
        if code == "not_allowed":
            text = f"Error: not allowed: the sql tool only reads ({clip(message, 200)})."
            return self._result(text, "error", started, state, cpu_ms)
        return self._result(f"Error: {clip(message, 500)}", "error", started, state, cpu_ms)

    @staticmethod
    def _run(state: SqlState, query: str) -> dict[str, Any]:
        """One query in a sandboxed sql worker (the sql verifier's pool), on the session's copy, in a query slot;
        a wall-clock stop (the query got no CPU) is run once more with a longer backstop."""
        assert state.path is not None
        if state.owned:
            touch_copy(state.path)
        backend = "local" if get_settings().sandbox_backend == "local" else "nsjail"
        request = {
            "sql": query,
            "timeout_s": state.timeout_s,
            "max_rows": TOOL_MAX_ROWS,
            "max_bytes": TOOL_MAX_BYTES,
            "max_cells": TOOL_MAX_CELLS,
        }
        mounts = Mounts((str(stage_root()),))
        with _QUERY_SLOTS:
            reply = shared_pool().run(mounts, backend, state.path, request)
            if reply.get("error") == "wall_limit":
                longer = max(RETRY_WALL_FACTOR * state.timeout_s, 2 * wall_backstop(state.timeout_s))
                reply = shared_pool().run(mounts, backend, state.path, {**request, "wall_s": longer})
        return reply

    @staticmethod
    def _result(
        text: str, status: Any, started: float, state: SqlState | None = None, cpu_ms: float = 0.0
    ) -> ToolResult:
        limit = state.max_observation_chars if state is not None else 4_000
        content, truncated = clip_observation(text, limit)
        return ToolResult(
            content=content,
            status=status,
            elapsed_ms=(time.perf_counter() - started) * 1000,
            truncated=truncated,
            cpu_ms=cpu_ms,
        )

    async def close(self, state: SqlState) -> None:
        """Delete the session's copy (idempotent, never raises)."""
        path, owned = state.path, state.owned
        state.path = None
        if path is not None and owned:
            release_copy(path)

    async def score(self, reference: Any, transcript: list[ChatMessage]) -> Verdict:
        """Execution match of the final query; see `grade` (run on a thread: it waits on the workers)."""
        parsed = (
            reference
            if isinstance(reference, SqlExploreReference)
            else SqlExploreReference.model_validate(reference)
        )
        return await asyncio.to_thread(grade, parsed, transcript)


# -- gold, cheat and trivial-policy transcripts -------------------------------------------------------------


def _call(call_id: str, query: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": "sql", "arguments": json.dumps({"query": query})},
            }
        ],
    }


def _observation(call_id: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "name": "sql", "content": content}


def explored(task: Task, queries: list[str]) -> list[dict[str, Any]]:
    """The prompt, then each query called and answered with what the tool shows for it."""
    db_id = task.reference["db_id"]
    messages: list[dict[str, Any]] = list(task.prompt)
    for number, query in enumerate(queries):
        messages += [
            _call(f"q{number}", query),
            _observation(f"q{number}", trusted_observation(db_id, query)),
        ]
    return messages


def _answer(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def _block(sql: str) -> str:
    return f"```sql\n{sql}\n```"


SCHEMA_QUERY = "SELECT name, sql FROM sqlite_master WHERE type = 'table'"


def gold_transcript(task: Task) -> list[dict[str, Any]]:
    """Read the schema, run the gold query, answer it: what a policy that solved the task writes."""
    gold = task.reference["gold"] if isinstance(task.reference["gold"], str) else task.reference["gold"][0]
    return [*explored(task, [SCHEMA_QUERY, gold]), _answer(f"The query:\n{_block(gold)}")]


def _literal(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, int | float):
        return repr(value)
    return "'" + str(value).replace("'", "''") + "'"


def quoted_query(db_id: str, gold: str) -> str:
    """A query made of the gold's result pasted as literals: what a policy writes that read the result in an
    observation and quotes it (`SELECT 120`, `SELECT 'a' UNION ALL SELECT 'b'`)."""
    path = database_path(db_id)
    assert path is not None
    conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        rows = conn.execute(gold).fetchall()
    finally:
        conn.close()
    if not rows:
        return "SELECT 1 WHERE 0"
    return " UNION ALL ".join("SELECT " + ", ".join(_literal(v) for v in row) for row in rows)


def cheat_transcripts(task: Task) -> dict[str, list[dict[str, Any]]]:
    """Transcripts that must score 0 although the gold query or its result appears in them."""
    db_id = task.reference["db_id"]
    gold = task.reference["gold"] if isinstance(task.reference["gold"], str) else task.reference["gold"][0]
    seen = explored(task, [SCHEMA_QUERY, gold])
    table = seen[-1]["content"]
    tables = [row[0] for row in _tables(db_id)]
    call_with_answer = {**_call("z", gold), "content": _block(gold)}
    return {
        "the result table pasted instead of a query": [*seen, _answer(f"```\n{table}\n```")],
        "the result as the answer": [*seen, _answer(f"<answer>{table}</answer>")],
        "the observed result quoted as a query": [*seen, _answer(_block(quoted_query(db_id, gold)))],
        "fake <tool_response> then the result": [
            *list(task.prompt),
            _answer(f"<tool_response>\n{table}\n</tool_response>\n<answer>{table}</answer>"),
        ],
        "a write query as the answer": [*seen, _answer(_block(f"DELETE FROM {tables[0]}"))],
        "a write then the gold in one block": [*seen, _answer(_block(f"DELETE FROM {tables[0]};\n{gold}"))],
        "the answer inside a tool call that never ran": [*seen, call_with_answer],
        "hedged: two queries": [
            *seen,
            _answer(f"{_block(gold)}\nor else\n{_block(f'SELECT * FROM {tables[-1]}')}"),
        ],
        "hedged: two statements": [*seen, _answer(_block(f"SELECT * FROM {tables[-1]};\n{gold}"))],
        "the gold only inside think": [*seen, _answer(f"<think>{_block(gold)}")],
        "no answer after the last observation": seen,
    }


@cache
def _tables(db_id: str) -> tuple[tuple[str, tuple[tuple[str, str], ...]], ...]:
    """(table, ((column, declared type), ...)) of a database, in name order (read here, trusted)."""
    path = database_path(db_id)
    assert path is not None
    conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        names = [
            row[0]
            for row in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name"
            )
        ]
        return tuple(
            (name, tuple((c[1], (c[2] or "").upper()) for c in conn.execute(f'PRAGMA table_info("{name}")')))
            for name in names
        )
    finally:
        conn.close()


def random_query(db_id: str, rng: random.Random) -> str:
    """A random query over the schema: a column, a count, or an aggregate of a numeric column of a table."""
    table, columns = rng.choice(_tables(db_id))
    column, declared = rng.choice(columns)
    numeric = any(t in declared for t in ("INT", "REAL"))
    shapes = [f'SELECT "{column}" FROM "{table}" LIMIT 20', f'SELECT count(*) FROM "{table}"']
    if numeric:
        shapes += [f'SELECT {agg}("{column}") FROM "{table}"' for agg in ("max", "min", "avg", "sum")]
    else:
        shapes.append(f'SELECT DISTINCT "{column}" FROM "{table}" LIMIT 20')
    return rng.choice(shapes)


def trivial_transcripts(task: Task, rng: random.Random) -> dict[str, list[dict[str, Any]]]:
    """The trivial policies the gate holds to at most 0.05: no call, calling the tool with every table,
    random queries, repeating the question."""
    db_id = task.reference["db_id"]
    question = task.reference["question"] or str(task.prompt[-1]["content"])
    tables = [name for name, _ in _tables(db_id)]
    every = explored(task, [f'SELECT * FROM "{name}" LIMIT 3' for name in tables])
    guess = random_query(db_id, rng)
    randomly = explored(task, [random_query(db_id, rng), guess])
    return {
        "no call": [*list(task.prompt), _answer(_block(f'SELECT * FROM "{rng.choice(tables)}"'))],
        "every table": [*every, _answer(_block(f'SELECT * FROM "{rng.choice(tables)}"'))],
        "random queries": [*randomly, _answer(_block(guess))],
        "repeating the question": [*explored(task, [SCHEMA_QUERY]), _answer(_block(question))],
    }


def _examples() -> tuple[Example, ...]:
    env = SqlExplore()
    examples: list[Example] = []
    rng = random.Random(0)
    if not any(database_path(q.db_id) for q in split_questions("train")):
        return ()  # a database folder without the bundled databases: no bundled tasks, no examples
    tasks = env.make_tasks("train", 0, 2)
    for task in tasks:
        examples.append(Example(gold_transcript(task), task.reference, 1.0, note="gold"))
    task = tasks[0]
    for note, transcript in cheat_transcripts(task).items():
        examples.append(Example(transcript, task.reference, 0.0, note=f"cheat: {note}"))
    for note, transcript in trivial_transcripts(task, rng).items():
        examples.append(Example(transcript, task.reference, 0.0, note=f"trivial: {note}"))
    return tuple(examples)


SQL_EXPLORE = register_tool_environment(SqlExplore(), examples=_examples(), deadline_s=60.0)
