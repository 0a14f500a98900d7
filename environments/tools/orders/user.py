"""The scripted customer of `tool.orders`: deterministic, so a transcript replays to the same replies.

The user reads each assistant message without a tool call (its text after any `<think>` block) and answers,
in this order of precedence:

1. A confirmation request (a question mark, an action's word, an order id and the word `confirm`, or another
   way to ask for the go-ahead, `shall I proceed?`, with a complete proposal; "can you confirm your email?",
   or an incomplete proposal that asks for a fact, is a question for a fact, step 3): the user reads the
   proposed action from the text (the action's word: cancel / exchange / address / refund, in that
   precedence; the order ids; for a refund the dollar amounts and the payment method ids; for an exchange the
   item ids; for an address its line, city and zip as whole words in that order, and no other zip code; for a
   cancellation the reason) and says `yes` only when it is exactly the write they want (`reference.wanted`),
   down to every detail. That yes lets the next write call, and only the next one, count as confirmed when it
   is exactly that action (`Shop.confirmed`). Anything else is a `no`; past MAX_REJECTED_PROPOSALS noes the
   user gives up (STOP), so the answers are no oracle to search for the gold write with.
2. The end: for an `act` task once the session's database equals the gold database (checked before step 1:
   no second yes), for a `refuse` task once the agent says it cannot (a word of refusal with the order id or
   the action's word), for an `inform` task once the agent states a date or an amount, the user thanks the
   agent and ends with STOP (the session ends: `env_terminal`). For a `transfer` task a refusal makes the user
   ask for a human.
3. Facts, only when asked: the email (`email`), name and zip (`zip`, `postal`), the order id (`order id`,
   `order number`, `which order`), the reason (`reason`, `why`), the new address (`address`), the payment
   method (`payment`), the item and variant (`item`, `variant`, `which one`).
4. Otherwise the user repeats the request.
"""

from __future__ import annotations

import re
from datetime import date
from typing import Any

from proctor.environments.tools.orders.tasks import OrdersReference
from proctor.environments.tools.orders.tools import Shop, canonical_action

STOP = "###STOP###"
ORDER_ID = re.compile(r"\bO\d{5}\b")
ITEM_ID = re.compile(r"\bI\d{6}\b")
_ZIP = re.compile(r"(?<![\w-])\d{5}(?![\w-])")
PAYMENT_ID = re.compile(r"\b(?:card|gift_card|paypal)_\d{4}\b")
MAX_READ_CHARS = 50_000
"""The customer and the grader read at most this much of one assistant message (after `<think>` blocks)."""
_CONFIRM = re.compile(r"\bconfirm", re.I)
_GO_AHEAD = re.compile(
    r"\b(?:proceed|go ahead|shall i|should i|may i|can i|do you want me to|would you like me to|"
    r"is (?:that|this) (?:ok|okay|alright|all right|correct|right|fine)|(?:ok|okay) to)\b",
    re.I,
)
"""Other ways to ask for the go-ahead; they make a confirmation request only with a complete proposal (a
question such as "which payment method should I refund it to?" asks for a fact)."""
MAX_REJECTED_PROPOSALS = 2
"""The user says no to this many confirmation requests; at the next wrong one they give up (the episode ends),
so the yes/no answers are no oracle an agent can search for the gold write with."""
_REFUSAL = re.compile(
    r"\b(?:cannot|can ?not|can't|can’t|unable|not able|not possible|not eligible|not allowed|won't be able)\b",
    re.I,
)
_ACTION_WORDS = (
    ("cancel_order", re.compile(r"\bcancel", re.I)),
    ("exchange_items", re.compile(r"\bexchang", re.I)),
    ("change_address", re.compile(r"\baddress", re.I)),
    ("refund", re.compile(r"\brefund", re.I)),
)
_TOPICS = (
    ("email", re.compile(r"\be-?mail", re.I)),
    ("name_zip", re.compile(r"\bzip\b|\bpostal|\bpost ?code", re.I)),
    ("order_id", re.compile(r"\border (?:id|number)|\bwhich order", re.I)),
    ("reason", re.compile(r"\breason|\bwhy\b", re.I)),
    ("address", re.compile(r"\baddress", re.I)),
    ("payment", re.compile(r"\bpayment", re.I)),
    ("items", re.compile(r"\bitems?\b|\bvariant|\bwhich one\b", re.I)),
)


def visible_text(text: str) -> str:
    """What the customer sees of an assistant message: the text without `<think>...</think>` blocks (an
    unclosed one hides the rest), at most MAX_READ_CHARS characters. One linear scan."""
    lowered = text.lower()
    parts: list[str] = []
    position = 0
    while True:
        start = lowered.find("<think>", position)
        if start < 0:
            parts.append(text[position:])
            break
        parts.append(text[position:start])
        end = lowered.find("</think>", start)
        if end < 0:
            break
        position = end + len("</think>")
    return " ".join(parts)[:MAX_READ_CHARS]


