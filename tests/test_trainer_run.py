"""The trainer end to end on the tiny model: every algorithm option, prompts from environments and datasets,
scoring in-process and through a live service, metrics, checkpoints and an exact resume, the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from safetensors.torch import load_file  # noqa: E402

from proctor.cli import main  # noqa: E402
from proctor.contract import Status, Verdict  # noqa: E402
from proctor.environments.demo.tasks import DemoReference, first_digit  # noqa: E402
from proctor.io import write_rows  # noqa: E402
from proctor.registry import BaseOptions, VerifierSpec, register_verifier  # noqa: E402
from proctor.trainer.config import ConfigError, TrainConfig, load_config  # noqa: E402
from proctor.trainer.grpo import (  # noqa: E402
    choose_device,
    collect_groups,
    derive_seed,
    group_advantages,
    make_trainer,
    overlong_penalty,
    prompt_source,
    train,
    train_step,
)

TINY = Path(__file__).resolve().parent.parent / "trainer" / "configs" / "tiny.yaml"
TIMING_KEYS = {"step_time_s", "tokens_per_s", "scoring_latency_s", "generate_s", "update_s"}


def _flaky(response: str, reference: DemoReference, options: BaseOptions) -> Verdict:
    """demo.max_digit's rule, except that a response containing '0' is a machinery failure."""
    if "0" in response:
        return Verdict.failure(Status.verifier_error, "flaky_on_purpose")
    return (
        Verdict.right() if first_digit(response) == str(reference.answer) else Verdict.wrong("wrong_answer")
    )


register_verifier(
    VerifierSpec(
        name="test.trainer_flaky",
        version="1",
        score=_flaky,
        reference=DemoReference,
        description="Test-only: demo.max_digit, but responses containing 0 fail to score.",
        execution="inline",
    )
)


def _down(response: str, reference: DemoReference, options: BaseOptions) -> Verdict:
    """Every score fails, as during a sandbox outage."""
    return Verdict.failure(Status.sandbox_error, "down_on_purpose")


register_verifier(
    VerifierSpec(
        name="test.trainer_down",
        version="1",
        score=_down,
        reference=DemoReference,
        description="Test-only: every score is a machinery failure.",
        execution="inline",
    )
)


def tiny(tmp_path: Path, **overrides: Any) -> TrainConfig:
    """The shipped tiny config, 2 steps, writing under tmp_path."""
    return load_config(TINY, {"steps": 2, "output_dir": str(tmp_path / "out"), **overrides})


def run(config: TrainConfig) -> list[dict[str, Any]]:
    train(config)
    lines = (Path(config.output_dir) / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


# -- metrics -------------------------------------------------------------------------------------------

LISTED_METRICS = {
    "step",
    "reward_mean",
    "reward_std",
    "reward_answered_mean",  # per component (demo verifiers report `answered`)
    "reward_answered_std",
    "accuracy",
    "zero_variance_fraction",
    "clip_low_fraction",
    "clip_high_fraction",
    "entropy",
    "completion_length_mean",
    "completion_length_max",
    "truncated_rate",
    "scoring_failures",
    "scoring_latency_s",
    "step_time_s",
    "tokens_per_s",
    "lr",
    "loss",
    "grad_norm",
}


def test_metrics_jsonl_has_one_object_per_step_with_the_listed_metrics(tmp_path: Path) -> None:
    metrics = run(tiny(tmp_path, steps=3, log_completions=4))
    assert [m["step"] for m in metrics] == [1, 2, 3]
    for record in metrics:
        assert set(record) >= LISTED_METRICS, LISTED_METRICS - set(record)
        assert 0.0 <= record["reward_mean"] <= 1.0 and record["samples"] == 16 * 8
        assert record["completion_length_max"] <= 3 and record["scoring_failures"] == 0
    assert "kl" not in metrics[0]  # beta = 0: no reference model, no KL
    completions = [
        json.loads(line) for line in (tmp_path / "out" / "completions.jsonl").read_text().splitlines()
    ]
    assert len(completions) == 12 and {"prompt", "completion", "reward"} <= set(completions[0])
    assert (tmp_path / "out" / "checkpoints" / "step-0000003" / "model" / "config.json").is_file()


# -- algorithm options ---------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _keep_torch_threads() -> Any:
    """The tiny config sets cpu_threads: 1; tests that build trainers directly must not leave that behind."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def expected_loss(samples: list[Any], aggregation: str, max_new_tokens: int) -> float:
    """The loss at the first iteration, by hand: the ratio is 1, so each token's loss is -advantage."""
    lengths = [len(s.completion_ids) for s in samples]
    advantages = [s.advantage for s in samples]
    if aggregation == "token_mean":
        return -sum(a * n for a, n in zip(advantages, lengths, strict=True)) / sum(lengths)
    if aggregation == "seq_mean_token_mean":
        return -sum(advantages) / len(samples)
    return -sum(a * n for a, n in zip(advantages, lengths, strict=True)) / (len(samples) * max_new_tokens)


@pytest.mark.parametrize(
    ("scale", "aggregation"),
    [("batch", "token_mean"), ("none", "constant_normalizer"), ("group", "seq_mean_token_mean")],
)
def test_each_advantage_scaling_and_aggregation_is_what_the_step_trains_on(
    tmp_path: Path, scale: str, aggregation: str
) -> None:
    config = tiny(tmp_path, scale_rewards=scale, loss_aggregation=aggregation, max_new_tokens=5)
    trainer, _ = make_trainer(config)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    metrics = train_step(trainer, 0)
    samples = [s for g in metrics.pop("_groups") for s in g.samples]
    rewards = torch.tensor([s.reward for s in samples])
    expected = group_advantages(rewards, torch.ones(len(samples), dtype=torch.bool), 8, scale)
    assert [s.advantage for s in samples] == expected.tolist()
    assert len({len(s.completion_ids) for s in samples}) > 1  # lengths differ, so the aggregations differ
    assert metrics["loss"] == pytest.approx(expected_loss(samples, aggregation, 5), abs=1e-6)
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.model.parameters(), strict=True))


