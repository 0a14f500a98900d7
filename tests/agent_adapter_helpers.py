"""Shared by the agent-adapter tests: a server with the test environments, scripted policies, a local tokenizer.

The scripted policy is `tool.search_qa`'s gold transcript (environments/tools/search_qa/environment.py), its
assistant turns written as Hermes text (`<tool_call>{...}</tool_call>`), which is what a model's generation is;
the session reads the calls from the text. No model runs.
"""

from __future__ import annotations

import json
import string
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import ServerProcess, free_port, server_env

PLUGINS = "tests.plugins.slow,tests.agent_adapter_envs"
SEARCH = "tool.search_qa"
SEARCH_TASKS = [{"split": "train", "seed": 0, "index": index, "level": "easy"} for index in range(3)]


def start_proctor(tmp: Path) -> ServerProcess:
    """A real `python -m proctor.api` with the test environments loaded."""
    server = ServerProcess(server_env(free_port(), PROCTOR_PLUGINS=PLUGINS), tmp / "server.log")
    try:
        server.wait_ready()
    except BaseException:
        server.stop()
        raise
    return server


def server_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Body of each test module's module-scoped `server` fixture."""
    server = start_proctor(tmp_path_factory.mktemp("agent-adapters"))
    yield server.base_url
    server.stop()


def hermes(message: dict[str, Any]) -> str:
    """An assistant message as the text a Hermes/Qwen model writes."""
    calls = message.get("tool_calls") or []
    parts = [str(message.get("content") or "")]
    for call in calls:
        function = call["function"]
        body = {"name": function["name"], "arguments": json.loads(function["arguments"])}
        parts.append(f"<tool_call>{json.dumps(body)}</tool_call>")
    return "".join(parts)


def search_script(task: dict[str, Any]) -> list[str]:
    """The gold policy's assistant turns for a search_qa task spec, as text."""
    from proctor.environments.tools.search_qa.environment import SearchQA, gold_transcript

    made = SearchQA().make_tasks(task["split"], task["seed"], task["index"] + 1, task["level"])[-1]
    return [hermes(m) for m in gold_transcript(made) if m["role"] == "assistant"]


def echo_script(answer: str, crash: bool = False) -> list[str]:
    """tool.test_echo's policy: echo the answer (or call crash), then answer."""
    call = {"name": "crash", "arguments": {}} if crash else {"name": "echo", "arguments": {"text": answer}}
    return [f"<tool_call>{json.dumps(call)}</tool_call>", answer]


def tokenizer(extra_text: str = "") -> Any:
    """trainer/tokenizer.py's character tokenizer over printable ASCII and any other character given."""
    from proctor.trainer.tokenizer import build_char_tokenizer

    return build_char_tokenizer(string.printable + extra_text)


def replay(url: str, environment: str, transcript: list[dict[str, Any]], reference: Any) -> dict[str, Any]:
    """`POST /v1/score` of a transcript with the task's reference."""
    body = {"verifier": environment, "response": transcript, "reference": reference}
    response = httpx.post(f"{url}/v1/score", json=body, timeout=60)
    response.raise_for_status()
    return response.json()


def reference_of(url: str, environment: str, task: dict[str, Any]) -> Any:
    """The task's reference, as the service makes it (`POST /v1/environments/{name}/tasks`)."""
    body = {
        "split": task.get("split", "train"),
        "seed": task.get("seed", 0),
        "count": task.get("index", 0) + 1,
    }
    if task.get("level"):
        body["difficulty"] = task["level"]
    response = httpx.post(f"{url}/v1/environments/{environment}/tasks", json=body, timeout=60)
    response.raise_for_status()
    return response.json()["tasks"][-1]["reference"]


def open_sessions(url: str) -> float:
    """`proctor_sessions_open` from /metrics."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    total = 0.0
    for line in text.splitlines():
        if line.startswith("proctor_sessions_open"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def session_gone(url: str, session_id: str) -> bool:
    """Whether the session was deleted (GET answers 404 or 410)."""
    return httpx.get(f"{url}/v1/sessions/{session_id}", timeout=10).status_code in (404, 410)


class _Meta(type):
    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Meta(name, (), {})

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]  # used as a decorator: hand the function back
        return super().__call__()


def _stub(name: str) -> None:
    if name in sys.modules:
        return
    module = types.ModuleType(name)

    def attribute(attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Meta(attr, (), {})

    module.__getattr__ = attribute  # type: ignore[method-assign]
    module.__path__ = []  # type: ignore[attr-defined]
    sys.modules[name] = module


VERL_ABSENT = (
    "ray",
    "ray.util",
    "ray.util.scheduling_strategies",
    "ray.util.placement_group",
    "ray.actor",
    "ray.experimental",
    "ray.experimental.state",
    "ray.experimental.state.api",
    "hydra",
    "hydra.utils",
    "hydra.core",
    "hydra.core.config_store",
    "omegaconf",
    "omegaconf.errors",
    "tensordict",
    "tensordict.tensorclass",
    "codetiming",
    "orjson",
    "cachetools",
)


def stub_verl_dependencies() -> None:
    """Empty stand-ins for the verl dependencies the Makefile leaves out (`pip install --no-deps verl`): ray,
    hydra, omegaconf (cannot sit beside math-verify's antlr pin), tensordict, codetiming, orjson, cachetools.
    Names already importable are left alone. verl's own modules then import and run unchanged."""
    import importlib.util

    import torch  # noqa: F401  torch must load before any stand-in exists (it inspects modules)

    for name in VERL_ABSENT:
        top = name.split(".")[0]
        if top not in sys.modules and importlib.util.find_spec(top) is not None:
            continue
        _stub(name)
