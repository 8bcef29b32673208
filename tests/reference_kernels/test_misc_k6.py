"""Misc reference kernels (k6: quantisation, norm, sampling, gather/scatter, RoPE), interpreted.

Every kernel is checked against its own PyTorch ``reference`` with assert_close and a whole-output
norm check (so a zero output fails), at its extreme tuning values, and on bad input. fp8 outputs are
compared as values with the interpreter's known fp32 -> e4m3 rounding faults allowed (see
test_quantization_k3.py: at most 5% one e4m3 step off, at most 12% a lost carry to the next power
of two; a GPU shows neither).
"""

import pytest
import torch

from tests.reference_kernels.fp8_checks import check_fp8

DTYPES = [torch.float32, torch.bfloat16]
TOL = {torch.float32: (1e-5, 1e-5), torch.bfloat16: (1e-2, 1e-2)}


def _close(out, ref, tol):
    atol, rtol = tol
    assert out.dtype == ref.dtype and out.shape == ref.shape
    torch.testing.assert_close(out.float(), ref.float(), atol=atol, rtol=rtol)
    # whole-output check so a zero output cannot pass
    assert (out.float() - ref.float()).norm() <= rtol * ref.float().norm() + atol
    assert ref.float().norm() > 0


def _check_fp8(q, ref_q):
    """fp8 values within the interpreter's errors (fp8_checks), and a non-zero reference."""
    assert ref_q.float().norm() > 0
    return check_fp8(q, ref_q)


def _check_dequant(deq, target, skip, rel=0.07):
    deq = torch.where(skip, target.float(), deq)
    assert (deq - target.float()).norm() <= rel * target.float().norm()


# ------------------------------------------------------------ per_token_group_quant_fp8_ue8m0
UE8M0 = "triton/quantization/per_token_group_quant_fp8_ue8m0.py"


def _run_ue8m0(load_kernel, shape, dtype, **tuning):
    mod = load_kernel(UE8M0)
    inputs = mod.make_inputs(shape, dtype)
    (q, s), (rq, rs) = (
        mod.per_token_group_quant_fp8_ue8m0(**inputs, **tuning),
        mod.reference(**inputs),
    )
    assert torch.equal(s, rs)  # exact powers of two
    assert torch.equal(torch.frexp(s).mantissa, torch.full_like(s, 0.5))
    g = inputs["group_size"]
    x = inputs["x"].float()
    skip = _check_fp8(q, rq)
    _check_dequant(q.float() * s.repeat_interleave(g, dim=1)[:, : x.shape[1]], x, skip)
    assert q.float().abs().max() <= 448


@pytest.mark.parametrize(
    "shape",
    [
        {"rows": 3, "hidden": 256, "group_size": 128},
        {"rows": 5, "hidden": 96, "group_size": 32},
        {"rows": 3, "hidden": 200, "group_size": 128},  # a shorter last group in every row
    ],
    ids=str,
)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_ue8m0_group_quant_matches_reference(load_kernel, shape, dtype):
    _run_ue8m0(load_kernel, shape, dtype)


@pytest.mark.parametrize("tuning", [{"groups_per_program": 1, "num_warps": 1},
                                    {"groups_per_program": 64, "num_warps": 8}])  # fmt: skip
def test_ue8m0_group_quant_extreme_tuning(load_kernel, tuning):
    _run_ue8m0(load_kernel, {"rows": 4, "hidden": 192, "group_size": 64}, torch.float32, **tuning)


def test_ue8m0_group_quant_rejects_bad_input(load_kernel):
    mod = load_kernel(UE8M0)
    with pytest.raises(ValueError, match="group_size"):
        mod.per_token_group_quant_fp8_ue8m0(torch.randn(2, 100), group_size=48)
    with pytest.raises(ValueError, match="2-D"):
        mod.per_token_group_quant_fp8_ue8m0(torch.randn(128))


# ------------------------------------------------------------ mxfp8_quant_block32
MXFP8 = "triton/quantization/mxfp8_quant_block32.py"


