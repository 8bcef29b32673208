import pytest
import torch

from tests.reference_kernels.conftest import ON_GPU, TF32_TOL

TOL = {torch.float32: (1e-4, 1e-4), torch.float16: (1e-3, 1e-3), torch.bfloat16: (1e-2, 1e-2)}
if ON_GPU:  # fp32 tl.dot runs on TF32 tensor cores there
    TOL[torch.float32] = TF32_TOL


def _check(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype) -> None:
    atol, rtol = TOL[dtype]
    assert out.dtype == ref.dtype and out.shape == ref.shape
    torch.testing.assert_close(out.float(), ref.float(), atol=atol, rtol=rtol)
    assert (out.float() - ref.float()).norm() <= rtol * ref.float().norm() + atol


ALIGN_CASES = [
    {"tokens": 5, "top_k": 2, "experts": 4, "block_size": 16},
    {"tokens": 1, "top_k": 8, "experts": 128, "block_size": 128},
    {"tokens": 77, "top_k": 8, "experts": 6, "block_size": 16},  # 616 pairs: many chunks
    {"tokens": 37, "top_k": 3, "experts": 64, "block_size": 4},  # some experts empty
]


@pytest.mark.parametrize("shape", ALIGN_CASES)
def test_moe_align_block_size_sort_matches_exactly(load_kernel, shape):
    mod = load_kernel("triton/moe/moe_align_block_size_sort.py")
    inputs = mod.make_inputs(shape)
    for got, want in zip(
        mod.moe_align_block_size_sort(**inputs), mod.reference(**inputs), strict=True
    ):
        assert got.dtype == torch.int32
        assert torch.equal(got, want)


def test_moe_align_block_size_sort_tuning_extremes(load_kernel):
    mod = load_kernel("triton/moe/moe_align_block_size_sort.py")
    # 616 pairs: 20 chunks of 32 (> one scan tile) and ~160 blocks (> one block tile)
    inputs = mod.make_inputs({"tokens": 77, "top_k": 8, "experts": 16, "block_size": 4})
    want = mod.reference(**inputs)
    for params in [{"chunk": 128, "num_warps": 4}, {"chunk": 256, "num_warps": 8},
                   {"chunk": 32, "num_warps": 1}]:  # fmt: skip
        got = mod.moe_align_block_size_sort(**inputs, **params)
        assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))


def test_moe_align_block_size_sort_rejects_int64(load_kernel):
    mod = load_kernel("triton/moe/moe_align_block_size_sort.py")
    with pytest.raises(ValueError, match="int32"):
        mod.moe_align_block_size_sort(torch.zeros(3, 2, dtype=torch.int64), 16, 4)


MOE_CASES = [
    {"tokens": 5, "hidden": 64, "inter": 32, "experts": 4, "top_k": 2},
    {"tokens": 1, "hidden": 48, "inter": 40, "experts": 8, "top_k": 3},  # non-pow2 H and I
    {"tokens": 19, "hidden": 80, "inter": 24, "experts": 3, "top_k": 2},  # > one 16-row block
]
MOE_DTYPES = [torch.float32, torch.bfloat16]


@pytest.mark.parametrize("shape", MOE_CASES)
@pytest.mark.parametrize("dtype", MOE_DTYPES)
def test_fused_moe_sorted_grouped_matches_reference(load_kernel, shape, dtype):
    mod = load_kernel("triton/moe/fused_moe_sorted_grouped.py")
    inputs = mod.make_inputs(shape, dtype)
    inputs["topk_ids"][0, :] = inputs["topk_ids"][0, 0]  # a token routed twice to one expert
    _check(mod.fused_moe_sorted_grouped(**inputs), mod.reference(**inputs), dtype)


def test_fused_moe_sorted_grouped_tuning_extremes(load_kernel):
    mod = load_kernel("triton/moe/fused_moe_sorted_grouped.py")
    inputs = mod.make_inputs(MOE_CASES[2], torch.float32)
    ref = mod.reference(**inputs)
    for params in [
        {"block_m": 64, "block_n": 64, "block_k": 64, "num_warps": 4, "num_stages": 3},
        {"block_m": 128, "block_n": 128, "block_k": 128, "num_warps": 8, "num_stages": 4},
        {"block_m": 16, "block_n": 32, "block_k": 32, "num_stages": 2},
    ]:
        _check(mod.fused_moe_sorted_grouped(**inputs, **params), ref, torch.float32)


@pytest.mark.parametrize("shape", MOE_CASES)
@pytest.mark.parametrize("dtype", MOE_DTYPES)
def test_fused_moe_token_loop_matches_reference(load_kernel, shape, dtype):
    mod = load_kernel("triton/moe/fused_moe_token_loop.py")
    inputs = mod.make_inputs(shape, dtype)
    inputs["topk_ids"][0, :] = inputs["topk_ids"][0, 0]  # a token routed twice to one expert
    _check(mod.fused_moe_token_loop(**inputs), mod.reference(**inputs), dtype)


def test_fused_moe_token_loop_tuning_extremes(load_kernel):
    mod = load_kernel("triton/moe/fused_moe_token_loop.py")
    inputs = mod.make_inputs(MOE_CASES[0], torch.float32)
    ref = mod.reference(**inputs)
    for params in [
        {"block_n": 32, "block_k": 128, "num_warps": 4},
        {"block_n": 64, "block_k": 256, "num_warps": 8},
        {"block_n": 16, "block_k": 64, "num_warps": 2},
    ]:
        _check(mod.fused_moe_token_loop(**inputs, **params), ref, torch.float32)


