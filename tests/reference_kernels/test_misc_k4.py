"""Reference kernels of the k4 set (quantization, rope, cache, conv, moe) in the interpreter.

Each kernel is checked against its own PyTorch ``reference`` on a few small cases (fp32 and bf16
where it takes bf16), at the extreme values of its tuning space, and on input validation. Every
float comparison is elementwise (assert_close) and whole-output (a norm bound), so a zero output
fails; index outputs (sort order, top-k ids, block ids) compare exactly. fp8 outputs use the value
checks of test_quantization_k3 (the interpreter mis-rounds some fp32 -> e4m3 casts).
"""

import pytest
import torch

from tests.reference_kernels.fp8_checks import (
    check_dequant as _check_dequant,
)
from tests.reference_kernels.fp8_checks import (
    check_fp8 as _check_fp8,
)

DTYPES = [torch.float32, torch.bfloat16]
TOL = {torch.float32: (1e-4, 1e-4), torch.bfloat16: (2e-2, 2e-2)}


def _check(out, ref, dtype=torch.float32, tol=None):
    """Assert matching dtype/shape, elementwise closeness and a whole-output relative norm bound."""
    outs = out if isinstance(out, tuple) else (out,)
    refs = ref if isinstance(ref, tuple) else (ref,)
    atol, rtol = tol or TOL[dtype]
    for o, r in zip(outs, refs, strict=True):
        assert o.dtype == r.dtype and o.shape == r.shape
        if not (o.dtype.is_floating_point or o.dtype.is_complex):
            assert torch.equal(o, r)  # indices and int codes: exact
            continue
        torch.testing.assert_close(o.float(), r.float(), atol=atol, rtol=rtol)
        assert r.float().norm() > 0
        assert (o.float() - r.float()).norm() <= rtol * r.float().norm() + atol


def _clone(inputs: dict) -> dict:
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}


def _run(mod, launcher, shape, dtype, **tuning):
    inputs = mod.make_inputs(shape, dtype)
    ref = mod.reference(**_clone(inputs))  # in-place kernels: the reference gets its own copies
    return getattr(mod, launcher)(**inputs, **tuning), ref, inputs


# ------------------------------------------------------------------ quantization
INT8 = {"per_token_quant_int8": {}, "per_token_group_quant_int8": {"group_size": 64}}
INT8_CASES = [{"tokens": 3, "hidden": 512}, {"tokens": 9, "hidden": 128}]


def _check_int8(q, scale, ref_q, ref_scale, x):
    assert q.dtype == torch.int8 and q.shape == ref_q.shape
    torch.testing.assert_close(scale, ref_scale, atol=0, rtol=1e-6)
    # interpreter and PyTorch divide the same way; allow one code for a boundary value anyway
    assert (q.int() - ref_q.int()).abs().max() <= 1 and (q != ref_q).float().mean() < 0.01
    assert q.abs().max() == 127  # each row's / group's absmax maps to 127
    g = x.shape[1] // scale.shape[1]
    deq = (q.float().view(x.shape[0], -1, g) * scale[..., None]).view(x.shape)
    assert (deq - x.float()).norm() <= 0.01 * x.float().norm()  # 1/254 relative per element


@pytest.mark.parametrize("shape", INT8_CASES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(INT8))
def test_int8_quant_matches_reference(load_kernel, name, shape, dtype):
    mod = load_kernel(f"triton/quantization/{name}.py")
    (q, s), (rq, rs), inputs = _run(mod, name, {**shape, **INT8[name]}, dtype)
    _check_int8(q, s, rq, rs, inputs["x"])


@pytest.mark.parametrize(
    ("name", "tuning"),
    [
        ("per_token_quant_int8", {"block_m": 1, "num_warps": 1}),
        ("per_token_quant_int8", {"block_m": 16, "num_warps": 8}),
        ("per_token_group_quant_int8", {"block_g": 4, "num_warps": 1}),
        ("per_token_group_quant_int8", {"block_g": 64, "num_warps": 8}),
    ],
    ids=str,
)
def test_int8_quant_extreme_tuning(load_kernel, name, tuning):
    mod = load_kernel(f"triton/quantization/{name}.py")
    shape = {"tokens": 5, "hidden": 256, "group_size": 128}
    (q, s), (rq, rs), inputs = _run(mod, name, shape, torch.float32, **tuning)
    _check_int8(q, s, rq, rs, inputs["x"])


