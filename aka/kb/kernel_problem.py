"""A reference kernel's own-reference problem: its file's ``reference()`` as an op.yaml problem.

Issue #7: a kernel counts once the scorer accepts it on a problem that states what it computes.
Many kernels (reductions, sorts, scans, embedding, a GeGLU next to a SwiGLU problem) have no
atrex30 or example problem of their op; their own ``reference()`` (plain PyTorch, independent of
the kernel) does state it. This module turns a kernel's header field ``problem:``
(``KernelProblem``: smoke shapes, dtypes, tolerance, in-place inputs) into a real op.yaml v1
problem, loaded with ``aka.spec.parse_op_yaml_text`` like any other, so the scorer judges the
kernel on it with the same screen, guards and correctness policy:

- the reference code is the part of the kernel file ``reference`` and ``make_inputs`` need (the
  imports, constants and helpers they reach, found with ``ast``; never a ``@triton.jit`` function
  or the launcher: a reference that reaches one is refused), plus a generated ``class Model``
  whose ``forward`` has ``reference``'s parameters and calls it, and a generated
  ``_make_inputs(device, dtype, **shape)`` that calls ``make_inputs(shape, dtype)``;
- the cases are ``shapes`` x ``dtypes``, all ``split: smoke``; the tolerance is the header's
  ``atol``/``rtol`` when given, else the scorer's table; ``baselines: [eager]``.

Reads the kernel file as text; runs nothing (the scorer runs the reference in its reference worker).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from pathlib import Path

import yaml

from aka.core import SpecError
from aka.core.pyparse import parse_module
from aka.spec import TORCH_DTYPE_NAMES, KernelMeta, ProblemSpec, parse_op_yaml_text

__all__ = ["KERNEL_PROBLEM_PREFIX", "kernel_problem", "kernel_problem_yaml"]

#: Own-reference problems are named ``kernel.<kernel id>``.
KERNEL_PROBLEM_PREFIX = "kernel."
_GENERATED = ("Model", "_make_inputs", "_KP_DTYPES")
_KERNEL_DECORATORS = frozenset({"jit", "autotune", "heuristics"})


def _walk_top(stmt: ast.stmt) -> list[ast.AST]:
    """The nodes of a top-level statement, not descending into function or class bodies."""
    nodes: list[ast.AST] = []
    stack: list[ast.AST] = [stmt]
    while stack:
        node = stack.pop()
        nodes.append(node)
        if node is not stmt and isinstance(
            node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda
        ):
            continue
        stack.extend(ast.iter_child_nodes(node))
    return nodes


def _bound_names(stmt: ast.stmt) -> set[str]:
    """Names a top-level statement binds (imports, defs, assignment targets)."""
    if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {stmt.name}
    names: set[str] = set()
    for node in _walk_top(stmt):
        if isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                names.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return names


def _used_names(stmt: ast.stmt) -> set[str]:
    """Free names a top-level statement reads (a function's own locals and parameters excluded)."""
    loads = {
        n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
    }
    if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
        local = {a.arg for a in ast.walk(stmt.args) if isinstance(a, ast.arg)}
        local |= {
            n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
        }
        defaults = [*stmt.args.defaults, *(d for d in stmt.args.kw_defaults if d is not None)]
        in_defaults = {n.id for d in defaults for n in ast.walk(d) if isinstance(n, ast.Name)} | {
            n.id for d in stmt.decorator_list for n in ast.walk(d) if isinstance(n, ast.Name)
        }
        loads = (loads - local) | in_defaults
    return loads


def _is_kernel(stmt: ast.stmt) -> bool:
    """A ``@triton.jit`` (or autotune/heuristics) function: kernel code, not reference code."""
    if not isinstance(stmt, ast.FunctionDef):
        return False
    for deco in stmt.decorator_list:
        target = deco.func if isinstance(deco, ast.Call) else deco
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if name in _KERNEL_DECORATORS:
            return True
    return False


def _reference_closure(
    text: str, meta: KernelMeta, source: str
) -> tuple[str, ast.FunctionDef, bool]:
    """Return the code ``reference``/``make_inputs`` reach, ``reference``, and a torch flag.

    The statements come in file order; the flag says whether they bind ``torch`` (else the
    generated code imports it).
    """
    tree = parse_module(text, filename=source)
    body = [
        s
        for s in tree.body
        if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))  # docstrings
    ]
    binds = [_bound_names(s) for s in body]
    needed = {"reference", "make_inputs"}
    chosen: set[int] = set()
    frontier = set(needed)
    while frontier:
        name = frontier.pop()
        for i, names in enumerate(binds):
            if name in names and i not in chosen:
                chosen.add(i)
                frontier |= _used_names(body[i]) - needed
                needed |= _used_names(body[i])
    reference = next(
        (s for s in body if isinstance(s, ast.FunctionDef) and s.name == "reference"), None
    )
    if reference is None or not any(
        isinstance(s, ast.FunctionDef) and s.name == "make_inputs" for s in body
    ):
        raise SpecError(
            "defines no reference() and make_inputs() (STYLE R3); add them", file=source
        )
    for i in sorted(chosen):
        stmt = body[i]
        if _is_kernel(stmt) or (isinstance(stmt, ast.FunctionDef) and stmt.name == meta.launcher):
            name = stmt.name if isinstance(stmt, ast.FunctionDef) else "?"
            raise SpecError(
                f"reference() or make_inputs() reaches the kernel code '{name}'; a reference must "
                "be plain PyTorch, independent of the kernel",
                file=source,
                field="problem",
            )
    clash = sorted(set().union(*(binds[i] for i in chosen)) & set(_GENERATED))
    if clash:
        raise SpecError(
            f"the file defines {clash}, names the generated problem uses; rename them",
            file=source,
            field="problem",
        )
    lines = text.splitlines()
    parts = []
    for i in sorted(chosen):
        stmt = body[i]
        decorators = getattr(stmt, "decorator_list", [])
        start = min([stmt.lineno] + [d.lineno for d in decorators]) - 1
        parts.append("\n".join(lines[start : stmt.end_lineno or start + 1]))
    chosen_names = set().union(*(binds[i] for i in chosen))
    return "\n\n".join(parts), reference, "torch" in chosen_names


