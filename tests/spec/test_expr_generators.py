"""evaluate_quantity over list kwargs with a generator: ``sum(s * s for s in seq_lens)``."""

from __future__ import annotations

import pytest

from aka.spec import evaluate_quantity

NAMES = {"seq_lens": [7, 33, 20], "block_size": 16, "heads": 3, "dtype": "bf16"}


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("sum(s * s for s in seq_lens)", 7 * 7 + 33 * 33 + 20 * 20),
        ("sum(s * (s + 1) for s in seq_lens) / 2", (7 * 8 + 33 * 34 + 20 * 21) / 2),
        ("sum(ceil(s / block_size) for s in seq_lens)", 1 + 3 + 2),
        ("max(s * heads for s in seq_lens)", 99.0),
        ("min(s - block_size for s in seq_lens)", -9.0),
        ("prod(s // 7 for s in seq_lens)", 1 * 4 * 2),
        ("len(s for s in seq_lens)", 3.0),
        ("heads * sum(s for s in seq_lens) + 1", 3 * 60 + 1),
    ],
)
def test_generator_over_a_list_kwarg(expression: str, expected: float) -> None:
    assert evaluate_quantity(expression, NAMES) == pytest.approx(expected)


def test_generator_over_an_empty_list() -> None:
    assert evaluate_quantity("sum(s * s for s in seq_lens)", {"seq_lens": []}) == 0.0
    with pytest.raises(ValueError, match="empty"):
        evaluate_quantity("max(s for s in seq_lens)", {"seq_lens": []})


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("sum(s for s in seq_lens if s)", "no 'if'"),
        ("sum(s * t for s in seq_lens for t in seq_lens)", "exactly one 'for'"),
        ("sum(heads for heads in seq_lens)", "hides the shape's kwarg"),
        ("sum(s for s in block_size)", "not a list of numbers"),
        ("sum(s for s in lens)", "loop over one of the shape's list kwargs"),
        ("sum(s for s in [1, 2])", "loop over one of the shape's list kwargs"),
        ("sum(s for s in dtype)", "not a list of numbers"),
        ("sum(s.real for s in seq_lens)", "is not allowed"),
        ("sum(t for s in seq_lens)", "unknown name 't'"),
        ("sum([s for s in seq_lens])", "is not allowed"),
        ("sum((s, t) for s, t in seq_lens)", "one plain loop name"),
        ("ceil(s for s in seq_lens)", "is not allowed"),
        ("s * 2", "unknown name 's'"),
    ],
)
def test_generator_misuse_is_a_clear_error(expression: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        evaluate_quantity(expression, NAMES)


def test_generator_elements_must_be_numbers() -> None:
    with pytest.raises(ValueError, match="not a list of numbers"):
        evaluate_quantity("sum(s for s in seq_lens)", {"seq_lens": [1, True]})
