"""RoPE and GEMM reference kernels (k6 set) against their PyTorch references, in the interpreter."""

import pytest
import torch

from tests.reference_kernels.conftest import ON_GPU, TF32_TOL

DTYPES = [torch.float32, torch.bfloat16]
TOL = {torch.float32: (1e-4, 1e-4), torch.float16: (1e-3, 1e-3), torch.bfloat16: (1e-2, 1e-2)}
if ON_GPU:  # fp32 tl.dot runs on TF32 tensor cores there
    TOL[torch.float32] = TF32_TOL


def _check(outs, refs, dtype):
    atol, rtol = TOL[dtype]
    for o, r in zip(outs, refs, strict=True):
        assert o.shape == r.shape and o.dtype == r.dtype
        torch.testing.assert_close(o.float(), r.float(), atol=atol, rtol=rtol)
        assert (o.float() - r.float()).norm() <= rtol * r.float().norm() + atol


# ------------------------------------------------------------------ fused_qkv_rope
QKV = [
    "triton/rope/fused_qkv_rope_token_all_heads.py",
    "triton/rope/fused_qkv_rope_head_grid.py",
    "triton/rope/fused_qkv_rope_on_the_fly.py",
]
QKV_CASES = [
    {"tokens": 1, "heads": 4, "kv_heads": 2, "head_dim": 64},
    {"tokens": 19, "heads": 3, "kv_heads": 1, "head_dim": 40, "rope_dim": 24, "bias": True},
    {"tokens": 5, "heads": 2, "kv_heads": 2, "head_dim": 6, "pos_int64": True},
]


def _launcher(mod):
    return getattr(mod, mod.__name__.removeprefix("refkernel_"))