_NUMBER = re.compile(
    r"(?:(?P<pre>\$|\busd\b)\s*)?(?P<num>\d[\d,]*(?:\.\d+)?)(?P<post>\s*(?:dollars?|usd)\b)?", re.I
)
"""A number with what may make it money around it; every part after the digits is optional and the digits
are a character class, so a scan is linear (no backtracking over digit groups). The whitespace before the
digits belongs to the `$`: an optional whitespace run at the pattern's start made every position of a run of
spaces scan to the run's end (quadratic: 20,000 spaces took 7 seconds)."""
_GROUPED = re.compile(r"\d{1,3}(?:,\d{3})+|\d+")
_ISO_DATE = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
_MONTHS = {
    name: number
    for number, names in enumerate(
        (("january", "jan"), ("february", "feb"), ("march", "mar"), ("april", "apr"), ("may",), ("june", "jun"),
         ("july", "jul"), ("august", "aug"), ("september", "sep", "sept"), ("october", "oct"),
         ("november", "nov"), ("december", "dec")),
        start=1,
    )
    for name in names
}  # fmt: skip
_MONTH = "(?P<m>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<d>\d{1,2})(?:st|nd|rd|th)?"
_WORD_DATE = re.compile(
    rf"\b{_MONTH}\s+{_DAY},?\s+(?P<y>\d{{4}})\b|\b{_DAY.replace('?P<d>', '?P<d2>')}\s+"
    rf"{_MONTH.replace('?P<m>', '?P<m2>')},?\s+(?P<y2>\d{{4}})\b",
    re.I,
)


def amounts(text: str) -> list[int]:
    """Every money amount the text states, in cents, in order: `$45`, `$1,045.50`, `45.50 dollars`,
    `USD 45`. A bare number (an id, a count of days) is not money."""
    found = []
    for match in _NUMBER.finditer(text):
        if not match.group("pre") and not match.group("post"):
            continue
        number = match.group("num").rstrip(",")
        whole, _, decimals = number.partition(".")
        if len(decimals) > 2 or len(whole) > 12 or not _GROUPED.fullmatch(whole):
            continue  # not an amount as people write one (45.505, 1,00)
        found.append(int(whole.replace(",", "")) * 100 + int(decimals.ljust(2, "0") or "0"))
    return found


def dates(text: str) -> list[str]:
    """Every calendar date the text states, as ISO strings, in order: `2026-06-20`, `June 20, 2026`,
    `20 June 2026`, `Jun 20th 2026`. Impossible dates are skipped."""
    found: list[tuple[int, str]] = []
    for match in _ISO_DATE.finditer(text):
        found += [
            (match.start(), iso) for iso in [_iso(match.group(1), match.group(2), match.group(3))] if iso
        ]
    for match in _WORD_DATE.finditer(text):
        month = _MONTHS[(match.group("m") or match.group("m2")).casefold()]
        day, year = match.group("d") or match.group("d2"), match.group("y") or match.group("y2")
        iso = _iso(year, str(month), day)
        if iso:
            found.append((match.start(), iso))
    return [iso for _, iso in sorted(found)]


def _iso(year: str, month: str, day: str) -> str | None:
    try:
        return date(int(year), int(month), int(day)).isoformat()
    except ValueError:
        return None


def proposed_action(text: str, reference: OrdersReference) -> dict[str, Any] | None:
    """The write a confirmation request proposes, as `canonical_action` writes it, or None when it names no
    action word or not exactly one order."""
    name = next((name for name, pattern in _ACTION_WORDS if pattern.search(text)), None)
    orders = set(ORDER_ID.findall(text))
    if name is None or len(orders) != 1:
        return None
    order_id = orders.pop()
    lowered = " ".join(text.casefold().split())
    if name == "cancel_order":
        from proctor.environments.tools.orders.database import CANCEL_REASONS

        reasons = [reason for reason in CANCEL_REASONS if reason in lowered]
        if len(reasons) != 1:
            return None
        return canonical_action(name, {"order_id": order_id, "reason": reasons[0]})
    if name == "refund":
        money = set(amounts(text))
        methods = set(PAYMENT_ID.findall(text))
        if len(money) != 1 or len(methods) != 1:
            return None
        return canonical_action(
            name, {"order_id": order_id, "amount": money.pop() / 100, "payment_method_id": methods.pop()}
        )
    if name == "exchange_items":
        mentioned = list(dict.fromkeys(ITEM_ID.findall(text)))
        if not mentioned:
            return None
        wanted = reference.wanted
        if wanted is not None and wanted.name == name:
            old, new = wanted.arguments.get("item_ids", []), wanted.arguments.get("new_item_ids", [])
            if set(mentioned) == {*old, *new}:
                # the exact items the user asked for, and no others (in whatever order they are named)
                return canonical_action(name, {"order_id": order_id, "item_ids": old, "new_item_ids": new})
        # other items: a proposal all the same (so it counts as one the user said no to), read in pairs
        mentioned += [""] * (len(mentioned) % 2)
        return canonical_action(
            name, {"order_id": order_id, "item_ids": mentioned[::2], "new_item_ids": mentioned[1::2]}
        )
    address = reference.user.address
    if address is None:
        return None
    parts = {"line1": address.line1, "city": address.city, "zip": address.zip}
    # the line, the city and the zip as the user gave them, in that order and as whole words: `1865 Mill
    # Avenue` is not `865 Mill Avenue`, nor is an apartment put between the line and the city
    said = r"[\s,]*".join(re.escape(" ".join(value.casefold().split())) for value in parts.values())
    if not re.search(rf"(?<![\w-]){said}(?![\w-])", lowered):
        return None
    if set(_ZIP.findall(text)) != {address.zip}:
        return None  # one address proposed, not a list of candidates
    return canonical_action(name, {"order_id": order_id, **parts})


