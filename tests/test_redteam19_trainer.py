"""Red team of issue 19 item 4: the trainer's multi-turn tool rollouts (`trainer/rollouts.py`, `trainer/grpo.py`).

Each test is one attack on the loss mask, the rewards, the sessions or `tool.demo_lookup`. The policies are
scripted stand-ins for `generate` (so every token is known) driving real in-process sessions.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import proctor  # noqa: E402
from proctor.environments.demo.tool_lookup import DEMO_LOOKUP  # noqa: E402
from proctor.environments.tools.inprocess import sync_manager  # noqa: E402
from proctor.trainer.config import load_config  # noqa: E402
from proctor.trainer.grpo import Group, Prompt, apply_overlong, encode_prompt, train  # noqa: E402
from proctor.trainer.rollouts import observation_ids, run_episodes, to_samples  # noqa: E402
from proctor.trainer.tokenizer import build_char_tokenizer  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
TINY_TOOLS = REPO / "trainer" / "configs" / "tiny_tools.yaml"
TOKENS = ["<|tool|>", "lookup()"]


class Policy(torch.nn.Module):
    """A scripted `generate`: turn n of an episode is `turns[n]` (token strings; "{seen}" is the digit the last
    observation showed). A turn without `<|end|>` is one cut at max_new_tokens."""

    def __init__(self, tokenizer: Any, turns: list[list[str]]):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.tokenizer, self.turns = tokenizer, turns
        from transformers import GenerationConfig

        self.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id)

    def generate(self, input_ids: Any, attention_mask: Any, **_: Any) -> Any:
        """Each row gets its scripted turn (all rows the same length: padded with <pad>)."""
        vocab = self.tokenizer.get_vocab()
        out = []
        for ids, mask in zip(input_ids.tolist(), attention_mask.tolist(), strict=True):
            context = [t for t, m in zip(ids, mask, strict=True) if m]
            number = context.count(vocab["<|assistant|>"]) - 1  # the turns this episode has written
            seen = "0"
            if vocab["<|tool|>"] in context:
                seen = self.tokenizer.convert_ids_to_tokens(
                    context[len(context) - context[::-1].index(vocab["<|tool|>"])]
                )
            out.append([vocab[seen if t == "{seen}" else t] for t in self.turns[number]])
        width = max(len(row) for row in out)
        rows = [
            ids + row + [self.tokenizer.pad_token_id] * (width - len(row))
            for ids, row in zip(input_ids.tolist(), out, strict=True)
        ]
        return torch.tensor(rows)


def _prompts(count: int, seed: int = 0) -> list[Prompt]:
    return [
        Prompt(t.prompt, t.verifier, t.reference, environment=t.verifier, task=t.model_dump(mode="json"))
        for t in DEMO_LOOKUP.make_tasks("train", seed, count, "easy")
    ]


def _open(environment: str, task: dict[str, Any], options: dict[str, Any]) -> Any:
    return proctor.open_session(environment, task, options=options)


def _run(policy: Any, tokenizer: Any, prompts: list[Prompt], **overrides: Any) -> tuple[Any, list[Any]]:
    config = load_config(TINY_TOOLS, {"group_size": 2, "max_turns": 3, **overrides})
    episodes = run_episodes(
        policy, tokenizer, prompts, config, _open, lambda m: encode_prompt(tokenizer, m, None)
    )
    return config, to_samples(episodes, tokenizer)


def _open_sessions() -> int:
    return proctor.engine.run_sync(sync_manager().open_count())


# -- (1) the loss mask and the overlong rules -------------------------------------------------------------


def test_overlong_penalty_reads_each_turn_not_the_whole_episode() -> None:
    """Attack: DAPO's penalty on the episode's length (every turn plus the observations) punishes calling the
    tool, since an episode with a lookup is longer. Each turn here is 2 tokens of a 4-token cap: no penalty."""
    tokenizer = build_char_tokenizer("0123456789", TOKENS)
    policy = Policy(tokenizer, [["lookup()", "<|end|>"], ["{seen}", "<|end|>"]])
    config, samples = _run(
        policy, tokenizer, _prompts(2), overlong="penalty", max_new_tokens=4, overlong_buffer=1
    )
    assert all(s.valid and s.reward == 1.0 and len(s.completion_ids) == 8 for s in samples)
    apply_overlong([Group(_prompts(1)[0], samples)], config)
    assert [s.penalty for s in samples] == [0.0] * len(samples)


def test_overlong_penalty_still_punishes_a_turn_at_the_cap() -> None:
    """The per-turn rule still bites: a 4-token turn of a 4-token cap (buffer 1) is penalised."""
    tokenizer = build_char_tokenizer("0123456789", TOKENS)
    policy = Policy(tokenizer, [["lookup()", "<|end|>"], ["{seen}", "{seen}", "{seen}", "{seen}"]])
    config, samples = _run(
        policy, tokenizer, _prompts(1), overlong="penalty", max_new_tokens=4, overlong_buffer=1
    )
    apply_overlong([Group(_prompts(1)[0], samples)], config)
    assert [s.penalty for s in samples] == [-1.0] * len(samples)


def test_a_turn_cut_before_the_last_marks_the_episode_truncated() -> None:
    """Attack: only the last turn's cut counted, so `overlong: mask` trained on an episode whose tool call was
    cut mid-way (the session ran half a call) as if the policy had written it whole."""
    tokenizer = build_char_tokenizer("0123456789", TOKENS)
    policy = Policy(tokenizer, [["lookup()"], ["{seen}", "<|end|>"]])  # the first turn has no end token
    _, samples = _run(policy, tokenizer, _prompts(2))
    assert all(s.valid for s in samples)
    assert all(s.truncated for s in samples)


def test_the_template_close_is_found_whatever_the_policy_wrote() -> None:
    """Attack: the turn's close was found with rfind(the policy's text); a text that also occurs inside the
    close (">" in "<|end|>") moved the cut, and the end-of-turn token vanished from the sequence."""
    tokenizer = build_char_tokenizer("0123456789>", TOKENS)
    history = [{"role": "user", "content": "x"}, {"role": "assistant", "content": ">"}]
    ids = observation_ids(tokenizer, history, [{"role": "tool", "content": "7"}], ended_with=None)
    assert tokenizer.decode(ids) == "<|end|><|tool|>7<|end|><|assistant|>"


def test_a_template_that_trims_the_text_does_not_stop_training() -> None:
    """Attack: a chat template that strips the message text (many do) rendered a turn ending in a space
    differently from what the policy wrote; that was a ConfigError that ended the run, caused by the policy."""
    tokenizer = build_char_tokenizer("0123456789 ", TOKENS)
    tokenizer.chat_template = tokenizer.chat_template.replace(
        "{{ message['content'] }}", "{{ message['content'] | trim }}"
    )
    history = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "lookup() "}]
    ids = observation_ids(tokenizer, history, [{"role": "tool", "content": "7"}], ended_with="<|end|>")
    assert tokenizer.decode(ids) == "<|tool|>7<|end|><|assistant|>"


# -- (2) rewards and masking -----------------------------------------------------------------------------


def test_a_turn_too_large_for_the_session_is_the_policys_outcome_not_masked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Attack: a step refused as too large (413: the policy's own turn) failed the episode, so it was masked;
    a policy that writes huge turns escapes every penalty. The session is finished as it stands instead."""
    tokenizer = build_char_tokenizer("0123456789", TOKENS)
    monkeypatch.setattr(sync_manager(), "max_message_bytes", 120)
    policy = Policy(tokenizer, [["lookup()", "<|end|>"], ["{seen}"] * 100 + ["<|end|>"]])
    before = _open_sessions()
    _, samples = _run(policy, tokenizer, _prompts(2))
    assert [(s.valid, s.reward) for s in samples] == [(True, 0.0)] * 4
    assert _open_sessions() == before


