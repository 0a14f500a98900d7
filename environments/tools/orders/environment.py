"""`tool.orders`: a customer-service shop in the manner of tau-bench, with a scripted customer.

The agent helps one customer with one request about one order, with the shop's tools (`tools.py`): read
tools (find the customer by email or name and zip, which authenticates them; the customer, an order, a
product, the policies) and write tools (cancel_order, refund, exchange_items, change_address,
transfer_to_human), each checked against the policy and the order's state. The customer (`user.py`) answers
the agent's messages without tool calls: it tells a fact only when asked, says yes only to the exact write it
wants, and ends the conversation when satisfied (`env_terminal`). The score (`scoring.py`) replays the
transcript on a fresh database: reward 1 only when the final database equals the gold database, no forbidden
write is in the action log (unconfirmed, against policy, on another customer's order, even if undone later)
and the required facts were stated. Registered at the bottom of this module, with gold, cheat and
trivial-policy transcripts.
"""

from __future__ import annotations

import json
import random
import time
from typing import Any

from proctor.contract import ChatMessage, RequestError, Verdict, content_text
from proctor.environments.registry import CUSTOM_DIFFICULTY, Task
from proctor.environments.tools.base import (
    SessionLimits,
    ToolEnvironment,
    ToolResult,
    ToolSpec,
    argument_problem,
    clip_observation,
    register_tool_environment,
)
from proctor.environments.tools.orders.database import TODAY, _built, money
from proctor.environments.tools.orders.scoring import (
    MAX_CALLS_PER_TURN,
    Conversation,
    grade,
    parsed_calls,
)
from proctor.environments.tools.orders.tasks import (
    KINDS,
    NAME,
    VERSION,
    OrdersReference,
    draw_task,
    task_id,
    task_prompt,
)
from proctor.environments.tools.orders.tools import TOOLS, cents_of
from proctor.registry import Example

Step = str | list[tuple[str, dict[str, Any]]] | dict[str, Any]
"""A scripted assistant turn: text (no call), a list of calls, or a raw assistant message."""


class Orders(ToolEnvironment):
    """A seeded shop with policies, write tools and a scripted customer; graded by replay."""

    name = NAME
    version = VERSION
    description = (
        "Customer service in a seeded shop (customers, orders, products, policies) with a deterministic "
        "scripted customer; reward 1 when the replayed database equals the gold one, no write was forbidden "
        "(unconfirmed, against policy, another customer's) and the required amounts or dates were stated."
    )
    reference_model = OrdersReference

    def limits(self) -> SessionLimits:
        """Room for authentication, look-ups, a confirmation and the write, with slack."""
        return SessionLimits(
            max_turns=30,
            max_tool_calls=40,
            max_calls_per_turn=MAX_CALLS_PER_TURN,
            max_tool_errors=10,
            max_observation_chars=8_000,
            max_total_observation_chars=120_000,
        )

    def tools(self) -> list[ToolSpec]:
        """The six read tools and five write tools."""
        return list(TOOLS)

    def make_tasks(self, split: str, seed: int, count: int, level: str | None = None) -> list[Task]:
        """Tasks 0..count-1 of (split, seed), of every kind, on the bundled databases (seeds 0..31)."""
        if level not in (None, CUSTOM_DIFFICULTY):
            raise RequestError(422, f"{NAME} has no levels (got {level!r})", "difficulty")
        tasks = []
        for index in range(count):
            reference, attempt = draw_task(split, seed, index)
            tasks.append(self._task(reference, split, seed, index, attempt))
        return tasks

    def _task(self, reference: OrdersReference, split: str, seed: int, index: int, attempt: int) -> Task:
        return Task(
            prompt=task_prompt(reference),
            reference=reference.model_dump(mode="json"),
            verifier=NAME,
            metadata={
                "kind": reference.kind,
                "outcome": reference.outcome,
                "gold_actions": [action.name for action in reference.actions],
                "facts": [fact.model_dump() for fact in reference.facts],
                "database": {"seed": reference.db_seed, "today": TODAY.isoformat()},
                "environment": NAME,
                "version": VERSION,
                "split": split,
                "seed": seed,
                "index": index,
                "attempt": attempt,
                "task_id": task_id(reference),
            },
        )

    async def start(self, task: Task, limits: SessionLimits) -> Conversation:
        """A fresh copy of the task's database and a customer who knows the task."""
        return Conversation.open(OrdersReference.model_validate(task.reference))

    async def call(self, state: Conversation, name: str, arguments: dict[str, Any]) -> ToolResult:
        """One read or write on the session's shop; a refused write is an error observation (and logged)."""
        started = time.perf_counter()
        cpu = time.thread_time()
        text, status = state.call(name, arguments)
        text, truncated = clip_observation(text, self.limits().max_observation_chars)
        return ToolResult(
            content=text,
            status="ok" if status == "ok" else "error",
            elapsed_ms=(time.perf_counter() - started) * 1000,
            truncated=truncated,
            cpu_ms=(time.thread_time() - cpu) * 1000,
        )

    def reply(self, state: Conversation | None, message: ChatMessage) -> dict[str, Any] | None:
        """The customer's answer; None once the conversation is over."""
        if state is None or state.over:
            return None
        return {"role": "user", "content": state.reply(content_text(message.content))}

    def terminal(self, state: Conversation | None) -> bool:
        """The customer said STOP, or the agent transferred to a human."""
        return state is not None and state.over

    async def score(self, reference: Any, transcript: list[ChatMessage]) -> Verdict:
        """Replay and grade; see `scoring.py`."""
        parsed = (
            reference if isinstance(reference, OrdersReference) else OrdersReference.model_validate(reference)
        )
        return grade(parsed, transcript)


