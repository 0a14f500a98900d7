"""Red team of `tool.orders` (issue 19, item 1): each test is one way a policy could be paid for a wrong outcome
(or a way the grader could fail), written before its fix. Tests of attacks that the grader already refused
are kept as regressions and say so."""

from __future__ import annotations

import json
from typing import Any

import pytest

import proctor
from proctor.contract import ChatMessage, Status
from proctor.environments.tools.orders.database import _built, fresh, money
from proctor.environments.tools.orders.environment import (
    ORDERS,
    confirmation_text,
    gold_script,
    gold_transcript,
    kind_tasks,
    play,
)
from proctor.environments.tools.orders.scoring import grade, read_facts
from proctor.environments.tools.orders.tasks import OrdersReference, gold_database
from proctor.environments.tools.orders.tools import Shop
from proctor.environments.tools.orders.user import amounts, dates, user_reply


def graded(reference: Any, raw: list[dict[str, Any]]):
    reference = (
        reference if isinstance(reference, OrdersReference) else OrdersReference.model_validate(reference)
    )
    return grade(reference, [ChatMessage.model_validate(message) for message in raw])


@pytest.fixture(scope="module")
def refs() -> dict[str, OrdersReference]:
    return {kind: OrdersReference.model_validate(task.reference) for kind, task in kind_tasks().items()}


def before_confirmation(reference: OrdersReference) -> list[Any]:
    script = gold_script(reference)
    return script[: script.index(confirmation_text(reference))]


def reply_to(reference: OrdersReference, text: str, shop: Shop | None = None) -> tuple[str, bool]:
    shop = shop or Shop(fresh(reference.db_seed))
    return user_reply(reference, shop, text, gold_database(reference))


# -- quadratic reading ------------------------------------------------------------------------------------------


@pytest.mark.timeout(120)  # a hang guard, not a timing assertion: the quadratic scan took hours on this input
def test_long_whitespace_is_read_in_linear_time():
    """Finding (confirmed): the money pattern began with an optional `$` and `\\s*`, so at every position of a
    run of whitespace the scan walked to the run's end: 20,000 spaces took 7 s, and the grader reads the
    agent's messages joined (30 turns of 50,000 characters), hours of CPU in the service per transcript."""
    assert amounts(" " * 300_000) == []
    assert amounts("\n\t " * 100_000 + "$5") == [500]
    assert amounts("$" + " " * 300_000) == []
    assert amounts(("$ " + " " * 1000) * 300) == []
    assert dates(" " * 300_000 + "June 3, 2026") == ["2026-06-03"]
    assert dates(("June " + " " * 1000) * 300) == []
    assert dates(("3 " + " " * 1000) * 300) == []
    assert read_facts([" " * 50_000] * 30) == {"amount": [], "date": []}


@pytest.mark.timeout(120)
def test_a_customer_reading_long_whitespace_answers(refs):
    """The customer reads every message too (a confirmation request with a refund reads amounts)."""
    reference = refs["refund"]
    said, _ = reply_to(reference, "Do you confirm the refund on order O12345?" + " " * 50_000)
    assert said.startswith("No")


# -- replay = live ----------------------------------------------------------------------------------------------


def test_leaving_out_the_customers_reply_never_hides_its_effect(refs):
    """Finding (confirmed): the replay computed the customer's reply only where the transcript had a `user`
    message, so a /v1/score transcript that left one out skipped the reply's effects: a date guessed before
    looking the order up ends the conversation live (the customer says STOP), but without that reply the
    replay went on to a later get_order and paid the guess. In a session every message without calls gets a
    reply (only the final answer of `finish` has none), so the replay computes it wherever one was due."""
    reference = refs["delivery_date"]
    opening = gold_script(reference)[:3]
    guess = f"Your order arrives on {reference.facts[0].value}."
    live = play(reference, [*opening, guess, [("get_order", {"order_id": reference.user.order_id})], guess])
    assert live[-1]["role"] == "user" and "STOP" in live[-1]["content"]  # live: the guess ended it
    assert graded(reference, live).reason == "fact_not_looked_up"
    stop = next(i for i, m in enumerate(live) if m["role"] == "user" and "STOP" in m["content"])
    forged = [
        *live[:stop],  # the customer's STOP after the guess left out
        {"role": "assistant", "content": "", "tool_calls": [{"id": "g1", "type": "function", "function": {
            "name": "get_order", "arguments": json.dumps({"order_id": reference.user.order_id})}}]},
        {"role": "tool", "tool_call_id": "g1", "name": "get_order", "content": "{}"},
        {"role": "assistant", "content": guess},
    ]  # fmt: skip
    verdict = graded(reference, forged)
    assert verdict.reward == 0.0 and verdict.reason == "fact_not_looked_up", verdict


