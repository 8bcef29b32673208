"""Softmax, embedding and activation reference kernels (k7 set) against their references.

Every kernel runs in Triton's interpreter on tiny shapes (fp32 and bf16 where it supports bf16),
checked elementwise and by a whole-output norm so that a zero output cannot pass; then its extreme
tuning values, and its input validation.
"""

import pytest
import torch

from tests.reference_kernels.refill import refilled_inputs

DTYPES = [torch.float32, torch.bfloat16]
# the interpreter truncates bf16 casts: allow two bf16 ulps
TOL = {torch.float32: (1e-5, 1e-4), torch.bfloat16: (2e-2, 2e-2)}

# name -> (family, smoke shapes, extreme tuning (first and last candidates), dtypes)
KERNELS = {
    "softmax_looped_three_pass": (
        "softmax",
        [{"rows": 3, "cols": 1000}, {"rows": 2, "cols": 129}],
        [{"block_n": 256, "num_warps": 1}, {"block_n": 4096, "num_warps": 8}],
        DTYPES,
    ),
    "softmax_causal_masked_scaled": (
        "softmax",
        [
            {"batch": 1, "heads": 2, "q": 5, "k": 9},  # bottom-right aligned (offset = K - Q)
            {"batch": 2, "heads": 1, "q": 6, "k": 6, "offset": -2, "scale": -0.5},  # masked rows
        ],
        [{"num_warps": 1}, {"num_warps": 16}],
        DTYPES,
    ),
    "softmax_dim0_columns": (
        "softmax",
        [{"rows": 70, "cols": 50}, {"rows": 5, "cols": 3}],
        [
            {"block_m": 8, "block_n": 16, "num_warps": 1},
            {"block_m": 64, "block_n": 256, "num_warps": 8},
        ],
        DTYPES,
    ),
    "sparsemax_rowwise_sort": (
        "softmax",
        [{"rows": 3, "cols": 50}, {"rows": 2, "cols": 7}],
        [{"num_warps": 1}, {"num_warps": 8}],
        DTYPES,
    ),
    "embedding_bag_sum_offsets": (
        "embedding",
        [
            {"vocab": 50, "dim": 100, "bags": 6, "max_bag": 12},
            {"vocab": 20, "dim": 33, "bags": 4, "max_bag": 5, "mode": "mean"},
        ],
        [
            {"block_l": 1, "block_d": 64, "num_warps": 1},
            {"block_l": 16, "block_d": 1024, "num_warps": 8},
        ],
        DTYPES,
    ),
    "embedding_backward_atomic_scatter": (
        "embedding",
        [
            {"batch": 2, "seq": 9, "vocab": 10, "dim": 100},
            {"batch": 1, "seq": 16, "vocab": 6, "dim": 40, "padding_idx": 2},
            {"batch": 3, "seq": 5, "vocab": 7, "dim": 8, "padding_idx": -1},
        ],
        [
            {"block_t": 1, "block_d": 64, "num_warps": 1},
            {"block_t": 16, "block_d": 1024, "num_warps": 8},
        ],
        DTYPES,
    ),
    "sinusoidal_position_add": (
        "embedding",
        [
            {"batch": 2, "seq": 7, "dim": 40, "offset": 100},
            {"batch": 1, "seq": 33, "dim": 300, "x_scale": 2.0},
        ],
        [
            {"block_s": 1, "block_p": 32, "num_warps": 1},
            {"block_s": 16, "block_p": 512, "num_warps": 8},
        ],
        DTYPES,
    ),
    "silu_and_mul_persistent_grid_stride": (
        "activation",
        [{"rows": 7, "d": 149}, {"rows": 3, "d": 1000}],
        [
            {"round_act": True, "programs_per_sm": 4, "block_n": 1024, "num_warps": 4},
            {"round_act": False, "programs_per_sm": 8, "block_n": 2048, "num_warps": 8},
        ],
        DTYPES,
    ),
    "silu_and_mul_interleaved_gate_up": (
        "activation",
        [{"rows": 7, "d": 149}, {"rows": 2, "d": 600}],
        [
            {"round_act": True, "block_m": 4, "block_n": 256, "num_warps": 4},
            {"round_act": False, "block_m": 16, "block_n": 1024, "num_warps": 8},
        ],
        DTYPES,
    ),
    "mish_softplus_stable": (
        "activation",
        [{"shape": [3, 5, 77]}, {"shape": [2000]}],
        [
            {"block": 256, "unroll": 1, "num_warps": 1},
            {"block": 4096, "unroll": 8, "num_warps": 8},
        ],
        DTYPES,
    ),
    "gelu_and_mul_sigmoid_approx": (
        "activation",
        [{"rows": 7, "d": 149}, {"rows": 3, "d": 500, "alpha": 1.0}],
        [
            {"block_m": 1, "block_n": 64, "num_warps": 1},
            {"block_m": 16, "block_n": 1024, "num_warps": 8},
        ],
        DTYPES,
    ),
}
# extreme-tuning shapes (fp32): tails in every tiled dimension
EXTREME_SHAPE = {
    "softmax_looped_three_pass": {"rows": 2, "cols": 700},
    "softmax_causal_masked_scaled": {"batch": 1, "heads": 1, "q": 4, "k": 20},
    "softmax_dim0_columns": {"rows": 45, "cols": 70},
    "sparsemax_rowwise_sort": {"rows": 2, "cols": 30},
    "embedding_bag_sum_offsets": {"vocab": 30, "dim": 70, "bags": 3, "max_bag": 20},
    "embedding_backward_atomic_scatter": {"batch": 1, "seq": 20, "vocab": 5, "dim": 70},
    "sinusoidal_position_add": {"batch": 1, "seq": 19, "dim": 70},
    "silu_and_mul_persistent_grid_stride": {"rows": 5, "d": 300},
    "silu_and_mul_interleaved_gate_up": {"rows": 5, "d": 300},
    "mish_softplus_stable": {"shape": [5, 300]},
    "gelu_and_mul_sigmoid_approx": {"rows": 5, "d": 300},
}
CASES = [
    (name, shape, dtype)
    for name, (_, shapes, _, dtypes) in KERNELS.items()
    for shape in shapes
    for dtype in dtypes
]


