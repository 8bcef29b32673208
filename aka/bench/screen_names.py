"""Name resolution for the static screen: which fully-qualified names an expression may stand for.

Owns the flow-insensitive alias analysis behind ``aka.bench.screen``: imports (``import torch as
th``, ``from torch.nn import functional``, star imports), assignment aliases (``op = torch.rsqrt``,
tuple targets, default arguments, ``self.act = ...``), constant-folded ``getattr`` chains,
``operator.attrgetter``/``methodcaller``, ``functools.partial``, lambdas, container literals
(``OPS = {"e": torch.exp}`` resolves ``OPS["e"]`` and ``OPS`` to ``torch.exp``) and the return
values of the file's own functions. Names the file defines resolve to ids that start with ``$``
(``$helper@12``; a class's instances to ``$Cls@3()``). Parses nothing and runs nothing: it reads
the tree it is given. Over-approximates on purpose: a name bound anywhere is bound everywhere.

Also owns the small tree helpers the screen's modules share (walking, parents, owners, short
source text). What the names mean is ``aka.bench.screen_vocab``'s.
"""

from __future__ import annotations

import ast
import builtins
from collections import defaultdict
from collections.abc import Collection, Iterable, Iterator

__all__ = [
    "FunctionNode",
    "Names",
    "dotted",
    "is_docstring",
    "name_uses",
    "src",
    "walk",
    "walk_own",
]

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
_DefNode = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda
_BUILTINS = frozenset(dir(builtins))
_MAX_STEPS = 200_000
#: Calls whose value is their first argument, as far as the screen cares.
_PASS_THROUGH = frozenset(
    {
        "functools.partial",
        "functools.partialmethod",
        "functools.wraps",
        "builtins.staticmethod",
        "builtins.classmethod",
    }
)
#: Methods that read an element (or all of them) back out of a container.
_CONTAINER_READS = frozenset(
    {"get", "pop", "setdefault", "values", "items", "copy", "__getitem__", "popitem"}
)
#: Methods that put their arguments into a container.
_CONTAINER_WRITES = frozenset(
    {"append", "extend", "insert", "add", "update", "setdefault", "__setitem__", "appendleft"}
)


