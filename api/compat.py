"""Compatibility routes that map other trainers' reward-server payloads onto the scoring contract.

OpenRLHF (checked against OpenRLHF/OpenRLHF at 3c3be62, 2026-08; `openrlhf/utils/agent.py`,
`SingleTurnAgentExecutor._fetch_rewards_via_http`, and `openrlhf/trainer/ppo_utils/samples_generator.py`):
the trainer POSTs `{"query": [...], "prompts": [...], "labels": [...]}` to `--reward.remote_url` with aiohttp,
one sample per request (with several URLs the batch is split, so a server can also get empty lists), and reads
`rewards` (advantages), `scores` (dynamic filtering; falls back to `rewards`) and `extra_logs` (each value is
turned into a tensor and logged, so it must be numeric). `query` is the decoded prompt + response with special
tokens kept; `prompts` is the prompt text. When the prompt is longer than `max_len` leaves room for, OpenRLHF
keeps its last tokens (`prompt_token_ids[-max_prompt_length:]`), so `query` no longer starts with `prompts[i]`:
the response then follows the end of the prompt that `query` starts with (a BOS token may come first; it is
searched from the query's start, so nothing the response writes can hide it), else
the prompt's first full occurrence, else its final assistant header; when none locates it the item fails
(`verifier_error`, reason `prompt_mismatch`, under on_failure) and the whole query, prompt included, is never
scored (`proctor.adapters.labels.strip_prompt`).
`labels` are the dataset's label column as loaded, so a GSM8K answer is an int: labels may be any JSON value
(`proctor.adapters.labels` says how each is read; a number is its canonical string). Rechecked against the
openrlhf 0.11.2 wheel (`SingleTurnAgentExecutor._fetch_rewards_via_http`). A non-2xx answer is retried 5 times, 1 s apart; after that the
sample has no reward and the experience maker stops with "reward_model_group is required when rewards are not
precomputed". Dynamic filtering (`--algo.dynamic_filtering_enable`, range `--algo.dynamic_filtering_range`,
default (0, 1)) drops a prompt's whole group of samples when `not (low < mean(scores) < high)`; a NaN score
makes the mean NaN, which fails that test whatever the range. Python's json (used by aiohttp) reads NaN.

So the on_failure policies do this for OpenRLHF:
- raise: HTTP 503 with the error JSON; OpenRLHF retries, then the run stops loudly.
- none: `scores[i]` is NaN, so with dynamic filtering the sample's group is dropped; `rewards[i]` is
  failure_value, which is what trains if dynamic filtering is off (OpenRLHF cannot mask one sample).
- value: `rewards[i]` and `scores[i]` are failure_value.
`extra_logs` holds one 0/1 flag per item for each status (`proctor_status_ok`, `proctor_status_timeout`, ...)
and `proctor_failed`, so failure rates show up in the trainer's logs. Label reading, prompt stripping and this
answer come from `proctor.adapters.openrlhf`, which its file-based `reward_func` uses too.

slime (checked against THUDM/slime at 624b824, 2026-08; `slime/rollout/rm_hub/__init__.py`, `remote_rm`):
with `--rm-type remote_rm --rm-url URL` slime POSTs `{"prompt", "response", "label"}` per sample (prompt may be
a chat message list, label whatever the dataset holds, None for an unlabelled sample), retries up to 10 times with exponential backoff on any error,
then raises; on success `sample.reward = await resp.json()`, i.e. the bare JSON value (a number; a dict only
with `--reward-key`). So this route answers a bare number, or `null` under on_failure=none. slime has no
reward value that masks a sample: its group normalisation and `check_reward_nonzero_std` call torch.tensor on
the rewards, which fails on None, so `none` needs a `--rollout-sample-filter-path` function that sets
`remove_sample = True` and a numeric reward on samples whose reward is None; otherwise use raise or value.
A None label is answered at once with failure_value (HTTP 200, whatever on_failure says): a 422 would be
retried for about 2.5 minutes and then crash the rollout. `proctor.adapters.slime.sample_filter` (for
`--rollout-sample-filter-path`) removes unlabelled samples and those whose reward is None.
`proctor.adapters.slime.custom_rm` is the same scoring for `--custom-rm-path`, without the route.

Search-R1 (checked against PeterGriffinJin/Search-R1, `search_r1/search/retrieval_server.py` and
`search_r1/llm_agent/generation.py`): the trainer POSTs `{"queries": [...], "topk": k, "return_scores": true}` to
`retriever.url` and reads `result[i][j]["document"]["contents"]`, a passage whose first line is its title.
`POST /compat/search_r1/retrieve` answers that protocol with BM25 over the bundled `tool.search_qa` corpus
(`proctor.environments.tools.search_qa`): `{"result": [[{"document": {id, title, text, contents}, "score"}]]}`,
or the bare documents without `return_scores` (the shape Search-R1's server means to return then). A
`topk` left out (or 0) is Search-R1's default, 3.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from starlette.responses import Response

from proctor.adapters.labels import (
    BadLabel,
    PromptMismatch,
    label_request,
    prompt_mismatch_score,
    strip_prompt,
)
from proctor.adapters.openrlhf import reward_payload
from proctor.api.admission import POOL, lane_of, lane_of_requests
from proctor.api.rendering import json_response
from proctor.api.responses import VERIFIER_REFERENCE, error_responses, server_validated
from proctor.api.state import ServiceState, get_state
from proctor.contract import ItemError, JsonInt, RequestError, Score
from proctor.engine import prepare
from proctor.policy import FailurePolicy, reward_or_policy

router = APIRouter(prefix="/compat", tags=["compatibility"])


class OpenRLHFRequest(BaseModel):
    """OpenRLHF's remote reward request: decoded prompt+response, the prompts, and the dataset labels."""

    model_config = ConfigDict(extra="ignore")

    query: list[str] = Field(description="Prompt + response text, as OpenRLHF decodes it.")
    prompts: list[str] = Field(
        description="The prompt of each query (as many as queries); removed from its start when present."
    )
    labels: list[Any] = Field(
        description='One per query: a label object {"verifier", "reference", "options"?} (or a string holding '
        "one), else a bare reference for the default verifier: a string, a number (as its canonical string), "
        "a list (several golds) or the verifier's reference object. null is a 422."
    )


