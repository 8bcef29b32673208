"""Norm, fused-norm-quant and SwiGLU reference kernels (k4 set) against references, interpreted.

The interpreter truncates fp32 -> bf16 casts instead of rounding them, so a kernel that rounds
twice (a residual sum, then the norm; a SiLU, then the product; a normalised head, then its
weight) can sit two bf16 ulps from its reference: those get a 2e-2 tolerance in bf16. It also
drops the carry of some fp32 -> e4m3 casts (124 -> 64 instead of 128), so fp8 outputs are compared
as values with that error allowed (see _check_fp8), as in test_quantization_k3.
"""

import pytest
import torch

from tests.reference_kernels.fp8_checks import check_fp8 as _check_fp8

TOL = {torch.float32: (1e-4, 1e-4), torch.float16: (2e-3, 2e-3), torch.bfloat16: (1e-2, 1e-2)}
DOUBLE_ROUNDING_BF16 = (2e-2, 2e-2)
ROWS = [{"rows": 3, "hidden": 1000}, {"rows": 33, "hidden": 64}, {"rows": 1, "hidden": 129}]
QKV = [
    {"tokens": 3, "heads": 5, "kv_heads": 1, "d": 96},
    {"tokens": 2, "heads": 4, "kv_heads": 2, "d": 64},
    {"tokens": 1, "heads": 6, "kv_heads": 3, "d": 128},
]
GLU = [{"rows": 3, "d": 500}, {"rows": 9, "d": 64}, {"rows": 1, "d": 129}]
F32_BF16 = [torch.float32, torch.bfloat16]

# name -> (path under reference_kernels/triton, cases, dtypes, rounds twice, extreme tunings)
KERNELS = {
    "rms_norm_persistent_grid": (
        "norm",
        ROWS,
        F32_BF16,
        False,
        [{"programs_per_sm": 1, "num_warps": 1}, {"programs_per_sm": 8, "num_warps": 16}],
    ),
    "rms_norm_split_row_two_pass": (
        "norm",
        ROWS,
        F32_BF16,
        False,
        [{"block_n": 1024, "num_warps": 1}, {"block_n": 8192, "num_warps": 8}],
    ),
    "fused_add_rms_norm_multirow": (
        "norm",
        ROWS,
        F32_BF16,
        True,
        [{"block_m": 1, "num_warps": 1}, {"block_m": 32, "num_warps": 8}],
    ),
    "layer_norm_welford_looped": (
        "norm",
        ROWS,
        F32_BF16,
        False,
        [{"block_n": 256, "num_warps": 1}, {"block_n": 4096, "num_warps": 8}],
    ),
    "layer_norm_multirow": (
        "norm",
        ROWS,
        F32_BF16,
        False,
        [{"block_m": 1, "num_warps": 1}, {"block_m": 32, "num_warps": 8}],
    ),
    "l2_norm_multirow": (
        "norm",
        ROWS,
        F32_BF16,
        False,
        [{"block_m": 1, "num_warps": 1}, {"block_m": 32, "num_warps": 8}],
    ),
    "gated_rms_norm_gate_first": (
        "norm",
        ROWS,
        F32_BF16,
        False,
        [{"block_m": 1, "num_warps": 1}, {"block_m": 64, "num_warps": 8}],
    ),
    "fused_qk_rmsnorm_per_head": (
        "norm",
        QKV,
        [torch.float16, torch.bfloat16],
        True,
        [{"num_warps": 1}, {"num_warps": 4}],
    ),
    "fused_qk_rmsnorm_token_tile": (
        "norm",
        QKV,
        [torch.float16, torch.bfloat16],
        True,
        [{"num_warps": 1, "block_v": 256}, {"num_warps": 8, "block_v": 4096}],
    ),
    "rms_norm_quant_fp8_multirow": (
        "quantization",
        ROWS,
        F32_BF16,
        True,
        [{"block_m": 1, "num_warps": 1}, {"block_m": 16, "num_warps": 8}],
    ),
    "silu_and_mul_fp8_quant": (
        "activation",
        GLU,
        F32_BF16,
        False,
        [{"block_n": 256, "num_warps": 1}, {"block_n": 4096, "num_warps": 8}],
    ),
    "silu_and_mul_2d_tiles": (
        "activation",
        GLU,
        F32_BF16,
        True,
        [
            {"round_act": True, "block_m": 1, "block_n": 128, "num_warps": 1},
            {"round_act": False, "block_m": 16, "block_n": 2048, "num_warps": 8},
        ],
    ),
}
CASES = [
    (name, shape, dtype)
    for name, (_, shapes, dtypes, _, _) in KERNELS.items()
    for shape in shapes
    for dtype in dtypes
]


