"""The scorer's refill probe for kernel tests: one seed's inputs given another's values in place.

The scorer's repeat probe copies a second seed's values into the first seed's tensors (same
addresses, same shapes) to catch outputs cached by address; a kernel test that wants to show its
``make_inputs`` survives that builds the same situation here.
"""

from __future__ import annotations

import types
from typing import Any

import torch


def refilled_inputs(
    mod: types.ModuleType,
    shape: dict[str, Any],
    dtype: torch.dtype,
    seeds: tuple[int, int] = (1, 2),
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(refilled, second)``: seed 0's inputs holding seed 1's values at their own addresses."""
    torch.manual_seed(seeds[0])
    refilled = mod.make_inputs(shape, dtype)
    torch.manual_seed(seeds[1])
    second = mod.make_inputs(shape, dtype)
    for key, value in refilled.items():
        if torch.is_tensor(value):
            assert value.shape == second[key].shape, key  # the refill keeps shapes and addresses
            value.copy_(second[key])
    return refilled, second
