"""Every hyperparameter of `proctor train`, with its default: one flat pydantic model read from YAML.

Any key can be overridden on the command line (`--learning-rate 1e-3`, `--task-config '{count: 3}'`);
a value given there is read as YAML, so numbers, booleans, lists and mappings work. This module imports no
torch, so building the CLI stays fast.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


class ConfigError(Exception):
    """A configuration that cannot be used; the message names the key."""


class TrainConfig(BaseModel):
    """The GRPO reference trainer's configuration (see the README's table)."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    # -- model ---------------------------------------------------------------------------------------
    model: str | None = Field(
        default=None, description="Local path (or hub id) of a causal LM to start from."
    )
    model_init: dict[str, Any] | None = Field(
        default=None,
        description="Build a randomly initialised model from this config: {model_type: llama, ...}.",
    )
    tokenizer: str | None = Field(default=None, description="Tokenizer path (default: the model's).")
    tokenizer_alphabet: str | None = Field(
        default=None, description="Build a character-level tokenizer with a chat template locally."
    )
    tokenizer_tokens: list[str] = Field(
        default_factory=list,
        description="Whole tokens added to tokenizer_alphabet's: a tool call (lookup()), the <|tool|> role.",
    )
    device: str = Field(
        default="auto", description="auto (cuda when available, else cpu), cpu, cuda, cuda:1 ..."
    )
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        default="float32", description="Parameter dtype."
    )
    gradient_checkpointing: bool = Field(
        default=False, description="Recompute activations in the backward pass: less memory, more time."
    )
    cpu_threads: int | None = Field(
        default=None, ge=1, description="torch CPU threads (default: torch's choice; 1 suits tiny models)."
    )

    # -- prompts and scoring ---------------------------------------------------------------------------
    task: str | None = Field(
        default=None, description="Environment to draw prompts from: demo.*, puzzle.*, tool.* (multi-turn)."
    )
    task_difficulty: str | None = Field(
        default=None, description="The environment's level (easy, medium, hard)."
    )
    task_config: dict[str, Any] | None = Field(
        default=None, description="Environment config, over the level's."
    )
    dataset: str | None = Field(
        default=None, description="JSONL or Parquet rows with a prompt and a reference."
    )
    prompt_field: str = Field(default="prompt", description="Dataset field: a string or chat messages.")
    reference_field: str = Field(default="reference", description="Dataset field: the verifier's reference.")
    verifier: str | None = Field(default=None, description="Verifier for dataset rows without a 'verifier'.")
    verifier_options: dict[str, Any] = Field(
        default_factory=dict, description="Options sent with every score."
    )
    system_prompt: str | None = Field(default=None, description="System message for prompts without one.")
    server: str | None = Field(
        default=None, description="Score through this Proctor service (else in-process)."
    )
    token: str | None = Field(default=None, description="Bearer token for --server (default: PROCTOR_TOKEN).")

    # -- sampling ------------------------------------------------------------------------------------
    prompts_per_step: int = Field(default=8, ge=1, description="Prompts (groups) trained on per step.")
    group_size: int = Field(default=8, ge=2, description="Completions sampled per prompt (G).")
    max_new_tokens: int = Field(
        default=256, ge=1, description="Longer completions (in a tool task: turns) are cut (truncated)."
    )
    max_turns: int = Field(
        default=8,
        ge=1,
        le=256,
        description="Tool tasks: most assistant turns per episode (the session's cap too).",
    )
    temperature: float = Field(default=1.0, gt=0, description="Sampling temperature (log-probs use it too).")
    top_p: float = Field(default=1.0, gt=0, le=1, description="Nucleus sampling.")

    # -- the algorithm -------------------------------------------------------------------------------
    scale_rewards: Literal["group", "batch", "none"] = Field(
        default="group", description="Divide advantages by the group's std, the batch's, or not (Dr. GRPO)."
    )
    loss_aggregation: Literal["seq_mean_token_mean", "token_mean", "constant_normalizer"] = Field(
        default="seq_mean_token_mean", description="GRPO, DAPO or Dr. GRPO normalisation of the loss."
    )
    epsilon_low: float = Field(
        default=0.2, ge=0, description="The ratio is clipped below at 1 - epsilon_low."
    )
    epsilon_high: float = Field(
        default=0.2, ge=0, description="... and above at 1 + epsilon_high (clip-higher)."
    )
    num_iterations: int = Field(default=1, ge=1, description="Policy updates per batch of samples (mu).")
    beta: float = Field(default=0.0, ge=0, description="k3 KL weight; 0 loads no reference model.")
    entropy_coef: float = Field(default=0.0, description="Entropy bonus weight (subtracted from the loss).")
    dynamic_sampling: bool = Field(
        default=False, description="Drop groups whose rewards are all equal; refill."
    )
    max_refills: int = Field(default=3, ge=0, description="Most extra sampling rounds a step may take.")
    overlong: Literal["none", "mask", "penalty"] = Field(
        default="none", description="Truncated completions: trained as is, masked, or DAPO's soft penalty."
    )
    overlong_buffer: int = Field(
        default=0, ge=0, description="DAPO's L_cache in tokens; 0: max_new_tokens // 4."
    )
    advantage_eps: float = Field(default=1e-4, gt=0, description="Added to the std before dividing by it.")

    # -- optimisation --------------------------------------------------------------------------------
    learning_rate: float = Field(default=1e-6, gt=0, description="AdamW learning rate after the warm-up.")
    warmup_steps: int = Field(
        default=0, ge=0, description="Linear learning-rate warm-up over the first steps."
    )
    weight_decay: float = Field(default=0.0, ge=0, description="AdamW weight decay.")
    adam_beta1: float = Field(default=0.9, ge=0, lt=1, description="AdamW beta1.")
    adam_beta2: float = Field(default=0.999, ge=0, lt=1, description="AdamW beta2.")
    max_grad_norm: float = Field(default=1.0, ge=0, description="Gradient clipping norm; 0 disables it.")
    micro_batch_size: int = Field(default=16, ge=1, description="Sequences per forward/backward pass.")

    # -- the run -------------------------------------------------------------------------------------
    steps: int = Field(default=100, ge=1, description="Training steps.")
    seed: int = Field(
        default=0, ge=0, le=2**31 - 1, description="Seeds initial weights, prompts and sampling."
    )
    output_dir: str = Field(default="out", description="Where metrics.jsonl and checkpoints/ go.")
    save_every: int = Field(default=0, ge=0, description="Checkpoint every N steps (0: only at the end).")
    keep_checkpoints: int = Field(default=2, ge=1, description="How many of the newest checkpoints are kept.")
    resume: str | None = Field(default=None, description="'latest' or a checkpoint directory.")
    progress: bool | None = Field(
        default=None, description="Progress bar (default: when stderr is a terminal)."
    )
    log_completions: int = Field(default=0, ge=0, description="Write N sample completions per step.")

    @model_validator(mode="after")
    def _check(self) -> TrainConfig:
        if (self.model is None) == (self.model_init is None):
            raise ValueError("give exactly one of model (a path) and model_init (a config to build from)")
        if self.model is None and self.tokenizer is None and self.tokenizer_alphabet is None:
            raise ValueError("a model built from model_init needs tokenizer or tokenizer_alphabet")
        if (self.task is None) == (self.dataset is None):
            raise ValueError("give exactly one of task (an environment) and dataset (a file)")
        if self.model_init is not None and "model_type" not in self.model_init:
            raise ValueError("model_init needs model_type (llama, qwen2, gpt2 ...)")
        return self


