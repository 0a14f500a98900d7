"""Sampling and training see one policy: what `generate` samples from is what the loss's log-probabilities
are taken under; and a fresh run never mixes its checkpoints with an earlier run's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from proctor.trainer.config import ConfigError, TrainConfig, load_config  # noqa: E402
from proctor.trainer.generation import plain_generation_config  # noqa: E402
from proctor.trainer.grpo import (  # noqa: E402
    collate,
    completion_logits,
    encode_prompt,
    left_pad,
    make_trainer,
    sample_completions,
    token_log_probs,
    train,
    train_step,
)

TINY = Path(__file__).resolve().parent.parent / "trainer" / "configs" / "tiny.yaml"
PROMPTS = ["3 5", "1 2 3 4 5", "0"]  # different lengths, so the prompts are left padded


@pytest.fixture(autouse=True)
def _keep_torch_threads() -> Any:
    """The tiny config sets cpu_threads: 1; tests that build trainers directly must not leave that behind."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def tiny(tmp_path: Path, **overrides: Any) -> TrainConfig:
    return load_config(
        TINY, {"max_new_tokens": 6, "group_size": 4, "output_dir": str(tmp_path / "out"), **overrides}
    )


def _sample(trainer: Any, config: TrainConfig) -> list[list[int]]:
    prompts = [encode_prompt(trainer.tokenizer, [{"role": "user", "content": c}], None) for c in PROMPTS]
    torch.manual_seed(0)
    return [s.completion_ids for s in sample_completions(trainer.model, trainer.tokenizer, prompts, config)]


def test_sampling_ignores_the_models_own_generation_config(tmp_path: Path) -> None:
    # A chat model's generation_config.json (Qwen2.5-Instruct's has a repetition penalty) must not change the
    # sampling distribution: the loss takes log-probabilities under the plain policy at `temperature`.
    config = tiny(tmp_path)
    trainer, _ = make_trainer(config)
    plain = _sample(trainer, config)
    assert any(len(ids) < 6 for ids in plain)  # some completions end early with the end token
    own = trainer.model.generation_config
    own.min_new_tokens = 6  # would forbid the end token before 6 tokens
    own.repetition_penalty = 10.0
    own.no_repeat_ngram_size = 1
    assert _sample(trainer, config) == plain
    assert trainer.model.generation_config is own and own.repetition_penalty == 10.0  # put back after


def test_plain_generation_config_is_put_back_after_an_error(tmp_path: Path) -> None:
    trainer, _ = make_trainer(tiny(tmp_path))
    own = trainer.model.generation_config
    with pytest.raises(RuntimeError), plain_generation_config(trainer.model):
        assert trainer.model.generation_config is not own
        raise RuntimeError
    assert trainer.model.generation_config is own


def test_training_log_probs_are_those_of_the_sampling_forward_passes(tmp_path: Path) -> None:
    # The logits `generate` sampled each token from, against the training forward pass over left-padded
    # prompts + right-padded completions: a shift by one or a wrong position id would differ by far more.
    config = tiny(tmp_path)
    trainer, _ = make_trainer(config)
    tokenizer, model = trainer.tokenizer, trainer.model
    prompts = [encode_prompt(tokenizer, [{"role": "user", "content": c}], None) for c in PROMPTS]
    ids, mask = left_pad(prompts, tokenizer.pad_token_id)
    torch.manual_seed(0)
    with torch.no_grad(), plain_generation_config(model):
        out = model.generate(
            input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
            max_new_tokens=6, num_return_sequences=4, pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id, output_logits=True, return_dict_in_generate=True,
        )  # fmt: skip
    sampled_logits = torch.stack(out.logits, 1)
    torch.manual_seed(0)
    samples = sample_completions(model, tokenizer, prompts, config)
    assert [s.completion_ids for s in samples] == [
        row[: row.index(tokenizer.eos_token_id) + 1] if tokenizer.eos_token_id in row else row
        for row in out.sequences[:, ids.shape[1] :].tolist()
    ]
    batch = collate(samples, torch.zeros(len(samples)), [True] * len(samples), tokenizer.pad_token_id, "cpu")
    width = batch.completion_ids.shape[1]
    with torch.no_grad():
        trained = token_log_probs(
            completion_logits(model, batch.input_ids, batch.attention_mask, width, 1.0), batch.completion_ids
        )
    sampled = token_log_probs(sampled_logits[:, :width], batch.completion_ids)
    kept = batch.loss_mask.bool()
    assert kept.sum() > len(samples)  # more than one token per completion is compared
    assert torch.allclose(trained[kept], sampled[kept], atol=1e-4)


