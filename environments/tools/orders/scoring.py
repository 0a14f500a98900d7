"""Grading an orders transcript: replay it, then compare databases, read the action log, read the facts.

`grade(reference, transcript)` is a pure function of both. It never trusts what the transcript says the
tools or the user answered: it replays the transcript on a fresh database (`replay`): each tool call the
session ran (a call read as the session reads it, any dialect, that the session answered with an
observation) is run again, and the scripted user's replies are computed again from the agent's own messages
(a `user` message in the transcript only says that the session read the message before it as one without
calls, in whatever dialect it was set to, and asked the customer; never what the customer said: a forged
"yes" confirms nothing; a message without calls that the transcript leaves unanswered, other than the last,
is answered all the same, as a session answers every one). The gold database is the fresh database after the
reference's gold writes. Reward 1 only when all of these hold, else 0 with the first failing reason:

- `forbidden_action`: the action log holds a forbidden write, even one undone later: a write made on an order
  of another customer (`other_customers_order`), a write the policy refused (`policy_violation`: a refund above
  the cap or the window, cancelling a shipped order ...), a cancel / refund / exchange / address change that
  was not exactly the action the customer confirmed in their last reply (`write_before_confirmation`; one yes
  allows one write);
- `database_mismatch`: the final database differs from the gold one (`details.diff` lists the differences);
- `missing_fact`: a required fact (a money amount or a date) is not among the values the agent's own messages
  state (messages without tool calls, `<think>` removed; values read as numbers and dates, never substrings);
- `fact_not_looked_up`: the agent stated a required fact that no tool it called had shown it (the value, as
  the tools write it, in no successful observation of the replay): a guessed date or amount earns nothing;
- `too_many_values`: the agent's messages state more than MAX_VALUES_PER_SLOT distinct amounts (or dates),
  so listing every candidate earns nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, get_args

from proctor.contract import ChatMessage, Verdict, content_text
from proctor.environments.tools.base import argument_problem
from proctor.environments.tools.orders.database import db_digest, diff, fresh, money
from proctor.environments.tools.orders.tasks import OrdersReference, gold_database
from proctor.environments.tools.orders.tools import CONFIRMED_WRITES, TOOLS, Shop
from proctor.environments.tools.orders.user import amounts, dates, user_reply, visible_text
from proctor.verifiers.reading.tool_calls import Dialect, ParsedCalls, parse_message

MAX_VALUES_PER_SLOT = 2
MAX_CALLS_PER_TURN = 12
"""The environment's `max_calls_per_turn`: calls beyond it in one message are never run (nor replayed)."""
_SPECS = {tool.name: tool for tool in TOOLS}
_SCHEMAS = {tool.name: tool.parameters for tool in TOOLS}
_DIALECTS = get_args(Dialect)


@dataclass
class Conversation:
    """One episode's world: the shop, the gold database the user compares with, and whether it has ended."""

    reference: OrdersReference
    shop: Shop
    gold_db: dict[str, Any]
    ended: bool = False
    agent_texts: list[str] = field(default_factory=list)
    observed: list[str] = field(default_factory=list)
    """The text of every tool call that succeeded, in order: what the agent was shown."""

    @classmethod
    def open(cls, reference: OrdersReference) -> Conversation:
        """A fresh database of the task's seed, nobody authenticated."""
        return cls(reference, Shop(fresh(reference.db_seed)), gold_database(reference))

    def call(self, name: str, arguments: dict[str, Any]) -> tuple[str, str]:
        """Run one tool call on the shop."""
        text, status = self.shop.call(name, arguments)
        if status == "ok":
            self.observed.append(text)
        return text, status

    def reply(self, message: str) -> str:
        """The user's reply to an assistant message without tool calls (the conversation may end)."""
        self.agent_texts.append(visible_text(message))
        text, ended = user_reply(self.reference, self.shop, message, self.gold_db)
        self.ended = self.ended or ended
        return text

    @property
    def over(self) -> bool:
        """Whether the episode has ended (the user said STOP, or the agent transferred)."""
        return self.ended or self.shop.transferred


def parsed_calls(message: ChatMessage) -> ParsedCalls:
    """The calls an assistant message makes, read as a session reads them (`auto` dialect, our schemas)."""
    raw = [call.model_dump(exclude_none=True) for call in message.tool_calls or []]
    return parse_message(raw, content_text(message.content), "auto", _SCHEMAS)


def _calls_in_some_dialect(message: ChatMessage) -> bool:
    """Whether a session in some dialect reads a call (or a malformed one) in the message: only then may
    tool messages, rather than the customer's reply, follow a message `auto` reads no call in."""
    raw = [call.model_dump(exclude_none=True) for call in message.tool_calls or []]
    text = content_text(message.content)
    for dialect in _DIALECTS:
        parsed = parse_message(raw, text, dialect, _SCHEMAS)
        if parsed.calls or parsed.errors:
            return True
    return False