def test_gradient_checkpointing_gives_the_same_update(tmp_path: Path) -> None:
    plain_trainer, _ = make_trainer(tiny(tmp_path))
    saving_trainer, _ = make_trainer(tiny(tmp_path, gradient_checkpointing=True))
    plain, saving = train_step(plain_trainer, 0), train_step(saving_trainer, 0)
    assert saving["loss"] == pytest.approx(plain["loss"], abs=1e-6)
    assert saving["grad_norm"] == pytest.approx(plain["grad_norm"], rel=1e-4)
    for a, b in zip(plain_trainer.model.parameters(), saving_trainer.model.parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-6)


def test_the_entropy_bonus_is_subtracted_from_the_loss(tmp_path: Path) -> None:
    plain = train_step(make_trainer(tiny(tmp_path, loss_aggregation="token_mean"))[0], 0)
    bonus = train_step(make_trainer(tiny(tmp_path, loss_aggregation="token_mean", entropy_coef=0.1))[0], 0)
    assert bonus["entropy"] == pytest.approx(plain["entropy"])  # same samples: sampling is seeded per step
    assert bonus["loss"] == pytest.approx(plain["loss"] - 0.1 * plain["entropy"], abs=1e-6)


def test_the_ratio_is_exactly_one_at_the_first_iteration_and_not_after(tmp_path: Path) -> None:
    # With zero-width clipping any ratio other than exactly 1 is clipped on one side or the other.
    one = train_step(make_trainer(tiny(tmp_path, epsilon_low=0.0, epsilon_high=0.0))[0], 0)
    assert one["clip_low_fraction"] == 0.0 and one["clip_high_fraction"] == 0.0
    two = train_step(make_trainer(tiny(tmp_path, epsilon_low=0.0, epsilon_high=0.0, num_iterations=2))[0], 0)
    assert two["clip_low_fraction"] + two["clip_high_fraction"] > 0  # the second iteration is off-policy


def test_clip_higher_clips_less_on_the_high_side(tmp_path: Path) -> None:
    common = {"num_iterations": 3, "learning_rate": 0.01, "epsilon_low": 0.05}
    narrow = train_step(make_trainer(tiny(tmp_path, epsilon_high=0.05, **common))[0], 0)
    wide = train_step(make_trainer(tiny(tmp_path, epsilon_high=10.0, **common))[0], 0)
    assert narrow["clip_high_fraction"] > 0 and wide["clip_high_fraction"] == 0.0


def test_beta_loads_a_frozen_reference_and_reports_kl(tmp_path: Path) -> None:
    assert make_trainer(tiny(tmp_path))[0].reference is None  # beta 0: no reference model at all
    trainer, _ = make_trainer(tiny(tmp_path, beta=0.1, learning_rate=0.01))
    assert trainer.reference is not None
    assert not any(p.requires_grad for p in trainer.reference.parameters())
    first, second = train_step(trainer, 0), train_step(trainer, 1)
    assert first["kl"] == pytest.approx(0.0, abs=1e-6)  # the policy starts as the reference
    assert second["kl"] > 0
    initial = make_trainer(tiny(tmp_path))[0].model  # the same seed builds the same initial weights
    for ref, start in zip(trainer.reference.parameters(), initial.parameters(), strict=True):
        assert torch.equal(ref, start)


