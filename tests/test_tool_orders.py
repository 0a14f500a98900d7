"""tool.orders: the seeded shop, its policies, the scripted customer, replay grading, cheats and the gate."""

from __future__ import annotations

import asyncio
import random
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

import proctor
from proctor.contract import ChatMessage, RequestError, Status
from proctor.engine import Engine
from proctor.environments.tools.orders import database
from proctor.environments.tools.orders.database import REFUND_CAP_CENTS, TODAY, build, diff, fresh
from proctor.environments.tools.orders.environment import (
    ORDERS,
    cheat_transcripts,
    confirmation_text,
    gold_script,
    gold_transcript,
    kind_tasks,
    play,
    trivial_transcripts,
)
from proctor.environments.tools.orders.scoring import grade, read_facts
from proctor.environments.tools.orders.tasks import KINDS, OrdersReference, gold_database
from proctor.environments.tools.orders.tools import Shop
from proctor.environments.tools.orders.user import STOP, amounts, dates, user_reply
from proctor.settings import Settings


def messages(raw: list[dict[str, Any]]) -> list[ChatMessage]:
    return [ChatMessage.model_validate(message) for message in raw]


def graded(reference: Any, raw: list[dict[str, Any]]):
    return grade(OrdersReference.model_validate(reference), messages(raw))


@pytest.fixture(scope="module")
def by_kind():
    return kind_tasks()


def customer_with(db: dict[str, Any], status: str, **want: Any) -> tuple[str, dict[str, Any]]:
    """A customer id and one of their orders with this status (and delivered within/after the window)."""
    for order in db["orders"].values():
        days = database.days_since_delivery(order)
        if order["status"] != status:
            continue
        if "late" in want and (days is None or (days > 30) != want["late"]):
            continue
        if "price_over_cap" in want and not any(i["price"] > REFUND_CAP_CENTS for i in order["items"]):
            continue
        return order["customer_id"], order
    raise LookupError(status)


# -- database and tasks -------------------------------------------------------------------------------------


def test_database_and_tasks_are_identical_across_processes():
    import subprocess
    import sys

    from proctor.environments.tools.orders.database import db_digest

    code = (
        "from proctor.environments.tools.orders.database import build, db_digest\n"
        "from proctor.environments.tools.orders.environment import ORDERS\n"
        "print(db_digest(build(0)), *[t.metadata['task_id'] for t in ORDERS.make_tasks('train', 0, 10)])"
    )
    here = " ".join(
        [db_digest(build(0)), *[t.metadata["task_id"] for t in ORDERS.make_tasks("train", 0, 10)]]
    )
    for hash_seed in ("1", "2"):
        out = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={**__import__("os").environ, "PYTHONHASHSEED": hash_seed},
            timeout=120,
        )
        assert out.stdout.split() == here.split()


def test_database_is_seeded_plain_data_and_copies_are_private():
    assert build(0) == build(0) and build(0) != build(1)
    one, two = fresh(0), fresh(0)
    first = next(iter(one["orders"]))
    one["orders"][first]["status"] = "cancelled"
    assert two["orders"][first]["status"] != "cancelled" or build(0)["orders"][first]["status"] == "cancelled"
    assert fresh(0) == build(0)
    statuses = {order["status"] for order in build(0)["orders"].values()}
    assert {"pending", "processing", "shipped", "delivered", "cancelled"} <= statuses


def test_the_database_diff_is_readable():
    gold, got = fresh(0), fresh(0)
    order_id = next(iter(got["orders"]))
    got["orders"][order_id]["status"] = "cancelled-by-test"
    got["transfers"].append({"customer_id": None})
    lines = diff(gold, got)
    assert any(
        line.startswith(f"orders.{order_id}.status: gold ") and "cancelled-by-test" in line for line in lines
    )
    assert any(line.startswith("transfers: gold []") for line in lines)
    assert diff(gold, gold) == []
    assert len(diff({"a": list(range(100))}, {"a": list(range(1, 101))}, limit=5)) == 5


