"""Stage 1, the static screen: AST checks of a candidate's source before anything runs it.

A candidate defines ``class ModelNew(torch.nn.Module)`` whose forward computes with its own
``@triton.jit`` kernels or ``load_inline`` CUDA; PyTorch may only allocate, view, reshape and
launch. The screen resolves names through imports and aliases (``aka.bench.screen_names``),
matches them against its tables (``aka.bench.screen_vocab``) and follows the hot path
(``aka.bench.screen_hot_path``): ``forward`` (and ``__call__``) of the entry class and every
function, method, lambda or class of the file it reaches; kernels are not hot path, ``__init__``
only when forward instantiates the class. Each finding carries a rule id, a line and a message
saying what to do instead; one finding per (rule, line). This module owns the rules that hold
anywhere in the file, the findings' collection and the allow list. Owns no execution: it parses
text only, never imports or runs the candidate.

Rules (ids are stable; "hot": only on the hot path; anywhere else in the file otherwise):
    no-entry                  no ``class ModelNew`` (or ``Model``)
    no-kernel                 no ``@triton.jit`` function and no ``load_inline`` extension
    torch-compute-in-forward  hot: ``torch.*`` math (all but allocation, describe and launch
                              helpers), ``torch.nn.functional``, ``torch.ops.aten``/``prims``,
                              ``torch._C``, ``torch.Tensor.<math>``, tensor math methods and
                              dunders, casts/``.to()``/``clone``/``copy_``, ``@``, arithmetic,
                              comparisons and item writes on known tensors, tensor-indexed
                              reads, ``at::``/``torch::`` math in C++ sources; anywhere: a star
                              import from a torch compute module
    nn-layer                  instantiating, calling or subclassing a ``torch.nn`` layer;
                              hot: ``torch.nn.init``
    torch-compile             ``torch.compile``, ``compiler``, ``jit``, ``_dynamo``,
                              ``_inductor``, ``fx``, ``export``, jiterator; a
                              ``torch.library.custom_op`` that wraps library math
    vendor-library            vendor kernel libraries (flash_attn, xformers, vllm, cupy, numba
                              ...), ``triton.ops``, ``torch.ops.<namespace the file does not
                              register>``, cuBLAS/cuDNN/CUTLASS in C++ sources; hot: numpy math
    reference-use             ``reference``/``input(s)``/``_aka_*`` modules, the name ``Model``
                              (when the entry is ``ModelNew``), ``"Model"`` as a string
    introspection             frames and tracing, ``inspect``, ``gc``, ``sys.modules``,
                              ``globals()``, ``__globals__``/``__code__``/``__dict__``...,
                              ``importlib``, ``builtins``, ``weakref``
    dynamic-code              ``exec``, ``eval``, ``compile``, ``__import__``,
                              ``import_module``, ``types.FunctionType``/``CodeType``,
                              ``marshal``, ``pickle``, ``runpy``, ``codecs``
    dynamic-attr              ``getattr``/``setattr``/``delattr`` with a computed name on a
                              module or an imported object; ``attrgetter``/``methodcaller`` with
                              a computed name anywhere
    native-code               ``ctypes``, ``cffi``, ``mmap``, ``load_library``,
                              ``cpp_extension.load``, ``load_inline`` with sources read from
                              disk, ``os.system``/``exec*``/``spawn*``, ``/proc``/``/dev`` paths
    monkeypatch               writing or deleting attributes/items of imported modules or their
                              members, or of names the file never defines; ``setattr`` and
                              ``object.__setattr__`` on them; ``unittest.mock``
    concurrency               threads, processes, ``asyncio``, ``subprocess``, signals, ``atexit``
    stream                    new or switched streams, CUDA events, ``wait_stream``,
                              ``record_stream``, any ``synchronize`` (also in C++ sources)
    cuda-graph                CUDA graph capture (torch helpers or ``cudaStreamBeginCapture``)
    mutable-cache             ``global``/``nonlocal``; module- or class-level mutable containers
                              a function mutates (or, hot, reads by subscript); ``functools``
                              caches; ``.data_ptr()`` as a key, compared or hashed; hot: writes
                              to ``self.*``, hashing tensors or their bytes (``hash``,
                              ``hashlib``, ``.tolist()``, ``.cpu()``, ``id(tensor)``...)
    precision-mode            ``torch.backends.*`` writes or calls, matmul precision, default
                              dtype, autocast; with ``allow_tf32=False`` also ``tl.dot`` with
                              ``allow_tf32=True`` or ``input_precision="tf32"``/``"tf32x3"``
    file-io                   ``open``, files, ``os.environ`` writes, sockets and HTTP,
                              ``torch.save``/``load``
    screen-limit              name resolution ran out of its step budget (a tangle of aliases)

The allow list holds rule ids (``"nn-layer"`` waives every finding of that rule) or ``rule:text``
(waives the rule's findings whose message contains ``text``, e.g. ``"torch-compute-in-forward:
torch.rsqrt"``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass

from aka.bench.result import ScreenFinding
from aka.bench.screen_hot_path import HotPath, Tensors, tensor_params
from aka.bench.screen_names import (
    Names,
    body_of,
    dotted,
    flatten,
    is_docstring,
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
    CONTAINER_CALLS,
    CPP_ALLOWED,
    CPP_METHOD_CALL,
    CPP_TOKENS,
    CPP_TORCH_CALL,
    IMPORT_RULES,
    MUTATORS,
    NN_ALLOWED,
    REFERENCE_MODULES,
    TORCH_LIBRARY,
    TORCH_OWN_OPS,
    name_rule,
    torch_computes,
)
from aka.core.pyparse import parse_module

__all__ = ["ScreenReport", "screen_source"]

_HINTS = {
    COMPUTE: "compute it in your own kernel; forward may only allocate, view and launch",
    "nn-layer": "hold weights as nn.Parameter and compute with your own kernel",
    "torch-compile": "write the kernel yourself instead of using a torch compiler",
    "vendor-library": "write the kernel yourself; vendor kernel libraries are not allowed",
    "reference-use": "the candidate must not touch the reference",
    "introspection": "do not inspect frames, modules or other objects' internals",
    "dynamic-code": "write the code in the file, where the screen can see it",
    "dynamic-attr": "use a constant attribute name, so the screen sees what it reaches",
    "native-code": "native code runs only in @triton.jit kernels or in-file load_inline sources",
    "monkeypatch": "do not modify modules, classes or functions the file did not create",
    "concurrency": "run on the calling thread; no threads, processes or signals",
    "stream": "launch on the current stream and never synchronize; the harness owns timing",
    "cuda-graph": "launch kernels directly; the harness owns CUDA graphs",
    "mutable-cache": "recompute per call; state kept between calls can replay stale outputs",
    "precision-mode": "leave global precision settings alone; choose precision inside the kernel",
    "file-io": "candidates may not touch files, the environment or the network",
}
_ENTRY_CLASSES = ("ModelNew", "Model")


@dataclass(frozen=True)
class ScreenReport:
    """Findings of the screen, and facts it learned on the way."""

    findings: list[ScreenFinding]
    kernel_kinds: tuple[str, ...]
    entry_class: str | None

    @property
    def passed(self) -> bool:
        """Return whether no finding remains."""
        return not self.findings


class _Screen:
    """One pass over one candidate: collects findings by rule and line."""

    def __init__(self, tree: ast.Module, *, allow_tf32: bool) -> None:
        self.tree = tree
        self.names = Names(tree)
        self.allow_tf32 = allow_tf32
        self.findings: dict[tuple[str, int | None], ScreenFinding] = {}
        classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
        self.entry = next((c for c in _ENTRY_CLASSES if c in classes), None)
        self.own_ops = self._registered_namespaces()
        self.tensors = Tensors(self.names)
        self.hot = HotPath(self.names, self.tensors, self.own_ops)
        self.hot_nodes: set[int] = set()

    def kernel_kinds(self) -> tuple[str, ...]:
        """Return ``triton`` (a ``@triton.jit`` function) and/or ``cuda`` (``load_inline``)."""
        kinds = {"triton"} if self.names.kernels else set()
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Call) and (
                (dotted(node.func) or "").endswith("load_inline")
                or "torch.utils.cpp_extension.load_inline" in self.names.resolve(node.func)
            ):
                kinds.add("cuda")
        return tuple(sorted(kinds))

    def add(self, rule: str, node: ast.AST | int | None, what: str) -> None:
        line = node if isinstance(node, int) or node is None else getattr(node, "lineno", None)
        key = (rule, line)
        if key not in self.findings:
            hint = _HINTS.get(rule)
            message = f"{what}: {hint}" if hint else what
            self.findings[key] = ScreenFinding(rule=rule, line=line, message=message)

    def _registered_namespaces(self) -> set[str]:
        """Return the ``torch.ops`` namespaces the file defines itself.

        From ``TORCH_LIBRARY`` in C++ sources, or ``torch.library`` calls (``Library("ns", ...)``,
        ``custom_op("ns::name")``).
        """
        found: set[str] = set()
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found |= set(TORCH_LIBRARY.findall(node.value))
            elif isinstance(node, ast.Call) and node.args:
                library = any(q.startswith("torch.library.") for q in self.names.resolve(node.func))
                if library and (name := self.names.fold(node.args[0])):
                    found.add(name.split("::")[0])
        return found

    # ------------------------------------------------------------------ whole file
    def check_file(self, nodes: list[ast.AST]) -> None:
        """Apply every rule that holds anywhere in the file."""
        for node in nodes:
            if isinstance(node, ast.Import | ast.ImportFrom):
                self.check_import(node)
            elif isinstance(node, ast.Name):
                if node.id == "Model" and self.entry == "ModelNew":
                    self.add("reference-use", node, "names the reference class 'Model'")
                elif node.id in ("__builtins__", "__doc__"):  # __doc__: text the screen skips
                    self.add("introspection", node, node.id)
            elif isinstance(node, ast.Attribute):
                self.check_attribute(node)
            elif isinstance(node, ast.Call):
                self.check_call(node)
            elif isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign | ast.Delete):
                self.check_store(node)
            elif isinstance(node, ast.Global | ast.Nonlocal):
                kind = "global" if isinstance(node, ast.Global) else "nonlocal"
                self.add("mutable-cache", node, f"{kind} {', '.join(node.names)}")
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                if not is_docstring(node, self.names.parent(node)):
                    self.check_string(node, node.value)
            elif isinstance(node, ast.ClassDef):
                for base in node.bases:
                    self.check_nn(base, hot=True)
        for node, resolved in name_uses(self.names, nodes):
            for q in sorted(resolved):
                self.check_name(node, q)

    def check_name(self, node: ast.AST, q: str) -> None:
        rule = name_rule(q)
        shown = src(node)
        what = shown if shown == q else f"{shown} ({q})"
        if rule:
            self.add(rule, node, what)
        if q.startswith("torch.ops."):
            ns = q.split(".")[2]
            if ns not in self.own_ops | TORCH_OWN_OPS | {"load_library"}:
                self.add("vendor-library", node, f"{what} is a library op")
        head = q.lstrip(".").split(".")[0]
        if head in REFERENCE_MODULES or "reference" in head:
            self.add("reference-use", node, f"{what} is the reference")

    def check_import(self, node: ast.Import | ast.ImportFrom) -> None:
        if isinstance(node, ast.Import):
            found = [a.name for a in node.names]
        else:
            module = "." * node.level + (node.module or "")
            sep = "" if module.endswith(".") else "."
            found = [module] + [f"{module}{sep}{a.name}" for a in node.names if a.name != "*"]
            if any(a.name == "*" for a in node.names):
                self.check_star(node, module)
        for q in found:
            rule = name_rule(q) or IMPORT_RULES.get(q.split(".")[0])
            if rule:
                self.add(rule, node, f"imports {q}")
            if q.startswith("torch.ops."):
                self.check_name(node, q)
            parts = q.lstrip(".").split(".")
            if any(p in REFERENCE_MODULES or "reference" in p for p in parts) or (
                parts[-1] == "Model" and self.entry == "ModelNew"
            ):
                self.add("reference-use", node, f"imports {q}")

    def check_star(self, node: ast.ImportFrom, module: str) -> None:
        rule = name_rule(module)
        if rule is None and torch_computes(f"{module}.x", self.own_ops):
            rule = COMPUTE
        if rule:
            self.add(rule, node, f"from {module} import * brings in names the screen cannot track")

    def check_attribute(self, node: ast.Attribute) -> None:
        rule = ATTR_RULES.get(node.attr)
        if rule and not (node.attr == "__dict__" and is_self(node.value)):
            self.add(rule, node, f"uses .{node.attr}")
        if node.attr == "Model" and self.entry == "ModelNew":
            self.add("reference-use", node, "reaches the reference class 'Model'")

    def check_nn(self, func: ast.expr, *, hot: bool, call: ast.Call | None = None) -> None:
        for q in self.names.resolve(func):
            if not q.startswith("torch.nn.") or q.startswith("torch.nn.functional"):
                continue
            parts = q.split(".")[2:]
            first, last = parts[0], parts[-1]
            if first == "init":
                if not hot:  # initializing weights off the hot path (in __init__) is allowed
                    continue
            elif first in NN_ALLOWED or last in NN_ALLOWED:
                if not (last == "Sequential" and call is not None and call.args):
                    continue
            elif not (first[:1].isupper() or first in ("modules", "utils", "parallel")):
                continue
            self.add("nn-layer", func, f"{src(func)} ({q}) is a torch.nn layer")

    def check_call(self, node: ast.Call) -> None:
        funcs = self.names.resolve(node.func)
        self.check_nn(node.func, hot=id(node) in self.hot_nodes, call=node)
        for q in funcs:
            last = q.split(".")[-1]
            if q.startswith("torch.backends.") and not (
                last.startswith("is_") or last == "version"
            ):
                self.add("precision-mode", node, f"{src(node.func)}() changes a backend setting")
            elif q in (
                "builtins.getattr",
                "builtins.setattr",
                "builtins.delattr",
                "builtins.hasattr",
            ):
                self.check_dynamic_attr(node, q)
            elif q in ("operator.attrgetter", "operator.methodcaller"):
                if not all(self.names.fold(a) for a in node.args):
                    self.add("dynamic-attr", node, f"{q.split('.')[1]} with a computed name")
            elif q in ("builtins.object.__setattr__", "builtins.object.__delattr__",
                       "builtins.type.__setattr__", "builtins.type.__delattr__"):  # fmt: skip
                if node.args and (root := self.foreign_root(node.args[0])):
                    self.add("monkeypatch", node, f"{q.split('.', 1)[1]} on {root}")
            elif q == "torch.utils.cpp_extension.load_inline":
                self.check_load_inline(node)
            elif q.startswith("triton.language") and q.endswith(".dot") and not self.allow_tf32:
                self.check_dot(node)
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in MUTATORS:  # noqa: SIM102
            if "os.environ" in self.names.resolve(func.value):
                self.add("file-io", node, f"{src(node.func)}() writes the environment")

    def check_dynamic_attr(self, node: ast.Call, q: str) -> None:
        if len(node.args) < 2:
            return
        obj = node.args[0]
        if self.names.fold(node.args[1]) is None:
            roots = {r for r in self.names.resolve(obj) if self.names.is_imported(r)}
            if roots or self.foreign_root(obj):
                what = f"{q.split('.')[1]}({src(obj)}, <computed name>)"
                self.add("dynamic-attr", node, what)
        if q in ("builtins.setattr", "builtins.delattr") and (root := self.foreign_root(obj)):
            rule = "precision-mode" if root.startswith("torch.backends") else "monkeypatch"
            self.add(rule, node, f"{q.split('.')[1]} on {root}")

    def check_load_inline(self, node: ast.Call) -> None:
        sources = [*node.args[1:3]] + [
            k.value for k in node.keywords if k.arg in ("cpp_sources", "cuda_sources")
        ]
        for sub in (n for s in sources for n in ast.walk(s)):
            if isinstance(sub, ast.Call):
                reads = isinstance(sub.func, ast.Attribute) and sub.func.attr in (
                    "read",
                    "read_text",
                    "readlines",
                )
                if reads or any(name_rule(q) == "file-io" for q in self.names.resolve(sub.func)):
                    self.add("native-code", node, "load_inline with sources read from disk")

    def check_dot(self, node: ast.Call) -> None:
        for kw in node.keywords:
            value = self.names.fold(kw.value)
            tf32 = kw.arg == "allow_tf32" and _is_true(kw.value)
            if tf32 or (kw.arg == "input_precision" and value in ("tf32", "tf32x3")):
                self.add("precision-mode", node, f"tl.dot({kw.arg}=...) uses TF32 on fp32 inputs")

    def check_store(self, node: ast.Assign | ast.AugAssign | ast.AnnAssign | ast.Delete) -> None:
        if isinstance(node, ast.AnnAssign) and node.value is None:
            return
        targets = node.targets if isinstance(node, ast.Assign | ast.Delete) else [node.target]
        for target in flatten(targets):
            if not isinstance(target, ast.Attribute | ast.Subscript):
                continue
            root = self.foreign_root(target)
            if root is None:
                continue
            resolved = self.names.resolve(target) | self.names.resolve(target.value)
            if any(q.startswith("torch.backends.") for q in resolved):
                self.add("precision-mode", node, f"sets {src(target)}")
            elif "os.environ" in resolved:
                self.add("file-io", node, f"writes {src(target)}")
            else:
                self.add("monkeypatch", node, f"assigns {src(target)} (of {root})")

    def foreign_root(self, expr: ast.expr) -> str | None:
        """Return what an attribute/item chain is rooted in when the file did not create it."""
        while isinstance(expr, ast.Attribute | ast.Subscript):
            expr = expr.value
        if not isinstance(expr, ast.Name) or expr.id in ("self", "cls"):
            return None
        imported = sorted(q for q in self.names.resolve(expr) if self.names.is_imported(q))
        if imported:
            return imported[0]
        names = self.names
        known = expr.id in names.bound or expr.id in names.fixed or expr.id in names.raw
        return None if known else expr.id

    def check_string(self, node: ast.Constant, text: str) -> None:
        if text in ("_aka_reference", "_aka_inputs") or (
            text == "Model" and self.entry == "ModelNew"
        ):
            self.add("reference-use", node, f"the string {text!r} reaches the reference")
        if text.startswith(("/proc", "/dev/")):
            self.add("native-code", node, f"the path {text!r}")
        for rule, (pattern, what) in CPP_TOKENS.items():
            for m in pattern.finditer(text):
                self.add(rule, node.lineno + text[: m.start()].count("\n"), f"{what} ({m[0]})")
        if not any(tok in text for tok in ("#include", "torch::", "at::", "__global__")):
            return
        for m in CPP_TORCH_CALL.finditer(text):
            if m[1] not in CPP_ALLOWED:
                line = node.lineno + text[: m.start()].count("\n")
                self.add(COMPUTE, line, f"C++ source computes with {m[0].rstrip('( ')}")
        for m in CPP_METHOD_CALL.finditer(text):
            line = node.lineno + text[: m.start()].count("\n")
            self.add(COMPUTE, line, f"C++ source calls tensor math .{m[1]}()")

    # ------------------------------------------------------------------ state between calls
    def check_containers(self) -> None:
        """Module- and class-level mutable containers: mutated anywhere, read on the hot path."""
        keys: set[str] = set()
        for scope, prefix in [(self.tree, "")] + [
            (c, c.name + ".") for c in ast.walk(self.tree) if isinstance(c, ast.ClassDef)
        ]:
            for stmt in scope.body:
                value = getattr(stmt, "value", None)
                if isinstance(stmt, ast.Assign | ast.AnnAssign) and self.is_container(value):
                    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                    keys |= {prefix + t.id for t in flatten(targets) if isinstance(t, ast.Name)}
        if not keys:
            return
        for node in ast.walk(self.tree):
            key = self.container_key(node, keys)
            if key is None:
                continue
            parent = self.names.parent(node)
            in_function = _enclosing_name(self.names, node) != ""
            stored = isinstance(parent, ast.Subscript) and isinstance(
                parent.ctx, ast.Store | ast.Del
            )
            aug = isinstance(parent, ast.AugAssign) and parent.target is node
            method = parent.attr if isinstance(parent, ast.Attribute) else ""
            if in_function and (stored or aug or method in MUTATORS):
                self.add("mutable-cache", node, f"a function mutates the shared container {key}")
            elif id(node) in self.hot_nodes and (
                isinstance(parent, ast.Subscript) or method == "get"
            ):
                self.add("mutable-cache", node, f"forward reads the shared container {key}")

    def is_container(self, value: ast.AST | None) -> bool:
        if isinstance(value, ast.Dict | ast.List | ast.Set | ast.DictComp | ast.ListComp):
            return True
        if isinstance(value, ast.SetComp):
            return True
        return isinstance(value, ast.Call) and bool(
            self.names.resolve(value.func) & CONTAINER_CALLS
        )

    def container_key(self, node: ast.AST, keys: set[str]) -> str | None:
        if not isinstance(node, ast.Name | ast.Attribute):
            return None
        parent = self.names.parent(node)
        if isinstance(parent, ast.Attribute) and parent.value is node and dotted(parent) in keys:
            return None  # the longer chain is the key
        d = dotted(node) or ""
        if d in keys:
            return d
        if isinstance(node, ast.Attribute) and is_self(node.value):
            owner = owner_of(self.names, node)
            if owner and f"{owner.name}.{node.attr}" in keys:
                return f"{owner.name}.{node.attr}"
        return None

    def check_data_ptr(self, nodes: list[ast.AST]) -> None:
        """``.data_ptr()`` (or a name bound from it) used as a key, in a comparison or a hash."""
        tainted = {
            t.id
            for n in nodes
            if isinstance(n, ast.Assign) and any(_is_data_ptr(s) for s in ast.walk(n.value))
            for t in flatten(n.targets)
            if isinstance(t, ast.Name)
        }
        for node in nodes:
            is_ptr = _is_data_ptr(node) or (
                isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in tainted
            )
            if is_ptr and (how := self.key_use(node)):
                self.add("mutable-cache", node, f"a data pointer {how}")

    def key_use(self, node: ast.AST) -> str | None:
        child, parent = node, self.names.parent(node)
        while parent is not None and not isinstance(parent, ast.stmt):
            if isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.Mod | ast.BitAnd):
                return None  # an alignment check
            if isinstance(parent, ast.Subscript) and child is parent.slice:
                return "indexes a container"
            if isinstance(parent, ast.Dict) and child in parent.keys:
                return "is a dict key"
            if isinstance(parent, ast.Compare):
                return "is compared"
            if isinstance(parent, ast.Call) and child in parent.args:
                func = parent.func
                if self.names.resolve(func) & {"builtins.hash", "builtins.id"}:
                    return "is hashed"
                if isinstance(func, ast.Attribute) and func.attr in ("get", "setdefault", "add"):
                    return "is a key"
            child, parent = parent, self.names.parent(parent)
        return None


def _is_true(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


def _is_data_ptr(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "data_ptr"
    )


def _enclosing_name(names: Names, node: ast.AST) -> str:
    parent = names.parent(node)
    while parent is not None:
        if isinstance(parent, ast.FunctionDef | ast.AsyncFunctionDef):
            return parent.name
        if isinstance(parent, ast.Lambda):
            return "lambda"
        parent = names.parent(parent)
    return ""


def _allowed(finding: ScreenFinding, allow: Iterable[str]) -> bool:
    return any(
        a == finding.rule
        or (a.startswith(finding.rule + ":") and a.split(":", 1)[1] in finding.message)
        for a in allow
    )


def screen_source(
    source: str,
    *,
    allow: Iterable[str] = (),
    filename: str = "candidate.py",
    allow_tf32: bool = True,
) -> ScreenReport:
    """Screen a candidate's source.

    Args:
        source: The candidate file's text.
        allow: Rule ids, or ``rule:text`` (waives that rule's findings whose message contains
            ``text``), that the problem allows.
        filename: Name for syntax errors.
        allow_tf32: The problem's dtype policy: False flags Triton ``tl.dot`` calls that ask for
            TF32 explicitly (``allow_tf32=True``, ``input_precision="tf32"``/``"tf32x3"``).

    Returns:
        The findings (empty when the screen passes), the kernel kinds and the entry class.

    Raises:
        SyntaxError: The source does not parse (the pipeline reports it as ``compile_error``).
    """
    tree = parse_module(source, filename=filename)
    screen = _Screen(tree, allow_tf32=allow_tf32)
    kinds = screen.kernel_kinds()
    if screen.entry is None:
        screen.add("no-entry", None, "defines no class ModelNew(torch.nn.Module)")
    if not kinds:
        screen.add("no-kernel", None, "no @triton.jit kernel and no load_inline extension")
    nodes = list(walk([tree]))
    hot = screen.hot.functions(screen.entry)
    screen.hot_nodes = {id(n) for fn in hot for n in walk(body_of(fn), screen.names.kernels)}
    screen.check_file(nodes)
    screen.check_data_ptr(nodes)
    screen.check_containers()
    for rule, node, what in screen.hot.custom_op_findings():
        screen.add(rule, node, what)
    tensors = screen.tensors.tensor_names(hot)
    forward = next((fn for fn in hot if name_of(fn) in ("forward", "__call__")), None)
    inputs = tensor_params(forward) if isinstance(forward, ast.FunctionDef) else set()
    for fn in hot:
        for rule, node, what in screen.hot.findings(fn, tensors[id(fn)], inputs):
            screen.add(rule, node, what)
    if screen.names.exhausted:
        screen.add("screen-limit", None, "aliases too tangled to resolve; simplify the file")
    kept = [f for f in screen.findings.values() if not _allowed(f, allow)]
    kept.sort(key=lambda f: (f.line or 0, f.rule))
    return ScreenReport(findings=kept, kernel_kinds=kinds, entry_class=screen.entry)
