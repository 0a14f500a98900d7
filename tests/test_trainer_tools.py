"""The trainer through tool sessions: multi-turn rollouts on `tool.demo_lookup`, the masking of observation tokens
and of failed episodes, sessions closed on every path, and the learning proof (`proctor train` with
`trainer/configs/tiny_tools.yaml` against a live Proctor service).

The unit tests drive real in-process sessions with a scripted policy (a stand-in for `generate` that reads its
own context), so every token the trainer lays out is known exactly.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import proctor  # noqa: E402
from proctor.environments.demo.tool_lookup import (  # noqa: E402
    DEMO_LOOKUP,
    PROMPT,
    cheat_transcripts,
    gold_transcript,
    trivial_transcripts,
)
from proctor.environments.tools.inprocess import sync_manager  # noqa: E402
from proctor.trainer.config import ConfigError, load_config  # noqa: E402
from proctor.trainer.grpo import Prompt, collate, encode_prompt, make_trainer, train_step  # noqa: E402
from proctor.trainer.rollouts import observation_ids, run_episodes, to_samples  # noqa: E402
from proctor.trainer.tokenizer import build_char_tokenizer  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
TINY_TOOLS = REPO / "trainer" / "configs" / "tiny_tools.yaml"


# -- the environment ----------------------------------------------------------------------------------------


def test_gold_scores_1_and_every_cheat_and_trivial_policy_0() -> None:
    rng = random.Random(3)
    for level in ("easy", "medium", "hard"):
        for task in DEMO_LOOKUP.make_tasks("train", 5, 4, level):
            assert proctor.score("tool.demo_lookup", gold_transcript(task), task.reference).reward == 1.0
            transcripts = {**cheat_transcripts(task), **trivial_transcripts(task, rng)}
            for note, transcript in transcripts.items():
                score = proctor.score("tool.demo_lookup", transcript, task.reference)
                assert score.status.value == "ok" and score.reward == 0.0, note


def test_a_policy_that_never_calls_the_tool_earns_0_even_guessing_every_value() -> None:
    """The issue's bound is 0.1; guessing is worth nothing at all, not 1 in 10."""
    tasks = DEMO_LOOKUP.make_tasks("train", 0, 20, "easy")
    for task in tasks:
        for digit in "0123456789":
            transcript = [*task.prompt, {"role": "assistant", "content": digit}]
            assert proctor.score("tool.demo_lookup", transcript, task.reference).reward == 0.0


def test_tasks_are_seeded_and_levels_set_the_digits() -> None:
    first = DEMO_LOOKUP.make_tasks("train", 1, 30, "medium")
    assert first == DEMO_LOOKUP.make_tasks("train", 1, 30, "medium")
    assert {len(t.reference["value"]) for t in first} == {2}
    assert len({t.reference["value"] for t in first}) > 10  # a hidden value, not a constant
    assert all(t.prompt == [{"role": "user", "content": PROMPT}] for t in first)  # the prompt tells nothing
    assert {len(t.reference["value"]) for t in DEMO_LOOKUP.make_tasks("test", 1, 5, "hard")} == {4}
    easy = {t.reference["value"] for t in DEMO_LOOKUP.make_tasks("train", 1, 60, "easy")}
    assert easy == set("012345")  # one digit in 0-5, what the tiny model learns


def test_a_live_session_pays_the_lookup_then_the_value() -> None:
    task = DEMO_LOOKUP.make_tasks("train", 2, 1, "medium")[0]
    value = task.reference["value"]
    with proctor.open_session("tool.demo_lookup", task.model_dump(mode="json")) as session:
        first = session.step({"role": "assistant", "content": "lookup()"})
        assert not first["done"] and first["observations"][0]["content"] == value
        last = session.step({"role": "assistant", "content": value})
        assert last["done"] and last["end_reason"] == "answer" and last["score"]["reward"] == 1.0
    with proctor.open_session("tool.demo_lookup", task.model_dump(mode="json")) as session:
        guessed = session.step({"role": "assistant", "content": value})  # right, but never looked up
        assert (
            guessed["done"]
            and guessed["score"]["reward"] == 0.0
            and guessed["score"]["reason"] == "no_lookup"
        )


# -- rollouts with a scripted policy ------------------------------------------------------------------------


