"""Norm and FP8-quant reference kernels (k6 set) against their PyTorch references (interpreter).

fp8 outputs go through ``fp8_checks`` (the interpreter rounds some e4m3 casts the wrong way), with a
dequantised whole-output check; the other outputs through assert_close plus a whole-output norm
bound, so an all-zero output cannot pass.
"""

import pytest
import torch

from tests.reference_kernels.fp8_checks import check_dequant, check_fp8

DTYPES = [torch.float32, torch.bfloat16]
TOL = {torch.float32: (1e-4, 1e-4), torch.bfloat16: (2e-2, 2e-2)}

QUANT = "triton/quantization"
NORM = "triton/norm"

# id -> (folder, smoke shapes, (first, last) tuning values for the extreme-values test)
KERNELS = {
    "per_token_quant_fp8_persistent": (
        QUANT,
        [{"rows": 9, "hidden": 300}, {"rows": 2, "hidden": 64}],
        [{"programs_per_sm": 4, "num_warps": 4}, {"programs_per_sm": 8, "num_warps": 16}],
    ),
    "per_token_group_quant_fp8_2d_tile": (
        QUANT,
        [
            {"rows": 7, "hidden": 320, "group_size": 64},
            {"rows": 3, "hidden": 200, "group_size": 128},
            {"rows": 5, "hidden": 144, "group_size": 48},
        ],
        [
            {"block_m": 4, "groups_per_program": 4, "num_warps": 4},
            {"block_m": 16, "groups_per_program": 16, "num_warps": 8},
        ],
    ),
    "per_token_group_quant_fp8_persistent": (
        QUANT,
        [
            {"rows": 7, "hidden": 320, "group_size": 64},
            {"rows": 3, "hidden": 200, "group_size": 128},
            {"rows": 5, "hidden": 144, "group_size": 48},
        ],
        [
            {"groups_per_program": 8, "programs_per_sm": 4, "num_warps": 4},
            {"groups_per_program": 16, "programs_per_sm": 8, "num_warps": 8},
        ],
    ),
    "rms_norm_quant_fp8_looped": (
        QUANT,
        [{"rows": 3, "hidden": 700}, {"rows": 5, "hidden": 128}],
        [{"block_n": 1024, "num_warps": 4}, {"block_n": 4096, "num_warps": 8}],
    ),
    "rms_norm_quant_fp8_persistent": (
        QUANT,
        [{"rows": 9, "hidden": 300}, {"rows": 2, "hidden": 128}],
        [{"programs_per_sm": 4, "num_warps": 4}, {"programs_per_sm": 8, "num_warps": 16}],
    ),
    "fused_qk_rmsnorm_head_grid_2d": (
        NORM,
        [
            {"tokens": 7, "heads": 5, "kv_heads": 1, "d": 96},
            {"tokens": 1, "heads": 2, "kv_heads": 2, "d": 64},
        ],
        [{"block_t": 16, "num_warps": 4}, {"block_t": 64, "num_warps": 8}],
    ),
    "fused_qk_rmsnorm_looped_heads": (
        NORM,
        [
            {"tokens": 7, "heads": 5, "kv_heads": 1, "d": 96},
            {"tokens": 1, "heads": 2, "kv_heads": 2, "d": 64},
        ],
        [{"block_t": 8, "num_warps": 4}, {"block_t": 32, "num_warps": 8}],
    ),
    "gated_rms_norm_multirow": (
        NORM,
        [
            {"rows": 37, "hidden": 128},
            {"rows": 5, "hidden": 96, "norm_before_gate": False, "activation": "sigmoid"},
        ],
        [
            {"block_m": 16, "programs_per_sm": 4, "num_warps": 4},
            {"block_m": 64, "programs_per_sm": 8, "num_warps": 8},
        ],
    ),
    "gated_rms_norm_looped": (
        NORM,
        [
            {"rows": 3, "hidden": 1500},
            {"rows": 5, "hidden": 96, "norm_before_gate": False, "activation": "sigmoid"},
            {"rows": 2, "hidden": 600, "norm_before_gate": False, "activation": "silu"},
        ],
        [{"block_n": 1024, "num_warps": 4}, {"block_n": 4096, "num_warps": 8}],
    ),
    "l2_norm_looped": (
        NORM,
        [{"rows": 3, "hidden": 3000}, {"rows": 9, "hidden": 200}],
        [{"block_n": 2048, "num_warps": 4}, {"block_n": 8192, "num_warps": 8}],
    ),
    "l2_norm_split_row_two_kernel": (
        NORM,
        [{"rows": 5, "hidden": 3000}, {"rows": 9, "hidden": 200}],
        [
            {"block_n": 1024, "block_m": 1, "num_warps": 4},
            {"block_n": 4096, "block_m": 8, "num_warps": 8},
        ],
    ),
    "layer_norm_persistent": (
        NORM,
        [{"rows": 13, "hidden": 200}, {"rows": 1, "hidden": 64}],
        [{"programs_per_sm": 4, "num_warps": 4}, {"programs_per_sm": 8, "num_warps": 16}],
    ),
}
CASES = [(kid, shape) for kid, (_, shapes, _) in KERNELS.items() for shape in shapes]
OPTIONS = ("norm_before_gate", "activation")