def dotted(node: ast.AST) -> str | None:
    """Return ``a.b.c`` for a chain of attributes on a name, else None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def is_docstring(node: ast.AST, parent: ast.AST | None) -> bool:
    """Return whether ``node`` is a string statement (a docstring or a bare string)."""
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and isinstance(parent, ast.Expr)
    )


class Names:
    """Bindings of one module, and the resolution of expressions to qualified names.

    Args:
        tree: The parsed candidate.
    """

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.parents: dict[int, ast.AST] = {}
        #: name or dotted target (``self.act``) -> expressions assigned to it anywhere
        self.raw: defaultdict[str, list[ast.expr]] = defaultdict(list)
        #: name -> qualified names bound by imports and definitions
        self.fixed: defaultdict[str, set[str]] = defaultdict(set)
        self.defs: dict[str, _DefNode] = {}
        self.def_ids: dict[int, str] = {}
        #: id(method node) -> the class that defines it
        self.owner: dict[int, ast.ClassDef] = {}
        self.bound: set[str] = set()
        self.star: list[tuple[str, int]] = []
        self._memo: dict[tuple[str, str], frozenset[str]] = {}
        self._busy: frozenset[tuple[str, str]] = frozenset()
        self._cut = 0
        #: resolution steps taken; past ``_MAX_STEPS`` the screen gives up (a finding)
        self.steps = 0
        for parent in ast.walk(tree):
            for child in ast.iter_child_nodes(parent):
                self.parents[id(child)] = parent
        for node in ast.walk(tree):
            self._collect(node)
        self.kernels = {
            id(n)
            for n in ast.walk(tree)
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and is_kernel(self, n)
        }
        for node in ast.walk(tree):  # setattr(obj, "name", value) needs the first pass
            if isinstance(node, ast.Call) and self.calls(node, "builtins.setattr"):
                name = self.fold(node.args[1]) if len(node.args) == 3 else None
                base = dotted(node.args[0]) if node.args else None
                if name and base:
                    self.raw[f"{base}.{name}"].append(node.args[2])

    # ------------------------------------------------------------------ collection
    def _collect(self, node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    self.fixed[alias.asname].add(alias.name)
                else:
                    head = alias.name.split(".")[0]
                    self.fixed[head].add(head)
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            for alias in node.names:
                if alias.name == "*":
                    self.star.append((module, node.lineno))
                else:
                    sep = "" if module.endswith(".") else "."
                    self.fixed[alias.asname or alias.name].add(f"{module}{sep}{alias.name}")
        elif isinstance(node, _DefNode):
            self._collect_def(node)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                self._bind(target, node.value)
        elif isinstance(node, ast.AnnAssign | ast.AugAssign | ast.NamedExpr) and node.value:
            self._bind(node.target, node.value)
        elif isinstance(node, ast.For | ast.AsyncFor | ast.comprehension):
            self._bind(node.target, node.iter)
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            self._bind(node.optional_vars, node.context_expr)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            self.bound.add(node.name)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            base = dotted(node.func.value)
            if base and node.func.attr in _CONTAINER_WRITES:
                self.raw[base] += [*node.args, *(k.value for k in node.keywords)]

    def _collect_def(self, node: _DefNode) -> None:
        name = node.name if not isinstance(node, ast.Lambda) else "lambda"
        def_id = f"${name}@{node.lineno}:{node.col_offset}"
        self.defs[def_id] = node
        self.def_ids[id(node)] = def_id
        if not isinstance(node, ast.Lambda):
            self.fixed[node.name].add(def_id)
            self.bound.add(node.name)
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    self.owner[id(item)] = node
                    self.defs[f"{def_id}.{item.name}"] = item
                elif isinstance(item, ast.Assign | ast.AnnAssign) and item.value is not None:
                    targets = item.targets if isinstance(item, ast.Assign) else [item.target]
                    for t in (t for t in targets if isinstance(t, ast.Name)):
                        for key in (f"{def_id}.{t.id}", f"self.{t.id}", f"cls.{t.id}"):
                            self.raw[key].append(item.value)  # class attributes
            return
        args = node.args
        params = [*args.posonlyargs, *args.args, *args.kwonlyargs]
        params += [a for a in (args.vararg, args.kwarg) if a is not None]
        self.bound |= {a.arg for a in params}
        positional = [*args.posonlyargs, *args.args]
        for arg, default in zip(
            positional[len(positional) - len(args.defaults) :], args.defaults, strict=True
        ):
            self.raw[arg.arg].append(default)
        for arg, kw_default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
            if kw_default is not None:
                self.raw[arg.arg].append(kw_default)

    def _bind(self, target: ast.expr, value: ast.expr) -> None:
        if isinstance(target, ast.Name):
            self.bound.add(target.id)
            self.raw[target.id].append(value)
        elif isinstance(target, ast.Tuple | ast.List):
            pairwise = isinstance(value, ast.Tuple | ast.List) and len(value.elts) == len(
                target.elts
            )
            for i, elt in enumerate(target.elts):
                self._bind(elt, value.elts[i] if pairwise else value)  # type: ignore[attr-defined]
        elif isinstance(target, ast.Starred):
            self._bind(target.value, value)
        elif isinstance(target, ast.Attribute | ast.Subscript):
            key = dotted(target if isinstance(target, ast.Attribute) else target.value)
            if key:
                self.raw[key].append(value)

    # ------------------------------------------------------------------ queries
    def parent(self, node: ast.AST) -> ast.AST | None:
        """Return the node's parent in the tree (None for the module)."""
        return self.parents.get(id(node))

    def calls(self, node: ast.Call, qualified: str) -> bool:
        """Return whether the call's function may be ``qualified``."""
        return qualified in self.resolve(node.func)

    @property
    def exhausted(self) -> bool:
        """Return whether resolution hit its step budget (its answers may be incomplete)."""
        return self.steps > _MAX_STEPS

    def is_imported(self, q: str) -> bool:
        """Return whether a resolved name comes from outside the file (a module or builtin)."""
        return not q.startswith(("$", "@"))

    def fold(self, node: ast.AST | None, depth: int = 0) -> str | None:
        """Return the constant string an expression always evaluates to, else None."""
        if node is None or depth > 20:
            return None
        if isinstance(node, ast.Constant):
            return node.value if isinstance(node.value, str) else None
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = self.fold(node.left, depth + 1), self.fold(node.right, depth + 1)
            return left + right if left is not None and right is not None else None
        if isinstance(node, ast.JoinedStr):
            parts = [self.fold(v, depth + 1) for v in node.values]
            return "".join(p for p in parts if p is not None) if None not in parts else None
        if isinstance(node, ast.FormattedValue) and node.format_spec is None:
            return self.fold(node.value, depth + 1)
        if isinstance(node, ast.Name) and node.id not in self.fixed:
            values = {self.fold(v, depth + 1) for v in self.raw.get(node.id, [])}
            return values.pop() if len(values) == 1 else None
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "join"
            and len(node.args) == 1
            and isinstance(node.args[0], ast.Tuple | ast.List)
        ):
            sep = self.fold(node.func.value, depth + 1)
            parts = [self.fold(e, depth + 1) for e in node.args[0].elts]
            if sep is not None and None not in parts:
                return sep.join(p for p in parts if p is not None)
        return None

    def resolve(self, node: ast.AST) -> frozenset[str]:
        """Return every qualified name the expression may evaluate to (empty: unknown)."""
        key = ("node", str(id(node)))
        if isinstance(node, ast.Name):
            key = ("name", node.id)
        elif isinstance(node, ast.Attribute) and (d := dotted(node)):
            key = ("dotted", d)
        if key in self._memo:
            return self._memo[key]
        self.steps += 1
        if key in self._busy or self.steps > _MAX_STEPS:
            self._cut += 1  # a cycle (or the budget): results up the stack are partial
            return frozenset()
        cut, self._busy = self._cut, self._busy | {key}
        try:
            result = frozenset(self._resolve(node))
        finally:
            self._busy = self._busy - {key}
        if self._cut == cut or not self._busy:  # complete: no cycle cut below, or the top
            self._memo[key] = result
        return result

    def _resolve(self, node: ast.AST) -> Iterator[str]:
        if isinstance(node, ast.Name):
            yield from self._resolve_name(node.id)
        elif isinstance(node, ast.Attribute):
            d = dotted(node)
            for value in self.raw.get(d or "", []):
                yield from self.resolve(value)
            for base in self.resolve(node.value):
                yield f"{base}.{node.attr}"
                for value in self.raw.get(f"{base.removesuffix('()')}.{node.attr}", []):
                    yield from self.resolve(value)  # a class attribute read through the class
        elif isinstance(node, ast.Subscript | ast.Starred | ast.NamedExpr | ast.Await):
            yield from self.resolve(node.value)
        elif isinstance(node, ast.Tuple | ast.List | ast.Set):
            for elt in node.elts:
                yield from self.resolve(elt)
        elif isinstance(node, ast.Dict):
            for value in node.values:
                yield from self.resolve(value)
        elif isinstance(node, ast.IfExp):
            yield from self.resolve(node.body) | self.resolve(node.orelse)
        elif isinstance(node, ast.BoolOp):
            for value in node.values:
                yield from self.resolve(value)
        elif isinstance(node, ast.Lambda):
            yield self.def_ids[id(node)]
        elif isinstance(node, ast.Call):
            yield from self._resolve_call(node)

    def _resolve_name(self, name: str) -> Iterator[str]:
        yield from self.fixed.get(name, ())
        for value in self.raw.get(name, []):
            yield from self.resolve(value)
        if name in self.bound or name in self.fixed or name in self.raw:
            return
        if name in _BUILTINS:
            yield f"builtins.{name}"
        else:
            yield from (f"{module}.{name}" for module, _ in self.star)

    def _resolve_call(self, node: ast.Call) -> Iterator[str]:
        funcs = self.resolve(node.func)
        args = node.args
        if isinstance(node.func, ast.Attribute) and node.func.attr in _CONTAINER_READS:
            yield from self.resolve(node.func.value)
        for f in funcs:
            if f == "builtins.getattr" and len(args) >= 2 and (attr := self.fold(args[1])):
                yield from self.attribute_of(args[0], attr)
            elif f in _PASS_THROUGH and args:
                yield from self.resolve(args[0])
            elif f in ("operator.attrgetter", "operator.methodcaller") and args:
                if name := self.fold(args[0]):
                    yield f"@{f.split('.')[1][:4]}:{name}"  # @attr:x / @meth:x
            elif f.startswith("@attr:") and args:
                yield from self.attribute_of(args[0], f[6:])
            elif f in ("importlib.import_module", "builtins.__import__") and args:
                if name := self.fold(args[0]):
                    yield name
            elif f in self.defs:
                yield from self._returns(f)

    def attribute_of(self, obj: ast.expr, attr: str) -> Iterator[str]:
        """Return the names ``getattr(obj, attr)`` may stand for."""
        d = dotted(obj)
        for value in self.raw.get(f"{d}.{attr}" if d else "", []):
            yield from self.resolve(value)
        yield from (f"{b}.{attr}" for b in self.resolve(obj))

    def _returns(self, def_id: str) -> Iterator[str]:
        node = self.defs[def_id]
        if isinstance(node, ast.ClassDef):
            yield f"{def_id}()"
        elif isinstance(node, ast.Lambda):
            yield from self.resolve(node.body)
        else:
            for sub in walk_own(node.body):
                if isinstance(sub, ast.Return) and sub.value is not None:
                    yield from self.resolve(sub.value)

    def class_of(self, q: str) -> tuple[ast.ClassDef, bool] | None:
        """Return the file's class a resolved name refers to, and whether it is an instance."""
        instance = q.endswith("()")
        node = self.defs.get(q[:-2] if instance else q)
        return (node, instance) if isinstance(node, ast.ClassDef) else None

    def method(self, cls: ast.ClassDef, name: str, depth: int = 0) -> FunctionNode | None:
        """Return ``cls.name`` looked up through the file's own base classes, else None."""
        for item in cls.body:
            if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and item.name == name:
                return item
        for base in cls.bases if depth < 10 else []:
            for q in self.resolve(base):
                found = self.class_of(q)
                if found and (hit := self.method(found[0], name, depth + 1)):
                    return hit
        return None

    def functions_of(self, q: str) -> list[FunctionNode]:
        """Return the file's functions a resolved name makes reachable (a class: its methods)."""
        node = self.defs.get(q)
        if isinstance(node, FunctionNode):
            return [node]
        if found := self.class_of(q):
            cls, instance = found
            skip = {"__init__", "__new__", "__init_subclass__"} if instance else set()
            return [
                item
                for item in cls.body
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
                and item.name not in skip
            ]
        head, _, attr = q.rpartition(".")
        if head and (found := self.class_of(head)):
            hit = self.method(found[0], attr)
            return [hit] if hit else []
        return []