def _run_mxfp8(load_kernel, shape, dtype, **tuning):
    mod = load_kernel(MXFP8)
    inputs = mod.make_inputs(shape, dtype)
    (q, s), (rq, rs) = mod.mxfp8_quant_block32(**inputs, **tuning), mod.reference(**inputs)
    assert s.dtype == torch.uint8 and torch.equal(s, rs)
    skip = _check_fp8(q, rq)
    scale = torch.exp2(s.float() - 127).repeat_interleave(32, dim=1)
    x = inputs["x"].float()
    sat = x.abs() > 448 * scale  # the OCP floor rule saturates these to 448
    _check_dequant(q.float() * scale, x, skip | sat)


@pytest.mark.parametrize("shape", [{"rows": 3, "hidden": 320}, {"rows": 9, "hidden": 64}], ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_mxfp8_quant_matches_reference(load_kernel, shape, dtype):
    _run_mxfp8(load_kernel, shape, dtype)


@pytest.mark.parametrize("tuning", [{"block_m": 1, "block_n": 32, "num_warps": 1},
                                    {"block_m": 16, "block_n": 512, "num_warps": 8}])  # fmt: skip
def test_mxfp8_quant_extreme_tuning(load_kernel, tuning):
    _run_mxfp8(load_kernel, {"rows": 5, "hidden": 160}, torch.float32, **tuning)


def test_mxfp8_quant_rejects_bad_input(load_kernel):
    mod = load_kernel(MXFP8)
    with pytest.raises(ValueError, match="N % 32"):
        mod.mxfp8_quant_block32(torch.randn(2, 40))
    with pytest.raises(ValueError, match="block_n"):
        mod.mxfp8_quant_block32(torch.randn(2, 64), block_n=16)


# ------------------------------------------------------------ int4_awq_pack / int4_dequant_unpack
PACK = "triton/quantization/int4_awq_pack.py"
UNPACK = "triton/quantization/int4_dequant_unpack.py"
W4_DTYPES = [torch.float32, torch.bfloat16, torch.float16]


@pytest.mark.parametrize("shape", [{"k": 64, "n": 48, "group_size": 32},
                                   {"k": 128, "n": 16, "group_size": 128}], ids=str)  # fmt: skip
@pytest.mark.parametrize("dtype", W4_DTYPES, ids=str)
def test_int4_awq_pack_matches_reference(load_kernel, shape, dtype):
    mod = load_kernel(PACK)
    inputs = mod.make_inputs(shape, dtype)
    (qw, qz, s), (rqw, rqz, rs) = mod.int4_awq_pack(**inputs), mod.reference(**inputs)
    assert torch.equal(qw, rqw) and torch.equal(qz, rqz)  # exact codes and packing
    _close(s, rs, (1e-5, 1e-5) if dtype == torch.float32 else (1e-5, 1e-2))
    # dequantised weights land within one step of the originals (a zero code tensor cannot)
    g = inputs["group_size"]
    q, z = mod.unpack_awq(qw), mod.unpack_awq(qz).repeat_interleave(g, dim=0)
    deq = (q - z).float() * s.float().repeat_interleave(g, dim=0)
    step = s.float().repeat_interleave(g, dim=0)
    # zero-point rounding shifts the grid by up to half a step; bf16/fp16 scales round once more
    err = (deq - inputs["w"].float()).abs()
    assert (err <= 1.1 * step).all() and err.norm() < 0.2 * inputs["w"].float().norm()


def test_int4_awq_pack_slot_order(load_kernel):
    # column p of a word holds code p + 1: the words spell out the AWQ slot order
    mod = load_kernel(PACK)
    w = torch.zeros(32, 8)
    w[0] = torch.arange(8.0)
    w[1] = 0
    w[2:] = torch.arange(8.0)  # every column spans 0..p: scale p / 15, zero 0
    w[:, 0] = torch.linspace(-1, 1, 32)
    qw, qz, _ = mod.int4_awq_pack(w, group_size=32, block_n=8)
    slots = [(int(qw[0, 0]) >> (4 * s)) & 0xF for s in range(8)]
    assert slots[1:] == [15 if c else 0 for c in (2, 4, 6, 1, 3, 5, 7)]
    assert torch.equal(mod.unpack_awq(qw)[2:, 1:], torch.full((30, 7), 15, dtype=torch.int32))


@pytest.mark.parametrize("tuning", [{"block_n": 8, "num_warps": 1},
                                    {"block_n": 128, "num_warps": 8}])  # fmt: skip
def test_int4_awq_pack_extreme_tuning(load_kernel, tuning):
    mod = load_kernel(PACK)
    inputs = mod.make_inputs({"k": 64, "n": 72, "group_size": 32}, torch.float32)
    out, ref = mod.int4_awq_pack(**inputs, **tuning), mod.reference(**inputs)
    assert all(torch.equal(a, b) for a, b in zip(out, ref, strict=True))


def test_int4_awq_pack_rejects_bad_input(load_kernel):
    mod = load_kernel(PACK)
    with pytest.raises(ValueError, match="N % 8"):
        mod.int4_awq_pack(torch.randn(64, 12), group_size=32)
    with pytest.raises(ValueError, match="block_n"):
        mod.int4_awq_pack(torch.randn(64, 16), group_size=32, block_n=4)


@pytest.mark.parametrize("shape", [{"k": 64, "n": 48, "group_size": 32},
                                   {"k": 40, "n": 16, "group_size": 8}], ids=str)  # fmt: skip
@pytest.mark.parametrize("dtype", W4_DTYPES, ids=str)
def test_int4_dequant_unpack_matches_reference(load_kernel, shape, dtype):
    mod = load_kernel(UNPACK)
    inputs = mod.make_inputs(shape, dtype)
    tol = {torch.float32: (1e-6, 1e-6), torch.bfloat16: (1e-4, 1e-2), torch.float16: (1e-5, 1e-3)}
    _close(mod.int4_dequant_unpack(**inputs), mod.reference(**inputs), tol[dtype])


def test_int4_dequant_inverts_pack(load_kernel):
    pack, unpack = load_kernel(PACK), load_kernel(UNPACK)
    w = pack.make_inputs({"k": 64, "n": 32, "group_size": 32}, torch.float32)["w"]
    qw, qz, s = pack.int4_awq_pack(w, group_size=32)
    deq = unpack.int4_dequant_unpack(qw, qz, s, group_size=32)
    step = s.repeat_interleave(32, dim=0)
    assert ((deq - w).abs() <= 1.01 * step).all()
    assert (deq - w).norm() < 0.2 * w.norm()


@pytest.mark.parametrize("tuning", [{"block_k": 8, "block_n": 8, "num_warps": 1},
                                    {"block_k": 64, "block_n": 128, "num_warps": 8}])  # fmt: skip
def test_int4_dequant_unpack_extreme_tuning(load_kernel, tuning):
    mod = load_kernel(UNPACK)
    inputs = mod.make_inputs({"k": 48, "n": 80, "group_size": 16}, torch.float32)
    _close(mod.int4_dequant_unpack(**inputs, **tuning), mod.reference(**inputs), (1e-6, 1e-6))


def test_int4_dequant_unpack_rejects_bad_input(load_kernel):
    mod = load_kernel(UNPACK)
    inputs = mod.make_inputs({"k": 32, "n": 16, "group_size": 16}, torch.float32)
    with pytest.raises(ValueError, match="qzeros"):
        mod.int4_dequant_unpack(inputs["qweight"], inputs["qzeros"][:1], inputs["scales"], 16)
    with pytest.raises(ValueError, match="int32"):
        mod.int4_dequant_unpack(inputs["qweight"].long(), inputs["qzeros"], inputs["scales"], 16)


# ------------------------------------------------------------ rms_norm_static_fp8_quant
STATIC = "triton/quantization/rms_norm_static_fp8_quant.py"


def _run_static(load_kernel, shape, dtype, **tuning):
    mod = load_kernel(STATIC)
    inputs = mod.make_inputs(shape, dtype)
    q, rq = mod.rms_norm_static_fp8_quant(**inputs, **tuning), mod.reference(**inputs)
    skip = _check_fp8(q, rq)
    xf, w = inputs["x"].float(), inputs["weight"].float()
    target = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    skip = skip | (target.abs() > 448 * inputs["scale"])  # saturated by design
    _check_dequant(q.float() * inputs["scale"], target, skip)


@pytest.mark.parametrize(
    "shape", [{"rows": 3, "hidden": 1000}, {"rows": 17, "hidden": 64}], ids=str
)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rms_norm_static_fp8_matches_reference(load_kernel, shape, dtype):
    _run_static(load_kernel, shape, dtype)


@pytest.mark.parametrize("tuning", [{"block_n": 256, "num_warps": 1},
                                    {"block_n": 4096, "num_warps": 8}])  # fmt: skip
def test_rms_norm_static_fp8_extreme_tuning(load_kernel, tuning):
    _run_static(load_kernel, {"rows": 2, "hidden": 700}, torch.float32, **tuning)  # 3 chunks at 256


def test_rms_norm_static_fp8_saturates_and_rejects(load_kernel):
    mod = load_kernel(STATIC)
    inputs = mod.make_inputs({"rows": 2, "hidden": 64, "scale": 1e-4}, torch.float32)
    q = mod.rms_norm_static_fp8_quant(**inputs)
    assert q.float().abs().max() == 448  # a too-small static scale clamps instead of overflowing
    with pytest.raises(ValueError, match="scale"):
        mod.rms_norm_static_fp8_quant(inputs["x"], inputs["weight"], torch.ones(2))
    with pytest.raises(ValueError, match="weight"):
        mod.rms_norm_static_fp8_quant(inputs["x"], inputs["weight"][:3], inputs["scale"])


# ------------------------------------------------------------ rms_norm_residual_gated_out
GATED = "triton/norm/rms_norm_residual_gated_out.py"


def _run_gated(load_kernel, shape, dtype, **tuning):
    mod = load_kernel(GATED)
    inputs = mod.make_inputs(shape, dtype)
    (y, h), (ry, rh) = mod.rms_norm_residual_gated_out(**inputs, **tuning), mod.reference(**inputs)
    # the interpreter truncates fp32 -> bf16 casts (h, then y): two bf16 ulps
    tol = (2e-2, 2e-2) if dtype == torch.bfloat16 else TOL[dtype]
    _close(h, rh, tol)
    _close(y, ry, (1e-4, 1e-4) if dtype == torch.float32 else tol)


@pytest.mark.parametrize("shape", [{"rows": 5, "hidden": 300}, {"rows": 1, "hidden": 129}], ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rms_norm_residual_gated_matches_reference(load_kernel, shape, dtype):
    _run_gated(load_kernel, shape, dtype)


@pytest.mark.parametrize("tuning", [{"block_m": 1, "num_warps": 1},
                                    {"block_m": 16, "num_warps": 8}])  # fmt: skip
def test_rms_norm_residual_gated_extreme_tuning(load_kernel, tuning):
    _run_gated(load_kernel, {"rows": 7, "hidden": 96}, torch.float32, **tuning)


def test_rms_norm_residual_gated_rejects_bad_input(load_kernel):
    mod = load_kernel(GATED)
    inputs = mod.make_inputs({"rows": 2, "hidden": 8}, torch.float32)
    with pytest.raises(ValueError, match="gate"):
        mod.rms_norm_residual_gated_out(**{**inputs, "gate": inputs["gate"][:1]})
    with pytest.raises(ValueError, match="block_m"):
        mod.rms_norm_residual_gated_out(**inputs, block_m=3)


# ------------------------------------------------------------ group_norm_nhwc_welford
GROUPNORM = "triton/norm/group_norm_nhwc_welford.py"


def _run_groupnorm(load_kernel, shape, dtype, **tuning):
    mod = load_kernel(GROUPNORM)
    inputs = mod.make_inputs(shape, dtype)
    tol = (1e-4, 1e-4) if dtype == torch.float32 else (2e-2, 2e-2)
    _close(mod.group_norm_nhwc_welford(**inputs, **tuning), mod.reference(**inputs), tol)


@pytest.mark.parametrize("shape", [{"batch": 2, "hw": 150, "channels": 24, "num_groups": 4},
                                   {"batch": 1, "hw": 7, "channels": 64, "num_groups": 32}],
                         ids=str)  # fmt: skip
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_group_norm_nhwc_matches_reference(load_kernel, shape, dtype):
    _run_groupnorm(load_kernel, shape, dtype)


@pytest.mark.parametrize("tuning", [{"block_s": 8, "num_warps": 1},
                                    {"block_s": 256, "num_warps": 8}])  # fmt: skip
def test_group_norm_nhwc_extreme_tuning(load_kernel, tuning):
    # block_s 8 gives 13 tiles per group: the merge of uneven tiles is exercised
    _run_groupnorm(load_kernel, {"batch": 2, "hw": 100, "channels": 12, "num_groups": 3},
                   torch.float32, **tuning)  # fmt: skip


def test_group_norm_nhwc_without_affine(load_kernel):
    mod = load_kernel(GROUPNORM)
    inputs = {**mod.make_inputs({"batch": 1, "hw": 40, "channels": 8, "num_groups": 2},
                                torch.float32), "weight": None, "bias": None}  # fmt: skip
    _close(mod.group_norm_nhwc_welford(**inputs, block_s=16), mod.reference(**inputs), (1e-4, 1e-4))


def test_group_norm_nhwc_rejects_bad_input(load_kernel):
    mod = load_kernel(GROUPNORM)
    with pytest.raises(ValueError, match="num_groups"):
        mod.group_norm_nhwc_welford(torch.randn(1, 4, 10), num_groups=3)
    with pytest.raises(ValueError, match="tiles"):
        mod.group_norm_nhwc_welford(torch.randn(1, 20000, 2), num_groups=1, block_s=1)


# ------------------------------------------------------------ topk_radix_select
TOPK = "triton/sampling/topk_radix_select.py"


def _run_topk(load_kernel, shape, **tuning):
    mod = load_kernel(TOPK)
    inputs = mod.make_inputs(shape)
    (vals, ids), (rvals, rids) = mod.topk_radix_select(**inputs, **tuning), mod.reference(**inputs)
    assert torch.equal(ids, rids) and torch.equal(vals, rvals)  # exact selection
    assert vals.norm() > 0


@pytest.mark.parametrize("shape", [{"rows": 3, "vocab": 1000, "k": 17},
                                   {"rows": 2, "vocab": 300, "k": 300},
                                   {"rows": 4, "vocab": 64, "k": 1}], ids=str)  # fmt: skip
def test_topk_radix_select_matches_reference(load_kernel, shape):
    _run_topk(load_kernel, shape)


@pytest.mark.parametrize("tuning", [{"block_v": 256, "num_warps": 1},
                                    {"block_v": 4096, "num_warps": 16}])  # fmt: skip
def test_topk_radix_select_extreme_tuning(load_kernel, tuning):
    _run_topk(load_kernel, {"rows": 2, "vocab": 900, "k": 40}, **tuning)


def test_topk_radix_select_ties_and_signs(load_kernel):
    mod = load_kernel(TOPK)
    # ties at the threshold keep the lowest ids; negatives, -inf and large values order correctly
    x = torch.tensor([[1.0, 2.0, 2.0, 2.0, -3.0, 0.5, -0.5, 2.0, float("-inf"), 2.0**90]] * 2)
    vals, ids = mod.topk_radix_select(x, 3, block_v=256)
    assert ids.tolist() == [[1, 2, 9]] * 2 and vals.tolist() == [[2.0, 2.0, 2.0**90]] * 2
    neg = -torch.arange(1.0, 11.0)[None]  # all negative: the top 4 are -1..-4
    assert mod.topk_radix_select(neg, 4, block_v=256)[1].tolist() == [[0, 1, 2, 3]]


def test_topk_radix_select_rejects_bad_input(load_kernel):
    mod = load_kernel(TOPK)
    with pytest.raises(ValueError, match="k = 0"):
        mod.topk_radix_select(torch.randn(2, 8), 0)
    with pytest.raises(ValueError, match="fp32"):
        mod.topk_radix_select(torch.randn(2, 8).bfloat16(), 2)


# ------------------------------------------------------------ bincount_histogram_tokens
BINCOUNT = "triton/other/bincount_histogram_tokens.py"


@pytest.mark.parametrize("shape", [{"tokens": 300, "topk": 8, "num_bins": 64},
                                   {"tokens": 5, "topk": 1, "num_bins": 3}], ids=str)  # fmt: skip
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64], ids=str)
def test_bincount_matches_reference(load_kernel, shape, dtype):
    mod = load_kernel(BINCOUNT)
    inputs = mod.make_inputs(shape, dtype)
    counts, ref = mod.bincount_histogram_tokens(**inputs), mod.reference(**inputs)
    assert counts.dtype == torch.int32 and torch.equal(counts, ref) and ref.sum() > 0