def test_dynamic_sampling_keeps_only_groups_with_signal_and_refills_a_bounded_number_of_times(
    tmp_path: Path,
) -> None:
    # Groups of 2 at a ~20 % reward are mostly all-equal, so refills are needed.
    trainer, _ = make_trainer(tiny(tmp_path, group_size=2, dynamic_sampling=True, max_refills=2))
    torch.manual_seed(derive_seed(0, 0))  # as train_step seeds step 0 of seed 0
    groups, sampled, stats = collect_groups(trainer, 0)
    assert groups and len(groups) <= 16 and all(g.informative() for g in groups)
    assert 1 <= stats["refills"] <= 2 and stats["zero_variance_fraction"] > 0.3
    assert stats["samples"] == 2 * len(sampled) > 2 * 16  # more than the first batch was generated
    assert all(any(g is s for s in sampled) for g in groups)
    plain, plain_sampled, plain_stats = collect_groups(make_trainer(tiny(tmp_path, group_size=2))[0], 0)
    assert len(plain) == 16 and plain_stats["refills"] == 0 and any(not g.informative() for g in plain)
    assert plain == plain_sampled
    # The step's reward is measured on every sampled group, not only on the kept (biased) ones.
    metrics = train_step(
        make_trainer(tiny(tmp_path, group_size=2, dynamic_sampling=True, max_refills=2))[0], 0
    )
    every = [s.reward for g in sampled for s in g.samples]
    assert metrics["reward_mean"] == pytest.approx(sum(every) / len(every))
    assert metrics["trained_samples"] == 2 * len(metrics.pop("_groups"))


def test_truncated_completions_masked(tmp_path: Path) -> None:
    trainer, _ = make_trainer(tiny(tmp_path, overlong="mask"))
    metrics = train_step(trainer, 0)
    samples = [s for g in metrics.pop("_groups") for s in g.samples]
    truncated = sum(s.truncated for s in samples)
    assert 0 < truncated < len(samples)
    assert metrics["trained_samples"] == len(samples) - truncated


def test_truncated_completions_get_the_soft_overlong_penalty(tmp_path: Path) -> None:
    trainer, _ = make_trainer(tiny(tmp_path, overlong="penalty", max_new_tokens=4, overlong_buffer=2))
    metrics = train_step(trainer, 0)
    samples = [s for g in metrics.pop("_groups") for s in g.samples]
    lengths = torch.tensor([len(s.completion_ids) for s in samples])
    assert [s.penalty for s in samples] == overlong_penalty(lengths, 4, 2).tolist()
    assert {s.penalty for s in samples} >= {0.0, -1.0}
    assert metrics["overlong_penalty_mean"] < 0 and metrics["trained_samples"] == len(samples)
    # The penalty is part of the reward the advantages are computed from.
    shaped = torch.tensor([s.reward + s.penalty for s in samples])
    expected = group_advantages(shaped, torch.ones(len(samples), dtype=torch.bool), 8, "group")
    assert [s.advantage for s in samples] == expected.tolist()


def test_failed_scores_are_masked_never_trained_on_as_zero(tmp_path: Path) -> None:
    rows = [
        {"prompt": f"{a} {b}", "reference": {"answer": max(a, b)}} for a in range(1, 6) for b in range(1, 6)
    ]
    data = tmp_path / "digits.jsonl"
    write_rows(data, rows)
    config = tiny(
        tmp_path, task=None, dataset=str(data), verifier="test.trainer_flaky", tokenizer_alphabet="012345 "
    )
    trainer, _ = make_trainer(config)
    metrics = train_step(trainer, 0)
    samples = [s for g in metrics.pop("_groups") for s in g.samples]
    failed = [s for s in samples if "0" in s.text]
    assert failed and metrics["scoring_failures"] == len(failed)
    assert all(not s.valid for s in failed) and all(s.valid for s in samples if "0" not in s.text)
    assert metrics["trained_samples"] == len(samples) - len(failed)
    # Advantages come from the valid samples of each group alone; a failure's advantage is 0.
    rewards = torch.tensor([s.reward for s in samples])
    valid = torch.tensor([s.valid for s in samples])
    expected = group_advantages(rewards, valid, 8, "group")
    assert [s.advantage for s in samples] == expected.tolist()
    assert all(s.advantage == 0.0 for s in failed)
    assert expected.tolist() != group_advantages(rewards, torch.ones_like(valid), 8, "group").tolist()
    scored = [s.reward for s in samples if s.valid]
    assert metrics["reward_mean"] == pytest.approx(
        sum(scored) / len(scored)
    )  # failures are not 0s in the mean


