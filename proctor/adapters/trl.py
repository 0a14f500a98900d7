"""TRL reward functions backed by Proctor: `reward_function` (async) and `reward_function_sync`.

TRL's GRPOTrainer (and RLOOTrainer) call each reward function as `f(prompts=, completions=,
completion_ids=, **columns)` where `columns` are the dataset's other columns (one value per completion)
plus `trainer_state` and, in recent versions, `log_metric` / `log_extra`; they log it under `f.__name__`.
Since TRL 0.27 a reward function may be a coroutine function: TRL awaits it on its own event loop,
concurrently with the other async reward functions. Older versions need `reward_function_sync`.

The returned function scores the whole batch in one Proctor call (one HTTP request per chunk the server's
limits allow, in-process when no server URL is set), reads the reference from the dataset column
`reference_column`, and takes the text of conversational completions from the last assistant message.

Failure policy in TRL (`on_failure`, default `none`):
- `none` returns None for a failed item. TRL (0.16 and later) turns None into NaN and sums the reward
  functions with `nansum`, so the failed function simply drops out of that completion's sum. When every
  reward function returned None for a completion, TRL before 1.6 still sums to 0 and trains on that 0
  (with a warning "All reward functions returned None"); TRL 1.6 and later leave such a completion out of
  the group baseline and give it zero advantage. So with a single Proctor reward function, use TRL >= 1.6
  for true masking, or add a second reward function (e.g. a format reward) that always scores.
- `value` returns `failure_value` for a failed item, which TRL trains on like any reward.
- `raise` raises ScoringFailed, which stops training.
A request the service rejects (422 bad reference, 413 too large) follows the same policy; an unknown
verifier (404) always raises. An unreachable service raises ProctorUnavailable after the client's
retries, whatever the policy. When TRL passes `log_metric`, the share of failed items is logged as
`proctor/<name>/failed`.

Both are module-level callable classes (`ProctorReward`, `ProctorRewardSync`) that pickle as their settings
and open their HTTP clients lazily in the process that calls them, so TRL's AsyncGRPOTrainer (which pickles
reward functions to its spawned rollout process) accepts them; checked against trl 1.16.0.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from proctor.adapters._common import (
    Result,
    check_policy,
    completion_text,
    failed,
    outcome,
    plain,
    score_many,
    score_many_async,
    server_url_from_env,
    warn_failures,
)
from proctor.policy import FailurePolicy

Rewards = list[float | None]


@dataclass(frozen=True)
class _Scorer:
    """Turns one TRL reward call into Proctor requests, and Proctor results into TRL rewards."""

    verifier: str
    reference_column: str | None
    target: str | None
    token: str | None
    options: dict[str, Any]
    on_failure: FailurePolicy
    failure_value: float
    name: str

    def requests(self, completions: Sequence[Any], columns: Mapping[str, Any]) -> list[dict[str, Any]]:
        references = self._references(len(completions), columns)
        return [
            {
                "verifier": self.verifier,
                "response": completion_text(completion),
                "reference": reference,
                "options": self.options,
            }
            for completion, reference in zip(completions, references, strict=True)
        ]

    def _references(self, count: int, columns: Mapping[str, Any]) -> list[Any]:
        if self.reference_column is None:
            return [None] * count
        if self.reference_column not in columns:
            present = ", ".join(sorted(key for key in columns if not callable(columns[key]))) or "none"
            raise KeyError(
                f"reward function {self.name}: the batch has no column {self.reference_column!r} "
                f"(columns: {present}); pass reference_column="
            )
        references = list(plain(columns[self.reference_column]))
        if len(references) != count:
            raise ValueError(
                f"reward function {self.name}: {len(references)} references for {count} completions"
            )
        return references

    def rewards(self, results: list[Result], columns: Mapping[str, Any]) -> Rewards:
        warn_failures(f"proctor reward function {self.name}", results)
        log_metric = columns.get("log_metric")
        if callable(log_metric) and results:
            log_metric(f"proctor/{self.name}/failed", sum(map(failed, results)) / len(results))
        return [outcome(result, self.on_failure, self.failure_value) for result in results]


def _scorer(
    verifier: str,
    reference_column: str | None,
    server_url: str | None,
    token: str | None,
    options: dict[str, Any] | None,
    on_failure: str,
    failure_value: float,
    name: str | None,
    in_process: bool,
) -> _Scorer:
    if not verifier:
        raise ValueError("verifier must name a Proctor verifier, e.g. 'text.match'")
    return _Scorer(
        verifier=verifier,
        reference_column=reference_column,
        target=None if in_process else server_url_from_env(server_url),
        token=token,
        options=dict(options or {}),
        on_failure=check_policy(on_failure),
        failure_value=float(failure_value),
        name=name or "proctor_" + re.sub(r"\W", "_", verifier),
    )


class _Reward:
    """A TRL reward function as a picklable object: its scorer's settings, never a client.

    TRL's AsyncGRPOTrainer pickles `reward_funcs` to a spawned rollout process (AsyncRolloutWorker.start checks
    `pickle.dumps` up front), which closures cannot pass. An instance pickles as its class and its `_Scorer`
    (plain data); the HTTP clients live in the per-process cache of `proctor.adapters._common`, opened on the
    first call in whichever process the function runs, so nothing bound to a socket or an event loop travels.
    """

    __defaults__ = None
    __kwdefaults__ = None

    def __init__(self, scorer: _Scorer) -> None:
        self._scorer = scorer
        self._describe()

    def _describe(self) -> None:
        # TRL logs rewards under __name__ (get_callable_name falls back to the class name without it).
        self.__name__ = self.__qualname__ = self._scorer.name
        self.__doc__ = f"Proctor reward: {self._scorer.verifier}, reference from column {self._scorer.reference_column!r}."
        self.proctor_verifier = self._scorer.verifier

    def __reduce__(self) -> tuple[Any, ...]:
        # settings only (pickle and copy use this, never __getstate__): clients are per process, made lazily
        return (_restore, (type(self), self._scorer))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._scorer.name}: {self._scorer.verifier} -> {self._scorer.target})"


def _restore(cls: type[_Reward], scorer: _Scorer) -> _Reward:
    return cls(scorer)


async def _async_signature(prompts: list[Any], completions: list[Any], **columns: Any) -> Rewards:
    """Only its code object is used: what `inspect.iscoroutinefunction` reads on a ProctorReward."""
    raise NotImplementedError


class ProctorReward(_Reward):
    """The async reward function `reward_function` returns; awaitable, picklable."""

    # TRL >= 1.16 finds the coroutine on __call__ (trl.trainer.utils.is_async_callable); older TRL asks
    # inspect.iscoroutinefunction(func), which on Python <= 3.11 accepts a "function-like" object: one with a
    # __name__, a __code__ (here a coroutine function's, with TRL's signature) and __defaults__/__kwdefaults__.
    __code__ = _async_signature.__code__

    async def __call__(self, prompts: list[Any], completions: list[Any], **columns: Any) -> Rewards:
        scorer = self._scorer
        results = await score_many_async(scorer.requests(completions, columns), scorer.target, scorer.token)
        return scorer.rewards(results, columns)


class ProctorRewardSync(_Reward):
    """The synchronous reward function `reward_function_sync` returns; picklable."""

    def __call__(self, prompts: list[Any], completions: list[Any], **columns: Any) -> Rewards:
        scorer = self._scorer
        results = score_many(scorer.requests(completions, columns), scorer.target, scorer.token)
        return scorer.rewards(results, columns)


def reward_function(
    verifier: str,
    *,
    reference_column: str | None = "answer",
    server_url: str | None = None,
    token: str | None = None,
    options: dict[str, Any] | None = None,
    on_failure: str = "none",
    failure_value: float = 0.0,
    name: str | None = None,
    in_process: bool = False,
) -> ProctorReward:
    """An async TRL reward function scoring each batch with one Proctor call (server_url or $PROCTOR_URL)."""
    scorer = _scorer(
        verifier, reference_column, server_url, token, options, on_failure, failure_value, name, in_process
    )
    return ProctorReward(scorer)


def reward_function_sync(
    verifier: str,
    *,
    reference_column: str | None = "answer",
    server_url: str | None = None,
    token: str | None = None,
    options: dict[str, Any] | None = None,
    on_failure: str = "none",
    failure_value: float = 0.0,
    name: str | None = None,
    in_process: bool = False,
) -> ProctorRewardSync:
    """The same reward function, synchronous, for TRL versions before 0.27 (no async reward functions)."""
    scorer = _scorer(
        verifier, reference_column, server_url, token, options, on_failure, failure_value, name, in_process
    )
    return ProctorRewardSync(scorer)
