"""Compare a predicted query's result with the gold result: `strict`, Spider test-suite's and BIRD's rules.

Values arrive as plain data (int, float, str, None, bytes). `strict` is typed: numbers equal numbers within a
relative tolerance (int 3 equals float 3.0, never the string '3'), NULL equals only NULL, strings and blobs
exactly. Rows are bags (duplicates count); columns compare in the selected order; row order matters only when
the gold query has a top-level ORDER BY, and then rows tied on the sort keys may come in any order, also at
a LIMIT boundary (any of the tied rows beyond the cut may stand in).
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

Row = tuple[Any, ...]
MATCH_SEARCH_ROWS = 200  # unpaired rows given a pairwise search (quadratic)


@dataclass
class Result:
    """One query's result: column names and rows of plain values."""

    columns: list[str]
    rows: list[Row]


@dataclass
class GoldResult:
    """The gold result plus, when it is ordered, each row's sort key and the full groups of tied rows."""

    result: Result
    ordered: bool = False
    keys: list[Row] | None = None
    ties: dict[Row, list[Row]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """A JSON-safe form for the disk cache."""
        return {
            "columns": self.result.columns,
            "rows": [encode_row(row) for row in self.result.rows],
            "ordered": self.ordered,
            "keys": None if self.keys is None else [encode_row(key) for key in self.keys],
            "ties": [[encode_row(key), [encode_row(row) for row in rows]] for key, rows in self.ties.items()],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> GoldResult:
        """Inverse of to_json."""
        return cls(
            result=Result(data["columns"], [decode_row(row) for row in data["rows"]]),
            ordered=data["ordered"],
            keys=None if data["keys"] is None else [decode_row(key) for key in data["keys"]],
            ties={decode_row(key): [decode_row(row) for row in rows] for key, rows in data["ties"]},
        )


@dataclass
class Comparison:
    """A comparison's verdict: match, the reason when not, and the first differing row."""

    match: bool
    reason: str | None = None
    details: dict[str, Any] = field(default_factory=dict)


def decode_value(value: Any) -> Any:
    """A worker's JSON cell as a Python value (blobs come as {"$b": hex})."""
    if isinstance(value, dict) and "$b" in value:
        return bytes.fromhex(value["$b"])
    return value


def decode_row(row: Sequence[Any]) -> Row:
    """A JSON row as a tuple of Python values."""
    return tuple(decode_value(value) for value in row)


def encode_row(row: Row) -> list[Any]:
    """A row as JSON-safe values."""
    return [{"$b": value.hex()} if isinstance(value, bytes) else value for value in row]


def show_row(row: Row | None) -> list[Any] | None:
    """A row for details: blobs abbreviated, long strings cut."""
    if row is None:
        return None
    shown = []
    for value in row:
        if isinstance(value, bytes):
            shown.append(f"<blob {len(value)} bytes>")
        elif isinstance(value, str) and len(value) > 200:
            shown.append(value[:200] + "...")
        else:
            shown.append(value)
    return shown


# -- strict ------------------------------------------------------------------------------------------


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def values_equal(a: Any, b: Any, rel_tol: float, abs_tol: float) -> bool:
    """Typed equality: numbers within tolerance (NaN equals NaN), NULL only NULL, others exactly and same type."""
    if a is None or b is None:
        return a is None and b is None
    if _is_number(a) and _is_number(b):
        if isinstance(a, int) and isinstance(b, int):
            return a == b
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return math.isclose(a, b, rel_tol=rel_tol, abs_tol=abs_tol)
    if type(a) is not type(b):
        return False
    return a == b


def rows_equal(a: Row, b: Row, rel_tol: float, abs_tol: float) -> bool:
    """Two rows equal cell by cell under values_equal."""
    return len(a) == len(b) and all(values_equal(x, y, rel_tol, abs_tol) for x, y in zip(a, b, strict=True))


def sort_key(row: Row) -> tuple:
    """A total order over rows of mixed types: NULL < numbers < text < blobs, as SQLite sorts."""
    key = []
    for value in row:
        if value is None:
            key.append((0, 0))
        elif _is_number(value):
            key.append((1, -math.inf if math.isnan(value) else value))
        elif isinstance(value, str):
            key.append((2, value))
        elif isinstance(value, bytes):
            key.append((3, value))
        else:
            key.append((4, repr(value)))
    return tuple(key)


def bag_equal(gold: list[Row], pred: list[Row], rel_tol: float, abs_tol: float) -> tuple[bool, int]:
    """Whether two bags of rows are equal; the int is -1 (kept for callers that unpack a pair)."""
    if len(gold) != len(pred):
        return False, -1
    return sub_bag(pred, gold, rel_tol, abs_tol), -1


def _has_float(rows: list[Row]) -> bool:
    return any(isinstance(value, float) for row in rows for value in row)


def _merge(part: list[Row], whole: list[Row], rel_tol: float, abs_tol: float) -> tuple[list[Row], list[Row]]:
    """Pair equal rows of two bags in one pass over both, sorted; (unpaired of part, unpaired of whole).

    Numbers within tolerance of each other sort next to each other, so the pass pairs every row that has a
    partner, except where tolerance-equal floats sort apart around another column's values.
    """
    p, w = sorted(part, key=sort_key), sorted(whole, key=sort_key)
    p_keys, w_keys = [sort_key(row) for row in p], [sort_key(row) for row in w]
    i = j = 0
    left_p: list[Row] = []
    left_w: list[Row] = []
    while i < len(p) and j < len(w):
        if rows_equal(p[i], w[j], rel_tol, abs_tol):
            i, j = i + 1, j + 1
        elif p_keys[i] < w_keys[j]:
            left_p.append(p[i])
            i += 1
        else:
            left_w.append(w[j])
            j += 1
    return left_p + p[i:], left_w + w[j:]


def sub_bag(part: list[Row], whole: list[Row], rel_tol: float, abs_tol: float) -> bool:
    """Whether every row of part can be matched to a distinct row of whole.

    A sorted merge pairs rows in O(n log n); only the few rows it leaves unpaired, when they hold floats, get
    a pairwise search. (A pairwise search over whole results took 19 s for two 2000-row results that differ:
    a wrong query returning many rows would have run into the deadline, a masked score, instead of a 0.)
    """
    if len(part) > len(whole):
        return False
    left_p, left_w = _merge(part, whole, rel_tol, abs_tol)
    if not left_p:
        return True
    if len(left_p) > MATCH_SEARCH_ROWS or not _has_float(left_p):
        return False
    for row in left_p:
        for index, candidate in enumerate(left_w):
            if rows_equal(row, candidate, rel_tol, abs_tol):
                del left_w[index]
                break
        else:
            return False
    return True


def first_difference(gold: list[Row], pred: list[Row], rel_tol: float, abs_tol: float) -> dict[str, Any]:
    """Details naming a gold row missing from the prediction and a predicted row not in the gold (sorted order)."""
    missing, extra = _merge(gold, pred, rel_tol, abs_tol)
    return {
        "first_missing_row": show_row(missing[0] if missing else None),
        "first_extra_row": show_row(extra[0] if extra else None),
    }


def compare_strict(gold: GoldResult, pred: Result, rel_tol: float = 1e-6, abs_tol: float = 0.0) -> Comparison:
    """The `strict` comparator (see the module docstring)."""
    g_rows, p_rows = gold.result.rows, pred.rows
    g_cols, p_cols = len(gold.result.columns), len(pred.columns)
    if g_cols != p_cols:
        return Comparison(False, "columns", {"gold_columns": g_cols, "predicted_columns": p_cols})
    counts = {"gold_rows": len(g_rows), "predicted_rows": len(p_rows)}
    same_bag, _ = bag_equal(g_rows, p_rows, rel_tol, abs_tol)
    if not gold.ordered:
        if same_bag:
            return Comparison(True)
        return Comparison(False, "rows", {**counts, **first_difference(g_rows, p_rows, rel_tol, abs_tol)})
    if len(g_rows) != len(p_rows):
        return Comparison(False, "rows", {**counts, **first_difference(g_rows, p_rows, rel_tol, abs_tol)})
    position = ordered_mismatch(gold, p_rows, rel_tol, abs_tol)
    if position is None:
        return Comparison(True)
    where = {"first_differing_position": position, "gold_row": show_row(g_rows[position])}
    where["predicted_row"] = show_row(p_rows[position])
    if same_bag:
        return Comparison(False, "order", {**counts, **where})
    if gold.ties and sub_bag_with_ties(gold, p_rows, rel_tol, abs_tol):
        return Comparison(False, "order", {**counts, **where})
    return Comparison(
        False, "rows", {**counts, **where, **first_difference(g_rows, p_rows, rel_tol, abs_tol)}
    )


def sub_bag_with_ties(gold: GoldResult, pred: list[Row], rel_tol: float, abs_tol: float) -> bool:
    """Whether the prediction holds the right rows up to tied substitutes (so the problem is only order)."""
    pool = [row for rows in gold.ties.values() for row in rows]
    fixed = [row for row, key in zip(gold.result.rows, gold.keys or [], strict=False) if key not in gold.ties]
    return sub_bag(pred, fixed + pool, rel_tol, abs_tol)


def ordered_mismatch(gold: GoldResult, pred: list[Row], rel_tol: float, abs_tol: float) -> int | None:
    """Position of the first run of tied gold rows the prediction does not reproduce, or None if it matches.

    Without sort keys, rows compare position by position. With them, the gold splits into runs of equal keys;
    the prediction's rows at a run's positions must be a bag drawn from that key's full tie group (the run
    itself, or at a LIMIT boundary every row with that key before the cut).
    """
    g_rows = gold.result.rows
    if gold.keys is None:
        for index, (a, b) in enumerate(zip(g_rows, pred, strict=True)):
            if not rows_equal(a, b, rel_tol, abs_tol):
                return index
        return None
    start = 0
    while start < len(g_rows):
        end = start
        while end < len(g_rows) and gold.keys[end] == gold.keys[start]:
            end += 1
        run = g_rows[start:end]
        group = gold.ties.get(gold.keys[start], run)
        chunk = pred[start:end]
        fits = (
            bag_equal(run, chunk, rel_tol, abs_tol)[0]
            if group is run
            else sub_bag(chunk, group, rel_tol, abs_tol)
        )
        if not fits:
            for offset, (a, b) in enumerate(zip(run, chunk, strict=True)):
                if not rows_equal(a, b, rel_tol, abs_tol):
                    return start + offset
            return start
        start = end
    return None


# -- Spider test-suite (taoyds/test-suite-sql-eval, exec_eval.py) -----------------------------------


def _unorder_row(row: Row) -> Row:
    return tuple(sorted(row, key=lambda value: str(value) + str(type(value))))


def _quick_rej(result1: list[Row], result2: list[Row], order_matters: bool) -> bool:
    s1 = [_unorder_row(row) for row in result1]
    s2 = [_unorder_row(row) for row in result2]
    return s1 == s2 if order_matters else set(s1) == set(s2)


def spider_result_eq(result1: list[Row], result2: list[Row], order_matters: bool) -> bool:
    """Spider test-suite's `result_eq`: equal up to a column permutation, bag (or list) of rows."""
    if len(result1) == 0 and len(result2) == 0:
        return True
    if len(result1) != len(result2):
        return False
    num_cols = len(result1[0])
    if len(result2[0]) != num_cols:
        return False
    if not _quick_rej(result1, result2, order_matters):
        return False
    columns1 = [{row[i] for row in result1} for i in range(num_cols)]
    constraints = _constraints(columns1, result2)
    return _permutation_exists(result1, result2, constraints, order_matters)


def _constraints(columns1: list[set], result2: list[Row]) -> list[set[int]]:
    """Each gold column's candidate source columns, as Spider's get_constraint_permutation leaves them."""
    num_cols = len(result2[0])
    constraints = [set(range(num_cols)) for _ in range(num_cols)]
    if num_cols <= 3:
        return constraints
    rng = random.Random(0)  # Spider samples with the global random; seeded here so verdicts reproduce
    for _ in range(20):
        row = rng.choice(result2)
        for col1 in range(num_cols):
            for col2 in set(constraints[col1]):
                if row[col2] not in columns1[col1]:
                    constraints[col1].remove(col2)
    return constraints


def _permutation_exists(
    result1: list[Row], result2: list[Row], constraints: list[set[int]], order_matters: bool
) -> bool:
    """Whether some column permutation allowed by constraints makes result2 equal result1 (Spider's loop).

    Spider enumerates the product of the candidate sets, n**n tuples: ten look-alike columns never finish,
    and a wrong query that reaches it would time out (a masked score) instead of scoring 0. This decides the
    same question by depth-first search, pruning with conditions every match must meet: a column's values
    equal, as a bag, those of the gold column it stands for; the rows projected on the columns assigned so
    far equal the gold's (as bags, or as lists when order matters); identical columns are interchangeable.
    """
    num_cols = len(result1[0])
    col1 = [[row[i] for row in result1] for i in range(num_cols)]
    col2 = [[row[j] for row in result2] for j in range(num_cols)]
    allowed = [
        [j for j in sorted(constraints[i]) if Counter(col2[j]) == Counter(col1[i])] for i in range(num_cols)
    ]
    twin_of = [next(k for k in range(j + 1) if col2[k] == col2[j]) for j in range(num_cols)]
    used = [False] * num_cols

    def same(left: list[Row], right: list[Row]) -> bool:
        return left == right if order_matters else Counter(left) == Counter(right)

    def search(i: int, prefix1: list[Row], prefix2: list[Row]) -> bool:
        if i == num_cols:
            return True
        step1 = [p + (v,) for p, v in zip(prefix1, col1[i], strict=True)]
        for j in allowed[i]:
            # Of identical unused columns only the first is tried: the others would give the same rows.
            if used[j] or any(not used[k] and twin_of[k] == twin_of[j] for k in range(j)):
                continue
            step2 = [p + (v,) for p, v in zip(prefix2, col2[j], strict=True)]
            if not same(step1, step2):
                continue
            used[j] = True
            if search(i + 1, step1, step2):
                return True
            used[j] = False
        return False

    empty: list[Row] = [() for _ in result1]
    return search(0, empty, [() for _ in result2])


def spider_order_matters(gold_sql: str) -> bool:
    """Spider's rule: order matters when the gold text contains 'order by' anywhere."""
    return "order by" in gold_sql.lower()


# -- BIRD (evaluation.py, calculate_ex) --------------------------------------------------------------


def bird_eq(gold: list[Row], pred: list[Row]) -> bool:
    """BIRD's `set(predicted_res) == set(ground_truth_res)`: no order, no duplicates, no column count check."""
    return set(pred) == set(gold)


# -- components --------------------------------------------------------------------------------------


def _cell_token(value: Any) -> Any:
    if _is_number(value) and not (isinstance(value, float) and math.isnan(value)):
        return ("n", float(f"{float(value):.6g}"))
    return ("v", value)


def _f1(gold: Counter, pred: Counter) -> float:
    if not gold and not pred:
        return 1.0
    common = sum((gold & pred).values())
    if common == 0:
        return 0.0
    precision, recall = common / sum(pred.values()), common / sum(gold.values())
    return 2 * precision * recall / (precision + recall)


def cell_f1(gold: list[Row], pred: list[Row]) -> float:
    """F1 of the multisets of cells (numbers to 6 significant digits), ignoring rows and columns."""
    return _f1(
        Counter(_cell_token(v) for row in gold for v in row),
        Counter(_cell_token(v) for row in pred for v in row),
    )


def tuple_f1(gold: list[Row], pred: list[Row]) -> float:
    """F1 of the multisets of whole rows (numbers to 6 significant digits)."""
    return _f1(
        Counter(tuple(_cell_token(v) for v in row) for row in gold),
        Counter(tuple(_cell_token(v) for v in row) for row in pred),
    )


def jaccard(a: set[str], b: set[str]) -> float:
    """|a & b| / |a | b| (1.0 for two empty sets)."""
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)
