"""Top-k filter reference kernels (k3 set) against their PyTorch references, in the interpreter."""

import pytest
import torch

# small rows: the interpreter runs tl.sort's bitonic network element by element (~1 s per 1K logits)
CASES = [
    {"rows": 3, "vocab": 100, "top_k": 50},
    {"rows": 9, "vocab": 64, "top_k": 1},
    {"rows": 1, "vocab": 129, "top_k": 200},  # k > V keeps everything
    {"rows": 2, "vocab": 70, "top_k": 70},
]
KERNELS = {
    "topk_filter_bisect": [{"block_v": 1024, "num_warps": 4}, {"block_v": 4096, "num_warps": 16}],
    "topk_filter_sorted_block": [{"block_m": 1, "num_warps": 8}, {"block_m": 8, "num_warps": 16}],
}


def _check(out, ref):
    # the mask must match exactly; kept values are copies
    assert out.shape == ref.shape and out.dtype == ref.dtype
    assert torch.equal(torch.isinf(out), torch.isinf(ref))
    assert torch.equal(out, ref)


@pytest.mark.parametrize("shape", CASES, ids=str)
@pytest.mark.parametrize("name", list(KERNELS))
def test_topk_filter_matches_reference(load_kernel, name, shape):
    mod = load_kernel(f"triton/sampling/{name}.py")
    inputs = mod.make_inputs(shape, torch.float32)
    _check(getattr(mod, name)(**inputs), mod.reference(**inputs))


@pytest.mark.parametrize("which", [0, 1])
@pytest.mark.parametrize("name", list(KERNELS))
def test_topk_filter_extreme_tuning(load_kernel, name, which):
    mod = load_kernel(f"triton/sampling/{name}.py")
    inputs = mod.make_inputs({"rows": 2, "vocab": 40, "top_k": 7}, torch.float32)
    _check(getattr(mod, name)(**inputs, **KERNELS[name][which]), mod.reference(**inputs))


@pytest.mark.parametrize("name", list(KERNELS))
def test_topk_filter_keeps_ties_and_negatives(load_kernel, name):
    # few distinct values: many ties at the threshold; all-negative rows exercise the key flip
    mod = load_kernel(f"triton/sampling/{name}.py")
    logits = torch.randint(-4, 4, (3, 60)).float() * 0.5
    logits[1] = -torch.rand(60) - 1.0
    out = getattr(mod, name)(logits, top_k=10)
    ref = mod.reference(logits, top_k=10)
    _check(out, ref)
    assert (~torch.isinf(out)).sum(dim=-1).min() >= 10


@pytest.mark.parametrize("block_v", [None, 256])
def test_topk_filter_bisect_wide_rows(load_kernel, block_v):
    # 1000 wide: one chunk by default, four chunks with a ragged tail at block_v=256
    mod = load_kernel("triton/sampling/topk_filter_bisect.py")
    inputs = mod.make_inputs({"rows": 2, "vocab": 1000, "top_k": 50}, torch.float32)
    _check(mod.topk_filter_bisect(**inputs, block_v=block_v), mod.reference(**inputs))


def test_topk_filter_sorted_block_rejects_wide_rows(load_kernel):
    mod = load_kernel("triton/sampling/topk_filter_sorted_block.py")
    with pytest.raises(ValueError, match="bisect"):
        mod.topk_filter_sorted_block(torch.zeros(1, 20000))
