"""Attention, cache and delta-rule reference kernels (k4 set) against their PyTorch references.

Every kernel runs under Triton's interpreter on small shapes; float outputs are compared with
assert_close plus a whole-output norm bound (so an all-zero output cannot pass), copies exactly.
"""

import pytest
import torch

from tests.reference_kernels.conftest import ON_GPU, TF32_TOL

DTYPES = [torch.float32, torch.bfloat16]
TOL = {torch.float32: (1e-4, 1e-4), torch.bfloat16: (2e-2, 2e-2)}
if ON_GPU:  # fp32 tl.dot runs on TF32 tensor cores there
    TOL[torch.float32] = TF32_TOL


def _check(out, ref, dtype, tol=None):
    outs = out if isinstance(out, tuple) else (out,)
    refs = ref if isinstance(ref, tuple) else (ref,)
    for o, r in zip(outs, refs, strict=True):
        atol, rtol = tol or TOL[r.dtype if r.dtype in TOL else dtype]
        assert o.dtype == r.dtype and o.shape == r.shape
        torch.testing.assert_close(o.float(), r.float(), atol=atol, rtol=rtol)
        # a whole-output check so a zero output cannot pass
        assert r.float().norm() > 0
        assert (o.float() - r.float()).norm() <= rtol * r.float().norm() + atol


# ------------------------------------------------------------------ KV-cache writes (exact copies)
CACHE = {
    "reshape_and_cache_vectorized_heads": [{"num_warps": 1}, {"num_warps": 8}],
    "reshape_and_cache_flash_layout": [
        {"num_programs": 2, "block_c": 16, "num_warps": 2},
        {"num_programs": 2048, "block_c": 4096, "num_warps": 8},
    ],
}
CACHE_CASES = [
    {"tokens": 1, "heads": 4, "head_dim": 128},
    {"tokens": 21, "heads": 3, "head_dim": 40, "block_size": 8},
]


def _run_cache(mod, name, inputs, **tuning):
    caches = {n: inputs[n].clone() for n in ("key_cache", "value_cache")}
    ref_k, ref_v = mod.reference(**{**inputs, **caches})  # updates its own copies in place
    out_k, out_v = getattr(mod, name)(**inputs, **tuning)
    assert out_k is inputs["key_cache"] and out_v is inputs["value_cache"]
    assert torch.equal(out_k, ref_k) and torch.equal(out_v, ref_v)  # a copy is exact
    keep = inputs["slot_mapping"] >= 0
    assert torch.equal(out_k.view(-1, *out_k.shape[2:])[inputs["slot_mapping"][keep]],
                       inputs["key"][keep])  # fmt: skip


@pytest.mark.parametrize("shape", CACHE_CASES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(CACHE))
def test_cache_kernel_matches_reference(load_kernel, name, shape, dtype):
    mod = load_kernel(f"triton/cache/{name}.py")
    _run_cache(mod, name, mod.make_inputs(shape, dtype))


@pytest.mark.parametrize("which", [0, 1])
@pytest.mark.parametrize("name", list(CACHE))
def test_cache_kernel_extreme_tuning(load_kernel, name, which):
    mod = load_kernel(f"triton/cache/{name}.py")
    inputs = mod.make_inputs({"tokens": 9, "heads": 5, "head_dim": 24}, torch.float32)
    # strided key/value: slices of a fused (T, 3, H, D) buffer, int32 slots
    fused = torch.randn(9, 3, 5, 24)
    inputs.update(key=fused[:, 1], value=fused[:, 2])
    inputs["slot_mapping"] = inputs["slot_mapping"].to(torch.int32)
    _run_cache(mod, name, inputs, **CACHE[name][which])


@pytest.mark.parametrize("name", list(CACHE))
def test_cache_kernel_rejects_bad_inputs(load_kernel, name):
    mod = load_kernel(f"triton/cache/{name}.py")
    inputs = mod.make_inputs({"tokens": 2, "heads": 2, "head_dim": 8}, torch.float32)
    with pytest.raises(ValueError, match="slot_mapping"):
        getattr(mod, name)(**{**inputs, "slot_mapping": inputs["slot_mapping"].float()})
    with pytest.raises(ValueError, match="caches"):
        getattr(mod, name)(**{**inputs, "value_cache": inputs["value_cache"][:, :, :1]})


