"""Extraction and comparators of the `sql` verifier: pure functions, then the verifier on a constructed database.

The constructed cases pin down where `strict` differs from Spider test-suite's and BIRD's rules, and that
`spider_ts` and `bird` reproduce those rules (column permutations, stripped DISTINCT, set semantics).
"""

from __future__ import annotations

import itertools
import random
import sqlite3
import threading
from collections import Counter
from pathlib import Path

import pytest

from proctor.contract import RequestError, Status
from proctor.registry import get_verifier
from proctor.settings import get_settings
from proctor.verifiers.sql import compare
from proctor.verifiers.sql.compare import GoldResult, Result
from proctor.verifiers.sql.extract import (
    check_select,
    extract_sql,
    remove_distinct,
    shape_of,
    spider_postprocess,
    split_statements,
)

# -- extraction --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("Here:\n```sql\nSELECT 1\n```\nor better\n```sql\nSELECT 2;\n```", "SELECT 2"),
        ("```\nSELECT a FROM t\n```", "SELECT a FROM t"),
        ("think... <answer>SELECT x FROM y</answer>", "SELECT x FROM y"),
        ("SELECT 1; SELECT ';' AS semi", "SELECT ';' AS semi"),
        ("SELECT 1; -- trailing comment\n", "SELECT 1"),
        ("SELECT a FROM t; DROP TABLE t", "DROP TABLE t"),
        ("", ""),
        ("<answer>SELECT a FROM t</answer>\nChecked with:\n```python\nprint(rows)\n```", "SELECT a FROM t"),
        # a draft inside the reasoning is not the answer, and an unterminated <think> is no answer at all
        ("<think>\n```sql\nSELECT 1\n```\n</think>\n<answer>SELECT 2</answer>", "SELECT 2"),
        ("<think>\n```sql\nSELECT 1\n```\nstill thinking", ""),
    ],
)
def test_extract_takes_the_last_block_tag_or_statement(response: str, expected: str):
    assert extract_sql(response) == expected


def test_split_statements_respects_strings_and_comments():
    assert split_statements("SELECT 'a;b'; /* ; */ SELECT 2 ;") == ["SELECT 'a;b'", "/* ; */ SELECT 2"]


@pytest.mark.parametrize(
    "sql",
    [
        "DROP TABLE t",
        "DELETE FROM t",
        "UPDATE t SET a = 1",
        "INSERT INTO t VALUES (1)",
        "SELECT 1; SELECT 2",
        "ATTACH 'x.db' AS x",
        "VACUUM INTO '/tmp/x.db'",
        "PRAGMA writable_schema = 1",
        "CREATE TEMP TABLE x (a)",
        "WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d",
        "",
        "-- only a comment",
        "SELEC 1",
    ],
)
def test_check_select_rejects_everything_but_one_query(sql: str):
    tree, why = check_select(sql)
    assert tree is None and why


def test_check_select_accepts_select_with_and_compound():
    for sql in ["SELECT 1", "WITH a AS (SELECT 1) SELECT * FROM a", "SELECT 1 UNION ALL SELECT 2 ORDER BY 1"]:
        tree, why = check_select(sql)
        assert tree is not None and why == ""


def test_order_detection_is_top_level_only():
    assert shape_of(check_select("SELECT a FROM t ORDER BY a")[0]).ordered
    assert not shape_of(check_select("SELECT * FROM (SELECT a FROM t ORDER BY a LIMIT 3)")[0]).ordered
    assert not shape_of(check_select("SELECT 'order by' FROM t")[0]).ordered
    assert compare.spider_order_matters("SELECT 'order by' FROM t")  # Spider's substring rule, reproduced


def test_remove_distinct_cuts_the_keyword_only():
    assert remove_distinct("SELECT DISTINCT a, 'distinct' FROM t").split() == [
        "SELECT",
        "a,",
        "'distinct'",
        "FROM",
        "t",
    ]


# -- strict on constructed results -------------------------------------------------------------------


def gold_of(rows, ordered=False, keys=None, ties=None, columns=1) -> GoldResult:
    return GoldResult(Result([f"c{i}" for i in range(columns)], rows), ordered, keys, ties or {})


def test_strict_bag_semantics_count_duplicates():
    gold = gold_of([(1,), (1,), (2,)])
    assert compare.compare_strict(gold, Result(["x"], [(2,), (1,), (1,)])).match
    outcome = compare.compare_strict(gold, Result(["x"], [(1,), (2,)]))
    assert (outcome.match, outcome.reason) == (False, "rows")
    assert outcome.details["first_missing_row"] == [1]


