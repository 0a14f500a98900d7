"""Issue 17's labelled answer forms (datasets/math/answer_forms.jsonl, labelled before the code that reads them):
well-formed, and Proctor's `math` agrees with every row except the policy questions listed here with the reason
Proctor's verdict stands."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from proctor.contract import Score, Status
from proctor.engine import Engine
from proctor.settings import Settings

DATASET = Path(__file__).resolve().parents[1] / "datasets" / "math" / "answer_forms.jsonl"
KEYS = {"id", "category", "response", "gold", "expected", "note", "written"}
CATEGORIES = {
    "number_formatting",
    "labelled_relations",
    "multi_box",
    "answer_anchors",
    "equivalences",
    "angles_units",
    "damaged_golds",
}
MIN_PER_CATEGORY = 25
MIN_NEGATIVE_SHARE = 0.35
POLICY = {
    "answer_anchors-013": "`</s>` reads as an HTML/XML tag, so the end-of-turn rule cuts it only at the very end "
    "(programs and markup contain it); the text after a mid-text `</s>` is graded, and its later box is a "
    "self-correction, as any later box is",
    "equivalences-003": "an answer inequality is solved when its variable stands alone up to a sign (-x > -1 is "
    "x < 1); -2x >= -4 still needs dividing by 2, as an unsolved equation 2x = 4 does not answer x = 2",
    "equivalences-033": "the documented lenient percent policy: with the sign on one side only, 0.25% may be "
    "written 0.25 (as 50% may be written 50); `options.percent: strict` reads 0.25% as 0.0025 only",
}


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    """The labelled rows, parsed."""
    with DATASET.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def test_rows_are_well_formed(rows: list[dict]) -> None:
    counts = Counter(row["category"] for row in rows)
    assert set(counts) == CATEGORIES
    assert {c: n for c, n in counts.items() if n < MIN_PER_CATEGORY} == {}
    for row in rows:
        assert set(row) == KEYS, row["id"]
        assert row["expected"] in (True, False, "reject"), row["id"]
        assert row["written"] == "before-code", row["id"]
        assert row["id"].startswith(row["category"] + "-"), row["id"]
    assert len({row["id"] for row in rows}) == len(rows)
    for category in CATEGORIES:
        members = [row for row in rows if row["category"] == category]
        negatives = sum(row["expected"] is not True for row in members)
        assert negatives / len(members) >= MIN_NEGATIVE_SHARE, category


def test_proctor_agrees_with_every_row_but_the_listed_policy_questions(rows: list[dict]) -> None:
    engine = Engine(Settings(cache_size=0))
    try:
        results = engine.score_batch(
            [
                {"id": r["id"], "verifier": "math", "response": r["response"], "reference": r["gold"]}
                for r in rows
            ]
        )
    finally:
        engine.close()
    disagreements = {}
    for row, result in zip(rows, results, strict=True):
        if not isinstance(result, Score):
            verdict: object = "reject" if result.error.status == 422 else f"error {result.error.status}"
        elif result.status is not Status.ok:
            verdict = result.status.value  # a timeout or a machinery failure is never the label's verdict
        else:
            verdict = result.reward >= 1.0
        if verdict != row["expected"]:
            disagreements[row["id"]] = (row["expected"], verdict)
    assert set(disagreements) == set(POLICY), disagreements