def _close(out: torch.Tensor, ref: torch.Tensor, tol: tuple[float, float]) -> None:
    atol, rtol = tol
    assert out.dtype == ref.dtype and out.shape == ref.shape
    torch.testing.assert_close(out.float(), ref.float(), atol=atol, rtol=rtol)
    # a whole-output check so a zero output cannot pass
    assert (out.float() - ref.float()).norm() <= rtol * ref.float().norm() + atol


def _check(name: str, out, ref, dtype: torch.dtype) -> None:
    tol = DOUBLE_ROUNDING_BF16 if KERNELS[name][3] and dtype == torch.bfloat16 else TOL[dtype]
    outs = out if isinstance(out, tuple) else (out,)
    refs = ref if isinstance(ref, tuple) else (ref,)
    assert len(outs) == len(refs)
    if outs[0].dtype != torch.float8_e4m3fn:
        for o, r in zip(outs, refs, strict=True):
            _close(o, r, tol)
        return
    (q, scale, *rest), (ref_q, ref_scale, *ref_rest) = outs, refs
    for o, r in zip(rest, ref_rest, strict=True):  # residual_out
        _close(o, r, tol)
    _close(scale, ref_scale, tol)
    skip = _check_fp8(q, ref_q)
    # whole-output check: q * scale reproduces the reference's dequantised values (~1/16 rel.)
    target = ref_q.float() * ref_scale
    deq = torch.where(skip, target, q.float() * scale)
    assert (deq - target).norm() <= 0.07 * target.norm() and target.norm() > 0


def _module(load_kernel, name: str):
    return load_kernel(f"triton/{KERNELS[name][0]}/{name}.py")


def _run(load_kernel, name: str, shape: dict, dtype: torch.dtype, **tuning) -> None:
    mod = _module(load_kernel, name)
    inputs = mod.make_inputs(shape, dtype)
    _check(name, getattr(mod, name)(**inputs, **tuning), mod.reference(**inputs), dtype)


@pytest.mark.parametrize(("name", "shape", "dtype"), CASES, ids=str)
def test_kernel_matches_reference(load_kernel, name, shape, dtype):
    _run(load_kernel, name, shape, dtype)


@pytest.mark.parametrize("which", [0, 1])
@pytest.mark.parametrize("name", list(KERNELS))
def test_kernel_extreme_tuning(load_kernel, name, which):
    _, shapes, _, _, tunings = KERNELS[name]
    shape = {**shapes[0], "rows": 5} if "rows" in shapes[0] else shapes[0]
    _run(load_kernel, name, shape, torch.float32, **tunings[which])


CHUNKED = [
    ("rms_norm_split_row_two_pass", {"rows": 2, "hidden": 1000}, {"block_n": 128}),
    ("layer_norm_welford_looped", {"rows": 2, "hidden": 1000, "extra": 37}, {"block_n": 128}),
    ("layer_norm_multirow", {"rows": 5, "hidden": 100, "extra": 9}, {"block_m": 2}),
    ("silu_and_mul_fp8_quant", {"rows": 2, "d": 500}, {"block_n": 128}),
    ("silu_and_mul_2d_tiles", {"rows": 5, "d": 149}, {"block_m": 2, "block_n": 64}),
    ("fused_qk_rmsnorm_token_tile", QKV[1], {"block_v": 32}),
]


@pytest.mark.parametrize(("name", "shape", "tuning"), CHUNKED, ids=[c[0] for c in CHUNKED])
def test_kernel_loops_over_chunks_with_a_ragged_tail(load_kernel, name, shape, tuning):
    # several chunks (or tiles) per row plus a partial one; weights longer than the row
    _run(load_kernel, name, shape, torch.bfloat16, **tuning)