# ------------------------------------------------------------------ paged decode (split-x cache)
PAGED = [
    {"seq_lens": [37, 5, 16], "num_heads_q": 6, "num_heads_kv": 2, "head_dim": 64},
    {"seq_lens": [20], "num_heads_q": 3, "num_heads_kv": 3, "head_dim": 32, "page_size": 8},
]


@pytest.mark.parametrize("shape", PAGED, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_paged_decode_gqa_packed_matches_reference(load_kernel, shape, dtype):
    mod = load_kernel("triton/attention/paged_decode_attention_gqa_packed.py")
    inputs = mod.make_inputs(shape, dtype)
    _check(mod.paged_decode_attention_gqa_packed(**inputs), mod.reference(**inputs), dtype)


@pytest.mark.parametrize(
    "tuning",
    [{"pages_per_step": 1, "num_warps": 2}, {"pages_per_step": 4, "num_warps": 8}],
    ids=str,
)
def test_paged_decode_gqa_packed_extreme_tuning(load_kernel, tuning):
    mod = load_kernel("triton/attention/paged_decode_attention_gqa_packed.py")
    inputs = mod.make_inputs({"seq_lens": [70, 3], "num_heads_q": 4, "num_heads_kv": 1,
                              "head_dim": 16}, torch.float32)  # fmt: skip
    _check(mod.paged_decode_attention_gqa_packed(**inputs, softmax_scale=0.3, **tuning),
           mod.reference(**inputs, softmax_scale=0.3), torch.float32)  # fmt: skip


def test_paged_decode_gqa_packed_rejects_bad_inputs(load_kernel):
    mod = load_kernel("triton/attention/paged_decode_attention_gqa_packed.py")
    inputs = mod.make_inputs({"seq_lens": [5], "num_heads_q": 2, "num_heads_kv": 1,
                              "head_dim": 16}, torch.float32)  # fmt: skip
    flat = inputs["k_cache"].permute(0, 1, 3, 2, 4).flatten(3)  # (NB, HKV, page, D): no split-x
    with pytest.raises(ValueError, match="k_cache"):
        mod.paged_decode_attention_gqa_packed(**{**inputs, "k_cache": flat})
    with pytest.raises(ValueError, match="int32"):
        mod.paged_decode_attention_gqa_packed(**{**inputs, "seq_lens": inputs["seq_lens"].long()})


# ------------------------------------------------------------------ varlen non-causal attention
VARLEN = {
    "flash_attention_varlen_gqa_kv_shared": [
        {"block_m": 4, "block_n": 16, "num_warps": 2},
        {"block_m": 64, "block_n": 128, "num_warps": 8},
    ],
    "attention_forward_two_pass_softmax": [
        {"block_m": 16, "block_n": 16, "num_warps": 2},
        {"block_m": 64, "block_n": 128, "num_warps": 8},
    ],
}
VARLEN_CASES = [
    {"seq_lens": [7, 33, 20], "num_heads_q": 4, "num_heads_kv": 2, "head_dim": 40},
    {"seq_lens": [1, 5], "kv_lens": [9, 5], "num_heads_q": 3, "num_heads_kv": 3, "head_dim": 64},
]


@pytest.mark.parametrize("shape", VARLEN_CASES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(VARLEN))
def test_varlen_attention_matches_reference(load_kernel, name, shape, dtype):
    mod = load_kernel(f"triton/attention/{name}.py")
    inputs = mod.make_inputs(shape, dtype)
    _check(getattr(mod, name)(**inputs), mod.reference(**inputs), dtype)


@pytest.mark.parametrize("which", [0, 1])
@pytest.mark.parametrize("name", list(VARLEN))
def test_varlen_attention_extreme_tuning(load_kernel, name, which):
    mod = load_kernel(f"triton/attention/{name}.py")
    inputs = mod.make_inputs({"seq_lens": [19, 2], "num_heads_q": 4, "num_heads_kv": 1,
                              "head_dim": 16}, torch.float32)  # fmt: skip
    _check(getattr(mod, name)(**inputs, softmax_scale=0.5, **VARLEN[name][which]),
           mod.reference(**inputs, softmax_scale=0.5), torch.float32)  # fmt: skip


@pytest.mark.parametrize("name", list(VARLEN))
def test_varlen_attention_rejects_bad_inputs(load_kernel, name):
    mod = load_kernel(f"triton/attention/{name}.py")
    inputs = mod.make_inputs({"seq_lens": [3], "num_heads_q": 3, "num_heads_kv": 3,
                              "head_dim": 16}, torch.float32)  # fmt: skip
    with pytest.raises(ValueError, match="HKV dividing HQ"):
        getattr(mod, name)(**{**inputs, "k": inputs["k"][:, :2], "v": inputs["v"][:, :2]})
    with pytest.raises(ValueError, match="cu_seqlens"):
        getattr(mod, name)(**{**inputs, "cu_seqlens_k": inputs["cu_seqlens_k"].long()})


# ------------------------------------------------------------------ MLA decode, packed latent
MLA = [
    {"seq_lens": [37, 5, 20], "num_heads": 5, "kv_lora_rank": 48, "rope_dim": 16},
    {"seq_lens": [9], "num_heads": 20, "kv_lora_rank": 64, "rope_dim": 8},
]


@pytest.mark.parametrize("shape", MLA, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_mla_paged_blocks_matches_reference(load_kernel, shape, dtype):
    mod = load_kernel("triton/attention/mla_decode_attention_paged_blocks.py")
    inputs = mod.make_inputs(shape, dtype)
    _check(mod.mla_decode_attention_paged_blocks(**inputs), mod.reference(**inputs), dtype)


@pytest.mark.parametrize(
    "tuning",
    [
        {"block_h": 16, "block_n": 16, "num_warps": 2},
        {"block_h": 64, "block_n": 64, "num_warps": 8},
    ],
    ids=str,
)
def test_mla_paged_blocks_extreme_tuning(load_kernel, tuning):
    mod = load_kernel("triton/attention/mla_decode_attention_paged_blocks.py")
    inputs = mod.make_inputs({"seq_lens": [70, 3], "num_heads": 3, "kv_lora_rank": 32,
                              "rope_dim": 16}, torch.float32)  # fmt: skip
    _check(mod.mla_decode_attention_paged_blocks(**inputs, softmax_scale=0.2, **tuning),
           mod.reference(**inputs, softmax_scale=0.2), torch.float32)  # fmt: skip


def test_mla_paged_blocks_rejects_bad_inputs(load_kernel):
    mod = load_kernel("triton/attention/mla_decode_attention_paged_blocks.py")
    inputs = mod.make_inputs({"seq_lens": [4], "num_heads": 2, "kv_lora_rank": 16,
                              "rope_dim": 16}, torch.float32)  # fmt: skip
    with pytest.raises(ValueError, match="kv_lora_rank"):
        mod.mla_decode_attention_paged_blocks(**{**inputs, "kv_lora_rank": 32})
    with pytest.raises(ValueError, match="seq_lens"):
        mod.mla_decode_attention_paged_blocks(**{**inputs, "seq_lens": inputs["seq_lens"].long()})


# ------------------------------------------------------------------ unified, decode fast path
UNIFIED = [
    # mixed: two decode rows (one query token over a cached context) and one chunked prefill
    {"seq_lens": [1, 7, 1], "context_lens": [20, 10, 3], "num_heads_q": 4, "num_heads_kv": 2,
     "head_dim": 40},
    {"seq_lens": [5, 19], "num_heads_q": 3, "num_heads_kv": 1, "head_dim": 32, "page_size": 8},
]  # fmt: skip


@pytest.mark.parametrize("shape", UNIFIED, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_unified_decode_fastpath_matches_reference(load_kernel, shape, dtype):
    mod = load_kernel("triton/attention/unified_attention_decode_only_fastpath.py")
    inputs = mod.make_inputs(shape, dtype)
    _check(mod.unified_attention_decode_only_fastpath(**inputs), mod.reference(**inputs), dtype)


@pytest.mark.parametrize(
    "tuning",
    [{"block_m": 4, "block_n": 16, "num_warps": 2}, {"block_m": 64, "block_n": 64, "num_warps": 8}],
    ids=str,
)
def test_unified_decode_fastpath_extreme_tuning(load_kernel, tuning):
    mod = load_kernel("triton/attention/unified_attention_decode_only_fastpath.py")
    inputs = mod.make_inputs({"seq_lens": [1, 9], "context_lens": [40, 3], "num_heads_q": 8,
                              "num_heads_kv": 2, "head_dim": 16}, torch.float32)  # fmt: skip
    _check(mod.unified_attention_decode_only_fastpath(**inputs, max_seqlen_q=9, **tuning),
           mod.reference(**inputs), torch.float32)  # fmt: skip


def test_unified_decode_fastpath_rejects_bad_inputs(load_kernel):
    mod = load_kernel("triton/attention/unified_attention_decode_only_fastpath.py")
    inputs = mod.make_inputs({"seq_lens": [1], "context_lens": [4], "num_heads_q": 3,
                              "num_heads_kv": 2, "head_dim": 16}, torch.float32)  # fmt: skip
    with pytest.raises(ValueError, match="HKV dividing HQ"):
        mod.unified_attention_decode_only_fastpath(**inputs)
    inputs = mod.make_inputs({"seq_lens": [1], "num_heads_q": 2, "num_heads_kv": 1,
                              "head_dim": 16}, torch.float32)  # fmt: skip
    with pytest.raises(ValueError, match="int32"):
        mod.unified_attention_decode_only_fastpath(
            **{**inputs, "seqused_k": inputs["seqused_k"].long()}
        )


# ------------------------------------------------------------------ gated delta rule, V-tiled
GDR = [
    {"batch": 2, "tokens": 5, "q_heads": 2, "v_heads": 4, "key_dim": 32, "value_dim": 48},
    {"batch": 1, "tokens": 1, "q_heads": 1, "v_heads": 2, "key_dim": 16, "value_dim": 16,
     "pad_slot": True},
]  # fmt: skip


@pytest.mark.parametrize("shape", GDR, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gated_delta_head_tiled_matches_reference(load_kernel, shape, dtype):
    mod = load_kernel("triton/other/gated_delta_rule_update_head_tiled.py")
    inputs = mod.make_inputs(shape, dtype)
    before = inputs["initial_state"].clone()
    out = mod.gated_delta_rule_update_head_tiled(**inputs)
    _check(
        out,
        mod.reference(**inputs),
        dtype,
        tol=(2e-2, 2e-2) if dtype != torch.float32 else (1e-4, 1e-4),
    )
    assert torch.equal(inputs["initial_state"], before)  # out of place


@pytest.mark.parametrize(
    "tuning", [{"block_v": 16, "num_warps": 1}, {"block_v": 128, "num_warps": 8}], ids=str
)
def test_gated_delta_head_tiled_extreme_tuning(load_kernel, tuning):
    mod = load_kernel("triton/other/gated_delta_rule_update_head_tiled.py")
    inputs = mod.make_inputs({"batch": 2, "tokens": 3, "q_heads": 1, "v_heads": 2, "key_dim": 16,
                              "value_dim": 40}, torch.float32)  # fmt: skip
    extra = {"softplus_beta": 2.0, "softplus_threshold": 0.01, "use_qk_l2norm": False}
    _check(mod.gated_delta_rule_update_head_tiled(**inputs, **extra, **tuning),
           mod.reference(**inputs, **extra), torch.float32, tol=(1e-4, 1e-4))  # fmt: skip


def test_gated_delta_head_tiled_rejects_bad_inputs(load_kernel):
    mod = load_kernel("triton/other/gated_delta_rule_update_head_tiled.py")
    inputs = mod.make_inputs({"batch": 1, "tokens": 2, "q_heads": 1, "v_heads": 2, "key_dim": 16,
                              "value_dim": 16}, torch.float32)  # fmt: skip
    with pytest.raises(ValueError, match="initial_state"):
        mod.gated_delta_rule_update_head_tiled(
            **{**inputs, "initial_state": inputs["initial_state"].double()}
        )
    with pytest.raises(ValueError, match="dt_bias"):
        mod.gated_delta_rule_update_head_tiled(**{**inputs, "dt_bias": inputs["dt_bias"][:1]})


# ------------------------------------------------------------------ chunked delta-rule output
CDO = [
    {"batch": 2, "tokens": 45, "q_heads": 2, "v_heads": 4, "key_dim": 32, "value_dim": 24,
     "chunk": 16},
    {"batch": 1, "tokens": 70, "q_heads": 1, "v_heads": 1, "key_dim": 64, "value_dim": 64,
     "chunk": 64},
]  # fmt: skip


@pytest.mark.parametrize("shape", CDO, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_chunk_delta_output_matches_reference(load_kernel, shape, dtype):
    mod = load_kernel("triton/other/chunk_delta_rule_output_blocked.py")
    inputs = mod.make_inputs(shape, dtype)
    _check(mod.chunk_delta_rule_output_blocked(**inputs), mod.reference(**inputs), dtype)


@pytest.mark.parametrize(
    "tuning",
    [
        {"block_k": 16, "block_v": 16, "num_warps": 2},
        {"block_k": 128, "block_v": 128, "num_warps": 8},
    ],
    ids=str,
)
def test_chunk_delta_output_extreme_tuning(load_kernel, tuning):
    mod = load_kernel("triton/other/chunk_delta_rule_output_blocked.py")
    inputs = mod.make_inputs({"batch": 1, "tokens": 20, "q_heads": 1, "v_heads": 2, "key_dim": 48,
                              "value_dim": 40, "chunk": 8}, torch.float32)  # fmt: skip
    _check(mod.chunk_delta_rule_output_blocked(**inputs, **tuning), mod.reference(**inputs),
           torch.float32)  # fmt: skip


def test_chunk_delta_output_rejects_bad_inputs(load_kernel):
    mod = load_kernel("triton/other/chunk_delta_rule_output_blocked.py")
    inputs = mod.make_inputs({"batch": 1, "tokens": 20, "q_heads": 1, "v_heads": 1, "key_dim": 16,
                              "value_dim": 16, "chunk": 8}, torch.float32)  # fmt: skip
    with pytest.raises(ValueError, match="chunk states"):
        mod.chunk_delta_rule_output_blocked(**{**inputs, "chunk_size": 16})
    with pytest.raises(ValueError, match="dtypes differ"):
        mod.chunk_delta_rule_output_blocked(**{**inputs, "h": inputs["h"].double()})


# ------------------------------------------------------------------ chunked gated delta-rule state
CGS = [
    {"batch": 2, "tokens": 45, "k_heads": 2, "v_heads": 4, "key_dim": 32, "value_dim": 24,
     "chunk": 16, "pad_slot": True},
    {"batch": 1, "tokens": 70, "k_heads": 1, "v_heads": 1, "key_dim": 64, "value_dim": 64,
     "chunk": 64},
]  # fmt: skip


@pytest.mark.parametrize("shape", CGS, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_chunk_state_recurrent_matches_reference(load_kernel, shape, dtype):
    mod = load_kernel("triton/other/chunk_gated_delta_rule_state_recurrent.py")
    inputs = mod.make_inputs(shape, dtype)
    before = inputs["initial_state"].clone()
    h, v_new, final = mod.chunk_gated_delta_rule_state_recurrent(**inputs)
    ref_h, ref_v, ref_final = mod.reference(**inputs)
    # the kernel rounds its bf16 operands to nearest even as torch does (see _to_storage), so
    # final_state keeps fp32's tolerance and h, v_new bf16's
    _check((h, v_new, final), (ref_h, ref_v, ref_final), dtype)
    assert torch.equal(inputs["initial_state"], before)  # out of place


@pytest.mark.parametrize(
    "tuning", [{"block_v": 16, "num_warps": 2}, {"block_v": 64, "num_warps": 8}], ids=str
)
def test_chunk_state_recurrent_extreme_tuning(load_kernel, tuning):
    mod = load_kernel("triton/other/chunk_gated_delta_rule_state_recurrent.py")
    inputs = mod.make_inputs({"batch": 1, "tokens": 20, "k_heads": 1, "v_heads": 2, "key_dim": 16,
                              "value_dim": 40, "chunk": 8}, torch.float32)  # fmt: skip
    _check(mod.chunk_gated_delta_rule_state_recurrent(**inputs, **tuning),
           mod.reference(**inputs), torch.float32)  # fmt: skip


def test_chunk_state_recurrent_rejects_bad_inputs(load_kernel):
    mod = load_kernel("triton/other/chunk_gated_delta_rule_state_recurrent.py")
    inputs = mod.make_inputs({"batch": 1, "tokens": 8, "k_heads": 1, "v_heads": 1, "key_dim": 16,
                              "value_dim": 16, "chunk": 8}, torch.float32)  # fmt: skip
    with pytest.raises(ValueError, match="g must be"):
        mod.chunk_gated_delta_rule_state_recurrent(**{**inputs, "g": inputs["g"][:, :4]})
    with pytest.raises(ValueError, match="initial_state_indices"):
        mod.chunk_gated_delta_rule_state_recurrent(
            **{**inputs, "initial_state_indices": inputs["initial_state_indices"].float()}
        )


# ------------------------------------------------------------------ paged decode, LSE merge
@pytest.mark.parametrize("shape", PAGED, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_paged_two_pass_lse_matches_reference(load_kernel, shape, dtype):
    mod = load_kernel("triton/attention/paged_decode_attention_two_pass_lse.py")
    inputs = mod.make_inputs(shape, dtype)
    # 16-token partitions: several per sequence, a partial last one, and more in the widest row
    out = mod.paged_decode_attention_two_pass_lse(**inputs, partition_tokens=16)
    _check(out, mod.reference(**inputs), dtype)


@pytest.mark.parametrize(
    "tuning",
    [{"partition_tokens": 64, "num_warps": 2}, {"partition_tokens": 512, "num_warps": 8}],
    ids=str,
)
def test_paged_two_pass_lse_extreme_tuning(load_kernel, tuning):
    mod = load_kernel("triton/attention/paged_decode_attention_two_pass_lse.py")
    inputs = mod.make_inputs({"seq_lens": [300, 3], "num_heads_q": 4, "num_heads_kv": 1,
                              "head_dim": 16}, torch.float32)  # fmt: skip
    _check(mod.paged_decode_attention_two_pass_lse(**inputs, softmax_scale=0.3, **tuning),
           mod.reference(**inputs, softmax_scale=0.3), torch.float32)  # fmt: skip


def test_paged_two_pass_lse_rejects_bad_inputs(load_kernel):
    mod = load_kernel("triton/attention/paged_decode_attention_two_pass_lse.py")
    inputs = mod.make_inputs({"seq_lens": [5], "num_heads_q": 2, "num_heads_kv": 1,
                              "head_dim": 16}, torch.float32)  # fmt: skip
    with pytest.raises(ValueError, match="partition_tokens"):
        mod.paged_decode_attention_two_pass_lse(**inputs, partition_tokens=24)
    with pytest.raises(ValueError, match="block_tables"):
        mod.paged_decode_attention_two_pass_lse(
            **{**inputs, "block_tables": inputs["block_tables"][:0]}
        )


def test_paged_two_pass_lse_merges_many_partitions(load_kernel):
    # 19 partitions of 16 tokens: the reduce walks two blocks of 16 partitions
    mod = load_kernel("triton/attention/paged_decode_attention_two_pass_lse.py")
    inputs = mod.make_inputs({"seq_lens": [300, 17], "num_heads_q": 2, "num_heads_kv": 1,
                              "head_dim": 16}, torch.float32)  # fmt: skip
    _check(mod.paged_decode_attention_two_pass_lse(**inputs, partition_tokens=16),
           mod.reference(**inputs), torch.float32)  # fmt: skip
