"""verl reward functions backed by Proctor: `compute_score`, `compute_score_async` and `compute_score_batch`.

verl (tested with 0.9.1; 0.8 on) loads a custom reward function from `reward.custom_reward_function`
(`path`: a file, or `pkg://proctor.adapters.verl`; `name`; `reward_kwargs`, merged into every call), with
`verl.trainer.ppo.reward.get_custom_reward_fn`; verl 0.9's `main_ppo` ignores a top-level
`custom_reward_function`. Its reward-loop managers (`reward.reward_manager.name`: naive, dapo, gdpo,
rate_limited, remote) call `compute_score(data_source=, solution_str=, ground_truth=, extra_info=)` one sample
at a time, in a thread, or await it when it is a coroutine function (`compute_score_async`).
`compute_score_batch(data_sources=, solution_strs=, ground_truths=, extra_infos=)` is for the `batch` manager
of verl up to 0.7 (`reward_model.reward_manager=batch`, outside 0.7's default reward loop); 0.8 and 0.9's
reward loop has none. verl 0.7 and older read a top-level `custom_reward_function` (0.7 accepts `pkg://`).
Each may return a float, or a dict with `"score"` whose other keys verl logs (`reward_extra_info`; numeric
keys get mean@N / best@N statistics in validation, strings are kept in dumps).

These functions return `{"score", "acc", "failed", "status", "reason"}` (or a plain float with
`return_dict=False`). verl builds each extra-info column from the keys of the batch's first item and indexes
every other item by them, so every item, scored or failed, carries exactly these keys.

Which verifier: `extra_info["verifier"]` (with `extra_info["options"]`), else the `verifier` keyword,
else the mapping `verifiers[data_source]` (a name, or `{"verifier": name, "options": {...}}`), else
`default_verifier`, else a ValueError naming the data source. `ground_truth` is the reference.

Where: through the Proctor service when a server URL is set (`server_url`, or $PROCTOR_URL), else in this
process with `proctor.score_batch` (and its killable worker pool).

Configuration, later sources winning: environment variables (read on first use: PROCTOR_URL, PROCTOR_TOKEN,
PROCTOR_VERL_VERIFIERS as a JSON object, PROCTOR_VERL_DEFAULT_VERIFIER, PROCTOR_ON_FAILURE,
PROCTOR_FAILURE_VALUE, PROCTOR_VERL_IN_PROCESS=1), then `configure(...)`, then the keyword arguments verl
passes from `custom_reward_function.reward_kwargs`. verl runs reward functions in Ray workers, where a
`configure()` call made in the driver process is not seen: use environment variables (Ray's
`runtime_env.env_vars`) or `reward_kwargs` there.

Failure policy in verl (`on_failure`, default `raise`):
- `raise`: ScoringFailed propagates out of the reward manager and stops the training step loudly. Except
  under verl's `rate_limited` manager, which catches every exception from a reward function, trains the
  sample on 0.0 and logs `{"error", "acc"}` for it instead of the function's keys (verl then fails on the
  missing keys, or, when every item failed, trains on zeros): there a raise cannot stop the run, so a scoring
  failure is answered as `value` would answer it (`failure_value`, `failed=1.0`, the same keys as every other
  item) and logged as an error. That sample is trained on `failure_value`, 0.0 unless set: under rate_limited a
  machinery failure is a reward, never masked (verl has no mask there); watch the `failed` key's mean.
- `none`: not available. verl writes the score straight into the reward tensor: None is a TypeError there
  and NaN spreads through the group's mean and std into every advantage of the batch. It is refused
  with a ValueError.
- `value`: the sample is trained on `failure_value`; the returned dict says `failed=1.0` and the status,
  so the failure rate shows in verl's logged metrics.
A request the service rejects (422 bad reference, 413 too large) follows the same policy; an unknown
verifier (404) always raises, being a configuration error. An unreachable service raises
ProctorUnavailable after the client's retries, whatever the policy.
"""

# No `from __future__ import annotations` here: verl loads a reward function's file path without putting the
# module in sys.modules, and dataclasses then fail on string annotations (VerlConfig).
import json
import logging
import os
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from proctor.adapters._common import (
    Result,
    check_policy,
    outcome,
    plain,
    score_many,
    score_many_async,
    warn_failures,
)
from proctor.contract import Score

VerifierEntry = str | dict[str, Any]
log = logging.getLogger("proctor.adapters.verl")


