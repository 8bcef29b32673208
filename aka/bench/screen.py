"""Stage 1, the static screen: AST checks of a candidate's source before anything runs it.

This is the first version (issue #2); the full screen with alias tracking, introspection and
stream/thread rules belongs to the hardening issue and extends this module. Each finding carries a
rule id and a line. Owns no execution: it parses text only.

Rules:
    no-kernel                 no ``@triton.jit`` function and no ``load_inline`` extension
    torch-compute-in-forward  ``forward`` (or a helper it calls) computes with ``torch.*``,
                              ``torch.nn.functional``, tensor math methods or ``@``
    reference-use             imports or calls the reference (``Model``, ``reference`` module)
    dynamic-code              ``exec``, ``eval``, ``compile`` or ``__import__``
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from aka.bench.result import ScreenFinding

__all__ = ["ScreenReport", "screen_source"]

#: torch functions that only allocate, describe or launch: allowed in forward.
_TORCH_ALLOWED = frozenset(
    {
        "empty",
        "empty_like",
        "empty_strided",
        "zeros",
        "zeros_like",
        "full",
        "full_like",
        "device",
        "Size",
        "is_tensor",
        "get_default_dtype",
        "finfo",
        "iinfo",
        "dtype",
        "tensor",
        "as_strided",
    }
)
#: torch submodules whose calls never compute a result (devices, streams are screened later).
_TORCH_ALLOWED_SUBMODULES = frozenset({"cuda", "library", "_C", "utils"})
#: Tensor methods that compute (a cast is compute too: it launches a kernel).
_TENSOR_MATH_METHODS = frozenset(
    {
        "float",
        "half",
        "bfloat16",
        "double",
        "int",
        "long",
        "type",
        "sum",
        "mean",
        "prod",
        "exp",
        "exp2",
        "log",
        "log2",
        "log1p",
        "sqrt",
        "rsqrt",
        "pow",
        "square",
        "mul",
        "mul_",
        "add",
        "add_",
        "sub",
        "sub_",
        "div",
        "div_",
        "neg",
        "abs",
        "reciprocal",
        "matmul",
        "mm",
        "bmm",
        "addmm",
        "baddbmm",
        "einsum",
        "softmax",
        "log_softmax",
        "max",
        "min",
        "amax",
        "amin",
        "argmax",
        "argmin",
        "norm",
        "var",
        "std",
        "sigmoid",
        "tanh",
        "relu",
        "gelu",
        "silu",
        "clamp",
        "clamp_",
        "clip",
        "sin",
        "cos",
        "erf",
        "cumsum",
        "cumprod",
        "topk",
        "sort",
        "argsort",
        "masked_fill",
        "masked_fill_",
        "where",
        "scatter",
        "scatter_add",
        "scatter_add_",
        "index_add",
        "index_add_",
        "gather",
        "maximum",
        "minimum",
        "lerp",
        "addcmul",
        "addcdiv",
        "outer",
        "dot",
        "round",
        "floor",
        "ceil",
    }
)
#: Module names whose same-named functions are not tensor math (``math.ceil``, ``tl.max``).
_NON_TENSOR_BASES = frozenset({"tl", "triton", "math", "builtins", "operator"})
_DYNAMIC = frozenset({"exec", "eval", "compile", "__import__"})
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


def _dotted(node: ast.AST) -> str | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _torch_aliases(tree: ast.Module) -> tuple[set[str], set[str]]:
    """Names bound to ``torch`` and to ``torch.nn.functional`` anywhere in the module."""
    torch_names, functional_names = {"torch"}, set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "torch":
                    torch_names.add(alias.asname or "torch")
                elif alias.name == "torch.nn.functional" and alias.asname:
                    functional_names.add(alias.asname)
        elif isinstance(node, ast.ImportFrom) and node.module == "torch.nn":
            functional_names |= {a.asname or a.name for a in node.names if a.name == "functional"}
    return torch_names, functional_names


def _is_kernel_decorator(dec: ast.expr) -> bool:
    target = dec.func if isinstance(dec, ast.Call) else dec
    name = _dotted(target) or ""
    return name.endswith("jit") or name.endswith("autotune") or name.endswith("heuristics")


def _kernel_kinds(tree: ast.Module) -> tuple[str, ...]:
    kinds: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and any(
            _is_kernel_decorator(d) for d in node.decorator_list
        ):
            kinds.add("triton")
        if isinstance(node, ast.Call) and (_dotted(node.func) or "").endswith("load_inline"):
            kinds.add("cuda")
    return tuple(sorted(kinds))


def _functions(
    tree: ast.Module,
) -> tuple[dict[str, ast.FunctionDef], dict[str, dict[str, ast.FunctionDef]]]:
    top: dict[str, ast.FunctionDef] = {}
    classes: dict[str, dict[str, ast.FunctionDef]] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            top[node.name] = node
        elif isinstance(node, ast.ClassDef):
            classes[node.name] = {n.name: n for n in node.body if isinstance(n, ast.FunctionDef)}
    return top, classes


def _hot_path(tree: ast.Module, entry: str) -> list[ast.FunctionDef]:
    """``forward`` and every non-kernel function it reaches by name (self.x or module functions)."""
    top, classes = _functions(tree)
    methods = classes.get(entry, {})
    todo = [methods["forward"]] if "forward" in methods else []
    seen: dict[int, ast.FunctionDef] = {}
    while todo:
        fn = todo.pop()
        if id(fn) in seen or any(_is_kernel_decorator(d) for d in fn.decorator_list):
            continue
        seen[id(fn)] = fn
        for call in (n for n in ast.walk(fn) if isinstance(n, ast.Call)):
            name = _dotted(call.func) or ""
            if name.startswith("self.") and name[5:] in methods:
                todo.append(methods[name[5:]])
            elif name in top:
                todo.append(top[name])
    return list(seen.values())


def _compute_findings(
    fns: Iterable[ast.FunctionDef], torch_names: set[str], functional_names: set[str]
) -> Iterator[ScreenFinding]:
    rule = "torch-compute-in-forward"
    for fn in fns:
        for node in ast.walk(fn):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
                yield ScreenFinding(rule=rule, line=node.lineno, message=f"'@' in {fn.name}()")
            if not isinstance(node, ast.Call):
                continue
            name = _dotted(node.func) or ""
            head, _, rest = name.partition(".")
            if head in functional_names or (
                head in torch_names and rest.startswith("nn.functional")
            ):
                yield ScreenFinding(
                    rule=rule,
                    line=node.lineno,
                    message=f"{name}() computes with torch.nn.functional in {fn.name}()",
                )
            elif head in torch_names and rest:
                first = rest.split(".")[0]
                if rest not in _TORCH_ALLOWED and first not in _TORCH_ALLOWED_SUBMODULES:
                    yield ScreenFinding(
                        rule=rule,
                        line=node.lineno,
                        message=f"{name}() computes with torch in {fn.name}()",
                    )
            elif isinstance(node.func, ast.Attribute) and node.func.attr in _TENSOR_MATH_METHODS:
                base = (_dotted(node.func.value) or "").split(".")[0]
                if base not in _NON_TENSOR_BASES:
                    yield ScreenFinding(
                        rule=rule,
                        line=node.lineno,
                        message=f".{node.func.attr}() is tensor math in {fn.name}()",
                    )


def _reference_findings(tree: ast.Module, entry: str | None) -> Iterator[ScreenFinding]:
    rule = "reference-use"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            mods = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
            )
            if any(m.split(".")[-1] in ("reference", "input") for m in mods):
                yield ScreenFinding(
                    rule=rule, line=node.lineno, message="imports the reference module"
                )
        if entry == "ModelNew" and isinstance(node, ast.Name) and node.id == "Model":
            yield ScreenFinding(
                rule=rule, line=node.lineno, message="uses the reference class 'Model'"
            )


def _dynamic_findings(tree: ast.Module) -> Iterator[ScreenFinding]:
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in _DYNAMIC
        ):
            yield ScreenFinding(
                rule="dynamic-code",
                line=node.lineno,
                message=f"{node.func.id}() runs code the screen cannot see",
            )


def _allowed(finding: ScreenFinding, allow: Iterable[str]) -> bool:
    return any(
        a == finding.rule
        or (a.startswith(finding.rule + ":") and a.split(":", 1)[1] in finding.message)
        for a in allow
    )


def screen_source(
    source: str, *, allow: Iterable[str] = (), filename: str = "candidate.py"
) -> ScreenReport:
    """Screen a candidate's source.

    Args:
        source: The candidate file's text.
        allow: Rule ids (or ``rule:text`` matching a finding's message) the problem allows.
        filename: Name for syntax errors.

    Returns:
        The findings (empty when the screen passes).

    Raises:
        SyntaxError: The source does not parse (the pipeline reports it as ``compile_error``).
    """
    tree = ast.parse(source, filename=filename)
    _, classes = _functions(tree)
    entry = next((c for c in _ENTRY_CLASSES if c in classes), None)
    kinds = _kernel_kinds(tree)
    findings: list[ScreenFinding] = []
    if entry is None:
        findings.append(
            ScreenFinding(
                rule="no-entry", line=None, message="defines no class ModelNew(torch.nn.Module)"
            )
        )
    if not kinds:
        findings.append(
            ScreenFinding(
                rule="no-kernel",
                line=None,
                message="no @triton.jit kernel and no load_inline extension",
            )
        )
    torch_names, functional_names = _torch_aliases(tree)
    if entry is not None:
        findings += _compute_findings(_hot_path(tree, entry), torch_names, functional_names)
    findings += _reference_findings(tree, entry)
    findings += _dynamic_findings(tree)
    kept = [f for f in findings if not _allowed(f, allow)]
    kept.sort(key=lambda f: (f.line or 0, f.rule))
    return ScreenReport(findings=kept, kernel_kinds=kinds, entry_class=entry)