@pytest.mark.parametrize(
    "tuning",
    [
        {"block": 256, "chunks_per_program": 1, "num_warps": 1},
        {"block": 4096, "chunks_per_program": 16, "num_warps": 8},
    ],
)
def test_bincount_extreme_tuning(load_kernel, tuning):
    mod = load_kernel(BINCOUNT)
    inputs = mod.make_inputs({"tokens": 700, "topk": 2, "num_bins": 40}, torch.int32)
    counts = mod.bincount_histogram_tokens(**inputs, **tuning)
    assert torch.equal(counts, mod.reference(**inputs))


def test_bincount_rejects_bad_input(load_kernel):
    mod = load_kernel(BINCOUNT)
    with pytest.raises(ValueError, match="int32 or int64"):
        mod.bincount_histogram_tokens(torch.zeros(4), 3)
    with pytest.raises(ValueError, match="num_bins"):
        mod.bincount_histogram_tokens(torch.zeros(4, dtype=torch.int32), 0)


# ------------------------------------------------------------ index_select_rows_gather
GATHER = "triton/other/index_select_rows_gather.py"
MOVE_DTYPES = [torch.float32, torch.bfloat16, torch.int8, torch.int64]


@pytest.mark.parametrize("shape", [{"rows": 50, "cols": 300, "picks": 37},
                                   {"rows": 7, "cols": 5, "picks": 20}], ids=str)  # fmt: skip
