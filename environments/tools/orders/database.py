"""The shop's seeded database: customers, products with variants, orders, and the policies writes obey.

A database is plain JSON data (dicts, lists, strings, integers), so two of them compare with `==`, hash with
`digest` and differ in a readable `diff`. Money is integer cents everywhere inside; tools show it as
`"45.00"`. `build(seed)` makes the same database for the same seed in every process (a `random.Random` seeded
with an integer, names drawn from fixed lists); `fresh(seed)` hands out a private deep copy of a cached build,
so a session or a replay can change its copy freely.
"""

from __future__ import annotations

import json
import random
from datetime import date, timedelta
from functools import lru_cache
from typing import Any

from proctor.environments.puzzles.seeding import digest

DB_VERSION = "1"
TODAY = date(2026, 6, 15)
"""The shop's today: fixed, so refund windows and delivery dates never depend on the wall clock."""

REFUND_WINDOW_DAYS = 30
"""Refunds and exchanges only for orders delivered at most this many days before TODAY."""
REFUND_CAP_CENTS = 250_00
"""The most one refund may be; a larger refund needs a human agent (transfer_to_human)."""
CANCELLABLE = ("pending", "processing")
ADDRESS_CHANGEABLE = ("pending", "processing")
REFUNDABLE = ("delivered",)
EXCHANGEABLE = ("delivered",)
CANCEL_REASONS = ("no longer needed", "ordered by mistake")

POLICIES: dict[str, Any] = {
    "today": TODAY.isoformat(),
    "authentication": (
        "Before reading or changing anything, find the customer by email, or by first name, last name and "
        "zip code. Only that customer's orders may be read or changed."
    ),
    "confirmation": (
        "Before any write (cancel_order, refund, exchange_items, change_address), state the exact action "
        "(order id and every detail) and get the customer's explicit yes."
    ),
    "cancel_order": f"Only orders whose status is {' or '.join(CANCELLABLE)}. The order's total is refunded "
    "to its original payment method. Reason: " + " or ".join(repr(r) for r in CANCEL_REASONS) + ".",
    "refund": (
        f"Only delivered orders, delivered at most {REFUND_WINDOW_DAYS} days ago; at most "
        f"{REFUND_CAP_CENTS // 100}.00 per refund (larger refunds: transfer_to_human); never more than the "
        "order's total minus what was already refunded; only to the order's original payment method or a "
        "gift card of the same customer."
    ),
    "exchange_items": (
        f"Only delivered orders, delivered at most {REFUND_WINDOW_DAYS} days ago; each item for another "
        "available variant of the same product; the price difference is settled on the original payment "
        "method."
    ),
    "change_address": f"Only orders whose status is {' or '.join(ADDRESS_CHANGEABLE)} (not yet shipped).",
    "transfer_to_human": "Only when the request cannot be handled under these policies.",
}

FIRST_NAMES = (
    "Ada", "Bruno", "Chiara", "Dmitri", "Esme", "Farid", "Greta", "Hiro", "Ines", "Jonas", "Kalani",
    "Lior", "Maren", "Nadia", "Oskar", "Priya", "Quinn", "Rafael", "Sanne", "Tomas", "Ulla", "Vikram",
    "Wren", "Ximena", "Yusuf", "Zofia",
)  # fmt: skip
LAST_NAMES = (
    "Abara", "Belmonte", "Castell", "Dervish", "Eklund", "Fairweather", "Galloway", "Hartmann", "Ibarra",
    "Jovanic", "Kowal", "Lindqvist", "Moreau", "Nakashima", "Okafor", "Pellegrini", "Quist", "Rosales",
    "Sato", "Thorne", "Ulrich", "Varga", "Whitlock", "Yilmaz", "Zeller",
)  # fmt: skip
CITIES = (
    "Harborview", "Elm Ridge", "North Fallow", "Copperton", "Lakemont", "Stillwater", "Brackenfield",
    "Marlow Bay", "Ashgrove", "Redcliff",
)  # fmt: skip
STREETS = ("Oak", "Maple", "Mill", "Quarry", "Lantern", "Orchard", "Harbor", "Juniper", "Kestrel", "Birch")
STREET_KINDS = ("Street", "Avenue", "Lane", "Road", "Court")
PRODUCTS: tuple[tuple[str, dict[str, tuple[str, ...]], int], ...] = (
    ("Trail Backpack", {"color": ("black", "green", "grey"), "capacity": ("20L", "30L")}, 89_00),
    ("Desk Lamp", {"color": ("white", "black", "brass"), "bulb": ("LED", "halogen")}, 54_00),
    ("Running Shoe", {"size": ("8", "9", "10", "11"), "color": ("blue", "red")}, 120_00),
    ("Water Bottle", {"capacity": ("500ml", "750ml", "1L"), "color": ("teal", "orange")}, 24_00),
    ("Wireless Headphones", {"color": ("black", "silver", "navy")}, 199_00),
    ("Wool Sweater", {"size": ("S", "M", "L", "XL"), "color": ("cream", "charcoal")}, 78_00),
    ("Coffee Grinder", {"burr": ("conical", "flat"), "color": ("steel", "matte black")}, 145_00),
    ("Yoga Mat", {"thickness": ("4mm", "6mm"), "color": ("plum", "sage", "sand")}, 39_00),
    ("Chef Knife", {"length": ("6in", "8in", "10in")}, 68_00),
    ("Tea Kettle", {"color": ("red", "cream", "black"), "type": ("stovetop", "electric")}, 47_00),
    ("Bike Helmet", {"size": ("S", "M", "L"), "color": ("white", "black")}, 62_00),
    ("Office Chair", {"color": ("black", "grey"), "arms": ("fixed", "adjustable")}, 289_00),
    ("Espresso Machine", {"color": ("steel", "red")}, 420_00),
    ("Camping Tent", {"capacity": ("2-person", "4-person"), "color": ("olive", "orange")}, 310_00),
)
CUSTOMERS = 40
STATUS_WEIGHTS = (
    ("pending", 3),
    ("processing", 2),
    ("shipped", 3),
    ("delivered", 6),
    ("delivered_old", 3),
    ("cancelled", 1),
)


