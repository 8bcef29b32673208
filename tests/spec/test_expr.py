"""evaluate_quantity: whitelisted arithmetic over a shape's kwargs, never ``eval``."""

from __future__ import annotations

import math

import pytest

from aka.spec import evaluate_quantity

NAMES = {"tokens": 33, "hidden": 4096, "scale": 0.5, "dtype": "bf16", "flag": True}


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("2 * tokens * hidden * 2", 2 * 33 * 4096 * 2),
        ("tokens + hidden - 1", 33 + 4096 - 1),
        ("hidden / 8", 512.0),
        ("tokens // 2", 16.0),
        ("tokens % 8", 1.0),
        ("2 ** 10", 1024.0),
        ("-tokens + 40", 7.0),
        ("(tokens + 1) * scale", 17.0),
        ("1e3 * scale", 500.0),
    ],
)
def test_evaluate_quantity_arithmetic(expression: str, expected: float) -> None:
    assert evaluate_quantity(expression, NAMES) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("ceil(tokens / 16) * 16", 48.0),
        ("floor(tokens / 16)", 2.0),
        ("min(tokens, 16)", 16.0),
        ("max(tokens, hidden, 7)", 4096.0),
        ("log2(hidden)", 12.0),
        ("sqrt(hidden)", 64.0),
    ],
)
def test_evaluate_quantity_functions(expression: str, expected: float) -> None:
    assert evaluate_quantity(expression, NAMES) == pytest.approx(expected)


def test_evaluate_quantity_numbers_pass_through() -> None:
    assert evaluate_quantity(7, {}) == 7.0
    assert isinstance(evaluate_quantity(7, {}), float)
    assert evaluate_quantity(2.5, {}) == 2.5


def test_evaluate_quantity_unknown_name() -> None:
    with pytest.raises(ValueError, match=r"unknown name 'hiden'.*\['dtype', 'flag'"):
        evaluate_quantity("tokens * hiden", NAMES)


def test_evaluate_quantity_name_must_be_a_number() -> None:
    with pytest.raises(ValueError, match="'dtype'.*not a number"):
        evaluate_quantity("dtype * 2", NAMES)


@pytest.mark.parametrize(
    "expression",
    [
        "tokens.bit_length()",  # attribute access
        "__import__('os')",  # a call of a name outside the whitelist
        "abs(tokens)",
        "(lambda: 1)()",
        "[tokens][0]",
        "tokens if hidden else 1",
        "tokens < hidden",
        "'a' * 3",
        "ceil(x=tokens)",  # keywords
        "max(*[tokens, hidden])",
    ],
)
def test_evaluate_quantity_disallowed_syntax(expression: str) -> None:
    with pytest.raises(ValueError, match="is not allowed"):
        evaluate_quantity(expression, NAMES)


@pytest.mark.parametrize(("value"), [True, False, "True * 2", "flag * 2"])
def test_evaluate_quantity_rejects_bools(value: bool | str) -> None:
    with pytest.raises(ValueError, match="bool|True|flag"):
        evaluate_quantity(value, NAMES)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("tokens / 0", "cannot be computed"),
        ("10.0 ** 400", "cannot be computed"),
        ("1e308 * 10", "not finite"),
        ("log2(0 - 1)", "math domain"),
        ("(0 - 8) ** 0.5", "not a real number"),
        ("min(tokens)", "min takes 2 or more"),
        ("ceil(tokens, 2)", "ceil takes 1 argument"),
        ("sqrt()", "sqrt takes 1 argument"),
    ],
)
def test_evaluate_quantity_errors_are_value_errors(expression: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        evaluate_quantity(expression, NAMES)


def test_evaluate_quantity_syntax_error() -> None:
    with pytest.raises(ValueError, match="cannot parse expression"):
        evaluate_quantity("2 *", NAMES)


def test_evaluate_quantity_result_is_finite_float() -> None:
    value = evaluate_quantity("hidden * hidden * tokens", NAMES)

    assert isinstance(value, float) and math.isfinite(value)