@pytest.mark.parametrize("dtype", MOVE_DTYPES, ids=str)
def test_index_select_rows_matches_reference(load_kernel, shape, dtype):
    mod = load_kernel(GATHER)
    inputs = mod.make_inputs(shape, dtype)
    out, ref = mod.index_select_rows_gather(**inputs), mod.reference(**inputs)
    assert out.dtype == dtype and torch.equal(out, ref) and ref.float().norm() > 0


@pytest.mark.parametrize(
    "tuning",
    [
        {"block_r": 1, "block_c": 64, "num_warps": 1},
        {"block_r": 32, "block_c": 1024, "num_warps": 8},
    ],
)
def test_index_select_rows_extreme_tuning(load_kernel, tuning):
    mod = load_kernel(GATHER)
    inputs = mod.make_inputs({"rows": 20, "cols": 130, "picks": 9}, torch.float32)
    assert torch.equal(mod.index_select_rows_gather(**inputs, **tuning), mod.reference(**inputs))


def test_index_select_rows_bool_and_bad_input(load_kernel):
    mod = load_kernel(GATHER)
    src = torch.rand(6, 10) > 0.5
    index = torch.tensor([5, 0, 0, 3])
    assert torch.equal(mod.index_select_rows_gather(src, index), src[index])
    with pytest.raises(ValueError, match="index"):
        mod.index_select_rows_gather(src, index.float())


