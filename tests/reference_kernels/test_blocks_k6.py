"""Building-block reference kernels (k6 set) against their PyTorch references, in the interpreter.

Softmax variants, logprob gathers, cross entropy, speculative rejection sampling, int8 / e5m2
casts, a tiled transpose, a bias-residual add, an MLA key concat and varlen positions. Index
outputs and copies compare exactly; float math with per-dtype tolerances plus a whole-output norm
check, so a zero output always fails.
"""

import pytest
import torch

F32, BF16, I32, I64 = torch.float32, torch.bfloat16, torch.int32, torch.int64
# bf16: the interpreter truncates fp32 -> bf16 casts, so allow about two bf16 ulps
TOL = {F32: (1e-4, 1e-4), BF16: (2e-2, 2e-2)}

# name -> folder, smoke cases (a "tuning" key is passed to the launcher), dtypes, exact comparison,
# extreme tuning (shape, [low, high])
KERNELS: dict[str, dict] = {
    "softmax_multirow": {
        "family": "softmax",
        "cases": [{"rows": 7, "cols": 300}, {"rows": 33, "cols": 64}, {"rows": 2, "cols": 1}],
        "dtypes": [F32, BF16],
        "exact": False,
        "extreme": ({"rows": 9, "cols": 100}, [{"block_m": 1, "num_warps": 1},
                                               {"block_m": 32, "num_warps": 8}]),
    },
    "softmax_split_row_two_kernel": {
        "family": "softmax",
        "cases": [{"rows": 2, "vocab": 1000, "tuning": {"block_n": 256}},
                  {"rows": 3, "vocab": 64},
                  {"rows": 1, "vocab": 3000, "tuning": {"block_n": 1024}}],
        "dtypes": [F32, BF16],
        "exact": False,
        "extreme": ({"rows": 2, "vocab": 600}, [{"block_n": 16, "num_warps": 1},
                                                {"block_n": 8192, "num_warps": 16}]),
    },
    "log_softmax_rowwise": {
        "family": "softmax",
        "cases": [{"rows": 3, "vocab": 1000, "tuning": {"block_n": 256}},
                  {"rows": 9, "vocab": 64}, {"rows": 1, "vocab": 129}],
        "dtypes": [F32, BF16],
        "exact": False,
        "extreme": ({"rows": 3, "vocab": 600}, [{"block_n": 256, "num_warps": 1},
                                                {"block_n": 4096, "num_warps": 16}]),
    },
    "gather_logprobs_of_ids": {
        "family": "sampling",
        "cases": [{"rows": 3, "vocab": 1000, "k": 5, "tuning": {"block_v": 256}},
                  {"rows": 9, "vocab": 64, "k": 1}, {"rows": 2, "vocab": 129, "k": 20}],
        "dtypes": [F32, BF16],
        "exact": False,
        "extreme": ({"rows": 3, "vocab": 600, "k": 4}, [{"block_v": 256, "num_warps": 1},
                                                        {"block_v": 4096, "num_warps": 16}]),
    },
    "cross_entropy_rowwise": {
        "family": "sampling",
        "cases": [{"rows": 4, "vocab": 1000, "tuning": {"block_v": 256}},
                  {"rows": 9, "vocab": 64}, {"rows": 2, "vocab": 129}],
        "dtypes": [F32, BF16],
        "exact": False,
        "extreme": ({"rows": 4, "vocab": 600}, [{"block_v": 256, "num_warps": 1},
                                                {"block_v": 4096, "num_warps": 16}]),
    },
    "speculative_rejection_sample": {
        "family": "sampling",
        "cases": [{"batch": 6, "k": 4, "vocab": 300, "tuning": {"block_v": 128}},
                  {"batch": 3, "k": 1, "vocab": 64}, {"batch": 2, "k": 7, "vocab": 129}],
        "dtypes": [F32],
        "exact": True,
        "extreme": ({"batch": 4, "k": 3, "vocab": 600}, [{"block_v": 256, "num_warps": 1},
                                                         {"block_v": 4096, "num_warps": 16}]),
    },
    "kv_int8_per_token_quant": {
        "family": "quantization",
        "cases": [{"tokens": 3, "heads": 5, "head_dim": 128},
                  {"tokens": 1, "heads": 8, "head_dim": 64, "tuning": {"block_h": 2}},
                  {"tokens": 4, "heads": 1, "head_dim": 80}],
        "dtypes": [F32, BF16],
        "exact": True,  # same fp32 division and rounding on both sides
        "extreme": ({"tokens": 2, "heads": 6, "head_dim": 64}, [{"block_h": 1, "num_warps": 1},
                                                                {"block_h": 32, "num_warps": 8}]),
    },
    "fp8_e5m2_cast_scaled": {
        "family": "quantization",
        "cases": [{"size": [3, 1000]}, {"size": [17]}, {"size": [2, 3, 70]}],
        "dtypes": [F32, BF16],
        "exact": None,  # fp8: checked by _check_e5m2
        "extreme": ({"size": [3000]}, [{"block": 256, "num_warps": 1},
                                       {"block": 4096, "num_warps": 8}]),
    },
    "transpose_2d_tiled": {
        "family": "other",
        "cases": [{"rows": 70, "cols": 33}, {"rows": 1, "cols": 130}, {"rows": 64, "cols": 64}],
        "dtypes": [F32, BF16, I32],
        "exact": True,
        "extreme": ({"rows": 40, "cols": 50}, [{"block_m": 16, "block_n": 16, "num_warps": 1},
                                               {"block_m": 128, "block_n": 128, "num_warps": 8}]),
    },
    "bias_residual_add": {
        "family": "other",
        "cases": [{"rows": 7, "hidden": 300}, {"rows": 33, "hidden": 64},
                  {"rows": 1, "hidden": 1500, "tuning": {"block_n": 512}}],
        "dtypes": [F32, BF16],
        "exact": False,
        "extreme": ({"rows": 5, "hidden": 300}, [{"block_n": 256, "rows_per_program": 1,
                                                  "num_warps": 1},
                                                 {"block_n": 4096, "rows_per_program": 16,
                                                  "num_warps": 8}]),
    },
    "concat_kv_heads": {
        "family": "other",
        "cases": [{"tokens": 5, "heads": 3, "dn": 128, "dr": 64},
                  {"tokens": 20, "heads": 2, "dn": 48, "dr": 16, "rope_heads": 2},
                  {"tokens": 1, "heads": 1, "dn": 7, "dr": 3}],
        "dtypes": [F32, BF16],
        "exact": True,
        "extreme": ({"tokens": 9, "heads": 2, "dn": 32, "dr": 16},
                    [{"block_t": 1, "num_warps": 1}, {"block_t": 64, "num_warps": 8}]),
    },
    "arange_positions_varlen": {
        "family": "other",
        "cases": [{"seqlens": [5, 0, 300, 33]}, {"seqlens": [1], "context": True},
                  {"seqlens": [7, 70, 0], "context": True, "tuning": {"block": 64}}],
        "dtypes": [I32, I64],
        "exact": True,
        "extreme": ({"seqlens": [3, 200, 9]}, [{"block": 64, "num_warps": 1},
                                               {"block": 1024, "num_warps": 8}]),
    },
}  # fmt: skip


