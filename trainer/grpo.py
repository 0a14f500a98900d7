"""GRPO, the reference trainer behind `proctor train`: small, readable, and scored through Proctor.

One step:
  1. draw `prompts_per_step` tasks (an environment such as `demo.max_digit` or `puzzle.mix`, or dataset rows);
  2. sample `group_size` completions per prompt with the current policy (Hugging Face `generate`);
  3. score the whole step in one batched Proctor call (a service via `server`, or in this process);
     with a tool environment (`task: tool.*`), steps 2-3 are multi-turn episodes through Proctor sessions
     instead (`trainer/rollouts.py`): observation tokens are context with loss mask 0, the reward is the
     session's final score, and an episode whose machinery failed is masked;
  4. group-relative advantages; with `dynamic_sampling`, groups whose rewards are all equal are dropped and
     more prompts are drawn (at most `max_refills` times);
  5. `num_iterations` policy updates on the batch with the clipped surrogate (+ k3 KL, - entropy bonus).

The hyperparameters that define the algorithm, with their defaults (every key, with its description, is in
`trainer/config.py`, `TrainConfig`, which the CLI reads without importing torch):

  prompts_per_step=8  group_size=8  max_new_tokens=256  temperature=1.0  top_p=1.0
  scale_rewards=group  loss_aggregation=seq_mean_token_mean  epsilon_low=0.2  epsilon_high=0.2
  num_iterations=1  beta=0.0  entropy_coef=0.0  dynamic_sampling=False  max_refills=3
  overlong=none  overlong_buffer=0  advantage_eps=0.0001
  learning_rate=1e-06  warmup_steps=0  weight_decay=0.0  max_grad_norm=1.0  micro_batch_size=16

Section 1 is the mathematics as pure functions on tensors; tests check each against hand-computed values.

Shapes: B sequences in a batch (prompts x G completions, a group's completions adjacent), G the group size,
P prompt tokens (left padded), C completion tokens (right padded), V the vocabulary.

Determinism: the random state of step s is seeded from (seed, s) at the start of the step, and the prompts of
step s from (seed, s, refill), so a run resumed from a checkpoint continues exactly as the uninterrupted run.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from proctor.trainer.config import ConfigError, TrainConfig
from proctor.trainer.generation import Prompt, Sample, left_pad, sample_continuations

Tensor = torch.Tensor

# =====================================================================================================
# 1. The mathematics (pure functions on tensors)
# =====================================================================================================


def group_advantages(
    rewards: Tensor, valid: Tensor, group_size: int, scale: str, eps: float = 1e-4
) -> Tensor:
    """Group-relative advantages, (B,) -> (B,): A_i = (r_i - mean of its group) / (std + eps).

    `valid` (B,) is False for samples whose scoring failed: their reward is ignored (whatever it holds),
    they take no part in any mean or std, and their advantage is 0. `scale`: `group` divides by the group's
    std, `batch` by the std of every valid reward of the batch, `none` (Dr. GRPO) does not divide. The
    standard deviations are population ones (divided by n, not n - 1).
    """
    mask = valid.to(rewards.dtype)
    r = torch.where(valid, rewards, torch.zeros_like(rewards))
    grouped, grouped_mask = r.view(-1, group_size), mask.view(-1, group_size)
    count = grouped_mask.sum(1, keepdim=True).clamp(min=1)
    mean = grouped.sum(1, keepdim=True) / count
    centred = (grouped - mean) * grouped_mask
    if scale == "group":
        std = ((centred**2).sum(1, keepdim=True) / count).sqrt()
        return (centred / (std + eps)).view(-1)
    if scale == "batch":
        total = mask.sum().clamp(min=1)
        batch_mean = r.sum() / total
        batch_std = ((((r - batch_mean) * mask) ** 2).sum() / total).sqrt()
        return (centred / (batch_std + eps)).view(-1)
    if scale == "none":
        return centred.view(-1)
    raise ValueError(f"scale_rewards must be group, batch or none, not {scale!r}")


def overlong_penalty(lengths: Tensor, max_length: int, buffer: int) -> Tensor:
    """DAPO's soft overlong punishment, (B,) -> (B,): 0 up to max_length - buffer, then linear down to -1.

    With L = max_length and c = buffer: 0 when len <= L - c; ((L - c) - len) / c when L - c < len <= L;
    -1 beyond L.
    """
    lengths = lengths.to(torch.float32)
    threshold = max_length - buffer
    ramp = (threshold - lengths) / max(buffer, 1)
    penalty = torch.where(lengths <= threshold, torch.zeros_like(lengths), ramp)
    return torch.where(lengths > max_length, torch.full_like(lengths, -1.0), penalty)


def token_log_probs(logits: Tensor, tokens: Tensor) -> Tensor:
    """Log-probability of each chosen token, (B, C, V), (B, C) -> (B, C)."""
    return torch.gather(logits.float().log_softmax(-1), -1, tokens.unsqueeze(-1)).squeeze(-1)


def token_entropy(logits: Tensor) -> Tensor:
    """Entropy of each next-token distribution, (B, C, V) -> (B, C)."""
    log_p = logits.float().log_softmax(-1)
    return -(log_p.exp() * log_p).sum(-1)


def log_probs_and_entropy(logits: Tensor, tokens: Tensor, entropy_grad: bool) -> tuple[Tensor, Tensor]:
    """token_log_probs and token_entropy from one log-softmax, (B, C, V), (B, C) -> (B, C), (B, C).

    One (B, C, V) log-softmax instead of two matters with a 150k-token vocabulary. The entropy carries a
    gradient only when `entropy_grad` (an entropy bonus is being trained on).
    """
    log_p = logits.float().log_softmax(-1)
    chosen = torch.gather(log_p, -1, tokens.unsqueeze(-1)).squeeze(-1)
    source = log_p if entropy_grad else log_p.detach()
    with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
        entropy = -(source.exp() * source).sum(-1)
    return chosen, entropy


def k3_kl(log_probs: Tensor, ref_log_probs: Tensor) -> Tensor:
    """Schulman's k3 estimator of KL(policy || reference) per token, (B, C) -> (B, C): e^d - d - 1, d = ref - pi."""
    delta = ref_log_probs - log_probs
    return delta.exp() - delta - 1