TOKENS = ["<|tool|>", "lookup()"]


class ScriptedPolicy(torch.nn.Module):
    """A stand-in for the policy's `generate`: call lookup() first, then answer the digit that follows the
    last `<|tool|>` token of its context (what a perfect policy does), or a fixed `answer` when one is given."""

    def __init__(self, tokenizer: Any, answer: str | None = None):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.tokenizer = tokenizer
        self.answer = answer
        from transformers import GenerationConfig

        self.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id)
        self.contexts: list[list[int]] = []

    def generate(self, input_ids: Any, attention_mask: Any, **_: Any) -> Any:
        """Each row's context (padding dropped) gets the scripted turn."""
        vocab, end = self.tokenizer.get_vocab(), self.tokenizer.eos_token_id
        rows = []
        for ids, mask in zip(input_ids.tolist(), attention_mask.tolist(), strict=True):
            context = [t for t, m in zip(ids, mask, strict=True) if m]
            self.contexts.append(context)
            tool = vocab["<|tool|>"]
            if tool in context:
                seen = context[len(context) - 1 - context[::-1].index(tool) + 1]
                turn = [vocab[self.answer] if self.answer else seen, end]
            else:
                turn = [vocab["lookup()"], end]
            rows.append(ids + turn)
        return torch.tensor(rows)


def _tokenizer() -> Any:
    return build_char_tokenizer("0123456789", TOKENS)


def _prompts(count: int, seed: int = 0) -> list[Prompt]:
    return [
        Prompt(t.prompt, t.verifier, t.reference, environment=t.verifier, task=t.model_dump(mode="json"))
        for t in DEMO_LOOKUP.make_tasks("train", seed, count, "easy")
    ]


def _config(**overrides: Any) -> Any:
    return load_config(TINY_TOOLS, {"group_size": 2, "max_turns": 3, **overrides})


def _run(policy: Any, tokenizer: Any, prompts: list[Prompt], opener: Any, **overrides: Any) -> list[Any]:
    config = _config(**overrides)
    episodes = run_episodes(
        policy, tokenizer, prompts, config, opener, lambda m: encode_prompt(tokenizer, m, None)
    )
    return to_samples(episodes, tokenizer)


def _open(environment: str, task: dict[str, Any], options: dict[str, Any]) -> Any:
    return proctor.open_session(environment, task, options=options)


def test_observation_tokens_are_context_with_mask_0_and_the_policy_tokens_mask_1() -> None:
    tokenizer = _tokenizer()
    vocab = tokenizer.get_vocab()
    prompts = _prompts(3)
    policy = ScriptedPolicy(tokenizer)
    samples = _run(policy, tokenizer, prompts, _open)
    assert len(samples) == 6
    end, tool, assistant = vocab["<|end|>"], vocab["<|tool|>"], vocab["<|assistant|>"]
    for sample, prompt in zip(samples, [p for p in prompts for _ in range(2)], strict=True):
        value = vocab[prompt.reference["value"]]
        assert sample.valid and sample.reward == 1.0 and sample.end_reason == "answer"
        assert (sample.turns, sample.tool_calls) == (2, 1)
        # lookup() <end> | <tool> v <end> <assistant> | v <end>: the observation's four tokens are masked.
        assert sample.completion_ids == [vocab["lookup()"], end, tool, value, end, assistant, value, end]
        assert sample.completion_mask == [1, 1, 0, 0, 0, 0, 1, 1]
        assert sample.prompt_ids == encode_prompt(tokenizer, prompt.messages, None)
    # The second turn was generated from the whole sequence: prompt, first turn and observation.
    second_turn_contexts = [c for c in policy.contexts if tool in c]
    assert second_turn_contexts and all(c[-4:] == [tool, c[-3], end, assistant] for c in second_turn_contexts)
    # collate: the loss mask is the completion mask (observations 0), padded with 0.
    batch = collate(samples, torch.zeros(6), [True] * 6, tokenizer.pad_token_id, torch.device("cpu"))
    assert batch.loss_mask[0].tolist() == [1, 1, 0, 0, 0, 0, 1, 1]
    assert batch.completion_ids[0].tolist() == samples[0].completion_ids