def _forward(reference: ast.FunctionDef, source: str) -> tuple[str, str]:
    """``forward``'s parameter text (no annotations) and the call of ``reference``."""
    args = reference.args
    if args.vararg or args.kwarg:
        raise SpecError(
            "reference() takes *args or **kwargs; a problem's forward needs named parameters",
            file=source,
            field="problem",
        )
    positional = args.posonlyargs + args.args
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults))
    defaults += list(args.defaults)
    params = ["self"]
    for arg, default in zip(positional, defaults, strict=True):
        params.append(arg.arg if default is None else f"{arg.arg}={ast.unparse(default)}")
    call = [a.arg for a in positional]
    for arg, kw_default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        params.append(arg.arg if kw_default is None else f"{arg.arg}={ast.unparse(kw_default)}")
        call.append(f"{arg.arg}={arg.arg}")
    if args.kwonlyargs and any(d is None for d in args.kw_defaults):
        # a required keyword-only parameter after ones with defaults: forward keeps the order
        # legal by making every parameter keyword-or-positional in the reference's order
        params = ["self"] + [p if "=" in p else f"{p}=None" for p in params[1:]]
    return ", ".join(params), f"reference({', '.join(call)})"


def _uses_autograd(code: str) -> bool:
    """Whether reference code differentiates (autograd, backward, requires_grad)."""
    return bool(re.search(r"\bautograd\b|\.backward\(|requires_grad", code))


def _make_inputs_call(text: str, source: str) -> tuple[bool, bool]:
    """Whether the kernel's ``make_inputs`` takes a dtype (second parameter) and a device."""
    tree = parse_module(text, filename=source)
    fn = next(s for s in tree.body if isinstance(s, ast.FunctionDef) and s.name == "make_inputs")
    names = [a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs]
    return len(names) >= 2 and names[1] != "device", "device" in names


def _case_id(index: int, shape: Mapping[str, object], dtype: str | None) -> str:
    parts = [f"{k}{v}" for k, v in shape.items() if isinstance(v, int | float | str)]
    text = re.sub(r"[^A-Za-z0-9_.]+", "", "_".join(parts))[:48]
    return f"smoke{index}_{text}" + (f"_{dtype}" if dtype else "")


