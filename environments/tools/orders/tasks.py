"""Tasks of `tool.orders`: the reference a transcript is graded against, and seeded task generation.

A task is one customer with one request about one order. Its reference says what the simulated user knows
and wants (`user`, `request`, `wanted`: the one write they will confirm), what the right outcome is
(`outcome`: `act` = do the write, `refuse` = the policy forbids it, `inform` = tell a fact, `transfer` = hand
over to a human), the gold writes (`actions`, replayed on a fresh database to get the gold database) and the
facts the agent must tell (`facts`: a money amount or a date, read as structured values).

Kinds: `cancel`, `refund`, `exchange`, `change_address` (act); `cancel_shipped`, `refund_late` (refuse, and
tell the delivery date); `refund_over_cap` (transfer, and tell the amount that needs it); `delivery_date` (inform). Generation is seeded like the
puzzles: an item's random stream is a hash of (name, version, split, seed, index, attempt), and its split is a
hash of its content, so train and test never share a task.
"""

from __future__ import annotations

import json
import random
import re
from datetime import date
from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from proctor.environments.puzzles.seeding import canonical, content_split, item_rng, puzzle_id
from proctor.environments.registry import GenerationError
from proctor.environments.tools.orders.database import (
    CANCEL_REASONS,
    CANCELLABLE,
    CITIES,
    REFUND_CAP_CENTS,
    REFUND_WINDOW_DAYS,
    STREET_KINDS,
    STREETS,
    _built,
    days_since_delivery,
    fresh,
    money,
    order_total,
)
from proctor.environments.tools.orders.tools import WRITE_TOOLS, Shop

NAME = "tool.orders"
VERSION = "1"
BUNDLED_DB_SEED = 0
BUNDLED_DATABASES = 32
"""Bundled tasks use the databases of seeds 0..31 (40 customers each), so tasks rarely repeat."""
MAX_DB_SEED = 2**31 - 1
MAX_ATTEMPTS = 3_000
KINDS = (
    "cancel",
    "refund",
    "exchange",
    "change_address",
    "cancel_shipped",
    "refund_late",
    "refund_over_cap",
    "delivery_date",
)

INSTRUCTIONS = (
    "You are a customer-service agent of an online shop. Help the customer using the tools. Rules: "
    "authenticate the customer first (find them by email, or by name and zip code); only act on that "
    "customer's own orders; follow the shop's policies (list_policies); before any cancel_order, refund, "
    "exchange_items or change_address, state the exact action with every detail (order id, amount and "
    "payment method, item ids, address, reason) and ask the customer to confirm it, and act only after they "
    "say yes; one confirmation allows one action. When the policy forbids what the customer asks, say so and "
    "change nothing; transfer_to_human only when a request needs a human. Tell the customer the facts they ask "
    "for (amounts as $12.34, dates as YYYY-MM-DD)."
)


class GoldAction(BaseModel):
    """One write: a tool name and its arguments."""

    model_config = ConfigDict(extra="forbid")

    name: Literal["cancel_order", "refund", "exchange_items", "change_address", "transfer_to_human"]
    arguments: dict[str, Any] = Field(default_factory=dict)


class Fact(BaseModel):
    """A fact the agent must tell: a money amount (`"45.00"`) or a date (`"2026-06-20"`)."""

    model_config = ConfigDict(extra="forbid")

    slot: Literal["amount", "date"]
    value: str

    @model_validator(mode="after")
    def _well_formed(self) -> Fact:
        if self.slot == "amount" and not re.fullmatch(r"\d{1,7}\.\d\d", self.value):
            raise ValueError("an amount fact is written like 45.00")
        if self.slot == "date":
            try:
                date.fromisoformat(self.value)
            except ValueError:
                raise ValueError("a date fact is written like 2026-06-20") from None
        return self


class Address(BaseModel):
    """A shipping address as change_address takes it."""

    model_config = ConfigDict(extra="forbid")

    line1: str = Field(min_length=1, max_length=200)
    city: str = Field(min_length=1, max_length=100)
    zip: str = Field(pattern=r"^\d{5}$")


class UserProfile(BaseModel):
    """What the simulated user knows and tells when asked."""

    model_config = ConfigDict(extra="forbid")

    first_name: str = Field(min_length=1, max_length=100)
    last_name: str = Field(min_length=1, max_length=100)
    email: str = Field(min_length=3, max_length=200)
    zip: str = Field(pattern=r"^\d{5}$")
    order_id: str = Field(min_length=1, max_length=40)
    reason: str | None = Field(default=None, max_length=200)
    address: Address | None = None
    payment_method_id: str | None = Field(default=None, max_length=100)
    items: str | None = Field(default=None, max_length=500, description="Which item to exchange for which.")


