"""Tool sessions in process: the step loop, idempotent steps, every end reason, limits, expiry, token binding,
replay equal to live, and the `python` tool of `tool.math_python` in the real sandbox (nsjail by default)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from typing import Any, ClassVar

import pytest

import proctor
from proctor.capacity import PoolFull
from proctor.contract import ChatMessage, RequestError, Verdict
from proctor.engine import Engine
from proctor.environments.registry import Task
from proctor.environments.tools.base import (
    SessionLimits,
    ToolEnvironment,
    ToolResult,
    ToolSpec,
    final_answer,
    register_tool_environment,
)
from proctor.environments.tools.math_python import ENVIRONMENT, MathPython
from proctor.environments.tools.sessions import (
    MemorySessionStore,
    SessionConflict,
    SessionCounters,
    SessionManager,
    owner_of,
)
from proctor.sandboxes.job import CommandResult, Job, Result, RunVerdict
from proctor.settings import Settings

pytestmark = pytest.mark.usefixtures("backend")  # skips where the configured sandbox cannot run

USER_TASK = {"prompt": "What is 2**20 + 3?", "reference": "1048579"}


def call(code: str, call_id: str = "c1", content: str = "") -> dict[str, Any]:
    """An assistant message calling `python` in OpenAI's shape."""
    return {
        "role": "assistant",
        "content": content,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": "python", "arguments": json.dumps({"code": code})},
            }
        ],
    }


def hermes(code: str) -> dict[str, Any]:
    body = json.dumps({"name": "python", "arguments": {"code": code}})
    return {"role": "assistant", "content": f"Let me check.\n<tool_call>{body}</tool_call>"}


def answer(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


@pytest.fixture(scope="module")
def engine():
    engine = Engine(Settings(cache_size=0))
    yield engine
    engine.close()


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def manager_with(engine: Engine, **kwargs: Any) -> SessionManager:
    return SessionManager(engine=engine, **kwargs)


@pytest.fixture
def limited(monkeypatch: pytest.MonkeyPatch):
    """Set tool.math_python's limits for one test."""

    def set_limits(**values: Any) -> None:
        limits = ENVIRONMENT.limits().model_copy(update=values)
        monkeypatch.setattr(ENVIRONMENT, "limits", lambda: limits)

    return set_limits


# -- the python tool --------------------------------------------------------------------------------------


def test_episode_runs_code_answers_and_replays_to_the_same_score(engine: Engine):
    async def episode() -> tuple[dict, dict, dict]:
        sessions = manager_with(engine)
        opened = await sessions.create({"environment": "tool.math_python", "task": USER_TASK})
        assert opened["tools"][0]["function"]["name"] == "python"
        assert opened["messages"] == [{"role": "user", "content": USER_TASK["prompt"]}]
        sid = opened["session_id"]
        first = await sessions.step(sid, call("print(2**20 + 3)"), 1)
        second = await sessions.step(sid, hermes("print(sum(range(10)))"), 2)
        last = await sessions.step(sid, answer("So the answer is \\boxed{1048579}."), 3)
        return first, second, last | {"record": await sessions.get(sid)}

    first, second, last = run(episode())
    assert first["observations"] == [
        {"role": "tool", "tool_call_id": "c1", "name": "python", "content": "1048579"}
    ]
    assert first["tool_results"][0]["status"] == "ok" and not first["done"]
    assert second["observations"][0]["content"] == "45"
    assert last["done"] and last["end_reason"] == "answer"
    assert last["score"]["reward"] == 1.0 and last["score"]["status"] == "ok"
    record = last["record"]
    # The transcript is exact: the prompt, each message as sent, each observation.
    assert record["transcript"][1] == call("print(2**20 + 3)")
    assert record["transcript"][3] == hermes("print(sum(range(10)))")
    assert [m["role"] for m in record["transcript"]] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]
    assert [a["name"] for a in record["actions"]] == ["python", "python"]
    replay = engine.score(
        {
            "verifier": "tool.math_python",
            "response": record["transcript"],
            "reference": record["task"]["reference"],
        }
    )
    live = last["score"]
    assert (replay.reward, replay.status.value, replay.correct, replay.reason, replay.details) == (
        live["reward"],
        live["status"],
        live["correct"],
        live["reason"],
        live["details"],
    )
    wrong = [*record["transcript"][:-1], answer("\\boxed{1048576}")]
    assert (
        engine.score({"verifier": "tool.math_python", "response": wrong, "reference": "1048579"}).reward
        == 0.0
    )