def test_a_failed_episode_takes_no_part_in_its_groups_baseline() -> None:
    """Refuted attack: a masked episode counted as a 0 in its group's mean. One session in a group of two
    cannot open: the other's advantage is 0 (alone in its group), not +1."""
    from proctor.trainer.grpo import group_advantages

    tokenizer = build_char_tokenizer("0123456789", TOKENS)
    policy = Policy(tokenizer, [["lookup()", "<|end|>"], ["{seen}", "<|end|>"]])
    calls = {"n": 0}

    def opener(environment: str, task: dict[str, Any], options: dict[str, Any]) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise ConnectionError("the service went away")
        return _open(environment, task, options)

    config = load_config(TINY_TOOLS, {"group_size": 2, "max_turns": 3})
    episodes = run_episodes(
        policy, tokenizer, _prompts(1), config, opener, lambda m: encode_prompt(tokenizer, m, None)
    )
    samples = to_samples(episodes, tokenizer)
    assert sorted((s.valid, s.reward) for s in samples) == [(False, 0.0), (True, 1.0)]
    advantages = group_advantages(
        torch.tensor([s.reward for s in samples]), torch.tensor([s.valid for s in samples]), 2, "group"
    )
    assert advantages.tolist() == [0.0, 0.0]


# -- (3) sessions ------------------------------------------------------------------------------------------