def _e5m2_step(v):
    """Spacing of float8_e5m2 values around |v| (2 mantissa bits; subnormal step 2^-16)."""
    return torch.exp2(torch.floor(torch.log2(v.abs().clamp(min=2.0**-14))) - 2)


def _check_e5m2(out, ref):
    """Compare e5m2 outputs up to the interpreter's cast errors (see fp8_checks.py for e4m3).

    Triton's interpreter loses the carry into the exponent when a value rounds up to a power of
    two (1963 -> 1024 instead of 2048), and may round one step differently near a boundary; a GPU
    does neither. Those elements are counted and left out of the round-trip comparison.
    """
    (q, x_hat), (ref_q, ref_x_hat) = out, ref
    assert q.dtype == ref_q.dtype == torch.float8_e5m2 and q.shape == ref_q.shape
    a, b = q.float(), ref_q.float()
    assert torch.isfinite(a).all()
    off = a != b
    step = _e5m2_step(torch.maximum(a.abs(), b.abs()))
    lost_carry = off & (torch.frexp(a).mantissa.abs() == 0.5) & (2 * a == b)
    one_step = off & ~lost_carry & ((a - b).abs() <= step)
    assert (off == (lost_carry | one_step)).all(), "an e5m2 value is off by more than one step"
    # rates, with one element of slack for tiny tensors
    assert one_step.sum() <= max(1, 0.05 * a.numel()), f"{int(one_step.sum())} one step off"
    assert lost_carry.sum() <= max(1, 0.15 * a.numel()), f"{int(lost_carry.sum())} lost carries"
    assert x_hat.dtype == ref_x_hat.dtype
    ok = ~off
    torch.testing.assert_close(x_hat[ok].float(), ref_x_hat[ok].float(), atol=0, rtol=0)
    # whole-output check on the round trip against x itself (e5m2 keeps ~1/8 relative precision)
    assert (x_hat[ok].float() - ref_x_hat[ok].float()).norm() <= 0.15 * ref_x_hat.float().norm()
    assert ref_x_hat.float().norm() > 0 and x_hat.float().norm() > 0.5 * ref_x_hat.float().norm()