def _load(load_kernel, kid):
    return load_kernel(f"{KERNELS[kid][0]}/{kid}.py")


def _close(out, ref, dtype):
    assert out.dtype == ref.dtype and out.shape == ref.shape
    atol, rtol = TOL[dtype]
    torch.testing.assert_close(out.float(), ref.float(), atol=atol, rtol=rtol)
    # a whole-output check so a zero output cannot pass
    assert (out.float() - ref.float()).norm() <= rtol * ref.float().norm() + atol


def _check(kid, inputs, out, ref, dtype):
    """Compare a launcher's output with its reference, fp8 outputs as values and dequantised."""
    if kid.startswith("per_token_group"):
        (q, scales), (ref_q, ref_scales) = out, ref
        _close(scales, ref_scales, torch.float32)
        skip = check_fp8(q, ref_q)
        n, g = q.shape[1], inputs["group_size"]
        full = scales.repeat_interleave(g, dim=1)[:, :n]
        check_dequant(q, full, inputs["x"], skip)
    elif kid == "per_token_quant_fp8_persistent":
        (q, scale), (ref_q, ref_scale) = out, ref
        assert scale.shape == (q.shape[0],)
        _close(scale, ref_scale, torch.float32)
        check_dequant(q, scale[:, None], inputs["x"], check_fp8(q, ref_q))
    elif kid.startswith("rms_norm_quant"):
        (q, scale, res), (ref_q, ref_scale, ref_res) = out, ref
        # bf16: the interpreter truncates residual_out, which moves the norm by ~1 bf16 ulp
        _close(res, ref_res, dtype)
        _close(scale, ref_scale, dtype)
        check_dequant(q, scale, ref_q.float() * ref_scale, check_fp8(q, ref_q))
    else:
        _close(out, ref, dtype)


