"""RoPE reference kernels (k3 set) against their PyTorch references, in the interpreter."""

import pytest
import torch

DTYPES = [torch.float32, torch.bfloat16]
TOL = {torch.float32: (1e-4, 1e-4), torch.float16: (1e-3, 1e-3), torch.bfloat16: (1e-2, 1e-2)}


def _check(outs, refs, dtype):
    atol, rtol = TOL[dtype]
    for o, r in zip(outs, refs, strict=True):
        assert o.shape == r.shape and o.dtype == r.dtype
        torch.testing.assert_close(o.float(), r.float(), atol=atol, rtol=rtol)
        assert (o.float() - r.float()).norm() <= rtol * r.float().norm() + atol


QKV_CASES = [
    {"tokens": 1, "heads": 4, "kv_heads": 2, "head_dim": 128},
    {"tokens": 33, "heads": 3, "kv_heads": 1, "head_dim": 32, "pos_int64": True},
    {"tokens": 5, "heads": 2, "kv_heads": 2, "head_dim": 6},
]


@pytest.mark.parametrize("shape", QKV_CASES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fused_qkv_rope_neox_matches_reference(load_kernel, shape, dtype):
    mod = load_kernel("triton/rope/fused_qkv_rope_neox.py")
    inputs = mod.make_inputs(shape, dtype)
    _check(mod.fused_qkv_rope_neox(**inputs), mod.reference(**inputs), dtype)


@pytest.mark.parametrize(
    "tuning", [{"block_h": 4, "num_warps": 4}, {"block_h": 16, "num_warps": 8}]
)
def test_fused_qkv_rope_neox_extreme_tuning(load_kernel, tuning):
    mod = load_kernel("triton/rope/fused_qkv_rope_neox.py")
    inputs = mod.make_inputs(
        {"tokens": 3, "heads": 5, "kv_heads": 2, "head_dim": 16}, torch.float32
    )
    _check(mod.fused_qkv_rope_neox(**inputs, **tuning), mod.reference(**inputs), torch.float32)


def test_fused_qkv_rope_neox_position_zero_is_a_split(load_kernel):
    # at position 0 the rotation is the identity: the outputs are an exact split of qkv
    mod = load_kernel("triton/rope/fused_qkv_rope_neox.py")
    inputs = mod.make_inputs({"tokens": 2, "heads": 2, "kv_heads": 1, "head_dim": 8}, torch.float32)
    inputs["positions"].zero_()
    q, k, v = mod.fused_qkv_rope_neox(**inputs)
    assert torch.equal(torch.cat([q, k, v], dim=1).flatten(1), inputs["qkv"])


CACHE_CASES = [
    {"tokens": 1, "heads": 4, "kv_heads": 2, "head_dim": 128},
    {"tokens": 9, "heads": 3, "kv_heads": 1, "head_dim": 80, "rot_dim": 32},  # partial rotary
    {"tokens": 4, "heads": 2, "kv_heads": 1, "head_dim": 24, "rot_dim": 12, "is_neox": False},
]


@pytest.mark.parametrize("shape", CACHE_CASES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rope_cos_sin_cache_matches_reference(load_kernel, shape, dtype):
    mod = load_kernel("triton/rope/rope_cos_sin_cache.py")
    inputs = mod.make_inputs(shape, dtype)
    _check(mod.rope_cos_sin_cache(**inputs), mod.reference(**inputs), dtype)


@pytest.mark.parametrize("num_warps", [1, 4])
def test_rope_cos_sin_cache_extreme_tuning_strided_q(load_kernel, num_warps):
    # q as a strided view (a slice of a wider buffer) must work without a copy
    mod = load_kernel("triton/rope/rope_cos_sin_cache.py")
    inputs = mod.make_inputs(
        {"tokens": 3, "heads": 2, "kv_heads": 1, "head_dim": 16}, torch.float32
    )
    inputs["q"] = torch.randn(3, 4, 16)[:, 1:3]
    out = mod.rope_cos_sin_cache(**inputs, num_warps=num_warps)
    _check(out, mod.reference(**inputs), torch.float32)