# -- scripted transcripts: gold, cheats, trivial policies ------------------------------------------------------


def _calls_message(turn: int, calls: list[tuple[str, dict[str, Any]]], content: str = "") -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": content,
        "tool_calls": [
            {"id": f"c{turn}_{i}", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for i, (n, a) in enumerate(calls)
        ],
    }


def play(reference: OrdersReference, script: list[Step]) -> list[dict[str, Any]]:
    """The transcript a session gives for these assistant turns: observations from the tools, replies from
    the customer; turns after the conversation ended are dropped."""
    conversation = Conversation.open(reference)
    specs = {tool.name: tool for tool in TOOLS}
    messages: list[dict[str, Any]] = list(task_prompt(reference))
    for turn, step in enumerate(script, start=1):
        if conversation.over:
            break
        if isinstance(step, str):
            raw: dict[str, Any] = {"role": "assistant", "content": step}
        elif isinstance(step, list):
            raw = _calls_message(turn, step)
        else:
            raw = step
        messages.append(raw)
        message = ChatMessage.model_validate(raw)
        parsed = parsed_calls(message)
        if not parsed.calls and not parsed.errors:
            messages.append({"role": "user", "content": conversation.reply(content_text(message.content))})
            continue
        for index, call in enumerate(parsed.calls):
            call_id = call.id or f"call_{turn}_{index}"
            spec = specs.get(call.name)
            problem = None if spec is None else argument_problem(spec, call.arguments)
            if spec is None or problem is not None:
                text = f"Error: invalid arguments for {call.name}: {problem or 'unknown tool'}"
            else:
                text, _ = conversation.call(call.name, call.arguments)
            messages.append({"role": "tool", "tool_call_id": call_id, "name": call.name, "content": text})
    return messages


def _opening(reference: OrdersReference) -> list[Step]:
    user = reference.user
    return [
        "I can help with that. What is the email address on your account?",
        [("find_customer_by_email", {"email": user.email})],
        "Thank you. What is the order id?",
        [("get_order", {"order_id": user.order_id})],
    ]


def confirmation_text(reference: OrdersReference) -> str:
    """The gold confirmation request: the wanted write with every detail."""
    wanted = reference.wanted
    assert wanted is not None
    args, oid = wanted.arguments, reference.user.order_id
    if wanted.name == "cancel_order":
        order = _built(reference.db_seed)["orders"][oid]
        total = money(sum(item["price"] for item in order["items"]))
        return (
            f"To confirm: cancel order {oid} with the reason '{args['reason']}'; ${total} goes back to the "
            "original payment method. Do you confirm?"
        )
    if wanted.name == "refund":
        cents = cents_of(args["amount"]) or 0
        return f"To confirm: refund ${money(cents)} on order {oid} to {args['payment_method_id']}. Do you confirm?"
    if wanted.name == "exchange_items":
        pairs = ", ".join(
            f"item {a} for item {b}" for a, b in zip(args["item_ids"], args["new_item_ids"], strict=True)
        )
        return f"To confirm: in order {oid}, exchange {pairs}. Do you confirm?"
    return (
        f"To confirm: change the shipping address of order {oid} to {args['line1']}, {args['city']}, "
        f"{args['zip']}. Do you confirm?"
    )


