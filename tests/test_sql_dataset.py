"""The bundled SQL dataset: every question's gold, correct-but-different and wrong queries score as labelled.

Runs through the registered `sql` verifier on the bundled `library` database, in the real jailed workers.
Queries labelled `coincidental` are wrong but match on this one database; perturbed copies must catch them.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from proctor.contract import Status
from proctor.registry import get_verifier
from proctor.settings import get_settings

REPO = Path(__file__).resolve().parent.parent
QUESTIONS = REPO / "datasets" / "sql" / "questions.jsonl"
DATABASE = REPO / "datasets" / "sql" / "library" / "library.sqlite"


@pytest.fixture(autouse=True)
def _bundled_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.delenv("PROCTOR_SQL_DATABASES", raising=False)
    monkeypatch.setenv("PROCTOR_SQL_CACHE_DIR", str(tmp_path / "cache"))
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def _questions() -> list[dict]:
    return [json.loads(line) for line in QUESTIONS.read_text().splitlines() if line.strip()]


def _score(sql: str, question: dict, **options):
    spec = get_verifier("sql")
    reference = spec.parse_reference({"db_id": question["db_id"], "gold": question["gold"]})
    return spec.score(sql, reference, spec.parse_options(options))


def test_dataset_has_enough_labelled_questions():
    questions = _questions()
    assert len(questions) >= 40
    assert len({q["id"] for q in questions}) == len(questions)
    assert sum(len(q["correct"]) for q in questions) >= 40
    assert sum(len(q["wrong"]) for q in questions) >= 40
    assert all(q["db_id"] == "library" and q["gold"] and q["question"] for q in questions)


def test_every_gold_correct_and_wrong_query_scores_as_labelled():
    failures = []
    for question in _questions():
        for sql in [question["gold"], *question["correct"]]:
            score = _score(sql, question)
            if score.status is not Status.ok or score.reward != 1.0:
                failures.append(("should match", question["id"], sql, score.reason, score.details))
        for wrong in question["wrong"]:
            score = _score(wrong["sql"], question)
            expected = 1.0 if wrong.get("coincidental") else 0.0
            if score.status is not Status.ok or score.reward != expected:
                failures.append(("labelled wrong", question["id"], wrong["sql"], score.reason))
    assert not failures, failures


def test_perturbed_copies_catch_coincidental_matches_and_keep_correct_ones():
    coincidental = correct = 0
    for question in _questions():
        for wrong in question["wrong"]:
            if wrong.get("coincidental"):
                score = _score(wrong["sql"], question, perturbations=3)
                assert (score.status, score.reward, score.reason) == (Status.ok, 0.0, "perturbation"), wrong
                assert score.details["perturbed_copy"] >= 1
                coincidental += 1
        for sql in question["correct"][:1]:
            score = _score(sql, question, perturbations=3)
            assert score.reward == 1.0, (question["id"], sql, score.details)
            correct += 1
    assert coincidental >= 4 and correct >= 40


def test_generator_rebuilds_the_committed_database_byte_for_byte(tmp_path: Path):
    subprocess.run(
        [sys.executable, str(REPO / "scripts" / "make_sql_dataset.py"), "--out", str(tmp_path)],
        check=True,
        capture_output=True,
    )
    rebuilt = tmp_path / "library" / "library.sqlite"
    assert hashlib.sha256(rebuilt.read_bytes()).digest() == hashlib.sha256(DATABASE.read_bytes()).digest()
