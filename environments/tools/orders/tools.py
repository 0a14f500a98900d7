"""The shop's tools: reads (find a customer, get a customer, an order, a product, the policies) and writes
(cancel_order, refund, exchange_items, change_address, transfer_to_human), run on one `Shop`.

A `Shop` is one session's world: its database copy, the customer the agent authenticated (by email, or by
name and zip), the action log, and the action the simulated user last confirmed. Every write call that reaches
a tool is logged as attempted, whether it succeeded or not: its status, the kind of error (`policy` when the
shop's policy forbids it, `auth`, `not_found`, `invalid`), whose order it touched, and whether it was exactly
the action the user confirmed just before (`confirmed`). A policy violation is an `error` observation and
stays in the log. Tools never check confirmation themselves (that is the agent's duty, graded from the log),
and no observation says whether the task is solved.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from proctor.environments.tools.base import ToolSpec
from proctor.environments.tools.orders.database import (
    ADDRESS_CHANGEABLE,
    CANCEL_REASONS,
    CANCELLABLE,
    EXCHANGEABLE,
    POLICIES,
    REFUND_CAP_CENTS,
    REFUND_WINDOW_DAYS,
    REFUNDABLE,
    days_since_delivery,
    money,
    order_total,
    refunded,
)

WRITE_TOOLS = ("cancel_order", "refund", "exchange_items", "change_address", "transfer_to_human")
CONFIRMED_WRITES = ("cancel_order", "refund", "exchange_items", "change_address")
"""Writes that need the customer's explicit yes first (a transfer does not)."""
MAX_ARGUMENT_CHARS = 300
MAX_AMOUNT = 10_000_000
"""The largest amount (dollars) a call is read as; larger is not an amount."""


def _object(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties) if required is None else required,
        "additionalProperties": False,
    }


_STRING = {"type": "string"}
_IDS = {"type": "array", "items": {"type": "string"}}
TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        name="find_customer_by_email",
        description="Find the customer with this email; authenticates them for this conversation.",
        parameters=_object({"email": _STRING}),
    ),
    ToolSpec(
        name="find_customer_by_name_zip",
        description="Find the customer by first name, last name and zip code; authenticates them.",
        parameters=_object({"first_name": _STRING, "last_name": _STRING, "zip": _STRING}),
    ),
    ToolSpec(
        name="get_customer",
        description="The authenticated customer's profile: address, payment methods, order ids.",
        parameters=_object({"customer_id": _STRING}),
    ),
    ToolSpec(
        name="get_order",
        description="One order of the authenticated customer: status, dates, items and prices, refunds.",
        parameters=_object({"order_id": _STRING}),
    ),
    ToolSpec(
        name="get_product",
        description="A product and its variants (item ids, options, prices, availability).",
        parameters=_object({"product_id": _STRING}),
    ),
    ToolSpec(name="list_policies", description="The shop's policies.", parameters=_object({})),
    ToolSpec(
        name="cancel_order",
        description="Cancel a pending or processing order; its total is refunded to the original payment method.",
        parameters=_object({"order_id": _STRING, "reason": {"type": "string", "enum": list(CANCEL_REASONS)}}),
    ),
    ToolSpec(
        name="refund",
        description="Refund an amount (in dollars, e.g. 45.5) of a delivered order to a payment method.",
        parameters=_object({"order_id": _STRING, "amount": {"type": "number"}, "payment_method_id": _STRING}),
    ),
    ToolSpec(
        name="exchange_items",
        description="Exchange delivered items (item_ids) for other variants of the same products (new_item_ids).",
        parameters=_object({"order_id": _STRING, "item_ids": _IDS, "new_item_ids": _IDS}),
    ),
    ToolSpec(
        name="change_address",
        description="Change the shipping address of an order that has not shipped yet.",
        parameters=_object({"order_id": _STRING, "line1": _STRING, "city": _STRING, "zip": _STRING}),
    ),
    ToolSpec(
        name="transfer_to_human",
        description="Hand the conversation to a human agent; ends the conversation.",
        parameters=_object({"summary": _STRING}),
    ),
)
TOOL_NAMES = tuple(tool.name for tool in TOOLS)