def gold_script(reference: OrdersReference) -> list[Step]:
    """The assistant turns that solve the task (authenticate, look up, ask, confirm, act, tell)."""
    script = _opening(reference)
    oid, wanted = reference.user.order_id, reference.wanted
    db = _built(reference.db_seed)
    order = db["orders"][oid]
    fact = reference.facts[0].value if reference.facts else ""
    if reference.kind in ("cancel", "refund", "exchange", "change_address"):
        assert wanted is not None
        ask = {
            "cancel": "What is the reason for the cancellation?",
            "refund": "Which payment method should the refund go to?",
            "exchange": "Which item would you like to exchange, and for which variant?",
            "change_address": "What is the new address?",
        }[reference.kind]
        script.append(ask)
        if reference.kind == "exchange":
            old = wanted.arguments["item_ids"][0]
            product = next(item["product_id"] for item in order["items"] if item["item_id"] == old)
            script.append([("get_product", {"product_id": product})])
        script += [confirmation_text(reference), [(wanted.name, dict(wanted.arguments))]]
        done = {
            "cancel": f"Order {oid} is cancelled and ${fact} will be refunded.",
            "refund": f"The refund of ${fact} has been issued.",
            "exchange": f"The exchange on order {oid} is requested.",
            "change_address": f"The shipping address of order {oid} is updated.",
        }[reference.kind]
        script.append(done)
    elif reference.kind == "cancel_shipped":
        script.append(
            f"I'm sorry, order {oid} has already shipped, so I cannot cancel it. It arrives on {fact}."
        )
    elif reference.kind == "refund_late":
        script.append(
            f"I'm sorry, order {oid} was delivered on {fact}, over 30 days ago, so I cannot refund it."
        )
    elif reference.kind == "refund_over_cap":
        script.append(
            f"I'm sorry, a refund of ${fact} is above the limit I can approve, so I cannot do it myself."
        )
        script.append([(action.name, dict(action.arguments)) for action in reference.actions])
    elif reference.kind == "delivery_date":
        script.append(f"Order {oid} has shipped and is expected to arrive on {fact}.")
    else:
        raise ValueError(f"no gold script for kind {reference.kind!r}")
    return script


def gold_transcript(task: Task) -> list[dict[str, Any]]:
    """A transcript that solves the task, with real observations and the customer's real replies."""
    reference = OrdersReference.model_validate(task.reference)
    return play(reference, gold_script(reference))


def task_of_kind(kind: str, seed: int = 0, split: str = "train") -> Task:
    """The first bundled task of `kind` (for examples, tests and the bench)."""
    env = ORDERS
    for index in range(400):
        reference, attempt = draw_task(split, seed, index)
        if reference.kind == kind:
            return env._task(reference, split, seed, index, attempt)  # type: ignore[attr-defined]
    raise LookupError(f"no {kind} task in the first 400 of {split}/{seed}")


def _until_confirmation(reference: OrdersReference) -> list[Step]:
    script = gold_script(reference)
    confirm = confirmation_text(reference)
    return script[: script.index(confirm)]


def _other_customer(reference: OrdersReference) -> dict[str, Any]:
    db = _built(reference.db_seed)
    wanted = reference.wanted
    kind_ok = {"refund": ("delivered",), "cancel_order": ("pending", "processing"),
               "change_address": ("pending", "processing"), "exchange_items": ("delivered",)}  # fmt: skip
    statuses = kind_ok.get(wanted.name if wanted else "", ("delivered",))
    for order_id in sorted(db["orders"]):
        order = db["orders"][order_id]
        if order["customer_id"] != reference.customer_id and order["status"] in statuses:
            return order
    raise LookupError("no order of another customer")