def _load(load_kernel, name):
    return load_kernel(f"triton/{KERNELS[name][0]}/{name}.py")


def _check(out, ref, dtype):
    atol, rtol = TOL[dtype]
    assert out.dtype == ref.dtype and out.shape == ref.shape
    torch.testing.assert_close(out.float(), ref.float(), atol=atol, rtol=rtol)
    # a whole-output check so a zero output cannot pass
    assert ref.float().norm() > 0
    assert (out.float() - ref.float()).norm() <= rtol * ref.float().norm() + atol


@pytest.mark.parametrize(("name", "shape", "dtype"), CASES, ids=str)
def test_k7_kernel_matches_reference(load_kernel, name, shape, dtype):
    mod = _load(load_kernel, name)
    inputs = mod.make_inputs(shape, dtype)
    _check(getattr(mod, name)(**inputs), mod.reference(**inputs), dtype)


@pytest.mark.parametrize("which", [0, 1])
@pytest.mark.parametrize("name", list(KERNELS))
def test_k7_kernel_extreme_tuning(load_kernel, name, which):
    mod = _load(load_kernel, name)
    inputs = mod.make_inputs(EXTREME_SHAPE[name], torch.float32)
    out = getattr(mod, name)(**inputs, **KERNELS[name][2][which])
    _check(out, mod.reference(**inputs), torch.float32)


BAD_INPUTS = {
    "softmax_looped_three_pass": ({"x": torch.zeros(2, 8), "block_n": 100}, "power of two"),
    "softmax_causal_masked_scaled": ({"scores": torch.zeros(8)}, "Q, K"),
    "softmax_dim0_columns": ({"x": torch.zeros(2, 3, 4)}, "2-D"),
    "sparsemax_rowwise_sort": ({"x": torch.zeros(1, 9000)}, "8192"),
    "embedding_bag_sum_offsets": (
        {
            "input": torch.zeros(4, dtype=torch.long),
            "weight": torch.zeros(5, 3),
            "offsets": torch.zeros(1, dtype=torch.long),
            "mode": "max",
        },
        "mode",
    ),  # fmt: skip
    "embedding_backward_atomic_scatter": (
        {
            "grad_output": torch.zeros(4, 3),
            "indices": torch.zeros(5, dtype=torch.long),
            "num_weights": 5,
        },
        "leading shape",
    ),  # fmt: skip
    "sinusoidal_position_add": ({"x": torch.zeros(2, 7)}, "even"),
    "silu_and_mul_persistent_grid_stride": ({"x": torch.zeros(2, 7)}, "even"),
    "silu_and_mul_interleaved_gate_up": ({"gate_up": torch.zeros(2, 7)}, "even"),
    "mish_softplus_stable": ({"x": torch.zeros(4, dtype=torch.long)}, "float"),
    "gelu_and_mul_sigmoid_approx": ({"x": torch.zeros(2, 7)}, "even"),
}


@pytest.mark.parametrize("name", list(KERNELS))
def test_k7_kernel_rejects_bad_input(load_kernel, name):
    mod = _load(load_kernel, name)
    kwargs, message = BAD_INPUTS[name]
    with pytest.raises(ValueError, match=message):
        getattr(mod, name)(**kwargs)