def test_int8_quant_zero_row_and_validation(load_kernel):
    mod = load_kernel("triton/quantization/per_token_quant_int8.py")
    x = torch.randn(3, 40)
    x[1] = 0.0
    q, s = mod.per_token_quant_int8(x)
    assert (q[1] == 0).all() and torch.isfinite(s).all()
    with pytest.raises(ValueError, match="contiguous last dim"):
        mod.per_token_quant_int8(torch.randn(8, 4).T)
    grouped = load_kernel("triton/quantization/per_token_group_quant_int8.py")
    with pytest.raises(ValueError, match="power of two dividing N"):
        grouped.per_token_group_quant_int8(torch.randn(2, 96), group_size=64)


FP8_CASES = [
    {"tokens": 7, "hidden": 320, "group_size": 64},
    {"tokens": 3, "hidden": 200, "group_size": 128},  # a ragged last group
    {"tokens": 2, "hidden": 250, "group_size": 96},  # a group size that is no power of two
]


def _check_group_fp8(q, scales, ref_q, ref_scales, x, group):
    torch.testing.assert_close(scales, ref_scales, atol=0, rtol=1e-6)
    lost = _check_fp8(q, ref_q)
    col_scale = scales.repeat_interleave(group, dim=1)[:, : x.shape[1]]
    _check_dequant(q, col_scale, x, lost)


