"""Misc reference kernels (k5 set) against their own PyTorch references, in the interpreter.

Activation, quantization, sampling, rope, norm and embedding kernels: each runs its small cases in
fp32 and bf16 (where it takes bf16), its extreme tuning values, and one input-validation error.
"""

import pytest
import torch

from tests.reference_kernels.fp8_checks import check_fp8

F32, BF16 = torch.float32, torch.bfloat16
# int dtypes: the kernel's inputs are integer (positions), its outputs fp32
TOL = {F32: (1e-4, 1e-4), BF16: (1e-2, 1e-2), torch.int64: (1e-4, 1e-4), torch.int32: (1e-4, 1e-4)}

# name -> (family, cases, dtypes, (first tuning, last tuning))
KERNELS = {
    "gelu_and_mul_tanh": (
        "activation",
        [{"rows": 3, "d": 1000}, {"rows": 5, "d": 64}],
        [F32, BF16],
        ({"block_n": 1024, "num_warps": 4}, {"block_n": 4096, "num_warps": 8}),
    ),
    "gelu_and_mul_erf_2d": (
        "activation",
        [{"rows": 3, "d": 1000}, {"rows": 9, "d": 65}],
        [F32, BF16],
        ({"block_m": 1, "block_n": 512, "num_warps": 4}, {"block_m": 16, "block_n": 128}),
    ),
    "relu_squared": (
        "activation",
        [{"rows": 3, "hidden": 1000}, {"rows": 1, "hidden": 77}],
        [F32, BF16],
        ({"block": 4096, "num_warps": 8}, {"block": 1024, "num_warps": 16}),
    ),
    "swiglu_clamped_oai": (
        "activation",
        [{"rows": 3, "d": 500}, {"rows": 4, "d": 33, "interleaved": False}],
        [F32, BF16],
        ({"block_n": 1024, "num_warps": 4}, {"block_n": 2048, "num_warps": 8}),
    ),
    "dequant_fp8_per_token": (
        "quantization",
        [{"rows": 3, "hidden": 1000}, {"rows": 9, "hidden": 64}],
        [F32, BF16],
        ({"block_t": 1, "block_n": 1024, "num_warps": 4}, {"block_t": 16, "block_n": 2048}),
    ),
    "per_tensor_quant_fp8_static": (
        "quantization",
        [{"rows": 3, "hidden": 1000}, {"rows": 2, "hidden": 33}],
        [F32, BF16],
        ({"block": 4096, "num_warps": 8}, {"block": 1024, "num_warps": 16}),
    ),
    "nvfp4_quant_blockwise": (
        "quantization",
        [{"rows": 3, "hidden": 512}, {"rows": 2, "hidden": 48, "global_scale": 100.0}],
        [F32, BF16],
        ({"block_g": 64, "num_warps": 4}, {"block_g": 16, "num_warps": 8}),
    ),
    "top_k_top_p_combined": (
        "sampling",
        [
            {"rows": 3, "vocab": 300, "top_k": 50, "top_p": 0.8},
            {"rows": 2, "vocab": 129, "top_k": 200, "top_p": 0.5},  # k > V: top-p alone
            {"rows": 4, "vocab": 100, "top_k": 7},  # top_p = 1: top-k alone
        ],
        [F32],
        ({"block_v": 1024, "num_warps": 4}, {"block_v": 64, "num_warps": 16}),
    ),
    "repetition_penalty_apply": (
        "sampling",
        [{"rows": 3, "vocab": 1000, "history": 300}, {"rows": 2, "vocab": 50, "history": 7}],
        [F32],
        ({"block_v": 1024, "block_l": 256, "num_warps": 4}, {"block_v": 256, "block_l": 64}),
    ),
    "logits_softcap_temperature": (
        "sampling",
        [
            {"rows": 3, "vocab": 1000},
            {"rows": 2, "vocab": 77, "softcap": 0.0, "masked": False},
        ],
        [F32, BF16],
        ({"block_v": 2048, "num_warps": 4}, {"block_v": 512, "num_warps": 8}),
    ),
    "rope_on_the_fly_inv_freq": (
        "rope",
        [
            {"tokens": 3, "heads": 4, "kv_heads": 2, "head_dim": 64},
            {"tokens": 2, "heads": 3, "kv_heads": 1, "head_dim": 128, "rot_dim": 96},
        ],
        [F32, BF16],
        ({"block_h": 8, "num_warps": 4}, {"block_h": 1, "num_warps": 8}),
    ),
    "group_norm_nchw": (
        "norm",
        [
            {"n": 2, "c": 8, "h": 9, "w": 7, "groups": 4},
            {"n": 1, "c": 6, "h": 5, "w": 5, "groups": 3, "affine": False},
        ],
        [F32, BF16],
        ({"block": 1024, "num_warps": 4}, {"block": 64, "num_warps": 8}),
    ),
    "rotary_cos_sin_cache_build": (
        "embedding",
        [
            {"positions": 300, "rotary_dim": 64},
            {"positions": 33, "rotary_dim": 96, "base": 500000.0, "scaling_factor": 4.0},
        ],
        [torch.int64, torch.int32],
        ({"block_t": 16, "num_warps": 4}, {"block_t": 64, "num_warps": 1}),
    ),
}
# kernels whose outputs are compared bit for bit (fp8 / integer codes)
EXACT = {"nvfp4_quant_blockwise", "top_k_top_p_combined", "repetition_penalty_apply"}


