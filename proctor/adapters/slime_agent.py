"""slime multi-turn rollouts over Proctor sessions: `--custom-generate-function-path
proctor.adapters.slime_agent.generate` and `--custom-rm-path proctor.adapters.slime_agent.reward`.

Checked against THUDM/slime at 3c9aa09 (`slime/rollout/sglang_rollout.py`: `generate_and_rm` awaits
`custom_generate_func(args, sample, sampling_params)` and calls the reward function only for samples whose
`reward` is still None; `slime/utils/types.py`: `Sample`):

- `generate` opens one session per sample from `sample.label` (`{environment, task, options?}`, or its JSON
  string), tokenizes `sample.prompt` with the tokenizer at `args.hf_checkpoint`, and loops: the SGLang router's
  `/generate` (`{input_ids, sampling_params, return_logprob: true}`, as slime's own `generate` posts it) gives
  the policy's turn, whose tokens get `loss_mask` 1; the turn's text is sent to the session; the observations
  are rendered with the tokenizer's chat template (or $PROCTOR_CHAT_TEMPLATE: qwen, chatml, llama3) and
  appended with `loss_mask` 0 and log-probs 0. `max_new_tokens` bounds the whole response, observations
  included. The session's score becomes `sample.reward` (slime then skips the reward function), the session is
  deleted, and `metadata["proctor_status"]`, `["proctor_end_reason"]` and `["proctor_session_id"]` say how it
  ended.
- A machinery failure (a non-ok status) sets `remove_sample = True` (slime zeroes the sample's loss mask) and
  the reward to $PROCTOR_FAILURE_VALUE (0.0: slime's group normalisation reads a number), never a trained 0.
- `reward(args, sample)` (or a list with `--group-rm`) returns the reward `generate` stored, for setups that
  reset rewards or score in groups; a sample `generate` did not run is a ValueError, not a guess.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import httpx

from proctor.adapters._sessions import (
    BUILTIN_TEMPLATES,
    UNAVAILABLE,
    close_quietly,
    failure_text,
    open_episode,
    render_builtin,
    render_with_tokenizer,
    status_of,
    task_spec,
)
from proctor.adapters._sessions import (
    reward as session_reward,
)

_tokenizers: dict[str, Any] = {}
_lock = threading.Lock()


def tokenizer_for(path: str) -> Any:
    """The tokenizer at `path` (args.hf_checkpoint), loaded once per process."""
    with _lock:
        if path not in _tokenizers:
            from transformers import AutoTokenizer

            _tokenizers[path] = AutoTokenizer.from_pretrained(path, trust_remote_code=True)
        return _tokenizers[path]


def _status(sample: Any, name: str) -> Any:
    return getattr(type(sample).Status, name)


def _render(
    tokenizer: Any,
    history: list[dict[str, Any]],
    observations: list[dict[str, Any]],
    tools: Any,
    ended_with_eos: bool,
) -> str:
    template = os.environ.get("PROCTOR_CHAT_TEMPLATE") or ""
    if template in BUILTIN_TEMPLATES:
        return render_builtin(template, observations, close_turn=not ended_with_eos)
    generated_end = (tokenizer.eos_token or "") if ended_with_eos else ""
    return render_with_tokenizer(tokenizer, history, observations, tools, generated_end=generated_end)


async def generate(args: Any, sample: Any, sampling_params: dict[str, Any]) -> Any:
    """slime's custom generate function: one multi-turn rollout against a Proctor session."""
    environment, task, options = task_spec(sample.label)
    tokenizer = tokenizer_for(args.hf_checkpoint)
    url = f"http://{args.sglang_router_ip}:{args.sglang_router_port}/generate"
    budget = int(sampling_params.get("max_new_tokens") or 0)
    episode = await open_episode(environment, task, options)
    history: list[dict[str, Any]] = list(episode.messages)
    prompt_ids = tokenizer.encode(sample.prompt, add_special_tokens=False)
    sample.tokens = list(prompt_ids)
    sample.response, sample.response_length = "", 0
    sample.loss_mask, sample.rollout_log_probs = [], []
    sample.status = _status(sample, "COMPLETED")
    failure: str | None = None
    score = None
    try:
        async with httpx.AsyncClient(timeout=None) as http:
            while True:
                left = budget - sample.response_length
                if left <= 0:
                    sample.status = _status(sample, "TRUNCATED")
                    break
                payload = {
                    "input_ids": sample.tokens,
                    "sampling_params": {**sampling_params, "max_new_tokens": left},
                    "return_logprob": True,
                }
                response = await http.post(url, json=payload)
                response.raise_for_status()
                output = response.json()
                meta = output.get("meta_info") or {}
                pairs = meta.get("output_token_logprobs") or []
                tokens = [int(item[1]) for item in pairs]
                sample.tokens += tokens
                sample.response += output["text"]
                sample.response_length += len(tokens)
                sample.loss_mask += [1] * len(tokens)
                sample.rollout_log_probs += [float(item[0]) for item in pairs]
                finish = (meta.get("finish_reason") or {}).get("type")
                if finish == "abort":
                    sample.status = _status(sample, "ABORTED")
                    return sample  # slime re-queues aborted samples; the session is closed below
                try:
                    outcome = await episode.step(output["text"])
                except Exception as exc:  # noqa: BLE001 - machinery (session lost, service down): removed below
                    failure = failure_text(exc)
                    break
                history.append({"role": "assistant", "content": output["text"]})
                if outcome.done:
                    break
                if finish == "length":
                    sample.status = _status(sample, "TRUNCATED")
                    break
                ended = bool(tokens) and tokens[-1] == tokenizer.eos_token_id
                text = _render(tokenizer, history, outcome.observations, episode.tools, ended)
                history.extend(outcome.observations)
                observed = tokenizer.encode(text, add_special_tokens=False)[: budget - sample.response_length]
                sample.tokens += observed
                sample.response += tokenizer.decode(observed)
                sample.response_length += len(observed)
                sample.loss_mask += [0] * len(observed)
                sample.rollout_log_probs += [0.0] * len(observed)
        score = episode.score
        if score is None and failure is None:
            try:
                score = await episode.finish()
            except Exception as exc:  # noqa: BLE001 - machinery: removed below, not a crashed rollout
                failure = failure_text(exc)
    finally:
        await close_quietly(episode)
    trained = None if failure is not None else session_reward(score)
    sample.metadata["proctor_status"] = UNAVAILABLE if failure is not None else status_of(score)
    sample.metadata["proctor_end_reason"] = (
        failure or episode.end_reason or (score.reason if score is not None else None) or ""
    )
    sample.metadata["proctor_session_id"] = episode.session_id
    sample.metadata["proctor_messages"] = [*episode.messages, *episode.transcript]
    if trained is None:
        sample.remove_sample = True
        sample.reward = float(os.environ.get("PROCTOR_FAILURE_VALUE") or 0.0)
    else:
        sample.reward = trained
    sample.metadata["proctor_reward"] = sample.reward
    return sample


async def reward(args: Any, sample: Any, **kwargs: Any) -> float | list[float]:
    """slime's custom reward function: the reward `generate` stored (a list in, a list out for --group-rm)."""
    if isinstance(sample, list):
        return [_stored(item) for item in sample]
    return _stored(sample)


def _stored(sample: Any) -> float:
    metadata = getattr(sample, "metadata", None) or {}
    if "proctor_reward" not in metadata:
        raise ValueError(
            "this sample was not rolled out by proctor.adapters.slime_agent.generate "
            "(set --custom-generate-function-path proctor.adapters.slime_agent.generate)"
        )
    return float(metadata["proctor_reward"])
