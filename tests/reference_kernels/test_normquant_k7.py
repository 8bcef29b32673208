"""Norm, quantisation and RoPE reference kernels (k7 set) against their PyTorch references."""

import pytest
import torch

from tests.reference_kernels.fp8_checks import check_dequant, check_fp8

TOL = {torch.float32: (1e-4, 1e-4), torch.bfloat16: (2e-2, 2e-2)}
DTYPES = [torch.float32, torch.bfloat16]
ROWS = [{"rows": 5, "hidden": 300}, {"rows": 9, "hidden": 64}]


def _check(out, ref, tol):
    """assert_close every output, plus a whole-output norm check so a zero output fails."""
    outs = out if isinstance(out, tuple) else (out,)
    refs = ref if isinstance(ref, tuple) else (ref,)
    atol, rtol = tol
    for o, r in zip(outs, refs, strict=True):
        assert o.dtype == r.dtype and o.shape == r.shape
        torch.testing.assert_close(o.float(), r.float(), atol=atol, rtol=rtol)
        assert r.float().norm() > 0
        assert (o.float() - r.float()).norm() <= rtol * r.float().norm() + atol


def _run(load_kernel, path, shape, dtype, tol=None, **tuning):
    mod = load_kernel(f"triton/{path}.py")
    name = path.rsplit("/", 1)[1]
    inputs = mod.make_inputs(shape, dtype)
    out = getattr(mod, name)(**inputs, **tuning)
    _check(out, mod.reference(**inputs), tol or TOL[dtype])
    return mod


# ---- norms ---------------------------------------------------------------------------------------

# path -> (tuning at the low end, tuning at the high end)
NORMS = {
    "norm/rms_norm_gemma_one_plus_weight": ({"block_m": 1, "num_warps": 1},
                                            {"block_m": 16, "num_warps": 8}),
    "norm/rms_norm_backward_dx_dw_partials": (
        {"programs_per_sm": 1, "block_c": 16, "num_warps": 1},
        {"programs_per_sm": 8, "block_c": 256, "num_warps": 8},
    ),
    "norm/layer_norm_backward_fused": ({"block_m": 1, "block_c": 16, "num_warps": 1},
                                       {"block_m": 32, "block_c": 256, "num_warps": 8}),
}  # fmt: skip


