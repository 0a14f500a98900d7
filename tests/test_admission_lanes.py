"""Admission lanes: inline verifiers never wait for a slot that pool work holds, and each lane has its own 429.

Over real HTTP (a `python -m proctor.api` subprocess per test) and on the lanes themselves.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import httpx
import pytest

from proctor.api.admission import INLINE, POOL, Admission, Overloaded, lane_of, lane_of_requests
from proctor.engine import Engine
from proctor.settings import Settings

HTTP_TIMEOUT_S = 60.0
SLEEPER = {"verifier": "test.misbehave", "response": "sleep", "reference": "x", "options": {"deadline_s": 15}}
TEXT = {"verifier": "text.match", "response": "The answer is 42", "reference": "42"}


def post(base: str, path: str, body: object) -> httpx.Response:
    """POST JSON with a generous time-out (the machine may be busy)."""
    return httpx.post(f"{base}{path}", json=body, timeout=HTTP_TIMEOUT_S)


def gauge(base: str, name: str, **labels: str) -> float:
    """One sample of the service's /metrics (0 when absent)."""
    text = httpx.get(f"{base}/metrics", timeout=HTTP_TIMEOUT_S).text
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        sample, _, value = line.rpartition(" ")
        if all(f'{key}="{val}"' in sample for key, val in labels.items()):
            return float(value)
    return 0.0