class OpenRLHFResponse(BaseModel):
    """What OpenRLHF reads: rewards for advantages, scores for dynamic filtering, numeric extra_logs."""

    rewards: list[float]
    scores: list[float] = Field(
        description="Equal to rewards, except NaN for failures under on_failure=none."
    )
    extra_logs: dict[str, list[float]]


class SlimeRequest(BaseModel):
    """slime's remote reward request for one sample."""

    model_config = ConfigDict(extra="ignore")

    prompt: str | list[dict[str, Any]] | None = Field(default=None, description="Not used for scoring.")
    response: str
    label: Any = Field(
        description='A label object {"verifier", "reference", "options"?} (or a string holding one), else a bare '
        "reference for the default verifier: a string, a number (as its canonical string), a list (several "
        "golds) or the verifier's reference object. null (an unlabelled sample) is answered at once with "
        "failure_value, whatever on_failure says."
    )


def failure_policy(
    on_failure: FailurePolicy | None = Query(
        None,
        description="What a scoring failure returns: raise (503) | none | value. Default: PROCTOR_ON_FAILURE.",
    ),
    failure_value: float | None = Query(
        None,
        allow_inf_nan=False,
        description="The reward under on_failure=value. Default: PROCTOR_FAILURE_VALUE.",
    ),
    state: ServiceState = Depends(get_state),
) -> tuple[FailurePolicy, float]:
    """The request's on_failure policy and failure value, falling back to the settings."""
    policy = on_failure or state.settings.on_failure
    value = state.settings.failure_value if failure_value is None else failure_value
    return policy, value


def compat_request(
    label: Any, response: str, default_verifier: str, field: str
) -> tuple[dict[str, Any], bool]:
    """The score request for a compat label (see adapters.labels.label_request); a bad label is a 422 at field."""
    try:
        return label_request(label, response, default_verifier)
    except BadLabel as exc:
        raise RequestError(422, f"{field}: {exc}", field) from None


def label_error(exc: RequestError, label_field: str, structured: bool) -> RequestError:
    """Re-point an engine error at the compat field the client sent (e.g. labels.3.reference.op)."""
    field = exc.field
    if not structured:
        if exc.status == 404:  # the default verifier is not registered: a server configuration problem
            return RequestError(exc.status, f"{exc.message} (PROCTOR_DEFAULT_VERIFIER)", None)
        return RequestError(exc.status, f"{label_field}: {exc.message}", label_field)
    full = f"{label_field}.{field}" if field else label_field
    return RequestError(exc.status, f"{label_field}: {exc.message}", full)