def test_observation_ids_render_the_template_difference() -> None:
    tokenizer = _tokenizer()
    history = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "lookup()"}]
    observation = [{"role": "tool", "content": "7"}]
    ids = observation_ids(tokenizer, history, observation, ended_with="<|end|>")
    assert tokenizer.decode(ids) == "<|tool|>7<|end|><|assistant|>"
    # A turn cut at max_new_tokens did not write the end-of-turn token: the template's close is context.
    cut = observation_ids(tokenizer, history, observation, ended_with=None)
    assert tokenizer.decode(cut) == "<|end|><|tool|>7<|end|><|assistant|>"


def test_a_wrong_answer_is_a_valid_0_not_masked() -> None:
    tokenizer = _tokenizer()
    prompts = [p for p in _prompts(10) if p.reference["value"] != "3"][:2]
    samples = _run(ScriptedPolicy(tokenizer, answer="3"), tokenizer, prompts, _open)
    assert all(s.valid and s.reward == 0.0 and s.end_reason == "answer" for s in samples)


class Counting:
    """Opens real in-process sessions, counts opens and closes, and breaks some on purpose."""

    def __init__(self, fail_open: set[int] = frozenset(), fail_step: set[int] = frozenset()):  # type: ignore[assignment]
        self.fail_open, self.fail_step = fail_open, fail_step
        self.opened = 0
        self.closed: list[int] = []

    def __call__(self, environment: str, task: dict[str, Any], options: dict[str, Any]) -> Any:
        number = self.opened
        self.opened += 1
        if number in self.fail_open:
            raise ConnectionError("the service went away")
        return _Watched(self, number, proctor.open_session(environment, task, options=options))


class _Watched:
    def __init__(self, owner: Counting, number: int, session: Any):
        self.owner, self.number, self.session = owner, number, session
        self.messages = session.messages

    def step(self, message: dict[str, Any]) -> dict[str, Any]:
        if self.number in self.owner.fail_step:
            raise TimeoutError("the step timed out")
        return self.session.step(message)

    def finish(self, message: dict[str, Any] | None = None) -> Any:
        return self.session.finish(message)

    def close(self) -> None:
        self.owner.closed.append(self.number)
        self.session.close()


def test_failed_opens_and_steps_are_masked_and_every_session_is_closed() -> None:
    tokenizer = _tokenizer()
    opener = Counting(fail_open={1}, fail_step={2})
    before = proctor.engine.run_sync(sync_manager().open_count())
    samples = _run(ScriptedPolicy(tokenizer), tokenizer, _prompts(2), opener)
    assert [s.valid for s in samples] == [True, False, False, True]
    assert [s.reward for s in samples] == [1.0, 0.0, 0.0, 1.0]
    assert samples[1].end_reason == samples[2].end_reason == "trainer_error"
    assert sorted(opener.closed) == [0, 2, 3]  # every session that opened, the failed step's too
    assert proctor.engine.run_sync(sync_manager().open_count()) == before


def test_sessions_are_closed_when_generation_raises() -> None:
    tokenizer = _tokenizer()

    class Broken(ScriptedPolicy):
        def generate(self, input_ids: Any, attention_mask: Any, **_: Any) -> Any:
            raise RuntimeError("out of memory")

    opener = Counting()
    with pytest.raises(RuntimeError, match="out of memory"):
        _run(Broken(tokenizer), tokenizer, _prompts(2), opener)
    assert opener.opened == 4 and sorted(opener.closed) == [0, 1, 2, 3]


def test_a_machinery_failure_inside_the_session_is_masked_not_scored_0() -> None:
    """A non-ok session score (the tool's sandbox crashed) masks the sample; the step's update skips it."""
    import importlib

    importlib.import_module("tests.agent_adapter_envs")  # registers tool.test_echo (its crash() tool)
    tokenizer = build_char_tokenizer("0123456789", ["<|tool|>", "crash()"])
    vocab = tokenizer.get_vocab()

    class Crasher(ScriptedPolicy):
        def generate(self, input_ids: Any, attention_mask: Any, **_: Any) -> Any:
            rows = [ids + [vocab["crash()"], tokenizer.eos_token_id] for ids in input_ids.tolist()]
            return torch.tensor(rows)

    tasks = proctor.environments.registry.get_environment("tool.test_echo").tasks("train", 0, 1, None, None)
    prompts = [
        Prompt(t.prompt, t.verifier, t.reference, environment=t.verifier, task=t.model_dump()) for t in tasks
    ]
    samples = _run(Crasher(tokenizer), tokenizer, prompts, _open)
    assert [(s.valid, s.reward, s.end_reason) for s in samples] == [(False, 0.0, "sandbox_error")] * 2