def _check_fp8(q: torch.Tensor, ref_q: torch.Tensor) -> None:
    """fp8 values within the interpreter's errors (fp8_checks), and the whole output to fp8
    precision (1/16 relative), non-zero."""
    check_fp8(q, ref_q)
    a, b = q.float(), ref_q.float()
    assert b.abs().sum() > 0 and (a - b).norm() <= 0.07 * b.norm()


def _check(out, ref, dtype, exact=False):
    outs = out if isinstance(out, tuple) else (out,)
    refs = ref if isinstance(ref, tuple) else (ref,)
    atol, rtol = TOL[dtype]
    for o, r in zip(outs, refs, strict=True):
        assert o.dtype == r.dtype and o.shape == r.shape
        if o.dtype == torch.float8_e4m3fn:
            _check_fp8(o, r)
            continue
        if exact or not r.is_floating_point():
            assert torch.equal(o, r) and r.float().abs().sum() > 0
            continue
        o32, r32 = o.float(), r.float()
        assert torch.equal(torch.isinf(o32), torch.isinf(r32))
        finite = torch.isfinite(r32)
        torch.testing.assert_close(o32[finite], r32[finite], atol=atol, rtol=rtol)
        # a whole-output check so a zero output cannot pass
        assert r32[finite].norm() > 0
        assert (o32[finite] - r32[finite]).norm() <= rtol * r32[finite].norm() + atol


def _module(load_kernel, name):
    return load_kernel(f"triton/{KERNELS[name][0]}/{name}.py")


def _run(load_kernel, name, shape, dtype, **tuning):
    mod = _module(load_kernel, name)
    inputs = mod.make_inputs(shape, dtype)
    out = getattr(mod, name)(**inputs, **tuning)
    _check(out, mod.reference(**inputs), dtype, exact=name in EXACT)
    return inputs, out


CASES = [
    (name, shape, dtype)
    for name, (_, shapes, dtypes, _) in KERNELS.items()
    for shape in shapes
    for dtype in dtypes
]


@pytest.mark.parametrize(("name", "shape", "dtype"), CASES, ids=str)
def test_misc_kernel_matches_reference(load_kernel, name, shape, dtype):
    _run(load_kernel, name, shape, dtype)


@pytest.mark.parametrize("which", [0, 1])
@pytest.mark.parametrize("name", list(KERNELS))
def test_misc_kernel_extreme_tuning(load_kernel, name, which):
    _, shapes, dtypes, tunings = KERNELS[name]
    _run(load_kernel, name, shapes[0], dtypes[0], **tunings[which])


