"""Proof that the trainer learns: `proctor train --config trainer/configs/tiny.yaml`, as the README runs it,
scored through a running Proctor service.

A randomly initialised 2-layer Llama with a character-level tokenizer built locally (nothing is downloaded)
learns demo.max_digit, the larger of two digits, from its random-policy reward to at least 0.9.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

import proctor  # noqa: E402
from proctor.trainer.config import load_config  # noqa: E402
from proctor.trainer.grpo import encode_prompt, left_pad, make_trainer, sample_completions  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
TINY = REPO / "trainer" / "configs" / "tiny.yaml"


def random_policy_reward() -> float:
    """The untrained tiny model's mean reward over 32 samples of each of the 36 prompts."""
    threads = torch.get_num_threads()
    config = load_config(TINY, {"group_size": 32})
    trainer, _ = make_trainer(config)
    torch.set_num_threads(threads)
    pairs = [(a, b) for a in range(6) for b in range(6)]
    prompts = [
        encode_prompt(trainer.tokenizer, [{"role": "user", "content": f"{a} {b}"}], None) for a, b in pairs
    ]
    torch.manual_seed(1)
    samples = sample_completions(trainer.model, trainer.tokenizer, prompts, config)
    requests = [
        {"verifier": "demo.max_digit", "response": sample.text, "reference": {"answer": max(pairs[i // 32])}}
        for i, sample in enumerate(samples)
    ]
    return sum(score.reward for score in proctor.score_batch(requests)) / len(requests)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_tiny_model_learns_max_digit_from_random_to_at_least_0_9(tmp_path: Path, live_server: str) -> None:
    out = tmp_path / "out"
    env = {key: value for key, value in os.environ.items() if not key.startswith("PROCTOR_")}
    # Every reward of the run comes over HTTP from a real Proctor service: the service, proven end to end.
    command = [sys.executable, "-m", "proctor", "train", "--config", str(TINY), "--output-dir", str(out)]
    command += ["--server", live_server]
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=540)
    assert done.returncode == 0, done.stderr[-3000:]

    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    rewards = [record["reward_mean"] for record in metrics]
    assert len(rewards) == 200  # the config's bounded number of steps
    # The random policy, the untrained model: about 1 answer in 8 right, measured on 32 samples of each of
    # the 36 prompts (0.114-0.139 over init seeds 0-11). One step's 128 samples are too few to hold to the
    # 0.1 floor (first steps of seeds 0-4: 0.109-0.195), so the run's start is only held below 0.5.
    assert 0.1 <= random_policy_reward() <= 0.5
    assert rewards[0] <= 0.5 and sum(rewards[:10]) / 10 <= 0.5
    # Learned: the mean over the last 20 steps (2,560 sampled answers) is at least 0.9.
    assert sum(rewards[-20:]) / 20 >= 0.9
    assert all(record["scoring_failures"] == 0 and record["scoring_latency_s"] > 0 for record in metrics)

    # The trained checkpoint answers (greedily) nearly every one of the 36 prompts right. No constant answer
    # could: the most frequent largest digit (5) is right for 11 of the 36.
    checkpoint = out / "checkpoints" / "step-0000200"
    model = AutoModelForCausalLM.from_pretrained(checkpoint / "model")
    tokenizer = AutoTokenizer.from_pretrained(checkpoint / "model")
    pairs = [(a, b) for a in range(6) for b in range(6)]
    prompts = [encode_prompt(tokenizer, [{"role": "user", "content": f"{a} {b}"}], None) for a, b in pairs]
    ids, mask = left_pad(prompts, tokenizer.pad_token_id)
    output = model.generate(
        input_ids=ids,
        attention_mask=mask,
        do_sample=False,
        max_new_tokens=3,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    answers = tokenizer.batch_decode(output[:, ids.shape[1] :], skip_special_tokens=True)
    right = sum(
        proctor.score("demo.max_digit", answer, {"answer": max(pair)}).reward
        for answer, pair in zip(answers, pairs, strict=True)
    )
    assert right >= 33, list(zip(pairs, answers, strict=True))
    best_constant = max(sum(max(pair) == digit for pair in pairs) for digit in range(6))
    assert best_constant == 11