def _check(out, ref, exact):
    outs = out if isinstance(out, tuple) else (out,)
    refs = ref if isinstance(ref, tuple) else (ref,)
    for o, r in zip(outs, refs, strict=True):
        assert o.dtype == r.dtype and o.shape == r.shape, (o.dtype, o.shape, r.dtype, r.shape)
        if exact or not r.is_floating_point():
            assert torch.equal(o, r)
            continue
        atol, rtol = TOL[BF16 if r.dtype == BF16 else F32]
        torch.testing.assert_close(o.float(), r.float(), atol=atol, rtol=rtol)
        # a whole-output check so a zero output cannot pass
        assert (o.float() - r.float()).norm() <= rtol * r.float().norm() + atol


def _module(load_kernel, name):
    return load_kernel(f"triton/{KERNELS[name]['family']}/{name}.py")


def _run(load_kernel, name, shape, dtype, **tuning):
    mod = _module(load_kernel, name)
    shape = dict(shape)
    tuning = {**shape.pop("tuning", {}), **tuning}
    inputs = mod.make_inputs(shape, dtype)
    out = getattr(mod, name)(**inputs, **tuning)
    ref = mod.reference(**inputs)
    if KERNELS[name]["exact"] is None:
        _check_e5m2(out, ref)
    else:
        _check(out, ref, KERNELS[name]["exact"])
    return out, ref, inputs


CASES = [
    pytest.param(name, shape, dtype, id=f"{name}-{i}-{str(dtype)[6:]}")
    for name, spec in KERNELS.items()
    for i, shape in enumerate(spec["cases"])
    for dtype in spec["dtypes"]
]


@pytest.mark.parametrize(("name", "shape", "dtype"), CASES)
def test_block_kernel_matches_reference(load_kernel, name, shape, dtype):
    _run(load_kernel, name, shape, dtype)


@pytest.mark.parametrize("which", [0, 1])
@pytest.mark.parametrize("name", list(KERNELS))
def test_block_kernel_extreme_tuning(load_kernel, name, which):
    shape, configs = KERNELS[name]["extreme"]
    _run(load_kernel, name, shape, KERNELS[name]["dtypes"][0], **configs[which])


# one bad call per kernel: (name, inputs builder, expected message fragment)
BAD_CALLS = [
    ("softmax_multirow", lambda: {"x": torch.zeros(2, 9000)}, "softmax_online"),
    ("softmax_split_row_two_kernel", lambda: {"x": torch.zeros(8)}, "2-D"),
    ("log_softmax_rowwise", lambda: {"x": torch.zeros(2, 8, dtype=I32)}, "fp32/fp16/bf16"),
    ("gather_logprobs_of_ids",
     lambda: {"logits": torch.zeros(2, 8), "token_ids": torch.tensor([[1], [8]])}, r"\[0, 8\)"),
    ("cross_entropy_rowwise",
     lambda: {"logits": torch.zeros(2, 8), "labels": torch.tensor([3, -1])}, "ignore_index"),
    ("speculative_rejection_sample",
     lambda: {"draft_token_ids": torch.zeros(2, 3, dtype=I64), "draft_probs": torch.zeros(2, 3, 8),
              "target_probs": torch.zeros(2, 3, 9), "bonus_token_ids": torch.zeros(2, dtype=I64),
              "uniform_samples": torch.zeros(2, 3), "exponential_noise": torch.ones(2, 3, 8)},
     "target_probs"),
    ("kv_int8_per_token_quant",
     lambda: {"key": torch.zeros(2, 3, 8), "value": torch.zeros(2, 3, 4)}, "value must match"),
    ("fp8_e5m2_cast_scaled", lambda: {"x": torch.zeros(8), "scale": torch.ones(2)}, "scale"),
    ("transpose_2d_tiled", lambda: {"x": torch.zeros(2, 3, 4)}, "2-D"),
    ("bias_residual_add",
     lambda: {"x": torch.zeros(2, 8), "bias": torch.zeros(7), "residual": torch.zeros(2, 8)},
     "bias"),
    ("concat_kv_heads",
     lambda: {"k_nope": torch.zeros(2, 4, 8), "k_rope": torch.zeros(2, 3, 4)}, "k_rope must be"),
    ("arange_positions_varlen", lambda: {"cu_seqlens": torch.tensor([0, 5, 3]), "num_tokens": 3},
     "non-decreasing"),
]  # fmt: skip
# value checks that read a tensor on the host live in check_inputs, outside the launcher
HOST_CHECKED = {"gather_logprobs_of_ids", "cross_entropy_rowwise", "arange_positions_varlen"}


