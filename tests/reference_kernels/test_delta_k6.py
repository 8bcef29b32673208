"""Reference kernels for the delta-rule family and causal_conv1d (issue #7, batch k6).

Each kernel runs under Triton's interpreter on tiny shapes against its own ``reference`` (fp32
and bf16), with a whole-output norm check so an all-zero output cannot pass; plus its extreme
tuning values and its input validation.
"""

from __future__ import annotations

import pytest
import torch

from tests.reference_kernels.conftest import ON_GPU, TF32_TOL

DTYPES = [torch.float32, torch.bfloat16]

GDR = "triton/other/gated_delta_rule_update_{}.py"
CDO = "triton/other/chunk_delta_rule_output_{}.py"
CGS = "triton/other/chunk_gated_delta_rule_state_{}.py"
CONV = "triton/conv/causal_conv1d_{}.py"


def _outputs(x) -> list[torch.Tensor]:
    return list(x) if isinstance(x, tuple | list) else [x]


def _check(got, want, dtype: torch.dtype, fp32_tol: float = 1e-4) -> None:
    """assert_close per output, plus a relative L2 bound against a non-zero reference."""
    tol = (fp32_tol, fp32_tol) if dtype == torch.float32 else (2e-2, 2e-2)
    if ON_GPU and dtype == torch.float32:  # the chunked kernels' fp32 tl.dot runs on TF32 there
        tol = (max(tol[0], TF32_TOL[0]), max(tol[1], TF32_TOL[1]))
    for g, w in zip(_outputs(got), _outputs(want), strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        torch.testing.assert_close(g.float(), w.float(), atol=tol[0], rtol=tol[1])
        ref_norm = w.float().norm()
        assert ref_norm > 0
        assert (g.float() - w.float()).norm() / ref_norm < 2e-2


# ------------------------------------------------------------------ gated_delta_rule_update
GDR_SHAPES = [
    {"batch": 5, "tokens": 2, "q_heads": 1, "v_heads": 2, "key_dim": 32, "value_dim": 24},
    {"batch": 2, "tokens": 3, "q_heads": 2, "v_heads": 4, "key_dim": 16, "value_dim": 16,
     "pad_slot": True},
]  # fmt: skip
GDR_KERNELS = {
    "multi_seq_tile": [{"block_b": 1, "block_v": 16, "num_warps": 1},
                       {"block_b": 16, "block_v": 64, "num_warps": 8}],
    "k_split_atomic": [{"block_k": 16, "block_v": 16, "num_warps": 1},
                       {"block_k": 128, "block_v": 128, "num_warps": 8}],
}  # fmt: skip


def _gdr(load_kernel, name):
    mod = load_kernel(GDR.format(name))
    return mod, getattr(mod, f"gated_delta_rule_update_{name}")


@pytest.mark.parametrize("shape", GDR_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(GDR_KERNELS))
def test_gated_delta_rule_update_matches_reference(load_kernel, name, shape, dtype):
    mod, launch = _gdr(load_kernel, name)
    inputs = mod.make_inputs(shape, dtype)
    before = inputs["initial_state"].clone()
    _check(launch(**inputs), mod.reference(**inputs), dtype)
    assert torch.equal(inputs["initial_state"], before)  # out of place


@pytest.mark.parametrize("name", list(GDR_KERNELS))
def test_gated_delta_rule_update_extreme_tuning(load_kernel, name):
    mod, launch = _gdr(load_kernel, name)
    inputs = mod.make_inputs({"batch": 3, "tokens": 2, "q_heads": 1, "v_heads": 2, "key_dim": 48,
                              "value_dim": 40}, torch.float32)  # fmt: skip
    extra = {"softplus_beta": 2.0, "softplus_threshold": 0.01, "use_qk_l2norm": False}
    for tuning in GDR_KERNELS[name]:
        _check(launch(**inputs, **extra, **tuning), mod.reference(**inputs, **extra),
               torch.float32)  # fmt: skip


@pytest.mark.parametrize("name", list(GDR_KERNELS))
def test_gated_delta_rule_update_rejects_bad_inputs(load_kernel, name):
    mod, launch = _gdr(load_kernel, name)
    inputs = mod.make_inputs({"batch": 1, "tokens": 1, "q_heads": 1, "v_heads": 2, "key_dim": 16,
                              "value_dim": 16}, torch.float32)  # fmt: skip
    with pytest.raises(ValueError, match="initial_state"):
        launch(**{**inputs, "initial_state": inputs["initial_state"].double()})
    with pytest.raises(ValueError, match="dt_bias"):
        launch(**{**inputs, "dt_bias": inputs["dt_bias"][:1]})
    with pytest.raises(ValueError, match="block_v"):
        launch(**inputs, block_v=24)


# ------------------------------------------------------------------ chunk_delta_rule_output
CDO_SHAPES = [
    {"batch": 2, "tokens": 21, "q_heads": 1, "v_heads": 2, "key_dim": 32, "value_dim": 24,
     "chunk": 16},
    {"batch": 1, "tokens": 9, "q_heads": 1, "v_heads": 1, "key_dim": 16, "value_dim": 16,
     "chunk": 5},
]  # fmt: skip
CDO_KERNELS = {
    "token_recurrent": [{"block_v": 16, "num_warps": 1}, {"block_v": 128, "num_warps": 8}],
    "two_stage": [{"block_v": 16, "num_warps": 2}, {"block_v": 128, "num_warps": 8}],
    "k_split": [{"block_k": 16, "block_v": 16, "num_warps": 2},
                {"block_k": 128, "block_v": 128, "num_warps": 8}],
}  # fmt: skip


def _cdo(load_kernel, name):
    mod = load_kernel(CDO.format(name))
    return mod, getattr(mod, f"chunk_delta_rule_output_{name}")


@pytest.mark.parametrize("shape", CDO_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(CDO_KERNELS))
def test_chunk_delta_rule_output_matches_reference(load_kernel, name, shape, dtype):
    mod, launch = _cdo(load_kernel, name)
    inputs = mod.make_inputs(shape, dtype)
    _check(launch(**inputs), mod.reference(**inputs), dtype)


@pytest.mark.parametrize("name", list(CDO_KERNELS))
def test_chunk_delta_rule_output_extreme_tuning(load_kernel, name):
    mod, launch = _cdo(load_kernel, name)
    inputs = mod.make_inputs({"batch": 1, "tokens": 12, "q_heads": 1, "v_heads": 2, "key_dim": 48,
                              "value_dim": 20, "chunk": 8}, torch.float32)  # fmt: skip
    for tuning in CDO_KERNELS[name]:
        _check(launch(**inputs, **tuning), mod.reference(**inputs), torch.float32)


@pytest.mark.parametrize("name", list(CDO_KERNELS))
def test_chunk_delta_rule_output_rejects_bad_inputs(load_kernel, name):
    mod, launch = _cdo(load_kernel, name)
    inputs = mod.make_inputs({"batch": 1, "tokens": 10, "q_heads": 1, "v_heads": 1, "key_dim": 16,
                              "value_dim": 16, "chunk": 4}, torch.float32)  # fmt: skip
    with pytest.raises(ValueError, match="chunk states"):
        launch(**{**inputs, "h": inputs["h"][:, :2]})
    with pytest.raises(ValueError, match="chunk_size"):
        launch(**{**inputs, "chunk_size": 0})
    with pytest.raises(ValueError, match="block_v"):
        launch(**inputs, block_v=24)


# ------------------------------------------------------------------ chunk_gated_delta_rule_state
CGS_SHAPES = [
    {"batch": 2, "tokens": 21, "k_heads": 1, "v_heads": 2, "key_dim": 32, "value_dim": 24,
     "chunk": 16},
    {"batch": 2, "tokens": 9, "k_heads": 1, "v_heads": 1, "key_dim": 16, "value_dim": 16,
     "chunk": 4, "pad_slot": True},
]  # fmt: skip
CGS_KERNELS = {
    "two_kernel": [{"block_v": 16, "num_warps": 2}, {"block_v": 64, "num_warps": 8}],
    "k_tiled_fp32buf": [{"block_k": 16, "block_v": 16, "num_warps": 2},
                        {"block_k": 128, "block_v": 64, "num_warps": 8}],
    "wy_chunked": [{"block_k": 16, "block_v": 16, "num_warps": 2},
                   {"block_k": 64, "block_v": 64, "num_warps": 8}],
}  # fmt: skip


def _cgs(load_kernel, name):
    mod = load_kernel(CGS.format(name))
    return mod, getattr(mod, f"chunk_gated_delta_rule_state_{name}")


@pytest.mark.parametrize("shape", CGS_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(CGS_KERNELS))
def test_chunk_gated_delta_rule_state_matches_reference(load_kernel, name, shape, dtype):
    mod, launch = _cgs(load_kernel, name)
    inputs = mod.make_inputs(shape, dtype)
    before = inputs["initial_state"].clone()
    _check(launch(**inputs), mod.reference(**inputs), dtype, fp32_tol=1e-3)
    assert torch.equal(inputs["initial_state"], before)  # out of place


@pytest.mark.parametrize("name", list(CGS_KERNELS))
def test_chunk_gated_delta_rule_state_extreme_tuning(load_kernel, name):
    mod, launch = _cgs(load_kernel, name)
    inputs = mod.make_inputs({"batch": 1, "tokens": 12, "k_heads": 1, "v_heads": 2, "key_dim": 48,
                              "value_dim": 20, "chunk": 8}, torch.float32)  # fmt: skip
    for tuning in CGS_KERNELS[name]:
        _check(launch(**inputs, **tuning), mod.reference(**inputs), torch.float32, fp32_tol=1e-3)


@pytest.mark.parametrize("name", list(CGS_KERNELS))
def test_chunk_gated_delta_rule_state_rejects_bad_inputs(load_kernel, name):
    mod, launch = _cgs(load_kernel, name)
    inputs = mod.make_inputs({"batch": 1, "tokens": 10, "k_heads": 1, "v_heads": 1, "key_dim": 16,
                              "value_dim": 16, "chunk": 4}, torch.float32)  # fmt: skip
    with pytest.raises(ValueError, match="initial_state must be fp32"):
        launch(**{**inputs, "initial_state": inputs["initial_state"].double()})
    with pytest.raises(ValueError, match="g must be"):
        launch(**{**inputs, "g": inputs["g"][:, :3]})
    with pytest.raises(ValueError, match="block_v"):
        launch(**inputs, block_v=24)


# ------------------------------------------------------------------ causal_conv1d
CONV_SHAPES = [
    {"dim": 40, "tokens": 37},
    {"dim": 20, "tokens": 2, "batch": 2, "width": 3, "activation": None},
]
CONV_KERNELS = {
    "token_major_vec": [{"block_t": 4, "block_c": 32, "num_warps": 1},
                        {"block_t": 64, "block_c": 256, "num_warps": 8}],
    "seq_tiled_halo": [{"block_c": 16, "block_t": 16, "num_warps": 1},
                       {"block_c": 128, "block_t": 64, "num_warps": 8}],
}  # fmt: skip


def _conv(load_kernel, name):
    mod = load_kernel(CONV.format(name))
    return mod, getattr(mod, f"causal_conv1d_{name}")


@pytest.mark.parametrize("shape", CONV_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(CONV_KERNELS))
def test_causal_conv1d_matches_reference(load_kernel, name, shape, dtype):
    mod, launch = _conv(load_kernel, name)
    inputs = mod.make_inputs(shape, dtype)
    _check(launch(**inputs), mod.reference(**inputs), dtype, fp32_tol=1e-5)


@pytest.mark.parametrize("name", list(CONV_KERNELS))
def test_causal_conv1d_extreme_tuning_and_no_state(load_kernel, name):
    mod, launch = _conv(load_kernel, name)
    inputs = mod.make_inputs({"dim": 24, "tokens": 70, "width": 5}, torch.float32)
    for tuning in CONV_KERNELS[name]:
        _check(launch(**inputs, **tuning), mod.reference(**inputs), torch.float32, 1e-5)
    bare = {**inputs, "bias": None, "initial_state": None}
    _check(launch(**bare), mod.reference(**bare), torch.float32, 1e-5)


def test_causal_conv1d_token_major_reads_channel_last_storage(load_kernel):
    mod, launch = _conv(load_kernel, "token_major_vec")
    inputs = mod.make_inputs({"dim": 48, "tokens": 9, "batch": 2, "channel_last": True},
                             torch.bfloat16)  # fmt: skip
    assert inputs["x"].stride(-2) == 1  # channels contiguous
    out = launch(**inputs)
    assert out.stride() == inputs["x"].stride()  # the output keeps the layout
    _check(out, mod.reference(**inputs), torch.bfloat16)


def test_causal_conv1d_token_major_splits_channels_when_tokens_are_few(load_kernel):
    # one token: the channel sweep is split over programs, the last range ending mid-slice
    mod, launch = _conv(load_kernel, "token_major_vec")
    inputs = mod.make_inputs({"dim": 100, "tokens": 1}, torch.float32)
    assert mod._channel_splits(1, 100, 32) == 4
    _check(launch(**inputs, block_c=32), mod.reference(**inputs), torch.float32, 1e-5)


@pytest.mark.parametrize("name", list(CONV_KERNELS))
def test_causal_conv1d_rejects_bad_inputs(load_kernel, name):
    mod, launch = _conv(load_kernel, name)
    inputs = mod.make_inputs({"dim": 16, "tokens": 4}, torch.float32)
    with pytest.raises(ValueError, match="initial_state"):
        launch(**{**inputs, "initial_state": inputs["initial_state"][:, :, :1]})
    with pytest.raises(ValueError, match="activation"):
        launch(**{**inputs, "activation": "gelu"})
    with pytest.raises(ValueError, match="block_c"):
        launch(**inputs, block_c=24)