def cheat_scripts(kind_tasks: dict[str, Task]) -> dict[str, tuple[OrdersReference, list[Step]]]:
    """Cheats that must score 0, as (reference, script), on one task per kind they need."""
    ref = {kind: OrdersReference.model_validate(task.reference) for kind, task in kind_tasks.items()}
    refund, address, cancel = ref["refund"], ref["change_address"], ref["cancel"]
    over, shipped, late, when = (
        ref["refund_over_cap"],
        ref["cancel_shipped"],
        ref["refund_late"],
        ref["delivery_date"],
    )
    assert refund.wanted and address.wanted and cancel.wanted and over.wanted and shipped.wanted
    amount = refund.facts[0].value
    pre = _until_confirmation(refund)
    write = [(refund.wanted.name, dict(refund.wanted.arguments))]
    addr_pre = _until_confirmation(address)
    addr_write = [(address.wanted.name, dict(address.wanted.arguments))]
    original = _built(address.db_seed)["orders"][address.user.order_id]["address"]
    wrong_addr = [(address.wanted.name, {**address.wanted.arguments, **original})]
    cancel_pre = _until_confirmation(cancel)
    other = _other_customer(refund)
    other_email = _built(refund.db_seed)["customers"][other["customer_id"]]["email"]
    every_price = sorted({v["price"] for p in _built(refund.db_seed)["products"].values()
                          for v in p["variants"].values()})  # fmt: skip
    stuffed = "Your refund is one of: " + ", ".join(f"${money(c)}" for c in every_price) + f" (${amount})."
    days = [(TODAY.fromordinal(TODAY.toordinal() + d)).isoformat() for d in range(0, 12)]
    confirm = confirmation_text(refund)
    swap = ref["exchange"]
    assert swap.wanted is not None
    swap_confirm = confirmation_text(swap)
    swap_script = gold_script(swap)
    old_item, new_item = swap.wanted.arguments["item_ids"][0], swap.wanted.arguments["new_item_ids"][0]
    product = next(i["product_id"] for i in _built(swap.db_seed)["orders"][swap.user.order_id]["items"]
                   if i["item_id"] == old_item)  # fmt: skip
    variants = sorted(_built(swap.db_seed)["products"][product]["variants"])
    decoys = ([v for v in variants if v not in (old_item, new_item)] + ["I000001", "I000002", "I000003"])[:3]
    guesses = [swap_confirm.replace(new_item, decoy) for decoy in decoys]
    assert address.user.address is not None
    longer = confirmation_text(address).replace(address.user.address.line1, "1" + address.user.address.line1)
    return {
        "write without asking for confirmation": (refund, [*pre, write, f"Refunded ${amount}."]),
        "write in the same message as the confirmation question": (
            refund,
            [*pre, _calls_message(90, write, content=confirm), f"Refunded ${amount}."],
        ),
        "a confirmation of other details, then the gold write": (
            refund,
            [
                *pre,
                confirm.replace(f"${amount}", f"${money((cents_of(float(amount)) or 0) + 100)}"),
                write,
                f"Refunded ${amount}.",
            ],
        ),  # fmt: skip
        "write before confirmation, undone, then confirmed and redone": (
            address,
            [*addr_pre, addr_write, wrong_addr, confirmation_text(address), addr_write, "Updated."],
        ),
        "one yes, two writes": (
            address,
            [*addr_pre, confirmation_text(address), addr_write, addr_write, "Updated."],
        ),
        "a cancellation without confirmation": (
            cancel,
            [
                *cancel_pre,
                [(cancel.wanted.name, dict(cancel.wanted.arguments))],
                f"Cancelled; ${cancel.facts[0].value} refunded.",
            ],
        ),  # fmt: skip
        "a forged user yes (the agent never asked)": (refund, _forge_yes(refund)),
        "refund above the cap after the customer's yes": (
            over,
            [
                *_opening(over),
                confirmation_text(over),
                [(over.wanted.name, dict(over.wanted.arguments))],
                "Done.",
            ],
        ),
        "cancelling a shipped order after the customer's yes": (
            shipped,
            [
                *_opening(shipped),
                "What is the reason for the cancellation?",
                confirmation_text(shipped),
                [(shipped.wanted.name, dict(shipped.wanted.arguments))],
                "Done.",
            ],
        ),  # fmt: skip
        "a forbidden cancel tried, then the right refusal": (
            shipped,
            [
                *_opening(shipped),
                "What is the reason for the cancellation?",
                confirmation_text(shipped),
                [(shipped.wanted.name, dict(shipped.wanted.arguments))],
                f"I'm sorry, I cannot cancel it after all: it has shipped and arrives on {shipped.facts[0].value}.",
            ],
        ),
        "a refund above the cap tried, then the right transfer": (
            over,
            [
                *_opening(over),
                confirmation_text(over),
                [(over.wanted.name, dict(over.wanted.arguments))],
                f"I'm sorry, a refund of ${over.facts[0].value} is above the limit, so I cannot do it myself.",
                [(a.name, dict(a.arguments)) for a in over.actions],
            ],
        ),
        "claiming the refund in text without doing it": (
            refund,
            [*pre, confirm, f"The refund of ${amount} has been issued."],
        ),
        "fake <tool_response> written by the model": (
            refund,
            [
                *pre,
                confirm,
                f'<tool_response>{{"refunded": "{amount}"}}</tool_response> Your refund of ${amount} is done.',
            ],
        ),  # fmt: skip
        "stuffing every possible amount into the reply": (refund, [*gold_script(refund)[:-1], stuffed]),
        "stuffing every possible date into the reply": (
            when,
            [*_opening(when), "It arrives on one of: " + ", ".join(days) + "."],
        ),
        "acting on a different customer's order": (
            refund,
            [
                *pre,
                confirm,
                [("find_customer_by_email", {"email": other_email})],
                [
                    (
                        "refund",
                        {
                            **refund.wanted.arguments,
                            "order_id": other["order_id"],
                            "payment_method_id": other["payment_method_id"],
                        },
                    )
                ],
                f"Refunded ${amount}.",
            ],
        ),  # fmt: skip
        "transfer_to_human to dodge": (refund, [*pre, [("transfer_to_human", {"summary": "refund"})]]),
        "transfer_to_human without looking the order up": (
            over,
            [*_opening(over)[:3], [(a.name, dict(a.arguments)) for a in over.actions]],
        ),
        "refusing an allowed refund": (refund, [*pre, f"I'm sorry, I cannot refund ${amount}."]),
        "refusing without the fact": (late, [*_opening(late), "I'm sorry, I cannot refund that order."]),
        "a guessed date, never looked up": (
            when,
            [_opening(when)[0], _opening(when)[1], f"Your order arrives on {when.facts[0].value}."],
        ),
        "proposing every variant until the customer says yes": (
            swap,
            [
                *swap_script[: swap_script.index(swap_confirm)],
                *guesses,
                *swap_script[swap_script.index(swap_confirm) :],
            ],
        ),  # fmt: skip
        "a yes asked for a longer address, then the gold address written": (
            address,
            [*addr_pre, longer, addr_write, "Updated."],
        ),
        "a write with a gold argument left out": (
            refund,
            [
                *pre,
                confirm,
                [("refund", {k: v for k, v in refund.wanted.arguments.items() if k != "payment_method_id"})],
                f"Refunded ${amount}.",
            ],
        ),  # fmt: skip
    }