def money(cents: int) -> str:
    """Cents as the tools show money: `4500` -> `"45.00"`."""
    return f"{cents // 100}.{cents % 100:02d}"


def _day(offset: int) -> str:
    return (TODAY + timedelta(days=offset)).isoformat()


def _products(rng: random.Random) -> dict[str, dict[str, Any]]:
    products: dict[str, dict[str, Any]] = {}
    item_numbers = rng.sample(range(100_000, 1_000_000), 400)
    for number, (name, axes, base) in enumerate(PRODUCTS):
        product_id = f"P{1000 + number * 7 + rng.randrange(7)}"
        combos: list[dict[str, str]] = [{}]
        for axis, values in axes.items():
            combos = [{**combo, axis: value} for combo in combos for value in values]
        variants: dict[str, dict[str, Any]] = {}
        for combo in combos:
            item_id = f"I{item_numbers.pop()}"
            variants[item_id] = {
                "item_id": item_id,
                "options": combo,
                "price": base + rng.randrange(-8, 9) * 100 + rng.choice((0, 0, 49, 99)),
                "available": rng.random() < 0.8,
            }
        products[product_id] = {"product_id": product_id, "name": name, "variants": variants}
    return products


def _customer(rng: random.Random, number: int) -> dict[str, Any]:
    first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
    customer_id = f"{first.lower()}_{last.lower()}_{1000 + number}"
    zip_code = f"{rng.randrange(10_000, 99_999):05d}"
    methods: list[dict[str, Any]] = [
        {
            "id": f"card_{rng.randrange(1000, 9999)}",
            "kind": "credit card",
            "last4": f"{rng.randrange(10**4):04d}",
        }
    ]
    if rng.random() < 0.5:
        methods.append({"id": f"gift_card_{rng.randrange(1000, 9999)}", "kind": "gift card", "balance": 0})
    if rng.random() < 0.3:
        methods.append({"id": f"paypal_{rng.randrange(1000, 9999)}", "kind": "paypal"})
    return {
        "customer_id": customer_id,
        "first_name": first,
        "last_name": last,
        "email": f"{first.lower()}.{last.lower()}{number}@example.com",
        "address": {
            "line1": f"{rng.randrange(1, 999)} {rng.choice(STREETS)} {rng.choice(STREET_KINDS)}",
            "city": rng.choice(CITIES),
            "zip": zip_code,
        },
        "payment_methods": methods,
        "orders": [],
    }


