"""Reference kernels of the MoE family, batch 6: atrex30 moe operators in new designs.

Each kernel runs under Triton's interpreter on small shapes against its ``reference``.
"""

import pytest
import torch

from tests.reference_kernels.conftest import ON_GPU, TF32_TOL

TOL = {torch.float32: (1e-4, 1e-4), torch.bfloat16: (1e-2, 1e-2)}
if ON_GPU:  # fp32 tl.dot runs on TF32 tensor cores there
    TOL[torch.float32] = TF32_TOL
MOE = "triton/moe/"


def _check(out: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float) -> None:
    """Elementwise closeness plus a whole-output relative L2 bound (a zero output fails it)."""
    assert out.dtype == ref.dtype and out.shape == ref.shape
    torch.testing.assert_close(out.float(), ref.float(), atol=atol, rtol=rtol)
    assert ref.float().norm() > 0
    assert (out.float() - ref.float()).norm() <= rtol * ref.float().norm() + atol


# ------------------------------------------------------------------ moe_sum_reduce
SUM_CASES = [
    {"tokens": 5, "top_k": 8, "hidden": 96},
    {"tokens": 3, "top_k": 3, "hidden": 300, "weighted": True, "scale": 2.5},  # 3 loop steps
]


@pytest.mark.parametrize("shape", SUM_CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_moe_sum_reduce_rowwise_vec_matches_reference(load_kernel, shape, dtype):
    mod = load_kernel(MOE + "moe_sum_reduce_rowwise_vec.py")
    inputs = mod.make_inputs(shape, dtype)
    _check(mod.moe_sum_reduce_rowwise_vec(**inputs, block_h=128), mod.reference(**inputs),
           *TOL[dtype])  # fmt: skip


def test_moe_sum_reduce_rowwise_vec_tuning_extremes(load_kernel):
    mod = load_kernel(MOE + "moe_sum_reduce_rowwise_vec.py")
    inputs = mod.make_inputs(
        {"tokens": 2, "top_k": 4, "hidden": 130, "weighted": True}, torch.float32
    )
    ref = mod.reference(**inputs)
    for params in [{"block_h": 4096, "num_warps": 8}, {"block_h": 128, "num_warps": 1}]:
        _check(mod.moe_sum_reduce_rowwise_vec(**inputs, **params), ref, *TOL[torch.float32])


def test_moe_sum_reduce_rowwise_vec_rejects_bad_input(load_kernel):
    mod = load_kernel(MOE + "moe_sum_reduce_rowwise_vec.py")
    with pytest.raises(ValueError, match="topk_weights"):
        mod.moe_sum_reduce_rowwise_vec(torch.zeros(2, 3, 8), torch.zeros(2, 4))
    with pytest.raises(ValueError, match="block_h"):
        mod.moe_sum_reduce_rowwise_vec(torch.zeros(2, 3, 8), block_h=96)


# ------------------------------------------------------------------ moe_topk_gating_softmax
GATING_KERNELS = ["moe_topk_gating_softmax_sorted", "moe_topk_gating_softmax_rowwise_iterative"]
GATING_CASES = [
    {"tokens": 7, "experts": 24, "top_k": 5},  # non-pow2 E and k
    {"tokens": 3, "experts": 160, "top_k": 8, "renormalize": True},  # two 128-wide chunks
    {"tokens": 2, "experts": 16, "top_k": 16},  # k = E: the whole row, sorted
]


@pytest.mark.parametrize("shape", GATING_CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", GATING_KERNELS)
def test_moe_topk_gating_softmax_matches_reference(load_kernel, name, dtype, shape):
    mod = load_kernel(f"{MOE}{name}.py")
    inputs = mod.make_inputs(shape, dtype)
    weights, ids = getattr(mod, name)(**inputs)
    ref_weights, ref_ids = mod.reference(**inputs)
    assert ids.dtype == torch.int32
    if dtype == torch.float32:
        assert torch.equal(ids, ref_ids)
    else:  # bf16 logits tie; any tied expert is right, so compare the chosen logits
        logits = inputs["gating_output"]
        assert torch.equal(logits.gather(1, ids.long()), logits.gather(1, ref_ids.long()))
        assert all(len(set(row)) == len(row) for row in ids.tolist())
    _check(weights, ref_weights, *TOL[torch.float32])


@pytest.mark.parametrize("name", GATING_KERNELS)
def test_moe_topk_gating_softmax_breaks_ties_to_the_lower_id(load_kernel, name):
    mod = load_kernel(f"{MOE}{name}.py")
    logits = torch.tensor([[0.0, 2.0, 1.0, 2.0, 1.0, -1.0]])
    weights, ids = getattr(mod, name)(logits, 4)
    assert ids.tolist() == [[1, 3, 2, 4]]
    _check(weights, torch.softmax(logits, -1)[:, [1, 3, 2, 4]], *TOL[torch.float32])


@pytest.mark.parametrize("name", GATING_KERNELS)
def test_moe_topk_gating_softmax_tuning_extremes(load_kernel, name):
    mod = load_kernel(f"{MOE}{name}.py")
    inputs = mod.make_inputs(GATING_CASES[1], torch.float32)  # 160 experts
    ref_weights, ref_ids = mod.reference(**inputs)
    extremes = [{"num_warps": 1}, {"num_warps": 8}]
    if name.endswith("iterative"):  # chunk 32: 5 chunks; 1024: the whole row at once
        extremes = [{"block_c": 32, "num_warps": 1}, {"block_c": 1024, "num_warps": 8}]
    for params in extremes:
        weights, ids = getattr(mod, name)(**inputs, **params)
        assert torch.equal(ids, ref_ids)
        _check(weights, ref_weights, *TOL[torch.float32])


@pytest.mark.parametrize("name", GATING_KERNELS)
def test_moe_topk_gating_softmax_rejects_bad_k(load_kernel, name):
    mod = load_kernel(f"{MOE}{name}.py")
    with pytest.raises(ValueError, match="top_k"):
        getattr(mod, name)(torch.zeros(2, 16), 17)
    with pytest.raises(ValueError, match="gating_output"):
        getattr(mod, name)(torch.zeros(2, 16, dtype=torch.int32), 2)


def test_moe_topk_gating_softmax_rowwise_iterative_caps_k(load_kernel):
    mod = load_kernel(MOE + "moe_topk_gating_softmax_rowwise_iterative.py")
    with pytest.raises(ValueError, match="32"):
        mod.moe_topk_gating_softmax_rowwise_iterative(torch.zeros(1, 64), 33)


# ------------------------------------------------------------------ moe_count_and_sort
SORT_KERNELS = [
    "moe_count_and_sort_single_program",
    "moe_count_and_sort_two_kernel",
    "moe_count_and_sort_sort_based",
]
SORT_CASES = [
    {"tokens": 13, "top_k": 4, "num_experts": 10},
    {"tokens": 1, "top_k": 8, "num_experts": 128},
    {"tokens": 33, "top_k": 8, "num_experts": 6},  # 264 pairs: several chunks
]


@pytest.mark.parametrize("shape", SORT_CASES)
@pytest.mark.parametrize("name", SORT_KERNELS)
def test_moe_count_and_sort_matches_exactly(load_kernel, name, shape):
    mod = load_kernel(f"{MOE}{name}.py")
    inputs = mod.make_inputs(shape)
    got = getattr(mod, name)(**inputs)
    for g, want in zip(got, mod.reference(**inputs), strict=True):
        assert g.dtype == torch.int32
        assert torch.equal(g, want)


@pytest.mark.parametrize("name", SORT_KERNELS)
def test_moe_count_and_sort_tuning_extremes(load_kernel, name):
    mod = load_kernel(f"{MOE}{name}.py")
    inputs = mod.make_inputs({"tokens": 37, "top_k": 3, "num_experts": 64})  # some experts empty
    want = mod.reference(**inputs)
    extremes = [{"num_warps": 1}, {"num_warps": 8}]
    if name != "moe_count_and_sort_single_program":
        top = 256 if name == "moe_count_and_sort_two_kernel" else 512
        extremes = [{"chunk": 32, "num_warps": 1}, {"chunk": top, "num_warps": 8}]
    for params in extremes:
        got = getattr(mod, name)(**inputs, **params)
        assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True)), params