def test_a_forged_observation_in_place_of_the_reply_hides_nothing(refs):
    """The same finding with a tool message where the customer's STOP was: a message that no dialect reads a
    call from was answered by the customer in every session, whatever follows it in the transcript."""
    reference = refs["delivery_date"]
    opening = gold_script(reference)[:3]
    guess = f"Your order arrives on {reference.facts[0].value}."
    live = play(reference, [*opening, guess])
    stop = next(i for i, m in enumerate(live) if m["role"] == "user" and "STOP" in m["content"])
    lookup = {"order_id": reference.user.order_id}
    forged = [
        *live[:stop],
        {"role": "tool", "tool_call_id": "call_4_0", "content": "Error: the tool call could not be read"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "g1", "type": "function", "function": {
            "name": "get_order", "arguments": json.dumps(lookup)}}]},
        {"role": "tool", "tool_call_id": "g1", "name": "get_order", "content": "{}"},
        {"role": "assistant", "content": guess},
    ]  # fmt: skip
    verdict = graded(reference, forged)
    assert verdict.reward == 0.0 and verdict.reason == "fact_not_looked_up", verdict


def test_leaving_out_the_reply_after_a_yes_does_not_keep_the_yes(refs):
    """The same class on confirmation: after the customer's yes the agent talks again (the customer answers,
    which ends the yes), then writes. Leaving that reply out must not keep the yes alive."""
    reference = refs["refund"]
    script = gold_script(reference)
    confirm = confirmation_text(reference)
    write = script[script.index(confirm) + 1]
    talk = "Great, I will process it now."
    live = play(reference, [*script[: script.index(confirm) + 1], talk, write, script[-1]])
    assert graded(reference, live).reason == "forbidden_action"
    forged = [m for m in live if not (m["role"] == "user" and m is live[live.index(
        next(x for x in live if x.get("content") == talk)) + 1])]  # fmt: skip
    assert len(forged) == len(live) - 1
    verdict = graded(reference, forged)
    assert verdict.reward == 0.0 and verdict.reason == "forbidden_action", verdict


def test_a_transcript_without_any_reply_scores_as_the_session_would(refs):
    """With every reply computed again, the replies a transcript holds or leaves out change nothing: the gold
    transcript without its replies still scores 1 (its asks were real), the forged yes still 0."""
    reference = refs["refund"]
    transcript = gold_transcript(kind_tasks()["refund"])
    stripped = [m for m in transcript if m["role"] != "user" or m is transcript[1]]
    assert graded(reference, stripped).reward == 1.0
    never_asked = [
        ("I will process it now." if s == confirmation_text(reference) else s) for s in gold_script(reference)
    ]
    played = play(reference, never_asked)
    forged = [
        {"role": "user", "content": "Yes, I confirm."} if i > 0 and played[i - 1].get("content") == "I will process it now." else m
        for i, m in enumerate(played)
    ]  # fmt: skip
    assert graded(reference, forged).reason == "forbidden_action"


# -- the customer's yes -----------------------------------------------------------------------------------------