def confirmation_request(text: str) -> bool:
    """Whether the text asks the customer to confirm an action on an order: a question mark, an action's word,
    an order id and the word `confirm` (with another way to ask for the go-ahead, `shall I proceed?`, the
    proposal must also be complete: see `user_reply`)."""
    return bool(_CONFIRM.search(text) and _names_an_action(text))


def _names_an_action(text: str) -> bool:
    return bool(
        "?" in text and ORDER_ID.search(text) and any(pattern.search(text) for _, pattern in _ACTION_WORDS)
    )


def refusal(text: str) -> bool:
    """Whether the text refuses the request: a word of refusal and the order's id or an action's word (`I
    cannot find an account with that email` refuses nothing)."""
    return bool(
        _REFUSAL.search(text)
        and (ORDER_ID.search(text) or any(pattern.search(text) for _, pattern in _ACTION_WORDS))
    )


def _facts(reference: OrdersReference) -> dict[str, str]:
    user = reference.user
    told = {
        "email": f"My email is {user.email}.",
        "name_zip": f"I'm {user.first_name} {user.last_name}, zip code {user.zip}.",
        "order_id": f"The order id is {user.order_id}.",
    }
    if user.reason:
        told["reason"] = f"The reason is: {user.reason}."
    if user.address is not None:
        told["address"] = f"The new address is {user.address.line1}, {user.address.city}, {user.address.zip}."
    if user.payment_method_id:
        told["payment"] = f"Please use the original payment method of the order, {user.payment_method_id}."
    if user.items:
        told["items"] = user.items
    return told


def user_reply(
    reference: OrdersReference, shop: Shop, message: str, gold_db: dict[str, Any]
) -> tuple[str, bool]:
    """The user's answer to an assistant message without tool calls, and whether it ends the conversation.

    Sets (or clears) `shop.confirmed`: a yes confirms exactly the wanted action for the next write only."""
    text = visible_text(message)
    shop.confirmed = None
    if reference.outcome == "act" and shop.db == gold_db:
        # satisfied before anything else: a closing question that repeats the action, or a request to confirm
        # it again, gets no second yes
        return f"Thank you, that's all I needed. {STOP}", True
    told = _facts(reference)
    asked = [told[topic] for topic, pattern in _TOPICS if pattern.search(text) and topic in told]
    proposal = proposed_action(text, reference) if _names_an_action(text) else None
    if confirmation_request(text):
        # an incomplete proposal that asks for a fact (`can you confirm your email for the refund on
        # O12345?`) is a question, answered below
        is_request = proposal is not None or not asked
    else:
        is_request = proposal is not None and bool(_GO_AHEAD.search(text))
    if is_request:
        wanted = reference.wanted
        if (
            wanted is not None
            and proposal is not None
            and proposal == canonical_action(wanted.name, wanted.arguments)
        ):
            shop.confirmed = proposal
            return "Yes, I confirm.", False
        shop.rejected += 1
        if shop.rejected > MAX_REJECTED_PROPOSALS:
            return f"No. This is not what I asked for, and I give up for today. {STOP}", True
        return "No, that is not what I asked for.", False
    outcome = reference.outcome
    if outcome == "refuse" and refusal(text):
        return f"I see. Thank you for explaining. {STOP}", True
    if outcome == "inform" and (dates(text) or amounts(text)):
        return f"Thanks for letting me know. {STOP}", True
    if outcome == "transfer" and refusal(text):
        return "Then please transfer me to a human agent.", False
    if asked:
        return " ".join(dict.fromkeys(asked)), False
    return f"Could you please help me with this? {reference.request}", False
