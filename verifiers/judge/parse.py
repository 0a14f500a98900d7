"""Strict verdict parsing: a reply either states its verdict in the one expected form, or it is unparseable.

Three forms, one per kind of question:
- JSON verdicts with a reason before each decision (`{"verdicts": [{"id": 1, "reason": "...", "met": true}]}`
  for rubrics; `{"reason": "...", "winner": "A"}` for pairwise), so the judge reasons before it decides;
- `[RESULT] n` (Prometheus style) for one holistic score on a fixed scale;
- `Final Decision: Yes` / `No` (general-verifier style) for a yes/no question.

Loose parsing (the first digit anywhere, "yes" anywhere) turns a judge's hedge, a quoted prompt or a refusal
into a verdict; here a reply with zero or several verdicts, a missing item, a value off the scale, or a
decision before its reason is rejected with `Unparseable`, which the verifiers score as wrong (reward 0,
reason `judge_unparseable`), as documented. Text inside <think>...</think> is ignored.
"""

from __future__ import annotations

import json
import re
from typing import Any

from proctor.contract import MAX_NESTING, nested_deeper_than

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
_FENCE = re.compile(r"^```(?:json)?\s*\n?(.*?)\n?```$", re.DOTALL)
_RESULT = re.compile(r"\[RESULT\]\s*(-?\d+(?:\.\d+)?)", re.IGNORECASE)
# "Final Decision: Yes/No" or "Yes or No" is the judge restating the format, not deciding.
_DECISION = re.compile(r"final\s+decision\s*[:：]\s*\**\s*(yes|no)\b(?!\s*(?:/|\bor\b))", re.IGNORECASE)


class Unparseable(ValueError):
    """A judge reply that does not state a verdict in the expected form."""


def bounded_json(text: str, limit: int = MAX_NESTING) -> Any:
    """`json.loads` for text a model or a judge wrote: ValueError for anything it cannot safely hand on.

    `json.loads` raises more than JSONDecodeError on hostile text: RecursionError past about 1,000 levels of
    nesting, and ValueError for an integer of more than 4,300 digits. Both become ValueError here, and so does
    a document nesting lists and objects deeper than `limit` (the request contract's `MAX_NESTING`), which
    recursive code further on (json.dumps, pydantic) would otherwise fail on.
    """
    try:
        value = json.loads(text)
    except RecursionError:
        raise ValueError(f"the JSON nests more than {limit} levels deep") from None
    if nested_deeper_than(value, limit):
        raise ValueError(f"the JSON nests more than {limit} levels deep")
    return value


def visible(reply: str) -> str:
    """What follows the last </think> (a reasoning judge's thoughts are not its verdict).

    A reply whose <think> never closes (cut off mid-thought) has no visible part: a verdict the judge only
    considered while thinking is not its verdict.
    """
    close = reply.rfind(THINK_CLOSE)
    tail = reply if close < 0 else reply[close + len(THINK_CLOSE) :]
    return "" if THINK_OPEN in tail else tail.strip()


def json_object(reply: str) -> dict[str, Any]:
    """The one JSON object a reply consists of (optionally in a ```json fence); Unparseable otherwise."""
    text = visible(reply)
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1).strip()
    try:
        value = bounded_json(text)
    except ValueError as exc:  # not JSON, nested too deep (a prompt-injected reply), an oversized integer
        raise Unparseable(f"the reply is not one JSON object ({str(exc)[:100]})") from None
    if not isinstance(value, dict):
        raise Unparseable("the reply is JSON but not an object")
    return value


def _reason_first(entry: dict[str, Any], decision: str, where: str) -> str:
    keys = list(entry)
    if "reason" not in entry or not isinstance(entry["reason"], str) or not entry["reason"].strip():
        raise Unparseable(f"{where}: no reason given")
    if keys.index("reason") > keys.index(decision):
        raise Unparseable(f"{where}: the decision comes before its reason")
    return entry["reason"].strip()


