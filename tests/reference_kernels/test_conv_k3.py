"""Causal conv1d reference kernel (k3 set) against its PyTorch reference, in the interpreter."""

import pytest
import torch

CASES = [
    {"dim": 100, "tokens": 1},  # decode: every tap but the last reads the state
    {"dim": 33, "tokens": 70},
    {"dim": 16, "tokens": 3, "width": 4, "batch": 2},
    {"dim": 20, "tokens": 9, "width": 2},
]
DTYPES = [torch.float32, torch.bfloat16]
TOL = {torch.float32: (1e-4, 1e-4), torch.float16: (1e-3, 1e-3), torch.bfloat16: (1e-2, 1e-2)}


def _check(out, ref, dtype):
    assert out.shape == ref.shape and out.dtype == ref.dtype
    atol, rtol = TOL[dtype]
    torch.testing.assert_close(out.float(), ref.float(), atol=atol, rtol=rtol)
    assert (out.float() - ref.float()).norm() <= rtol * ref.float().norm() + atol


@pytest.mark.parametrize("shape", CASES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_causal_conv1d_fwd_matches_reference(load_kernel, shape, dtype):
    mod = load_kernel("triton/conv/causal_conv1d_fwd.py")
    inputs = mod.make_inputs(shape, dtype)
    _check(mod.causal_conv1d_fwd(**inputs), mod.reference(**inputs), dtype)


@pytest.mark.parametrize(
    "tuning",
    [
        {"block_c": 64, "block_t": 64, "num_warps": 4},
        {"block_c": 16, "block_t": 16, "num_warps": 1},
        {"block_c": 128, "block_t": 128, "num_warps": 8},
    ],
)
def test_causal_conv1d_fwd_extreme_tuning(load_kernel, tuning):
    mod = load_kernel("triton/conv/causal_conv1d_fwd.py")
    inputs = mod.make_inputs({"dim": 40, "tokens": 37}, torch.float32)
    _check(mod.causal_conv1d_fwd(**inputs, **tuning), mod.reference(**inputs), torch.float32)


def test_causal_conv1d_fwd_without_state_bias_activation(load_kernel):
    mod = load_kernel("triton/conv/causal_conv1d_fwd.py")
    inputs = mod.make_inputs({"dim": 8, "tokens": 10}, torch.float32)
    inputs.update(bias=None, initial_state=None, activation=None)
    inputs["x"] = inputs["x"].T.contiguous().T  # time-major storage: strides (1, dim)
    _check(mod.causal_conv1d_fwd(**inputs), mod.reference(**inputs), torch.float32)


def test_causal_conv1d_fwd_rejects_bad_state(load_kernel):
    mod = load_kernel("triton/conv/causal_conv1d_fwd.py")
    inputs = mod.make_inputs({"dim": 8, "tokens": 4}, torch.float32)
    inputs["initial_state"] = torch.zeros(1, 8, 4)
    with pytest.raises(ValueError, match="initial_state"):
        mod.causal_conv1d_fwd(**inputs)
