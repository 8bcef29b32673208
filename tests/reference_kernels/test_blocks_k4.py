"""Building-block reference kernels (k4 set) against their PyTorch references, in the interpreter.

Sampling (greedy argmax, Gumbel-max, top-p, min-p), scans, sorts, embedding lookups and
full-tensor reductions. Index outputs and copies compare exactly; float math with per-dtype
tolerances plus a whole-output norm check, so a zero output always fails.
"""

import pytest
import torch

F32, BF16 = torch.float32, torch.bfloat16
# bf16: the interpreter truncates fp32 -> bf16 casts, so allow about two bf16 ulps
TOL = {F32: (1e-4, 1e-4), BF16: (2e-2, 2e-2)}

# name -> folder, smoke cases, dtypes, exact comparison, extreme tuning (shape, [low, high])
KERNELS: dict[str, dict] = {
    "greedy_argmax_rowwise": {
        "family": "sampling",
        "cases": [{"rows": 3, "vocab": 1000}, {"rows": 9, "vocab": 64}, {"rows": 1, "vocab": 129}],
        "dtypes": [F32, BF16],
        "exact": True,
        "extreme": ({"rows": 3, "vocab": 600}, [{"block_v": 256, "num_warps": 1},
                                                {"block_v": 4096, "num_warps": 16}]),
    },
    "gumbel_max_sample": {
        "family": "sampling",
        "cases": [{"rows": 3, "vocab": 1000}, {"rows": 9, "vocab": 64},
                  {"rows": 2, "vocab": 129, "temperature": 2.0}],
        "dtypes": [F32, BF16],
        "exact": True,
        "extreme": ({"rows": 3, "vocab": 600}, [{"block_v": 256, "num_warps": 1},
                                                {"block_v": 4096, "num_warps": 16}]),
    },
    "top_p_filter_sorted": {
        "family": "sampling",
        "cases": [{"rows": 3, "vocab": 1000}, {"rows": 9, "vocab": 64, "top_p": 0.5},
                  {"rows": 2, "vocab": 129, "top_p": 1.0}],
        "dtypes": [F32, BF16],
        "exact": True,  # kept entries are copies; the cut must match
        "extreme": ({"rows": 3, "vocab": 600}, [{"block_v": 256, "num_warps": 1},
                                                {"block_v": 4096, "num_warps": 16}]),
    },
    "min_p_filter": {
        "family": "sampling",
        "cases": [{"rows": 3, "vocab": 1000}, {"rows": 9, "vocab": 64, "min_p": 0.3},
                  {"rows": 2, "vocab": 129, "min_p": 0.0}],
        "dtypes": [F32, BF16],
        "exact": True,
        "extreme": ({"rows": 3, "vocab": 600}, [{"block_v": 256, "num_warps": 1},
                                                {"block_v": 4096, "num_warps": 16}]),
    },
    "cumsum_rowwise": {
        "family": "scan",
        "cases": [{"rows": 3, "cols": 1000}, {"rows": 9, "cols": 64}, {"rows": 1, "cols": 129}],
        "dtypes": [F32, BF16, torch.int32],
        "exact": False,
        "extreme": ({"rows": 3, "cols": 600}, [{"block_n": 256, "num_warps": 1},
                                               {"block_n": 4096, "num_warps": 16}]),
    },
    "segmented_cumsum_varlen": {
        "family": "scan",
        "cases": [{"seqlens": [5, 0, 70, 33], "heads": 3}, {"seqlens": [100, 1], "heads": 0},
                  {"seqlens": [17], "heads": 40}],
        "dtypes": [F32, BF16, torch.int32],
        "exact": False,
        "extreme": ({"seqlens": [40, 0, 150], "heads": 9},
                    [{"block_l": 16, "block_h": 1, "num_warps": 1},
                     {"block_l": 256, "block_h": 128, "num_warps": 8}]),
    },
    "bitonic_topk_small_k": {
        "family": "sort",
        "cases": [{"rows": 3, "cols": 200, "k": 8}, {"rows": 2, "cols": 50, "k": 50},
                  {"rows": 4, "cols": 5, "k": 1}],
        "dtypes": [F32, BF16],
        "exact": True,
        "extreme": ({"rows": 1, "cols": 150, "k": 20}, [{"block_n": 64, "num_warps": 1},
                                                        {"block_n": 1024, "num_warps": 8}]),
    },
    "argsort_rowwise_packed": {
        "family": "sort",
        "cases": [{"rows": 3, "cols": 100}, {"rows": 5, "cols": 33, "descending": True},
                  {"rows": 1, "cols": 256}],
        "dtypes": [F32, BF16],
        "exact": True,
        "extreme": ({"rows": 9, "cols": 40}, [{"block_m": 1, "num_warps": 1},
                                              {"block_m": 8, "num_warps": 8}]),
    },
    "embedding_lookup_rowwise": {
        "family": "embedding",
        "cases": [{"tokens": 7, "vocab": 100, "hidden": 300},
                  {"tokens": 33, "vocab": 50, "hidden": 64},
                  {"tokens": 1, "vocab": 3, "hidden": 129}],
        "dtypes": [F32, BF16],
        "exact": True,
        "extreme": ({"tokens": 5, "vocab": 20, "hidden": 600},
                    [{"block_h": 256, "num_warps": 1}, {"block_h": 4096, "num_warps": 8}]),
    },
    "embedding_lookup_vocab_parallel": {
        "family": "embedding",
        "cases": [{"tokens": 7, "vocab": 100, "hidden": 300},
                  {"tokens": 33, "vocab": 50, "hidden": 64, "shards": 3, "rank": 2},
                  {"tokens": 9, "vocab": 30, "hidden": 129, "shards": 4, "rank": 1}],
        "dtypes": [F32, BF16],
        "exact": True,
        "extreme": ({"tokens": 21, "vocab": 40, "hidden": 300, "shards": 2, "rank": 1},
                    [{"block_t": 1, "block_h": 128, "num_warps": 1},
                     {"block_t": 16, "block_h": 2048, "num_warps": 8}]),
    },
    "sum_two_pass_partials": {
        "family": "reduction",
        "cases": [{"size": [3, 1000]}, {"size": [17]}, {"size": [2, 3, 700]}],
        "dtypes": [F32, BF16],
        "exact": False,
        "extreme": ({"size": [5000]}, [{"block": 1024, "num_partials": 1, "num_warps": 2},
                                       {"block": 8192, "num_partials": 1024, "num_warps": 16}]),
    },
    "max_abs_atomic": {
        "family": "reduction",
        "cases": [{"size": [3, 1000]}, {"size": [17]}, {"size": [2, 3, 700]}],
        "dtypes": [F32, BF16],
        "exact": True,  # a max is exact in any order
        "extreme": ({"size": [5000]}, [{"block": 1024, "programs_per_sm": 1, "num_warps": 2},
                                       {"block": 8192, "programs_per_sm": 8, "num_warps": 16}]),
    },
}  # fmt: skip