def openrlhf_items(
    body: OpenRLHFRequest, default_verifier: str, end_tokens: tuple[str, ...]
) -> tuple[list[dict[str, Any]], list[bool], dict[int, Score]]:
    """The score requests of OpenRLHF's items, whether each label named its verifier, and the failed items.

    An item whose response strip_prompt cannot locate is failed (prompt_mismatch), not scored; its label is
    still checked, so a bad one is its 4xx as for any other item.
    """
    requests: list[dict[str, Any]] = []
    structured: list[bool] = []
    mismatched: dict[int, Score] = {}
    for index, (query, prompt, label) in enumerate(zip(body.query, body.prompts, body.labels, strict=True)):
        try:
            response = strip_prompt(query, prompt)
        except PromptMismatch:
            request, named = compat_request(label, "", default_verifier, f"labels.{index}")
            try:
                item = prepare(request, end_tokens=end_tokens)
            except RequestError as exc:
                raise label_error(exc, f"labels.{index}", named) from None
            mismatched[index] = prompt_mismatch_score(item.spec.qualified_name, index)
            continue
        request, named = compat_request(label, response, default_verifier, f"labels.{index}")
        requests.append({**request, "id": index})
        structured.append(named)
    return requests, structured, mismatched


@router.post(
    "/openrlhf/get_reward",
    response_model=OpenRLHFResponse,
    responses=error_responses(400, 401, 404, 413, 422, 429, 503),
    summary="OpenRLHF remote reward",
    openapi_extra=server_validated(
        labels="A plain label is the default verifier's reference; a label object's reference and options are "
        "its verifier's. " + VERIFIER_REFERENCE,
        prompts="Needs one item per query.",
    ),
)
async def openrlhf_get_reward(
    body: OpenRLHFRequest,
    policy: tuple[FailurePolicy, float] = Depends(failure_policy),
    state: ServiceState = Depends(get_state),
) -> Response:
    """Score OpenRLHF's batch: rewards, scores (NaN for failures under on_failure=none) and extra_logs."""
    count = len(body.query)
    for name in ("prompts", "labels"):
        if len(getattr(body, name)) != count:
            raise RequestError(
                422, f"{name} has {len(getattr(body, name))} items but query has {count}", name
            )
    if count > state.settings.max_batch_items:
        raise RequestError(
            413,
            f"{count} items; the limit is {state.settings.max_batch_items} (PROCTOR_MAX_BATCH_ITEMS)",
            "query",
        )
    engine = state.require_engine()
    # Finding each response in its query (strip_prompt), reading the labels and preparing the items that
    # fail run on a thread once the text is past inline_max_chars, so one big body never stalls the event loop.
    size = sum(map(len, body.query)) + sum(map(len, body.prompts))
    size += sum(len(label) for label in body.labels if isinstance(label, str))
    args = (body, state.settings.default_verifier, engine.settings.end_token_list)
    requests, structured, mismatched = (
        openrlhf_items(*args)
        if size <= engine.settings.inline_max_chars
        else await asyncio.to_thread(openrlhf_items, *args)
    )
    results: list[Any] = []
    if requests:
        async with state.admission.slot(lane_of_requests(engine, requests)):
            results = await engine.score_batch_async(requests)
    for request, named, result in zip(requests, structured, results, strict=True):
        if isinstance(result, ItemError):
            error = RequestError(result.error.status, result.error.message, result.error.field)
            raise label_error(error, f"labels.{request['id']}", named)
    scored = iter(results)
    scores: list[Score] = [mismatched.get(index) or next(scored) for index in range(count)]
    for result in scores:
        state.metrics.observe_score(result)
    on_failure, value = policy
    outcomes = [reward_or_policy(result, on_failure, value) for result in scores]  # ScoringFailed -> 503
    payload = reward_payload(outcomes, value, scores, with_rejected=False)
    return json_response(payload, nan="constants")