def walk_own(body: list[ast.stmt]) -> Iterator[ast.AST]:
    """Walk statements without entering nested functions, lambdas or classes."""
    todo: list[ast.AST] = list(body)
    while todo:
        node = todo.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, _DefNode):
                todo.append(child)


def walk(nodes: Iterable[ast.AST], skip: Collection[int] = frozenset()) -> Iterator[ast.AST]:
    """Walk the nodes depth-first in source order, skipping annotations and ``skip`` (node ids)."""
    todo = list(nodes)[::-1]
    while todo:
        node = todo.pop()
        if id(node) in skip:
            continue
        yield node
        if isinstance(node, ast.arg):
            continue
        children = []
        for field, value in ast.iter_fields(node):
            if field not in ("annotation", "returns"):
                items = value if isinstance(value, list) else [value]
                children += [v for v in items if isinstance(v, ast.AST)]
        todo += children[::-1]


def owner_of(names: Names, node: ast.AST) -> ast.ClassDef | None:
    """Return the class whose method (or a function nested in it) contains ``node``."""
    current: ast.AST | None = node
    while current is not None:
        if id(current) in names.owner:
            return names.owner[id(current)]
        current = names.parent(current)
    return None


def decorator_names(names: Names, fn: ast.AST) -> set[str]:
    out: set[str] = set()
    for dec in getattr(fn, "decorator_list", []):
        target = dec.func if isinstance(dec, ast.Call) else dec
        out |= names.resolve(target) | {dotted(target) or ""}
    return out