# ------------------------------------------------------------------ kernel-specific behaviour
def test_causal_softmax_rows_sum_to_one_or_are_fully_masked_zeros(load_kernel):
    mod = _load(load_kernel, "softmax_causal_masked_scaled")
    scores = torch.randn(1, 1, 4, 4)
    probs = mod.softmax_causal_masked_scaled(scores, scale=1.0, offset=-1)
    assert torch.equal(probs[0, 0, 0], torch.zeros(4))  # q = 0 sees no key: zeros, not NaN
    torch.testing.assert_close(probs[0, 0, 1:].sum(-1), torch.ones(3))
    assert torch.equal(probs[0, 0].triu(0), torch.zeros(4, 4))  # c > q - 1 masked


def test_softmax_dim0_reads_a_transposed_view_in_place(load_kernel):
    mod = _load(load_kernel, "softmax_dim0_columns")
    x = torch.randn(40, 24).t()  # (24, 40) with strides (1, 24)
    _check(mod.softmax_dim0_columns(x, block_m=8), mod.reference(x), torch.float32)


def test_softmax_looped_three_pass_handles_minus_inf(load_kernel):
    mod = _load(load_kernel, "softmax_looped_three_pass")
    x = torch.randn(2, 300)
    x[0, ::3] = float("-inf")
    out = mod.softmax_looped_three_pass(x, block_n=128)
    _check(out, mod.reference(x), torch.float32)
    assert torch.equal(out[0, ::3], torch.zeros(100))


def test_sparsemax_gives_exact_zeros_and_sums_to_one(load_kernel):
    mod = _load(load_kernel, "sparsemax_rowwise_sort")
    x = torch.tensor([[3.0, 1.0, 0.2, -1.0, 2.5], [0.1, 0.1, 0.1, 0.1, 0.1]])
    p = mod.sparsemax_rowwise_sort(x)
    torch.testing.assert_close(p[0], torch.tensor([0.75, 0.0, 0.0, 0.0, 0.25]))
    torch.testing.assert_close(p[1], torch.full((5,), 0.2))  # ties: uniform
    torch.testing.assert_close(p.sum(-1), torch.ones(2))


def test_embedding_bag_empty_bags_are_zero(load_kernel):
    mod = _load(load_kernel, "embedding_bag_sum_offsets")
    weight = torch.randn(6, 10)
    ids = torch.tensor([1, 2, 3])
    offsets = torch.tensor([0, 0, 3])  # bags: [], [1, 2, 3], []
    for mode in ("sum", "mean"):
        out = mod.embedding_bag_sum_offsets(ids, weight, offsets, mode, block_l=2)
        assert torch.equal(out[0], torch.zeros(10)) and torch.equal(out[2], torch.zeros(10))
        _check(out, mod.reference(ids, weight, offsets, mode), torch.float32)


def test_embedding_backward_skips_padding_and_repeats_add_up(load_kernel):
    mod = _load(load_kernel, "embedding_backward_atomic_scatter")
    grad = torch.ones(5, 4)
    ids = torch.tensor([2, 2, 0, 2, 1])
    gw = mod.embedding_backward_atomic_scatter(grad, ids, 4, padding_idx=0)
    assert torch.equal(gw, torch.tensor([[0.0] * 4, [1.0] * 4, [3.0] * 4, [0.0] * 4]))


def test_silu_and_mul_persistent_serves_the_width_one_fallback(load_kernel):
    mod = _load(load_kernel, "silu_and_mul_persistent_grid_stride")
    x = torch.randn(6, 1)
    out = mod.silu_and_mul_persistent_grid_stride(x)
    assert out.shape == (6, 1)
    _check(out, mod.reference(x), torch.float32)


def test_mish_is_stable_in_both_tails(load_kernel):
    mod = _load(load_kernel, "mish_softplus_stable")
    x = torch.tensor([-200.0, -90.0, -20.0, -1e-4, 0.0, 19.9, 20.0, 20.5, 90.0, 1e30])
    out = mod.mish_softplus_stable(x)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, mod.reference(x), atol=1e-12, rtol=1e-5)


def test_embedding_bag_refilled_inputs_keep_a_valid_structure(load_kernel):
    # the scorer refills the inputs with another seed's values at the same addresses
    mod = _load(load_kernel, "embedding_bag_sum_offsets")
    shape = {"vocab": 50, "dim": 100, "bags": 6, "max_bag": 12}
    first, second = refilled_inputs(mod, shape, torch.float32)
    out = mod.embedding_bag_sum_offsets(**first)
    _check(out, mod.reference(**second), torch.float32)
