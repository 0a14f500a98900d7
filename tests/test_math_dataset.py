"""The labelled math set: well-formed, covers every category of issue 3, and Proctor's `math` agrees with it."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from proctor.contract import Score, Status
from proctor.engine import Engine
from proctor.settings import Settings

DATASET = Path(__file__).resolve().parents[1] / "datasets" / "math" / "labelled.jsonl"
KEYS = {"id", "category", "response", "gold", "expected", "note"}
MIN_ROWS = 600
MIN_PER_CATEGORY = 20
MIN_ADVERSARIAL = 60
MIN_NEGATIVE_SHARE = 0.30
MIN_AGREEMENT = 0.99
# Every equivalence and extraction category issue 3 lists, plus the adversarial group.
CATEGORIES = {
    "integers",
    "decimals",
    "fractions",
    "mixed_numbers",
    "scientific_notation",
    "thousands_separators",
    "percentages",
    "numeric_tolerance",
    "radicals_constants",
    "symbolic",
    "equations_inequalities",
    "sets_tuples_intervals",
    "matrices_vectors",
    "complex_numbers",
    "degrees_units",
    "plain_text",
    "multiple_choice",
    "times_of_day",
    "repeating_decimals",
    "unicode_math",
    "number_bases",
    "think_self_correction",
    "lenient_vs_anchored",
    "adversarial",
}


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    """The labelled rows, parsed."""
    with DATASET.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def test_rows_have_the_required_keys_and_types(rows: list[dict]) -> None:
    assert len(rows) >= MIN_ROWS
    for row in rows:
        assert set(row) == KEYS, row.get("id")
        assert isinstance(row["expected"], bool), row["id"]
        for key in KEYS - {"expected"}:
            assert isinstance(row[key], str), (row["id"], key)
        assert row["gold"].strip(), row["id"]
        assert row["id"].startswith(row["category"] + "-"), row["id"]


def test_ids_are_unique_and_no_pair_is_labelled_twice(rows: list[dict]) -> None:
    ids = Counter(row["id"] for row in rows)
    assert [i for i, n in ids.items() if n > 1] == []
    labels: dict[tuple[str, str], set[bool]] = {}
    for row in rows:
        labels.setdefault((row["gold"], row["response"]), set()).add(row["expected"])
    assert [pair for pair, seen in labels.items() if len(seen) > 1] == []


def test_every_category_is_covered(rows: list[dict]) -> None:
    counts = Counter(row["category"] for row in rows)
    assert set(counts) == CATEGORIES
    assert {c: n for c, n in counts.items() if n < MIN_PER_CATEGORY} == {}
    assert counts["adversarial"] >= MIN_ADVERSARIAL


def test_negatives_are_at_least_thirty_percent(rows: list[dict]) -> None:
    negatives = sum(not row["expected"] for row in rows)
    assert negatives / len(rows) >= MIN_NEGATIVE_SHARE


def test_adversarial_rows_are_all_negative(rows: list[dict]) -> None:
    assert [row["id"] for row in rows if row["category"] == "adversarial" and row["expected"]] == []


def test_the_file_stays_small() -> None:
    assert DATASET.stat().st_size < 2 * 1024 * 1024
    with DATASET.open(encoding="utf-8") as fh:
        assert max(len(line) for line in fh) < 20_000  # huge inputs belong to the safety tests


def test_proctor_agrees_with_the_labels(rows: list[dict]) -> None:
    """One batch through the engine's worker pool: >= 0.99 agreement and no adversarial false positive."""
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
    assert len(results) == len(rows)
    disagreements = []
    adversarial_accepted = []
    for row, result in zip(rows, results, strict=True):
        if not isinstance(result, Score):  # a rejected request is never an agreement
            disagreements.append((row["id"], row["expected"], "item_error", result.error.message))
            continue
        accepted = result.reward >= 1.0
        if result.status is not Status.ok or accepted != row["expected"]:
            # a timeout or verifier_error is a disagreement too: the label asks for a verdict
            disagreements.append(
                (row["id"], row["expected"], result.status.value, result.details.get("rule"))
            )
        if row["category"] == "adversarial" and result.status is Status.ok and accepted:
            adversarial_accepted.append(row["id"])
    assert adversarial_accepted == []
    agreement = 1 - len(disagreements) / len(rows)
    assert agreement >= MIN_AGREEMENT, (
        f"agreement {agreement:.3f} ({len(disagreements)} rows); first disagreements: {disagreements[:20]}"
    )