def is_kernel(names: Names, fn: ast.AST) -> bool:
    return any(
        q.startswith("triton")
        and q.endswith(("jit", "autotune", "heuristics"))
        or q in ("jit", "autotune", "heuristics")
        for q in decorator_names(names, fn)
    )


def is_self(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


def flatten(targets: Iterable[ast.expr]) -> Iterator[ast.expr]:
    for t in targets:
        if isinstance(t, ast.Tuple | ast.List):
            yield from flatten(t.elts)
        elif isinstance(t, ast.Starred):
            yield from flatten([t.value])
        else:
            yield t


def body_of(fn: FunctionNode) -> list[ast.AST]:
    return [fn.body] if isinstance(fn, ast.Lambda) else list(fn.body)


def name_of(fn: FunctionNode) -> str:
    return "lambda" if isinstance(fn, ast.Lambda) else fn.name


def name_uses(names: Names, nodes: Iterable[ast.AST]) -> Iterator[tuple[ast.expr, frozenset[str]]]:
    """Yield maximal name expressions (and resolving calls) with what they resolve to."""
    for node in nodes:
        if not isinstance(node, ast.Name | ast.Attribute | ast.Call):
            continue
        parent = names.parent(node)
        if isinstance(parent, ast.Attribute) and parent.value is node:
            continue
        if (
            isinstance(parent, ast.Call)
            and parent.args
            and parent.args[0] is node
            and names.resolve(parent)
        ):
            continue  # getattr(torch, "x"), partial(f): the outer call is the use
        resolved = names.resolve(node)
        if isinstance(node, ast.Call):
            resolved = frozenset(q for q in resolved if not q.startswith("$"))
        if resolved:
            yield node, resolved


def src(node: ast.AST) -> str:
    """Return the node's source text for a message, cut to 60 characters."""
    text = ast.unparse(node)
    return text if len(text) <= 60 else text[:57] + "..."