# ------------------------------------------------------------ masked_scatter_rows
SCATTER = "triton/other/masked_scatter_rows.py"


@pytest.mark.parametrize("shape", [{"rows": 60, "cols": 300, "picks": 40},
                                   {"rows": 9, "cols": 3, "picks": 9}], ids=str)  # fmt: skip
@pytest.mark.parametrize("dtype", MOVE_DTYPES, ids=str)
def test_masked_scatter_rows_matches_reference(load_kernel, shape, dtype):
    mod = load_kernel(SCATTER)
    inputs = mod.make_inputs(shape, dtype)
    before = inputs["out"].clone()
    ref = mod.reference(**{**inputs, "out": before.clone()})  # the reference writes in place too
    out = mod.masked_scatter_rows(**inputs)
    assert out is inputs["out"] and torch.equal(out, ref)
    assert not torch.equal(out, before)  # something was written


@pytest.mark.parametrize(
    "tuning",
    [
        {"block_r": 1, "block_c": 64, "num_warps": 1},
        {"block_r": 32, "block_c": 1024, "num_warps": 8},
    ],
)
def test_masked_scatter_rows_extreme_tuning(load_kernel, tuning):
    mod = load_kernel(SCATTER)
    inputs = mod.make_inputs({"rows": 30, "cols": 130, "picks": 25}, torch.float32)
    inputs["valid"] = None  # only the -1 slots are skipped
    ref = mod.reference(**{**inputs, "out": inputs["out"].clone()})
    assert torch.equal(mod.masked_scatter_rows(**inputs, **tuning), ref)


