"""The `sql` verifier: execution match of the model's query against gold queries, on read-only SQLite or PostgreSQL.

Pipeline: extract the query from the response (extract.py) and check it is one read-only SELECT/WITH statement
(else `not_select`); compute the gold results once per (database content hash, gold query, comparator) and
cache them (databases.py); run the prediction in a sandboxed worker (workers.py, sqlite_worker.py) or on the
configured PostgreSQL server (postgres.py); compare with the chosen comparator (compare.py). With
`perturbations: K` the gold and the prediction also run on K perturbed copies (perturb.py) and must agree on
every one. A gold query that fails, a sandbox that cannot start, a server that cannot be reached: status
verifier_error, never a reward of 0.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, field_validator

from proctor.contract import Status, Verdict
from proctor.registry import BaseOptions, Example, VerifierSpec, register_verifier
from proctor.settings import get_settings, within_max_cpu_s
from proctor.verifiers.sql import compare
from proctor.verifiers.sql.compare import Comparison, GoldResult, Result
from proctor.verifiers.sql.databases import (
    ConfigError,
    Failure,
    cache_root,
    content_hash,
    database_path,
    gold_cache,
    known_databases,
    postgres_dsns,
    run_sqlite,
    staged,
    suite_databases,
)
from proctor.verifiers.sql.extract import (
    check_select,
    extract_sql,
    keyed_queries,
    remove_distinct,
    shape_of,
    spider_postprocess,
)
from proctor.verifiers.sql.perturb import perturbed_copy
from proctor.verifiers.sql.workers import WallClockOverrun, WorkerError

VERSION = "1.1.0"  # 1.1.0: results capped at 16 MiB of JSON and 4M cells
# Result caps of every run (gold or prediction): the JSON-encoded result (UTF-8, blobs in hex) and its cells
# (rows x columns). Past either the run is too_large (the prediction's reward 0; a gold's verifier_error),
# so producing, encoding, sending and decoding a result stays well inside its time limit and the memory of
# the worker and of the pool process.
MAX_BYTES = 16 * 1024 * 1024
MAX_CELLS = 4_000_000
MAX_GOLDS = 16
PRED_FAILURES = ("runtime_error", "time_limit", "too_large", "not_allowed")

GoldText = Annotated[str, Field(min_length=1, max_length=100_000)]
Golds = GoldText | Annotated[list[GoldText], Field(min_length=1, max_length=MAX_GOLDS)]


class SqliteReference(BaseModel):
    """A SQLite database of the configured folder and the gold query (or several acceptable ones)."""

    model_config = ConfigDict(extra="forbid")

    db_id: str = Field(min_length=1, max_length=128, description="<dir>/<db_id>/<db_id>.sqlite")
    gold: Golds = Field(description="Gold SELECT query, or a list of acceptable ones.")

    @field_validator("db_id")
    @classmethod
    def _known(cls, value: str) -> str:
        if database_path(value) is None:
            known = ", ".join(known_databases()[:20]) or "none"
            raise ValueError(f"unknown database {value!r}; known: {known}")
        return value

    @property
    def golds(self) -> list[str]:
        """The gold queries as a list."""
        return [self.gold] if isinstance(self.gold, str) else list(self.gold)


class PostgresReference(BaseModel):
    """A PostgreSQL connection named in PROCTOR_SQL_POSTGRES and the gold query (or several)."""

    model_config = ConfigDict(extra="forbid")

    dsn_name: str = Field(min_length=1, max_length=128, description="A name from PROCTOR_SQL_POSTGRES.")
    gold: Golds = Field(description="Gold SELECT query, or a list of acceptable ones.")

    @field_validator("dsn_name")
    @classmethod
    def _configured(cls, value: str) -> str:
        try:
            names = postgres_dsns()
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        if value not in names:
            raise ValueError(f"unknown dsn_name {value!r}; configured: {', '.join(sorted(names)) or 'none'}")
        return value

    @property
    def golds(self) -> list[str]:
        """The gold queries as a list."""
        return [self.gold] if isinstance(self.gold, str) else list(self.gold)


def _reference_kind(value: Any) -> str:
    if isinstance(value, PostgresReference) or (isinstance(value, dict) and "dsn_name" in value):
        return "PostgresReference"
    return "SqliteReference"


SqlReference = Annotated[
    Annotated[SqliteReference, Tag("SqliteReference")]
    | Annotated[PostgresReference, Tag("PostgresReference")],
    Discriminator(_reference_kind),
]


class SqlOptions(BaseOptions):
    """Options of the `sql` verifier."""

    comparator: Literal["strict", "spider_ts", "bird"] = Field(
        "strict", description="strict (default), spider_ts (Spider test-suite rules), bird (BIRD's set())."
    )
    rel_tol: float = Field(1e-6, ge=0, le=1, description="strict: relative tolerance for floats.")
    abs_tol: float = Field(0.0, ge=0, description="strict: absolute tolerance for floats.")
    perturbations: int = Field(
        0, ge=0, le=8, description="Also match on this many perturbed copies of the database (SQLite)."
    )
    timeout_s: float = Field(
        2.0,
        gt=0,
        le=30,
        description="Time limit of the predicted query, per database: CPU seconds on SQLite (a wall-clock "
        "backstop of 3x + 2 s guards an oversubscribed machine, status timeout); PostgreSQL's "
        "statement_timeout, which is wall-clock on the server. At most PROCTOR_SANDBOX_MAX_CPU_S.",
    )
    gold_timeout_s: float = Field(
        10.0,
        gt=0,
        le=60,
        description="Time limit of a gold query (as timeout_s). At most PROCTOR_SANDBOX_MAX_CPU_S.",
    )
    max_rows: int = Field(100_000, ge=1, le=1_000_000, description="Rows fetched at most; more is too_large.")
    keep_distinct: bool = Field(False, description="spider_ts: keep DISTINCT (Spider strips it by default).")
    test_suite: bool = Field(
        True,
        description="spider_ts: also match on every other *.sqlite file in the database's folder, as the "
        "test-suite evaluation does (its distilled databases sit next to the original).",
    )
    reward: Literal["match", "cell_f1", "tuple_f1"] = Field(
        "match", description="match: 0/1; cell_f1/tuple_f1: that component is the reward of a mismatch."
    )

    @field_validator("timeout_s", "gold_timeout_s")
    @classmethod
    def _within_cpu_maximum(cls, value: float) -> float:
        return within_max_cpu_s(value, unit="seconds")


class _Target:
    """Where queries run: a SQLite file (original or perturbed) or a PostgreSQL connection."""

    def __init__(self, reference: SqliteReference | PostgresReference, k: int = 0, path: Path | None = None):
        self.k = k
        if isinstance(reference, PostgresReference):
            self.dialect = "postgres"
            self.name = reference.dsn_name
            dsns = postgres_dsns()
            if self.name not in dsns:
                raise WorkerError(f"dsn_name {self.name!r} is not configured in this process")
            self.dsn = dsns[self.name]
            # A server's content has no cheap hash: key by the connection itself, and keep its gold results in
            # memory only (see gold_result), so a changed database or DSN never serves stale gold rows.
            dsn_hash = hashlib.sha256(self.dsn.encode()).hexdigest()[:16]
            self.identity = f"postgres:{self.name}:{dsn_hash}"
            self.path = None
        else:
            self.dialect = "sqlite"
            path = path or database_path(reference.db_id)
            if path is None:
                raise WorkerError(f"database {reference.db_id!r} disappeared from the database folder")
            db_hash = content_hash(path)
            perturbed = cache_root() / "perturbed"  # also checks, every time, that the cache is allowed there
            if k:
                path = perturbed_copy(path, db_hash, k, perturbed)
            self.path = staged(path, f"{db_hash}-{k}.sqlite")
            self.identity = f"sqlite:{db_hash}:{k}"

    def run(self, sql: str, timeout_s: float, max_rows: int) -> Result | Failure:
        """Run sql here; WorkerError when the machinery fails. The time limit is at most the operator's
        PROCTOR_SANDBOX_MAX_CPU_S (asked-for options above it are 422s; this bounds the defaults)."""
        timeout_s = min(timeout_s, get_settings().sandbox_max_cpu_s)
        if self.path is not None:
            return run_sqlite(self.path, sql, timeout_s, max_rows, MAX_BYTES, MAX_CELLS)
        from proctor.verifiers.sql.postgres import run_postgres

        return run_postgres(self.name, self.dsn, sql, timeout_s, max_rows, MAX_BYTES, MAX_CELLS)


class GoldFailed(Exception):
    """A gold query that is not a SELECT or does not run: the reference is broken."""


def gold_result(target: _Target, gold: str, options: SqlOptions) -> GoldResult:
    """The gold query's result on target, from the cache or computed (and cached) now."""
    # The verifier's version is in the key, so a new release never reads results an older one computed.
    variant = f"{VERSION}:{options.comparator}:{options.keep_distinct}:{options.max_rows}"
    key = gold_cache.key(target.identity, gold, variant)
    cached = gold_cache.get(key)
    if cached is not None:
        return cached
    found = compute_gold(target, gold, options)
    gold_cache.put(key, found, persist=target.path is not None)
    return found