def clipped_surrogate(
    log_probs: Tensor, old_log_probs: Tensor, advantages: Tensor, epsilon_low: float, epsilon_high: float
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """PPO's clipped objective as a per-token loss, with clip-higher: ratio clipped to [1 - eps_low, 1 + eps_high].

    log_probs, old_log_probs: (B, C); advantages: (B,). Returns (loss (B, C), ratio (B, C), clipped_low (B, C)
    bool, clipped_high (B, C) bool); clipped_* mark tokens whose gradient the clip removed (ratio below
    1 - eps_low with a negative advantage, above 1 + eps_high with a positive one).
    """
    ratio = (log_probs - old_log_probs).exp()
    advantage = advantages.unsqueeze(1)
    unclipped = ratio * advantage
    clipped = ratio.clamp(1 - epsilon_low, 1 + epsilon_high) * advantage
    loss = -torch.minimum(unclipped, clipped)
    clipped_low = (ratio < 1 - epsilon_low) & (advantage < 0)
    clipped_high = (ratio > 1 + epsilon_high) & (advantage > 0)
    return loss, ratio, clipped_low, clipped_high


def token_weights(mask: Tensor, aggregation: str, max_length: int) -> Tensor:
    """Per-token weights whose sum with a per-token loss gives the aggregated loss, (B, C) -> (B, C).

    mask (B, C) is 1 for a completion token that is trained on. Because the weights are computed over the
    whole batch, summing `loss * weights` over micro-batches gives exactly the full-batch loss.
    - seq_mean_token_mean (GRPO): the mean over sequences of each sequence's token mean; sequences with no
      trained token are not counted.
    - token_mean (DAPO): the mean over every trained token of the batch.
    - constant_normalizer (Dr. GRPO): the sum divided by B x max_length, a constant.
    """
    mask = mask.float()
    if aggregation == "token_mean":
        return mask / mask.sum().clamp(min=1)
    if aggregation == "seq_mean_token_mean":
        lengths = mask.sum(1, keepdim=True)
        sequences = (lengths > 0).sum().clamp(min=1)
        return mask / (lengths.clamp(min=1) * sequences)
    if aggregation == "constant_normalizer":
        return mask / (mask.shape[0] * max_length)
    raise ValueError(
        f"loss_aggregation must be seq_mean_token_mean, token_mean or constant_normalizer, not {aggregation!r}"
    )


@dataclass
class LossTerms:
    """The loss of one micro-batch and sums over its trained tokens, for the step's metrics."""

    loss: Tensor
    tokens: float
    clipped_low: float
    clipped_high: float
    kl: float
    entropy: float


def grpo_loss(
    log_probs: Tensor,
    old_log_probs: Tensor,
    advantages: Tensor,
    weights: Tensor,
    *,
    epsilon_low: float,
    epsilon_high: float,
    ref_log_probs: Tensor | None = None,
    beta: float = 0.0,
    entropy: Tensor | None = None,
    entropy_coef: float = 0.0,
) -> LossTerms:
    """The GRPO loss: sum over tokens of weights * (clipped surrogate + beta * k3 KL - entropy_coef * entropy).

    log_probs, old_log_probs, ref_log_probs, entropy, weights: (B, C); advantages: (B,). A token with weight
    0 (padding, a masked sample) contributes nothing to the loss or its gradient.
    """
    # A masked token's inputs are replaced before any arithmetic: 0 * NaN is NaN, also in the backward pass,
    # so an inf or NaN held by a masked sample must never reach the graph.
    trained = weights != 0
    current = log_probs.detach()
    old_log_probs = torch.where(trained, old_log_probs, current)
    advantages = torch.where(trained.any(1), advantages, torch.zeros_like(advantages))
    per_token, _, clipped_low, clipped_high = clipped_surrogate(
        log_probs, old_log_probs, advantages, epsilon_low, epsilon_high
    )
    kl = None
    if ref_log_probs is not None:
        kl = k3_kl(log_probs, torch.where(trained, ref_log_probs, current))
        if beta:
            per_token = per_token + beta * kl
    if entropy is not None and entropy_coef:
        per_token = per_token - entropy_coef * entropy
    loss = torch.where(trained, per_token * weights, torch.zeros_like(per_token)).sum()
    with torch.no_grad():
        mask = trained.float()
        return LossTerms(
            loss=loss,
            tokens=float(mask.sum()),
            clipped_low=float((clipped_low.float() * mask).sum()),
            clipped_high=float((clipped_high.float() * mask).sum()),
            kl=float((kl * mask).sum()) if kl is not None else 0.0,
            entropy=float((entropy * mask).sum()) if entropy is not None else 0.0,
        )


def warmup_factor(step: int, warmup_steps: int) -> float:
    """Linear learning-rate warm-up: (step + 1) / warmup_steps for the first steps (0-based), then 1."""
    return 1.0 if warmup_steps <= 0 else min(1.0, (step + 1) / warmup_steps)


# =====================================================================================================
# 2. Model, tokenizer, device
# =====================================================================================================


def choose_device(name: str) -> torch.device:
    """`auto` picks CUDA when available, else the CPU; any other name is used as given."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device {name!r} asked for, but CUDA is not available here")
    return device


def load_tokenizer(config: TrainConfig, path: str | None = None) -> Any:
    """The tokenizer: from `path` (a checkpoint), the config's tokenizer or model path, or built locally."""
    from transformers import AutoTokenizer

    from proctor.trainer.tokenizer import build_char_tokenizer

    source = path or config.tokenizer or (None if config.tokenizer_alphabet else config.model)
    try:
        tokenizer = (
            AutoTokenizer.from_pretrained(source)
            if source
            else build_char_tokenizer(config.tokenizer_alphabet or "", config.tokenizer_tokens)
        )
    except (OSError, ValueError) as exc:
        raise ConfigError(f"tokenizer: cannot load {source}: {str(exc).splitlines()[0]}") from None
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if tokenizer.chat_template is None:
        raise ConfigError("the tokenizer has no chat template; use a chat model's tokenizer")
    tokenizer.padding_side = "left"
    return tokenizer


def build_model(config: TrainConfig, tokenizer: Any, device: torch.device, path: str | None = None) -> Any:
    """The policy: loaded from `path` or the config's model, or randomly initialised (seeded) from model_init."""
    from transformers import AutoConfig, AutoModelForCausalLM

    dtype = getattr(torch, config.dtype)
    if path or config.model:
        try:
            with hf_progress_bars_off():
                model = AutoModelForCausalLM.from_pretrained(path or config.model, dtype=dtype)
        except (OSError, ValueError) as exc:
            raise ConfigError(
                f"model: cannot load {path or config.model}: {str(exc).splitlines()[0]}"
            ) from None
    else:
        values = dict(config.model_init or {})
        model_type = values.pop("model_type")
        values.setdefault("vocab_size", len(tokenizer))
        values.setdefault("pad_token_id", tokenizer.pad_token_id)
        values.setdefault("eos_token_id", tokenizer.eos_token_id)
        values.setdefault("bos_token_id", tokenizer.bos_token_id)
        try:
            model_config = AutoConfig.for_model(model_type, **values)
        except ValueError as exc:
            raise ConfigError(f"model_init: {str(exc).splitlines()[0]}") from None
        torch.manual_seed(config.seed)  # the initial weights depend only on the seed
        model = AutoModelForCausalLM.from_config(model_config, dtype=dtype)
    if config.gradient_checkpointing:  # recompute activations in the backward pass: less memory, more time
        enable = (
            getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
        )
        enable()
    disable_dropout(model)
    return model.to(device)


@contextlib.contextmanager
def hf_progress_bars_off() -> Iterator[None]:
    """No "Loading weights" or "Writing model shards" bar from transformers in the middle of ours."""
    from transformers.utils import logging as hf_logging

    was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()


DROPOUT_MODULES = (
    torch.nn.Dropout,
    torch.nn.Dropout1d,
    torch.nn.Dropout2d,
    torch.nn.Dropout3d,
    torch.nn.AlphaDropout,
    torch.nn.FeatureAlphaDropout,
)


def disable_dropout(model: torch.nn.Module) -> None:
    """Set every dropout probability to 0: sampling and scoring must see the same policy.

    Besides nn.Dropout modules, attention layers (Llama's, Qwen2's, Mistral's ...) keep their probability as a
    float attribute (`attention_dropout`) that they pass to the attention kernel in training mode.
    """
    for module in model.modules():
        if isinstance(module, DROPOUT_MODULES):
            module.p = 0.0
        for name, value in list(vars(module).items()):
            if ("dropout" in name or "pdrop" in name) and type(value) is float:
                setattr(module, name, 0.0)


# =====================================================================================================
# 3. Prompts: an environment or a dataset
# =====================================================================================================


def derive_seed(*parts: int) -> int:
    """A 63-bit seed from integers (blake2b of their text): neighbouring inputs share nothing."""
    digest = hashlib.blake2b(",".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


PromptSource = Callable[[int, int], list[Prompt]]
"""(seed, count) -> prompts; the same arguments always give the same prompts."""


def environment_prompts(config: TrainConfig) -> PromptSource:
    """Prompts from a registered environment (`demo.*`, `puzzle.*`, `puzzle.mix`), train split."""
    from proctor.contract import RequestError
    from proctor.environments.registry import get_environment

    try:
        spec = get_environment(config.task or "")
        spec.resolve(config.task_difficulty, config.task_config)  # a bad difficulty or config fails now
    except RequestError as exc:
        raise ConfigError(f"task: {exc.message}") from None

    tool = spec.kind == "tool"

    def draw(seed: int, count: int) -> list[Prompt]:
        tasks = spec.tasks("train", seed, count, config.task_difficulty, config.task_config)
        return [
            Prompt(
                task.prompt,
                task.verifier,
                task.reference,
                dict(config.verifier_options),
                environment=spec.name if tool else None,
                task=task.model_dump(mode="json") if tool else None,
            )
            for task in tasks
        ]

    return draw


def dataset_prompts(config: TrainConfig) -> PromptSource:
    """Prompts drawn at random (seeded) from JSONL/Parquet rows with a prompt and a reference."""
    import random

    from proctor.io import DataError, read_rows

    try:
        rows = read_rows(config.dataset or "")
    except (DataError, ValueError, OSError) as exc:
        raise ConfigError(f"dataset: {exc}") from None
    if not rows:
        raise ConfigError(f"dataset {config.dataset} has no rows")
    prompts = [_row_prompt(row, number, config) for number, row in enumerate(rows, 1)]

    def draw(seed: int, count: int) -> list[Prompt]:
        rng = random.Random(seed)
        if count <= len(prompts):
            return [prompts[index] for index in rng.sample(range(len(prompts)), count)]
        return rng.choices(prompts, k=count)

    return draw


def _row_prompt(row: dict[str, Any], number: int, config: TrainConfig) -> Prompt:
    where = f"dataset {config.dataset} row {number}"
    prompt = row.get(config.prompt_field)
    if isinstance(prompt, str):
        messages = [{"role": "user", "content": prompt}]
    elif isinstance(prompt, list) and all(isinstance(m, dict) and "role" in m for m in prompt):
        messages = [{"role": str(m["role"]), "content": str(m.get("content") or "")} for m in prompt]
    else:
        raise ConfigError(
            f"{where}: field {config.prompt_field!r} must be a string or a list of chat messages"
        )
    if config.reference_field not in row:
        raise ConfigError(f"{where}: no field {config.reference_field!r}")
    verifier = row.get("verifier") or config.verifier
    if not verifier:
        raise ConfigError(f"{where}: no 'verifier' field and no verifier in the config")
    options = {**config.verifier_options, **(row.get("options") or {})}
    return Prompt(messages, str(verifier), row[config.reference_field], options)


def prompt_source(config: TrainConfig) -> PromptSource:
    """The configured source of prompts."""
    return environment_prompts(config) if config.task else dataset_prompts(config)


# =====================================================================================================
# 4. Rollouts: sample, then score the whole step in one call
# =====================================================================================================


@dataclass
class Group:
    """The G completions of one prompt."""

    prompt: Prompt
    samples: list[Sample]

    def rewards(self) -> list[float]:
        """The training rewards (verifier reward plus any overlong penalty) of the valid samples."""
        return [s.reward + s.penalty for s in self.samples if s.valid]

    def informative(self) -> bool:
        """Whether the group's valid rewards differ (else every advantage is 0)."""
        rewards = self.rewards()
        return len(rewards) >= 2 and max(rewards) - min(rewards) > 1e-9


def encode_prompt(tokenizer: Any, messages: list[dict[str, str]], system_prompt: str | None) -> list[int]:
    """Token ids of a chat prompt, rendered with the tokenizer's chat template and the assistant's turn opened."""
    if system_prompt and not any(m["role"] == "system" for m in messages):
        messages = [{"role": "system", "content": system_prompt}, *messages]
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def sample_completions(
    model: Any, tokenizer: Any, prompts: list[list[int]], config: TrainConfig
) -> list[Sample]:
    """G sampled completions per prompt with `generate`; the result is grouped (prompt 0's G samples first)."""
    completions, cut = sample_continuations(model, tokenizer, prompts, config, copies=config.group_size)
    return [
        Sample(
            prompts[row // config.group_size],
            kept,
            cut[row],
            tokenizer.decode(kept, skip_special_tokens=True),
        )
        for row, kept in enumerate(completions)
    ]


class Scorer:
    """Scores a step's completions with one batched call: through a Proctor service, or in this process."""

    def __init__(self, server: str | None, token: str | None):
        self.client = None
        if server:
            from proctor.client import Client

            self.client = Client(server, token=token)

    def __call__(self, requests: list[dict[str, Any]]) -> list[Any]:
        """One Score or ItemError per request, in order."""
        if self.client is not None:
            return self.client.score_batch(requests)
        import proctor

        return proctor.score_batch(requests)

    def open_session(self, environment: str, task: dict[str, Any], options: dict[str, Any]) -> Any:
        """Open a tool session on the same service (or in this process) as scoring."""
        if self.client is not None:
            return self.client.open_session(environment, task, options=options)
        import proctor

        return proctor.open_session(environment, task, options=options)

    def close(self) -> None:
        """Close the HTTP client, if any."""
        if self.client is not None:
            self.client.close()


def score_groups(groups: list[Group], scorer: Scorer) -> int:
    """Fill in each sample's reward in one batched call; a failed score masks its sample. Returns the failures."""
    from proctor.contract import ItemError, Status

    samples = [sample for group in groups for sample in group.samples]
    requests = [
        {
            "verifier": group.prompt.verifier,
            "response": sample.text,
            "reference": group.prompt.reference,
            "options": group.prompt.options,
        }
        for group in groups
        for sample in group.samples
    ]
    results = scorer(requests)
    failures = 0
    for sample, result in zip(samples, results, strict=True):
        if isinstance(result, ItemError):
            if result.error.status == 404:  # an unknown verifier fails every sample: a configuration error
                raise ConfigError(result.error.message)
            sample.valid, sample.reward = False, 0.0
        elif result.status is not Status.ok:
            sample.valid, sample.reward = False, 0.0
        else:
            sample.reward, sample.correct, sample.components = (
                result.reward,
                result.correct,
                dict(result.components),
            )
        failures += not sample.valid
    return failures


# =====================================================================================================
# 5. The policy update
# =====================================================================================================


@dataclass
class Batch:
    """A training batch: prompt + completion ids and the per-sample training signal."""

    input_ids: Tensor  # (B, P + C)
    attention_mask: Tensor  # (B, P + C)
    completion_ids: Tensor  # (B, C)
    loss_mask: Tensor  # (B, C): 1 for a completion token that is trained on
    advantages: Tensor  # (B,)


def collate(
    samples: list[Sample], advantages: Tensor, trained: list[bool], pad_id: int, device: torch.device
) -> Batch:
    """Left-padded prompts followed by right-padded completions; untrained samples get an all-zero loss mask,
    and so do the observation tokens of a tool episode (its `completion_mask` 0)."""
    prompt_ids, prompt_mask = left_pad([s.prompt_ids for s in samples], pad_id)
    width = max(1, max(len(s.completion_ids) for s in samples))
    completion_ids = torch.full((len(samples), width), pad_id, dtype=torch.long)
    completion_mask = torch.zeros((len(samples), width), dtype=torch.long)
    loss_weights = torch.zeros((len(samples), width), dtype=torch.float32)
    for i, sample in enumerate(samples):
        completion_ids[i, : len(sample.completion_ids)] = torch.tensor(
            sample.completion_ids, dtype=torch.long
        )
        completion_mask[i, : len(sample.completion_ids)] = 1
        # A tool episode's observation tokens (completion_mask 0) are attended to, never trained on.
        own = (
            sample.completion_mask if sample.completion_mask is not None else [1] * len(sample.completion_ids)
        )
        loss_weights[i, : len(own)] = torch.tensor(own, dtype=torch.float32)
    loss_mask = loss_weights * torch.tensor(trained, dtype=torch.float32).unsqueeze(1)
    return Batch(
        input_ids=torch.cat([prompt_ids, completion_ids], 1).to(device),
        attention_mask=torch.cat([prompt_mask, completion_mask], 1).to(device),
        completion_ids=completion_ids.to(device),
        loss_mask=loss_mask.to(device),
        advantages=advantages.to(device),
    )


def completion_logits(
    model: Any, input_ids: Tensor, attention_mask: Tensor, completion_length: int, temperature: float
) -> Tensor:
    """Logits that predict each completion token, (B, P + C) -> (B, C, V), divided by the sampling temperature."""
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        logits_to_keep=completion_length + 1,
        use_cache=False,
    ).logits
    return logits[:, :-1].float() / temperature


def policy_update(
    model: Any,
    reference: Any | None,
    optimizer: torch.optim.Optimizer,
    batch: Batch,
    config: TrainConfig,
) -> dict[str, float]:
    """`num_iterations` optimizer steps on one batch; returns loss, grad norm, clip fractions, KL and entropy.

    The old log-probabilities are those of the first iteration's forward pass (taken before any update), so
    the ratio is exactly 1 at the first iteration and pi / pi_old afterwards.
    """
    model.train()
    rows = batch.input_ids.shape[0]
    length = batch.completion_ids.shape[1]
    weights = token_weights(batch.loss_mask, config.loss_aggregation, config.max_new_tokens)
    slices = [
        slice(start, start + config.micro_batch_size) for start in range(0, rows, config.micro_batch_size)
    ]
    old_log_probs: list[Tensor] = []
    ref_log_probs: list[Tensor | None] = []
    totals = {"tokens": 0.0, "clipped_low": 0.0, "clipped_high": 0.0, "kl": 0.0, "entropy": 0.0}
    loss_sum, grad_norm = 0.0, 0.0
    parameters = [p for p in model.parameters() if p.requires_grad]
    for iteration in range(config.num_iterations):
        optimizer.zero_grad(set_to_none=True)
        loss_sum = 0.0
        for k, rows_k in enumerate(slices):
            ids, mask, targets = (
                batch.input_ids[rows_k],
                batch.attention_mask[rows_k],
                batch.completion_ids[rows_k],
            )
            logits = completion_logits(model, ids, mask, length, config.temperature)
            log_probs, entropy = log_probs_and_entropy(
                logits, targets, entropy_grad=bool(config.entropy_coef)
            )
            del logits
            if iteration == 0:
                old_log_probs.append(log_probs.detach())
                ref = None
                if reference is not None:
                    with torch.no_grad():
                        ref_logits = completion_logits(reference, ids, mask, length, config.temperature)
                        ref = token_log_probs(ref_logits, targets)
                ref_log_probs.append(ref)
            terms = grpo_loss(
                log_probs,
                old_log_probs[k],
                batch.advantages[rows_k],
                weights[rows_k],
                epsilon_low=config.epsilon_low,
                epsilon_high=config.epsilon_high,
                ref_log_probs=ref_log_probs[k],
                beta=config.beta,
                entropy=entropy,
                entropy_coef=config.entropy_coef,
            )
            terms.loss.backward()
            loss_sum += float(terms.loss.detach())
            for key in totals:
                totals[key] += getattr(terms, key)
        max_norm = config.max_grad_norm if config.max_grad_norm > 0 else math.inf
        grad_norm = float(torch.nn.utils.clip_grad_norm_(parameters, max_norm))
        optimizer.step()
    model.eval()
    tokens = max(totals["tokens"], 1.0)
    stats = {
        "loss": loss_sum,
        "grad_norm": grad_norm,
        "clip_low_fraction": totals["clipped_low"] / tokens,
        "clip_high_fraction": totals["clipped_high"] / tokens,
        "entropy": totals["entropy"] / tokens,
    }
    if reference is not None:
        stats["kl"] = totals["kl"] / tokens
    return stats


# =====================================================================================================
# 6. The loop: one step, checkpoints, the run
# =====================================================================================================


@dataclass
class Trainer:
    """What a run holds: the policy, its optimizer, the frozen reference (beta > 0), prompts and scorer."""

    config: TrainConfig
    model: Any
    tokenizer: Any
    optimizer: torch.optim.Optimizer
    reference: Any | None
    prompts: PromptSource
    scorer: Scorer
    device: torch.device


def collect_groups(trainer: Trainer, step: int) -> tuple[list[Group], list[Group], dict[str, float]]:
    """Sample and score groups for a step; with dynamic sampling, refill until enough groups carry signal.

    Returns (the groups to train on, every group sampled in the step, counters). The reward metrics are taken
    over every sampled group: the kept ones alone are a biased sample of the policy.
    """
    config = trainer.config
    kept: list[Group] = []
    sampled: list[Group] = []
    stats = {"generated_tokens": 0.0, "scoring_failures": 0.0, "scoring_latency_s": 0.0, "generate_s": 0.0}
    stats.update(refills=0.0, samples=0.0)
    first_batch: list[Group] = []
    for attempt in range(1 + (config.max_refills if config.dynamic_sampling else 0)):
        needed = config.prompts_per_step - len(kept)
        prompts = trainer.prompts(derive_seed(config.seed, step, attempt), needed)
        if prompts and prompts[0].environment is not None:
            # A tool task: multi-turn episodes through sessions, scored by the sessions themselves.
            started = time.perf_counter()
            samples = tool_samples(trainer, prompts)
            stats["generate_s"] += time.perf_counter() - started
            groups = [
                Group(prompt, samples[i * config.group_size : (i + 1) * config.group_size])
                for i, prompt in enumerate(prompts)
            ]
            stats["scoring_failures"] += sum(not s.valid for s in samples)
        else:
            encoded = [encode_prompt(trainer.tokenizer, p.messages, config.system_prompt) for p in prompts]
            started = time.perf_counter()
            samples = sample_completions(trainer.model, trainer.tokenizer, encoded, config)
            stats["generate_s"] += time.perf_counter() - started
            groups = [
                Group(prompt, samples[i * config.group_size : (i + 1) * config.group_size])
                for i, prompt in enumerate(prompts)
            ]
            started = time.perf_counter()
            stats["scoring_failures"] += score_groups(groups, trainer.scorer)
            stats["scoring_latency_s"] += time.perf_counter() - started
        stats["generated_tokens"] += sum(
            sum(s.completion_mask) if s.completion_mask is not None else len(s.completion_ids)
            for s in samples
        )
        stats["samples"] += len(samples)
        apply_overlong(groups, config)
        sampled += groups
        if attempt == 0:
            first_batch = groups
        else:
            stats["refills"] += 1
        if not config.dynamic_sampling:
            kept = groups
            break
        kept += [group for group in groups if group.informative()]
        if len(kept) >= config.prompts_per_step:
            break
    stats["zero_variance_fraction"] = sum(not g.informative() for g in first_batch) / len(first_batch)
    return kept[: config.prompts_per_step], sampled, stats


def tool_samples(trainer: Trainer, prompts: list[Prompt]) -> list[Sample]:
    """`group_size` multi-turn episodes per prompt through tool sessions (`trainer/rollouts.py`)."""
    from proctor.trainer.rollouts import run_episodes, to_samples

    config = trainer.config
    episodes = run_episodes(
        trainer.model,
        trainer.tokenizer,
        prompts,
        config,
        trainer.scorer.open_session,
        lambda messages: encode_prompt(trainer.tokenizer, messages, config.system_prompt),
    )
    return to_samples(episodes, trainer.tokenizer)


def apply_overlong(groups: list[Group], config: TrainConfig) -> None:
    """Give truncated completions DAPO's soft penalty when `overlong: penalty`.

    A tool episode is measured by its longest turn: max_new_tokens caps each turn, and the episode's whole
    length (every turn and the observations between them) would punish calling a tool at all.
    """
    if config.overlong != "penalty":
        return
    buffer = config.overlong_buffer or max(1, config.max_new_tokens // 4)
    samples = [s for g in groups for s in g.samples]
    lengths = torch.tensor(
        [
            max(s.turn_lengths, default=0) if s.turn_lengths is not None else len(s.completion_ids)
            for s in samples
        ]
    )
    for sample, penalty in zip(
        samples, overlong_penalty(lengths, config.max_new_tokens, buffer).tolist(), strict=True
    ):
        sample.penalty = penalty


def train_step(trainer: Trainer, step: int) -> dict[str, Any]:
    """One GRPO step (0-based); returns its metrics."""
    config = trainer.config
    started = time.perf_counter()
    torch.manual_seed(derive_seed(config.seed, step))  # this step's sampling depends only on (seed, step)
    for group in trainer.optimizer.param_groups:
        group["lr"] = config.learning_rate * warmup_factor(step, config.warmup_steps)
    groups, sampled, stats = collect_groups(trainer, step)
    metrics: dict[str, Any] = {"step": step + 1, **reward_metrics(sampled, config)}
    metrics.update(stats)
    if sampled and sampled[0].prompt.environment is not None:
        from proctor.trainer.rollouts import episode_metrics

        metrics.update(episode_metrics([s for g in sampled for s in g.samples]))
    metrics["lr"] = trainer.optimizer.param_groups[0]["lr"]
    metrics["trained_samples"] = 0
    if groups:
        samples = [s for g in groups for s in g.samples]
        rewards = torch.tensor([s.reward + s.penalty for s in samples])
        valid = torch.tensor([s.valid for s in samples])
        advantages = group_advantages(
            rewards, valid, config.group_size, config.scale_rewards, config.advantage_eps
        )
        trained = [s.valid and not (config.overlong == "mask" and s.truncated) for s in samples]
        for sample, advantage in zip(samples, advantages.tolist(), strict=True):
            sample.advantage = advantage
        metrics["trained_samples"] = sum(trained)
    # No update at all when nothing is trained on (every score failed, every completion masked): a zero
    # gradient would still move the weights through Adam's momentum and count as an Adam step.
    if metrics["trained_samples"]:
        batch = collate(samples, advantages, trained, trainer.tokenizer.pad_token_id, trainer.device)
        update_started = time.perf_counter()
        metrics.update(policy_update(trainer.model, trainer.reference, trainer.optimizer, batch, config))
        metrics["update_s"] = time.perf_counter() - update_started
    metrics["step_time_s"] = time.perf_counter() - started
    metrics["tokens_per_s"] = stats["generated_tokens"] / max(metrics["step_time_s"], 1e-9)
    metrics["_groups"] = groups
    return metrics


def reward_metrics(groups: list[Group], config: TrainConfig) -> dict[str, Any]:
    """Reward mean/std (overall and per component), accuracy, and completion lengths of a step's samples."""
    samples = [s for g in groups for s in g.samples]
    valid = [s for s in samples if s.valid]
    metrics: dict[str, Any] = {}
    rewards = [s.reward for s in valid]
    metrics["reward_mean"], metrics["reward_std"] = _mean_std(rewards)
    for name in sorted({key for s in valid for key in s.components}):
        values = [s.components[name] for s in valid if name in s.components]
        metrics[f"reward_{name}_mean"], metrics[f"reward_{name}_std"] = _mean_std(values)
    correct = [s.correct if s.correct is not None else s.reward >= 1.0 for s in valid]
    metrics["accuracy"] = sum(correct) / len(correct) if correct else 0.0
    if config.overlong == "penalty":
        metrics["overlong_penalty_mean"] = _mean_std([s.penalty for s in samples])[0]
    lengths = [len(s.completion_ids) for s in samples]
    metrics["completion_length_mean"] = sum(lengths) / len(lengths) if lengths else 0.0
    metrics["completion_length_max"] = max(lengths, default=0)
    metrics["truncated_rate"] = sum(s.truncated for s in samples) / len(samples) if samples else 0.0
    return metrics


def _mean_std(values: list[float]) -> tuple[float, float]:
    if not values:
        return 0.0, 0.0
    mean = sum(values) / len(values)
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


CHECKPOINTS = "checkpoints"


def checkpoint_dir(output_dir: Path, step: int) -> Path:
    """Where the checkpoint after `step` completed steps lives."""
    return output_dir / CHECKPOINTS / f"step-{step:07d}"


def save_checkpoint(trainer: Trainer, step: int) -> Path:
    """Save the policy, tokenizer and optimizer after `step` steps; keep the newest `keep_checkpoints`."""
    output_dir = Path(trainer.config.output_dir)
    target = checkpoint_dir(output_dir, step)
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    with hf_progress_bars_off():
        trainer.model.save_pretrained(partial / "model")
    trainer.tokenizer.save_pretrained(partial / "model")  # one folder that from_pretrained reads whole
    torch.save({"step": step, "optimizer": trainer.optimizer.state_dict()}, partial / "trainer_state.pt")
    (partial / "train_config.json").write_text(trainer.config.model_dump_json(indent=2), encoding="utf-8")
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)  # a checkpoint is complete or absent, never half-written
    for old in sorted((output_dir / CHECKPOINTS).glob("step-???????"))[: -trainer.config.keep_checkpoints]:
        shutil.rmtree(old, ignore_errors=True)
    return target


def find_checkpoint(config: TrainConfig) -> Path:
    """The checkpoint `resume` names: `latest` (in output_dir) or a directory."""
    if config.resume == "latest":
        found = sorted((Path(config.output_dir) / CHECKPOINTS).glob("step-???????"))
        if not found:
            raise ConfigError(f"resume: no checkpoint in {Path(config.output_dir) / CHECKPOINTS}")
        return found[-1]
    path = Path(config.resume or "")
    if not (path / "trainer_state.pt").is_file():
        raise ConfigError(f"resume: {path} is not a checkpoint directory (no trainer_state.pt)")
    return path


def make_trainer(config: TrainConfig) -> tuple[Trainer, int]:
    """Build everything a run needs, from scratch or from the checkpoint `resume` names; returns (trainer, step)."""
    device = choose_device(config.device)
    if config.cpu_threads:
        torch.set_num_threads(config.cpu_threads)
    prompts = prompt_source(config)
    checkpoint = find_checkpoint(config) if config.resume else None
    tokenizer = load_tokenizer(config, str(checkpoint / "model") if checkpoint else None)
    model = build_model(config, tokenizer, device, str(checkpoint / "model") if checkpoint else None)
    optimizer = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad],
        lr=config.learning_rate,
        betas=(config.adam_beta1, config.adam_beta2),
        weight_decay=config.weight_decay,
    )
    step = 0
    if checkpoint is not None:
        state = torch.load(checkpoint / "trainer_state.pt", map_location=device, weights_only=True)
        optimizer.load_state_dict(state["optimizer"])
        step = int(state["step"])
    reference = None
    if config.beta > 0:  # the frozen initial policy; rebuilt the same way on resume
        reference = build_model(config, tokenizer, device)
        reference.requires_grad_(False)
        reference.eval()
    model.eval()
    trainer = Trainer(
        config, model, tokenizer, optimizer, reference, prompts, Scorer(config.server, config.token), device
    )
    return trainer, step