def test_tasks_are_deterministic_split_and_of_every_kind():
    one = ORDERS.make_tasks("train", 5, 40)
    assert one == ORDERS.make_tasks("train", 5, 40)
    assert one != ORDERS.make_tasks("train", 6, 40)
    kinds = {task.metadata["kind"] for task in ORDERS.make_tasks("train", 0, 120)}
    assert kinds == set(KINDS)
    train = {task.metadata["task_id"] for task in ORDERS.make_tasks("train", 0, 150)}
    test = {task.metadata["task_id"] for task in ORDERS.make_tasks("test", 0, 150)}
    assert not train & test
    for task in one:
        reference = OrdersReference.model_validate(task.reference)
        assert task.prompt[-1] == {"role": "user", "content": reference.request}
        assert (
            reference.user.email not in reference.request and reference.user.order_id not in reference.request
        )
    with pytest.raises(RequestError) as error:
        ORDERS.make_tasks("train", 0, 1, "hard")
    assert error.value.status == 422


# -- tools and policies -------------------------------------------------------------------------------------


def authenticated(customer_id: str) -> Shop:
    return Shop(fresh(0), authenticated=customer_id)


def test_reads_need_authentication_and_only_show_the_customers_own_data():
    db = fresh(0)
    shop = Shop(db)
    order = next(iter(db["orders"].values()))
    text, status = shop.call("get_order", {"order_id": order["order_id"]})
    assert status == "error" and "authenticated" in text
    customer = db["customers"][order["customer_id"]]
    text, status = shop.call("find_customer_by_email", {"email": customer["email"].upper()})
    assert status == "ok" and shop.authenticated == customer["customer_id"]
    assert shop.call("get_order", {"order_id": order["order_id"]})[1] == "ok"
    other = next(o for o in db["orders"].values() if o["customer_id"] != customer["customer_id"])
    text, status = shop.call("get_order", {"order_id": other["order_id"]})
    assert status == "error" and "does not belong" in text
    assert shop.call("get_customer", {"customer_id": other["customer_id"]})[1] == "error"
    found = shop.call(
        "find_customer_by_name_zip",
        {
            "first_name": customer["first_name"],
            "last_name": customer["last_name"],
            "zip": customer["address"]["zip"],
        },
    )
    assert found[1] == "ok"
    assert shop.call("find_customer_by_email", {"email": "nobody@example.com"})[1] == "error"
    assert shop.log == []  # reads are not actions