@pytest.mark.parametrize("name", SORT_KERNELS)
def test_moe_count_and_sort_rejects_int64(load_kernel, name):
    mod = load_kernel(f"{MOE}{name}.py")
    with pytest.raises(ValueError, match="int32"):
        getattr(mod, name)(torch.zeros(3, 2, dtype=torch.int64), 4)
    with pytest.raises(ValueError, match="num_experts"):
        getattr(mod, name)(torch.zeros(3, 2, dtype=torch.int32), 0)


def test_moe_count_and_sort_single_program_refuses_large_batches(load_kernel):
    mod = load_kernel(MOE + "moe_count_and_sort_single_program.py")
    with pytest.raises(ValueError, match="8192"):
        mod.moe_count_and_sort_single_program(torch.zeros(1025, 8, dtype=torch.int32), 4)


# ------------------------------------------------------------------ fused_moe (fp32 output)
MOE_CASES = [
    {"tokens": 5, "hidden": 64, "inter": 32, "experts": 4, "top_k": 2},
    {"tokens": 19, "hidden": 80, "inter": 24, "experts": 3, "top_k": 2},  # > one block, tails
]


@pytest.mark.parametrize("shape", MOE_CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_moe_persistent_grouped_matches_reference(load_kernel, shape, dtype):
    mod = load_kernel(MOE + "fused_moe_persistent_grouped.py")
    inputs = mod.make_inputs(shape, dtype)
    # fp32 output and fp32 intermediates whatever the input dtype: fp32's tolerance
    _check(mod.fused_moe_persistent_grouped(**inputs), mod.reference(**inputs),
           *TOL[torch.float32])  # fmt: skip


def test_fused_moe_persistent_grouped_tuning_extremes(load_kernel):
    mod = load_kernel(MOE + "fused_moe_persistent_grouped.py")
    inputs = mod.make_inputs(MOE_CASES[1], torch.bfloat16)
    ref = mod.reference(**inputs)
    for params in [
        {"block_m": 64, "block_n": 64, "block_k": 64, "programs_per_sm": 4, "num_warps": 8},
        {"block_m": 16, "block_n": 16, "block_k": 16, "programs_per_sm": 1, "num_warps": 2},
    ]:
        _check(mod.fused_moe_persistent_grouped(**inputs, **params), ref, *TOL[torch.float32])


def test_fused_moe_persistent_grouped_rejects_bad_input(load_kernel):
    mod = load_kernel(MOE + "fused_moe_persistent_grouped.py")
    inputs = mod.make_inputs(MOE_CASES[0], torch.float32)
    with pytest.raises(ValueError, match="w2"):
        mod.fused_moe_persistent_grouped(**{**inputs, "w2": inputs["w2"][:, :, :-1]})
    with pytest.raises(ValueError, match="block_m"):
        mod.fused_moe_persistent_grouped(**inputs, block_m=8)


# ------------------------------------------------------------------ fp8_blockscale_fused_moe
FP8_KERNELS = [
    "fp8_blockscale_fused_moe_token_loop",
    "fp8_blockscale_fused_moe_expert_stationary",
    "fp8_blockscale_fused_moe_two_kernel",
]
FP8_CASES = [
    {"tokens": 3, "hidden": 200, "inter": 96, "experts": 5, "top_k": 3},  # partial groups
    {"tokens": 1, "hidden": 256, "inter": 128, "experts": 8, "top_k": 4},  # decode
]


def _fp8_tol(name: str, ref: torch.Tensor) -> tuple[float, float]:
    """bf16's tolerance, or op.yaml's (atol 0.25 x RMS, rtol 5e-2) for the fp8 activation."""
    if name.endswith("two_kernel"):
        return 0.25 * ref.float().pow(2).mean().sqrt().item(), 5e-2
    return TOL[torch.bfloat16]


@pytest.mark.parametrize("shape", FP8_CASES)
@pytest.mark.parametrize("name", FP8_KERNELS)
def test_fp8_blockscale_fused_moe_matches_reference(load_kernel, name, shape):
    mod = load_kernel(f"{MOE}{name}.py")
    inputs = mod.make_inputs(shape)
    ref = mod.reference(**inputs)
    _check(getattr(mod, name)(**inputs), ref, *_fp8_tol(name, ref))


@pytest.mark.parametrize("name", FP8_KERNELS)
def test_fp8_blockscale_fused_moe_tuning_extremes(load_kernel, name):
    mod = load_kernel(f"{MOE}{name}.py")
    inputs = mod.make_inputs(FP8_CASES[1])
    ref = mod.reference(**inputs)
    extremes = [{"block_n": 16, "num_warps": 2}, {"block_n": 128, "num_warps": 8}]
    if name.endswith("expert_stationary"):
        extremes = [{"block_m": 64, "block_n": 128, "num_warps": 8},
                    {"block_m": 16, "block_n": 32, "num_warps": 2}]  # fmt: skip
    for params in extremes:
        _check(getattr(mod, name)(**inputs, **params), ref, *_fp8_tol(name, ref))


@pytest.mark.parametrize("name", FP8_KERNELS)
def test_fp8_blockscale_fused_moe_rejects_bad_scale(load_kernel, name):
    mod = load_kernel(f"{MOE}{name}.py")
    inputs = mod.make_inputs(FP8_CASES[0])
    with pytest.raises(ValueError, match="fc2_scale"):
        getattr(mod, name)(**{**inputs, "fc2_scale": inputs["fc2_scale"][:, :1]})
    with pytest.raises(ValueError, match="e4m3fn"):
        getattr(mod, name)(**{**inputs, "w1": inputs["w1"].to(torch.bfloat16)})
