"""SiLU-and-mul reference kernels (k3 set) against their PyTorch references, in the interpreter."""

import pytest
import torch

CASES = [{"rows": 3, "d": 1000}, {"rows": 33, "d": 64}, {"rows": 1, "d": 129}]
DTYPES = [torch.float32, torch.bfloat16]
# bf16: the kernel rounds twice (SiLU, then the product) and the interpreter truncates both casts,
# so an output can sit two bf16 ulps from the reference
TOL = {torch.float32: (1e-4, 1e-4), torch.float16: (1e-3, 1e-3), torch.bfloat16: (2e-2, 2e-2)}
KERNELS = {
    "silu_and_mul_rowwise": [{"block_n": 1024, "num_warps": 4}, {"block_n": 4096, "num_warps": 8}],
    "silu_and_mul_flat": [{"block": 1024, "num_warps": 4}, {"block": 4096, "num_warps": 8}],
}


def _check(out, ref, dtype):
    assert out.shape == ref.shape and out.dtype == ref.dtype
    atol, rtol = TOL[dtype]
    torch.testing.assert_close(out.float(), ref.float(), atol=atol, rtol=rtol)
    assert (out.float() - ref.float()).norm() <= rtol * ref.float().norm() + atol


@pytest.mark.parametrize("shape", CASES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(KERNELS))
def test_silu_and_mul_matches_reference(load_kernel, name, shape, dtype):
    mod = load_kernel(f"triton/activation/{name}.py")
    inputs = mod.make_inputs(shape, dtype)
    _check(getattr(mod, name)(**inputs), mod.reference(**inputs), dtype)


@pytest.mark.parametrize("which", [0, 1])
@pytest.mark.parametrize("name", list(KERNELS))
def test_silu_and_mul_extreme_tuning(load_kernel, name, which):
    mod = load_kernel(f"triton/activation/{name}.py")
    inputs = mod.make_inputs({"rows": 5, "d": 300}, torch.float32)
    _check(
        getattr(mod, name)(**inputs, **KERNELS[name][which]), mod.reference(**inputs), torch.float32
    )


@pytest.mark.parametrize("name", list(KERNELS))
def test_silu_and_mul_small_chunks_and_leading_dims(load_kernel, name):
    # several chunks per row (rowwise) / chunks straddling rows (flat); 3D input
    mod = load_kernel(f"triton/activation/{name}.py")
    x = torch.randn(2, 3, 2 * 100)
    tuning = {"block_n": 64} if name == "silu_and_mul_rowwise" else {"block": 64}
    out = getattr(mod, name)(x, **tuning)
    assert out.shape == (2, 3, 100)
    _check(out, mod.reference(x), torch.float32)


@pytest.mark.parametrize("name", list(KERNELS))
def test_silu_and_mul_rejects_odd_width(load_kernel, name):
    mod = load_kernel(f"triton/activation/{name}.py")
    with pytest.raises(ValueError, match="even"):
        getattr(mod, name)(torch.randn(2, 7))