@pytest.mark.parametrize(("name", "make", "match"), BAD_CALLS, ids=[b[0] for b in BAD_CALLS])
def test_block_kernel_rejects_bad_input(load_kernel, name, make, match):
    mod = _module(load_kernel, name)
    call = mod.check_inputs if name in HOST_CHECKED else getattr(mod, name)
    with pytest.raises(ValueError, match=match):
        call(**make())


def test_host_checks_pass_good_inputs_and_kernels_flag_bad_values(load_kernel):
    # what check_inputs raises for, the launchers mark on the device (no host read): NaN loss
    # or logprob for a label/id outside [0, V), positions past num_tokens never written
    ce = _module(load_kernel, "cross_entropy_rowwise")
    logits, labels = torch.randn(3, 8), torch.tensor([3, -100, 8])
    ce.check_inputs(logits, labels[:2])
    loss = ce.cross_entropy_rowwise(logits, labels)
    assert loss[1] == 0 and torch.isnan(loss[2]) and torch.isfinite(loss[0])
    gl = _module(load_kernel, "gather_logprobs_of_ids")
    ids = torch.tensor([[1, -1], [8, 2], [0, 7]])
    gl.check_inputs(logits, ids[2:])
    out = gl.gather_logprobs_of_ids(logits, ids)
    assert torch.isnan(out[[0, 1], [1, 0]]).all()
    assert torch.isfinite(out[[0, 1, 2, 2], [0, 1, 0, 1]]).all()
    ap = _module(load_kernel, "arange_positions_varlen")
    cu = torch.tensor([0, 3, 5], dtype=I32)
    ap.check_inputs(cu, 5)
    with pytest.raises(ValueError, match="num_tokens"):
        ap.check_inputs(cu, 4)
    assert ap.arange_positions_varlen(cu, 4).tolist() == [0, 1, 2, 0]  # clipped at num_tokens


def test_bad_calls_cover_every_kernel():
    assert sorted(b[0] for b in BAD_CALLS) == sorted(KERNELS)


# --- kernel-specific behaviour -------------------------------------------------------------------


def test_softmax_split_row_handles_masked_chunks(load_kernel):
    # a whole chunk of -inf (a masked vocab range) contributes nothing and yields zeros
    mod = _module(load_kernel, "softmax_split_row_two_kernel")
    x = torch.randn(2, 1000)
    x[:, 256:512] = float("-inf")
    out = mod.softmax_split_row_two_kernel(x, block_n=256)
    assert torch.equal(out[:, 256:512], torch.zeros(2, 256))
    _check(out, mod.reference(x), exact=False)
    torch.testing.assert_close(out.sum(-1), torch.ones(2))


def test_cross_entropy_ignores_rows_and_matches_mean_loss(load_kernel):
    mod = _module(load_kernel, "cross_entropy_rowwise")
    logits = torch.randn(6, 500)
    labels = torch.tensor([3, -100, 499, 0, -100, 250])
    loss = mod.cross_entropy_rowwise(logits, labels, block_v=128)
    assert loss[[1, 4]].tolist() == [0.0, 0.0] and (loss[[0, 2, 3, 5]] > 0).all()
    mean = torch.nn.functional.cross_entropy(logits, labels)  # mean over non-ignored rows
    torch.testing.assert_close(loss.sum() / 4, mean, atol=1e-5, rtol=1e-5)


def test_speculative_rejection_accept_all_reject_first_and_distribution(load_kernel):
    mod = _module(load_kernel, "speculative_rejection_sample")
    inputs = mod.make_inputs({"batch": 3, "k": 4, "vocab": 50}, F32)
    inputs["uniform_samples"] = torch.zeros(3, 4)
    inputs["uniform_samples"][1, 0] = 1.0  # row 1: rejected at 0 (p_t / p_d < 1 unless equal)
    inputs["target_probs"][1, 0] = inputs["draft_probs"][1, 0] * 0.5
    inputs["target_probs"][1, 0, 7] += 1.0 - inputs["target_probs"][1, 0].sum()  # all mass moved
    inputs["draft_token_ids"][1, 0] = 3
    out, num = mod.speculative_rejection_sample(**inputs)
    assert num.tolist() == [4, 0, 4]
    assert out[0, :4].tolist() == inputs["draft_token_ids"][0].tolist()
    assert out[0, 4] == inputs["bonus_token_ids"][0]
    assert out[1].tolist() == [7, -1, -1, -1, -1]  # the only token with p_t > p_d
    _check((out, num), mod.reference(**inputs), exact=True)


