"""slime's `--custom-rm-path` and `--rollout-sample-filter-path` with proctor.adapters.slime (issue 16, item 3).

slime (THUDM/slime, checked at 624b824, 2026-08-21) needs Megatron, SGLang and Ray and cannot be installed
here, so these tests replay its calls exactly: `load_function(path)` (`slime/utils/misc.py`: import the module
before the last dot, take the attribute), `await rm_function(args, sample)` from `async_rm`, or
`await rm_function(args, samples)` from `batched_async_rm` under `--group-rm`, then `sample.reward = reward`;
and `filter_func(args, data)` on the rollout's groups (`generate_rollout_async`). `Sample` below has the fields
of slime's `slime/utils/types.py` that these paths touch, with slime's defaults.
"""

from __future__ import annotations

import asyncio
import importlib
import time
from argparse import Namespace
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from proctor.client import ProctorRequestError
from proctor.engine import Engine
from proctor.policy import ScoringFailed
from tests.adapter_helpers import misbehaving_engine

MISBEHAVE = "test.misbehave"  # an exact match scores 1; "crash" is a verifier error; "sleep" times out


@dataclass
class Sample:
    """The fields of slime's Sample that its reward and filter paths use, with slime's defaults."""

    prompt: str | list[dict[str, str]] = ""
    response: str = ""
    label: Any = None
    reward: float | dict[str, Any] | None = None
    remove_sample: bool = False
    metadata: dict = field(default_factory=dict)


def load_function(path: str) -> Any:
    """slime.utils.misc.load_function, as slime resolves --custom-rm-path and --rollout-sample-filter-path."""
    module_path, _, attr = path.rpartition(".")
    return getattr(importlib.import_module(module_path), attr)


ARGS = Namespace(
    custom_rm_path="proctor.adapters.slime.custom_rm",
    rollout_sample_filter_path="proctor.adapters.slime.sample_filter",
    group_rm=False,
)


async def async_rm(sample: Sample) -> None:
    """slime's generate_and_rm for one sample: `sample.reward = await async_rm(args, sample)`."""
    sample.reward = await load_function(ARGS.custom_rm_path)(ARGS, sample)


async def batched_async_rm(samples: list[Sample]) -> None:
    """slime's --group-rm path: one call with the group, one reward per sample back."""
    rewards = await load_function(ARGS.custom_rm_path)(ARGS, samples)
    for sample, reward in zip(samples, rewards, strict=False):  # slime zips without strict
        sample.reward = reward
    assert len(rewards) == len(samples)


@pytest.fixture(scope="module")
def in_process() -> Iterator[Engine]:
    """A fresh process-wide engine whose pool workers know test.misbehave."""
    yield from misbehaving_engine()


