"""Reduction, scan and sort reference kernels (k7 set) against their PyTorch references.

Run in Triton's interpreter on tiny shapes (each call well under a second). Float results are
checked with assert_close plus a whole-output norm check (a zero output cannot pass); indices,
integer scans, merges and sorts are compared exactly.
"""

import pytest
import torch

TOL = {torch.float32: (1e-4, 1e-4), torch.bfloat16: (1e-2, 1e-2)}
DTYPES = [torch.float32, torch.bfloat16]

# name -> (file under reference_kernels/, smoke shapes, (first, last) extreme tuning values)
FLOAT_KERNELS = {
    "sum_rows_split_atomic": (
        "triton/reduction",
        [{"rows": 3, "cols": 1000}, {"rows": 5, "cols": 7}],
        [
            {"num_splits": 8, "block_n": 1024, "num_warps": 4},
            {"num_splits": 32, "block_n": 128, "num_warps": 16},
        ],
    ),
    "row_mean_var_chan_merge": (
        "triton/reduction",
        [{"rows": 5, "cols": 300, "offset": 100.0}, {"rows": 3, "cols": 2, "correction": 0}],
        [
            {"block_m": 4, "block_n": 256, "num_warps": 4},
            {"block_m": 16, "block_n": 32, "num_warps": 8},
        ],
    ),
    "global_l2_norm_partials": (
        "triton/reduction",
        [{"size": [3, 1000]}, {"size": [37]}, {"size": [2000], "scale": 1e25}],
        [
            {"block": 2048, "block_p": 1024, "num_warps": 8},
            {"block": 8192, "block_p": 16, "num_warps": 16},
        ],
    ),
    "column_sum_tiled_dim0": (
        "triton/reduction",
        [{"rows": 70, "cols": 50}, {"rows": 1, "cols": 300}],
        [
            {"block_m": 32, "block_n": 128, "num_warps": 4},
            {"block_m": 64, "block_n": 256, "num_warps": 8},
        ],
    ),
    "logsumexp_rowwise_online": (
        "triton/reduction",
        [{"rows": 3, "cols": 1000}, {"rows": 4, "cols": 33, "scale": 30.0}],
        [{"block_n": 1024, "num_warps": 4}, {"block_n": 4096, "num_warps": 16}],
    ),
    "cumsum_three_kernel_long_1d": (
        "triton/scan",
        [{"size": 5000}, {"size": 7}],
        [
            {"block": 2048, "block_s": 1024, "num_warps": 8},
            {"block": 4096, "block_s": 4096, "num_warps": 16},
        ],
    ),
}

# exact-output kernels: name -> (file, smoke shapes, dtypes, extreme tuning values)
EXACT_KERNELS = {
    "argmax_two_stage_partials": (
        "triton/reduction",
        [{"rows": 3, "cols": 1000}, {"rows": 2, "cols": 3000, "levels": 1}],
        DTYPES,
        [
            {"num_splits": 16, "block_n": 1024, "num_warps": 4},
            {"num_splits": 256, "block_n": 4096, "num_warps": 8},
        ],
    ),
    "cummax_rowwise_assoc": (
        "triton/scan",
        [{"rows": 3, "cols": 300, "levels": 2}, {"rows": 2, "cols": 5}],
        DTYPES,
        [{"block_n": 1024, "num_warps": 4}, {"block_n": 4096, "num_warps": 16}],
    ),
    "exclusive_offsets_from_counts": (
        "triton/scan",
        [{"size": 3000}, {"size": 1}],
        [torch.int32],
        [{"block": 4096, "num_warps": 4}, {"block": 1024, "num_warps": 8}],
    ),
    "merge_two_sorted_rows_merge_path": (
        "triton/sort",
        [{"rows": 3, "na": 100, "nb": 57}, {"rows": 2, "na": 40, "nb": 0}],
        DTYPES,
        [{"block": 256, "num_warps": 4}, {"block": 1024, "num_warps": 8}],
    ),
    "argsort_stable_rank_count": (
        "triton/sort",
        [{"rows": 3, "cols": 100}, {"rows": 2, "cols": 50, "descending": True}],
        DTYPES,
        [
            {"block_i": 64, "block_j": 64, "num_warps": 4},
            {"block_i": 128, "block_j": 256, "num_warps": 8},
        ],
    ),
}


def _close(out, ref, dtype):
    outs = out if isinstance(out, tuple) else (out,)
    refs = ref if isinstance(ref, tuple) else (ref,)
    atol, rtol = TOL.get(dtype, (0, 0))
    for o, r in zip(outs, refs, strict=True):
        assert o.dtype == r.dtype and o.shape == r.shape
        torch.testing.assert_close(o.float(), r.float(), atol=atol, rtol=rtol)
        # a whole-output check so a zero output cannot pass
        assert (o.float() - r.float()).norm() <= rtol * r.float().norm() + atol
        assert r.float().norm() > 0


