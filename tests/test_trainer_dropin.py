"""Drop-in proof for other trainers: a real TRL GRPOTrainer step with Proctor's TRL reward function, and
Proctor's verl compute_score called with exactly the arguments verl's reward managers pass."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import proctor  # noqa: E402
from proctor.trainer.config import TrainConfig  # noqa: E402
from proctor.trainer.grpo import build_model, encode_prompt, sample_completions  # noqa: E402
from proctor.trainer.tokenizer import build_char_tokenizer  # noqa: E402

MODEL_INIT = {
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "max_position_embeddings": 64,
    "tie_word_embeddings": True,
}


def tiny_model() -> tuple[Any, Any]:
    config = TrainConfig(model_init=MODEL_INIT, tokenizer_alphabet="012345 ", task="demo.max_digit")
    tokenizer = build_char_tokenizer("012345 ")
    return build_model(config, tokenizer, torch.device("cpu")), tokenizer


@pytest.fixture(autouse=True)
def _keep_torch_threads() -> Any:
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.mark.timeout(300)
def test_a_trl_grpo_step_with_proctors_reward_function(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    trl = pytest.importorskip("trl")
    from proctor.adapters.trl import reward_function

    model, tokenizer = tiny_model()
    rows = [
        {"prompt": [{"role": "user", "content": f"{a} {b}"}], "answer": {"answer": max(a, b)}}
        for a in range(6)
        for b in range(6)
    ]
    proctor_reward = reward_function("demo.max_digit", in_process=True)
    seen: list[tuple[list[Any], list[Any], list[float | None]]] = []

    async def recorded(prompts: list[Any], completions: list[Any], **columns: Any) -> list[float | None]:
        rewards = await proctor_reward(prompts, completions, **columns)
        seen.append((completions, list(columns["answer"]), rewards))
        return rewards

    recorded.__name__ = proctor_reward.__name__
    before = [p.detach().clone() for p in model.parameters()]
    args = trl.GRPOConfig(
        output_dir=str(tmp_path / "trl"),
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=3,
        max_steps=1,
        learning_rate=1e-3,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        bf16=False,
        seed=0,
    )
    trainer = trl.GRPOTrainer(
        model=model,
        reward_funcs=[recorded],
        args=args,
        train_dataset=datasets.Dataset.from_list(rows),
        processing_class=tokenizer,
    )
    trainer.train()

    assert seen, "TRL never called the reward function"
    completions, references, rewards = seen[0]
    assert len(completions) == len(rewards) == 8
    for completion, reference, reward in zip(completions, references, rewards, strict=True):
        text = completion[-1]["content"] if isinstance(completion, list) else completion
        assert reward == proctor.score("demo.max_digit", text, reference).reward  # Proctor's verdicts
    logged = {key for record in trainer.state.log_history for key in record}
    assert f"rewards/{proctor_reward.__name__}/mean" in logged
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_verl_compute_score_with_verls_exact_arguments() -> None:
    from proctor.adapters import verl

    verl.reset_config()
    model, tokenizer = tiny_model()
    config = TrainConfig(
        model_init=MODEL_INIT,
        tokenizer_alphabet="012345 ",
        task="demo.max_digit",
        group_size=4,
        max_new_tokens=3,
    )
    prompts = [(a, b) for a in range(3, 6) for b in range(2)]
    encoded = [encode_prompt(tokenizer, [{"role": "user", "content": f"{a} {b}"}], None) for a, b in prompts]
    torch.manual_seed(0)
    samples = sample_completions(model, tokenizer, encoded, config)
    # verl's reward managers bind custom_reward_function.reward_kwargs with functools.partial, then call
    # compute_score(data_source=, solution_str=, ground_truth=, extra_info=) per sample (naive, DAPO, PRIME),
    # or compute_score(data_sources=, solution_strs=, ground_truths=, extra_infos=) (batch manager).
    compute_score = functools.partial(
        verl.compute_score, verifiers={"demo": "demo.max_digit"}, in_process=True
    )
    compute_score_batch = functools.partial(
        verl.compute_score_batch, verifiers={"demo": "demo.max_digit"}, in_process=True
    )
    truths = [{"answer": max(prompts[i // 4])} for i in range(len(samples))]
    extras = [
        {"index": i, "split": "train", "num_turns": None, "rollout_reward_scores": {}}
        for i in range(len(samples))
    ]
    singles = [
        compute_score(data_source="demo", solution_str=s.text, ground_truth=truth, extra_info=extra)
        for s, truth, extra in zip(samples, truths, extras, strict=True)
    ]
    batch = compute_score_batch(
        data_sources=["demo"] * len(samples),
        solution_strs=[s.text for s in samples],
        ground_truths=truths,
        extra_infos=extras,
    )
    assert singles == batch
    expected = [
        proctor.score("demo.max_digit", s.text, truth).reward
        for s, truth in zip(samples, truths, strict=True)
    ]
    assert [item["score"] for item in singles] == expected
    assert {tuple(sorted(item)) for item in singles} == {("acc", "failed", "reason", "score", "status")}
    assert 0 < sum(expected) < len(expected)  # the random policy gets some right and some wrong
    right = compute_score(
        data_source="demo", solution_str="5", ground_truth={"answer": 5}, extra_info=extras[0]
    )
    assert right["score"] == 1.0 and right["status"] == "ok"