def _check(out, ref, exact):
    outs = out if isinstance(out, tuple) else (out,)
    refs = ref if isinstance(ref, tuple) else (ref,)
    for o, r in zip(outs, refs, strict=True):
        assert o.dtype == r.dtype and o.shape == r.shape, (o.dtype, o.shape, r.dtype, r.shape)
        if exact or not (r.is_floating_point()):
            assert torch.equal(o, r)
            continue
        atol, rtol = TOL[r.dtype]
        torch.testing.assert_close(o.float(), r.float(), atol=atol, rtol=rtol)
        # a whole-output check so a zero output cannot pass
        assert (o.float() - r.float()).norm() <= rtol * r.float().norm() + atol


def _module(load_kernel, name):
    return load_kernel(f"triton/{KERNELS[name]['family']}/{name}.py")


def _run(load_kernel, name, shape, dtype, **tuning):
    mod = _module(load_kernel, name)
    inputs = mod.make_inputs(shape, dtype)
    out = getattr(mod, name)(**inputs, **tuning)
    ref = mod.reference(**inputs)
    _check(out, ref, KERNELS[name]["exact"])
    return out, ref, inputs


CASES = [
    pytest.param(name, shape, dtype, id=f"{name}-{shape}-{str(dtype)[6:]}")
    for name, spec in KERNELS.items()
    for shape in spec["cases"]
    for dtype in spec["dtypes"]
]


@pytest.mark.parametrize(("name", "shape", "dtype"), CASES)
def test_block_kernel_matches_reference(load_kernel, name, shape, dtype):
    _run(load_kernel, name, shape, dtype)


@pytest.mark.parametrize("which", [0, 1])
@pytest.mark.parametrize("name", list(KERNELS))
def test_block_kernel_extreme_tuning(load_kernel, name, which):
    shape, configs = KERNELS[name]["extreme"]
    _run(load_kernel, name, shape, F32, **configs[which])


