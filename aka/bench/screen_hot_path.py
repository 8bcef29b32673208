"""The static screen's hot path: what forward reaches, which names hold tensors, what they do.

Owns, for ``aka.bench.screen``: finding the hot path (``forward``/``__call__`` of the entry class
and every function, method, lambda or class of the file they reach, kernels excluded), tracking
which names hold a tensor by construction (``Tensors``), and the hot-path findings of the rules
``torch-compute-in-forward``, ``mutable-cache`` (per-call state) and numpy math, also applied to
``torch.library.custom_op`` bodies anywhere. Reads the tree through ``Names``; never runs it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from aka.bench.screen_names import (
    FunctionNode,
    Names,
    body_of,
    decorator_names,
    dotted,
    flatten,
    is_self,
    name_of,
    name_uses,
    owner_of,
    src,
    walk,
)
from aka.bench.screen_vocab import (
    ATTR_RULES,
    COMPUTE,
    DUNDER_MATH,
    MODULE_LIKE,
    MUTATORS,
    PARAMETER_CLASSES,
    TENSOR_ALLOWED,
    TENSOR_MATH,
    TENSOR_META,
    TORCH_ALLOWED_SUBMODULES,
    TORCH_DTYPES,
    TORCH_NOT_TENSOR,
    is_value_name,
    name_rule,
    torch_computes,
    words,
)

__all__ = ["HotPath", "Tensors", "tensor_params"]

_HOT_HASHING = words("builtins.hash hashlib zlib.crc32 zlib.adler32 xxhash mmh3")
_HASH_METHODS = frozenset({"tobytes", "numpy", "tolist", "cpu"})
_NUMPY_OK = words("""
    dtype finfo iinfo float16 float32 float64 half single double int8 int16 int32 int64 uint8
    uint16 uint32 uint64 bool_ intp
""")
_BUILTIN_MATH = frozenset(f"builtins.{f}" for f in words("abs pow sum min max divmod round"))
_OPERATOR_MATH = words("""
    add sub mul truediv floordiv mod pow matmul neg pos abs invert and_ or_ xor lshift rshift
    iadd isub imul itruediv ifloordiv imod ipow imatmul lt le gt ge eq ne
""")
_OP_SIGNS: dict[type[ast.AST], str] = {
    ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
    ast.Pow: "**", ast.MatMult: "@", ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^",
    ast.LShift: "<<", ast.RShift: ">>", ast.USub: "-", ast.Invert: "~",
}  # fmt: skip
_NUMERIC_COMPARE = (ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Eq, ast.NotEq)
_CUSTOM_OP = frozenset(
    words("torch.library.custom_op torch.library.impl torch.library.register_kernel")
)
_META_ATTRS = frozenset({"shape", "ndim", "dtype", "device", "itemsize", "is_cuda"})
_META_CALLS = frozenset(
    words("size stride numel dim element_size nelement ndimension storage_offset")
)


def tensor_params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """Forward's inputs minus ``self`` and those typed or defaulted as Python scalars."""
    a = fn.args
    positional = [*a.posonlyargs, *a.args]
    defaults: dict[str, ast.expr] = dict(
        zip(
            [p.arg for p in positional[len(positional) - len(a.defaults) :]],
            a.defaults,
            strict=True,
        )
    )
    defaults |= {
        p.arg: d for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=True) if d is not None
    }
    out: set[str] = set()
    for p in [*positional[1:], *a.kwonlyargs, *(v for v in (a.vararg, a.kwarg) if v)]:
        scalar_type = p.annotation is not None and "Tensor" not in ast.unparse(p.annotation)
        default = defaults.get(p.arg)
        scalar_default = isinstance(default, ast.Constant) and default.value is not None
        if not (scalar_type or scalar_default):
            out.add(p.arg)
    return out