def item_verdicts(reply: str, count: int) -> list[tuple[bool, str]]:
    """(met, reason) for items 1..count from `{"verdicts": [{"id", "reason", "met"}, ...]}`, strictly."""
    data = json_object(reply)
    verdicts = data.get("verdicts")
    if not isinstance(verdicts, list):
        raise Unparseable('no "verdicts" list')
    found: dict[int, tuple[bool, str]] = {}
    for index, entry in enumerate(verdicts):
        where = f"verdict {index}"
        if not isinstance(entry, dict):
            raise Unparseable(f"{where} is not an object")
        item_id, met = entry.get("id"), entry.get("met")
        if not isinstance(item_id, int) or isinstance(item_id, bool) or not 1 <= item_id <= count:
            raise Unparseable(f"{where}: id must be an item number from 1 to {count}")
        if not isinstance(met, bool):
            raise Unparseable(f"{where}: met must be true or false")
        if item_id in found:
            raise Unparseable(f"{where}: item {item_id} judged twice")
        found[item_id] = (met, _reason_first(entry, "met", where))
    if len(found) != count:
        missing = sorted(set(range(1, count + 1)) - set(found))
        raise Unparseable(f"no verdict for item(s) {missing}")
    return [found[item_id] for item_id in range(1, count + 1)]


def result_score(reply: str, low: int, high: int) -> float:
    """The n of exactly one `[RESULT] n` with low <= n <= high (an integer); Unparseable otherwise."""
    values = {match.group(1) for match in _RESULT.finditer(visible(reply))}
    if len(values) != 1:
        raise Unparseable("expected exactly one [RESULT] n" if not values else "conflicting [RESULT] lines")
    text = values.pop()
    if not re.fullmatch(r"-?\d+", text):
        raise Unparseable(f"[RESULT] {text} is not an integer")
    value = int(text)
    if not low <= value <= high:
        raise Unparseable(f"[RESULT] {value} is outside {low}..{high}")
    return float(value)


def final_decision(reply: str) -> bool:
    """True for `Final Decision: Yes`, False for `No`; Unparseable for none or conflicting decisions."""
    values = {match.group(1).lower() for match in _DECISION.finditer(visible(reply))}
    if len(values) != 1:
        raise Unparseable("expected one 'Final Decision: Yes/No'" if not values else "conflicting decisions")
    return values.pop() == "yes"


def preference(reply: str) -> tuple[str, str]:
    """(winner, reason) from `{"reason": "...", "winner": "A" | "B" | "tie"}`, strictly."""
    data = json_object(reply)
    winner = data.get("winner")
    if not isinstance(winner, str) or winner.strip().lower() not in {"a", "b", "tie"}:
        raise Unparseable('winner must be "A", "B" or "tie"')
    reason = _reason_first(data, "winner", "preference")
    normalized = winner.strip().lower()
    return (normalized.upper() if normalized != "tie" else "tie"), reason


def model_score(reply: str, low: float, high: float) -> float:
    """A score model's number: `{"result": x}` (OpenAI's score_model output), or the bare number alone."""
    text = visible(reply)
    try:
        data = json_object(text)
    except Unparseable:
        data = None
    value: Any
    if data is not None:
        value = data.get("result", data.get("score"))
    else:
        try:
            value = float(text)
        except ValueError:
            raise Unparseable('expected {"result": <number>} or a bare number') from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Unparseable("the result is not a number")
    if not low <= float(value) <= high:
        raise Unparseable(f"the result {value} is outside [{low}, {high}]")
    return float(value)


def model_label(reply: str, labels: list[str]) -> str:
    """A label model's label: `{"result": label}` or the bare label, which must be one of `labels`."""
    text = visible(reply)
    try:
        value = json_object(text).get("result")
    except Unparseable:
        value = text.strip().strip('"').strip()
    if not isinstance(value, str) or value not in labels:
        raise Unparseable(f"the label is not one of {labels}")
    return value