@pytest.mark.parametrize("name", ["fused_moe_sorted_grouped", "fused_moe_token_loop"])
def test_fused_moe_rejects_bad_w2(load_kernel, name):
    mod = load_kernel(f"triton/moe/{name}.py")
    inputs = mod.make_inputs(MOE_CASES[0], torch.float32)
    inputs["w2"] = inputs["w2"][:, :, :-1]
    with pytest.raises(ValueError, match="w2"):
        getattr(mod, name)(**inputs)


FP8_MOE_CASES = [
    {"tokens": 5, "hidden": 256, "inter": 128, "experts": 4, "top_k": 2},
    {"tokens": 3, "hidden": 200, "inter": 96, "experts": 5, "top_k": 3},  # partial 128-groups
]


@pytest.mark.parametrize("shape", FP8_MOE_CASES)
def test_fp8_blockscale_fused_moe_matches_reference(load_kernel, shape):
    mod = load_kernel("triton/moe/fp8_blockscale_fused_moe.py")
    inputs = mod.make_inputs(shape, torch.bfloat16)
    _check(mod.fp8_blockscale_fused_moe(**inputs), mod.reference(**inputs), torch.bfloat16)


def test_fp8_blockscale_fused_moe_tuning_extremes(load_kernel):
    mod = load_kernel("triton/moe/fp8_blockscale_fused_moe.py")
    inputs = mod.make_inputs(FP8_MOE_CASES[1], torch.bfloat16)
    ref = mod.reference(**inputs)
    for params in [
        {"block_m": 64, "block_n": 128, "num_warps": 4, "num_stages": 3},
        {"block_m": 128, "block_n": 32, "num_warps": 8, "num_stages": 4},
        {"block_m": 16, "block_n": 64, "num_stages": 2},
    ]:
        _check(mod.fp8_blockscale_fused_moe(**inputs, **params), ref, torch.bfloat16)


def test_fp8_blockscale_fused_moe_rejects_bad_scale(load_kernel):
    mod = load_kernel("triton/moe/fp8_blockscale_fused_moe.py")
    inputs = mod.make_inputs(FP8_MOE_CASES[0], torch.bfloat16)
    inputs["w2_scale"] = inputs["w2_scale"][:, :1]
    with pytest.raises(ValueError, match="w2_scale"):
        mod.fp8_blockscale_fused_moe(**inputs)


GATING_CASES = [
    {"tokens": 7, "experts": 128, "top_k": 8},
    {"tokens": 3, "experts": 6, "top_k": 2, "renormalize": True},  # non-pow2 E
    {"tokens": 1, "experts": 256, "top_k": 8, "renormalize": True},
    {"tokens": 4, "experts": 20, "top_k": 3},  # non-pow2 k
]


@pytest.mark.parametrize("shape", GATING_CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_moe_topk_gating_softmax_matches_reference(load_kernel, shape, dtype):
    mod = load_kernel("triton/moe/moe_topk_gating_softmax.py")
    inputs = mod.make_inputs(shape, dtype)
    weights, ids = mod.moe_topk_gating_softmax(**inputs)
    ref_weights, ref_ids = mod.reference(**inputs)
    assert ids.dtype == torch.int32
    if dtype == torch.float32:
        assert torch.equal(ids, ref_ids)
    else:  # bf16 logits tie; any tied expert is right, so compare the chosen logits
        logits = inputs["gating_output"]
        assert torch.equal(logits.gather(1, ids.long()), logits.gather(1, ref_ids.long()))
        assert all(len(set(row)) == len(row) for row in ids.tolist())
    _check(weights, ref_weights, torch.float32)


def test_moe_topk_gating_softmax_tuning_extremes(load_kernel):
    mod = load_kernel("triton/moe/moe_topk_gating_softmax.py")
    inputs = mod.make_inputs(GATING_CASES[0], torch.float32)
    ref_weights, ref_ids = mod.reference(**inputs)
    for num_warps in (2, 8, 1):
        weights, ids = mod.moe_topk_gating_softmax(**inputs, num_warps=num_warps)
        assert torch.equal(ids, ref_ids)
        _check(weights, ref_weights, torch.float32)


def test_moe_topk_gating_softmax_rejects_large_k(load_kernel):
    mod = load_kernel("triton/moe/moe_topk_gating_softmax.py")
    with pytest.raises(ValueError, match="top_k"):
        mod.moe_topk_gating_softmax(torch.zeros(2, 16), 9)


SUM_CASES = [
    {"tokens": 5, "top_k": 8, "hidden": 64},
    {"tokens": 13, "top_k": 2, "hidden": 1000, "weighted": True},  # just under a 1024 tile
    {"tokens": 1, "top_k": 3, "hidden": 130, "weighted": True, "scale": 2.5},
]


@pytest.mark.parametrize("shape", SUM_CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_moe_sum_reduce_matches_reference(load_kernel, shape, dtype):
    mod = load_kernel("triton/moe/moe_sum_reduce.py")
    inputs = mod.make_inputs(shape, dtype)
    _check(mod.moe_sum_reduce(**inputs), mod.reference(**inputs), dtype)


def test_moe_sum_reduce_tuning_extremes(load_kernel):
    mod = load_kernel("triton/moe/moe_sum_reduce.py")
    inputs = mod.make_inputs({"tokens": 11, "top_k": 4, "hidden": 300, "weighted": True},
                             torch.float32)  # fmt: skip
    inputs["expert_outputs"] = inputs["expert_outputs"].transpose(0, 1).contiguous().transpose(0, 1)
    ref = mod.reference(**inputs)
    for params in [{"block_t": 4, "block_h": 512, "num_warps": 4},
                   {"block_t": 8, "block_h": 2048, "num_warps": 8},
                   {"block_t": 1, "block_h": 128, "num_warps": 2}]:  # fmt: skip
        _check(mod.moe_sum_reduce(**inputs, **params), ref, torch.float32)
