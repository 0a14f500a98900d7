"""Matching calls against gold calls: one call against one gold (schema-aware), and parallel calls as an
exact bipartite assignment.

A gold call maps each argument to a list of acceptable values; `""` in the list means the argument may be
left out. A call matches a gold call when it names the same tool, sends no argument the gold does not list,
sends every argument the gold cannot do without, and each value satisfies the tool's schema and equals an
acceptable value. Omitting an argument whose schema default is acceptable counts as sending the default, and
sending the default counts as omitting it. Values are equal under `schema.canonical` (strings case-folded and
stripped, numbers by value, a bool never a number, lists in order unless a set); an object whose schema
declares properties is matched key by key, its gold value again listing acceptable values per key, at any depth.

Parallel calls: every call must match a different gold call and every gold call must be matched (a perfect
matching in the bipartite graph of call-gold pairs that match). Greedy pairing is wrong (a first call that
fits two gold calls can take the one the second call needed), so the assignment is a maximum matching by
augmenting paths (Kuhn's algorithm): exact, O(V * E), at most 128 calls by 64 gold calls here, so at most
8,192 pair checks, each linear in the call's size.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

from proctor.verifiers.reading.tool_calls import ToolCall
from proctor.verifiers.toolcall.schema import Schema, Tool, canonical, problem

Level = Literal["name", "keys", "values"]
"""How far a call got against a gold call: the wrong tool, the wrong argument names, or a wrong value."""

OMIT = ""
"""In a gold value list: the argument may be left out."""


def alternatives(spec: Any) -> list[Any]:
    """A gold entry as a list of acceptable values (a nested gold may give one value without a list)."""
    return spec if isinstance(spec, list) else [spec]


def value_matches(value: Any, alts: Sequence[Any], schema: Schema) -> bool:
    """Whether a value equals one of the acceptable values (`""` excluded) under the schema."""
    wanted = None
    for alt in alts:
        if isinstance(alt, str) and alt == OMIT:
            continue
        if schema.structured and isinstance(alt, dict):
            if isinstance(value, dict) and object_problem(value, alt, schema) is None:
                return True
            continue
        if wanted is None:
            wanted = canonical(value, schema)
        if wanted == canonical(alt, schema):
            return True
    return False


def _is_default(value: Any, schema: Schema) -> bool:
    return schema.has_default and canonical(value, schema) == canonical(schema.default, schema)


def object_problem(value: dict[str, Any], gold: dict[str, Any], schema: Schema) -> tuple[Level, str] | None:
    """Why an object's keys and values do not match a gold object of acceptable values per key (None: they do)."""
    for key in value:
        if key not in gold:
            return "keys", f"argument {key!r} is not expected"
    for key, spec in gold.items():
        alts = alternatives(spec)
        sub = schema.child(key)
        may_omit = any(isinstance(alt, str) and alt == OMIT for alt in alts)
        if key not in value:
            if not may_omit and not (sub.has_default and value_matches(sub.default, alts, sub)):
                return "keys", f"argument {key!r} is missing"
            continue
        if value_matches(value[key], alts, sub):
            continue
        if may_omit and _is_default(value[key], sub):
            continue  # sending the default is leaving the argument out
        return "values", f"argument {key!r}: {_short(value[key])} is not an acceptable value"
    return None


def call_problem(
    call: ToolCall,
    gold_name: str,
    gold_arguments: dict[str, list[Any]],
    tool: Tool | None,
    integral_floats: bool,
) -> tuple[Level, str] | None:
    """Why a call does not match a gold call, at the first level it fails; None when it matches."""
    if call.name != gold_name or tool is None:
        return "name", f"calls {call.name!r}, not {gold_name!r}"
    for key in call.arguments:
        if key not in gold_arguments:
            return "keys", f"argument {key!r} is not expected"
    found = object_problem(call.arguments, gold_arguments, tool.parameters)
    if found is not None and found[0] == "keys":
        return found
    invalid = problem(call.arguments, tool.parameters, integral_floats)
    if invalid is not None:
        return "values", f"arguments do not fit the schema: {invalid}"
    return found


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


# -- assignment ---------------------------------------------------------------------------------------------------


def max_matching(edges: Sequence[Sequence[int]], right: int) -> list[int]:
    """A maximum matching of a bipartite graph (left i -> its right neighbours), as right -> left or -1.

    Kuhn's augmenting paths: each left node tries its neighbours, taking a matched one only when that one's
    partner can move elsewhere. Exact (Berge: a matching with no augmenting path is maximum); recursion depth is
    at most the number of left nodes (128).
    """
    owner = [-1] * right

    def augment(left: int, seen: set[int]) -> bool:
        for node in edges[left]:
            if node in seen:
                continue
            seen.add(node)
            if owner[node] < 0 or augment(owner[node], seen):
                owner[node] = left
                return True
        return False

    for left in range(len(edges)):
        augment(left, set())
    return owner


def assignment_size(
    calls: int, golds: int, fits: Callable[[int, int], bool], order_matters: bool
) -> tuple[int, list[int]]:
    """How many calls can be paired with distinct gold calls they fit, and the pairing (gold -> call or -1)."""
    if order_matters:
        pairing = [index if index < calls and fits(index, index) else -1 for index in range(golds)]
        return sum(1 for index in pairing if index >= 0), pairing
    edges = [[gold for gold in range(golds) if fits(call, gold)] for call in range(calls)]
    owner = max_matching(edges, golds)
    return sum(1 for index in owner if index >= 0), owner