class OrdersReference(BaseModel):
    """What an orders transcript is graded against (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")

    db_seed: int = Field(default=BUNDLED_DB_SEED, ge=0, le=MAX_DB_SEED)
    customer_id: str = Field(min_length=1, max_length=100)
    kind: str = Field(default="custom", max_length=50)
    outcome: Literal["act", "refuse", "inform", "transfer"]
    request: str = Field(min_length=1, max_length=2_000)
    user: UserProfile
    wanted: GoldAction | None = Field(
        default=None, description="The one write the user asks for and confirms."
    )
    actions: list[GoldAction] = Field(default_factory=list, max_length=8, description="The gold writes.")
    facts: list[Fact] = Field(default_factory=list, max_length=4)

    @field_validator("actions")
    @classmethod
    def _writes(cls, value: list[GoldAction]) -> list[GoldAction]:
        if any(action.name not in WRITE_TOOLS for action in value):
            raise ValueError("gold actions are write tools")
        return value

    @model_validator(mode="after")
    def _replays(self) -> OrdersReference:
        db = _built(self.db_seed)
        if self.customer_id not in db["customers"]:
            raise ValueError(f"customer_id {self.customer_id!r} is not in database {self.db_seed}")
        order = db["orders"].get(self.user.order_id)
        if order is None or order["customer_id"] != self.customer_id:
            raise ValueError("user.order_id must be an order of customer_id")
        if self.outcome == "act" and (self.wanted is None or [self.wanted] != self.actions):
            raise ValueError("an `act` task's gold actions are exactly the wanted write")
        gold_database(self)  # every gold write must succeed on a fresh database
        return self


def gold_database(reference: OrdersReference) -> dict[str, Any]:
    """The database after the gold writes, done as the task's customer (a copy; cached per reference)."""
    return json.loads(_gold_database(canonical(reference_key(reference))))


def reference_key(reference: OrdersReference) -> dict[str, Any]:
    """What the gold database depends on."""
    return {
        "db_seed": reference.db_seed,
        "customer_id": reference.customer_id,
        "actions": [action.model_dump(mode="json") for action in reference.actions],
    }


@lru_cache(maxsize=256)
def _gold_database(key: str) -> str:
    parsed = json.loads(key)
    shop = Shop(fresh(parsed["db_seed"]), authenticated=parsed["customer_id"])
    for action in parsed["actions"]:
        text, status = shop.call(action["name"], action["arguments"])
        if status != "ok":
            raise ValueError(f"gold action {action['name']} fails on a fresh database: {text}")
    return json.dumps(shop.db)


# -- generation ---------------------------------------------------------------------------------------------


def _options(options: dict[str, str]) -> str:
    return ", ".join(options.values())


def _new_address(rng: random.Random, current: dict[str, str]) -> dict[str, str]:
    while True:
        address = {
            "line1": f"{rng.randrange(1, 999)} {rng.choice(STREETS)} {rng.choice(STREET_KINDS)}",
            "city": rng.choice(CITIES),
            "zip": f"{rng.randrange(10_000, 99_999):05d}",
        }
        if address != current:
            return address


