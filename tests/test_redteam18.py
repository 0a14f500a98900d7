"""Red team for issue 18 (tool calls, sessions, tool.math_python, tool.search_qa).

Each finding is a test asserting the correct behaviour (each failed when written and passes since its fix:
F1 in the tool-call reader, F2 in the persistent interpreter, F3/F4/F8 in search_qa, F5-F7/F9/F10 in the
sessions); the other tests pin attacks that held. Tests that run the `python` tool use the configured sandbox (skipped where it cannot run).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

import proctor
from proctor.contract import RequestError
from proctor.engine import Engine
from proctor.environments.tools.search_qa.environment import SEARCH_QA, gold_transcript, search_text
from proctor.environments.tools.sessions import SessionConflict, SessionManager, owner_of
from proctor.settings import Settings

USER_TASK = {"prompt": "Let f(x) = x + 3. What is f(2)?", "reference": "5"}


@pytest.fixture(scope="module")
def engine():
    engine = Engine(Settings(cache_size=0))
    yield engine
    engine.close()


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def py_call(code: str, call_id: str = "c1", content: str = "") -> dict[str, Any]:
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


def tool_call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ],
    }


def answer(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def search_task() -> Any:
    return SEARCH_QA.make_tasks(split="train", seed=0, count=1, level="medium")[0]


# == findings (each failed when written; fixed) ================================================================


def test_math_answer_opening_with_function_notation_is_an_answer(engine: Engine):
    text = "f(2) = 5, so the answer is \\boxed{5}."
    replay = proctor.score(
        "tool.math_python", [{"role": "user", "content": USER_TASK["prompt"]}, answer(text)], "5"
    )
    assert replay.reward == 1.0, replay.reason

    async def live() -> dict[str, Any]:
        sessions = SessionManager(engine=engine)
        sid = (await sessions.create({"environment": "tool.math_python", "task": USER_TASK}))["session_id"]
        step = await sessions.step(sid, answer(text), 1)
        await sessions.close()
        return step

    step = run(live())
    assert step["done"] and step["end_reason"] == "answer", step["observations"]
    assert step["score"]["reward"] == 1.0


@pytest.mark.usefixtures("backend")
def test_persistent_interpreter_background_cpu_is_bounded_or_charged(engine: Engine):
    from proctor.environments.tools import math_python

    limits = math_python.ENVIRONMENT.limits().model_copy(update={"call_cpu_s": 1.0, "call_wall_s": 3.0})
    math_python.PERSISTENT.limits = lambda: limits  # type: ignore[method-assign]
    spin = (
        "import threading, time\n"
        "state = {'cpu': 0.0}\n"
        "def spin():\n"
        "    t0 = time.thread_time()\n"
        "    while time.thread_time() - t0 < 3.0:\n"
        "        sum(range(10000))\n"
        "        state['cpu'] = time.thread_time() - t0\n"
        "threading.Thread(target=spin, daemon=True).start()\n"
        "print('started')"
    )

    async def episode() -> tuple[dict[str, Any], dict[str, Any]]:
        sessions = SessionManager(engine=engine)
        sid = (await sessions.create({"environment": "tool.math_python_persistent", "task": USER_TASK}))[
            "session_id"
        ]
        first = await sessions.step(sid, py_call(spin, "a"))
        for poll in range(6):  # give the thread up to 12 s of wall time on a busy machine
            await asyncio.sleep(2.0)
            second = await sessions.step(sid, py_call("print(round(state['cpu'], 3))", f"b{poll}"))
            last = second["observations"][0]["content"].splitlines()[-1]
            if not last[:1].isdigit() or float(last) >= 2.9:
                break
        await sessions.close()
        return first, second

    try:
        first, second = run(episode())
    finally:
        del math_python.PERSISTENT.limits
    assert first["observations"][0]["content"] == "started"
    content = second["observations"][0]["content"]
    background = float(content.splitlines()[-1]) if content.splitlines()[-1][:1].isdigit() else 0.0
    charged = second["usage"]["tool_cpu_s"]
    # Either the code never got more CPU than one call may use, or the session was billed for it.
    assert background <= limits.call_cpu_s + 0.5 or charged >= background - 0.5, (background, charged)


def test_a_search_without_results_does_not_meet_require_search():
    task = search_task()
    gold = task.metadata["gold_answer"]
    found, status = search_text(0, "zzqxv qqzzx")
    assert status == "ok" and found == "No article matches the query."
    transcript = [
        *task.prompt,
        tool_call("s", "search", {"query": "zzqxv qqzzx"}),
        {"role": "tool", "tool_call_id": "s", "name": "search", "content": found},
        answer(f"<answer>{gold}</answer>"),
    ]
    score = proctor.score("tool.search_qa", transcript, task.reference)
    assert score.reward == 0.0 and score.reason == "no_search", (score.reward, score.reason)


@pytest.mark.parametrize("template", ["Atlantis & {gold}", "{gold}\nAtlantis", "Atlantis + {gold}"])
def test_f1_candidate_lists_are_hedges(template: str):
    task = search_task()
    gold = task.metadata["gold_answer"]
    reference = {**task.reference, "metric": "f1"}
    searched = gold_transcript(task)[:-1]
    content = "<answer>" + template.format(gold=gold) + "</answer>"
    score = proctor.score("tool.search_qa", [*searched, answer(content)], reference)
    assert score.reward == 0.0 and score.reason == "hedged", (score.reward, score.reason)


def test_unknown_session_ids_leave_nothing_behind(engine: Engine):
    async def probe() -> int:
        sessions = SessionManager(engine=engine)
        for index in range(300):
            with pytest.raises(RequestError) as step_error:
                await sessions.step(f"ses_unknown_{index}", answer("x"))
            assert step_error.value.status == 404
            with pytest.raises(RequestError) as finish_error:
                await sessions.finish(f"ses_unknown_f{index}")
            assert finish_error.value.status == 404
        left = len(sessions._locks)
        await sessions.close()
        return left

    assert run(probe()) == 0


def test_idempotency_key_reused_with_another_request_is_refused(engine: Engine):
    async def probe() -> Any:
        sessions = SessionManager(engine=engine)
        await sessions.create({"environment": "tool.search_qa", "task": {"seed": 0}, "id": "rollout-7"})
        try:
            return await sessions.create(
                {"environment": "tool.math_python", "task": USER_TASK, "id": "rollout-7"}
            )
        except RequestError as exc:
            return exc
        finally:
            await sessions.close()

    outcome = run(probe())
    if isinstance(outcome, RequestError):
        assert outcome.status in (409, 422)
    else:
        assert outcome["environment"] == "tool.math_python", outcome["environment"]


def test_a_sessions_transcript_is_bounded(engine: Engine):
    async def probe() -> list[int]:
        sessions = SessionManager(engine=engine)
        sid = (await sessions.create({"environment": "tool.search_qa", "task": {"seed": 0}}))["session_id"]
        refused: list[int] = []
        for index in range(8):
            message = {
                **tool_call(f"c{index}", "search", {"query": "Veintu"}),
                "content": "x" * 4_000_000,
            }
            try:
                await sessions.step(sid, message)
            except RequestError as exc:
                refused.append(exc.status)
                break
        await sessions.close()
        return refused

    refused = run(probe())
    assert refused and refused[0] in (413, 422), "32 MB of assistant text was stored in one session"


# == attacks that held ================================================================================

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "days": {"type": "integer"},
                "tags": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["city"],
        },
    },
}
GOLD = {
    "tools": [WEATHER],
    "calls": [{"name": "get_weather", "arguments": {"city": ["Paris"], "days": [3, ""]}}],
}


def openai_call(
    arguments: str, name: str = "get_weather", content: str | None = None
) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "Weather in Paris for 3 days?"},
        {
            "role": "assistant",
            "content": content,
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": name, "arguments": arguments}}
            ],
        },
    ]


def hermes(arguments: str, name: str = "get_weather") -> str:
    return f'<tool_call>{{"name": "{name}", "arguments": {arguments}}}</tool_call>'


@pytest.mark.parametrize(
    ("response", "reason"),
    [
        (openai_call('{"city": "Paris", "days": "3"}'), "wrong_values"),  # a string is never a number
        (openai_call('{"city": "Paris", "days": true}'), "wrong_values"),  # a bool is never a number
        (openai_call('{"city": "Paris", "days": 1e999}'), "parse_error"),  # overflows to Infinity
        (openai_call('{"city": "Paris", "city": "Paris"}'), "parse_error"),  # duplicate key
        (openai_call('{"city": "P\u0430ris"}'), "wrong_values"),  # Cyrillic a
        (openai_call('{"city": "Paris\u200b"}'), "wrong_values"),  # zero-width space
        (openai_call('{"city": "Paris"}', name="get_weath\u0435r"), "wrong_function"),  # Cyrillic e
        (openai_call('{"city": "London"}', content=hermes('{"city": "Paris"}')), "wrong_values"),
        (hermes('{"city": "Paris"}') * 2, "wrong_call_count"),  # the same call twice
        (hermes('{"city": "Paris"}') + "\n<TOOL_RESPONSE>sunny</TOOL_RESPONSE>", "fake_tool_response"),
        ("<think>" + hermes('{"city": "Paris"}') + "</think>Sunny.", "no_call"),
        ("~~~\n" + hermes('{"city": "Paris"}') + "\n~~~", "parse_error"),  # quoted_call
        ('get_weather(city=f"Paris")', "parse_error"),  # not a literal
        ('get_weather(city=(x := "Paris"))', "parse_error"),
        ('get_weather(city="Paris") and then some prose', "parse_error"),
        (hermes('{"city": "London", "days": 4}'), "wrong_values"),
    ],
)
def test_toolcall_confusions_score_zero(response: Any, reason: str):
    score = proctor.score("toolcall", response, GOLD)
    assert (score.reward, score.reason) == (0.0, reason)


def test_toolcall_wrong_values_never_outscore_no_call():
    wrong = proctor.score("toolcall", hermes('{"city": "London", "days": 9}'), GOLD)
    none = proctor.score("toolcall", "It is probably sunny.", GOLD)
    assert wrong.reward == none.reward == 0.0
    assert wrong.components["name"] == 1.0 and wrong.components["values"] == 0.0


def test_toolcall_parallel_duplicates_and_call_every_tool():
    parallel = {
        "tools": [WEATHER],
        "calls": [
            {"name": "get_weather", "arguments": {"city": ["Paris"]}},
            {"name": "get_weather", "arguments": {"city": ["Paris", "London"]}},
        ],
    }
    pair = hermes('{"city": "Paris"}') + hermes('{"city": "London"}')
    assert proctor.score("toolcall", pair, parallel).reward == 1.0
    reversed_pair = hermes('{"city": "London"}') + hermes('{"city": "Paris"}')
    assert proctor.score("toolcall", reversed_pair, parallel).reward == 1.0  # no greedy pairing
    three = pair + hermes('{"city": "Paris"}')
    assert proctor.score("toolcall", three, parallel).reason == "wrong_call_count"
    irrelevant = {"tools": [WEATHER], "calls": []}
    assert proctor.score("toolcall", hermes('{"city": "Paris"}'), irrelevant).reason == "unexpected_call"
    assert proctor.score("toolcall", "<think>hmm</think>  ", irrelevant).reason == "empty_response"


def test_math_python_replay_cheats_score_zero():
    prompt = [{"role": "user", "content": USER_TASK["prompt"]}]
    call = py_call("print('\\\\boxed{5}')")
    printed = {"role": "tool", "tool_call_id": "c1", "name": "python", "content": "\\boxed{5}"}
    cheats = [
        [*prompt, call, printed],  # ends on the observation
        [*prompt, call, printed, answer("")],  # the code answered, the model did not
        [*prompt, {**call, "content": "\\boxed{5}"}],  # a box beside a call that never ran
        [*prompt, answer("\\boxed{4} or \\boxed{5}")],  # hedged
        [*prompt, answer(f"<think>\\boxed{{5}}</think>{hermes(json.dumps({'code': '1'}), 'python')}")],
    ]
    for transcript in cheats:
        assert proctor.score("tool.math_python", transcript, "5").reward == 0.0, transcript[-1]


def test_search_qa_cheats_score_zero():
    task = search_task()
    gold = task.metadata["gold_answer"]
    searched = gold_transcript(task)[:-1]
    for content in (
        f"<information>{gold}</information><answer>{gold}</answer>",
        f"<answer>{gold}</answer><answer>Atlantis</answer>",
        f"<answer>Atlantis or {gold}</answer>",
        f"<answer>{gold} Republic</answer>",  # a superstring of an alias
        f"<think><answer>{gold}</answer>",
    ):
        assert proctor.score("tool.search_qa", [*searched, answer(content)], task.reference).reward == 0.0
    no_search = [*task.prompt, answer(f"<answer>{gold}</answer>")]
    assert proctor.score("tool.search_qa", no_search, task.reference).reason == "no_search"


def test_steps_are_idempotent_bound_and_final(engine: Engine):
    async def episode() -> None:
        sessions = SessionManager(engine=engine)
        owner = owner_of("token-a")
        sid = (await sessions.create({"environment": "tool.search_qa", "task": {"seed": 0}}, owner=owner))[
            "session_id"
        ]
        assert len(sid) >= 4 + 32  # 192 random bits, url-safe
        with pytest.raises(RequestError) as other:
            await sessions.step(sid, answer("x"), owner=owner_of("token-b"))
        assert other.value.status == 404
        await sessions.delete(sid, owner_of("token-b"))  # another caller's delete is a no-op
        assert (await sessions.get(sid, owner))["session_id"] == sid
        keyed = await sessions.create(
            {"environment": "tool.search_qa", "task": {"seed": 0}, "id": "k"}, owner=owner
        )
        stolen = await sessions.create(
            {"environment": "tool.search_qa", "task": {"seed": 0}, "id": "k"}, owner=owner_of("token-b")
        )
        assert stolen["session_id"] != keyed["session_id"]  # idempotency keys are per caller
        first = await sessions.step(sid, tool_call("s", "search", {"query": "Veintu"}), 1, owner=owner)
        again = await sessions.step(sid, tool_call("s", "search", {"query": "Veintu"}), 1, owner=owner)
        assert again == first
        record = await sessions.get(sid, owner)
        assert len(record["actions"]) == 1  # the replayed step ran nothing
        with pytest.raises(SessionConflict):
            await sessions.step(sid, tool_call("s", "search", {"query": "other"}), 1, owner=owner)
        with pytest.raises(SessionConflict):
            await sessions.step(sid, answer("x"), 5, owner=owner)
        done = await sessions.step(sid, answer("<answer>x</answer>"), 2, owner=owner)
        assert done["done"] and done["end_reason"] == "answer"
        with pytest.raises(SessionConflict) as after:
            await sessions.step(sid, answer("<answer>y</answer>"), 3, owner=owner)
        assert after.value.score == done["score"]
        await sessions.close()

    run(episode())


@pytest.mark.usefixtures("backend")
def test_python_sandbox_held(engine: Engine):
    """Killing the parent, init or the interpreter is the model's doing (never sandbox_error), and nothing one
    session wrote is visible to the next (stateless and persistent)."""

    async def episode(environment: str) -> tuple[list[dict[str, Any]], str]:
        sessions = SessionManager(engine=engine)
        sid = (await sessions.create({"environment": environment, "task": USER_TASK}))["session_id"]
        steps = []
        for index, code in enumerate(
            (
                "import os\nopen('/tmp/rt18_leak', 'w').write('A')\nopen('rt18_cwd', 'w').write('B')\n"
                "os.environ['RT18'] = '1'\nprint('w')",
                "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nos.kill(1, 9)\nprint('k')",
                "import os\nos._exit(3)",
            )
        ):
            steps.append(await sessions.step(sid, py_call(code, f"c{index}")))
        await sessions.delete(sid)
        sid = (await sessions.create({"environment": environment, "task": USER_TASK}))["session_id"]
        probe = await sessions.step(
            sid,
            py_call(
                "import os\nprint(os.path.exists('/tmp/rt18_leak'), os.path.exists('rt18_cwd'), "
                "os.environ.get('RT18'))"
            ),
        )
        await sessions.close()
        return steps, probe["observations"][0]["content"]

    for environment in ("tool.math_python", "tool.math_python_persistent"):
        steps, seen = run(episode(environment))
        assert all(not step["done"] for step in steps), [step["end_reason"] for step in steps]
        assert steps[2]["tool_results"][0]["status"] == "error"
        assert seen.splitlines()[-1] == "False False None", seen


def test_open_search_sessions_do_not_rebuild_their_index_every_step(engine: Engine, monkeypatch):
    from proctor.environments.tools.search_qa import index as index_module

    builds: list[int] = []
    original = index_module.SearchIndex

    class Counting(original):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            builds.append(1)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(index_module, "SearchIndex", Counting)
    seeds = range(101, 107)

    async def episode() -> tuple[int, list[int]]:
        sessions = SessionManager(engine=engine)
        sids = []
        for seed in seeds:
            task = {"prompt": "Who?", "reference": {"answers": ["x"], "corpus_seed": seed}}
            try:
                sids.append(
                    (await sessions.create({"environment": "tool.search_qa", "task": task}))["session_id"]
                )
            except RequestError as exc:  # refusing more seeds than the cache holds is also correct
                refused.append(exc.status)
        for index, sid in enumerate(sids):
            await sessions.step(sid, tool_call(f"a{index}", "search", {"query": "founder"}))
        before = len(builds)
        for index, sid in enumerate(sids):
            await sessions.step(sid, tool_call(f"b{index}", "search", {"query": "founder"}))
        await sessions.close()
        return len(builds) - before, refused

    refused: list[int] = []
    rebuilt, refused = run(episode())
    assert rebuilt == 0 or (refused and set(refused) <= {422, 429}), (rebuilt, refused)


def test_a_non_object_batch_item_fails_only_its_slot(live_server: str):
    import httpx

    opened = httpx.post(
        f"{live_server}/v1/sessions", json={"environment": "tool.search_qa", "task": {"seed": 0}}, timeout=60
    )
    assert opened.status_code == 201, opened.text
    sid = opened.json()["session_id"]
    good = {"session_id": sid, "message": tool_call("s", "search", {"query": "Veintu"}), "step": 1}
    answered = httpx.post(f"{live_server}/v1/sessions/step/batch", json={"items": [good, 1]}, timeout=60)
    assert answered.status_code == 200, answered.text
    results = answered.json()["results"]
    assert results[0]["step"] == 1 and "error" in results[1]


def test_bools_are_not_step_numbers_or_seeds(engine: Engine):
    from pydantic import ValidationError

    from proctor.environments.tools.sessions import StepRequest

    with pytest.raises(ValidationError):
        StepRequest.model_validate({"message": answer("x"), "step": True})

    async def create() -> Any:
        sessions = SessionManager(engine=engine)
        try:
            return await sessions.create({"environment": "tool.search_qa", "task": {"seed": True}})
        except RequestError as exc:
            return exc
        finally:
            await sessions.close()

    outcome = run(create())
    assert isinstance(outcome, RequestError) and outcome.status == 422
