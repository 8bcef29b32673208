"""Softmax reference kernels against their own PyTorch references, in the interpreter."""

import pytest
import torch

CASES = [{"rows": 3, "cols": 1000}, {"rows": 33, "cols": 64}, {"rows": 1, "cols": 129}]
DTYPES = [torch.float32, torch.bfloat16]
TOL = {torch.float32: (1e-5, 1e-5), torch.float16: (1e-3, 1e-3), torch.bfloat16: (1e-2, 1e-2)}

# launcher -> tuning overrides for the extreme-values test (first and last of each header list)
KERNELS = {
    "softmax_rowwise": [{"num_warps": 4}, {"num_warps": 16}],
    "softmax_online": [{"block_n": 1024, "num_warps": 4}, {"block_n": 4096, "num_warps": 8}],
}


def _check(out, ref, dtype):
    atol, rtol = TOL[dtype]
    assert out.dtype == ref.dtype and out.shape == ref.shape
    torch.testing.assert_close(out.float(), ref.float(), atol=atol, rtol=rtol)
    # a whole-output check so a zero or uniform output cannot pass
    assert (out.float() - ref.float()).norm() <= rtol * ref.float().norm() + atol


def _run(load_kernel, name, shape, dtype, **tuning):
    mod = load_kernel(f"triton/softmax/{name}.py")
    inputs = mod.make_inputs(shape, dtype)
    _check(getattr(mod, name)(**inputs, **tuning), mod.reference(**inputs), dtype)


@pytest.mark.parametrize("shape", CASES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(KERNELS))
def test_softmax_kernel_matches_reference(load_kernel, name, shape, dtype):
    _run(load_kernel, name, shape, dtype)


@pytest.mark.parametrize("which", [0, 1])
@pytest.mark.parametrize("name", list(KERNELS))
def test_softmax_kernel_extreme_tuning(load_kernel, name, which):
    _run(load_kernel, name, {"rows": 5, "cols": 300}, torch.float32, **KERNELS[name][which])


def test_softmax_online_many_chunks_with_a_late_max(load_kernel):
    # the row max sits in the last, ragged chunk: every earlier partial sum must be rescaled
    mod = load_kernel("triton/softmax/softmax_online.py")
    x = torch.randn(2, 1000)
    x[:, 990] = 40.0
    out = mod.softmax_online(x, block_n=128)
    _check(out, mod.reference(x), torch.float32)
    assert torch.allclose(out.sum(-1), torch.ones(2))


@pytest.mark.parametrize("name", list(KERNELS))
def test_softmax_kernel_handles_large_and_masked_logits(load_kernel, name):
    # logits of 1e4 overflow exp() without the max subtraction; -inf entries must give exactly 0
    mod = load_kernel(f"triton/softmax/{name}.py")
    x = torch.randn(4, 77) * 3 + 1e4
    x[:, :5] = float("-inf")
    out = getattr(mod, name)(x)
    _check(out, mod.reference(x), torch.float32)
    assert torch.isfinite(out).all() and (out[:, :5] == 0).all()


@pytest.mark.parametrize("name", list(KERNELS))
def test_softmax_kernel_keeps_leading_dims_and_reads_strided_rows(load_kernel, name):
    mod = load_kernel(f"triton/softmax/{name}.py")
    x = torch.randn(2, 3, 50)
    out = getattr(mod, name)(x)
    assert out.shape == (2, 3, 50)
    _check(out, mod.reference(x), torch.float32)
    wide = torch.randn(6, 80)
    _check(getattr(mod, name)(wide[:, ::2]), mod.reference(wide[:, ::2]), torch.float32)


def test_softmax_rowwise_rejects_rows_too_wide_for_registers(load_kernel):
    mod = load_kernel("triton/softmax/softmax_rowwise.py")
    with pytest.raises(ValueError, match="softmax_online"):
        mod.softmax_rowwise(torch.randn(1, 65537))
    with pytest.raises(ValueError, match="at least one dimension"):
        mod.softmax_rowwise(torch.tensor(1.0))


def test_softmax_online_rejects_a_bad_chunk(load_kernel):
    mod = load_kernel("triton/softmax/softmax_online.py")
    with pytest.raises(ValueError, match="power of two"):
        mod.softmax_online(torch.randn(2, 8), block_n=100)