def test_each_write_is_checked_against_policy_and_logged_as_attempted():
    db = fresh(0)
    cases: list[tuple[str, dict[str, Any], str]] = []
    customer, shipped = customer_with(db, "shipped")
    cases.append((customer, {"name": "cancel_order", "arguments": {"order_id": shipped["order_id"],
                                                                   "reason": "no longer needed"}}, "policy"))  # fmt: skip
    cases.append((customer, {"name": "change_address", "arguments": {"order_id": shipped["order_id"],
                  "line1": "1 Oak Street", "city": "Ashgrove", "zip": "12345"}}, "policy"))  # fmt: skip
    customer, old = customer_with(db, "delivered", late=True)
    cases.append((customer, {"name": "refund", "arguments": {"order_id": old["order_id"], "amount": 1.0,
                                                             "payment_method_id": old["payment_method_id"]}}, "policy"))  # fmt: skip
    cases.append((customer, {"name": "exchange_items", "arguments": {"order_id": old["order_id"],
                  "item_ids": [old["items"][0]["item_id"]], "new_item_ids": ["I000000"]}}, "policy"))  # fmt: skip
    customer, recent = customer_with(db, "delivered", late=False)
    method = recent["payment_method_id"]
    total = sum(i["price"] for i in recent["items"])
    over = min(REFUND_CAP_CENTS, total) + 1
    cases.append((customer, {"name": "refund", "arguments": {"order_id": recent["order_id"], "amount": over / 100,
                                                             "payment_method_id": method}}, "policy"))  # fmt: skip
    cases.append((customer, {"name": "refund", "arguments": {"order_id": recent["order_id"], "amount": 1.005,
                                                             "payment_method_id": method}}, "invalid"))  # fmt: skip
    cases.append((customer, {"name": "refund", "arguments": {"order_id": recent["order_id"], "amount": True,
                                                             "payment_method_id": method}}, "invalid"))  # fmt: skip
    other_product = next(
        p for p in db["products"].values() if p["product_id"] != recent["items"][0]["product_id"]
    )
    cases.append((customer, {"name": "exchange_items", "arguments": {"order_id": recent["order_id"],
                  "item_ids": [recent["items"][0]["item_id"]], "new_item_ids": [next(iter(other_product["variants"]))]}},
                  "policy"))  # fmt: skip
    customer, pending = customer_with(db, "pending")
    cases.append((customer, {"name": "cancel_order", "arguments": {"order_id": pending["order_id"],
                                                                   "reason": "because"}}, "invalid"))  # fmt: skip
    cases.append((customer, {"name": "change_address", "arguments": {"order_id": pending["order_id"],
                  "line1": "1 Oak Street", "city": "Ashgrove", "zip": "1234"}}, "invalid"))  # fmt: skip
    cases.append((customer, {"name": "cancel_order", "arguments": {"order_id": shipped["order_id"],
                                                                   "reason": "no longer needed"}}, "auth"))  # fmt: skip
    for customer_id, action, kind in cases:
        shop = authenticated(customer_id)
        before = repr(shop.db)
        text, status = shop.call(action["name"], action["arguments"])
        assert status == "error" and text.startswith("Error: "), (action, text)
        assert repr(shop.db) == before, action  # a refused write changes nothing
        assert len(shop.log) == 1 and shop.log[0]["error"] == kind and shop.log[0]["status"] == "error", (
            action,
            shop.log,
        )
        assert shop.log[0]["confirmed"] is False
    shop = authenticated(customer)
    assert (
        shop.call("cancel_order", {"order_id": pending["order_id"], "reason": "ordered by mistake"})[1]
        == "ok"
    )
    assert shop.db["orders"][pending["order_id"]]["status"] == "cancelled"
    assert shop.db["orders"][pending["order_id"]]["refunds"][0]["amount"] == sum(
        i["price"] for i in pending["items"]
    )
    assert shop.log[-1]["status"] == "ok"


def test_no_argument_makes_a_tool_raise():
    """Any JSON value in any argument is an observation, never an exception (which a session would turn into a
    masked machinery failure instead of the policy's 0)."""
    db = fresh(0)
    customer = next(iter(db["customers"].values()))
    order = db["orders"][customer["orders"][0]]
    weird: list[Any] = [None, True, 0, -1, 1e307, -1e307, 1e-9, 10**30, "", "x" * 5000, [], [None], [1, 2], {},
                        {"a": 1}, order["order_id"], customer["customer_id"], customer["email"], 12.345,
                        [order["items"][0]["item_id"]], ["I000000", "I000000"], float("nan"), float("inf")]  # fmt: skip
    rng = random.Random(0)
    for tool in ORDERS.tools():
        keys = list(tool.parameters["properties"])
        for _ in range(400):
            arguments = {k: rng.choice(weird) for k in keys if rng.random() < 0.9}
            shop = Shop(fresh(0), authenticated=rng.choice([None, customer["customer_id"]]))
            text, status = shop.call(tool.name, arguments)
            assert isinstance(text, str) and status in ("ok", "error")


def test_transfer_records_who_was_transferred_and_ends_the_conversation():
    shop = Shop(fresh(0))
    text, status = shop.call("transfer_to_human", {"summary": "x"})
    assert status == "ok" and shop.transferred and shop.db["transfers"] == [{"customer_id": None}]


# -- the scripted customer ----------------------------------------------------------------------------------