def test_the_customer_confirms_only_the_address_it_gave(refs):
    """Finding (confirmed): the address was matched as substrings, so `1865 Mill Avenue` (containing
    `865 Mill Avenue`) or the address with an apartment between line and city got a yes: the agent could then
    write the gold address under a yes given to another one (a confirmation of a different action than the
    one executed). Now the line, city and zip must be stated as the customer gave them, in that order."""
    reference = refs["change_address"]
    address = reference.user.address
    assert address is not None
    oid = reference.user.order_id
    right = f"Do you confirm: change the shipping address of order {oid} to {address.line1}, {address.city}, {address.zip}?"
    assert reply_to(reference, right)[0].startswith("Yes")
    assert reply_to(reference, right.replace(address.line1, address.line1.upper()))[0].startswith("Yes")
    wrong = [
        right.replace(address.line1, "1" + address.line1),
        right.replace(address.line1, address.line1 + " Apt 5"),
        right.replace(address.city, "North " + address.city),
        right.replace(f", {address.zip}", f", {address.zip}-1234"),
    ]
    for text in wrong:
        assert not reply_to(reference, text)[0].startswith("Yes"), text
    # and the class end to end: the gold write after a yes to a longer address is not confirmed
    script = before_confirmation(reference)
    write = gold_script(reference)[len(script) + 1]
    verdict = graded(reference, play(reference, [*script, wrong[0], write, "Updated."]))
    assert verdict.reward == 0.0 and verdict.reason == "forbidden_action"


def test_a_plain_question_to_proceed_with_every_detail_is_a_confirmation_request(refs):
    """The author's known gap (policy-fair, fixed): `Shall I proceed?` with the exact action was not read as a
    confirmation request (no word `confirm`), so a correct agent got its request repeated. Now a question that
    asks to go ahead and states a complete action is one; a question that states no complete action is still
    answered as a question for facts."""
    for kind in ("refund", "change_address", "cancel", "exchange"):
        reference = refs[kind]
        base = confirmation_text(reference).replace(" Do you confirm?", "").replace("To confirm: ", "")
        for ask in (
            "Shall I proceed?",
            "Should I go ahead?",
            "Is that correct?",
            "Can I go ahead with this?",
        ):
            said, _ = reply_to(reference, f"I will do this: {base} {ask}")
            assert said.startswith("Yes"), (kind, ask, said)
        script = before_confirmation(reference)
        rest = gold_script(reference)[len(script) + 1 :]
        verdict = graded(
            reference,
            play(reference, [*script, f"I will {base[0].lower()}{base[1:]} Shall I proceed?", *rest]),
        )
        assert verdict.reward == 1.0, (kind, verdict)
    refund = refs["refund"]
    said, _ = reply_to(refund, f"Which payment method should I refund order {refund.user.order_id} to?")
    assert refund.user.payment_method_id in said  # a question for a fact, not a proposal
    said, _ = reply_to(
        refund, f"Can you confirm the payment method for the refund on order {refund.user.order_id}?"
    )
    assert refund.user.payment_method_id in said


def test_refuted_the_refund_amount_by_proposals(refs):
    """Refuted: proposing every candidate refund amount until the customer says yes states more than two
    amounts, which is `too_many_values` (or, past MAX_REJECTED_PROPOSALS, the customer gives up)."""
    reference = refs["refund"]
    assert reference.wanted is not None
    db = _built(reference.db_seed)
    oid, method = reference.user.order_id, reference.user.payment_method_id
    right = round(reference.wanted.arguments["amount"] * 100)
    prices = sorted({v["price"] for p in db["products"].values() for v in p["variants"].values()})
    candidates = [c for c in prices if c != right][:3] + [right]
    asks = [f"Do you confirm: refund ${money(c)} on order {oid} to {method}?" for c in candidates]
    script = [*gold_script(reference)[:2], "Which payment method should the refund go to?", *asks]
    script += [[("refund", dict(reference.wanted.arguments))], f"Refunded ${money(right)}."]
    assert graded(reference, play(reference, script)).reward == 0.0