def _exact(out, ref):
    outs = out if isinstance(out, tuple) else (out,)
    refs = ref if isinstance(ref, tuple) else (ref,)
    for o, r in zip(outs, refs, strict=True):
        assert o.dtype == r.dtype and o.shape == r.shape
        assert torch.equal(o, r)


def _run(load_kernel, name, shape, dtype, **tuning):
    folder = {**FLOAT_KERNELS, **EXACT_KERNELS}[name][0]
    mod = load_kernel(f"{folder}/{name}.py")
    inputs = mod.make_inputs(shape, dtype)
    return getattr(mod, name)(**inputs, **tuning), mod.reference(**inputs)


FLOAT_CASES = [
    (name, shape, dtype)
    for name, (_, shapes, _) in FLOAT_KERNELS.items()
    for shape in shapes
    for dtype in DTYPES
]
EXACT_CASES = [
    (name, shape, dtype)
    for name, (_, shapes, dtypes, _) in EXACT_KERNELS.items()
    for shape in shapes
    for dtype in dtypes
]


@pytest.mark.parametrize(("name", "shape", "dtype"), FLOAT_CASES, ids=str)
def test_float_kernel_matches_reference(load_kernel, name, shape, dtype):
    out, ref = _run(load_kernel, name, shape, dtype)
    _close(out, ref, dtype)


@pytest.mark.parametrize(("name", "shape", "dtype"), EXACT_CASES, ids=str)
def test_exact_kernel_matches_reference(load_kernel, name, shape, dtype):
    out, ref = _run(load_kernel, name, shape, dtype)
    _exact(out, ref)


EXTREME_SHAPES = {
    "sum_rows_split_atomic": {"rows": 2, "cols": 2000},
    "row_mean_var_chan_merge": {"rows": 5, "cols": 300},
    "global_l2_norm_partials": {"size": [3000]},
    "column_sum_tiled_dim0": {"rows": 70, "cols": 50},
    "logsumexp_rowwise_online": {"rows": 2, "cols": 300},
    "cumsum_three_kernel_long_1d": {"size": 3000},
    "argmax_two_stage_partials": {"rows": 2, "cols": 3000, "levels": 2},
    "cummax_rowwise_assoc": {"rows": 1, "cols": 300, "levels": 2},
    "exclusive_offsets_from_counts": {"size": 1500},
    "merge_two_sorted_rows_merge_path": {"rows": 2, "na": 30, "nb": 70},
    "argsort_stable_rank_count": {"rows": 2, "cols": 70},
}


@pytest.mark.parametrize("which", [0, 1])
@pytest.mark.parametrize("name", list(EXTREME_SHAPES))
def test_extreme_tuning(load_kernel, name, which):
    if name in FLOAT_KERNELS:
        tuning = FLOAT_KERNELS[name][2][which]
        dtype = torch.float32
    else:
        tuning = EXACT_KERNELS[name][3][which]
        dtype = EXACT_KERNELS[name][2][0]
    out, ref = _run(load_kernel, name, EXTREME_SHAPES[name], dtype, **tuning)
    if name in FLOAT_KERNELS:
        _close(out, ref, dtype)
    else:
        _exact(out, ref)


# small tuning values: many chunks, splits or blocks, so every loop and carry is exercised
@pytest.mark.parametrize(
    ("name", "shape", "tuning"),
    [
        ("sum_rows_split_atomic", {"rows": 2, "cols": 300}, {"num_splits": 3, "block_n": 16}),
        ("argmax_two_stage_partials", {"rows": 2, "cols": 300, "levels": 1}, {"block_n": 16}),
        ("row_mean_var_chan_merge", {"rows": 3, "cols": 100}, {"block_m": 2, "block_n": 32}),
        ("global_l2_norm_partials", {"size": [1000]}, {"block": 16, "block_p": 16}),
        ("column_sum_tiled_dim0", {"rows": 30, "cols": 40}, {"block_m": 4, "block_n": 16}),
        ("logsumexp_rowwise_online", {"rows": 2, "cols": 300}, {"block_n": 32}),
        ("cumsum_three_kernel_long_1d", {"size": 1000}, {"block": 16, "block_s": 16}),
        ("cummax_rowwise_assoc", {"rows": 2, "cols": 100, "levels": 1}, {"block_n": 16}),
        ("exclusive_offsets_from_counts", {"size": 100}, {"block": 16}),
        ("merge_two_sorted_rows_merge_path", {"rows": 2, "na": 3, "nb": 60}, {"block": 16}),
        ("argsort_stable_rank_count", {"rows": 1, "cols": 70}, {"block_i": 16, "block_j": 16}),
    ],
    ids=str,
)
def test_small_tiles_many_steps(load_kernel, name, shape, tuning):
    dtype = torch.int32 if name == "exclusive_offsets_from_counts" else torch.float32
    out, ref = _run(load_kernel, name, shape, dtype, **tuning)
    if name in FLOAT_KERNELS:
        _close(out, ref, dtype)
    else:
        _exact(out, ref)


