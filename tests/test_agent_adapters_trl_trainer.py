"""trl 1.16's own `GRPOTrainer` trains through Proctor's `environment_factory` and `session_reward` (drop-in).

No replay of the trainer's calls: the real trainer is built and runs two optimiser steps on CPU against a live
Proctor (`live_server`), on `tool.demo_lookup` (one tool, `lookup()`, no arguments; paid only for answering with
the number a real lookup returned). The policy is a randomly initialised 2-layer Llama over a character
tokenizer made here (trainer/tokenizer.py), nothing downloaded. What TRL needs from the tokenizer for tools:

- a chat template that renders assistant `tool_calls` and `tool` messages (`supports_tool_calling`) and is
  prefix-preserving (`is_chat_template_prefix_preserving`), or TRL refuses tools / swaps in its own template;
- a `response_template` (transformers >= 5.13's response parser; TRL's `add_response_schema` only knows named
  model families' templates and raises on any other), from which `parse_response` reads the tool calls out of
  the generated ids: here Hermes-style `<tool_call>{json}</tool_call>` ended by `<|end|>`.

The whole call `<tool_call>{"name": "lookup", "arguments": {}}</tool_call>` is one token of the vocabulary, and
generation adds biases to a few moves (`sequence_bias`: call after the question, copy the observed digit, end
the turn), so the untrained model calls the tool in most rollouts, TRL's tool loop (`_tool_call_loop`: parse,
`method(**arguments)`, append the observation, generate again) really runs through Proctor sessions, and the
rewards mix 0 and 1. The rewards themselves are the sessions' own; the test only records what each reward call
saw, and makes the service lose one session of the last step to check that TRL masks it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from proctor.adapters import trl_env
from tests import agent_adapter_helpers as h

pytest.importorskip("trl")

ENVIRONMENT = "tool.demo_lookup"
CALL = '<tool_call>{"name": "lookup", "arguments": {}}</tool_call>'
# Hermes-style tool calls; `arguments` is a dict from TRL's parser and may be a JSON string in other sources
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>{{ message['content'] or '' }}"
    "{% for call in message.get('tool_calls') or [] %}"
    "<tool_call>{\"name\": {{ call['function']['name'] | tojson }}, \"arguments\": "
    "{% if call['function']['arguments'] is string %}{{ call['function']['arguments'] }}"
    "{% else %}{{ call['function']['arguments'] | tojson }}{% endif %}}</tool_call>"
    "{% endfor %}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
RESPONSE_TEMPLATE = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|assistant|>",
    "fields": {
        "tool_calls": {
            "open": "<tool_call>",
            "close_pattern": r"</tool_call>\s*",
            "repeats": True,
            "content": "json",
            "transform": {"type": "function", "function": "{content}"},
        },
        "content": {"close_pattern": r"<\|end\|>\s*", "content": "text"},
    },
}
STEPS = 2
GENERATIONS = 8
TASKS = [{"split": "train", "seed": 3, "index": index, "level": "easy"} for index in range(4)]


def tool_tokenizer() -> Any:
    """The character tokenizer (digits and the prompt's letters) with the whole call and the tool role."""
    from proctor.trainer.tokenizer import build_char_tokenizer

    tokenizer = build_char_tokenizer("0123456789 Hidenumbr?", tokens=[CALL, "<|tool|>"])
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.response_template = RESPONSE_TEMPLATE
    return tokenizer


def tiny_model(tokenizer: Any) -> Any:
    """A seeded random 2-layer Llama over the tokenizer's vocabulary (as trainer/grpo.py's build_model makes)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(
        "llama",
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=128,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32)


def policy_bias(tokenizer: Any) -> list[list[Any]]:
    """`sequence_bias` for generation that steers the random model along the task's moves without deciding them:
    call lookup() when the user has asked, end the turn after a call, copy the observed digit, end after a digit.
    Each is a bias on the logits, not a script, so the rollouts still differ and the rewards mix 0 and 1."""
    ids = tokenizer.convert_tokens_to_ids
    call, end, tool, assistant = ids(CALL), ids("<|end|>"), ids("<|tool|>"), ids("<|assistant|>")
    bias: list[list[Any]] = [[[ids("?"), end, assistant, call], 6.0], [[call, end], 6.0]]
    for digit in "012345":
        bias.append([[tool, ids(digit), end, assistant, ids(digit)], 4.0])
        bias.append([[assistant, ids(digit), end], 4.0])
    return bias


class RecordedReward:
    """Proctor's session reward, unchanged, with what each call saw and returned kept for the replay."""

    def __init__(self) -> None:
        self.inner = trl_env.session_reward()
        self.__name__ = self.inner.__name__
        self.calls: list[list[tuple[list[dict[str, Any]], float | None, dict[str, Any], str | None]]] = []

    def __call__(
        self, prompts: Any = None, completions: Any = None, environments: Any = None, **kwargs: Any
    ) -> list[float | None]:
        assert environments is not None
        sessions = [env.session_id for env in environments]  # the reward closes them
        rewards = self.inner(prompts=prompts, completions=completions, environments=environments, **kwargs)
        # TRL passes the dataset's other columns per completion: the row's task, for the replay's reference
        tasks = [row["task"] for row in kwargs["proctor"]]
        self.calls.append(
            [
                (list(env.transcript), r, t, s)
                for env, r, t, s in zip(environments, rewards, tasks, sessions, strict=True)
            ]
        )
        return rewards


def sabotaged(
    factory: type[trl_env.ProctorEnvironment], url: str, lost: list[str], scored: list[Any]
) -> type[Any]:
    """The factory's class, but the service loses the last step's first session right after it opens (as a
    restart or an expiry would): its tool calls and its finish fail, a machinery failure to be masked. The last
    step, because TRL keeps only that step's per-completion rewards and advantages."""

    class Sabotaged(factory):  # type: ignore[misc, valid-type]
        def reset(self, **row: Any) -> None:
            super().reset(**row)
            if not lost and len(scored) == STEPS - 1 and self.session_id is not None:
                lost.append(self.session_id)
                httpx.delete(f"{url}/v1/sessions/{self.session_id}", timeout=10).raise_for_status()

    return Sabotaged


def nan_to_none(values: Sequence[float]) -> list[float | None]:
    """TRL logs a masked reward as NaN."""
    return [None if math.isnan(v) else v for v in values]


def test_grpo_trainer_trains_through_proctor_sessions(live_server: str, tmp_path: Path) -> None:
    """GRPOTrainer runs its steps; every session is closed; TRL's rewards are `/v1/score` replays; the
    sabotaged rollout's reward is None (masked), not 0."""
    from trl import GRPOConfig, GRPOTrainer

    from datasets import Dataset

    tokenizer = tool_tokenizer()
    rows = [
        {
            "prompt": [{"role": "user", "content": "Hidden number?"}],
            "proctor": {"environment": ENVIRONMENT, "task": t},
        }
        for t in TASKS
    ]
    references = [h.reference_of(live_server, ENVIRONMENT, t) for t in TASKS]
    reward = RecordedReward()
    lost: list[str] = []
    factory = sabotaged(
        trl_env.environment_factory(ENVIRONMENT, server_url=live_server), live_server, lost, reward.calls
    )
    args = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        use_cpu=True,
        bf16=False,
        seed=0,
        max_steps=STEPS,
        per_device_train_batch_size=GENERATIONS,
        num_generations=GENERATIONS,
        max_completion_length=12,
        max_tool_calling_iterations=2,
        generation_kwargs={"sequence_bias": policy_bias(tokenizer)},
        learning_rate=1e-3,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        dataloader_num_workers=0,
    )
    before = h.open_sessions(live_server)
    model = tiny_model(tokenizer)
    initial = {name: p.detach().clone() for name, p in model.named_parameters()}
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        args=args,
        train_dataset=Dataset.from_list(rows),
        reward_funcs=[reward],
        environment_factory=factory,
    )
    trainer.train()

    assert trainer.state.global_step == STEPS
    assert len(reward.calls) == STEPS
    # the policy was updated: the mixed rewards gave nonzero advantages
    assert any(not p.detach().equal(initial[name]) for name, p in trainer.model.named_parameters())
    # every rollout's session was finished and deleted: the pooled instances reset into new ones, the reward
    # closed each at the end (the lost one is gone from the service too)
    assert h.open_sessions(live_server) == before
    assert len(lost) == 1 and h.session_gone(live_server, lost[0])

    rollouts = [rollout for call in reward.calls for rollout in call]
    assert len(rollouts) == STEPS * GENERATIONS
    # the lost session's reward is None (masked), never a 0 the policy is trained on; the rest are scores
    assert [r for _, r, _, s in rollouts if s == lost[0]] == [None]
    assert all(r is not None for _, r, _, s in rollouts if s != lost[0])
    assert {r for _, r, _, _ in rollouts} >= {0.0, 1.0}
    # TRL's own per-completion log of the last step: the lost rollout NaN (masked) with advantage 0; and its
    # logged per-step means and failure fraction
    last = [s for _, _, _, s in reward.calls[-1]].index(lost[0])
    assert math.isnan(trainer._logs["rewards"][reward.__name__][last])
    assert trainer._logs["advantages"][last] == 0.0
    steps_logged = [e for e in trainer.state.log_history if "loss" in e]
    assert [e["proctor/proctor_session/failed"] for e in steps_logged] == [0.0, 1 / GENERATIONS]
    assert all(e["tools/call_frequency"] > 0 for e in steps_logged)  # TRL's tool loop ran lookup()
    assert nan_to_none(list(trainer._logs["rewards"][reward.__name__])) == [
        r for _, r, _, _ in reward.calls[-1]
    ]
    means = [e[f"rewards/{reward.__name__}/mean"] for e in steps_logged]
    for mean, call in zip(means, reward.calls, strict=True):
        scored = [r for _, r, _, _ in call if r is not None]
        assert mean == pytest.approx(sum(scored) / len(scored))

    # each scored transcript replays through /v1/score to the reward TRL trained on, and the paid ones went
    # through TRL's tool loop: a lookup observation written by the session
    for transcript, value, task, _ in rollouts:
        if value is None:
            continue
        reference = references[TASKS.index(task)]
        assert h.replay(live_server, ENVIRONMENT, transcript, reference)["reward"] == value
        if value == 1.0:
            assert any(m["role"] == "tool" and m["content"] == reference["value"] for m in transcript)