class ToolError(Exception):
    """A call the shop refuses: `kind` is policy, auth, not_found or invalid; the message is the observation."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


@dataclass
class Shop:
    """One session's world: the database copy, the authenticated customer, the action log, the confirmation."""

    db: dict[str, Any]
    authenticated: str | None = None
    log: list[dict[str, Any]] = field(default_factory=list)
    confirmed: dict[str, Any] | None = None
    """The action (`canonical_action`) the user confirmed in their last reply; one write consumes it."""
    rejected: int = 0
    """How many confirmation requests the user has said no to (past a few, the user gives up)."""
    transferred: bool = False

    def call(self, name: str, arguments: dict[str, Any]) -> tuple[str, str]:
        """Run one tool call; returns (observation, status `ok` or `error`). Writes are logged."""
        handler = _HANDLERS.get(name)
        if handler is None:
            return f"Error: unknown tool {name!r}; the tools are {', '.join(TOOL_NAMES)}.", "error"
        entry: dict[str, Any] | None = None
        if name in WRITE_TOOLS:
            action = canonical_action(name, arguments)
            entry = {
                "tool": name,
                "arguments": _clean(arguments),
                "confirmed": name in CONFIRMED_WRITES
                and self.confirmed is not None
                and self.confirmed == action,
                "order_owner": self._owner(arguments.get("order_id")),
                "authenticated": self.authenticated,
            }
            self.confirmed = None  # one confirmation allows one write, whatever it was
        try:
            text = handler(self, arguments)
            status, kind = "ok", None
        except ToolError as exc:
            text, status, kind = f"Error: {exc}", "error", exc.kind
        if entry is not None:
            self.log.append({**entry, "status": status, "error": kind})
        return text, status

    def _owner(self, order_id: Any) -> str | None:
        if not isinstance(order_id, str):
            return None
        order = self.db["orders"].get(order_id.strip())
        return None if order is None else order["customer_id"]

    # -- helpers the tools share --

    def customer(self) -> dict[str, Any]:
        """The authenticated customer, or an `auth` error."""
        if self.authenticated is None:
            raise ToolError(
                "auth", "no customer is authenticated; find the customer by email or name and zip"
            )
        return self.db["customers"][self.authenticated]

    def order(self, order_id: Any) -> dict[str, Any]:
        """One of the authenticated customer's orders (auth / not_found errors otherwise)."""
        customer = self.customer()
        if not isinstance(order_id, str) or not order_id.strip():
            raise ToolError("invalid", "order_id must be a non-empty string such as O12345")
        order = self.db["orders"].get(order_id.strip())
        if order is None:
            raise ToolError("not_found", f"there is no order {_clip(order_id)!r}")
        if order["customer_id"] != customer["customer_id"]:
            raise ToolError(
                "auth", f"order {order['order_id']} does not belong to the authenticated customer"
            )
        return order


