"""topk_filter_multi_cta_radix (one launch, rows split over programs) against its PyTorch reference.

In the interpreter programs run one after another, so the last program of a row is also the last
to arrive; the ``gpu`` case runs the real race on decode-sized rows.
"""

import pytest
import torch

TOPK = "triton/sampling/topk_filter_multi_cta_radix.py"
# small rows keep the interpreter fast: one program per row, 5 programs per row, and ties
CASES = [
    {"rows": 3, "vocab": 1001, "top_k": 50},
    {"rows": 2, "vocab": 9000, "top_k": 50},
    {"rows": 2, "vocab": 5000, "top_k": 7, "ties": True},  # the k-th value is tied: all kept
]


def _check(out, ref):
    # exact: kept entries bit-identical, -inf at exactly the same places
    assert out.shape == ref.shape and out.dtype == torch.float32
    assert torch.equal(torch.isinf(out), torch.isinf(ref))
    assert torch.equal(out, ref)


@pytest.mark.parametrize("shape", CASES, ids=str)
def test_topk_filter_multi_cta_radix_matches_reference(load_kernel, shape):
    mod = load_kernel(TOPK)
    inputs = mod.make_inputs(shape, torch.float32)
    out = mod.topk_filter_multi_cta_radix(**inputs)
    _check(out, mod.reference(**inputs))
    if not shape.get("ties"):
        assert (torch.isfinite(out).sum(dim=1) == shape["top_k"]).all()


def test_topk_filter_multi_cta_radix_ties_zeros_and_short_rows(load_kernel):
    mod = load_kernel(TOPK)
    launch = mod.topk_filter_multi_cta_radix
    # every logit tied: all are candidates, more than block_c, so the streamed select runs
    logits = torch.full((2, 600), 0.5)
    logits[1] = -torch.rand(600) - 1.0  # all negative: the key flip
    _check(launch(logits, top_k=10, block_v=128, block_c=256), mod.reference(logits, top_k=10))
    # -0.0 and 0.0 compare equal: a k-th value of 0.0 keeps both, as the reference does
    logits = torch.tensor([[1.0, 0.0, -0.0, -1.0, 2.0] * 60])
    _check(launch(logits, top_k=130, block_v=64), mod.reference(logits, top_k=130))
    logits = torch.randn(2, 40)
    assert torch.equal(launch(logits, top_k=40), logits)  # k >= V: rows copied whole


def test_topk_filter_multi_cta_radix_extreme_tuning(load_kernel):
    # 17 programs per row with a ragged tail; k beyond a chunk's width
    mod = load_kernel(TOPK)
    inputs = mod.make_inputs({"rows": 2, "vocab": 2100, "top_k": 150}, torch.float32)
    out = mod.topk_filter_multi_cta_radix(**inputs, block_v=128, num_warps=4, block_c=2048)
    _check(out, mod.reference(**inputs))


def test_topk_filter_multi_cta_radix_validates_inputs(load_kernel):
    mod = load_kernel(TOPK)
    logits = torch.randn(2, 300)
    with pytest.raises(ValueError, match="fp32"):
        mod.topk_filter_multi_cta_radix(logits.double())
    with pytest.raises(ValueError, match="contiguous"):
        mod.topk_filter_multi_cta_radix(logits.t())
    with pytest.raises(ValueError, match="top_k"):
        mod.topk_filter_multi_cta_radix(logits, top_k=0)
    with pytest.raises(ValueError, match="block_v"):
        mod.topk_filter_multi_cta_radix(logits, block_v=1000)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "shape",
    [
        {"rows": 1, "vocab": 151936, "top_k": 50},
        {"rows": 4, "vocab": 152064, "top_k": 50},
        {"rows": 3, "vocab": 128256, "top_k": 50, "ties": True},
        {"rows": 64, "vocab": 4096, "top_k": 50},
    ],
    ids=str,
)
def test_topk_filter_multi_cta_radix_decode_rows_gpu(load_kernel, shape):
    # many programs per row racing on the counters: repeat to catch an ordering bug
    mod = load_kernel(TOPK)
    inputs = mod.make_inputs(shape, torch.float32, device="cuda")
    ref = mod.reference(**inputs)
    for _ in range(20):
        _check(mod.topk_filter_multi_cta_radix(**inputs), ref)
