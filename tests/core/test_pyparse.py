"""``aka.core.pyparse``: how aka parses Python (behind a lock, for CPython 3.11 threads)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from aka.core.pyparse import parse_expression, parse_module

AKA = Path(__file__).resolve().parents[2] / "aka"


def test_parses_as_ast_parse_does() -> None:
    source = "def f(x):\n    return x + 1\n"
    assert ast.dump(parse_module(source, "f.py")) == ast.dump(ast.parse(source))
    assert ast.dump(parse_expression("a * 2")) == ast.dump(ast.parse("a * 2", mode="eval"))
    with pytest.raises(SyntaxError) as err:
        parse_module("def (:\n", "bad.py")
    assert err.value.filename == "bad.py"


def test_no_module_of_aka_calls_ast_parse_itself() -> None:
    # Two threads in ast.parse at once can fail with "SystemError: AST constructor recursion depth
    # mismatch" on CPython 3.11 (seen in CI); the service and the per-GPU scorer slots parse from
    # threads, so every parse goes through the lock in aka.core.pyparse.
    direct = [f"{p.relative_to(AKA)}:{n}" for p in sorted(AKA.rglob("*.py"))
              if p.name != "pyparse.py"
              for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
              if re.search(r"\bast\.parse\(", line)]  # fmt: skip
    assert direct == []
