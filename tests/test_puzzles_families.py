"""P1's families in depth: the parser never evaluates, checkers accept any rule-valid answer, and the
generators' uniqueness claims hold when counted by brute force (independently of the generators' solvers)."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import pytest

import proctor
from proctor.environments.puzzles import countdown, kenken, knights_knaves, nonogram, zebra
from proctor.environments.puzzles._latin import is_latin
from proctor.environments.puzzles.arith import ArithError, parse_expression
from proctor.environments.puzzles.base import get_family
from proctor.environments.registry import get_environment


def _score(verifier: str, answer: str, reference: object) -> proctor.Score:
    return proctor.score(verifier, f"<answer>{answer}</answer>", reference)


# -- the arithmetic parser: parsed, never evaluated --------------------------------------------------


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("__import__('os').system('touch PWNED')", "syntax"),
        ("exec('1')", "syntax"),
        ("(lambda: 1)()", "syntax"),
        ("().__class__", "syntax"),
        ("9**9**9", "power_not_allowed"),
        ("2^3", "power_not_allowed"),
        ("9" * 13, "number_too_large"),
        ("99999999999 * 99999999999", "too_large"),
        ("1/0", "division_by_zero"),
        ("1 +", "syntax"),
        ("(1 + 2", "syntax"),
        ("1.5 + 2", "syntax"),
        ("٣ + 1", "syntax"),  # non-ASCII digits are not numbers here
        ("1" + "+1" * 200, "too_long"),
    ],
)
def test_parser_rejects(text: str, reason: str):
    with pytest.raises(ArithError) as caught:
        parse_expression(text)
    assert caught.value.reason == reason


def test_parser_bounds_powers_before_computing():
    started = time.perf_counter()
    with pytest.raises(ArithError) as caught:
        parse_expression("9**9**9", max_exponent=10)
    assert caught.value.reason in ("bad_exponent", "too_large")
    with pytest.raises(ArithError):
        parse_expression("999999**10", max_exponent=10)
    assert time.perf_counter() - started < 5  # a hang would never get here (bounded wait, not a benchmark)
    assert parse_expression("2**10", max_exponent=10).value == 1024


def test_parser_is_exact_and_lists_numbers():
    parsed = parse_expression("8 / (3 - 8/3)")
    assert parsed.value == 24 and parsed.numbers == (8, 3, 8, 3)
    assert parse_expression("((((((1))))))").value == 1
    assert parse_expression("-(-(-2)) × 3 ÷ 2").value == -3


def test_deep_nesting_is_rejected_or_parsed_without_crashing():
    for text in ("(" * 149 + "1" + ")" * 149, "-" * 299 + "1"):
        parse_expression(text)  # within MAX_CHARS: parses, no RecursionError


def test_countdown_hostile_answers_score_zero_quickly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    reference = {"numbers": [3, 3, 8, 8], "target": 24, "use_all": True}
    for answer in ("__import__('os').system('touch PWNED')", "9**9**9", "9" * 5000, "(" * 5000, "1e999999"):
        score = _score("puzzle.countdown", answer, reference)
        assert score.status == proctor.Status.ok and score.reward == 0.0, score
    assert not (tmp_path / "PWNED").exists()


# -- countdown: any valid expression -----------------------------------------------------------------


def test_countdown_accepts_any_valid_expression():
    reference = {"numbers": [3, 3, 8, 8], "target": 24, "use_all": True}
    assert _score("puzzle.countdown", "8/(3-8/3)", reference).reward == 1.0
    assert _score("puzzle.countdown", "8 / (3 - 8 / 3) = 24", reference).reward == 1.0
    assert _score("puzzle.countdown", "8/(3-8/3) = 25", reference).reward == 0.0
    assert _score("puzzle.countdown", "8*3", reference).reason == "not_all_numbers_used"
    free = {"numbers": [1, 2, 5, 7, 25, 100], "target": 132, "use_all": False}
    for answer in ("100 + 25 + 7", "(100 + 25 + 7) * 1", "5*25 + 7", "7 + 5 * 25"):
        assert _score("puzzle.countdown", answer, free).reward == 1.0, answer
    assert _score("puzzle.countdown", "100 + 25 + 7 + 0", free).reason == "number_not_allowed"
    assert _score("puzzle.countdown", "100 + 25 + 7*1*1", free).reason == "number_not_allowed"
    assert _score("puzzle.countdown", "100 + 32", free).reason == "number_not_allowed"


def test_countdown_24_solver_finds_known_answers():
    from fractions import Fraction

    values = [Fraction(v) for v in (3, 3, 8, 8)]
    found = countdown.solve24(values, ["3", "3", "8", "8"], Fraction(24))
    assert found is not None and parse_expression(found).value == 24
    assert countdown.solve24([Fraction(1)] * 4, ["1"] * 4, Fraction(24)) is None


# -- uniqueness claims, counted by brute force -------------------------------------------------------

LATIN4 = [
    [v for row in rows for v in row]
    for rows in itertools.product(itertools.permutations(range(1, 5)), repeat=4)
    if is_latin([v for row in rows for v in row], 4)
]


def _fits_givens(cells: list[int], grid: list[str]) -> bool:
    return all(ch == "." or cells[i] == int(ch) for i, ch in enumerate("".join(grid)))


def test_sudoku_4x4_items_are_unique_by_brute_force():
    family = get_family("sudoku")
    tasks = get_environment("puzzle.sudoku").tasks("train", 11, 30, config={"sizes": [4]})
    for task in tasks:
        reference = family.Reference.model_validate(task.reference)
        fills = [
            cells
            for cells in LATIN4
            if _fits_givens(cells, reference.grid)
            and family.check("".join(map(str, cells)), reference).correct
        ]
        assert len(fills) == 1


def test_sudoku_accepts_any_valid_fill():
    empty = {"grid": ["...."] * 4}
    assert _score("puzzle.sudoku", "1234\n3412\n2143\n4321", empty).reward == 1.0
    assert _score("puzzle.sudoku", "2143 4321 1234 3412", empty).reward == 1.0
    assert _score("puzzle.sudoku", "1234\n3412\n2143\n4312", empty).reason == "repeated_digit"
    assert _score("puzzle.sudoku", "1234\n3412\n2143\n4321\n1234", empty).components["format"] == 0.0


def test_futoshiki_4x4_items_are_unique_by_brute_force():
    family = get_family("futoshiki")
    for task in get_environment("puzzle.futoshiki").tasks("train", 2, 30, difficulty="easy"):
        reference = family.Reference.model_validate(task.reference)
        fits = [c for c in LATIN4 if family.check("".join(map(str, c)), reference).correct]
        assert len(fits) == 1


def test_kenken_4x4_items_are_unique_by_brute_force():
    family = get_family("kenken")
    for task in get_environment("puzzle.kenken").tasks("train", 2, 30, difficulty="easy"):
        reference = family.Reference.model_validate(task.reference)
        fits = [
            c
            for c in LATIN4
            if all(kenken.cage_holds(g.op, g.target, [c[i] for i in g.cells]) for g in reference.cages)
        ]
        assert len(fits) == 1


def test_nonogram_solver_matches_brute_force_and_items_are_unique():
    family = get_family("nonogram")
    for task in get_environment("puzzle.nonogram").tasks(
        "train", 4, 25, config={"min_side": 4, "max_side": 4}
    ):
        reference = family.Reference.model_validate(task.reference)
        count = 0
        for mask in range(1 << 16):
            grid = [[mask >> (4 * r + c) & 1 for c in range(4)] for r in range(4)]
            if [nonogram.runs(row) for row in grid] == reference.rows and [
                nonogram.runs([grid[r][c] for r in range(4)]) for c in range(4)
            ] == reference.columns:
                count += 1
        assert count == 1
    assert len(nonogram.solve([[1], [1]], [[1], [1]], limit=10)) == 2  # the 2x2 diagonal has two


def test_zebra_items_are_unique_by_brute_force():
    family = get_family("zebra")
    for task in get_environment("puzzle.zebra").tasks("train", 6, 25, difficulty="easy"):
        reference = family.Reference.model_validate(task.reference)
        n, m = len(reference.values[0]), len(reference.values)
        count = sum(
            all(zebra.holds(clue, [list(p) for p in perms]) for clue in reference.clues)
            for perms in itertools.product(itertools.permutations(range(n)), repeat=m)
        )
        assert count == 1


def test_knights_items_are_unique_and_any_consistent_answer_counts():
    family = get_family("knights_knaves")
    for task in get_environment("puzzle.knights_knaves").tasks("train", 1, 30):
        reference = family.Reference.model_validate(task.reference)
        assert len(knights_knaves.solutions(reference)) == 1
    # A and B vouch for each other: both knights or both knaves are consistent; both answers score 1.
    two = {
        "names": ["Ann", "Bob"],
        "statements": [{"kind": "is", "a": 1, "ka": True}, {"kind": "is", "a": 0, "ka": True}],
    }
    assert _score("puzzle.knights_knaves", "Ann: knight, Bob: knight", two).reward == 1.0
    assert _score("puzzle.knights_knaves", "Ann is a knave and Bob is a knave", two).reward == 1.0
    assert _score("puzzle.knights_knaves", "Ann: knight, Bob: knave", two).reason == "inconsistent"
    assert (
        _score("puzzle.knights_knaves", "Ann: knight, Ann: knave, Bob: knave", two).components["format"] == 0
    )


# -- any valid answer, not only the stored one -------------------------------------------------------


def test_graph_coloring_accepts_any_proper_colouring():
    family = get_family("graph_coloring")
    task = get_environment("puzzle.graph_coloring").tasks("train", 0, 1)[0]
    gold = [int(c) for c in task.metadata["gold_answer"].split(",")]
    k = task.reference["colors"]
    renamed = ",".join(str(k + 1 - color) for color in gold)  # swap colour names: still proper
    assert renamed != task.metadata["gold_answer"]
    assert _score("puzzle.graph_coloring", renamed, task.reference).reward == 1.0
    assert (
        family.check(",".join("1" for _ in gold), family.Reference.model_validate(task.reference)).reason
        == "conflict"
    )


def test_shortest_path_accepts_every_shortest_path():
    square = {
        "nodes": 4,
        "edges": [[0, 1, 1], [1, 3, 1], [0, 2, 1], [2, 3, 1], [0, 3, 5]],
        "start": 0,
        "goal": 3,
    }
    assert _score("puzzle.shortest_path", "0 -> 1 -> 3", square).reward == 1.0
    assert _score("puzzle.shortest_path", "0 -> 2 -> 3", square).reward == 1.0
    assert _score("puzzle.shortest_path", "0 -> 3", square).reason == "not_shortest"
    assert _score("puzzle.shortest_path", "0 -> 1 -> 2 -> 3", square).reason == "no_such_edge"
    assert _score("puzzle.shortest_path", "1 -> 3", square).reason == "wrong_endpoints"


def test_n_queens_accepts_any_completion():
    free = {"n": 6, "givens": []}
    assert _score("puzzle.n_queens", "2,4,6,1,3,5", free).reward == 1.0
    assert _score("puzzle.n_queens", "5,3,1,6,4,2", free).reward == 1.0
    assert _score("puzzle.n_queens", "1,2,3,4,5,6", free).reward == 0.0
    assert _score("puzzle.n_queens", "2,4,6,1,3,5", {"n": 6, "givens": [[1, 5]]}).reason == "given_moved"


def test_bad_references_are_422():
    bad = [
        ("puzzle.sudoku", {"grid": ["12", "34"]}),
        ("puzzle.n_queens", {"n": 100, "givens": []}),
        ("puzzle.countdown", {"numbers": [1] * 100, "target": 3}),
        ("puzzle.shortest_path", {"nodes": 3, "edges": [[0, 9, 1]], "start": 0, "goal": 2}),
        (
            "puzzle.zebra",
            {"attributes": ["a"], "values": [["x", "x"]], "clues": [{"kind": "at", "a1": 0, "v1": 0}]},
        ),
    ]
    for verifier, reference in bad:
        with pytest.raises(proctor.RequestError) as caught:
            proctor.score(verifier, "<answer>1</answer>", reference)
        assert caught.value.status == 422 and (caught.value.field or "").startswith("reference")


def test_think_block_and_boxed_contract():
    reference = {"n": 6, "givens": []}
    assert proctor.score("puzzle.n_queens", "<think>1,2</think>\\boxed{2,4,6,1,3,5}", reference).reward == 1.0
    assert proctor.score("puzzle.n_queens", "<think><answer>2,4,6,1,3,5</answer>", reference).reward == 0.0
    assert proctor.score("puzzle.n_queens", "2,4,6,1,3,5", reference).reason == "no_answer"
