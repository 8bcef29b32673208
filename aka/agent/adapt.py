"""Adapt a reference kernel to a problem: map its inputs onto the launcher, write a candidate file.

Owns the mapping of a kernel header's declared contract (``KernelMeta.args``, ``returns``,
``dims``: symbolic shapes, dtypes, scalars) onto a problem's ``InputSignature`` (real shapes,
dtypes, names and values, taken by the scorer's reference worker): a search over assignments of
the problem's tensors to launcher parameters, each unified by ``aka.agent.unify``, and checked
against the problem's ``in_place`` inputs (``aka.agent.in_place``); and the generation of a
self-contained candidate: the kernel's module text (minus its ``reference``/``make_inputs``
helpers) plus a ``ModelNew`` whose ``__init__`` and ``forward`` mirror the problem's and call
the launcher.

The mapping is generic: names are only a tie-breaker; symbols are unified with real sizes, so a
problem may call its inputs anything. Forward-time glue is limited to views (``reshape``,
``transpose``) and indexing, never torch compute, which the scorer's screen would reject. Runtime
sizes come from the live tensors (``x.shape[-1]``) or the model's attributes, never from the sizes
seen here, so one candidate serves every shape of the problem. Reads kernel files as text; never
imports them.
"""

from __future__ import annotations

import ast
import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from aka.agent.in_place import in_place_mismatch
from aka.agent.unify import (
    Blocked,
    Env,
    Mismatch,
    reshape_expr,
    token_value,
    unify_shape,
)
from aka.bench import ArgInfo, InputSignature, TensorInfo
from aka.core import AgentError
from aka.core.pyparse import parse_module
from aka.spec import TORCH_DTYPE_NAMES, KernelMeta, read_source_facts
from aka.spec.kernel_meta import ScalarArgSpec, TensorArgSpec, parse_dim

__all__ = [
    "AdaptError",
    "AdaptPlan",
    "InPlaceMismatchError",
    "TensorBinding",
    "adapt_kernel",
    "map_arguments",
]

_FLOATS = frozenset({"fp64", "fp32", "fp16", "bf16", "fp8_e4m3fn", "fp8_e5m2"})
_INTS = frozenset({"int64", "int32", "int16", "int8", "uint8"})
_STRIPPED = frozenset({"reference", "make_inputs"})
_MAX_NODES = 20000
_SCALAR_TYPES: dict[str, tuple[type, ...]] = {
    "float": (int, float),
    "int": (int,),
    "bool": (bool,),
    "str": (str,),
}
_LIST_TYPES = {"list[int]": "int", "list[float]": "float"}


class AdaptError(AgentError):
    """A reference kernel cannot serve a problem: no consistent mapping of its inputs exists.

    The offline search skips that kernel; the message names the argument and the reason.
    """

    code = "agent.adapt"


class InPlaceMismatchError(AdaptError):
    """The kernel's in-place writes differ from what the problem declares in ``in_place``.

    A kernel that updates an input the problem does not declare would be rejected late, as
    ``mutated_input``; one that leaves a declared input stale, as a wrong ``in_place:`` output.
    Glue cannot bridge either without torch compute (a clone or a copy) on the timed path.
    """

    code = "agent.adapt.in_place"


@dataclass(frozen=True)
class _Source:
    """A problem-side value a launcher parameter may take."""

    name: str
    expr: str  # the Python expression in forward: 'x', 'self.eps', 'self.weight'
    origin: Literal["forward", "init", "parameter"]
    position: int
    shape: tuple[int, ...] = ()
    dtype: str | None = None
    value: Any = None
    passed: bool = True  # forward args: given by every call (not left at their default)


@dataclass(frozen=True)
class TensorBinding:
    """One launcher tensor parameter and what the candidate passes to it."""

    param: str
    source: str | None  # the problem's name for it (None: left out, the launcher default)
    view: str | None = None
    shape: tuple[int, ...] = ()
    reshaped: bool = False
    transposed: bool = False