@pytest.fixture(params=["http", "in_process"])
def where(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Score through $PROCTOR_URL, or in slime's process."""
    monkeypatch.setenv("PROCTOR_DEFAULT_VERIFIER", "text.match")
    monkeypatch.delenv("PROCTOR_ON_FAILURE", raising=False)
    if request.param == "http":
        monkeypatch.setenv("PROCTOR_URL", request.getfixturevalue("live_server"))
    else:
        monkeypatch.delenv("PROCTOR_URL", raising=False)
        request.getfixturevalue("in_process")
    return request.param


def test_custom_rm_scores_single_and_grouped_samples(where: str) -> None:
    samples = [
        Sample(prompt="6*7?", response="The answer is 42", label="42"),
        Sample(prompt=[{"role": "user", "content": "6*7?"}], response="The answer is 41", label=42),
        Sample(response="hi", label={"verifier": MISBEHAVE, "reference": "hi"}),
    ]

    async def run() -> None:
        await asyncio.gather(*(async_rm(sample) for sample in samples))

    asyncio.run(run())
    assert [sample.reward for sample in samples] == [1.0, 0.0, 1.0]
    assert all(sample.metadata["proctor_status"] == "ok" for sample in samples)
    assert not any(sample.remove_sample for sample in samples)

    group = [Sample(response="The answer is 7", label=7), Sample(response="The answer is 8", label="7")]
    asyncio.run(batched_async_rm(group))
    assert [sample.reward for sample in group] == [1.0, 0.0]


def test_unlabelled_sample_is_the_failure_value_at_once_and_removed(
    where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROCTOR_FAILURE_VALUE", "-0.5")
    for policy in ("raise", "none", "value"):  # whatever the policy: nothing to score, nothing to retry
        monkeypatch.setenv("PROCTOR_ON_FAILURE", policy)
        sample = Sample(response="anything", label=None)
        asyncio.run(async_rm(sample))
        assert sample.reward == -0.5 and sample.remove_sample
        assert sample.metadata["proctor_status"] == "unlabelled"


def test_failure_policies(where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    crash = {"verifier": MISBEHAVE, "reference": "x"}
    with pytest.raises(ScoringFailed):  # the default: the rollout fails loudly
        asyncio.run(async_rm(Sample(response="crash", label=crash)))
    monkeypatch.setenv("PROCTOR_ON_FAILURE", "none")
    removed = Sample(response="crash", label=crash)
    asyncio.run(async_rm(removed))
    assert removed.reward == 0.0 and removed.remove_sample  # a number: slime's normalisation reads it
    assert removed.metadata["proctor_status"] == "verifier_error"
    monkeypatch.setenv("PROCTOR_ON_FAILURE", "value")
    monkeypatch.setenv("PROCTOR_FAILURE_VALUE", "0.25")
    valued = Sample(response="crash", label=crash)
    asyncio.run(async_rm(valued))
    assert valued.reward == 0.25 and not valued.remove_sample
    monkeypatch.setenv("PROCTOR_ON_FAILURE", "raise")
    with pytest.raises(ProctorRequestError) as caught:  # a label that is no reference: rejected, loudly
        asyncio.run(async_rm(Sample(response="x", label=True)))
    assert caught.value.field == "label"


def test_sample_filter_removes_unlabelled_and_unrewarded_samples(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROCTOR_FAILURE_VALUE", "-1")
    kept = Sample(response="a", label="a", reward=1.0)
    unlabelled = Sample(response="a", label=None, reward=0.0)
    unrewarded = Sample(response="a", label="a", reward=None)
    nested = Sample(response="a", label=None, reward=None)
    data = [[kept, unlabelled], [unrewarded, [nested]]]  # groups; a group may hold lists of samples
    assert load_function(ARGS.rollout_sample_filter_path)(ARGS, data) is None
    assert not kept.remove_sample and kept.reward == 1.0
    assert unlabelled.remove_sample and unlabelled.reward == 0.0
    assert unrewarded.remove_sample and unrewarded.reward == -1.0
    assert nested.remove_sample and nested.reward == -1.0


def test_slime_route_answers_a_none_label_at_once_with_200(live_server: str) -> None:
    """slime's remote_rm retries any error 10 times with backoff (about 2.5 minutes), then fails the rollout."""
    for params, expected in (({}, 0.0), ({"failure_value": "-1"}, -1.0), ({"on_failure": "none"}, 0.0)):
        started = time.monotonic()
        response = httpx.post(
            f"{live_server}/compat/slime",
            json={"prompt": "p", "response": "r", "label": None},
            params=params,
            timeout=30,
        )
        assert response.status_code == 200, response.text
        assert response.json() == expected
        assert time.monotonic() - started < 5


def test_in_process_engine_fixture_is_used(in_process: Engine) -> None:
    # The in-process path scores with the same engine the service uses (the fixture registers test plugins).
    sample = Sample(response="hi", label={"verifier": MISBEHAVE, "reference": "hi"})
    asyncio.run(async_rm(sample))
    assert sample.reward == 1.0