@functools.lru_cache(maxsize=4096)
def parsed_gold(gold: str, dialect: str) -> Any:
    """The parsed gold query (callers only read it), or None when it is not one SELECT."""
    return check_select(gold, dialect)[0]


def compute_gold(target: _Target, gold: str, options: SqlOptions) -> GoldResult:
    """Run the gold query (and, for an ordered strict gold, its sort keys and tie groups)."""
    tree, why = check_select(gold, target.dialect)
    if tree is None:
        raise GoldFailed(f"gold query is not one SELECT: {why}")
    sql = gold
    if options.comparator == "spider_ts":
        sql = spider_postprocess(sql)
        if not options.keep_distinct:
            sql = remove_distinct(sql)
    result = target.run(sql, options.gold_timeout_s, options.max_rows)
    if isinstance(result, Failure):
        raise GoldFailed(f"gold query failed ({result.code}): {result.message}")
    if options.comparator != "strict" or not shape_of(tree).ordered:
        return GoldResult(result)
    return _with_ties(target, tree, GoldResult(result, ordered=True), options)


def _with_ties(target: _Target, tree: Any, gold: GoldResult, options: SqlOptions) -> GoldResult:
    """Add each row's sort key and, under LIMIT, the full groups of rows tied at the cut."""
    width = len(gold.result.columns)
    queries = keyed_queries(tree, width, target.dialect)
    if queries is None:
        return gold
    keyed_sql, unlimited_sql, key_index = queries
    if all(index < width for index in key_index):
        keyed: Result | Failure = gold.result  # every sort key is an output column: no second run
    else:
        keyed = target.run(keyed_sql, options.gold_timeout_s, options.max_rows)
    if isinstance(keyed, Failure) or len(keyed.rows) != len(gold.result.rows):
        return gold  # compare positionally
    # Rows and keys from one execution: a second run may order tied rows (or pick them at a LIMIT) otherwise.
    gold.result = Result(gold.result.columns, [row[:width] for row in keyed.rows])
    gold.keys = [tuple(row[i] for i in key_index) for row in keyed.rows]
    if unlimited_sql is None:
        return gold
    whole = target.run(unlimited_sql, options.gold_timeout_s, options.max_rows)
    if isinstance(whole, Failure):
        return gold
    run_sizes: dict[tuple, int] = {}
    for key in gold.keys:
        run_sizes[key] = run_sizes.get(key, 0) + 1
    groups: dict[tuple, list[tuple]] = {}
    for row in whole.rows:
        key = tuple(row[i] for i in key_index)
        if key in run_sizes:
            groups.setdefault(key, []).append(row[:width])
    gold.ties = {key: rows for key, rows in groups.items() if len(rows) > run_sizes[key]}
    return gold