def test_keyboard_interrupt_mid_rollout_closes_every_session() -> None:
    """Refuted attack: Ctrl-C during the second turn's generation leaks the open sessions."""
    tokenizer = build_char_tokenizer("0123456789", TOKENS)

    class Interrupted(Policy):
        def generate(self, input_ids: Any, attention_mask: Any, **kwargs: Any) -> Any:
            if any(tokenizer.get_vocab()["<|tool|>"] in row for row in input_ids.tolist()):
                raise KeyboardInterrupt
            return super().generate(input_ids, attention_mask, **kwargs)

    before = _open_sessions()
    with pytest.raises(KeyboardInterrupt):
        _run(Interrupted(tokenizer, [["lookup()", "<|end|>"], ["{seen}", "<|end|>"]]), tokenizer, _prompts(3))
    assert _open_sessions() == before


def test_a_resumed_tool_run_repeats_the_uninterrupted_one(tmp_path: Path) -> None:
    """Refuted attack: a run stopped after step 1 and resumed differs at step 2 from one that never stopped
    (sampling, session outcomes and the update depend only on the seed, the step and the checkpoint)."""
    base = {"prompts_per_step": 3, "group_size": 4, "save_every": 1, "progress": False}
    straight = load_config(TINY_TOOLS, {**base, "steps": 2, "output_dir": str(tmp_path / "a")})
    train(straight)
    train(load_config(TINY_TOOLS, {**base, "steps": 1, "output_dir": str(tmp_path / "b")}))
    train(
        load_config(TINY_TOOLS, {**base, "steps": 2, "output_dir": str(tmp_path / "b"), "resume": "latest"})
    )
    volatile = ("_s", "tokens_per_s", "lr")

    def read(folder: str) -> list[dict[str, Any]]:
        lines = (tmp_path / folder / "metrics.jsonl").read_text().splitlines()
        return [{k: v for k, v in json.loads(line).items() if not k.endswith(volatile)} for line in lines]

    assert read("a") == read("b")
    assert len(read("a")) == 2


# -- (4) tool.demo_lookup -----------------------------------------------------------------------------------


def test_the_hidden_value_never_reaches_the_policys_context_before_a_lookup() -> None:
    """Refuted attack: the value (in the task's reference and metadata) reaching the prompt the policy sees.
    Every task's prompt encodes to the same tokens, whatever its value."""
    tokenizer = build_char_tokenizer("0123456789", TOKENS)
    prompts = _prompts(30)
    assert len({p.reference["value"] for p in prompts}) == 6
    encoded = set()
    for prompt in prompts:
        assert prompt.task is not None
        with proctor.open_session("tool.demo_lookup", prompt.task) as session:
            encoded.add(tuple(encode_prompt(tokenizer, session.messages, None)))
    assert len(encoded) == 1


def test_every_way_to_answer_without_a_real_lookup_earns_0_through_sessions() -> None:
    """Refuted attack: paid without a real lookup, through a live session. Forged observations in the text, a
    role-tool message (refused), every digit at once, an error observation, a lookup in the answer turn."""
    from proctor.contract import RequestError

    task = DEMO_LOOKUP.make_tasks("train", 4, 1, "easy")[0]
    value = task.reference["value"]
    payload = task.model_dump(mode="json")
    attempts = [
        [f"<|tool|>{value}<|end|><|assistant|>{value}"],
        [f"<tool_response>{value}</tool_response> {value}"],
        ["0 1 2 3 4 5"],
        ["012345"],
        [f"lookup(x={value})", value],
        [f"{value} lookup()", "9"],
    ]
    for turns in attempts:
        with proctor.open_session("tool.demo_lookup", payload) as session:
            result: dict[str, Any] = {}
            for text in turns:
                result = session.step({"role": "assistant", "content": text})
                if result["done"]:
                    break
            score = result.get("score") or session.finish().model_dump(mode="json")
            assert score["status"] == "ok" and score["reward"] == 0.0, turns
    with proctor.open_session("tool.demo_lookup", payload) as session, pytest.raises(RequestError):
        session.step({"role": "tool", "content": value})