@dataclass(frozen=True)
class AdaptPlan:
    """A consistent mapping of a problem onto one launcher."""

    kernel_id: str
    launcher: str
    tensors: dict[str, TensorBinding]
    scalars: dict[str, str]
    returns: list[str]
    output_kind: str
    output_keys: list[str]
    dims: dict[str, int]
    score: int
    unused_init: list[str] = field(default_factory=list)

    def call(self, params: dict[str, Any], indent: str = "") -> str:
        """The launcher call with the mapped arguments and the tuning ``params``.

        With ``indent``, one argument per line (the generated forward's layout).
        """
        args = [f"{k}={b.view}" for k, b in self.tensors.items() if b.view is not None]
        args += [f"{k}={v}" for k, v in self.scalars.items()]
        args += [f"{k}={v!r}" for k, v in params.items()]
        if not indent:
            return f"{self.launcher}({', '.join(args)})"
        lines = "".join(f"{indent}    {a},\n" for a in args)
        return f"{self.launcher}(\n{lines}{indent})"


# ------------------------------------------------------------------ sources
def _sources(signature: InputSignature) -> tuple[list[_Source], list[_Source], list[str]]:
    """Problem tensors (forward args, then model parameters), scalars, and unusable args."""
    tensors: list[_Source] = []
    scalars: list[_Source] = []
    bad: list[str] = []
    for i, arg in enumerate(signature.forward_args):
        if arg.kind == "tensor":
            tensors.append(
                _Source(arg.name, arg.name, "forward", i, tuple(arg.shape or ()), arg.dtype)
            )
        elif arg.kind == "scalar":
            scalars.append(
                _Source(arg.name, arg.name, "forward", i, value=arg.value, passed=arg.provided)
            )
        elif arg.kind == "other":
            bad.append(
                f"forward argument '{arg.name}' is a {arg.type_name}, which no launcher takes"
            )
        elif arg.kind == "sequence":
            scalars += _sequence_sources(
                _Source(arg.name, arg.name, "forward", i, value=arg.value, passed=arg.provided)
            )
    for i, arg in enumerate(signature.init_args):
        if arg.kind in ("scalar", "sequence"):
            src = _Source(arg.name, f"self.{arg.name}", "init", i, value=arg.value)
            scalars += _sequence_sources(src) if arg.kind == "sequence" else [src]
    for i, t in enumerate(signature.parameters):
        if "." in t.name:
            bad.append(f"model state '{t.name}' lives in a submodule; only top-level weights map")
        tensors.append(
            _Source(t.name, f"self.{t.name}", "parameter", 100 + i, tuple(t.shape), t.dtype)
        )
    return tensors, scalars, bad


def _sequence_sources(src: _Source) -> list[_Source]:
    """A list argument, then each of its items as ``name[i]`` (a header alias may name one)."""
    items = [
        _Source(f"{src.name}[{j}]", f"{src.expr}[{j}]", src.origin, src.position, value=v,
                passed=False)
        for j, v in enumerate(src.value or [])
    ]  # fmt: skip
    return [src, *items]


def _base_name(name: str) -> str:
    """The argument an item source belongs to (``mrope_section[0]`` -> ``mrope_section``)."""
    return name.split("[", 1)[0]


def _names(param: str, aliases: list[str]) -> set[str]:
    return {param.lower(), *(a.lower() for a in aliases)}


def _dtype_ok(spec: TensorArgSpec, dtype: str | None) -> bool:
    for allowed in spec.dtypes:
        if allowed == "any" or allowed == dtype:
            return True
        if (allowed == "float" and dtype in _FLOATS) or (allowed == "int" and dtype in _INTS):
            return True
    return False


def _bind_dim_scalars(meta: KernelMeta, scalars: list[_Source], env: Env) -> set[str]:
    """Bind symbols that a problem scalar gives (``dims: {D: [head_dim]}``); return used names."""
    used: set[str] = set()
    for symbol, names in meta.dims.items():
        wanted = {n.lower() for n in names}
        for src in scalars:
            if src.name.lower() in wanted and isinstance(src.value, int) and src.value > 0:
                env.dims[symbol], env.exprs[symbol] = src.value, src.expr
                used.add(src.name)
                break
    return used


