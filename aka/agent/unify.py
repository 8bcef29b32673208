"""Symbolic shape unification for the kernel adapter: launcher dims against real sizes.

Owns binding the dimension tokens of a kernel header (``N``, ``2*D``, ``...``, ``?``, expressions;
see ``aka.spec.kernel_meta``) to a problem's concrete sizes, and the *runtime* expression of every
bound symbol (``x.shape[-1]``, ``self.head_dim``), so generated code recomputes sizes from the live
tensors instead of baking in the sizes seen once. Views are limited to flattening leading dims into
the launcher's first dim, splitting a dim where the header allows it, and reshaping outputs by
merging runs of dims. Pure functions over ints and strings: imports no torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from aka.spec.kernel_meta import parse_dim

__all__ = [
    "Blocked",
    "Env",
    "Mismatch",
    "bind_dim",
    "reshape_expr",
    "token_value",
    "unify_shape",
]


@dataclass
class Env:
    """Symbol bindings: sizes, the runtime expression of each, the shared leading dims."""

    dims: dict[str, int] = field(default_factory=dict)
    exprs: dict[str, str] = field(default_factory=dict)
    ellipsis: tuple[int, ...] | None = None
    checks: list[tuple[str, int, str]] = field(default_factory=list)

    def copy(self) -> Env:
        """An independent copy (the search backtracks)."""
        return Env(dict(self.dims), dict(self.exprs), self.ellipsis, list(self.checks))


class Blocked(Exception):
    """Unification needs a symbol another parameter binds later."""


class Mismatch(Exception):
    """Unification failed; the message says why."""


# ------------------------------------------------------------------ dims
def bind_dim(env: Env, token: Any, value: int, expr: str, where: str) -> None:
    """Bind one launcher dim token to a real size whose runtime expression is ``expr``.

    Raises:
        Mismatch: The size contradicts the token (a fixed size, a bound symbol, a multiple).
    """
    kind, factor, name = parse_dim(token)
    if kind == "int" and value != factor:
        raise Mismatch(f"{where} is {value}, the kernel needs {factor}")
    if kind == "symbol":
        if name in env.dims:
            if factor * env.dims[name] != value:
                raise Mismatch(
                    f"{where} is {value}, but {token} = {factor * env.dims[name]} "
                    f"(from {env.exprs[name]})"
                )
            return
        if value % factor:
            raise Mismatch(f"{where} is {value}, not a multiple of {factor} ({token})")
        env.dims[name] = value // factor
        env.exprs[name] = expr if factor == 1 else f"{expr} // {factor}"
    elif kind == "expr":
        env.checks.append((name, value, where))


def _token_expr(env: Env, token: Any) -> str | None:
    kind, factor, name = parse_dim(token)
    if kind == "int":
        return str(factor)
    if kind == "symbol" and name in env.dims:
        return env.exprs[name] if factor == 1 else f"{factor} * {env.exprs[name]}"
    return None


def token_value(env: Env, token: Any) -> int | None:
    """The size a token stands for under ``env`` (None while its symbol is unbound)."""
    kind, factor, name = parse_dim(token)
    if kind == "int":
        return factor
    if kind == "symbol" and name in env.dims:
        return factor * env.dims[name]
    return None


def _alignments(n: int, m: int) -> list[list[tuple[int, int, int, int]]]:
    """Ways to cut n launcher dims and m problem dims into matching runs (one side one dim)."""
    if n == 0 and m == 0:
        return [[]]
    out: list[list[tuple[int, int, int, int]]] = []
    for a, b in [(1, 1)] + [(k, 1) for k in range(2, n + 1)] + [(1, k) for k in range(2, m + 1)]:
        if a <= n and b <= m and (n - a == 0) == (m - b == 0):
            out += [[(0, a, 0, b)] + _shift(rest, a, b) for rest in _alignments(n - a, m - b)]
    return out


def _shift(
    blocks: list[tuple[int, int, int, int]], a: int, b: int
) -> list[tuple[int, int, int, int]]:
    return [(i0 + a, i1 + a, j0 + b, j1 + b) for i0, i1, j0, j1 in blocks]


def _split_block(env: Env, tokens: list[Any], value: int, expr: str, where: str) -> list[str]:
    """Bind launcher dims ``tokens`` whose product is one problem dim; return their expressions."""
    known = [(t, token_value(env, t)) for t in tokens]
    unknown = [t for t, v in known if v is None]
    product = math.prod(v for _, v in known if v is not None)
    if len(unknown) > 1:
        raise Blocked(f"{where} = {value} splits into {tokens} with {unknown} unknown")
    if not unknown:
        if product != value:
            raise Mismatch(f"{where} is {value}, not {' * '.join(map(str, tokens))} = {product}")
    else:
        if value % product:
            raise Mismatch(f"{where} is {value}, not a multiple of {product}")
        divisor = " * ".join(e for t in tokens if (e := _token_expr(env, t)) is not None)
        bind_dim(env, unknown[0], value // product, f"{expr} // ({divisor})", where)
    return [_token_expr(env, t) or "-1" for t in tokens]


def unify_shape(
    env: Env,
    tokens: list[Any],
    shape: tuple[int, ...],
    base: str,
    label: str,
    *,
    flattened: bool = False,
) -> tuple[Env, str, bool]:
    """Unify launcher tokens with a problem shape; return (env, expression to pass, reshaped)."""
    if tokens and parse_dim(tokens[0])[0] == "ellipsis":
        rest = tokens[1:]
        if len(shape) < len(rest):
            raise Mismatch(f"{label} has {len(shape)} dims, the kernel needs at least {len(rest)}")
        lead = shape[: len(shape) - len(rest)]
        if env.ellipsis is not None and env.ellipsis != lead:
            raise Mismatch(f"{label}'s leading dims {lead} differ from {env.ellipsis}")
        env.ellipsis = lead
        for k, token in enumerate(rest):
            axis = k - len(rest)
            bind_dim(env, token, shape[axis], f"{base}.shape[{axis}]", f"{label} dim {axis}")
        return env, base, False
    if len(tokens) == len(shape):
        for axis, (token, size) in enumerate(zip(tokens, shape, strict=True)):
            bind_dim(env, token, size, f"{base}.shape[{axis}]", f"{label} dim {axis}")
        return env, base, False
    return _unify_reshaped(env, tokens, shape, base, label, flattened)


def _unify_reshaped(
    env: Env, tokens: list[Any], shape: tuple[int, ...], base: str, label: str, flattened: bool
) -> tuple[Env, str, bool]:
    """Unify through a view of the problem's tensor.

    Allowed: leading problem dims merged into the launcher's first dim (the rows of a 2D+
    launcher), and, where the header allows it (``flattened``), one problem dim split into several
    launcher dims. A split that solves an unknown to 1 counts only when nothing is blocked.
    """
    blocked, reasons = None, []
    found: list[tuple[bool, Env, str]] = []
    for blocks in _alignments(len(tokens), len(shape)):
        if not all(
            (i1 - i0 == 1 or flattened) and (j1 - j0 == 1 or (i0 == 0 and len(tokens) >= 2))
            for i0, i1, j0, j1 in blocks
        ):
            continue
        trial = env.copy()
        try:
            parts: list[str] = []
            for i0, i1, j0, j1 in blocks:
                axes = [f"{base}.shape[{j}]" for j in range(j0, j1)]
                value, expr = math.prod(shape[j0:j1]), " * ".join(axes)
                where = f"{label} dims {j0}..{j1 - 1}" if j1 - j0 > 1 else f"{label} dim {j0}"
                if i1 - i0 == 1:
                    bind_dim(trial, tokens[i0], value, expr, where)
                    parts.append(expr)
                else:
                    parts += _split_block(trial, tokens[i0:i1], value, expr, where)
        except Blocked as err:
            blocked = err
            continue
        except Mismatch as err:
            reasons.append(str(err))
            continue
        # a split that solves an unknown to 1 (33 = T * H with H = 1) is a guess, not evidence
        guess = any(trial.dims.get(n) == 1 and n not in env.dims for n in trial.dims)
        found.append((guess, trial, f"{base}.reshape({', '.join(parts)})"))
    found.sort(key=lambda f: f[0])
    if found and not (blocked is not None and found[0][0]):
        return found[0][1], found[0][2], True
    if blocked is not None:
        raise blocked
    raise Mismatch(
        f"{label} {list(shape)} cannot be viewed as {tokens}"
        + (f" ({reasons[0]})" if reasons else "")
    )


def reshape_expr(
    expr: str, have: list[int], want: list[int], inputs: list[tuple[str, tuple[int, ...]]]
) -> str | None:
    """A view of ``expr`` (shape ``have``) as ``want``, or None when there is none.

    Tries merging runs of ``have``'s dims, then an input of shape ``want`` (``inputs`` holds each
    input's runtime expression and shape), then leading dims of an input that were flattened into
    the launcher's first dim.
    """
    if math.prod(have) != math.prod(want):
        return None
    parts, i = [], 0
    for size in want:
        run: list[int] = []
        while i < len(have) and (not run or math.prod(have[k] for k in run) < size):
            run.append(i)
            i += 1
        while i < len(have) and have[i] == 1 and math.prod(have[k] for k in run) == size:
            run.append(i)
            i += 1
        if not run or math.prod(have[k] for k in run) != size:
            break
        parts.append(" * ".join(f"{expr}.shape[{k}]" for k in run))
    else:
        if i == len(have):
            return f"{expr}.reshape({', '.join(parts)})"
    same = next((name for name, shape in inputs if list(shape) == want), None)
    if same is not None:
        return f"{expr}.reshape({same}.shape)"
    for name, shape in inputs:
        for k in range(2, len(want)):
            if (
                list(shape[:k]) == want[:k]
                and have[0] == math.prod(want[:k])
                and have[1:] == want[k:]
            ):
                rest = "".join(f", {expr}.shape[{i}]" for i in range(1, len(have)))
                return f"{expr}.reshape(*{name}.shape[:{k}]{rest})"
    return None
