"""Gated delta-rule reference kernels (k3 set) against their PyTorch references (interpreter)."""

import pytest
import torch

DTYPES = [torch.float32, torch.bfloat16]
TOL = {torch.float32: (1e-4, 1e-4), torch.float16: (1e-3, 1e-3), torch.bfloat16: (1e-2, 1e-2)}
STATE_TOL = (1e-4, 1e-4)  # the state is fp32 on both sides whatever the activation dtype


def _check(out, ref, dtype):
    (o, s), (ro, rs) = out, ref
    assert o.shape == ro.shape and o.dtype == ro.dtype and s.dtype == torch.float32
    atol, rtol = TOL[dtype]
    torch.testing.assert_close(o.float(), ro.float(), atol=atol, rtol=rtol)
    assert (o.float() - ro.float()).norm() <= rtol * ro.float().norm() + atol
    torch.testing.assert_close(s, rs, atol=STATE_TOL[0], rtol=STATE_TOL[1])


DECODE_CASES = [
    {"batch": 2, "q_heads": 2, "v_heads": 4, "head_dim": 32},
    {"batch": 1, "q_heads": 1, "v_heads": 1, "head_dim": 20},
    {"batch": 3, "q_heads": 1, "v_heads": 2, "head_dim": 32, "pad_slot": True},
]


@pytest.mark.parametrize("shape", DECODE_CASES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gated_delta_rule_decode_matches_reference(load_kernel, shape, dtype):
    mod = load_kernel("triton/other/gated_delta_rule_decode_update.py")
    inputs = mod.make_inputs(shape, dtype)
    state_before = inputs["initial_state"].clone()
    _check(mod.gated_delta_rule_decode_update(**inputs), mod.reference(**inputs), dtype)
    assert torch.equal(inputs["initial_state"], state_before)  # out of place


@pytest.mark.parametrize(
    "tuning", [{"block_v": 32, "num_warps": 4}, {"block_v": 16}, {"block_v": 128, "num_warps": 8}]
)
def test_gated_delta_rule_decode_extreme_tuning(load_kernel, tuning):
    mod = load_kernel("triton/other/gated_delta_rule_decode_update.py")
    inputs = mod.make_inputs(
        {"batch": 1, "q_heads": 1, "v_heads": 2, "head_dim": 32}, torch.float32
    )
    _check(
        mod.gated_delta_rule_decode_update(**inputs, **tuning),
        mod.reference(**inputs),
        torch.float32,
    )


def test_gated_delta_rule_decode_rejects_prefill(load_kernel):
    mod = load_kernel("triton/other/gated_delta_rule_chunked_tokens.py")
    inputs = mod.make_inputs(
        {"batch": 1, "tokens": 2, "q_heads": 1, "v_heads": 1, "head_dim": 8}, torch.float32
    )
    decode = load_kernel("triton/other/gated_delta_rule_decode_update.py")
    with pytest.raises(ValueError, match="T = 1"):
        decode.gated_delta_rule_decode_update(**inputs)


TOKEN_CASES = [
    {"batch": 2, "tokens": 5, "q_heads": 2, "v_heads": 4, "head_dim": 32},
    {"batch": 1, "tokens": 1, "q_heads": 1, "v_heads": 1, "head_dim": 20},
    {"batch": 2, "tokens": 3, "q_heads": 1, "v_heads": 2, "head_dim": 16, "pad_slot": True},
]


@pytest.mark.parametrize("shape", TOKEN_CASES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gated_delta_rule_tokens_matches_reference(load_kernel, shape, dtype):
    mod = load_kernel("triton/other/gated_delta_rule_chunked_tokens.py")
    inputs = mod.make_inputs(shape, dtype)
    _check(mod.gated_delta_rule_chunked_tokens(**inputs), mod.reference(**inputs), dtype)


@pytest.mark.parametrize("tokens", [0, 2])
def test_gated_delta_rule_tokens_keeps_input_state_and_idle_slots(load_kernel, tokens):
    # final_state is built by the kernels (idle slots copied, owned ones stepped): never a view
    # of initial_state, which stays intact; T = 0 returns the state unchanged
    mod = load_kernel("triton/other/gated_delta_rule_chunked_tokens.py")
    shape = {"batch": 2, "tokens": tokens, "q_heads": 1, "v_heads": 2, "head_dim": 16}
    inputs = mod.make_inputs(shape, torch.float32)
    inputs["initial_state"] = torch.randn(7, 2, 16, 16)  # five idle slots
    before = inputs["initial_state"].clone()
    out, state = mod.gated_delta_rule_chunked_tokens(**inputs)
    assert torch.equal(inputs["initial_state"], before)
    assert state.data_ptr() != inputs["initial_state"].data_ptr()
    _check((out, state), mod.reference(**inputs), torch.float32)


@pytest.mark.parametrize("num_warps", [4, 8])
def test_gated_delta_rule_tokens_extreme_tuning(load_kernel, num_warps):
    mod = load_kernel("triton/other/gated_delta_rule_chunked_tokens.py")
    shape = {"batch": 1, "tokens": 3, "q_heads": 1, "v_heads": 2, "head_dim": 32}
    inputs = mod.make_inputs(shape, torch.float32)
    out = mod.gated_delta_rule_chunked_tokens(**inputs, num_warps=num_warps)
    _check(out, mod.reference(**inputs), torch.float32)


def test_gated_delta_rule_designs_agree_on_one_token(load_kernel):
    # the decode kernel and the token loop must give the same step; no l2norm path too
    tokens = load_kernel("triton/other/gated_delta_rule_chunked_tokens.py")
    decode = load_kernel("triton/other/gated_delta_rule_decode_update.py")
    inputs = tokens.make_inputs(
        {"batch": 2, "tokens": 1, "q_heads": 1, "v_heads": 2, "head_dim": 16}, torch.float32
    )
    inputs["use_qk_l2norm"] = False
    inputs["q"], inputs["k"] = inputs["q"] * 0.1, inputs["k"] * 0.1
    out_t, state_t = tokens.gated_delta_rule_chunked_tokens(**inputs)
    out_d, state_d = decode.gated_delta_rule_decode_update(**inputs)
    torch.testing.assert_close(out_t, out_d, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(state_t, state_d, atol=1e-5, rtol=1e-5)
    _check((out_d, state_d), decode.reference(**inputs), torch.float32)
