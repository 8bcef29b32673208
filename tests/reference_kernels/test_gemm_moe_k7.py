"""Reference kernels, batch 7 (GEMM and MoE designs) against their own PyTorch references.

Each kernel runs under Triton's interpreter on tiny shapes (see conftest.load_kernel).
"""

import pytest
import torch

from tests.reference_kernels.conftest import ON_GPU, TF32_TOL
from tests.reference_kernels.refill import refilled_inputs

GEMM = "triton/gemm/"
MOE = "triton/moe/"
TOL = {torch.float32: (1e-4, 1e-4), torch.bfloat16: (1e-2, 1e-2), "fp8": (1e-3, 1e-3)}
if ON_GPU:  # fp32 tl.dot runs on TF32 tensor cores there
    TOL[torch.float32] = TF32_TOL


def _check(out: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float) -> None:
    """Elementwise closeness plus a whole-output relative L2 bound (a zero output fails it)."""
    assert out.dtype == ref.dtype and out.shape == ref.shape
    torch.testing.assert_close(out.float(), ref.float(), atol=atol, rtol=rtol)
    assert ref.float().norm() > 0
    assert (out.float() - ref.float()).norm() <= rtol * ref.float().norm() + atol


def _run(load_kernel, relpath: str, shape: dict, dtype, tol, **tuning) -> None:
    mod = load_kernel(relpath + ".py")
    inputs = mod.make_inputs(shape, dtype)
    launcher = getattr(mod, relpath.rsplit("/", 1)[1])
    _check(launcher(**inputs, **tuning), mod.reference(**inputs), *tol)


# ------------------------------------------------------------------ gemm_fp8_per_tensor_scaled
FP8 = torch.float8_e4m3fn
# bf16 output: one rounding of the fp32 result
BF16_OUT = (1e-2, 1e-2)


@pytest.mark.parametrize("shape", [{"m": 5, "n": 40, "k": 72}, {"m": 20, "n": 17, "k": 160}])
def test_gemm_fp8_per_tensor_scaled_matches_reference(load_kernel, shape):
    _run(load_kernel, GEMM + "gemm_fp8_per_tensor_scaled", shape, FP8, BF16_OUT, block_k=64)


def test_gemm_fp8_per_tensor_scaled_tuning_extremes(load_kernel):
    shape = {"m": 18, "n": 33, "k": 130}
    for params in [{"block_m": 16, "block_n": 64, "block_k": 64, "group_m": 1},
                   {"block_m": 32, "block_n": 128, "block_k": 128, "group_m": 16}]:  # fmt: skip
        _run(load_kernel, GEMM + "gemm_fp8_per_tensor_scaled", shape, FP8, BF16_OUT, **params)


def test_gemm_fp8_per_tensor_scaled_rejects_bad_input(load_kernel):
    mod = load_kernel(GEMM + "gemm_fp8_per_tensor_scaled.py")
    a = torch.zeros(4, 32).to(FP8)
    with pytest.raises(ValueError, match="scale_a"):
        mod.gemm_fp8_per_tensor_scaled(a, a, torch.ones(4), torch.ones(1))
    with pytest.raises(ValueError, match="e4m3fn"):
        mod.gemm_fp8_per_tensor_scaled(torch.zeros(4, 32), a, torch.ones(1), torch.ones(1))


# ------------------------------------------------------------------ gemm_swap_ab_small_m
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [{"m": 1, "n": 70, "k": 96}, {"m": 13, "n": 32, "k": 200}])
def test_gemm_swap_ab_small_m_matches_reference(load_kernel, shape, dtype):
    _run(load_kernel, GEMM + "gemm_swap_ab_small_m", shape, dtype, TOL[dtype])


def test_gemm_swap_ab_small_m_tuning_extremes(load_kernel):
    for params in [{"block_n": 32, "block_k": 64}, {"block_n": 128, "block_k": 256}]:
        _run(load_kernel, GEMM + "gemm_swap_ab_small_m", {"m": 3, "n": 40, "k": 90},
             torch.float32, TOL[torch.float32], **params)  # fmt: skip