class Tensors:
    """Which names hold a tensor by construction, and which functions a call reaches.

    A tensor by construction is an input of forward (not typed or defaulted as a Python scalar),
    a name bound from one or from a view of one, a new tensor from a torch function, a
    ``self.x`` assigned a tensor or parameter anywhere, or a parameter of a function of the file
    that such a value is passed to. Shape arithmetic (``x.shape[0] * 2``) is never a tensor.

    Args:
        names: The module's bindings.
    """

    def __init__(self, names: Names) -> None:
        self.names = names
        self.kernels = names.kernels
        self.self_tensors = self.collect_self_tensors()

    def callees(self, node: ast.expr) -> list[FunctionNode]:
        """Return the file's functions an expression reaches (names, self.m, super().m)."""
        out: list[FunctionNode] = []
        for q in self.names.resolve(node):
            out += self.names.functions_of(q)
        if isinstance(node, ast.Attribute) and (owner := owner_of(self.names, node)):
            value = node.value
            if is_self(value):
                out += [m for m in [self.names.method(owner, node.attr)] if m]
            elif isinstance(value, ast.Call) and dotted(value.func) == "super":
                for base in owner.bases:
                    for q in self.names.resolve(base):
                        if (found := self.names.class_of(q)) and (
                            m := self.names.method(found[0], node.attr)
                        ):
                            out.append(m)
        return [f for f in out if id(f) not in self.kernels]

    def tensor_names(self, hot: list[FunctionNode]) -> dict[int, set[str]]:
        """Names whose value is a tensor by construction, per hot function (flow-insensitive)."""
        tensors: dict[int, set[str]] = {id(fn): set() for fn in hot}
        forward = next((fn for fn in hot if name_of(fn) in ("forward", "__call__")), None)
        if forward is not None and not isinstance(forward, ast.Lambda):
            tensors[id(forward)] |= tensor_params(forward)
        for _ in range(8):
            before = sum(map(len, tensors.values()))
            for fn in hot:
                known = tensors[id(fn)]
                self.grow_locals(fn, known)
                for call in walk(body_of(fn), self.kernels):
                    if isinstance(call, ast.Call):
                        for callee in self.callees(call.func):
                            if id(callee) in tensors:
                                tensors[id(callee)] |= self.bound_params(call, callee, known)
            if sum(map(len, tensors.values())) == before:
                break
        return tensors

    def bound_params(self, call: ast.Call, callee: FunctionNode, known: set[str]) -> set[str]:
        """Return the callee's parameters that this call passes a tensor."""
        args = callee.args
        params = [a.arg for a in [*args.posonlyargs, *args.args]]
        if id(callee) in self.names.owner and isinstance(call.func, ast.Attribute):
            params = params[1:]  # a bound method: self is not in the call
        out: set[str] = set()
        for i, arg in enumerate(call.args):
            if isinstance(arg, ast.Starred):
                break
            if i < len(params) and self.is_tensor(arg, known):
                out.add(params[i])
        names = params + [a.arg for a in args.kwonlyargs]
        out |= {k.arg for k in call.keywords if k.arg in names and self.is_tensor(k.value, known)}
        return out

    def grow_locals(self, fn: FunctionNode, known: set[str]) -> None:
        """Add the function's names bound from tensors to ``known`` (to a fixed point)."""
        pairs: list[tuple[ast.expr, ast.expr, bool]] = []
        for node in walk(body_of(fn), self.kernels):
            if isinstance(node, ast.Assign):
                pairs += [(t, node.value, False) for t in node.targets]
            elif isinstance(node, ast.AnnAssign | ast.NamedExpr) and node.value is not None:
                pairs.append((node.target, node.value, False))
            elif isinstance(node, ast.For | ast.comprehension):
                pairs.append((node.target, node.iter, True))
        for _ in range(8):
            before = len(known)
            for target, value, loop in pairs:
                self.bind_tensor(target, value, known, loop)
            if len(known) == before:
                break

    def bind_tensor(self, target: ast.expr, value: ast.expr, known: set[str], loop: bool) -> None:
        """Add the names ``target = value`` (or ``for target in value``) binds to a tensor."""
        if loop:  # iterating a tensor, or a literal list of tensors
            elts = value.elts if isinstance(value, ast.Tuple | ast.List) else [value]
            if any(self.is_tensor(e, known) for e in elts):
                known |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
        elif isinstance(target, ast.Name):
            if self.is_tensor(value, known):
                known.add(target.id)
        elif isinstance(target, ast.Tuple | ast.List):
            if isinstance(value, ast.Tuple | ast.List) and len(value.elts) == len(target.elts):
                for t, v in zip(target.elts, value.elts, strict=True):
                    self.bind_tensor(t, v, known, False)
            elif self.is_tensor(value, known):
                known |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}

    def is_tensor(self, e: ast.AST, known: set[str]) -> bool:
        """Return whether an expression is a tensor by construction."""
        if isinstance(e, ast.Name):
            return e.id in known
        if isinstance(e, ast.Attribute):
            if is_self(e.value):
                return e.attr in self.self_tensors
            return e.attr in ("T", "mT", "H", "mH", "real", "imag", "data", "grad") and (
                self.is_tensor(e.value, known)
            )
        if isinstance(e, ast.Subscript | ast.Starred | ast.NamedExpr):
            return self.is_tensor(e.value, known)
        if isinstance(e, ast.Call):
            if self.makes_tensor(e):
                return True
            func = e.func
            return (
                isinstance(func, ast.Attribute)
                and func.attr not in TENSOR_META
                and self.is_tensor(func.value, known)
            )
        if isinstance(e, ast.BinOp):
            return self.is_tensor(e.left, known) or self.is_tensor(e.right, known)
        if isinstance(e, ast.UnaryOp):
            return self.is_tensor(e.operand, known)
        if isinstance(e, ast.IfExp):
            return self.is_tensor(e.body, known) or self.is_tensor(e.orelse, known)
        if isinstance(e, ast.BoolOp):
            return any(self.is_tensor(v, known) for v in e.values)
        return False

    def has_tensor(self, e: ast.AST, known: set[str]) -> bool:
        """Return whether an expression is a tensor or a literal container holding one."""
        if isinstance(e, ast.Tuple | ast.List | ast.Set):
            return any(self.has_tensor(x, known) for x in e.elts)
        return self.is_tensor(e.value if isinstance(e, ast.Starred) else e, known)

    def makes_tensor(self, call: ast.Call) -> bool:
        """Return whether a call is a torch function that returns a new tensor."""
        for q in self.names.resolve(call.func):
            if q in PARAMETER_CLASSES:
                return True
            if q.startswith("torch.") and q not in MODULE_LIKE:
                first = q.split(".")[1]
                if not (
                    first in TORCH_NOT_TENSOR
                    or first in TORCH_ALLOWED_SUBMODULES
                    or first in TORCH_DTYPES
                    or first.startswith(("is_", "set_", "get_", "_"))
                ):
                    return True
        return False

    def collect_self_tensors(self) -> set[str]:
        """``self.x`` attributes assigned a new tensor, a parameter or a registered buffer."""
        out: set[str] = set()
        for node in ast.walk(self.names.tree):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                if self.makes_tensor(node.value):  # noqa: SIM102
                    out |= {
                        t.attr
                        for t in flatten(node.targets)
                        if isinstance(t, ast.Attribute) and is_self(t.value)
                    }
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("register_buffer", "register_parameter")
                and (name := self.names.fold(node.args[0] if node.args else None))
            ):
                out.add(name)
        return out


