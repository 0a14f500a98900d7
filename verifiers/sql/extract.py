"""Find the SQL in a model response and decide, with sqlglot, whether it is one read-only SELECT/WITH statement.

Extraction order: the last ```sql fenced block (or the last unlabeled fence), else the last <answer>...</answer>
tag, else the whole response; of that text, the last statement. Parsing never executes anything; the jailed
worker's authorizer is the real guard, this only gives a precise reason (`not_select`) and the query's shape
(top-level ORDER BY, LIMIT, tables and columns) for the comparators.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.tokens import TokenType

from proctor.verifiers.reading import after_think, fenced_blocks

logging.getLogger("sqlglot").setLevel(logging.ERROR)  # it warns on every unsupported statement it meets

MAX_SQL_CHARS = 100_000
SQL_FENCE_LABELS = ("sql", "sqlite", "postgresql", "postgres")
ANSWER_TAG = re.compile(r"<(/?)answer>", re.I)


def closed_answer_tags(text: str) -> list[str]:
    """Contents of the <answer>...</answer> pairs in order, in one pass (a regex `<answer>(.*?)</answer>` retries
    from every unclosed open tag: quadratic on a response full of them)."""
    contents: list[str] = []
    start = -1
    for tag in ANSWER_TAG.finditer(text):
        if not tag.group(1):
            if start < 0:  # as the regex did: a pair runs from the first open tag to the next close
                start = tag.end()
        elif start >= 0:
            contents.append(text[start : tag.start()])
            start = -1
    return contents


READ_ONLY = (exp.Select, exp.Union, exp.Intersect, exp.Except)
# Anywhere inside a statement these mean it is not a pure query.
WRITES = (
    exp.Insert,
    exp.Update,
    exp.Delete,
    exp.Drop,
    exp.Create,
    exp.Alter,
    exp.Command,
    exp.Pragma,
    exp.Attach,
    exp.Detach,
    exp.Into,
    exp.Merge,
    exp.TruncateTable,
    exp.Transaction,
    exp.Commit,
    exp.Rollback,
)


@dataclass
class Shape:
    """What the comparators need to know about one parsed query."""

    ordered: bool = False
    order_terms: list[exp.Expression] = field(default_factory=list)
    has_limit: bool = False
    tables: set[str] = field(default_factory=set)
    columns: set[str] = field(default_factory=set)


def extract_sql(response: str) -> str:
    """The SQL text of a response: last ```sql block, else last <answer> tag, else the response's last statement.

    Only what follows the last </think> counts (a draft in the reasoning is not the answer); an unterminated
    <think> means no answer at all, so the empty string.
    """
    visible = after_think(response)
    if visible is None:
        return ""
    blocks = fenced_blocks(visible)
    sql_blocks = [block.code for block in blocks if block.info in SQL_FENCE_LABELS]
    unlabeled = [block.code for block in blocks if not block.info]
    if sql_blocks:
        text = sql_blocks[-1]
    elif unlabeled:  # a ```python or ```text block is not the answer
        text = unlabeled[-1]
    else:
        answers = closed_answer_tags(visible)
        text = answers[-1] if answers else visible
    return last_statement(text.strip())


def last_statement(text: str) -> str:
    """The last non-empty statement of text, split on top-level semicolons (strings and comments respected)."""
    statements = split_statements(text)
    return statements[-1] if statements else ""


def split_statements(text: str) -> list[str]:
    """Statements of text, split at semicolons outside quotes and comments; empty pieces dropped."""
    try:
        tokens = sqlglot.tokenize(text, read="sqlite")
    except SqlglotError:
        return [text.strip()] if text.strip() else []
    pieces, start, has_code = [], 0, False
    for token in tokens:
        if token.token_type == TokenType.SEMICOLON:
            if has_code:
                pieces.append(text[start : token.start].strip())
            start, has_code = token.end + 1, False
        else:
            has_code = True
    if has_code:
        pieces.append(text[start:].strip())
    return pieces


def check_select(sql: str, dialect: str = "sqlite") -> tuple[exp.Expression | None, str]:
    """(parsed tree, "") for exactly one read-only SELECT/WITH statement, else (None, why it is not)."""
    if not sql.strip():
        return None, "empty query"
    if len(sql) > MAX_SQL_CHARS:
        return None, f"query longer than {MAX_SQL_CHARS} characters"
    try:
        trees = [tree for tree in sqlglot.parse(sql, read=dialect) if tree is not None]
    except (SqlglotError, RecursionError, ValueError) as exc:
        return None, f"does not parse: {str(exc).splitlines()[0][:200]}"
    if not trees:
        return None, "no statement (empty or only comments)"
    if len(trees) > 1:
        return None, f"{len(trees)} statements; exactly one is allowed"
    tree = trees[0]
    if not isinstance(tree, READ_ONLY):
        return None, f"a {type(tree).__name__.upper()} statement, not a SELECT"
    bad = next(iter(tree.find_all(*WRITES)), None)
    if bad is not None:
        return None, f"contains {type(bad).__name__.upper()}"
    return tree, ""


def shape_of(tree: exp.Expression) -> Shape:
    """Top-level ORDER BY terms and LIMIT, plus the tables and columns the query names."""
    order = tree.args.get("order")
    terms = list(order.expressions) if order is not None else []
    return Shape(
        ordered=bool(terms),
        order_terms=terms,
        has_limit=tree.args.get("limit") is not None or tree.args.get("offset") is not None,
        tables={table.name.lower() for table in tree.find_all(exp.Table) if table.name},
        columns={column.name.lower() for column in tree.find_all(exp.Column) if column.name},
    )


def remove_distinct(sql: str) -> str:
    """The query with every DISTINCT keyword cut out, as Spider's test-suite does unless keep_distinct is set."""
    try:
        tokens = sqlglot.tokenize(sql, read="sqlite")
    except SqlglotError:
        return re.sub(r"(?i)\bdistinct\b", "", sql)
    out, start = [], 0
    for token in tokens:
        if token.token_type == TokenType.DISTINCT:
            out.append(sql[start : token.start])
            start = token.end + 1
    out.append(sql[start:])
    return "".join(out)


_CUR_YEAR = re.compile(r"YEAR\s*\(\s*CURDATE\s*\(\s*\)\s*\)\s*", re.IGNORECASE)


def spider_postprocess(sql: str) -> str:
    """Spider's `postprocess` (join '> =', '< =', '! =') and its executor's `replace_cur_year` (-> 2020)."""
    sql = sql.replace("> =", ">=").replace("< =", "<=").replace("! =", "!=")
    return _CUR_YEAR.sub("2020", sql)


def keyed_queries(
    tree: exp.Expression, columns: int, dialect: str
) -> tuple[str, str | None, list[int]] | None:
    """For a gold query with top-level ORDER BY: (query with the sort keys appended as extra columns,
    the same without LIMIT/OFFSET or None when it has none, indices of sort keys that are output columns).

    Sort terms that are output positions (ORDER BY 2) or output aliases are read from the output; others are
    appended as columns, which leaves a non-DISTINCT query's rows as they were. Returns None when the keys
    cannot be added (compound or DISTINCT queries with expression terms).
    """
    terms = tree.args.get("order").expressions if tree.args.get("order") is not None else []
    if not terms:
        return None
    keyed = tree.copy()
    aliases = [select.alias_or_name.lower() for select in tree.selects]
    extra: list[exp.Expression] = []
    key_index: list[int] = []
    for term in terms:
        inner = term.this
        if isinstance(inner, exp.Literal) and inner.is_int and 1 <= int(inner.name) <= columns:
            key_index.append(int(inner.name) - 1)
        elif isinstance(inner, exp.Column) and not inner.table and inner.name.lower() in aliases:
            key_index.append(aliases.index(inner.name.lower()))
        elif isinstance(keyed, exp.Select) and not tree.args.get("distinct"):
            # Extra columns would change what DISTINCT keeps; after a `*` they are fine (`SELECT *, k`).
            key_index.append(columns + len(extra))
            extra.append(inner.copy())
        else:
            return None
    if extra:
        keyed = keyed.select(*extra, copy=False)
    unlimited = None
    if tree.args.get("limit") is not None or tree.args.get("offset") is not None:
        bare = keyed.copy()
        bare.set("limit", None)
        bare.set("offset", None)
        unlimited = bare.sql(dialect=dialect)
    return keyed.sql(dialect=dialect), unlimited, key_index