def test_strict_typed_values_and_nulls():
    assert compare.values_equal(3, 3.0, 1e-6, 0)
    assert not compare.values_equal(3, "3", 1e-6, 0)
    assert not compare.values_equal(None, 0, 1e-6, 0)
    assert compare.values_equal(None, None, 1e-6, 0)
    assert compare.values_equal(0.1 + 0.2, 0.3, 1e-6, 0)
    assert not compare.values_equal(2.456789, 2.46, 1e-6, 0)  # round(avg(x), 2) is not avg(x)
    assert compare.values_equal(b"\x00", b"\x00", 1e-6, 0) and not compare.values_equal(b"a", "a", 1e-6, 0)


def test_strict_columns_in_selected_order():
    gold = gold_of([(1, "a")], columns=2)
    assert compare.compare_strict(gold, Result(["x"], [(1,)])).reason == "columns"
    assert compare.compare_strict(gold, Result(["x", "y"], [("a", 1)])).reason == "rows"


def test_strict_order_and_ties():
    rows = [("a", 3), ("b", 2), ("c", 2), ("d", 1)]
    keys = [(3,), (2,), (2,), (1,)]
    gold = gold_of(rows, ordered=True, keys=keys, columns=2)
    assert compare.compare_strict(gold, Result(["x", "y"], [("a", 3), ("c", 2), ("b", 2), ("d", 1)])).match
    wrong = compare.compare_strict(gold, Result(["x", "y"], [("d", 1), ("a", 3), ("b", 2), ("c", 2)]))
    assert (wrong.match, wrong.reason, wrong.details["first_differing_position"]) == (False, "order", 0)
    # Without sort keys, order is positional.
    plain = gold_of(rows, ordered=True, columns=2)
    assert (
        compare.compare_strict(plain, Result(["x", "y"], [rows[0], rows[2], rows[1], rows[3]])).reason
        == "order"
    )


def test_strict_ties_at_a_limit_boundary():
    # ORDER BY score DESC LIMIT 2 over a=3, b=2, c=2: either tied row may fill the second place.
    gold = gold_of(
        [("a", 3), ("b", 2)], ordered=True, keys=[(3,), (2,)], ties={(2,): [("b", 2), ("c", 2)]}, columns=2
    )
    assert compare.compare_strict(gold, Result(["x", "y"], [("a", 3), ("c", 2)])).match
    assert compare.compare_strict(gold, Result(["x", "y"], [("a", 3), ("d", 2)])).reason == "rows"


def test_components():
    assert compare.cell_f1([(1, "a")], [(1, "a")]) == 1.0
    assert compare.cell_f1([(1, "a")], [("a", 1)]) == 1.0
    assert compare.tuple_f1([(1, "a")], [("a", 1)]) == 0.0
    assert compare.tuple_f1([(1,), (2,)], [(1,)]) == pytest.approx(2 / 3)
    assert compare.jaccard({"a", "b"}, {"b", "c"}) == pytest.approx(1 / 3)


# -- Spider test-suite and BIRD rules ---------------------------------------------------------------


def test_spider_result_eq_reproduces_its_rules():
    # Column permutations are accepted, bag semantics otherwise, order only when told.
    assert compare.spider_result_eq([(1, "a"), (2, "b")], [("b", 2), ("a", 1)], order_matters=False)
    assert not compare.spider_result_eq([(1,), (1,), (2,)], [(1,), (2,), (2,)], order_matters=False)
    assert not compare.spider_result_eq([(1,), (2,)], [(2,), (1,)], order_matters=True)
    assert compare.spider_result_eq([], [], order_matters=True)
    # Four columns: the permutation search is pruned by sampled rows, and still finds the right map.
    assert compare.spider_result_eq([(1, 2, 3, 4)], [(4, 3, 2, 1)], order_matters=False)


def test_bird_is_set_equality():
    assert compare.bird_eq([(1,), (1,), (2,)], [(2,), (1,)])  # duplicates ignored: BIRD's known weakness
    assert compare.bird_eq([(1,), (2,)], [(2,), (1,)])
    assert not compare.bird_eq([(1, "a")], [("a", 1)])


# -- the verifier on a constructed database ----------------------------------------------------------