@dataclass(frozen=True)
class VerlConfig:
    """Where and how the verl adapter scores."""

    server_url: str | None = None
    token: str | None = None
    verifiers: dict[str, VerifierEntry] = field(default_factory=dict)
    default_verifier: str | None = None
    verifier: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    on_failure: str = "raise"
    failure_value: float = 0.0
    in_process: bool = False
    return_dict: bool = True

    def target(self) -> str | None:
        """The service URL to score through, or None for in-process."""
        return None if self.in_process else self.server_url


_FIELDS = frozenset(f.name for f in fields(VerlConfig))
_lock = threading.Lock()
_config: VerlConfig | None = None


def config_from_env() -> VerlConfig:
    """The configuration the environment variables describe."""
    env = os.environ
    verifiers: dict[str, VerifierEntry] = {}
    if env.get("PROCTOR_VERL_VERIFIERS"):
        try:
            verifiers = json.loads(env["PROCTOR_VERL_VERIFIERS"])
        except json.JSONDecodeError as exc:
            raise ValueError(f"PROCTOR_VERL_VERIFIERS is not valid JSON: {exc}") from None
    # Not validated here: configure() or a call's keywords may still override what the environment says.
    return VerlConfig(
        server_url=env.get("PROCTOR_URL") or None,
        token=env.get("PROCTOR_TOKEN") or None,
        verifiers=verifiers,
        default_verifier=env.get("PROCTOR_VERL_DEFAULT_VERIFIER") or None,
        on_failure=env.get("PROCTOR_ON_FAILURE") or "raise",
        failure_value=float(env.get("PROCTOR_FAILURE_VALUE") or 0.0),
        in_process=env.get("PROCTOR_VERL_IN_PROCESS", "").lower() in ("1", "true", "yes"),
    )


def current_config() -> VerlConfig:
    """The configuration in force in this process (read from the environment on first use)."""
    global _config
    with _lock:
        if _config is None:
            _config = config_from_env()
        return _config


class _Unset:
    def __repr__(self) -> str:
        return "unchanged"


UNSET: Any = _Unset()


def configure(
    *,
    server_url: str | None = UNSET,
    token: str | None = UNSET,
    verifiers: Mapping[str, VerifierEntry] = UNSET,
    default_verifier: str | None = UNSET,
    verifier: str | None = UNSET,
    options: Mapping[str, Any] = UNSET,
    on_failure: str = UNSET,
    failure_value: float = UNSET,
    in_process: bool = UNSET,
    return_dict: bool = UNSET,
) -> VerlConfig:
    """Change this process's configuration; arguments not given keep their value (initially from the environment)."""
    global _config
    given = {key: value for key, value in locals().items() if value is not UNSET}
    updated = _validated(_merge(current_config(), given))
    with _lock:
        _config = updated
    return updated


def reset_config() -> None:
    """Forget configure() calls; the environment is read again on next use."""
    global _config
    with _lock:
        _config = None


def _merge(base: VerlConfig, changes: Mapping[str, Any]) -> VerlConfig:
    known = {key: plain(value) for key, value in changes.items() if key in _FIELDS}
    return replace(base, **known) if known else base


def _validated(config: VerlConfig) -> VerlConfig:
    policy = check_policy(config.on_failure)
    if policy == "none":
        raise ValueError(
            "on_failure='none' cannot work in verl: verl writes each score into the reward tensor, where None "
            "fails and NaN spreads into every advantage of the group; use 'raise' or 'value'"
        )
    if not isinstance(config.verifiers, Mapping):
        raise ValueError("verifiers must map data_source to a verifier name or {verifier, options}")
    if not isinstance(config.options, Mapping):
        raise ValueError("options must be a mapping")
    return replace(config, failure_value=float(config.failure_value))