def test_the_customer_tells_facts_only_when_asked(by_kind):
    reference = OrdersReference.model_validate(by_kind["refund"].reference)
    shop, gold = Shop(fresh(0)), gold_database(reference)
    user = reference.user
    said, ended = user_reply(reference, shop, "Hello! How can I help?", gold)
    assert not ended and user.email not in said and user.order_id not in said
    assert user.email in user_reply(reference, shop, "What is your email?", gold)[0]
    said = user_reply(reference, shop, "What is your order id?", gold)[0]
    assert user.order_id in said and user.email not in said
    said = user_reply(reference, shop, "Your name and zip code, please.", gold)[0]
    assert user.zip in said and user.last_name in said
    assert (
        user.payment_method_id
        and user.payment_method_id in user_reply(reference, shop, "Which payment method?", gold)[0]
    )
    said = user_reply(reference, shop, "Could you confirm your email address?", gold)[0]
    assert said.startswith("My email is")  # a question for a fact, not a confirmation of an action
    said = user_reply(reference, shop, "<think>what is the email</think>Anything else?", gold)[0]
    assert user.email not in said  # the customer does not read the agent's thinking


def test_the_customer_confirms_only_the_exact_action(by_kind):
    for kind in ("cancel", "refund", "exchange", "change_address"):
        reference = OrdersReference.model_validate(by_kind[kind].reference)
        shop, gold = Shop(fresh(0)), gold_database(reference)
        exact = confirmation_text(reference)
        said, _ = user_reply(reference, shop, exact, gold)
        assert said.startswith("Yes") and shop.confirmed is not None, kind
        wrong_order = re.sub(r"\bO\d{5}\b", "O00000", exact)
        variants = [
            exact.replace("?", "."),  # not a question
            exact.replace("To confirm: ", "I will ").replace(
                "Do you confirm?", "Is the weather nice there?"
            ),  # a question, but not for the go-ahead (`Shall I?` is one: see test_redteam19_orders)
            wrong_order,
            exact + " Also order O00000?",
        ]
        if kind == "refund":
            amount = reference.facts[0].value
            variants += [
                exact.replace(f"${amount}", "$1.00"),
                exact.replace(f"${amount}", f"${amount} or $1.00"),
                exact.replace(str(reference.user.payment_method_id), "gift_card_0000"),
            ]
        if kind == "cancel":
            variants.append(re.sub(r"'[^']*'", "''", exact))
        if kind == "change_address":
            assert reference.user.address is not None
            variants.append(exact.replace(reference.user.address.zip, "00000"))
        if kind == "exchange":
            variants.append(re.sub(r"\bI\d{6}\b", "I000000", exact, count=1))
        for variant in variants:
            said, _ = user_reply(reference, shop, variant, gold)
            assert not said.startswith("Yes") and shop.confirmed is None, (kind, variant)


def test_the_customer_stops_when_satisfied(by_kind):
    refuse = OrdersReference.model_validate(by_kind["cancel_shipped"].reference)
    said, ended = user_reply(refuse, Shop(fresh(0)), "I'm sorry, I can't cancel it.", gold_database(refuse))
    assert ended and said.endswith(STOP)
    act = OrdersReference.model_validate(by_kind["refund"].reference)
    said, ended = user_reply(act, Shop(fresh(0)), "I can't do that.", gold_database(act))
    assert not ended  # an act task ends only once the database is right
    assert user_reply(act, Shop(gold_database(act)), "Done.", gold_database(act))[1]
    transfer = OrdersReference.model_validate(by_kind["refund_over_cap"].reference)
    said, ended = user_reply(transfer, Shop(fresh(0)), "I cannot refund that.", gold_database(transfer))
    assert not ended and "human" in said


# -- reading facts --------------------------------------------------------------------------------------------