def test_gemm_swap_ab_small_m_rejects_bad_input(load_kernel):
    mod = load_kernel(GEMM + "gemm_swap_ab_small_m.py")
    with pytest.raises(ValueError, match="M <= 16"):
        mod.gemm_swap_ab_small_m(torch.zeros(17, 8), torch.zeros(4, 8))
    with pytest.raises(ValueError, match="block_n"):
        mod.gemm_swap_ab_small_m(torch.zeros(2, 8), torch.zeros(4, 8), block_n=24)


# ------------------------------------------------------------------ gemm_bf16_k_contiguous_both_tn
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    "shape", [{"m": 7, "n": 40, "k": 80, "bias": True}, {"m": 33, "n": 20, "k": 48}]
)
def test_gemm_tn_matches_reference(load_kernel, shape, dtype):
    _run(load_kernel, GEMM + "gemm_bf16_k_contiguous_both_tn", shape, dtype, TOL[dtype],
         block_m=32, block_n=32)  # fmt: skip


def test_gemm_tn_tuning_extremes(load_kernel):
    shape = {"m": 40, "n": 50, "k": 70, "bias": True}
    for params in [{"block_m": 32, "block_n": 64, "block_k": 32, "group_n": 1},
                   {"block_m": 64, "block_n": 64, "block_k": 128, "group_n": 16}]:  # fmt: skip
        _run(load_kernel, GEMM + "gemm_bf16_k_contiguous_both_tn", shape, torch.float32,
             TOL[torch.float32], **params)  # fmt: skip


def test_gemm_tn_rejects_bad_input(load_kernel):
    mod = load_kernel(GEMM + "gemm_bf16_k_contiguous_both_tn.py")
    with pytest.raises(ValueError, match="bias"):
        mod.gemm_bf16_k_contiguous_both_tn(torch.zeros(2, 8), torch.zeros(4, 8), torch.zeros(3))
    with pytest.raises(ValueError, match="weight"):
        mod.gemm_bf16_k_contiguous_both_tn(torch.zeros(2, 8), torch.zeros(4, 9))


# ------------------------------------------------------------------ block_scaled k-major scales
BSMM_CASES = [
    {"m": 5, "n": 96, "k": 192, "group_n": 32, "group_k": 64},
    {"m": 20, "n": 40, "k": 80, "group_n": 32, "group_k": 32},
]


@pytest.mark.parametrize("shape", BSMM_CASES)
def test_block_scaled_k_major_matches_reference(load_kernel, shape):
    _run(load_kernel, GEMM + "block_scaled_mm_fp8_k_major_scales_vectorised", shape, FP8,
         TOL["fp8"])  # fmt: skip


def test_block_scaled_k_major_tuning_extremes(load_kernel):
    shape = {"m": 17, "n": 70, "k": 100, "group_n": 64, "group_k": 32}
    for params in [{"block_m": 16, "block_n": 32, "group_m": 1},
                   {"block_m": 32, "block_n": 128, "group_m": 16}]:  # fmt: skip
        _run(load_kernel, GEMM + "block_scaled_mm_fp8_k_major_scales_vectorised", shape, FP8,
             TOL["fp8"], **params)  # fmt: skip


def test_block_scaled_k_major_reads_k_major_scale_storage(load_kernel):
    # a_scales handed over as a transposed view of (KB, M) storage: the unit-stride vector path
    mod = load_kernel(GEMM + "block_scaled_mm_fp8_k_major_scales_vectorised.py")
    inputs = mod.make_inputs(BSMM_CASES[1], FP8)
    inputs["a_scales"] = inputs["a_scales"].t().contiguous().t()
    assert inputs["a_scales"].stride(0) == 1
    out = mod.block_scaled_mm_fp8_k_major_scales_vectorised(**inputs)
    torch.testing.assert_close(out, mod.reference(**inputs), atol=TOL["fp8"][0], rtol=TOL["fp8"][1])