@pytest.mark.parametrize("shape", ROWS, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("path", list(NORMS))
def test_norm_matches_reference(load_kernel, path, shape, dtype):
    _run(load_kernel, path, shape, dtype)


@pytest.mark.parametrize("which", [0, 1])
@pytest.mark.parametrize("path", list(NORMS))
def test_norm_extreme_tuning(load_kernel, path, which):
    _run(load_kernel, path, {"rows": 7, "hidden": 100}, torch.float32, **NORMS[path][which])


def test_layer_norm_backward_rejects_bad_weight(load_kernel):
    mod = load_kernel("triton/norm/layer_norm_backward_fused.py")
    with pytest.raises(ValueError, match="weight"):
        mod.layer_norm_backward_fused(torch.randn(2, 8), torch.randn(2, 8), torch.ones(7))
    with pytest.raises(ValueError, match="same shape"):
        mod.layer_norm_backward_fused(torch.randn(2, 8), torch.randn(3, 8), torch.ones(8))


def test_norm_launchers_validate(load_kernel):
    gemma = load_kernel("triton/norm/rms_norm_gemma_one_plus_weight.py")
    with pytest.raises(ValueError, match="weight"):
        gemma.rms_norm_gemma_one_plus_weight(torch.randn(2, 8), torch.ones(9))
    with pytest.raises(ValueError, match="block_m"):
        gemma.rms_norm_gemma_one_plus_weight(torch.randn(2, 8), torch.ones(8), block_m=3)
    bwd = load_kernel("triton/norm/rms_norm_backward_dx_dw_partials.py")
    with pytest.raises(ValueError, match="block_c"):
        bwd.rms_norm_backward_dx_dw_partials(torch.randn(2, 8), torch.randn(2, 8), torch.ones(8),
                                             block_c=24)  # fmt: skip


# ---- NCHW norms ----------------------------------------------------------------------------------

PLANES = {
    "norm/batch_norm_inference_folded": ({"block": 128, "num_warps": 1},
                                         {"block": 4096, "num_warps": 8}),
    "norm/instance_norm_nchw_two_pass": ({"block": 128, "num_warps": 1},
                                         {"block": 4096, "num_warps": 8}),
}  # fmt: skip
NCHW = [{"batch": 2, "channels": 3, "height": 7, "width": 45}, {"batch": 1, "channels": 4,
        "height": 5, "width": 5}]  # fmt: skip


@pytest.mark.parametrize("shape", NCHW, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("path", list(PLANES))
def test_nchw_norm_matches_reference(load_kernel, path, shape, dtype):
    _run(load_kernel, path, shape, dtype)


@pytest.mark.parametrize("which", [0, 1])
@pytest.mark.parametrize("path", list(PLANES))
def test_nchw_norm_extreme_tuning(load_kernel, path, which):
    shape = {"batch": 1, "channels": 2, "height": 20, "width": 20}
    _run(load_kernel, path, shape, torch.float32, **PLANES[path][which])


@pytest.mark.parametrize("path", list(PLANES))
def test_nchw_norm_without_affine_and_bad_input(load_kernel, path):
    mod = load_kernel(f"triton/{path}.py")
    name = path.rsplit("/", 1)[1]
    inputs = mod.make_inputs({"batch": 2, "channels": 3, "height": 4, "width": 6}, torch.float32)
    inputs["weight"] = inputs["bias"] = None
    _check(getattr(mod, name)(**inputs), mod.reference(**inputs), TOL[torch.float32])
    inputs["weight"] = torch.ones(4)
    with pytest.raises(ValueError, match="weight"):
        getattr(mod, name)(**inputs)
    inputs["weight"], inputs["x"] = None, torch.randn(3, 4)
    with pytest.raises(ValueError, match=r"\(B, C, H, W\)"):
        getattr(mod, name)(**inputs)


# ---- FP8 128x128 block weights -------------------------------------------------------------------


@pytest.mark.parametrize("sub_m", [32, 8, 128])
def test_fp8_block_quant_weight(load_kernel, sub_m):
    mod = load_kernel("triton/quantization/fp8_block_quant_weight_128x128.py")
    inputs = mod.make_inputs({"n": 150, "k": 140}, torch.bfloat16 if sub_m == 32 else torch.float32)
    q, scale = mod.fp8_block_quant_weight_128x128(**inputs, sub_m=sub_m)
    ref_q, ref_scale = mod.reference(**inputs)
    assert scale.shape == (2, 2) and q.shape == (150, 140)
    torch.testing.assert_close(scale, ref_scale, rtol=1e-6, atol=0)
    skip = check_fp8(q, ref_q)
    full = ref_scale.repeat_interleave(128, 0).repeat_interleave(128, 1)[:150, :140]
    check_dequant(q, full, inputs["weight"], skip)


def test_fp8_block_quant_weight_validates(load_kernel):
    mod = load_kernel("triton/quantization/fp8_block_quant_weight_128x128.py")
    with pytest.raises(ValueError, match="sub_m"):
        mod.fp8_block_quant_weight_128x128(torch.randn(4, 4), sub_m=256)
    with pytest.raises(ValueError, match="2-D float"):
        mod.fp8_block_quant_weight_128x128(torch.randn(4))


@pytest.mark.parametrize("tiles", [(64, 128, 4), (16, 32, 1), (128, 128, 8)], ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_dequant_fp8_block_scaled_weight(load_kernel, dtype, tiles):
    block_n, block_k, warps = tiles
    tuning = {"block_n": block_n, "block_k": block_k, "num_warps": warps}
    _run(load_kernel, "quantization/dequant_fp8_block_scaled_weight", {"n": 140, "k": 200}, dtype,
         (1e-6, 1e-6) if dtype == torch.float32 else (1e-6, 8e-3), **tuning)  # fmt: skip


def test_dequant_fp8_block_scaled_weight_validates(load_kernel):
    mod = load_kernel("triton/quantization/dequant_fp8_block_scaled_weight.py")
    q = torch.zeros(130, 10).to(torch.float8_e4m3fn)
    with pytest.raises(ValueError, match="scale must be fp32"):
        mod.dequant_fp8_block_scaled_weight(q, torch.ones(1, 1))
    with pytest.raises(ValueError, match="block_k"):
        mod.dequant_fp8_block_scaled_weight(q, torch.ones(2, 1), block_k=256)
    with pytest.raises(ValueError, match="out_dtype"):
        mod.dequant_fp8_block_scaled_weight(q, torch.ones(2, 1), "int8")


# ---- MXFP4 ---------------------------------------------------------------------------------------


MXFP4_TUNING = [{}, {"block_m": 1, "block_n": 32, "num_warps": 1},
                {"block_m": 16, "block_n": 512, "num_warps": 8}]  # fmt: skip


@pytest.mark.parametrize("tuning", MXFP4_TUNING, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_mxfp4_quant_block32(load_kernel, dtype, tuning):
    mod = load_kernel("triton/quantization/mxfp4_quant_block32.py")
    x = mod.make_inputs({"rows": 5, "hidden": 224}, dtype)["x"]
    packed, scales = mod.mxfp4_quant_block32(x, **tuning)
    ref_packed, ref_scales = mod.reference(x)
    assert packed.shape == (5, 112) and scales.shape == (5, 7)
    assert torch.equal(scales, ref_scales) and torch.equal(packed, ref_packed)  # exact op
    # ties went to the even code: 0.25 -> 0, 0.75 -> 1.0, 1.25 -> 1.0, 1.75 -> 2, 2.5 -> 2, ...
    deq = mod.dequantize(packed, scales)
    expected = [4.0, 0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, -0.0, -2.0, -4.0, 0.0]
    assert deq[-1, -32:-20].tolist() == expected
    assert deq[0, :32].abs().sum() == 0
    # whole-output check: e2m1 keeps about 1/4 relative precision of each block's values
    assert (deq - x.float()).norm() <= 0.2 * x.float().norm()


def test_mxfp4_quant_block32_validates(load_kernel):
    mod = load_kernel("triton/quantization/mxfp4_quant_block32.py")
    with pytest.raises(ValueError, match="N % 32"):
        mod.mxfp4_quant_block32(torch.randn(2, 48))
    with pytest.raises(ValueError, match="block_n"):
        mod.mxfp4_quant_block32(torch.randn(2, 64), block_n=16)


# ---- per-token asymmetric int8 -------------------------------------------------------------------


INT8_CASES = [(torch.float32, {}), (torch.bfloat16, {"block_n": 16, "num_warps": 1}),
              (torch.float32, {"block_n": 4096, "num_warps": 8}),
              (torch.bfloat16, {"block_n": 64})]  # fmt: skip


@pytest.mark.parametrize("case", INT8_CASES, ids=str)
def test_per_token_quant_int8_asymmetric(load_kernel, case):
    dtype, tuning = case
    mod = load_kernel("triton/quantization/per_token_quant_int8_asymmetric.py")
    x = mod.make_inputs({"rows": 6, "hidden": 200}, dtype)["x"]
    q, scale, azp = mod.per_token_quant_int8_asymmetric(x, **tuning)
    ref_q, ref_scale, ref_azp = mod.reference(x)
    torch.testing.assert_close(scale, ref_scale, rtol=1e-6, atol=0)
    assert torch.equal(azp, ref_azp)
    # exact codes except, rarely, a value within an ulp of a rounding boundary
    diff = (q.int() - ref_q.int()).abs()
    assert diff.max() <= 1 and (diff > 0).float().mean() <= 0.002
    # every row spans the full code range (the constant row: 0 -> -128, 0.75 -> 127)
    assert (q[1:].amin(dim=1) == -128).all() and (q.amax(dim=1) == 127).all()
    deq = (q.float() - azp.float()) * scale
    assert (deq - x.float()).norm() <= 0.01 * x.float().norm()


def test_per_token_quant_int8_asymmetric_validates(load_kernel):
    mod = load_kernel("triton/quantization/per_token_quant_int8_asymmetric.py")
    with pytest.raises(ValueError, match="2-D float"):
        mod.per_token_quant_int8_asymmetric(torch.randn(4))
    with pytest.raises(ValueError, match="block_n"):
        mod.per_token_quant_int8_asymmetric(torch.randn(2, 8), block_n=100)


# ---- RoPE ----------------------------------------------------------------------------------------

ROPE_TOL = {torch.float32: (2e-4, 2e-4), torch.bfloat16: (2e-2, 2e-2)}


def _run_inplace_rope(mod, name, shape, dtype, **tuning):
    inputs = mod.make_inputs(shape, dtype)
    ref = mod.reference(
        **{key: v.clone() if torch.is_tensor(v) else v for key, v in inputs.items()}
    )
    q_in, k_in = inputs["q"], inputs["k"]
    out = getattr(mod, name)(**inputs, **tuning)
    assert out[0] is q_in and out[1] is k_in  # in place
    _check(out, ref, ROPE_TOL[dtype])
    return inputs, out


@pytest.mark.parametrize("shape", [
    {"tokens": 5, "heads": 4, "kv_heads": 2, "head_dim": 64, "rotary_dim": 16},
    {"tokens": 3, "heads": 2, "kv_heads": 1, "head_dim": 80, "rotary_dim": 80},
], ids=str)  # fmt: skip
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rope_partial_rotary_dim(load_kernel, shape, dtype):
    mod = load_kernel("triton/rope/rope_partial_rotary_dim.py")
    inputs = mod.make_inputs(shape, dtype)
    tail = inputs["q"][..., shape["rotary_dim"] :].clone()
    mod.rope_partial_rotary_dim(**inputs)
    assert torch.equal(inputs["q"][..., shape["rotary_dim"] :], tail)  # the tail is untouched
    _run_inplace_rope(mod, "rope_partial_rotary_dim", shape, dtype)


@pytest.mark.parametrize("tuning", [{"block_t": 1, "num_warps": 1},
                                    {"block_t": 64, "num_warps": 8}], ids=str)  # fmt: skip
def test_rope_partial_rotary_dim_extreme_tuning_on_a_fused_view(load_kernel, tuning):
    mod = load_kernel("triton/rope/rope_partial_rotary_dim.py")
    qkv = torch.randn(6, (4 + 2 * 2) * 32)
    q, k = qkv[:, :128].view(6, 4, 32), qkv[:, 128:192].view(6, 2, 32)
    v = qkv[:, 192:].clone()
    pos = torch.arange(6, dtype=torch.int32) * 37
    ref = mod.reference(pos, q.clone(), k.clone(), 24)
    mod.rope_partial_rotary_dim(pos, q, k, 24, **tuning)
    _check((q, k), ref, ROPE_TOL[torch.float32])
    assert torch.equal(qkv[:, 192:], v)


def test_rope_partial_rotary_dim_validates(load_kernel):
    mod = load_kernel("triton/rope/rope_partial_rotary_dim.py")
    pos, q, k = torch.arange(2), torch.randn(2, 2, 8), torch.randn(2, 1, 8)
    with pytest.raises(ValueError, match="rotary_dim"):
        mod.rope_partial_rotary_dim(pos, q, k, 10)
    with pytest.raises(ValueError, match="positions"):
        mod.rope_partial_rotary_dim(pos.float(), q, k, 8)
    with pytest.raises(ValueError, match="share T and D"):
        mod.rope_partial_rotary_dim(pos, q, torch.randn(2, 1, 6), 4)


YARN_SHAPES = [{"tokens": 4, "heads": 3, "kv_heads": 2, "head_dim": 64},
               {"tokens": 2, "heads": 1, "kv_heads": 1, "head_dim": 128}]  # fmt: skip


@pytest.mark.parametrize("shape", YARN_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rope_yarn_scaled_on_the_fly(load_kernel, shape, dtype):
    mod = load_kernel("triton/rope/rope_yarn_scaled_on_the_fly.py")
    inputs = mod.make_inputs(shape, dtype)
    q_in = inputs["q"].clone()
    out = mod.rope_yarn_scaled_on_the_fly(**inputs)
    # angles reach 8192 rad at the high dims: fp32 angle rounding ~5e-4
    _check(out, mod.reference(**inputs), (2e-3, 2e-3) if dtype == torch.float32 else (3e-2, 3e-2))
    assert torch.equal(inputs["q"], q_in)  # out of place
    # YaRN differs from plain RoPE: the ramp interpolates the low frequencies, mscale > 1
    low, high, mscale = mod.yarn_params(shape["head_dim"], 4.0, 4096, 10000.0, 32.0, 1.0)
    assert 0 < low < high < shape["head_dim"] // 2 and mscale > 1.1
    unscaled = mod.reference(**inputs, scaling_factor=1.0)
    assert (out[0].float() - unscaled[0].float()).norm() > 0.1 * unscaled[0].float().norm()


@pytest.mark.parametrize("tuning", [{"block_h": 1, "num_warps": 1},
                                    {"block_h": 16, "num_warps": 8}], ids=str)  # fmt: skip
def test_rope_yarn_extreme_tuning_and_factors(load_kernel, tuning):
    mod = load_kernel("triton/rope/rope_yarn_scaled_on_the_fly.py")
    inputs = mod.make_inputs(
        {"tokens": 3, "heads": 5, "kv_heads": 1, "head_dim": 32}, torch.float32
    )
    for factors in ({}, {"scaling_factor": 40.0, "original_max_position": 2048, "base": 1e6}):
        out = mod.rope_yarn_scaled_on_the_fly(**inputs, **factors, **tuning)
        _check(out, mod.reference(**inputs, **factors), (2e-3, 2e-3))


def test_rope_yarn_validates(load_kernel):
    mod = load_kernel("triton/rope/rope_yarn_scaled_on_the_fly.py")
    pos, q, k = torch.arange(2), torch.randn(2, 2, 8), torch.randn(2, 1, 8)
    with pytest.raises(ValueError, match="scaling_factor"):
        mod.rope_yarn_scaled_on_the_fly(pos, q, k, scaling_factor=0.5)
    with pytest.raises(ValueError, match="block_h"):
        mod.rope_yarn_scaled_on_the_fly(pos, q, k, block_h=3)
    with pytest.raises(ValueError, match="even"):
        mod.rope_yarn_scaled_on_the_fly(pos, torch.randn(2, 2, 7), torch.randn(2, 1, 7))