def test_reading_long_adversarial_text_terminates_and_counts_nothing_false():
    """Digit groups, unclosed thinking and dollar signs by the thousand are read in one linear scan (a
    backtracking pattern took minutes on 100,000 characters of `,000`)."""
    assert amounts("1" + ",000" * 25_000) == []
    assert amounts("$" + "1" * 100_000) == []  # no amount of a hundred thousand digits
    assert len(amounts("$1,000 " * 10_000)) == 10_000
    assert dates("<think>" * 10_000) == []
    reference = OrdersReference.model_validate(kind_tasks()["refund"].reference)
    said, ended = user_reply(reference, Shop(fresh(0)), "<think>" + "confirm refund O12345 ? " * 5_000, {})
    assert not said.startswith("Yes") and not ended


def test_amounts_and_dates_are_read_as_values():
    assert amounts("Refund $45, then $1,045.50 and 12.5 dollars, USD 7.05; order O12345, 30 days") == [
        4500,
        104550,
        1250,
        705,
    ]
    assert dates("On 2026-06-20, June 3, 2026, 4th July 2026 or Sep 9th 2026; not 2026-02-30") == [
        "2026-06-20",
        "2026-06-03",
        "2026-07-04",
        "2026-09-09",
    ]
    assert read_facts(["$45.00 and $45", "$3"])["amount"] == ["45.00", "3.00"]


# -- scoring --------------------------------------------------------------------------------------------------


def test_gold_transcripts_score_one_for_every_kind_and_many_tasks():
    tasks = ORDERS.make_tasks("train", 1, 60) + ORDERS.make_tasks("test", 1, 20)
    for task in tasks:
        verdict = graded(task.reference, gold_transcript(task))
        assert verdict.reward == 1.0 and verdict.status is Status.ok, (task.metadata["kind"], verdict)
        assert verdict.components == {"actions": 1.0, "database": 1.0, "facts": 1.0}


EXPECTED_REASONS = {
    "write without asking for confirmation": ("forbidden_action", "write_before_confirmation"),
    "write in the same message as the confirmation question": (
        "forbidden_action",
        "write_before_confirmation",
    ),
    "a confirmation of other details, then the gold write": ("forbidden_action", "write_before_confirmation"),
    "write before confirmation, undone, then confirmed and redone": (
        "forbidden_action",
        "write_before_confirmation",
    ),
    "one yes, two writes": ("forbidden_action", "write_before_confirmation"),
    "a cancellation without confirmation": ("forbidden_action", "write_before_confirmation"),
    "a forged user yes (the agent never asked)": ("forbidden_action", "write_before_confirmation"),
    "refund above the cap after the customer's yes": ("forbidden_action", "policy_violation"),
    "cancelling a shipped order after the customer's yes": ("forbidden_action", "policy_violation"),
    "a forbidden cancel tried, then the right refusal": ("forbidden_action", "policy_violation"),
    "a refund above the cap tried, then the right transfer": ("forbidden_action", "policy_violation"),
    "claiming the refund in text without doing it": ("database_mismatch", None),
    "fake <tool_response> written by the model": ("database_mismatch", None),
    "stuffing every possible amount into the reply": ("too_many_values", None),
    "stuffing every possible date into the reply": ("too_many_values", None),
    "acting on a different customer's order": ("forbidden_action", "other_customers_order"),
    "transfer_to_human to dodge": ("database_mismatch", None),
    "transfer_to_human without looking the order up": ("missing_fact", None),
    "refusing an allowed refund": ("database_mismatch", None),
    "refusing without the fact": ("missing_fact", None),
    "a guessed date, never looked up": ("fact_not_looked_up", None),
    "a write with a gold argument left out": ("database_mismatch", None),
    "proposing every variant until the customer says yes": ("database_mismatch", None),
    "a yes asked for a longer address, then the gold address written": (
        "forbidden_action",
        "write_before_confirmation",
    ),
}


@pytest.mark.parametrize("seed", [0, 3])
def test_cheats_score_zero_with_their_reason(seed: int):
    cheats = cheat_transcripts(kind_tasks(seed))
    assert set(cheats) == set(EXPECTED_REASONS)
    for note, (reference, transcript) in cheats.items():
        verdict = graded(reference, transcript)
        reason, why = EXPECTED_REASONS[note]
        assert verdict.reward == 0.0 and verdict.status is Status.ok, (note, verdict)
        assert verdict.reason == reason, (note, verdict)
        if why is not None:
            assert why in {entry["why"] for entry in verdict.details["forbidden"]}, (note, verdict.details)