def test_block_scaled_k_major_rejects_bad_input(load_kernel):
    mod = load_kernel(GEMM + "block_scaled_mm_fp8_k_major_scales_vectorised.py")
    a = torch.zeros(4, 64).to(FP8)
    with pytest.raises(ValueError, match="group_k"):
        mod.block_scaled_mm_fp8_k_major_scales_vectorised(
            a, a, torch.ones(4, 1), torch.ones(1, 1), group_n=128, group_k=48
        )
    with pytest.raises(ValueError, match="a_scales"):
        mod.block_scaled_mm_fp8_k_major_scales_vectorised(a, a, torch.ones(4, 2), torch.ones(1, 1))


# ------------------------------------------------------------------ block_scaled stream-K
def test_block_scaled_stream_k_matches_reference(load_kernel):
    # 3 x 7 tiles x 3 groups = 63 units over 4 programs: most tiles are split across programs
    for shape in BSMM_CASES[:1] + [{"m": 37, "n": 200, "k": 320, "group_n": 128, "group_k": 128}]:
        _run(load_kernel, GEMM + "block_scaled_mm_fp8_stream_k", shape, FP8, TOL["fp8"],
             block_m=16, block_n=32)  # fmt: skip


def test_block_scaled_stream_k_tuning_extremes(load_kernel):
    shape = {"m": 17, "n": 70, "k": 100, "group_n": 48, "group_k": 32}
    for params in [{"block_m": 16, "block_n": 32, "programs_per_sm": 1},
                   {"block_m": 32, "block_n": 128, "programs_per_sm": 2}]:  # fmt: skip
        _run(load_kernel, GEMM + "block_scaled_mm_fp8_stream_k", shape, FP8, TOL["fp8"], **params)


def test_block_scaled_stream_k_rejects_bad_input(load_kernel):
    mod = load_kernel(GEMM + "block_scaled_mm_fp8_stream_k.py")
    a = torch.zeros(4, 64).to(FP8)
    with pytest.raises(ValueError, match="b_scales"):
        mod.block_scaled_mm_fp8_stream_k(a, a, torch.ones(4, 1), torch.ones(2, 1))
    with pytest.raises(ValueError, match="block_m"):
        mod.block_scaled_mm_fp8_stream_k(a, a, torch.ones(4, 1), torch.ones(1, 1), block_m=8)


# ------------------------------------------------------------------ fused MoE designs
FUSED = {
    # name: (tuning extremes: first and last values of each list)
    "fused_moe_swap_ab_decode": [
        {"block_n": 32, "block_k": 32, "block_p": 16},
        {"block_n": 128, "block_k": 128, "block_p": 64},
    ],
    "fused_moe_down_split_k_atomic": [
        {"block_m": 16, "block_n": 32, "block_k": 32, "split_k": 1},
        {"block_m": 64, "block_n": 128, "block_k": 128, "split_k": 8},
    ],
    "fused_moe_two_kernel_bf16_intermediate": [
        {"round_act": False, "block_m": 16, "block_n": 32, "block_k": 32},
        {"round_act": False, "block_m": 64, "block_n": 128, "block_k": 128},
    ],
}
FUSED_CASES = [
    {"tokens": 3, "hidden": 40, "inter": 100, "experts": 4, "top_k": 2},  # I spans split slices
    {"tokens": 9, "hidden": 72, "inter": 20, "experts": 3, "top_k": 3},  # 27 pairs: 2 chunks of 16
]
FUSED_TOL = (1e-5, 1e-4)  # fp32 output, fp32 intermediate (atrex30's bar)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", FUSED_CASES)
@pytest.mark.parametrize("name", list(FUSED))
def test_fused_moe_matches_reference(load_kernel, name, shape, dtype):
    extra = {"round_act": False} if name.endswith("bf16_intermediate") else {}
    _run(load_kernel, MOE + name, shape, dtype, FUSED_TOL, **extra)


