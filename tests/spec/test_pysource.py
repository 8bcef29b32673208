"""read_source_facts: signatures read with ``ast`` from code that is never imported."""

from __future__ import annotations

import pytest

from aka.spec import Signature, read_source_facts

SOURCE = """\
import torch


def plain(a, b=2):
    pass


def kw_only(a, *, b, c=3):
    pass


def star(a, *args, key=None, **kwargs):
    pass


def posonly(a, /, b, c=1):
    pass


async def coro(x):
    pass


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6, *, scale):
        super().__init__()

    def forward(self, x, weight=None):
        return x

    @staticmethod
    def helper():
        pass

    class Inner:
        def method(self, z):
            pass


def outer():
    def nested(q):
        pass
"""


@pytest.fixture(scope="module")
def facts():
    return read_source_facts(SOURCE)


def test_read_source_facts_defaults(facts) -> None:
    assert facts.functions["plain"] == Signature(
        params=("a", "b"), required=("a",), has_var_kwargs=False, has_var_args=False
    )


def test_read_source_facts_keyword_only(facts) -> None:
    sig = facts.functions["kw_only"]

    assert sig.params == ("a", "b", "c")
    assert sig.required == ("a", "b")  # b is keyword-only without a default


def test_read_source_facts_var_args_and_kwargs(facts) -> None:
    sig = facts.functions["star"]

    assert sig.params == ("a", "key")
    assert sig.required == ("a",)
    assert sig.has_var_args and sig.has_var_kwargs
    assert sig.accepts("anything")  # **kwargs takes every keyword


def test_read_source_facts_positional_only(facts) -> None:
    sig = facts.functions["posonly"]

    assert sig.params == ("a", "b", "c")
    assert sig.required == ("a", "b")


def test_read_source_facts_async_function(facts) -> None:
    assert facts.functions["coro"].params == ("x",)


def test_read_source_facts_methods_exclude_self(facts) -> None:
    methods = facts.classes["Model"]

    assert methods["__init__"].params == ("eps", "scale")
    assert methods["__init__"].required == ("scale",)
    assert methods["forward"].params == ("x", "weight")
    assert methods["forward"].required == ("x",)
    assert not methods["forward"].accepts("bias")


def test_read_source_facts_top_level_only(facts) -> None:
    assert "nested" not in facts.functions
    assert "Inner" not in facts.classes
    assert "Inner" not in facts.classes["Model"]
    assert set(facts.functions) == {"plain", "kw_only", "star", "posonly", "coro", "outer"}


def test_read_source_facts_syntax_error() -> None:
    with pytest.raises(SyntaxError) as info:
        read_source_facts("def f(:\n    pass\n", filename="broken.py")

    assert info.value.lineno == 1
    assert info.value.filename == "broken.py"