@pytest.fixture
def db_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "dbs"
    (folder / "shop").mkdir(parents=True)
    conn = sqlite3.connect(folder / "shop" / "shop.sqlite")
    conn.executescript(
        """
        CREATE TABLE item (id INTEGER PRIMARY KEY, name TEXT, price REAL, stock INTEGER, tag TEXT);
        INSERT INTO item VALUES (1, 'pen', 1.25, 10, 'a'), (2, 'ink', 3.333333, 0, NULL),
            (3, 'pad', 2.5, 10, 'a'), (4, 'pen', 1.25, 5, 'b'), (5, 'cap', 2.5, 7, 'b');
        """
    )
    conn.commit()
    conn.close()
    monkeypatch.setenv("PROCTOR_SQL_DATABASES", str(folder))
    monkeypatch.setenv("PROCTOR_SQL_CACHE_DIR", str(tmp_path / "cache"))
    get_settings.cache_clear()
    yield folder
    get_settings.cache_clear()


def score(response: str, gold, **options):
    spec = get_verifier("sql")
    return spec.score(
        response, spec.parse_reference({"db_id": "shop", "gold": gold}), spec.parse_options(options)
    )


def test_strict_verifier_semantics(db_folder: Path):
    assert score("SELECT avg(price) FROM item", "SELECT sum(price) / count(*) FROM item").reward == 1.0
    rounded = score("SELECT round(avg(price), 2) FROM item", "SELECT avg(price) FROM item")
    assert (rounded.reward, rounded.reason) == (0.0, "rows")
    assert score("SELECT DISTINCT name FROM item", "SELECT name FROM item").reason == "rows"
    assert score("SELECT name FROM item ORDER BY id DESC", "SELECT name FROM item").reward == 1.0
    order = score("SELECT name FROM item ORDER BY name DESC", "SELECT name FROM item ORDER BY name")
    assert (order.reward, order.reason) == (0.0, "order")
    assert score("SELECT tag FROM item WHERE tag IS NULL", "SELECT NULL").reward == 1.0
    assert score("SELECT '0'", "SELECT 0").reason == "rows"
    swapped = score("SELECT stock, name FROM item", "SELECT name, stock FROM item")
    assert swapped.reason == "rows" and swapped.components["cell_f1"] == 1.0
    assert score("SELECT name FROM item", "SELECT name, stock FROM item").reason == "columns"


def test_strict_is_tie_aware_under_order_by_limit(db_folder: Path):
    gold = "SELECT name FROM item ORDER BY price DESC LIMIT 2"  # ink 3.33, then pad or cap at 2.5
    assert score("SELECT name FROM item ORDER BY price DESC, id DESC LIMIT 2", gold).reward == 1.0
    assert score("SELECT name FROM item ORDER BY price DESC, id ASC LIMIT 2", gold).reward == 1.0
    assert score("SELECT name FROM item ORDER BY price ASC LIMIT 2", gold).reward == 0.0
    by_alias = "SELECT name, price AS p FROM item ORDER BY p DESC, name LIMIT 3"
    assert score("SELECT name, price FROM item ORDER BY 2 DESC, 1 LIMIT 3", by_alias).reward == 1.0


def test_gold_list_accepts_any(db_folder: Path):
    golds = ["SELECT count(*) FROM item", "SELECT count(*), 'five' FROM item"]
    assert score("SELECT 5, 'five'", golds).reward == 1.0
    assert score("SELECT 5", golds).reward == 1.0
    assert score("SELECT 6", golds).details["golds_tried"] == 2


def test_spider_ts_and_bird_reproduce_their_weaknesses(db_folder: Path):
    # Spider strips DISTINCT from both queries by default, so dropping duplicates goes unnoticed ...
    assert (
        score("SELECT DISTINCT name FROM item", "SELECT name FROM item", comparator="spider_ts").reward == 1.0
    )
    assert (
        score(
            "SELECT DISTINCT name FROM item",
            "SELECT name FROM item",
            comparator="spider_ts",
            keep_distinct=True,
        ).reward
        == 0.0
    )
    # ... and accepts swapped columns.
    assert (
        score("SELECT stock, name FROM item", "SELECT name, stock FROM item", comparator="spider_ts").reward
        == 1.0
    )
    # 'order by' anywhere in the gold text makes order matter, even inside a subquery.
    gold = "SELECT name FROM (SELECT name FROM item ORDER BY id LIMIT 5)"
    assert score("SELECT name FROM item ORDER BY id DESC", gold, comparator="spider_ts").reward == 0.0
    assert score("SELECT name FROM item ORDER BY id DESC", gold).reward == 1.0
    # BIRD: set semantics.
    assert score("SELECT DISTINCT name FROM item", "SELECT name FROM item", comparator="bird").reward == 1.0
    assert score("SELECT name FROM item", "SELECT DISTINCT name FROM item", comparator="bird").reward == 1.0
    assert (
        score("SELECT stock, name FROM item", "SELECT name, stock FROM item", comparator="bird").reward == 0.0
    )