@pytest.mark.parametrize("name", list(FUSED))
def test_fused_moe_tuning_extremes(load_kernel, name):
    shape = {"tokens": 5, "hidden": 48, "inter": 40, "experts": 5, "top_k": 2}
    for params in FUSED[name]:
        _run(load_kernel, MOE + name, shape, torch.float32, FUSED_TOL, **params)


def test_fused_moe_bf16_intermediate_rounds_once(load_kernel):
    # the default bf16 intermediate stays within bf16's relative error of the fp32 result
    _run(load_kernel, MOE + "fused_moe_two_kernel_bf16_intermediate", FUSED_CASES[0],
         torch.bfloat16, (1e-4, 1e-2))  # fmt: skip


@pytest.mark.parametrize("name", list(FUSED))
def test_fused_moe_rejects_bad_input(load_kernel, name):
    mod = load_kernel(MOE + name + ".py")
    launcher = getattr(mod, name)
    inputs = mod.make_inputs({"tokens": 2, "hidden": 16, "inter": 8, "experts": 2, "top_k": 1},
                             torch.float32)  # fmt: skip
    with pytest.raises(ValueError, match="w2"):
        launcher(**{**inputs, "w2": torch.zeros(2, 16, 9)})
    with pytest.raises(ValueError, match="int32"):
        launcher(**{**inputs, "topk_ids": inputs["topk_ids"].long()})


# ------------------------------------------------------------------ moe_align two-kernel scan
ALIGN = MOE + "moe_align_block_size_two_kernel_scan"
ALIGN_CASES = [
    {"tokens": 11, "top_k": 4, "num_experts": 9, "block_size": 8},
    {"tokens": 1, "top_k": 8, "num_experts": 128, "block_size": 128},
    {"tokens": 40, "top_k": 3, "num_experts": 16, "block_size": 4},  # several pieces
]


def _align_exact(mod, inputs, **tuning):
    out = mod.moe_align_block_size_two_kernel_scan(**inputs, **tuning)
    ref = mod.reference(**inputs)
    for o, r in zip(out, ref, strict=True):
        assert o.dtype == torch.int32 and torch.equal(o, r)
    assert int(out[2]) >= inputs["topk_ids"].numel()  # not a trivial output


@pytest.mark.parametrize("shape", ALIGN_CASES)
def test_align_two_kernel_scan_matches_reference(load_kernel, shape):
    mod = load_kernel(ALIGN + ".py")
    _align_exact(mod, mod.make_inputs(shape))


def test_align_two_kernel_scan_tuning_extremes(load_kernel):
    mod = load_kernel(ALIGN + ".py")
    inputs = mod.make_inputs({"tokens": 30, "top_k": 2, "num_experts": 16, "block_size": 16})
    for params in [{"chunk": 16, "num_warps": 1}, {"chunk": 128, "num_warps": 8}]:
        _align_exact(mod, inputs, **params)


def test_align_two_kernel_scan_rejects_bad_input(load_kernel):
    mod = load_kernel(ALIGN + ".py")
    with pytest.raises(ValueError, match="int32"):
        mod.moe_align_block_size_two_kernel_scan(torch.zeros(2, 2, dtype=torch.int64), 4, 4)
    with pytest.raises(ValueError, match="chunk"):
        mod.moe_align_block_size_two_kernel_scan(torch.zeros(2, 2, dtype=torch.int32), 4, 4,
                                                 chunk=48)  # fmt: skip


# ------------------------------------------------------------------ moe_unpermute gather
UNPERMUTE = MOE + "moe_unpermute_weighted_gather"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    "shape",
    [
        {"tokens": 5, "top_k": 3, "experts": 4, "hidden": 100, "block_size": 4},
        {"tokens": 2, "top_k": 1, "experts": 3, "hidden": 33, "block_size": 8},
    ],  # fmt: skip
)
def test_unpermute_gather_matches_reference(load_kernel, shape, dtype):
    _run(load_kernel, UNPERMUTE, shape, dtype, TOL[dtype])