def compare_with(gold: GoldResult, pred: Result, gold_sql: str, options: SqlOptions) -> Comparison:
    """Apply the chosen comparator."""
    if options.comparator == "strict":
        return compare.compare_strict(gold, pred, options.rel_tol, options.abs_tol)
    if options.comparator == "bird":
        if compare.bird_eq(gold.result.rows, pred.rows):
            return Comparison(True)
        return Comparison(False, "rows", {"rule": "bird: set(predicted) == set(gold)"})
    order = compare.spider_order_matters(gold_sql)
    if compare.spider_result_eq(gold.result.rows, pred.rows, order):
        return Comparison(True)
    reason = (
        "columns"
        if gold.result.rows and pred.rows and len(gold.result.rows[0]) != len(pred.rows[0])
        else "rows"
    )
    return Comparison(False, reason, {"rule": "spider test-suite result_eq", "order_matters": order})


def _components(
    gold: GoldResult | None, pred: Result | None, gold_tree: Any, pred_tree: Any
) -> dict[str, float]:
    components = {"executes": 1.0 if pred is not None else 0.0, "cell_f1": 0.0, "tuple_f1": 0.0}
    if gold is not None and pred is not None:
        components["cell_f1"] = round(compare.cell_f1(gold.result.rows, pred.rows), 6)
        components["tuple_f1"] = round(compare.tuple_f1(gold.result.rows, pred.rows), 6)
    jaccard = 0.0
    if gold_tree is not None and pred_tree is not None:
        g, p = shape_of(gold_tree), shape_of(pred_tree)
        items_g = {f"t:{t}" for t in g.tables} | {f"c:{c}" for c in g.columns}
        items_p = {f"t:{t}" for t in p.tables} | {f"c:{c}" for c in p.columns}
        jaccard = compare.jaccard(items_g, items_p)
    components["schema_jaccard"] = round(jaccard, 6)
    return components