def kernel_problem_yaml(path: Path, meta: KernelMeta, text: str | None = None) -> str:
    """Return the op.yaml v1 text (self-contained) of the kernel's own-reference problem.

    Raises:
        SpecError: The header has no ``problem:`` field, or the file's reference cannot stand
            alone (it reaches the kernel code, takes ``*args``, or clashes with generated names).
    """
    source = str(path)
    if meta.problem is None:
        raise SpecError(
            "no 'problem:' field in the header (smoke shapes and dtypes for the kernel's own "
            "reference); add one from the kernel's tests",
            file=source,
            field="problem",
        )
    text = path.read_text(encoding="utf-8") if text is None else text
    closure, reference, has_torch = _reference_closure(text, meta, source)
    params, call = _forward(reference, source)
    takes_dtype, takes_device = _make_inputs_call(text, source)
    dtypes: list[str | None] = [d.value for d in meta.problem.dtypes]
    if dtypes and not takes_dtype:
        raise SpecError(
            f"'problem.dtypes' is {dtypes} but make_inputs() takes no dtype; drop the dtypes",
            file=source,
            field="problem.dtypes",
        )
    if _uses_autograd(closure):
        # the scorer runs references under torch.no_grad(); a reference of a backward kernel
        # differentiates its forward with autograd, so it gets grad mode back, and its outputs
        # are detached (they cross a process boundary)
        body = (
            "        with torch.enable_grad():\n"
            f"            out = {call}\n"
            "        if isinstance(out, torch.Tensor):\n"
            "            return out.detach()\n"
            "        if isinstance(out, dict):\n"
            "            return {k: v.detach() for k, v in out.items()}\n"
            "        return tuple(v.detach() for v in out)"
        )
    else:
        body = f"        return {call}"
    table = ", ".join(f'"{k}": torch.{v}' for k, v in TORCH_DTYPE_NAMES.items())
    device_kw = ", device=device" if takes_device else ""
    move = (
        ""
        if takes_device
        else "\n    inputs = {k: v.to(device) if isinstance(v, torch.Tensor) else v "
        "for k, v in inputs.items()}"
    )
    generated = f'''

_KP_DTYPES = {{{table}}}


class Model(torch.nn.Module):
    """{meta.id}'s reference() as a problem (generated by aka.kb.kernel_problem)."""

    def forward({params}):
{body}


def _make_inputs(device="cpu", dtype=None, **shape):
    if dtype is None:
        inputs = make_inputs(shape{device_kw})
    else:
        inputs = make_inputs(shape, _KP_DTYPES[dtype]{device_kw}){move}
    return inputs
'''
    code = ("" if has_torch else "import torch\n\n") + closure + generated
    cases = []
    for i, shape in enumerate(meta.problem.shapes):
        for dtype in dtypes or [None]:
            kwargs = dict(shape) | ({"dtype": dtype} if dtype else {})
            cases.append(
                {"id": _case_id(i, shape, dtype), "input_kwargs": kwargs, "split": "smoke"}
            )
    doc: dict[str, object] = {
        "version": 1,
        "name": f"{KERNEL_PROBLEM_PREFIX}{meta.id}",
        "op_family": meta.op_family.value,
        "description": (
            f"What the reference kernel {meta.id} computes, as its file's reference() states it "
            f"({meta.title}). Generated from the header's problem: field by aka.kb.kernel_problem."
        ),
        "reference": {"code": code},
        "shapes": {"cases": cases},
        "dsl": [meta.dsl.value],
        "baselines": ["eager"],
    }
    if meta.problem.atol is not None or meta.problem.rtol is not None:
        doc["tolerance"] = {
            k: v
            for k, v in (("atol", meta.problem.atol), ("rtol", meta.problem.rtol))
            if v is not None
        } | {"reason": f"the tolerance {meta.id}'s own tests use (header field problem:)"}
    if meta.problem.in_place:
        doc["in_place"] = list(meta.problem.in_place)
    if meta.problem.allow_tf32:
        doc["dtype_policy"] = {"allow_tf32": True}
    return yaml.safe_dump(doc, sort_keys=False, width=100, allow_unicode=True)


def kernel_problem(path: Path, meta: KernelMeta, text: str | None = None) -> ProblemSpec:
    """Return the kernel's own-reference problem, loaded as any op.yaml problem is.

    Raises:
        SpecError: No ``problem:`` field, a reference that cannot stand alone, or a generated
            problem the op.yaml loader refuses (the message names the kernel file).
    """
    body = kernel_problem_yaml(path, meta, text)
    return parse_op_yaml_text(body, base_dir=None, source=f"{path}#problem")