def test_the_confirmation_answer_is_not_an_oracle_for_the_gold_write(refs):
    """Finding (confirmed): the customer answered every proposal yes or no, so an agent could find the gold
    exchange by proposing every variant of the product in turn (an exchange has no fact to cap the values it
    states) and be paid. Now the customer gives up after MAX_REJECTED_PROPOSALS wrong proposals (the episode
    ends, the write never happens); two are forgiven."""
    reference = refs["exchange"]
    assert reference.wanted is not None
    oid = reference.user.order_id
    old, new = reference.wanted.arguments["item_ids"][0], reference.wanted.arguments["new_item_ids"][0]
    shop = Shop(fresh(reference.db_seed))
    gold = gold_database(reference)
    answers = []
    for candidate in ("I000001", "I000002", "I000003", new):
        text = f"Do you confirm: in order {oid}, exchange item {old} for item {candidate}?"
        answers.append(user_reply(reference, shop, text, gold))
    assert [ended for _, ended in answers[:3]] == [False, False, True], answers  # the third no ends it
    script = gold_script(reference)
    confirm = confirmation_text(reference)
    at = script.index(confirm)
    wrong = [confirm.replace(new, candidate) for candidate in ("I000001", "I000002", "I000003")]
    assert graded(reference, play(reference, [*script[:at], *wrong, *script[at:]])).reward == 0.0
    assert graded(reference, play(reference, [*script[:at], *wrong[:2], *script[at:]])).reward == 1.0


def test_after_the_wanted_write_no_second_yes(refs):
    """Once the wanted write is done (the database is the gold one), the customer is satisfied: a closing
    question that repeats the action's details, or a request to confirm the same write again, ends the
    conversation instead of getting a yes that a second write could use."""
    reference = refs["refund"]
    script = gold_script(reference)
    confirm = confirmation_text(reference)
    done = script[: script.index(confirm) + 2]
    amount = reference.facts[0].value
    closing = (
        f"The refund of ${amount} on order {reference.user.order_id} to {reference.user.payment_method_id} is "
        "done. Can I help you with anything else?"
    )
    for text in (closing, confirm):
        transcript = play(reference, [*done, text, script[script.index(confirm) + 1], closing])
        replies = [m["content"] for m in transcript if m["role"] == "user"]
        assert "STOP" in replies[-1] and not replies[-1].startswith("Yes"), replies
        assert graded(reference, transcript).reward == 1.0  # the second write was never run


# -- refusals -----------------------------------------------------------------------------------------------------


def test_a_refusal_is_about_the_request_not_any_cannot(refs):
    """Policy-fair (fixed): on a `refuse` task any `cannot` ended the conversation, even `I cannot find an
    account with that email`; the customer now takes a refusal only when it names the action or the order."""
    reference = refs["cancel_shipped"]
    said, ended = reply_to(
        reference, "I'm sorry, I cannot find an account with that email. What is your zip code?"
    )
    assert not ended and reference.user.zip in said
    said, ended = reply_to(
        reference, f"I'm sorry, order {reference.user.order_id} has shipped, so I cannot cancel it."
    )
    assert ended


# -- refuted attacks, kept as regressions ---------------------------------------------------------------------