def _clip(value: Any, limit: int = 60) -> str:
    text = str(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _clean(arguments: dict[str, Any]) -> dict[str, Any]:
    """The arguments as logged: long strings cut (the log is for reading, the canonical action for matching)."""
    return {k: (v[:MAX_ARGUMENT_CHARS] if isinstance(v, str) else v) for k, v in arguments.items()}


def cents_of(amount: Any) -> int | None:
    """A dollar amount (a JSON number) as integer cents, or None when it is not a positive amount with at most
    two decimals (a bool is not a number)."""
    if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not math.isfinite(amount):
        return None
    if not 0 < amount <= MAX_AMOUNT:  # beyond it cents overflow a float (1e307 * 100 is inf)
        return None
    cents = round(amount * 100)
    if cents <= 0 or abs(amount * 100 - cents) > 1e-6:
        return None
    return int(cents)


def _text(value: Any) -> str:
    return " ".join(value.split()) if isinstance(value, str) else ""


def canonical_action(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A write call reduced to what it does, so two calls that do the same thing compare equal: ids and
    strings trimmed, money in cents, exchanged items as sorted (old, new) pairs. Every argument the tool takes
    is kept; one left out is None (so it never equals a gold that names it)."""
    if name == "refund":
        return {
            "name": name,
            "order_id": _text(arguments.get("order_id")),
            "amount": cents_of(arguments.get("amount")),
            "payment_method_id": _text(arguments.get("payment_method_id")),
        }
    if name == "exchange_items":
        old, new = arguments.get("item_ids"), arguments.get("new_item_ids")
        pairs = None
        if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
            pairs = sorted([_text(a), _text(b)] for a, b in zip(old, new, strict=True))
        return {"name": name, "order_id": _text(arguments.get("order_id")), "pairs": pairs}
    if name == "change_address":
        return {
            "name": name,
            "order_id": _text(arguments.get("order_id")),
            "line1": _text(arguments.get("line1")),
            "city": _text(arguments.get("city")),
            "zip": _text(arguments.get("zip")),
        }
    if name == "cancel_order":
        return {
            "name": name,
            "order_id": _text(arguments.get("order_id")),
            "reason": _text(arguments.get("reason")),
        }
    return {"name": name}


def _dump(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def _show_order(order: dict[str, Any]) -> dict[str, Any]:
    return {
        **{k: v for k, v in order.items() if k not in ("items", "refunds", "exchanges")},
        "items": [{**item, "price": money(item["price"])} for item in order["items"]],
        "total": money(order_total(order)),
        "refunds": [{**r, "amount": money(r["amount"])} for r in order["refunds"]],
        "refunded": money(refunded(order)),
        "exchanges": [{**e, "price_difference": money(abs(e["price_difference"])) if e["price_difference"] >= 0
                       else "-" + money(-e["price_difference"])} for e in order["exchanges"]],
    }  # fmt: skip


# -- reads --


def find_by_email(shop: Shop, arguments: dict[str, Any]) -> str:
    """Authenticate the customer with this email."""
    email = _text(arguments.get("email")).casefold()
    for customer in shop.db["customers"].values():
        if customer["email"] == email:
            shop.authenticated = customer["customer_id"]
            return _dump({"customer_id": customer["customer_id"]})
    raise ToolError("not_found", "no customer has this email")


def find_by_name_zip(shop: Shop, arguments: dict[str, Any]) -> str:
    """Authenticate the customer with this first name, last name and zip."""
    wanted = tuple(_text(arguments.get(k)).casefold() for k in ("first_name", "last_name", "zip"))
    for customer in shop.db["customers"].values():
        found = (
            customer["first_name"].casefold(),
            customer["last_name"].casefold(),
            customer["address"]["zip"],
        )
        if found == wanted:
            shop.authenticated = customer["customer_id"]
            return _dump({"customer_id": customer["customer_id"]})
    raise ToolError("not_found", "no customer has this name and zip")


def get_customer(shop: Shop, arguments: dict[str, Any]) -> str:
    """The authenticated customer's profile."""
    customer = shop.customer()
    if _text(arguments.get("customer_id")) != customer["customer_id"]:
        raise ToolError("auth", "only the authenticated customer's profile can be read")
    return _dump(customer)


def get_order(shop: Shop, arguments: dict[str, Any]) -> str:
    """One order of the authenticated customer."""
    return _dump(_show_order(shop.order(arguments.get("order_id"))))


def get_product(shop: Shop, arguments: dict[str, Any]) -> str:
    """A product with its variants."""
    product = shop.db["products"].get(_text(arguments.get("product_id")))
    if product is None:
        raise ToolError("not_found", f"there is no product {_clip(arguments.get('product_id'))!r}")
    variants = {k: {**v, "price": money(v["price"])} for k, v in product["variants"].items()}
    return _dump({**product, "variants": variants})


def list_policies(shop: Shop, arguments: dict[str, Any]) -> str:
    """The shop's policies."""
    return _dump(POLICIES)


# -- writes --


def cancel_order(shop: Shop, arguments: dict[str, Any]) -> str:
    """Cancel a pending or processing order and refund its total to the original payment method."""
    order = shop.order(arguments.get("order_id"))
    reason = _text(arguments.get("reason"))
    if reason not in CANCEL_REASONS:
        raise ToolError("invalid", f"reason must be one of {', '.join(CANCEL_REASONS)}")
    if order["status"] not in CANCELLABLE:
        raise ToolError("policy", f"order {order['order_id']} is {order['status']}; only pending or processing "
                        "orders can be cancelled")  # fmt: skip
    amount = order_total(order) - refunded(order)
    order["status"], order["cancel_reason"] = "cancelled", reason
    order["expected_delivery"] = None
    order["refunds"].append(
        {"amount": amount, "payment_method_id": order["payment_method_id"], "kind": "cancel"}
    )
    return _dump({"order_id": order["order_id"], "status": "cancelled", "refunded": money(amount)})


def _in_window(order: dict[str, Any], allowed: tuple[str, ...], what: str) -> None:
    if order["status"] not in allowed:
        raise ToolError("policy", f"order {order['order_id']} is {order['status']}; only delivered orders can "
                        f"be {what}")  # fmt: skip
    days = days_since_delivery(order)
    if days is None or days > REFUND_WINDOW_DAYS:
        raise ToolError("policy", f"order {order['order_id']} was delivered on {order['delivered_on']}, more "
                        f"than {REFUND_WINDOW_DAYS} days ago")  # fmt: skip


def refund(shop: Shop, arguments: dict[str, Any]) -> str:
    """Refund an amount of a delivered order, within the window, the cap and what is left to refund."""
    order = shop.order(arguments.get("order_id"))
    cents = cents_of(arguments.get("amount"))
    if cents is None:
        raise ToolError("invalid", "amount must be a positive number of dollars with at most two decimals")
    method = _text(arguments.get("payment_method_id"))
    methods = {m["id"]: m for m in shop.customer()["payment_methods"]}
    if method not in methods:
        raise ToolError("not_found", f"the customer has no payment method {_clip(method)!r}")
    _in_window(order, REFUNDABLE, "refunded")
    if cents > REFUND_CAP_CENTS:
        raise ToolError("policy", f"{money(cents)} is above the {money(REFUND_CAP_CENTS)} cap for one refund")
    left = order_total(order) - refunded(order)
    if cents > left:
        raise ToolError(
            "policy", f"{money(cents)} is more than the {money(left)} left to refund on the order"
        )
    if method != order["payment_method_id"] and methods[method]["kind"] != "gift card":
        raise ToolError("policy", "refunds go to the original payment method or a gift card")
    order["refunds"].append({"amount": cents, "payment_method_id": method, "kind": "refund"})
    return _dump({"order_id": order["order_id"], "refunded": money(cents), "payment_method_id": method})


def exchange_items(shop: Shop, arguments: dict[str, Any]) -> str:
    """Exchange delivered items for other available variants of the same products."""
    order = shop.order(arguments.get("order_id"))
    old, new = arguments.get("item_ids"), arguments.get("new_item_ids")
    if not isinstance(old, list) or not isinstance(new, list) or not old or len(old) != len(new):
        raise ToolError("invalid", "item_ids and new_item_ids must be non-empty lists of the same length")
    if len(set(map(str, old))) != len(old):
        raise ToolError("invalid", "an item may be exchanged only once")
    _in_window(order, EXCHANGEABLE, "exchanged")
    held = {item["item_id"]: item for item in order["items"]}
    plan = []
    for old_id, new_id in zip(old, new, strict=True):
        item = held.get(_text(old_id))
        if item is None:
            raise ToolError("not_found", f"order {order['order_id']} has no item {_clip(old_id)!r}")
        variant = shop.db["products"][item["product_id"]]["variants"].get(_text(new_id))
        if variant is None:
            raise ToolError("policy", f"{_clip(new_id)!r} is not a variant of {item['name']}")
        if variant["item_id"] == item["item_id"] or not variant["available"]:
            raise ToolError("policy", f"{variant['item_id']} is the same item or not available")
        plan.append((item, variant))
    difference = 0
    for item, variant in plan:
        difference += variant["price"] - item["price"]
        order["exchanges"].append({"item_id": item["item_id"], "new_item_id": variant["item_id"],
                                   "price_difference": variant["price"] - item["price"]})  # fmt: skip
        item.update(item_id=variant["item_id"], options=dict(variant["options"]), price=variant["price"])
    order["status"] = "exchange requested"
    return _dump(
        {"order_id": order["order_id"], "status": order["status"], "price_difference": difference / 100}
    )


def change_address(shop: Shop, arguments: dict[str, Any]) -> str:
    """Change the address of an order that has not shipped."""
    order = shop.order(arguments.get("order_id"))
    address = {k: _text(arguments.get(k)) for k in ("line1", "city", "zip")}
    if not address["line1"] or not address["city"] or not re.fullmatch(r"\d{5}", address["zip"]):
        raise ToolError("invalid", "line1 and city must not be empty and zip must be five digits")
    if order["status"] not in ADDRESS_CHANGEABLE:
        raise ToolError("policy", f"order {order['order_id']} is {order['status']}; the address can only be "
                        "changed before it ships")  # fmt: skip
    order["address"] = address
    return _dump({"order_id": order["order_id"], "address": address})


def transfer_to_human(shop: Shop, arguments: dict[str, Any]) -> str:
    """Hand over to a human agent (recorded in the database: who was transferred)."""
    shop.db["transfers"].append({"customer_id": shop.authenticated})
    shop.transferred = True
    return "Transferred to a human agent. The conversation has ended."


_HANDLERS = {
    "find_customer_by_email": find_by_email,
    "find_customer_by_name_zip": find_by_name_zip,
    "get_customer": get_customer,
    "get_order": get_order,
    "get_product": get_product,
    "list_policies": list_policies,
    "cancel_order": cancel_order,
    "refund": refund,
    "exchange_items": exchange_items,
    "change_address": change_address,
    "transfer_to_human": transfer_to_human,
}