def test_python_errors_timeouts_memory_and_output_are_observations(engine: Engine, limited):
    limited(call_cpu_s=1.0, call_wall_s=3.0, call_memory_mb=128, max_observation_chars=300)

    async def episode() -> list[dict]:
        sessions = manager_with(engine)
        sid = (await sessions.create({"environment": "tool.math_python", "task": USER_TASK}))["session_id"]
        steps = []
        for code in (
            "raise ValueError('boom')",
            "while True: pass",
            "x = bytearray(1024 * 1024 * 1024)",
            "print('y' * 100000)",
            "import socket; socket.create_connection(('1.1.1.1', 80), timeout=2)",
            "print(open('/etc/shadow').read())",
        ):
            steps.append(await sessions.step(sid, call(code)))
        return steps

    raised, spun, hog, loud, network, shadow = run(episode())
    assert (
        raised["tool_results"][0]["status"] == "error"
        and "ValueError: boom" in raised["observations"][0]["content"]
    )
    assert (
        spun["tool_results"][0]["status"] == "timeout"
        and "ran out of time" in spun["observations"][0]["content"]
    )
    assert hog["tool_results"][0]["status"] == "error"
    assert (
        "MemoryError" in hog["observations"][0]["content"]
        or "out of memory" in hog["observations"][0]["content"]
    )
    assert loud["tool_results"][0]["truncated"] and len(loud["observations"][0]["content"]) <= 300
    assert network["tool_results"][0]["status"] == "error"  # no network in the sandbox
    assert shadow["tool_results"][0]["status"] == "error"  # no host files
    assert not shadow["done"]  # the model's failures never end the session


def test_stateless_calls_share_nothing(engine: Engine):
    async def episode() -> dict:
        sessions = manager_with(engine)
        sid = (await sessions.create({"environment": "tool.math_python", "task": USER_TASK}))["session_id"]
        await sessions.step(sid, call("x = 41\nopen('keep.txt', 'w').write('1')\nprint(x)"))
        return await sessions.step(sid, call("import os\nprint(os.path.exists('keep.txt'))\nprint(x)"))

    second = run(episode())
    content = second["observations"][0]["content"]
    assert content.startswith("False") and "NameError" in content


class FailingBackend:
    """A backend whose sandbox fails (as when nsjail is killed from outside)."""

    name = "failing"

    def available(self) -> tuple[bool, str]:
        return True, ""

    def run(self, job: Job) -> Result:
        killed = CommandResult(
            name="run", verdict=RunVerdict.sandbox_error, detail="nsjail was killed (SIGKILL)"
        )
        return Result(backend=self.name, commands=[killed])


def test_a_failed_sandbox_ends_the_session_with_sandbox_error_not_a_zero(engine: Engine, monkeypatch):
    monkeypatch.setattr(ENVIRONMENT, "_backend", FailingBackend())

    async def episode() -> tuple[dict, dict]:
        sessions = manager_with(engine)
        sid = (await sessions.create({"environment": "tool.math_python", "task": USER_TASK}))["session_id"]
        step = await sessions.step(sid, call("print(1)"))
        return step, await sessions.get(sid)

    step, record = run(episode())
    assert step["done"] and step["end_reason"] == "sandbox_error"
    assert step["score"]["status"] == "sandbox_error" and step["score"]["correct"] is None
    assert record["status"] == "sandbox_error"


_KILLED_MID_CALL = """
import asyncio, json, sys
from proctor.engine import Engine
from proctor.settings import Settings
import tests.test_tool_sessions as T

engine = Engine(Settings(cache_size=0))

async def episode():
    sessions = T.manager_with(engine)
    sid = (await sessions.create({"environment": "tool.math_python", "task": T.USER_TASK}))["session_id"]
    print("calling", flush=True)
    step = await sessions.step(sid, T.call("import time\\ntime.sleep(10)\\nprint(1)"))
    return step, await sessions.get(sid)

step, record = asyncio.run(episode())
print(json.dumps({"step": step, "status": record["status"]}), flush=True)
engine.close()
"""


