"""What a rollout is made of, shared by single-turn sampling (`trainer/grpo.py`) and multi-turn episodes
through tool sessions (`trainer/rollouts.py`): the prompt, the sample, and the generation helpers both use.

A module of its own so that `rollouts.py` needs nothing from `grpo.py`, which calls it (no import cycle).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

if TYPE_CHECKING:
    from proctor.trainer.config import TrainConfig


@dataclass(frozen=True)
class Prompt:
    """One task: the chat messages the policy sees and what its verifier needs."""

    messages: list[dict[str, str]]
    verifier: str
    reference: Any
    options: dict[str, Any] = field(default_factory=dict)
    environment: str | None = None  # a tool environment: the prompt is played through its sessions
    task: dict[str, Any] | None = None  # ... on this task (as the environment made it)


@dataclass
class Sample:
    """One completion: token ids, its text, and (after scoring) its reward."""

    prompt_ids: list[int]
    completion_ids: list[int]  # up to and including the end-of-sequence token
    truncated: bool
    text: str
    reward: float = 0.0
    valid: bool = True  # False: scoring failed; the sample is masked
    correct: bool | None = None
    components: dict[str, float] = field(default_factory=dict)
    penalty: float = 0.0
    advantage: float = 0.0
    # Tool tasks: completion_ids hold the policy's turns and the observations between them; completion_mask
    # is 1 for the policy's tokens and 0 for the observations' (None: every completion token is the policy's).
    completion_mask: list[int] | None = None
    turns: int = 0
    tool_calls: int = 0
    end_reason: str | None = None
    # Tool tasks: the length of each of the policy's turns (max_new_tokens caps each turn, not the episode).
    turn_lengths: list[int] | None = None


def left_pad(rows: list[list[int]], pad_id: int) -> tuple[Tensor, Tensor]:
    """Left-padded ids and attention mask, (B, P) each."""
    width = max(len(row) for row in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        if row:
            ids[i, width - len(row) :] = torch.tensor(row)
            mask[i, width - len(row) :] = 1
    return ids, mask


@contextlib.contextmanager
def plain_generation_config(model: Any) -> Iterator[None]:
    """Sample with a blank generation config for the duration, then put the model's own back.

    `generate` fills every setting not passed to it from `model.generation_config`, and a chat model's
    (Qwen2.5-Instruct's, say) carries a repetition penalty, min_p, min_new_tokens, suppressed tokens ...: the
    completions would come from a distribution other than the policy whose log-probabilities are trained on.
    """
    from transformers import GenerationConfig

    own = model.generation_config
    model.generation_config = GenerationConfig(
        bos_token_id=own.bos_token_id, eos_token_id=own.eos_token_id, pad_token_id=own.pad_token_id
    )
    try:
        yield
    finally:
        model.generation_config = own


def stop_token_ids(model: Any, tokenizer: Any) -> list[int]:
    """The ids that end a completion: the tokenizer's end-of-sequence and those of the model's generation config.

    A chat model's turn can end with a token other than the tokenizer's eos (Gemma's `<end_of_turn>` beside
    `<eos>`); its generation_config.json lists every such id.
    """
    own = model.generation_config.eos_token_id
    ids = [tokenizer.eos_token_id, *(own if isinstance(own, list | tuple) else [own])]
    return list(dict.fromkeys(int(i) for i in ids if i is not None))


@torch.no_grad()
def sample_continuations(
    model: Any, tokenizer: Any, contexts: list[list[int]], config: TrainConfig, copies: int = 1
) -> tuple[list[list[int]], list[bool]]:
    """`copies` sampled continuations of each context (context 0's first), each cut after its first stop token.

    Returns the kept ids (the stop token included) and whether each was cut by `max_new_tokens` instead.
    Sampling is the policy's own distribution: temperature and top-p only, with a blank generation config.
    """
    device = next(model.parameters()).device
    ids, mask = left_pad(contexts, tokenizer.pad_token_id)
    stops = stop_token_ids(model, tokenizer)
    model.eval()
    with plain_generation_config(model):
        output = model.generate(
            input_ids=ids.to(device),
            attention_mask=mask.to(device),
            do_sample=True,
            temperature=config.temperature,
            top_p=config.top_p,
            top_k=0,
            max_new_tokens=config.max_new_tokens,
            num_return_sequences=copies,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=stops or None,
        )
    kept: list[list[int]] = []
    cut: list[bool] = []
    for completion in output[:, ids.shape[1] :].tolist():
        end = next((i for i, token in enumerate(completion) if token in stops), None)
        kept.append(completion if end is None else completion[: end + 1])
        cut.append(end is None)
    return kept, cut
