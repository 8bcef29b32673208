"""Norm reference kernels (k3 set) against their own PyTorch references, in the interpreter."""

import pytest
import torch

CASES = [{"rows": 3, "hidden": 1000}, {"rows": 33, "hidden": 64}, {"rows": 1, "hidden": 129}]
DTYPES = [torch.float32, torch.bfloat16]
TOL = {torch.float32: (1e-4, 1e-4), torch.float16: (1e-3, 1e-3), torch.bfloat16: (1e-2, 1e-2)}

# (file, launcher, tuning overrides for the extreme-values test: first and last of each list)
KERNELS = {
    "rms_norm_rowwise": [{"num_warps": 4}, {"num_warps": 16}],
    "rms_norm_multirow": [{"block_m": 8, "num_warps": 4}, {"block_m": 32, "num_warps": 8}],
    "rms_norm_looped": [{"block_n": 1024, "num_warps": 4}, {"block_n": 4096, "num_warps": 8}],
    "fused_add_rms_norm_rowwise": [{"num_warps": 4}, {"num_warps": 16}],
    "layer_norm_rowwise": [{"num_warps": 4}, {"num_warps": 16}],
    "l2_norm_rowwise": [
        {"programs_per_sm": 4, "num_warps": 4},
        {"programs_per_sm": 8, "num_warps": 8},
    ],
    "gated_rms_norm": [{"block_m": 16, "num_warps": 4}, {"block_m": 64, "num_warps": 8}],
}


def _check(out, ref, dtype, tol=None):
    outs = out if isinstance(out, tuple) else (out,)
    refs = ref if isinstance(ref, tuple) else (ref,)
    atol, rtol = tol or TOL[dtype]
    for o, r in zip(outs, refs, strict=True):
        assert o.dtype == r.dtype and o.shape == r.shape
        torch.testing.assert_close(o.float(), r.float(), atol=atol, rtol=rtol)
        # a whole-output check so a zero output cannot pass
        assert (o.float() - r.float()).norm() <= rtol * r.float().norm() + atol


def _run(load_kernel, name, shape, dtype, **tuning):
    mod = load_kernel(f"triton/norm/{name}.py")
    inputs = mod.make_inputs(shape, dtype)
    out, ref = getattr(mod, name)(**inputs, **tuning), mod.reference(**inputs)
    # fused add rounds twice (h, then y); the interpreter truncates both casts: two bf16 ulps
    tol = (2e-2, 2e-2) if name == "fused_add_rms_norm_rowwise" and dtype == torch.bfloat16 else None
    _check(out, ref, dtype, tol)


@pytest.mark.parametrize("shape", CASES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(KERNELS))
def test_norm_kernel_matches_reference(load_kernel, name, shape, dtype):
    _run(load_kernel, name, shape, dtype)


@pytest.mark.parametrize("which", [0, 1])
@pytest.mark.parametrize("name", list(KERNELS))
def test_norm_kernel_extreme_tuning(load_kernel, name, which):
    _run(load_kernel, name, {"rows": 5, "hidden": 300}, torch.float32, **KERNELS[name][which])


@pytest.mark.parametrize(("before", "activation"), [(False, "sigmoid"), (False, "silu"),
                                                    (True, "sigmoid")])  # fmt: skip
def test_gated_rms_norm_gate_options(load_kernel, before, activation):
    mod = load_kernel("triton/norm/gated_rms_norm.py")
    inputs = mod.make_inputs({"rows": 5, "hidden": 96}, torch.bfloat16)
    opts = {"norm_before_gate": before, "activation": activation}
    out = mod.gated_rms_norm(**inputs, **opts)
    _check(out, mod.reference(**inputs, **opts), torch.bfloat16)


def test_rms_norm_looped_multi_chunk(load_kernel):
    # a row spanning several chunks plus a ragged tail exercises both loops
    _run(load_kernel, "rms_norm_looped", {"rows": 2, "hidden": 1000}, torch.bfloat16, block_n=256)


def test_layer_norm_without_bias(load_kernel):
    mod = load_kernel("triton/norm/layer_norm_rowwise.py")
    inputs = mod.make_inputs({"rows": 4, "hidden": 100}, torch.float32)
    inputs["bias"] = None
    _check(mod.layer_norm_rowwise(**inputs), mod.reference(**inputs), torch.float32)


def test_rms_norm_rowwise_keeps_leading_dims(load_kernel):
    mod = load_kernel("triton/norm/rms_norm_rowwise.py")
    x = torch.randn(2, 3, 40)
    w = torch.ones(40)
    out = mod.rms_norm_rowwise(x, w)
    assert out.shape == (2, 3, 40)
    _check(out, mod.reference(x, w), torch.float32)


def test_rms_norm_rowwise_rejects_bad_weight(load_kernel):
    mod = load_kernel("triton/norm/rms_norm_rowwise.py")
    with pytest.raises(ValueError, match="weight"):
        mod.rms_norm_rowwise(torch.randn(2, 8), torch.ones(7))