# one bad call per kernel: (name, inputs builder, expected message fragment)
BAD_CALLS = [
    ("greedy_argmax_rowwise", lambda: {"logits": torch.zeros(4, dtype=torch.int32)}, "logits"),
    ("gumbel_max_sample",
     lambda: {"logits": torch.zeros(2, 8), "uniform_noise": torch.rand(2, 8),
              "temperature": 0.0}, "temperature"),
    ("top_p_filter_sorted", lambda: {"sorted_probs": torch.zeros(2, 8), "top_p": 0.0}, "top_p"),
    ("min_p_filter", lambda: {"probs": torch.zeros(2, 8), "min_p": 1.5}, "min_p"),
    ("cumsum_rowwise", lambda: {"x": torch.tensor(1.0)}, "at least 1D"),
    ("segmented_cumsum_varlen",
     lambda: {"x": torch.zeros(6), "cu_seqlens": torch.tensor([0.0, 6.0])}, "cu_seqlens"),
    ("bitonic_topk_small_k", lambda: {"x": torch.zeros(2, 100), "k": 65}, "k must be"),
    ("argsort_rowwise_packed", lambda: {"x": torch.zeros(1, 1025)}, "1024"),
    ("embedding_lookup_rowwise",
     lambda: {"ids": torch.zeros(3), "weight": torch.zeros(4, 8)}, "ids"),
    ("embedding_lookup_vocab_parallel",
     lambda: {"ids": torch.zeros(3, dtype=torch.int64), "weight": torch.zeros(4, 8),
              "vocab_start_index": 8, "vocab_end_index": 16}, "shard range"),
    ("sum_two_pass_partials", lambda: {"x": torch.zeros(8), "num_partials": 2048},
     "num_partials"),
    ("max_abs_atomic", lambda: {"x": torch.zeros(8, dtype=torch.int64)}, "bf16/fp16/fp32"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "make", "match"), BAD_CALLS, ids=[b[0] for b in BAD_CALLS])
def test_block_kernel_rejects_bad_input(load_kernel, name, make, match):
    mod = _module(load_kernel, name)
    with pytest.raises(ValueError, match=match):
        getattr(mod, name)(**make())


def test_bad_calls_cover_every_kernel():
    assert sorted(b[0] for b in BAD_CALLS) == sorted(KERNELS)


# --- kernel-specific behaviour -------------------------------------------------------------------


def test_greedy_argmax_ties_go_to_lowest_index(load_kernel):
    mod = _module(load_kernel, "greedy_argmax_rowwise")
    logits = torch.zeros(4, 600)
    logits[0, [300, 520]] = 5.0  # maxima in two chunks, the later one in a lower lane
    logits[1, [266, 10]] = 5.0  # the same lane of two chunks
    logits[2] = float("-inf")  # all -inf: index 0, as torch.argmax
    logits[3, 599] = 1.0  # the ragged tail of the last chunk
    out = mod.greedy_argmax_rowwise(logits, block_v=256)
    assert out.tolist() == [300, 10, 0, 599]
    assert torch.equal(out, mod.reference(logits))


def test_gumbel_max_sample_follows_softmax(load_kernel):
    # 400 draws of one 4-way distribution: frequencies within ~4 sigma of the softmax
    mod = _module(load_kernel, "gumbel_max_sample")
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]]).repeat(400, 1)
    noise = torch.rand(400, 4)
    out = mod.gumbel_max_sample(logits, noise, temperature=1.0)
    assert torch.equal(out, mod.reference(logits, noise, 1.0))
    freq = torch.bincount(out, minlength=4).float() / 400
    torch.testing.assert_close(freq, torch.softmax(logits[0], -1), atol=0.1, rtol=0)


def test_gumbel_max_sample_cold_temperature_is_greedy(load_kernel):
    mod = _module(load_kernel, "gumbel_max_sample")
    inputs = mod.make_inputs({"rows": 5, "vocab": 300}, F32)
    out = mod.gumbel_max_sample(inputs["logits"], inputs["uniform_noise"], temperature=1e-4)
    assert torch.equal(out, torch.argmax(inputs["logits"], dim=-1))


@pytest.mark.parametrize("dtype", [F32, BF16], ids=str)
def test_top_p_filter_cuts_inside_the_row_and_skips_the_tail(load_kernel, dtype):
    # peaked rows: the cut falls in the first 64-wide chunk, later chunks take the no-load path
    mod = _module(load_kernel, "top_p_filter_sorted")
    logits = torch.randn(3, 1000) * 6.0
    probs = torch.softmax(logits, -1).sort(dim=-1, descending=True).values.to(dtype)
    out = mod.top_p_filter_sorted(probs, 0.8, block_v=64)
    _check(out, mod.reference(probs, 0.8), exact=True)
    kept = (out > 0).sum(dim=-1)
    assert (kept >= 1).all() and (kept < 64).all()
    assert (out.float().sum(-1) >= 0.8 - 1e-2).all()  # the kept mass reaches top_p