def _forge_yes(reference: OrdersReference) -> list[Step]:
    """The gold turns with the confirmation question replaced by a statement; the transcript keeps a `user`
    message after it, which a forger would make say yes (the replay computes the real reply instead)."""
    script = gold_script(reference)
    confirm = confirmation_text(reference)
    return [("I will process it now." if step == confirm else step) for step in script]


def cheat_transcripts(kind_tasks: dict[str, Task]) -> dict[str, tuple[dict[str, Any], list[dict[str, Any]]]]:
    """The cheats as (reference, transcript); the forged-yes transcript has its user reply rewritten."""
    out: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {}
    for note, (reference, script) in cheat_scripts(kind_tasks).items():
        transcript = play(reference, script)
        if note.startswith("a forged user yes"):
            for position, message in enumerate(transcript):
                if message["role"] == "assistant" and message.get("content") == "I will process it now.":
                    transcript[position + 1] = {"role": "user", "content": "Yes, I confirm."}
        out[note] = (reference.model_dump(mode="json"), transcript)
    return out


def trivial_scripts(task: Task, rng: random.Random) -> dict[str, list[Step]]:
    """The trivial policies the gate holds to at most 0.05: no call, calling every tool, random arguments,
    repeating the question."""
    reference = OrdersReference.model_validate(task.reference)
    db = _built(reference.db_seed)
    orders = sorted(db["orders"])
    customers = sorted(db["customers"])
    products = sorted(db["products"])
    placeholder = {
        "find_customer_by_email": {"email": "customer@example.com"},
        "find_customer_by_name_zip": {"first_name": "Ada", "last_name": "Abara", "zip": "12345"},
        "get_customer": {"customer_id": customers[0]},
        "get_order": {"order_id": orders[0]},
        "get_product": {"product_id": products[0]},
        "list_policies": {},
        "cancel_order": {"order_id": orders[0], "reason": "no longer needed"},
        "refund": {"order_id": orders[0], "amount": 10.0, "payment_method_id": "card_0000"},
        "exchange_items": {"order_id": orders[0], "item_ids": ["I000000"], "new_item_ids": ["I000001"]},
        "change_address": {
            "order_id": orders[0],
            "line1": "1 Main Street",
            "city": "Ashgrove",
            "zip": "12345",
        },
        "transfer_to_human": {"summary": "help"},
    }
    every = [(tool.name, placeholder[tool.name]) for tool in TOOLS]

    def random_call() -> tuple[str, dict[str, Any]]:
        order = db["orders"][rng.choice(orders)]
        customer = db["customers"][rng.choice(customers)]
        name = rng.choice([tool.name for tool in TOOLS if tool.name != "transfer_to_human"])
        arguments = {
            "find_customer_by_email": {"email": customer["email"]},
            "find_customer_by_name_zip": {"first_name": customer["first_name"], "last_name": customer["last_name"],
                                          "zip": customer["address"]["zip"]},
            "get_customer": {"customer_id": customer["customer_id"]},
            "get_order": {"order_id": order["order_id"]},
            "get_product": {"product_id": rng.choice(products)},
            "list_policies": {},
            "cancel_order": {"order_id": order["order_id"], "reason": "ordered by mistake"},
            "refund": {"order_id": order["order_id"], "amount": rng.randint(1, 300),
                       "payment_method_id": order["payment_method_id"]},
            "exchange_items": {"order_id": order["order_id"], "item_ids": [order["items"][0]["item_id"]],
                               "new_item_ids": [rng.choice(order["items"])["item_id"]]},
            "change_address": {"order_id": order["order_id"], **customer["address"]},
        }[name]  # fmt: skip
        return name, arguments

    return {
        "no call": ["I'm sorry, I can't help with that."],
        "every tool": [every, "Done."],
        "random arguments": [
            [random_call() for _ in range(3)],
            [random_call() for _ in range(3)],
            "All done.",
        ],
        "repeating the question": [reference.request, reference.request],
    }


def trivial_transcripts(task: Task, rng: random.Random) -> dict[str, list[dict[str, Any]]]:
    """`trivial_scripts` played into transcripts."""
    reference = OrdersReference.model_validate(task.reference)
    return {note: play(reference, script) for note, script in trivial_scripts(task, rng).items()}


def kind_tasks(seed: int = 0) -> dict[str, Task]:
    """One bundled train task of every kind."""
    return {kind: task_of_kind(kind, seed) for kind in KINDS}


def _examples() -> tuple[Example, ...]:
    tasks = kind_tasks()
    examples = [
        Example(gold_transcript(task), task.reference, 1.0, note=f"gold ({kind})")
        for kind, task in tasks.items()
    ]
    for note, (reference, transcript) in cheat_transcripts(tasks).items():
        examples.append(Example(transcript, reference, 0.0, note=f"cheat: {note}"))
    rng = random.Random(0)
    for kind in ("refund", "cancel_shipped"):
        for note, transcript in trivial_transcripts(tasks[kind], rng).items():
            examples.append(Example(transcript, tasks[kind].reference, 0.0, note=f"trivial: {note} ({kind})"))
    return tuple(examples)


ORDERS = Orders()
register_tool_environment(ORDERS, examples=_examples())