def _order(
    rng: random.Random, order_id: str, customer: dict[str, Any], products: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    kinds = [kind for kind, weight in STATUS_WEIGHTS for _ in range(weight)]
    kind = rng.choice(kinds)
    chosen = rng.sample(sorted(products), rng.randint(1, 3))
    items = []
    for product_id in chosen:
        product = products[product_id]
        variant = product["variants"][rng.choice(sorted(product["variants"]))]
        items.append(
            {
                "item_id": variant["item_id"],
                "product_id": product_id,
                "name": product["name"],
                "options": dict(variant["options"]),
                "price": variant["price"],
            }
        )
    placed = -rng.randint(1, 4)
    dates: dict[str, str | None] = {"placed_on": None, "shipped_on": None, "delivered_on": None}
    expected: str | None = None
    if kind in ("pending", "processing", "cancelled"):
        status = kind
        dates["placed_on"] = _day(placed)
        expected = _day(rng.randint(4, 9)) if kind != "cancelled" else None
    elif kind == "shipped":
        status = "shipped"
        dates["placed_on"] = _day(placed - 3)
        dates["shipped_on"] = _day(placed)
        expected = _day(rng.randint(1, 6))
    else:
        status = "delivered"
        delivered = -rng.randint(2, 25) if kind == "delivered" else -rng.randint(35, 90)
        dates["placed_on"] = _day(delivered - rng.randint(4, 8))
        dates["shipped_on"] = _day(delivered - rng.randint(1, 3))
        dates["delivered_on"] = _day(delivered)
        expected = dates["delivered_on"]
    return {
        "order_id": order_id,
        "customer_id": customer["customer_id"],
        "status": status,
        **dates,
        "expected_delivery": expected,
        "address": dict(customer["address"]),
        "payment_method_id": customer["payment_methods"][0]["id"],
        "items": items,
        "refunds": [],
        "exchanges": [],
        "cancel_reason": None,
    }


def build(seed: int) -> dict[str, Any]:
    """The database of `seed`: the same data for the same seed in every process."""
    rng = random.Random(seed * 7919 + 17)
    products = _products(rng)
    customers: dict[str, dict[str, Any]] = {}
    orders: dict[str, dict[str, Any]] = {}
    order_numbers = iter(rng.sample(range(10_000, 100_000), CUSTOMERS * 5))
    for number in range(CUSTOMERS):
        customer = _customer(rng, number)
        customers[customer["customer_id"]] = customer
        for _ in range(rng.randint(2, 4)):
            order = _order(rng, f"O{next(order_numbers)}", customer, products)
            orders[order["order_id"]] = order
            customer["orders"].append(order["order_id"])
    return {
        "version": DB_VERSION,
        "seed": seed,
        "customers": customers,
        "products": products,
        "orders": orders,
        "transfers": [],
    }


@lru_cache(maxsize=64)
def _built(seed: int) -> dict[str, Any]:
    return build(seed)


@lru_cache(maxsize=64)
def _serialised(seed: int) -> str:
    return json.dumps(_built(seed))


def fresh(seed: int) -> dict[str, Any]:
    """A private copy of the database of `seed` (built once per process per seed; a copy is parsed from its
    JSON, twice as fast as a deep copy: the data is plain JSON)."""
    return json.loads(_serialised(seed))


def db_digest(db: dict[str, Any]) -> str:
    """sha256 of the database's canonical JSON: equal databases, equal digests."""
    return digest(db)


def order_total(order: dict[str, Any]) -> int:
    """What the order's items cost now, in cents."""
    return sum(item["price"] for item in order["items"])


def refunded(order: dict[str, Any]) -> int:
    """Cents already refunded on the order."""
    return sum(refund["amount"] for refund in order["refunds"])


def days_since_delivery(order: dict[str, Any]) -> int | None:
    """Days from delivery to TODAY, or None when not delivered."""
    if order.get("delivered_on") is None:
        return None
    return (TODAY - date.fromisoformat(order["delivered_on"])).days


def diff(gold: Any, got: Any, path: str = "", limit: int = 40) -> list[str]:
    """Readable differences between two databases (or parts): `path: gold X, got Y` lines, at most `limit`."""
    lines: list[str] = []

    def walk(a: Any, b: Any, where: str) -> None:
        if len(lines) >= limit or a == b:
            return
        if isinstance(a, dict) and isinstance(b, dict):
            for key in sorted(set(a) | set(b), key=str):
                here = f"{where}.{key}" if where else str(key)
                if key not in a:
                    lines.append(f"{here}: not in gold, got {_short(b[key])}")
                elif key not in b:
                    lines.append(f"{here}: gold {_short(a[key])}, missing")
                else:
                    walk(a[key], b[key], here)
                if len(lines) >= limit:
                    return
            return
        if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
            for index, (x, y) in enumerate(zip(a, b, strict=True)):
                walk(x, y, f"{where}[{index}]")
            return
        lines.append(f"{where or '<root>'}: gold {_short(a)}, got {_short(b)}")

    walk(gold, got, path)
    return lines


def _short(value: Any, limit: int = 200) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