def _choose(config: VerlConfig, data_source: Any, extra: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    options: dict[str, Any] = {}
    verifier = extra.get("verifier") or config.verifier
    if not verifier:
        entry = config.verifiers.get(str(data_source))
        if isinstance(entry, Mapping):
            verifier = entry.get("verifier")
            options.update(entry.get("options") or {})
        else:
            verifier = entry or config.default_verifier
    if not verifier:
        known = ", ".join(sorted(config.verifiers)) or "none"
        raise ValueError(
            f"no Proctor verifier for data_source {data_source!r} (mapped data sources: {known}); set "
            "verifiers={data_source: verifier}, default_verifier, or extra_info['verifier']"
        )
    options.update(config.options)
    options.update(extra.get("options") or {})
    return str(verifier), options


def build_request(
    config: VerlConfig, data_source: Any, solution_str: str, ground_truth: Any, extra_info: Any
) -> dict[str, Any]:
    """The Proctor ScoreRequest (as a dict) for one verl sample."""
    extra: dict[str, Any] = {}
    if isinstance(extra_info, Mapping):  # only our keys: verl adds large ones (rollout_reward_scores, ...)
        extra = {key: plain(extra_info[key]) for key in ("verifier", "options") if key in extra_info}
    verifier, options = _choose(config, data_source, extra)
    return {
        "verifier": verifier,
        "response": str(solution_str),
        "reference": plain(ground_truth),
        "options": options,
    }


def to_verl(result: Result, config: VerlConfig) -> float | dict[str, Any]:
    """verl's return value for one result, applying the failure policy."""
    reward = outcome(result, config.on_failure, config.failure_value)  # type: ignore[arg-type]
    assert reward is not None  # 'none' is refused by _validated
    if not config.return_dict:
        return float(reward)
    if isinstance(result, Score):
        status, reason, correct = result.status.value, result.reason or "", result.correct
    else:
        status, reason, correct = "rejected", f"http_{result.error.status}", None
    ok = isinstance(result, Score) and status == "ok"
    return {
        "score": float(reward),
        "acc": float(correct) if correct is not None else float(reward),
        "failed": 0.0 if ok else 1.0,
        "status": status,
        "reason": reason,
    }


def _call_config(kwargs: Mapping[str, Any]) -> VerlConfig:
    # verl also passes its own keywords (reward_router_address, ...): only ours are taken.
    config = _validated(_merge(current_config(), kwargs))
    if config.on_failure == "raise" and _called_by_catching_manager():
        return replace(config, on_failure="value")
    return config


# verl's rate_limited reward manager (verl/experimental/reward_loop/reward_manager/limited.py) wraps the call in
# `except Exception` and trains the sample on 0.0: a raise cannot stop the run there, and its failure dict
# (`error`, `acc`) lacks the keys every other item has.
_CATCHING_MANAGERS = (os.path.join("reward_manager", "limited.py"),)
_warned_catching = False


def _called_by_catching_manager(depth: int = 8) -> bool:
    """Whether a verl manager that catches every exception from the reward function is calling it."""
    global _warned_catching
    frame = sys._getframe(2)
    for _ in range(depth):
        if frame is None:
            return False
        if frame.f_code.co_filename.endswith(_CATCHING_MANAGERS):
            if not _warned_catching:
                _warned_catching = True
                log.error(
                    "proctor verl: on_failure='raise' under verl's rate_limited reward manager, which catches "
                    "exceptions and trains on 0.0: scoring failures are answered as on_failure='value' instead "
                    "(the sample is trained on failure_value, failed=1.0); set on_failure='value' to say so"
                )
            return True
        frame = frame.f_back
    return False


def compute_score(
    data_source: Any, solution_str: str, ground_truth: Any, extra_info: Any = None, **kwargs: Any
) -> float | dict[str, Any]:
    """verl's custom reward function: score one sample with Proctor."""
    config = _call_config(kwargs)
    request = build_request(config, data_source, solution_str, ground_truth, extra_info)
    (result,) = score_many([request], config.target(), config.token)
    warn_failures("proctor verl compute_score", [result])
    return to_verl(result, config)


async def compute_score_async(
    data_source: Any, solution_str: str, ground_truth: Any, extra_info: Any = None, **kwargs: Any
) -> float | dict[str, Any]:
    """The same as compute_score, as a coroutine for verl's asynchronous reward loop."""
    config = _call_config(kwargs)
    request = build_request(config, data_source, solution_str, ground_truth, extra_info)
    (result,) = await score_many_async([request], config.target(), config.token)
    warn_failures("proctor verl compute_score_async", [result])
    return to_verl(result, config)


def compute_score_batch(
    data_sources: Sequence[Any],
    solution_strs: Sequence[str],
    ground_truths: Sequence[Any],
    extra_infos: Sequence[Any] | None = None,
    **kwargs: Any,
) -> list[float | dict[str, Any]]:
    """verl's BatchRewardManager function: score the whole batch in one Proctor call, in order."""
    config = _call_config(kwargs)
    count = len(solution_strs)
    if extra_infos is None:
        extra_infos = [None] * count
    if not len(data_sources) == len(ground_truths) == len(extra_infos) == count:
        raise ValueError("data_sources, solution_strs, ground_truths and extra_infos differ in length")
    requests = [
        build_request(config, source, solution, truth, extra)
        for source, solution, truth, extra in zip(
            data_sources, solution_strs, ground_truths, extra_infos, strict=True
        )
    ]
    results = score_many(requests, config.target(), config.token)
    warn_failures("proctor verl compute_score_batch", results)
    return [to_verl(result, config) for result in results]
