"""OpenRLHF helpers: build dataset labels for Proctor, and a `reward_func` for `--reward.remote_url file.py`.

OpenRLHF reaches a reward in one of two ways, both with the same payload, `(queries, prompts, labels)`:
- `--reward.remote_url http://host:8000/compat/openrlhf/get_reward` (`--remote_rm_url` before 0.10.2):
  the Proctor service's compatibility route answers `{rewards, scores, extra_logs}`.
- `--reward.remote_url /path/reward.py`: OpenRLHF imports the file and calls its `reward_func(queries, prompts,
  labels)`; a file holding `from proctor.adapters.openrlhf import reward_func` scores with Proctor, through
  $PROCTOR_URL when set, else in the OpenRLHF process.

Each label is a string (OpenRLHF's `--data.label_key` column). `label(verifier, reference, options)` writes
the JSON object form, which names the verifier; any other string is a plain gold answer for the default
verifier ($PROCTOR_DEFAULT_VERIFIER, else text.match). The response is the query with its prompt removed.

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

This module is the one place that reads labels and builds OpenRLHF's answer; the service's
`/compat/openrlhf/get_reward` route calls `label_request`, `strip_prompt` and `reward_payload` from here, so the
two paths cannot drift apart.
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
from proctor.contract import Score, Status
from proctor.settings import Settings

STATUS_LOG_KEYS = tuple(f"proctor_status_{status.value}" for status in Status)


def label(verifier: str, reference: Any, options: dict[str, Any] | None = None) -> str:
    """The OpenRLHF label string that asks Proctor for this verifier, reference and options."""
    body: dict[str, Any] = {"verifier": verifier, "reference": plain(reference)}
    if options:
        body["options"] = plain(options)
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"))


def _label_object(raw: Any) -> Any:
    if not isinstance(raw, str):
        return raw
    if not raw.lstrip().startswith("{"):
        return None
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):  # deeply nested JSON is still only a string, never a crash
        return None


def label_request(raw: Any, response: str, default_verifier: str) -> tuple[dict[str, Any], bool]:
    """The score request for a response under its label `raw`, and whether the label named its own verifier.

    A label that is (or parses as) a JSON object with `verifier` and `reference` keys names the verifier,
    with optional `options`; their values go to the engine as given, so a bad one is rejected naming its
    field rather than quietly scored some other way. Anything else is a plain gold answer for default_verifier.
    """
    body = _label_object(raw)
    if isinstance(body, dict) and "verifier" in body and "reference" in body:
        request = {"verifier": body["verifier"], "response": response, "reference": body["reference"]}
        if "options" in body:
            request["options"] = body["options"]
        return request, True
    return {"verifier": default_verifier, "response": response, "reference": raw}, False


def parse_label(raw: Any, default_verifier: str) -> tuple[Any, Any, Any]:
    """(verifier, reference, options) from a label: its JSON object form, else a gold answer for default_verifier."""
    request, _ = label_request(raw, "", default_verifier)
    return request["verifier"], request["reference"], request.get("options", {})


def strip_prompt(query: str, prompt: str) -> str:
    """The response part of an OpenRLHF query (prompt + response), or the whole query if it does not start so."""
    return query[len(prompt) :] if prompt and query.startswith(prompt) else query


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
    requests = [
        label_request(plain(text), strip_prompt(str(query), str(prompt)), settings.default_verifier)[0]
        for query, prompt, text in zip(queries, prompts, labels, strict=True)
    ]
    results = score_many(requests, server_url_from_env(None), os.environ.get("PROCTOR_TOKEN") or None)
    warn_failures("proctor openrlhf reward_func", results)
    return reward_payload([outcome(result, policy, value) for result in results], value, results)
