"""slime reward function for `--custom-rm-path`, and a sample filter for `--rollout-sample-filter-path`.

Checked against THUDM/slime at 624b824 (2026-08-21), `slime/rollout/rm_hub/__init__.py` and
`slime/rollout/sglang_rollout.py`:

- `--custom-rm-path proctor.adapters.slime.custom_rm`: slime loads it with `load_function` (module path, then
  attribute) and awaits `custom_rm(args, sample, **kwargs)` for each sample (`async_rm`), or
  `custom_rm(args, samples, **kwargs)` with the whole group when `--group-rm` is set (`batched_async_rm`),
  expecting one reward per sample back. `custom_rm` takes both: a list in, a list out.
- `--rollout-sample-filter-path proctor.adapters.slime.sample_filter`: slime calls `sample_filter(args, data)`
  on the rollout's groups after generation; it sets `remove_sample = True` (loss mask zero) on every sample
  with no label, or with no numeric reward (which it then sets to the failure value, because slime's group
  normalisation still reads it).

Scoring goes to the service at $PROCTOR_URL (with $PROCTOR_TOKEN), or runs in slime's process without it. Each
sample's label is read as on the compatibility routes (`proctor.adapters.labels`): a label object names its
verifier, anything else is the reference of $PROCTOR_DEFAULT_VERIFIER; the response is `sample.response`.

Failure policy ($PROCTOR_ON_FAILURE, default `raise`; $PROCTOR_FAILURE_VALUE, default 0.0):
- a None label: reward failure_value and `remove_sample = True` at once, whatever the policy; nothing is
  scored and nothing raises (the `/compat/slime` route answers failure_value with HTTP 200 likewise).
- `raise`: ScoringFailed (or ProctorRequestError for a rejected label) propagates; slime's rollout fails.
- `none`: reward failure_value and `remove_sample = True`: the sample leaves the loss. slime has no reward
  that masks a sample; a None reward fails its group normalisation, so a number stays in the reward, and
  it still counts in its group's mean and std.
- `value`: reward failure_value, trained on like any reward.
Each sample also gets `metadata["proctor_status"]` (ok, timeout, ..., rejected, unlabelled).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from proctor.adapters._common import (
    Result,
    check_policy,
    outcome,
    plain,
    score_many_async,
    server_url_from_env,
    warn_failures,
)
from proctor.adapters.labels import BadLabel, label_request
from proctor.contract import ErrorBody, ItemError, Score
from proctor.settings import Settings


async def custom_rm(args: Any, sample: Any, **kwargs: Any) -> float | list[float]:
    """slime's custom reward function: one sample -> its reward; a list of samples (--group-rm) -> a list."""
    if isinstance(sample, list):
        return await _rewards(sample, kwargs)
    return (await _rewards([sample], kwargs))[0]


async def _rewards(samples: list[Any], kwargs: dict[str, Any]) -> list[float]:
    settings = Settings()  # read now: the same PROCTOR_* defaults as the service's /compat/slime route
    policy = check_policy(kwargs.get("on_failure") or settings.on_failure)
    value = float(kwargs.get("failure_value", settings.failure_value))
    requests: list[dict[str, Any]] = []
    slots: list[int | ItemError | None] = []  # request index, rejection, or None for an unlabelled sample
    for sample in samples:
        label = plain(getattr(sample, "label", None))
        if label is None:
            slots.append(None)
            continue
        try:
            request, _ = label_request(label, str(sample.response or ""), settings.default_verifier)
        except BadLabel as exc:
            slots.append(ItemError(error=ErrorBody(status=422, message=f"label: {exc}", field="label")))
            continue
        slots.append(len(requests))
        requests.append(request)
    scored: list[Result] = []
    if requests:
        token = os.environ.get("PROCTOR_TOKEN") or None
        scored = await score_many_async(requests, server_url_from_env(None), token)
    results = [scored[slot] if isinstance(slot, int) else slot for slot in slots]
    warn_failures("proctor slime custom_rm", [result for result in results if result is not None])
    rewards: list[float] = []
    for sample, result in zip(samples, results, strict=True):
        if result is None:
            _mark(sample, "unlabelled", remove=True)
            rewards.append(value)
            continue
        reward = outcome(result, policy, value)  # raises under `raise`
        status = result.status.value if isinstance(result, Score) else "rejected"
        _mark(sample, status, remove=reward is None)
        rewards.append(value if reward is None else float(reward))
    return rewards


def _mark(sample: Any, status: str, *, remove: bool) -> None:
    metadata = getattr(sample, "metadata", None)
    if isinstance(metadata, dict):
        metadata["proctor_status"] = status
    if remove:
        sample.remove_sample = True


def _samples(data: Any) -> Iterator[Any]:
    if isinstance(data, (list, tuple)):
        for item in data:
            yield from _samples(item)
    elif data is not None:
        yield data


def sample_filter(args: Any, data: Any) -> None:
    """slime's rollout sample filter: remove samples with no label or no numeric reward from the loss.

    `data` is the rollout's list of groups (each a list of samples, or of lists of samples). A removed sample
    whose reward is None gets $PROCTOR_FAILURE_VALUE, since slime's advantage normalisation still reads it.
    """
    value = Settings().failure_value
    for sample in _samples(data):
        if getattr(sample, "label", None) is None or getattr(sample, "reward", None) is None:
            sample.remove_sample = True
            if getattr(sample, "reward", None) is None:
                sample.reward = value
