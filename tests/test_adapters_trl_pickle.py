"""TRL's reward functions survive pickling, as TRL's AsyncGRPOTrainer needs (issue 16, item 6).

The async GRPO trainer (trl.experimental.async_grpo, checked with trl 1.16.0) runs rollouts and rewards in a
spawned child: AsyncRolloutWorker.start() pickles its kwargs (reward_funcs included) and refuses anything that
does not pickle; the child unpickles them and scores with `_AsyncRolloutLoop._score_group`. The closures Proctor
returned before could not be pickled. Here the real AsyncRolloutWorker.start() spawns a real child, whose loop
runs TRL's own `_score_group` with the unpickled reward functions against a live server.
"""

from __future__ import annotations

import asyncio
import inspect
import pickle
import queue
from typing import Any

import pytest

from proctor.adapters import trl

MISBEHAVE = "test.misbehave"  # rewards an exact match of the response with the reference

PROMPTS = ["p1", "p2", "p3"]
COMPLETIONS = ["1", "2", "3"]
ANSWERS = ["1", "0", "3"]
EXPECTED = [1.0, 0.0, 1.0]


def both(url: str) -> list[Any]:
    """The async and the sync reward function, named apart."""
    return [
        trl.reward_function(MISBEHAVE, server_url=url, name="proctor_async"),
        trl.reward_function_sync(MISBEHAVE, server_url=url, name="proctor_sync"),
    ]


async def call(reward: Any) -> list[float | None]:
    """Call a reward function as TRL does, awaiting it when it is async."""
    kwargs = {"prompts": PROMPTS, "completions": COMPLETIONS, "completion_ids": [[1]] * 3, "answer": ANSWERS}
    if inspect.iscoroutinefunction(reward):
        return await reward(**kwargs)
    return await asyncio.to_thread(reward, **kwargs)


async def test_reward_functions_pickle_after_use_and_still_score(live_server: str) -> None:
    for reward in both(live_server):
        assert await call(reward) == EXPECTED  # opens (and caches) a client first
        data = pickle.dumps(reward)
        assert b"httpx" not in data and b"Client" not in data  # settings only, no client travels
        copy = pickle.loads(data)
        assert type(copy) is type(reward) and copy.__name__ == reward.__name__
        assert inspect.iscoroutinefunction(copy) == inspect.iscoroutinefunction(reward)
        assert await call(copy) == EXPECTED
        assert await call(pickle.loads(pickle.dumps(copy, protocol=2))) == EXPECTED


def test_async_one_is_a_coroutine_function_to_trl_and_to_inspect() -> None:
    from trl.trainer.utils import get_callable_name, is_async_callable

    asynchronous, synchronous = both("http://127.0.0.1:1")
    assert is_async_callable(asynchronous) and not is_async_callable(synchronous)
    # TRL before is_async_callable asked inspect.iscoroutinefunction directly.
    assert inspect.iscoroutinefunction(asynchronous) and not inspect.iscoroutinefunction(synchronous)
    assert get_callable_name(asynchronous) == "proctor_async"
    assert get_callable_name(synchronous) == "proctor_sync"
    assert list(inspect.signature(asynchronous).parameters) == ["prompts", "completions", "columns"]


# -- TRL's own pickling and scoring path -------------------------------------------------------------------

try:
    from trl.experimental.async_grpo import async_rollout_worker as worker_module
except ImportError:  # pragma: no cover - trl is in the train extra
    worker_module = None


class ScoringLoop(worker_module._AsyncRolloutLoop if worker_module else object):  # type: ignore[misc]
    """Runs in TRL's spawned child: keeps the unpickled reward functions and scores one group with TRL's code.

    Only construction is replaced (the real one loads a tokenizer and a dataset and talks to vLLM); the scoring
    is TRL's `_score_group`, which dispatches async and sync reward functions the way the trainer does.
    """

    def __init__(self, *, reward_funcs: list[Any], rollout_buffer: Any, **_: Any) -> None:
        self.reward_funcs = reward_funcs
        self.reward_func_names = [worker_module.get_callable_name(f) for f in reward_funcs]
        self._env_reward_types: list[type] = []
        self.rollout_buffer = rollout_buffer

    def run(self) -> None:
        sequence = worker_module.TrainingSequence(
            input_ids=[1], completion_mask=[1], old_log_probs=[0.0], rollout_id="r0"
        )
        group = worker_module.RolloutGroup(
            prompts=PROMPTS,
            reward_kwargs={"answer": ANSWERS},
            completions=COMPLETIONS,
            completions_ids=[[1]] * 3,
            completions_sequences=[[sequence]] * 3,
            tool_call_counts=[0] * 3,
            tool_failure_counts=[0] * 3,
            model_version=0,
            group_id=0,
            env_rewards=[None] * 3,
            rollout_rewards=[None] * 3,
        )
        try:
            samples = asyncio.run(self._score_group(group))
            self.rollout_buffer.put([sample.metrics for sample in samples])
        except BaseException as exc:  # report it to the parent rather than dying silently
            self.rollout_buffer.put(repr(exc))


@pytest.mark.skipif(worker_module is None, reason="trl is not installed")
def test_trl_async_rollout_worker_pickles_them_to_its_child_and_scores(
    live_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The worker's constructor only checks that vLLM and aiohttp are installed; the rollout here never uses them.
    monkeypatch.setattr(worker_module, "is_vllm_available", lambda: True)
    monkeypatch.setattr(worker_module, "is_aiohttp_available", lambda: True)
    from accelerate.state import PartialState

    PartialState()  # the trainer has set accelerate up by the time it starts the worker; its logging needs it

    class Worker(worker_module.AsyncRolloutWorker):
        _loop_cls = ScoringLoop

    rollout = Worker(reward_funcs=both(live_server), child_ready_timeout=240)
    rollout.start()  # TRL's pickle check, then a spawned child that unpickles the reward functions
    try:
        metrics = rollout.rollout_buffer.get(timeout=240)
    except queue.Empty:  # pragma: no cover
        pytest.fail("the rollout child sent nothing")
    finally:
        rollout.stop()
    assert isinstance(metrics, list), metrics
    assert [row["rewards/proctor_async"] for row in metrics] == EXPECTED
    assert [row["rewards/proctor_sync"] for row in metrics] == EXPECTED
    assert [row["reward"] for row in metrics] == [2 * value for value in EXPECTED]


def test_trl_rejects_a_closure_the_same_way() -> None:
    """The check the worker applies is pickle.dumps; a closure (the old adapter's shape) fails it."""

    def closure(prompts: list[Any], completions: list[Any], **columns: Any) -> list[float]:
        return [0.0] * len(completions)

    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        pickle.dumps({"reward_funcs": [closure]})
    pickle.dumps({"reward_funcs": both("http://127.0.0.1:1")})