def wait_for(predicate: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    """Poll until predicate() holds; fail after timeout_s (hang detection, not a timing assertion)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    pytest.fail(f"never reached: {what}")


@pytest.fixture
def background() -> Iterator[ThreadPoolExecutor]:
    """Threads for requests that must stay in flight while the test talks to the server."""
    with ThreadPoolExecutor(max_workers=8) as pool:
        yield pool


# -- the lanes themselves ------------------------------------------------------------------------------------


def test_a_full_pool_lane_leaves_the_inline_lane_free_and_each_lane_refuses_on_its_own() -> None:
    async def scenario() -> None:
        admission = Admission(max_concurrency=1, max_queue=1, inline_concurrency=1, inline_queue=0)
        release = asyncio.Event()
        holding = asyncio.Event()

        async def hold_pool() -> None:
            async with admission.slot(POOL):
                holding.set()
                await release.wait()

        holder = asyncio.create_task(hold_pool())
        waiter = asyncio.create_task(hold_pool())  # the pool lane's one queue place
        await holding.wait()
        await asyncio.sleep(0)  # let the waiter reach the queue
        assert admission.lanes[POOL].stats()["queued"] == 1
        with pytest.raises(Overloaded, match="pool"):
            async with admission.slot(POOL):
                pass
        async with admission.slot(INLINE):  # the pool lane is full; the inline lane is not
            with pytest.raises(Overloaded, match="inline"):  # its own single slot is taken, its queue is 0
                async with admission.slot(INLINE):
                    pass
        stats = admission.stats()
        assert stats["lanes"][POOL]["rejected"] == 1 and stats["lanes"][INLINE]["rejected"] == 1
        assert stats["running"] == 1 and stats["queued"] == 1 and stats["rejected"] == 2
        release.set()
        await asyncio.gather(holder, waiter)
        assert admission.stats()["running"] == 0

    asyncio.run(scenario())


def test_the_route_picks_the_lane_from_the_verifier_and_the_response_size() -> None:
    engine = Engine(Settings(inline_max_chars=500))
    try:
        assert lane_of(engine, engine.prepare(TEXT)) == INLINE
        # Past inline_max_chars (response, reference and options in all) an inline verifier runs in the pool,
        # under a deadline: pool lane.
        assert lane_of(engine, engine.prepare({**TEXT, "response": "x" * 1001})) == POOL
        assert (
            lane_of(engine, engine.prepare({"verifier": "math", "response": "4", "reference": "4"})) == POOL
        )
        # multi is async (it may nest pool items): never the inline lane.
        multi = {
            "verifier": "multi",
            "response": "a",
            "reference": {"parts": [{"verifier": "text.match", "reference": "a"}]},
        }
        assert lane_of_requests(engine, [multi]) == POOL

        assert lane_of_requests(engine, [TEXT, TEXT]) == INLINE
        chat = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "42"}]
        assert lane_of_requests(engine, [{**TEXT, "response": chat}]) == INLINE
        assert lane_of_requests(engine, [{**TEXT, "response": [{"content": "x" * 1001}]}]) == POOL
        assert lane_of_requests(engine, [TEXT, {"verifier": "code", "response": "", "reference": {}}]) == POOL
        assert lane_of_requests(engine, [TEXT, {**TEXT, "response": "x" * 1001}]) == POOL
        # Items that are item errors cost nothing: they do not pull a batch into the pool lane.
        assert lane_of_requests(engine, [TEXT, {"verifier": "no.such"}, 7, {"verifier": 3}]) == INLINE
        # A response that is neither text nor a transcript is not trusted to be cheap.
        assert lane_of_requests(engine, [{**TEXT, "response": {"content": "a"}}]) == POOL
    finally:
        engine.close()


# -- over HTTP -----------------------------------------------------------------------------------------------


def test_inline_verifiers_are_answered_while_pool_work_holds_every_slot_and_fills_the_queue(
    start_server: Callable[..., str], background: ThreadPoolExecutor
) -> None:
    base = start_server(PROCTOR_MAX_CONCURRENCY=2, PROCTOR_MAX_QUEUE=2, PROCTOR_RETRY_AFTER_S=9)
    # More CPU-bound requests in flight than there are slots: two run (sleeping in both pool workers), two wait.
    sleepers: list[Future] = [background.submit(post, base, "/v1/score", SLEEPER) for _ in range(4)]
    wait_for(
        lambda: (
            gauge(base, "proctor_admission", state="running") == 2
            and gauge(base, "proctor_admission", state="queued") == 2
        ),
        "two pool requests running and two waiting",
    )

    # The pool lane is full: one more pool request, or a batch holding any pool item, is turned away.
    refused = post(base, "/v1/score", {**SLEEPER, "response": "x"})
    assert refused.status_code == 429 and refused.headers["retry-after"] == "9", refused.text
    mixed = post(base, "/v1/score/batch", {"items": [TEXT, {**SLEEPER, "response": "x"}]})
    assert mixed.status_code == 429 and mixed.headers["retry-after"] == "9", mixed.text

    # Inline work takes the inline lane: answered, and right, while the pool lane stays full.
    single = post(base, "/v1/score", TEXT)
    assert single.status_code == 200 and single.json()["status"] == "ok" and single.json()["reward"] == 1.0
    batch = post(base, "/v1/score/batch", {"items": [TEXT, {**TEXT, "response": "7"}]})
    assert batch.status_code == 200, batch.text
    assert [result["reward"] for result in batch.json()["results"]] == [1.0, 0.0]
    slime = post(
        base, "/compat/slime", {"response": "42", "label": {"verifier": "text.match", "reference": "42"}}
    )
    assert slime.status_code == 200 and slime.json() == 1.0, slime.text
    # Proof they did not wait for the pool lane: every sleeper is still in flight (each runs to its 15 s
    # deadline, and two of them have not even started).
    assert not any(future.done() for future in sleepers)
    assert gauge(base, "proctor_admission", state="queued") == 2

    for future in sleepers:
        answer = future.result(timeout=120)
        assert answer.status_code == 200 and answer.json()["status"] == "timeout", answer.text
    assert gauge(base, "proctor_rejected_total", reason="queue_full") == 2.0


def test_a_full_inline_lane_answers_429_with_retry_after_and_the_pool_lane_still_serves(
    start_server: Callable[..., str],
) -> None:
    base = start_server(PROCTOR_MAX_INLINE_CONCURRENCY=1, PROCTOR_MAX_INLINE_QUEUE=0, PROCTOR_RETRY_AFTER_S=4)
    # A batch of inline items holds the one inline slot while its chunks are scored on a thread.
    big = {"items": [{**TEXT, "id": index, "response": f"answer {index}"} for index in range(5000)]}
    stop = threading.Event()
    holder_answers: list[int] = []

    def hold() -> None:
        while not stop.is_set():
            holder_answers.append(post(base, "/v1/score/batch", big).status_code)

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    try:
        refused: httpx.Response | None = None
        deadline = time.monotonic() + 120
        while refused is None and time.monotonic() < deadline:
            answer = post(base, "/v1/score", TEXT)
            if answer.status_code == 429:
                refused = answer
            else:
                assert answer.status_code == 200, answer.text
        assert refused is not None, "the inline lane never filled"
        assert refused.headers["retry-after"] == "4"
        assert "inline" in refused.json()["error"]["message"]
        # The pool lane has its own slots: a pool item is scored whatever the inline lane holds.
        pooled = post(base, "/v1/score", {**SLEEPER, "response": "x", "reference": "x"})
        assert pooled.status_code == 200 and pooled.json()["reward"] == 1.0, pooled.text
    finally:
        stop.set()
        holder.join(timeout=120)
    assert holder_answers and set(holder_answers) <= {200, 429}
    assert 200 in holder_answers
    assert gauge(base, "proctor_rejected_total", reason="queue_full") >= 1.0