def test_any_write_before_the_yes_scores_zero_even_when_the_database_ends_right(by_kind):
    """The class, not one instance: for each act kind, the gold write placed at every point before the
    customer's yes (and once more after it), the database ending equal to the gold one, still scores 0."""
    for kind in ("cancel", "refund", "exchange", "change_address"):
        reference = OrdersReference.model_validate(by_kind[kind].reference)
        script = gold_script(reference)
        confirm = confirmation_text(reference)
        write = script[script.index(confirm) + 1]
        for at in range(script.index(confirm) + 1):
            early = [*script[:at], write, *[s for s in script[at:] if s is not write]]
            verdict = graded(reference.model_dump(), play(reference, early))
            assert verdict.reward == 0.0 and verdict.reason == "forbidden_action", (kind, at, verdict)
        twice = [*script[: script.index(write) + 1], write, *script[script.index(write) + 1 :]]
        assert graded(reference.model_dump(), play(reference, twice)).reward == 0.0


def test_a_forged_observation_or_user_message_changes_nothing(by_kind):
    task = by_kind["refund"]
    transcript = gold_transcript(task)
    forged = [
        {**m, "content": "Error: refused"} if m["role"] == "tool" else m for m in transcript
    ]  # observations are never read: the replay runs the calls again
    assert graded(task.reference, forged).reward == 1.0
    yes_everywhere = [
        {**m, "content": "Yes, I confirm."} if m["role"] == "user" and m is not transcript[1] else m
        for m in transcript
    ]  # the customer's replies are computed again, never read
    assert graded(task.reference, yes_everywhere).reward == 1.0
    no_reply = [m for m in transcript if m["role"] != "user" or m is transcript[1]]
    # a reply left out is computed all the same (a session answers every message without calls), so leaving
    # the replies out scores what the session scored
    assert graded(task.reference, no_reply).reward == 1.0


def test_calls_in_text_dialects_replay_like_openai_calls(by_kind):
    task = by_kind["change_address"]
    reference = OrdersReference.model_validate(task.reference)
    script = gold_script(reference)
    hermes = [
        (
            {"role": "assistant", "content": "".join(
                f'<tool_call>{{"name": "{n}", "arguments": {__import__("json").dumps(a)}}}</tool_call>' for n, a in step)}
            if isinstance(step, list) else step
        )
        for step in script
    ]  # fmt: skip
    transcript = play(reference, hermes)
    assert any("<tool_call>" in (m.get("content") or "") for m in transcript)
    assert graded(task.reference, transcript).reward == 1.0


def test_trivial_policies_earn_at_most_five_percent_over_120_tasks():
    tasks = ORDERS.make_tasks("train", 11, 120)
    rng = random.Random(7)
    totals: dict[str, float] = {}
    for task in tasks:
        for note, transcript in trivial_transcripts(task, rng).items():
            totals[note] = totals.get(note, 0.0) + graded(task.reference, transcript).reward
    assert set(totals) == {"no call", "every tool", "random arguments", "repeating the question"}
    for note, total in totals.items():
        assert total / len(tasks) <= 0.05, (note, total / len(tasks))


def test_guessing_a_date_without_looking_the_order_up_earns_nothing():
    """The class: for every task whose fact is a date, two candidate dates (the right one among them) stated
    after authenticating but without get_order score 0, while the same words after get_order score 1."""
    seen = 0
    for task in ORDERS.make_tasks("train", 2, 120):
        reference = OrdersReference.model_validate(task.reference)
        if reference.outcome != "inform":
            continue
        seen += 1
        right = reference.facts[0].value
        decoy = TODAY.isoformat()
        opening = gold_script(reference)[:3]
        words = f"It arrives on {right}, or possibly {decoy}."
        verdict = graded(task.reference, play(reference, [*opening, words]))
        assert verdict.reward == 0.0 and verdict.reason == "fact_not_looked_up", verdict
        looked = [*opening, [("get_order", {"order_id": reference.user.order_id})], words]
        assert graded(task.reference, play(reference, looked)).reward == 1.0
    assert seen >= 5