# name -> (bad inputs, the message a ValueError must carry)
BAD_INPUTS = {
    "gelu_and_mul_tanh": (lambda: {"x": torch.zeros(2, 7)}, "even"),
    "gelu_and_mul_erf_2d": (lambda: {"x": torch.zeros(2, 8), "block_n": 48}, "power of two"),
    "relu_squared": (lambda: {"x": torch.zeros(4, dtype=torch.int32)}, "float"),
    "swiglu_clamped_oai": (lambda: {"x": torch.zeros(2, 8), "limit": 0.0}, "limit"),
    "dequant_fp8_per_token": (
        lambda: {"q": torch.zeros(2, 8).to(torch.float8_e4m3fn), "scale": torch.ones(3, 1)},
        "scale",
    ),
    "per_tensor_quant_fp8_static": (
        lambda: {"x": torch.zeros(2, 8), "scale": torch.ones(2)},
        "one-element",
    ),
    "nvfp4_quant_blockwise": (lambda: {"x": torch.zeros(2, 24)}, "multiple of 16"),
    "top_k_top_p_combined": (lambda: {"logits": torch.zeros(2, 8), "top_p": 0.0}, "top_p"),
    "repetition_penalty_apply": (
        lambda: {
            "logits": torch.zeros(2, 8),
            "token_ids": torch.zeros(2, 3),  # float ids
            "penalties": torch.ones(2),
        },
        "token_ids",
    ),
    "logits_softcap_temperature": (
        lambda: {"logits": torch.zeros(2, 8), "temperature": torch.ones(3)},
        "temperature",
    ),
    "rope_on_the_fly_inv_freq": (
        lambda: {
            "q": torch.zeros(2, 2, 8),
            "k": torch.zeros(2, 1, 8),
            "positions": torch.arange(2),
            "inv_freq": torch.ones(5),  # 2 * 5 > head dim 8
        },
        "inv_freq",
    ),
    "group_norm_nchw": (lambda: {"x": torch.zeros(1, 6, 2, 2), "num_groups": 4}, "divisible"),
    "rotary_cos_sin_cache_build": (
        lambda: {"positions": torch.arange(4), "rotary_dim": 7},
        "rotary_dim",
    ),
}


@pytest.mark.parametrize("name", list(KERNELS))
def test_misc_kernel_rejects_bad_inputs(load_kernel, name):
    make, match = BAD_INPUTS[name]
    with pytest.raises(ValueError, match=match):
        getattr(_module(load_kernel, name), name)(**make())


def test_top_p_removes_mass_beyond_the_nucleus(load_kernel):
    # one dominant logit per row: with top_p 0.5 only it survives; ties at the threshold stay
    mod = _module(load_kernel, "top_k_top_p_combined")
    logits = torch.randn(3, 200)
    logits[:, 17] = 20.0
    logits[2, :4] = 30.0  # four tied maxima share the mass: all kept
    out = mod.top_k_top_p_combined(logits, top_k=100, top_p=0.5)
    assert torch.equal(out, mod.reference(logits, top_k=100, top_p=0.5))
    assert (~torch.isinf(out)).sum(dim=-1).tolist() == [1, 1, 4]


def test_repetition_penalty_applies_once_per_repeated_token(load_kernel):
    # the same id many times, across history chunks, is penalised exactly once
    mod = _module(load_kernel, "repetition_penalty_apply")
    logits = torch.tensor([[2.0, -2.0, 1.0, 5.0]])
    ids = torch.tensor([[0, 1, 0, 0, 1, -1, 9, 0]])
    out = mod.repetition_penalty_apply(logits, ids, torch.tensor([2.0]), block_l=2)
    assert torch.equal(out, torch.tensor([[1.0, -4.0, 1.0, 5.0]]))


def test_nvfp4_codes_dequantise_to_the_grid(load_kernel):
    # the planted midpoints round to even codes; codes * scale reconstruct x to fp4 precision
    mod = _module(load_kernel, "nvfp4_quant_blockwise")
    x = mod.make_inputs({"rows": 2, "hidden": 64}, F32)["x"]
    codes, scales = mod.nvfp4_quant_blockwise(x)
    grid = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
    grid = torch.cat([grid, -grid])
    nibbles = torch.stack([codes & 15, codes >> 4], dim=-1).reshape(2, 64).long()
    # 0.25 .75 1.25 1.75 2.5 3.5 5 -.75 -2.5 -5 -> nearest, ties to the even code; sign bit 8
    assert nibbles[0, 17:27].tolist() == [0, 2, 2, 4, 4, 6, 6, 10, 12, 14]
    assert scales[0, 0] == 0 and scales[0, 1] == 1.0
    deq = grid[nibbles] * scales.repeat_interleave(16, dim=1)
    assert (deq - x).norm() <= 0.2 * x.norm()


def test_rope_on_the_fly_without_rotary_dims_copies_in_the_kernel(load_kernel):
    # R = 0: no dim rotates; the kernel's tail path copies every head (no torch copy in forward)
    mod = _module(load_kernel, "rope_on_the_fly_inv_freq")
    q, k = torch.randn(3, 2, 12), torch.randn(3, 1, 12)
    q_out, k_out = mod.rope_on_the_fly_inv_freq(q, k, torch.arange(3), torch.ones(0))
    assert torch.equal(q_out, q) and torch.equal(k_out, k)
