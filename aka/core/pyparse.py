"""``parse_module`` / ``parse_expression``: ``ast.parse`` behind one process-wide lock.

CPython 3.11 keeps the AST constructor's recursion-depth bookkeeping in state that two threads
parsing at once can corrupt: the parse then fails with ``SystemError: AST constructor recursion
depth mismatch`` (seen in this project's CI, two threads loading problems; gh-106905). aka parses
from threads — the service's request threads, the agent's per-GPU scorer slots — so every parse
in aka goes through here. Parsing is quick next to what surrounds it; the lock costs nothing
measurable.
"""

from __future__ import annotations

import ast
import threading

__all__ = ["parse_expression", "parse_module"]

_LOCK = threading.Lock()


def parse_module(source: str, filename: str = "<unknown>") -> ast.Module:
    """``ast.parse(source, filename)`` (mode ``exec``), one thread at a time.

    Raises:
        SyntaxError: ``source`` is not valid Python.
    """
    with _LOCK:
        return ast.parse(source, filename=filename)


def parse_expression(source: str) -> ast.Expression:
    """``ast.parse(source, mode="eval")``, one thread at a time.

    Raises:
        SyntaxError: ``source`` is not a valid Python expression.
    """
    with _LOCK:
        return ast.parse(source, mode="eval")