def test_unpermute_gather_tuning_extremes(load_kernel):
    shape = {"tokens": 9, "top_k": 2, "experts": 3, "hidden": 300, "block_size": 4}
    for params in [{"block_t": 1, "block_h": 128, "num_warps": 2},
                   {"block_t": 8, "block_h": 2048, "num_warps": 8}]:  # fmt: skip
        _run(load_kernel, UNPERMUTE, shape, torch.float32, TOL[torch.float32], **params)


def test_unpermute_gather_rejects_bad_input(load_kernel):
    mod = load_kernel(UNPERMUTE + ".py")
    with pytest.raises(ValueError, match="sorted_token_ids"):
        mod.moe_unpermute_weighted_gather(torch.zeros(4, 8), torch.zeros(3, dtype=torch.int32),
                                          torch.ones(2, 1))  # fmt: skip
    with pytest.raises(ValueError, match="block_h"):
        mod.moe_unpermute_weighted_gather(torch.zeros(4, 8), torch.zeros(4, dtype=torch.int32),
                                          torch.ones(2, 1), block_h=96)  # fmt: skip


# ------------------------------------------------------------------ gating softmax bitonic
GATING = MOE + "moe_topk_gating_softmax_renorm_bitonic"
GATING_CASES = [
    {"tokens": 7, "experts": 24, "top_k": 5},  # non-pow2 E and k: padding keys
    {"tokens": 3, "experts": 128, "top_k": 8, "renormalize": True},  # 4 merge rounds
    {"tokens": 2, "experts": 16, "top_k": 16},  # k = E: the whole row sorted, no merge
]


def _gating_check(mod, inputs, **tuning):
    weights, ids = mod.moe_topk_gating_softmax_renorm_bitonic(**inputs, **tuning)
    ref_w, ref_i = mod.reference(**inputs)
    _check(weights, ref_w, 1e-6, 1e-5)
    assert ids.dtype == torch.int32 and torch.equal(ids, ref_i)  # exact, order included


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", GATING_CASES)
def test_gating_bitonic_matches_reference(load_kernel, shape, dtype):
    mod = load_kernel(GATING + ".py")
    _gating_check(mod, mod.make_inputs(shape, dtype))


def test_gating_bitonic_tuning_extremes_and_ties(load_kernel):
    mod = load_kernel(GATING + ".py")
    inputs = mod.make_inputs({"tokens": 2, "experts": 40, "top_k": 1}, torch.float32)
    for params in [{"num_warps": 1}, {"num_warps": 8}]:
        _gating_check(mod, inputs, **params)
    # equal logits: ties go to the lower expert id, as torch.topk on CPU does for equal values
    tied = {"gating_output": torch.zeros(1, 12), "top_k": 4, "renormalize": False}
    weights, ids = mod.moe_topk_gating_softmax_renorm_bitonic(**tied)
    assert ids.tolist() == [[0, 1, 2, 3]]
    torch.testing.assert_close(weights, torch.full((1, 4), 1 / 12))


def test_gating_bitonic_rejects_bad_input(load_kernel):
    mod = load_kernel(GATING + ".py")
    with pytest.raises(ValueError, match="top_k"):
        mod.moe_topk_gating_softmax_renorm_bitonic(torch.zeros(2, 8), 9)
    with pytest.raises(ValueError, match="gating_output"):
        mod.moe_topk_gating_softmax_renorm_bitonic(torch.zeros(8), 2)


def test_unpermute_gather_refilled_inputs_give_the_new_answer(load_kernel):
    # the scorer refills the inputs with another seed's values at the same addresses
    mod = load_kernel(UNPERMUTE + ".py")
    shape = {"tokens": 2, "top_k": 1, "experts": 3, "hidden": 33, "block_size": 8}
    first, second = refilled_inputs(mod, shape, torch.float32)
    _check(mod.moe_unpermute_weighted_gather(**first), mod.reference(**second),
           *TOL[torch.float32])  # fmt: skip