def _draw(rng: random.Random, kind: str, db: dict[str, Any]) -> dict[str, Any] | None:
    """One task of `kind` on the database, or None when the drawn order does not fit the kind."""
    order = db["orders"][rng.choice(sorted(db["orders"]))]
    customer = db["customers"][order["customer_id"]]
    oid = order["order_id"]
    user: dict[str, Any] = {
        "first_name": customer["first_name"],
        "last_name": customer["last_name"],
        "email": customer["email"],
        "zip": customer["address"]["zip"],
        "order_id": oid,
    }
    days = days_since_delivery(order)
    fits_refund = order["status"] == "delivered" and days is not None and days <= REFUND_WINDOW_DAYS
    wanted: dict[str, Any] | None = None
    actions: list[dict[str, Any]] = []
    facts: list[dict[str, str]] = []
    pm = order["payment_method_id"]
    if kind in ("cancel", "cancel_shipped"):
        if order["status"] not in (CANCELLABLE if kind == "cancel" else ("shipped",)):
            return None
        reason = rng.choice(CANCEL_REASONS)
        user["reason"] = reason
        wanted = {"name": "cancel_order", "arguments": {"order_id": oid, "reason": reason}}
        request = "Hi, I'd like to cancel an order I placed recently."
        if kind == "cancel":
            actions = [wanted]
            facts = [{"slot": "amount", "value": money(order_total(order))}]
            outcome = "act"
        else:
            facts = [{"slot": "date", "value": order["expected_delivery"]}]
            outcome = "refuse"
    elif kind in ("refund", "refund_late", "refund_over_cap"):
        late = order["status"] == "delivered" and days is not None and days > REFUND_WINDOW_DAYS
        if (kind == "refund_late" and not late) or (kind != "refund_late" and not fits_refund):
            return None
        over = kind == "refund_over_cap"
        items = [i for i in order["items"] if (i["price"] > REFUND_CAP_CENTS) == over]
        if not items:
            return None
        item = rng.choice(items)
        user["payment_method_id"] = pm
        wanted = {
            "name": "refund",
            "arguments": {"order_id": oid, "amount": item["price"] / 100, "payment_method_id": pm},
        }
        request = (
            f"Hello, the {item['name']} ({_options(item['options'])}) I ordered arrived damaged. "
            "I'd like a refund for it."
        )
        if kind == "refund":
            actions = [wanted]
            facts = [{"slot": "amount", "value": money(item["price"])}]
            outcome = "act"
        elif kind == "refund_late":
            facts = [{"slot": "date", "value": order["delivered_on"]}]
            outcome = "refuse"
        else:
            actions = [{"name": "transfer_to_human", "arguments": {"summary": f"refund above cap on {oid}"}}]
            facts = [{"slot": "amount", "value": money(item["price"])}]  # why it needs a human
            outcome = "transfer"
    elif kind == "exchange":
        if not fits_refund:
            return None
        item = rng.choice(order["items"])
        product = db["products"][item["product_id"]]
        others = [
            v for v in product["variants"].values() if v["available"] and v["item_id"] != item["item_id"]
        ]
        if not others:
            return None
        new = rng.choice(sorted(others, key=lambda v: v["item_id"]))
        described = (
            f"I'd like to exchange the {item['name']} ({_options(item['options'])}) for the "
            f"{_options(new['options'])} one."
        )
        user["items"] = described
        wanted = {
            "name": "exchange_items",
            "arguments": {"order_id": oid, "item_ids": [item["item_id"]], "new_item_ids": [new["item_id"]]},
        }
        actions = [wanted]
        request = f"Hi, I received my order and {described[2:]}"
        outcome = "act"
    elif kind == "change_address":
        if order["status"] not in CANCELLABLE:
            return None
        address = _new_address(rng, order["address"])
        user["address"] = address
        wanted = {"name": "change_address", "arguments": {"order_id": oid, **address}}
        actions = [wanted]
        request = "Hi, I've just moved. Can you change the shipping address of my order that hasn't shipped?"
        outcome = "act"
    elif kind == "delivery_date":
        if order["status"] != "shipped":
            return None
        facts = [{"slot": "date", "value": order["expected_delivery"]}]
        request = "Hi, when will my order arrive?"
        outcome = "inform"
    else:  # pragma: no cover - KINDS lists every branch
        raise ValueError(kind)
    return {
        "db_seed": db["seed"],
        "customer_id": customer["customer_id"],
        "kind": kind,
        "outcome": outcome,
        "request": request,
        "user": user,
        "wanted": wanted,
        "actions": actions,
        "facts": facts,
    }


def task_prompt(reference: OrdersReference) -> list[dict[str, str]]:
    """What the policy sees first: the instructions, then the customer's opening message."""
    return [{"role": "system", "content": INSTRUCTIONS}, {"role": "user", "content": reference.request}]


def draw_task(split: str, seed: int, index: int) -> tuple[OrdersReference, int]:
    """Task `index` of (split, seed): its kind, then orders drawn until one fits the kind and the task's content
    hash is in `split`."""
    # the kind is drawn once per task, so every kind is as frequent, however rare the orders that fit it
    kind_rng = item_rng(NAME, VERSION, {"databases": BUNDLED_DATABASES, "draw": "kind"}, split, seed, index)
    kind = KINDS[kind_rng.randrange(len(KINDS))]
    for attempt in range(MAX_ATTEMPTS):
        rng = item_rng(NAME, VERSION, {"databases": BUNDLED_DATABASES}, split, seed, index, attempt)
        raw = _draw(rng, kind, _built(rng.randrange(BUNDLED_DATABASES)))
        if raw is None or content_split(canonical(raw)) != split:
            continue
        return OrdersReference.model_validate(raw), attempt
    raise GenerationError(f"{NAME}: no {split} task for index {index} in {MAX_ATTEMPTS} attempts")


def task_id(reference: OrdersReference) -> str:
    """A short stable id of a task's content."""
    return puzzle_id(canonical(reference.model_dump(mode="json")))