def test_masked_scatter_rows_rejects_bad_input(load_kernel):
    mod = load_kernel(SCATTER)
    inputs = mod.make_inputs({"rows": 8, "cols": 4, "picks": 4}, torch.float32)
    with pytest.raises(ValueError, match="valid"):
        mod.masked_scatter_rows(**{**inputs, "valid": inputs["valid"].int()})
    with pytest.raises(ValueError, match="dtype"):
        mod.masked_scatter_rows(**{**inputs, "src": inputs["src"].double()})


# ------------------------------------------------------------ rope_position_ids_inplace_qk
ROPE = "triton/rope/rope_position_ids_inplace_qk.py"


def _run_rope(load_kernel, shape, dtype, **tuning):
    mod = load_kernel(ROPE)
    inputs = mod.make_inputs(shape, dtype)
    rq, rk = mod.reference(**{**inputs, "q": inputs["q"].clone(), "k": inputs["k"].clone()})
    q, k = mod.rope_position_ids_inplace_qk(**inputs, **tuning)
    assert q is inputs["q"] and k is inputs["k"]
    tol = (1e-5, 1e-5) if dtype == torch.float32 else (1e-2, 1e-2)
    _close(q, rq, tol)
    _close(k, rk, tol)


@pytest.mark.parametrize("shape", [
    {"tokens": 3, "heads": 6, "kv_heads": 2, "head_dim": 64},
    {"tokens": 2, "heads": 4, "kv_heads": 4, "head_dim": 48, "rot_dim": 24},  # partial rotary
], ids=str)  # fmt: skip
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rope_inplace_matches_reference(load_kernel, shape, dtype):
    _run_rope(load_kernel, shape, dtype)


@pytest.mark.parametrize("tuning", [{"block_h": 1, "num_warps": 1},
                                    {"block_h": 16, "num_warps": 8}])  # fmt: skip
def test_rope_inplace_extreme_tuning(load_kernel, tuning):
    _run_rope(load_kernel, {"tokens": 2, "heads": 5, "kv_heads": 3, "head_dim": 32},
              torch.float32, **tuning)  # fmt: skip


def test_rope_inplace_leaves_v_and_tail(load_kernel):
    mod = load_kernel(ROPE)
    inputs = mod.make_inputs({"tokens": 2, "heads": 2, "kv_heads": 1, "head_dim": 16,
                              "rot_dim": 8}, torch.float32)  # fmt: skip
    qkv = inputs["q"]._base
    v_before, tail_before = qkv[:, 48:].clone(), inputs["q"][..., 8:].clone()
    mod.rope_position_ids_inplace_qk(**inputs)
    assert torch.equal(qkv[:, 48:], v_before) and torch.equal(inputs["q"][..., 8:], tail_before)
    with pytest.raises(ValueError, match="cos_sin_cache"):
        mod.rope_position_ids_inplace_qk(inputs["positions"], inputs["q"], inputs["k"],
                                         torch.zeros(4, 18))  # fmt: skip