def test_components_are_reported_and_optionally_the_reward(db_folder: Path):
    result = score("SELECT name FROM item WHERE id < 4", "SELECT name FROM item")
    assert result.reward == 0.0
    assert result.components["executes"] == 1.0
    assert result.components["tuple_f1"] == pytest.approx(2 * 0.6 / 1.6)
    assert result.components["schema_jaccard"] == pytest.approx(2 / 3, abs=1e-6)  # {item, name} vs {+ id}
    partial = score("SELECT name FROM item WHERE id < 4", "SELECT name FROM item", reward="tuple_f1")
    assert partial.reward == pytest.approx(result.components["tuple_f1"])
    broken = score("SELECT nope FROM item", "SELECT name FROM item")
    assert (broken.reason, broken.components["executes"]) == ("runtime_error", 0.0)
    assert "nope" in broken.details["error"]


def test_gold_failure_is_a_verifier_error_naming_the_gold(db_folder: Path):
    result = score("SELECT 1", "SELECT missing_column FROM item")
    assert result.status is Status.verifier_error and result.reason == "gold_failed"
    assert "missing_column" in result.details["error"]
    not_select = score("SELECT 1", "DELETE FROM item")
    assert not_select.status is Status.verifier_error


def test_unknown_database_is_a_422_naming_the_field(db_folder: Path):
    spec = get_verifier("sql")
    with pytest.raises(RequestError) as caught:
        spec.parse_reference({"db_id": "nope", "gold": "SELECT 1"})
    assert (caught.value.status, caught.value.field) == (422, "reference.db_id")
    assert "shop" in caught.value.message
    with pytest.raises(RequestError) as caught:
        spec.parse_reference({"dsn_name": "nope", "gold": "SELECT 1"})
    assert caught.value.field == "reference.dsn_name"
    with pytest.raises(RequestError) as caught:
        spec.parse_options({"comparator": "exact"})
    assert caught.value.field == "options.comparator"


def test_strict_bag_matching_survives_tolerance_reordering():
    # 1.0000000001 and 1.0 are equal within 1e-6, but sort on opposite sides of the second column's order.
    gold = gold_of([(1.0000000001, "a"), (1.0, "b")], columns=2)
    assert compare.compare_strict(gold, Result(["x", "y"], [(1.0, "a"), (1.0000000001, "b")])).match
    assert not compare.compare_strict(gold, Result(["x", "y"], [(1.0, "a"), (1.0, "c")])).match


def test_keyed_gold_queries_append_sort_keys_only_where_safe():
    from proctor.verifiers.sql.extract import keyed_queries

    tree = check_select("SELECT name FROM item ORDER BY price DESC, 1 LIMIT 2")[0]
    keyed, unlimited, index = keyed_queries(tree, 1, "sqlite")
    assert index == [1, 0] and "price" in keyed.split("FROM")[0] and "LIMIT" not in unlimited
    union = check_select("SELECT a FROM t UNION SELECT b FROM u ORDER BY a")[0]
    assert keyed_queries(union, 1, "sqlite")[2] == [0]
    assert keyed_queries(check_select("SELECT DISTINCT a FROM t ORDER BY b")[0], 1, "sqlite") is None
    star, _, star_index = keyed_queries(check_select("SELECT * FROM t ORDER BY b LIMIT 3")[0], 4, "sqlite")
    assert star_index == [4] and star.startswith("SELECT *, b FROM")


def test_select_star_gold_is_tie_aware_too(db_folder: Path):
    # pen (id 1) and pad (id 3) tie on stock 10: either may come first.
    gold = "SELECT * FROM item ORDER BY stock DESC"
    assert score("SELECT * FROM item ORDER BY stock DESC, id DESC", gold).reward == 1.0
    assert score("SELECT * FROM item ORDER BY stock ASC", gold).reason == "order"
    limited = score("SELECT * FROM item ORDER BY stock DESC, id DESC LIMIT 1", gold + " LIMIT 1")
    assert limited.reward == 1.0


def test_distinct_gold_with_hidden_sort_key_compares_positionally(db_folder: Path):
    gold = "SELECT DISTINCT name FROM item ORDER BY name DESC"
    assert score("SELECT name FROM item GROUP BY name ORDER BY name DESC", gold).reward == 1.0
    assert score("SELECT DISTINCT name FROM item ORDER BY name", gold).reason == "order"