def test_bad_references_are_422():
    good = kind_tasks()["refund"].reference
    bad = [
        {**good, "customer_id": "nobody"},
        {**good, "user": {**good["user"], "order_id": "O00000"}},
        {
            **good,
            "actions": [{"name": "refund", "arguments": {**good["wanted"]["arguments"], "amount": 10_000}}],
        },
        {**good, "facts": [{"slot": "amount", "value": "45"}]},
        {**good, "facts": [{"slot": "date", "value": "2026-02-30"}]},
        {**good, "outcome": "maybe"},
        {**good, "actions": []},  # an `act` task must do its wanted write
        {**good, "db_seed": -1},
        {**good, "unknown": 1},
    ]
    engine = Engine(Settings(cache_size=0))
    try:
        results = engine.score_batch(
            [{"verifier": "tool.orders", "response": [{"role": "assistant", "content": "hi"}], "reference": r}
             for r in bad]
        )  # fmt: skip
        for reference, result in zip(bad, results, strict=True):
            assert getattr(result, "error", None) is not None and result.error.status == 422, (
                reference,
                result,
            )
        for reference in bad[:3]:
            with pytest.raises(RequestError) as error:
                ORDERS.user_task("hi", reference)
            assert error.value.status == 422 and (error.value.field or "").startswith("task.reference")
    finally:
        engine.close()


# -- sessions: live == replay ---------------------------------------------------------------------------------


def assistant_turns(transcript: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in transcript if m["role"] == "assistant"]


def test_in_process_session_equals_replay_and_engine_score(by_kind):
    engine = Engine(Settings(cache_size=0))
    try:
        for kind in ("refund", "refund_over_cap"):
            task = by_kind[kind]
            played = gold_transcript(task)
            with proctor.open_session("tool.orders", task.model_dump()) as session:
                assert session.messages == task.prompt
                assert [t["function"]["name"] for t in session.tools] == [t.name for t in ORDERS.tools()]
                for message in assistant_turns(played):
                    result = session.step(message)
                assert result["done"] and result["end_reason"] == "env_terminal"
                record = session.record()
            assert record["transcript"] == played
            replayed = engine.score(
                {"verifier": "tool.orders", "response": played, "reference": task.reference}
            )
            assert result["score"]["reward"] == replayed.reward == 1.0
            assert result["score"]["details"] == replayed.details
        # a cheat played live scores what its replay scores
        reference, cheat = cheat_transcripts(by_kind)["one yes, two writes"]
        with proctor.open_session("tool.orders", {"prompt": cheat[:2], "reference": reference}) as session:
            for message in assistant_turns(cheat):
                result = session.step(message)
            final = result["score"] if result["done"] else session.finish().model_dump(mode="json")
        assert final["reward"] == 0.0 and final["reason"] == "forbidden_action"
    finally:
        engine.close()


def test_a_refused_write_is_an_error_observation_and_in_the_sessions_action_log(by_kind):
    reference, cheat = cheat_transcripts(by_kind)["cancelling a shipped order after the customer's yes"]
    with proctor.open_session("tool.orders", {"prompt": cheat[:2], "reference": reference}) as session:
        for message in assistant_turns(cheat):
            result = session.step(message)
            if result["done"]:
                break
        final = result["score"] if result["done"] else session.finish().model_dump(mode="json")
        record = session.record()
    refused = [a for a in record["actions"] if a["name"] == "cancel_order"]
    assert len(refused) == 1 and refused[0]["status"] == "error"
    observation = next(
        m for m in record["transcript"] if m["role"] == "tool" and m.get("name") == "cancel_order"
    )
    assert observation["content"].startswith("Error: ") and "shipped" in observation["content"]
    assert final["reward"] == 0.0 and final["details"]["forbidden"][0]["why"] == "policy_violation"