def test_a_fresh_run_refuses_an_output_dir_with_an_earlier_runs_checkpoints(tmp_path: Path) -> None:
    # Rotation keeps the newest step names: an earlier run's step-0000003 would outlive (and delete) this
    # run's step-0000001, and resume: latest would continue the earlier run.
    train(load_config(TINY, {"steps": 1, "output_dir": str(tmp_path / "out")}))
    with pytest.raises(ConfigError, match="already holds checkpoints of an earlier run"):
        train(load_config(TINY, {"steps": 1, "output_dir": str(tmp_path / "out")}))
    resumed = train(load_config(TINY, {"steps": 2, "output_dir": str(tmp_path / "out"), "resume": "latest"}))
    assert resumed["step"] == 2


def test_attention_dropout_is_off_so_training_sees_the_sampling_policy(tmp_path: Path) -> None:
    # Llama keeps its attention dropout as a float attribute, not an nn.Dropout; left on, every training
    # forward pass (model.train()) would score tokens under a different random policy than the one sampled.
    model_init = {**load_config(TINY).model_init, "attention_dropout": 0.5}
    trainer, _ = make_trainer(tiny(tmp_path, model_init=model_init))
    ids = torch.tensor([[4, 7, 8, 9, 2, 5, 7]])
    mask = torch.ones_like(ids)
    trainer.model.train()
    first, second = (completion_logits(trainer.model, ids, mask, 3, 1.0) for _ in range(2))
    trainer.model.eval()
    sampling = completion_logits(trainer.model, ids, mask, 3, 1.0)
    assert torch.equal(first, second) and torch.equal(first, sampling)


def test_micro_batches_give_the_update_of_the_whole_batch(tmp_path: Path) -> None:
    # Gradient accumulation over uneven micro-batches (7 rows) against one pass over all 128: with a
    # length-dependent aggregation and two iterations, any per-micro-batch normaliser would show.
    options = {"max_new_tokens": 3, "group_size": 8, "num_iterations": 2, "loss_aggregation": "token_mean"}
    whole, _ = make_trainer(tiny(tmp_path, micro_batch_size=128, **options))
    parts, _ = make_trainer(tiny(tmp_path, micro_batch_size=7, **options))
    a, b = train_step(whole, 0), train_step(parts, 0)
    assert a["loss"] == pytest.approx(b["loss"], abs=1e-6) and a["grad_norm"] == pytest.approx(b["grad_norm"])
    for x, y in zip(whole.model.parameters(), parts.model.parameters(), strict=True):
        assert torch.allclose(x, y, atol=1e-6)


def test_a_completion_ends_at_any_end_token_of_the_models_generation_config(tmp_path: Path) -> None:
    # Gemma's chat turns end with <end_of_turn>, not the tokenizer's <eos>; its generation_config lists both.
    # Here the digit 5 plays that part.
    config = tiny(tmp_path)
    trainer, _ = make_trainer(config)
    tokenizer = trainer.tokenizer
    five = tokenizer.convert_tokens_to_ids("5")
    before = _sample(trainer, config)
    assert any(five in ids[:-1] for ids in before)  # without it, completions run on past a 5
    trainer.model.generation_config.eos_token_id = [tokenizer.eos_token_id, five]
    prompts = [encode_prompt(tokenizer, [{"role": "user", "content": c}], None) for c in PROMPTS]
    torch.manual_seed(0)
    samples = sample_completions(trainer.model, tokenizer, prompts, config)
    ended_at_five = [s for s in samples if s.completion_ids[-1] == five]
    assert ended_at_five and all(not s.truncated for s in ended_at_five)
    for sample in samples:
        stops = [i for i, t in enumerate(sample.completion_ids) if t in (five, tokenizer.eos_token_id)]
        assert stops == ([len(sample.completion_ids) - 1] if not sample.truncated else [])
