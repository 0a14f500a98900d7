"""Session steps per second through each agent adapter, against the bare HTTP client on the same sessions.

Run with `.venv/bin/python bench/agent_adapters.py` (about a minute; `--tasks N`, `--rounds R`, `--out FILE`).
One Proctor server (`python -m proctor.api`, test environments loaded) on this machine; every path rolls out
the same `tool.search_qa` easy tasks with the same scripted policy (each task's gold transcript, its
assistant turns written as Hermes text), one episode at a time:

- bare: `Client.open_session`, `step` per turn, `close` (no tokenizer, no rendering); and the same with
  `AsyncClient` on the event loop the async adapters share;
- verl: `ProctorAgentLoop.run` in verl 0.9.1's own base class (dependencies it cannot import stand in, as in
  tests/test_agent_adapters_verl.py), scripted `server_manager`, the character tokenizer of trainer/tokenizer.py;
- OpenRLHF: `AgentInstance` under the replay of openrlhf 0.11.2's `MultiTurnAgentExecutor.execute`;
- TRL: the `environment_factory` class, its generated tool methods, and `session_reward`;
- slime: `generate` against a localhost SGLang-style router, then `reward`.

A step is one assistant turn sent to the session. Each round times every path over all tasks (paths in a
rotated order); the table gives the median over rounds of steps / wall seconds, and its ratio to bare. The
adapters do more than bare per step (tokenizing, rendering the chat template, building the trainer's output),
and the scripted "model" answers at once, so the ratio is the adapter's own overhead at its largest.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import free_port, git_commit, start_server  # noqa: E402
from tests import agent_adapter_helpers as h  # noqa: E402

h.stub_verl_dependencies()

from proctor.adapters import slime_agent, trl_env  # noqa: E402
from proctor.client import AsyncClient, Client  # noqa: E402
from tests import test_agent_adapters_openrlhf as orl  # noqa: E402
from tests import test_agent_adapters_slime as sl  # noqa: E402
from tests import test_agent_adapters_trl as trl_test  # noqa: E402
from tests import test_agent_adapters_verl as verl_test  # noqa: E402

LOOP = (
    asyncio.new_event_loop()
)  # one loop for every async path, as a trainer keeps one (and its client pools)
BARE: dict[str, Client] = {}


def bare(url: str, task: dict[str, Any], turns: list[str], tokenizer: Any) -> int:
    """The bare HTTP client (one kept for the run): open, one step per turn until done, close."""
    client = BARE.setdefault(url, Client(url))
    session = client.open_session(h.SEARCH, task)
    steps = 0
    for text in turns:
        steps += 1
        if session.step({"role": "assistant", "content": text})["done"]:
            break
    session.close()
    return steps


ABARE: dict[str, Any] = {}


def bare_async(url: str, task: dict[str, Any], turns: list[str], tokenizer: Any) -> int:
    """The bare async client (one kept for the run, on the shared loop): the same requests as bare."""

    async def episode() -> int:
        if url not in ABARE:
            ABARE[url] = AsyncClient(url)
        session = await ABARE[url].open_session(h.SEARCH, task)
        steps = 0
        for text in turns:
            steps += 1
            if (await session.step({"role": "assistant", "content": text}))["done"]:
                break
        await session.close()
        return steps

    return LOOP.run_until_complete(episode())


def verl(url: str, task: dict[str, Any], turns: list[str], tokenizer: Any) -> int:
    loop = verl_test.make_loop(url, tokenizer, turns)
    extra = {"proctor": {"environment": h.SEARCH, "task": task}}
    output = LOOP.run_until_complete(loop.run({"temperature": 1.0}, raw_prompt=[], extra_info=extra))
    assert output.reward_score == 1.0, output.extra_fields
    return len(loop.server_manager.calls)


def openrlhf(url: str, task: dict[str, Any], turns: list[str], tokenizer: Any) -> int:
    engine = orl.Engine(tokenizer, turns)
    label = {"environment": h.SEARCH, "task": task}
    result = LOOP.run_until_complete(
        orl.execute("<|im_start|>user\nQ<|im_end|>\n", label, 1_000_000, tokenizer, engine)
    )
    assert result["reward"] == 1.0
    return len(result["action_ranges"])


def trl(url: str, task: dict[str, Any], turns: list[str], tokenizer: Any) -> int:
    env_cls = trl_env.environment_factory(h.SEARCH, server_url=url, tools=TOOLS[url])
    env, completion = trl_test.run_rollout(env_cls, task, h.SEARCH, turns)
    assert trl_env.session_reward()(completions=[completion], environments=[env]) == [1.0]
    return len(turns)


def slime(url: str, task: dict[str, Any], turns: list[str], tokenizer: Any) -> int:
    args, router = SLIME
    router.turns = list(turns)
    sample = sl.Sample(prompt="<|user|>Q<|end|><|assistant|>", label={"environment": h.SEARCH, "task": task})
    sample = LOOP.run_until_complete(slime_agent.generate(args, sample, {"max_new_tokens": 1_000_000}))
    if sample.reward is None:  # slime's generate_and_rm: the reward function only for a sample without one
        sample.reward = LOOP.run_until_complete(slime_agent.reward(args, sample))
    assert sample.reward == 1.0
    return len(turns)


PATHS: dict[str, Callable[[str, dict[str, Any], list[str], Any], int]] = {
    "bare HTTP client": bare,
    "bare async client": bare_async,
    "verl agent loop": verl,
    "OpenRLHF agent": openrlhf,
    "TRL environment_factory": trl,
    "slime generate": slime,
}
TOOLS: dict[str, Any] = {}
SLIME: tuple[Any, Any] = (None, None)


def main() -> None:
    """Measure and write the table."""
    global SLIME
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default="/tmp/h/results_adapters.md")
    options = parser.parse_args()
    tasks = [{"split": "train", "seed": 0, "index": i, "level": "easy"} for i in range(options.tasks)]
    scripts = [h.search_script(task) for task in tasks]
    tokenizer = h.tokenizer("".join("".join(s) for s in scripts))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROCTOR_")}
    env.update(PYTHONPATH=str(ROOT), PROCTOR_PLUGINS=h.PLUGINS, PROCTOR_LOG_LEVEL="warning")
    server = start_server(port, env)
    url = f"http://127.0.0.1:{port}"
    os.environ["PROCTOR_URL"] = url
    os.environ["PROCTOR_CHAT_TEMPLATE"] = "chatml"
    import tempfile

    tokenizer_dir = tempfile.mkdtemp(prefix="proctor-bench-tok-")
    tokenizer.save_pretrained(tokenizer_dir)
    router = sl.Router(tokenizer)
    host, rport = router.http.server_address[:2]
    from types import SimpleNamespace

    SLIME = (
        SimpleNamespace(hf_checkpoint=tokenizer_dir, sglang_router_ip=host, sglang_router_port=rport),
        router,
    )
    try:
        TOOLS[url] = trl_env.environment_tools(h.SEARCH, url)
        for path in PATHS.values():  # warm every path once (imports, index, connection pools)
            path(url, tasks[0], scripts[0], tokenizer)
        rates: dict[str, list[float]] = {name: [] for name in PATHS}
        names = list(PATHS)
        for round_index in range(options.rounds):
            order = names[round_index % len(names) :] + names[: round_index % len(names)]
            for name in order:
                started = time.perf_counter()
                steps = sum(
                    PATHS[name](url, task, script, tokenizer)
                    for task, script in zip(tasks, scripts, strict=True)
                )
                rates[name].append(steps / (time.perf_counter() - started))
    finally:
        router.stop()
        server.terminate()
        server.wait(timeout=30)
    base = statistics.median(rates["bare HTTP client"])
    steps_per_round = sum(len(s) for s in scripts)
    lines = [
        f"## Agent adapters: session steps per second (commit {git_commit()})",
        "",
        f"`.venv/bin/python bench/agent_adapters.py --tasks {options.tasks} --rounds {options.rounds}` on "
        f"{platform.machine()}, {os.cpu_count()} CPUs (shared), Python {platform.python_version()}; one server, "
        f"one episode at a time; {options.tasks} tool.search_qa easy tasks, gold scripts, {steps_per_round} steps "
        f"per round; median over {options.rounds} rounds.",
        "",
        "| path | steps/s (median) | rounds | ratio to bare |",
        "|---|---:|---|---:|",
    ]
    for name in PATHS:
        median = statistics.median(rates[name])
        spread = ", ".join(f"{r:.0f}" for r in rates[name])
        lines.append(f"| {name} | {median:.0f} | {spread} | {median / base:.2f} |")
    report = "\n".join(lines) + "\n"
    print(report)
    Path(options.out).write_text(report)


if __name__ == "__main__":
    main()