def _run(load_kernel, kid, shape, dtype, **tuning):
    mod = _load(load_kernel, kid)
    inputs = mod.make_inputs({k: v for k, v in shape.items() if k not in OPTIONS}, dtype)
    inputs.update({k: v for k, v in shape.items() if k in OPTIONS})
    out = getattr(mod, kid)(**inputs, **tuning)
    _check(kid, inputs, out, mod.reference(**inputs), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(("kid", "shape"), CASES, ids=[f"{k}-{s}" for k, s in CASES])
def test_kernel_matches_reference(load_kernel, kid, shape, dtype):
    _run(load_kernel, kid, shape, dtype)


@pytest.mark.parametrize("which", [0, 1])
@pytest.mark.parametrize("kid", list(KERNELS))
def test_kernel_extreme_tuning(load_kernel, kid, which):
    shape = KERNELS[kid][1][0]
    _run(load_kernel, kid, shape, torch.float32, **KERNELS[kid][2][which])


def test_chunked_kernels_loop_over_several_chunks(load_kernel):
    # several chunks plus a ragged tail exercise both passes of each looped design
    _run(load_kernel, "rms_norm_quant_fp8_looped", {"rows": 2, "hidden": 700}, torch.float32,
         block_n=256)  # fmt: skip
    _run(load_kernel, "l2_norm_looped", {"rows": 2, "hidden": 1000}, torch.bfloat16, block_n=256)
    _run(load_kernel, "l2_norm_split_row_two_kernel", {"rows": 3, "hidden": 1000},
         torch.bfloat16, block_n=128, block_m=2)  # fmt: skip


def test_zero_rows_get_the_floor_scales(load_kernel):
    mod = _load(load_kernel, "per_token_quant_fp8_persistent")
    q, scale = mod.per_token_quant_fp8_persistent(torch.zeros(3, 40))
    assert torch.equal(scale, torch.full((3,), mod.ABSMAX_MIN / mod.FP8_MAX))
    assert not q.float().any()
    mod = _load(load_kernel, "rms_norm_quant_fp8_looped")
    q, scale, _ = mod.rms_norm_quant_fp8_looped(torch.zeros(2, 40), torch.zeros(2, 40),
                                                torch.ones(40))  # fmt: skip
    assert torch.equal(scale, torch.ones(2, 1)) and not q.float().any()


def test_layer_norm_persistent_without_bias(load_kernel):
    mod = _load(load_kernel, "layer_norm_persistent")
    inputs = mod.make_inputs({"rows": 10, "hidden": 100}, torch.float32)
    inputs["bias"] = None
    _close(mod.layer_norm_persistent(**inputs), mod.reference(**inputs), torch.float32)


BAD_CALLS = [
    ("per_token_quant_fp8_persistent", lambda: {"x": torch.zeros(2, 3, 4)}, "must be (T, N)"),
    ("per_token_quant_fp8_persistent", lambda: {"x": torch.zeros(1, 40000)}, "does not fit"),
    ("per_token_group_quant_fp8_2d_tile", lambda: {"x": torch.zeros(2, 64), "block_m": 3},
     "power of two"),
    ("per_token_group_quant_fp8_persistent", lambda: {"x": torch.zeros(2, 64), "group_size": 0},
     "group_size must be positive"),
    ("rms_norm_quant_fp8_looped",
     lambda: {"x": torch.zeros(2, 8), "residual": torch.zeros(2, 8, dtype=torch.bfloat16),
              "weight": torch.ones(8)}, "residual must match x"),
    ("rms_norm_quant_fp8_persistent",
     lambda: {"x": torch.zeros(2, 8), "residual": torch.zeros(2, 8), "weight": torch.ones(9)},
     "weight"),
    ("fused_qk_rmsnorm_head_grid_2d",
     lambda: {"hidden_states": torch.zeros(2, 100), "q_weight": torch.ones(16),
              "k_weight": torch.ones(16), "head_num": 2, "kv_head_num": 1}, "width 100"),
    ("fused_qk_rmsnorm_looped_heads",
     lambda: {"hidden_states": torch.zeros(2, 64), "q_weight": torch.ones(16),
              "k_weight": torch.ones(16), "head_num": 2, "kv_head_num": 1, "block_t": 6},
     "power of two"),
    ("gated_rms_norm_multirow",
     lambda: {"x": torch.zeros(2, 8), "weight": torch.ones(8), "z": torch.zeros(2, 8),
              "activation": "gelu"}, "activation 'gelu'"),
    ("gated_rms_norm_looped",
     lambda: {"x": torch.zeros(2, 8), "weight": torch.ones(8), "z": torch.zeros(3, 8)},
     "z must match x"),
    ("l2_norm_looped", lambda: {"x": torch.zeros(2, 8), "block_n": 100}, "power of two"),
    ("l2_norm_split_row_two_kernel", lambda: {"x": torch.zeros(2, 8), "block_m": 0},
     "power of two"),
    ("layer_norm_persistent", lambda: {"x": torch.zeros(2, 8), "weight": torch.ones(7)},
     "weight/bias need (>= 8,)"),
]  # fmt: skip


@pytest.mark.parametrize(("kid", "make", "message"), BAD_CALLS, ids=[b[0] for b in BAD_CALLS])
def test_launcher_rejects_bad_input(load_kernel, kid, make, message):
    mod = _load(load_kernel, kid)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        getattr(mod, kid)(**make())


@pytest.mark.parametrize("kid", ["layer_norm_persistent", "layer_norm_rowwise"])
def test_layer_norm_uses_the_first_n_entries_of_a_longer_weight(load_kernel, kid):
    # atrex30's layer_norm model holds 8192-entry weight and bias and uses the first H of them
    mod = load_kernel(f"triton/norm/{kid}.py")
    x, w, b = torch.randn(5, 1, 40), torch.randn(64), torch.randn(64)
    out = getattr(mod, kid)(x, w, b)
    expected = torch.nn.functional.layer_norm(x, (40,), w[:40], b[:40], 1e-5)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
