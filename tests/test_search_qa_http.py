"""tool.search_qa over real HTTP: Search-R1's retriever protocol on its corpus, and a live session and its replay."""

from __future__ import annotations

import httpx

from proctor.environments.tools.search_qa.corpus import corpus
from proctor.environments.tools.search_qa.environment import SEARCH_QA, gold_transcript
from proctor.environments.tools.search_qa.index import search_index

ROUTE = "/compat/search_r1/retrieve"


def retrieve(base: str, body: object) -> httpx.Response:
    return httpx.post(f"{base}{ROUTE}", json=body, timeout=60)


def passages_as_search_r1_reads_them(result: list[dict]) -> str:
    """What Search-R1's generation loop makes of one query's result: the first line of `contents` is the
    title, the rest the text (written here from its documented behaviour, to check our passages fit it)."""
    lines = []
    for number, item in enumerate(result, start=1):
        title, _, text = item["document"]["contents"].partition("\n")
        lines.append(f"Doc {number}(Title: {title}) {text}")
    return "\n".join(lines)


def test_retrieve_with_scores_matches_the_search_tool(live_server: str) -> None:
    documents = corpus(0).documents
    queries = [documents[5].title, f"{documents[1500].title} founded", "press headquartered"]
    response = retrieve(live_server, {"queries": queries, "topk": 4, "return_scores": True})
    assert response.status_code == 200, response.text
    result = response.json()["result"]
    assert len(result) == len(queries)
    index = search_index(0)
    for query, items in zip(queries, result, strict=True):
        expected = index.search(query, 4)
        assert [item["document"]["id"] for item in items] == [hit.document.id for hit in expected]
        assert all(abs(item["score"] - hit.score) < 1e-9 for item, hit in zip(items, expected, strict=True))
        for item in items:
            document = item["document"]
            assert set(document) == {"id", "title", "text", "contents"}
            assert document["contents"] == f"{document['title']}\n{document['text']}"
    assert result[0][0]["document"]["title"] == documents[5].title
    assert result[1][0]["document"]["id"] == documents[1500].id
    rendered = passages_as_search_r1_reads_them(result[0])
    assert rendered.startswith(f"Doc 1(Title: {documents[5].title}) {documents[5].text}")


def test_retrieve_without_scores_and_the_default_topk(live_server: str) -> None:
    response = retrieve(live_server, {"queries": ["novel published press"]})
    assert response.status_code == 200, response.text
    (items,) = response.json()["result"]
    assert len(items) == 3  # Search-R1's default topk
    assert all(set(item) == {"id", "title", "text", "contents"} for item in items)
    zero = retrieve(live_server, {"queries": ["novel published press"], "topk": 0, "extra": "ignored"})
    assert [item["id"] for item in zero.json()["result"][0]] == [item["id"] for item in items]
    assert retrieve(live_server, {"queries": []}).json() == {"result": []}
    assert retrieve(live_server, {"queries": ["zzzzqqq"], "topk": 5}).json() == {"result": [[]]}


def test_retrieve_rejects_bad_requests_naming_the_field(live_server: str) -> None:
    for body, field in (
        ({"queries": ["x"], "topk": 101}, "topk"),
        ({"queries": ["x"], "topk": True}, "topk"),
        ({"queries": "x"}, "queries"),
        ({"queries": ["x" * 10_001]}, "queries"),
        ({"topk": 3}, "queries"),
        ({"queries": ["x"] * 201, "topk": 100}, "queries"),  # 20,100 passages: more than one request may ask
    ):
        response = retrieve(live_server, body)
        assert response.status_code == 422, (body, response.text)
        assert response.json()["error"]["field"].startswith(field), response.json()


def test_retrieve_batch_is_answered_in_order(live_server: str) -> None:
    titles = [document.title for document in corpus(0).documents[:200:7]]
    response = retrieve(live_server, {"queries": titles, "topk": 1, "return_scores": True})
    assert response.status_code == 200
    assert [items[0]["document"]["title"] for items in response.json()["result"]] == titles


def test_a_live_session_over_http_scores_as_its_replay(live_server: str) -> None:
    task = SEARCH_QA.make_tasks("train", 4, 1, "hard")[0]
    created = httpx.post(
        f"{live_server}/v1/sessions",
        json={
            "environment": "tool.search_qa",
            "task": {"seed": 4, "index": 0, "split": "train", "level": "hard"},
        },
        timeout=60,
    )
    assert created.status_code == 201, created.text
    session = created.json()
    assert session["messages"] == task.prompt
    assert [tool["function"]["name"] for tool in session["tools"]] == ["search", "open"]
    gold = gold_transcript(task)
    expected = iter(message for message in gold[len(task.prompt) :] if message["role"] == "tool")
    result: dict = {}
    for number, message in enumerate((m for m in gold if m["role"] == "assistant"), start=1):
        response = httpx.post(
            f"{live_server}/v1/sessions/{session['session_id']}/step",
            json={"message": message, "step": number},
            timeout=60,
        )
        assert response.status_code == 200, response.text
        result = response.json()
        for observation in result["observations"]:
            assert observation["content"] == next(expected)["content"]  # the tools answer as in process
    assert result["done"] and result["end_reason"] == "answer" and result["score"]["reward"] == 1.0
    record = httpx.get(f"{live_server}/v1/sessions/{session['session_id']}", timeout=60).json()
    replay = httpx.post(
        f"{live_server}/v1/score",
        json={"verifier": "tool.search_qa", "response": record["transcript"], "reference": task.reference},
        timeout=60,
    ).json()
    assert (
        replay["reward"] == result["score"]["reward"]
        and replay["components"] == result["score"]["components"]
    )


def test_listed_with_its_tools_and_tasks_over_http(live_server: str) -> None:
    listed = httpx.get(f"{live_server}/v1/environments", timeout=60).json()
    (entry,) = [e for e in listed if e["name"] == "tool.search_qa"]
    assert entry["kind"] == "tool" and entry["verifier"] == "tool.search_qa"
    assert entry["difficulty_levels"] == ["easy", "medium", "hard"]
    schemas = {tool["function"]["name"]: tool["function"]["parameters"] for tool in entry["tools"]}
    assert schemas["search"]["required"] == ["query"] and schemas["open"]["required"] == ["doc_id"]
    made = httpx.post(
        f"{live_server}/v1/environments/tool.search_qa/tasks",
        json={"split": "test", "seed": 5, "count": 3, "difficulty": "hard"},
        timeout=60,
    )
    assert made.status_code == 200, made.text
    tasks = made.json()["tasks"]
    expected = SEARCH_QA.make_tasks("test", 5, 3, "hard")
    assert [t["reference"] for t in tasks] == [t.reference for t in expected]
    assert all(t["metadata"]["hops"] == 4 and t["verifier"] == "tool.search_qa" for t in tasks)
