"""Safe arithmetic over a shape's kwargs, for roofline overrides (``"2 * tokens * hidden"``).

Parses with ``ast`` and walks a whitelist of nodes; never calls ``eval``. List-valued kwargs
(``shape: [rows, cols]``, ``seq_lens: [..]``) are read by index (``shape[-1]``) or whole, as the one
argument of ``sum``, ``prod``, ``len``, ``min`` or ``max``, which also take one generator over a
list kwarg (``sum(s * s for s in seq_lens)``).
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Mapping

from aka.core.pyparse import parse_expression

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
#: Functions that also take one list-valued kwarg as their only argument: ``sum(seq_lens)``.
_LIST_FUNCS: dict[str, Callable[[list[float]], float]] = {
    "sum": sum,
    "prod": math.prod,
    "len": len,
    "min": min,
    "max": max,
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
        names: Values for the names (a shape's init and input kwargs). A list-valued name is
            read by an integer index (``shape[0]``, ``shape[-1]``) or as the only argument of
            sum, prod, len, min or max, which also take ``expr for v in name`` (one loop over
            a list kwarg, no ``if``).

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
            tree = parse_expression(value)
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
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
        return _item(node, node.value.id, names, text)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _LIST_FUNCS
        and not node.keywords
        and len(node.args) == 1
        and (
            isinstance(node.args[0], ast.GeneratorExp)
            or (isinstance(node.args[0], ast.Name) and isinstance(names.get(node.args[0].id), list))
        )
    ):
        arg = node.args[0]
        if isinstance(arg, ast.GeneratorExp):
            values = _generated(arg, names, text)
        else:
            values = _numbers(arg.id, names, text)
        if not values and node.func.id in ("min", "max"):
            raise ValueError(f"{ast.unparse(node)!r} in {text!r}: the list is empty")
        return float(_LIST_FUNCS[node.func.id](values))
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


def _numbers(name: str, names: Mapping[str, object], text: str) -> list[float]:
    """The elements of list-valued ``name``, each a number."""
    found = names[name]
    if not isinstance(found, list) or any(
        isinstance(v, bool) or not isinstance(v, int | float) for v in found
    ):
        raise ValueError(f"name {name!r} in {text!r} is {found!r:.60}, not a list of numbers")
    return [float(v) for v in found]


def _generated(node: ast.GeneratorExp, names: Mapping[str, object], text: str) -> list[float]:
    """``expr for v in name``: ``expr`` evaluated with ``v`` bound to each element of a list kwarg.

    One ``for`` over a list-valued kwarg, no ``if``; the loop name must not shadow a kwarg.
    """
    if len(node.generators) != 1:
        raise ValueError(f"{ast.unparse(node)!r} in {text!r}: use exactly one 'for' clause")
    loop = node.generators[0]
    if loop.ifs or loop.is_async or not isinstance(loop.target, ast.Name):
        raise ValueError(
            f"{ast.unparse(node)!r} is not allowed in expression {text!r}; write "
            "'expr for v in list_kwarg' with one plain loop name and no 'if'"
        )
    if not isinstance(loop.iter, ast.Name) or loop.iter.id not in names:
        raise ValueError(
            f"{ast.unparse(loop.iter)!r} in {text!r}: loop over one of the shape's list kwargs "
            f"{sorted(k for k, v in names.items() if isinstance(v, list))}"
        )
    var = loop.target.id
    if var in names:
        raise ValueError(f"loop name {var!r} in {text!r} hides the shape's kwarg; rename it")
    return [
        _walk(node.elt, {**names, var: value}, text)
        for value in _numbers(loop.iter.id, names, text)
    ]


def _item(node: ast.Subscript, name: str, names: Mapping[str, object], text: str) -> float:
    """``name[i]`` with a constant integer ``i`` (negative counts from the end)."""
    index_node, negative = node.slice, False
    if isinstance(index_node, ast.UnaryOp) and isinstance(index_node.op, ast.USub):
        index_node, negative = index_node.operand, True
    if not (
        isinstance(index_node, ast.Constant)
        and isinstance(index_node.value, int)
        and not isinstance(index_node.value, bool)
    ):
        raise ValueError(
            f"{ast.unparse(node)!r} is not allowed in expression {text!r}; index a list kwarg "
            "with a constant integer, e.g. shape[0] or shape[-1]"
        )
    if name not in names:
        raise ValueError(
            f"unknown name {name!r} in {text!r}; use one of the shape's kwargs {sorted(names)}"
        )
    values = _numbers(name, names, text)
    index = -index_node.value if negative else index_node.value
    if not -len(values) <= index < len(values):
        raise ValueError(f"{ast.unparse(node)!r} in {text!r}: {name} has {len(values)} elements")
    return values[index]


def _arity_text(arity: tuple[int, int | None]) -> str:
    low, high = arity
    if high is None:
        return f"{low} or more arguments"
    return f"{low} argument" + ("s" if low != 1 else "")
