"""Read facts from Python source with ``ast`` only: classes, functions and their parameters.

``aka.spec`` never imports problem or candidate code; this is how it learns their signatures.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from aka.core.pyparse import parse_module

__all__ = ["Signature", "SourceFacts", "read_source_facts"]


@dataclass(frozen=True)
class Signature:
    """Parameters of a function, without ``self``."""

    params: tuple[str, ...]
    required: tuple[str, ...]
    has_var_kwargs: bool
    has_var_args: bool

    def accepts(self, name: str) -> bool:
        """Return whether a keyword ``name`` can be passed."""
        return self.has_var_kwargs or name in self.params


@dataclass(frozen=True)
class SourceFacts:
    """What a module defines at top level (functions) and in its classes (methods)."""

    functions: dict[str, Signature]
    classes: dict[str, dict[str, Signature]]


def _signature(fn: ast.FunctionDef | ast.AsyncFunctionDef, *, method: bool) -> Signature:
    args = fn.args
    positional = [a.arg for a in args.posonlyargs + args.args]
    if method and positional:
        positional = positional[1:]
    n_defaults = len(args.defaults)
    required = positional[: len(positional) - n_defaults] if n_defaults else list(positional)
    kwonly = [a.arg for a in args.kwonlyargs]
    required += [a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is None]
    return Signature(
        params=tuple(positional + kwonly),
        required=tuple(required),
        has_var_kwargs=args.kwarg is not None,
        has_var_args=args.vararg is not None,
    )


def read_source_facts(source: str, filename: str = "<source>") -> SourceFacts:
    """Parse ``source`` and list its top-level functions and class methods.

    Raises:
        SyntaxError: The source does not parse (callers turn it into a SpecError).
    """
    tree = parse_module(source, filename=filename)
    functions: dict[str, Signature] = {}
    classes: dict[str, dict[str, Signature]] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            functions[node.name] = _signature(node, method=False)
        elif isinstance(node, ast.ClassDef):
            classes[node.name] = {
                item.name: _signature(item, method=True)
                for item in node.body
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
            }
    return SourceFacts(functions=functions, classes=classes)
