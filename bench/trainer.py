"""Trainer benchmark: Proctor's GRPO reference trainer against TRL's GRPOTrainer, step time on the same work.

Run with `.venv/bin/python bench/trainer.py` (add `--no-write` for a trial run). In one run, with one CPU
thread each, it trains the tiny model of trainer/configs/tiny.yaml (a 2-layer Llama, randomly initialised
with the same seed, and the locally built character tokenizer) on demo.max_digit with the same settings:
16 prompts x 8 completions per step, at most 3 new tokens, temperature 1, one update per batch,
group-scaled advantages, the GRPO sequence-mean loss, beta 0, learning rate 1e-3. TRL scores with Proctor's
TRL reward function in-process, so scoring costs the same on both sides. Reported: the median step time
over the measured steps (after warm-up steps), the ratio, and the mean reward of the last steps.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import sys
import tempfile
import time
from typing import Any

from common import ROOT, append_results, git_commit  # bench/common.py: the script's folder is on sys.path

TINY = ROOT / "trainer" / "configs" / "tiny.yaml"


def proctor_steps(steps: int, workdir: str) -> tuple[list[float], list[float]]:
    """Step times (s) and reward means of Proctor's trainer."""
    from proctor.trainer.config import load_config
    from proctor.trainer.grpo import train

    times: list[float] = []
    rewards: list[float] = []

    def record(metrics: dict[str, Any]) -> None:
        times.append(metrics["step_time_s"])
        rewards.append(metrics["reward_mean"])

    train(load_config(TINY, {"steps": steps, "output_dir": workdir}), on_step=record)
    return times, rewards


def trl_steps(steps: int, workdir: str) -> tuple[list[float], list[float]]:
    """Step times (s) and reward means of TRL's GRPOTrainer on the same model, data and settings."""
    import torch
    import transformers
    import trl

    import datasets
    from proctor.adapters.trl import reward_function
    from proctor.environments.registry import get_environment
    from proctor.trainer.config import load_config
    from proctor.trainer.grpo import build_model, load_tokenizer

    config = load_config(TINY, {"output_dir": workdir})
    tokenizer = load_tokenizer(config)
    model = build_model(config, tokenizer, torch.device("cpu"))
    tasks = get_environment(config.task).tasks("train", 0, 2000, None, config.task_config)
    rows = [{"prompt": task.prompt, "answer": task.reference} for task in tasks]
    times: list[float] = []
    started: list[float] = []

    class StepTimer(transformers.TrainerCallback):
        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            started.append(time.perf_counter())

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            times.append(time.perf_counter() - started[-1])

    args = trl.GRPOConfig(
        output_dir=workdir,
        per_device_train_batch_size=config.prompts_per_step * config.group_size,
        num_generations=config.group_size,
        max_completion_length=config.max_new_tokens,
        temperature=config.temperature,
        learning_rate=config.learning_rate,
        warmup_steps=config.warmup_steps,
        lr_scheduler_type="constant_with_warmup",
        max_grad_norm=config.max_grad_norm,
        beta=0.0,
        loss_type="grpo",
        scale_rewards="group",
        max_steps=steps,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        bf16=False,
        seed=config.seed,
        disable_dropout=True,
    )
    trainer = trl.GRPOTrainer(
        model=model,
        reward_funcs=[reward_function("demo.max_digit", in_process=True)],
        args=args,
        train_dataset=datasets.Dataset.from_list(rows),
        processing_class=tokenizer,
        callbacks=[StepTimer()],
    )
    for noisy in (
        transformers.trainer_callback.ProgressCallback,
        transformers.trainer_callback.PrinterCallback,
    ):
        trainer.remove_callback(noisy)  # a dict per step on stdout would bury the report
    trainer.train()
    key = "rewards/proctor_demo_max_digit/mean"
    rewards = [record[key] for record in trainer.state.log_history if key in record]
    return times, rewards


# Qwen2.5-0.5B's public architecture (494M parameters with the tied 151,936-token embedding), built at random.
QWEN_05B = {
    "model_type": "qwen2",
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "max_position_embeddings": 32768,
    "vocab_size": 151936,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
}


def large_run(options: argparse.Namespace, workdir: str) -> tuple[list[dict[str, Any]], int, str]:
    """Metrics of a few steps of the 0.5B model (bfloat16 on a GPU); returns (metrics, parameters, device)."""
    import torch

    from proctor.trainer.config import load_config
    from proctor.trainer.grpo import make_trainer, train_step

    cuda = torch.cuda.is_available()
    config = load_config(
        TINY,
        {
            "model_init": QWEN_05B,
            "dtype": "bfloat16" if cuda else "float32",
            "device": "cuda" if cuda else "cpu",
            "cpu_threads": None,
            "prompts_per_step": options.large_prompts,
            "group_size": options.large_group,
            "max_new_tokens": options.large_tokens,
            "micro_batch_size": 16,
            "learning_rate": 1e-6,
            "output_dir": workdir,
        },
    )
    trainer, _ = make_trainer(config)
    parameters = sum(p.numel() for p in trainer.model.parameters())
    metrics = []
    for step in range(options.large_steps):
        record = train_step(trainer, step)
        record.pop("_groups")
        metrics.append(record)
    return metrics, parameters, torch.cuda.get_device_name() if cuda else "cpu"