def _wrong(reason: str, components: dict[str, float], options: SqlOptions, **details: Any) -> Verdict:
    verdict = Verdict.wrong(reason, **details)
    verdict.components = components
    if options.reward != "match":
        verdict.reward = components.get(options.reward, 0.0)
    return verdict


def score_sql(response: str, reference: SqliteReference | PostgresReference, options: SqlOptions) -> Verdict:
    """Score one response (see the module docstring)."""
    try:
        return _score(response, reference, options)
    except GoldFailed as exc:
        return Verdict.failure(Status.verifier_error, "gold_failed", error=str(exc))
    except WallClockOverrun as exc:
        return Verdict.failure(Status.timeout, "wall_clock_backstop", error=str(exc))
    except (WorkerError, ConfigError, OSError) as exc:
        return Verdict.failure(
            Status.verifier_error, "sql_backend_error", error=f"{type(exc).__name__}: {exc}"
        )


def _score(response: str, reference: SqliteReference | PostgresReference, options: SqlOptions) -> Verdict:
    target = _Target(reference)
    golds = reference.golds
    gold_results = []
    for gold in golds:
        try:
            gold_results.append(gold_result(target, gold, options))
        except GoldFailed as exc:
            raise GoldFailed(f"{exc} [gold: {gold[:300]}]") from None
    gold_trees = [parsed_gold(gold, target.dialect) for gold in golds]
    sql = extract_sql(response)
    pred_tree, why = check_select(sql, target.dialect)
    base = {"sql": sql[:2000]}
    if pred_tree is None:
        return _wrong("not_select", _components(None, None, None, None), options, **base, error=why)
    pred_sql = sql
    if options.comparator == "spider_ts":
        pred_sql = spider_postprocess(pred_sql)
        if not options.keep_distinct:
            pred_sql = remove_distinct(pred_sql)
    pred = target.run(pred_sql, options.timeout_s, options.max_rows)
    if isinstance(pred, Failure):
        reason = "runtime_error" if pred.code == "not_allowed" else pred.code
        components = _components(None, None, gold_trees[0], pred_tree)
        return _wrong(reason, components, options, **base, error=pred.message)
    outcomes = [compare_with(g, pred, text, options) for g, text in zip(gold_results, golds, strict=True)]
    best = next((i for i, o in enumerate(outcomes) if o.match), 0)
    components = _components(gold_results[best], pred, gold_trees[best], pred_tree)
    if not outcomes[best].match:
        details = {**base, **outcomes[best].details}
        if len(golds) > 1:
            details["golds_tried"] = len(golds)
        return _wrong(outcomes[best].reason or "rows", components, options, **details)
    for k in range(1, options.perturbations + 1 if target.path is not None else 1):
        failed = _mismatch_on(_Target(reference, k), golds, pred_sql, options)
        if failed is not None:
            return _wrong("perturbation", components, options, **base, perturbed_copy=k, **failed)
    suite = (
        suite_databases(reference.db_id)
        if options.comparator == "spider_ts" and options.test_suite and target.path is not None
        else []
    )
    for sibling in suite:
        try:
            failed = _mismatch_on(_Target(reference, path=sibling), golds, pred_sql, options)
        except GoldFailed as exc:
            raise GoldFailed(f"{exc} [test-suite database {sibling.name}]") from None
        if failed is not None:
            reason = failed.pop("copy_reason") or "rows"
            return _wrong(reason, components, options, **base, test_suite_database=sibling.name, **failed)
    verdict = Verdict.right(**base, matched_gold=best, rows=len(pred.rows))
    verdict.components = components
    if suite:
        verdict.details["test_suite_databases"] = 1 + len(suite)
    if options.perturbations:
        key = "perturbed_copies" if target.path is not None else "perturbations_skipped"
        verdict.details[key] = options.perturbations if target.path is not None else "PostgreSQL"
    return verdict


