"""Safe arithmetic over a shape's kwargs, for roofline overrides (``"2 * tokens * hidden"``).

Parses with ``ast`` and walks a whitelist of nodes; never calls ``eval``.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Mapping

__all__ = ["evaluate_quantity"]

_BINOPS: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_FUNCS: dict[str, Callable[..., float]] = {
    "ceil": math.ceil,
    "floor": math.floor,
    "min": min,
    "max": max,
    "log2": math.log2,
    "sqrt": math.sqrt,
}


def evaluate_quantity(value: float | int | str, names: Mapping[str, object]) -> float:
    """Evaluate a number or an arithmetic expression over ``names``.

    Args:
        value: A number, or an expression of numbers, names, + - * / // % **, and the functions
            ceil, floor, min, max, log2, sqrt.
        names: Values for the names (a shape's init and input kwargs).

    Returns:
        The value as a float.

    Raises:
        ValueError: The expression uses something outside the whitelist, or an unknown name.
    """
    if isinstance(value, int | float):
        return float(value)
    try:
        tree = ast.parse(value, mode="eval")
    except SyntaxError as err:
        raise ValueError(f"cannot parse expression {value!r}: {err.msg}") from err
    return float(_walk(tree.body, names, value))


def _walk(node: ast.AST, names: Mapping[str, object], text: str) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return float(node.value)
    if isinstance(node, ast.Name):
        if node.id not in names:
            raise ValueError(f"unknown name {node.id!r} in {text!r}; known: {sorted(names)}")
        found = names[node.id]
        if isinstance(found, bool) or not isinstance(found, int | float):
            raise ValueError(f"name {node.id!r} in {text!r} is {found!r}, not a number")
        return float(found)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        return _BINOPS[type(node.op)](_walk(node.left, names, text), _walk(node.right, names, text))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_walk(node.operand, names, text)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _FUNCS
        and not node.keywords
    ):
        return float(_FUNCS[node.func.id](*(_walk(a, names, text) for a in node.args)))
    raise ValueError(f"unsupported syntax {ast.dump(node)[:60]!r} in expression {text!r}")