def test_a_step_whose_every_score_failed_leaves_the_weights_and_the_optimizer_alone(tmp_path: Path) -> None:
    # After a real update Adam holds momentum; a step with nothing to train on must not apply it.
    trainer, _ = make_trainer(tiny(tmp_path))
    train_step(trainer, 0)
    weights = [p.detach().clone() for p in trainer.model.parameters()]
    adam_steps = [float(state["step"]) for state in trainer.optimizer.state.values()]
    rows = [{"prompt": f"{a} {b}", "reference": {"answer": max(a, b)}} for a in range(6) for b in range(6)]
    write_rows(tmp_path / "digits.jsonl", rows)
    down = tiny(tmp_path, task=None, dataset=str(tmp_path / "digits.jsonl"), verifier="test.trainer_down")
    trainer.prompts = prompt_source(down)
    metrics = train_step(trainer, 1)
    assert metrics["scoring_failures"] == metrics["samples"] == 128 and metrics["trained_samples"] == 0
    assert all(torch.equal(a, b) for a, b in zip(weights, trainer.model.parameters(), strict=True))
    assert [float(state["step"]) for state in trainer.optimizer.state.values()] == adam_steps
    assert "loss" not in metrics


def test_gradient_clipping_and_warmup(tmp_path: Path) -> None:
    trainer, _ = make_trainer(tiny(tmp_path, max_grad_norm=0.001, warmup_steps=3, learning_rate=0.003))
    rates = []
    for step in range(3):
        metrics = train_step(trainer, step)
        rates.append(metrics["lr"])
        clipped = torch.norm(
            torch.stack([p.grad.norm() for p in trainer.model.parameters() if p.grad is not None])
        )
        assert metrics["grad_norm"] > 0.001 and float(clipped) <= 0.001 * 1.0001
    assert rates == pytest.approx([0.001, 0.002, 0.003])


# -- prompts from environments and datasets; scoring through a service ---------------------------------


def test_prompts_from_a_puzzle_environment(tmp_path: Path) -> None:
    alphabet = "".join(chr(c) for c in range(32, 127)) + "\n"
    config = tiny(
        tmp_path,
        task="puzzle.mix",
        task_config=None,
        steps=1,
        prompts_per_step=2,
        group_size=2,
        tokenizer_alphabet=alphabet,
    )
    trainer, _ = make_trainer(config)
    metrics = train_step(trainer, 0)
    groups = metrics.pop("_groups")
    assert all(g.prompt.verifier.startswith("puzzle.") for g in groups)
    assert metrics["samples"] == 4 and metrics["scoring_failures"] == 0


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_prompts_from_a_dataset_with_references(tmp_path: Path, suffix: str) -> None:
    rows = [
        {
            "question": [{"role": "user", "content": f"{a} {b}"}],
            "gold": {"answer": max(a, b)},
            "verifier": "demo.max_digit",
        }
        for a in range(6)
        for b in range(6)
    ]
    data = tmp_path / f"rows{suffix}"
    write_rows(data, rows)
    config = tiny(tmp_path, task=None, dataset=str(data), prompt_field="question", reference_field="gold")
    metrics = run(config)
    assert len(metrics) == 2 and metrics[0]["samples"] == 128 and metrics[0]["scoring_failures"] == 0


def test_scoring_through_a_running_service(tmp_path: Path, live_server: str) -> None:
    local = run(tiny(tmp_path / "local", steps=1))
    remote = run(tiny(tmp_path / "remote", steps=1, server=live_server))
    assert remote[0]["scoring_failures"] == 0
    assert remote[0]["reward_mean"] == local[0]["reward_mean"]  # same samples, same verdicts over HTTP


# -- checkpoints and resume ----------------------------------------------------------------------------