def test_speculative_resample_follows_residual_distribution(load_kernel):
    # 128 rejections of one row: resampled tokens follow max(0, p_t - p_d) normalised
    mod = _module(load_kernel, "speculative_rejection_sample")
    b, v = 128, 4
    p_d = torch.tensor([0.5, 0.3, 0.1, 0.1]).repeat(b, 1, 1)
    p_t = torch.tensor([0.1, 0.3, 0.2, 0.4]).repeat(b, 1, 1)
    noise = -torch.log1p(-torch.rand(b, 1, v))
    out, num = mod.speculative_rejection_sample(
        torch.zeros(b, 1, dtype=I64),
        p_d,
        p_t,
        torch.zeros(b, dtype=I64),
        torch.full((b, 1), 0.5),
        noise,
    )
    assert (num == 0).all()
    freq = torch.bincount(out[:, 0], minlength=v).float() / b
    torch.testing.assert_close(freq, torch.tensor([0.0, 0.0, 0.25, 0.75]), atol=0.15, rtol=0)


def test_kv_int8_outlier_head_keeps_others_precise(load_kernel):
    mod = _module(load_kernel, "kv_int8_per_token_quant")
    inputs = mod.make_inputs({"tokens": 2, "heads": 4, "head_dim": 64}, F32)
    kq, _, ks, _ = mod.kv_int8_per_token_quant(**inputs)
    assert (ks[:, 0] > 5 * ks[:, 1:].max()).all()  # the outlier head got its own scale
    err = (kq[:, 1:].float() * ks[:, 1:, None] - inputs["key"][:, 1:]).abs()
    assert (err <= ks[:, 1:, None] / 2 + 1e-6).all()  # half a code step everywhere
    assert kq.abs().max() == 127


def test_fp8_e5m2_saturates_and_keeps_nan(load_kernel):
    mod = _module(load_kernel, "fp8_e5m2_cast_scaled")
    x = torch.tensor([1e9, -1e9, float("inf"), float("nan"), 3.0, 0.0])
    q, x_hat = mod.fp8_e5m2_cast_scaled(x, torch.tensor([2.0]))
    assert q.float()[:3].tolist() == [57344.0, -57344.0, 57344.0]
    assert torch.isnan(q.float()[3]) and torch.isnan(x_hat[3])
    assert x_hat[[0, 4, 5]].tolist() == [114688.0, 3.0, 0.0]


def test_transpose_2d_tiled_strided_input(load_kernel):
    mod = _module(load_kernel, "transpose_2d_tiled")
    base = torch.randn(50, 40)
    x = base.t()[:, ::2]  # (40, 25), both strides non-unit
    assert torch.equal(mod.transpose_2d_tiled(x, block_m=16, block_n=16), x.t().contiguous())


def test_bias_residual_add_keeps_leading_dims_and_mixed_bias(load_kernel):
    mod = _module(load_kernel, "bias_residual_add")
    x, res = torch.randn(2, 3, 100).to(BF16), torch.randn(2, 3, 100).to(BF16)
    bias = torch.randn(100)  # fp32 bias on bf16 activations
    out = mod.bias_residual_add(x, bias, res, rows_per_program=4, block_n=32)
    assert out.shape == (2, 3, 100) and out.dtype == BF16
    _check(out, mod.reference(x, bias, res), exact=False)


def test_arange_positions_matches_hand_values(load_kernel):
    mod = _module(load_kernel, "arange_positions_varlen")
    cu = torch.tensor([0, 3, 3, 5], dtype=I32)
    assert mod.arange_positions_varlen(cu, 5).tolist() == [0, 1, 2, 0, 1]
    ctx = torch.tensor([10, 0, 4], dtype=I64)
    assert mod.arange_positions_varlen(cu, 5, ctx).tolist() == [10, 11, 12, 4, 5]
    assert mod.arange_positions_varlen(torch.zeros(1, dtype=I64), 0).numel() == 0