def refuse_earlier_checkpoints(config: TrainConfig) -> None:
    """A fresh run (no `resume`) may not start in an output_dir that holds another run's checkpoints.

    Checkpoint rotation keeps the newest names, so the earlier run's later steps would outlive (and delete)
    this run's checkpoints, and `resume: latest` would then continue the other run.
    """
    if config.resume:
        return
    found = sorted((Path(config.output_dir) / CHECKPOINTS).glob("step-???????"))
    if found:
        raise ConfigError(
            f"output_dir {config.output_dir} already holds checkpoints of an earlier run ({found[-1]}): "
            "continue it with resume: latest (--resume latest), or choose another output_dir"
        )


def keep_metrics_until(path: Path, step: int) -> None:
    """Drop metric lines after `step` (a resumed run rewrites them) and any partial last line."""
    if not path.exists():
        return
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if record.get("step", 0) <= step:
            kept.append(line)
    path.write_text("".join(line + "\n" for line in kept), encoding="utf-8")


def _progress(config: TrainConfig, start: int) -> Any:
    from tqdm import tqdm

    enabled = config.progress if config.progress is not None else sys.stderr.isatty()
    return tqdm(total=config.steps, initial=start, disable=not enabled, desc="proctor train", unit="step")


def train(config: TrainConfig, on_step: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Run GRPO for `config.steps` steps; returns the last step's metrics.

    Writes OUTPUT_DIR/metrics.jsonl (one JSON object per step), checkpoints under OUTPUT_DIR/checkpoints,
    and with `log_completions`, sample completions to OUTPUT_DIR/completions.jsonl.
    """
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # no fork warning from the tokenizers library
    output_dir = Path(config.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    refuse_earlier_checkpoints(config)
    trainer, start = make_trainer(config)
    metrics_path = output_dir / "metrics.jsonl"
    if start:
        keep_metrics_until(metrics_path, start)
        keep_metrics_until(output_dir / "completions.jsonl", start)
    elif metrics_path.exists():
        metrics_path.unlink()
        (output_dir / "completions.jsonl").unlink(missing_ok=True)
    last: dict[str, Any] = {}
    bar = _progress(config, start)
    threads = torch.get_num_threads()
    try:
        with metrics_path.open("a", encoding="utf-8") as log:
            for step in range(start, config.steps):
                metrics = train_step(trainer, step)
                groups = metrics.pop("_groups")
                log.write(json.dumps(metrics) + "\n")
                log.flush()
                if config.log_completions:
                    write_completions(
                        output_dir / "completions.jsonl", step + 1, groups, config.log_completions
                    )
                last = metrics
                bar.update(1)
                bar.set_postfix(reward=f"{metrics['reward_mean']:.3f}", acc=f"{metrics['accuracy']:.2f}")
                if on_step is not None:
                    on_step(metrics)
                if step + 1 == config.steps or (config.save_every and (step + 1) % config.save_every == 0):
                    save_checkpoint(trainer, step + 1)
    finally:
        bar.close()
        trainer.scorer.close()
        torch.set_num_threads(threads)  # cpu_threads is for this run, not for the rest of the process
    return last


def write_completions(path: Path, step: int, groups: list[Group], count: int) -> None:
    """Append the first `count` completions of a step, with prompt and reward, for reading by eye."""
    rows = []
    for group in groups:
        for sample in group.samples[: count - len(rows)]:
            rows.append(
                {
                    "step": step,
                    "prompt": group.prompt.messages,
                    "completion": sample.text,
                    "reward": sample.reward,
                    "valid": sample.valid,
                    "truncated": sample.truncated,
                }
            )
    with path.open("a", encoding="utf-8") as out:
        out.writelines(json.dumps(row) + "\n" for row in rows)
