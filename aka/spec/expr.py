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
#: (fewest, most) arguments of each function; None: no upper bound.
_ARITY: dict[str, tuple[int, int | None]] = {
    "ceil": (1, 1),
    "floor": (1, 1),
    "min": (2, None),
    "max": (2, None),
    "log2": (1, 1),
    "sqrt": (1, 1),
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
        ValueError: The expression uses something outside the whitelist or an unknown name, calls a
            function with the wrong number of arguments, is a boolean, or does not compute to a
            finite number (division by zero, overflow).
    """
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is a boolean, not a number; write a number or an expression")
    if isinstance(value, int | float):
        result = float(value)
    else:
        try:
            tree = ast.parse(value, mode="eval")
        except SyntaxError as err:
            raise ValueError(f"cannot parse expression {value!r}: {err.msg}") from err
        try:
            result = float(_walk(tree.body, names, value))
        except ArithmeticError as err:  # ZeroDivisionError, OverflowError
            raise ValueError(f"expression {value!r} cannot be computed: {err}") from err
    if not math.isfinite(result):
        raise ValueError(f"expression {value!r} is not finite ({result})")
    return result


def _walk(node: ast.AST, names: Mapping[str, object], text: str) -> float:
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int | float)
        and not isinstance(node.value, bool)
    ):
        return float(node.value)
    if isinstance(node, ast.Name):
        if node.id not in names:
            known = sorted(names)
            raise ValueError(
                f"unknown name {node.id!r} in {text!r}; use one of the shape's kwargs {known}"
            )
        found = names[node.id]
        if isinstance(found, bool) or not isinstance(found, int | float):
            raise ValueError(f"name {node.id!r} in {text!r} is {found!r}, not a number")
        return float(found)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = _walk(node.left, names, text), _walk(node.right, names, text)
        result = _BINOPS[type(node.op)](left, right)
        if isinstance(result, complex):  # a negative number to a fractional power
            raise ValueError(f"{ast.unparse(node)!r} in {text!r} is not a real number")
        return result
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_walk(node.operand, names, text)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _FUNCS
        and not node.keywords
    ):
        args = [_walk(a, names, text) for a in node.args]
        arity = _ARITY[node.func.id]
        if len(args) < arity[0] or (arity[1] is not None and len(args) > arity[1]):
            raise ValueError(
                f"{ast.unparse(node)!r} in {text!r}: {node.func.id} takes {_arity_text(arity)}"
            )
        try:
            return float(_FUNCS[node.func.id](*args))
        except ValueError as err:  # math domain error: log2 or sqrt of a negative
            raise ValueError(f"{ast.unparse(node)!r} in {text!r}: {err}") from err
    raise ValueError(
        f"{ast.unparse(node)!r} is not allowed in expression {text!r}; use numbers, the shape's "
        f"kwargs, + - * / // % ** and {', '.join(_FUNCS)}"
    )


def _arity_text(arity: tuple[int, int | None]) -> str:
    low, high = arity
    if high is None:
        return f"{low} or more arguments"
    return f"{low} argument" + ("s" if low != 1 else "")