@router.post(
    "/slime",
    response_model=float | None,
    responses=error_responses(400, 401, 404, 413, 422, 429, 503),
    summary="slime remote reward",
    openapi_extra=server_validated(
        label="A plain label is the default verifier's reference; a label object's reference and options are "
        "its verifier's. " + VERIFIER_REFERENCE,
    ),
)
async def slime_reward(
    body: SlimeRequest,
    policy: tuple[FailurePolicy, float] = Depends(failure_policy),
    state: ServiceState = Depends(get_state),
) -> Response:
    """Score one slime sample; the answer is the bare reward (null for a failure under on_failure=none)."""
    on_failure, value = policy
    if body.label is None:
        # An unlabelled sample has nothing to score against. A 4xx would make slime retry for minutes and then
        # crash the rollout, so it is failure_value at once; proctor.adapters.slime.sample_filter removes it.
        return json_response(value)
    request, named = compat_request(body.label, body.response, state.settings.default_verifier, "label")
    engine = state.require_engine()
    try:
        item = await engine.prepare_async(request)
    except RequestError as exc:
        raise label_error(exc, "label", named) from None
    async with state.admission.slot(lane_of(engine, item)):
        result = await engine.score_async(item)
    state.metrics.observe_score(result)
    return json_response(reward_or_policy(result, on_failure, value))


# -- Search-R1 ------------------------------------------------------------------------------------------

SEARCH_R1_DEFAULT_TOPK = 3
"""Search-R1's retrieval server's default `topk` (its `--topk`), used when a request leaves it out or sends 0."""
SEARCH_R1_MAX_QUERIES = 1_024
SEARCH_R1_MAX_QUERY_CHARS = 10_000
SEARCH_R1_MAX_TOPK = 100
SEARCH_R1_MAX_PASSAGES = 20_000
"""At most this many passages per request (queries × topk): about 12 MB of JSON."""


class SearchR1Request(BaseModel):
    """Search-R1's retriever request: a batch of queries, how many passages each, and whether to score them."""

    model_config = ConfigDict(extra="ignore")

    queries: list[Annotated[str, StringConstraints(max_length=SEARCH_R1_MAX_QUERY_CHARS)]] = Field(
        max_length=SEARCH_R1_MAX_QUERIES,
        description="One search query per item (each read up to its first 1,000 characters).",
    )
    topk: JsonInt = Field(
        default=0,
        ge=0,
        le=SEARCH_R1_MAX_TOPK,
        description="Passages per query; 0 means Search-R1's default, 3.",
    )
    return_scores: bool = Field(default=False, description="Wrap each passage as {document, score}.")


def _passage(hit: Any) -> dict[str, str]:
    document = hit.document
    return {"id": document.id, "title": document.title, "text": document.text, "contents": document.contents}


def _retrieve(queries: list[str], k: int, with_scores: bool) -> list[list[Any]]:
    # Imported here: the corpus, BM25 and numpy load on the first retrieval, not when the service imports routes.
    from proctor.environments.tools.search_qa.index import search_index

    index = search_index()
    results: list[list[Any]] = []
    for query in queries:
        hits = index.search(query, k)
        if with_scores:
            results.append([{"document": _passage(hit), "score": hit.score} for hit in hits])
        else:
            results.append([_passage(hit) for hit in hits])
    return results


@router.post(
    "/search_r1/retrieve",
    responses=error_responses(401, 413, 422, 429),
    summary="Search-R1 retriever over the bundled corpus",
    openapi_extra=server_validated(
        queries=f"At most {SEARCH_R1_MAX_PASSAGES:,} passages per request: len(queries) × topk (3 when 0)."
    ),
)
async def search_r1_retrieve(body: SearchR1Request, state: ServiceState = Depends(get_state)) -> Response:
    """BM25 over the tool.search_qa corpus in Search-R1's retriever shape: {"result": [[passage, ...], ...]}."""
    k = body.topk or SEARCH_R1_DEFAULT_TOPK
    if len(body.queries) * k > SEARCH_R1_MAX_PASSAGES:
        raise RequestError(
            422,
            f"{len(body.queries)} queries × topk {k} is more than {SEARCH_R1_MAX_PASSAGES:,} passages; "
            "split the batch",
            "queries",
        )
    async with state.admission.slot(POOL):  # BM25 over many queries is CPU work on a thread
        result = await asyncio.to_thread(_retrieve, body.queries, k, body.return_scores)
    return json_response({"result": result})