@pytest.mark.parametrize(
    ("before", "activation"), [(False, "sigmoid"), (True, "silu"), (True, "swish")]
)
def test_gated_rms_norm_gate_first_options(load_kernel, before, activation):
    mod = _module(load_kernel, "gated_rms_norm_gate_first")
    inputs = mod.make_inputs({"rows": 6, "hidden": 96}, torch.float32)
    opts = {"norm_before_gate": before, "activation": activation}
    out = mod.gated_rms_norm_gate_first(**inputs, **opts)
    _check("gated_rms_norm_gate_first", out, mod.reference(**inputs, **opts), torch.float32)
    # the two orders really differ, so the option is not ignored
    other = mod.reference(**inputs, norm_before_gate=not before, activation=activation)
    assert (out - other).norm() > 0.05 * other.norm()


def test_layer_norm_kernels_without_bias_and_with_a_large_mean(load_kernel):
    for name in ("layer_norm_welford_looped", "layer_norm_multirow"):
        mod = _module(load_kernel, name)
        inputs = mod.make_inputs({"rows": 3, "hidden": 300}, torch.float32)
        inputs["x"] = inputs["x"] + 1000.0  # E[x^2] - mean^2 would lose every digit here
        inputs["bias"] = None
        kwargs = {"block_n": 64} if name == "layer_norm_welford_looped" else {}
        # fp32 holds 1003 to 6e-5, so the mean itself is that coarse; a sum-of-squares variance
        # would be off by percents
        _close(getattr(mod, name)(**inputs, **kwargs), mod.reference(**inputs), (2e-3, 2e-3))


def test_silu_and_mul_fp8_quant_keeps_leading_dims_and_zero_rows(load_kernel):
    mod = _module(load_kernel, "silu_and_mul_fp8_quant")
    x = torch.randn(2, 3, 96)
    x[1, 2] = 0.0
    q, scale = mod.silu_and_mul_fp8_quant(x)
    assert q.shape == (2, 3, 48) and scale.shape == (2, 3, 1)
    assert scale[1, 2, 0] == 1.0 and (q[1, 2].float() == 0).all()
    _check("silu_and_mul_fp8_quant", (q, scale), mod.reference(x), torch.float32)


def test_fused_add_rms_norm_multirow_leaves_its_inputs_alone(load_kernel):
    mod = _module(load_kernel, "fused_add_rms_norm_multirow")
    inputs = mod.make_inputs({"rows": 4, "hidden": 64}, torch.float32)
    before = {k: v.clone() for k, v in inputs.items()}
    out, res = mod.fused_add_rms_norm_multirow(**inputs)
    assert all(torch.equal(inputs[k], before[k]) for k in inputs)
    assert res.data_ptr() not in {t.data_ptr() for t in inputs.values()}


X, W, H = torch.randn(2, 8), torch.ones(8), torch.ones(8, dtype=torch.half)
BAD = [
    ("rms_norm_persistent_grid", (X, torch.ones(7)), {}, "weight"),
    ("rms_norm_split_row_two_pass", (X, W), {"block_n": 6}, "power of two"),
    ("fused_add_rms_norm_multirow", (X, torch.randn(3, 8), W), {}, "residual"),
    ("layer_norm_welford_looped", (X, torch.ones(7)), {}, "at least 8"),
    ("layer_norm_multirow", (X, W, torch.ones(4)), {}, "bias"),
    ("l2_norm_multirow", (X,), {"block_m": 3}, "power of two"),
    ("gated_rms_norm_gate_first", (X, W, X), {"activation": "relu"}, "activation"),
    ("fused_qk_rmsnorm_per_head", (torch.randn(2, 40), W, W, 2, 1), {}, "width 40"),
    ("fused_qk_rmsnorm_token_tile", (torch.randn(2, 32), W, H, 2, 1), {}, "dtype"),
    ("rms_norm_quant_fp8_multirow", (X, X.half(), W), {}, "residual"),
    ("silu_and_mul_fp8_quant", (torch.randn(2, 7),), {}, "even"),
    ("silu_and_mul_2d_tiles", (X,), {"block_n": 48}, "block_n"),
]


@pytest.mark.parametrize(("name", "args", "kwargs", "match"), BAD, ids=[b[0] for b in BAD])
def test_launcher_rejects_bad_inputs(load_kernel, name, args, kwargs, match):
    launcher = getattr(_module(load_kernel, name), name)
    with pytest.raises(ValueError, match=match):
        launcher(*args, **kwargs)