def test_min_p_filter_keeps_only_the_max_at_one(load_kernel):
    mod = _module(load_kernel, "min_p_filter")
    probs = torch.softmax(torch.randn(4, 300), -1)
    out = mod.min_p_filter(probs, 1.0, block_v=128)
    assert torch.equal((out > 0).sum(-1), torch.ones(4, dtype=torch.int64))
    assert torch.equal(out.argmax(-1), probs.argmax(-1))
    cut = mod.min_p_filter(probs, 0.2)
    assert 0 < (cut > 0).sum() < probs.numel()  # the default path drops some and keeps some
    _check(cut, mod.reference(probs, 0.2), exact=True)


@pytest.mark.parametrize("dtype", [torch.int64, F32], ids=str)
def test_cumsum_rowwise_keeps_leading_dims(load_kernel, dtype):
    mod = _module(load_kernel, "cumsum_rowwise")
    x = torch.randint(-5, 5, (2, 3, 300)).to(dtype)
    out = mod.cumsum_rowwise(x, block_n=128)  # three chunks, ragged tail
    assert out.shape == (2, 3, 300)
    _check(out, mod.reference(x), exact=dtype == torch.int64)


def test_segmented_cumsum_restarts_at_every_segment(load_kernel):
    mod = _module(load_kernel, "segmented_cumsum_varlen")
    x = torch.ones(10, dtype=torch.int32)
    cu = torch.tensor([0, 3, 3, 10], dtype=torch.int64)
    out = mod.segmented_cumsum_varlen(x, cu, block_l=4)
    assert out.tolist() == [0, 1, 2, 0, 1, 2, 3, 4, 5, 6]


def test_argsort_handles_signed_zero_nan_and_inf(load_kernel):
    mod = _module(load_kernel, "argsort_rowwise_packed")
    row = [0.0, -0.0, float("nan"), 1.0, float("-inf"), float("inf"), -0.0, -2.5, float("nan")]
    x = torch.tensor([row, row[::-1]])
    for descending in (False, True):
        values, indices = mod.argsort_rowwise_packed(x, descending)
        ref_values, ref_indices = mod.reference(x, descending)
        assert torch.equal(indices, ref_indices)
        torch.testing.assert_close(values, ref_values, atol=0, rtol=0, equal_nan=True)
        assert torch.equal(torch.signbit(values), torch.signbit(ref_values))  # values gathered


def test_bitonic_topk_ties_and_largest_k(load_kernel):
    mod = _module(load_kernel, "bitonic_topk_small_k")
    x = torch.randint(0, 4, (2, 100)).float()  # many ties: lower columns must come first
    for k in (1, 64):
        _check(mod.bitonic_topk_small_k(x, k, block_n=32), mod.reference(x, k), exact=True)


def test_embedding_lookup_rowwise_int32_ids_any_shape(load_kernel):
    mod = _module(load_kernel, "embedding_lookup_rowwise")
    weight = torch.randn(50, 40)
    ids = torch.randint(0, 50, (3, 4), dtype=torch.int32)
    out = mod.embedding_lookup_rowwise(ids, weight)
    assert out.shape == (3, 4, 40)
    assert torch.equal(out, weight[ids.long()])


def test_vocab_parallel_lookup_masks_outside_the_shard(load_kernel):
    mod = _module(load_kernel, "embedding_lookup_vocab_parallel")
    weight = torch.randn(10, 24) + 3.0  # no zero rows
    ids = torch.tensor([9, 10, 19, 20, 0, 15])  # shard holds [10, 20)
    out = mod.embedding_lookup_vocab_parallel(ids, weight, 10, 20)
    zero = (out == 0).all(-1)
    assert zero.tolist() == [True, False, False, True, True, False]
    assert torch.equal(out[[1, 2, 5]], weight[[0, 9, 5]])


def test_sum_two_pass_is_repeatable_and_handles_empty(load_kernel):
    mod = _module(load_kernel, "sum_two_pass_partials")
    x = torch.randn(9000) + 0.1
    first = mod.sum_two_pass_partials(x, block=512, num_partials=7)
    assert torch.equal(first, mod.sum_two_pass_partials(x, block=512, num_partials=7))
    _check(first, mod.reference(x), exact=False)
    assert mod.sum_two_pass_partials(torch.empty(0)).item() == 0.0


def test_max_abs_atomic_finds_negative_extreme(load_kernel):
    mod = _module(load_kernel, "max_abs_atomic")
    x = torch.rand(3000)
    x[2345] = -7.5  # the largest magnitude is negative, in a late block
    assert mod.max_abs_atomic(x, block=256).item() == 7.5
    assert mod.max_abs_atomic(torch.empty(0, 4)).item() == 0.0
