"""Second designs that serve the example problems, against their own references (interpreter).

fp8 quantisation held in registers, fused add + RMSNorm looped over chunks, RoPE one program per
token, and the single-rounding option of the SiLU-and-mul kernels.
"""

import pytest
import torch

TOL = {torch.float32: (1e-5, 1e-5), torch.bfloat16: (2e-2, 2e-2)}


def _close(out, ref, dtype):
    atol, rtol = TOL[dtype]
    assert out.dtype == ref.dtype and out.shape == ref.shape
    torch.testing.assert_close(out.float(), ref.float(), atol=atol, rtol=rtol)
    # a whole-output check so a zero output cannot pass
    assert (out.float() - ref.float()).norm() <= rtol * ref.float().norm() + atol


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize(
    "shape", [{"rows": 5, "hidden": 1000}, {"rows": 1, "hidden": 129}], ids=str
)
def test_per_token_quant_fp8_rowwise_matches_the_chunked_kernel(load_kernel, shape, dtype):
    # The interpreter rounds some e4m3 casts wrongly (see test_quantization_k3.py), so compare
    # with the chunked kernel, whose arithmetic is the same: identical bits expected.
    mod = load_kernel("triton/quantization/per_token_quant_fp8_rowwise.py")
    chunked = load_kernel("triton/quantization/per_token_quant_fp8.py")
    inputs = mod.make_inputs(shape, dtype)
    q, scale = mod.per_token_quant_fp8_rowwise(**inputs)
    q_chunked, scale_chunked = chunked.per_token_quant_fp8(**inputs, block_n=256)
    torch.testing.assert_close(scale, mod.reference(**inputs)[1], atol=0, rtol=1e-6)
    assert torch.equal(scale, scale_chunked)
    assert q.dtype == torch.float8_e4m3fn
    assert torch.equal(q.view(torch.uint8), q_chunked.view(torch.uint8))
    # and the values mean something: the dequantised row is x to within fp8 precision
    x = inputs["x"].float()
    assert (q.float() * scale - x).norm() <= 0.15 * x.norm()
    if shape["rows"] > 2:
        assert scale[1].item() == pytest.approx(1e-10) and (q[1].float() == 0).all()


@pytest.mark.parametrize("num_warps", [1, 16])
def test_per_token_quant_fp8_rowwise_tuning_and_limits(load_kernel, num_warps):
    mod = load_kernel("triton/quantization/per_token_quant_fp8_rowwise.py")
    x = torch.randn(3, 300)
    q, scale = mod.per_token_quant_fp8_rowwise(x, num_warps=num_warps)
    assert torch.allclose(scale, mod.reference(x)[1])
    with pytest.raises(ValueError, match="per_token_quant_fp8"):
        mod.per_token_quant_fp8_rowwise(torch.randn(1, 40000))
    with pytest.raises(ValueError, match=r"\(T, N\)"):
        mod.per_token_quant_fp8_rowwise(torch.randn(2, 3, 4))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("block_n", [None, 128])
def test_fused_add_rms_norm_looped_matches_reference(load_kernel, dtype, block_n):
    mod = load_kernel("triton/norm/fused_add_rms_norm_looped.py")
    inputs = mod.make_inputs({"rows": 6, "hidden": 1000}, dtype)  # 1000 = 7 chunks + a tail
    out, res = mod.fused_add_rms_norm_looped(**inputs, block_n=block_n)
    ref_out, ref_res = mod.reference(**inputs)
    _close(res, ref_res, dtype)
    _close(out, ref_out, dtype)


def test_fused_add_rms_norm_looped_keeps_leading_dims_and_checks_shapes(load_kernel):
    mod = load_kernel("triton/norm/fused_add_rms_norm_looped.py")
    x, r, w = torch.randn(2, 3, 40), torch.randn(2, 3, 40), torch.ones(40)
    out, res = mod.fused_add_rms_norm_looped(x, r, w, num_warps=2)
    assert out.shape == res.shape == (2, 3, 40)
    _close(out, mod.reference(x, r, w)[0], torch.float32)
    with pytest.raises(ValueError, match="residual"):
        mod.fused_add_rms_norm_looped(x, r[:1], w)


ROPE_CASES = [
    {"tokens": 5, "heads": 4, "kv_heads": 2, "head_dim": 64},
    {"tokens": 3, "heads": 5, "kv_heads": 1, "head_dim": 80, "rot_dim": 32},
    {"tokens": 2, "heads": 3, "kv_heads": 3, "head_dim": 16, "is_neox": False},
]


@pytest.mark.parametrize("shape", ROPE_CASES, ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_rope_tokenwise_matches_reference(load_kernel, shape, dtype):
    mod = load_kernel("triton/rope/rope_cos_sin_cache_tokenwise.py")
    inputs = mod.make_inputs(shape, dtype)
    out, ref = mod.rope_cos_sin_cache_tokenwise(**inputs), mod.reference(**inputs)
    for o, r in zip(out, ref, strict=True):
        _close(o, r, dtype)


@pytest.mark.parametrize("block_h", [1, 16])
def test_rope_tokenwise_head_tiles(load_kernel, block_h):
    mod = load_kernel("triton/rope/rope_cos_sin_cache_tokenwise.py")
    inputs = mod.make_inputs(ROPE_CASES[1], torch.float32)
    out = mod.rope_cos_sin_cache_tokenwise(**inputs, block_h=block_h, num_warps=1)
    for o, r in zip(out, mod.reference(**inputs), strict=True):
        _close(o, r, torch.float32)


@pytest.mark.parametrize("name", ["silu_and_mul_rowwise", "silu_and_mul_flat"])
def test_silu_and_mul_single_rounding_matches_an_fp32_reference(load_kernel, name):
    mod = load_kernel(f"triton/activation/{name}.py")
    x = torch.randn(8, 2 * 300).to(torch.bfloat16)
    gate, up = x.float().chunk(2, dim=-1)
    fp32_ref = (torch.nn.functional.silu(gate) * up).to(torch.bfloat16)
    single = getattr(mod, name)(x, round_act=False)
    double = getattr(mod, name)(x)
    # one rounding agrees with the fp32 reference at least as well as two, and they differ
    assert (single.float() - fp32_ref.float()).abs().max() <= (
        double.float() - fp32_ref.float()
    ).abs().max()
    assert not torch.equal(single, double)
    _close(single, fp32_ref, torch.bfloat16)
