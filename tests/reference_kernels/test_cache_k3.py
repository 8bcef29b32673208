"""KV-cache write reference kernels (k3 set) against their PyTorch references (interpreter)."""

import pytest
import torch

CASES = [
    {"tokens": 1, "heads": 4, "head_dim": 128},
    {"tokens": 33, "heads": 3, "head_dim": 40},
    {"tokens": 17, "heads": 2, "head_dim": 64, "block_size": 8},
]
DTYPES = [torch.float32, torch.bfloat16]
KERNELS = {
    "reshape_and_cache_rowwise": [{"block_h": 4, "num_warps": 4}, {"block_h": 16, "num_warps": 8}],
    "reshape_and_cache_tiled": [
        {"block_t": 8, "block_c": 512, "num_warps": 4},
        {"block_t": 32, "block_c": 2048, "num_warps": 8},
    ],
}


def _run(load_kernel, name, inputs, **tuning):
    mod = load_kernel(f"triton/cache/{name}.py")
    caches = {n: inputs[n].clone() for n in ("key_cache", "value_cache")}
    ref_k, ref_v = mod.reference(**{**inputs, **caches})  # updates its own copies in place
    out_k, out_v = getattr(mod, name)(**inputs, **tuning)
    # the operator is in place: the returned tensors are the caches passed in
    assert out_k is inputs["key_cache"] and out_v is inputs["value_cache"]
    assert torch.equal(out_k, ref_k) and torch.equal(out_v, ref_v)  # a copy is exact


@pytest.mark.parametrize("shape", CASES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(KERNELS))
def test_cache_kernel_matches_reference(load_kernel, name, shape, dtype):
    mod = load_kernel(f"triton/cache/{name}.py")
    _run(load_kernel, name, mod.make_inputs(shape, dtype))


@pytest.mark.parametrize("which", [0, 1])
@pytest.mark.parametrize("name", list(KERNELS))
def test_cache_kernel_extreme_tuning(load_kernel, name, which):
    mod = load_kernel(f"triton/cache/{name}.py")
    inputs = mod.make_inputs({"tokens": 9, "heads": 5, "head_dim": 24}, torch.float32)
    _run(load_kernel, name, inputs, **KERNELS[name][which])


@pytest.mark.parametrize("name", list(KERNELS))
def test_cache_kernel_strided_key_value(load_kernel, name):
    # key/value as slices of a fused (T, 3, H, D) buffer: token stride 3 * H * D; int32 slots
    mod = load_kernel(f"triton/cache/{name}.py")
    inputs = mod.make_inputs({"tokens": 6, "heads": 2, "head_dim": 16}, torch.float32)
    fused = torch.randn(6, 3, 2, 16)
    inputs.update(key=fused[:, 1], value=fused[:, 2])
    inputs["slot_mapping"] = inputs["slot_mapping"].to(torch.int32)
    _run(load_kernel, name, inputs)


def test_cache_tiled_rejects_strided_cache(load_kernel):
    mod = load_kernel("triton/cache/reshape_and_cache_tiled.py")
    inputs = mod.make_inputs({"tokens": 2, "heads": 2, "head_dim": 8}, torch.float32)
    inputs["key_cache"] = inputs["key_cache"].transpose(2, 3).contiguous().transpose(2, 3)
    with pytest.raises(ValueError, match="contiguous"):
        mod.reshape_and_cache_tiled(**inputs)