def test_spider_ts_matches_on_every_test_suite_database_in_the_folder(db_folder: Path):
    # The test-suite evaluation runs both queries on every *.sqlite next to the original (its distilled
    # databases); a constant that happens to equal the count on the original fails on a sibling.
    sibling = sqlite3.connect(db_folder / "shop" / "shop_1.sqlite")
    sibling.executescript(
        "CREATE TABLE item (id INTEGER PRIMARY KEY, name TEXT, price REAL, stock INTEGER, tag TEXT);"
        "INSERT INTO item VALUES (1, 'pen', 1.0, 1, 'a'), (2, 'ink', 2.0, 0, NULL);"
    )
    sibling.commit()
    sibling.close()
    gold = "SELECT count(*) FROM item"
    constant = score("SELECT 5", gold, comparator="spider_ts")
    assert (constant.reward, constant.reason) == (0.0, "rows")
    assert constant.details["test_suite_database"] == "shop_1.sqlite"
    right = score("SELECT count(id) FROM item", gold, comparator="spider_ts")
    assert right.reward == 1.0 and right.details["test_suite_databases"] == 2
    assert score("SELECT 5", gold, comparator="spider_ts", test_suite=False).reward == 1.0
    assert score("SELECT 5", gold).reward == 1.0  # strict reads only the named database


def test_spider_ts_replaces_the_current_year_as_its_executor_does(db_folder: Path):
    assert spider_postprocess("SELECT YEAR ( CURDATE ( ) ) - 1") == "SELECT 2020- 1"
    assert score("SELECT 2020", "SELECT year(curdate())", comparator="spider_ts").reward == 1.0


def _brute_force_spider(result1, result2, order_matters):
    """Spider's loop over column permutations, for small tables."""
    constraints = compare._constraints([{row[i] for row in result1} for i in range(len(result1[0]))], result2)
    for perm in itertools.permutations(range(len(result1[0]))):
        if all(perm[i] in constraints[i] for i in range(len(perm))):
            permuted = [tuple(row[i] for i in perm) for row in result2]
            if permuted == result1 if order_matters else Counter(permuted) == Counter(result1):
                return True
    return False


def test_spider_permutation_search_agrees_with_spiders_loop():
    rng = random.Random(7)
    agreed = 0
    for _ in range(600):
        cols, rows = rng.randint(1, 5), rng.randint(1, 4)
        result1 = [tuple(rng.choice((0, 1, 2.0, "a")) for _ in range(cols)) for _ in range(rows)]
        perm = rng.sample(range(cols), cols)
        result2 = [tuple(row[i] for i in perm) for row in result1]
        if rng.random() < 0.5:
            rng.shuffle(result2)
        if rng.random() < 0.3:
            result2[0] = tuple(rng.sample(result2[0], cols))  # the same cells, scrambled in one row
        for order in (False, True):
            expected = _brute_force_spider(result1, result2, order)
            assert compare.spider_result_eq(result1, result2, order) == expected, (result1, result2, order)
            agreed += expected
    assert agreed > 100  # both outcomes were exercised


def test_spider_permutation_search_cannot_hang_on_look_alike_columns():
    # Ten columns with the same values in every row: Spider's product of candidates has 10**10 tuples.
    result1 = [(0,) * 9 + (1,), (1,) * 9 + (0,)]
    result2 = [(0,) * 9 + (1,), (0,) + (1,) * 9]  # each row's cells match, no column order does
    found: list[bool] = []
    worker = threading.Thread(
        target=lambda: found.append(compare.spider_result_eq(result1, result2, False)), daemon=True
    )
    worker.start()
    worker.join(timeout=5)  # a bounded wait for hang detection, not a timing assertion
    assert not worker.is_alive() and found == [False]
    assert compare.spider_result_eq(result1, [result1[1], result1[0]], False)


def test_strict_compares_large_wrong_results_without_quadratic_work():
    # A wrong query returning thousands of rows (a missing WHERE) must score 0 quickly; a pairwise search took
    # 19 s for 2000 rows, so such answers ran into the deadline (a masked timeout) instead of scoring 0.
    size = 3000
    outcomes: list[compare.Comparison] = []

    def run() -> None:
        for cast in (int, float):
            gold = gold_of([(cast(i), "x") for i in range(size)], columns=2)
            outcomes.append(
                compare.compare_strict(gold, Result(["a", "b"], [(cast(i) + 0.5, "x") for i in range(size)]))
            )
        outcomes.append(compare.compare_strict(gold, Result(["a", "b"], list(reversed(gold.result.rows)))))

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout=10)  # a bounded wait for hang detection, not a timing assertion
    assert not worker.is_alive()
    assert [(o.match, o.reason) for o in outcomes] == [(False, "rows"), (False, "rows"), (True, None)]
    assert outcomes[0].details["first_missing_row"] == [0, "x"]
    assert outcomes[0].details["first_extra_row"] == [0.5, "x"]