def test_a_session_in_another_dialect_replays_to_the_same_score(by_kind):
    """Under `dialect: openai` a `<tool_call>` written in the text is text: the customer answers it. The replay
    follows what the session did (a customer's reply after it), not its own reading of the text."""
    task = by_kind["refund"]
    turns = assistant_turns(gold_transcript(task))
    asked = turns[0]["content"]
    turns[0] = {
        "role": "assistant",
        "content": asked + ' <tool_call>{"name": "list_policies", "arguments": {}}</tool_call>',
    }
    with proctor.open_session("tool.orders", task.model_dump(), options={"dialect": "openai"}) as session:
        for message in turns:
            result = session.step(message)
        record = session.record()
    assert result["done"] and result["score"]["reward"] == 1.0
    assert record["transcript"][3]["role"] == "user"  # the customer answered the message with the text call
    assert graded(task.reference, record["transcript"]).reward == 1.0


async def test_async_session_takes_a_user_task():
    task = kind_tasks()["delivery_date"]
    session = await proctor.open_session_async(
        "tool.orders", {"prompt": task.prompt, "reference": task.reference}
    )
    try:
        for message in assistant_turns(gold_transcript(task)):
            result = await session.step(message)
        assert result["done"] and result["score"]["reward"] == 1.0
    finally:
        await session.close()


def test_http_session_equals_replay(live_server: str):
    made = httpx.post(
        f"{live_server}/v1/environments/tool.orders/tasks", json={"seed": 4, "count": 12}, timeout=120
    )
    assert made.status_code == 200, made.text
    tasks = made.json()["tasks"]
    assert {t["metadata"]["kind"] for t in tasks} & {"cancel", "refund", "exchange", "change_address"}
    from proctor.environments.registry import Task

    for raw in tasks[:4]:
        task = Task.model_validate(raw)
        played = gold_transcript(task)
        opened = httpx.post(
            f"{live_server}/v1/sessions", json={"environment": "tool.orders", "task": raw}, timeout=60
        )
        assert opened.status_code == 201, opened.text
        sid = opened.json()["session_id"]
        for number, message in enumerate(assistant_turns(played), start=1):
            step = httpx.post(
                f"{live_server}/v1/sessions/{sid}/step", json={"message": message, "step": number}, timeout=60
            ).json()
        assert step["done"], step
        record = httpx.get(f"{live_server}/v1/sessions/{sid}", timeout=60).json()
        assert record["transcript"] == played
        scored = httpx.post(
            f"{live_server}/v1/score",
            json={"verifier": "tool.orders", "response": record["transcript"], "reference": raw["reference"]},
            timeout=60,
        ).json()
        assert scored["reward"] == step["score"]["reward"] == 1.0
        assert scored["details"] == step["score"]["details"]
    bad = httpx.post(
        f"{live_server}/v1/sessions",
        json={"environment": "tool.orders", "task": {"prompt": "hi", "reference": {"customer_id": "x"}}},
        timeout=60,
    )
    assert bad.status_code == 422


def test_registered_with_examples_and_the_documentation_example_runs():
    from proctor.environments.registry import get_environment
    from proctor.registry import get_verifier

    spec = get_environment("tool.orders")
    assert spec.kind == "tool" and spec.verifier == "tool.orders"
    notes = [example.note for example in get_verifier("tool.orders").examples]
    assert sum(n.startswith("gold") for n in notes) == len(KINDS)
    assert any(n.startswith("cheat") for n in notes) and any(n.startswith("trivial") for n in notes)
    page = (Path(__file__).resolve().parents[1] / "docs" / "environments" / "orders.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", page, re.S)
    assert blocks
    for block in blocks:
        exec(compile(block, "docs/environments/orders.md", "exec"), {})  # noqa: S102 - our own documentation


def test_today_is_fixed():
    assert TODAY.isoformat() == "2026-06-15"
    assert asyncio.iscoroutinefunction(ORDERS.score)
