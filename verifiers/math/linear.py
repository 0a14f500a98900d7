"""Linear expressions in one variable, read off the tree: `-2x + 5` is (-2)·x + 5.

Used to solve a one-variable linear inequality (`-x > -1` is `x < 1`, `3 - 2x >= 1` is `x <= 1`) into the
interval it describes. Only the tree's structure is read (sums, products and quotients by constants,
negation); nothing is evaluated but the coefficient's sign, folded exactly (a rational coefficient only, so
the direction of the inequality is never a floating-point guess).
"""

from __future__ import annotations

from fractions import Fraction

from proctor.verifiers.math.grammar import Node, Number
from proctor.verifiers.math.values import fold, free_symbols

_ZERO = Node("num", (), Number(Fraction(0), "0", "int"))
_ONE = Node("num", (), Number(Fraction(1), "1", "int"))


def linear_in(node: Node, variable: str) -> tuple[Node, Node] | None:
    """(a, b) with node = a·variable + b, a and b constant trees; None when node is not linear in variable
    (or holds another variable)."""
    op = node.op
    if op == "sym":
        return (_ONE, _ZERO) if node.value == variable else None
    symbols = free_symbols(node)
    if not symbols:
        return _ZERO, node
    if symbols != {variable}:
        return None
    if op == "group":
        return linear_in(node.args[0], variable)
    if op == "neg":
        inner = linear_in(node.args[0], variable)
        return None if inner is None else (Node("neg", (inner[0],)), Node("neg", (inner[1],)))
    if op == "add":
        parts = [linear_in(arg, variable) for arg in node.args]
        if any(part is None for part in parts):
            return None
        return (
            Node("add", tuple(part[0] for part in parts if part is not None)),
            Node("add", tuple(part[1] for part in parts if part is not None)),
        )
    if op == "mul":
        varying = [index for index, arg in enumerate(node.args) if free_symbols(arg)]
        if len(varying) != 1:
            return None
        inner = linear_in(node.args[varying[0]], variable)
        if inner is None:
            return None
        others = tuple(arg for index, arg in enumerate(node.args) if index != varying[0])
        return Node("mul", (*others, inner[0])), Node("mul", (*others, inner[1]))
    if op == "div" and not free_symbols(node.args[1]):
        inner = linear_in(node.args[0], variable)
        if inner is None:
            return None
        denominator = node.args[1]
        return Node("div", (inner[0], denominator)), Node("div", (inner[1], denominator))
    return None


def solve_for(side: Node, other: Node, variable: str) -> tuple[Node, int] | None:
    """For `side OP other` with side linear in variable and other constant: (bound, sign) where the relation
    reads `variable OP' bound`, OP' being OP when sign is 1 and OP flipped when sign is -1 (a negative
    coefficient). None when the coefficient is not a nonzero rational or side is not linear."""
    found = linear_in(side, variable)
    if found is None or free_symbols(other):
        return None
    coefficient, constant = found
    value = fold(coefficient)
    if value is None or value == 0:
        return None
    bound = Node("div", (Node("add", (other, Node("neg", (constant,)))), coefficient))
    return bound, 1 if value > 0 else -1
