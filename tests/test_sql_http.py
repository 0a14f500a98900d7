"""The `sql` verifier through the real HTTP service (uvicorn, pool workers, jailed SQLite workers)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent


def post(base: str, body: object) -> httpx.Response:
    return httpx.post(f"{base}/v1/score", json=body, timeout=60)


def test_sql_over_http(start_server, tmp_path: Path) -> None:
    base = start_server(PROCTOR_SQL_CACHE_DIR=str(tmp_path / "cache"))
    question = json.loads((REPO / "datasets" / "sql" / "questions.jsonl").read_text().splitlines()[0])
    reference = {"db_id": "library", "gold": question["gold"]}

    right = post(
        base,
        {"verifier": "sql", "response": f"```sql\n{question['correct'][0]}\n```", "reference": reference},
    )
    assert right.status_code == 200, right.text
    body = right.json()
    assert (body["status"], body["reward"], body["verifier"]) == ("ok", 1.0, "sql@1.1.0")
    assert body["components"]["executes"] == 1.0

    cheat = post(
        base,
        {
            "verifier": "sql",
            "response": "SELECT 120",
            "reference": reference,
            "options": {"perturbations": 2},
        },
    )
    assert cheat.status_code == 200 and cheat.json()["reason"] == "perturbation"

    hostile = post(base, {"verifier": "sql", "response": "DROP TABLE book", "reference": reference})
    assert hostile.json()["reason"] == "not_select" and hostile.json()["reward"] == 0.0

    slow = post(
        base,
        {
            "verifier": "sql",
            "response": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c",
            "reference": reference,
            "options": {"timeout_s": 0.5},
        },
    )
    assert slow.json()["status"] == "ok" and slow.json()["reason"] == "time_limit"

    unknown = post(
        base, {"verifier": "sql", "response": "SELECT 1", "reference": {"db_id": "nope", "gold": "SELECT 1"}}
    )
    assert unknown.status_code == 422
    assert unknown.json()["error"]["field"] == "reference.db_id"
    assert "library" in unknown.json()["error"]["message"]

    bad_option = post(
        base,
        {"verifier": "sql", "response": "SELECT 1", "reference": reference, "options": {"comparator": "x"}},
    )
    assert bad_option.status_code == 422 and bad_option.json()["error"]["field"] == "options.comparator"

    broken_gold = post(
        base,
        {"verifier": "sql", "response": "SELECT 1", "reference": {"db_id": "library", "gold": "SELECT nope"}},
    )
    assert broken_gold.status_code == 200
    assert broken_gold.json()["status"] == "verifier_error" and broken_gold.json()["reward"] == 0.0
