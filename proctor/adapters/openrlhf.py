"""OpenRLHF helpers: build dataset labels for Proctor, and a `reward_func` for `--reward.remote_url file.py`.

OpenRLHF reaches a reward in one of two ways, both with the same payload, `(queries, prompts, labels)`:
- `--reward.remote_url http://host:8000/compat/openrlhf/get_reward` (`--remote_rm_url` before 0.10.2):
  the Proctor service's compatibility route answers `{rewards, scores, extra_logs}`.
- `--reward.remote_url /path/reward.py`: OpenRLHF imports the file and calls its `reward_func(queries, prompts,
  labels)`; a file holding `from proctor.adapters.openrlhf import reward_func` scores with Proctor, through
  $PROCTOR_URL when set, else in the OpenRLHF process.

Each label is OpenRLHF's `--data.label_key` column, whatever JSON type the dataset gives it. A label object (or
a string holding one) with `verifier` and `reference` names the verifier (`label(verifier, reference, options)`
writes it); any other label is a bare reference for the default verifier ($PROCTOR_DEFAULT_VERIFIER, else
text.match): a string as is, a number as its canonical string (GSM8K's `42` -> "42"), a list as several golds,
an object as the verifier's reference object; None and booleans are rejected (see `proctor.adapters.labels`).
The response is the query with its prompt removed; when the query does not start with the prompt (OpenRLHF
cut the prompt's tokens on the left to fit `max_len`, or a BOS token was added), it is what follows the end of
the prompt the query starts with, else the whole prompt inside it, else the prompt's final assistant header;
when none locates it the item fails (reason `prompt_mismatch`, under on_failure) rather than scoring prompt
text (`proctor.adapters.labels.strip_prompt` gives the exact rule).

Failure policy in OpenRLHF (`on_failure`; default $PROCTOR_ON_FAILURE, else `raise`, as for the service's route):
- `raise`: reward_func raises ScoringFailed. OpenRLHF's agent executor catches exceptions from the reward
  call, logs "Failed to fetch reward from remote RM" at info level and leaves the sample's reward None; the
  step then fails (`reward_model_group is required ...` when no reward model is configured), so the run
  stops, but the cause is only in the log.
- `none`: the score is NaN and the reward `failure_value`. With `--algo.dynamic_filtering_enable` the
  prompt's whole group is dropped (OpenRLHF keeps a group only when the mean of its scores lies strictly
  inside `--algo.dynamic_filtering_range`, and NaN never does). Without dynamic filtering OpenRLHF cannot
  mask one sample, and trains on `failure_value`.
- `value`: rewards and scores are `failure_value` (default 0.0), trained on like any reward.
`extra_logs` carries `proctor_failed` and one 0/1 flag per status (`proctor_status_ok`, ...,
`proctor_rejected`), which OpenRLHF logs.

Labels and prompts are read by `proctor.adapters.labels`, OpenRLHF's answer is built here; the service's
`/compat/openrlhf/get_reward` route calls the same `label_request`, `strip_prompt` and `reward_payload`, so the
two paths cannot drift apart. Checked against openrlhf 0.11.2 (`openrlhf/utils/agent.py`).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from typing import Any

from proctor.adapters._common import (
    Result,
    check_policy,
    failed,
    outcome,
    plain,
    score_many,
    server_url_from_env,
    warn_failures,
)
from proctor.adapters.labels import (
    BadLabel,
    PromptMismatch,
    label_request,
    prompt_mismatch_score,
    strip_prompt,
)
from proctor.contract import ErrorBody, ItemError, Score, Status
from proctor.settings import Settings

STATUS_LOG_KEYS = tuple(f"proctor_status_{status.value}" for status in Status)


def label(verifier: str, reference: Any, options: dict[str, Any] | None = None) -> str:
    """The OpenRLHF label string that asks Proctor for this verifier, reference and options."""
    body: dict[str, Any] = {"verifier": verifier, "reference": plain(reference)}
    if options:
        body["options"] = plain(options)
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"))


def parse_label(raw: Any, default_verifier: str) -> tuple[Any, Any, Any]:
    """(verifier, reference, options) from a label: its JSON object form, else a gold answer for default_verifier."""
    request, _ = label_request(raw, "", default_verifier)
    return request["verifier"], request["reference"], request.get("options", {})


def status_logs(results: Sequence[Result], *, with_rejected: bool = True) -> dict[str, list[float]]:
    """Per-item 0/1 flags for each status and proctor_failed, plus proctor_rejected when `with_rejected`.

    The service's route answers a rejected item with a 4xx, so its logs have no proctor_rejected key; OpenRLHF
    needs the same keys in every answer, so each caller fixes its key set.
    """
    keys = [*STATUS_LOG_KEYS, "proctor_rejected"] if with_rejected else list(STATUS_LOG_KEYS)
    logs = {key: [0.0] * len(results) for key in keys}
    logs["proctor_failed"] = [float(failed(result)) for result in results]
    for index, result in enumerate(results):
        key = f"proctor_status_{result.status.value}" if isinstance(result, Score) else "proctor_rejected"
        logs[key][index] = 1.0
    return logs


def reward_payload(
    outcomes: Sequence[float | None], value: float, results: Sequence[Result], *, with_rejected: bool = True
) -> dict[str, Any]:
    """OpenRLHF's answer {rewards, scores, extra_logs} from each item's policy outcome (None: on_failure=none)."""
    # Under `none` only the score is NaN (dynamic filtering drops the group); the reward stays a number, so a
    # run without dynamic filtering trains on failure_value, not on NaN.
    return {
        "rewards": [value if reward is None else float(reward) for reward in outcomes],
        "scores": [math.nan if reward is None else float(reward) for reward in outcomes],
        "extra_logs": status_logs(results, with_rejected=with_rejected),
    }


def reward_func(queries: list[str], prompts: list[str], labels: list[Any], **kwargs: Any) -> dict[str, Any]:
    """OpenRLHF's custom reward function: {rewards, scores, extra_logs}, one value per query."""
    settings = Settings()  # read now, not cached: the same PROCTOR_* defaults as the service's route
    policy = check_policy(kwargs.get("on_failure") or settings.on_failure)
    value = float(kwargs.get("failure_value", settings.failure_value))
    if not len(queries) == len(prompts) == len(labels):
        raise ValueError("queries, prompts and labels differ in length")
    requests: list[dict[str, Any]] = []
    slots: list[int | ItemError | Score] = []  # the request index of each item, its rejection or its failure
    for index, (query, prompt, text) in enumerate(zip(queries, prompts, labels, strict=True)):
        try:
            request = label_request(plain(text), "", settings.default_verifier)[0]
        except BadLabel as exc:
            slots.append(ItemError(error=ErrorBody(status=422, message=str(exc), field=f"labels.{index}")))
            continue
        try:
            request["response"] = strip_prompt(str(query), str(prompt))
        except PromptMismatch:
            # the response cannot be told from the prompt: a failure, never the whole query scored
            slots.append(prompt_mismatch_score(str(request["verifier"]), index))
            continue
        slots.append(len(requests))
        requests.append(request)
    scored: list[Result] = []
    if requests:
        scored = score_many(requests, server_url_from_env(None), os.environ.get("PROCTOR_TOKEN") or None)
    results: list[Result] = [scored[slot] if isinstance(slot, int) else slot for slot in slots]
    warn_failures("proctor openrlhf reward_func", results)
    return reward_payload([outcome(result, policy, value) for result in results], value, results)