def test_an_unknown_environment_is_a_configuration_error() -> None:
    tokenizer = _tokenizer()
    prompts = [Prompt([{"role": "user", "content": "x"}], "tool.nope", {}, environment="tool.nope", task={})]
    with pytest.raises(ConfigError):
        _run(ScriptedPolicy(tokenizer), tokenizer, prompts, _open)


def test_a_train_step_logs_turns_tool_calls_end_reasons_and_masked_samples(tmp_path: Path) -> None:
    config = load_config(
        TINY_TOOLS, {"steps": 1, "prompts_per_step": 2, "group_size": 4, "output_dir": str(tmp_path)}
    )
    trainer, _ = make_trainer(config)
    metrics = train_step(trainer, 0)
    assert sum(metrics["end_reasons"].values()) == 8
    assert set(metrics["end_reasons"]) <= {"answer", "max_turns", "max_tool_errors", "max_tool_calls"}
    assert 1.0 <= metrics["turns_mean"] <= config.max_turns
    assert metrics["tool_calls_mean"] >= 0.0 and metrics["masked_samples"] == 0
    groups = metrics["_groups"]
    for sample in (s for g in groups for s in g.samples):
        assert sample.completion_mask is not None and len(sample.completion_mask) == len(
            sample.completion_ids
        )
        assert sample.completion_mask[0] == 1  # the episode opens with the policy's own turn


def test_failed_episodes_are_left_out_of_the_update(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Half the sessions cannot open: those samples are masked (not trained on as 0), the rest still train; when
    none can open, the step makes no update at all."""
    config = load_config(
        TINY_TOOLS, {"steps": 1, "prompts_per_step": 2, "group_size": 4, "output_dir": str(tmp_path)}
    )
    trainer, _ = make_trainer(config)
    opener = Counting(fail_open={0, 2, 4, 6})
    monkeypatch.setattr(trainer.scorer, "open_session", opener)
    metrics = train_step(trainer, 0)
    assert metrics["masked_samples"] == 4 and metrics["scoring_failures"] == 4
    assert metrics["end_reasons"]["trainer_error"] == 4
    assert metrics["trained_samples"] == 4
    assert sorted(opener.closed) == [1, 3, 5, 7]

    before = [p.detach().clone() for p in trainer.model.parameters()]
    monkeypatch.setattr(trainer.scorer, "open_session", Counting(fail_open=set(range(8))))
    metrics = train_step(trainer, 1)
    assert metrics["masked_samples"] == 8 and metrics["trained_samples"] == 0 and "loss" not in metrics
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.model.parameters(), strict=True))


# -- the learning proof ----------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_tiny_model_learns_to_call_the_tool_through_a_live_service(tmp_path: Path, live_server: str) -> None:
    out = tmp_path / "out"
    env = {key: value for key, value in os.environ.items() if not key.startswith("PROCTOR_")}
    # Every episode runs through sessions on a real Proctor service over HTTP.
    command = [
        sys.executable,
        "-m",
        "proctor",
        "train",
        "--config",
        str(TINY_TOOLS),
        "--output-dir",
        str(out),
    ]
    command += ["--server", live_server]
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=840)
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    config = load_config(TINY_TOOLS)
    assert len(metrics) == config.steps
    rewards = [record["reward_mean"] for record in metrics]
    # The untrained model almost never calls the tool and answers: its first steps earn next to nothing.
    assert sum(rewards[:5]) / 5 <= 0.1
    # Learned: the mean over the last 20 steps is at least 0.5 (a policy that never calls the tool earns 0).
    assert sum(rewards[-20:]) / 20 >= 0.5
    last = metrics[-20:]
    assert all(record["masked_samples"] == 0 for record in metrics)
    assert sum(record["tool_calls_mean"] for record in last) / 20 >= 0.5
    assert sum(record["end_reasons"].get("answer", 0) for record in last) >= 0.5 * 20 * 128