class HotPath:
    """The hot path of one candidate, and the findings of the rules that hold only on it.

    Args:
        names: The module's bindings.
        tensors: Which names hold tensors, over the same bindings.
        own_ops: The ``torch.ops`` namespaces the file registers itself.
    """

    def __init__(self, names: Names, tensors: Tensors, own_ops: set[str]) -> None:
        self.names = names
        self.tensors = tensors
        self.own_ops = own_ops

    def functions(self, entry: str | None) -> list[FunctionNode]:
        """``forward``/``__call__`` of the entry class and every function of the file they reach."""
        cls = next(
            (n for n in self.names.tree.body if isinstance(n, ast.ClassDef) and n.name == entry),
            None,
        )
        roots = [self.names.method(cls, m) for m in ("forward", "__call__")] if cls else []
        todo = [r for r in roots if r is not None]
        seen: dict[int, FunctionNode] = {}
        while todo:
            fn = todo.pop()
            if id(fn) in seen or id(fn) in self.names.kernels:
                continue
            seen[id(fn)] = fn
            for node in walk(body_of(fn), self.names.kernels):
                if not isinstance(node, ast.Name | ast.Attribute | ast.Call):
                    continue
                parent = self.names.parent(node)
                if not (isinstance(parent, ast.Attribute) and parent.value is node):
                    todo += self.tensors.callees(node)
        return list(seen.values())

    def findings(
        self, fn: FunctionNode, known: set[str], inputs: set[str]
    ) -> Iterator[tuple[str, ast.AST, str]]:
        """Yield (rule, node, what) for compute and per-call state in one hot function."""
        where = f"in {name_of(fn)}()"
        nodes = list(walk(body_of(fn), self.names.kernels))
        params = _param_names(fn)
        for node, resolved in name_uses(self.names, nodes):
            called = isinstance(self.names.parent(node), ast.Call) and (
                self.names.parent(node).func is node  # type: ignore[union-attr]
            )
            for q in sorted(resolved):
                shown = src(node) + ("()" if called else "")
                via = "" if src(node) == q else f" ({q})"
                other_rule = name_rule(q) is not None
                if (
                    torch_computes(q, self.own_ops)
                    and not other_rule
                    and (called or not is_value_name(q))
                ):
                    yield COMPUTE, node, f"{shown}{via} computes with torch {where}"
                elif q.startswith("numpy.") and called and q.split(".")[1] not in _NUMPY_OK:
                    yield "vendor-library", node, f"{shown} is numpy math {where}"
                elif any(q == h or q.startswith(h + ".") for h in _HOT_HASHING) and called:
                    yield "mutable-cache", node, f"{shown} hashes {where}"
                elif q.startswith("@meth:") and called and q[6:] in TENSOR_MATH | DUNDER_MATH:
                    yield COMPUTE, node, f".{q[6:]}() is tensor math {where}"
        for sub in nodes:
            what = None
            if isinstance(sub, ast.Call):
                yield from self.call_findings(sub, known, inputs, where)
            elif isinstance(sub, ast.BinOp | ast.AugAssign | ast.UnaryOp | ast.Compare):
                what = self.tensor_operator(sub, known, params)
            elif isinstance(sub, ast.Subscript | ast.Attribute):
                what = self.tensor_access(sub, known)
            if what:
                yield COMPUTE, sub, f"{what} {where}"
            if isinstance(sub, ast.Assign | ast.AugAssign | ast.AnnAssign | ast.Delete):
                targets = sub.targets if isinstance(sub, ast.Assign | ast.Delete) else [sub.target]
                for target in flatten(targets):
                    if _self_rooted(target) and name_of(fn) != "__init__":  # a fresh object
                        yield "mutable-cache", sub, f"writes {src(target)} {where}"

    def call_findings(
        self, node: ast.Call, known: set[str], inputs: set[str], where: str
    ) -> Iterator[tuple[str, ast.AST, str]]:
        """Yield (rule, node, what) for one call in a hot function."""
        funcs = self.names.resolve(node.func)
        tensor_arg = any(self.tensors.has_tensor(a, known) for a in node.args)
        if funcs & _BUILTIN_MATH and tensor_arg:
            yield COMPUTE, node, f"{src(node.func)}() on a tensor {where}"
        operator = any(q.startswith("operator.") and q[9:] in _OPERATOR_MATH for q in funcs)
        if operator and (tensor_arg or "operator.matmul" in funcs):
            yield COMPUTE, node, f"{src(node.func)}() on a tensor {where}"
        if funcs & {"builtins.id", "builtins.bytes"} and tensor_arg:
            yield "mutable-cache", node, f"{src(node.func)}() of a tensor {where}"
        target = node.args[0] if node.args else None
        if funcs & {"builtins.setattr", "builtins.delattr"} and target is not None:  # noqa: SIM102
            if _self_rooted(target) or is_self(target):
                yield "mutable-cache", node, f"{src(node.func)}() on self {where}"
        func = node.func
        if isinstance(func, ast.Call) and self.names.resolve(func.func) & {"builtins.getattr"}:
            name = self.names.fold(func.args[1]) if len(func.args) > 1 else None
            if name is None:
                return
            m, receiver = name, func.args[0]
        elif isinstance(func, ast.Attribute) and not funcs:
            m, receiver = func.attr, func.value
        else:
            return
        if _self_rooted(receiver) and m in MUTATORS:
            yield "mutable-cache", node, f"{src(func)}() mutates state {where}"
        if m in _HASH_METHODS:
            yield "mutable-cache", node, f".{m}() copies tensor data to the host {where}"
            return
        if m in ATTR_RULES or (is_self(receiver) and self.tensors.callees(func)):
            return
        if self.tensors.is_tensor(receiver, known):
            root = receiver
            while isinstance(root, ast.Attribute | ast.Subscript | ast.Call):
                root = root.func if isinstance(root, ast.Call) else root.value
            refill = m in ("zero_", "fill_") and isinstance(root, ast.Name) and root.id in inputs
            if m not in TENSOR_ALLOWED or refill:
                yield COMPUTE, node, f".{m}() is tensor math {where}"
        elif m in TENSOR_MATH or m in DUNDER_MATH:
            yield COMPUTE, node, f".{m}() is tensor math {where}"

    def tensor_access(self, node: ast.Subscript | ast.Attribute, known: set[str]) -> str | None:
        """Item writes into a tensor, tensor-indexed reads, bound tensor math methods."""
        if not self.tensors.is_tensor(node.value, known):
            return None
        if isinstance(node, ast.Attribute):
            parent = self.names.parent(node)
            called = isinstance(parent, ast.Call) and parent.func is node
            math = node.attr in TENSOR_MATH or node.attr in DUNDER_MATH
            return f".{node.attr} (a tensor math method)" if math and not called else None
        if isinstance(node.ctx, ast.Store | ast.Del):
            return "item assignment into a tensor"
        index = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        hit = any(self.tensors.has_tensor(i, known) for i in index)
        return "indexing a tensor with a tensor" if hit else None

    def tensor_operator(
        self, node: ast.BinOp | ast.AugAssign | ast.UnaryOp | ast.Compare, known: set[str],
        params: set[str],
    ) -> str | None:  # fmt: skip
        """Return what an operator or comparison does to a tensor (as a message), else None."""
        if isinstance(node, ast.BinOp | ast.AugAssign) and isinstance(node.op, ast.MatMult):
            return "'@='" if isinstance(node, ast.AugAssign) else "'@'"
        if isinstance(node, ast.UnaryOp):
            hit = isinstance(node.op, ast.USub | ast.Invert) and self.tensors.is_tensor(
                node.operand, known
            )
            return f"'{_OP_SIGNS[type(node.op)]}' on a tensor" if hit else None
        if isinstance(node, ast.Compare):
            if not all(isinstance(op, _NUMERIC_COMPARE) for op in node.ops):
                return None
            operands = [node.left, *node.comparators]
            sign = "comparison"
        else:
            operands = [node.target if isinstance(node, ast.AugAssign) else node.left]
            operands.append(node.value if isinstance(node, ast.AugAssign) else node.right)
            equals = "=" if isinstance(node, ast.AugAssign) else ""
            sign = f"'{_OP_SIGNS.get(type(node.op), '?')}{equals}'"
        tensors = [o for o in operands if self.tensors.is_tensor(o, known)]
        if not tensors:
            return None
        others = [o for o in operands if o not in tensors]
        scalar_param = all(isinstance(t, ast.Name) and t.id in params for t in tensors)
        if scalar_param and others and all(_has_meta(o) for o in others):
            return None  # `x.shape[1] // head_dim`: a forward scalar with shape arithmetic
        return f"{sign} on a tensor"

    def custom_op_findings(self) -> Iterator[tuple[str, ast.AST, str]]:
        """Yield a ``torch.library.custom_op`` whose body computes with library math (anywhere)."""
        for node in ast.walk(self.names.tree):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            if not decorator_names(self.names, node) & _CUSTOM_OP:
                continue
            known = _param_names(node)
            self.tensors.grow_locals(node, known)
            hits = [f for f in self.findings(node, known, set()) if f[0] == COMPUTE]
            if hits:
                yield "torch-compile", node, f"custom op {node.name}() wraps {hits[0][2]}"


def _self_rooted(node: ast.AST) -> bool:
    if not isinstance(node, ast.Attribute | ast.Subscript):
        return False
    while isinstance(node, ast.Attribute | ast.Subscript):
        node = node.value
    return is_self(node)


def _has_meta(expr: ast.AST) -> bool:
    """Return whether an expression involves shapes or sizes (``x.shape[0]``, ``len(x)``)."""
    for n in ast.walk(expr):
        if isinstance(n, ast.Attribute) and n.attr in _META_ATTRS:
            return True
        if isinstance(n, ast.Call):
            f = n.func
            if (isinstance(f, ast.Attribute) and f.attr in _META_CALLS) or src(f) == "len":
                return True
    return False


def _param_names(fn: FunctionNode) -> set[str]:
    a = fn.args
    params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *(p for p in (a.vararg, a.kwarg) if p)]
    return {p.arg for p in params} - {"self", "cls"}