def _yaml() -> Any:
    import yaml

    return yaml


def read_yaml(path: str | Path) -> dict[str, Any]:
    """The mapping a YAML config file holds; raises ConfigError naming the file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror or exc}") from None
    try:
        data = _yaml().safe_load(text)
    except _yaml().YAMLError as exc:
        raise ConfigError(f"config {path} is not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config {path} must be a mapping of keys to values")
    return data


def parse_value(text: str) -> Any:
    """A command-line value read as YAML (`1e-3`, `true`, `{count: 3}`), or the text itself."""
    try:
        return _yaml().safe_load(text)
    except _yaml().YAMLError:
        return text


def build_config(values: dict[str, Any]) -> TrainConfig:
    """Validate a mapping into a TrainConfig; raises ConfigError naming the first bad key."""
    try:
        return TrainConfig.model_validate(values)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"])
        raise ConfigError(f"invalid config{' key ' + where if where else ''}: {first['msg']}") from None


def load_config(path: str | Path | None, overrides: dict[str, Any] | None = None) -> TrainConfig:
    """The YAML file's config (if any) with `overrides` on top."""
    values = read_yaml(path) if path is not None else {}
    values.update(overrides or {})
    return build_config(values)


_STRING_KEYS = frozenset(
    name for name, field in TrainConfig.model_fields.items() if field.annotation in (str, str | None)
)


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """Add `--config` and one `--<key>` flag per TrainConfig key to a parser."""
    parser.add_argument("--config", metavar="FILE", help="YAML config; flags override its keys")
    group = parser.add_argument_group("config keys (values are read as YAML)")
    for name, field in TrainConfig.model_fields.items():
        flag = "--" + name.replace("_", "-")
        default = (
            ""
            if field.default is None or field.default_factory is not None
            else f" (default: {field.default})"
        )
        group.add_argument(
            flag, dest=f"key_{name}", metavar="VALUE", help=(field.description or "") + default
        )


def overrides_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The config keys given as flags."""
    overrides: dict[str, Any] = {}
    for name in TrainConfig.model_fields:
        text = getattr(args, f"key_{name}", None)
        if text is not None:
            overrides[name] = text if name in _STRING_KEYS else parse_value(text)
    return overrides