def large_report(options: argparse.Namespace) -> str:
    """The 0.5B section: step time and generated tokens per second, median over the steps after the first."""
    with tempfile.TemporaryDirectory() as work:
        metrics, parameters, device = large_run(options, work)
    measured = metrics[1:] or metrics
    step_s = statistics.median(m["step_time_s"] for m in measured)
    tokens = statistics.median(m["tokens_per_s"] for m in measured)
    generate = statistics.median(m["generate_s"] for m in measured)
    update = statistics.median(m["update_s"] for m in measured)
    return f"""## trainer: a 0.5B model, step time and tokens per second ({dt.date.today()}, commit {git_commit()})

Device: {device}. Model: Qwen2.5-0.5B's architecture initialised at random ({parameters / 1e6:.0f}M parameters), {options.large_prompts} prompts x {options.large_group} completions of {options.large_tokens} new tokens per step (a random model rarely stops early, so nearly every completion is full length), Hugging Face `generate`, one update per batch, micro-batches of 16. Median over steps 2-{options.large_steps}. Reproduce: `.venv/bin/python bench/trainer.py --large`.

| step s | generate s | update s | generated tokens/s |
|---:|---:|---:|---:|
| {step_s:.2f} | {generate:.2f} | {update:.2f} | {tokens:.0f} |
"""


def load_average() -> float:
    """The 1-minute load average."""
    return os.getloadavg()[0]


def main() -> None:
    """Run the benchmark; print the report and append it to bench/RESULTS.md unless --no-write."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60, help="steps per trainer (default: 60)")
    parser.add_argument(
        "--warmup", type=int, default=5, help="first steps left out of the median (default: 5)"
    )
    parser.add_argument("--no-write", action="store_true", help="print only; do not append to RESULTS.md")
    parser.add_argument("--large", action="store_true", help="instead, measure the 0.5B model (needs a GPU)")
    parser.add_argument("--allow-cpu", action="store_true", help="with --large: run on the CPU (a smoke run)")
    parser.add_argument("--large-steps", type=int, default=5, help="steps of the 0.5B run (default: 5)")
    parser.add_argument("--large-prompts", type=int, default=16, help="prompts per step (default: 16)")
    parser.add_argument("--large-group", type=int, default=8, help="completions per prompt (default: 8)")
    parser.add_argument(
        "--large-tokens", type=int, default=256, help="new tokens per completion (default: 256)"
    )
    options = parser.parse_args()
    if options.large:
        import torch

        if not torch.cuda.is_available() and not options.allow_cpu:
            parser.error("--large needs a CUDA GPU (add --allow-cpu for a slow smoke run)")
        report = large_report(options)
        print(report)
        if not options.no_write:
            append_results(report)
        return

    import torch
    import transformers
    import trl

    torch.set_num_threads(1)
    load_before = load_average()
    with tempfile.TemporaryDirectory() as work:
        ours, our_rewards = proctor_steps(options.steps, os.path.join(work, "proctor"))
        torch.set_num_threads(1)
        theirs, their_rewards = trl_steps(options.steps, os.path.join(work, "trl"))
    load_after = load_average()
    ours_median = statistics.median(ours[options.warmup :])
    theirs_median = statistics.median(theirs[options.warmup :])
    tail = 10
    report = f"""## trainer: Proctor's GRPO step against TRL's GRPOTrainer ({dt.date.today()}, commit {git_commit()})

Machine: {os.cpu_count()} cores, 1 torch thread per trainer, Python {platform.python_version()}, torch {torch.__version__}, \
transformers {transformers.__version__}, TRL {trl.__version__}; 1-min load average {load_before:.1f} before and \
{load_after:.1f} after. Work: trainer/configs/tiny.yaml (2-layer Llama, hidden 64, random init, character tokenizer) \
on demo.max_digit, 16 prompts x 8 completions per step, at most 3 new tokens, one update per batch, GRPO loss, \
beta 0, lr 1e-3; TRL scores with Proctor's TRL reward function in-process. Median over steps {options.warmup + 1}-\
{options.steps}. No GPU was available for this run. Reproduce: `.venv/bin/python bench/trainer.py`.

| trainer | median step s | steps/s | mean reward, last {tail} of {options.steps} steps |
|---|---:|---:|---:|
| Proctor (`proctor train`) | {ours_median:.4f} | {1 / ours_median:.1f} | {statistics.fmean(our_rewards[-tail:]):.3f} |
| TRL GRPOTrainer | {theirs_median:.4f} | {1 / theirs_median:.1f} | {statistics.fmean(their_rewards[-tail:]):.3f} |

Proctor's step takes **{ours_median / theirs_median:.2f}x** TRL's step time (TRL/Proctor = {theirs_median / ours_median:.2f}).
"""
    print(report)
    if not options.no_write:
        append_results(report)


if __name__ == "__main__":
    sys.exit(main())