def _descendants(root: int) -> dict[int, str]:
    """pid -> argv[0] of every process below `root` (read from /proc)."""
    parents: dict[int, int] = {}
    names: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                parents[int(entry)] = int(fh.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                names[int(entry)] = fh.read().split(b"\0")[0].decode(errors="replace")
        except (OSError, IndexError, ValueError):
            continue
    found: dict[int, str] = {}
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in found:
                found[pid] = names.get(pid, "")
                frontier.append(pid)
    return found


def test_nsjail_killed_mid_call_ends_the_session_with_sandbox_error(tmp_path):
    """The real thing, not a stub: every jail of a service process is SIGKILLed from outside while the model's
    code runs (in a child process, so this process's own sandboxes are untouched)."""
    if Settings().sandbox_backend != "nsjail":
        pytest.skip("needs the nsjail backend")
    import signal
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    child = subprocess.Popen(
        [sys.executable, "-c", _KILLED_MID_CALL], cwd=root, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "calling"
        time.sleep(1.0)  # the model's code is sleeping inside its jail now
        jails = [pid for pid, name in _descendants(child.pid).items() if name.endswith("nsjail")]
        assert jails, "no jail was running"
        for pid in jails:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        result = json.loads(child.stdout.readline())
    finally:
        child.kill()
        child.wait()
    step = result["step"]
    assert step["done"] and step["end_reason"] == "sandbox_error"
    assert step["score"]["status"] == "sandbox_error" and step["score"]["correct"] is None
    assert result["status"] == "sandbox_error"


# -- end reasons and limits -------------------------------------------------------------------------------


def test_end_reasons_max_turns_and_max_tool_calls(engine: Engine, limited):
    limited(max_tool_calls=2)

    async def episode() -> tuple[dict, dict, dict]:
        sessions = manager_with(engine)
        opened = await sessions.create(
            {"environment": "tool.math_python", "task": USER_TASK, "options": {"max_turns": 2}}
        )
        assert opened["limits"]["max_turns"] == 2
        sid = opened["session_id"]
        await sessions.step(sid, call("print(1)"))
        turns = await sessions.step(sid, call("print(2)"))
        sid2 = (await sessions.create({"environment": "tool.math_python", "task": USER_TASK}))["session_id"]
        three = {
            **call("print(1)"),
            "tool_calls": [call(f"print({i})", f"c{i}")["tool_calls"][0] for i in range(3)],
        }
        calls = await sessions.step(sid2, three)
        return turns, calls, await sessions.get(sid2)

    turns, calls, record = run(episode())
    assert turns["done"] and turns["end_reason"] == "max_turns" and turns["observations"] == []
    assert turns["score"]["reward"] == 0.0 and turns["score"]["status"] == "ok"
    assert calls["done"] and calls["end_reason"] == "max_tool_calls" and record["actions"] == []


def test_parse_errors_are_observations_counted_toward_max_tool_errors(engine: Engine, limited):
    limited(max_tool_errors=3)

    async def episode() -> list[dict]:
        sessions = manager_with(engine)
        sid = (await sessions.create({"environment": "tool.math_python", "task": USER_TASK}))["session_id"]
        return [
            await sessions.step(
                sid, answer('<tool_call>{"name": "python", "arguments": {"code": </tool_call>')
            ),
            await sessions.step(
                sid,
                {
                    **call("x"),
                    "tool_calls": [{"type": "function", "function": {"name": "bash", "arguments": "{}"}}],
                },
            ),
            await sessions.step(
                sid, answer('<tool_call>{"name": "python", "arguments": {"cmd": "ls"}}</tool_call>')
            ),
        ]

    broken, unknown, invalid = run(episode())
    assert not broken["done"] and broken["tool_results"][0]["error"] == "parse_error"
    assert "could not be read" in broken["observations"][0]["content"]
    assert not unknown["done"] and unknown["tool_results"][0]["error"] == "unknown_tool"
    assert invalid["tool_results"][0]["error"] == "invalid_arguments"
    assert (
        invalid["done"]
        and invalid["end_reason"] == "max_tool_errors"
        and invalid["usage"]["tool_errors"] == 3
    )


def test_tool_budget_and_observation_limit(engine: Engine, limited):
    limited(tool_cpu_s=0.3, call_cpu_s=2.0, call_wall_s=5.0)

    async def budget() -> dict:
        sessions = manager_with(engine)
        sid = (await sessions.create({"environment": "tool.math_python", "task": USER_TASK}))["session_id"]
        return await sessions.step(
            sid, call("import time\nt = time.process_time()\nwhile time.process_time() - t < 0.5: pass")
        )

    spent = run(budget())
    assert spent["done"] and spent["end_reason"] == "tool_budget" and spent["usage"]["tool_cpu_s"] > 0.3

    limited(max_observation_chars=200, max_total_observation_chars=300)

    async def chatty() -> tuple[dict, dict]:
        sessions = manager_with(engine)
        sid = (await sessions.create({"environment": "tool.math_python", "task": USER_TASK}))["session_id"]
        return await sessions.step(sid, call("print('x' * 1000)")), await sessions.step(
            sid, call("print('x' * 1000)")
        )

    first, second = run(chatty())
    assert not first["done"] and first["tool_results"][0]["truncated"]
    assert second["done"] and second["end_reason"] == "observation_limit"


def test_finish_answer_and_no_tool_call(engine: Engine):
    async def episode() -> tuple[proctor.Score, proctor.Score, dict]:
        sessions = manager_with(engine)
        sid = (await sessions.create({"environment": "tool.math_python", "task": USER_TASK}))["session_id"]
        await sessions.step(sid, call("print(2**20 + 3)"))
        finished = proctor.Score.model_validate(await sessions.finish(sid, answer("\\boxed{1048579}")))
        sid2 = (await sessions.create({"environment": "tool.math_python", "task": USER_TASK}))["session_id"]
        await sessions.step(sid2, call("print(2**20 + 3)"))
        unanswered = proctor.Score.model_validate(await sessions.finish(sid2))
        return finished, unanswered, await sessions.get(sid2)

    finished, unanswered, record = run(episode())
    assert finished.reward == 1.0
    assert unanswered.reward == 0.0 and unanswered.reason == "no_final_answer"
    assert record["end_reason"] == "no_tool_call" and record["done"]


class Terminal(ToolEnvironment):
    """A test environment whose one tool ends the episode (env_terminal)."""

    name: ClassVar[str] = "test.tool_terminal"
    version: ClassVar[str] = "0"

    def tools(self) -> list[ToolSpec]:
        return [
            ToolSpec(name=name, parameters={"type": "object", "properties": {}}) for name in ("stop", "boom")
        ]

    def make_tasks(self, split: str, seed: int, count: int, level: str | None = None) -> list[Task]:
        return [Task(prompt=[{"role": "user", "content": "stop"}], reference=1, verifier=self.name)] * count

    async def start(self, task: Task, limits: SessionLimits) -> dict:
        return {"stopped": False}

    async def call(self, state: dict, name: str, arguments: dict[str, Any]) -> ToolResult:
        if name == "boom":
            raise RuntimeError("a bug in the environment")
        state["stopped"] = True
        return ToolResult(content="stopped")

    def terminal(self, state: Any) -> bool:
        return bool(state and state["stopped"])

    async def score(self, reference: Any, transcript: list[ChatMessage]) -> Verdict:
        return Verdict.right() if transcript[-1].role == "tool" else Verdict.wrong("not_stopped")


@pytest.fixture
def terminal_env():
    """Terminal registered for one test, then taken out of every registry (so no later test lists it)."""
    from proctor import registry
    from proctor.environments import registry as environments
    from proctor.environments.tools import base

    register_tool_environment(Terminal())
    yield
    for table in (registry._verifiers, environments._environments, base._tool_environments):
        table.pop(Terminal.name, None)


@pytest.mark.usefixtures("terminal_env")
def test_env_terminal(engine: Engine):

    async def episode() -> dict:
        sessions = manager_with(engine)
        sid = (await sessions.create({"environment": "test.tool_terminal", "task": {"seed": 0}}))[
            "session_id"
        ]
        return await sessions.step(sid, {"role": "assistant", "content": "stop()"})

    stopped = run(episode())
    assert stopped["done"] and stopped["end_reason"] == "env_terminal" and stopped["score"]["reward"] == 1.0

    async def buggy() -> dict:
        sessions = manager_with(engine)
        sid = (await sessions.create({"environment": "test.tool_terminal", "task": {"seed": 0}}))[
            "session_id"
        ]
        return await sessions.step(sid, {"role": "assistant", "content": "boom()"})

    failed = run(buggy())
    assert failed["done"] and failed["end_reason"] == "verifier_error"
    assert failed["score"]["status"] == "verifier_error" and failed["score"]["correct"] is None


# -- steps, expiry, ownership, capacity -------------------------------------------------------------------


def test_steps_are_idempotent_and_ordered(engine: Engine):
    async def episode() -> None:
        counters = SessionCounters()
        sessions = manager_with(engine, observer=counters)
        sid = (await sessions.create({"environment": "tool.math_python", "task": USER_TASK}))["session_id"]
        first = await sessions.step(sid, call("import random\nprint(random.random())"), 1)
        again = await sessions.step(sid, call("import random\nprint(random.random())"), 1)
        assert again == first  # stored, not run again (a fresh run would print another number)
        assert len((await sessions.get(sid))["actions"]) == 1 and counters.tool_calls_total == 1
        with pytest.raises(SessionConflict, match="already taken"):
            await sessions.step(sid, call("print(0)"), 1)
        with pytest.raises(SessionConflict, match="out of order"):
            await sessions.step(sid, call("print(0)"), 3)
        done = await sessions.step(sid, answer("\\boxed{1048579}"), 2)
        assert done["done"]
        assert await sessions.step(sid, answer("\\boxed{1048579}"), 2) == done
        with pytest.raises(SessionConflict) as ended:
            await sessions.step(sid, answer("\\boxed{1}"), 3)
        assert ended.value.score == done["score"] and ended.value.end_reason == "answer"
        assert counters.steps_total == 2 and counters.ended_by == {"answer": 1}

    run(episode())


def test_sessions_expire_with_410_and_are_swept(engine: Engine):
    now = [1000.0]

    async def episode() -> None:
        counters = SessionCounters()
        sessions = manager_with(
            engine, observer=counters, clock=lambda: now[0], retention_s=60, sweep_interval_s=3600
        )
        sid = (await sessions.create({"environment": "tool.math_python", "task": USER_TASK}))["session_id"]
        swept = (await sessions.create({"environment": "tool.math_python", "task": USER_TASK}))["session_id"]
        ttl = ENVIRONMENT.limits().ttl_s
        now[0] += ttl - 1
        await sessions.step(sid, call("print(1)"))  # a step refreshes the time-to-live
        now[0] += 2
        assert await sessions.sweep() == 1  # `swept` was idle past its TTL
        assert counters.ended_by == {"expired": 1} and await sessions.open_count() == 1
        with pytest.raises(RequestError) as gone:
            await sessions.get(swept)
        assert gone.value.status == 410
        await sessions.step(sid, call("print(2)"))
        now[0] += ttl + 1
        with pytest.raises(RequestError) as gone:
            await sessions.step(sid, call("print(3)"))
        assert gone.value.status == 410
        now[0] += 61  # past the tombstone's retention: forgotten
        await sessions.sweep()
        with pytest.raises(RequestError) as unknown:
            await sessions.get(sid)
        assert unknown.value.status == 404
        deadline = await sessions.create(
            {"environment": "tool.math_python", "task": USER_TASK, "options": {"deadline_s": 5}}
        )
        assert deadline["expires_at"] == now[0] + 5

    run(episode())


def test_sessions_are_bound_to_the_callers_token(engine: Engine):
    alice, mallory = owner_of("alice-token"), owner_of("mallory-token")

    async def episode() -> None:
        sessions = manager_with(engine)
        opened = await sessions.create({"environment": "tool.math_python", "task": USER_TASK}, alice)
        sid = opened["session_id"]
        assert sid.startswith("ses_") and len(sid) >= 4 + 32  # 192 random bits, url-safe
        for attempt in (sessions.get(sid, mallory), sessions.step(sid, answer("1"), None, mallory)):
            with pytest.raises(RequestError) as unknown:
                await attempt
            assert unknown.value.status == 404
        await sessions.delete(sid, mallory)  # a no-op for another caller
        assert (await sessions.get(sid, alice))["session_id"] == sid
        assert "owner" not in await sessions.get(sid, alice)
        # The idempotency key is per caller: the same key from alice returns her session.
        keyed = await sessions.create(
            {"environment": "tool.math_python", "task": USER_TASK, "id": "k1"}, alice
        )
        again = await sessions.create(
            {"environment": "tool.math_python", "task": USER_TASK, "id": "k1"}, alice
        )
        other = await sessions.create(
            {"environment": "tool.math_python", "task": USER_TASK, "id": "k1"}, mallory
        )
        assert keyed["session_id"] == again["session_id"] != other["session_id"]

    run(episode())


def test_store_is_bounded():
    async def episode() -> None:
        sessions = SessionManager(MemorySessionStore(max_open=2))
        for _ in range(2):
            await sessions.create({"environment": "tool.math_python", "task": USER_TASK})
        with pytest.raises(PoolFull):
            await sessions.create({"environment": "tool.math_python", "task": USER_TASK})

    run(episode())


def test_bad_requests_name_their_field(engine: Engine):
    async def episode() -> None:
        sessions = manager_with(engine)
        cases = [
            ({"environment": "tool.nope", "task": USER_TASK}, 404, "environment"),
            ({"environment": "tool.math_python", "task": {"seed": 1, "level": "insane"}}, 422, "task.level"),
            ({"environment": "tool.math_python", "task": {"seed": -1}}, 422, "task.seed"),
            (
                {"environment": "tool.math_python", "task": {"prompt": "hi", "reference": ""}},
                422,
                "task.reference",
            ),
            (
                {"environment": "tool.math_python", "task": USER_TASK, "options": {"max_turns": 0}},
                422,
                "options.max_turns",
            ),
        ]
        for request, status, field in cases:
            with pytest.raises(RequestError) as error:
                await sessions.create(request)
            assert error.value.status == status, error.value.message
            assert (error.value.field or "").startswith(field), error.value.field
        sid = (await sessions.create({"environment": "tool.math_python", "task": USER_TASK}))["session_id"]
        with pytest.raises(RequestError) as error:
            await sessions.step(sid, {"role": "user", "content": "hi"})
        assert (error.value.status, error.value.field) == (422, "message.role")
        with pytest.raises(RequestError) as error:
            await sessions.step("ses_nope", answer("1"))
        assert error.value.status == 404

    run(episode())


def test_bundled_tasks_are_seeded_and_split():
    env = MathPython()
    first = env.make_tasks("train", 5, 20, "medium")
    assert [t.model_dump() for t in first] == [
        t.model_dump() for t in env.make_tasks("train", 5, 20, "medium")
    ]
    test_ids = {t.metadata["id"] for t in env.make_tasks("test", 5, 50, "medium")}
    assert not test_ids & {t.metadata["id"] for t in env.make_tasks("train", 5, 50, "medium")}
    assert len({t.metadata["kind"] for t in first}) >= 4


def test_final_answer_reads_only_the_models_words_after_the_last_observation():
    transcript = [
        ChatMessage(role="user", content="q"),
        ChatMessage(role="assistant", content="<tool_response>\\boxed{5}</tool_response>"),
        ChatMessage(role="tool", content="\\boxed{5}", tool_call_id="c"),
        ChatMessage(role="assistant", content="It is \\boxed{6}."),
    ]
    assert final_answer(transcript) == "It is \\boxed{6}."
    assert final_answer(transcript[:3]) is None
    calling = ChatMessage.model_validate(
        hermes("print(5)") | {"content": "\\boxed{5} <tool_call>{}</tool_call>"}
    )
    assert final_answer([*transcript, calling]) is None


def test_in_process_api_sync_and_async():
    with proctor.open_session("tool.math_python", USER_TASK) as session:
        assert session.tools[0]["function"]["name"] == "python" and session.messages[0]["role"] == "user"
        step = session.step(ChatMessage.model_validate(call("print(2**20 + 3)")))
        assert step["observations"][0]["content"] == "1048579"
        score = session.finish(answer("\\boxed{1048579}"))
        assert score.reward == 1.0 and session.record()["end_reason"] == "answer"

    async def async_episode() -> proctor.Score:
        session = await proctor.open_session_async("tool.math_python", {"seed": 3, "split": "test"})
        async with session:
            gold = (await session.record())["task"]["metadata"]["gold_answer"]
            done = await session.step(answer(f"\\boxed{{{gold}}}"))
            assert done["done"] and done["end_reason"] == "answer"
            return await session.finish()

    assert run(async_episode()).reward == 1.0


# -- the persistent interpreter ---------------------------------------------------------------------------


def _sleepers(tag: str) -> list[int]:
    """Host pids of processes whose command line holds `tag`."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                    if tag.encode() in cmdline.read():
                        found.append(int(entry))
            except OSError:
                continue
    return found


def test_persistent_interpreter_keeps_state_restarts_after_a_timeout_and_leaves_no_survivors(
    engine: Engine, limited
):
    from proctor.environments.tools import math_python

    limits = ENVIRONMENT.limits().model_copy(update={"call_cpu_s": 1.0, "call_wall_s": 3.0})
    math_python.PERSISTENT.limits = lambda: limits  # type: ignore[method-assign]
    tag = "987.654321"
    try:

        async def episode() -> tuple[list[dict], dict]:
            sessions = manager_with(engine)
            opened = await sessions.create({"environment": "tool.math_python_persistent", "task": USER_TASK})
            assert "persist" in opened["tools"][0]["function"]["description"]
            sid = opened["session_id"]
            steps = []
            for code in (
                "x = 2**20",
                "x + 3",
                f"import subprocess\np = subprocess.Popen(['sleep', '{tag}'])\nprint('spawned')",
                "while True: pass",
                "x",
            ):
                steps.append(await sessions.step(sid, call(code)))
            assert math_python.open_interpreters() == 1
            final = await sessions.step(sid, answer("\\boxed{1048579}"))
            return steps, final | {"record": await sessions.get(sid)}

        steps, final = run(episode())
    finally:
        del math_python.PERSISTENT.limits
    assigned, value, spawned, spun, lost = (step["observations"][0]["content"] for step in steps)
    assert (assigned, value, spawned) == ("(no output)", "1048579", "spawned")
    assert steps[3]["tool_results"][0]["status"] == "timeout" and "variables are lost" in spun
    assert "fresh interpreter" in lost and "NameError" in lost
    assert final["end_reason"] == "answer" and final["score"]["reward"] == 1.0
    assert math_python.open_interpreters() == 0
    for _ in range(50):  # killed with the jail; /proc may take a moment to forget it
        if not _sleepers(tag):
            break
        time.sleep(0.05)
    assert not _sleepers(tag), "a process the model started survived its session"
    record = final["record"]
    replay = engine.score(
        {"verifier": "tool.math_python_persistent", "response": record["transcript"], "reference": "1048579"}
    )
    assert (replay.reward, replay.reason, replay.details) == (
        1.0,
        final["score"]["reason"],
        final["score"]["details"],
    )


def test_persistent_sessions_are_killed_on_expiry_and_bounded(engine: Engine, monkeypatch):
    from proctor.environments.tools import math_python

    now = [1000.0]
    tag = "876.54321"

    async def episode() -> None:
        sessions = manager_with(engine, clock=lambda: now[0], sweep_interval_s=3600)
        sid = (await sessions.create({"environment": "tool.math_python_persistent", "task": USER_TASK}))[
            "session_id"
        ]
        spawned = await sessions.step(
            sid, call(f"import subprocess\nsubprocess.Popen(['sleep', '{tag}'])\nprint(1)")
        )
        assert spawned["observations"][0]["content"] == "1"
        for _ in range(50):  # the sleeper is running once Popen returned; /proc may show it a moment later
            if _sleepers(tag):
                break
            await asyncio.sleep(0.05)
        assert _sleepers(tag) and math_python.open_interpreters() == 1
        now[0] += ENVIRONMENT.limits().ttl_s + 1
        assert await sessions.sweep() == 1
        assert math_python.open_interpreters() == 0
        for _ in range(50):  # the jail is killed at once; /proc may take a moment to forget it
            if not _sleepers(tag):
                break
            await asyncio.sleep(0.05)
        assert not _sleepers(tag)
        monkeypatch.setattr(math_python, "MAX_INTERPRETERS", 1)
        await sessions.create({"environment": "tool.math_python_persistent", "task": USER_TASK})
        with pytest.raises(PoolFull):
            await sessions.create({"environment": "tool.math_python_persistent", "task": USER_TASK})
        await sessions.close()

    run(episode())


def test_an_interpreter_that_cannot_start_is_a_sandbox_error(engine: Engine, monkeypatch):
    from proctor.environments.tools import math_python

    monkeypatch.setattr(math_python.PERSISTENT, "_backend", FailingBackend())  # no warm slots: no jail

    async def episode() -> dict:
        sessions = manager_with(engine)
        sid = (await sessions.create({"environment": "tool.math_python_persistent", "task": USER_TASK}))[
            "session_id"
        ]
        return await sessions.step(sid, call("print(1)"))

    step = run(episode())
    assert (
        step["done"] and step["end_reason"] == "sandbox_error" and step["score"]["status"] == "sandbox_error"
    )
    assert math_python.open_interpreters() == 0