def test_refuted_several_small_refunds_above_the_cap(refs):
    """Refuted: a refund above the cap split into smaller refunds: the customer confirms only the write it
    asked for, so the parts are unconfirmed (and the database is not the gold one, which is a transfer)."""
    reference = refs["refund_over_cap"]
    assert reference.wanted is not None
    oid, method = reference.user.order_id, reference.user.payment_method_id
    total = round(reference.wanted.arguments["amount"] * 100)
    half = money(total // 2)
    part = {"order_id": oid, "amount": total // 2 / 100, "payment_method_id": method}
    script = [
        *gold_script(reference)[:4],
        f"Do you confirm: refund ${half} on order {oid} to {method}?",
        [("refund", part)],
        f"Do you confirm: refund ${half} on order {oid} to {method}?",
        [("refund", part)],
        f"Refunded ${money(total)} in two parts.",
    ]
    verdict = graded(reference, play(reference, script))
    assert verdict.reward == 0.0 and verdict.reason == "forbidden_action"


def test_refuted_values_in_words_spread_or_in_ranges(refs):
    """Refuted: words are not read as values (`twenty-eight dollars` states nothing), values spread over
    several messages are counted together, a range states both ends."""
    reference = refs["refund"]
    over = refs["refund_over_cap"]
    said = (
        "I'm sorry, a refund of two hundred and sixty dollars is above the limit, so I cannot do it myself."
    )
    words = play(over, [*gold_script(over)[:4], said, gold_script(over)[-1]])
    assert graded(over, words).reason == "missing_fact"
    spread = play(
        reference, [*gold_script(reference)[:4], "Is it $1.00?", "Or $2.00?", *gold_script(reference)[4:]]
    )
    assert graded(reference, spread).reason == "too_many_values"
    when = refs["delivery_date"]
    opening = gold_script(when)[:4]
    assert (
        graded(
            when, play(when, [*opening, "It arrives between 2026-06-15 and 2026-06-17, or 2026-06-19."])
        ).reason
        == "too_many_values"
    )


def test_refuted_crashing_arguments_are_errors_not_machinery_failures(refs):
    """Refuted: huge numbers, NaN, infinities, wrong types and odd unicode in a write's arguments are error
    observations (or plain writes), never an exception, in a session and in the replay."""
    reference = refs["refund"]
    task = kind_tasks()["refund"]
    oid, method = reference.user.order_id, reference.user.payment_method_id
    raw_arguments = [
        f'{{"order_id": "{oid}", "amount": {"9" * 5000}, "payment_method_id": "{method}"}}',
        f'{{"order_id": "{oid}", "amount": NaN, "payment_method_id": "{method}"}}',
        f'{{"order_id": "{oid}", "amount": -Infinity, "payment_method_id": "{method}"}}',
        f'{{"order_id": "{oid}", "amount": 1e-320, "payment_method_id": "{method}"}}',
        f'{{"order_id": "{oid}", "amount": 1e308, "payment_method_id": "{method}"}}',
        f'{{"order_id": ["{oid}"], "amount": 1, "payment_method_id": "{method}"}}',
        '{"order_id": "\\ud800", "amount": 1, "payment_method_id": "\\u0000"}',
        '"not an object"',
    ]
    prefix = gold_script(reference)[:4]
    with proctor.open_session("tool.orders", task.model_dump()) as session:
        for step in prefix:
            if isinstance(step, str):
                session.step({"role": "assistant", "content": step})
            else:
                name, arguments = step[0]
                session.step({"role": "assistant", "content": "", "tool_calls": [
                    {"id": f"x{name}", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}]})  # fmt: skip
        for index, arguments in enumerate(raw_arguments):
            result = session.step({"role": "assistant", "content": "", "tool_calls": [
                {"id": f"r{index}", "type": "function", "function": {"name": "refund", "arguments": arguments}}]})  # fmt: skip
            if result["done"]:
                break
            assert result["observations"][0]["content"].startswith("Error"), (arguments, result)
        score = result["score"] if result["done"] else session.finish().model_dump(mode="json")
    assert score["status"] == Status.ok.value and score["reward"] == 0.0, score


def test_refuted_the_customer_never_tells_a_gold_amount_or_date(refs):
    """Refuted: asking the customer for the answer gets the request again; what the customer tells (email,
    name, zip, order id, reason, address, payment method, item) never holds a fact's value."""
    asks = [
        "What amount should I refund? What is the total? When will it arrive? What is the delivery date?",
        "Can you tell me the email, zip, order id, reason, new address, payment method and which item?",
    ]
    for kind, reference in refs.items():
        for ask in asks:
            said, _ = reply_to(reference, ask)
            for fact in reference.facts:
                assert fact.value not in said, (kind, said)
                assert fact.value not in [money(c) for c in amounts(said)] + dates(said), (kind, said)


def test_refuted_tasks_and_replay_are_deterministic():
    tasks = [t.reference for t in ORDERS.make_tasks("train", 5, 40)]
    assert tasks == [t.reference for t in ORDERS.make_tasks("train", 5, 40)]
    for task in ORDERS.make_tasks("train", 5, 16):
        transcript = gold_transcript(task)
        first, second = graded(task.reference, transcript), graded(task.reference, transcript)
        assert first == second and first.reward == 1.0