@pytest.mark.parametrize("path", QKV)
@pytest.mark.parametrize("shape", QKV_CASES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fused_qkv_rope_matches_reference(load_kernel, path, shape, dtype):
    mod = load_kernel(path)
    inputs = mod.make_inputs(shape, dtype)
    if shape.get("pos_int64"):
        inputs["positions"] = inputs["positions"].long()
    _check(_launcher(mod)(**inputs), mod.reference(**inputs), dtype)


@pytest.mark.parametrize(
    "path, tuning",
    [
        (QKV[0], {"num_warps": 1}),
        (QKV[0], {"num_warps": 8}),
        (QKV[1], {"block_t": 4, "heads_per_program": 1, "num_warps": 1}),
        (QKV[1], {"block_t": 64, "heads_per_program": 8, "num_warps": 8}),
        (QKV[2], {"block": 256, "num_warps": 1}),
        (QKV[2], {"block": 4096, "num_warps": 8}),
    ],
)
def test_fused_qkv_rope_extreme_tuning(load_kernel, path, tuning):
    mod = load_kernel(path)
    shape = {"tokens": 9, "heads": 5, "kv_heads": 1, "head_dim": 16, "rope_dim": 8}
    inputs = mod.make_inputs(shape, torch.float32)
    _check(_launcher(mod)(**inputs, **tuning), mod.reference(**inputs), torch.float32)


@pytest.mark.parametrize("path", QKV)
def test_fused_qkv_rope_position_zero_is_a_split(load_kernel, path):
    # at position 0 the rotation is the identity: the outputs are an exact split of qkv
    mod = load_kernel(path)
    inputs = mod.make_inputs({"tokens": 3, "heads": 2, "kv_heads": 1, "head_dim": 8}, torch.float32)
    inputs["positions"].zero_()
    q, k, v = _launcher(mod)(**inputs)
    assert torch.equal(torch.cat([q, k, v], dim=1).flatten(1), inputs["qkv"])


@pytest.mark.parametrize("path", QKV)
def test_fused_qkv_rope_validates_inputs(load_kernel, path):
    mod = load_kernel(path)
    inputs = mod.make_inputs({"tokens": 2, "heads": 2, "kv_heads": 1, "head_dim": 8}, torch.float32)
    launch = _launcher(mod)
    with pytest.raises(ValueError, match="qkv must be"):
        launch(**{**inputs, "num_heads": 3})
    with pytest.raises(ValueError, match="rope_dim"):
        launch(**{**inputs, "rope_dim": 5})
    with pytest.raises(ValueError, match="positions"):
        launch(**{**inputs, "positions": inputs["positions"].float()})
    with pytest.raises(ValueError, match="qkv_bias"):
        launch(**{**inputs, "qkv_bias": torch.zeros(3)})


# ------------------------------------------------------------------ mrope
MROPE = [
    "triton/rope/mrope_token_head_grid.py",
    "triton/rope/mrope_token_tile_2d.py",
    "triton/rope/mrope_cache_gather.py",
]
MROPE_CASES = [
    {"tokens": 1, "q_heads": 4, "kv_heads": 1, "head_size": 64, "rotary_dim": 64},
    {
        "tokens": 7,
        "q_heads": 3,
        "kv_heads": 3,
        "head_size": 40,
        "rotary_dim": 32,
        "sections": (8, 4, 4),
    },
    {
        "tokens": 5,
        "q_heads": 2,
        "kv_heads": 1,
        "head_size": 12,
        "rotary_dim": 12,
        "sections": (1, 0, 5),
    },
]


@pytest.mark.parametrize("path", MROPE)
@pytest.mark.parametrize("shape", MROPE_CASES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_mrope_matches_reference(load_kernel, path, shape, dtype):
    mod = load_kernel(path)
    inputs = mod.make_inputs(shape, dtype)
    _check(_launcher(mod)(**inputs), mod.reference(**inputs), dtype)


@pytest.mark.parametrize(
    "path, tuning",
    [
        (MROPE[0], {"block_h": 1, "num_warps": 1}),
        (MROPE[0], {"block_h": 16, "num_warps": 8}),
        (MROPE[1], {"block_t": 2, "num_warps": 1}),
        (MROPE[1], {"block_t": 64, "num_warps": 8}),
        (MROPE[2], {"block_rows": 1, "num_warps": 1}),
        (MROPE[2], {"block_rows": 64, "num_warps": 8}),
    ],
)
def test_mrope_extreme_tuning(load_kernel, path, tuning):
    mod = load_kernel(path)
    shape = {
        "tokens": 6,
        "q_heads": 5,
        "kv_heads": 2,
        "head_size": 24,
        "rotary_dim": 16,
        "sections": (2, 3, 3),
    }
    inputs = mod.make_inputs(shape, torch.float32)
    _check(_launcher(mod)(**inputs, **tuning), mod.reference(**inputs), torch.float32)


@pytest.mark.parametrize("path", MROPE)
def test_mrope_sections_select_the_channels(load_kernel, path):
    # the same tables with other sections must give another rotation (the channel choice matters)
    mod = load_kernel(path)
    shape = {"tokens": 3, "q_heads": 2, "kv_heads": 1, "head_size": 16, "rotary_dim": 16}
    inputs = mod.make_inputs({**shape, "sections": (8, 0, 0)}, torch.float32)
    t_only, _ = _launcher(mod)(**inputs)
    w_only, _ = _launcher(mod)(**{**inputs, "section_t": 0, "section_w": 8})
    assert not torch.allclose(t_only, w_only, atol=1e-3)
    _check([w_only], mod.reference(**{**inputs, "section_t": 0, "section_w": 8})[:1], torch.float32)


@pytest.mark.parametrize("path", MROPE)
def test_mrope_validates_inputs(load_kernel, path):
    mod = load_kernel(path)
    shape = {"tokens": 2, "q_heads": 2, "kv_heads": 1, "head_size": 16, "rotary_dim": 16}
    inputs = mod.make_inputs({**shape, "sections": (4, 2, 2)}, torch.float32)
    launch = _launcher(mod)
    with pytest.raises(ValueError, match="sections"):
        launch(**{**inputs, "section_w": 3})
    with pytest.raises(ValueError, match="head_size"):
        launch(**{**inputs, "head_size": 5})
    with pytest.raises(ValueError, match="cos and sin"):
        launch(**{**inputs, "cos": inputs["cos"][:2]})
    with pytest.raises(ValueError, match="rotary_dim"):
        launch(**{**inputs, "head_size": 8, "q": inputs["q"], "k": inputs["k"]})


# ------------------------------------------------------------------ linear_sigmoid_mul
LSM = [
    "triton/gemm/linear_sigmoid_mul_gemv_decode.py",
    "triton/gemm/linear_sigmoid_mul_split_k.py",
    "triton/gemm/linear_sigmoid_mul_persistent.py",
]
LSM_CASES = [
    {"token_count": 1, "hidden_size": 160, "out_features": 72},
    {"token_count": 7, "hidden_size": 96, "out_features": 200},
    {"token_count": 19, "hidden_size": 33, "out_features": 20},
]


@pytest.mark.parametrize("path", LSM)
@pytest.mark.parametrize("shape", LSM_CASES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_linear_sigmoid_mul_matches_reference(load_kernel, path, shape, dtype):
    mod = load_kernel(path)
    inputs = mod.make_inputs(shape, dtype)
    # the output is bf16 whatever the inputs: compare at bf16's tolerance
    _check([_launcher(mod)(**inputs)], [mod.reference(**inputs)], torch.bfloat16)


@pytest.mark.parametrize(
    "path, tuning",
    [
        (LSM[0], {"block_n": 16, "block_k": 32, "block_m": 1, "num_warps": 1}),
        (LSM[0], {"block_n": 128, "block_k": 128, "block_m": 4, "num_warps": 8}),
        (LSM[1], {"split_k": 1, "block_m": 16, "block_n": 32, "block_k": 32, "num_warps": 2}),
        (LSM[1], {"split_k": 16, "block_m": 64, "block_n": 128, "block_k": 16, "num_warps": 8}),
        # 1 program per (CPU: 4) SMs and 5 tiles: the persistent loop takes two turns
        (LSM[2], {"block_m": 16, "block_n": 32, "block_k": 32, "group_m": 1, "programs_per_sm": 1}),
        (LSM[2], {"block_m": 128, "block_n": 128, "block_k": 128, "group_m": 16, "num_warps": 8}),
    ],
)
def test_linear_sigmoid_mul_extreme_tuning(load_kernel, path, tuning):
    mod = load_kernel(path)
    shape = {"token_count": 5, "hidden_size": 200, "out_features": 140}
    inputs = mod.make_inputs(shape, torch.float32)
    inputs["hidden_states"] = inputs["hidden_states"].t().contiguous().t()  # strided x
    _check([_launcher(mod)(**inputs, **tuning)], [mod.reference(**inputs)], torch.bfloat16)


@pytest.mark.parametrize("path", LSM)
def test_linear_sigmoid_mul_validates_inputs(load_kernel, path):
    mod = load_kernel(path)
    shape = {"token_count": 2, "hidden_size": 16, "out_features": 8}
    inputs = mod.make_inputs(shape, torch.float32)
    launch = _launcher(mod)
    with pytest.raises(ValueError, match="weight"):
        launch(**{**inputs, "weight": inputs["weight"][:, :8]})
    with pytest.raises(ValueError, match="post_mul_mat"):
        launch(**{**inputs, "post_mul_mat": inputs["post_mul_mat"][:1]})
    with pytest.raises(ValueError, match="one dtype"):
        launch(**{**inputs, "bias": inputs["bias"].half()})
    with pytest.raises(ValueError, match="block_n"):
        launch(**inputs, block_n=24)


# ------------------------------------------------------------------ block_scaled_mm
BSMM = "triton/gemm/block_scaled_mm_fp8_decode_small_m.py"
FP8 = torch.float8_e4m3fn
BSMM_CASES = [
    {"m": 5, "n": 96, "k": 192, "group_n": 32, "group_k": 64},
    {"m": 1, "n": 40, "k": 130, "group_n": 16, "group_k": 64},  # ragged K and N groups
    {"m": 17, "n": 20, "k": 64},  # two row blocks; one short 128-group
]


def _check_fp32(out, ref):
    assert out.shape == ref.shape and out.dtype == torch.float32
    torch.testing.assert_close(out, ref, atol=1e-3, rtol=1e-4)
    assert (out - ref).norm() <= 1e-5 * ref.norm()


@pytest.mark.parametrize("shape", BSMM_CASES, ids=str)
def test_block_scaled_mm_small_m_matches_reference(load_kernel, shape):
    mod = load_kernel(BSMM)
    inputs = mod.make_inputs(shape, FP8)
    _check_fp32(mod.block_scaled_mm_fp8_decode_small_m(**inputs), mod.reference(**inputs))


@pytest.mark.parametrize(
    "tuning",
    [
        {"block_n": 16, "block_k": 32, "block_m": 1, "num_warps": 1},
        {"block_n": 64, "block_k": 128, "block_m": 16, "num_warps": 8},
    ],
)
def test_block_scaled_mm_small_m_extreme_tuning(load_kernel, tuning):
    mod = load_kernel(BSMM)
    inputs = mod.make_inputs({"m": 3, "n": 50, "k": 100, "group_n": 32, "group_k": 48}, FP8)
    inputs["a"] = inputs["a"].t().contiguous().t()  # a strided: the launcher takes any strides
    out = mod.block_scaled_mm_fp8_decode_small_m(**inputs, **tuning)
    _check_fp32(out, mod.reference(**inputs))


def test_block_scaled_mm_small_m_validates_inputs(load_kernel):
    mod = load_kernel(BSMM)
    inputs = mod.make_inputs({"m": 2, "n": 8, "k": 32, "group_n": 4, "group_k": 16}, FP8)
    launch = mod.block_scaled_mm_fp8_decode_small_m
    with pytest.raises(ValueError, match="float8_e4m3fn"):
        launch(**{**inputs, "a": inputs["a"].float()})
    with pytest.raises(ValueError, match="a_scales"):
        launch(**{**inputs, "group_k": 8})
    with pytest.raises(ValueError, match="need a"):
        launch(**{**inputs, "b": inputs["b"][:, :16]})
    with pytest.raises(ValueError, match="block_k"):
        launch(**inputs, block_k=48)


# ------------------------------------------------------------------ topk_filter
TOPK = "triton/sampling/topk_filter_radix.py"
TOPK_CASES = [
    {"rows": 3, "vocab": 1001, "top_k": 50},
    {"rows": 2, "vocab": 700, "top_k": 7, "ties": True},  # the k-th value is tied: all kept
    {"rows": 2, "vocab": 300, "top_k": 1},
]


def _check_topk(out, ref):
    # exact: kept entries bit-identical, -inf at exactly the same places
    assert out.shape == ref.shape and out.dtype == torch.float32
    assert torch.equal(out, ref)
    assert torch.isfinite(out).sum() == torch.isfinite(ref).sum() > 0


@pytest.mark.parametrize("shape", TOPK_CASES, ids=str)
def test_topk_filter_radix_matches_reference(load_kernel, shape):
    mod = load_kernel(TOPK)
    inputs = mod.make_inputs(shape, torch.float32)
    out = mod.topk_filter_radix(**inputs)
    _check_topk(out, mod.reference(**inputs))
    if not shape.get("ties"):
        assert (torch.isfinite(out).sum(dim=1) == shape["top_k"]).all()


def test_topk_filter_radix_keeps_short_rows_and_signed_zeros(load_kernel):
    mod = load_kernel(TOPK)
    logits = torch.randn(2, 40)
    out = mod.topk_filter_radix(logits, top_k=40)  # k >= V: rows copied whole
    assert torch.equal(out, logits)
    # -0.0 and 0.0 compare equal: a k-th value of 0.0 keeps both, as the reference does
    logits = torch.tensor([[1.0, 0.0, -0.0, -1.0, 2.0] * 60])
    _check_topk(mod.topk_filter_radix(logits, top_k=130), mod.reference(logits, top_k=130))


@pytest.mark.parametrize("tuning", [{"block_v": 256, "num_warps": 1}, {"block_v": 16384}])
def test_topk_filter_radix_extreme_tuning(load_kernel, tuning):
    mod = load_kernel(TOPK)
    inputs = mod.make_inputs({"rows": 2, "vocab": 1500, "top_k": 33}, torch.float32)
    _check_topk(mod.topk_filter_radix(**inputs, **tuning), mod.reference(**inputs))


def test_topk_filter_radix_validates_inputs(load_kernel):
    mod = load_kernel(TOPK)
    logits = torch.randn(2, 300)
    with pytest.raises(ValueError, match="fp32"):
        mod.topk_filter_radix(logits.double())
    with pytest.raises(ValueError, match="contiguous"):
        mod.topk_filter_radix(logits.t())
    with pytest.raises(ValueError, match="top_k"):
        mod.topk_filter_radix(logits, top_k=0)
    with pytest.raises(ValueError, match="block_v"):
        mod.topk_filter_radix(logits, block_v=100)


# ------------------------------------------------------------------ mla_decode_attention
MLA = "triton/attention/mla_decode_attention_head_grouped.py"
MLA_CASES = [
    {"seq_lens": [37, 5, 20], "num_heads": 5, "kv_lora_rank": 48, "rope_dim": 16},
    {"seq_lens": [3], "num_heads": 20, "kv_lora_rank": 40, "rope_dim": 8},  # 2 head groups
    {"seq_lens": [0, 9], "num_heads": 2, "kv_lora_rank": 16, "rope_dim": 16},  # empty sequence
]


@pytest.mark.parametrize("shape", MLA_CASES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_mla_head_grouped_matches_reference(load_kernel, shape, dtype):
    mod = load_kernel(MLA)
    inputs = mod.make_inputs(shape, dtype)
    out = mod.mla_decode_attention_head_grouped(**inputs)
    _check([out], [mod.reference(**inputs)], dtype)


@pytest.mark.parametrize(
    "tuning",
    [
        {"block_h": 16, "block_dv": 16, "block_n": 16, "block_dk": 16, "num_warps": 2},
        {"block_h": 64, "block_dv": 512, "block_n": 64, "block_dk": 128, "num_warps": 8},
    ],
)
def test_mla_head_grouped_extreme_tuning(load_kernel, tuning):
    mod = load_kernel(MLA)
    shape = {"seq_lens": [19, 2], "num_heads": 3, "kv_lora_rank": 40, "rope_dim": 8}
    inputs = mod.make_inputs(shape, torch.float32)
    out = mod.mla_decode_attention_head_grouped(**inputs, softmax_scale=0.3, **tuning)
    _check([out], [mod.reference(**inputs, softmax_scale=0.3)], torch.float32)


def test_mla_head_grouped_validates_inputs(load_kernel):
    mod = load_kernel(MLA)
    shape = {"seq_lens": [2], "num_heads": 2, "kv_lora_rank": 16, "rope_dim": 16}
    inputs = mod.make_inputs(shape, torch.float32)
    launch = mod.mla_decode_attention_head_grouped
    with pytest.raises(ValueError, match="kv_lora_rank"):
        launch(**{**inputs, "kv_lora_rank": 32})
    with pytest.raises(ValueError, match="seq_lens"):
        launch(**{**inputs, "seq_lens": inputs["seq_lens"].long()})
    with pytest.raises(ValueError, match="dtypes differ"):
        launch(**{**inputs, "kv_cache": inputs["kv_cache"].half()})
    with pytest.raises(ValueError, match="block_dv"):
        launch(**inputs, block_dv=8)


# ------------------------------------------------------------------ unified_attention
UA = "triton/attention/unified_attention_split_kv.py"
UA_CASES = [
    {
        "seq_lens": [1, 1, 1],
        "context_lens": [40, 7, 0],
        "num_heads_q": 4,
        "num_heads_kv": 2,
        "head_dim": 32,
    },  # decode over histories: several splits see keys
    {"seq_lens": [5, 19], "num_heads_q": 3, "num_heads_kv": 1, "head_dim": 24},  # causal prefill
    {
        "seq_lens": [3],
        "context_lens": [70],
        "num_heads_q": 2,
        "num_heads_kv": 2,
        "head_dim": 16,
        "page_size": 8,
    },
]


@pytest.mark.parametrize("shape", UA_CASES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_unified_attention_split_kv_matches_reference(load_kernel, shape, dtype):
    mod = load_kernel(UA)
    inputs = mod.make_inputs(shape, dtype)
    _check([mod.unified_attention_split_kv(**inputs)], [mod.reference(**inputs)], dtype)


@pytest.mark.parametrize(
    "tuning",
    [
        {"num_splits": 1, "block_m": 16, "block_n": 16, "num_warps": 2},
        {"num_splits": 16, "block_m": 64, "block_n": 64, "num_warps": 8},
        {"num_splits": 3, "block_m": 16, "block_n": 16},  # a non power of two
    ],
)
def test_unified_attention_split_kv_extreme_tuning(load_kernel, tuning):
    mod = load_kernel(UA)
    shape = {
        "seq_lens": [2, 6],
        "context_lens": [50, 13],
        "num_heads_q": 2,
        "num_heads_kv": 1,
        "head_dim": 16,
    }
    inputs = mod.make_inputs(shape, torch.float32)
    out = mod.unified_attention_split_kv(**inputs, max_seqlen_q=6, **tuning)
    _check([out], [mod.reference(**inputs)], torch.float32)


def test_unified_attention_split_kv_validates_inputs(load_kernel):
    mod = load_kernel(UA)
    shape = {"seq_lens": [2], "num_heads_q": 2, "num_heads_kv": 2, "head_dim": 16}
    inputs = mod.make_inputs(shape, torch.float32)
    launch = mod.unified_attention_split_kv
    with pytest.raises(ValueError, match="num_splits"):
        launch(**inputs, num_splits=0)
    with pytest.raises(ValueError, match="block_n"):
        launch(**inputs, block_n=8)
    with pytest.raises(ValueError, match="int32"):
        launch(**{**inputs, "seqused_k": inputs["seqused_k"].long()})
    with pytest.raises(ValueError, match="HQ % HKV"):
        launch(**{**inputs, "q": torch.randn(2, 3, 16)})