# ------------------------------------------------------------------ search over assignments
@dataclass
class _Search:
    meta: KernelMeta
    params: list[tuple[str, TensorArgSpec]]
    sources: list[_Source]
    solutions: list[tuple[int, Env, dict[str, TensorBinding]]] = field(default_factory=list)
    deepest: tuple[int, str] = (-1, "")
    nodes: int = 0

    def fail(self, depth: int, reason: str) -> None:
        if depth > self.deepest[0]:
            self.deepest = (depth, reason)

    def trybind_dim(
        self, name: str, spec: TensorArgSpec, src: _Source, env: Env, transposed: bool
    ) -> tuple[Env, TensorBinding]:
        if not _dtype_ok(spec, src.dtype):
            raise Mismatch(f"'{src.name}' is {src.dtype}; {name} takes {spec.dtypes}")
        shape, base = src.shape, src.expr
        if transposed:
            shape, base = (*shape[:-2], shape[-1], shape[-2]), f"{src.expr}.transpose(-2, -1)"
        label = f"'{src.name}' {list(shape)}" + (" (transposed)" if transposed else "")
        new, view, reshaped = unify_shape(
            env.copy(), list(spec.shape), shape, base, label, flattened=spec.flattened
        )
        if reshaped:  # the shape the launcher sees (an in-place output aliases it)
            sizes = [token_value(new, tok) for tok in spec.shape]
            known = math.prod(s for s in sizes if s is not None)
            shape = tuple(s if s is not None else math.prod(shape) // known for s in sizes)
        binding = TensorBinding(name, src.name, view, shape, reshaped, transposed)
        return new, binding

    def run(self, i: int, env: Env, chosen: dict[str, TensorBinding], deferred: list[int]) -> None:
        self.nodes += 1
        if self.nodes > _MAX_NODES:
            return
        if i == len(self.params):
            self.finish(env, chosen, deferred)
            return
        name, spec = self.params[i]
        used = {b.source for b in chosen.values()}
        options: list[tuple[_Source | None, bool]] = [
            (s, t)
            for s in self.sources
            if s.name not in used
            for t in ((False, True) if spec.layout == "any" and len(s.shape) >= 2 else (False,))
        ]
        if spec.optional:
            options.append((None, False))
        if not options:
            self.fail(i, f"launcher parameter '{name}' {spec.shape}: no problem tensor is left")
        for src, transposed in options:
            if src is None:
                self.run(i + 1, env, chosen | {name: TensorBinding(name, None)}, deferred)
                continue
            try:
                new, binding = self.trybind_dim(name, spec, src, env, transposed)
            except Blocked:
                binding = TensorBinding(name, src.name, None, src.shape, transposed=transposed)
                self.run(i + 1, env, chosen | {name: binding}, [*deferred, i])
                continue
            except Mismatch as err:
                self.fail(i, f"launcher parameter '{name}' {spec.shape}: {err}")
                continue
            self.run(i + 1, new, chosen | {name: binding}, deferred)

    def finish(self, env: Env, chosen: dict[str, TensorBinding], deferred: list[int]) -> None:
        depth = len(self.params)
        pending, reason = list(deferred), ""
        while pending:
            progress = False
            for i in list(pending):
                name, spec = self.params[i]
                b = chosen[name]
                src = next(s for s in self.sources if s.name == b.source)
                try:
                    env, chosen[name] = self.trybind_dim(name, spec, src, env, b.transposed)
                except Blocked as err:
                    reason = f"launcher parameter '{name}': cannot tell the sizes apart: {err}"
                    continue
                except Mismatch as err:
                    self.fail(depth, f"launcher parameter '{name}' {spec.shape}: {err}")
                    return
                pending.remove(i)
                progress = True
            if not progress:
                hint = " (declare the symbol in the header's dims: with the problem's scalar)"
                self.fail(depth, reason + hint)
                return
        used = {b.source for b in chosen.values() if b.source is not None}
        left = [s for s in self.sources if s.name not in used]
        if left:
            s = left[0]
            self.fail(
                depth + 1,
                f"{s.origin} tensor '{s.name}' {list(s.shape)} ({s.dtype}) matches no launcher "
                f"parameter of {self.meta.launcher}()",
            )
            return
        for name, spec in self.params:
            if spec.like and chosen[name].source and chosen[spec.like].source:
                mine = self.dtype_of(chosen[name].source)
                other = self.dtype_of(chosen[spec.like].source)
                if mine != other:
                    self.fail(depth, f"'{name}' is {mine} but must match '{spec.like}' ({other})")
                    return
        self.solutions.append((self.score(chosen), env, dict(chosen)))

    def dtype_of(self, name: str | None) -> str | None:
        return next((s.dtype for s in self.sources if s.name == name), None)

    def score(self, chosen: dict[str, TensorBinding]) -> int:
        score = 0
        order = []
        for name, spec in self.params:
            b = chosen[name]
            if b.source is None:
                continue
            score += 3 if b.source.lower() in _names(name, spec.aliases) else 0
            score -= 2 * (b.reshaped + b.transposed)
            order.append(next(s.position for s in self.sources if s.name == b.source))
        score += sum(1 for a, b2 in itertools.combinations(order, 2) if a < b2)
        return score


# ------------------------------------------------------------------ scalars and outputs
def _scalar_args(meta: KernelMeta) -> list[tuple[str, ScalarArgSpec]]:
    return [(k, v) for k, v in meta.args.items() if isinstance(v, ScalarArgSpec)]


def _type_ok(kind: str, value: Any) -> bool:
    """Whether ``value`` fits a header scalar type (a bool is no int; list types take lists)."""
    if kind in _LIST_TYPES:
        return isinstance(value, list) and all(_type_ok(_LIST_TYPES[kind], v) for v in value)
    if isinstance(value, list):
        return False
    return isinstance(value, _SCALAR_TYPES[kind]) and (
        kind == "bool" or not isinstance(value, bool)
    )


def _map_scalars(
    meta: KernelMeta, scalars: list[_Source], used: set[str], required: set[str]
) -> tuple[dict[str, str], dict[str, Any]]:
    """Launcher scalar -> forward expression, and the values (mapped or default) by name.

    Raises:
        AdaptError: A required scalar has no counterpart, or a counterpart has the wrong type.
    """
    exprs: dict[str, str] = {}
    values: dict[str, Any] = {}
    for name, spec in _scalar_args(meta):
        wanted = _names(name, spec.aliases)
        src = next(
            (s for s in scalars if s.name.lower() in wanted and s.name not in used),
            None,
        )
        if src is None:
            if name in required:
                known = [s.name for s in scalars] or "none"
                raise AdaptError(
                    f"{meta.id}: launcher parameter '{name}' (scalar {spec.type}) is required but "
                    f"the problem has no scalar named {sorted(wanted)} (its scalars: {known}); "
                    "add an alias to the kernel header's args"
                )
            values[name] = spec.default
            continue
        if not any(_type_ok(kind, src.value) for kind in spec.types):
            raise AdaptError(
                f"{meta.id}: launcher parameter '{name}' takes a {' or '.join(spec.types)}, but "
                f"the problem's '{src.name}' is {src.value!r}"
            )
        exprs[name], values[name] = src.expr, src.value
        used.add(src.name)
    return exprs, values


def _out_shape(
    meta: KernelMeta,
    index: int,
    env: Env,
    bindings: dict[str, TensorBinding],
    values: dict[str, Any],
) -> list[int | None] | None:
    """The concrete shape of launcher output ``index`` (None entries: unchecked; None: unknown)."""
    spec = meta.returns[index]
    if spec.alias is not None:
        b = bindings[spec.alias]
        return list(b.shape) if b.source is not None else None
    shape: list[int | None] = []
    names = {**{k: v for k, v in values.items() if isinstance(v, int | float)}, **env.dims}
    for token in spec.shape or []:
        kind, factor, name = parse_dim(token)
        if kind == "ellipsis":
            shape += list(env.ellipsis or ())
        elif kind == "wildcard":
            shape.append(None)
        elif kind == "expr":
            from aka.spec import evaluate_quantity

            try:
                shape.append(int(round(evaluate_quantity(name, names))))
            except ValueError:
                return None
        else:
            value = token_value(env, token)
            if value is None and kind == "symbol" and isinstance(names.get(name), int):
                value = factor * int(names[name])  # a scalar parameter (top_k, num_heads)
            if value is None:
                return None
            shape.append(value)
    return shape


def _map_outputs(
    meta: KernelMeta,
    signature: InputSignature,
    env: Env,
    bindings: dict[str, TensorBinding],
    values: dict[str, Any],
    sources: list[_Source],
) -> list[str]:
    """Return expression per problem output; raise Mismatch when the launcher cannot give them."""
    dtype_of = {s.name: s.dtype for s in sources}
    single = len(meta.returns) == 1
    exprs, j = [], 0
    for out in signature.outputs:
        while True:
            if j >= len(meta.returns):
                raise Mismatch(
                    f"reference output {out.name} {out.shape} ({out.dtype}) matches no remaining "
                    f"output of {meta.launcher}() (it returns {len(meta.returns)})"
                )
            spec, expr = meta.returns[j], "_out" if single else f"_out[{j}]"
            j += 1
            got = _out_shape(meta, j - 1, env, bindings, values)
            if spec.requires is not None and bindings[spec.requires].source is None:
                continue  # the launcher returns None there
            if spec.alias is not None:
                dtype = dtype_of.get(bindings[spec.alias].source or "")
            elif spec.dtype in bindings:
                dtype = dtype_of.get(bindings[spec.dtype].source or "")
            else:
                dtype = spec.dtype
            if got is None or dtype != out.dtype:
                continue
            shape = got
            if len(shape) == len(out.shape) and all(
                a is None or a == b for a, b in zip(shape, out.shape, strict=True)
            ):
                exprs.append(expr)
                break
            if None not in shape:
                inputs = [(s.expr, s.shape) for s in sources]
                view = _inverse_view(meta, spec.shape, bindings, sources, expr, out.shape)
                if view is None:
                    view = reshape_expr(
                        expr, [s for s in shape if s is not None], out.shape, inputs
                    )
                if view is not None:
                    exprs.append(view)
                    break
    return exprs


def _inverse_view(
    meta: KernelMeta,
    tokens: list[Any] | None,
    bindings: dict[str, TensorBinding],
    sources: list[_Source],
    expr: str,
    want: list[int],
) -> str | None:
    """``expr`` viewed as the problem tensor that a view of fed a same-shaped parameter, or None.

    Sizes alone cannot place a dim that is 1 in the described shape: with one KV head, (T, 1, D)
    -> (T, D) merges the 1 into T or into D alike, and merging it into T is wrong at HK > 1. The
    symbols can: an output declared [T, HK, D] like parameter ``k``, which was a view of the
    problem's ``k`` (T, HK * D), goes back to that tensor's shape at every size.
    """
    if tokens is None:
        return None
    for name, b in bindings.items():
        arg = meta.args[name]
        if b.source is None or not b.reshaped or b.transposed:
            continue
        if not isinstance(arg, TensorArgSpec) or list(arg.shape) != list(tokens):
            continue
        src = next(s for s in sources if s.name == b.source)
        if list(src.shape) == list(want):
            return f"{expr}.reshape({src.expr}.shape)"
    return None


def _check_exprs(env: Env, values: dict[str, Any]) -> None:
    from aka.spec import evaluate_quantity

    names = {**{k: v for k, v in values.items() if isinstance(v, int | float)}, **env.dims}
    for text, value, where in env.checks:
        try:
            expected = evaluate_quantity(text, names)
        except ValueError as err:
            raise Mismatch(f"{where}: cannot check {text!r}: {err}") from err
        if abs(expected - value) > 1e-9:
            raise Mismatch(f"{where} is {value}, the kernel needs {text} = {expected:g}")


def map_arguments(
    meta: KernelMeta, signature: InputSignature, *, required: set[str] | None = None
) -> AdaptPlan:
    """Map a problem's forward arguments, init scalars and weights onto a kernel's launcher.

    Every problem tensor must feed a launcher parameter; symbolic dims are unified with the real
    shapes (leading ``...`` dims shared, runs of dims merged or split by views, a transposed view
    where the layout allows any strides); names and argument order only break ties. The
    launcher's outputs must give the reference's outputs (count, dtypes, shapes up to a view).

    Args:
        meta: The kernel's header (its ``args``, ``returns`` and ``dims``).
        signature: The problem's input signature (from ``Scorer.input_signature``).
        required: Launcher scalars without a default (they must be matched).

    Returns:
        The best consistent mapping.

    Raises:
        AdaptError: No consistent mapping exists; the message names the argument and why.
    """
    if not meta.adaptable:
        raise AdaptError(
            f"{meta.id}: the header declares no launcher contract (args/returns); add them"
        )
    tensors, scalars, bad = _sources(signature)
    if bad:
        raise AdaptError(f"{meta.id}: {bad[0]}")
    env = Env()
    used = _bind_dim_scalars(meta, scalars, env)
    params = [(k, v) for k, v in meta.args.items() if isinstance(v, TensorArgSpec)]
    search = _Search(meta, params, tensors)
    search.run(0, env, {}, [])
    if not search.solutions:
        raise AdaptError(
            f"{meta.id}: cannot map the problem onto {meta.launcher}(): "
            f"{search.deepest[1] or 'no assignment of its tensors fits'}"
        )
    # a scalar that gives a dim may feed a launcher scalar as well (head_size: D and head_size=)
    mapped: set[str] = set()
    scalar_exprs, values = _map_scalars(meta, scalars, mapped, required or set())
    used_bases = {_base_name(n) for n in used | mapped}
    unmapped = [
        s.name for s in scalars if s.origin == "forward" and s.passed and s.name not in used_bases
    ]
    if unmapped:
        raise AdaptError(
            f"{meta.id}: forward argument '{unmapped[0]}' (scalar) matches no parameter of "
            f"{meta.launcher}() (its scalars: {[k for k, _ in _scalar_args(meta)]})"
        )
    reason, in_place = "", False  # why the best-scored mapping failed
    for score, found_env, bindings in sorted(search.solutions, key=lambda s: -s[0]):
        mismatch = in_place_mismatch(meta, signature, {k: b.source for k, b in bindings.items()})
        if mismatch is not None:
            if not reason:
                reason, in_place = mismatch, True
            continue
        try:
            _check_exprs(found_env, values)
            returns = _map_outputs(meta, signature, found_env, bindings, values, tensors)
        except Mismatch as err:
            reason = reason or str(err)
            continue
        return AdaptPlan(
            kernel_id=meta.id,
            launcher=meta.launcher,
            tensors=bindings,
            scalars=scalar_exprs,
            returns=returns,
            output_kind=signature.output_kind,
            output_keys=[o.name for o in signature.outputs],
            dims=dict(found_env.dims),
            score=score,
            unused_init=[
                s.name
                for s in scalars
                if s.origin == "init" and "[" not in s.name and s.name not in used_bases
            ],
        )
    if in_place:
        raise InPlaceMismatchError(f"{meta.id} on {signature.problem_name}: {reason}")
    raise AdaptError(
        f"{meta.id}: the outputs of {meta.launcher}() do not give the reference's: {reason}"
    )


# ------------------------------------------------------------------ code generation
def _module_body(text: str, path: Path) -> tuple[str, str]:
    """The kernel file without its docstring and reference helpers; and the docstring paragraph."""
    tree = parse_module(text, filename=str(path))
    for node in ast.walk(tree):
        module = None
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
        elif isinstance(node, ast.Import):
            module = " ".join(a.name for a in node.names)
        if module is not None and "reference_kernels" in module:
            raise AdaptError(
                f"{path}: imports the reference_kernels package; candidates are single files"
            )
    lines = text.splitlines()
    drop: set[int] = set()
    doc = ast.get_docstring(tree, clean=False) or ""
    if tree.body and isinstance(tree.body[0], ast.Expr) and doc:
        drop |= set(range(tree.body[0].lineno - 1, tree.body[0].end_lineno or 0))
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in _STRIPPED:
            start = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
            drop |= set(range(start, node.end_lineno or start))
    body = "\n".join(line for i, line in enumerate(lines) if i not in drop).strip("\n")
    if not any(
        isinstance(n, ast.Import) and any(a.name == "torch" and a.asname is None for a in n.names)
        for n in tree.body
    ):
        body = "import torch\n" + body
    paragraph = doc.split("---", 2)[2].strip() if doc.count("---") >= 2 else ""
    return body + "\n", paragraph


def _header(meta: KernelMeta, paragraph: str, plan: AdaptPlan, params: dict[str, Any]) -> str:
    keep = meta.model_dump(
        mode="json",
        include={
            "id",
            "title",
            "op_family",
            "dsl",
            "vendor",
            "arch",
            "dtypes",
            "bound",
            "techniques",
            "source",
            "launcher",
        },
        exclude_none=True,
    )
    keep.update(status="candidate", tuning={k: [v] for k, v in params.items()}, measured=[])
    front = yaml.safe_dump(keep, sort_keys=False, default_flow_style=None, width=96).strip()
    note = (
        f"Adapted by aka's offline search from the reference kernel {meta.id} "
        f"(tuning {params or 'defaults'}): ModelNew calls {plan.call(params)}."
    )
    text = f"---\n{front}\n---\n{paragraph}\n\n{note}".replace('"""', "'''")
    prefix = "r" if "\\" in text else ""
    return f'{prefix}"""\n{text}\n"""\n'


def _param_init(t: TensorInfo, init: list[ArgInfo]) -> str:
    dims = []
    for size in t.shape:
        match = next(
            (
                a.name
                for a in init
                if a.kind == "scalar" and a.value == size and a.type_name == "int"
            ),
            None,
        )
        dims.append(match or str(size))
    dtype = TORCH_DTYPE_NAMES.get(t.dtype, t.dtype)  # type: ignore[call-overload]
    empty = f"torch.empty(({', '.join(dims)}{',' if len(dims) == 1 else ''}), dtype=torch.{dtype})"
    if t.kind == "buffer":
        return f"        self.register_buffer({t.name!r}, {empty})"
    return f"        self.{t.name} = torch.nn.Parameter({empty})"


def _typed_params(signature: InputSignature) -> str:
    """Return forward's parameter text with the scalar arguments annotated by their Python type.

    The scorer's screen takes an unannotated forward parameter for a tensor; a scalar the
    reference's forward takes (``block_size``, ``eps``) would make the launcher's plain
    arithmetic on it look like torch compute in forward.
    """
    text = signature.forward_params_text
    scalars = {
        a.name: a.type_name
        for a in signature.forward_args
        if a.kind == "scalar" and a.type_name in ("int", "float", "bool", "str")
    }
    if not scalars:
        return text
    try:
        fn = parse_module(f"def forward({text}):\n    pass\n").body[0]
    except SyntaxError:
        return text
    if not isinstance(fn, ast.FunctionDef):
        return text
    params = [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]
    for param in params:
        if param.arg in scalars and param.annotation is None:
            param.annotation = ast.Name(id=scalars[param.arg])
    return ast.unparse(fn.args)


def _model_class(plan: AdaptPlan, signature: InputSignature, params: dict[str, Any]) -> str:
    init = [
        f"        self.{a.name} = {a.name}" for a in signature.init_args if a.name.isidentifier()
    ]
    init += [_param_init(t, signature.init_args) for t in signature.parameters]
    values = plan.returns
    if plan.output_kind == "dict":
        values = [f"{k!r}: {v}" for k, v in zip(plan.output_keys, values, strict=True)]
    if plan.output_kind == "tensor":
        ret = values[0]
    else:  # one element per line: the views can be long
        opening, closing = ("{", "}") if plan.output_kind == "dict" else ("(", ")")
        ret = opening + "".join(f"\n            {v}," for v in values) + f"\n        {closing}"
    return (
        "\n\nclass ModelNew(torch.nn.Module):\n"
        f'    """{plan.kernel_id} adapted to the problem (generated; views only in forward)."""\n\n'
        f"    def __init__({signature.init_params_text}):\n"
        "        super().__init__()\n"
        + "".join(line + "\n" for line in init)
        + f"\n    def forward({_typed_params(signature)}):\n"
        f"        _out = {plan.call(params, indent=' ' * 8)}\n"
        f"        return {ret}\n"
    )


def adapt_kernel(
    kernel_path: Path, meta: KernelMeta, signature: InputSignature, *, params: dict[str, Any]
) -> str:
    """Return a complete candidate file: the kernel's code plus a generated ``ModelNew``.

    Args:
        kernel_path: The reference kernel file (read as text, never imported).
        meta: Its validated header.
        signature: The problem's input signature (from ``Scorer.input_signature``).
        params: Tuning values for the launcher's meta-parameters (keys of ``meta.tuning``).

    Returns:
        The candidate's source: no import of ``reference_kernels``, no reference helpers.

    Raises:
        AdaptError: No consistent mapping exists, ``params`` names an unknown tuning parameter,
            or a problem name collides with a name the generated forward needs.
    """
    unknown = sorted(set(params) - set(meta.tuning))
    if unknown:
        raise AdaptError(
            f"{meta.id}: tuning parameters {unknown} are not in the header's tuning "
            f"{sorted(meta.tuning)}"
        )
    text = kernel_path.read_text(encoding="utf-8")
    launcher = read_source_facts(text, filename=str(kernel_path)).functions.get(meta.launcher)
    if launcher is None:
        raise AdaptError(f"{kernel_path}: no launcher function '{meta.launcher}' in the file")
    plan = map_arguments(meta, signature, required=set(launcher.required))
    reserved = {meta.launcher, "torch", "triton", "tl", "self", "_out"}
    clash = [a.name for a in signature.forward_args if a.name in reserved]
    if clash:
        raise AdaptError(
            f"{meta.id}: forward argument '{clash[0]}' shadows a name the generated forward uses"
        )
    body, paragraph = _module_body(text, kernel_path)
    return (
        _header(meta, paragraph, plan, params) + "\n" + body + _model_class(plan, signature, params)
    )