@pytest.mark.parametrize("shape", FP8_CASES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_group_quant_fp8_multigroup_matches_reference(load_kernel, shape, dtype):
    mod = load_kernel("triton/quantization/per_token_group_quant_fp8_multigroup.py")
    name = "per_token_group_quant_fp8_multigroup"
    (q, s), (rq, rs), inputs = _run(mod, name, shape, dtype)
    _check_group_fp8(q, s, rq, rs, inputs["x"], shape["group_size"])


@pytest.mark.parametrize(
    "tuning",
    [{"groups_per_program": 1, "num_warps": 1}, {"groups_per_program": 32, "num_warps": 8}],
    ids=str,
)
def test_group_quant_fp8_multigroup_extreme_tuning_and_validation(load_kernel, tuning):
    mod = load_kernel("triton/quantization/per_token_group_quant_fp8_multigroup.py")
    name = "per_token_group_quant_fp8_multigroup"
    shape = {"tokens": 2, "hidden": 600, "group_size": 64}
    (q, s), (rq, rs), inputs = _run(mod, name, shape, torch.float32, **tuning)
    _check_group_fp8(q, s, rq, rs, inputs["x"], 64)
    with pytest.raises(ValueError, match="power of two"):
        mod.per_token_group_quant_fp8_multigroup(inputs["x"], 64, groups_per_program=3)


# ------------------------------------------------------------------ cache
CACHE_CASES = [
    {"tokens": 9, "heads": 3, "head_dim": 40, "block_size": 4},
    {"tokens": 1, "heads": 2, "head_dim": 64, "block_size": 16},
]


def _check_fp8_cache(out, ref, inputs):
    for cache, ref_cache, src, scale in zip(
        out, ref, (inputs["key"], inputs["value"]), (inputs["k_scale"], inputs["v_scale"]),
        strict=True,
    ):  # fmt: skip
        lost = _check_fp8(cache, ref_cache)
        slots = inputs["slot_mapping"]
        keep = slots >= 0
        written = cache.view(-1, *src.shape[1:])[slots[keep]]
        target = (src[keep].float() / scale).clamp(-448, 448) * scale  # saturation is expected
        _check_dequant(written, scale, target, lost.view(-1, *src.shape[1:])[slots[keep]])


@pytest.mark.parametrize("shape", CACHE_CASES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_reshape_and_cache_fp8_matches_reference(load_kernel, shape, dtype):
    mod = load_kernel("triton/cache/reshape_and_cache_fp8.py")
    out, ref, inputs = _run(mod, "reshape_and_cache_fp8", shape, dtype)
    assert out[0] is inputs["key_cache"] and out[1] is inputs["value_cache"]  # in place
    _check_fp8_cache(out, ref, inputs)


@pytest.mark.parametrize("num_warps", [1, 8])
def test_reshape_and_cache_fp8_extreme_tuning_and_validation(load_kernel, num_warps):
    mod = load_kernel("triton/cache/reshape_and_cache_fp8.py")
    shape = {"tokens": 6, "heads": 2, "head_dim": 24, "block_size": 4}
    out, ref, inputs = _run(mod, "reshape_and_cache_fp8", shape, torch.float32, num_warps=num_warps)
    _check_fp8_cache(out, ref, inputs)
    bad = {**inputs, "key_cache": inputs["key_cache"].float()}
    with pytest.raises(ValueError, match="key_cache must be float8_e4m3fn"):
        mod.reshape_and_cache_fp8(**bad)


# ------------------------------------------------------------------ rope
MROPE_CASES = [
    {"tokens": 7, "q_heads": 4, "kv_heads": 1, "head_size": 64, "rotary_dim": 64},
    {"tokens": 5, "q_heads": 3, "kv_heads": 3, "head_size": 80, "rotary_dim": 64,
     "sections": [16, 8, 8]},
    {"tokens": 2, "q_heads": 2, "kv_heads": 1, "head_size": 32, "rotary_dim": 32,
     "sections": "4,8,4"},
]  # fmt: skip


@pytest.mark.parametrize("shape", MROPE_CASES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_mrope_sectioned_matches_reference(load_kernel, shape, dtype):
    mod = load_kernel("triton/rope/mrope_sectioned.py")
    out, ref, inputs = _run(mod, "mrope_sectioned", shape, dtype)
    _check(out, ref, dtype)
    r = shape["rotary_dim"]
    assert torch.equal(out[0][..., r:], inputs["q"][..., r:])  # pass-through dims are copied


@pytest.mark.parametrize("num_warps", [1, 8])
def test_mrope_sectioned_extreme_tuning_and_validation(load_kernel, num_warps):
    mod = load_kernel("triton/rope/mrope_sectioned.py")
    shape = {**MROPE_CASES[1], "tokens": 3}
    out, ref, inputs = _run(mod, "mrope_sectioned", shape, torch.float32, num_warps=num_warps)
    _check(out, ref)
    with pytest.raises(ValueError, match="summing to rotary_dim / 2 = 32"):
        mod.mrope_sectioned(**{**inputs, "mrope_section": [16, 16, 8]})


GPTJ_CASES = [
    {"tokens": 5, "heads": 6, "kv_heads": 2, "head_dim": 64},
    {"tokens": 3, "heads": 3, "kv_heads": 1, "head_dim": 32, "rope_dim": 16},
]


@pytest.mark.parametrize("shape", GPTJ_CASES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fused_qkv_rope_gptj_matches_reference(load_kernel, shape, dtype):
    mod = load_kernel("triton/rope/fused_qkv_rope_gptj_interleaved.py")
    out, ref, _ = _run(mod, "fused_qkv_rope_gptj_interleaved", shape, dtype)
    # in-kernel exp2 frequencies differ from PyTorch's pow by ~1 ulp (angles up to ~70 rad here)
    _check(out, ref, dtype, (5e-4, 5e-4) if dtype == torch.float32 else None)


@pytest.mark.parametrize(
    "tuning", [{"block_h": 1, "num_warps": 1}, {"block_h": 16, "num_warps": 8}], ids=str
)
def test_fused_qkv_rope_gptj_extreme_tuning_and_validation(load_kernel, tuning):
    mod = load_kernel("triton/rope/fused_qkv_rope_gptj_interleaved.py")
    shape = {"tokens": 2, "heads": 4, "kv_heads": 2, "head_dim": 32}
    out, ref, inputs = _run(mod, "fused_qkv_rope_gptj_interleaved", shape, torch.float32, **tuning)
    _check(out, ref, torch.float32, (5e-4, 5e-4))
    with pytest.raises(ValueError, match="rope_dim must be even"):
        mod.fused_qkv_rope_gptj_interleaved(**{**inputs, "rope_dim": 7})


# ------------------------------------------------------------------ conv
CONV_CASES = [
    {"dim": 100, "tokens": 37},  # several time chunks and a ragged channel tile
    {"dim": 64, "tokens": 1},  # one token: every tap but the last reads the state
    {"dim": 20, "tokens": 9, "batch": 2, "width": 3, "activation": None},
]


@pytest.mark.parametrize("shape", CONV_CASES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_causal_conv1d_channel_tiled_matches_reference(load_kernel, shape, dtype):
    mod = load_kernel("triton/conv/causal_conv1d_channel_tiled.py")
    out, ref, _ = _run(mod, "causal_conv1d_channel_tiled", shape, dtype)
    _check(out, ref, dtype)


@pytest.mark.parametrize(
    "tuning",
    [{"block_c": 8, "block_t": 8, "num_warps": 1}, {"block_c": 128, "block_t": 64, "num_warps": 8}],
    ids=str,
)
def test_causal_conv1d_channel_tiled_extreme_tuning_and_validation(load_kernel, tuning):
    mod = load_kernel("triton/conv/causal_conv1d_channel_tiled.py")
    out, ref, inputs = _run(
        mod, "causal_conv1d_channel_tiled", {"dim": 24, "tokens": 19}, torch.float32, **tuning
    )
    _check(out, ref)
    with pytest.raises(ValueError, match="initial_state must be"):
        mod.causal_conv1d_channel_tiled(**{**inputs, "initial_state": torch.zeros(1, 24, 2)})


UPDATE_CASES = [
    {"batch": 3, "dim": 100},  # plain decode, state of W - 1
    {"batch": 3, "dim": 40, "steps": 3, "state_len": 6, "indices": [2, -1, 0]},
    {"batch": 3, "dim": 40, "state_len": 6, "indices": [2, -1, 0]},  # the own problem's (B, C) form
]


@pytest.mark.parametrize("shape", UPDATE_CASES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_causal_conv1d_update_decode_matches_reference(load_kernel, shape, dtype):
    mod = load_kernel("triton/conv/causal_conv1d_update_decode.py")
    out, ref, inputs = _run(mod, "causal_conv1d_update_decode", shape, dtype)
    assert out[1] is inputs["conv_state"]  # rolled in place
    _check(out, ref, dtype)


def test_causal_conv1d_update_decode_rolls_and_skips(load_kernel):
    mod = load_kernel("triton/conv/causal_conv1d_update_decode.py")
    shape = {"batch": 2, "dim": 8, "state_len": 5, "indices": [-1, 1]}
    inputs = mod.make_inputs(shape, torch.float32)
    inputs["x"] += 1.0  # no output of the live row is exactly zero
    old = inputs["conv_state"].clone()
    out, state = mod.causal_conv1d_update_decode(**inputs)
    assert torch.equal(state[[0, 2, 3]], old[[0, 2, 3]])  # untouched rows (index -1 skips)
    assert torch.equal(state[1, :, :-1], old[1, :, 1:])  # shifted by one step
    assert torch.equal(state[1, :, -1], inputs["x"][1])  # the new input appended
    assert (out[0] == 0).all() and out[1].abs().sum() > 0  # padded slot: zero output


@pytest.mark.parametrize(
    "tuning", [{"block_c": 16, "num_warps": 1}, {"block_c": 256, "num_warps": 8}], ids=str
)
def test_causal_conv1d_update_decode_extreme_tuning_and_validation(load_kernel, tuning):
    mod = load_kernel("triton/conv/causal_conv1d_update_decode.py")
    shape = {"batch": 2, "dim": 40, "width": 4}
    out, ref, inputs = _run(mod, "causal_conv1d_update_decode", shape, torch.float32, **tuning)
    _check(out, ref)
    with pytest.raises(ValueError, match="S >= W - 1"):
        mod.causal_conv1d_update_decode(**{**inputs, "conv_state": torch.zeros(2, 40, 2)})


# ------------------------------------------------------------------ moe
SORT_CASES = [
    {"tokens": 13, "top_k": 4, "num_experts": 10, "block_size": 16},
    {"tokens": 1, "top_k": 8, "num_experts": 128, "block_size": 128},
    {"tokens": 300, "top_k": 2, "num_experts": 7, "block_size": 8},  # several chunks
]


@pytest.mark.parametrize("shape", SORT_CASES, ids=str)
@pytest.mark.parametrize(
    ("name", "tuning"),
    [
        ("moe_count_and_sort_histogram", {}),
        ("moe_count_and_sort_histogram", {"chunk": 128, "num_warps": 1}),
        ("moe_align_block_size_atomic", {}),
        ("moe_align_block_size_atomic", {"chunk": 128, "num_warps": 1}),
    ],
    ids=str,
)
def test_moe_routing_sort_is_exact(load_kernel, name, tuning, shape):
    mod = load_kernel(f"triton/moe/{name}.py")
    if name == "moe_count_and_sort_histogram":
        shape = {k: v for k, v in shape.items() if k != "block_size"}
    out, ref, _ = _run(mod, name, shape, torch.int32, **tuning)
    _check(out, ref)


@pytest.mark.parametrize("name", ["moe_count_and_sort_histogram", "moe_align_block_size_atomic"])
def test_moe_routing_sort_largest_chunk_and_validation(load_kernel, name):
    mod = load_kernel(f"triton/moe/{name}.py")
    shape = {"tokens": 600, "top_k": 8, "num_experts": 16, "block_size": 32}
    if name == "moe_count_and_sort_histogram":
        shape.pop("block_size")
    out, ref, inputs = _run(mod, name, shape, torch.int32, chunk=4096, num_warps=8)
    _check(out, ref)
    with pytest.raises(ValueError, match="int32"):
        getattr(mod, name)(**{**inputs, "topk_ids": inputs["topk_ids"].long()})


GATING_CASES = [
    {"tokens": 7, "experts": 24, "top_k": 5},
    {"tokens": 3, "experts": 128, "top_k": 8, "renormalize": True},
    {"tokens": 33, "experts": 16, "top_k": 2},  # several token tiles, a ragged last one
]


@pytest.mark.parametrize("shape", GATING_CASES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_moe_topk_gating_softmax_tiled_matches_reference(load_kernel, shape, dtype):
    mod = load_kernel("triton/moe/moe_topk_gating_softmax_tiled.py")
    (w, ids), (rw, rids), _ = _run(mod, "moe_topk_gating_softmax_tiled", shape, dtype)
    _check((w, ids), (rw, rids), torch.float32, (1e-5, 1e-5))  # fp32 softmax either way


@pytest.mark.parametrize(
    "tuning", [{"block_t": 1, "num_warps": 1}, {"block_t": 32, "num_warps": 8}], ids=str
)
def test_moe_topk_gating_softmax_tiled_extreme_tuning_and_validation(load_kernel, tuning):
    mod = load_kernel("triton/moe/moe_topk_gating_softmax_tiled.py")
    shape = {"tokens": 5, "experts": 12, "top_k": 3}
    out, ref, inputs = _run(mod, "moe_topk_gating_softmax_tiled", shape, torch.float32, **tuning)
    _check(out, ref, torch.float32, (1e-5, 1e-5))
    with pytest.raises(ValueError, match=r"top_k must be in \[1, 12\]"):
        mod.moe_topk_gating_softmax_tiled(inputs["gating_output"], 13)


SUM_CASES = [
    {"tokens": 7, "top_k": 3, "hidden": 200},
    {"tokens": 5, "top_k": 8, "hidden": 96, "scale": 2.5},
]


@pytest.mark.parametrize("shape", SUM_CASES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_moe_sum_reduce_tiled_matches_reference(load_kernel, shape, dtype):
    mod = load_kernel("triton/moe/moe_sum_reduce_tiled.py")
    out, ref, _ = _run(mod, "moe_sum_reduce_tiled", shape, dtype)
    _check(out, ref, dtype)


@pytest.mark.parametrize(
    "tuning",
    [
        {"block_t": 1, "block_h": 64, "programs": 2, "num_warps": 1},  # one program: 7 tiles
        {"block_t": 16, "block_h": 1024, "programs": 4096, "num_warps": 8},
    ],
    ids=str,
)
def test_moe_sum_reduce_tiled_extreme_tuning_and_validation(load_kernel, tuning):
    mod = load_kernel("triton/moe/moe_sum_reduce_tiled.py")
    shape = {"tokens": 7, "top_k": 5, "hidden": 70, "scale": 0.5}
    out, ref, inputs = _run(mod, "moe_sum_reduce_tiled", shape, torch.float32, **tuning)
    _check(out, ref)
    with pytest.raises(ValueError, match="power of two"):
        mod.moe_sum_reduce_tiled(inputs["expert_outputs"], block_h=48)
    with pytest.raises(ValueError, match=r"need expert_outputs \(T, k, H\)"):
        mod.moe_sum_reduce_tiled(inputs["expert_outputs"][0])