def test_integer_scan_returns_int64(load_kernel):
    out, ref = _run(load_kernel, "cumsum_three_kernel_long_1d", {"size": 3000}, torch.int32)
    assert out.dtype == torch.int64
    _exact(out, ref)


def test_special_values(load_kernel):
    # NaN last/first and -0.0 == +0.0 in the sort; NaN latches in cummax; all -inf logsumexp row
    sort = load_kernel("triton/sort/argsort_stable_rank_count.py")
    nan, inf = float("nan"), float("inf")
    x = torch.tensor([[0.0, -0.0, nan, 1.0, nan, -inf, 0.0, inf, -1.0]])
    for descending in (False, True):
        out, ref = sort.argsort_stable_rank_count(x, descending), sort.reference(x, descending)
        assert torch.equal(out[1], ref[1])
        assert torch.equal(out[0].view(torch.int32), ref[0].view(torch.int32))
    cummax = load_kernel("triton/scan/cummax_rowwise_assoc.py")
    y = torch.tensor([[1.0, 3.0, 3.0, nan, 5.0, nan, 2.0] * 3])
    out, ref = cummax.cummax_rowwise_assoc(y, block_n=16), cummax.reference(y)
    assert torch.equal(out[1], ref[1]) and torch.equal(out[0].isnan(), ref[0].isnan())
    lse = load_kernel("triton/reduction/logsumexp_rowwise_online.py")
    z = torch.full((2, 40), -inf)
    z[1, 3] = 1.0
    assert torch.equal(lse.logsumexp_rowwise_online(z, block_n=16), torch.logsumexp(z, -1))


def test_l2_norm_does_not_overflow(load_kernel):
    mod = load_kernel("triton/reduction/global_l2_norm_partials.py")
    x = torch.full((100,), 1e30)  # sum of squares is 1e62: an fp32 sum would be inf
    assert torch.isclose(mod.global_l2_norm_partials(x), torch.tensor(1e31), rtol=1e-5)
    zeros = torch.zeros(40)
    zeros[20:] = 3.0  # the first block (block=16) is all zero; the norm is 3 * sqrt(20)
    norm = mod.global_l2_norm_partials(zeros, block=16)
    assert torch.isclose(norm, torch.tensor(3.0 * 20**0.5), rtol=1e-6)
    assert mod.global_l2_norm_partials(torch.zeros(5)).item() == 0.0


def test_input_validation(load_kernel):
    def load(folder, name):
        return getattr(load_kernel(f"triton/{folder}/{name}.py"), name)

    x1 = torch.zeros(8)
    with pytest.raises(ValueError, match="x must be"):
        load("reduction", "sum_rows_split_atomic")(x1)
    with pytest.raises(ValueError, match="num_splits"):
        load("reduction", "argmax_two_stage_partials")(torch.zeros(2, 8), num_splits=0)
    with pytest.raises(ValueError, match="N >= 1"):
        load("reduction", "row_mean_var_chan_merge")(torch.zeros(2, 0))
    with pytest.raises(ValueError, match="power of two"):
        load("reduction", "global_l2_norm_partials")(x1, block=24)
    with pytest.raises(ValueError, match="x must be"):
        load("reduction", "column_sum_tiled_dim0")(x1.int().reshape(2, 4))
    with pytest.raises(ValueError, match="x must be"):
        load("reduction", "logsumexp_rowwise_online")(x1)
    with pytest.raises(ValueError, match="1-D"):
        load("scan", "cumsum_three_kernel_long_1d")(torch.zeros(2, 4))
    with pytest.raises(ValueError, match="x must be"):
        load("scan", "cummax_rowwise_assoc")(x1.double().reshape(2, 4))
    with pytest.raises(ValueError, match="int32"):
        load("scan", "exclusive_offsets_from_counts")(x1.long())
    with pytest.raises(ValueError, match="same R"):
        load("sort", "merge_two_sorted_rows_merge_path")(torch.zeros(2, 4), torch.zeros(3, 4))
    with pytest.raises(ValueError, match="dtype"):
        load("sort", "merge_two_sorted_rows_merge_path")(torch.zeros(2, 4), torch.zeros(2, 4).int())
    with pytest.raises(ValueError, match="x must be"):
        load("sort", "argsort_stable_rank_count")(x1)