def replay(reference: OrdersReference, transcript: list[ChatMessage]) -> Conversation:
    """Run the transcript again on a fresh database (see the module docstring); nothing after the episode's
    end counts."""
    conversation = Conversation.open(reference)
    assistant_turn = 0
    last_assistant = max((i for i, m in enumerate(transcript) if m.role == "assistant"), default=-1)
    for position, message in enumerate(transcript):
        if message.role != "assistant":
            continue
        if conversation.over:
            break
        assistant_turn += 1
        following: list[ChatMessage] = []
        for later in transcript[position + 1 :]:
            if later.role == "assistant":
                break
            following.append(later)
        parsed = parsed_calls(message)
        no_calls = not parsed.calls and not parsed.errors
        replied = any(m.role == "user" for m in following)
        if no_calls and not replied:
            final = position == last_assistant and not following  # `finish`'s final answer
            read_as_calls = any(m.role == "tool" for m in following) and _calls_in_some_dialect(message)
            replied = not final and not read_as_calls
        if replied:
            # the session read it as a message without calls (whatever its dialect) and the customer replied.
            # A session answers every such message but `finish`'s final one, so a reply left out of the
            # transcript (or a tool message put in its place after a message no dialect reads a call from) is
            # computed all the same: leaving out a STOP or the reply that ends a yes changes nothing.
            conversation.reply(content_text(message.content))
            continue
        if no_calls:  # the final message no one answered (finish), or calls read in the session's dialect
            conversation.agent_texts.append(visible_text(content_text(message.content)))
            continue
        answered = {m.tool_call_id for m in following if m.role == "tool" and m.tool_call_id}
        for index, call in enumerate(parsed.calls):
            call_id = call.id or f"call_{assistant_turn}_{index}"
            spec = _SPECS.get(call.name)
            if (
                index >= MAX_CALLS_PER_TURN
                or spec is None
                or argument_problem(spec, call.arguments) is not None
            ):
                continue  # the session answered it with an error and never ran it
            if call_id in answered:
                conversation.call(call.name, call.arguments)
    return conversation


def forbidden(reference: OrdersReference, log: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The forbidden writes of an action log, each with why (see the module docstring)."""
    found = []
    for number, entry in enumerate(log):
        why = None
        if entry["order_owner"] is not None and entry["order_owner"] != reference.customer_id:
            why = "other_customers_order"
        elif entry["error"] == "policy":
            why = "policy_violation"
        elif entry["tool"] in CONFIRMED_WRITES and not entry["confirmed"]:
            why = "write_before_confirmation"
        if why is not None:
            found.append(
                {"action": number, "why": why, "tool": entry["tool"], "arguments": entry["arguments"]}
            )
    return found


def read_facts(texts: list[str]) -> dict[str, list[str]]:
    """The distinct amounts and dates the agent's messages state, in order of first mention."""
    joined = "\n".join(texts)
    return {
        "amount": list(dict.fromkeys(money(cents) for cents in amounts(joined))),
        "date": list(dict.fromkeys(dates(joined))),
    }


def grade(reference: OrdersReference, transcript: list[ChatMessage]) -> Verdict:
    """The verdict on a transcript (module docstring)."""
    conversation = replay(reference, transcript)
    shop = conversation.shop
    bad = forbidden(reference, shop.log)
    gold = conversation.gold_db
    same = shop.db == gold
    facts = read_facts(conversation.agent_texts)
    missing = [fact.model_dump() for fact in reference.facts if fact.value not in facts[fact.slot]]
    unseen = [
        fact.model_dump()
        for fact in reference.facts
        if not any(f'"{fact.value}"' in text for text in conversation.observed)
    ]
    crowded = {slot: len(values) for slot, values in facts.items() if len(values) > MAX_VALUES_PER_SLOT}
    components = {
        "actions": 0.0 if bad else 1.0,
        "database": 1.0 if same else 0.0,
        "facts": 0.0 if missing or crowded or unseen else 1.0,
    }
    details: dict[str, Any] = {
        "writes": len(shop.log),
        "ended_by_user": conversation.ended,
        "transferred": shop.transferred,
        "facts_stated": facts,
    }
    reason = None
    if bad:
        reason = "forbidden_action"
        details["forbidden"] = bad[:10]
    elif not same:
        reason = "database_mismatch"
        details["diff"] = diff(gold, shop.db)
        details["gold_digest"], details["digest"] = db_digest(gold), db_digest(shop.db)
    elif crowded:
        reason = "too_many_values"
        details["crowded"] = crowded
    elif missing:
        reason = "missing_fact"
        details["missing"] = missing
    elif unseen:
        reason = "fact_not_looked_up"
        details["not_looked_up"] = unseen
    return Verdict(
        reward=1.0 if reason is None else 0.0,
        correct=reason is None,
        reason=reason,
        components=components,
        details=details,
    )