def test_resume_gives_the_same_result_as_an_uninterrupted_run(tmp_path: Path) -> None:
    options = {"steps": 4, "save_every": 2, "num_iterations": 2, "beta": 0.05, "learning_rate": 0.003}
    straight = tiny(tmp_path / "straight", **options)
    straight_metrics = run(straight)

    split = tiny(tmp_path / "split", **{**options, "steps": 2})
    run(split)
    resumed = tiny(tmp_path / "split", **options, resume="latest")
    resumed_metrics = run(resumed)

    def steady(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in record.items() if k not in TIMING_KEYS} for record in records]

    assert steady(resumed_metrics) == steady(straight_metrics)
    a = torch.load(Path(straight.output_dir) / "checkpoints/step-0000004/trainer_state.pt", weights_only=True)
    b = torch.load(Path(resumed.output_dir) / "checkpoints/step-0000004/trainer_state.pt", weights_only=True)
    assert a["step"] == b["step"] == 4
    weights_a = load_file(Path(straight.output_dir) / "checkpoints/step-0000004/model/model.safetensors")
    weights_b = load_file(Path(resumed.output_dir) / "checkpoints/step-0000004/model/model.safetensors")
    assert weights_a.keys() == weights_b.keys()
    assert all(torch.equal(weights_a[key], weights_b[key]) for key in weights_a)


def test_resume_from_a_named_checkpoint_and_checkpoint_rotation(tmp_path: Path) -> None:
    config = tiny(tmp_path, steps=3, save_every=1, keep_checkpoints=2)
    run(config)
    kept = sorted(p.name for p in (Path(config.output_dir) / "checkpoints").iterdir())
    assert kept == ["step-0000002", "step-0000003"]
    resumed = tiny(tmp_path, steps=4, resume=str(Path(config.output_dir) / "checkpoints" / "step-0000002"))
    assert [m["step"] for m in run(resumed)] == [1, 2, 3, 4]
    with pytest.raises(ConfigError, match="not a checkpoint"):
        make_trainer(tiny(tmp_path, resume=str(tmp_path)))


def test_starting_from_a_model_path_uses_its_weights_tokenizer_and_chat_template(tmp_path: Path) -> None:
    first = tiny(tmp_path / "first", steps=1)
    run(first)
    saved = Path(first.output_dir) / "checkpoints" / "step-0000001" / "model"
    config = tiny(tmp_path / "second", model=str(saved), model_init=None, tokenizer_alphabet=None)
    trainer, start = make_trainer(config)
    assert start == 0  # a new run from those weights, not a resume
    weights = load_file(saved / "model.safetensors")
    for name, parameter in trainer.model.named_parameters():
        if name in weights:
            assert torch.equal(parameter, weights[name])
    assert (
        trainer.tokenizer.apply_chat_template(
            [{"role": "user", "content": "3 5"}], add_generation_prompt=True, tokenize=False
        )
        == "<|user|>3 5<|end|><|assistant|>"
    )
    assert train_step(trainer, 0)["samples"] == 128


# -- configuration and the CLI -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"model": "some/path"}, "exactly one of model"),
        ({"task": None}, "exactly one of task"),
        ({"learning_rate": -1}, "learning_rate"),
        ({"loss_aggregation": "sum"}, "loss_aggregation"),
        ({"no_such_key": 1}, "no_such_key"),
    ],
)
def test_bad_configs_name_the_key(tmp_path: Path, overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        tiny(tmp_path, **overrides)


def test_device_selection() -> None:
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert choose_device("auto").type == expected and choose_device("cpu").type == "cpu"
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="CUDA is not available"):
            choose_device("cuda")


def test_unknown_task_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown environment"):
        make_trainer(tiny(tmp_path, task="demo.nothing"))


def test_cli_train_with_flags_overriding_the_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cli"
    code = main(
        [
            "train",
            "--config",
            str(TINY),
            "--output-dir",
            str(out),
            "--steps",
            "2",
            "--task-config",
            "{count: 3, high: 5}",
            "--progress",
            "true",
        ]
    )
    assert code == 0
    captured = capsys.readouterr()
    assert "proctor train" in captured.err and "2/2" in captured.err  # the progress bar
    summary = json.loads(captured.out.strip().splitlines()[-1])
    assert summary["step"] == 2 and summary["output_dir"] == str(out)
    saved = json.loads((out / "checkpoints" / "step-0000002" / "train_config.json").read_text())
    assert saved["task_config"] == {"count": 3, "high": 5} and saved["steps"] == 2


def test_cli_reports_a_bad_config_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--config", str(TINY), "--steps", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("proctor: invalid config key steps") and "\n" not in err
    assert main(["train", "--config", str(tmp_path / "missing.yaml")]) == 2
    assert "cannot read config" in capsys.readouterr().err
    out = ["--output-dir", str(tmp_path / "out")]
    assert main(["train", "--config", str(TINY), *out, "--model-init", "{model_type: no_such_model}"]) == 2
    assert capsys.readouterr().err.startswith("proctor: model_init: ")
    missing = str(tmp_path / "no-model")
    code = main(["train", "--config", str(TINY), *out, "--model", missing, "--model-init", "null"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("proctor: ") and missing in err and "\n" not in err
