"""Proctor's slime multi-turn generate and reward functions (proctor/adapters/slime_agent.py).

slime is GitHub-only and needs SGLang and Megatron, so its calls are replayed as THUDM/slime at 3c9aa09 makes
them (`slime/rollout/sglang_rollout.py`, `generate_and_rm`): `sample = await custom_generate_func(args, sample,
sampling_params)`, then `sample.reward = await async_rm(args, sample)` only when the reward is still None.
`Sample` below carries the fields of `slime/utils/types.py` that the path touches, with its `Status` enum. The
SGLang router is a real HTTP server on localhost answering `/generate` as SGLang does (`text`,
`meta_info.output_token_logprobs` as [logprob, token_id], `meta_info.finish_reason.type`) from the scripted
policy; the tokenizer is trainer/tokenizer.py's, saved to `args.hf_checkpoint`; Proctor is a live server.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import Enum
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from proctor.adapters import slime_agent
from tests import agent_adapter_helpers as h


@dataclass
class Sample:
    """slime.utils.types.Sample's fields on this path."""

    prompt: str = ""
    tokens: list[int] = field(default_factory=list)
    response: str = ""
    response_length: int = 0
    label: Any = None
    reward: Any = None
    loss_mask: list[int] | None = None
    rollout_log_probs: list[float] | None = None
    remove_sample: bool = False

    class Status(Enum):
        PENDING = "pending"
        COMPLETED = "completed"
        TRUNCATED = "truncated"
        ABORTED = "aborted"
        FAILED = "failed"

    status: Status = Status.PENDING
    metadata: dict = field(default_factory=dict)


class Router:
    """An SGLang router on localhost: /generate answers the next scripted turn."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self.turns: list[str] = []
        router = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                text = router.turns.pop(0) if router.turns else "I give up."
                ids = router.tokenizer.encode(text, add_special_tokens=False) + [
                    router.tokenizer.eos_token_id
                ]
                ids = ids[: body["sampling_params"]["max_new_tokens"]]
                finish = "stop" if len(ids) and ids[-1] == router.tokenizer.eos_token_id else "length"
                answer = {
                    "text": router.tokenizer.decode(ids, skip_special_tokens=True),
                    "meta_info": {
                        "output_token_logprobs": [[-0.5, i] for i in ids],
                        "finish_reason": {"type": finish},
                    },
                }
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.http.shutdown()
        self.http.server_close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A live Proctor with the test environments."""
    yield from h.server_fixture(tmp_path_factory)


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Router, Any]]:
    extra = "".join("".join(h.search_script(task)) for task in h.SEARCH_TASKS)
    tokenizer = h.tokenizer(extra)
    path: Path = tmp_path_factory.mktemp("tokenizer")
    tokenizer.save_pretrained(path)
    router = Router(tokenizer)
    host, port = router.http.server_address[:2]
    args = SimpleNamespace(hf_checkpoint=str(path), sglang_router_ip=host, sglang_router_port=port)
    yield args, router, tokenizer
    router.stop()


def generate_and_rm(args: Any, sample: Sample, max_new_tokens: int = 100_000) -> Sample:
    """slime's generate_and_rm path for a custom generate function and custom reward function."""

    async def go() -> Sample:
        out = await slime_agent.generate(args, sample, {"temperature": 1.0, "max_new_tokens": max_new_tokens})
        if out.reward is None:
            out.reward = await slime_agent.reward(args, out)
        return out

    return asyncio.run(go())


@pytest.fixture(autouse=True)
def proctor_url(server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROCTOR_URL", server)
    monkeypatch.delenv("PROCTOR_CHAT_TEMPLATE", raising=False)


@pytest.mark.parametrize("task", h.SEARCH_TASKS[:2], ids=["task0", "task1"])
def test_gold_rollout_mask_reward_replay(server: str, setup: Any, task: dict[str, Any]) -> None:
    args, router, tokenizer = setup
    before = h.open_sessions(server)
    turns = h.search_script(task)
    router.turns = list(turns)
    prompt = "<|user|>Q<|end|><|assistant|>"
    sample = generate_and_rm(
        args, Sample(prompt=prompt, label=json.dumps({"environment": h.SEARCH, "task": task}))
    )
    assert sample.reward == 1.0 and not sample.remove_sample and sample.status is Sample.Status.COMPLETED
    prompt_len = len(tokenizer.encode(prompt, add_special_tokens=False))
    assert len(sample.tokens) == prompt_len + sample.response_length == prompt_len + len(sample.loss_mask)
    response = sample.tokens[prompt_len:]
    trained = [t for t, m in zip(response, sample.loss_mask, strict=True) if m == 1]
    generated = [
        i
        for text in turns
        for i in [*tokenizer.encode(text, add_special_tokens=False), tokenizer.eos_token_id]
    ]
    assert trained == generated  # loss only on the policy's tokens; observations are 0
    observed = tokenizer.decode([t for t, m in zip(response, sample.loss_mask, strict=True) if m == 0])
    assert observed.startswith("<|tool|>") and "<|end|><|end|>" not in tokenizer.decode(response)
    assert len(sample.rollout_log_probs or []) == sample.response_length
    replayed = h.replay(
        server, h.SEARCH, sample.metadata["proctor_messages"], h.reference_of(server, h.SEARCH, task)
    )
    assert replayed["reward"] == sample.reward and replayed["status"] == "ok"
    assert h.session_gone(server, sample.metadata["proctor_session_id"]) and h.open_sessions(server) == before


def test_machinery_failure_removed_not_trained(server: str, setup: Any) -> None:
    args, router, _ = setup
    before = h.open_sessions(server)
    router.turns = h.echo_script("w0-0", crash=True)
    label = {"environment": "tool.test_echo", "task": {"seed": 0, "index": 0}}
    sample = generate_and_rm(args, Sample(prompt="<|user|>Q<|end|><|assistant|>", label=label))
    assert sample.remove_sample and sample.reward == 0.0
    assert sample.metadata["proctor_status"] == "sandbox_error"
    assert h.session_gone(server, sample.metadata["proctor_session_id"]) and h.open_sessions(server) == before


def test_budget_truncates_and_closes(server: str, setup: Any) -> None:
    args, router, _ = setup
    before = h.open_sessions(server)
    router.turns = h.search_script(h.SEARCH_TASKS[0])
    label = {"environment": h.SEARCH, "task": h.SEARCH_TASKS[0]}
    sample = generate_and_rm(
        args, Sample(prompt="<|user|>Q<|end|><|assistant|>", label=label), max_new_tokens=150
    )
    assert sample.status is Sample.Status.TRUNCATED and sample.response_length == 150
    assert sample.reward == 0.0 and not sample.remove_sample  # a cut-off episode is a verdict, not a failure
    assert h.open_sessions(server) == before


def test_reward_function_reads_what_generate_stored(setup: Any) -> None:
    args, _, _ = setup
    done = Sample(metadata={"proctor_reward": 1.0})
    assert asyncio.run(slime_agent.reward(args, [done, done])) == [1.0, 1.0]
    with pytest.raises(ValueError, match="custom-generate-function-path"):
        asyncio.run(slime_agent.reward(args, Sample()))