def mismatch_on_file(
    reference: SqliteReference, path: Path, pred_sql: str, options: SqlOptions
) -> dict[str, Any] | None:
    """None when the prediction matches some gold when both run on the SQLite file at `path` (a copy derived
    from the reference's database), else why not; raises GoldFailed, WorkerError as the verifier does."""
    return _mismatch_on(_Target(reference, path=path), reference.golds, pred_sql, options)


def _mismatch_on(
    target: _Target, golds: list[str], pred_sql: str, options: SqlOptions
) -> dict[str, Any] | None:
    """None when the prediction matches some gold on another database (perturbed copy, test suite), else why not."""
    pred = target.run(pred_sql, options.timeout_s, options.max_rows)
    if isinstance(pred, Failure):
        return {"copy_reason": pred.code, "error": pred.message}
    first: Comparison | None = None
    for gold in golds:
        outcome = compare_with(gold_result(target, gold, options), pred, gold, options)
        if outcome.match:
            return None
        first = first or outcome
    assert first is not None
    return {"copy_reason": first.reason, **first.details}


EXAMPLE_GOLD = "SELECT genre, count(*) FROM book GROUP BY genre"
EXAMPLES = (
    Example(
        "```sql\nSELECT genre, count(book_id) FROM book GROUP BY 1 ORDER BY 2\n```",
        {"db_id": "library", "gold": EXAMPLE_GOLD},
        1.0,
        note="a different query with the same bag of rows",
    ),
    Example(
        "<answer>SELECT count(*) FROM member WHERE member_id NOT IN (SELECT member_id FROM loan)</answer>",
        {
            "db_id": "library",
            "gold": "SELECT count(*) FROM member AS m LEFT JOIN loan AS l USING (member_id) "
            "WHERE l.loan_id IS NULL",
        },
        1.0,
        options={"perturbations": 2},
        note="equivalent under the schema, so it matches on perturbed copies too",
    ),
    Example(
        "SELECT 5",
        {
            "db_id": "library",
            "gold": "SELECT count(*) FROM member WHERE member_id NOT IN (SELECT member_id FROM loan)",
        },
        0.0,
        note="a hard-coded constant that equals the gold's count is caught by perturbed copies",
        options={"perturbations": 2},
    ),
    Example(
        "SELECT genre, count(*) FROM book GROUP BY genre; DROP TABLE book",
        {"db_id": "library", "gold": EXAMPLE_GOLD},
        0.0,
        note="the last statement is a DROP: not_select",
    ),
    Example(
        "SELECT city FROM branch UNION SELECT city FROM branch",
        {"db_id": "library", "gold": "SELECT city FROM branch"},
        0.0,
        note="set semantics lose the duplicate city rows that bag semantics keep",
    ),
    Example(
        "SELECT title FROM book ORDER BY title DESC",
        {"db_id": "library", "gold": "SELECT title FROM book ORDER BY title"},
        0.0,
        note="right rows, wrong order under a top-level ORDER BY",
    ),
)

SPEC = register_verifier(
    VerifierSpec(
        name="sql",
        version=VERSION,
        score=score_sql,
        reference=SqlReference,
        options=SqlOptions,
        description="Text-to-SQL execution match: the model's SELECT and the gold query run read-only "
        "(sandboxed SQLite or PostgreSQL) and their results are compared (strict bag/order/typed semantics, "
        "or Spider test-suite / BIRD rules).",
        examples=EXAMPLES,
        execution="pool",
        deadline_s=60.0,
    )
)
